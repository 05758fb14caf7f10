"""Broker registration, heartbeats, fencing and controlled shutdown (controller/cluster.py)."""

import pytest
from controller_testkit import apply, cluster, endpoint, incarnation, part, with_topic

from common.errors import ErrorCode, KafkaError
from controller import cluster as cc
from controller import replication as rep
from metadata import records as r
from metadata.image import EMPTY

TIMEOUT = cc.DEFAULT_SESSION_TIMEOUT_MS


def _register(img, state, bid, gen=0, now=0, **kw):
    recs, epoch = cc.register_broker(img, state, bid, incarnation(bid, gen), endpoint(bid), None, now, TIMEOUT, **kw)
    return apply(img, recs), epoch, recs


def _hb(img, state, bid, now, *, offset=None, fence=False, shutdown=False, epoch=None):
    recs, res = cc.heartbeat(img, state, bid, img.brokers[bid].epoch if epoch is None else epoch, now,
                             img.offset if offset is None else offset, fence, shutdown)
    return apply(img, recs), res, recs


def _live(bids=(1, 2, 3, 4, 5), now=0):
    """A cluster of unfenced brokers, all with sessions started at ``now``."""
    img, state = EMPTY, cc.ClusterState()
    for bid in bids:
        img, _, _ = _register(img, state, bid, now=now)
    for bid in bids:
        img, res, _ = _hb(img, state, bid, now)
        assert not res.is_fenced
    return img, state


# --- registration ---------------------------------------------------------------------------

def test_new_registration_is_fenced_with_epoch_at_record_offset():
    img, state = cluster((1, 2)), cc.ClusterState()
    recs, epoch = cc.register_broker(img, state, 7, incarnation(7), endpoint(7), "rack-a", 100, TIMEOUT)
    assert epoch == img.offset + 1
    assert recs == [r.RegisterBrokerRecord(7, incarnation(7), epoch, endpoint(7), "rack-a", fenced=True)]
    b = apply(img, recs).brokers[7]
    assert (b.fenced, b.epoch, b.rack) == (True, epoch, "rack-a")


def test_broker_epoch_follows_next_offset_when_given():
    _, epoch = cc.register_broker(cluster((1,)), cc.ClusterState(), 7, incarnation(7), endpoint(7), None, 0,
                                  TIMEOUT, next_offset=500)
    assert epoch == 500


def test_duplicate_live_registration_rejected():
    img, state = _live((1, 2))
    with pytest.raises(KafkaError) as e:
        _register(img, state, 1, gen=1, now=TIMEOUT - 1)
    assert e.value.code == ErrorCode.DUPLICATE_BROKER_REGISTRATION


def test_rejected_duplicate_does_not_extend_the_old_session():
    img, state = _live((1, 2))
    with pytest.raises(KafkaError):
        _register(img, state, 1, gen=1, now=TIMEOUT - 1)
    img, epoch, _ = _register(img, state, 1, gen=1, now=TIMEOUT)
    assert img.brokers[1].incarnation_id == incarnation(1, 1)


def test_reregistration_after_session_expiry_accepted():
    img, state = _live((1, 2, 3))
    img = with_topic(img, "t", {0: (1, 2, 3)})
    old_epoch = img.brokers[1].epoch
    img, epoch, _ = _register(img, state, 1, gen=1, now=TIMEOUT)
    b = img.brokers[1]
    assert (b.incarnation_id, b.fenced, b.epoch) == (incarnation(1, 1), True, epoch)
    assert epoch > old_epoch
    # the old incarnation's leadership and ISR membership went with it
    p = part(img, "t")
    assert (p.leader, p.isr) == (2, (2, 3))


def test_reregistration_epoch_is_the_register_record_offset():
    img, state = _live((1, 2, 3))
    img = with_topic(img, "t", {0: (1, 2, 3)})
    recs, epoch = cc.register_broker(img, state, 1, incarnation(1, 1), endpoint(1), None, TIMEOUT, TIMEOUT)
    assert isinstance(recs[-1], r.RegisterBrokerRecord)
    assert epoch == img.offset + len(recs)  # the offset the registration record will have


def test_reregistration_of_same_incarnation_returns_existing_epoch():
    img, state = _live((1, 2))
    recs, epoch = cc.register_broker(img, state, 1, incarnation(1), endpoint(1), None, 5, TIMEOUT)
    assert recs == []
    assert epoch == img.brokers[1].epoch


def test_same_incarnation_with_new_endpoints_keeps_its_fencing_state():
    img, state = _live((1, 2))
    ep = (r.Endpoint("PLAINTEXT", "elsewhere", 9093),)
    recs, epoch = cc.register_broker(img, state, 1, incarnation(1), ep, None, 5, TIMEOUT)
    img2 = apply(img, recs)
    assert epoch > img.brokers[1].epoch
    assert (img2.brokers[1].endpoints, img2.brokers[1].fenced) == (ep, False)


def test_registration_of_broker_unknown_to_a_new_controller_is_a_duplicate_until_expiry():
    img, _ = _live((1, 2))
    state = cc.ClusterState()  # a controller that has not seen broker 1 yet
    with pytest.raises(KafkaError):
        _register(img, state, 1, gen=1, now=1000)
    img, _, _ = _register(img, state, 1, gen=1, now=1000 + TIMEOUT)
    assert img.brokers[1].incarnation_id == incarnation(1, 1)


def test_unregister_broker_moves_partitions_then_removes_registration():
    img, state = _live((1, 2, 3))
    img = with_topic(img, "t", {0: (1, 2, 3)})
    img = apply(img, cc.unregister_broker(img, state, 1))
    assert 1 not in img.brokers
    assert part(img, "t").leader == 2
    with pytest.raises(KafkaError) as e:
        cc.unregister_broker(img, state, 1)
    assert e.value.code == ErrorCode.BROKER_ID_NOT_REGISTERED


# --- heartbeats ---------------------------------------------------------------------------------

def test_heartbeat_with_stale_epoch_rejected():
    img, state = _live((1, 2))
    with pytest.raises(KafkaError) as e:
        _hb(img, state, 1, 10, epoch=img.brokers[1].epoch - 1)
    assert e.value.code == ErrorCode.STALE_BROKER_EPOCH


def test_heartbeat_from_unregistered_broker_rejected():
    img, state = _live((1, 2))
    with pytest.raises(KafkaError) as e:
        cc.heartbeat(img, state, 9, 0, 10, img.offset, False, False)
    assert e.value.code == ErrorCode.STALE_BROKER_EPOCH


def test_unfence_when_caught_up():
    img, state = cluster(()), cc.ClusterState()
    img, _, _ = _register(img, state, 1)
    img, res, recs = _hb(img, state, 1, 10, offset=img.offset)
    assert recs == [r.BrokerRegistrationChangeRecord(1, img.brokers[1].epoch, fenced=False)]
    assert (res.is_caught_up, res.is_fenced, res.should_shut_down) == (True, False, False)
    assert not img.brokers[1].fenced


def test_stays_fenced_until_caught_up():
    img, state = cluster(()), cc.ClusterState()
    img, _, _ = _register(img, state, 1)
    _, res, recs = _hb(img, state, 1, 10, offset=img.offset - 1)
    assert recs == []
    assert (res.is_caught_up, res.is_fenced) == (False, True)


def test_caught_up_means_past_own_registration_record_by_default():
    img, state = cluster(()), cc.ClusterState()
    img, epoch, _ = _register(img, state, 1)
    img = apply(img, [r.NoOpRecord()] * 10)  # the log moved on since the registration
    recs, res = cc.heartbeat(img, state, 1, epoch, 10, epoch, False, False)
    assert res.is_caught_up and not res.is_fenced and recs


def test_caught_up_is_measured_against_the_committed_offset_passed_in():
    img, state = cluster(()), cc.ClusterState()
    img, epoch, _ = _register(img, state, 1)
    img = apply(img, [r.NoOpRecord()] * 10)
    recs, res = cc.heartbeat(img, state, 1, epoch, 10, epoch, False, False, committed_offset=img.offset)
    assert not res.is_caught_up and res.is_fenced and recs == []
    recs, res = cc.heartbeat(img, state, 1, epoch, 10, img.offset, False, False, committed_offset=img.offset)
    assert res.is_caught_up and not res.is_fenced and recs


def test_broker_asking_to_stay_fenced_stays_fenced():
    img, state = cluster(()), cc.ClusterState()
    img, _, _ = _register(img, state, 1)
    _, res, recs = _hb(img, state, 1, 10, fence=True)
    assert recs == [] and res.is_fenced


def test_unfenced_broker_asking_to_be_fenced_is_fenced_and_loses_leadership():
    img, state = _live((1, 2, 3))
    img = with_topic(img, "t", {0: (1, 2, 3)})
    img, res, _ = _hb(img, state, 1, 10, fence=True)
    assert res.is_fenced and not res.should_shut_down
    assert img.brokers[1].fenced
    assert part(img, "t").leader == 2


def test_unfence_elects_leader_for_leaderless_partitions():
    img, state = _live((1, 2, 3))
    img = with_topic(img, "t", {0: (1, 2, 3)}, isr={0: (3,)}, leader={0: 3})
    img, _, _ = _hb(img, state, 3, 10, fence=True)
    assert part(img, "t").leader == r.NO_LEADER
    img, res, _ = _hb(img, state, 3, 20)
    assert not res.is_fenced
    assert part(img, "t").leader == 3


def test_heartbeat_keeps_unfenced_broker_unchanged():
    img, state = _live((1, 2))
    _, res, recs = _hb(img, state, 1, 10)
    assert recs == []
    assert (res.is_caught_up, res.is_fenced, res.should_shut_down) == (True, False, False)


# --- controlled shutdown --------------------------------------------------------------------------

def test_controlled_shutdown_moves_leadership():
    img, state = _live((1, 2, 3))
    img = with_topic(img, "t", {0: (1, 2, 3), 1: (2, 1, 3)})
    img, res, _ = _hb(img, state, 1, 10, shutdown=True)
    assert res.in_controlled_shutdown and not res.should_shut_down and not res.is_fenced
    assert img.brokers[1].in_controlled_shutdown
    assert (part(img, "t", 0).leader, part(img, "t", 0).isr) == (2, (2, 3))
    assert part(img, "t", 1).isr == (2, 3)
    # the other brokers learn the moves, then the shutting-down broker may go
    for bid in (2, 3):
        img, _, _ = _hb(img, state, bid, 20)
    img, res, _ = _hb(img, state, 1, 30, shutdown=True)
    assert res.should_shut_down and res.is_fenced
    assert img.brokers[1].fenced


def test_controlled_shutdown_waits_until_active_brokers_saw_the_moves():
    img, state = _live((1, 2, 3))
    img = with_topic(img, "t", {0: (1, 2, 3)})
    shutdown_offset = img.offset + 1
    img, _, _ = _hb(img, state, 1, 10, shutdown=True)
    _hb(img, state, 2, 20, offset=img.offset)
    _hb(img, state, 3, 20, offset=shutdown_offset - 1)  # 3 has not replayed the moves yet
    _, res, recs = _hb(img, state, 1, 30, shutdown=True)
    assert not res.should_shut_down and recs == []
    _hb(img, state, 3, 40, offset=shutdown_offset)
    _, res, _ = _hb(img, state, 1, 50, shutdown=True)
    assert res.should_shut_down


def test_controlled_shutdown_with_nothing_to_move_shuts_down_at_once():
    img, state = _live((1, 2, 3, 4))
    img = with_topic(img, "t", {0: (1, 2, 3)})
    img, res, recs = _hb(img, state, 4, 10, shutdown=True)
    assert res.should_shut_down and res.is_fenced
    assert recs == [r.BrokerRegistrationChangeRecord(4, img.brokers[4].epoch, fenced=True)]


def test_session_expiry_during_controlled_shutdown_fences_the_broker():
    img, state = _live((1, 2, 3))
    img = with_topic(img, "t", {0: (1, 2, 3)}, isr={0: (1,)})
    img, _, _ = _hb(img, state, 1, 10, shutdown=True)
    for bid in (2, 3):
        _hb(img, state, bid, TIMEOUT)
    img = apply(img, cc.fence_stale_brokers(img, state, TIMEOUT + 10, TIMEOUT))
    assert img.brokers[1].fenced
    _, res, recs = _hb(img, state, 1, TIMEOUT + 20, shutdown=True)
    assert res.should_shut_down and recs == []


def test_controlled_shutdown_completes_when_nothing_can_move():
    img, state = _live((1, 2, 3))
    img = with_topic(img, "t", {0: (1, 2, 3)}, isr={0: (1,)})
    img, res, _ = _hb(img, state, 1, 10, shutdown=True)
    assert not res.should_shut_down
    assert (part(img, "t").leader, part(img, "t").isr) == (r.NO_LEADER, (1,))
    for bid in (2, 3):
        img, _, _ = _hb(img, state, bid, 20)
    img, res, _ = _hb(img, state, 1, 30, shutdown=True)
    assert res.should_shut_down


def test_fenced_broker_asking_to_shut_down_is_told_to():
    img, state = cluster(()), cc.ClusterState()
    img, _, _ = _register(img, state, 1)
    _, res, recs = _hb(img, state, 1, 10, shutdown=True)
    assert recs == [] and res.should_shut_down


def test_shutting_down_broker_is_not_unfenced_or_reelected():
    img, state = _live((1, 2, 3))
    img = with_topic(img, "t", {0: (1, 2, 3)})
    img, _, _ = _hb(img, state, 1, 10, shutdown=True)
    img, _, _ = _hb(img, state, 2, 20, fence=True)
    assert part(img, "t").leader == 3
    assert rep.preferred_leader_elections(img) == []


# --- sessions and fencing -----------------------------------------------------------------------

def test_fence_stale_brokers_fences_only_expired_sessions():
    img, state = _live((1, 2, 3))
    img = with_topic(img, "t", {0: (1, 2, 3)})
    for bid in (2, 3):
        img, _, _ = _hb(img, state, bid, 5000)
    assert cc.fence_stale_brokers(img, state, TIMEOUT - 1, TIMEOUT) == []
    img = apply(img, cc.fence_stale_brokers(img, state, TIMEOUT, TIMEOUT))
    assert [b for b in img.brokers.values() if b.fenced] == [img.brokers[1]]
    assert (part(img, "t").leader, part(img, "t").isr) == (2, (2, 3))


def test_fencing_a_broker_of_many_partitions_is_written_in_bounded_batches():
    img, state = _live((1, 2, 3, 4))
    img = with_topic(img, "t", {p: (1, 2, 3) if p % 2 else (2, 1, 3) for p in range(25)})
    img = with_topic(img, "u", {p: (3, 1, 4) for p in range(12)})
    for bid in (2, 3, 4):
        img, _, _ = _hb(img, state, bid, 5000)
    whole = apply(img, cc.fence_stale_brokers(img, state, TIMEOUT, TIMEOUT))
    batches = []
    done = False
    while not done:
        recs, done = cc.fence_stale_brokers_batch(img, state, TIMEOUT, TIMEOUT, max_records=10)
        assert len(recs) <= 10
        batches.append(recs)
        img = apply(img, recs)
        if not done:
            assert not img.brokers[1].fenced  # off its partitions first, fenced by the last batch
    assert len(batches) == 4  # 37 partition changes and the fence record, 10 at a time
    assert isinstance(batches[-1][-1], r.BrokerRegistrationChangeRecord) and batches[-1][-1].fenced
    assert img.brokers[1].fenced
    for name, n in (("t", 25), ("u", 12)):
        for pid in range(n):
            p, q = part(img, name, pid), part(whole, name, pid)
            assert (p.leader, p.isr) == (q.leader, q.isr)
            assert p.leader != 1 and 1 not in p.isr
    assert cc.fence_stale_brokers_batch(img, state, TIMEOUT, TIMEOUT, max_records=10) == ([], True)


def test_a_broker_that_heartbeats_during_a_batched_fence_is_not_fenced():
    img, state = _live((1, 2, 3))
    img = with_topic(img, "t", {p: (1, 2, 3) for p in range(30)})
    for bid in (2, 3):
        img, _, _ = _hb(img, state, bid, 5000)
    recs, done = cc.fence_stale_brokers_batch(img, state, TIMEOUT, TIMEOUT, max_records=10)
    assert not done
    img = apply(img, recs)
    img, res, _ = _hb(img, state, 1, TIMEOUT + 1)  # back before the next batch
    assert not res.is_fenced
    assert cc.fence_stale_brokers_batch(img, state, TIMEOUT + 2, TIMEOUT, max_records=10) == ([], True)
    assert not img.brokers[1].fenced
    assert sum(part(img, "t", p).leader == 1 for p in range(30)) == 20  # the rest it still leads


def test_fencing_several_brokers_at_once_keeps_the_last_isr_member():
    img, state = _live((1, 2, 3, 4))
    img = with_topic(img, "t", {0: (1, 2, 3)})
    img, _, _ = _hb(img, state, 4, TIMEOUT)
    img = apply(img, cc.fence_stale_brokers(img, state, TIMEOUT, TIMEOUT))
    p = part(img, "t")
    assert (p.leader, p.isr) == (r.NO_LEADER, (3,))
    assert {b.id for b in img.brokers.values() if b.fenced} == {1, 2, 3}


def test_fenced_brokers_are_not_fenced_again():
    img, state = _live((1, 2))
    img = apply(img, cc.fence_stale_brokers(img, state, TIMEOUT, TIMEOUT))
    assert cc.fence_stale_brokers(img, state, 3 * TIMEOUT, TIMEOUT) == []


def test_new_active_controller_gives_every_broker_a_fresh_session():
    img, _ = _live((1, 2, 3))
    state = cc.ClusterState()
    state.activate(img, now_ms=100_000)  # long after the old controller's last heartbeats
    assert cc.fence_stale_brokers(img, state, 100_000 + TIMEOUT - 1, TIMEOUT) == []
    assert len(cc.fence_stale_brokers(img, state, 100_000 + TIMEOUT, TIMEOUT)) == 3


def test_broker_unknown_to_the_controller_gets_a_fresh_session_instead_of_fencing():
    img, _ = _live((1, 2))
    state = cc.ClusterState()
    assert cc.fence_stale_brokers(img, state, 50_000, TIMEOUT) == []
    assert cc.fence_stale_brokers(img, state, 50_000 + TIMEOUT, TIMEOUT) != []


def test_next_session_expiry_is_the_earliest_unfenced_deadline():
    img, state = _live((1, 2))
    _hb(img, state, 2, 3000)
    assert state.next_session_expiry_ms(img, TIMEOUT) == TIMEOUT
    img = apply(img, cc.fence_stale_brokers(img, state, TIMEOUT, TIMEOUT))
    assert state.next_session_expiry_ms(img, TIMEOUT) == 3000 + TIMEOUT


def test_unclean_default_applies_when_fencing_stale_brokers():
    img, state = _live((1, 2, 3))
    img = with_topic(img, "t", {0: (1, 2, 3)}, isr={0: (1,)})
    for bid in (2, 3):
        _hb(img, state, bid, TIMEOUT)
    img = apply(img, cc.fence_stale_brokers(img, state, TIMEOUT, TIMEOUT, unclean_default=True))
    assert (part(img, "t").leader, part(img, "t").isr) == (2, (2,))


def test_clean_restart_after_controlled_shutdown_registers_at_once():
    img, state = _live((1, 2, 3))
    img = with_topic(img, "t", {0: (1, 2, 3)})
    res = None
    for now in range(10, 200, 10):  # heartbeats with want_shutdown until told to stop
        img, res, _ = _hb(img, state, 1, now, shutdown=True)
        for other in (2, 3):
            img, _, _ = _hb(img, state, other, now)
        if res.should_shut_down:
            break
    assert res.should_shut_down and img.brokers[1].fenced
    img, epoch, _ = _register(img, state, 1, gen=1, now=300)  # well inside the old session
    assert img.brokers[1].incarnation_id == incarnation(1, 1)


def test_broker_fenced_before_a_controller_failover_registers_at_once():
    # a combined node restarts after its controlled shutdown: the broker is fenced in the image, so
    # the newly active controller gives it no live session (as Kafka's BrokerHeartbeatManager);
    # an unfenced one gets a fresh session and still blocks a duplicate
    img, state = _live((1, 2))
    img, _, _ = _hb(img, state, 1, 10, fence=True)
    new_state = cc.ClusterState()
    new_state.activate(img, 20)
    img, _, _ = _register(img, new_state, 1, gen=1, now=20)
    assert img.brokers[1].incarnation_id == incarnation(1, 1)
    with pytest.raises(KafkaError) as e:
        _register(img, new_state, 2, gen=1, now=20)
    assert e.value.code == ErrorCode.DUPLICATE_BROKER_REGISTRATION


def test_fenced_but_not_shut_down_broker_still_blocks_a_duplicate():
    img, state = _live((1, 2))
    img, _, _ = _hb(img, state, 1, 10, fence=True)
    with pytest.raises(KafkaError) as e:
        _register(img, state, 1, gen=1, now=20)
    assert e.value.code == ErrorCode.DUPLICATE_BROKER_REGISTRATION


def test_colocated_broker_of_a_restarted_combined_node_registers_at_once():
    # kill -9 of a combined node: its controller activates with the old incarnation unfenced and
    # gives it a grace session; the broker of the same process registers anew at once (its old
    # incarnation cannot be alive), while any other broker still waits out its session
    img, _ = _live((1, 2))
    state = cc.ClusterState()
    state.activate(img, 100)
    img, epoch, recs = _register(img, state, 1, gen=1, now=110, colocated_broker_id=1)
    assert img.brokers[1].incarnation_id == incarnation(1, 1) and img.brokers[1].fenced
    with pytest.raises(KafkaError) as e:
        _register(img, state, 2, gen=1, now=110, colocated_broker_id=1)
    assert e.value.code == ErrorCode.DUPLICATE_BROKER_REGISTRATION


def test_colocated_broker_heard_since_activation_still_blocks_a_duplicate():
    img, _ = _live((1, 2))
    state = cc.ClusterState()
    state.activate(img, 100)
    img, _, _ = _hb(img, state, 1, 105)  # the old incarnation is alive: it heartbeats this controller
    with pytest.raises(KafkaError) as e:
        _register(img, state, 1, gen=1, now=110, colocated_broker_id=1)
    assert e.value.code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
