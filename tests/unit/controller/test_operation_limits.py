"""One controller operation is bounded (issue 18), as in Kafka: CreateTopics and CreatePartitions
make at most 10,000 partitions per request ("Excessively large number of partitions per
request.") and any client operation writes at most 10,000 records ("Unable to perform
excessively large batch operation."), both POLICY_VIOLATION for the request as a whole and
checked before anything is placed: a CreateTopics of 2^31-1 partitions used to grow the node
until it was killed."""

from __future__ import annotations

import random
import tracemalloc
import uuid

import pytest
from controller_testkit import cluster, with_topic

from common.errors import ErrorCode, KafkaError
from controller import acls as acl_ops
from controller import topics as t
from metadata.acl import AclBinding, AclOperation, PatternType, PermissionType, ResourceType
from metadata.controller_api import NewTopic

DEFAULTS = t.TopicDefaults(1, 1)
BIG = 2**31 - 1
TOO_MANY_PARTITIONS = "Excessively large number of partitions per request."  # Kafka's messages
TOO_MANY_RECORDS = "Unable to perform excessively large batch operation."


def _create(image, topics, defaults=DEFAULTS):
    return t.create_topics(image, topics, defaults, random.Random(0))


def _policy_violation(fn, message: str, max_bytes: int = 1_000_000) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(KafkaError) as e:
            fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert (e.value.code, e.value.message) == (ErrorCode.POLICY_VIOLATION, message)
    # refused before anything was placed or allocated (or, for the record limit, once the records
    # already made reach it, as Kafka's BoundedList does: never more than one operation's worth)
    # (memory, not time: a wall-clock bound flakes on a loaded machine and under tracemalloc)
    assert peak < max_bytes, peak


@pytest.mark.parametrize("topics", [
    [NewTopic("huge", BIG, 1)],
    [NewTopic("big", 10_001, 1)],
    [NewTopic("a", 5000, 1), NewTopic("b", 5000, 1), NewTopic("c", 1, 1)],  # Kafka's own test
    [NewTopic(f"t{i}", -1, 1) for i in range(10_001)],  # the default partition count adds up too
    [NewTopic("a", BIG, 1), NewTopic("b", BIG, 1)],  # no int overflow
], ids=["2^31-1", "10001", "5000+5000+1", "10001-defaults", "overflow"])
def test_create_topics_over_the_partition_limit_fails_whole(topics):
    _policy_violation(lambda: _create(cluster(), topics), TOO_MANY_PARTITIONS)


def test_create_topics_with_manual_assignments_over_the_limit_fails_whole():
    assignment = {p: [1] for p in range(10_001)}
    _policy_violation(lambda: _create(cluster(), [NewTopic("m", -1, -1, assignment)]), TOO_MANY_PARTITIONS)


def test_create_topics_at_the_partition_limit_is_one_operation():
    recs, res = _create(cluster(), [NewTopic("max", 9_999, 3)])
    assert res[0].error == ErrorCode.NONE and res[0].num_partitions == 9_999
    assert len(recs) == 10_000  # TopicRecord + 9,999 PartitionRecords: the largest operation allowed


def test_create_topics_over_the_record_limit_fails_whole():
    # 5,000 topics of one partition: 10,000 partitions are allowed, 10,000 records are not
    topics = [NewTopic(f"t{i}", 1, 1) for i in range(5_001)]
    _policy_violation(lambda: _create(cluster(), topics), TOO_MANY_RECORDS, max_bytes=10_000_000)
    # configs count as records, and are refused before any is validated
    configs = {f"x.{i}": "v" for i in range(10_000)}
    _policy_violation(lambda: _create(cluster(), [NewTopic("c", 1, 1, None, configs)]), TOO_MANY_RECORDS)


def test_small_errors_stay_per_topic():
    recs, res = _create(cluster(), [NewTopic("zero", 0, 1), NewTopic("rf", 1, 2**15 - 1), NewTopic("ok", 2, 1)])
    assert [r.error for r in res] == [ErrorCode.INVALID_PARTITIONS, ErrorCode.INVALID_REPLICATION_FACTOR,
                                      ErrorCode.NONE]
    assert len(recs) == 3


@pytest.mark.parametrize("count", [BIG, 10_002])
def test_create_partitions_over_the_limit_fails(count):
    image = with_topic(cluster(), "grow", {0: (1,)})
    _policy_violation(lambda: t.create_partitions(image, "grow", count, None, random.Random(0)),
                      TOO_MANY_PARTITIONS)


def test_create_partitions_at_the_limit():
    image = with_topic(cluster(), "grow", {0: (1,)})
    recs = t.create_partitions(image, "grow", 10_001, None, random.Random(0))
    assert len(recs) == 10_000


def test_check_records_room_bounds_every_client_operation():
    t.check_records_room(0, 10_000)
    with pytest.raises(KafkaError) as e:
        t.check_records_room(1, 10_000)
    assert (e.value.code, e.value.message) == (ErrorCode.POLICY_VIOLATION, TOO_MANY_RECORDS)
    # e.g. CreateAcls of 10,001 bindings: its records exceed what one operation may write
    bindings = [AclBinding(ResourceType.TOPIC, f"t{i}", PatternType.LITERAL, "User:a", "*", AclOperation.READ,
                           PermissionType.ALLOW) for i in range(10_001)]
    recs, _ = acl_ops.create_acls(cluster(), bindings, new_uuid=uuid.uuid4)
    with pytest.raises(KafkaError):
        t.check_records_room(0, len(recs))


def test_numeric_topic_configs_are_bounded_like_kafkas_types():
    # a LONG key takes no number beyond 64 bits, an INT key none beyond 2^31-1
    _, res = _create(cluster(), [NewTopic("a", 1, 1, None, {"retention.ms": "9" * 2000}),
                                 NewTopic("b", 1, 1, None, {"segment.bytes": str(2**31)}),
                                 NewTopic("c", 1, 1, None, {"retention.ms": str(2**63 - 1),
                                                            "segment.bytes": str(2**31 - 1)})])
    assert [r.error for r in res] == [ErrorCode.INVALID_CONFIG, ErrorCode.INVALID_CONFIG, ErrorCode.NONE]
    assert len(res[0].message) < 300  # the value is cut in the message
