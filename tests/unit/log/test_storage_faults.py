"""Storage faults on real files (issue 18, items 6 and 7).

Torn tails after a clean shutdown (the page cache lost with power after a clean stop),
stale indexes after a crash, and corrupt batches inside closed segments found by reads.
"""

import logging
import os
import struct

import pytest
from batch_builder import make_batch
from log_helpers import MAX, all_values, cfg, crash, open_log, produce

from broker.log import LogManager, fileio, parse_batches, validate_produce_batches
from broker.log.manager import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT
from common.errors import ErrorCode, KafkaError

DEFAULTS = {"segment.bytes": 1 << 20, "retention.ms": 7 * 86_400_000}


def batch_positions(path):
    data = open(path, "rb").read()
    return [(h.pos, h.size, h.base_offset) for h in parse_batches(data)]


def manager(d, **topic):
    return LogManager([str(d)], {**DEFAULTS, **topic}, now_ms=0)


def values(n, start=0):
    return [b"v%05d" % i for i in range(start, start + n)]


def closed_log(d, vals, **topic):
    """A log of one batch per value, closed cleanly (the marker written); its last segment's path."""
    m = manager(d, **topic)
    lg = m.get_or_create("t", 0, None, {})
    for v in vals:
        produce(lg, [v])
    path = lg.active_segment.log_path
    m.close()
    return path


# --- item 6: a torn tail after a clean shutdown -------------------------------------------------

@pytest.mark.parametrize("cut_into_header", [1, 30, 60])
def test_clean_shutdown_then_tail_cut_inside_last_batch_header_keeps_every_complete_batch(tmp_path, cut_into_header):
    """The last segment loses the end of its last batch (inside its 61-byte header) after a
    clean stop. The restarted log must end after the last complete batch: nothing before it
    vanishes, new produces get fresh offsets, and a later kill -9 recovery keeps them."""
    path = closed_log(tmp_path, values(311), **{"index.interval.bytes": "1"})  # an index entry on most batches
    pos, _size, base = batch_positions(path)[-1]
    assert base == 310
    os.truncate(path, pos + cut_into_header)
    m = manager(tmp_path)
    lg = m.get("t", 0)
    assert lg.log_end_offset == 310
    assert os.path.getsize(path) == pos  # the torn bytes are gone, not left under new appends
    assert all_values(lg) == values(310)
    assert [produce(lg, [v]).first_offset for v in values(5, 1000)] == [310, 311, 312, 313, 314]
    crash(lg)  # kill -9: the next start recovers the segment from the checkpointed recovery point
    lg = manager(tmp_path).get("t", 0)
    assert all_values(lg) == values(310) + values(5, 1000)


def test_clean_shutdown_then_tail_cut_inside_last_batch_body(tmp_path):
    path = closed_log(tmp_path, [v * 20 for v in values(50)])
    os.truncate(path, os.path.getsize(path) - 5)
    lg = manager(tmp_path).get("t", 0)
    assert lg.log_end_offset == 49
    assert produce(lg, [b"new"]).first_offset == 49
    assert all_values(lg) == [v * 20 for v in values(49)] + [b"new"]


def test_clean_shutdown_then_torn_tail_with_index_entry_before_it(tmp_path):
    """The last index entry points well before the tear (default index interval): the
    partial header must not stay in the file under the next appends."""
    path = closed_log(tmp_path, values(40))
    size = os.path.getsize(path)
    os.truncate(path, size - 40)  # 40 bytes into... the last batch is shorter than that: inside its header
    lg = manager(tmp_path).get("t", 0)
    last = batch_positions(path)[-1]
    assert lg.log_end_offset == last[2] + 1 and os.path.getsize(path) == last[0] + last[1]
    assert produce(lg, [b"after"]).first_offset == lg.log_end_offset - 1
    crash(lg)
    lg = manager(tmp_path).get("t", 0)
    assert all_values(lg)[-1] == b"after"


def test_clean_shutdown_then_zeroed_tail_is_truncated(tmp_path):
    """Power lost after the size reached the disk but not the data: the tail reads as zeros."""
    path = closed_log(tmp_path, values(20), **{"index.interval.bytes": "1"})
    pos, size, _ = batch_positions(path)[-1]
    with open(path, "r+b") as f:
        f.seek(pos + 8)
        f.write(bytes(size - 8))
    lg = manager(tmp_path).get("t", 0)
    assert lg.log_end_offset == 19
    assert all_values(lg) == values(19)


def test_clean_shutdown_marker_is_written_after_everything_is_flushed(tmp_path, monkeypatch):
    """Every log, its indexes, leader-epoch and producer-state checkpoints are fsynced before
    the clean-shutdown marker exists."""
    m = manager(tmp_path)
    logs = [m.get_or_create("t", p, None, {}) for p in range(3)]
    for lg in logs:
        produce(lg, [b"x"])
    synced: list[str] = []
    marker = os.path.join(str(tmp_path), CLEAN_SHUTDOWN_FILE)
    real_fsync = os.fsync

    def fsync(fd):
        name = os.readlink(f"/proc/self/fd/{fd}")
        if name not in (marker, str(tmp_path)):
            assert not os.path.exists(marker), f"{name} fsynced after the clean-shutdown marker"
        synced.append(name)
        real_fsync(fd)

    monkeypatch.setattr(fileio, "fsync", fsync)  # the log's file layer
    m.close()
    for lg in logs:
        for f in (lg.active_segment.log_path, lg.active_segment.index.path, lg.active_segment.time_index.path):
            assert f in synced
        snap = max(i for i, n in enumerate(synced) if n.startswith(lg.path) and ".snapshot" in n)
        assert lg.path in synced[snap + 1:], "the snapshot's rename is made durable before the marker"
    assert os.path.exists(marker)


# --- item 6: the kill -9 path never falls back below the last valid batch ---------------------------

def test_stale_index_of_a_flushed_segment_does_not_hide_its_batches(tmp_path):
    """A segment below the recovery point is trusted, but its offset index's last entry
    points inside a batch (an index from before a truncation): the segment must keep its
    end offset and every batch must stay readable."""
    config = cfg(segment_bytes=2000, index_interval_bytes=100)
    log = open_log(tmp_path, config)
    for v in values(60):
        produce(log, [v * 10])
    log.close()
    assert len(log.segments) >= 3
    seg = log.segments[1]
    entries = open(seg.index.path, "rb").read()
    rel, pos = struct.unpack(">ii", entries[-8:])
    with open(seg.index.path, "r+b") as f:
        f.seek(len(entries) - 8)
        f.write(struct.pack(">ii", rel, pos + 4))  # its "batch length" is the leader epoch: 0
    rp = log.active_segment.base_offset
    log = open_log(tmp_path, config, recovery_point=rp)  # an unclean start
    assert log.log_end_offset == 60
    assert all_values(log) == [v * 10 for v in values(60)]


def test_index_entry_with_the_wrong_offset_is_rebuilt(tmp_path):
    config = cfg(segment_bytes=2000, index_interval_bytes=100)
    log = open_log(tmp_path, config)
    for v in values(60):
        produce(log, [v * 10])
    log.close()
    seg = log.segments[1]
    entries = open(seg.index.path, "rb").read()
    rel, pos = struct.unpack(">ii", entries[-8:])
    with open(seg.index.path, "r+b") as f:
        f.seek(len(entries) - 8)
        f.write(struct.pack(">ii", rel + 1, pos))  # a batch is there, but not that offset's
    log = open_log(tmp_path, config, clean_shutdown=True)
    assert all_values(log) == [v * 10 for v in values(60)]
    assert [log.read(o, 1, 60).first_batch_offset for o in range(60)] == list(range(60))


def test_truncation_is_checkpointed_so_a_crash_recovers_the_rewritten_tail(tmp_path):
    """A follower truncates, then appends: the recovery-point checkpoint must not keep
    vouching for the bytes that were cut (Kafka checkpoints after truncateTo)."""
    m = manager(tmp_path)
    lg = m.get_or_create("t", 0, None, {})
    for v in values(10):
        produce(lg, [v])
    m.flush_check(10**12)
    lg.flush()
    m.checkpoint_recovery_points()
    lg.truncate_to(5)
    m.flush_check(0)  # the periodic task: nothing due by time, but the recovery point went down
    assert "t 0 5" in open(os.path.join(str(tmp_path), RECOVERY_POINT_CHECKPOINT)).read()


# --- item 7: corruption inside a closed segment, found by reads -------------------------------------

def three_segments(tmp_path, n=60):
    config = cfg(segment_bytes=2000, index_interval_bytes=300)
    log = open_log(tmp_path, config)
    for v in values(n):
        produce(log, [v * 10])
    assert len(log.segments) >= 3
    return log, config


def overwrite(path, pos, data):
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def read_error(log, offset, max_offset=None):
    with pytest.raises(KafkaError) as e:
        log.read(offset, MAX, log.log_end_offset if max_offset is None else max_offset)
    return e.value


@pytest.mark.parametrize("length", [0, 20, 2**31 - 1, 1000])
def test_overwritten_batch_length_in_a_closed_segment_is_reported_not_skipped(tmp_path, caplog, length):
    log, _ = three_segments(tmp_path)
    seg = log.segments[1]
    pos, _size, victim = batch_positions(seg.log_path)[4]
    overwrite(seg.log_path, pos + 8, struct.pack(">i", length))
    caplog.set_level(logging.ERROR, "krafty.log")
    err = read_error(log, victim)
    assert err.code == ErrorCode.CORRUPT_MESSAGE
    assert seg.log_path in caplog.text and f"byte {pos}" in caplog.text
    for o in range(victim, seg.next_offset):  # every offset of the damaged range: an error, at once
        assert read_error(log, o).code == ErrorCode.CORRUPT_MESSAGE
    assert log.damaged_offset == victim
    # before it: whole batches up to the damage, never bytes past it
    s = log.read(seg.base_offset, MAX, log.log_end_offset)
    assert s.position + s.size == pos
    # after it: the next segment is intact and readable
    nxt = log.segments[2].base_offset
    assert log.read(nxt, MAX, log.log_end_offset).first_batch_offset == nxt
    assert caplog.text.count(f"byte {pos}") == 1  # logged once, not on every fetch


def test_flipped_record_byte_fails_the_crc_of_the_batch_at_the_fetch_position(tmp_path):
    log, _ = three_segments(tmp_path)
    seg = log.segments[1]
    pos, size, victim = batch_positions(seg.log_path)[2]
    with open(seg.log_path, "r+b") as f:
        f.seek(pos + size - 3)
        b = f.read(1)
        f.seek(pos + size - 3)
        f.write(bytes([b[0] ^ 0x10]))
    assert read_error(log, victim).code == ErrorCode.CORRUPT_MESSAGE
    assert log.read(victim - 1, 1, log.log_end_offset).first_batch_offset == victim - 1


def test_damage_found_at_open_keeps_the_later_segments_and_is_reported(tmp_path, caplog):
    """A flushed closed segment whose tail does not parse at open is not cut (nor are the
    segments after it dropped): reads report the damage, everything else stays readable."""
    log, config = three_segments(tmp_path)
    seg = log.segments[1]
    pos, _size, victim = batch_positions(seg.log_path)[-1]
    log.close()
    overwrite(seg.log_path, pos + 8, struct.pack(">i", 5))
    caplog.set_level(logging.ERROR, "krafty.log")
    log = open_log(tmp_path, config, clean_shutdown=True)
    assert log.log_end_offset == 60 and log.damaged_offset == victim
    assert seg.log_path in caplog.text
    assert read_error(log, victim).code == ErrorCode.CORRUPT_MESSAGE
    got = all_values(log, skip_errors=True)
    assert got == [v * 10 for v in values(60) if v != b"v%05d" % victim]


def test_a_follower_truncates_to_the_damage_and_takes_the_leaders_copy_again(tmp_path):
    """The follower side of the repair: truncating to the damaged offset drops the bad
    batch and everything after it; the leader's batches then append as usual."""
    leader, config = three_segments(tmp_path / "leader")
    follower, _ = three_segments(tmp_path / "follower")
    seg = follower.segments[1]
    pos, _size, victim = batch_positions(seg.log_path)[3]
    overwrite(seg.log_path, pos + 8, struct.pack(">i", 99999))
    read_error(follower, victim)
    assert follower.damaged_offset == victim
    follower.truncate_to(follower.damaged_offset)
    assert follower.log_end_offset == victim and follower.damaged_offset is None
    assert os.path.getsize(seg.log_path) == pos
    off = victim
    while off < leader.log_end_offset:
        data = leader.read_bytes(leader.read(off, 700, leader.log_end_offset))
        follower.append_as_follower(data)
        off = parse_batches(data)[-1].last_offset + 1
    assert all_values(follower) == all_values(leader)


def test_a_wrong_index_entry_is_not_reported_as_corruption(tmp_path, caplog):
    log, config = three_segments(tmp_path)
    seg = log.segments[1]
    log.close()
    entries = bytearray(open(seg.index.path, "rb").read())
    assert len(entries) >= 16
    rel, p = struct.unpack_from(">ii", entries, 0)
    struct.pack_into(">ii", entries, 0, rel, p + 4)  # inside a batch; still increasing
    open(seg.index.path, "wb").write(entries)
    log = open_log(tmp_path, config, clean_shutdown=True)
    caplog.set_level(logging.ERROR, "krafty.log")
    assert all_values(log) == [v * 10 for v in values(60)]
    assert log.damaged_offset is None and "corrupt" not in caplog.text


def test_an_io_error_on_read_is_kafka_storage_error(tmp_path, monkeypatch):
    log, _ = three_segments(tmp_path)

    def pread(*a):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(fileio, "pread", pread)
    assert read_error(log, 3).code == ErrorCode.KAFKA_STORAGE_ERROR


def test_plausible_wrong_length_of_a_large_batch_is_caught_at_the_fetch_position(tmp_path):
    """Batches above READ_CRC_MAX_BYTES are not CRC-checked on every read: their length must
    lead to the next batch's header, or the read fails."""
    log = open_log(tmp_path, cfg(segment_bytes=10 << 20))
    for i in range(4):
        produce(log, [bytes([65 + i]) * 100_000])
    pos, size, victim = batch_positions(log.active_segment.log_path)[1]
    overwrite(log.active_segment.log_path, pos + 8, struct.pack(">i", size - 12 - 500))
    assert read_error(log, victim).code == ErrorCode.CORRUPT_MESSAGE
    assert log.damaged_offset == victim
    assert log.read(0, MAX, 4).size == pos  # the batch before it is still served, alone


def test_a_damaged_compacted_log_is_not_rewritten_and_the_others_are_compacted(tmp_path, caplog):
    """The cleaner used to stop quietly at a batch that did not parse and swap in a segment
    without everything after it; now that log is left alone (with an error) and the next
    log is compacted."""
    m = manager(tmp_path)
    logs = [m.get_or_create(t, 0, None, {"cleanup.policy": "compact", "segment.bytes": "600"}) for t in ("a", "b")]
    for lg in logs:
        for i in range(30):
            buf = make_batch([b"v%d" % i], keys=[b"k%d" % (i % 3)])
            lg.append_as_leader(buf, validate_produce_batches(buf, MAX), 0, 0)
    seg = logs[0].segments[0]
    pos, _size, _ = batch_positions(seg.log_path)[1]
    overwrite(seg.log_path, pos + 8, struct.pack(">i", 3))
    size = os.path.getsize(seg.log_path)
    caplog.set_level(logging.ERROR, "krafty.log")
    assert m.cleaner_check(0, force=True) > 0
    assert os.path.getsize(seg.log_path) == size and "a-0: not compacted" in caplog.text
