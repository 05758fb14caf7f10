"""Restarts and crashes of a single krafty node: nothing acknowledged is lost, nothing corrupt is served."""

from __future__ import annotations

import hashlib
import threading
import time

import pytest
from clients import CLIENTS, Confluent, Rec
from conftest import create_topic, wait_topic
from krafty_node import wait_until

pytestmark = pytest.mark.krafty_only  # the mock cluster keeps nothing across restarts

CK = Confluent()


def read_all(node, topic, partition, n, client=CK, timeout=120):
    c = client.consumer(node.bootstrap, topic, partition, "earliest")
    try:
        got = c.read(n, timeout)
        extra = c.read_extra(wait=1.5)
    finally:
        c.close()
    return got, extra


def assert_partition(node, topic, partition, sent, client=CK):
    got, extra = read_all(node, topic, partition, len(sent), client)
    where = f"{topic}/{partition} via {client.name}"
    assert len(got) == len(sent), f"{where}: read {len(got)} records, {len(sent)} were acknowledged"
    assert extra == [], f"{where}: {len(extra)} records beyond the acknowledged ones"
    for i, (g, s) in enumerate(zip(got, sent, strict=True)):
        assert g.offset == i, f"{where}: offset gap at #{i}: {g.offset}"
        assert (g.key, g.value, list(g.headers)) == (s.key, s.value, list(s.headers)), (
            f"{where}: record {i} differs"
        )


def test_restart_keeps_everything_acknowledged(node_factory, topic):
    node = node_factory()
    bs = node.bootstrap
    multi, single = topic + "-multi", topic + "-single"
    create_topic(node, multi, 3, {"retention.ms": "987654321"})
    create_topic(node, single, 1)

    sent: dict[tuple[str, int], list[Rec]] = {}
    for p, codec in enumerate([None, "lz4", "zstd"]):
        recs = [
            Rec(f"k{i}".encode(), f"{codec} p{p} #{i} ".encode() * 3, [("p", str(p).encode())])
            for i in range(1000)
        ]
        assert CK.produce(bs, multi, recs, partition=p, compression=codec, acks="all") == list(range(1000))
        sent[(multi, p)] = recs
    s = [Rec(None, b"null key"), Rec(b"null value", None), Rec(b"h", b"v", [("a", b"1"), ("b", None)])]
    s += [Rec(b"big", bytes(range(256)) * 2000)]  # 512 KB
    assert CK.produce(bs, single, s, acks="all") == list(range(4))
    kp = [Rec(b"kp", f"kafka-python gzip #{i}".encode()) for i in range(100)]
    assert CLIENTS["kafka-python"].produce(bs, single, kp, compression="gzip", acks="all") == list(
        range(4, 104)
    )
    aio = [Rec(b"aio", f"aiokafka snappy idempotent #{i}".encode()) for i in range(100)]
    assert CLIENTS["aiokafka"].produce(
        bs, single, aio, compression="snappy", acks="all", idempotent=True
    ) == list(range(104, 204))
    sent[(single, 0)] = s + kp + aio

    code = node.stop()
    assert code == 0, f"SIGTERM should stop krafty cleanly, exit code was {code}\n{node.log_tail()}"
    node.start()

    wait_topic(bs, multi, 3)
    wait_topic(bs, single, 1)
    assert CK.topics(bs)[multi] == 3
    assert CK.topic_configs(bs, multi).get("retention.ms") == "987654321", "topic config lost on restart"
    for (t, p), recs in sent.items():
        assert_partition(node, t, p, recs)
    assert_partition(node, single, 0, sent[(single, 0)], CLIENTS["kafka-python"])

    # The log continues where it stopped, and the idempotent producer state does not block new producers.
    more = [Rec(b"after", f"after restart #{i}".encode()) for i in range(20)]
    assert CK.produce(bs, single, more, acks="all", idempotent=True) == list(range(204, 224))
    sent[(single, 0)] += more

    # A crash while idle loses nothing either.
    node.kill()
    node.start()
    wait_topic(bs, single, 1)
    for (t, p), recs in sent.items():
        assert_partition(node, t, p, recs)


def _payload(i: int) -> bytes:
    body = hashlib.sha256(str(i).encode()).hexdigest().encode() * 4  # 256 bytes, checkable
    return f"{i:09d}|".encode() + body


def _check_payload(value: bytes | None) -> int:
    assert value is not None and b"|" in value, f"corrupt record value: {value!r:.80}"
    head, _, _ = value.partition(b"|")
    i = int(head)
    assert value == _payload(i), f"corrupt record value for #{i}"
    return i


def test_kill9_during_produce_stream(node_factory, topic):
    from confluent_kafka import Producer

    node = node_factory()
    bs = node.bootstrap
    create_topic(node, topic, 1)

    acked: list[tuple[int, int]] = []
    failed: list[tuple[int, str]] = []
    stop = threading.Event()
    p = Producer(
        {
            "bootstrap.servers": bs,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 2,
            "message.timeout.ms": 300000,
            "queue.buffering.max.messages": 20000,
        }
    )

    def on_delivery(err, msg):
        i = int(msg.value()[:9])
        if err is None:
            acked.append((i, msg.offset()))
        else:
            failed.append((i, str(err)))

    def stream():
        i = 0
        while not stop.is_set():
            try:
                p.produce(
                    topic, value=_payload(i), key=str(i % 17).encode(), partition=0, on_delivery=on_delivery
                )
                i += 1
            except BufferError:
                p.poll(0.05)
                continue
            if i % 100 == 0:
                p.poll(0)

    def poller():
        while not stop.is_set():
            p.poll(0.1)

    threads = [threading.Thread(target=stream, daemon=True), threading.Thread(target=poller, daemon=True)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: len(acked) >= 1, 60, message="first acknowledgement")
        deadline = time.monotonic() + 20
        while len(acked) < 5000 and time.monotonic() < deadline:
            time.sleep(0.05)
        node.kill()  # SIGKILL mid-stream
        time.sleep(0.5)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    acked_snapshot = list(acked)  # nothing can be acknowledged by a dead broker from here on
    p.purge()
    p.flush(5)
    assert acked_snapshot, "no acknowledgements before the kill"

    # The broker's own acknowledgements must make sense: record i at offset i (one idempotent producer).
    bad = [(i, o) for i, o in acked_snapshot if i != o]
    assert not bad, f"acknowledged offsets do not match send order, e.g. {bad[:5]}"

    node.start()
    wait_topic(bs, topic, 1)
    low, high = CK.watermarks(bs, topic, 0)
    assert low == 0
    got, extra = read_all(node, topic, 0, high, timeout=180)
    assert extra == [], f"records beyond the high watermark {high}"
    assert len(got) == high, f"high watermark {high} but only {len(got)} records readable"

    # Gap-free prefix of the send order, nothing corrupt.
    for n, g in enumerate(got):
        assert g.offset == n, f"offset gap: expected {n}, got {g.offset}"
        assert _check_payload(g.value) == n, f"offset {n} holds record #{_check_payload(g.value)}"
    max_acked = max(i for i, _ in acked_snapshot)
    print(
        f"kill -9 after {len(acked_snapshot)} acks (max #{max_acked}); {high} records survived; "
        f"{len(failed)} sends failed/purged after the kill"
    )
    # kill -9 is a process crash, not a power cut: what was written before the ack survives in the page cache.
    assert high > max_acked, (
        f"acknowledged records lost: acked up to #{max_acked} ({len(acked_snapshot)} acks), "
        f"only {high} survived the kill"
    )

    # The recovered log takes new writes at the right offset.
    more = [Rec(b"after-crash", f"after crash #{i}".encode()) for i in range(10)]
    assert CK.produce(bs, topic, more, acks="all", idempotent=True) == list(range(high, high + 10))
    got2, _ = read_all(node, topic, 0, high + 10)
    assert [g.value for g in got2[high:]] == [r.value for r in more]
