"""Broker-level behaviour seen through real clients: Metadata, advertised address, topic auto-creation."""

from __future__ import annotations

import pytest
from clients import ALL_CLIENTS, CLIENTS, PY_CLIENTS, ClientError, Confluent, Kcat, Rec
from conftest import MOCK, _start_node
from krafty_node import free_port, wait_until


@pytest.mark.parametrize("client_name", ALL_CLIENTS)
def test_metadata_shows_broker_at_listener_address(broker, client_name):
    brokers = CLIENTS[client_name].brokers(broker.bootstrap)
    assert list(brokers.values()) == [broker.bootstrap], brokers
    if not MOCK:
        assert list(brokers) == [1], "node.id=1 must be the broker id"


def test_kcat_metadata_lists_topic_partitions(broker, make_topic, topic):
    make_topic(topic, partitions=1 if MOCK else 4)
    md = Kcat().metadata(broker.bootstrap, topic)
    (t,) = [t for t in md["topics"] if t["topic"] == topic]
    assert not t.get("error"), t
    parts = sorted(t["partitions"], key=lambda p: p["partition"])
    if not MOCK:
        assert [p["partition"] for p in parts] == [0, 1, 2, 3]
        for p in parts:
            assert p["leader"] == 1 and p["replicas"] == [{"id": 1}] and p["isrs"] == [{"id": 1}], p


@pytest.mark.parametrize("how", ["confluent", "kcat"])
def test_auto_create_on_metadata(broker, topic, how):
    if how == "confluent":
        from confluent_kafka import Producer  # producers ask Metadata with allow_auto_topic_creation=true

        p = Producer({"bootstrap.servers": broker.bootstrap, "allow.auto.create.topics": True})
        wait_until(
            lambda: (
                (t := p.list_topics(topic, timeout=10).topics.get(topic)) is not None
                and t.error is None
                and t.partitions
            ),
            60,
            message=f"{topic} auto-created",
        )
    else:
        wait_until(
            lambda: (
                not next(
                    t for t in Kcat().metadata(broker.bootstrap, topic)["topics"] if t["topic"] == topic
                ).get("error")
            ),
            60,
            message=f"{topic} auto-created",
        )
    parts = Confluent().topics(broker.bootstrap).get(topic)
    assert parts == (parts if MOCK else 1), "auto-created topic must get num.partitions=1 partitions"
    assert Confluent().produce(broker.bootstrap, topic, [Rec(b"k", b"v")]) == [0]


@pytest.mark.krafty_only  # the mock cluster creates topics on any Metadata request
def test_ordinary_metadata_does_not_create_topics(broker, topic):
    """Metadata requests with allow_auto_topic_creation=false (a librdkafka consumer's) must not create topics."""
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "it-no-autocreate",
            "allow.auto.create.topics": False,
        }
    )
    try:
        md = c.list_topics(topic, timeout=30)
    finally:
        c.close()
    assert md.topics[topic].error is not None and md.topics[topic].error.name() == "UNKNOWN_TOPIC_OR_PART"
    assert topic not in Confluent().topics(broker.bootstrap)


# ------------------------------------------------- a node with auto-creation off and another advertised name
@pytest.fixture(scope="module")
def strict_broker(tmp_path_factory):
    if MOCK:
        pytest.skip("KRAFTY_IT_TARGET=mock: needs a real krafty node")
    port = free_port()
    node = _start_node(
        tmp_path_factory.mktemp("krafty-strict"),
        port=port,
        overrides={
            "auto.create.topics.enable": "false",
            "num.partitions": "3",
            "advertised.listeners": f"PLAINTEXT://localhost:{port}",
        },
    )
    yield node
    node.close()


@pytest.mark.krafty_only
@pytest.mark.parametrize("client_name", ALL_CLIENTS)
def test_advertised_listener(strict_broker, client_name):
    brokers = CLIENTS[client_name].brokers(strict_broker.bootstrap)
    assert brokers == {1: f"localhost:{strict_broker.port}"}


@pytest.mark.krafty_only
def test_unknown_topic_metadata_when_auto_create_disabled(strict_broker, topic):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": strict_broker.bootstrap, "allow.auto.create.topics": True})
    md = p.list_topics(topic, timeout=30)
    assert md.topics[topic].error is not None, (
        "topic was auto-created although auto.create.topics.enable=false"
    )
    assert md.topics[topic].error.name() == "UNKNOWN_TOPIC_OR_PART"
    assert topic not in Confluent().topics(strict_broker.bootstrap)


_UNKNOWN_TOPIC_PRODUCER_SETTINGS = {
    "confluent-kafka": {"message.timeout.ms": 8000, "topic.metadata.propagation.max.ms": 1000},
    "kafka-python": {"max_block_ms": 8000},
    "aiokafka": {"request_timeout_ms": 8000},
    "kcat": {"message.timeout.ms": 8000, "topic.metadata.propagation.max.ms": 1000},
}


@pytest.mark.krafty_only
@pytest.mark.parametrize("client_name", ALL_CLIENTS)
def test_produce_to_unknown_topic_fails_when_auto_create_disabled(strict_broker, topic, client_name):
    client = CLIENTS[client_name]
    with pytest.raises(ClientError):
        client.produce(
            strict_broker.bootstrap,
            topic,
            [Rec(b"k", b"v")],
            timeout=30,
            **_UNKNOWN_TOPIC_PRODUCER_SETTINGS[client_name],
        )
    assert topic not in Confluent().topics(strict_broker.bootstrap)


@pytest.mark.krafty_only
def test_create_topic_uses_num_partitions_default(strict_broker, topic):
    """CreateTopics with num_partitions=-1 (KIP-464) gets the broker's num.partitions."""
    from conftest import wait_topic

    Confluent().create_topic(strict_broker.bootstrap, topic, -1)
    wait_topic(strict_broker.bootstrap, topic, 3)
    assert Confluent().topics(strict_broker.bootstrap)[topic] == 3


@pytest.mark.krafty_only
@pytest.mark.parametrize("client_name", PY_CLIENTS)
def test_strict_broker_serves_created_topics(strict_broker, topic, client_name):
    """Explicitly created topics work normally with auto-creation off (and via the advertised name)."""
    from conftest import wait_topic

    Confluent().create_topic(strict_broker.bootstrap, topic, 3)
    wait_topic(strict_broker.bootstrap, topic, 3)
    client = CLIENTS[client_name]
    recs = [Rec(b"k", f"v{i}".encode()) for i in range(10)]
    assert client.produce(strict_broker.bootstrap, topic, recs, partition=2) == list(range(10))
    c = client.consumer(strict_broker.bootstrap, topic, 2, "earliest")
    try:
        assert [g.value for g in c.read(10)] == [r.value for r in recs]
    finally:
        c.close()
