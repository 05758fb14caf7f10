"""KIP-858 on the controller: a broker's replicas in a failed log dir (reported by its heartbeat)
leave leadership and the ISR, never lead again until the broker restarts, and the mark survives
snapshots."""

from controller_testkit import apply, endpoint, incarnation, part, topic_id, with_topic

from controller import cluster as cc
from controller import replication as rep
from metadata import records as r
from metadata.delta import image_from_records
from metadata.image import EMPTY

TIMEOUT = cc.DEFAULT_SESSION_TIMEOUT_MS


def _live(bids=(1, 2, 3)):
    img, state = EMPTY, cc.ClusterState()
    for bid in bids:
        recs, _ = cc.register_broker(img, state, bid, incarnation(bid), endpoint(bid), None, 0, TIMEOUT)
        img = apply(img, recs)
    for bid in bids:
        recs, res = cc.heartbeat(img, state, bid, img.brokers[bid].epoch, 0, img.offset, False, False)
        img = apply(img, recs)
    return img, state


def _offline_hb(img, state, bid, parts, now=1):
    recs, res = cc.heartbeat(img, state, bid, img.brokers[bid].epoch, now, img.offset, False, False,
                             offline_partitions=parts)
    return apply(img, recs), res, recs


def test_heartbeat_with_offline_partitions_moves_leadership_and_isr_away_from_them_only():
    img, state = _live()
    img = with_topic(img, "t", {0: (1, 2, 3), 1: (2, 1, 3), 2: (1, 2, 3)})
    tid = topic_id(img, "t")
    img, res, recs = _offline_hb(img, state, 1, [(tid, 0), (tid, 1)])
    assert not res.is_fenced  # the broker serves its other dirs
    p0, p1, p2 = part(img, "t", 0), part(img, "t", 1), part(img, "t", 2)
    assert p0.leader == 2 and p0.isr == (2, 3) and p0.offline == (1,)
    assert p1.leader == 2 and p1.isr == (2, 3) and p1.offline == (1,)
    assert p2.leader == 1 and p2.isr == (1, 2, 3) and p2.offline == ()  # its dir is fine
    # the same report again changes nothing (every heartbeat repeats it)
    _, _, again = _offline_hb(img, state, 1, [(tid, 0), (tid, 1)])
    assert again == []


def test_last_isr_member_offline_leaves_the_partition_leaderless_and_nobody_elects_it():
    img, state = _live()
    img = with_topic(img, "t", {0: (1, 2)}, isr={0: (1,)})
    tid = topic_id(img, "t")
    img, _, _ = _offline_hb(img, state, 1, [(tid, 0)])
    p = part(img, "t", 0)
    assert p.leader == r.NO_LEADER and p.isr == (1,) and p.offline == (1,)
    # another broker coming back, a preferred election, an ElectLeaders: none picks the offline replica
    assert rep.handle_broker_unfenced(img, 2) == []
    assert rep.preferred_leader_elections(img) == []
    recs, results = rep.elect_leaders(img, rep.PREFERRED_ELECTION, [("t", [0])])
    assert recs == [] and results[0].error != 0


def test_offline_replica_cannot_join_the_isr():
    img, state = _live()
    img = with_topic(img, "t", {0: (2, 1)}, isr={0: (2,)})
    tid = topic_id(img, "t")
    img, _, _ = _offline_hb(img, state, 1, [(tid, 0)])
    p = part(img, "t", 0)
    recs, res = rep.alter_partition(img, 2, img.brokers[2].epoch, tid, 0, p.leader_epoch, p.partition_epoch, (2, 1))
    assert recs == [] and res.error.name == "INELIGIBLE_REPLICA"


def test_restart_of_the_broker_clears_its_offline_marks_and_it_leads_again_once_unfenced():
    img, state = _live()
    img = with_topic(img, "t", {0: (1, 2)}, isr={0: (1,)})
    tid = topic_id(img, "t")
    img, _, _ = _offline_hb(img, state, 1, [(tid, 0)])
    # broker 1 restarts (a new incarnation, after its session ran out) with the dir healthy
    recs, epoch = cc.register_broker(img, state, 1, incarnation(1, 1), endpoint(1), None, TIMEOUT + 10, TIMEOUT)
    img = apply(img, recs)
    assert part(img, "t", 0).offline == ()
    recs, res = cc.heartbeat(img, state, 1, epoch, TIMEOUT + 20, img.offset, False, False)
    img = apply(img, recs)
    assert not res.is_fenced and part(img, "t", 0).leader == 1


def test_offline_replicas_survive_a_snapshot():
    img, state = _live()
    img = with_topic(img, "t", {0: (1, 2, 3)})
    img, _, _ = _offline_hb(img, state, 3, [(topic_id(img, "t"), 0)])
    again = image_from_records([r.decode(r.encode(x)) for x in img.to_records()], img.offset, img.epoch)
    assert part(again, "t", 0) == part(img, "t", 0)
    assert part(again, "t", 0).offline == (3,)


def test_reassigning_the_offline_replica_away_drops_its_mark():
    from controller.reassignment import alter_partition_reassignments
    img, state = _live((1, 2, 3, 4))
    img = with_topic(img, "t", {0: (1, 2)})
    img, _, _ = _offline_hb(img, state, 1, [(topic_id(img, "t"), 0)])
    recs, results = alter_partition_reassignments(img, [("t", 0, (2, 4))], rep.acceptable_leaders(img))
    img = apply(img, recs)
    p = part(img, "t", 0)
    assert p.replicas == (2, 4, 1) and p.offline == (1,)  # still a replica until the move completes
    recs, res = rep.alter_partition(img, 2, img.brokers[2].epoch, topic_id(img, "t"), 0, p.leader_epoch,
                                    p.partition_epoch, (2, 4))
    img = apply(img, recs)
    p = part(img, "t", 0)
    assert p.replicas == (2, 4) and p.offline == ()


def test_below_metadata_version_3_7_iv2_the_controller_marks_nothing_offline():
    img, state = _live()
    img = apply(img, [r.FeatureLevelRecord("metadata.version", 16)])
    img = with_topic(img, "t", {0: (1, 2, 3)})
    _, _, recs = _offline_hb(img, state, 1, [(topic_id(img, "t"), 0)])
    assert recs == []  # the broker stops instead (Kafka's KRaft before KIP-858)
