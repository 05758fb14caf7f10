"""Admin APIs through each client that has one: CreateTopics, DescribeConfigs, CreatePartitions, DeleteTopics."""

from __future__ import annotations

import pytest
from clients import CLIENTS, PY_CLIENTS, Confluent, Rec
from conftest import wait_topic
from krafty_node import wait_until

pytestmark = pytest.mark.krafty_only  # librdkafka's mock cluster has no admin APIs

ALREADY_EXISTS = r"(?i)TOPIC_ALREADY_EXISTS|TopicAlreadyExists|already exists"
UNKNOWN_TOPIC = r"(?i)UNKNOWN_TOPIC|UnknownTopic"
INVALID_PARTITIONS = r"(?i)INVALID_PARTITIONS|InvalidPartitions"


@pytest.mark.parametrize("client_name", PY_CLIENTS)
def test_topic_lifecycle(broker, topic, client_name):
    c = CLIENTS[client_name]
    bs = broker.bootstrap
    ck = Confluent()

    c.create_topic(bs, topic, 3, {"retention.ms": "123456789", "cleanup.policy": "delete"})
    wait_topic(bs, topic, 3)
    wait_until(
        lambda: c.topics(bs).get(topic) == 3, 30, message=f"{client_name} sees {topic} with 3 partitions"
    )

    # DescribeConfigs: the values we set, and defaults for the rest.
    cfg = c.topic_configs(bs, topic)
    assert cfg.get("retention.ms") == "123456789", cfg
    assert cfg.get("cleanup.policy") == "delete", cfg
    for default_key in ("segment.bytes", "max.message.bytes", "min.insync.replicas"):
        assert default_key in cfg, f"DescribeConfigs lacks default {default_key}: {sorted(cfg)}"

    # CreatePartitions 3 -> 5; the new partition takes writes.
    c.create_partitions(bs, topic, 5)
    wait_topic(bs, topic, 5)
    wait_until(lambda: c.topics(bs).get(topic) == 5, 30, message=f"{client_name} sees 5 partitions")
    assert ck.produce(bs, topic, [Rec(b"k", b"on partition 4")], partition=4) == [0]
    assert ck.watermarks(bs, topic, 4) == (0, 1)

    # DeleteTopics: gone from metadata, and a topic re-created under the same name starts empty.
    c.delete_topic(bs, topic)
    wait_until(lambda: topic not in ck.topics(bs), 60, message=f"{topic} gone from metadata")
    wait_until(lambda: c.create_topic(bs, topic, 1) or True, 60, interval=1.0, message=f"re-create {topic}")
    wait_topic(bs, topic, 1)
    assert ck.watermarks(bs, topic, 0) == (0, 0), "re-created topic still holds old data"


@pytest.mark.parametrize("client_name", PY_CLIENTS)
def test_admin_errors(broker, topic, client_name):
    c = CLIENTS[client_name]
    bs = broker.bootstrap
    c.create_topic(bs, topic, 2)
    wait_topic(bs, topic, 2)
    with pytest.raises(Exception, match=ALREADY_EXISTS):
        c.create_topic(bs, topic, 2)
    with pytest.raises(Exception, match=INVALID_PARTITIONS):
        c.create_partitions(bs, topic, 1)  # cannot shrink
    with pytest.raises(Exception, match=UNKNOWN_TOPIC):
        c.delete_topic(bs, topic + "-does-not-exist")
    with pytest.raises(Exception, match=UNKNOWN_TOPIC):
        c.create_partitions(bs, topic + "-does-not-exist", 4)
    assert Confluent().topics(bs).get(topic) == 2, "failed admin calls changed the topic"


@pytest.mark.parametrize("client_name", PY_CLIENTS)
def test_describe_configs_unknown_topic(broker, topic, client_name):
    if client_name == "kafka-python":
        # kafka-python 3 ignores per-resource error codes in DescribeConfigs; it must at least get no configs.
        assert CLIENTS[client_name].topic_configs(broker.bootstrap, topic) == {}
        return
    with pytest.raises(Exception, match=UNKNOWN_TOPIC):
        CLIENTS[client_name].topic_configs(broker.bootstrap, topic)


def test_create_topic_invalid_config_rejected(broker, topic):
    with pytest.raises(Exception, match=r"(?i)INVALID_CONFIG|InvalidConfig|INVALID_REQUEST"):
        Confluent().create_topic(broker.bootstrap, topic, 1, {"retention.ms": "not-a-number"})
    assert topic not in Confluent().topics(broker.bootstrap)
