"""The transaction coordinator's pure core: every transition and every error Kafka 4.x's
TransactionCoordinator answers, KIP-360 recovery, KIP-890 transaction version 2, fencing,
timeouts, expiration, loading and markers."""

from __future__ import annotations

import pytest

from broker.txn.state import (
    PARTITION_DELETED,
    SHORT_MAX,
    TV_2,
    IllegalTransition,
    TxnShard,
    TxnState,
)
from common.errors import ErrorCode as E
from tests.txn.helpers import Harness, Waiter

TP0, TP1, TP2 = ("topic", 0), ("topic", 1), ("other", 0)


def begun(h: Harness, tid: str = "t1", *tps, tv: int = 0) -> tuple[int, int]:
    err, pid, epoch = h.init(tid)
    assert err == 0
    assert h.add(tid, pid, epoch, *(tps or (TP0, TP1)), tv=tv) == 0
    return pid, epoch


# --- InitProducerId ---------------------------------------------------------------------------

def test_init_producer_id_allocates_a_producer_id_and_each_init_bumps_the_epoch():
    h = Harness()
    err, pid, epoch = h.init("t1", 60_000)
    assert (err, epoch) == (0, 0) and pid == h.next_pid
    md = h.md()
    assert (md.state, md.producer_id, md.producer_epoch, md.timeout_ms) == (TxnState.EMPTY, pid, 0, 60_000)
    assert h.init("t1", 30_000) == (0, pid, 1)
    assert h.md().timeout_ms == 30_000
    (v0, v1) = h.records()
    assert (v0.producer_id, v0.producer_epoch, v0.status, v0.partitions, v0.start_ms) == (pid, 0, 0, (), -1)
    assert v1.producer_epoch == 1


@pytest.mark.parametrize("tid,timeout,code", [("", 1000, E.INVALID_REQUEST), ("t", 0, E.INVALID_TRANSACTION_TIMEOUT),
                                              ("t", -5, E.INVALID_TRANSACTION_TIMEOUT),
                                              ("t", 900_001, E.INVALID_TRANSACTION_TIMEOUT)])
def test_init_producer_id_refuses_bad_ids_and_timeouts(tid, timeout, code):
    h = Harness(max_timeout_ms=900_000)
    assert h.init(tid, timeout) == (code, -1, -1)
    assert h.log == []


def test_requests_for_ids_of_partitions_we_do_not_lead_or_still_load():
    h = Harness(num_partitions=2)
    tid = next(t for t in (f"t{i}" for i in range(100)) if h.core.partition_for(t) == 1)
    h.core.unload(1)
    assert h.init(tid) == (E.NOT_COORDINATOR, -1, -1)
    h.core.begin_load(1, 6)
    assert h.init(tid) == (E.COORDINATOR_LOAD_IN_PROGRESS, -1, -1)
    assert h.add(tid, 1, 0) == E.COORDINATOR_LOAD_IN_PROGRESS
    assert h.end(tid, 1, 0, True)[0] == E.COORDINATOR_LOAD_IN_PROGRESS
    assert h.core.describe(tid)["error_code"] == E.COORDINATOR_LOAD_IN_PROGRESS
    assert h.core.list_transactions([], [], -1, h.now)[0] == E.COORDINATOR_LOAD_IN_PROGRESS
    h.run(h.core.complete_load(1, 6, TxnShard(1, 6), h.now))
    assert h.init(tid)[0] == 0


def test_a_new_producer_fences_an_open_transaction_by_aborting_it_with_a_bumped_epoch():
    h = Harness()
    pid, epoch = begun(h)
    assert h.init("t1") == (E.CONCURRENT_TRANSACTIONS, -1, -1)
    md = h.md()
    assert (md.state, md.producer_epoch) == (TxnState.PREPARE_ABORT, epoch + 1)
    (job,) = h.jobs()
    assert (job.commit, job.producer_id, job.producer_epoch, job.partitions) == (False, pid, epoch + 1, {TP0, TP1})
    assert h.init("t1") == (E.CONCURRENT_TRANSACTIONS, -1, -1)  # the abort is not complete yet
    h.ack_markers()
    assert h.md().state == TxnState.COMPLETE_ABORT
    assert h.init("t1") == (0, pid, epoch + 2)
    # the fenced producer cannot end (or extend) its transaction
    assert h.end("t1", pid, epoch, True) == (E.PRODUCER_FENCED, -1, -1)
    assert h.add("t1", pid, epoch, TP2) == E.PRODUCER_FENCED


def test_a_fence_whose_write_failed_does_not_bump_the_epoch_again():
    h = Harness()
    pid, epoch = begun(h)
    h.fail = E.COORDINATOR_NOT_AVAILABLE  # (the shell maps NOT_ENOUGH_REPLICAS so)
    assert h.init("t1") == (E.COORDINATOR_NOT_AVAILABLE, -1, -1)
    md = h.md()
    assert (md.state, md.producer_epoch, md.failed_fence, md.pending) == (TxnState.ONGOING, epoch + 1, True, None)
    h.fail = 0
    assert h.init("t1") == (E.CONCURRENT_TRANSACTIONS, -1, -1)
    assert h.md().producer_epoch == epoch + 1  # not +2
    h.ack_markers()
    assert h.init("t1") == (0, pid, epoch + 2)


# --- KIP-360 ----------------------------------------------------------------------------------

def test_kip360_a_producer_resumes_with_its_current_epoch_and_a_retry_gets_the_same_answer():
    h = Harness()
    _, pid, e0 = h.init("t1")
    assert h.init("t1", expected=(pid, e0)) == (0, pid, e0 + 1)
    # the same request again (its answer was lost): the last epoch matches, no bump
    assert h.init("t1", expected=(pid, e0)) == (0, pid, e0 + 1)
    assert h.init("t1", expected=(pid, e0 + 1)) == (0, pid, e0 + 2)
    # a producer two epochs behind was fenced
    assert h.init("t1", expected=(pid, e0)) == (E.PRODUCER_FENCED, -1, -1)
    assert h.init("t1", expected=(pid + 77, 0)) == (E.PRODUCER_FENCED, -1, -1)


def test_kip360_an_expired_transactional_id_gets_a_new_producer_id():
    h = Harness()
    err, pid, epoch = h.init("gone", expected=(4242, 17))
    assert (err, epoch) == (0, 0) and pid != 4242


def test_an_exhausted_epoch_rotates_the_producer_id():
    h = Harness()
    _, pid, _ = h.init("t1")
    h.md().producer_epoch = SHORT_MAX - 1
    err, pid2, epoch2 = h.init("t1")
    assert (err, epoch2) == (0, 0) and pid2 != pid
    assert h.md().last_producer_epoch == -1
    # with an expected epoch the last epoch is kept, and a retry of the rotation is accepted
    h.md().producer_epoch = SHORT_MAX - 1
    err, pid3, epoch3 = h.init("t1", expected=(pid2, SHORT_MAX - 1))
    assert (err, epoch3) == (0, 0) and pid3 not in (pid, pid2)
    assert h.md().prev_producer_id == pid2


# --- AddPartitionsToTxn -----------------------------------------------------------------------

def test_add_partitions_starts_the_transaction_and_records_its_start():
    h = Harness()
    _, pid, epoch = h.init("t1")
    h.advance(123)
    assert h.add("t1", pid, epoch, TP0) == 0
    md = h.md()
    assert (md.state, md.partitions, md.start_ms) == (TxnState.ONGOING, {TP0}, h.wall)
    n = len(h.log)
    assert h.add("t1", pid, epoch, TP0) == 0 and len(h.log) == n  # already in: nothing written
    h.advance(5)
    assert h.add("t1", pid, epoch, TP1, TP2) == 0
    assert (h.md().partitions, h.md().start_ms) == ({TP0, TP1, TP2}, h.wall - 5)
    assert set(h.records()[-1].partitions) == {TP0, TP1, TP2}


def test_add_partitions_errors():
    h = Harness()
    _, pid, epoch = h.init("t1")
    assert h.add("nobody", pid, epoch) == E.INVALID_PRODUCER_ID_MAPPING
    assert h.add("t1", pid + 1, epoch) == E.INVALID_PRODUCER_ID_MAPPING
    assert h.add("t1", pid, epoch + 1) == E.PRODUCER_FENCED
    assert h.add("", pid, epoch) == E.INVALID_REQUEST
    h.hold = True
    h.add("t1", pid, epoch, TP0)
    assert h.add("t1", pid, epoch, TP1) == E.CONCURRENT_TRANSACTIONS  # a change is being written
    h.hold = False
    h.release()
    assert h.end("t1", pid, epoch, True) == (0, -1, -1)
    assert h.add("t1", pid, epoch, TP1) == E.CONCURRENT_TRANSACTIONS  # PrepareCommit


def test_a_failed_write_leaves_the_state_and_frees_it_for_the_next_request():
    h = Harness()
    _, pid, epoch = h.init("t1")
    h.fail = E.NOT_COORDINATOR
    assert h.add("t1", pid, epoch, TP0) == E.NOT_COORDINATOR
    assert (h.md().state, h.md().pending, h.md().partitions) == (TxnState.EMPTY, None, set())
    h.fail = 0
    assert h.add("t1", pid, epoch, TP0) == 0


def test_a_write_committed_after_the_partition_moved_away_and_back_answers_not_coordinator():
    h = Harness()
    _, pid, epoch = h.init("t1")
    h.hold = True
    h.add("t1", pid, epoch, TP0)
    (a,) = h.held
    h.core.unload(0)
    h.core.begin_load(0, 6)
    shard = TxnShard(0, 6)
    for _, k, v in h.log:
        shard.replay(k, v)
    h.run(h.core.complete_load(0, 6, shard, h.now))
    w = a.waiter
    h.release()
    assert w.result == E.NOT_COORDINATOR
    assert h.md().state == TxnState.EMPTY


# --- verifyOnly (KIP-890 part 1) ---------------------------------------------------------------

def test_verify_partitions_answers_per_partition_and_fences_stale_producers():
    h = Harness()
    pid, epoch = begun(h, "t1", TP0)
    v = h.core.verify_partitions
    assert v("t1", pid, epoch, [TP0, TP1]) == {TP0: 0, TP1: E.TRANSACTION_ABORTABLE}
    assert v("t1", pid, epoch - 1, [TP0]) == {TP0: E.PRODUCER_FENCED}
    assert v("t1", pid + 1, epoch, [TP0]) == {TP0: E.INVALID_PRODUCER_ID_MAPPING}
    assert v("nobody", pid, epoch, [TP0]) == {TP0: E.INVALID_PRODUCER_ID_MAPPING}
    assert v("", pid, epoch, [TP0]) == {TP0: E.INVALID_REQUEST}
    h.end("t1", pid, epoch, False)
    assert v("t1", pid, epoch, [TP0]) == {TP0: E.CONCURRENT_TRANSACTIONS}
    h.ack_markers()
    # after the abort the late batch of the old transaction is refused: no hanging transaction
    assert v("t1", pid, epoch, [TP0]) == {TP0: E.TRANSACTION_ABORTABLE}


# --- EndTxn, transaction version 0/1 -----------------------------------------------------------

def test_commit_writes_prepare_commit_then_markers_then_complete_commit():
    h = Harness()
    pid, epoch = begun(h)
    assert h.end("t1", pid, epoch, True) == (0, -1, -1)
    md = h.md()
    assert (md.state, md.pending) == (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT)
    assert h.records()[-1].status == TxnState.PREPARE_COMMIT and set(h.records()[-1].partitions) == {TP0, TP1}
    (job,) = h.jobs()
    assert (job.commit, job.producer_id, job.producer_epoch, job.coordinator_epoch) == (True, pid, epoch, 5)
    h.run(h.core.on_marker_result("t1", 5, TP0, 0))
    assert h.md().partitions == {TP1} and h.md().state == TxnState.PREPARE_COMMIT
    assert h.core.describe("t1")["topics"] == [{"topic": "topic", "partitions": [1]}]
    h.run(h.core.on_marker_result("t1", 5, TP1, 0))
    md = h.md()
    assert (md.state, md.pending, md.partitions, md.markers) == (TxnState.COMPLETE_COMMIT, None, set(), None)
    last = h.records()[-1]
    assert (last.status, last.partitions, last.producer_epoch) == (TxnState.COMPLETE_COMMIT, (), epoch)
    # the next transaction
    assert h.add("t1", pid, epoch, TP2) == 0
    assert h.md().partitions == {TP2}


def test_a_complete_commit_in_the_log_frees_the_next_transaction_before_it_is_committed():
    """on_appended: once CompleteCommit is in the log the next AddPartitionsToTxn goes through (its
    Ongoing goes after it in the log: committed with or after it); the CompleteCommit's own
    acknowledgement then changes nothing. Without on_appended it waits for the commit."""
    h = Harness()
    pid, epoch = begun(h)
    assert h.end("t1", pid, epoch, True) == (0, -1, -1)
    h.hold = True
    h.ack_markers()
    (complete,) = h.held
    assert h.add("t1", pid, epoch, TP2) == E.CONCURRENT_TRANSACTIONS  # only appended, not in the log yet
    h.run(h.core.on_appended(complete, h.now))
    md = h.md()
    assert (md.state, md.pending, md.markers) == (TxnState.COMPLETE_COMMIT, None, None)
    w = Waiter("add")
    h.run(h.core.add_partitions(w, "t1", pid, epoch, [TP2], h.now))
    assert w.result is None and len(h.held) == 2  # the Ongoing goes after the CompleteCommit
    h.release()
    assert w.result == 0
    assert [r.status for r in h.records()][-2:] == [TxnState.COMPLETE_COMMIT, TxnState.ONGOING]
    assert (h.md().state, h.md().partitions) == (TxnState.ONGOING, {TP2})
    # a late failure of the CompleteCommit (a timeout) does not undo anything: it is in the log
    h2 = Harness()
    pid, epoch = begun(h2)
    h2.end("t1", pid, epoch, True)
    h2.hold = True
    h2.ack_markers()
    (complete,) = h2.held
    h2.run(h2.core.on_appended(complete, h2.now))
    h2.held.clear()
    h2.run(h2.core.on_append_done(complete, E.COORDINATOR_NOT_AVAILABLE, h2.now))
    assert (h2.md().state, h2.md().pending, h2.md().markers) == (TxnState.COMPLETE_COMMIT, None, None)
    assert h2.core.retry_complete().appends == []


def _park(h: Harness, tid: str, pid: int, epoch: int, *tps) -> Waiter:
    w = Waiter("add")
    fx = h.core.add_partitions(w, tid, pid, epoch, list(tps), h.now, park=True)
    assert fx.parked and not fx.appends and not fx.replies
    h.run(fx)
    return w


def test_an_add_partitions_during_the_markers_waits_for_them_and_goes_right_behind_the_complete_commit():
    """Kafka answers CONCURRENT_TRANSACTIONS and the client retries after its backoff (librdkafka
    20 ms); with ``park`` the request waits for the markers instead, and its Ongoing is appended in
    the same step as the CompleteCommit (one replication round for both, no wake-up between)."""
    h = Harness()
    pid, epoch = begun(h)
    h.end("t1", pid, epoch, True)
    w = _park(h, "t1", pid, epoch, TP2)
    assert h.add("t1", pid, epoch, TP2) == E.CONCURRENT_TRANSACTIONS  # without park: Kafka's answer
    h.run(h.core.on_marker_result("t1", 5, TP0, 0))
    assert w.result is None and h.md().parked  # one marker to go
    h.hold = True
    h.run(h.core.on_marker_result("t1", 5, TP1, 0))
    complete, = h.held
    assert complete.transit.state == TxnState.COMPLETE_COMMIT and w.result is None
    h.run(h.core.on_appended(complete, h.now))  # the CompleteCommit is in the log: the add goes on at once
    assert [a.transit.state for a in h.held] == [TxnState.COMPLETE_COMMIT, TxnState.ONGOING]
    assert h.md().parked is None and h.core.unpark("t1", w) is False
    h.release()
    assert w.result == 0
    assert [r.status for r in h.records()][-2:] == [TxnState.COMPLETE_COMMIT, TxnState.ONGOING]
    assert (h.md().state, h.md().partitions) == (TxnState.ONGOING, {TP2})


def test_a_parked_add_partitions_goes_on_when_the_complete_commit_is_committed_without_on_appended():
    h = Harness()
    pid, epoch = begun(h)
    h.end("t1", pid, epoch, False)
    w = _park(h, "t1", pid, epoch, TP0)
    h.ack_markers()
    assert w.result == 0 and (h.md().state, h.md().partitions) == (TxnState.ONGOING, {TP0})
    assert [r.status for r in h.records()][-2:] == [TxnState.COMPLETE_ABORT, TxnState.ONGOING]


def test_a_parked_add_partitions_is_checked_again_when_it_goes_on():
    """Parked requests go on in order; the second finds the first one's write pending; a request of a
    producer fenced meanwhile is refused as it would be then."""
    h = Harness()
    pid, epoch = begun(h)
    h.end("t1", pid, epoch, True)
    w1, w2 = _park(h, "t1", pid, epoch, TP0), _park(h, "t1", pid, epoch, TP1)
    h.ack_markers()
    assert (w1.result, w2.result) == (0, E.CONCURRENT_TRANSACTIONS)


def test_a_parked_add_partitions_taken_back_by_the_shell_stays_out():
    h = Harness()
    pid, epoch = begun(h)
    h.end("t1", pid, epoch, True)
    w = _park(h, "t1", pid, epoch, TP2)
    assert h.core.unpark("t1", w) is True and h.core.unpark("t1", w) is False
    h.ack_markers()
    assert w.result is None and h.md().state == TxnState.COMPLETE_COMMIT and h.md().partitions == set()


def test_parked_add_partitions_get_not_coordinator_when_the_partition_moves():
    h = Harness()
    pid, epoch = begun(h)
    h.end("t1", pid, epoch, True)
    w = _park(h, "t1", pid, epoch, TP2)
    h.run(h.core.unload(0))
    assert w.result == E.NOT_COORDINATOR
    h2 = Harness()
    pid, epoch = begun(h2)
    h2.end("t1", pid, epoch, True)
    w = _park(h2, "t1", pid, epoch, TP2)
    h2.run(h2.core.begin_load(0, 6))  # a new epoch of the same partition
    assert w.result == E.NOT_COORDINATOR


def test_parked_add_partitions_get_concurrent_transactions_when_the_markers_stop():
    h = Harness()
    pid, epoch = begun(h)
    h.end("t1", pid, epoch, True)
    w = _park(h, "t1", pid, epoch, TP2)
    h.run(h.core.on_marker_result("t1", 5, TP0, E.TRANSACTION_COORDINATOR_FENCED))
    assert w.result == E.CONCURRENT_TRANSACTIONS


@pytest.mark.parametrize("commit_first", [True, False])
@pytest.mark.parametrize("refused_by", ["concurrent", "unpark"])
def test_ending_a_next_transaction_that_added_nothing_succeeds(commit_first, refused_by):
    """librdkafka's abort (or commit) right after beginning a transaction sends EndTxn while its
    AddPartitionsToTxn is outstanding; the coordinator refuses the add (CONCURRENT_TRANSACTIONS:
    the previous transaction's markers are being written) and then gets the EndTxn. Kafka answers
    INVALID_TXN_STATE to one of the two outcomes once the previous transaction completed, which
    librdkafka takes as fatal (its issue 4849; once per partition chaos run here). The add came
    after the decision with the producer's epoch: the EndTxn ends that new, empty transaction."""
    h = Harness()
    pid, epoch = begun(h)
    h.end("t1", pid, epoch, commit_first)
    if refused_by == "concurrent":
        assert h.add("t1", pid, epoch, TP2) == E.CONCURRENT_TRANSACTIONS
    else:
        w = _park(h, "t1", pid, epoch, TP2)
        assert h.core.unpark("t1", w)  # the shell's wait ran out: answered CONCURRENT_TRANSACTIONS
    n = len(h.log)
    assert h.end("t1", pid, epoch, not commit_first) == (E.CONCURRENT_TRANSACTIONS, -1, -1)  # markers pending
    h.ack_markers()
    n = len(h.log)
    assert h.end("t1", pid, epoch, not commit_first) == (0, -1, -1)
    assert h.end("t1", pid, epoch, commit_first) == (0, -1, -1)
    assert len(h.log) == n  # nothing written: there is nothing to end
    # the next transaction that adds a partition is an ordinary one again
    assert h.add("t1", pid, epoch, TP2) == 0
    assert h.end("t1", pid, epoch, False) == (0, -1, -1)
    h.ack_markers()
    assert h.end("t1", pid, epoch, True) == (E.INVALID_TXN_STATE, -1, -1)


def test_ending_the_other_way_without_a_refused_add_is_invalid_txn_state_as_in_kafka():
    h = Harness()
    pid, epoch = begun(h)
    h.end("t1", pid, epoch, True)
    assert h.end("t1", pid, epoch, False) == (E.CONCURRENT_TRANSACTIONS, -1, -1)
    h.ack_markers()
    assert h.end("t1", pid, epoch, False) == (E.INVALID_TXN_STATE, -1, -1)
    # an add of an older epoch (a fenced producer) does not mark anything
    h2 = Harness()
    pid, epoch = begun(h2)
    h2.end("t1", pid, epoch, True)
    assert h2.add("t1", pid, epoch - 1, TP2) == E.PRODUCER_FENCED
    h2.ack_markers()
    assert h2.end("t1", pid, epoch, False) == (E.INVALID_TXN_STATE, -1, -1)


def test_add_partitions_is_not_parked_outside_the_markers():
    """Only a transaction whose markers this coordinator writes parks: a pending write of another
    kind (here the PrepareCommit itself) is CONCURRENT_TRANSACTIONS at once, as in Kafka."""
    h = Harness()
    pid, epoch = begun(h)
    h.hold = True
    h.end("t1", pid, epoch, True)
    w = Waiter("add")
    fx = h.core.add_partitions(w, "t1", pid, epoch, [TP2], h.now, park=True)
    assert not fx.parked and fx.replies == [(w, E.CONCURRENT_TRANSACTIONS)]


@pytest.mark.parametrize("state_commit,commit,code", [
    (True, True, E.NONE), (True, False, E.INVALID_TXN_STATE), (False, False, E.NONE),
    (False, True, E.INVALID_TXN_STATE)])
def test_end_txn_on_a_completed_transaction(state_commit, commit, code):
    h = Harness()
    pid, epoch = begun(h)
    h.end("t1", pid, epoch, state_commit)
    h.ack_markers()
    n = len(h.log)
    assert h.end("t1", pid, epoch, commit) == (code, -1, -1)
    assert len(h.log) == n


def test_end_txn_errors():
    h = Harness()
    _, pid, epoch = h.init("t1")
    assert h.end("t1", pid, epoch, True) == (E.INVALID_TXN_STATE, -1, -1)  # Empty
    assert h.end("nobody", pid, epoch, True) == (E.INVALID_PRODUCER_ID_MAPPING, -1, -1)
    assert h.end("", pid, epoch, True) == (E.INVALID_REQUEST, -1, -1)
    h.add("t1", pid, epoch)
    assert h.end("t1", pid + 1, epoch, True) == (E.INVALID_PRODUCER_ID_MAPPING, -1, -1)
    assert h.end("t1", pid, epoch + 1, True) == (E.PRODUCER_FENCED, -1, -1)  # from a client: exact epoch
    assert h.end("t1", pid, epoch - 1, True) == (E.PRODUCER_FENCED, -1, -1)
    h.end("t1", pid, epoch, True)
    assert h.end("t1", pid, epoch, True) == (E.CONCURRENT_TRANSACTIONS, -1, -1)  # markers pending
    assert h.end("t1", pid, epoch, False) == (E.CONCURRENT_TRANSACTIONS, -1, -1)  # pending state first


def test_end_txn_append_failure_reports_it_and_nothing_is_sent():
    h = Harness()
    pid, epoch = begun(h)
    h.fail = E.COORDINATOR_NOT_AVAILABLE
    assert h.end("t1", pid, epoch, True) == (E.COORDINATOR_NOT_AVAILABLE, -1, -1)
    assert (h.md().state, h.md().pending, h.jobs()) == (TxnState.ONGOING, None, [])
    h.fail = 0
    assert h.end("t1", pid, epoch, True) == (0, -1, -1)


# --- transaction version 2 (KIP-890 part 2) ----------------------------------------------------

def test_tv2_every_end_txn_bumps_the_epoch_and_returns_it():
    h = Harness(tv_level=TV_2)
    pid, epoch = begun(h, tv=TV_2)
    assert h.end("t1", pid, epoch, True, tv=TV_2) == (0, pid, epoch + 1)
    (job,) = h.jobs()
    assert job.producer_epoch == epoch + 1  # markers fence the old epoch on every partition
    # a retry of the EndTxn whose answer was lost, while the markers are out
    assert h.end("t1", pid, epoch, True, tv=TV_2) == (E.CONCURRENT_TRANSACTIONS, -1, -1)
    h.ack_markers()
    assert h.end("t1", pid, epoch, True, tv=TV_2) == (0, pid, epoch + 1)  # retry after completion
    assert h.end("t1", pid, epoch, False, tv=TV_2) == (E.INVALID_TXN_STATE, -1, -1)
    assert h.records()[-1].client_tv == TV_2 and h.records()[-1].producer_epoch == epoch + 1
    # the old epoch can no longer add partitions
    assert h.add("t1", pid, epoch, TP0, tv=TV_2) == E.PRODUCER_FENCED
    assert h.add("t1", pid, epoch + 1, TP0, tv=TV_2) == 0


def test_tv2_abort_without_a_transaction_bumps_the_epoch_and_completes_at_once():
    h = Harness(tv_level=TV_2)
    _, pid, epoch = h.init("t1")
    assert h.end("t1", pid, epoch, False, tv=TV_2) == (0, pid, epoch + 1)  # Empty: epoch bump
    assert h.md().state == TxnState.COMPLETE_ABORT and h.jobs() == []
    assert h.end("t1", pid, epoch + 1, True, tv=TV_2) == (E.INVALID_TXN_STATE, -1, -1)
    assert h.end("t1", pid, epoch + 1, False, tv=TV_2) == (0, pid, epoch + 2)  # CompleteAbort + current
    assert h.end("t1", pid, epoch, False, tv=TV_2) == (E.PRODUCER_FENCED, -1, -1)  # two behind


def test_tv2_commit_on_empty_is_invalid_and_a_stale_epoch_is_fenced():
    h = Harness(tv_level=TV_2)
    _, pid, epoch = h.init("t1")
    assert h.end("t1", pid, epoch, True, tv=TV_2) == (E.INVALID_TXN_STATE, -1, -1)
    assert h.end("t1", pid, epoch - 1, False, tv=TV_2) == (E.PRODUCER_FENCED, -1, -1)


def test_tv2_epoch_overflow_moves_to_the_next_producer_id():
    h = Harness(tv_level=TV_2)
    pid, _ = begun(h, tv=TV_2)
    md = h.md()
    md.producer_epoch = SHORT_MAX - 1
    err, pid2, epoch2 = h.end("t1", pid, SHORT_MAX - 1, True, tv=TV_2)
    assert err == 0 and (pid2, epoch2) == (pid, SHORT_MAX)  # answered before the markers
    assert h.md().next_producer_id != -1
    h.ack_markers()
    md = h.md()
    assert (md.producer_epoch, md.prev_producer_id) == (0, pid) and md.producer_id not in (pid, -1)
    # the retry with the exhausted epoch of the old producer id is recognised
    assert h.end("t1", pid, SHORT_MAX - 1, True, tv=TV_2) == (0, md.producer_id, 0)


def test_tv2_fencing_an_open_transaction():
    h = Harness(tv_level=TV_2)
    pid, epoch = begun(h, tv=TV_2)
    assert h.init("t1") == (E.CONCURRENT_TRANSACTIONS, -1, -1)
    (job,) = h.jobs()
    assert job.producer_epoch == epoch + 2 and not job.commit  # fence bump, then the TV2 abort bump
    h.ack_markers()
    assert h.init("t1") == (0, pid, epoch + 3)
    assert h.end("t1", pid, epoch, True, tv=TV_2) == (E.PRODUCER_FENCED, -1, -1)


# --- timeouts and expiration --------------------------------------------------------------------

def test_the_coordinator_aborts_a_transaction_open_past_its_timeout():
    h = Harness()
    _, pid, epoch = h.init("t1", 10_000)
    h.add("t1", pid, epoch, TP0)
    h.advance(10_000)
    h.run(h.core.abort_timed_out(h.now))
    assert h.md().state == TxnState.ONGOING
    h.advance(1)
    h.run(h.core.abort_timed_out(h.now))
    md = h.md()
    assert (md.state, md.producer_epoch) == (TxnState.PREPARE_ABORT, epoch + 1)
    assert any("open longer than its timeout" in m for m in h.messages)
    h.ack_markers()
    assert h.md().state == TxnState.COMPLETE_ABORT
    # the producer learns it was fenced
    assert h.end("t1", pid, epoch, True) == (E.PRODUCER_FENCED, -1, -1)


def test_a_wall_clock_step_does_not_abort_a_transaction():
    h = Harness()
    _, pid, epoch = h.init("t1", 10_000)
    h.add("t1", pid, epoch, TP0)
    h.wall += 3_600_000  # NTP steps the wall clock an hour forward; monotonic time did not move
    h.run(h.core.abort_timed_out(h.now))
    assert h.md().state == TxnState.ONGOING
    h.mono += 10_001
    h.run(h.core.abort_timed_out(h.now))
    assert h.md().state == TxnState.PREPARE_ABORT


def test_a_loaded_ongoing_transaction_keeps_the_time_it_already_ran():
    h = Harness()
    _, pid, epoch = h.init("t1", 10_000)
    h.add("t1", pid, epoch, TP0)
    h.advance(6_000)
    shard = TxnShard(0, 6)
    for _, k, v in h.log:
        shard.replay(k, v)
    h.core.unload(0)
    h.core.begin_load(0, 6)
    h.run(h.core.complete_load(0, 6, shard, h.now))
    h.advance(4_001)
    h.run(h.core.abort_timed_out(h.now))
    assert h.md().state == TxnState.PREPARE_ABORT


def test_idle_transactional_ids_expire_with_a_tombstone():
    h = Harness(id_expiration_ms=1000)
    _, pid, epoch = h.init("idle")
    pid2, epoch2 = begun(h, "busy")
    h.advance(1000)
    h.run(h.core.expire_transactional_ids(h.now))
    assert h.md("idle") is None and h.md("busy") is not None  # an open transaction does not expire
    assert h.records("idle")[-1] is None
    assert h.init("idle")[1] != pid  # a new producer id


# --- loading ------------------------------------------------------------------------------------

def test_a_new_coordinator_finishes_a_prepared_commit_it_loads():
    h = Harness()
    pid, epoch = begun(h)
    h.end("t1", pid, epoch, True)
    assert h.jobs()
    records = list(h.log)
    # the coordinator moves: the new one (epoch 9) loads the log and writes the markers itself
    h2 = Harness()
    h2.core.unload(0)
    h2.core.begin_load(0, 9)
    shard = TxnShard(0, 9)
    for _, k, v in records:
        shard.replay(k, v)
    h2.run(h2.core.complete_load(0, 9, shard, h2.now))
    (job,) = h2.jobs()
    assert (job.commit, job.coordinator_epoch, job.partitions) == (True, 9, {TP0, TP1})
    assert any("after loading partition 0" in m for m in h2.messages)
    # the old coordinator's answers for its epoch change nothing there
    h2.run(h2.core.on_marker_result("t1", 5, TP0, 0))
    assert h2.md().partitions == {TP0, TP1}
    h2.ack_markers()
    assert h2.md().state == TxnState.COMPLETE_COMMIT
    assert h2.md().last_producer_epoch == -1  # not in the log


def test_a_load_that_was_superseded_is_dropped():
    h = Harness()
    h.core.unload(0)
    h.core.begin_load(0, 7)
    h.core.begin_load(0, 8)
    h.run(h.core.complete_load(0, 7, TxnShard(0, 7), h.now))
    assert h.core.lookup("t1")[0] == E.COORDINATOR_LOAD_IN_PROGRESS


# --- markers ------------------------------------------------------------------------------------

def test_marker_errors_retry_cancel_or_drop_the_partition():
    h = Harness()
    pid, epoch = begun(h, "t1", TP0, TP1, TP2)
    h.end("t1", pid, epoch, False)
    on = h.core.on_marker_result
    h.run(on("t1", 5, TP0, E.NOT_LEADER_OR_FOLLOWER))  # retriable: still outstanding
    h.run(on("t1", 5, TP1, PARTITION_DELETED))  # the topic was deleted: nothing to write
    h.run(on("t1", 5, TP1, 0))  # a duplicate answer changes nothing
    assert h.jobs()[0].partitions == {TP0, TP2}
    assert h.core.marker_wanted("t1", 5, TP0) and not h.core.marker_wanted("t1", 5, TP1)
    assert not h.core.marker_wanted("t1", 4, TP0)
    h.run(on("t1", 5, TP2, E.TRANSACTION_COORDINATOR_FENCED))  # a newer coordinator took over
    assert h.jobs() == [] and h.md().state == TxnState.PREPARE_ABORT


def test_complete_write_not_available_is_retried():
    h = Harness()
    pid, epoch = begun(h, "t1", TP0)
    h.end("t1", pid, epoch, True)
    h.fail = E.COORDINATOR_NOT_AVAILABLE
    h.ack_markers()
    assert (h.md().state, h.md().pending, h.md().markers.retry) == (TxnState.PREPARE_COMMIT,
                                                                     TxnState.COMPLETE_COMMIT, True)
    h.fail = 0
    h.run(h.core.retry_complete())
    assert h.md().state == TxnState.COMPLETE_COMMIT


# --- Describe / List ----------------------------------------------------------------------------

def test_describe_and_list_transactions():
    h = Harness(num_partitions=3)
    pid, epoch = begun(h, "a", TP0)
    _, pid_b, _ = h.init("b")
    h.advance(5000)
    d = h.core.describe("a")
    assert d == {"transactional_id": "a", "error_code": 0, "transaction_state": "Ongoing",
                 "transaction_timeout_ms": 60_000, "transaction_start_time_ms": h.wall - 5000, "producer_id": pid,
                 "producer_epoch": epoch, "topics": [{"topic": "topic", "partitions": [0]}]}
    assert h.core.describe("nobody")["error_code"] == E.TRANSACTIONAL_ID_NOT_FOUND
    lt = h.core.list_transactions
    assert {t["transactional_id"] for t in lt([], [], -1, h.now)[2]} == {"a", "b"}
    assert lt(["Ongoing", "Bogus"], [], -1, h.now)[1:] == (["Bogus"], [
        {"transactional_id": "a", "producer_id": pid, "transaction_state": "Ongoing"}])
    assert [t["transactional_id"] for t in lt([], [pid_b], -1, h.now)[2]] == ["b"]
    assert [t["transactional_id"] for t in lt(["Ongoing"], [], 4999, h.now)[2]] == ["a"]
    assert lt(["Ongoing"], [], 5000, h.now)[2] == []


def test_illegal_transitions_are_bugs_not_answers():
    h = Harness()
    _, pid, epoch = h.init("t1")
    with pytest.raises(IllegalTransition):
        h.md().prepare_complete(h.now)  # Empty -> CompleteAbort
