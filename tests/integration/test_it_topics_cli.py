"""``krafty topics`` as a Kafka user types kafka-topics.sh, against a real node (subprocesses):
output lines, exit codes and error lines (the report filters against a 3+3 cluster with a broker
down: tests/cluster/test_cli_verbs.py)."""

from __future__ import annotations

import re

import pytest
from cli_inproc import krafty
from krafty_node import free_port

pytestmark = pytest.mark.krafty_only


def topics(broker, *args, check: int | None = 0):
    return krafty("topics", "--bootstrap-server", broker.bootstrap, *args, check=check)


def test_create_list_describe_alter_delete(broker, topic):
    out = topics(broker, "--create", "--topic", topic, "--partitions", "2", "--replication-factor", "1",
                 "--config", "retention.ms=86400000", "--config", "cleanup.policy=compact").stdout
    assert out.splitlines()[-1] == f"Created topic {topic}."
    assert topic in topics(broker, "--list").stdout.splitlines()
    assert "__consumer_offsets" not in topics(broker, "--list", "--exclude-internal").stdout.splitlines()

    lines = topics(broker, "--describe", "--topic", topic).stdout.splitlines()
    assert re.fullmatch(rf"Topic: {re.escape(topic)}\tTopicId: [A-Za-z0-9_-]{{22}}\tPartitionCount: 2\t"
                        r"ReplicationFactor: 1\tConfigs: .*", lines[0]), lines[0]
    configs = dict(kv.split("=", 1) for kv in lines[0].split("Configs: ")[1].split(","))
    assert configs["retention.ms"] == "86400000" and configs["cleanup.policy"] == "compact"
    node = broker.properties()["node.id"]
    assert lines[1:] == [f"\tTopic: {topic}\tPartition: {p}\tLeader: {node}\tReplicas: {node}\tIsr: {node}\t"
                         "Elr: \tLastKnownElr: " for p in (0, 1)]

    assert topics(broker, "--alter", "--topic", topic, "--partitions", "4").stdout == ""
    assert "PartitionCount: 4" in topics(broker, "--describe", "--topic", topic).stdout
    p = topics(broker, "--alter", "--topic", topic, "--partitions", "3", check=1)
    assert p.stdout.startswith("Error while executing topic command : ") and "4" in p.stdout, p.stdout

    assert topics(broker, "--delete", "--topic", topic).stdout == ""
    assert topic not in topics(broker, "--list").stdout.splitlines()


def test_create_errors_and_if_not_exists(broker, topic):
    topics(broker, "--create", "--topic", topic)
    p = topics(broker, "--create", "--topic", topic, check=1)
    assert p.stdout.splitlines()[-1] == f"Error while executing topic command : Topic '{topic}' already exists."
    topics(broker, "--create", "--topic", topic, "--if-not-exists")
    p = topics(broker, "--create", "--topic", topic + "-x", "--config", "no.such.key=1", check=1)
    assert p.stdout.splitlines()[-1].startswith("Error while executing topic command : ") and "no.such.key" in p.stdout
    p = topics(broker, "--create", "--topic", topic + "-y", "--replica-assignment", "1:7", check=1)
    assert p.stdout.splitlines()[-1].startswith("Error while executing topic command : ") and "7" in p.stdout
    p = topics(broker, "--create", "--topic", "bad/name", check=1)
    assert p.stdout.splitlines()[-1].startswith("Error while executing topic command : "), p.stdout


def test_create_with_a_replica_assignment_and_regex_delete(broker, topic):
    node = broker.properties()["node.id"]
    topics(broker, "--create", "--topic", topic + ".a", "--replica-assignment", f"{node},{node},{node}")
    topics(broker, "--create", "--topic", topic + ".b")
    assert "PartitionCount: 3" in topics(broker, "--describe", "--topic", topic + ".a").stdout
    topics(broker, "--alter", "--topic", topic + ".a", "--partitions", "4", "--replica-assignment",
           f"{node},{node},{node},{node}")
    assert "PartitionCount: 4" in topics(broker, "--describe", "--topic", topic + ".a").stdout
    topics(broker, "--delete", "--topic", re.escape(topic) + r"\..*")
    assert not [t for t in topics(broker, "--list").stdout.splitlines() if t.startswith(topic)]


def test_topics_that_do_not_exist(broker, topic):
    for action in (["--delete"], ["--describe"], ["--alter", "--partitions", "3"]):
        p = topics(broker, *action, "--topic", topic, check=1)
        assert p.stderr == f"Topic '{topic}' does not exist as expected\n" and p.stdout == ""
        topics(broker, *action, "--topic", topic, "--if-exists")


def test_describe_by_topic_id_and_overrides(broker, topic):
    topics(broker, "--create", "--topic", topic, "--config", "retention.ms=1000")
    first = topics(broker, "--describe", "--topic", topic).stdout.splitlines()[0]
    topic_id = first.split("TopicId: ")[1].split("\t")[0]
    assert topics(broker, "--describe", "--topic-id", topic_id).stdout.splitlines()[0] == first
    p = topics(broker, "--describe", "--topic-id", "AAAAAAAAAAAAAAAAAAAAAQ", check=1)
    assert p.stderr == "TopicId 'AAAAAAAAAAAAAAAAAAAAAQ' does not exist as expected\n"
    lines = topics(broker, "--describe", "--topics-with-overrides", "--topic", topic).stdout.splitlines()
    assert lines == [first]


def test_unreachable_cluster_and_bad_command_lines(tmp_path):
    p = krafty("topics", "--bootstrap-server", f"127.0.0.1:{free_port()}", "--list", check=1)
    assert p.stderr.startswith("Error: cannot connect to any --bootstrap-server") and \
        len(p.stderr.strip().splitlines()) == 1, p.stderr
    p = krafty("topics", "--bootstrap-server", "127.0.0.1:1", "--list", "--describe", check=2)
    assert "exactly one action" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    p = krafty("topics", "--bootstrap-server", "127.0.0.1:1", "--list", "--command-config",
            str(tmp_path / "nope.properties"), check=2)
    assert "cannot read --command-config" in p.stderr


def test_describe_pages_through_describe_topic_partitions(broker, topic):
    topics(broker, "--create", "--topic", topic, "--partitions", "5")
    whole = topics(broker, "--describe", "--topic", topic).stdout
    paged = topics(broker, "--describe", "--topic", topic, "--partition-size-limit-per-response", "2").stdout
    assert paged == whole and whole.count("\tPartition: ") == 5
