"""Storage faults on a real node with a real client (issue 18, items 6 and 7).

- A tail torn after a clean stop (the page cache lost with power) must cost only the torn
  batch: everything before it stays, new produces continue right after it, and a later
  kill -9 recovery keeps them.
- A batchLength overwritten in a closed segment must give a consumer an error promptly
  (not a silent stall) and put the file and position in the node's log.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest
from clients import Confluent, Rec
from conftest import create_topic

from broker.log import parse_batches

pytestmark = pytest.mark.krafty_only

CK = Confluent()
MEMORY_MB = 1536


def batches(path: Path):
    return parse_batches(path.read_bytes())


def segment_files(node, topic: str) -> list[Path]:
    return sorted((node.data_dir / f"{topic}-0").glob("*.log"))


def consume(bootstrap: str, topic: str, n: int, timeout: float = 30) -> list:
    got, _extra = _reader(bootstrap, topic, n, timeout)
    return got


def _reader(bootstrap, topic, n, timeout):
    c = CK.consumer(bootstrap, topic, 0, "earliest")
    try:
        return c.read(n, timeout), c.read_extra(wait=1.0)
    finally:
        c.close()


def test_tail_torn_after_clean_stop_costs_only_the_torn_batch(node_factory, topic):
    node = node_factory(memory_limit_mb=MEMORY_MB)
    create_topic(node, topic, 1)
    first = [Rec(b"k", b"before #%d" % i) for i in range(311)]
    assert CK.produce(node.bootstrap, topic, first, acks="all") == list(range(311))
    assert CK.produce(node.bootstrap, topic, [Rec(b"k", b"torn")], acks="all") == [311]
    assert node.stop() == 0  # clean: flushes everything, writes the clean-shutdown marker
    seg = segment_files(node, topic)[-1]
    last = batches(seg)[-1]
    assert last.base_offset == 311 and last.records_count == 1
    with open(seg, "r+b") as f:  # power lost after the clean stop: the last batch cut inside its header
        f.truncate(last.pos + 30)
    node.start()
    got = consume(node.bootstrap, topic, 311)
    assert [r.value for r in got] == [r.value for r in first], "records before the tear are all there"
    assert [r.offset for r in got] == list(range(311))
    after = [Rec(b"k", b"after #%d" % i) for i in range(1000)]
    assert CK.produce(node.bootstrap, topic, after, acks="all") == list(range(311, 1311)), "fresh offsets"
    node.kill()  # and a kill -9 recovery afterwards keeps all of it
    node.start()
    got = consume(node.bootstrap, topic, 1311)
    assert [r.value for r in got] == [r.value for r in first + after]


def test_overwritten_batch_length_in_a_closed_segment_gives_the_consumer_an_error(node_factory, topic):
    node = node_factory(memory_limit_mb=MEMORY_MB)
    create_topic(node, topic, 1, {"segment.bytes": "16384"})
    recs = [Rec(b"k%d" % i, b"x" * 400 + b"#%d" % i) for i in range(200)]
    assert CK.produce(node.bootstrap, topic, recs, acks="all", **{"batch.num.messages": 5}) == list(range(200))
    segs = segment_files(node, topic)
    assert len(segs) >= 3
    victim_seg = segs[1]
    victim = batches(victim_seg)[2]
    with open(victim_seg, "r+b") as f:  # a bad block: the batch length now reads 7
        f.seek(victim.pos + 8)
        f.write(struct.pack(">i", 7))

    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "storage-faults", "enable.auto.commit": False,
                  "fetch.error.backoff.ms": 100})
    c.assign([TopicPartition(topic, 0, 0)])
    values, error = [], None
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < 20 and error is None:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                error = m.error()
            else:
                values.append(m.offset())
    finally:
        c.close()
    assert error is not None, f"no error within 20 s; read offsets up to {values[-1] if values else None}"
    assert error.code() == 2, f"CORRUPT_MESSAGE expected, got {error}"  # KafkaError.CORRUPT_MESSAGE
    assert time.monotonic() - t0 < 10, "the error must come promptly"
    assert values == list(range(victim.base_offset)), "everything before the damaged batch was delivered"
    log = node.log_path.read_text(errors="replace")
    assert str(victim_seg) in log and f"byte {victim.pos}" in log, node.log_tail()
    assert node.running
