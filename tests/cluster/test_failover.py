"""Multi-process cluster behaviour under kill -9: fencing, leader election from the ISR,
acks=all durability, controller failover, and the return of a killed broker."""

from __future__ import annotations

import concurrent.futures
import threading
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import wait_until


def _admin(c) -> AdminClient:
    return AdminClient({"bootstrap.servers": c.bootstrap})


def _create(c, name: str, partitions: int = 1, rf: int = 3, config=None) -> None:
    a = _admin(c)
    wait_until(lambda: len(a.list_topics(timeout=5).brokers) == c.n_brokers, 90, "all brokers registered")
    a.create_topics([NewTopic(name, partitions, rf, config=config or {})])[name].result(30)
    wait_until(lambda: all(p.leader >= 0 and len(p.isrs) == rf for p in
                           a.list_topics(name, timeout=5).topics[name].partitions.values()), 30, "leaders and ISR")


def _partition(c, topic: str, pid: int = 0):
    return _admin(c).list_topics(topic, timeout=5).topics[topic].partitions[pid]


def _consume_all(c, topic: str, expected: int, timeout: float = 60) -> list[bytes]:
    cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "verifier", "enable.auto.commit": False})
    parts = _admin(c).list_topics(topic, timeout=5).topics[topic].partitions
    cons.assign([TopicPartition(topic, p, 0) for p in parts])
    out: list[bytes] = []
    deadline = time.time() + timeout
    while len(out) < expected and time.time() < deadline:
        for m in cons.consume(1000, 1):
            if m.error() is None:
                out.append(m.value())
    cons.close()
    return out


def test_acks_all_stream_survives_leader_kill_and_return(cluster):
    _create(cluster, "stream", config={"min.insync.replicas": "2"})
    leader = _partition(cluster, "stream").leader
    p = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 2, "message.timeout.ms": 120000})
    acked: list = []
    failed: list = []

    def cb(err, msg):
        (failed if err else acked).append((time.time(), int(msg.value()), str(err) if err else None))
    n = 0
    t0 = time.time()
    killed = restarted = False
    while time.time() - t0 < 20:
        p.produce("stream", value=str(n).encode(), on_delivery=cb)
        n += 1
        p.poll(0.002)
        if not killed and time.time() - t0 > 3:
            cluster.kill(cluster.broker_name(leader))
            killed = True
        if killed and not restarted and time.time() - t0 > 10:
            cluster.start(cluster.broker_name(leader))
            restarted = True
    assert p.flush(120) == 0
    assert not failed, failed[:3]
    assert len(acked) == n
    new_leader = _partition(cluster, "stream").leader
    assert new_leader != leader or restarted
    values = [int(v) for v in _consume_all(cluster, "stream", n)]
    assert values == list(range(n)), "every acknowledged record exactly once, in order"
    # the returned broker catches up and rejoins the ISR
    wait_until(lambda: leader in _partition(cluster, "stream").isrs, 60, f"broker {leader} back in the ISR")


def test_killed_broker_is_fenced_and_its_partitions_get_new_leaders(cluster):
    _create(cluster, "moves", partitions=6)
    before = {pid: p.leader for pid, p in _admin(cluster).list_topics("moves", timeout=5).topics["moves"].partitions.items()}
    victim = before[0]
    t_kill = time.time()
    cluster.kill(cluster.broker_name(victim))

    def moved():
        parts = _admin(cluster).list_topics("moves", timeout=5).topics["moves"].partitions
        return all(p.leader not in (victim, -1) and victim not in p.isrs for p in parts.values())
    wait_until(moved, 30, "leaders moved off the killed broker")
    elapsed = time.time() - t_kill
    assert elapsed < 3.0 + 6.0, f"fenced after {elapsed:.1f}s with a 3 s session timeout"
    brokers = _admin(cluster).list_topics(timeout=5).brokers
    assert victim not in brokers  # fenced brokers are not offered to clients
    # it comes back: re-registers, catches up, is unfenced, and preferred leaders return
    cluster.start(cluster.broker_name(victim))
    wait_until(lambda: victim in _admin(cluster).list_topics(timeout=5).brokers, 60, "broker unfenced")
    wait_until(lambda: all(p.leader == before[pid] for pid, p in
                           _admin(cluster).list_topics("moves", timeout=5).topics["moves"].partitions.items()),
               60, "preferred leaders restored")


def test_controller_failover_keeps_topic_creation_working(cluster):
    _create(cluster, "first")
    active = wait_until(cluster.active_controller, 30, "an active controller")
    cluster.kill(active)
    t0 = time.time()
    a = _admin(cluster)

    def create():
        a.create_topics([NewTopic("second", 3, 3)])["second"].result(10)
        return True
    wait_until(create, 60, "topic creation after controller failover", interval=0.5)
    assert time.time() - t0 < 30
    wait_until(lambda: len(a.list_topics("second", timeout=5).topics["second"].partitions) == 3, 30,
               "the new topic in every broker's metadata")


def test_concurrent_create_of_the_same_topic_succeeds_exactly_once(cluster):
    _create(cluster, "warmup")
    barrier = threading.Barrier(6)

    def attempt(_):
        a = _admin(cluster)
        barrier.wait()
        try:
            a.create_topics([NewTopic("contended", 2, 3)])["contended"].result(30)
            return "ok"
        except KafkaException as e:
            return e.args[0].name()
    with concurrent.futures.ThreadPoolExecutor(6) as ex:
        results = list(ex.map(attempt, range(6)))
    assert results.count("ok") == 1, results
    assert all(r in ("ok", "TOPIC_ALREADY_EXISTS") for r in results), results
