"""Log appends, reads, rolling, indexes, timestamps, truncation and retention on real files."""

import os

import pytest
from batch_builder import concat, make_batch
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.log import Log, LogConfig, parse_batches, validate_produce_batches
from broker.log.batch import decode_records
from common.errors import ErrorCode, KafkaError

MAX = 1 << 20


def open_log(tmp_path, now_ms=0, **cfg):
    config = LogConfig.from_topic_configs({k.replace("_", "."): v for k, v in cfg.items()})
    return Log.open(str(tmp_path), "topic", 0, config, now_ms=now_ms)


def produce(log, values, now_ms=0, epoch=0, **kw):
    buf = make_batch(values, **kw)
    return log.append_as_leader(buf, validate_produce_batches(buf, MAX), epoch, now_ms)


def read_all(log, start=None, max_offset=None):
    """Every record from ``start`` to the end, reading slice after slice."""
    out = []
    offset = log.log_start_offset if start is None else start
    hw = log.log_end_offset if max_offset is None else max_offset
    while True:
        s = log.read(offset, 4096, hw)
        if s is None:
            return out
        for h in parse_batches(log.read_bytes(s)):
            out += [r for r in decode_records(log.read_bytes(s)[h.pos:h.pos + h.size]) if r.offset >= offset]
        offset = out[-1].offset + 1 if out else offset + 1


def test_append_returns_consecutive_offsets(tmp_path):
    log = open_log(tmp_path)
    a = produce(log, [b"a", b"b", b"c"])
    b = produce(log, [b"d"])
    assert (a.first_offset, a.last_offset, b.first_offset, b.last_offset) == (0, 2, 3, 3)
    assert a.log_append_time_ms == -1 and not a.duplicate
    assert log.log_end_offset == 4


def test_read_returns_whole_batches_from_the_batch_containing_offset(tmp_path):
    log = open_log(tmp_path)
    produce(log, [b"a", b"b", b"c"])
    produce(log, [b"d", b"e"])
    s = log.read(1, MAX, log.log_end_offset)
    assert s.first_batch_offset == 0 and s.position == 0
    hs = parse_batches(log.read_bytes(s))
    assert [(h.base_offset, h.last_offset) for h in hs] == [(0, 2), (3, 4)]
    assert sum(h.size for h in hs) == s.size


def test_read_slice_is_sendfile_ready(tmp_path):
    log = open_log(tmp_path)
    produce(log, [b"x" * 100] * 3)
    s = log.read(0, MAX, log.log_end_offset)
    r, w = os.pipe()
    try:
        sent = os.sendfile(w, s.fd, s.position, s.size)
        assert os.read(r, sent) == log.read_bytes(s)
    finally:
        os.close(r)
        os.close(w)


def test_read_respects_max_offset_and_min_one_batch(tmp_path):
    log = open_log(tmp_path)
    sizes = []
    for i in range(5):
        produce(log, [b"v" * 200] * 2, base_timestamp=i)
    sizes = [h.size for h in parse_batches(log.read_bytes(log.read(0, MAX, 10)))]
    # high watermark 6: batches [0,1] [2,3] [4,5] only
    s = log.read(0, MAX, 6)
    assert [h.base_offset for h in parse_batches(log.read_bytes(s))] == [0, 2, 4]
    # a high watermark inside a batch excludes that batch
    assert [h.base_offset for h in parse_batches(log.read_bytes(log.read(0, MAX, 5)))] == [0, 2]
    # max_bytes cuts at a batch boundary
    s = log.read(0, sizes[0] + sizes[1] + 10, 10)
    assert s.size == sizes[0] + sizes[1]
    # KIP-74: the first batch is returned even if larger than max_bytes
    assert log.read(0, 10, 10).size == sizes[0]
    assert log.read(0, 10, 10, min_one_batch=False) is None
    # nothing below the high watermark
    assert log.read(4, MAX, 4) is None
    assert log.read(4, MAX, 5) is None


def test_read_at_log_end_is_empty_and_beyond_is_out_of_range(tmp_path):
    log = open_log(tmp_path)
    produce(log, [b"a"])
    assert log.read(1, MAX, 1) is None
    with pytest.raises(KafkaError) as e:
        log.read(2, MAX, 2)
    assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_read_below_log_start_is_out_of_range(tmp_path):
    log = open_log(tmp_path, segment_bytes=200)
    for _ in range(5):
        produce(log, [b"x" * 100])
    log.delete_records_before(3)
    with pytest.raises(KafkaError) as e:
        log.read(2, MAX, 5)
    assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert log.read(3, MAX, 5).first_batch_offset == 3


def test_roll_by_segment_bytes(tmp_path):
    log = open_log(tmp_path, segment_bytes=1000)
    for _ in range(20):
        produce(log, [b"x" * 200])
    assert len(log.segments) > 4
    assert all(s.size <= 1000 for s in log.segments)
    names = sorted(os.listdir(log.path))
    assert "00000000000000000000.log" in names
    assert f"{log.segments[1].base_offset:020d}.log" in names
    assert [r.offset for r in read_all(log)] == list(range(20))


def test_single_batch_larger_than_segment_bytes_still_appends(tmp_path):
    log = open_log(tmp_path, segment_bytes=100)
    produce(log, [b"x" * 500])
    produce(log, [b"y" * 500])
    assert [s.base_offset for s in log.segments] == [0, 1]


def test_roll_by_segment_ms_uses_first_batch_timestamp(tmp_path):
    log = open_log(tmp_path, segment_ms=1000)
    produce(log, [b"a"], base_timestamp=10_000)
    produce(log, [b"b"], base_timestamp=10_900)
    assert len(log.segments) == 1
    produce(log, [b"c"], base_timestamp=11_001)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_when_offset_index_is_full(tmp_path):
    log = open_log(tmp_path, index_interval_bytes=0, segment_index_bytes=24)  # 3 offset entries
    for _ in range(10):
        produce(log, [b"x"])
    assert len(log.segments) >= 2
    assert all(len(s.index) <= 3 for s in log.segments)
    assert [r.offset for r in read_all(log)] == list(range(10))


def test_sparse_index_entry_every_index_interval_bytes(tmp_path):
    log = open_log(tmp_path, index_interval_bytes=1000)
    for _ in range(50):
        produce(log, [b"x" * 100])  # ~170 bytes per batch
    seg = log.active_segment
    assert 5 <= len(seg.index) <= 10
    for i in range(50):
        s = log.read(i, 1, 50)
        assert s.first_batch_offset == i


def test_index_files_written_in_kafka_layout_on_close(tmp_path):
    log = open_log(tmp_path, index_interval_bytes=100)
    for i in range(10):
        produce(log, [b"x" * 100], base_timestamp=1000 + i)
    log.close()
    idx = open(os.path.join(log.path, "00000000000000000000.index"), "rb").read()
    tidx = open(os.path.join(log.path, "00000000000000000000.timeindex"), "rb").read()
    assert len(idx) % 8 == 0 and len(idx) >= 8
    assert int.from_bytes(idx[0:4], "big") >= 1  # relative offset of an indexed batch
    assert len(tidx) % 12 == 0
    assert int.from_bytes(tidx[-12:-4], "big") == 1009  # last entry: the segment's max timestamp


def test_offset_for_timestamp(tmp_path):
    log = open_log(tmp_path, segment_bytes=600, index_interval_bytes=100)
    for i in range(30):
        produce(log, [b"a" * 20, b"b" * 20, b"c" * 20], timestamps=[1000 + 10 * i, 1003 + 10 * i, 1006 + 10 * i])
    assert len(log.segments) > 2
    assert log.offset_for_timestamp(0) == (0, 1000)
    assert log.offset_for_timestamp(1000) == (0, 1000)
    assert log.offset_for_timestamp(1001) == (1, 1003)
    assert log.offset_for_timestamp(1004) == (2, 1006)
    assert log.offset_for_timestamp(1007) == (3, 1010)
    assert log.offset_for_timestamp(1155) == (3 * 15 + 2, 1156)
    assert log.offset_for_timestamp(1296) == (89, 1296)
    assert log.offset_for_timestamp(1297) is None


def test_offset_for_timestamp_with_out_of_order_timestamps(tmp_path):
    log = open_log(tmp_path)
    produce(log, [b"a", b"b", b"c"], timestamps=[100, 50, 300])
    produce(log, [b"d"], timestamps=[200])
    assert log.offset_for_timestamp(150) == (2, 300)
    assert log.offset_for_timestamp(60) == (0, 100)


def test_offset_for_timestamp_in_compressed_batch(tmp_path):
    log = open_log(tmp_path)
    produce(log, [b"a"] * 10, timestamps=list(range(100, 110)), compression=4)
    assert log.offset_for_timestamp(105) == (5, 105)


def test_max_timestamp_and_offset(tmp_path):
    log = open_log(tmp_path, segment_bytes=300)
    assert log.max_timestamp_and_offset() == (-1, -1)
    produce(log, [b"a" * 50, b"b" * 50], timestamps=[10, 20])
    produce(log, [b"c" * 50, b"d" * 50, b"e" * 50], timestamps=[5, 90, 30])
    produce(log, [b"f" * 50], timestamps=[40])
    assert log.max_timestamp_and_offset() == (90, 3)


def test_log_append_time_topic_stamps_batches(tmp_path):
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    info = produce(log, [b"a", b"b"], now_ms=123_456, base_timestamp=1)
    assert info.log_append_time_ms == 123_456
    recs = decode_records(log.read_bytes(log.read(0, MAX, 2)))
    assert [r.timestamp for r in recs] == [123_456, 123_456]
    assert log.offset_for_timestamp(123_000) == (0, 123_456)


def test_leader_epoch_cache_updated_on_new_epoch(tmp_path):
    log = open_log(tmp_path)
    produce(log, [b"a"], epoch=1)
    produce(log, [b"b"], epoch=1)
    produce(log, [b"c", b"d"], epoch=3)
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == [(1, 0), (3, 2)]
    assert log.leader_epoch_cache.end_offset_for(1, log.log_end_offset) == (1, 2)
    assert log.leader_epoch_cache.end_offset_for(2, log.log_end_offset) == (1, 2)
    assert log.leader_epoch_cache.end_offset_for(3, log.log_end_offset) == (3, 4)
    hs = parse_batches(log.read_bytes(log.read(0, MAX, 4)))
    assert [h.partition_leader_epoch for h in hs] == [1, 1, 3]


def test_truncate_to_removes_tail_and_appends_continue(tmp_path):
    log = open_log(tmp_path, segment_bytes=300)
    for i in range(10):
        produce(log, [b"x" * 80, b"y"], epoch=i // 4)
    log.truncate_to(9)  # inside batch [8, 9]: the whole batch goes
    assert log.log_end_offset == 8
    assert [e.start_offset for e in log.leader_epoch_cache.entries] == [0]
    log.truncate_to(6)
    assert log.log_end_offset == 6
    assert produce(log, [b"z"]).first_offset == 6
    assert [r.offset for r in read_all(log)] == list(range(7))


def test_truncate_to_segment_base_removes_segment(tmp_path):
    log = open_log(tmp_path, segment_bytes=200)
    for _ in range(6):
        produce(log, [b"x" * 100])
    bases = [s.base_offset for s in log.segments]
    log.truncate_to(bases[2])
    assert [s.base_offset for s in log.segments] == bases[:2]
    assert log.log_end_offset == bases[2]
    assert not os.path.exists(os.path.join(log.path, f"{bases[3]:020d}.log"))


def test_truncate_fully_and_start_at(tmp_path):
    log = open_log(tmp_path)
    produce(log, [b"a", b"b"], epoch=2)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset) == (100, 100)
    assert log.leader_epoch_cache.entries == []
    assert produce(log, [b"c"]).first_offset == 100
    with pytest.raises(KafkaError):
        log.read(50, MAX, 101)


def test_follower_append_keeps_leader_offsets(tmp_path):
    leader = open_log(tmp_path / "l")
    produce(leader, [b"a", b"b"], epoch=4)
    produce(leader, [b"c"], epoch=5)
    follower = open_log(tmp_path / "f")
    data = leader.read_bytes(leader.read(0, MAX, 3))
    info = follower.append_as_follower(bytearray(data))
    assert (info.first_offset, info.last_offset) == (0, 2)
    assert follower.log_end_offset == 3
    assert [(e.epoch, e.start_offset) for e in follower.leader_epoch_cache.entries] == [(4, 0), (5, 2)]
    assert follower.read_bytes(follower.read(0, MAX, 3)) == data


def test_follower_append_rejects_offset_below_log_end(tmp_path):
    leader = open_log(tmp_path / "l")
    produce(leader, [b"a"])
    data = bytearray(leader.read_bytes(leader.read(0, MAX, 1)))
    follower = open_log(tmp_path / "f")
    follower.append_as_follower(data)
    with pytest.raises(KafkaError):
        follower.append_as_follower(data)


def test_follower_append_rejects_corrupt_batch(tmp_path):
    buf = make_batch([b"abc"])
    buf[-1] ^= 1
    with pytest.raises(KafkaError) as e:
        open_log(tmp_path).append_as_follower(buf)
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE


def test_retention_by_time_deletes_whole_segments(tmp_path):
    log = open_log(tmp_path, segment_bytes=300, retention_ms=1000)
    for i in range(10):
        produce(log, [b"x" * 100], base_timestamp=10_000 + i * 100)
    n = len(log.segments)
    # segments whose largest timestamp is older than now - retention are deleted
    deleted = log.apply_retention(now_ms=10_000 + 1000 + 450)
    assert deleted >= 1 and len(log.segments) == n - deleted
    first = log.segments[0]
    assert log.log_start_offset == first.base_offset
    assert first.max_timestamp >= 10_450 - 1000 or first is log.active_segment
    assert all(os.path.exists(s.log_path) for s in log.segments)
    assert [r.offset for r in read_all(log)] == list(range(log.log_start_offset, 10))


def test_retention_by_time_rolls_then_deletes_expired_active_segment(tmp_path):
    log = open_log(tmp_path, retention_ms=1000)
    produce(log, [b"a"], base_timestamp=0)
    produce(log, [b"b"], base_timestamp=1)
    assert log.apply_retention(now_ms=5000) == 1
    assert (log.log_start_offset, log.log_end_offset) == (2, 2)
    assert produce(log, [b"c"]).first_offset == 2


def test_retention_never_passes_high_watermark(tmp_path):
    log = open_log(tmp_path, segment_bytes=150, retention_ms=1000)
    for i in range(6):
        produce(log, [b"x" * 100], base_timestamp=i)
    assert log.apply_retention(now_ms=10**9, high_watermark=2) == 2
    assert log.log_start_offset == 2


def test_retention_by_bytes(tmp_path):
    log = open_log(tmp_path, segment_bytes=500, retention_bytes=1000, retention_ms=-1)
    for _ in range(20):
        produce(log, [b"x" * 100])
    seg_size = log.segments[0].size
    total_before = log.size_in_bytes
    deleted = log.apply_retention(now_ms=0)
    assert deleted > 0
    assert log.size_in_bytes >= 1000 - seg_size or log.size_in_bytes <= total_before
    assert log.size_in_bytes - log.segments[0].size < 1000


def test_compact_only_topic_is_not_deleted_by_time(tmp_path):
    log = open_log(tmp_path, segment_bytes=100, retention_ms=1, cleanup_policy="compact")
    for _ in range(4):
        produce(log, [b"x" * 100])
    assert log.apply_retention(now_ms=10**12) == 0


def test_delete_records_before_advances_log_start_and_drops_segments(tmp_path):
    log = open_log(tmp_path, segment_bytes=150)
    for i in range(6):
        produce(log, [b"x" * 100], epoch=i)
    assert log.delete_records_before(3) == 3
    assert log.log_start_offset == 3
    assert log.segments[0].base_offset == 3
    assert log.leader_epoch_cache.entries[0].start_offset == 3
    with pytest.raises(KafkaError):
        log.delete_records_before(100)


def test_deleted_segment_stays_readable_through_held_slice(tmp_path):
    log = open_log(tmp_path, segment_bytes=150)
    for _ in range(4):
        produce(log, [b"x" * 100])
    s = log.read(0, MAX, 4)
    data = log.read_bytes(s)
    log.delete_records_before(3)
    assert not os.path.exists(os.path.join(log.path, "00000000000000000000.log"))
    assert os.pread(s.fd, s.size, s.position) == data


def test_flush_messages_advances_recovery_point(tmp_path):
    log = open_log(tmp_path, flush_messages=3)
    produce(log, [b"a"])
    assert log.recovery_point == 0
    produce(log, [b"b", b"c"])
    assert log.recovery_point == 3


def test_config_accepts_raw_strings_and_typed_values():
    cfg = LogConfig.from_topic_configs({"segment.bytes": "1234", "retention.ms": 5,
                                        "message.timestamp.type": "LogAppendTime", "unrelated": "x"})
    assert (cfg.segment_bytes, cfg.retention_ms, cfg.log_append_time) == (1234, 5, True)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.binary(max_size=300), min_size=1, max_size=5), min_size=1, max_size=30),
       st.integers(200, 2000), st.integers(0, 500))
def test_round_trip_many_appends_and_reads(tmp_path_factory, batches, segment_bytes, interval):
    d = tmp_path_factory.mktemp("rt")
    log = open_log(d, segment_bytes=segment_bytes, index_interval_bytes=interval)
    expected = []
    for vals in batches:
        buf = concat(make_batch(vals))
        log.append_as_leader(buf, validate_produce_batches(buf, MAX), 0, 0)
        expected += vals
    got = read_all(log)
    assert [r.value for r in got] == expected
    assert [r.offset for r in got] == list(range(len(expected)))
    for off in range(0, len(expected), 7):
        s = log.read(off, 1, len(expected))
        h = parse_batches(log.read_bytes(s))[0]
        assert h.base_offset <= off <= h.last_offset
    log.close()
    again = Log.open(str(d), "topic", 0, log.config, now_ms=0, clean_shutdown=True)
    assert [r.value for r in read_all(again)] == expected


def test_follower_append_may_leave_an_offset_gap(tmp_path):
    log = open_log(tmp_path)
    buf = make_batch([b"a", b"b"], base_offset=10)
    log.append_as_follower(buf)
    assert log.log_end_offset == 12
    s = log.read(0, MAX, 12)
    assert s.first_batch_offset == 10


def test_read_moves_to_next_segment_when_offset_is_past_segment_data(tmp_path):
    log = open_log(tmp_path, segment_bytes=150)
    log.append_as_follower(make_batch([b"x" * 100], base_offset=0))
    log.append_as_follower(make_batch([b"y" * 100], base_offset=5))
    assert [s.base_offset for s in log.segments] == [0, 5]
    assert log.read(2, MAX, 6).first_batch_offset == 5


def test_duplicate_on_log_append_time_topic_returns_original_append_time(tmp_path):
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    kw = dict(producer_id=9, producer_epoch=0, base_sequence=0)
    first = produce(log, [b"a"], now_ms=100, **kw)
    again = produce(log, [b"a"], now_ms=200, **kw)
    assert again.duplicate and again.log_append_time_ms == first.log_append_time_ms == 100


def test_append_accepts_immutable_bytes(tmp_path):
    log = open_log(tmp_path)
    buf = bytes(make_batch([b"a"]))
    assert log.append_as_leader(buf, validate_produce_batches(buf, MAX), 0, 0).first_offset == 0


def test_old_segments_release_descriptors_and_reopen_on_read(tmp_path):
    log = open_log(tmp_path, segment_bytes=150)
    for _ in range(8):
        produce(log, [b"x" * 100])
    assert not log.segments[0].is_open
    assert log.read(0, MAX, 8).first_batch_offset == 0
    assert log.segments[0].is_open


def test_deleted_segment_fd_stays_valid_for_delete_delay_even_without_slice(tmp_path):
    log = open_log(tmp_path, segment_bytes=150)
    for _ in range(4):
        produce(log, [b"x" * 100])
    s = log.read(0, MAX, 4)
    fd, pos, size, data = s.fd, s.position, s.size, log.read_bytes(s)
    del s  # a caller that only kept the fd number (FileRegion)
    log.delete_records_before(3)
    assert os.pread(fd, size, pos) == data


def test_write_error_is_kafka_storage_error_and_log_stays_consistent(tmp_path, monkeypatch):
    from broker.log import segment as segment_mod

    log = open_log(tmp_path)
    produce(log, [b"a"])
    real = segment_mod._write_all

    def failing(fd, data, pos):
        real(fd, bytes(data)[:10], pos)  # a partial write, then the disk fills up
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(segment_mod, "_write_all", failing)
    with pytest.raises(KafkaError) as e:
        produce(log, [b"b"])
    assert e.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    monkeypatch.setattr(segment_mod, "_write_all", real)
    assert produce(log, [b"c"]).first_offset == 1
    assert [r.value for r in read_all(log)] == [b"a", b"c"]


@pytest.mark.parametrize("topic_codec,codec", [("zstd", 4), ("uncompressed", 0), ("lz4", 3)])
def test_topic_compression_type_recompresses_batches(tmp_path, topic_codec, codec):
    log = open_log(tmp_path, compression_type=topic_codec)
    values = [b"value-%d" % i * 10 for i in range(20)]
    info = produce(log, values, compression=1, producer_id=3, producer_epoch=0, base_sequence=0,
                   timestamps=list(range(100, 120)))
    assert (info.first_offset, info.last_offset) == (0, 19)
    data = log.read_bytes(log.read(0, MAX, 20))
    (h,) = parse_batches(data)
    assert (h.compression, h.producer_id, h.base_sequence, h.max_timestamp) == (codec, 3, 0, 119)
    assert [(r.offset, r.value, r.timestamp) for r in decode_records(data)] == [
        (i, v, 100 + i) for i, v in enumerate(values)]
    assert produce(log, values, compression=1, producer_id=3, producer_epoch=0, base_sequence=0).duplicate


def test_producer_compression_type_keeps_client_bytes(tmp_path):
    log = open_log(tmp_path)
    buf = make_batch([b"a" * 50] * 5, compression=3)
    log.append_as_leader(bytearray(buf), validate_produce_batches(buf, MAX), 0, 0)
    data = log.read_bytes(log.read(0, MAX, 5))
    assert data[61:] == bytes(buf[61:]) and parse_batches(data)[0].compression == 3


async def test_offset_for_timestamp_of_an_undecodable_batch_is_corrupt_message(tmp_path, caplog):
    from hostile import ZSTD, batch, count_lie, zstd_rle_bomb
    log = open_log(tmp_path)
    produce(log, [b"a"], timestamps=[100])
    for bad in (count_lie(base_timestamp=200), batch(zstd_rle_bomb(30 << 30), 10, codec=ZSTD, base_timestamp=300)):
        buf = bytearray(bad)  # written behind produce's validation, as by a broker before it
        log.append_as_leader(buf, parse_batches(buf), 0, 0)
    assert log.offset_for_timestamp(50) == (0, 100)
    for ts in (150, 250):
        with pytest.raises(KafkaError) as e:
            log.offset_for_timestamp(ts)
        assert e.value.code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(KafkaError):
        log.max_timestamp_and_offset()
    for ts in (150, 250):
        with pytest.raises(KafkaError) as e:
            await log.offset_for_timestamp_async(ts)
        assert e.value.code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(KafkaError):
        await log.max_timestamp_and_offset_async()
    assert await log.offset_for_timestamp_async(50) == (0, 100)
    first = os.path.join(log.path, "00000000000000000000.log")
    assert f"topic-0: cannot decode the record batch at position {log.segments[0].size - 77} of {first}" in caplog.text


async def test_timestamp_lookups_decode_in_a_thread_with_the_same_answers(tmp_path):
    log = open_log(tmp_path, segment_bytes=300)
    produce(log, [b"a" * 50, b"b" * 50], timestamps=[10, 20])
    produce(log, [b"c" * 50, b"d" * 50, b"e" * 50], timestamps=[5, 90, 30], compression=4)
    for ts in (0, 15, 21, 90, 91):
        assert await log.offset_for_timestamp_async(ts) == log.offset_for_timestamp(ts)
    assert await log.max_timestamp_and_offset_async() == log.max_timestamp_and_offset() == (90, 3)
