"""Produce/consume round trips through every real client: confluent-kafka, kafka-python, aiokafka, kcat."""

from __future__ import annotations

import hashlib
import os
import time

import pytest
from clients import ALL_CLIENTS, CLIENTS, CODECS, PY_CLIENTS, Confluent, Rec


def basic_records(client) -> list[Rec]:
    """Keys, values, headers, null key, null value; binary where the client allows it."""
    if not client.per_record_headers:  # kcat: text lines, one header set for the whole run
        hs = [("trace", b"abc-123"), ("n", b"1")]
        return [
            Rec(b"k1", b"v1", hs),
            Rec(None, b"value-with-null-key", hs),
            Rec(b"key-with-null-value", None, hs),
            Rec(b"k3", b"v3 with spaces, punctuation: {}[]\"'", hs),
            Rec("ключ".encode(), "значение ✓".encode(), hs),
        ]
    recs = [
        Rec(b"k1", b"v1"),
        Rec(None, b"value-with-null-key"),
        Rec(b"key-with-null-value", None),
        Rec(b"", b"empty-key-is-not-null"),
        Rec(b"k-empty-value", b""),
        Rec(b"\x00\x01\xff binary key", bytes(range(256)), [("h", b"\x00\xff")]),
        Rec(b"k-headers", b"v", [("a", b"1"), ("a", b"2"), ("b", b""), ("unicode-ключ", "✓".encode())]),
        Rec(b"k-null-header", b"v", [("null-header", None)]),
        Rec(b"k-last", b"v-last", [("trace", b"abc-123")]),
    ]
    if not client.null_header_values:
        recs = [r for r in recs if all(v is not None for _, v in r.headers)]
    return recs


def assert_same(got, sent, client, first_offset=0, check_headers=True):
    assert len(got) == len(sent), f"got {len(got)} records, sent {len(sent)}"
    for i, (g, s) in enumerate(zip(got, sent, strict=True)):
        where = f"record #{i} (offset {g.offset})"
        assert g.offset == first_offset + i, f"{where}: offsets not contiguous"
        assert g.key == s.key, f"{where}: key {g.key!r} != {s.key!r}"
        assert g.value == s.value, f"{where}: value mismatch ({_short(g.value)} != {_short(s.value)})"
        if check_headers:
            assert list(g.headers) == list(s.headers), f"{where}: headers {g.headers!r} != {s.headers!r}"


def _short(b):
    if b is None:
        return "None"
    return f"{len(b)} bytes sha1={hashlib.sha1(b).hexdigest()[:10]}"


_CODEC_PACKAGES = {
    "snappy": "python-snappy==0.7.3 (kafka-python) / cramjam (aiokafka)",
    "lz4": "lz4",
    "zstd": "zstandard",
}


def require_codec(client_name, codec):
    """Fail (not skip) with an install hint when a pure-Python client lacks a codec library."""
    if client_name == "kafka-python":
        import kafka.codec as codecs
    elif client_name == "aiokafka":
        import aiokafka.codec as codecs
    else:
        return  # librdkafka (confluent-kafka, kcat) has all codecs built in
    if codec != "gzip" and not getattr(codecs, f"has_{codec}")():
        pytest.fail(
            f"{client_name} has no {codec} support: .venv/bin/pip install {_CODEC_PACKAGES[codec]}",
            pytrace=False,
        )


def consume(client, target, topic, n, start="earliest", partition=0, timeout=60):
    c = client.consumer(target.bootstrap, topic, partition, start)
    try:
        return c.read(n, timeout)
    finally:
        c.close()


def roundtrip(client, target, topic, recs, **produce_kw):
    offsets = client.produce(target.bootstrap, topic, recs, **produce_kw)
    if offsets is not None:
        assert offsets == list(range(len(recs))), (
            f"acknowledged offsets {offsets[:5]}... not 0..{len(recs) - 1}"
        )
    got = consume(client, target, topic, len(recs))
    assert_same(got, recs, client)
    return got


# --------------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("client_name", ALL_CLIENTS)
def test_keys_values_headers_nulls(broker, make_topic, topic, client_name):
    client = CLIENTS[client_name]
    make_topic(topic)
    recs = basic_records(client)
    roundtrip(client, broker, topic, recs)
    # And what one client wrote, another reads identically (the broker does not re-encode).
    other = CLIENTS["confluent-kafka" if client_name != "confluent-kafka" else "aiokafka"]
    assert_same(consume(other, broker, topic, len(recs)), recs, other)


@pytest.mark.parametrize("client_name", ALL_CLIENTS)
def test_one_mib_value(broker, make_topic, topic, client_name):
    client = CLIENTS[client_name]
    # Kafka's default batch limit (message.max.bytes = 1 MiB + 12) is smaller than a 1 MiB value
    # plus its record/batch overhead, exactly as in Apache Kafka: raise the topic's limit.
    make_topic(topic, configs={"max.message.bytes": str(4 * 1024 * 1024)})
    big = (
        os.urandom(1024 * 1024)
        if client.per_record_headers
        else os.urandom(768 * 1024).hex().encode()[: 1024 * 1024]
    )
    assert len(big) == 1024 * 1024
    recs = [Rec(b"small-before", b"x"), Rec(b"big", big), Rec(b"small-after", b"y")]
    roundtrip(client, broker, topic, recs)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client_name", ALL_CLIENTS)
def test_compression(broker, make_topic, topic, client_name, codec):
    client = CLIENTS[client_name]
    require_codec(client_name, codec)
    require_codec("aiokafka" if client_name == "confluent-kafka" else "confluent-kafka", codec)
    make_topic(topic)
    hs = [("codec", codec.encode())]
    recs = [
        Rec(f"key-{i}".encode(), (f"{codec} payload {i} " * (1 + i % 40)).encode(), hs) for i in range(300)
    ]
    roundtrip(client, broker, topic, recs, compression=codec)
    # A different client decodes the same compressed batches.
    other = CLIENTS["aiokafka" if client_name == "confluent-kafka" else "confluent-kafka"]
    assert_same(consume(other, broker, topic, len(recs)), recs, other)


@pytest.mark.parametrize("acks", [0, 1, "all"], ids=["acks0", "acks1", "acksall"])
@pytest.mark.parametrize("client_name", ALL_CLIENTS)
def test_acks(broker, make_topic, topic, client_name, acks):
    client = CLIENTS[client_name]
    make_topic(topic)
    recs = [Rec(f"k{i}".encode(), f"acks={acks} #{i}".encode()) for i in range(100)]
    roundtrip(client, broker, topic, recs, acks=acks)


@pytest.mark.parametrize("client_name", ALL_CLIENTS)
def test_idempotent_producer(broker, make_topic, topic, client_name):
    client = CLIENTS[client_name]
    make_topic(topic)
    recs = [Rec(f"k{i}".encode(), f"idempotent #{i:05d}".encode()) for i in range(2000)]
    roundtrip(client, broker, topic, recs, acks="all", idempotent=True)
    # A second producer session (new producer id) appends after the first one.
    more = [Rec(b"again", f"second session #{i}".encode()) for i in range(10)]
    offsets = client.produce(broker.bootstrap, topic, more, acks="all", idempotent=True)
    if offsets is not None:
        assert offsets == list(range(len(recs), len(recs) + len(more)))
    got = consume(client, broker, topic, len(recs) + len(more))
    assert [g.value for g in got] == [r.value for r in recs + more], "duplicates, gaps or reordering"


@pytest.mark.krafty_only  # the mock cluster answers ListOffsets only for earliest/latest
@pytest.mark.parametrize("client_name", ALL_CLIENTS)
def test_offsets_for_times(broker, make_topic, topic, client_name):
    client = CLIENTS[client_name]
    make_topic(topic)
    t0 = int(time.time() * 1000) - 3_600_000  # an hour ago, in steps of 10 s
    recs = [Rec(f"k{i}".encode(), f"at t0+{i * 10}s".encode(), [], t0 + i * 10_000) for i in range(10)]
    writer = client if client.sets_timestamps else Confluent()
    assert writer.produce(broker.bootstrap, topic, recs) == list(range(10))
    got = consume(client, broker, topic, 10)
    if client.sets_timestamps:
        assert [g.timestamp for g in got] == [r.timestamp for r in recs], (
            "CreateTime timestamps not preserved"
        )
    ask = client.offsets_for_time
    assert ask(broker.bootstrap, topic, 0, t0 - 1) == 0, "timestamp before the first record -> offset 0"
    assert ask(broker.bootstrap, topic, 0, t0) == 0
    assert ask(broker.bootstrap, topic, 0, t0 + 35_000) == 4, "first offset with timestamp >= ts"
    assert ask(broker.bootstrap, topic, 0, t0 + 90_000) == 9
    assert ask(broker.bootstrap, topic, 0, t0 + 90_001) is None, "no record at or after ts"


@pytest.mark.parametrize("client_name", PY_CLIENTS)
def test_consume_from_latest_and_offset(broker, make_topic, topic, client_name):
    client = CLIENTS[client_name]
    make_topic(topic)
    first = [Rec(b"old", f"old #{i}".encode()) for i in range(5)]
    client.produce(broker.bootstrap, topic, first)
    c = client.consumer(broker.bootstrap, topic, 0, "latest")
    try:
        assert c.read_extra(wait=1.0) == [], "a consumer at 'latest' must not see old records"
        new = [Rec(b"new", f"new #{i}".encode()) for i in range(3)]
        client.produce(broker.bootstrap, topic, new)
        got = c.read(3, timeout=60)
        assert [(g.offset, g.value) for g in got] == [(5 + i, r.value) for i, r in enumerate(new)]
    finally:
        c.close()
    got = consume(client, broker, topic, 4, start=4)
    assert [g.offset for g in got] == [4, 5, 6, 7]
    assert [g.value for g in got] == [b"old #4", b"new #0", b"new #1", b"new #2"]


@pytest.mark.parametrize("client_name", ALL_CLIENTS)
def test_auto_create_on_produce(broker, topic, client_name):
    client = CLIENTS[client_name]
    recs = [Rec(b"k", b"auto-created"), Rec(b"k2", b"second")]
    # The topic does not exist yet: the producer's Metadata request creates it (auto.create.topics.enable
    # defaults to true) with num.partitions=1 partitions. Clients retry LEADER_NOT_AVAILABLE themselves.
    client.produce(broker.bootstrap, topic, recs, timeout=60)
    got = consume(client, broker, topic, 2)
    assert [(g.offset, g.value) for g in got] == [(0, b"auto-created"), (1, b"second")]
