"""Structured Streaming through the krafty data source: restarts, AvailableNow, data loss."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest
from pyspark.sql import functions as F


def _stream(spark, bootstrap, topic, **opts):
    r = (
        spark.readStream.format("krafty")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def _values(n0, n1):
    return [{"key": f"u{i % 5}".encode(), "value": f"m{i}".encode()} for i in range(n0, n1)]


def _wait(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _stop_between_batches(q, timeout=300):
    """Stop a processingTime query while it waits for its next trigger (a clean batch boundary)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = q.status
        if not st["isTriggerActive"] and st["message"].startswith("Waiting for next trigger"):
            q.stop()
            return
        time.sleep(0.02)
    q.stop()
    raise AssertionError("query never reached a batch boundary")


def test_streaming_restart_with_checkpoint_writes_every_input_once(spark, kafka, bootstrap, tmp_path):
    inp = kafka.topic("sin", partitions=2)
    out = kafka.topic("sout", partitions=2)
    ckpt = str(tmp_path / "ckpt")
    kafka.produce(inp, _values(0, 300))

    def start(**trigger):
        df = _stream(spark, bootstrap, inp, maxOffsetsPerTrigger="40")
        return (
            df.select("key", F.concat(F.col("value"), F.lit(b"!")).alias("value"))
            .writeStream.format("krafty")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", out)
            .option("checkpointLocation", ckpt)
            .trigger(**trigger)
            .start()
        )

    q = start(processingTime="4 seconds")  # room to stop between two batches
    try:
        kafka.produce(inp, _values(300, 600))  # input keeps arriving while the query runs
        _wait(
            lambda: q.lastProgress is not None and q.lastProgress["batchId"] >= 2, 600, "three micro-batches"
        )
        _stop_between_batches(q)
    finally:
        if q.isActive:
            q.stop()
    assert q.exception() is None
    first_run = len(kafka.consume_all(out))
    assert 0 < first_run < 600, first_run  # stopped mid-stream

    kafka.produce(inp, _values(600, 800))
    q2 = start(availableNow=True)
    try:
        assert q2.awaitTermination(600), "AvailableNow query did not finish"
    finally:
        if q2.isActive:
            q2.stop()
    assert q2.exception() is None
    # maxOffsetsPerTrigger is honoured under AvailableNow: several batches, none above the limit
    sizes = [p["numInputRows"] for p in q2.recentProgress]
    assert max(sizes) <= 40 and sum(sizes) == 800 - first_run

    got = Counter(m.value() for m in kafka.consume_all(out))
    want = Counter(f"m{i}!".encode() for i in range(800))
    assert got == want, (set(want) - set(got), [v for v, c in got.items() if c > 1][:10])


def test_hard_stop_mid_batch_then_restart_reads_each_record_once(spark, kafka, bootstrap, tmp_path):
    """The source replays exactly the planned ranges: with Spark's exactly-once file sink, a query
    stopped at an arbitrary point (mid-batch) and restarted holds every record once."""
    inp = kafka.topic("hin", partitions=3)
    kafka.produce(inp, _values(0, 900))
    ckpt, dest = str(tmp_path / "ckpt"), str(tmp_path / "out")

    def start(**trigger):
        df = _stream(spark, bootstrap, inp, maxOffsetsPerTrigger="100", minPartitions="4")
        return (
            df.selectExpr("CAST(value AS STRING) AS v", "partition", "offset")
            .writeStream.format("parquet")
            .option("path", dest)
            .option("checkpointLocation", ckpt)
            .trigger(**trigger)
            .start()
        )

    q = start(processingTime="0 seconds")
    try:
        _wait(lambda: q.lastProgress is not None and q.lastProgress["batchId"] >= 1, 600, "two micro-batches")
        q.stop()  # wherever it is
    finally:
        if q.isActive:
            q.stop()
    q2 = start(availableNow=True)
    try:
        assert q2.awaitTermination(600)
    finally:
        if q2.isActive:
            q2.stop()
    assert q2.exception() is None
    rows = spark.read.parquet(dest).collect()
    assert Counter(r.v for r in rows) == Counter(f"m{i}" for i in range(900))
    assert len({(r.partition, r.offset) for r in rows}) == 900


@pytest.mark.krafty_only
def test_streaming_starting_timestamp(spark, kafka, bootstrap):
    topic = kafka.topic("sts", partitions=2)
    base = int(time.time() * 1000) - 600_000  # recent: older records would expire by retention
    kafka.produce(
        topic, [{"value": f"v{i}".encode(), "partition": i % 2, "timestamp": base + i} for i in range(50)]
    )
    name = "sts_" + topic.split("-")[-1]
    q = (
        spark.readStream.format("krafty")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingTimestamp", str(base + 30))
        .load()
        .selectExpr("CAST(value AS STRING) v")
        .writeStream.format("memory")
        .queryName(name)
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(600)
    got = sorted(int(r.v[1:]) for r in spark.sql(f"select v from {name}").collect())
    assert got == list(range(30, 50))


def _recreate_with_fewer_records(kafka, topic, n):
    kafka.delete(topic)
    kafka.create(topic, 1)
    kafka.produce(topic, [{"value": f"new{i}".encode()} for i in range(n)])


@pytest.mark.krafty_only
def test_batch_fail_on_data_loss(spark, kafka, bootstrap):
    topic = kafka.topic("loss", partitions=1)
    kafka.produce(topic, [{"value": f"old{i}".encode()} for i in range(20)])
    _recreate_with_fewer_records(kafka, topic, 5)  # offsets 5..19 are gone for good

    def read(fail):
        return (
            spark.read.format("krafty")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", json.dumps({topic: {"0": 3}}))
            .option("endingOffsets", json.dumps({topic: {"0": 15}}))
            .option("failOnDataLoss", fail)
            .load()
            .selectExpr("CAST(value AS STRING) v", "offset")
        )

    with pytest.raises(Exception, match=r"data loss.*planned to read offsets \[5, 15\).*failOnDataLoss"):
        read("true").collect()
    rows = read("false").collect()
    assert sorted((r.offset, r.v) for r in rows) == [(3, "new3"), (4, "new4")]


@pytest.mark.krafty_only
def test_streaming_fail_on_data_loss(spark, kafka, bootstrap, tmp_path):
    topic = kafka.topic("sloss", partitions=1)
    kafka.produce(topic, [{"value": f"old{i}".encode()} for i in range(20)])
    ckpt, dest = str(tmp_path / "ckpt"), str(tmp_path / "out")

    def run(fail):
        q = (
            _stream(spark, bootstrap, topic, failOnDataLoss=fail)
            .selectExpr("CAST(value AS STRING) v")
            .writeStream.format("parquet")
            .option("path", dest)
            .option("checkpointLocation", ckpt)
            .trigger(availableNow=True)
            .start()
        )
        try:
            q.awaitTermination(600)
        except Exception as e:  # the query's failure is re-raised here
            return e
        finally:
            if q.isActive:
                q.stop()
        return q.exception()

    def written():
        return sorted(r.v for r in spark.read.parquet(dest).collect())

    assert run("true") is None
    assert written() == sorted(f"old{i}" for i in range(20))

    _recreate_with_fewer_records(kafka, topic, 5)  # checkpoint says 20, the log now ends at 5
    err = run("true")
    assert err is not None and "data loss" in str(err) and "failOnDataLoss" in str(err), err
    assert "offset went back from 20 to 5" in str(err)
    assert len(written()) == 20

    # failOnDataLoss=false: the query goes on and reads the new log once
    assert run("false") is None
    assert written() == sorted([f"old{i}" for i in range(20)] + [f"new{i}" for i in range(5)])


@pytest.mark.krafty_only
def test_retention_deleted_range(spark, kafka, bootstrap, tmp_path):
    """Records removed by retention (small segment.bytes, retention.ms) before they were read."""
    topic = kafka.topic("ret", partitions=1, config={"segment.bytes": "1024", "retention.ms": "86400000"})
    old = int(time.time() * 1000) - 3_600_000  # an hour old: closed segments expire at once
    now = int(time.time() * 1000)
    # records 0..149 an hour old (their segments expire once retention.ms drops to 1 min), 150..199 fresh
    rec = [
        {"value": f"r{i:04d}".encode() * 10, "timestamp": (old if i < 150 else now) + i} for i in range(200)
    ]
    one_per_batch = {"batch.num.messages": 1, "linger.ms": 0}  # so segments can roll between records
    kafka.produce(topic, rec[:10], **one_per_batch)
    ckpt, dest = str(tmp_path / "ckpt"), str(tmp_path / "out")

    def run(fail):
        q = (
            _stream(spark, bootstrap, topic, failOnDataLoss=fail)
            .selectExpr("offset")
            .writeStream.format("parquet")
            .option("path", dest)
            .option("checkpointLocation", ckpt)
            .trigger(availableNow=True)
            .start()
        )
        try:
            q.awaitTermination(600)
        except Exception as e:
            return e
        finally:
            if q.isActive:
                q.stop()
        return q.exception()

    assert run("true") is None  # checkpoint now at offset 10
    kafka.produce(topic, rec[10:], **one_per_batch)
    kafka.set_topic_config(topic, {"retention.ms": "60000"})  # now the hour-old segments expire
    deadline = time.monotonic() + 60
    while kafka.low_watermark(topic) <= 10:
        if time.monotonic() > deadline:
            pytest.skip("the broker did not apply retention within 60 s (log.retention.check.interval.ms)")
        time.sleep(0.5)
    low = kafka.low_watermark(topic)
    assert low < 200

    def batch(fail):
        return (
            spark.read.format("krafty")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", json.dumps({topic: {"0": 0}}))
            .option("failOnDataLoss", fail)
            .load()
        )

    with pytest.raises(Exception, match="data loss.*below the log start.*failOnDataLoss"):
        batch("true").collect()
    offs = sorted(r.offset for r in batch("false").select("offset").collect())
    assert offs[0] >= low and offs == list(range(offs[0], 200))

    err = run("true")
    assert err is not None and "were deleted before they were read" in str(err), err
    assert run("false") is None
    offs = sorted(r.offset for r in spark.read.parquet(dest).collect())
    assert offs[:10] == list(range(10)) and offs[10] >= low and offs[10:] == list(range(offs[10], 200))


def test_query_progress_shows_the_backlog_as_spark_kafka_metrics(spark, kafka, bootstrap, tmp_path):
    """latestOffset in each progress is what the source saw; pipeline.kafka_metrics derives Spark's
    min/max/avgOffsetsBehindLatest from it and the batch's end offsets."""
    import pipeline

    topic = kafka.topic("backlog", partitions=2)
    kafka.produce(topic, [{"value": b"x", "partition": i % 2} for i in range(100)])
    q = (_stream(spark, bootstrap, topic, maxOffsetsPerTrigger="20").writeStream.format("noop")
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    try:
        assert q.awaitTermination(600)
    finally:
        if q.isActive:
            q.stop()
    progress = [p for p in q.recentProgress if p["numInputRows"] > 0]
    assert [p["numInputRows"] for p in progress] == [20] * 5
    metrics = [pipeline.kafka_metrics(p)[0] for p in progress]
    # 100 records over 2 partitions, 20 a batch (10 from each): 40, 30, 20, 10, 0 behind on each
    assert [m["maxOffsetsBehindLatest"] for m in metrics] == ["40", "30", "20", "10", "0"]
    assert [m["minOffsetsBehindLatest"] for m in metrics] == ["40", "30", "20", "10", "0"]
    assert metrics[0]["avgOffsetsBehindLatest"] == "40.0"
    latest = progress[0]["sources"][0]["latestOffset"]
    assert (json.loads(latest) if isinstance(latest, str) else latest) == {topic: {"0": 50, "1": 50}}
