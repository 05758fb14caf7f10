"""Crash recovery: torn tails, corrupt batches, lost and damaged indexes."""

import os
import random
import uuid

from batch_builder import make_batch
from hypothesis import given, settings
from hypothesis import strategies as st
from log_helpers import MAX, all_values, cfg, crash, open_log, produce

from broker.log import Log, validate_produce_batches


def seg0(log, suffix=".log"):
    return os.path.join(log.path, f"{0:020d}{suffix}")


def test_recovery_truncates_torn_tail(tmp_path):
    log = open_log(tmp_path)
    for i in range(5):
        produce(log, [b"v%d" % i * 30])
    size = log.active_segment.size
    crash(log)
    os.truncate(seg0(log), size - 7)
    log = open_log(tmp_path)
    assert log.log_end_offset == 4
    assert all_values(log) == [b"v%d" % i * 30 for i in range(4)]
    assert os.path.getsize(seg0(log)) < size - 7
    assert produce(log, [b"new"]).first_offset == 4


def test_recovery_truncates_at_corrupt_batch_and_drops_later_segments(tmp_path):
    log = open_log(tmp_path, cfg(segment_bytes=300))
    for _ in range(10):
        produce(log, [b"x" * 100])
    assert len(log.segments) >= 3
    victim = log.segments[1]
    crash(log)
    with open(victim.log_path, "r+b") as f:  # flip a byte inside the first batch's records
        f.seek(80)
        b = f.read(1)
        f.seek(80)
        f.write(bytes([b[0] ^ 0xFF]))
    log = open_log(tmp_path, cfg(segment_bytes=300))
    assert log.log_end_offset == victim.base_offset
    assert len(all_values(log)) == victim.base_offset


def test_recovery_discards_appended_garbage(tmp_path):
    log = open_log(tmp_path)
    produce(log, [b"a"])
    produce(log, [b"b"])
    crash(log)
    with open(seg0(log), "ab") as f:
        f.write(os.urandom(200))
    log = open_log(tmp_path)
    assert all_values(log) == [b"a", b"b"]


def test_recovery_rebuilds_missing_index(tmp_path):
    log = open_log(tmp_path, cfg(index_interval_bytes=100))
    for i in range(20):
        produce(log, [b"x" * 100], base_timestamp=i)
    log.close()
    entries = len(log.active_segment.index)
    os.unlink(seg0(log, ".index"))
    os.unlink(seg0(log, ".timeindex"))
    log = open_log(tmp_path, cfg(index_interval_bytes=100), clean_shutdown=True)
    assert len(log.active_segment.index) == entries
    assert os.path.getsize(seg0(log, ".index")) == entries * 8
    assert log.offset_for_timestamp(13) == (13, 13)
    assert log.read(17, 1, 20).first_batch_offset == 17


def test_recovery_rebuilds_corrupt_index(tmp_path):
    log = open_log(tmp_path, cfg(index_interval_bytes=100))
    for _ in range(20):
        produce(log, [b"x" * 100])
    log.close()
    with open(seg0(log, ".index"), "r+b") as f:
        f.write(b"\xff" * 8)  # relative offset -1
    log = open_log(tmp_path, cfg(index_interval_bytes=100), clean_shutdown=True)
    assert log.log_end_offset == 20
    assert [log.read(i, 1, 20).first_batch_offset for i in range(20)] == list(range(20))


def test_clean_shutdown_skips_crc_scan(tmp_path):
    """Only the tail after the last index entry is CRC-checked after a clean shutdown
    (tests/unit/log/test_storage_faults.py has the torn tails)."""
    config = cfg(index_interval_bytes=50)
    log = open_log(tmp_path, config)
    for _ in range(5):
        produce(log, [b"abc" * 20])
    log.close()
    with open(seg0(log), "r+b") as f:  # corrupt a record byte of the first batch; a clean open must not notice
        f.seek(70)
        b = f.read(1)
        f.seek(70)
        f.write(bytes([b[0] ^ 1]))
    assert open_log(tmp_path, config, clean_shutdown=True).log_end_offset == 5
    assert open_log(tmp_path, config).log_end_offset == 0


def test_segments_before_recovery_point_are_not_scanned(tmp_path):
    config = cfg(segment_bytes=200)
    log = open_log(tmp_path, config)
    for _ in range(4):
        produce(log, [b"x" * 150])
    log.close()
    first = log.segments[0]
    with open(first.log_path, "r+b") as f:
        f.seek(70)
        f.write(b"\x00")
    log = open_log(tmp_path, config, recovery_point=log.segments[-1].base_offset)
    assert log.log_end_offset == 4


def test_recovery_removes_stray_files(tmp_path):
    log = open_log(tmp_path)
    produce(log, [b"a"])
    log.close()
    for name in ("00000000000000000005.index", "x.tmp", "00000000000000000000.log.deleted"):
        open(os.path.join(log.path, name), "wb").close()
    log = open_log(tmp_path)
    assert sorted(n for n in os.listdir(log.path) if n[0].isdigit() and not n.endswith(".snapshot")) == [
        "00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex"]


def test_crash_without_close_loses_nothing_written(tmp_path):
    log = open_log(tmp_path, cfg(segment_bytes=500, index_interval_bytes=50))
    for i in range(30):
        produce(log, [b"%d" % i * 20])
    crash(log)
    log = open_log(tmp_path, cfg(segment_bytes=500, index_interval_bytes=50))
    assert all_values(log) == [b"%d" % i * 20 for i in range(30)]
    assert [log.read(i, 1, 30).first_batch_offset for i in range(30)] == list(range(30))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 25), st.integers(150, 1500))
def test_crash_at_random_byte_keeps_a_prefix(tmp_path_factory, seed, n, segment_bytes):
    rng = random.Random(seed)
    d = tmp_path_factory.mktemp("crash")
    config = cfg(segment_bytes=segment_bytes, index_interval_bytes=64)
    log = open_log(d, config)
    values = [bytes([rng.randrange(256)]) * rng.randrange(1, 200) for _ in range(n)]
    for v in values:
        produce(log, [v])
    crash(log)
    # cut the last segment at a random byte and maybe scribble on the cut
    last = log.segments[-1]
    size = os.path.getsize(last.log_path)
    cut = rng.randrange(0, size + 1)
    os.truncate(last.log_path, cut)
    if rng.random() < 0.5:
        with open(last.log_path, "ab") as f:
            f.write(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 100))))
    log = open_log(d, config)
    got = all_values(log)
    assert got == values[:len(got)]
    assert len(got) >= last.base_offset
    assert log.log_end_offset == len(got)
    produce(log, [b"after"])
    assert all_values(log)[-1] == b"after"


def test_clean_open_reads_only_index_tails(tmp_path):
    config = cfg(segment_bytes=600, index_interval_bytes=50)
    log = open_log(tmp_path, config)
    for i in range(20):
        produce(log, [b"x" * 100], base_timestamp=i)
    log.close()
    log = open_log(tmp_path, config, clean_shutdown=True)
    first = log.segments[0]
    assert not first.index._loaded and not first.time_index._loaded
    assert first.max_timestamp == first.time_index.last_entry[0]
    assert log.read(1, 1, 20).first_batch_offset == 1  # loads on first use
    assert first.index._loaded


def test_index_damaged_in_the_middle_is_rebuilt_on_first_use(tmp_path):
    config = cfg(index_interval_bytes=50)
    log = open_log(tmp_path, config)
    for _ in range(20):
        produce(log, [b"x" * 100])
    log.close()
    good = open(seg0(log, ".index"), "rb").read()
    bad = bytearray(good)
    bad[8:16] = bad[0:8]  # a repeated entry: passes the open-time tail check
    with open(seg0(log, ".index"), "wb") as f:
        f.write(bad)
    log = open_log(tmp_path, config, clean_shutdown=True)
    assert [log.read(i, 1, 20).first_batch_offset for i in range(20)] == list(range(20))
    assert open(seg0(log, ".index"), "rb").read() == good


def test_epoch_entries_not_yet_checkpointed_are_rebuilt_from_batches(tmp_path):
    """Leader epoch entries reach the checkpoint only on flush; a crash before that loses
    them from the file, and recovery must derive them again from the batches."""
    log = open_log(tmp_path)
    for epoch, n in ((2, 3), (5, 2), (7, 1)):
        for _ in range(n):
            buf = make_batch([b"x"])
            log.append_as_leader(buf, validate_produce_batches(buf, MAX), epoch, 0)
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == [(2, 0), (5, 3), (7, 5)]
    crash(log)
    log = open_log(tmp_path)
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == [(2, 0), (5, 3), (7, 5)]
    assert log.leader_epoch_cache.end_offset_for(5, log.log_end_offset) == (5, 5)


def test_flush_makes_epoch_entries_and_new_log_durable(tmp_path):
    log = Log.open(str(tmp_path), "t", 0, cfg(), now_ms=0, defer_sync=True)
    assert log.needs_sync
    buf = make_batch([b"x"])
    log.append_as_leader(buf, validate_produce_batches(buf, MAX), 4, 0)
    log.flush()
    assert not log.needs_sync
    crash(log)
    log = open_log(tmp_path, recovery_point=1)  # nothing left to recover: the file must have it
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == [(4, 0)]


def test_new_log_index_files_and_partition_metadata_are_made_by_the_first_flush(tmp_path):
    tid = uuid.uuid4()
    log = Log.open(str(tmp_path), "t", 0, cfg(), now_ms=0, topic_id=tid, defer_sync=True)
    assert os.path.exists(seg0(log)) and not os.path.exists(seg0(log, ".index"))
    assert not os.path.exists(os.path.join(log.path, "partition.metadata"))
    log.flush()
    assert os.path.getsize(seg0(log, ".index")) == 0 and os.path.getsize(seg0(log, ".timeindex")) == 0
    crash(log)
    log = open_log(tmp_path, clean_shutdown=True)
    assert log.log_end_offset == 0 and log.topic_id == tid


def test_a_new_log_lost_before_its_first_flush_takes_its_topic_id_again(tmp_path):
    log = Log.open(str(tmp_path), "t", 0, cfg(), now_ms=0, topic_id=uuid.uuid4(), defer_sync=True)
    crash(log)
    tid = uuid.uuid4()  # no partition.metadata on disk: the id the metadata gives is taken, not refused
    assert Log.open(str(tmp_path), "t", 0, cfg(), now_ms=0, topic_id=tid).topic_id == tid


def test_an_empty_log_closed_before_any_flush_has_its_index_files(tmp_path):
    open_log(tmp_path).close()
    assert os.path.getsize(os.path.join(str(tmp_path), "t-0", f"{0:020d}.index")) == 0


def test_crash_before_the_first_flush_rebuilds_the_missing_indexes(tmp_path):
    log = open_log(tmp_path, cfg(index_interval_bytes=100))
    for i in range(20):
        produce(log, [b"x" * 100], base_timestamp=i)
    entries = len(log.active_segment.index)
    crash(log)
    assert not os.path.exists(seg0(log, ".index"))
    log = open_log(tmp_path, cfg(index_interval_bytes=100))
    assert len(log.active_segment.index) == entries
    assert log.offset_for_timestamp(13) == (13, 13)
    assert all_values(log) == [b"x" * 100] * 20
    log.close()
    assert os.path.getsize(seg0(log, ".index")) == entries * 8
