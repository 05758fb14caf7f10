"""Measure the krafty Spark source: batch read throughput and streaming end-to-end latency.

    python pipeline/examples/bench_read.py                 # starts a local krafty node
    python pipeline/examples/bench_read.py --bootstrap H:P # any Kafka-compatible broker
    python pipeline/examples/bench_read.py --mock          # librdkafka's mock cluster

1. Produces --records records (--value-bytes each) to a topic with --partitions partitions, then
   times a Spark batch query that reads them all (every column materialised: count + sum of value
   lengths) — once cold (includes Python worker start-up) and --runs more times warm.
2. Runs the clickstream demo (pipeline/examples/demo.py) and reports its end-to-end latency.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def produce(bootstrap, topic, records, partitions, value_bytes):
    import confluent_kafka as ck

    p = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 500_000,
        }
    )
    partitions = len(p.list_topics(topic, timeout=10).topics[topic].partitions)  # the mock has its own count
    payload = os.urandom(value_bytes)
    t0 = time.time()
    for i in range(records):
        while True:
            try:
                p.produce(topic, payload, key=b"%d" % i, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(300) == 0, "records not acknowledged"
    return time.time() - t0


def bench_read(spark, bootstrap, topic, records, runs):
    from pyspark.sql import functions as F

    df = (
        spark.read.format("krafty")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )
    times = []
    for _ in range(1 + runs):
        t0 = time.time()
        row = df.agg(
            F.count(F.lit(1)).alias("n"), F.sum(F.length("value")).alias("bytes"), F.max("offset")
        ).first()
        times.append(time.time() - t0)
        assert row.n == records, f"read {row.n} records, expected {records}"
    return times


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap")
    ap.add_argument("--mock", action="store_true")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--runs", type=int, default=2, help="warm runs after the cold one")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--skip-latency", action="store_true")
    a = ap.parse_args(argv)

    import pipeline
    from pipeline.examples import demo
    from pipeline.local_node import LocalKrafty, MockCluster

    def body(bootstrap):
        topic = f"bench-{uuid.uuid4().hex[:6]}"
        demo.create_topics(bootstrap, [topic], a.partitions)
        secs = produce(bootstrap, topic, a.records, a.partitions, a.value_bytes)
        print(
            f"produced {a.records} x {a.value_bytes} B to {a.partitions} partitions in {secs:.1f}s ({a.records / secs:,.0f} rec/s)"
        )
        spark = pipeline.session("krafty-bench", master=a.master)
        spark.sparkContext.setLogLevel("ERROR")
        try:
            times = bench_read(spark, bootstrap, topic, a.records, a.runs)
        finally:
            spark.stop()
        best = min(times[1:]) if len(times) > 1 else times[0]
        print(
            f"batch read ({a.master}): cold {times[0]:.2f}s = {a.records / times[0]:,.0f} rec/s; "
            f"warm best {best:.2f}s = {a.records / best:,.0f} rec/s "
            f"({a.records * a.value_bytes / best / 1e6:.1f} MB/s of values)"
        )
        if not a.skip_latency:
            s = demo.run(bootstrap, rate=500, seconds=20, quiet=True)
            print(
                f"streaming clickstream (trigger 1 s, append mode): {s['counted']}/{s['produced']} clicks counted; "
                f"end-to-end latency p50={s['latency_ms_p50']:.0f} ms p95={s['latency_ms_p95']:.0f} ms "
                f"max={s['latency_ms_max']:.0f} ms; micro-batch p50 {s['batch_ms_p50']:.0f} ms"
            )

    if a.bootstrap:
        body(a.bootstrap)
    else:
        with MockCluster() if a.mock else LocalKrafty() as node:
            body(node.bootstrap)
    return 0


if __name__ == "__main__":
    sys.exit(main())
