"""Real clients read a log holding committed, aborted and open transactions (written here with
raw transactional batches and WriteTxnMarkers, as producers and a transaction coordinator
would): with isolation.level=read_committed confluent-kafka (librdkafka), kafka-python and
aiokafka see the committed records only, and nothing at or after the last stable offset."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.protocol.test_produce_record_errors import create_topic
from tests.protocol.txn_helpers import FakeCoordinator, produce, txn_batch, write_markers

A, B, C = 7001, 7002, 7003
COMMITTED = [b"p0", b"a1", b"a2", b"p1"]


@pytest.fixture
async def txn_log(node):
    """t-0: p0 | A a1 a2 | B b1 | p1 | B b2 | A COMMIT | B ABORT | C c1 (open) | p2."""
    coord = await FakeCoordinator().start()
    coord.install(node)
    await create_topic(node, "t", {})

    async def put(pid, seq, values, txn_id):
        r = await produce(node.port, "t", txn_batch(pid, 0, seq, values), txn_id=txn_id)
        assert r.error_code == 0, r

    await put(-1, -1, [b"p0"], None)
    await put(A, 0, [b"a1", b"a2"], "ta")
    await put(B, 0, [b"b1"], "tb")
    await put(-1, -1, [b"p1"], None)
    await put(B, 1, [b"b2"], "tb")
    assert await write_markers(node.port, [(A, 0, True, 0, [("t", 0)])]) == {(A, "t", 0): 0}
    assert await write_markers(node.port, [(B, 0, False, 0, [("t", 0)])]) == {(B, "t", 0): 0}
    await put(C, 0, [b"c1"], "tc")
    await put(-1, -1, [b"p2"], None)
    yield node
    await coord.stop()


def _confluent(bootstrap: str, isolation: str, expect: int) -> list[bytes]:
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{isolation}-{time.monotonic_ns()}",
                  "isolation.level": isolation, "enable.partition.eof": True, "enable.auto.commit": False,
                  "fetch.wait.max.ms": 50})
    c.assign([TopicPartition("t", 0, 0)])
    out: list[bytes] = []
    eof = 0
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                if eof and len(out) >= expect:
                    break
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    eof += 1
                    if len(out) >= expect:
                        break
                    continue
                raise AssertionError(m.error())
            out.append(m.value())
        time.sleep(0.3)  # anything beyond what we expect would arrive now
        while (m := c.poll(0.2)) is not None:
            if not m.error():
                out.append(m.value())
    finally:
        c.close()
    return out


def _kafka_python(bootstrap: str, isolation: str) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False,
                      consumer_timeout_ms=2000, fetch_max_wait_ms=50)
    c.assign([TopicPartition("t", 0)])
    c.seek(TopicPartition("t", 0), 0)
    try:
        return [m.value for m in c]
    finally:
        c.close()


async def _aiokafka(bootstrap: str, isolation: str) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False,
                         fetch_max_wait_ms=50)
    await c.start()
    try:
        tp = TopicPartition("t", 0)
        c.assign([tp])
        c.seek(tp, 0)
        out: list[bytes] = []
        while True:
            batch = await c.getmany(tp, timeout_ms=1000)
            if not batch:
                return out
            out += [m.value for m in batch[tp]]
    finally:
        await c.stop()


def bootstrap(node) -> str:
    return f"127.0.0.1:{node.port}"


async def test_confluent_kafka_read_committed(txn_log):
    node = txn_log
    assert await asyncio.to_thread(_confluent, bootstrap(node), "read_committed", 4) == COMMITTED
    got = await asyncio.to_thread(_confluent, bootstrap(node), "read_uncommitted", 8)
    assert got == [b"p0", b"a1", b"a2", b"b1", b"p1", b"b2", b"c1", b"p2"]
    assert await write_markers(node.port, [(C, 0, True, 0, [("t", 0)])]) == {(C, "t", 0): 0}
    assert await asyncio.to_thread(_confluent, bootstrap(node), "read_committed", 6) == COMMITTED + [b"c1", b"p2"]


async def test_kafka_python_read_committed(txn_log):
    node = txn_log
    assert await asyncio.to_thread(_kafka_python, bootstrap(node), "read_committed") == COMMITTED
    assert await write_markers(node.port, [(C, 0, False, 0, [("t", 0)])]) == {(C, "t", 0): 0}
    assert await asyncio.to_thread(_kafka_python, bootstrap(node), "read_committed") == COMMITTED + [b"p2"]


async def test_aiokafka_read_committed(txn_log):
    node = txn_log
    assert await _aiokafka(bootstrap(node), "read_committed") == COMMITTED
    assert await write_markers(node.port, [(C, 0, True, 0, [("t", 0)])]) == {(C, "t", 0): 0}
    assert await _aiokafka(bootstrap(node), "read_committed") == COMMITTED + [b"c1", b"p2"]
