"""MM2's MirrorClient / RemoteClusterUtils for Python applications: what a cluster knows of the
clusters that mirror into it, read from its own topics.

    from mirror.client import translate_offsets
    offsets = translate_offsets({"bootstrap.servers": "backup:9092"}, "primary", "app")
    consumer.assign([TopicPartition(t, p, off) for (t, p), off in offsets.items()])
"""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaException, TopicPartition

from mirror.checkpoints import read_to_end
from mirror.formats import Checkpoint, Heartbeat, SchemaError
from mirror.policy import ReplicationPolicy


def _read(conf: dict, topic: str, handle, timeout: float) -> None:
    c = Consumer({**conf, "group.id": conf.get("group.id", "krafty-mirror-client"), "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        if not read_to_end(c, topic, 0, handle, timeout):
            raise KafkaException(f"{topic} could not be read to its end within {timeout} s")
    finally:
        c.close()


def translate_offsets(conf: dict, source_alias: str, group: str, timeout: float = 30.0,
                      policy: ReplicationPolicy | None = None) -> dict[tuple[str, int], int]:
    """RemoteClusterUtils.translateOffsets: the latest checkpoint of ``group`` for each partition,
    as (topic on this cluster, partition) -> offset to resume from here."""
    policy = policy or ReplicationPolicy()
    out: dict[tuple[str, int], int] = {}

    def handle(m):
        try:
            cp = Checkpoint.decode(m.key(), m.value())
        except SchemaError:
            return
        if cp.group == group:
            out[(cp.topic, cp.partition)] = cp.downstream_offset

    _read(conf, policy.checkpoints_topic(source_alias), handle, timeout)
    return out


def upstream_clusters(conf: dict, timeout: float = 30.0, policy: ReplicationPolicy | None = None) -> set[str]:
    """RemoteClusterUtils.upstreamClusters: every cluster whose heartbeats reach this one, directly
    or through others (the sources named by the remote heartbeats topics: A.heartbeats, B.A.heartbeats)."""
    from confluent_kafka.admin import AdminClient

    policy = policy or ReplicationPolicy()
    topics = AdminClient(dict(conf)).list_topics(timeout=timeout).topics
    out: set[str] = set()
    for topic in topics:
        if not policy.is_heartbeats_topic(topic):
            continue
        source = policy.topic_source(topic)
        while source is not None and source not in out:
            out.add(source)
            topic = policy.upstream_topic(topic)
            source = policy.topic_source(topic)
    return out


def heartbeats(conf: dict, timeout: float = 30.0) -> list[Heartbeat]:
    """The Heartbeat records of this cluster's ``heartbeats`` topic."""
    out: list[Heartbeat] = []

    def handle(m):
        try:
            out.append(Heartbeat.decode(m.key(), m.value()))
        except SchemaError:
            pass

    _read(conf, "heartbeats", handle, timeout)
    return out
