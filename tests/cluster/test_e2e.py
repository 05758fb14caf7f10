"""End-to-end suites against a real 3 controller + 3 broker cluster (separate processes on
loopback), run by ``make test-cluster``: every client library over replicated topics, consumer
groups, admin operations, and a rolling restart of every broker under an acks=all load with no
acknowledged write lost."""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from tests.cluster.conftest import wait_until

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "integration"))
from clients import ALL_CLIENTS, CLIENTS, Rec  # noqa: E402

pytestmark = pytest.mark.cluster


def _admin(c) -> AdminClient:
    return AdminClient({"bootstrap.servers": c.bootstrap})


def _create(c, name: str, partitions: int = 1, rf: int = 3, config=None) -> None:
    a = _admin(c)
    wait_until(lambda: len(a.list_topics(timeout=5).brokers) == c.n_brokers, 90, "all brokers registered")
    a.create_topics([NewTopic(name, partitions, rf, config=config or {})])[name].result(30)
    wait_until(lambda: all(p.leader >= 0 and len(p.isrs) == rf for p in
                           a.list_topics(name, timeout=5).topics[name].partitions.values()), 30, "leaders and ISR")


def _partitions(c, topic: str) -> dict:
    return _admin(c).list_topics(topic, timeout=5).topics[topic].partitions


@pytest.mark.parametrize("client_name", ALL_CLIENTS)
def test_every_client_produces_and_consumes_on_every_leader(cluster, client_name):
    """Three partitions led by three different brokers: each client writes acks=all to each and
    reads everything back, in order, from offset 0."""
    client = CLIENTS[client_name]
    topic = f"e2e-{client_name}"
    _create(cluster, topic, partitions=3)
    leaders = {pid: p.leader for pid, p in _partitions(cluster, topic).items()}
    assert len(set(leaders.values())) == 3, f"placement spreads leaders over the brokers: {leaders}"
    for pid in range(3):
        recs = [Rec(f"k{pid}-{i}".encode(), f"v{pid}-{i}".encode()) for i in range(200)]
        offsets = client.produce(cluster.bootstrap, topic, recs, partition=pid, acks="all")
        if offsets is not None:  # kcat does not report offsets
            assert list(offsets) == list(range(200)), f"{client_name} partition {pid}: {offsets[:5]}..."
        cons = client.consumer(cluster.bootstrap, topic, partition=pid, start="earliest")
        try:
            got = cons.read(200, timeout=60)
        finally:
            cons.close()
        assert [(g.offset, g.key, g.value) for g in got] == [(i, r.key, r.value) for i, r in enumerate(recs)]


def test_consumer_group_splits_partitions_and_resumes_from_commits(cluster):
    topic = "e2e-group"
    _create(cluster, topic, partitions=6)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(600):
        p.produce(topic, value=str(i).encode(), partition=i % 6)
    assert p.flush(60) == 0
    group = f"g-{uuid.uuid4().hex[:6]}"

    def member():
        return Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "session.timeout.ms": 10000})
    members = [member(), member()]
    for m in members:
        m.subscribe([topic])
    seen: dict[int, list[int]] = {0: [], 1: []}
    deadline = time.time() + 90
    while sum(len(v) for v in seen.values()) < 600 and time.time() < deadline:
        for i, m in enumerate(members):
            msgs = [x for x in m.consume(200, 0.3) if x.error() is None]
            seen[i] += [int(x.value()) for x in msgs]
            if msgs:
                m.commit(asynchronous=False)
    assert sorted(seen[0] + seen[1]) == list(range(600)), "every record once across the group"
    assert seen[0] and seen[1], "both members got partitions"
    for m in members:
        m.close()
    # a new member of the same group starts from the committed offsets: nothing left to read
    late = member()
    committed = late.committed([TopicPartition(topic, pid) for pid in range(6)], timeout=30)
    assert sorted(tp.offset for tp in committed) == [100] * 6
    late.close()


def test_admin_operations_on_the_cluster(cluster):
    a = _admin(cluster)
    _create(cluster, "e2e-admin", partitions=2, config={"retention.ms": "3600000"})
    # describe and alter topic configs through whichever broker the client picks
    res = ConfigResource("topic", "e2e-admin")
    cfg = a.describe_configs([res])[res].result(30)
    assert cfg["retention.ms"].value == "3600000"
    inc = ConfigResource("topic", "e2e-admin", incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)])
    a.incremental_alter_configs([inc])[inc].result(30)
    wait_until(lambda: a.describe_configs([ConfigResource("topic", "e2e-admin")])[
        ConfigResource("topic", "e2e-admin")].result(30)["retention.ms"].value == "7200000", 30, "altered config")
    # grow the topic; the new partitions get replicated leaders
    a.create_partitions([NewPartitions("e2e-admin", 5)])["e2e-admin"].result(30)
    wait_until(lambda: len(_partitions(cluster, "e2e-admin")) == 5 and all(
        p.leader >= 0 and len(p.isrs) == 3 for p in _partitions(cluster, "e2e-admin").values()), 60,
        "5 replicated partitions")
    # errors are Kafka's codes: a bad replication factor, a duplicate, a missing topic
    with pytest.raises(KafkaException) as e:
        a.create_topics([NewTopic("e2e-too-wide", 1, 4)])["e2e-too-wide"].result(30)
    assert e.value.args[0].name() == "INVALID_REPLICATION_FACTOR"
    with pytest.raises(KafkaException) as e:
        a.create_topics([NewTopic("e2e-admin", 1, 3)])["e2e-admin"].result(30)
    assert e.value.args[0].name() == "TOPIC_ALREADY_EXISTS"
    # delete: gone from every broker's metadata
    a.delete_topics(["e2e-admin"], operation_timeout=30)["e2e-admin"].result(30)
    for b in cluster.bootstrap.split(","):
        one = AdminClient({"bootstrap.servers": b})
        wait_until(lambda one=one: "e2e-admin" not in one.list_topics(timeout=5).topics, 30, f"deleted on {b}")
    with pytest.raises(KafkaException) as e:
        a.delete_topics(["e2e-admin"], operation_timeout=30)["e2e-admin"].result(30)
    assert e.value.args[0].name() == "UNKNOWN_TOPIC_OR_PART"
    # the cluster view: three brokers, one controller id among the controllers
    md = a.list_topics(timeout=10)
    assert sorted(md.brokers) == [4, 5, 6]


def test_rolling_restart_of_every_broker_under_load_loses_nothing(cluster):
    """Stop each broker (controlled shutdown), start it again, wait until it is back in every ISR,
    then the next one, while an idempotent acks=all producer writes unique values to 6 partitions."""
    topic = "e2e-rolling"
    _create(cluster, topic, partitions=6, config={"min.insync.replicas": "2"})
    acked: dict[int, set[int]] = {pid: set() for pid in range(6)}
    failed: list = []
    stop = threading.Event()
    sent = [0]

    def produce():
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 5, "message.timeout.ms": 180000})

        def cb(err, msg):
            if err is None:
                acked[msg.partition()].add(int(msg.value()))
            else:
                failed.append(str(err))
        n = 0
        while not stop.is_set():
            p.produce(topic, value=str(n).encode(), partition=n % 6, on_delivery=cb)
            n += 1
            p.poll(0.005)
        sent[0] = n
        assert p.flush(180) == 0
    t = threading.Thread(target=produce)
    t.start()
    try:
        for bid in (4, 5, 6):
            time.sleep(3)
            cluster.stop(cluster.broker_name(bid))
            time.sleep(3)
            cluster.start(cluster.broker_name(bid))
            wait_until(lambda bid=bid: all(bid in p.isrs for p in _partitions(cluster, topic).values()), 120,
                       f"broker {bid} back in every ISR")
        time.sleep(3)
    finally:
        stop.set()
        t.join(240)
    assert not t.is_alive()
    assert not failed, failed[:5]
    assert sum(len(v) for v in acked.values()) == sent[0]
    cons = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "verifier", "enable.auto.commit": False})
    for pid in range(6):
        # the rolling restart moves leaders (preferred-leader election brings them back): the
        # client's cached leader may answer NOT_LEADER_FOR_PARTITION until it refreshes, as with Kafka
        lo, hi = wait_until(lambda pid=pid: cons.get_watermark_offsets(TopicPartition(topic, pid), timeout=10), 60,
                            f"partition {pid}'s watermarks")
        cons.assign([TopicPartition(topic, pid, 0)])
        got: list[int] = []
        deadline = time.time() + 60
        while len(got) < hi and time.time() < deadline:
            got += [int(m.value()) for m in cons.consume(1000, 1) if m.error() is None]
        assert len(got) == len(set(got)), f"partition {pid}: duplicates"
        assert set(got) == acked[pid], f"partition {pid}: lost {sorted(acked[pid] - set(got))[:10]}"
        assert got == sorted(got), f"partition {pid}: out of order"
    cons.close()
