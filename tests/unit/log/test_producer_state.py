"""Idempotent producer checks on append, and the state surviving reopen and truncation."""

import os

import pytest
from batch_builder import concat, make_batch

from broker.log import Log, LogConfig, validate_produce_batches
from common.errors import ErrorCode, KafkaError

MAX = 1 << 20
PID = 4242


def open_log(d, **kw):
    config = LogConfig.from_topic_configs({k.replace("_", "."): v for k, v in kw.pop("config", {}).items()})
    return Log.open(str(d), "t", 0, config, now_ms=0, **kw)


def send(log, seq, n=1, epoch=0, pid=PID, **kw):
    buf = make_batch([b"v"] * n, producer_id=pid, producer_epoch=epoch, base_sequence=seq, **kw)
    return log.append_as_leader(buf, validate_produce_batches(buf, MAX), 0, 0)


def error(fn, *a, **kw):
    with pytest.raises(KafkaError) as e:
        fn(*a, **kw)
    return e.value.code


def test_sequential_batches_append(tmp_path):
    log = open_log(tmp_path)
    assert send(log, 0, n=3).first_offset == 0
    assert send(log, 3, n=2).first_offset == 3
    entry = log.producer_state.producers[PID]
    assert (entry.epoch, entry.last_seq, entry.last_offset) == (0, 4, 4)


def test_duplicate_batch_returns_original_offsets(tmp_path):
    log = open_log(tmp_path)
    send(log, 0, n=2)
    send(log, 2, n=3)
    send(log, 5, n=1)
    size = log.active_segment.size
    dup = send(log, 2, n=3)
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (2, 4)
    assert log.active_segment.size == size and log.log_end_offset == 6


def test_duplicate_detected_among_last_five_batches_only(tmp_path):
    log = open_log(tmp_path)
    for seq in range(7):
        send(log, seq)
    assert send(log, 2).duplicate  # batches 2..6 are cached
    assert error(send, log, 1) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_sequence_gap_is_out_of_order(tmp_path):
    log = open_log(tmp_path)
    send(log, 0, n=2)
    assert error(send, log, 3) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.log_end_offset == 2


def test_unknown_producer_may_start_at_any_sequence_like_kafka(tmp_path):
    log = open_log(tmp_path)
    assert send(log, 5).first_offset == 0  # its earlier records may have been deleted
    assert error(send, log, 7) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert send(log, 6).first_offset == 1


def test_unknown_transactional_producer_must_start_at_sequence_zero(tmp_path):
    log = open_log(tmp_path)
    assert error(send, log, 5, transactional=True) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_strict_mode_rejects_unknown_producer_with_nonzero_sequence(tmp_path, monkeypatch):
    from broker.log.producer_state import ProducerStateManager
    monkeypatch.setattr(ProducerStateManager, "reject_unknown_producer_sequence", True)
    log = open_log(tmp_path)
    assert error(send, log, 5) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_stale_epoch_is_fenced(tmp_path):
    log = open_log(tmp_path)
    send(log, 0, epoch=3)
    assert error(send, log, 1, epoch=2) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_new_epoch_must_restart_at_sequence_zero(tmp_path):
    log = open_log(tmp_path)
    send(log, 0, n=5, epoch=0)
    assert error(send, log, 5, epoch=1) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert send(log, 0, epoch=1).first_offset == 5
    assert log.producer_state.producers[PID].epoch == 1


def test_sequence_wraps_at_int32(tmp_path):
    log = open_log(tmp_path)
    send(log, 0)
    log.producer_state.producers[PID].batches[-1].last_seq = 2**31 - 2
    send(log, 2**31 - 1, n=2)  # covers MAX and wraps to 0
    assert log.producer_state.producers[PID].last_seq == 0
    assert send(log, 1).first_offset == 3


def test_producers_are_independent(tmp_path):
    log = open_log(tmp_path)
    send(log, 0, pid=1)
    send(log, 0, pid=2)
    send(log, 1, pid=1)
    assert error(send, log, 5, pid=2) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_non_idempotent_batches_skip_checks(tmp_path):
    log = open_log(tmp_path)
    buf = make_batch([b"a"])
    log.append_as_leader(buf, validate_produce_batches(buf, MAX), 0, 0)
    assert log.producer_state.producers == {}


def test_multi_batch_request_is_validated_before_any_write(tmp_path):
    log = open_log(tmp_path)
    send(log, 0)
    buf = concat(make_batch([b"a"], producer_id=PID, producer_epoch=0, base_sequence=1),
                 make_batch([b"b"], producer_id=PID, producer_epoch=0, base_sequence=5))
    with pytest.raises(KafkaError):
        log.append_as_leader(buf, validate_produce_batches(buf, MAX), 0, 0)
    assert log.log_end_offset == 1
    assert log.producer_state.producers[PID].last_seq == 0
    send(log, 1)


def test_producer_state_rebuilt_after_reopen(tmp_path):
    log = open_log(tmp_path)
    send(log, 0, n=2)
    send(log, 2, n=2)
    log.close()
    log = open_log(tmp_path, clean_shutdown=True)
    assert send(log, 2, n=2).duplicate
    assert send(log, 4).first_offset == 4


def test_producer_state_rebuilt_after_crash_without_snapshot(tmp_path):
    log = open_log(tmp_path)
    send(log, 0, n=2)
    send(log, 2, n=2)
    for s in log.segments:
        s.release()
    for name in os.listdir(log.path):
        assert not name.endswith(".snapshot")
    log = open_log(tmp_path)
    dup = send(log, 0, n=2)
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (0, 1)
    assert error(send, log, 7) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_snapshot_written_on_roll_and_used_on_reopen(tmp_path):
    log = open_log(tmp_path, config={"segment.bytes": 200})
    for seq in range(6):
        send(log, seq, n=1, base_timestamp=seq)
        # pad with another producer to force rolls
        buf = make_batch([b"x" * 150])
        log.append_as_leader(buf, validate_produce_batches(buf, MAX), 0, 0)
    snaps = sorted(n for n in os.listdir(log.path) if n.endswith(".snapshot"))
    assert snaps and all(int(n[:20]) in [s.base_offset for s in log.segments] for n in snaps)
    for s in log.segments:
        s.release()
    log = open_log(tmp_path, config={"segment.bytes": 200})
    assert send(log, 5).duplicate
    assert not send(log, 6).duplicate


def test_corrupt_snapshot_is_ignored(tmp_path):
    log = open_log(tmp_path)
    send(log, 0)
    log.close()
    (snap,) = [n for n in os.listdir(log.path) if n.endswith(".snapshot")]
    with open(os.path.join(log.path, snap), "r+b") as f:
        f.seek(10)
        f.write(b"\xff\xff")
    log = open_log(tmp_path)
    assert send(log, 0).duplicate  # rebuilt from the log instead


def test_producer_state_rebuilt_on_truncation(tmp_path):
    log = open_log(tmp_path)
    send(log, 0, n=2)
    send(log, 2, n=2)
    send(log, 4, n=2)
    log.truncate_to(4)
    assert log.producer_state.producers[PID].last_seq == 3
    assert send(log, 4, n=2).first_offset == 4


def test_follower_append_updates_producer_state_without_checks(tmp_path):
    leader = open_log(tmp_path / "l")
    send(leader, 0, n=3)
    send(leader, 3, n=1)
    follower = open_log(tmp_path / "f")
    follower.append_as_follower(bytearray(leader.read_bytes(leader.read(0, MAX, 4))))
    assert follower.producer_state.producers[PID].last_seq == 3
    # the follower becomes leader: a retry of the last batch is still a duplicate
    assert send(follower, 3).duplicate


def test_expired_producers_are_removed(tmp_path):
    log = open_log(tmp_path)
    send(log, 0, base_timestamp=1000)
    assert log.remove_expired_producers(now_ms=1000 + 10, expiration_ms=100) == 0
    assert log.remove_expired_producers(now_ms=1000 + 100, expiration_ms=100) == 1
    assert PID not in log.producer_state.producers
