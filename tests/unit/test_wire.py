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
