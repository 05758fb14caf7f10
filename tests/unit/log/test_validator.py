"""Kafka's LogValidator checks on append: keys on compacted topics (KIP-467 record errors),
timestamps (KIP-937), record counts and framing of walked batches, decompression bounds,
re-encoding for compression.type and inner offsets."""

from __future__ import annotations

import asyncio
import time

import pytest
from batch_builder import make_batch
from hostile import ZSTD, batch, count_lie, record, varint, zstd_rle_bomb

from broker.log import LogConfig, validate_produce_batches
from broker.log.batch import decode_records, unpack_header
from broker.log.validator import (
    INLINE_MAX_RECORDS,
    RecordValidationError,
    _TooMuchForTheLoop,
    validate_async,
    validate_batches,
)
from common.errors import ErrorCode, KafkaError

MAX = 1 << 20
NOW = 1_700_000_000_000
HOUR = 3_600_000
YEAR = 365 * 24 * HOUR


def cfg(**kw) -> LogConfig:
    return LogConfig.from_topic_configs({k.replace("_", "."): v for k, v in kw.items()})


def run(buf, config=None, now=NOW, inline=False):
    buf = bytearray(buf)
    return validate_batches(buf, validate_produce_batches(buf, MAX), config or cfg(), now, "t-0", inline=inline)


def rejected(buf, config=None, now=NOW) -> KafkaError:
    with pytest.raises(KafkaError) as e:
        run(buf, config, now)
    return e.value


@pytest.mark.parametrize("compression", [0, 1, 2, 3, 4])
def test_compacted_topic_rejects_keyless_records_with_one_record_error_each(compression):
    keys = [b"k%d" % i if i % 10 else None for i in range(30)]
    e = rejected(make_batch([b"v"] * 30, keys=keys, compression=compression, base_timestamp=NOW),
                 cfg(cleanup_policy="compact"))
    assert isinstance(e, RecordValidationError) and e.code == ErrorCode.INVALID_RECORD
    assert [i for i, _m in e.record_errors] == [0, 10, 20]
    assert all(m == "Compacted topic cannot accept message without key in topic partition t-0." for _i, m in
               e.record_errors)
    assert e.message.startswith("One or more records have been rejected due to 3 record errors in total")


@pytest.mark.parametrize("compression", [0, 4])
def test_compacted_topic_accepts_keyed_records_and_other_topics_keyless_ones(compression):
    keyed = make_batch([b"v"] * 5, keys=[b"k"] * 5, compression=compression, base_timestamp=NOW)
    assert run(keyed, cfg(cleanup_policy="compact,delete"))[0] == keyed
    keyless = make_batch([b"v"] * 5, compression=compression, base_timestamp=NOW)
    assert run(keyless)[0] == keyless


@pytest.mark.parametrize("compression", [0, 3])
def test_timestamp_beyond_after_max_is_invalid_timestamp_for_that_record(compression):
    ts = [NOW, NOW + 2 * YEAR, NOW + HOUR]
    e = rejected(make_batch([b"a", b"b", b"c"], timestamps=ts, compression=compression))
    assert isinstance(e, RecordValidationError) and e.code == ErrorCode.INVALID_TIMESTAMP
    assert [i for i, _m in e.record_errors] == [1]
    assert e.record_errors[0][1] == (f"Timestamp {NOW + 2 * YEAR} of message with offset 1 is out of range. The "
                                     f"timestamp should be within [{NOW - (2**63 - 1)}, {NOW + HOUR}]")
    assert e.message == "One or more records have been rejected due to invalid timestamp"


def test_after_max_and_before_max_are_topic_configs():
    old = make_batch([b"a"], timestamps=[NOW - 2 * YEAR])
    assert run(old)[0] == old  # before.max.ms defaults to Long.MAX_VALUE
    e = rejected(old, cfg(message_timestamp_before_max_ms=YEAR))
    assert e.code == ErrorCode.INVALID_TIMESTAMP and [i for i, _ in e.record_errors] == [0]
    soon = make_batch([b"a"], timestamps=[NOW + 10 * HOUR])
    assert rejected(soon).code == ErrorCode.INVALID_TIMESTAMP
    assert run(soon, cfg(message_timestamp_after_max_ms=11 * HOUR))[0] == soon


def test_log_append_time_topic_does_not_check_create_times():
    future = make_batch([b"a"], timestamps=[NOW + 2 * YEAR])
    assert run(future, cfg(message_timestamp_type="LogAppendTime"))[0] == future


def test_records_without_timestamp_are_not_range_checked():
    assert run(make_batch([b"a", b"b"], timestamps=[-1, -1]), cfg(message_timestamp_before_max_ms=0))


def test_client_claiming_log_append_time_is_invalid_timestamp():
    b = batch(record(0, None, b"v") + record(1, None, b"v"), 2, base_timestamp=-1, max_timestamp=-1, attributes=0x08)
    e = rejected(b)
    assert e.code == ErrorCode.INVALID_TIMESTAMP and [i for i, _ in e.record_errors] == [0, 1]
    assert rejected(batch(record(0, None, b"v"), 1, base_timestamp=NOW, attributes=0x08),
                    cfg(message_timestamp_type="LogAppendTime")).code == ErrorCode.INVALID_TIMESTAMP


def test_key_error_comes_before_timestamp_error_for_the_same_record():
    b = make_batch([b"a", b"b"], keys=[None, b"k"], timestamps=[NOW + 2 * YEAR, NOW + 2 * YEAR])
    e = rejected(b, cfg(cleanup_policy="compact"))
    assert e.code == ErrorCode.INVALID_TIMESTAMP  # any timestamp error makes it INVALID_TIMESTAMP, as Kafka
    assert [(i, m.split()[0]) for i, m in e.record_errors] == [(0, "Compacted"), (1, "Timestamp")]


def test_uncompressed_batch_with_a_future_header_is_walked_to_name_the_record():
    ts = [NOW] * 5 + [NOW + 3 * YEAR]
    e = rejected(make_batch([b"x"] * 6, timestamps=ts))
    assert [i for i, _ in e.record_errors] == [5]


@pytest.mark.parametrize("policy", ["delete", "compact"])
def test_uncompressed_batch_whose_records_do_not_parse_is_invalid_record_on_every_topic(policy):
    """Kafka walks every record of every batch on append; so does krafty (main stored this
    batch on a plain topic, for every consumer to fail on)."""
    garbage = batch(b"\x00" * 70, 10, base_timestamp=NOW)
    e = rejected(garbage, cfg(cleanup_policy=policy))
    assert e.code == ErrorCode.INVALID_RECORD and "record 0 of 10 has length 0" in e.message
    assert rejected(count_lie(), cfg(cleanup_policy=policy)).code == ErrorCode.INVALID_RECORD


LIES = {  # record 1 (offsetDelta 1) whose field lengths lie, built by hand: the fuzzer's families
    "key length past the record": lambda: _record_body(b"\x00" + varint(0) + varint(1) + varint(50) + b"k"
                                                        + varint(1) + b"v" + varint(0)),
    "value length past the record": lambda: _record_body(b"\x00" + varint(0) + varint(1) + varint(-1)
                                                          + varint(40) + b"v" + varint(0)),
    "header count past the record": lambda: _record_body(b"\x00" + varint(0) + varint(1) + varint(-1)
                                                          + varint(1) + b"v" + varint(30)),
    "negative header count": lambda: _record_body(b"\x00" + varint(0) + varint(1) + varint(-1) + varint(1)
                                                   + b"v" + varint(-2)),
    "negative header key length": lambda: _record_body(b"\x00" + varint(0) + varint(1) + varint(-1) + varint(1)
                                                        + b"v" + varint(1) + varint(-1) + varint(-1)),
    "header value past the record": lambda: _record_body(b"\x00" + varint(0) + varint(1) + varint(-1)
                                                          + varint(1) + b"v" + varint(1) + varint(1) + b"h"
                                                          + varint(9)),
    "fields shorter than the record": lambda: _record_body(b"\x00" + varint(0) + varint(1) + varint(-1)
                                                            + varint(1) + b"v" + varint(0) + b"\x00\x00"),
    "six-byte varint": lambda: _record_body(b"\x00" + varint(0) + b"\x80\x80\x80\x80\x80\x00" + varint(-1)
                                             + varint(-1) + varint(0)),
}


def _record_body(body: bytes) -> bytes:
    return varint(len(body)) + body


@pytest.mark.parametrize("compression", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("lie", list(LIES))
def test_records_whose_fields_lie_are_invalid_record_on_a_plain_topic(lie, compression):
    """Every field of every record is checked, compressed or not, on every topic (main checked
    keys, values and headers only on compacted topics)."""
    from broker.log.batch import compress_records
    section = record(0, None, b"fine") + LIES[lie]() + record(2, None, b"fine")
    b = batch(compress_records(compression, section), 3, codec=compression, base_timestamp=NOW)
    e = rejected(b)
    assert e.code == ErrorCode.INVALID_RECORD and "record 1 of 3" in e.message, e.message
    assert not isinstance(e, RecordValidationError)  # the batch fails whole, as Kafka's InvalidRecordException


def test_compressed_count_lie_and_bomb_are_rejected():
    from broker.log.batch import compress_records
    lie = batch(compress_records(ZSTD, record(0, None, b"v")), 2**31 - 1, codec=ZSTD)
    assert rejected(lie).code == ErrorCode.INVALID_RECORD
    two = batch(compress_records(ZSTD, record(0, None, b"v")), 2, codec=ZSTD)
    assert rejected(two).code == ErrorCode.INVALID_RECORD
    bomb = batch(zstd_rle_bomb(30 << 30), 1000, codec=ZSTD)
    t0 = time.monotonic()
    assert rejected(bomb).code == ErrorCode.CORRUPT_MESSAGE
    assert time.monotonic() - t0 < 2


@pytest.mark.parametrize("target,codec", [("zstd", 0), ("uncompressed", 1), ("lz4", 4), ("gzip", 2)])
def test_compression_type_reencodes_the_batch(target, codec):
    codes = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
    src = make_batch([b"v%d" % i for i in range(20)], keys=[b"k"] * 20, compression=codec, base_timestamp=NOW,
                     producer_id=7, producer_epoch=1, base_sequence=3)
    out, headers = run(src, cfg(compression_type=target))
    (h,) = headers
    assert h.compression == codes[target]
    before, after = unpack_header(src, 0), h
    for f in ("base_timestamp", "max_timestamp", "producer_id", "producer_epoch", "base_sequence", "records_count",
              "last_offset_delta"):
        assert getattr(before, f) == getattr(after, f), f
    assert [(r.key, r.value, r.timestamp) for r in decode_records(out)] == \
        [(r.key, r.value, r.timestamp) for r in decode_records(src)]


def test_compressed_batch_with_wrong_inner_offsets_gets_them_renumbered():
    from broker.log.batch import compress_records
    section = b"".join(record(5, b"k", b"v%d" % i) for i in range(3))  # every offsetDelta is 5
    out, (h,) = run(batch(compress_records(ZSTD, section), 3, codec=ZSTD, base_timestamp=NOW))
    assert h.compression == ZSTD
    assert [(r.offset, r.value) for r in decode_records(out)] == [(0, b"v0"), (1, b"v1"), (2, b"v2")]


def test_walked_batch_gets_the_max_timestamp_of_its_records():
    b = make_batch([b"a", b"b"], timestamps=[NOW, NOW + 5], compression=ZSTD)
    b[35:43] = (NOW - 100).to_bytes(8, "big")  # a header that lies about maxTimestamp (CRC not covering it
    from crc32c import crc32c  # ... is fixed below so the batch stays valid)
    b[17:21] = crc32c(bytes(b[21:])).to_bytes(4, "big")
    _out, (h,) = run(b)
    assert h.max_timestamp == NOW + 5


def test_small_batches_validate_on_the_loop_and_large_ones_refuse_to():
    small = make_batch([b"v"] * 10, compression=ZSTD, base_timestamp=NOW)
    assert run(small, inline=True)[0] == small
    whole = make_batch([bytes(100)] * 9000, base_timestamp=NOW)  # ~1 MiB uncompressed: the compiled walk is cheap
    assert run(whole, inline=True)[0] == whole
    large = make_batch([b"v"] * (INLINE_MAX_RECORDS + 1), compression=ZSTD, base_timestamp=NOW)
    with pytest.raises(_TooMuchForTheLoop):
        run(large, inline=True)
    inflating = make_batch([bytes(100_000)] * 5, compression=ZSTD, base_timestamp=NOW)  # 500 KB from a few KB
    with pytest.raises(_TooMuchForTheLoop):
        run(inflating, inline=True)
    with pytest.raises(_TooMuchForTheLoop):
        run(small, cfg(compression_type="gzip"), inline=True)


async def test_validate_async_moves_large_work_off_the_loop():
    n = INLINE_MAX_RECORDS + 1
    large = bytearray(make_batch([b"v"] * n, keys=[b"k"] * n, compression=ZSTD, base_timestamp=NOW))
    headers = validate_produce_batches(large, MAX)
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    t = asyncio.create_task(ticker())
    try:
        out, _ = await validate_async(large, headers, cfg(cleanup_policy="compact"), NOW, "t-0")
    finally:
        t.cancel()
    assert out == large
    assert ticks > 0, "the loop ran while the batch was validated"
    bad = bytearray(make_batch([b"v"] * n, compression=ZSTD, base_timestamp=NOW))
    with pytest.raises(RecordValidationError):
        await validate_async(bad, validate_produce_batches(bad, MAX), cfg(cleanup_policy="compact"), NOW, "t-0")


def test_record_error_messages_are_bounded():
    n = 5000
    e = rejected(make_batch([b""] * n, base_timestamp=NOW), cfg(cleanup_policy="compact"))
    assert len(e.record_errors) == n
    assert sum(m is not None for _i, m in e.record_errors) == 100
