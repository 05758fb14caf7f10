"""Applies the dynamic broker configs of the metadata image to this broker while it runs
(Kafka's DynamicBrokerConfig and its reconfigurables).

A publisher on the metadata loader: when a delta touches the BROKER config resource of this
broker ("<node.id>") or of every broker (""), the node's Config gets the new dynamic layers
(Config.set_dynamic), and each part that copied a value at start-up and registered for it here
takes the new value (the topic defaults of the logs, connection limits, listener TLS/SASL...).
Everything that reads the Config at use (most of the broker) sees the change at once."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from common.config import Config
from metadata import records as r

log = logging.getLogger("krafty.dynamic_config")

Reconfigure = Callable[[set[str]], None]


class DynamicBrokerConfig:
    def __init__(self, config: Config, node_id: int):
        self.config = config
        self.node_id = node_id
        self._reconfigurables: list[tuple[Callable[[str], bool], Reconfigure, str]] = []

    def add_reconfigurable(self, keys: Iterable[str] | Callable[[str], bool], fn: Reconfigure, what: str) -> None:
        """``fn(changed keys)`` runs after a change of any key in ``keys`` (or for which the
        predicate ``keys`` holds), once the Config shows the new values."""
        pred = keys if callable(keys) else frozenset(keys).__contains__
        self._reconfigurables.append((pred, fn, what))

    def on_metadata(self, delta, image) -> None:
        mine = ((r.RESOURCE_BROKER, ""), (r.RESOURCE_BROKER, str(self.node_id)))
        if not delta.snapshot_loaded and not any(res in delta.configs for res in mine):
            return
        changed = self.config.set_dynamic(image.configs.get(mine[0], {}), image.configs.get(mine[1], {}))
        if not changed:
            return
        log.info("dynamic broker configs changed: %s", ", ".join(sorted(changed)))
        for pred, fn, what in self._reconfigurables:
            hit = {k for k in changed if pred(k)}
            if hit:
                try:
                    fn(hit)
                except Exception:  # one part that cannot take a value must not stop the others
                    log.exception("reconfiguring %s after a change of %s failed", what, ", ".join(sorted(hit)))
