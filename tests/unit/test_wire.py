import struct
import uuid

import pytest

from broker.apis import wire
from broker.protocol import codec
from broker.server import FileRegion


def _classic_produce(topic: bytes, records: bytes) -> bytes:
    return (struct.pack(">h", -1) + struct.pack(">hi", -1, 3000) + struct.pack(">i", 1)
            + struct.pack(">h", len(topic)) + topic + struct.pack(">i", 1) + struct.pack(">i", 7)
            + struct.pack(">i", len(records)) + records)


def test_produce_parse_classic_gives_writable_view_into_the_frame():
    frame = bytearray(_classic_produce(b"t", b"RECORDS"))
    req = wire.parse_produce(memoryview(frame), 8)
    assert (req.acks, req.timeout_ms, req.topics[0][0]) == (-1, 3000, "t")
    view = req.topics[0][1][0].records
    view[0:1] = b"X"
    assert b"XECORDS" in frame


def test_produce_parse_flexible():
    body = (b"\x00" + struct.pack(">hi", 1, 100) + b"\x02" + b"\x02t" + b"\x02" + struct.pack(">i", 0)
            + b"\x04abc" + b"\x00" + b"\x00" + b"\x00")
    req = wire.parse_produce(memoryview(bytearray(body)), 9)
    assert req.transactional_id is None and req.acks == 1
    assert bytes(req.topics[0][1][0].records) == b"abc"


@pytest.mark.parametrize("cut", [1, 5, 12, 20])
def test_truncated_produce_is_a_framing_error(cut):
    frame = bytearray(_classic_produce(b"topic", b"RECORDS")[:-cut])
    with pytest.raises(codec.FramingError):
        wire.parse_produce(memoryview(frame), 8)


@pytest.mark.parametrize("version", [4, 11, 12, 13, 16, 17])
def test_fetch_response_encoding_matches_generated_codec(version, tmp_path):
    tid = uuid.uuid4()
    data = b"0123456789"
    parts = [wire.FetchPartitionResult(0, 0, 100, 100, 5, data), wire.FetchPartitionResult(1, 6, -1, -1, -1, None)]
    chunks = wire.encode_fetch_response(version, [("topic", tid, parts)])
    body = b"".join(bytes(c) for c in chunks)
    decoded, size = codec._reader(codec.response_type(1, version))(body, 0)
    assert size == len(body)
    t = decoded.responses[0]
    assert (t.topic_id == tid) if version >= 13 else (t.topic == "topic")
    p0, p1 = t.partitions
    assert (p0.high_watermark, bytes(p0.records)) == (100, data)
    assert int(p1.error_code) == 6


def test_fetch_response_with_file_region_has_correct_total_length():
    chunks = wire.encode_fetch_response(12, [("t", uuid.uuid4(), [
        wire.FetchPartitionResult(0, 0, 1, 1, 0, FileRegion(3, 0, 50))])])
    assert any(isinstance(c, FileRegion) for c in chunks)


def test_request_header_parsing_and_limits():
    hdr = struct.pack(">hhih", 18, 3, 42, 3) + b"cli" + b"\x00"
    h = codec.parse_request_header(hdr)
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id, h.size) == (18, 3, 42, "cli", 14)
    with pytest.raises(codec.FramingError):
        codec.parse_request_header(b"\x00\x01")
    with pytest.raises(codec.FramingError):
        codec.parse_request_header(struct.pack(">hhih", 3, 1, 1, 50) + b"x")


def _produce_results(rng, version: int) -> tuple[dict, int]:
    """Random per-partition answers as the Produce handler makes them."""
    results = {}
    for t in range(rng.randrange(1, 4)):
        parts = []
        for p in range(rng.randrange(1, 4)):
            ok = rng.random() < 0.5
            r = {"index": p, "error_code": 0 if ok else rng.choice([6, 87, 2, 19]),
                 "base_offset": rng.randrange(0, 1 << 40) if ok else -1,
                 "log_append_time": rng.choice([-1, 1_700_000_000_000 + rng.randrange(1000)]),
                 "log_start_offset": rng.choice([-1, rng.randrange(0, 1 << 30)]), "record_errors": []}
            if not ok:
                r["error_message"] = rng.choice([None, "", "bad \u00e9 record", "x" * 40_000])
                if rng.random() < 0.5:
                    r["record_errors"] = [{"batch_index": i, "batch_index_error_message": rng.choice([None, "m"])}
                                          for i in range(rng.randrange(1, 3))]
                if r["error_code"] == 6:
                    r["current_leader"] = rng.choice([{"leader_id": 3, "leader_epoch": 7},
                                                      {"leader_id": -1, "leader_epoch": -1}])
            parts.append(r)
        results[rng.choice(["t", "topic-\u00e9", "x" * 200]) + str(t)] = parts
    return results, rng.choice([0, 250])


@pytest.mark.parametrize("version", range(0, 13))
def test_produce_response_encoding_matches_generated_codec(version):
    import random

    rng = random.Random(version)
    for _ in range(200):
        results, throttle = _produce_results(rng, version)
        data = {"responses": [{"name": n, "partition_responses": ps} for n, ps in results.items()],
                "throttle_time": throttle}
        want = codec.encode_response(0, version, codec.build_response(0, version, data))
        assert wire.encode_produce_response(version, results, throttle) == want


def _fetch_request(rng, version: int) -> dict:
    def part(i):
        return {"partition": i, "current_leader_epoch": rng.randrange(-1, 9), "fetch_offset": rng.randrange(1 << 40),
                "last_fetched_epoch": rng.randrange(-1, 9), "log_start_offset": rng.randrange(-1, 1 << 30),
                "partition_max_bytes": rng.randrange(1 << 20), "replica_directory_id": uuid.UUID(int=rng.getrandbits(128))}
    topics = [{"topic": f"t{t}", "topic_id": uuid.UUID(int=rng.getrandbits(128)),
               "partitions": [part(i) for i in range(rng.randrange(0, 3))]} for t in range(rng.randrange(0, 3))]
    forgotten = [{"topic": f"f{t}", "topic_id": uuid.UUID(int=rng.getrandbits(128)),
                  "partitions": [rng.randrange(100) for _ in range(rng.randrange(0, 3))]} for t in range(rng.randrange(0, 2))]
    replica = rng.choice([-1, 2])
    return {"cluster_id": rng.choice([None, "c1"]), "replica_id": replica,
            "replica_state": {"replica_id": replica, "replica_epoch": rng.randrange(-1, 5)},
            "max_wait": rng.randrange(0, 1000), "min_bytes": rng.randrange(0, 100), "max_bytes": rng.randrange(1 << 30),
            "isolation_level": rng.choice([0, 1]), "session_id": rng.randrange(0, 1000), "session_epoch": rng.randrange(-1, 9),
            "topics": topics, "forgotten_topics_data": forgotten, "rack_id": rng.choice(["", "rack-a"])}


@pytest.mark.parametrize("version", range(4, 18))
def test_fetch_request_parsing_matches_generated_codec(version):
    """parse_fetch reads what the generated codec writes, field for field."""
    import random

    rng = random.Random(version)
    for _ in range(100):
        data = _fetch_request(rng, version)
        cls = codec.request_type(1, version)
        body = codec.encode(codec.build(cls, data))
        want = codec.decode_request(1, version, body, 0)
        got = wire.parse_fetch(memoryview(body), version)
        replica = want.replica_state.replica_id if version >= 15 else want.replica_id
        assert (got.replica_id, got.max_wait_ms, got.min_bytes, got.max_bytes, got.isolation_level) == (
            replica, int(want.max_wait.total_seconds() * 1000), want.min_bytes, want.max_bytes, want.isolation_level)
        assert (got.session_id, got.session_epoch, got.rack_id) == (
            getattr(want, "session_id", 0), getattr(want, "session_epoch", -1), getattr(want, "rack_id", ""))
        assert [(t.topic_id if version >= 13 else t.topic,
                 [(p.partition, p.current_leader_epoch, p.fetch_offset, p.last_fetched_epoch, p.log_start_offset,
                   p.partition_max_bytes) for p in t.partitions]) for t in got.topics] == [
            (t.topic_id if version >= 13 else t.topic,
             [(p.partition, getattr(p, "current_leader_epoch", -1), p.fetch_offset, getattr(p, "last_fetched_epoch", -1),
               getattr(p, "log_start_offset", -1), p.partition_max_bytes) for p in t.partitions]) for t in want.topics]
        assert [(f.topic_id if version >= 13 else f.topic, f.partitions) for f in got.forgotten_topics_data] == [
            (f.topic_id if version >= 13 else f.topic, list(f.partitions))
            for f in getattr(want, "forgotten_topics_data", ())]
        for cut in (1, len(body) // 2, len(body) - 1):
            if cut < len(body):
                with pytest.raises((codec.FramingError, UnicodeDecodeError)):
                    wire.parse_fetch(memoryview(body[:cut]), version)

