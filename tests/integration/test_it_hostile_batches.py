"""Hostile record batches against a memory-limited node (issue 18, item 1).

Each batch is CRC-valid and sent on a raw socket: a 77-byte batch claiming 2^31-1 records,
compressed batches under 1 MB that expand to 30 GiB (zstd), 256 MiB (gzip) or 200 MiB (lz4), snappy
length lies. Produce rejects every one with CORRUPT_MESSAGE / INVALID_RECORD, whatever the
topic (plain, compacted, recompressing), and the node's peak RSS stays far from what
decoding them would take. Batches already on disk (written with the log API, bypassing
produce): ListOffsets by timestamp answers CORRUPT_MESSAGE, the log cleaner logs and keeps
them while compacting the rest, the group coordinator skips them and loads the rest. After
each, the node is alive and a canary client produces and consumes.
"""

from __future__ import annotations

import functools
import socket
import struct
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from conftest import MOCK, create_topic
from krafty_node import KraftyNode, _recv_exact, start_or_fail, wait_until

from broker.protocol import codec
from common.errors import ErrorCode

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "log"))  # the hand-built batches
from hostile import (  # noqa: E402
    GZIP,
    LZ4,
    SNAPPY,
    ZSTD,
    batch,
    count_lie,
    gzip_bomb,
    lz4_bomb,
    snappy_length_lie,
    xerial,
    zstd_rle_bomb,
)

pytestmark = pytest.mark.krafty_only

MEMORY_LIMIT_MB = 1536
PEAK_RSS_MB = 400  # an idle node is ~120 MB resident; decoding any of these batches takes GBs


@pytest.fixture(scope="module")
def hnode(tmp_path_factory):
    if MOCK:
        pytest.skip("KRAFTY_IT_TARGET=mock: hostile batches are tested against krafty")
    node = start_or_fail(KraftyNode(tmp_path_factory.mktemp("hostile"), memory_limit_mb=MEMORY_LIMIT_MB,
                                    extra_properties={"log.cleaner.backoff.ms": "300"}))
    yield node
    node.close()


def call(node: KraftyNode, api_key: int, version: int, body: bytes, timeout: float = 30):
    with socket.create_connection((node.host, node.port), timeout=timeout) as s:
        flex = codec.is_flexible(api_key, version)
        hdr = struct.pack(">hhih", api_key, version, 1, 4) + b"test" + (b"\x00" if flex else b"")
        s.sendall(struct.pack(">i", len(hdr) + len(body)) + hdr + body)
        (size,) = struct.unpack(">i", _recv_exact(s, 4))
        raw = _recv_exact(s, size)
    obj, _ = codec._reader(codec.response_type(api_key, version))(raw, 5 if flex else 4)
    return obj


def produce_raw(node: KraftyNode, topic: str, records: bytes):
    """ProduceRequest v8 (acks=1) with one partition's records; the partition response."""
    body = codec.encode(codec.build(codec.request_type(0, 8), {
        "transactional_id": None, "acks": 1, "timeout": 30_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]}))
    resp = call(node, 0, 8, body)
    return resp.responses[0].partition_responses[0]


def list_offsets_by_time(node: KraftyNode, topic: str, ts: int):
    body = codec.encode(codec.build(codec.request_type(2, 7), {
        "replica_id": -1, "isolation_level": 0,
        "topics": [{"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                                   "timestamp": ts}]}]}))
    return call(node, 2, 7, body).topics[0].partitions[0]


def reset_peak_rss(node: KraftyNode) -> None:
    Path(f"/proc/{node.proc.pid}/clear_refs").write_text("5")  # resets VmHWM


def peak_rss_mb(node: KraftyNode) -> float:
    for line in Path(f"/proc/{node.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def assert_alive(node: KraftyNode) -> None:
    """The node runs, stayed small, and a canary client still produces and consumes."""
    assert node.running, f"the node died:\n{node.log_tail()}"
    peak = peak_rss_mb(node)
    assert peak < PEAK_RSS_MB, f"peak RSS {peak:.0f} MB"
    canary = f"canary-{uuid.uuid4().hex[:6]}"
    create_topic(node, canary)
    p = Producer({"bootstrap.servers": node.bootstrap, "message.timeout.ms": 20_000})
    p.produce(canary, b"alive", partition=0)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": f"canary-{uuid.uuid4().hex[:6]}"})
    try:
        c.assign([TopicPartition(canary, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                assert m.value() == b"alive"
                return
        raise AssertionError("the canary record was not consumed")
    finally:
        c.close()


HOSTILE = {
    "count-lie-77-bytes": lambda: count_lie(),
    "zstd-30GiB": lambda: batch(zstd_rle_bomb(30 << 30), 1000, codec=ZSTD),
    "zstd-30GiB-content-size": lambda: batch(zstd_rle_bomb(30 << 30, content_size=30 << 30), 1000, codec=ZSTD),
    "gzip-256MiB": lambda: batch(gzip_bomb(256 << 20), 1000, codec=GZIP),
    "lz4-200MiB": lambda: batch(lz4_bomb(200 << 20), 1000, codec=LZ4),
    "snappy-length-lie": lambda: batch(xerial(snappy_length_lie(30 << 30)), 1000, codec=SNAPPY),
    "zstd-count-lie": lambda: batch(__import__("zstandard").ZstdCompressor().compress(b"\x01" * 64), 2**31 - 1,
                                    codec=ZSTD),
}
TOPICS = {"plain": {}, "compacted": {"cleanup.policy": "compact"}, "recompressing": {"compression.type": "lz4"}}


@functools.cache
def hostile_batches() -> dict[str, bytes]:
    return {name: make() for name, make in HOSTILE.items()}


@pytest.mark.parametrize("kind", list(TOPICS))
def test_hostile_batches_are_rejected_on_produce(hnode, kind):
    topic = f"hostile-{kind}-{uuid.uuid4().hex[:6]}"
    create_topic(hnode, topic, 1, TOPICS[kind])
    batches = hostile_batches()
    reset_peak_rss(hnode)
    for name, b in batches.items():
        assert len(b) < 1 << 20, name
        t0 = time.monotonic()
        r = produce_raw(hnode, topic, b)
        assert r.error_code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD), (name, r)
        assert time.monotonic() - t0 < 10, name
    # nothing was stored, and ListOffsets by timestamp has nothing hostile to decode
    r = list_offsets_by_time(hnode, topic, int(time.time() * 1000) - 3_600_000)
    assert (r.error_code, r.offset) == (0, -1)
    assert_alive(hnode)


def _write_behind_produce(node: KraftyNode, topic: str, batches: list[bytes], then: list[bytes] = ()) -> None:
    """Append ``batches`` to partition 0 of ``topic`` with the log API (no produce validation)
    while the node is stopped, roll, append ``then``: the batches land in a closed segment."""
    from broker.log import Log, LogConfig, parse_batches

    lg = Log.open(str(node.data_dir), topic, 0, LogConfig(cleanup_policy="compact"),
                  now_ms=int(time.time() * 1000))
    try:
        epoch = lg.leader_epoch_cache.latest_epoch() or 0
        for b in batches:
            buf = bytearray(b)
            lg.append_as_leader(buf, parse_batches(buf), epoch, int(time.time() * 1000))
        lg.roll(int(time.time() * 1000))
        for b in then:
            buf = bytearray(b)
            lg.append_as_leader(buf, parse_batches(buf), epoch, int(time.time() * 1000))
        lg.flush()
    finally:
        lg.close()


def _keyed(n: int, key: bytes) -> bytes:
    from broker.log.batch import Record, build_batch
    now = int(time.time() * 1000)
    return bytes(build_batch([Record(i, now, key, b"v%d" % i, []) for i in range(n)]))


def test_hostile_batches_on_disk(tmp_path):
    """ListOffsets answers CORRUPT_MESSAGE, the cleaner keeps the batch and compacts the rest of
    that log and every other log, the group coordinator skips it and loads the rest."""
    if MOCK:
        pytest.skip("KRAFTY_IT_TARGET=mock")
    node = start_or_fail(KraftyNode(tmp_path / "n", memory_limit_mb=MEMORY_LIMIT_MB, extra_properties={
        "log.cleaner.backoff.ms": "300", "offsets.topic.num.partitions": "1",
        "offsets.topic.replication.factor": "1", "group.initial.rebalance.delay.ms": "0"}))
    try:
        create_topic(node, "plain", 1)
        create_topic(node, "bad-compacted", 1, {"cleanup.policy": "compact", "segment.bytes": "4096"})
        create_topic(node, "good-compacted", 1, {"cleanup.policy": "compact", "segment.bytes": "4096"})
        p = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 0})
        for i in range(3):
            p.produce("plain", b"before-%d" % i, partition=0)
        for i in range(60):  # many versions of few keys: compaction has much to remove
            p.produce("good-compacted", b"x" * 100, key=b"k%d" % (i % 3), partition=0)
            p.produce("bad-compacted", b"x" * 100, key=b"k%d" % (i % 3), partition=0)
            assert p.flush(30) == 0
        c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "g1", "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition("plain", 0, 2)], asynchronous=False)
        c.close()
        node.stop()

        future = int(time.time() * 1000) + 600_000  # where ListOffsets by timestamp must decode it
        _write_behind_produce(node, "plain", [count_lie(base_timestamp=future)], [_keyed(1, b"after")])
        _write_behind_produce(node, "bad-compacted", [count_lie(), batch(zstd_rle_bomb(30 << 30), 9, codec=ZSTD)],
                              [_keyed(20, b"k0"), _keyed(1, b"tail")])
        _write_behind_produce(node, "__consumer_offsets", [count_lie()])
        node.start()
        reset_peak_rss(node)

        # ListOffsets by timestamp reaches the count-lie batch: an error code, not a crash
        t0 = time.monotonic()
        r = list_offsets_by_time(node, "plain", 0)
        assert r.error_code == 0 and r.offset == 0, "the first batch answers"
        r = list_offsets_by_time(node, "plain", future - 1000)
        assert r.error_code == ErrorCode.CORRUPT_MESSAGE, r
        assert time.monotonic() - t0 < 10
        wait_until(lambda: "cannot decode the record batch at position" in node.log_path.read_text(), 10,
                   message="ListOffsets logs the undecodable batch")

        # the cleaner names the batches it cannot decode, keeps them, and compacts everything else
        def log_mentions(what: str) -> bool:
            return what in node.log_path.read_text()

        wait_until(lambda: log_mentions("the log cleaner cannot decode the record batch at position")
                   and log_mentions("bad-compacted-0/00000000000000000"), 30, message="the cleaner's error")

        from test_it_compaction import _read_all
        wait_until(lambda: len(_read_all(node.bootstrap, "good-compacted", 60)[0]) < 60, 30,
                   message="good-compacted compacted")
        wait_until(lambda: log_mentions("cleaned bad-compacted-0"), 30, message="bad-compacted compacted too")

        # the group coordinator skipped the batch and loaded the commit made before it
        c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "g1"})
        try:
            [tp] = c.committed([TopicPartition("plain", 0)], timeout=20)
            assert tp.offset == 2
        finally:
            c.close()
        assert log_mentions("__consumer_offsets-0: skipping the undecodable record batch")
        assert_alive(node)
    finally:
        node.close()
