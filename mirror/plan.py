"""What MirrorSourceConnector decides about topics (sans-IO): which source topics a flow
replicates, which remote topics to create with how many partitions, which to grow, and which
topic-config changes bring a remote topic in line with its source."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mirror.policy import SourceTopics


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One DescribeConfigs entry, as much of it as the decision needs."""

    name: str
    value: str | None
    is_default: bool = False
    read_only: bool = False
    sensitive: bool = False
    static_broker: bool = False  # ConfigSource STATIC_BROKER_CONFIG
    topic_override: bool = False  # ConfigSource DYNAMIC_TOPIC_CONFIG: set on the topic itself


@dataclass(frozen=True)
class TopicPlan:
    replicated: dict[str, str]  # source topic -> remote topic
    create: dict[str, int]      # source topic -> partitions (its remote topic does not exist yet)
    grow: dict[str, int]        # remote topic -> the source's partition count (more than the target has)


def plan_topics(flow: SourceTopics, source: Mapping[str, int], target: Mapping[str, int]) -> TopicPlan:
    """``source``/``target``: topic -> partition count on each cluster."""
    replicated = {t: flow.remote(t) for t in sorted(source) if flow.should_replicate(t)}
    create = {t: source[t] for t, r in replicated.items() if r not in target}
    grow = {r: source[t] for t, r in replicated.items() if r in target and source[t] > target[r]}
    return TopicPlan(replicated, create, grow)


def replicable_config(entries: Iterable[ConfigEntry], exclude: re.Pattern | None, use_defaults_from: str,
                      incremental: bool) -> list[ConfigEntry]:
    """MirrorSourceConnector.targetConfig: the entries of a source topic's config that go to its
    remote topic (never read-only, sensitive, static broker or excluded properties; defaults only
    with use.defaults.from=source, or, incrementally, to be deleted on the target)."""
    out = []
    for e in entries:
        if e.read_only or e.sensitive or e.static_broker or e.value is None:
            continue
        if exclude is not None and exclude.fullmatch(e.name):
            continue
        if not incremental and e.is_default and use_defaults_from != "source":
            continue
        out.append(e)
    return out


def creation_config(entries: Iterable[ConfigEntry], exclude: re.Pattern | None, use_defaults_from: str) -> dict[str, str]:
    return {e.name: e.value for e in replicable_config(entries, exclude, use_defaults_from, incremental=False)}


def config_changes(source: Iterable[ConfigEntry], target: Iterable[ConfigEntry], exclude: re.Pattern | None,
                   use_defaults_from: str) -> list[tuple[str, str | None]]:
    """The incremental alterations (name, value to SET, or None to DELETE) that make the remote
    topic's config follow its source's: what MM2's syncTopicConfigs sends, less what already agrees."""
    have = {e.name: e for e in target}
    ops = []
    for e in replicable_config(source, exclude, use_defaults_from, incremental=True):
        t = have.get(e.name)
        if e.is_default and use_defaults_from != "source":
            if t is not None and t.topic_override:
                ops.append((e.name, None))  # the source uses its default: so does the target
        elif t is None or t.value != e.value:
            ops.append((e.name, e.value))
    return ops
