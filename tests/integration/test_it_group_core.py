"""Consumer groups on one krafty node with real clients: subscribe, commit, resume after a
restart of the consumer and of the broker, a rebalance between two members, and group
consumption with kafka-python and aiokafka."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from krafty_node import KraftyNode

pytestmark = pytest.mark.krafty_only

FAST = {"group.initial.rebalance.delay.ms": "0"}


@pytest.fixture(scope="module")
def gnode(tmp_path_factory):
    node = KraftyNode(tmp_path_factory.mktemp("groups"), extra_properties=FAST)
    node.start()
    yield node
    node.close()


def _topic(node, partitions=1) -> str:
    name = "g-" + uuid.uuid4().hex[:8]
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def _produce(node, topic, n, partitions=1):
    p = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, value=b"%d" % i, partition=i % partitions)
    assert p.flush(30) == 0


def _consumer(node, group, **extra) -> Consumer:
    conf = {"bootstrap.servers": node.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    conf.update(extra)
    return Consumer(conf)


def _read(c: Consumer, n: int, timeout=30.0) -> list:
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        assert m.error() is None, m.error()
        out.append(m)
    return out


def test_confluent_subscribe_commit_and_resume_after_consumer_and_broker_restart(gnode):
    topic, group = _topic(gnode), "cg-" + uuid.uuid4().hex[:6]
    _produce(gnode, topic, 20)
    c = _consumer(gnode, group)
    c.subscribe([topic])
    got = _read(c, 10)
    assert [int(m.value()) for m in got] == list(range(10))
    c.commit(message=got[-1], asynchronous=False)
    c.close()

    c = _consumer(gnode, group)
    c.subscribe([topic])
    got = _read(c, 5)
    assert [int(m.value()) for m in got] == list(range(10, 15))  # resumed at the committed offset
    c.commit(message=got[-1], asynchronous=False)
    c.close()

    gnode.restart()  # the coordinator state is rebuilt from __consumer_offsets
    c = _consumer(gnode, group)
    assert c.committed([TopicPartition(topic, 0)], timeout=20)[0].offset == 15
    c.subscribe([topic])
    got = _read(c, 5)
    assert [int(m.value()) for m in got] == list(range(15, 20))
    c.close()


def test_two_confluent_members_split_partitions_and_rebalance_when_one_leaves(gnode):
    topic, group = _topic(gnode, partitions=4), "cg-" + uuid.uuid4().hex[:6]
    assigned: dict[str, list] = {"a": [], "b": []}

    def on_assign(name):
        def cb(consumer, parts):
            assigned[name] = sorted(p.partition for p in parts)
        return cb

    a = _consumer(gnode, group, **{"partition.assignment.strategy": "range"})
    b = _consumer(gnode, group, **{"partition.assignment.strategy": "range"})
    try:
        a.subscribe([topic], on_assign=on_assign("a"))
        b.subscribe([topic], on_assign=on_assign("b"))
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and sorted(assigned["a"] + assigned["b"]) != [0, 1, 2, 3] or (
                not assigned["a"] or not assigned["b"]):
            a.poll(0.2)
            b.poll(0.2)
            if time.monotonic() > deadline:
                break
        assert sorted(assigned["a"] + assigned["b"]) == [0, 1, 2, 3]
        assert len(assigned["a"]) == 2 and len(assigned["b"]) == 2
        b.close()  # LeaveGroup: a gets everything
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and assigned["a"] != [0, 1, 2, 3]:
            a.poll(0.2)
        assert assigned["a"] == [0, 1, 2, 3]
    finally:
        a.close()


def test_static_member_restart_gets_its_assignment_back_without_rebalance(gnode):
    topic, group = _topic(gnode, partitions=2), "cg-" + uuid.uuid4().hex[:6]
    events: list[tuple[str, str, list]] = []

    def cbs(name):
        return {"on_assign": lambda c, ps: events.append((name, "assign", sorted(p.partition for p in ps))),
                "on_revoke": lambda c, ps: events.append((name, "revoke", sorted(p.partition for p in ps)))}

    def conf(instance):
        return {"group.instance.id": instance, "session.timeout.ms": 30000,
                "partition.assignment.strategy": "range"}

    a = _consumer(gnode, group, **conf("static-a"))
    b = _consumer(gnode, group, **conf("static-b"))
    a.subscribe([topic], **cbs("a"))
    b.subscribe([topic], **cbs("b"))
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline and not (len(a.assignment()) == 1 and len(b.assignment()) == 1):
        a.poll(0.2)
        b.poll(0.2)
    a_parts = sorted(p.partition for p in a.assignment())
    assert len(a_parts) == 1 and len(b.assignment()) == 1
    a.close()  # a static member does not send LeaveGroup: the coordinator keeps its slot
    events.clear()
    a2 = _consumer(gnode, group, **conf("static-a"))
    a2.subscribe([topic], **cbs("a2"))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not a2.assignment():
        a2.poll(0.2)
        b.poll(0.2)
    for _ in range(10):  # give a rebalance, if one had been triggered, time to reach b
        a2.poll(0.2)
        b.poll(0.2)
    assert sorted(p.partition for p in a2.assignment()) == a_parts
    assert [e for e in events if e[0] == "b"] == []  # b saw no rebalance
    a2.close()
    b.close()


def test_kafka_python_group_consume_and_commit(gnode):
    from kafka import KafkaConsumer

    topic, group = _topic(gnode), "kp-" + uuid.uuid4().hex[:6]
    _produce(gnode, topic, 10)
    c = KafkaConsumer(topic, bootstrap_servers=gnode.bootstrap, group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=False, consumer_timeout_ms=20000)
    got = []
    for m in c:
        got.append(int(m.value))
        if len(got) == 6:
            break
    assert got == list(range(6))
    c.commit()
    c.close()
    c = KafkaConsumer(topic, bootstrap_servers=gnode.bootstrap, group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=False, consumer_timeout_ms=20000)
    got = []
    for m in c:
        got.append(int(m.value))
        if len(got) == 4:
            break
    c.close()
    assert got == list(range(6, 10))


def test_aiokafka_group_consume_and_commit(gnode):
    from aiokafka import AIOKafkaConsumer

    topic, group = _topic(gnode), "aio-" + uuid.uuid4().hex[:6]
    _produce(gnode, topic, 10)

    async def run(n):
        c = AIOKafkaConsumer(topic, bootstrap_servers=gnode.bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        try:
            got = []
            async with asyncio.timeout(30):
                async for m in c:
                    got.append(int(m.value))
                    if len(got) == n:
                        break
            await c.commit()
            return got
        finally:
            await c.stop()

    assert asyncio.run(run(7)) == list(range(7))
    assert asyncio.run(run(3)) == list(range(7, 10))
