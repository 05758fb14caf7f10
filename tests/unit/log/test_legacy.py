"""Magic 0/1 message sets (seeds 001 and 004): produce data converted to one v2 batch with Kafka
3.x's checks and error codes, and v2 batches converted down for Fetch v0-3. Sets are built with
kafka-python's own legacy record builder (an independent encoder) or, for the malformed ones, by
hand; what the down-conversion writes is read back with kafka-python's legacy reader."""

from __future__ import annotations

import gzip
import struct
import zlib

import pytest
import xxhash
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from broker.log import LogConfig, legacy
from broker.log.batch import (
    Record,
    build_batch,
    build_end_txn_marker,
    decode_records,
    unpack_header,
    validate_produce_batches,
)
from broker.log.validator import RecordValidationError, validate_batches
from common.errors import ErrorCode, KafkaError

NOW = 1_700_000_000_000
NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4


def cfg(**kw) -> LogConfig:
    return LogConfig.from_topic_configs({k.replace("_", "."): v for k, v in kw.items()})


def kp_set(magic: int, codec: int, n: int = 5, ts: int = NOW, keys=True) -> bytes:
    """A message set built by kafka-python (what it sends in Produce v0-2)."""
    b = LegacyRecordBatchBuilder(magic, codec, 1 << 20)
    for i in range(n):
        b.append(i, ts + i if magic else None, b"k%d" % i if keys else None, b"v%d" % i)
    return bytes(b.build())


def message(offset: int, magic: int, attributes: int = 0, ts: int = NOW, key: bytes | None = b"k",
            value: bytes | None = b"v", crc: int | None = None) -> bytes:
    """One entry of a message set, by hand (seed 001's on-disk format)."""
    body = struct.pack(">bb", magic, attributes) + (struct.pack(">q", ts) if magic else b"")
    body += (b"\xff\xff\xff\xff" if key is None else struct.pack(">i", len(key)) + key)
    body += (b"\xff\xff\xff\xff" if value is None else struct.pack(">i", len(value)) + value)
    c = zlib.crc32(body) if crc is None else crc
    return struct.pack(">qiI", offset, len(body) + 4, c) + body


def wrapper(magic: int, inner: bytes, offset: int = 0, codec: int = GZIP, attributes: int = 0) -> bytes:
    return message(offset, magic, codec | attributes, key=None, value=gzip.compress(inner))


def convert(records: bytes, config: LogConfig | None = None) -> list[Record]:
    """Produce: to_v2, then the v2 checks every batch gets; the records appended."""
    config = config or cfg()
    batch = legacy.to_v2(records, config, "t-0")
    headers = validate_produce_batches(batch, config.max_message_bytes)
    buf, headers = validate_batches(batch, headers, config, NOW, "t-0")
    assert len(headers) == 1
    return decode_records(bytes(buf))


def refused(records: bytes, config: LogConfig | None = None) -> KafkaError:
    with pytest.raises(KafkaError) as e:
        convert(records, config)
    return e.value


# --- produce ------------------------------------------------------------------------------

@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [NONE, GZIP, SNAPPY, LZ4])
def test_message_set_becomes_one_v2_batch_with_its_codec(magic, codec):
    data = kp_set(magic, codec)
    batch = legacy.to_v2(data, cfg(), "t-0")
    h = unpack_header(batch, 0)
    assert (h.magic, h.compression, h.records_count, h.producer_id) == (2, codec, 5, -1)
    recs = convert(data)
    assert [(r.offset, r.key, r.value) for r in recs] == [(i, b"k%d" % i, b"v%d" % i) for i in range(5)]
    # magic 1 keeps each message's CreateTime; magic 0 has none (-1)
    assert [r.timestamp for r in recs] == ([NOW + i for i in range(5)] if magic else [-1] * 5)


def test_topic_compression_type_decides_the_codec_of_the_converted_batch():
    batch = legacy.to_v2(kp_set(1, GZIP), cfg(compression_type="lz4"), "t-0")
    assert unpack_header(batch, 0).compression == LZ4
    batch = legacy.to_v2(kp_set(1, NONE), cfg(compression_type="snappy"), "t-0")
    assert unpack_header(batch, 0).compression == SNAPPY


def test_magic0_lz4_wrapper_with_kafka_08_header_checksum_is_read():
    data = kp_set(0, LZ4)  # kafka-python writes the header checksum over the frame magic too
    frame = legacy._message(memoryview(data), 0, struct.unpack_from(">i", data, 8)[0], "t").value
    assert frame[6] == (xxhash.xxh32(bytes(frame[0:6])).intdigest() >> 8) & 0xFF
    assert [r.value for r in convert(data)] == [b"v%d" % i for i in range(5)]


def test_magic1_lz4_wrapper_with_a_bad_header_checksum_is_corrupt():
    data = bytearray(kp_set(1, LZ4))
    pos = len(data) - len(bytes(legacy._message(memoryview(data), 0, struct.unpack_from(">i", data, 8)[0],
                                                "t").value))
    data[pos + 6] ^= 0xFF
    data[12:16] = struct.pack(">I", zlib.crc32(data[16:]))
    assert refused(bytes(data)).code == ErrorCode.CORRUPT_MESSAGE


def test_v1_inner_offsets_are_relative_and_the_wrapper_names_the_last():
    inner = b"".join(message(i, 1, key=b"k%d" % i) for i in range(3))
    assert [r.key for r in convert(wrapper(1, inner, offset=2))] == [b"k0", b"k1", b"k2"]
    assert [r.key for r in convert(wrapper(1, inner, offset=0))] == [b"k0", b"k1", b"k2"]  # librdkafka sends 0
    e = refused(wrapper(1, inner, offset=1))
    assert e.code == ErrorCode.INVALID_RECORD and "wrapper offset '1' is less than the last inner" in e.message


def test_corrupt_crc_of_a_message_is_corrupt_message():
    good = message(0, 1)
    assert refused(good + message(1, 1, crc=12345)).code == ErrorCode.CORRUPT_MESSAGE
    flipped = bytearray(kp_set(0, NONE))
    flipped[-1] ^= 1  # the last value byte
    e = refused(bytes(flipped))
    assert e.code == ErrorCode.CORRUPT_MESSAGE and "Record is corrupt (stored crc = " in e.message


def test_corrupt_crc_inside_a_compressed_wrapper_is_corrupt_message():
    inner = message(0, 1) + message(1, 1, crc=7)
    assert refused(wrapper(1, inner, offset=1)).code == ErrorCode.CORRUPT_MESSAGE


def test_cut_off_set_keeps_its_whole_messages_and_drops_the_partial_one():
    data = kp_set(1, NONE, n=3)
    recs = convert(data[:-5])
    assert [r.value for r in recs] == [b"v0", b"v1"]
    assert [r.value for r in convert(data[:len(data) - 1])] == [b"v0", b"v1"]


def test_set_with_no_whole_message_is_invalid_record():
    data = kp_set(1, NONE, n=1)
    for cut in (13, 17, len(data) - 1):
        assert refused(data[:cut]).code == ErrorCode.INVALID_RECORD


def test_cut_off_compressed_wrapper_is_dropped_whole():
    data = kp_set(1, GZIP, n=50)
    assert refused(data[:-3]).code == ErrorCode.INVALID_RECORD  # its only entry is partial


def test_entry_smaller_than_a_message_or_of_unknown_magic_is_corrupt():
    tiny = struct.pack(">qi", 0, 13) + b"\x00" * 13
    e = refused(message(0, 1) + tiny)
    assert e.code == ErrorCode.CORRUPT_MESSAGE and "less than the minimum record overhead (14)" in e.message
    bad_magic = bytearray(message(0, 1) + message(1, 1))
    bad_magic[len(message(0, 1)) + 16] = 7
    assert refused(bytes(bad_magic)).code == ErrorCode.CORRUPT_MESSAGE


def test_key_or_value_running_past_the_message_is_corrupt():
    m = bytearray(message(0, 1, key=b"kk", value=b"vv"))
    struct.pack_into(">i", m, 12 + 4 + 2 + 8, 1000)  # the key length
    m[12:16] = struct.pack(">I", zlib.crc32(m[16:]))
    assert refused(bytes(m)).code == ErrorCode.CORRUPT_MESSAGE


def test_more_than_one_compressed_wrapper_is_invalid_record():
    one = wrapper(1, message(0, 1))
    e = refused(one + one)
    assert e.code == ErrorCode.INVALID_RECORD and "more than one batch" in e.message
    assert refused(message(0, 1) + one).code == ErrorCode.INVALID_RECORD


def test_mixed_magics_are_invalid_record():
    assert refused(message(0, 0) + message(1, 1)).code == ErrorCode.INVALID_RECORD
    e = refused(wrapper(1, message(0, 0), offset=0))
    assert e.code == ErrorCode.INVALID_RECORD and "does not match outer magic 1" in e.message


def test_compressed_message_inside_a_wrapper_is_invalid_record():
    nested = wrapper(1, message(0, 1))
    assert refused(wrapper(1, nested)).code == ErrorCode.INVALID_RECORD


def test_empty_or_null_wrapper_is_invalid_record():
    assert refused(message(0, 1, GZIP, key=None, value=gzip.compress(b""))).code == ErrorCode.INVALID_RECORD
    assert refused(message(0, 1, GZIP, key=None, value=None)).code == ErrorCode.INVALID_RECORD


def test_zstd_wrapper_is_invalid_record():
    assert refused(message(0, 1, ZSTD, key=None, value=b"\x28\xb5\x2f\xfd")).code == ErrorCode.INVALID_RECORD


def test_producer_claiming_log_append_time():
    lat = 0x08
    # on a LogAppendTime topic it is refused
    e = refused(message(0, 1, lat), cfg(message_timestamp_type="LogAppendTime"))
    assert isinstance(e, RecordValidationError) and e.code == ErrorCode.INVALID_TIMESTAMP
    # on a CreateTime topic Kafka range-checks the timestamp instead
    assert [r.timestamp for r in convert(message(0, 1, lat))] == [NOW]
    assert refused(message(0, 1, lat, ts=-1)).code == ErrorCode.INVALID_TIMESTAMP
    # a LogAppendTime wrapper gives its timestamp to its messages
    inner = message(0, 1, ts=5) + message(1, 1, ts=6)
    w = message(1, 1, GZIP | lat, ts=NOW + 7, key=None, value=gzip.compress(inner))
    assert [r.timestamp for r in convert(w)] == [NOW + 7, NOW + 7]


def test_create_time_out_of_range_is_invalid_timestamp():
    old = message(0, 1, ts=NOW - 10 * 3_600_000)
    e = refused(old, cfg(message_timestamp_before_max_ms=3_600_000))
    assert e.code == ErrorCode.INVALID_TIMESTAMP


def test_keyless_message_on_compacted_topic_is_invalid_record():
    e = refused(kp_set(1, GZIP, keys=False), cfg(cleanup_policy="compact"))
    assert e.code == ErrorCode.INVALID_RECORD


def test_message_larger_than_max_message_bytes_is_message_too_large():
    big = message(0, 1, value=b"x" * 2000)
    assert refused(big, cfg(max_message_bytes=1000)).code == ErrorCode.MESSAGE_TOO_LARGE
    # small messages that make a v2 batch over the limit: Kafka re-checks after conversion
    many = b"".join(message(i, 1, value=b"x" * 100) for i in range(20))
    assert refused(many, cfg(max_message_bytes=1000)).code == ErrorCode.MESSAGE_TOO_LARGE


def test_decompression_bomb_in_a_wrapper_is_bounded():
    bomb = message(0, 1, GZIP, key=None, value=gzip.compress(b"\x00" * (40 << 20)))
    e = refused(bomb, cfg(max_message_bytes=1 << 20))
    assert e.code == ErrorCode.CORRUPT_MESSAGE and "decompress" in e.message


def test_is_legacy_reads_the_magic_byte():
    assert legacy.is_legacy(kp_set(0, NONE)) and legacy.is_legacy(kp_set(1, GZIP))
    assert not legacy.is_legacy(build_batch([Record(0, NOW, b"k", b"v", [])]))
    assert not legacy.is_legacy(b"\x00" * 10)


# --- fetch: down-conversion ---------------------------------------------------------------

@pytest.fixture(params=["compiled", "python"], autouse=True)
def loop_impl(request, monkeypatch):
    """Every test here runs with the compiled loop (_legacy.pyx) and with the Python one (the
    down-conversion tests use it; the produce ones run twice alike)."""
    if request.param == "python":
        monkeypatch.setattr(legacy, "messages", legacy._messages_py)
    elif not legacy.COMPILED:
        pytest.skip("the compiled loop is not built (no C compiler at install time)")
    return request.param


def test_compiled_and_python_loops_agree_on_random_batches():
    import random
    if not legacy.COMPILED:
        pytest.skip("the compiled loop is not built")
    from broker.log._legacy import messages as compiled
    rng = random.Random(26)
    for _ in range(300):
        n = rng.randint(1, 30)
        base = rng.randint(0, 1 << 40)
        recs = [Record(base + i + rng.choice((0, 0, 3)) * i, NOW + rng.randint(-10**6, 10**6),
                       rng.choice((None, b"", rng.randbytes(rng.randint(0, 300)))),
                       rng.choice((None, b"", rng.randbytes(rng.randint(0, 3000)))),
                       [("h", b"x")] * rng.randint(0, 2)) for i in range(n)]
        batch = bytes(build_batch(recs, timestamp_type=rng.randint(0, 1), max_timestamp=NOW))
        h = unpack_header(batch, 0)
        section = batch[61:]
        args = (n, rng.randint(0, 1), h.base_offset, h.base_timestamp, h.timestamp_type == 1, h.max_timestamp,
                rng.choice((-1, recs[n // 2].offset)), rng.random() < 0.5, rng.choice((-1, 0, 200, 5000)))
        py = legacy._messages_py(section, *args)
        c = compiled(section, *args)
        assert (bytes(c[0]), *c[1:]) == (bytes(py[0]), *py[1:])
        cut = section[:rng.randint(0, len(section) - 1)]
        with pytest.raises(ValueError):
            compiled(cut, *args[:-1], -1)
        with pytest.raises(ValueError):
            legacy._messages_py(cut, *args[:-1], -1)

def v2_log(codec: int = NONE, n: int = 10, base: int = 0, lat: bool = False) -> bytes:
    recs = [Record(base + i, NOW + i, b"k%d" % i, b"v%d" % i, [("h", b"x")]) for i in range(n)]
    return bytes(build_batch(recs, compression=codec, timestamp_type=1 if lat else 0,
                             max_timestamp=NOW + 99 if lat else None))


def read_back(data: bytes) -> list:
    out = []
    for batch in MemoryRecords(data):
        assert batch.validate_crc()
        for r in batch:
            out.append((batch.magic, r.offset, r.timestamp, r.key, r.value, list(r.headers)))
    return out


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [NONE, GZIP, SNAPPY, LZ4])
def test_down_conversion_is_read_by_a_legacy_reader(magic, codec):
    data = legacy.down_convert(v2_log(codec) + v2_log(codec, base=10), magic, 0, 1 << 20)
    got = read_back(data)
    assert [o for _m, o, *_ in got] == list(range(20))
    assert {m for m, *_ in got} == {magic}
    assert [(k, v) for *_x, k, v, _h in got] == [(b"k%d" % (i % 10), b"v%d" % (i % 10)) for i in range(20)]
    assert all(h == [] for *_x, h in got)  # headers are dropped
    if magic:
        assert [t for _m, _o, t, *_ in got] == [NOW + i % 10 for i in range(20)]
    else:
        assert all(t is None for _m, _o, t, *_ in got)


def test_magic0_lz4_wrapper_has_kafka_08_header_checksum_and_magic1_the_standard_one():
    for magic, frame_start in ((0, 0), (1, 4)):
        data = legacy.down_convert(v2_log(LZ4), magic, 0, 1 << 20)
        value = legacy._message(memoryview(data), 0, struct.unpack_from(">i", data, 8)[0], "t").value
        want = (xxhash.xxh32(bytes(value[frame_start:6])).intdigest() >> 8) & 0xFF
        assert value[6] == want


def test_v1_wrapper_has_relative_inner_offsets_and_the_last_offset():
    data = legacy.down_convert(v2_log(GZIP, n=3, base=100), 1, 0, 1 << 20)
    offset, size = struct.unpack_from(">qi", data, 0)
    assert offset == 102 and len(data) == 12 + size
    inner = zlib.decompress(bytes(legacy._message(memoryview(data), 0, size, "t").value), 16 + zlib.MAX_WBITS)
    assert [struct.unpack_from(">q", inner, p)[0] for p in _positions(inner)] == [0, 1, 2]
    data0 = legacy.down_convert(v2_log(GZIP, n=3, base=100), 0, 0, 1 << 20)
    inner0 = zlib.decompress(bytes(legacy._message(memoryview(data0), 0, struct.unpack_from(">i", data0, 8)[0],
                                                   "t").value), 16 + zlib.MAX_WBITS)
    assert [struct.unpack_from(">q", inner0, p)[0] for p in _positions(inner0)] == [100, 101, 102]


def _positions(s: bytes) -> list[int]:
    out, pos = [], 0
    while pos < len(s):
        out.append(pos)
        pos += 12 + struct.unpack_from(">i", s, pos + 8)[0]
    return out


def test_fetch_from_the_middle_of_an_uncompressed_batch_starts_at_the_fetch_offset():
    got = read_back(legacy.down_convert(v2_log(NONE), 1, 4, 1 << 20))
    assert [o for _m, o, *_ in got] == list(range(4, 10))
    # a compressed batch is sent whole: the consumer skips what is before its offset
    got = read_back(legacy.down_convert(v2_log(GZIP), 1, 4, 1 << 20))
    assert [o for _m, o, *_ in got] == list(range(10))


def test_log_append_time_batch_gives_its_time_and_type_to_the_messages():
    got = read_back(legacy.down_convert(v2_log(GZIP, lat=True), 1, 0, 1 << 20))
    assert {t for _m, _o, t, *_ in got} == {NOW + 99}
    batch = next(iter(MemoryRecords(legacy.down_convert(v2_log(NONE, lat=True), 1, 0, 1 << 20))))
    assert batch.timestamp_type == 1


def test_control_batches_are_skipped():
    marker = bytes(build_end_txn_marker(7, 0, True, 0, NOW))  # a COMMIT marker at offset 0
    got = read_back(legacy.down_convert(marker + v2_log(NONE, n=2, base=1), 1, 0, 1 << 20))
    assert [o for _m, o, *_ in got] == [1, 2]
    assert legacy.down_convert(marker, 1, 0, 1 << 20) == b""


def test_zstd_first_is_unsupported_compression_type_later_it_ends_the_response():
    with pytest.raises(KafkaError) as e:
        legacy.down_convert(v2_log(ZSTD), 1, 0, 1 << 20)
    assert e.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    got = read_back(legacy.down_convert(v2_log(NONE, n=3) + v2_log(ZSTD, base=3) + v2_log(NONE, base=13), 1, 0,
                                        1 << 20))
    assert [o for _m, o, *_ in got] == [0, 1, 2]


def test_down_conversion_stops_at_max_bytes_but_returns_at_least_one_message():
    log = v2_log(NONE, n=100)
    one = legacy.down_convert(log, 1, 0, 1)
    assert len(read_back(one)) == 1  # the first message even if larger than max_bytes
    some = legacy.down_convert(log, 1, 0, 1000)
    assert len(some) <= 1000 and len(read_back(some)) == len(some) // len(one)
    # a compressed batch is the unit: the first always, the next only if it fits
    two = v2_log(GZIP, n=50) + v2_log(GZIP, n=50, base=50)
    first = legacy.down_convert(two, 1, 0, 1)
    assert [o for _m, o, *_ in read_back(first)] == list(range(50))
    assert len(read_back(legacy.down_convert(two, 1, 0, 1 << 20))) == 100


def test_produce_then_fetch_round_trip_through_both_conversions():
    for magic in (0, 1):
        for codec in (NONE, GZIP, SNAPPY, LZ4):
            recs = convert(kp_set(magic, codec))
            v2 = bytes(build_batch(recs, compression=codec))
            got = read_back(legacy.down_convert(v2, magic, 0, 1 << 20))
            assert [(o, k, v) for _m, o, _t, k, v, _h in got] == [(i, b"k%d" % i, b"v%d" % i) for i in range(5)]


# --- ListOffsets v0 ---------------------------------------------------------------------------

class _Seg:
    def __init__(self, base, size, mtime):
        self.base_offset, self.size, self.mtime = base, size, mtime


def test_offsets_before_a_time_are_segment_starts_in_descending_order():
    segs = [_Seg(0, 100, 1000), _Seg(50, 100, 2000), _Seg(90, 10, 3000)]

    def before(ts, n, start=0):
        return legacy.offsets_before(segs, start, 120, ts, n, 5000, lambda s: s.mtime)

    assert before(-1, 1) == [120]  # latest: the log end
    assert before(-2, 1) == [0]  # earliest: the log start
    assert before(-1, 10) == [120, 90, 50, 0]
    assert before(2500, 10) == [50, 0]
    assert before(2500, 1) == [50]
    assert before(999, 10) == []
    assert before(-2, 5, start=60) == [60]  # a segment start below the log start counts as the log start
    assert legacy.offsets_before([_Seg(0, 0, 1000)], 0, 0, -1, 1, 5000, lambda s: s.mtime) == [0]


def test_xxh32_matches_the_reference():
    import os
    for n in (0, 1, 4, 6, 14, 15, 16, 17, 64, 100):
        data = os.urandom(n)
        assert legacy.xxh32(data) == xxhash.xxh32(data).intdigest()
