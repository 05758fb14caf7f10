"""Old clients through krafty (issue 26, the message formats before v2): kafka-python pinned to
api_version (0, 10, 0), (0, 9) and (0, 8, 2), and librdkafka in its old modes
(api.version.request=false with broker.version.fallback 0.9.0 / 0.8.2; librdkafka 2.x asks
ApiVersions whatever api.version.request says once the fallback is 0.10 or later), produce and consume with
every codec they have (magic 0/1 message sets, converted to v2 on append and back on fetch); a v2
client reads what they wrote and they read what a v2 client wrote (headers dropped); their groups
commit offsets and resume from them."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer
from conftest import GROUP_PROPS, create_topic
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from krafty_node import KraftyNode, start_or_fail

pytestmark = pytest.mark.krafty_only

N = 60
CODECS = [None, "gzip", "snappy", "lz4"]
LIBRDKAFKA_OLD = {"api.version.request": False}


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = start_or_fail(KraftyNode(tmp_path_factory.mktemp("legacy"), extra_properties=GROUP_PROPS))
    yield n
    n.close()


def kp_produce(bootstrap: str, topic: str, api_version, codec, n: int = N, prefix: str = "") -> list[int]:
    p = KafkaProducer(bootstrap_servers=bootstrap, api_version=api_version, compression_type=codec, linger_ms=5,
                      retries=0)
    try:
        futures = [p.send(topic, key=b"%sk%d" % (prefix.encode(), i), value=b"%sv%d" % (prefix.encode(), i),
                          partition=0) for i in range(n)]
        p.flush(30)
        return [f.get(30).offset for f in futures]
    finally:
        p.close(5)


def kp_read(bootstrap: str, topic: str, api_version, n: int, timeout: float = 30) -> list:
    c = KafkaConsumer(bootstrap_servers=bootstrap, api_version=api_version, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        out: list = []
        deadline = time.monotonic() + timeout
        while len(out) < n and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                out += [(r.offset, r.key, r.value, r.timestamp, list(r.headers or [])) for r in recs]
        return out
    finally:
        c.close()


def ck_read(bootstrap: str, topic: str, n: int, timeout: float = 30, group: str | None = None, **conf) -> list:
    """confluent-kafka (a v2 client unless ``conf`` says otherwise) reads partition 0."""
    from confluent_kafka import OFFSET_BEGINNING
    from confluent_kafka import TopicPartition as CTP
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group or f"g-{topic}", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", **conf})
    try:
        if group is None:
            c.assign([CTP(topic, 0, OFFSET_BEGINNING)])
        else:
            c.subscribe([topic])
        out: list = []
        deadline = time.monotonic() + timeout
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            out.append((m.offset(), m.key(), m.value(), m.timestamp()[1], m.headers() or []))
        if group is not None and out:
            c.commit(asynchronous=False)
        return out
    finally:
        c.close()


def expected(n: int = N, prefix: str = "", base: int = 0) -> list[tuple[int, bytes, bytes]]:
    return [(base + i, b"%sk%d" % (prefix.encode(), i), b"%sv%d" % (prefix.encode(), i)) for i in range(n)]


@pytest.mark.parametrize("api_version", [(0, 10, 0), (0, 9), (0, 8, 2)], ids=["0.10.0", "0.9", "0.8.2"])
def test_pinned_kafka_python_produces_and_consumes_every_codec_and_a_v2_client_reads_it(node, api_version):
    for codec in CODECS:
        topic = f"kp-{'.'.join(map(str, api_version))}-{codec}-{time.monotonic_ns()}"
        create_topic(node, topic)
        assert kp_produce(node.bootstrap, topic, api_version, codec) == list(range(N)), codec
        got = kp_read(node.bootstrap, topic, api_version, N)
        assert [g[:3] for g in got] == expected(), codec
        if api_version >= (0, 10):  # magic 1: the producer's CreateTime comes back
            assert all(abs(g[3] - time.time() * 1000) < 120_000 for g in got)
        else:  # magic 0 has no timestamps
            assert all(g[3] is None for g in got)
        v2 = ck_read(node.bootstrap, topic, N)
        assert [g[:3] for g in v2] == expected(), codec


@pytest.mark.parametrize("api_version", [(0, 10, 0), (0, 9)], ids=["0.10.0", "0.9"])
def test_pinned_kafka_python_reads_what_a_v2_client_wrote_without_headers(node, api_version):
    topic = f"v2-{'.'.join(map(str, api_version))}-{time.monotonic_ns()}"
    create_topic(node, topic)
    p = Producer({"bootstrap.servers": node.bootstrap, "compression.type": "lz4", "linger.ms": 5})
    for i in range(N):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0, headers=[("h", b"x")], timestamp=1_000 + i)
    assert p.flush(30) == 0
    got = kp_read(node.bootstrap, topic, api_version, N)
    assert [g[:3] for g in got] == expected()
    assert all(g[4] == [] for g in got)
    if api_version >= (0, 10):
        assert [g[3] for g in got] == [1_000 + i for i in range(N)]


@pytest.mark.parametrize("fallback", ["0.9.0", "0.8.2"])
def test_librdkafka_old_modes_produce_and_consume_every_codec(node, fallback):
    """Produce v1 / v0 with magic 0 sets; a 0.9 consumer joins a group (JoinGroup v0, OffsetCommit
    v2), a 0.8.2 one reads partitions it assigns itself (Fetch v0)."""
    for codec in ["none", "gzip", "snappy", "lz4"]:
        topic = f"rdk-{fallback}-{codec}-{time.monotonic_ns()}"
        create_topic(node, topic)
        conf = {**LIBRDKAFKA_OLD, "broker.version.fallback": fallback}
        errors: list = []

        def report(err, _msg, errors=errors):
            if err:
                errors.append(err)

        p = Producer({"bootstrap.servers": node.bootstrap, "compression.type": codec, "linger.ms": 5,
                      "enable.idempotence": False, "acks": -1, **conf})
        for i in range(N):
            p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0, on_delivery=report)
        assert p.flush(30) == 0 and not errors, (codec, errors)
        if fallback == "0.9.0":
            got = ck_read(node.bootstrap, topic, N, group=f"rdk-{topic}", **conf)
            assert [g[:3] for g in got] == expected(), codec
            # the group's commit is there for a v2 client resuming: it gets nothing more
            assert ck_read(node.bootstrap, topic, 1, timeout=3, group=f"rdk-{topic}") == []
        else:
            got = ck_read(node.bootstrap, topic, N, **conf)
            assert [g[:3] for g in got] == expected(), codec
        # a modern client, and pinned kafka-python, read the same records
        assert [g[:3] for g in ck_read(node.bootstrap, topic, N)] == expected()
        assert [g[:3] for g in kp_read(node.bootstrap, topic, (0, 10, 0), N)] == expected()


def test_librdkafka_old_mode_reads_what_a_v2_client_wrote(node):
    topic = f"rdk-v2-{time.monotonic_ns()}"
    create_topic(node, topic)
    p = Producer({"bootstrap.servers": node.bootstrap, "compression.type": "snappy", "linger.ms": 5})
    for i in range(N):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0, headers=[("h", b"x")])
    assert p.flush(30) == 0
    got = ck_read(node.bootstrap, topic, N, **LIBRDKAFKA_OLD, **{"broker.version.fallback": "0.9.0"})
    assert [g[:3] for g in got] == expected() and all(not g[4] for g in got)


@pytest.mark.parametrize("api_version", [(0, 10, 0), (0, 9)], ids=["0.10.0", "0.9"])
def test_pinned_kafka_python_group_commits_and_resumes(node, api_version):
    topic = f"grp-{'.'.join(map(str, api_version))}-{time.monotonic_ns()}"
    create_topic(node, topic)
    kp_produce(node.bootstrap, topic, api_version, "gzip", n=N)
    group = f"g-{topic}"

    def consume(n: int, timeout: float = 30) -> list:
        c = KafkaConsumer(topic, bootstrap_servers=node.bootstrap, api_version=api_version, group_id=group,
                          auto_offset_reset="earliest", enable_auto_commit=False, max_poll_records=n)
        try:
            out: list = []
            deadline = time.monotonic() + timeout
            while len(out) < n and time.monotonic() < deadline:
                for recs in c.poll(timeout_ms=500, max_records=n - len(out)).values():
                    out += [r.offset for r in recs]
            if out:
                c.commit({TopicPartition(topic, 0): __import__("kafka").OffsetAndMetadata(out[-1] + 1, "", -1)})
            return out
        finally:
            c.close()

    first = consume(20)
    assert first == list(range(20))
    assert consume(N - 20) == list(range(20, N))  # a new member of the group resumes at the commit


def test_kafka_python_0_8_2_commits_without_a_group_and_a_v2_client_sees_it(node):
    topic = f"c082-{time.monotonic_ns()}"
    create_topic(node, topic)
    kp_produce(node.bootstrap, topic, (0, 8, 2), None, n=10)
    from kafka import OffsetAndMetadata
    c = KafkaConsumer(bootstrap_servers=node.bootstrap, api_version=(0, 8, 2), group_id="g082",
                      enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.commit({tp: OffsetAndMetadata(7, "meta", -1)})  # OffsetCommit v1, no group generation
        assert c.committed(tp) == 7  # OffsetFetch v1
    finally:
        c.close()
    # a v2 client (kafka-python unpinned: OffsetFetch v9) sees the commit, metadata included
    v2 = KafkaConsumer(bootstrap_servers=node.bootstrap, group_id="g082", enable_auto_commit=False)
    try:
        got = v2.committed(TopicPartition(topic, 0), metadata=True)
        assert (got.offset, got.metadata) == (7, "meta")
    finally:
        v2.close()
