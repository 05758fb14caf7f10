"""What Kafka's LogValidator refuses, seen by a real client (confluent-kafka/librdkafka):
keyless records on a compacted topic get INVALID_RECORD with per-record errors (KIP-467; the
rest of their batch gets librdkafka's _INVALID_DIFFERENT_RECORD, as librdkafka's test 0011
expects), and CreateTime records outside message.timestamp.before/after.max.ms (KIP-937)
get INVALID_TIMESTAMP."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, Producer
from conftest import create_topic

pytestmark = pytest.mark.krafty_only

YEAR_MS = 365 * 24 * 3_600_000


def produce(bootstrap: str, topic: str, msgs: list[dict], **conf) -> list[tuple[int, bytes | None]]:
    """Produce ``msgs`` (kwargs of Producer.produce) to partition 0; (error code or 0, value) per
    delivery report, in the order sent."""
    reports: dict[bytes, int] = {}

    def cb(err, msg):
        reports[msg.value()] = err.code() if err else 0

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "retries": 0, **conf})
    for m in msgs:
        p.produce(topic, partition=0, on_delivery=cb, **m)
    assert p.flush(30) == 0
    return [(reports[m["value"]], m["value"]) for m in msgs]


@pytest.mark.parametrize("compression", ["none", "lz4"])
def test_keyless_records_on_a_compacted_topic_fail_alone_with_invalid_record(broker, topic, compression):
    create_topic(broker, topic, 1, {"cleanup.policy": "compact"})
    msgs = [{"value": b"v%03d" % i, **({} if i % 10 == 0 else {"key": b"k%03d" % i})} for i in range(100)]
    got = produce(broker.bootstrap, topic, msgs, **{"compression.type": compression})
    codes = [c for c, _v in got]
    # one batch: the keyless records are named by the record errors, the rest fail with them
    assert [i for i, c in enumerate(codes) if c == KafkaError.INVALID_RECORD] == list(range(0, 100, 10))
    assert codes.count(KafkaError._INVALID_DIFFERENT_RECORD) == 90
    # keyed records alone are accepted; a keyless one alone is refused
    assert produce(broker.bootstrap, topic, [{"key": b"k", "value": b"ok"}]) == [(0, b"ok")]
    assert produce(broker.bootstrap, topic, [{"value": b"nokey"}]) == [(KafkaError.INVALID_RECORD, b"nokey")]


def test_keyless_records_are_fine_on_a_delete_topic(broker, topic):
    create_topic(broker, topic, 1)
    assert produce(broker.bootstrap, topic, [{"value": b"a"}, {"value": b"b"}]) == [(0, b"a"), (0, b"b")]


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_record_stamped_years_ahead_is_invalid_timestamp(broker, topic, compression):
    create_topic(broker, topic, 1)
    now = int(time.time() * 1000)
    got = produce(broker.bootstrap, topic, [{"value": b"future", "timestamp": now + 2 * YEAR_MS}],
                  **{"compression.type": compression})
    assert got == [(KafkaError.INVALID_TIMESTAMP, b"future")]
    got = produce(broker.bootstrap, topic, [{"value": b"soon", "timestamp": now + 60_000}, {"value": b"now"}])
    assert got == [(0, b"soon"), (0, b"now")], "within message.timestamp.after.max.ms (1 hour)"


def test_timestamp_bounds_are_topic_configs(broker, topic):
    now = int(time.time() * 1000)
    create_topic(broker, topic, 1, {"message.timestamp.after.max.ms": str(3 * YEAR_MS),
                                    "message.timestamp.before.max.ms": str(24 * 3_600_000)})
    got = produce(broker.bootstrap, topic, [{"value": b"future", "timestamp": now + 2 * YEAR_MS}])
    assert got == [(0, b"future")]
    got = produce(broker.bootstrap, topic, [{"value": b"old", "timestamp": now - YEAR_MS}])
    assert got == [(KafkaError.INVALID_TIMESTAMP, b"old")]


def test_timestamp_configs_are_described_with_kafka_defaults(broker, topic):
    from confluent_kafka.admin import AdminClient, ConfigResource

    create_topic(broker, topic, 1)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([res])[res].result(30)
    assert configs["message.timestamp.after.max.ms"].value == "3600000"
    assert configs["message.timestamp.before.max.ms"].value == str(2**63 - 1)
