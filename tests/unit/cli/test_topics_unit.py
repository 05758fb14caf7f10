"""krafty topics' pure parts: Kafka's parsing of --replica-assignment, --config and the --topic
regex, and which lines --describe prints under each report option (TopicCommand.DescribeOptions)."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest

from krafty.admin_tool import UsageError
from krafty.topics import (
    PartitionInfo,
    TopicInfo,
    build_parser,
    describe_lines,
    kafka_uuid,
    parse_kafka_uuid,
    parse_replica_assignment,
    parse_topic_configs,
    select_topics,
    validate,
)


def test_replica_assignment_as_kafka_parses_it():
    assert parse_replica_assignment("1:2, 2:3,3:1") == {0: [1, 2], 1: [2, 3], 2: [3, 1]}
    with pytest.raises(UsageError, match="may not contain duplicate entries: 1"):
        parse_replica_assignment("1:1")
    with pytest.raises(UsageError, match=r"Partition 1 has different replication factor: \[2\]"):
        parse_replica_assignment("1:2,2")
    with pytest.raises(UsageError, match="expected broker ids"):
        parse_replica_assignment("1:x")


def test_topic_configs_must_be_key_equals_value():
    assert parse_topic_configs(["retention.ms = 10", "cleanup.policy=compact"]) == {
        "retention.ms": "10", "cleanup.policy": "compact"}
    with pytest.raises(UsageError, match="must be in the format"):
        parse_topic_configs(["retention.ms"])
    with pytest.raises(UsageError, match="must be in the format"):
        parse_topic_configs(["a=b=c"])


def test_topic_regex_is_a_full_match_with_commas_as_alternatives():
    topics = ["orders", "orders-dlq", "payments", "__consumer_offsets"]
    assert select_topics(topics, "orders", False) == ["orders"]
    assert select_topics(topics, "orders.*", False) == ["orders", "orders-dlq"]
    assert select_topics(topics, "orders,payments", False) == ["orders", "payments"]
    assert select_topics(topics, "'pay.*'", False) == ["payments"]
    assert select_topics(topics, None, True) == ["orders", "orders-dlq", "payments"]
    assert select_topics(topics, None, False)[0] == "__consumer_offsets"
    with pytest.raises(UsageError, match="invalid regex"):
        select_topics(topics, "(", False)


def test_topic_ids_print_as_kafka_uuids():
    u = uuid.UUID("60 1e 3a 2e 94 2c 47 f2 89 01 a3 a3 f8 38 c5 fd".replace(" ", ""))
    assert kafka_uuid(u) == "YB46LpQsR_KJAaOj-DjF_Q"
    assert parse_kafka_uuid("YB46LpQsR_KJAaOj-DjF_Q") == u
    with pytest.raises(UsageError):
        parse_kafka_uuid("nope")


def _args(*argv):
    a = build_parser().parse_args(["--bootstrap-server", "h:1", *argv])
    validate(a)
    return a


def _topic():
    t = TopicInfo("t", uuid.UUID(int=1), configs=[("min.insync.replicas", "2", 2), ("retention.ms", "-1", 1),
                                                   ("segment.bytes", "1024", 5)])
    t.partitions = [PartitionInfo(0, 1, [1, 2, 3], [1, 2, 3], [], []),   # healthy
                    PartitionInfo(1, 2, [2, 3, 1], [2, 3], [], []),      # under-replicated, at min ISR
                    PartitionInfo(2, -1, [3, 1, 2], [3], [], []),        # no leader, under min ISR
                    PartitionInfo(3, 4, [4, 1, 2], [4, 1, 2], None, None)]  # leader on a dead broker
    return t


@pytest.mark.parametrize("option, partitions", [
    ("--under-replicated-partitions", [1, 2]),
    ("--at-min-isr-partitions", [1]),
    ("--under-min-isr-partitions", [2]),
    ("--unavailable-partitions", [2, 3]),
])
def test_describe_reports_print_only_their_partitions_and_no_topic_line(option, partitions):
    lines = describe_lines(_args("--describe", option), [_topic()], live={1, 2, 3})
    assert [int(line.split("\tPartition: ")[1].split("\t")[0]) for line in lines] == partitions


def test_describe_prints_kafkas_lines():
    lines = describe_lines(_args("--describe"), [_topic()], live={1, 2, 3})
    assert lines[0] == ("Topic: t\tTopicId: AAAAAAAAAAAAAAAAAAAAAQ\tPartitionCount: 4\tReplicationFactor: 3\t"
                        "Configs: min.insync.replicas=2,retention.ms=-1")
    assert lines[1] == "\tTopic: t\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2,3\tElr: \tLastKnownElr: "
    assert lines[3].startswith("\tTopic: t\tPartition: 2\tLeader: none\t")
    assert lines[4].endswith("\tElr: N/A\tLastKnownElr: N/A")


def test_describe_shows_an_ongoing_reassignment_and_the_target_replication_factor():
    t = TopicInfo("t", uuid.UUID(int=0), [PartitionInfo(0, 1, [1, 2, 3, 4], [1, 2, 3], [], [], adding=[4],
                                                        removing=[1])])
    lines = describe_lines(_args("--describe"), [t], live={1, 2, 3, 4})
    assert lines[0] == "Topic: t\tPartitionCount: 1\tReplicationFactor: 3\tConfigs: "
    assert "\tAdding Replicas: 4\tRemoving Replicas: 1\t" in lines[1]


def test_topics_with_overrides_prints_topic_lines_only_for_topics_with_overrides():
    plain = TopicInfo("plain", uuid.UUID(int=0), [PartitionInfo(0, 1, [1], [1])], [("retention.ms", "1", 5)])
    lines = describe_lines(_args("--describe", "--topics-with-overrides"), [_topic(), plain], live={1})
    assert len(lines) == 1 and lines[0].startswith("Topic: t\t")


@pytest.mark.parametrize("argv, needle", [
    ([], "exactly one action"),
    (["--list", "--create"], "exactly one action"),
    (["--create"], "Missing required argument \"[topic]\""),
    (["--alter", "--topic", "t"], "Missing required argument \"[partitions]\""),
    (["--alter", "--topic", "t", "--partitions", "3", "--config", "a=b"], "can't be used with option \"[alter]\""),
    (["--create", "--topic", "t", "--replica-assignment", "1:2", "--partitions", "2"], "replica-assignment"),
    (["--list", "--under-replicated-partitions"], "under-replicated-partitions"),
    (["--describe", "--under-replicated-partitions", "--topics-with-overrides"], "topics-with-overrides"),
    (["--delete", "--topic", "t", "--if-not-exists"], "if-not-exists"),
    (["--create", "--topic", "t", "--exclude-internal"], "exclude-internal"),
    (["--create", "--topic", "t", "--replication-factor", "0"], "between 1 and 32767"),
    (["--create", "--topic", "t", "--partitions", "0"], "greater than 0"),
    (["--describe", "--if-exists"], "--topic or --topic-id is required"),
])
def test_bad_command_lines_are_refused_as_kafka_refuses_them(argv, needle):
    a = build_parser().parse_args(["--bootstrap-server", "h:1", *argv])
    with pytest.raises(UsageError, match=None) as e:
        validate(a)
    assert needle in str(e.value)


def test_report_options_alone_ask_no_configs_line():
    assert not describe_lines(SimpleNamespace(under_replicated_partitions=True, unavailable_partitions=False,
                                              under_min_isr_partitions=False, at_min_isr_partitions=False,
                                              topics_with_overrides=False), [TopicInfo("x", uuid.UUID(int=0))],
                              live=set())
