"""Transactional data survives kill -9 of a real krafty node: after the restart the open
transaction is still open (the last stable offset stays at its first offset), the aborted one
is still hidden from read_committed consumers (its .txnindex entry rebuilt from the log), and
a marker written afterwards completes the open one. The batches and markers are written raw,
as producers and a transaction coordinator would (partition verification is off: no
coordinator runs here)."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest
from conftest import create_topic

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.protocol.txn_helpers import list_latest, produce, txn_batch, write_markers  # noqa: E402

pytestmark = pytest.mark.krafty_only

A, B = 9001, 9002


def read_committed(bootstrap: str, topic: str, expect: int, timeout: float = 30) -> list[bytes]:
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rc-{time.monotonic_ns()}",
                  "isolation.level": "read_committed", "enable.partition.eof": True, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF and len(out) >= expect:
                    break
                continue
            out.append(m.value())
        while (m := c.poll(1.0)) is not None:  # nothing more may come
            if not m.error():
                out.append(m.value())
    finally:
        c.close()
    return out


def test_open_and_aborted_transactions_survive_kill_9(node_factory, topic):
    node = node_factory(extra_properties={"transaction.partition.verification.enable": "false"})
    create_topic(node, topic, 1, {"segment.bytes": "600"})  # several segments, so several .txnindex files

    async def write() -> None:
        for i in range(3):
            assert (await produce(node.port, topic, txn_batch(-1, -1, -1, [b"p%d" % i]), txn_id=None)).error_code == 0
            assert (await produce(node.port, topic, txn_batch(A, 0, i, [b"a%d" % i + b"." * 200]), txn_id="ta")
                    ).error_code == 0
        assert await write_markers(node.port, [(A, 0, False, 0, [(topic, 0)])]) == {(A, topic, 0): 0}
        assert (await produce(node.port, topic, txn_batch(B, 0, 0, [b"b0"]), txn_id="tb")).error_code == 0
        assert (await produce(node.port, topic, txn_batch(-1, -1, -1, [b"p3"]), txn_id=None)).error_code == 0

    asyncio.run(write())
    committed = [b"p0", b"p1", b"p2"]
    assert read_committed(node.bootstrap, topic, 3) == committed
    lso = asyncio.run(list_latest(node.port, topic, 1))
    assert lso == 7  # B's first offset: 6 data batches and A's marker before it

    node.restart(graceful=False)  # kill -9: nothing flushed, no snapshot, no clean-shutdown marker
    assert asyncio.run(list_latest(node.port, topic, 1)) == lso
    assert read_committed(node.bootstrap, topic, 3) == committed
    assert asyncio.run(write_markers(node.port, [(B, 0, True, 0, [(topic, 0)])])) == {(B, topic, 0): 0}
    assert read_committed(node.bootstrap, topic, 5) == committed + [b"b0", b"p3"]
    assert asyncio.run(list_latest(node.port, topic, 1)) == asyncio.run(list_latest(node.port, topic, 0)) == 10
