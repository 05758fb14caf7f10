"""Record batch header validation and in-place offset assignment."""

import struct

import pytest
from batch_builder import concat, make_batch
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.log.batch import (
    HEADER_SIZE,
    assign_offsets,
    decode_records,
    parse_batches,
    unpack_header,
    validate_produce_batches,
)
from common.errors import ErrorCode, KafkaError

MAX = 1 << 20


def _code(buf, max_bytes=MAX, **kw):
    with pytest.raises(KafkaError) as e:
        validate_produce_batches(buf, max_bytes, **kw)
    return e.value.code


def test_header_fields_are_parsed():
    buf = make_batch([b"a", b"b", b"c"], producer_id=7, producer_epoch=2, base_sequence=10, base_timestamp=500)
    (h,) = validate_produce_batches(buf, MAX)
    assert (h.pos, h.magic, h.records_count, h.last_offset_delta) == (0, 2, 3, 2)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence) == (7, 2, 10, 12)
    assert (h.base_timestamp, h.max_timestamp, h.size) == (500, 502, len(buf))
    assert h.has_producer_id and not h.is_control and not h.is_transactional and h.compression == 0


def test_several_batches_are_returned_in_order():
    buf = concat(make_batch([b"a"]), make_batch([b"b", b"c"], compression=1), make_batch([b"d"] * 5))
    hs = validate_produce_batches(buf, MAX)
    assert [h.records_count for h in hs] == [1, 2, 5]
    assert hs[1].compression == 1
    assert hs[2].pos + hs[2].size == len(buf)


def test_append_assigns_offsets_without_changing_crc():
    buf = concat(make_batch([b"a", b"b"]), make_batch([b"c"]))
    before = bytes(buf)
    hs = validate_produce_batches(buf, MAX)
    assign_offsets(buf, hs, 1000, 7, None)
    again = validate_produce_batches(buf, MAX)  # CRC still valid
    assert [(h.base_offset, h.partition_leader_epoch) for h in again] == [(1000, 7), (1002, 7)]
    assert [h.crc for h in again] == [h.crc for h in validate_produce_batches(bytearray(before), MAX)]
    # only baseOffset and partitionLeaderEpoch changed
    assert buf[8:12] == before[8:12] and buf[16:] [:HEADER_SIZE - 16] == before[16:HEADER_SIZE]


def test_log_append_time_sets_attribute_and_max_timestamp_and_recomputes_crc():
    buf = make_batch([b"a", b"b"], base_timestamp=5)
    hs = validate_produce_batches(buf, MAX)
    assign_offsets(buf, hs, 0, 1, 99_999)
    (h,) = validate_produce_batches(buf, MAX)
    assert h.timestamp_type == 1 and h.max_timestamp == 99_999 and h.base_timestamp == 5
    assert [r.timestamp for r in decode_records(buf)] == [99_999, 99_999]


def test_corrupt_crc_rejected():
    buf = make_batch([b"hello"])
    buf[-1] ^= 0xFF
    assert _code(buf) == ErrorCode.CORRUPT_MESSAGE


def test_truncated_only_batch_is_invalid_record():
    # Kafka's batch iterator sees no whole batch: "must have at least one record batch"
    buf = make_batch([b"hello", b"world"])
    assert _code(buf[:-3]) == ErrorCode.INVALID_RECORD
    assert _code(buf[:40]) == ErrorCode.INVALID_RECORD
    assert _code(buf[:5]) == ErrorCode.INVALID_RECORD


def test_truncated_second_batch_is_corrupt():
    buf = concat(make_batch([b"a"]), make_batch([b"hello", b"world"]))
    assert _code(buf[:-3]) == ErrorCode.CORRUPT_MESSAGE


def test_trailing_garbage_rejected():
    assert _code(make_batch([b"x"]) + b"\x00" * 10) == ErrorCode.CORRUPT_MESSAGE


def test_empty_records_is_invalid_record():
    assert _code(bytearray()) == ErrorCode.INVALID_RECORD


def test_batch_length_below_minimum_rejected():
    buf = make_batch([b"x"])
    struct.pack_into(">i", buf, 8, 10)
    assert _code(buf) == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("magic", [0, 1])
def test_old_magic_is_invalid_record(magic):
    assert _code(make_batch([b"x"], magic=magic)) == ErrorCode.INVALID_RECORD


def test_unknown_magic_is_corrupt():
    assert _code(make_batch([b"x"], magic=3)) == ErrorCode.CORRUPT_MESSAGE


def test_produce_version_allows_exactly_one_batch():
    one = make_batch([b"a", b"b"])
    assert len(validate_produce_batches(one, MAX, produce_version=9)) == 1
    assert _code(concat(one, make_batch([b"c"])), produce_version=9) == ErrorCode.INVALID_RECORD


def test_zstd_needs_produce_v7():
    buf = make_batch([b"a"], compression=4)
    assert _code(buf, produce_version=6) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    validate_produce_batches(buf, MAX, produce_version=7)


def test_batch_larger_than_max_message_bytes_rejected():
    buf = make_batch([b"x" * 1000])
    assert _code(buf, max_bytes=len(buf) - 1) == ErrorCode.MESSAGE_TOO_LARGE
    validate_produce_batches(buf, len(buf))


def _recrc(buf):
    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    return buf


def test_record_count_inconsistent_with_last_offset_delta_is_invalid_record():
    buf = make_batch([b"a", b"b"])
    struct.pack_into(">i", buf, 57, 3)
    assert _code(_recrc(buf)) == ErrorCode.INVALID_RECORD


def test_zero_record_count_is_invalid_record():
    buf = make_batch([b"a"])
    struct.pack_into(">i", buf, 57, 0)
    struct.pack_into(">i", buf, 23, -1)
    assert _code(_recrc(buf)) == ErrorCode.INVALID_RECORD


def test_control_batch_from_client_is_invalid_record():
    buf = make_batch([b"a"], control=True, producer_id=1, producer_epoch=0, base_sequence=0)
    assert _code(buf) == ErrorCode.INVALID_RECORD
    validate_produce_batches(buf, MAX, allow_control=True)


def test_unknown_compression_codec_rejected():
    buf = make_batch([b"a"])
    struct.pack_into(">h", buf, 21, 5)
    assert _code(_recrc(buf)) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def test_producer_id_without_sequence_is_invalid_record():
    assert _code(make_batch([b"a"], producer_id=5, producer_epoch=0, base_sequence=-1)) == ErrorCode.INVALID_RECORD


def test_parse_batches_ignores_trailing_partial_batch():
    buf = concat(make_batch([b"a"]), make_batch([b"b"]))
    assert len(parse_batches(buf)) == 2
    assert len(parse_batches(buf[:-1])) == 1
    assert parse_batches(buf[:30]) == []


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_compressed_batches_decode(codec):
    values = [b"v%d" % i * 20 for i in range(30)]
    buf = make_batch(values, compression=codec, base_timestamp=10)
    (h,) = validate_produce_batches(buf, MAX)
    assert h.compression == codec
    assign_offsets(buf, [h], 50, 0, None)
    recs = decode_records(buf)
    assert [r.value for r in recs] == values
    assert [r.offset for r in recs] == list(range(50, 80))


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(st.tuples(st.lists(st.binary(max_size=40) | st.none(), min_size=1, max_size=8),
                               st.sampled_from([0, 1, 3, 4])), min_size=1, max_size=6),
    first=st.integers(0, 2**40),
    epoch=st.integers(0, 2**31 - 1),
)
def test_round_trip_validate_assign_decode(batches, first, epoch):
    buf = concat(*(make_batch(vals, compression=c) for vals, c in batches))
    hs = validate_produce_batches(buf, MAX)
    assign_offsets(buf, hs, first, epoch, None)
    hs2 = validate_produce_batches(buf, MAX)
    offset = first
    for h, (vals, _c) in zip(hs2, batches, strict=True):
        assert h.base_offset == offset and h.partition_leader_epoch == epoch
        recs = decode_records(bytes(buf[h.pos:h.pos + h.size]))
        assert [r.value for r in recs] == vals
        assert [r.offset for r in recs] == list(range(offset, offset + len(vals)))
        offset += len(vals)
    assert unpack_header(buf, 0).base_offset == first
