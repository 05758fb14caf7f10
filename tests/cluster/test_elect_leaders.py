"""ElectLeaders on 1 controller + 3 brokers (ids 2-4): preferred elections through
confluent-kafka's and kafka-python's AdminClient and `krafty leader-election`, and an unclean
election of a partition whose only in-sync replica is down."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from confluent_kafka import ElectionType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import FAST, ROOT, running_cluster, wait_until

NO_REBALANCE = {**FAST, "auto.leader.rebalance.enable": "false"}  # elections only when asked


@pytest.fixture
def cluster3(tmp_path, request):
    with running_cluster(tmp_path, request, controllers=1, brokers=3, overrides=NO_REBALANCE) as c:
        yield c


def leaders(admin, topic) -> dict[int, tuple[int, tuple[int, ...]]]:
    t = admin.list_topics(topic, timeout=5).topics[topic]
    return {p.id: (p.leader, tuple(p.isrs)) for p in t.partitions.values()}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "krafty", "leader-election", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_preferred_and_unclean_elections(cluster3, tmp_path):
    bs = cluster3.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == 3, 60, "3 brokers")
    admin.create_topics([NewTopic("pref", num_partitions=3, replica_assignment=[[2, 3, 4], [3, 4, 2], [4, 2, 3]]),
                         NewTopic("dirty", num_partitions=1, replica_assignment=[[3, 4]], config={"min.insync.replicas": "1"})])["pref"].result(30)
    wait_until(lambda: {p: lv[0] for p, lv in leaders(admin, "pref").items()} == {0: 2, 1: 3, 2: 4}, 30,
               "preferred leaders")
    # broker 2 goes away and comes back: partition 0 is led by another replica meanwhile
    cluster3.stop("broker-2")
    wait_until(lambda: leaders(admin, "pref")[0][0] in (3, 4), 30, "partition 0 led elsewhere")
    cluster3.start("broker-2")
    wait_until(lambda: all(len(isr) == 3 for _, isr in leaders(admin, "pref").values()), 60, "broker 2 in sync")
    assert leaders(admin, "pref")[0][0] != 2

    # confluent-kafka: partition 0 is elected, 1 needs no election
    res = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("pref", 0), TopicPartition("pref", 1)]).result(30)
    got = {(tp.topic, tp.partition): (None if e is None else str(e)) for tp, e in res.items()}
    assert got[("pref", 0)] is None and "ELECTION_NOT_NEEDED" in str(got[("pref", 1)]), got
    wait_until(lambda: leaders(admin, "pref")[0][0] == 2, 10, "broker 2 leads partition 0 again")

    # kafka-python: an unknown partition and a partition whose preferred replica leads already
    from kafka import KafkaAdminClient
    ka = KafkaAdminClient(bootstrap_servers=bs)
    try:
        resp = ka.elect_leaders(0, {"pref": [1, 7]}, raise_errors=False)
        codes = {(t[0], p[0]): p[1] for t in resp.replica_election_results for p in t[1]}
        assert codes == {("pref", 1): 84, ("pref", 7): 3}  # ELECTION_NOT_NEEDED, UNKNOWN_TOPIC_OR_PARTITION
    finally:
        ka.close()

    # the CLI, as kafka-leader-election.sh is typed
    cluster3.stop("broker-3")
    wait_until(lambda: leaders(admin, "pref")[1][0] != 3, 30, "partition 1 led elsewhere")
    cluster3.start("broker-3")
    wait_until(lambda: all(len(isr) == 3 for _, isr in leaders(admin, "pref").values()), 60, "broker 3 in sync")
    p = cli("--bootstrap-server", bs, "--election-type", "preferred", "--topic", "pref", "--partition", "1")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "Successfully completed leader election (PREFERRED) for partitions pref-1"
    spec = tmp_path / "elect.json"
    spec.write_text(json.dumps({"partitions": [{"topic": "pref", "partition": 2}, {"topic": "nope", "partition": 0}]}))
    p = cli("--bootstrap-server", bs, "--election-type", "PREFERRED", "--path-to-json-file", str(spec))
    assert p.returncode == 1
    assert "Valid replica already elected for partitions pref-2" in p.stdout
    assert "Error completing leader election (PREFERRED) for partition: nope-0: UNKNOWN_TOPIC_OR_PARTITION" in p.stdout
    p = cli("--bootstrap-server", bs, "--election-type", "preferred", "--all-topic-partitions")
    # broker 3's restart moved dirty-0 to broker 4; partitions that need nothing are not listed
    assert p.returncode == 0 and p.stdout == "Successfully completed leader election (PREFERRED) for partitions " \
        "dirty-0\n", (p.stdout, p.stderr)
    p = cli("--bootstrap-server", bs, "--election-type", "preferred", "--all-topic-partitions")
    assert p.returncode == 0 and p.stdout == "", (p.stdout, p.stderr)  # nothing left to elect

    # unclean: 'dirty' has replicas 3, 4; broker 4 falls behind, then broker 3 (the last in sync) dies
    cluster3.stop("broker-4")
    wait_until(lambda: leaders(admin, "dirty")[0] == (3, (3,)), 30, "ISR of dirty shrunk to 3")
    prod = Producer({"bootstrap.servers": bs, "acks": "all"})
    errs = []
    prod.produce("dirty", b"only on broker 3", on_delivery=lambda err, _m: errs.append(err))
    assert prod.flush(30) == 0 and errs == [None], errs
    cluster3.stop("broker-3")
    cluster3.start("broker-4")
    wait_until(lambda: 4 in admin.list_topics(timeout=5).brokers and leaders(admin, "dirty")[0][0] == -1, 60,
               "dirty without a leader, broker 4 back")
    p = cli("--bootstrap-server", bs, "--election-type", "preferred", "--topic", "dirty", "--partition", "0")
    assert p.returncode == 1 and "PREFERRED_LEADER_NOT_AVAILABLE" in p.stdout, p.stdout
    res = admin.elect_leaders(ElectionType.UNCLEAN, [TopicPartition("dirty", 0)]).result(30)
    assert [(tp.topic, tp.partition, e) for tp, e in res.items()] == [("dirty", 0, None)]
    wait_until(lambda: leaders(admin, "dirty")[0] == (4, (4,)), 10, "broker 4 leads dirty, alone in its ISR")
