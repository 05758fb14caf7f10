"""Jobs on the Spark standalone cluster (a master and two workers) against the 3+3 krafty cluster:
a batch read that equals what was produced, and a streaming query that survives the kill -9 of a
Spark worker and of a partition leader with every input record in its output exactly once
(exactlyOnce sink, read_committed) or at least once (the default sink)."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

import pytest

from tests.spark.topics import read_values

pytestmark = [pytest.mark.krafty_only, pytest.mark.krafty_cluster]

RECENT = int(time.time() * 1000) - 3_600_000


def _wait(cond, timeout, what, interval=0.3):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _rf3_topic(kafka, prefix, partitions):
    from confluent_kafka.admin import NewTopic

    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    kafka.admin.create_topics([NewTopic(name, partitions, 3, config={"min.insync.replicas": "2"})])[name].result(60)
    kafka.wait_partitions(name, partitions, timeout=60)
    return name


def test_batch_read_on_the_standalone_cluster_equals_what_was_produced(spark, standalone, kafka, bootstrap):
    topic = _rf3_topic(kafka, "sa-batch", 6)
    records = [{"key": None if i % 11 == 0 else f"k{i % 23}".encode(),
                "value": None if i % 97 == 5 else f"v{i}".encode() + bytes(range(i % 7)),
                "headers": [("h", f"x{i}".encode()), ("empty", b""), ("n", None)] if i % 3 else None,
                "timestamp": RECENT + i} for i in range(3000)]
    sent = kafka.produce(topic, records)
    want = {(d["partition"], d["offset"]): d for d in sent}
    assert len(want) == 3000

    rows = (spark.read.format("krafty").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
            .option("includeHeaders", "true").load().collect())
    assert len(rows) == 3000
    assert {(r.partition, r.offset) for r in rows} == set(want)
    for r in rows:
        d = want[(r.partition, r.offset)]
        assert r.topic == topic
        assert (bytes(r.key) if r.key is not None else None) == d["key"]
        assert (bytes(r.value) if r.value is not None else None) == d["value"]
        assert int(r.timestamp.timestamp() * 1000) == d["timestamp"] and r.timestampType == 0
        got_headers = [(h.key, bytes(h.value) if h.value is not None else None) for h in r.headers] \
            if r.headers is not None else None
        assert got_headers == d["headers"]
    # every partition's offsets are dense from 0: nothing skipped, nothing twice
    for p in range(6):
        offs = sorted(r.offset for r in rows if r.partition == p)
        assert offs == list(range(len(offs)))


class _Producer(threading.Thread):
    """Produces m0..m{n-1} (idempotent, acks=all) at about ``rate`` records/s over the partitions."""

    def __init__(self, bootstrap, topic, n, rate):
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.n, self.rate = bootstrap, topic, n, rate
        self.error = None
        self.done = threading.Event()

    def run(self):
        import confluent_kafka as ck

        p = ck.Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "message.timeout.ms": 120_000})
        failed = []
        t0 = time.monotonic()
        for i in range(self.n):
            while time.monotonic() - t0 < i / self.rate:
                p.poll(0.01)
            while True:
                try:
                    p.produce(self.topic, f"m{i}".encode(), key=f"k{i}".encode(),
                              on_delivery=lambda err, msg: err and failed.append(err))
                    break
                except BufferError:
                    p.poll(0.05)
            p.poll(0)
        if p.flush(180) or failed:
            self.error = f"{p.flush(0)} unacknowledged, errors: {failed[:3]}"
        self.done.set()


def _leader_of(kafka, topic, partition):
    return kafka.admin.list_topics(topic, timeout=10).topics[topic].partitions[partition].leader


def test_streaming_survives_kill_9_of_a_worker_and_of_a_partition_leader(spark, standalone, kafka, bootstrap,
                                                                          krafty_cluster, tmp_path):
    n = 4000
    inp = _rf3_topic(kafka, "sa-in", 3)
    out_eo, out_al = _rf3_topic(kafka, "sa-eo", 2), _rf3_topic(kafka, "sa-al", 2)

    def query(out, exactly_once):
        df = (spark.readStream.format("krafty").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", inp).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "600")
              .load())
        w = (df.selectExpr("key", "value").writeStream.format("krafty")
             .option("kafka.bootstrap.servers", bootstrap).option("topic", out)
             .option("checkpointLocation", str(tmp_path / f"ckpt-{out}")).trigger(processingTime="1 second"))
        if exactly_once:
            w = w.option("exactlyOnce", "true").option("transactionalIdPrefix", f"eo-{out}")
        return w.queryName(f"q-{out}").start()

    def consumed(q):
        """Input records the query has planned and finished (its last batch's end offsets)."""
        if q.exception() is not None:
            raise AssertionError(f"query {q.name} failed: {q.exception()}")
        prog = q.lastProgress
        if not prog:
            return 0
        import json

        end = prog["sources"][0]["endOffset"]
        end = json.loads(end) if isinstance(end, str) else end
        return sum(end.get(inp, {}).values()) if end else 0

    producer = _Producer(bootstrap, inp, n, rate=150)
    producer.start()
    queries = [query(out_eo, True), query(out_al, False)]
    killed_broker = None
    try:
        _wait(lambda: all(consumed(q) > 600 for q in queries), 300, "both queries to process input")
        standalone.kill_worker(1)  # kill -9 of a Spark worker's JVM while batches run
        _wait(lambda: all(consumed(q) > 1500 for q in queries), 300, "progress with one worker")
        killed_broker = _leader_of(kafka, inp, 0)
        krafty_cluster.kill(killed_broker)  # kill -9 of the leader of input partition 0
        _wait(lambda: all(consumed(q) > 2500 for q in queries), 300, "progress after the leader's kill")
        standalone.start_worker(1)
        krafty_cluster.restart(killed_broker)
        killed_broker = None
        assert producer.done.wait(300), "the producer did not finish"
        assert producer.error is None, producer.error
        _wait(lambda: all(consumed(q) >= n for q in queries), 300, "every input record to be processed")
        for q in queries:
            assert q.exception() is None, q.exception()
    finally:
        for q in queries:
            if q.isActive:
                q.stop()
        if killed_broker is not None:
            krafty_cluster.restart(killed_broker)
        if 1 not in standalone.workers:
            standalone.start_worker(1)
    want = {f"m{i}".encode() for i in range(n)}
    eo = Counter(read_values(bootstrap, out_eo, 2, read_committed=True, idle_s=4.0))
    assert eo == Counter(want), (len(want - set(eo)), [v for v, c in eo.items() if c > 1][:5])
    al = Counter(read_values(bootstrap, out_al, 2, read_committed=False, idle_s=4.0))
    assert set(al) == want, len(want - set(al))  # at least once: every input record, maybe twice
    print(f"at-least-once sink: {sum(al.values()) - n} duplicates after the kills; exactly-once sink: none")
