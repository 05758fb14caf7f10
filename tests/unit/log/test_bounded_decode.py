"""Every record decoder bounds its work by the batch's own sizes: count lies, record lengths
of -1, decompression bombs in every codec, truncated and nested record sets all raise
INVALID_RECORD / CORRUPT_MESSAGE quickly, holding at most about the decompression limit."""

from __future__ import annotations

import gzip
import time
import tracemalloc

import pytest
from hostile import (
    BLOCK,
    GZIP,
    LZ4,
    SNAPPY,
    ZSTD,
    batch,
    count_lie,
    gzip_bomb,
    lz4_bomb,
    record,
    snappy_bomb,
    snappy_length_lie,
    varint,
    xerial,
    zstd_rle_bomb,
)

from broker.log.batch import (
    DEFAULT_RECORDS_LIMIT,
    compress_records,
    decode_records,
    decompress_records,
    record_timestamps,
    records_limit,
    scan_records,
)
from common.errors import ErrorCode, KafkaError

LIMIT = 1 << 20


def _code(fn, *args, **kw) -> ErrorCode:
    t0 = time.monotonic()
    with pytest.raises(KafkaError) as e:
        fn(*args, **kw)
    assert time.monotonic() - t0 < 2, "bounded work"
    return e.value.code


def _section(b: bytes) -> bytes:
    return bytes(b[61:])


def test_records_limit_is_a_multiple_of_max_message_bytes_never_below_the_default():
    assert records_limit(10 * 1024 * 1024) == 32 * 10 * 1024 * 1024
    assert records_limit(1000) == records_limit(1024 * 1024 + 12) == DEFAULT_RECORDS_LIMIT


@pytest.mark.parametrize("decoder", [decode_records, record_timestamps])
def test_count_lie_of_two_billion_records_in_77_bytes_is_invalid_record_at_once(decoder):
    b = count_lie()
    assert len(b) == 77
    assert _code(decoder, b) == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("decoder", [decode_records, record_timestamps])
def test_count_larger_than_the_records_fit_is_invalid_record(decoder):
    # 1,000,000 records claimed over 16 bytes (the old decoder looped on one byte, a million times)
    assert _code(decoder, batch(varint(-1) * 16, 1_000_000)) == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("decoder", [decode_records, record_timestamps])
def test_record_length_minus_one_is_invalid_record(decoder):
    section = varint(-1) + record(1, b"k", b"v") + b"\x00" * 8
    assert _code(decoder, batch(section, 2)) == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("decoder", [decode_records, record_timestamps])
def test_record_longer_than_the_section_is_invalid_record(decoder):
    section = varint(10_000) + b"\x00" * 20
    assert _code(decoder, batch(section, 1)) == ErrorCode.INVALID_RECORD


def test_fields_overrunning_their_record_are_invalid_record():
    r = bytearray(record(0, b"key", b"value"))
    r[4] = varint(100)[0]  # key length 100 in a 14-byte record
    assert _code(decode_records, batch(bytes(r), 1)) == ErrorCode.INVALID_RECORD
    assert _code(scan_records, bytes(r), 1, keys=True) == ErrorCode.INVALID_RECORD


def test_header_count_beyond_the_record_is_invalid_record():
    body = b"\x00" + varint(0) + varint(0) + varint(-1) + varint(-1) + varint(1_000_000_000)
    section = varint(len(body)) + body
    assert _code(decode_records, batch(section, 1)) == ErrorCode.INVALID_RECORD
    assert _code(scan_records, section, 1, keys=True) == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("cut", [1, 5, 20])
def test_truncated_record_set_is_invalid_record(cut):
    section = b"".join(record(i, b"k%d" % i, b"v" * 30) for i in range(3))
    assert _code(decode_records, batch(section[:-cut], 3)) == ErrorCode.INVALID_RECORD
    for keys in (False, True):
        assert _code(scan_records, section[:-cut], 3, keys=keys) == ErrorCode.INVALID_RECORD


def test_records_left_over_after_the_count_are_invalid_record():
    section = b"".join(record(i, b"k", b"v") for i in range(3))
    assert _code(decode_records, batch(section, 2)) == ErrorCode.INVALID_RECORD
    for keys in (False, True):
        assert _code(scan_records, section, 2, keys=keys) == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_nested_record_set_is_invalid_record(codec):
    # a compressed batch whose records section is another whole (compressed) batch
    inner = batch(compress_records(codec, record(0, b"k", b"v")), 1, codec=codec)
    assert _code(decode_records, batch(compress_records(codec, inner), 1, codec=codec)) == ErrorCode.INVALID_RECORD


def _peak_while(fn) -> int:
    tracemalloc.start()
    try:
        fn()
    except KafkaError as e:
        assert e.code == ErrorCode.CORRUPT_MESSAGE, e
    else:
        raise AssertionError("the bomb was decompressed")
    finally:
        _cur, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


BOMBS = {
    "gzip-64MiB": (GZIP, lambda: gzip_bomb(64 << 20)),
    "lz4-64MiB": (LZ4, lambda: lz4_bomb(64 << 20)),
    "zstd-30GiB": (ZSTD, lambda: zstd_rle_bomb(30 << 30)),
    "zstd-30GiB-with-content-size": (ZSTD, lambda: zstd_rle_bomb(30 << 30, content_size=30 << 30)),
    "snappy-xerial-8MiB": (SNAPPY, lambda: snappy_bomb(8 << 20)),
    "snappy-raw-length-lie": (SNAPPY, lambda: snappy_length_lie(30 << 30)),
    "snappy-xerial-length-lie": (SNAPPY, lambda: xerial(snappy_length_lie(30 << 30))),
}


@pytest.mark.parametrize("name", list(BOMBS))
def test_decompression_bomb_stops_at_the_limit(name):
    codec, make = BOMBS[name]
    data = make()
    assert len(data) < 1 << 20
    t0 = time.monotonic()
    peak = _peak_while(lambda: decompress_records(codec, data, LIMIT))
    assert time.monotonic() - t0 < 2
    assert peak < 4 * LIMIT + 2 * len(data), f"held {peak} bytes decompressing to a {LIMIT}-byte limit"


@pytest.mark.parametrize("name", list(BOMBS))
def test_bomb_in_a_batch_is_corrupt_message_for_every_decoder(name):
    codec, make = BOMBS[name]
    b = batch(make(), 1000, codec=codec)
    for decoder in (decode_records, record_timestamps):
        assert _code(decoder, b, LIMIT) == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_truncated_compressed_stream_is_corrupt_message(codec):
    data = compress_records(codec, b"".join(record(i, b"k", b"v" * 200) for i in range(300)))
    assert _code(decompress_records, codec, data[:len(data) // 2], LIMIT) == ErrorCode.CORRUPT_MESSAGE


def test_concatenated_gzip_members_are_one_stream():
    a, b = record(0, b"a", b"1"), record(1, b"b", b"2")
    assert decompress_records(GZIP, gzip.compress(a) + gzip.compress(b), LIMIT) == a + b


@pytest.mark.parametrize("codec", [0, GZIP, SNAPPY, LZ4, ZSTD])
def test_data_just_under_the_limit_decompresses(codec):
    payload = bytes(BLOCK * 7)
    assert decompress_records(codec, compress_records(codec, payload), len(payload)) == payload
    assert _code(decompress_records, codec, compress_records(codec, payload), len(payload) - 1) == \
        ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("keys", [False, True])
def test_scan_reports_timestamps_offsets_and_null_keys(keys):
    section = record(0, b"k", b"v", ts_delta=5) + record(1, None, b"v", ts_delta=-3) + record(7, b"k", None)
    s = scan_records(section, 3, keys=keys)
    assert (s.min_timestamp_delta, s.max_timestamp_delta, s.offsets_in_order) == (-3, 5, False)
    assert s.null_keys == ([1] if keys else [])
    many = b"".join(record(i, b"k" * 300, b"v" * 3000, ts_delta=i * 1000) for i in range(200))  # 2-byte varints
    s = scan_records(many, 200, keys=keys)
    assert (s.min_timestamp_delta, s.max_timestamp_delta, s.offsets_in_order, s.null_keys) == (0, 199_000, True, [])


@pytest.mark.parametrize("keys", [False, True])
@pytest.mark.parametrize("section,count", [
    (varint(-1) * 16, 2),  # length -1
    (varint(5) + b"\x00" * 5, 1),  # shorter than the minimum record
    (varint(6) + b"\x00" + b"\xff" * 5, 1),  # timestampDelta runs past its record
    (record(0, b"k", b"v") + b"\x00", 1),  # a byte left after the last record
])
def test_scan_rejects_bad_framing(section, count, keys):
    assert _code(scan_records, section, count, keys=keys) == ErrorCode.INVALID_RECORD
