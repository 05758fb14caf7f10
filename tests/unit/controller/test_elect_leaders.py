"""ElectLeaders on the controller (controller/replication.py elect_leaders): Kafka's
ReplicationControlManager.electLeader rules, one behaviour per test."""

import pytest
from controller_testkit import apply, cluster, part, with_topic

from common.errors import ErrorCode, KafkaError
from controller import replication as rep
from metadata import records as r

PREFERRED, UNCLEAN = rep.PREFERRED_ELECTION, rep.UNCLEAN_ELECTION


def errors(results):
    return {(x.topic, x.partition): x.error for x in results}


def test_preferred_election_moves_leadership_back_to_the_first_replica():
    img = with_topic(cluster(), "t", {0: (1, 2, 3), 1: (2, 3, 1)}, leader={0: 2, 1: 2})
    recs, res = rep.elect_leaders(img, PREFERRED, [("t", [0, 1])])
    assert errors(res) == {("t", 0): ErrorCode.NONE, ("t", 1): ErrorCode.ELECTION_NOT_NEEDED}
    after = apply(img, recs)
    assert part(after, "t", 0).leader == 1 and part(after, "t", 0).leader_epoch == 1


def test_preferred_election_needs_the_preferred_replica_in_the_isr_and_unfenced():
    img = with_topic(cluster(fenced=[3]), "t", {0: (1, 2, 3), 1: (3, 1, 2)}, isr={0: (2, 3)}, leader={0: 2, 1: 1})
    recs, res = rep.elect_leaders(img, PREFERRED, [("t", [0, 1])])
    assert recs == []
    assert errors(res) == {("t", 0): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                           ("t", 1): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE}


def test_preferred_election_of_an_offline_partition_takes_another_isr_member():
    img = with_topic(cluster(fenced=[1, 2]), "t", {0: (1, 2, 3)}, leader={0: r.NO_LEADER})
    recs, res = rep.elect_leaders(img, PREFERRED, [("t", [0])])
    assert errors(res) == {("t", 0): ErrorCode.NONE}
    assert part(apply(img, recs), "t", 0).leader == 3


def test_unclean_election_only_for_leaderless_partitions_and_shrinks_the_isr_to_the_new_leader():
    img = with_topic(cluster(fenced=[1]), "t", {0: (1, 2, 3), 1: (1, 2)}, isr={0: (1,)},
                     leader={0: r.NO_LEADER, 1: 2})
    recs, res = rep.elect_leaders(img, UNCLEAN, [("t", [0, 1])])
    assert errors(res) == {("t", 0): ErrorCode.NONE, ("t", 1): ErrorCode.ELECTION_NOT_NEEDED}
    p = part(apply(img, recs), "t", 0)
    assert (p.leader, p.isr) == (2, (2,))


def test_unclean_election_without_a_live_replica_fails():
    img = with_topic(cluster(fenced=[1, 2]), "t", {0: (1, 2)}, isr={0: (1,)}, leader={0: r.NO_LEADER})
    recs, res = rep.elect_leaders(img, UNCLEAN, [("t", [0])])
    assert recs == [] and errors(res) == {("t", 0): ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE}


def test_unknown_topics_and_partitions_and_duplicates():
    img = with_topic(cluster(), "t", {0: (1, 2)}, leader={0: 2})
    recs, res = rep.elect_leaders(img, PREFERRED, [("t", [0, 0, 5]), ("nope", [0])])
    assert len(recs) == 1
    assert [(x.topic, x.partition, x.error) for x in res] == [
        ("t", 0, ErrorCode.NONE), ("t", 5, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("nope", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]


def test_all_partitions_leaves_out_those_that_need_no_election():
    img = with_topic(cluster(), "a", {0: (1, 2), 1: (2, 1)}, leader={0: 2, 1: 2})
    recs, res = rep.elect_leaders(img, PREFERRED, None)
    assert [(x.topic, x.partition, x.error) for x in res] == [("a", 0, ErrorCode.NONE)]


def test_unknown_election_type_is_an_invalid_request():
    with pytest.raises(KafkaError) as e:
        rep.elect_leaders(cluster(), 2, None)
    assert e.value.code == ErrorCode.INVALID_REQUEST
