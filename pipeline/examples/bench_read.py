"""Measure the krafty Spark source: batch read throughput and streaming end-to-end latency.

    python pipeline/examples/bench_read.py                 # starts a local krafty node
    python pipeline/examples/bench_read.py --bootstrap H:P # any Kafka-compatible broker
    python pipeline/examples/bench_read.py --masters local[2],standalone:1,standalone:2

1. Produces --records records (--value-bytes each) to a topic with --partitions partitions (or
   reads the existing --topic), then times a Spark batch query that reads them all (every column
   materialised: count + sum of value lengths + max offset) — once cold (includes Python worker
   start-up) and --runs more times warm — on each of --masters: ``local[N]``, or
   ``standalone:W``, a Spark standalone cluster of W workers with one core each started from the
   pyspark installation (pipeline/standalone.py).
2. With --ceiling, the same query over the same number of rows held in memory as Arrow batches
   by a trivial Python data source: what Spark's Python data source path itself costs on this
   machine, the most any Python source can reach here.
3. Runs the clickstream demo (pipeline/examples/demo.py) on the last master and reports its
   end-to-end latency (p50/p95/p99).

KRAFTY_PIPELINE_ROOT=DIR runs the Spark side with the ``pipeline`` package of another checkout
(e.g. ``git worktree add /tmp/ref main``): an A/B of two readers on the same --bootstrap/--topic.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid

sys.path.insert(0, os.environ.get("KRAFTY_PIPELINE_ROOT")
                or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


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


def _query(df):
    from pyspark.sql import functions as F

    return df.agg(F.count(F.lit(1)).alias("n"), F.sum(F.length("value")).alias("bytes"), F.max("offset")).first()


def bench_read(spark, bootstrap, topic, records, runs):
    df = (
        spark.read.format("krafty")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )
    times = []
    for _ in range(1 + runs):
        t0 = time.time()
        row = _query(df)
        times.append(time.time() - t0)
        assert row.n == records, f"read {row.n} records, expected {records}"
    return times


def bench_ceiling(spark, records, partitions, value_bytes, runs):
    """The same query over in-memory Arrow batches of the Kafka schema (no Kafka, no decoding)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from pipeline.source import kafka_schema

    per_part = records // partitions

    class MemReader(DataSourceReader):
        def partitions(self):
            return [InputPartition(i) for i in range(partitions)]

        def read(self, partition):
            import pyarrow as pa
            from pyspark.sql.pandas.types import to_arrow_schema

            schema = to_arrow_schema(kafka_schema(False), timezone="UTC")
            rows = 8192
            value = os.urandom(value_bytes)
            batch = pa.RecordBatch.from_arrays(
                [pa.array([b"k"] * rows), pa.array([value] * rows), pa.repeat(pa.scalar("t"), rows),
                 pa.repeat(pa.scalar(0, pa.int32()), rows), pa.array(range(rows), pa.int64()),
                 pa.array(range(rows), pa.int64()).cast(schema.field("timestamp").type),
                 pa.repeat(pa.scalar(0, pa.int32()), rows)], schema=schema)
            left = per_part
            while left > 0:
                yield batch.slice(0, min(rows, left))
                left -= rows

    class Mem(DataSource):
        @classmethod
        def name(cls):
            return "krafty_bench_memory"

        def schema(self):
            return kafka_schema(False)

        def reader(self, schema):
            return MemReader()

    spark.dataSource.register(Mem)
    df = spark.read.format("krafty_bench_memory").load()
    times = []
    for _ in range(1 + runs):
        t0 = time.time()
        row = _query(df)
        times.append(time.time() - t0)
        assert row.n == per_part * partitions
    return times


def _line(what, n, times, value_bytes):
    best = min(times[1:]) if len(times) > 1 else times[0]
    return (f"{what}: cold {times[0]:.2f}s = {n / times[0]:,.0f} rec/s; warm best {best:.2f}s = "
            f"{n / best:,.0f} rec/s ({n * value_bytes / best / 1e6:.1f} MB/s of values); "
            f"warm runs {', '.join(f'{t:.2f}s' for t in times[1:])}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap")
    ap.add_argument("--mock", action="store_true")
    ap.add_argument("--topic", help="read this existing topic (of --records records) instead of producing one")
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3, help="warm runs after the cold one")
    ap.add_argument("--masters", default="local[2],standalone:1,standalone:2",
                    help="comma-separated: local[N] or standalone:W (W one-core workers)")
    ap.add_argument("--ceiling", action="store_true", help="also time the query over in-memory Arrow batches")
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--latency-seconds", type=int, default=20)
    a = ap.parse_args(argv)

    import pipeline
    from pipeline.examples import demo
    from pipeline.local_node import LocalKrafty, MockCluster

    def body(bootstrap):
        topic = a.topic
        if topic is None:
            topic = f"bench-{uuid.uuid4().hex[:6]}"
            demo.create_topics(bootstrap, [topic], a.partitions)
            secs = produce(bootstrap, topic, a.records, a.partitions, a.value_bytes)
            print(f"produced {a.records} x {a.value_bytes} B to {a.partitions} partitions in {secs:.1f}s "
                  f"({a.records / secs:,.0f} rec/s)", flush=True)
        masters = [m.strip() for m in a.masters.split(",") if m.strip()]
        for i, master in enumerate(masters):
            cluster = None
            if master.startswith("standalone:"):
                from pipeline.standalone import StandaloneSpark

                cluster = StandaloneSpark(workers=int(master.split(":")[1]), cores=1).start()
                url = cluster.master_url
            else:
                url = master
            try:
                conf = {"spark.executor.memory": "1g"} if cluster else {}
                spark = pipeline.session("krafty-bench", master=url, conf=conf)
                spark.sparkContext.setLogLevel("ERROR")
                try:
                    times = bench_read(spark, bootstrap, topic, a.records, a.runs)
                    print(_line(f"batch read ({master})", a.records, times, a.value_bytes), flush=True)
                    if a.ceiling:
                        times = bench_ceiling(spark, a.records, a.partitions, a.value_bytes, a.runs)
                        print(_line(f"  in-memory Arrow source, same query ({master})", a.records, times,
                                    a.value_bytes), flush=True)
                    if not a.skip_latency and i == len(masters) - 1:
                        s = demo.run(bootstrap, spark=spark, rate=500, seconds=a.latency_seconds, quiet=True)
                        print(
                            f"streaming clickstream on {master} (trigger 1 s, append mode): "
                            f"{s['counted']}/{s['produced']} clicks counted; end-to-end latency "
                            f"p50={s['latency_ms_p50']:.0f} ms p95={s['latency_ms_p95']:.0f} ms "
                            f"p99={s['latency_ms_p99']:.0f} ms max={s['latency_ms_max']:.0f} ms; "
                            f"micro-batch p50 {s['batch_ms_p50']:.0f} ms", flush=True)
                finally:
                    spark.stop()
            finally:
                if cluster is not None:
                    cluster.stop()
        print(f"load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())} "
              f"({os.cpu_count()} CPUs)")

    if a.bootstrap:
        body(a.bootstrap)
    else:
        with MockCluster() if a.mock else LocalKrafty() as node:
            body(node.bootstrap)
    return 0


if __name__ == "__main__":
    sys.exit(main())
