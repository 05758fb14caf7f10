"""num.replica.fetchers: a follower fetches from one leader over that many connections (Kafka's
fetcher threads, a partition on the one its fetcher id names), and a dynamic change of the key
takes effect on the running broker, replication going on across the move."""

from __future__ import annotations

import os

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from broker.replica.fetcher import fetcher_id
from tests.cluster.conftest import FAST, running_cluster, wait_until

TOPIC = "fan"
PARTITIONS = 8


def established_to(pid: int, port: int) -> int:
    """Established TCP connections of process ``pid`` to local port ``port`` (from /proc)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                remote_port = int(cols[2].rsplit(":", 1)[1], 16)
                if cols[3] == "01" and remote_port == port and cols[9] in inodes:
                    n += 1
    return n


@pytest.fixture
def cluster(tmp_path, request):
    with running_cluster(tmp_path, request, controllers=1, brokers=2, overrides=FAST) as c:
        yield c


def test_dynamic_num_replica_fetchers_spreads_partitions_over_connections(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == 2, 60, "2 brokers")
    # broker 2 leads every partition, broker 3 follows them all
    admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replica_assignment=[[2, 3]] * PARTITIONS,
                                  config={"min.insync.replicas": "2"})])[TOPIC].result(30)
    leader_port, follower = cluster.base, cluster.procs["broker-3"].pid
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})

    def replicate(n: int) -> None:
        for i in range(n):
            producer.produce(TOPIC, b"v%d" % i, partition=i % PARTITIONS)
        assert producer.flush(30) == 0  # acks=all with min.insync.replicas 2: every batch reached broker 3

    replicate(80)
    wait_until(lambda: established_to(follower, leader_port) == 1, 30, "one fetcher connection")

    for fetchers in (2, 4):
        res = ConfigResource(ConfigResource.Type.BROKER, "3", incremental_configs=[
            ConfigEntry("num.replica.fetchers", str(fetchers), incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([res])[res].result(30)
        want = len({fetcher_id((TOPIC, p), fetchers) for p in range(PARTITIONS)})
        assert want > 1
        wait_until(lambda want=want: established_to(follower, leader_port) == want, 30,
                   f"{want} fetcher connections")
        replicate(80)
        assert established_to(follower, leader_port) == want
    assert "reconfiguring replica fetchers" not in cluster.log_text("broker-3")  # the resize did not fail
