"""The metadata loader: a metadata-log listener that replays committed records into
deltas, applies them to a new image and hands ``(delta, image)`` to publishers."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from metadata import records as r
from metadata.delta import MetadataDelta
from metadata.image import EMPTY, MetadataImage

if TYPE_CHECKING:
    from raft.api import Batch, LeaderAndEpoch, Snapshot

log = logging.getLogger("krafty.metadata")

Publisher = Callable[[MetadataDelta, MetadataImage], None]


class MetadataLoader:
    def __init__(self) -> None:
        self.image: MetadataImage = EMPTY
        self.leader: LeaderAndEpoch | None = None
        self._publishers: list[Publisher] = []
        self._leader_listeners: list[Callable[[LeaderAndEpoch], None]] = []

    def add_publisher(self, publisher: Publisher, *, catch_up: bool = True) -> None:
        self._publishers.append(publisher)
        if catch_up and self.image is not EMPTY:
            d = MetadataDelta(EMPTY)
            for rec in self.image.to_records():
                d.replay(rec)
            d.snapshot_loaded = True
            publisher(d, self.image)

    def remove_publisher(self, publisher: Publisher) -> None:
        self._publishers.remove(publisher)

    def add_leader_listener(self, fn: Callable[[LeaderAndEpoch], None]) -> None:
        self._leader_listeners.append(fn)

    # --- raft.api.Listener -----------------------------------------------------------
    def handle_commit(self, batches: Iterable[Batch]) -> None:
        delta = None
        last = None
        for b in batches:
            if delta is None:
                delta = MetadataDelta(self.image)
            for raw in b.records:
                delta.replay(r.decode(raw))
            last = b
        if delta is None or last is None:
            return
        self._publish(delta, delta.apply(last.last_offset, last.epoch))

    def handle_load_snapshot(self, snapshot: Snapshot) -> None:
        delta = MetadataDelta(EMPTY)
        for raw in snapshot.records:
            delta.replay(r.decode(raw))
        delta.snapshot_loaded = True
        self._publish(delta, delta.apply(snapshot.end_offset - 1, snapshot.epoch))

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.leader = leader
        for fn in self._leader_listeners:
            fn(leader)

    def _publish(self, delta: MetadataDelta, image: MetadataImage) -> None:
        self.image = image
        for p in self._publishers:
            try:
                p(delta, image)
            except Exception:
                log.exception("metadata publisher %r failed at offset %d", p, image.offset)
