"""Admin requests a client must not be able to hurt a node with (issue 18): internal topics
cannot be created, deleted or repartitioned by clients, and an oversized CreateTopics or
CreatePartitions is refused before anything is allocated. The node runs under RLIMIT_AS, so
a regression fails these tests instead of exhausting the machine."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic
from conftest import GROUP_PROPS, MOCK, create_topic
from krafty_node import KraftyNode, start_or_fail, wait_until

from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from common.errors import ErrorCode

pytestmark = pytest.mark.krafty_only


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    if MOCK:
        pytest.skip("KRAFTY_IT_TARGET=mock: needs a real krafty node")
    n = start_or_fail(KraftyNode(tmp_path_factory.mktemp("hardening"), memory_limit_mb=1536,
                                 extra_properties=GROUP_PROPS))
    yield n
    n.close()


def _admin(node) -> AdminClient:
    return AdminClient({"bootstrap.servers": node.bootstrap})


def _error(future, timeout: float = 30) -> KafkaError:
    with pytest.raises(KafkaException) as ei:
        future.result(timeout)
    return ei.value.args[0]


def _commit_offset(node, topic: str, group: str, offset: int) -> None:
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        c.close()


def _committed(node, topic: str, group: str) -> int:
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    finally:
        c.close()


def test_metadata_does_not_auto_create_internal_topics_as_plain_topics(node):
    # A client asking for internal topics by name: __consumer_offsets and __transaction_state are
    # created as their coordinators create them (compacted, offsets.topic.num.partitions /
    # transaction.state.log.*), as Kafka's AutoTopicCreationManager does, the others not at all.
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "g-md", "allow.auto.create.topics": True})
    try:
        for name in ("__share_group_state", "__cluster_metadata"):
            md = c.list_topics(name, timeout=10)
            assert md.topics[name].error is not None, name
        for name, partitions in (("__consumer_offsets", int(GROUP_PROPS["offsets.topic.num.partitions"])),
                                 ("__transaction_state", 50)):
            md = wait_until(lambda name=name: (m := c.list_topics(name, timeout=10)).topics[name].error is None and m,
                            30, message=f"{name} in Metadata")
            assert len(md.topics[name].partitions) == partitions
    finally:
        c.close()
    admin = _admin(node)
    assert not {"__share_group_state", "__cluster_metadata"} & set(admin.list_topics(timeout=10).topics)
    for name, key, value in (("__consumer_offsets", "cleanup.policy", "compact"),
                             ("__transaction_state", "cleanup.policy", "compact"),
                             ("__transaction_state", "min.insync.replicas", "1")):  # min.isr 2, capped by RF 1
        res = ConfigResource(ConfigResource.Type.TOPIC, name)
        assert admin.describe_configs([res])[res].result(10)[key].value == value, (name, key)
    # the metadata log's directory is not taken for a partition log of "__cluster_metadata"
    assert not list((node.data_dir / "__cluster_metadata-0").glob("*.log"))


def test_internal_topics_cannot_be_deleted_created_or_repartitioned(node, topic):
    create_topic(node, topic, 1)
    _commit_offset(node, topic, "g-internal", 42)  # creates __consumer_offsets
    admin = _admin(node)
    offsets_partitions = len(admin.list_topics(timeout=10).topics["__consumer_offsets"].partitions)
    assert offsets_partitions == int(GROUP_PROPS["offsets.topic.num.partitions"])

    err = _error(admin.delete_topics(["__consumer_offsets"], operation_timeout=10)["__consumer_offsets"])
    assert err.code() == KafkaError.TOPIC_EXCEPTION, err  # (librdkafka's DeleteTopics v1 has no message)

    internal_before = {n: len(t.partitions) for n, t in admin.list_topics(timeout=10).topics.items()
                       if n.startswith("__")}
    for name in ("__consumer_offsets", "__transaction_state", "__share_group_state", "__cluster_metadata"):
        err = _error(admin.create_topics([NewTopic(name, 1, 1)])[name])
        assert err.code() == KafkaError.INVALID_REQUEST, (name, err)
        assert f"Creation of internal topic {name} is prohibited" in err.str(), err

    err = _error(admin.create_partitions([NewPartitions("__consumer_offsets", offsets_partitions + 1)])[
        "__consumer_offsets"])
    assert err.code() == KafkaError.TOPIC_EXCEPTION, err

    # nothing changed: the group's offset is still there, the topic keeps its partition count
    md = admin.list_topics(timeout=10)
    assert len(md.topics["__consumer_offsets"].partitions) == offsets_partitions
    # (__transaction_state exists when an earlier test's Metadata named it, as Kafka creates it then)
    assert {n: len(t.partitions) for n, t in md.topics.items() if n.startswith("__")} == internal_before
    assert "__cluster_metadata" not in md.topics
    assert _committed(node, topic, "g-internal") == 42


async def _admin_request(node, api_key, version, data):
    conn = KafkaConnection(node.host, node.port)
    await conn.connect()
    try:
        return await conn.request(api_key, version, data, timeout=60)
    finally:
        conn.close()


def _new_topic(name: str, partitions: int) -> dict:
    return {"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [], "configs": []}


async def test_hostile_create_topics_and_create_partitions_are_refused_whole(node, topic):
    # (librdkafka refuses these sizes itself, so they are sent as raw requests)
    rss_before = node.rss_mb()
    for partitions in (2**31 - 1, 1_000_000, 10_001):
        resp = await _admin_request(node, ApiKey.CREATE_TOPICS, 5, {
            "topics": [_new_topic(f"{topic}-{partitions}", partitions), _new_topic(f"{topic}-small", 1)],
            "timeout": 30000, "validate_only": False})
        assert [(t.error_code, t.error_message) for t in resp.topics] == [
            (ErrorCode.POLICY_VIOLATION, "Excessively large number of partitions per request.")] * 2
    create_topic(node, topic, 1)
    for count in (2**31 - 1, 1_000_000, 10_002):
        resp = await _admin_request(node, ApiKey.CREATE_PARTITIONS, 1, {
            "topics": [{"name": topic, "count": count, "assignments": None}], "timeout": 30000,
            "validate_only": False})
        assert [(r.error_code, r.error_message) for r in resp.results] == [
            (ErrorCode.POLICY_VIOLATION, "Excessively large number of partitions per request.")]
    # counts: more topics or names than one operation can take are refused whole, before any work
    resp = await _admin_request(node, ApiKey.CREATE_TOPICS, 5, {
        "topics": [_new_topic(f"{topic}-z{i}", 0) for i in range(10_001)], "timeout": 30000,
        "validate_only": False})
    assert {(t.error_code, t.error_message) for t in resp.topics} == {
        (ErrorCode.POLICY_VIOLATION, "Unable to perform excessively large batch operation.")}
    resp = await _admin_request(node, ApiKey.DELETE_TOPICS, 5, {
        "topic_names": [topic] + [f"{topic}-d{i}" for i in range(10_000)], "timeout": 30000})
    assert {r.error_code for r in resp.responses} == {ErrorCode.POLICY_VIOLATION}
    # a request within the limits but larger than gRPC's default 4 MiB reaches the controller
    resp = await _admin_request(node, ApiKey.CREATE_TOPICS, 5, {
        "topics": [{**_new_topic(f"{topic}-c{i}", 1), "configs": [{"name": "retention.ms", "value": "9" * 2000}]}
                   for i in range(3000)], "timeout": 30000, "validate_only": False})
    assert {t.error_code for t in resp.topics} == {ErrorCode.INVALID_CONFIG}  # (not a 64-bit number)
    # the node is alive, answers a canary, and nothing was created or grown
    assert node.running
    md = _admin(node).list_topics(timeout=10)
    assert len(md.topics[topic].partitions) == 1
    assert not [t for t in md.topics if t.startswith(f"{topic}-")]
    assert node.rss_mb() < rss_before + 200, (rss_before, node.rss_mb())
