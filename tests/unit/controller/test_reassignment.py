"""Partition reassignments on the controller (controller/reassignment.py, KIP-455): start,
completion through AlterPartition, RF changes, cancel, validation. One behaviour per test."""

from controller_testkit import apply, cluster, part, topic_id, with_topic

from common.errors import ErrorCode
from controller import reassignment as ra
from controller import replication as rep


def reassign(img, *requests):
    recs, res = ra.alter_partition_reassignments(img, list(requests), rep.acceptable_leaders(img))
    return apply(img, recs), {(x.topic, x.partition): x.error for x in res}, res


def expand_isr(img, topic, isr, pid=0):
    p = part(img, topic, pid)
    b = img.brokers[p.leader]
    recs, res = rep.alter_partition(img, p.leader, b.epoch, topic_id(img, topic), pid, p.leader_epoch,
                                    p.partition_epoch, isr)
    assert res.error == ErrorCode.NONE, res
    return apply(img, recs)


def test_reassignment_adds_target_replicas_and_marks_adding_and_removing():
    img = with_topic(cluster((1, 2, 3, 4, 5, 6)), "t", {0: (1, 2, 3)})
    img, errs, _ = reassign(img, ("t", 0, [4, 5, 6]))
    assert errs == {("t", 0): ErrorCode.NONE}
    p = part(img, "t")
    assert (p.replicas, p.isr, p.leader, p.adding, p.removing) == ((4, 5, 6, 1, 2, 3), (1, 2, 3), 1, (4, 5, 6),
                                                                    (1, 2, 3))
    assert [(o.topic, o.partition, o.adding) for o in ra.list_partition_reassignments(img, None)] == [
        ("t", 0, (4, 5, 6))]


def test_reassignment_completes_when_every_target_is_in_sync_and_moves_leadership():
    img = with_topic(cluster((1, 2, 3, 4, 5, 6)), "t", {0: (1, 2, 3)})
    img, _, _ = reassign(img, ("t", 0, [4, 5, 6]))
    img = expand_isr(img, "t", (1, 2, 3, 4, 5))
    assert part(img, "t").is_reassigning  # 6 is not in sync yet
    img = expand_isr(img, "t", (1, 2, 3, 4, 5, 6))
    p = part(img, "t")
    assert (p.replicas, p.isr, p.leader, p.adding, p.removing) == ((4, 5, 6), (4, 5, 6), 4, (), ())
    assert p.leader_epoch == 1
    assert ra.list_partition_reassignments(img, None) == []


def test_rf_increase_then_decrease():
    img = with_topic(cluster((1, 2, 3)), "t", {0: (1,)})
    img, _, _ = reassign(img, ("t", 0, [1, 2, 3]))
    assert part(img, "t").adding == (2, 3)
    img = expand_isr(img, "t", (1, 2, 3))
    p = part(img, "t")
    assert (p.replicas, p.isr, p.leader, p.is_reassigning) == ((1, 2, 3), (1, 2, 3), 1, False)
    # removing only: completes at once, leadership moves off the removed leader
    img, _, _ = reassign(img, ("t", 0, [3]))
    p = part(img, "t")
    assert (p.replicas, p.isr, p.leader, p.is_reassigning) == ((3,), (3,), 3, False)


def test_cancel_reverts_to_the_original_replicas():
    img = with_topic(cluster((1, 2, 3, 4)), "t", {0: (1, 2)})
    img, _, _ = reassign(img, ("t", 0, [3, 4]))
    img = expand_isr(img, "t", (1, 2, 3))
    img, errs, _ = reassign(img, ("t", 0, None))
    assert errs == {("t", 0): ErrorCode.NONE}
    p = part(img, "t")
    assert (p.replicas, p.isr, p.leader, p.is_reassigning) == ((1, 2), (1, 2), 1, False)
    _, errs, _ = reassign(img, ("t", 0, None))
    assert errs == {("t", 0): ErrorCode.NO_REASSIGNMENT_IN_PROGRESS}


def test_bad_targets_get_kafkas_errors():
    img = with_topic(cluster((1, 2, 3)), "t", {0: (1, 2)})
    _, _, res = reassign(img, ("t", 0, [1, 9]), ("t", 0, [1, 1]), ("t", 0, []), ("t", 5, [1]), ("nope", 0, [1]))
    assert [(x.error, x.message) for x in res] == [
        (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
         "The manual partition assignment includes broker 9, but no such broker is registered."),
        (ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes the broker 1 more than once."),
        (ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."),
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition t:5."),
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition nope:0."),
    ]


def test_reassignment_to_the_current_replicas_changes_nothing():
    img = with_topic(cluster((1, 2, 3)), "t", {0: (1, 2)})
    recs, res = ra.alter_partition_reassignments(img, [("t", 0, [1, 2])], rep.acceptable_leaders(img))
    assert recs == [] and res[0].error == ErrorCode.NONE


def test_reassignment_survives_a_snapshot():
    img = with_topic(cluster((1, 2, 3)), "t", {0: (1,)})
    img, _, _ = reassign(img, ("t", 0, [2, 3]))
    from metadata import records as r
    from metadata.delta import image_from_records
    again = image_from_records([r.decode(r.encode(x)) for x in img.to_records()], img.offset, img.epoch)
    assert part(again, "t") == part(img, "t")


def test_reordering_replicas_keeps_the_leader_until_a_preferred_election():
    # how an operator moves leadership off a broker (e.g. one whose copy is damaged)
    img = with_topic(cluster((1, 2, 3)), "t", {0: (1, 2, 3)})
    img, errs, _ = reassign(img, ("t", 0, [2, 1, 3]))
    p = part(img, "t")
    assert errs == {("t", 0): ErrorCode.NONE} and (p.replicas, p.leader, p.is_reassigning) == ((2, 1, 3), 1, False)
    recs, res = rep.elect_leaders(img, rep.PREFERRED_ELECTION, [("t", [0])])
    assert part(apply(img, recs), "t").leader == 2
