"""Transactions in one partition's log: producer state with open and completed transactions,
markers and their fencing, the last stable offset, the aborted transaction index (.txnindex),
KIP-890 verification guards, snapshots in Kafka's format, recovery after a crash, truncation."""

import os
import struct

import pytest
from batch_builder import make_batch
from log_helpers import MAX, cfg, crash, open_log

from broker.log import parse_batches, validate_produce_batches
from broker.log.batch import build_end_txn_marker, read_end_txn_marker
from broker.log.producer_state import COORDINATOR, parse_snapshot
from broker.log.txn_index import ENTRY_SIZE, AbortedTxn
from common.errors import ErrorCode, KafkaError

A, B = 1000, 2000  # producer ids


def txn(log, pid, seq, n=1, epoch=0, verify=True, transactional=True):
    """A client's transactional batch, verified with the coordinator first (KIP-890)."""
    guard = log.producer_state.maybe_start_verification(pid, seq, epoch, 0) if verify else None
    buf = make_batch([b"t%d" % i for i in range(n)], producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                     transactional=transactional)
    return log.append_as_leader(buf, validate_produce_batches(buf, MAX), 0, 0, verification_guard=guard,
                                require_verification=True)


def plain(log, n=1):
    buf = make_batch([b"p"] * n)
    return log.append_as_leader(buf, validate_produce_batches(buf, MAX), 0, 0)


def marker(log, pid, commit, epoch=0, coordinator_epoch=0, tv=0, ts=5):
    buf = build_end_txn_marker(pid, epoch, commit, coordinator_epoch, ts)
    return log.append_as_leader(buf, parse_batches(buf), 0, 0, origin=COORDINATOR, transaction_version=tv)


def error(fn, *a, **kw):
    with pytest.raises(KafkaError) as e:
        fn(*a, **kw)
    return e.value.code


def test_marker_batch_round_trips():
    buf = build_end_txn_marker(7, 3, True, 42, 123)
    (h,) = parse_batches(buf)
    assert h.is_control and h.is_transactional and h.producer_id == 7 and h.producer_epoch == 3
    assert h.base_sequence == -1 and h.records_count == 1
    m = read_end_txn_marker(buf)
    assert (m.commit, m.coordinator_epoch, m.timestamp) == (True, 42, 123)
    assert read_end_txn_marker(build_end_txn_marker(7, 3, False, 1, 0)).commit is False


def test_lso_is_first_offset_of_open_transaction(tmp_path):
    log = open_log(tmp_path)
    plain(log, 2)                       # 0-1
    assert log.last_stable_offset(2) == 2
    txn(log, A, 0, n=3)                 # 2-4
    plain(log)                          # 5
    assert log.last_stable_offset(6) == 2
    assert log.last_stable_offset(1) == 1  # never above the high watermark
    assert log.producer_state.producers[A].current_txn_first_offset == 2


def test_lso_waits_for_the_marker_to_be_replicated(tmp_path):
    log = open_log(tmp_path)
    txn(log, A, 0, n=2)                 # 0-1
    txn(log, B, 0)                      # 2
    marker(log, A, commit=True)         # 3
    assert log.last_stable_offset(3) == 0   # A's marker not below the HW yet
    assert log.last_stable_offset(4) == 2   # now only B is open
    marker(log, B, commit=False)        # 5? no: 4
    assert log.last_stable_offset(4) == 2
    assert log.last_stable_offset(5) == 5
    assert log.producer_state.producers[A].current_txn_first_offset == -1


def test_abort_marker_goes_into_the_txn_index_in_kafkas_format(tmp_path):
    log = open_log(tmp_path)
    txn(log, A, 0, n=2)                 # 0-1
    txn(log, B, 0)                      # 2
    marker(log, A, commit=False)        # 3: B still open -> LSO 2
    marker(log, B, commit=True)         # 4: commits are not indexed
    seg = log.active_segment
    assert seg.txn_index.entries == [AbortedTxn(A, 0, 3, 2)]
    with open(seg.txn_index.path, "rb") as f:
        data = f.read()
    assert len(data) == ENTRY_SIZE == 34
    assert struct.unpack(">hqqqq", data) == (0, A, 0, 3, 2)
    assert [(t.producer_id, t.first_offset) for t in log.aborted_transactions(0, 5)] == [(A, 0)]


def test_markers_are_fenced_by_producer_and_coordinator_epochs(tmp_path):
    log = open_log(tmp_path)
    txn(log, A, 0, epoch=2)
    assert error(marker, log, A, True, epoch=1) == ErrorCode.INVALID_PRODUCER_EPOCH
    marker(log, A, True, epoch=2, coordinator_epoch=5)
    assert error(marker, log, A, False, epoch=2, coordinator_epoch=4) == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert log.producer_state.producers[A].coordinator_epoch == 5


def test_transaction_version_2_markers_need_a_newer_epoch(tmp_path):
    log = open_log(tmp_path)
    txn(log, A, 0, epoch=3)
    assert error(marker, log, A, True, epoch=3, tv=2) == ErrorCode.INVALID_PRODUCER_EPOCH
    marker(log, A, True, epoch=4, tv=2)
    marker(log, A, True, epoch=4, tv=2)  # a retried marker of an ended transaction is accepted (KAFKA-19999)
    assert log.producer_state.producers[A].epoch == 4
    # the producer's next transaction in the bumped epoch starts at sequence 0
    assert error(txn, log, A, 1, epoch=4) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    txn(log, A, 0, epoch=4)


def test_plain_write_of_a_producer_inside_its_transaction_is_refused(tmp_path):
    log = open_log(tmp_path)
    txn(log, A, 0)
    assert error(txn, log, A, 1, verify=False, transactional=False) == ErrorCode.INVALID_TXN_STATE


def test_transactional_batch_needs_a_verification_guard(tmp_path):
    log = open_log(tmp_path)
    assert error(txn, log, A, 0, verify=False) == ErrorCode.INVALID_TXN_STATE
    txn(log, A, 0)                      # verified: starts the transaction
    txn(log, A, 1, verify=False)        # inside the transaction: nothing to verify
    assert log.producer_state.verification == {}


def test_marker_between_verification_and_append_fails_the_append(tmp_path):
    """KIP-890's hanging transaction: a late batch of an aborted transaction must not open a new one."""
    log = open_log(tmp_path)
    txn(log, A, 0)
    guard = log.producer_state.maybe_start_verification(A, 1, 0, 0)
    assert guard is None  # the transaction is open: no verification needed
    marker(log, A, commit=False)
    # the producer retries its second batch after the abort: verification starts...
    guard = log.producer_state.maybe_start_verification(A, 1, 0, 0)
    assert guard is not None
    # ...but the coordinator aborts again (another marker) before the append lands
    marker(log, A, commit=False)
    buf = make_batch([b"late"], producer_id=A, producer_epoch=0, base_sequence=1, transactional=True)
    assert error(log.append_as_leader, buf, validate_produce_batches(buf, MAX), 0, 0, verification_guard=guard,
                 require_verification=True) == ErrorCode.INVALID_TXN_STATE
    assert log.last_stable_offset(log.log_end_offset) == log.log_end_offset  # nothing left hanging


def test_a_v2_marker_leaves_the_next_transactions_verification_in_place(tmp_path):
    """Transaction version 2 (Kafka's UnifiedLog, isV2NextTransactionStarted): the producer's next
    transaction runs at the epoch its previous one's marker carries, and may reach the leader (and
    be verified: the coordinator adds the partition once the marker is written) while that marker
    is on its way; the marker in that epoch does not end the new verification."""
    log = open_log(tmp_path)
    ps = log.producer_state
    g0 = ps.maybe_start_verification(A, 0, 3, 0, supports_epoch_bump=True)
    buf = make_batch([b"t1"], producer_id=A, producer_epoch=3, base_sequence=0, transactional=True)
    log.append_as_leader(buf, validate_produce_batches(buf, MAX), 0, 0, verification_guard=g0, require_verification=True)
    # the commit bumps the epoch to 4; the next transaction's first batch (epoch 4) is verified first
    guard = ps.maybe_start_verification(A, 0, 4, 0, supports_epoch_bump=True)
    marker(log, A, True, epoch=4, tv=2)
    assert ps.verification_guard(A) is guard
    buf = make_batch([b"t2"], producer_id=A, producer_epoch=4, base_sequence=0, transactional=True)
    log.append_as_leader(buf, validate_produce_batches(buf, MAX), 0, 0, verification_guard=guard,
                         require_verification=True)
    assert ps.verification == {}  # the data ended it
    assert log.last_stable_offset(log.log_end_offset) == 2  # the new transaction is open from offset 2


def test_a_v2_marker_ends_a_verification_of_the_transaction_it_ends(tmp_path):
    """A late batch of the transaction the marker ends (its epoch, not the bumped one) is refused."""
    log = open_log(tmp_path)
    ps = log.producer_state
    g0 = ps.maybe_start_verification(A, 0, 3, 0, supports_epoch_bump=True)
    buf = make_batch([b"t1"], producer_id=A, producer_epoch=3, base_sequence=0, transactional=True)
    log.append_as_leader(buf, validate_produce_batches(buf, MAX), 0, 0, verification_guard=g0, require_verification=True)
    marker(log, A, False, epoch=4, tv=2)
    late = ps.maybe_start_verification(A, 1, 3, 0, supports_epoch_bump=True)
    marker(log, A, False, epoch=4, tv=2)  # a retried copy of the abort
    assert ps.verification_guard(A) is None
    buf = make_batch([b"late"], producer_id=A, producer_epoch=3, base_sequence=1, transactional=True)
    assert error(log.append_as_leader, buf, validate_produce_batches(buf, MAX), 0, 0, verification_guard=late,
                 require_verification=True) in (ErrorCode.INVALID_TXN_STATE, ErrorCode.INVALID_PRODUCER_EPOCH)


def test_verification_with_stale_epoch_is_invalid_producer_epoch(tmp_path):
    log = open_log(tmp_path)
    txn(log, A, 0, epoch=5)
    marker(log, A, True, epoch=5)
    assert error(txn, log, A, 0, epoch=4) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_verification_blocks_a_higher_sequence_written_first(tmp_path):
    log = open_log(tmp_path)
    txn(log, A, 0)
    marker(log, A, True)
    ps = log.producer_state
    low = ps.maybe_start_verification(A, 1, 0, 0)
    assert ps.maybe_start_verification(A, 3, 0, 0) is low  # the same verification, lowest sequence 1
    buf = make_batch([b"x"], producer_id=A, producer_epoch=0, base_sequence=3, transactional=True)
    assert error(log.append_as_leader, buf, validate_produce_batches(buf, MAX), 0, 0, verification_guard=low,
                 require_verification=True) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_snapshot_is_kafkas_version_1_and_carries_open_transactions(tmp_path):
    log = open_log(tmp_path)
    txn(log, A, 0, n=2, epoch=1)        # 0-1, left open
    txn(log, B, 0, epoch=0)             # 2
    marker(log, B, True, coordinator_epoch=9)  # 3
    log.close()
    (snap,) = [n for n in os.listdir(log.path) if n.endswith(".snapshot")]
    with open(os.path.join(log.path, snap), "rb") as f:
        data = f.read()
    version, _crc, count = struct.unpack_from(">hIi", data)
    assert (version, count, len(data)) == (1, 2, 10 + 2 * 46)
    entries = parse_snapshot(data)
    assert (entries[A].epoch, entries[A].last_seq, entries[A].last_offset, entries[A].current_txn_first_offset) \
        == (1, 1, 1, 0)
    assert (entries[B].coordinator_epoch, entries[B].current_txn_first_offset) == (9, -1)
    log = open_log(tmp_path, clean_shutdown=True)
    assert log.last_stable_offset(4) == 0
    assert list(log.producer_state.ongoing) == [0]
    marker(log, A, False, epoch=1)
    assert log.last_stable_offset(5) == 5


def test_recovery_after_a_crash_rebuilds_open_transactions_and_the_txn_index(tmp_path):
    log = open_log(tmp_path, cfg(segment_bytes=300))
    txn(log, A, 0, n=3)                 # 0-2
    for _ in range(4):
        plain(log)                      # rolls segments
    txn(log, B, 0)
    marker(log, A, commit=False)
    txn(log, B, 1)
    before = [(s.base_offset, list(s.txn_index.entries)) for s in log.segments]
    assert any(e for _, e in before)
    crash(log)                          # kill -9: no close, no final snapshot
    for name in os.listdir(log.path):   # and the index files lost
        if name.endswith((".txnindex", ".snapshot")):
            os.unlink(os.path.join(log.path, name))
    log = open_log(tmp_path, cfg(segment_bytes=300))
    assert [(s.base_offset, list(s.txn_index.entries)) for s in log.segments] == before
    b_first = log.producer_state.producers[B].current_txn_first_offset
    assert b_first >= 0 and log.last_stable_offset(log.log_end_offset) == b_first
    assert [t.producer_id for t in log.aborted_transactions(0, log.log_end_offset)] == [A]


def test_torn_txn_index_is_rebuilt(tmp_path):
    log = open_log(tmp_path)
    txn(log, A, 0)
    marker(log, A, commit=False)
    txn(log, B, 0)
    marker(log, B, commit=False)
    log.close()
    path = log.active_segment.txn_index.path
    with open(path, "r+b") as f:
        f.truncate(ENTRY_SIZE + 10)     # the second entry half written
    log = open_log(tmp_path, clean_shutdown=True)
    assert [t.producer_id for t in log.active_segment.txn_index.entries] == [A, B]
    assert os.path.getsize(path) == 2 * ENTRY_SIZE


def test_truncation_reopens_a_transaction_and_drops_its_index_entry(tmp_path):
    log = open_log(tmp_path)
    txn(log, A, 0, n=2)                 # 0-1
    marker(log, A, commit=False)        # 2
    assert log.active_segment.txn_index.entries
    log.truncate_to(2)
    assert log.active_segment.txn_index.entries == []
    assert not os.path.exists(log.active_segment.txn_index.path)
    assert log.last_stable_offset(2) == 0
    assert log.producer_state.producers[A].current_txn_first_offset == 0


def test_follower_appends_build_the_same_state(tmp_path):
    leader = open_log(tmp_path / "l")
    txn(leader, A, 0, n=2)
    txn(leader, B, 0)
    marker(leader, A, commit=False)
    follower = open_log(tmp_path / "f")
    follower.append_as_follower(bytearray(leader.read_bytes(leader.read(0, MAX, leader.log_end_offset))))
    assert follower.active_segment.txn_index.entries == leader.active_segment.txn_index.entries
    assert follower.last_stable_offset(4) == 2


def test_aborted_transactions_search_stops_at_a_complete_entry(tmp_path):
    log = open_log(tmp_path, cfg(segment_bytes=250))
    txn(log, A, 0)
    marker(log, A, commit=False)        # segment 1: A [0, 1], LSO 2
    for _ in range(3):
        plain(log)
    txn(log, B, 0)
    marker(log, B, commit=False)
    assert len(log.segments) > 2
    assert [t.producer_id for t in log.aborted_transactions(0, 2)] == [A]  # A's entry: LSO 2 >= bound
    assert [t.producer_id for t in log.aborted_transactions(0, log.log_end_offset)] == [A, B]
    assert [t.producer_id for t in log.aborted_transactions(2, log.log_end_offset)] == [B]


def test_fetch_upper_bound_covers_the_slice(tmp_path):
    log = open_log(tmp_path, cfg(index_interval_bytes=1))
    for _ in range(10):
        plain(log, 3)
    sl = log.read(0, 200, log.log_end_offset, min_one_batch=True)
    last = parse_batches(log.read_bytes(sl))[-1].last_offset
    assert last < log.fetch_upper_bound(sl) <= log.log_end_offset
    whole = log.read(0, MAX, log.log_end_offset)
    assert log.fetch_upper_bound(whole) == log.log_end_offset


def test_replicated_stale_marker_is_applied_not_refused(tmp_path):
    """A follower trusts its leader: a marker the leader wrote is applied even if it looks stale."""
    log = open_log(tmp_path)
    txn(log, A, 0, epoch=3)
    buf = build_end_txn_marker(A, 2, True, 0, 0)
    (h,) = parse_batches(buf)
    h.base_offset = 1
    with pytest.raises(KafkaError):  # from the coordinator to a leader it is refused
        log.producer_state.check_client_batches([h], origin=COORDINATOR, marker_of=lambda _h: read_end_txn_marker(buf))
    assert log.producer_state.apply_batch(h, read_end_txn_marker(buf)) is not None
    assert log.producer_state.producers[A].current_txn_first_offset == -1


def test_lso_is_never_below_the_log_start(tmp_path):
    log = open_log(tmp_path, cfg(segment_bytes=200))
    txn(log, A, 0)                      # 0: stays open
    for _ in range(4):
        plain(log)
    assert log.last_stable_offset(5) == 0
    log.delete_records_before(3)        # DeleteRecords past the transaction's start
    assert log.last_stable_offset(5) == 3
