"""The CLI verbs against a 3+3 cluster, as a Kafka user types them: `krafty topics --describe`'s
report options and `krafty cluster health` with a broker killed, and the console producer,
consumer and get-offsets across brokers."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.cluster.conftest import FAST, ROOT, running_cluster, wait_until

pytestmark = pytest.mark.cluster


def krafty(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "krafty", *args], cwd=ROOT, capture_output=True, text=True,
                          input=stdin, timeout=timeout)


def partitions(out: str) -> list[tuple[str, int]]:
    return sorted((line.split("Topic: ")[1].split("\t")[0], int(line.split("Partition: ")[1].split("\t")[0]))
                  for line in out.splitlines() if line.startswith("\tTopic: "))


@pytest.fixture
def cluster33(tmp_path, request):
    with running_cluster(tmp_path, request, controllers=3, brokers=3, overrides=FAST) as c:
        yield c


def test_describe_reports_and_cluster_health_with_a_broker_down(cluster33):
    bs = cluster33.bootstrap
    wait_until(lambda: krafty("cluster", "health", "--bootstrap-server", bs).returncode == 0, 60, "a healthy cluster")
    health = krafty("cluster", "health", "--bootstrap-server", bs).stdout
    assert "All nodes:                        [4 5 6]" in health and "Healthy:                          true" in health

    def topics(*args, check=0):
        p = krafty("topics", "--bootstrap-server", bs, *args)
        assert p.returncode == check, (p.stdout, p.stderr)
        return p.stdout
    topics("--create", "--topic", "orders", "--partitions", "3", "--replication-factor", "3",
           "--config", "min.insync.replicas=2")
    topics("--create", "--topic", "lonely", "--replica-assignment", "6", "--config", "min.insync.replicas=1")
    topics("--create", "--topic", "half", "--replica-assignment", "6,4", "--config", "min.insync.replicas=1")
    wait_until(lambda: topics("--describe", "--topic", "orders|lonely|half").count("\tLeader: ") == 6
               and "Leader: none" not in topics("--describe") and
               not topics("--describe", "--under-replicated-partitions"), 60, "all partitions in sync")
    assert topics("--describe", "--at-min-isr-partitions", "--topic", "orders") == ""

    cluster33.kill("broker-6")
    want = [("orders", 0), ("orders", 1), ("orders", 2)]
    wait_until(lambda: partitions(topics("--describe", "--under-replicated-partitions", "--topic", "orders")) == want,
               60, "orders under-replicated")
    # (Kafka's rule is the ISR's size alone: a leaderless partition with min.insync.replicas=1 is "at" it)
    assert partitions(topics("--describe", "--at-min-isr-partitions")) == [("half", 0), ("half", 1), ("lonely", 0),
                                                                            *want]
    assert partitions(topics("--describe", "--unavailable-partitions")) == [("half", 0), ("lonely", 0)]
    assert partitions(topics("--describe", "--under-min-isr-partitions")) == [("half", 0), ("lonely", 0)]
    assert "\tLeader: none\t" in topics("--describe", "--unavailable-partitions")
    assert not topics("--describe", "--under-replicated-partitions").startswith("Topic:")  # no topic lines

    p = krafty("cluster", "health", "--bootstrap-server", bs)
    assert p.returncode == 1
    assert "Nodes down:                       [6]" in p.stdout
    assert "Leaderless partitions (2):        [half/0 lonely/0]" in p.stdout
    assert "Under-replicated partitions (3):  [orders/0 orders/1 orders/2]" in p.stdout
    assert "Unhealthy reasons:                [nodes_down leaderless_partitions under_replicated_partitions]" \
        in p.stdout

    # the console tools across the two brokers left
    lines = "".join(f"key-{i}\tvalue-{i}\n" for i in range(100))
    p = krafty("console-producer", "--bootstrap-server", bs, "--topic", "orders", "--property", "parse.key=true",
               stdin=lines)
    assert p.returncode == 0, p.stderr
    offsets = krafty("get-offsets", "--bootstrap-server", bs, "--topic", "orders").stdout.split()
    assert sum(int(x.rsplit(":", 1)[1]) for x in offsets) == 100, offsets
    p = krafty("console-consumer", "--bootstrap-server", bs, "--topic", "orders", "--from-beginning",
               "--max-messages", "100", "--property", "print.key=true", timeout=90)
    assert sorted(p.stdout.splitlines()) == sorted(f"key-{i}\tvalue-{i}" for i in range(100))
    # a partition without a leader does not stop the others: keyless records go to the led one, and a
    # consumer of several topics reads what it can
    p = krafty("console-producer", "--bootstrap-server", bs, "--topic", "half", "--max-block-ms", "5000",
               stdin="a\nb\nc\n")
    assert p.returncode == 0, p.stderr
    assert krafty("get-offsets", "--bootstrap-server", bs, "--topic", "half").stdout.split() == ["half:1:3"]
    p = krafty("console-consumer", "--bootstrap-server", bs, "--include", "half|lonely", "--from-beginning",
               "--max-messages", "3", timeout=30)
    assert sorted(p.stdout.split()) == ["a", "b", "c"], (p.stdout, p.stderr)

    cluster33.start("broker-6")
    p = krafty("cluster", "health", "--bootstrap-server", bs, "--exit-when-healthy", timeout=120)
    assert p.returncode == 0 and p.stdout.rstrip().endswith("Under-replicated partitions (0):  []"), p.stdout
