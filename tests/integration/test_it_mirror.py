"""``krafty mirror`` between two local krafty clusters (one combined node each): records copied
with keys, values, headers and timestamps; prefix and identity naming; topic configs and
partition counts kept in sync; new topics picked up; MM2's internal topics in MM2's formats; a
consumer group failing over to the target with its translated offsets; one-line config errors.
The kill -9 tests and instances sharing partitions are in tests/cluster/test_mirror.py."""

from __future__ import annotations

import subprocess
import sys

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from mirror_harness import (
    T0,
    MirrorProcess,
    mirror_config,
    read_partition,
    start_cluster,
    wait_until,
)

from mirror.formats import Checkpoint, Heartbeat, OffsetSync


@pytest.fixture(scope="module")
def clusters(tmp_path_factory):
    a = start_cluster(tmp_path_factory.mktemp("mirror-a"), "A")
    try:
        b = start_cluster(tmp_path_factory.mktemp("mirror-b"), "B")
    except BaseException:
        a.close()
        raise
    yield a, b
    b.close()
    a.close()


@pytest.fixture
def mirrors(tmp_path):
    started: list[MirrorProcess] = []

    def make(config: str, name: str = "mirror", args=None) -> MirrorProcess:
        m = MirrorProcess(tmp_path, config, name, args).start()
        started.append(m)
        return m

    yield make
    for m in started:
        m.close()
        if m.proc is not None:
            print(f"---- {m.name} stderr ----\n{m.log()[-4000:]}")


def create(bootstrap: str, topic: str, partitions: int, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})])[topic].result(30)


def topic_config(bootstrap: str, topic: str) -> dict:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.TOPIC, topic)
    return {k: v.value for k, v in admin.describe_configs([res])[res].result(30).items()}


def partitions_of(bootstrap: str, topic: str) -> int:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)  # (naming it would create it)
    t = md.topics.get(topic)
    return 0 if t is None or t.error is not None else len(t.partitions)


def produce(bootstrap: str, topic: str, records: list[tuple], transactional: bool = False) -> None:
    """records: (partition, key, value, headers, timestamp)."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    for part, key, value, headers, ts in records:
        p.produce(topic, key=key, value=value, partition=part, headers=headers, timestamp=ts)
    assert p.flush(30) == 0


def all_records(bootstrap: str, topic: str, n: int, committed: bool = False) -> dict[int, list]:
    return {p: read_partition(bootstrap, topic, p, committed) for p in range(n)}


def caught_up(bootstrap_a, topic, bootstrap_b, remote, n):
    """The remote partitions end with the source partitions' records."""
    for p in range(n):
        src = read_partition(bootstrap_a, topic, p)
        if src and read_partition(bootstrap_b, remote, p)[-len(src):] != src:
            return False
    return True


def test_records_are_copied_with_keys_headers_timestamps_under_prefix_names(clusters, mirrors):
    a, b = clusters
    create(a.bootstrap, "orders", 3, {"retention.ms": "7200000", "max.message.bytes": "2000000"})
    recs = [(i % 3, None if i % 7 == 0 else f"k{i}".encode(), None if i % 11 == 0 else b"v%d" % i,
             [("h1", b"x%d" % i), ("h2", None)] if i % 2 else None, T0 + i * 100)
            for i in range(600)]
    produce(a.bootstrap, "orders", recs)
    m = mirrors(mirror_config(a.bootstrap, b.bootstrap, **{"A->B.topics": "orders", "A->B.group.id": "t1-mm2"}))
    wait_until(lambda: partitions_of(b.bootstrap, "A.orders") == 3, 60, "A.orders on B")
    wait_until(lambda: caught_up(a.bootstrap, "orders", b.bootstrap, "A.orders", 3), 60, "the copy")
    src, dst = all_records(a.bootstrap, "orders", 3), all_records(b.bootstrap, "A.orders", 3)
    for p in range(3):
        assert dst[p] == src[p]  # key, value (nulls too), headers and timestamp, in order
    assert sum(len(v) for v in dst.values()) == 600
    cfg = topic_config(b.bootstrap, "A.orders")
    assert cfg["retention.ms"] == "7200000" and cfg["max.message.bytes"] == "2000000"
    # only the flow's topics, and MM2's internal topics where MM2 puts them
    topics_b = set(AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10).topics)
    assert {"A.orders", "A.checkpoints.internal", "heartbeats", "A.heartbeats"} <= topics_b
    assert "mm2-offset-syncs.B.internal" in AdminClient({"bootstrap.servers": a.bootstrap}).list_topics(timeout=10).topics
    syncs = [OffsetSync.decode(k, v) for k, v, _, _ in read_partition(a.bootstrap, "mm2-offset-syncs.B.internal", 0)]
    mine = [s for s in syncs if s.topic == "orders"]
    assert mine and all(s.upstream_offset == s.downstream_offset for s in mine)  # a fresh topic: same offsets
    hb = wait_until(lambda: [Heartbeat.decode(k, v) for k, v, _, _ in read_partition(b.bootstrap, "heartbeats", 0)],
                    30, "heartbeats on B")
    assert {(h.source, h.target) for h in hb} == {("A", "B")}
    # B->A heartbeats go into A, and reach B as A.heartbeats
    wait_until(lambda: read_partition(b.bootstrap, "A.heartbeats", 0), 30, "A.heartbeats on B")
    assert {(Heartbeat.decode(k, v).source, Heartbeat.decode(k, v).target)
            for k, v, _, _ in read_partition(b.bootstrap, "A.heartbeats", 0)} == {("B", "A")}
    prog = wait_until(lambda: [x for x in m.progress() if x["records"] >= 600], 30, "progress")[-1]
    assert prog["flow"] == "A->B" and set(prog["lag"]) >= {"orders-0", "orders-1", "orders-2"}
    assert m.stop() == 0


def test_identity_naming_config_and_partition_sync_and_new_topics(clusters, mirrors):
    a, b = clusters
    create(a.bootstrap, "inv.items", 2, {"retention.ms": "3600000"})
    produce(a.bootstrap, "inv.items", [(i % 2, b"k", b"v%d" % i, None, T0 + i) for i in range(100)])
    mirrors(mirror_config(a.bootstrap, b.bootstrap, **{
        "A->B.topics": r"inv\..*",
        "replication.policy.class": "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
        "A->B.group.id": "t2-mm2", "refresh.topics.interval.seconds": "1", "sync.topic.configs.interval.seconds": "1"}))
    wait_until(lambda: caught_up(a.bootstrap, "inv.items", b.bootstrap, "inv.items", 2), 60, "the identity copy")
    assert partitions_of(b.bootstrap, "A.inv.items") == 0
    # the source's config changes: the target follows
    admin_a = AdminClient({"bootstrap.servers": a.bootstrap})
    res = ConfigResource(ResourceType.TOPIC, "inv.items", incremental_configs=[
        ConfigEntry("retention.ms", "1800000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact,delete", incremental_operation=AlterConfigOpType.SET)])
    admin_a.incremental_alter_configs([res])[res].result(30)
    wait_until(lambda: topic_config(b.bootstrap, "inv.items")["retention.ms"] == "1800000", 30, "retention.ms synced")
    assert topic_config(b.bootstrap, "inv.items")["cleanup.policy"] == "compact,delete"
    # the source grows: so does the target, and the new partition is copied
    admin_a.create_partitions([NewPartitions("inv.items", 4)])["inv.items"].result(30)
    produce(a.bootstrap, "inv.items", [(3, b"k", b"new", None, T0)])
    wait_until(lambda: partitions_of(b.bootstrap, "inv.items") == 4, 30, "4 partitions on B")
    wait_until(lambda: read_partition(b.bootstrap, "inv.items", 3) == read_partition(a.bootstrap, "inv.items", 3),
               60, "partition 3 copied")
    # a new matching topic is picked up; one that does not match is not
    create(a.bootstrap, "inv.prices", 1)
    create(a.bootstrap, "other", 1)
    produce(a.bootstrap, "inv.prices", [(0, b"p", b"1.5", [("cur", b"EUR")], T0)])
    wait_until(lambda: read_partition(b.bootstrap, "inv.prices", 0) == read_partition(a.bootstrap, "inv.prices", 0),
               60, "the new topic copied")
    assert partitions_of(b.bootstrap, "other") == 0 and partitions_of(b.bootstrap, "A.other") == 0


def test_a_consumer_group_fails_over_to_the_target_and_resumes_without_gaps(clusters, mirrors):
    a, b = clusters
    create(a.bootstrap, "clicks", 2)
    n = 1000
    produce(a.bootstrap, "clicks", [(i % 2, f"k{i}".encode(), b"%d" % i, None, T0 + i) for i in range(n)])
    # the application consumes 300 records per partition on A and commits
    c = Consumer({"bootstrap.servers": a.bootstrap, "group.id": "app", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.assign([TopicPartition("clicks", 0, 0), TopicPartition("clicks", 1, 0)])
    seen_a: dict[int, list[bytes]] = {0: [], 1: []}
    while min(len(v) for v in seen_a.values()) < 300:
        for msg in c.consume(100, 1):
            if msg.error() is None and len(seen_a[msg.partition()]) < 300:
                seen_a[msg.partition()].append(msg.value())
    c.commit(offsets=[TopicPartition("clicks", 0, 300), TopicPartition("clicks", 1, 300)], asynchronous=False)
    c.close()
    # the remote topic already holds 500 other records per partition: B's offsets differ from A's
    create(b.bootstrap, "A.clicks", 2)
    produce(b.bootstrap, "A.clicks", [(i % 2, None, b"old-%d" % i, None, T0) for i in range(1000)])
    mirrors(mirror_config(a.bootstrap, b.bootstrap, **{"A->B.topics": "clicks", "A->B.group.id": "t3-mm2",
                                                       "A->B.sync.group.offsets.enabled": "true"}))
    wait_until(lambda: caught_up(a.bootstrap, "clicks", b.bootstrap, "A.clicks", 2), 60, "the copy")
    # a checkpoint per partition in MM2's format, and the offsets written to the group on B
    def checkpoints():
        cps = [Checkpoint.decode(k, v) for k, v, _, _ in read_partition(b.bootstrap, "A.checkpoints.internal", 0)]
        return {(cp.topic, cp.partition): cp for cp in cps if cp.group == "app"}
    cps = wait_until(lambda: len(checkpoints()) == 2 and checkpoints(), 60, "checkpoints for group app")
    for p in range(2):
        cp = cps[("A.clicks", p)]
        assert cp.upstream_offset == 300 and 500 <= cp.downstream_offset <= 800
    admin_b = AdminClient({"bootstrap.servers": b.bootstrap})
    from confluent_kafka import ConsumerGroupTopicPartitions

    def target_offsets():
        res = admin_b.list_consumer_group_offsets([ConsumerGroupTopicPartitions("app")])["app"].result(30)
        return {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions if tp.offset >= 0}
    got = wait_until(lambda: len(target_offsets()) == 2 and target_offsets(), 60, "group app's offsets on B")
    assert all(500 <= off <= 800 for off in got.values()), got
    # what MM2's RemoteClusterUtils.translateOffsets gives an application, from the checkpoints
    from mirror.client import translate_offsets, upstream_clusters
    assert translate_offsets({"bootstrap.servers": b.bootstrap}, "A", "app") == got
    assert upstream_clusters({"bootstrap.servers": b.bootstrap}) == {"A"}
    # the application moves to B: it subscribes to the remote topic and resumes from the committed offsets
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "app", "enable.auto.commit": False,
                  "auto.offset.reset": "latest"})  # (latest: a missing offset would lose records and fail the test)
    c.subscribe(["A.clicks"])
    seen_b: dict[int, list[bytes]] = {0: [], 1: []}
    last = {p: read_partition(a.bootstrap, "clicks", p)[-1][1] for p in (0, 1)}

    def read_to_the_end():
        for msg in c.consume(500, 0.5):
            if msg.error() is None:
                seen_b[msg.partition()].append(msg.value())
        return all(seen_b[p] and seen_b[p][-1] == last[p] for p in (0, 1))
    wait_until(read_to_the_end, 60, "the group reading to the end on B", interval=0)
    c.close()
    for p in range(2):
        expected = [r[1] for r in read_partition(a.bootstrap, "clicks", p)][300:]
        resumed = seen_b[p]
        # no gap: every record after the source commit; at most the records since the closest sync again
        assert resumed[-len(expected):] == expected
        again = resumed[:len(resumed) - len(expected)]
        assert len(again) <= 101 and set(again) <= set(seen_a[p])  # within offset.lag.max of the sync; no old record


def test_a_bad_config_is_one_line_naming_the_key(tmp_path):
    cfg = tmp_path / "mm2.properties"
    cfg.write_text(mirror_config("127.0.0.1:1", "127.0.0.1:2", **{"A->B.emit.checkpoints.interval.seconds": "often"}))
    p = subprocess.run([sys.executable, "-m", "krafty", "mirror", str(cfg)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        f"krafty mirror: mirror config {cfg}:15: A->B.emit.checkpoints.interval.seconds = 'often': expected a whole number"]
    cfg.write_text(mirror_config("127.0.0.1:1", "127.0.0.1:2", **{"A.consumer.fetch.max.bytez": "1"}))
    p = subprocess.run([sys.executable, "-m", "krafty", "mirror", str(cfg)], capture_output=True, text=True, timeout=90)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith(
        "krafty mirror: mirror config: A.consumer.fetch.max.bytez: No such configuration property"), p.stderr
