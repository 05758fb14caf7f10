"""The pure share partition (broker/share/partition.py): acquisition, locks, delivery counts,
acknowledge types, the start offset, and what is persisted."""

from __future__ import annotations

from broker.share.partition import ACCEPT, GAP, REJECT, RELEASE, RENEW, Acquired, SharePartition
from broker.share.records import ACKNOWLEDGED, ARCHIVED, AVAILABLE, StateBatch
from common.errors import ErrorCode


def sp(limit=3, lock=1000, max_locks=100) -> SharePartition:
    p = SharePartition("g", "t", 0, delivery_limit=limit, lock_ms=lock, max_locks=max_locks)
    p.initialize(0)
    return p


def batches(*ranges, control=()):
    return [(a, b, (a, b) in control) for a, b in ranges]


def test_two_members_never_get_the_same_record():
    p = sp()
    a = p.acquire("m1", batches((0, 4), (5, 9)), 3, now=0)
    assert a == [Acquired(0, 2, 1)]
    b = p.acquire("m2", batches((0, 4), (5, 9)), 100, now=0)
    assert b == [Acquired(3, 9, 1)]
    assert {p.holder(o) for o in range(3)} == {"m1"} and {p.holder(o) for o in range(3, 10)} == {"m2"}
    assert p.acquire("m3", batches((0, 9)), 100, now=0) == []


def test_released_record_is_redelivered_with_its_count_increased():
    p = sp()
    p.acquire("m1", batches((0, 1)), 10, now=0)
    assert p.acknowledge("m1", [(0, 0, [RELEASE]), (1, 1, [ACCEPT])], now=1) == (ErrorCode.NONE, None)
    assert p.fetch_offset() == 0
    assert p.acquire("m2", batches((0, 1)), 10, now=2) == [Acquired(0, 0, 2)]
    assert p.start == 0 and p.state_of(1) == (ACKNOWLEDGED, 1)


def test_a_record_past_the_delivery_limit_is_archived_and_never_delivered_again():
    p = sp(limit=2)
    for n in (1, 2):
        assert p.acquire("m", batches((0, 0)), 1, now=0) == [Acquired(0, 0, n)]
        p.acknowledge("m", [(0, 0, [RELEASE])], now=0)
    assert p.state_of(0) == (ARCHIVED, -1) and p.start == 1
    assert p.acquire("m", batches((0, 0)), 1, now=0) == []


def test_rejected_and_gap_records_are_archived():
    p = sp()
    p.acquire("m", batches((0, 2)), 10, now=0)
    p.acknowledge("m", [(0, 0, [REJECT]), (1, 1, [GAP]), (2, 2, [ACCEPT])], now=0)
    assert p.start == 3 and p.end == 3 and not p.recs
    assert p.acquire("m", batches((0, 2)), 10, now=0) == []


def test_an_expired_lock_releases_the_record_and_the_late_ack_is_refused():
    p = sp(lock=1000)
    p.acquire("m1", batches((0, 0)), 1, now=0)
    assert p.next_deadline() == 1000
    assert not p.expire(999) and p.holder(0) == "m1"
    assert p.expire(1000) and p.holder(0) is None
    assert p.acquire("m2", batches((0, 0)), 1, now=1001) == [Acquired(0, 0, 2)]
    code, msg = p.acknowledge("m1", [(0, 0, [ACCEPT])], now=1002)
    assert code == ErrorCode.INVALID_RECORD_STATE and "offset 0" in msg
    assert p.holder(0) == "m2"


def test_what_an_acquisition_still_holds_once_written():
    """The leader answers a ShareFetch once the acquisition is written: records whose lock expired
    meanwhile (and went to another member, or back to this one in a new delivery) are not delivered
    (found by the whole-cluster worlds, tests/sim_world/test_found_seeds.py)."""
    p = sp(lock=1000)
    got = p.acquire("m1", batches((0, 5)), 10, now=0)
    assert got == [Acquired(0, 5, 1)]
    assert p.still_acquired("m1", got, now=999) == got
    p.acknowledge("m1", [(2, 2, [RELEASE])], now=10)
    assert p.still_acquired("m1", got, now=999) == [Acquired(0, 1, 1), Acquired(3, 5, 1)]
    assert p.still_acquired("m1", got, now=1000) == []  # the lock ends at 1000, expired or not yet
    p.expire(1000)
    assert p.acquire("m2", batches((0, 5)), 2, now=1001) == [Acquired(0, 1, 2)]
    again = p.acquire("m1", batches((0, 5)), 10, now=1001)
    assert again == [Acquired(2, 5, 2)]
    assert p.still_acquired("m1", got, now=1002) == []  # held in another delivery: not the one answered


def test_acknowledgement_is_all_or_nothing():
    p = sp()
    p.acquire("m", batches((0, 1)), 10, now=0)
    code, _ = p.acknowledge("m", [(0, 0, [ACCEPT]), (5, 5, [ACCEPT])], now=0)
    assert code == ErrorCode.INVALID_RECORD_STATE
    assert p.holder(0) == "m" and p.start == 0
    assert p.acknowledge("m", [(0, 1, [ACCEPT, ACCEPT, ACCEPT])], now=0)[0] == ErrorCode.INVALID_REQUEST
    assert p.acknowledge("m", [(0, 1, [7])], now=0)[0] == ErrorCode.INVALID_REQUEST
    assert p.acknowledge("m", [(0, 1, [RENEW])], now=0)[0] == ErrorCode.INVALID_REQUEST  # ShareFetch v2 only
    assert p.acknowledge("m", [(0, 1, [RENEW])], now=500, renew=True) == (ErrorCode.NONE, None)
    assert p.next_deadline() == 1500


def test_release_member_on_session_end():
    p = sp()
    p.acquire("m1", batches((0, 3)), 2, now=0)
    p.acquire("m2", batches((0, 3)), 2, now=0)
    assert p.release_member("m1")
    assert p.holder(0) is None and p.holder(2) == "m2" and p.fetch_offset() == 0


def test_control_batches_are_archived_not_delivered():
    p = sp()
    got = p.acquire("m", batches((0, 1), (2, 2), (3, 3), control={(2, 2)}), 10, now=0)
    assert got == [Acquired(0, 1, 1), Acquired(3, 3, 1)]
    assert p.state_of(2) == (ARCHIVED, 0)


def test_in_flight_window_is_bounded_by_max_locks():
    p = sp(max_locks=3)
    assert p.acquire("m", batches((0, 9)), 100, now=0) == [Acquired(0, 2, 1)]
    assert not p.can_acquire()
    p.acknowledge("m", [(0, 0, [ACCEPT])], now=0)
    assert p.acquire("m", batches((3, 9)), 100, now=0) == [Acquired(3, 3, 1)]


def test_snapshot_writes_acquired_as_available_with_its_count_and_load_restores_it():
    p = sp(limit=2)
    p.acquire("m", batches((0, 4)), 100, now=0)
    p.acknowledge("m", [(1, 1, [ACCEPT]), (2, 2, [RELEASE])], now=0)
    start, bs = p.snapshot()
    assert start == 0
    assert bs == (StateBatch(0, 0, AVAILABLE, 1), StateBatch(1, 1, ACKNOWLEDGED, 1), StateBatch(2, 4, AVAILABLE, 1))
    q = SharePartition("g", "t", 0, delivery_limit=2)
    q.load(0, start, bs)
    assert (q.start, q.end) == (0, 5) and q.state_of(1) == (ACKNOWLEDGED, 1)
    # the counts survive: one more delivery reaches the limit, then the records are archived
    assert q.acquire("x", batches((0, 4)), 100, now=0) == [Acquired(0, 0, 2), Acquired(2, 4, 2)]
    for o in (0, 2, 3, 4):
        q.acknowledge("x", [(o, o, [RELEASE])], now=0)
    assert q.start == 5 and q.acquire("x", batches((0, 4)), 100, now=0) == []


def test_records_acquired_up_to_the_limit_before_a_failover_are_archived_on_the_new_leader():
    q = SharePartition("g", "t", 0, delivery_limit=2)
    q.load(0, 10, [StateBatch(10, 11, AVAILABLE, 2)])
    assert q.acquire("x", batches((10, 12)), 100, now=0) == [Acquired(12, 12, 1)]
    assert q.state_of(10)[0] == ARCHIVED or q.start > 10


def test_log_start_moving_past_the_window_drops_it():
    p = sp()
    p.acquire("m", batches((0, 4)), 100, now=0)
    p.move_start(3)
    assert p.start == 3 and p.acquired == 2 and p.holder(3) == "m"
    assert p.state_of(0)[0] == ARCHIVED
