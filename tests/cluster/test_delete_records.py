"""DeleteRecords on a replicated topic (1 controller + 3 brokers): the Kafka Streams pattern
(a retention.ms=-1 repartition topic purged up to the committed offset), every replica moving
its log start and dropping the segments below it, through confluent-kafka's and
kafka-python's AdminClient."""

from __future__ import annotations

import os
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.log.batch import parse_batches
from tests.cluster.conftest import FAST, running_cluster, wait_until

TOPIC = "streams-repartition"
BROKERS = (2, 3, 4)  # node ids 2-4 with one controller (id 1)


def segments(cluster, broker_id: int, topic: str, partition: int = 0) -> list[int]:
    d = os.path.join(cluster.dir, f"broker-{broker_id}", f"{topic}-{partition}")
    return sorted(int(f[:-4]) for f in os.listdir(d) if f.endswith(".log"))


def log_end(cluster, broker_id: int, topic: str, partition: int = 0) -> int:
    """The offset after the last whole batch in the replica's files."""
    d = os.path.join(cluster.dir, f"broker-{broker_id}", f"{topic}-{partition}")
    for base in reversed(segments(cluster, broker_id, topic, partition)):
        with open(os.path.join(d, f"{base:020d}.log"), "rb") as f:
            headers = parse_batches(f.read())
        if headers:
            return headers[-1].base_offset + headers[-1].last_offset_delta + 1
    return 0


@pytest.fixture
def cluster3(tmp_path, request):
    with running_cluster(tmp_path, request, controllers=1, brokers=3, overrides=FAST) as c:
        yield c


def test_streams_pattern_purges_segments_below_the_committed_offset_on_every_replica(cluster3):
    bs = cluster3.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == 3, 60, "3 brokers")
    # what Kafka Streams makes for a repartition topic: no time retention, it purges itself
    f = admin.create_topics([NewTopic(TOPIC, 1, 3, config={"retention.ms": "-1", "segment.bytes": "4096",
                                                           "min.insync.replicas": "2"})])
    f[TOPIC].result(30)
    # one record per batch (~270 bytes), so every replica's segments of 4096 bytes hold ~15 records
    # whatever the producer's timing; batches of many records would each fill a segment alone
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "acks": "all", "linger.ms": 0,
                  "batch.num.messages": 1})
    for i in range(400):
        p.produce(TOPIC, key=b"k%d" % i, value=b"v" * 200)
        if i % 50 == 0:
            p.flush(30)
    assert p.flush(30) == 0
    wait_until(lambda: all(log_end(cluster3, b, TOPIC) == 400 for b in BROKERS), 30, "every replica at 400")
    assert all(len(segments(cluster3, b, TOPIC)) > 10 for b in BROKERS), [segments(cluster3, b, TOPIC)
                                                                          for b in BROKERS]

    c = Consumer({"bootstrap.servers": bs, "group.id": "streams-app", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(TOPIC, 0)])
    got = 0
    deadline = time.time() + 30
    while got < 300 and time.time() < deadline:
        got += len(c.consume(300 - got, 1))
    assert got == 300
    c.commit(asynchronous=False)
    committed = c.committed([TopicPartition(TOPIC, 0)], 10)[0].offset
    assert committed == 300
    c.close()

    t0 = time.monotonic()
    res = admin.delete_records([TopicPartition(TOPIC, 0, committed)])
    low = res[TopicPartition(TOPIC, 0, committed)].result(30)
    elapsed = time.monotonic() - t0
    assert low.low_watermark == committed  # answered once every live replica has moved its log start
    print(f"DeleteRecords on RF 3 took {elapsed * 1000:.1f} ms")
    for b in BROKERS:
        segs = segments(cluster3, b, TOPIC)
        # nothing wholly below the committed offset is left; the segment holding it stays
        assert segs[0] <= committed and (len(segs) == 1 or segs[1] > committed), (b, segs)
    # a consumer starting from the beginning starts at the purged offset
    lo, hi = Consumer({"bootstrap.servers": bs, "group.id": "x"}).get_watermark_offsets(
        TopicPartition(TOPIC, 0), timeout=10)
    assert (lo, hi) == (committed, 400)

    # errors: beyond the high watermark, an unknown topic
    res = admin.delete_records([TopicPartition(TOPIC, 0, 401)])
    with pytest.raises(KafkaException, match="OFFSET_OUT_OF_RANGE"):
        next(iter(res.values())).result(30)
    res = admin.delete_records([TopicPartition("no-such-topic", 0, 1)])  # librdkafka finds no leader itself
    with pytest.raises(KafkaException, match="UNKNOWN_TOPIC_OR_PART|No leaders found"):
        next(iter(res.values())).result(30)

    # kafka-python's admin client: to the high watermark (-1), then its errors
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTP
    from kafka.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError
    ka = KafkaAdminClient(bootstrap_servers=bs)
    try:
        out = ka.delete_records({KTP(TOPIC, 0): -1})
        assert out[KTP(TOPIC, 0)]["low_watermark"] == 400
        with pytest.raises(OffsetOutOfRangeError):
            ka.delete_records({KTP(TOPIC, 0): 500})
        with pytest.raises(UnknownTopicOrPartitionError):
            ka.delete_records({KTP("no-such-topic", 0): 1})
    finally:
        ka.close()
    for b in BROKERS:
        wait_until(lambda b=b: len(segments(cluster3, b, TOPIC)) == 1, 10, f"broker {b} keeps only its last segment")
