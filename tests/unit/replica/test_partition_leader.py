"""Leader-side replication rules of PartitionState: HW, ISR shrink/expand through the
controller, acks=all. One behaviour per test."""

from __future__ import annotations

import uuid

from broker.log.leader_epoch import LeaderEpochCache
from broker.replica.partition import PartitionState
from common.errors import ErrorCode
from metadata.image import PartitionRegistration

LAG = 30_000


def reg(isr=(1, 2, 3), leader=1, leader_epoch=5, partition_epoch=10, replicas=(1, 2, 3)):
    return PartitionRegistration(replicas=tuple(replicas), isr=tuple(isr), leader=leader,
                                 leader_epoch=leader_epoch, partition_epoch=partition_epoch)


def leader(isr=(1, 2, 3), leo=10, now=0, hw=0, **kw) -> PartitionState:
    st = PartitionState("t", 0, uuid.UUID(int=1), 1, replica_lag_time_max_ms=LAG)
    st.high_watermark = hw
    assert st.make_leader(reg(isr=isr, **kw), leo, now)
    return st


def test_hw_is_min_leo_over_isr():
    st = leader()
    st.on_follower_fetch(2, 7, 10, 1)
    assert st.high_watermark == 0  # replica 3 has not fetched yet
    st.on_follower_fetch(3, 5, 10, 1)
    assert st.high_watermark == 5


def test_hw_ignores_replicas_outside_isr():
    st = leader(isr=(1, 2))
    st.on_follower_fetch(2, 9, 10, 1)
    assert st.high_watermark == 9


def test_hw_never_decreases():
    st = leader()
    st.on_follower_fetch(2, 8, 10, 1)
    st.on_follower_fetch(3, 8, 10, 1)
    assert st.high_watermark == 8
    st.on_follower_fetch(3, 4, 10, 2)  # e.g. the follower truncated and refetches
    assert st.high_watermark == 8
    assert not st.maybe_advance_hw(3)
    assert st.high_watermark == 8


def test_hw_waits_for_member_of_pending_isr_expansion():
    # KIP-497 maximal ISR: once 3 is proposed, the HW must not pass it, or the controller could
    # commit the expansion and then elect 3 without records below the HW.
    st = leader(isr=(1, 2), leo=10)
    st.on_follower_fetch(2, 10, 10, 1)
    assert st.high_watermark == 10
    st.on_follower_fetch(3, 10, 10, 2)  # reaches the HW: expansion proposed
    assert st.pending_alter.new_isr == (1, 2, 3)
    st.maybe_advance_hw(20)  # leader appended 10 more
    st.on_follower_fetch(2, 20, 20, 3)
    assert st.high_watermark == 10  # 3 is still at 10


def test_hw_counts_member_removed_by_pending_shrink():
    st = leader(leo=10, now=0)
    st.on_follower_fetch(2, 10, 10, 1)
    st.on_follower_fetch(3, 6, 10, 1)
    assert st.maybe_shrink_isr(10, LAG + 10)
    assert st.pending_alter.new_isr == (1, 2)
    st.on_follower_fetch(2, 10, 10, LAG + 11)
    assert st.high_watermark == 6  # 3 is still in the committed ISR
    st.on_isr_committed(reg(isr=(1, 2), partition_epoch=11), 10, st.take_alter_partition())
    assert st.high_watermark == 10


def test_isr_shrinks_after_lag_time():
    st = leader(now=0)
    st.on_follower_fetch(2, 10, 10, 100)
    assert not st.maybe_shrink_isr(10, LAG)  # 3 gets a full window from the leader change
    st.on_follower_fetch(2, 10, 10, LAG)
    assert st.maybe_shrink_isr(10, LAG + 1)
    req = st.take_alter_partition()
    assert req.new_isr == (1, 2) and req.leader_epoch == 5 and req.partition_epoch == 10


def test_follower_that_fetches_but_never_catches_up_is_removed():
    st = leader(now=0)
    leo = 10
    for t in range(1_000, LAG + 2_000, 1_000):
        leo += 5
        st.on_follower_fetch(2, leo, leo, t)
        st.on_follower_fetch(3, leo - 20, leo, t)  # always far behind
    assert st.out_of_sync_replicas(leo, LAG + 1_500) == [3]


def test_last_caught_up_time_is_previous_fetch_when_it_reached_leader_leo_then():
    st = leader(now=0)
    st.on_follower_fetch(2, 5, 10, 1_000)  # behind
    st.on_follower_fetch(2, 10, 15, 2_000)  # reached the LEO the leader had at the previous fetch
    assert st.progress[2].last_caught_up_time_ms == 1_000
    st.on_follower_fetch(2, 15, 15, 3_000)  # at the leader's LEO now
    assert st.progress[2].last_caught_up_time_ms == 3_000


def test_isr_expands_when_follower_catches_up_in_current_epoch():
    st = leader(isr=(1, 2), leo=10)
    st.on_follower_fetch(2, 10, 10, 1)
    st.on_follower_fetch(3, 9, 10, 2)
    assert st.pending_alter is None  # below the HW
    st.on_follower_fetch(3, 10, 10, 3)
    req = st.take_alter_partition()
    assert req.new_isr == (1, 2, 3)


def test_isr_does_not_expand_below_leader_epoch_start_offset():
    st = leader(isr=(1, 2), leo=10, hw=4)  # became leader at LEO 10; 2 has not fetched: HW 4
    st.on_follower_fetch(3, 6, 10, 1)  # >= HW but its log is not yet known to match our epoch
    assert st.high_watermark == 4 and st.pending_alter is None
    st.on_follower_fetch(3, 10, 10, 2)
    assert st.pending_alter.new_isr == (1, 2, 3)


def test_expansion_carries_follower_broker_epoch():
    st = leader(isr=(1, 2), leo=10)
    st.on_follower_fetch(2, 10, 10, 1, broker_epoch=40)
    st.on_follower_fetch(3, 10, 10, 1, broker_epoch=77)
    assert st.take_alter_partition().new_isr_broker_epochs == (-1, 40, 77)


def test_no_isr_change_acted_on_before_commit():
    st = leader(now=0)
    st.on_follower_fetch(2, 10, 10, LAG)
    st.maybe_shrink_isr(10, LAG + 1)
    st.take_alter_partition()
    assert st.isr == (1, 2, 3)
    assert st.can_append_acks_all(3) == ErrorCode.NONE
    st.on_isr_committed(reg(isr=(1, 2), partition_epoch=11), 10)
    assert st.isr == (1, 2) and st.partition_epoch == 11
    assert st.can_append_acks_all(3) == ErrorCode.NOT_ENOUGH_REPLICAS


def test_at_most_one_alter_partition_in_flight():
    st = leader(now=0)
    st.on_follower_fetch(2, 10, 10, LAG)
    st.maybe_shrink_isr(10, LAG + 1)
    assert st.take_alter_partition() is not None
    assert st.take_alter_partition() is None
    assert not st.maybe_shrink_isr(10, 2 * LAG)  # no second proposal while one is pending


def test_alter_partition_timeout_resends_same_proposal():
    st = leader(now=0)
    st.maybe_shrink_isr(10, LAG + 1)
    req = st.take_alter_partition()
    assert st.on_alter_partition_error(ErrorCode.REQUEST_TIMED_OUT, req)  # True: resend it
    assert st.take_alter_partition() is req


def test_ineligible_replica_drops_proposal():
    st = leader(isr=(1, 2), leo=10)
    st.on_follower_fetch(2, 10, 10, 1)
    st.on_follower_fetch(3, 10, 10, 1)
    req = st.take_alter_partition()
    st.on_alter_partition_error(ErrorCode.INELIGIBLE_REPLICA, req)
    assert st.pending_alter is None and st.isr == (1, 2)


def test_invalid_update_version_waits_for_metadata():
    st = leader(now=0)
    st.maybe_shrink_isr(10, LAG + 1)
    req = st.take_alter_partition()
    st.on_alter_partition_error(ErrorCode.INVALID_UPDATE_VERSION, req)
    assert st.take_alter_partition() is None
    assert st.pending_alter is req  # still counted in the maximal ISR
    st.make_leader(reg(isr=(1, 2), partition_epoch=11), 10, LAG + 2)
    assert st.pending_alter is None and st.isr == (1, 2)


def test_response_to_a_dropped_proposal_is_ignored():
    st = leader(now=0)
    st.maybe_shrink_isr(10, LAG + 1)
    old = st.take_alter_partition()
    st.make_leader(reg(isr=(1, 2, 3), partition_epoch=11), 10, LAG + 2)  # newer metadata
    st.on_isr_committed(reg(isr=(1, 2), partition_epoch=11), 10, old)
    assert st.isr == (1, 2, 3)


def test_duplicate_registration_keeps_pending_expansion():
    st = leader(isr=(1, 2), leo=10)
    st.on_follower_fetch(2, 10, 10, 1)
    st.on_follower_fetch(3, 10, 10, 1)
    assert st.pending_alter is not None
    assert not st.make_leader(reg(isr=(1, 2)), 10, 2)  # the same registration again
    assert st.pending_alter is not None and 3 in st.maximal_isr


def test_stale_registration_is_ignored():
    st = leader(partition_epoch=10)
    assert not st.make_leader(reg(isr=(1,), partition_epoch=9), 10, 1)
    assert st.isr == (1, 2, 3)
    assert not st.make_follower(reg(leader=2, leader_epoch=4))
    assert st.is_leader


def test_not_enough_replicas():
    st = leader(isr=(1,))
    assert st.can_append_acks_all(2) == ErrorCode.NOT_ENOUGH_REPLICAS
    assert st.can_append_acks_all(1) == ErrorCode.NONE


def test_not_enough_replicas_after_append():
    st = leader(leo=10, now=0)
    assert st.can_append_acks_all(2) == ErrorCode.NONE  # appended offsets 10..14
    st.maybe_advance_hw(15)
    st.maybe_shrink_isr(15, LAG + 1)
    st.on_isr_committed(reg(isr=(1,), partition_epoch=11), 15, st.take_alter_partition())
    assert st.high_watermark == 15
    assert st.acks_all_result(14, 2) == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


def test_acks_all_waits_until_hw_passes_offset():
    st = leader(leo=10)
    assert not st.is_acked(9) and st.acks_all_result(9, 2) is None
    st.on_follower_fetch(2, 10, 10, 1)
    st.on_follower_fetch(3, 10, 10, 1)
    assert st.is_acked(9) and st.acks_all_result(9, 2) == ErrorCode.NONE
    assert not st.is_acked(10)


def test_new_leader_epoch_records_epoch_start_offset_and_keeps_hw():
    st = leader(leo=42, hw=17, leader_epoch=5)
    assert st.leader_epoch_start_offset == 42 and st.high_watermark == 17


def test_fetch_from_older_leader_epoch_is_fenced():
    st = leader(leo=10)
    cache = LeaderEpochCache(None)
    cache.assign(5, 0)
    v = st.validate_follower_fetch(4, 10, 5, cache, 0, 10)
    assert v.error == ErrorCode.FENCED_LEADER_EPOCH


def test_fetch_with_diverging_last_epoch_returns_epoch_end_offset():
    st = leader(leo=20)
    cache = LeaderEpochCache(None)
    cache.assign(2, 0)
    cache.assign(5, 8)
    # follower has epoch 3 records up to 12: we never had epoch 3; epoch 2 ends at 8
    v = st.validate_follower_fetch(5, 12, 3, cache, 0, 20)
    assert v.error == ErrorCode.NONE and v.diverging_epoch == (2, 8)
    assert st.validate_follower_fetch(5, 8, 2, cache, 0, 20).diverging_epoch is None


def test_fetch_beyond_log_end_is_out_of_range():
    st = leader(leo=10)
    cache = LeaderEpochCache(None)
    cache.assign(5, 0)
    assert st.validate_follower_fetch(5, 11, -1, cache, 0, 10).error == ErrorCode.OFFSET_OUT_OF_RANGE


def test_isr_does_not_expand_with_fenced_or_restarted_replica():
    st = leader(isr=(1, 2), leo=10)
    st.on_follower_fetch(2, 10, 10, 1)
    st.set_eligible_brokers({1: 5, 2: 6})  # 3 is fenced
    st.on_follower_fetch(3, 10, 10, 2, broker_epoch=7)
    assert st.pending_alter is None
    st.set_eligible_brokers({1: 5, 2: 6, 3: 8})  # 3 re-registered: its fetch was from epoch 7
    st.on_follower_fetch(3, 10, 10, 3, broker_epoch=7)
    assert st.pending_alter is None
    st.on_follower_fetch(3, 10, 10, 4, broker_epoch=8)
    assert st.pending_alter.new_isr == (1, 2, 3)


def test_low_watermark_is_min_log_start_over_live_replicas():
    # Kafka's lowWatermarkIfLeader: a DeleteRecords completes when every live replica moved its start
    st = leader(leo=10)
    assert st.low_watermark(6, alive_brokers={1, 2, 3}) == -1  # followers have not reported a start yet
    st.on_follower_fetch(2, 10, 10, 1, log_start_offset=6)
    st.on_follower_fetch(3, 10, 10, 1, log_start_offset=2)
    assert st.low_watermark(6, alive_brokers={1, 2, 3}) == 2
    assert st.low_watermark(6, alive_brokers={1, 2}) == 6  # a dead (fenced) replica does not hold it back
    st.on_follower_fetch(3, 10, 10, 2, log_start_offset=6)
    assert st.low_watermark(6, alive_brokers={1, 2, 3}) == 6


def test_completed_reassignment_drops_the_removed_replica_even_when_the_alter_answer_came_first():
    # replicas (1, 2, 3): 2 being added, 3 being removed. Our expansion adding 2 completes the
    # reassignment; its AlterPartition answer (which carries no replicas) arrives before the metadata
    # record of the same partition epoch with replicas (1, 2). That record must still drop replica 3,
    # else its fetches (until it deletes its log) make us propose it back: the controller refuses
    # (INVALID_REQUEST, not a replica), the parked expansion keeps 3 in the maximal ISR and the HW
    # waits for it forever (acks=all produce timed out in tests/cluster/test_jbod.py).
    st = leader(isr=(1, 3), replicas=(1, 2, 3))
    st.on_follower_fetch(3, 10, 10, 1)
    st.on_follower_fetch(2, 10, 10, 1)
    req = st.take_alter_partition()
    assert req is not None and set(req.new_isr) == {1, 2, 3}
    assert st.on_isr_committed(reg(isr=(1, 2), replicas=(), partition_epoch=11), 10, req) is not None
    assert not st.make_leader(reg(isr=(1, 2), replicas=(1, 2), partition_epoch=11), 10, 2)
    assert st.replicas == (1, 2) and 3 not in st.progress
    st.on_follower_fetch(3, 10, 10, 3)  # its last fetches before it deletes its log
    assert st.take_alter_partition() is None
    st.on_follower_fetch(2, 12, 12, 3)
    assert st.high_watermark == 12  # 3 is not waited for


def test_a_follower_idle_in_its_fetch_session_is_not_lagging_when_the_log_end_moves():
    """Issue 24: a leader's incremental fetch reads only the partitions that moved, so a
    follower's fetches stop reporting a partition that stays idle. When the leader's log end then
    moves, the news records that the follower was caught up as of its last fetch (as reading the
    partition at each fetch would have), and the ISR keeps it; a replica that really stopped
    fetching is still removed."""
    import random
    import types

    from broker.apis.fetch_apis import FetchApis
    from broker.fetch_session import FetchSessionCache, PartitionData

    st = leader(now=0)
    st.on_follower_fetch(2, 10, 10, 0)
    st.on_follower_fetch(3, 10, 10, 0)
    cache = FetchSessionCache(random.Random(1))
    ctx = cache.context(0, 0, [(("t", 0), PartitionData(0, 10, 1 << 20))], [], 0, True)
    ctx.session.replica_id = 2
    cache.watch(ctx.session, ("t", 0), ("t", 0))
    for epoch, now in enumerate(range(500, 3 * LAG, 500), start=1):  # replica 2 keeps fetching, nothing moves
        assert cache.context(ctx.session.id, epoch, [], [], now, True, tracked=True).parts == []
    apis = types.SimpleNamespace(fetch_sessions=cache, replicas=types.SimpleNamespace(
        partitions={("t", 0): types.SimpleNamespace(state=st)}))
    FetchApis._partition_news(apis, ("t", 0))  # the leader appended: log end 10 -> 11
    assert st.maybe_shrink_isr(11, 3 * LAG)
    assert st.take_alter_partition().new_isr == (1, 2)  # 3 stopped fetching; 2 did not
