"""Partition leadership and ISR rules of the controller (controller/replication.py)."""

import uuid

import pytest
from controller_testkit import apply, cluster, part, topic_id, with_topic

from common.errors import ErrorCode, KafkaError
from controller import replication as rep
from metadata import records as r
from metadata.image import PartitionRegistration

NO_LEADER = r.NO_LEADER


def _reg(replicas, isr, leader, le=0, pe=0):
    return PartitionRegistration(tuple(replicas), tuple(isr), leader, le, pe)


def _fence(image, bid, unclean_default=False):
    b = image.brokers[bid]
    return apply(image, [r.BrokerRegistrationChangeRecord(bid, b.epoch, fenced=True),
                         *rep.handle_broker_fenced(image, bid, unclean_default)])


def _unfence(image, bid, unclean_default=False):
    b = image.brokers[bid]
    return apply(image, [r.BrokerRegistrationChangeRecord(bid, b.epoch, fenced=False),
                         *rep.handle_broker_unfenced(image, bid, unclean_default)])


# --- elect_leader ------------------------------------------------------------------------

def test_elect_keeps_current_leader_while_acceptable():
    assert rep.elect_leader(_reg([1, 2, 3], [1, 2, 3], 2), lambda b: True, False) == (2, (1, 2, 3))


def test_elect_takes_first_acceptable_isr_member_in_replica_order():
    reg = _reg([3, 1, 2], [1, 2, 3], 3)
    assert rep.elect_leader(reg, lambda b: b != 3, False) == (1, (1, 2, 3))


def test_elect_skips_replicas_outside_the_isr_without_unclean():
    reg = _reg([1, 2, 3], [1, 3], 1)
    assert rep.elect_leader(reg, lambda b: b == 2, False) == (NO_LEADER, (1, 3))


def test_elect_unclean_makes_the_new_leader_the_only_isr_member():
    reg = _reg([1, 2, 3], [1], 1)
    assert rep.elect_leader(reg, lambda b: b in (2, 3), True) == (2, (2,))


def test_elect_prefers_clean_leader_even_when_unclean_allowed():
    reg = _reg([1, 2, 3], [1, 3], 1)
    assert rep.elect_leader(reg, lambda b: b != 1, True) == (3, (1, 3))


# --- fencing ------------------------------------------------------------------------------

def test_fenced_leader_replaced_from_isr_with_new_leader_epoch():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)})
    before = part(img, "t")
    after = part(_fence(img, 1), "t")
    assert after.leader == 2
    assert after.isr == (2, 3)
    assert after.leader_epoch == before.leader_epoch + 1
    assert after.partition_epoch == before.partition_epoch + 1


def test_fenced_follower_leaves_isr_without_leader_epoch_bump():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)})
    after = part(_fence(img, 3), "t")
    assert (after.leader, after.isr, after.leader_epoch, after.partition_epoch) == (1, (1, 2), 0, 1)


def test_fencing_only_touches_partitions_the_broker_is_in():
    img = with_topic(cluster(), "t", {0: (1, 2, 3), 1: (2, 3, 4)})
    recs = rep.handle_broker_fenced(img, 1)
    assert [x.partition_id for x in recs] == [0]


def test_no_unclean_election_by_default():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)}, isr={0: (1,)})
    after = part(_fence(img, 1), "t")
    assert after.leader == NO_LEADER
    assert after.isr == (1,)  # the fenced last member stays: it has the data
    assert after.leader_epoch == 1


def test_unclean_election_when_enabled_for_the_topic():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)}, {"unclean.leader.election.enable": "true"}, isr={0: (1,)})
    after = part(_fence(img, 1), "t")
    assert (after.leader, after.isr) == (2, (2,))


def test_unclean_election_when_enabled_by_broker_default():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)}, isr={0: (1,)})
    after = part(_fence(img, 1, unclean_default=True), "t")
    assert (after.leader, after.isr) == (2, (2,))


def test_topic_config_disabling_unclean_overrides_broker_default():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)}, {"unclean.leader.election.enable": "false"}, isr={0: (1,)})
    after = part(_fence(img, 1, unclean_default=True), "t")
    assert after.leader == NO_LEADER


def test_isr_never_empty():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)})
    for bid in (1, 2, 3):
        img = _fence(img, bid)
        assert part(img, "t").isr
    p = part(img, "t")
    assert (p.leader, p.isr) == (NO_LEADER, (3,))


def test_unfenced_last_isr_member_becomes_leader_again():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)})
    for bid in (1, 2, 3):
        img = _fence(img, bid)
    before = part(img, "t")
    after = part(_unfence(img, 3), "t")
    assert (after.leader, after.isr) == (3, (3,))
    assert after.leader_epoch == before.leader_epoch + 1


def test_unfenced_replica_outside_isr_does_not_lead_without_unclean():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)})
    for bid in (1, 2, 3):
        img = _fence(img, bid)
    assert rep.handle_broker_unfenced(img, 1) == []
    assert part(_unfence(img, 1), "t").leader == NO_LEADER


def test_unfenced_replica_outside_isr_leads_when_unclean_enabled():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)})
    for bid in (1, 2, 3):
        img = _fence(img, bid)
    after = part(_unfence(img, 1, unclean_default=True), "t")
    assert (after.leader, after.isr) == (1, (1,))


def test_unfencing_leaves_led_partitions_alone():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)})
    img = _fence(img, 1)
    assert rep.handle_broker_unfenced(img, 1) == []  # 1 rejoins the ISR through AlterPartition


# --- controlled shutdown ----------------------------------------------------------------------

def test_controlled_shutdown_moves_leadership():
    img = with_topic(cluster(), "t", {0: (1, 2, 3), 1: (2, 1, 3), 2: (3, 4, 5)})
    b = img.brokers[1]
    img = apply(img, [r.BrokerRegistrationChangeRecord(1, b.epoch, in_controlled_shutdown=True),
                      *rep.handle_controlled_shutdown(img, 1)])
    p0, p1, p2 = part(img, "t", 0), part(img, "t", 1), part(img, "t", 2)
    assert (p0.leader, p0.isr, p0.leader_epoch) == (2, (2, 3), 1)
    assert (p1.leader, p1.isr, p1.leader_epoch) == (2, (2, 3), 0)  # follower: only leaves the ISR
    assert p2.partition_epoch == 0
    assert rep.partitions_led_by(img, 1) == []
    assert not rep.has_movable_responsibilities(img, 1)


def test_controlled_shutdown_of_last_isr_member_leaves_partition_leaderless():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)}, isr={0: (1,)})
    img = apply(img, rep.handle_controlled_shutdown(img, 1))
    p = part(img, "t")
    assert (p.leader, p.isr) == (NO_LEADER, (1,))
    assert not rep.has_movable_responsibilities(img, 1)


def test_shutting_down_broker_is_not_elected():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)}, isr={0: (1, 2)})
    img = apply(img, [r.BrokerRegistrationChangeRecord(2, img.brokers[2].epoch, in_controlled_shutdown=True)])
    after = part(_fence(img, 1), "t")
    assert (after.leader, after.isr) == (NO_LEADER, (2,))


# --- AlterPartition ---------------------------------------------------------------------------

def _alter(img, new_isr, *, broker=None, le=None, pe=None, epoch=None, topic="t", pid=0):
    p = part(img, topic, pid)
    broker = p.leader if broker is None else broker
    epoch = img.brokers[broker].epoch if epoch is None else epoch
    return rep.alter_partition(img, broker, epoch, topic_id(img, topic), pid,
                               p.leader_epoch if le is None else le,
                               p.partition_epoch if pe is None else pe, tuple(new_isr))


def test_alter_partition_shrinks_isr():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)})
    recs, res = _alter(img, (1, 2))
    assert res.error == ErrorCode.NONE
    after = part(apply(img, recs), "t")
    assert (after.isr, after.leader, after.leader_epoch, after.partition_epoch) == ((1, 2), 1, 0, 1)
    assert (res.isr, res.leader, res.leader_epoch, res.partition_epoch) == ((1, 2), 1, 0, 1)


def test_alter_partition_expands_isr_with_live_replica():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)}, isr={0: (1,)})
    recs, res = _alter(img, (1, 3))
    assert res.error == ErrorCode.NONE
    assert part(apply(img, recs), "t").isr == (1, 3)


def test_alter_partition_rejects_stale_partition_epoch():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)})
    img = apply(img, _alter(img, (1, 2))[0])
    recs, res = _alter(img, (1,), pe=0)
    assert (recs, res.error) == ([], ErrorCode.INVALID_UPDATE_VERSION)


def test_alter_partition_rejects_stale_leader_epoch():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)})
    img = _fence(img, 1)
    img = _unfence(img, 1)
    # broker 2 now leads in epoch 1; a request in epoch 0 is from a deposed leader
    recs, res = _alter(img, (2,), le=0)
    assert (recs, res.error) == ([], ErrorCode.FENCED_LEADER_EPOCH)


def test_alter_partition_from_non_leader_rejected():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)})
    recs, res = _alter(img, (2, 3), broker=2)
    assert (recs, res.error) == ([], ErrorCode.NOT_LEADER_OR_FOLLOWER)


def test_alter_partition_with_newer_epochs_answers_not_controller():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)})
    assert _alter(img, (1, 2), le=5)[1].error == ErrorCode.NOT_CONTROLLER
    assert _alter(img, (1, 2), pe=5)[1].error == ErrorCode.NOT_CONTROLLER


def test_alter_partition_rejects_ineligible_replica():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)}, isr={0: (1,)})
    img = apply(img, [r.BrokerRegistrationChangeRecord(2, img.brokers[2].epoch, fenced=True)])
    recs, res = _alter(img, (1, 2))
    assert (recs, res.error) == ([], ErrorCode.INELIGIBLE_REPLICA)


def test_alter_partition_rejects_replica_in_controlled_shutdown():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)}, isr={0: (1,)})
    img = apply(img, [r.BrokerRegistrationChangeRecord(3, img.brokers[3].epoch, in_controlled_shutdown=True)])
    assert _alter(img, (1, 3))[1].error == ErrorCode.INELIGIBLE_REPLICA


def test_alter_partition_may_shrink_away_an_ineligible_member():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)})
    img = apply(img, [r.BrokerRegistrationChangeRecord(2, img.brokers[2].epoch, fenced=True)])
    recs, res = _alter(img, (1, 3))
    assert res.error == ErrorCode.NONE and recs


def test_alter_partition_rejects_isr_without_leader():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)})
    assert _alter(img, (2, 3))[1].error == ErrorCode.INVALID_REQUEST


def test_alter_partition_rejects_non_replica_in_isr():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)})
    assert _alter(img, (1, 4))[1].error == ErrorCode.INVALID_REQUEST


def test_alter_partition_rejects_duplicate_isr_members():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)})
    assert _alter(img, (1, 2, 2))[1].error == ErrorCode.INVALID_REQUEST


def test_alter_partition_noop_returns_current_state():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)})
    recs, res = _alter(img, (3, 2, 1))
    assert recs == []
    assert (res.error, res.leader, res.isr, res.leader_epoch, res.partition_epoch) == (
        ErrorCode.NONE, 1, (1, 2, 3), 0, 0)


def test_alter_partition_rejects_stale_broker_epoch():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)})
    with pytest.raises(KafkaError) as e:
        _alter(img, (1, 2), epoch=img.brokers[1].epoch + 100)
    assert e.value.code == ErrorCode.STALE_BROKER_EPOCH


def test_alter_partition_unknown_topic_and_partition():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)})
    epoch = img.brokers[1].epoch
    assert rep.alter_partition(img, 1, epoch, uuid.uuid4(), 0, 0, 0, (1,))[1].error == ErrorCode.UNKNOWN_TOPIC_ID
    assert rep.alter_partition(img, 1, epoch, topic_id(img, "t"), 7, 0, 0, (1,))[1].error == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# --- preferred leaders ------------------------------------------------------------------------

def test_preferred_leader_returns():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)})
    img = _fence(img, 1)
    img = _unfence(img, 1)
    img = apply(img, _alter(img, (2, 3, 1))[0])  # 1 caught up and rejoined the ISR
    before = part(img, "t")
    assert before.leader == 2
    recs = rep.preferred_leader_elections(img)
    after = part(apply(img, recs), "t")
    assert after.leader == 1
    assert after.leader_epoch == before.leader_epoch + 1
    assert rep.imbalanced_partitions(apply(img, recs)) == []


def test_preferred_leader_not_elected_outside_isr():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)})
    img = _unfence(_fence(img, 1), 1)  # 1 is back but not yet in the ISR
    assert rep.preferred_leader_elections(img) == []
    assert rep.imbalanced_partitions(img) == [("t", 0)]


def test_preferred_leader_not_elected_while_unacceptable():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)}, leader={0: 2})
    img = apply(img, [r.BrokerRegistrationChangeRecord(1, img.brokers[1].epoch, in_controlled_shutdown=True)])
    assert rep.preferred_leader_elections(img) == []


def test_preferred_leader_elections_are_capped_per_call():
    img = with_topic(cluster(), "t", {p: (1, 2, 3) for p in range(5)}, leader={p: 2 for p in range(5)})
    assert len(rep.preferred_leader_elections(img, max_elections=3)) == 3
    assert len(rep.preferred_leader_elections(img)) == 5


def test_alter_partition_rejects_newcomer_with_stale_broker_epoch():
    img = with_topic(cluster(), "t", {0: (1, 2, 3)}, isr={0: (1,)})
    p = part(img, "t")
    stale = {2: img.brokers[2].epoch - 1}
    _, res = rep.alter_partition(img, 1, img.brokers[1].epoch, topic_id(img, "t"), 0, p.leader_epoch,
                                 p.partition_epoch, (1, 2), isr_broker_epochs=stale)
    assert res.error == ErrorCode.INELIGIBLE_REPLICA
    current = {2: img.brokers[2].epoch}
    _, res = rep.alter_partition(img, 1, img.brokers[1].epoch, topic_id(img, "t"), 0, p.leader_epoch,
                                 p.partition_epoch, (1, 2), isr_broker_epochs=current)
    assert res.error == ErrorCode.NONE
