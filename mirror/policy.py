"""Naming and selection, as MirrorMaker 2 does them: the replication policies
(``DefaultReplicationPolicy``: ``A.topic``; ``IdentityReplicationPolicy``: ``topic``), the
topic/group filters (``topics``, ``topics.exclude``, ``groups``, ``groups.exclude``: lists of
names and regexes, each matched against the whole name) and the topic-config property filter
(``config.properties.exclude``). Pure functions of names."""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_POLICY = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
IDENTITY_POLICY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"
HEARTBEATS = "heartbeats"


class ReplicationPolicy:
    """DefaultReplicationPolicy: a remote topic is ``<source alias><separator><topic>``."""

    def __init__(self, separator: str = ".", internal_separator_enabled: bool = True):
        if not separator:
            raise ValueError("replication.policy.separator must not be empty")
        self.separator = separator
        self._internal_sep = separator if internal_separator_enabled else "."

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        return source_alias + self.separator + topic

    def topic_source(self, topic: str) -> str | None:
        parts = [p for p in topic.split(self.separator)]
        # Java's Pattern.split drops trailing empty strings
        while parts and parts[-1] == "":
            parts.pop()
        return parts[0] if len(parts) >= 2 else None

    def upstream_topic(self, topic: str) -> str | None:
        source = self.topic_source(topic)
        return None if source is None else topic[len(source) + len(self.separator):]

    def original_topic(self, topic: str) -> str:
        upstream = self.upstream_topic(topic)
        if upstream is None or upstream == topic:
            return topic
        return self.original_topic(upstream)

    def heartbeats_topic(self) -> str:
        return HEARTBEATS

    def offset_syncs_topic(self, cluster_alias: str) -> str:
        return f"mm2-offset-syncs{self._internal_sep}{cluster_alias}{self._internal_sep}internal"

    def checkpoints_topic(self, cluster_alias: str) -> str:
        return f"{cluster_alias}{self._internal_sep}checkpoints{self._internal_sep}internal"

    def is_heartbeats_topic(self, topic: str) -> bool:
        return self.original_topic(topic) == HEARTBEATS

    def is_mm2_internal_topic(self, topic: str) -> bool:
        return topic.endswith(self._internal_sep + "internal")

    def is_internal_topic(self, topic: str) -> bool:
        return (self.is_mm2_internal_topic(topic) or topic.startswith("__") or topic.startswith(".")
                or topic.endswith("-internal") or topic.endswith(".internal"))


class IdentityReplicationPolicy(ReplicationPolicy):
    """Remote topics keep their names (heartbeats excepted); cycles cannot be detected, so the
    topology must be acyclic."""

    def __init__(self, separator: str = ".", internal_separator_enabled: bool = True,
                 source_alias: str | None = None):
        super().__init__(separator, internal_separator_enabled)
        self.source_alias = source_alias

    def _heartbeat(self, topic: str) -> bool:
        return topic.endswith(HEARTBEATS)

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        return super().format_remote_topic(source_alias, topic) if self._heartbeat(topic) else topic

    def topic_source(self, topic: str) -> str | None:
        return super().topic_source(topic) if self._heartbeat(topic) else self.source_alias

    def upstream_topic(self, topic: str) -> str | None:
        return super().upstream_topic(topic) if self._heartbeat(topic) else topic


POLICIES = {DEFAULT_POLICY: ReplicationPolicy, IDENTITY_POLICY: IdentityReplicationPolicy,
            "DefaultReplicationPolicy": ReplicationPolicy, "IdentityReplicationPolicy": IdentityReplicationPolicy}


def compile_pattern_list(items: list[str]) -> re.Pattern | None:
    """MirrorUtils.compilePatternList: the alternation of the list; an empty list matches nothing."""
    items = [i for i in items if i != ""]
    return re.compile("|".join(items)) if items else None


@dataclass(frozen=True)
class NameFilter:
    """DefaultTopicFilter / DefaultGroupFilter: included and not excluded (whole-name matches)."""

    include: re.Pattern | None
    exclude: re.Pattern | None

    def __call__(self, name: str) -> bool:
        return (self.include is not None and self.include.fullmatch(name) is not None
                and not (self.exclude is not None and self.exclude.fullmatch(name) is not None))


@dataclass(frozen=True)
class SourceTopics:
    """MirrorSourceConnector.shouldReplicateTopic for one flow source -> target."""

    source: str
    target: str
    policy: ReplicationPolicy
    topic_filter: NameFilter
    heartbeats_replication: bool = True

    def should_replicate(self, topic: str) -> bool:
        return ((self.topic_filter(topic) or (self.heartbeats_replication and self.policy.is_heartbeats_topic(topic)))
                and not self.policy.is_internal_topic(topic) and not self.is_cycle(topic))

    def is_cycle(self, topic: str) -> bool:
        """Whether the topic came from the target already (A.topic must not go back to A)."""
        for _ in range(100):  # bounded: a pathological name cannot loop
            source = self.policy.topic_source(topic)
            if source is None:
                return False
            if source == self.target:
                return True
            upstream = self.policy.upstream_topic(topic)
            if upstream is None or upstream == topic:
                return False
            topic = upstream
        return False

    def remote(self, topic: str) -> str:
        return self.policy.format_remote_topic(self.source, topic)

    def rename_for_checkpoint(self, topic: str) -> str:
        """MirrorCheckpointTask.renameTopicPartition: B.t (came from the target) -> t, t -> A.t."""
        if self.target == self.policy.topic_source(topic):
            return self.policy.original_topic(topic)
        return self.remote(topic)


CONFIG_PROPERTIES_EXCLUDE_DEFAULT = [
    r"follower\.replication\.throttled\.replicas", r"leader\.replication\.throttled\.replicas",
    r"message\.timestamp\.difference\.max\.ms", r"message\.timestamp\.type",
    r"unclean\.leader\.election\.enable", r"min\.insync\.replicas",
]
TOPICS_EXCLUDE_DEFAULT = [r".*[\-\.]internal", r".*\.replica", r"__.*"]
GROUPS_EXCLUDE_DEFAULT = [r"console-consumer-.*", r"connect-.*", r"__.*"]
