"""Batch reads and writes through the krafty data source against a real broker."""

from __future__ import annotations

import json
import time

import pytest
from pyspark.sql import functions as F

# record timestamps must be recent: the broker's retention (7 days by default) would delete older ones
RECENT = int(time.time() * 1000) - 3_600_000


def _read(spark, bootstrap, **opts):
    r = spark.read.format("krafty").option("kafka.bootstrap.servers", bootstrap)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def _records(n, prefix="r"):
    return [
        {
            "key": f"k{i % 17}".encode(),
            "value": f"{prefix}-{i}".encode() + bytes([0, 255, i % 256]),
            "headers": [("h", f"x{i}".encode()), ("n", None)] if i % 3 else None,
            "timestamp": RECENT + i * 7,
        }
        for i in range(n)
    ]


def _row_key(r):
    return (r.partition, r.offset)


def test_batch_read_gives_exactly_what_was_produced(spark, kafka, bootstrap):
    topic = kafka.topic("batch", partitions=3)
    sent = kafka.produce(topic, _records(500))
    want = {(d["partition"], d["offset"]): d for d in sent}

    df = _read(spark, bootstrap, subscribe=topic, includeHeaders="true")
    assert df.columns == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    rows = df.collect()
    assert len(rows) == 500
    assert len({_row_key(r) for r in rows}) == 500
    for r in rows:
        d = want[_row_key(r)]
        assert r.topic == topic
        assert bytes(r.key) == d["key"] and bytes(r.value) == d["value"]
        assert r.timestampType == 0
        got_headers = [(h.key, None if h.value is None else bytes(h.value)) for h in (r.headers or [])]
        assert got_headers == list(d["headers"] or [])
    # offsets are dense per partition, starting at 0
    for p in range(kafka.partitions(topic)):
        offs = sorted(r.offset for r in rows if r.partition == p)
        assert offs == list(range(len(offs)))

    # timestamps survive exactly (ms precision) — compare with Spark's own epoch conversion
    ts = {
        (r.partition, r.offset): r.ms
        for r in df.select("partition", "offset", F.unix_millis("timestamp").alias("ms")).collect()
    }
    bad = [(k, ts[k], want[k]["timestamp"]) for k in want if ts[k] != want[k]["timestamp"]]
    assert not bad, bad[:5]


def test_batch_read_without_headers_and_split_by_min_partitions(spark, kafka, bootstrap):
    topic = kafka.topic("split", partitions=2)
    kafka.produce(topic, _records(300))
    df = _read(spark, bootstrap, subscribe=topic, minPartitions="7")
    assert "headers" not in df.columns
    assert df.rdd.getNumPartitions() >= 7
    rows = df.select("partition", "offset").collect()
    assert len(rows) == 300 and len(set(rows)) == 300


def test_assign_with_explicit_offsets_reads_exact_range(spark, kafka, bootstrap):
    topic = kafka.topic("assign", partitions=2)
    kafka.produce(topic, [{"value": f"v{i}".encode(), "partition": i % 2} for i in range(100)])
    df = _read(
        spark,
        bootstrap,
        assign=json.dumps({topic: [1]}),
        startingOffsets=json.dumps({topic: {"1": 10}}),
        endingOffsets=json.dumps({topic: {"1": 20}}),
    )
    rows = df.select("partition", "offset").collect()
    assert sorted(r.offset for r in rows) == list(range(10, 20))
    assert {r.partition for r in rows} == {1}


def test_subscribe_pattern_and_list(spark, kafka, bootstrap):
    a = kafka.topic("pat-a")
    b = kafka.topic("pat-b")
    kafka.produce(a, [{"value": b"a"}] * 5)
    kafka.produce(b, [{"value": b"b"}] * 7)
    assert _read(spark, bootstrap, subscribe=f"{a},{b}").count() == 12
    prefix = a.split("-")[0]
    pattern_rows = _read(
        spark, bootstrap, subscribePattern=rf"{prefix}-[ab]-{a[-8:]}|{prefix}-[ab]-{b[-8:]}"
    ).count()
    assert pattern_rows == 12


def test_batch_write_with_topic_column_key_partition_headers(spark, kafka, bootstrap):
    out = kafka.topic("wout", partitions=3)
    data = [(f"k{i}", f"value-{i}", i % 3, [("src", b"spark"), ("i", str(i).encode())]) for i in range(200)]
    df = spark.createDataFrame(
        data, "key string, value string, partition int, headers array<struct<key:string,value:binary>>"
    )
    df.withColumn("topic", F.lit(out)).write.format("krafty").option(
        "kafka.bootstrap.servers", bootstrap
    ).mode("append").save()
    got = kafka.consume_all(out)
    assert len(got) == 200
    for m in got:
        i = int(m.key()[1:])
        assert m.value() == f"value-{i}".encode()
        assert m.partition() == i % 3
        assert m.headers() == [("src", b"spark"), ("i", str(i).encode())]


def test_write_needs_a_topic_and_a_value(spark, bootstrap):
    df = spark.createDataFrame([("a",)], "value string")
    with pytest.raises(Exception, match="topic"):
        df.write.format("krafty").option("kafka.bootstrap.servers", bootstrap).mode("append").save()
    with pytest.raises(Exception, match="value"):
        spark.createDataFrame([("a",)], "v string").write.format("krafty").option(
            "kafka.bootstrap.servers", bootstrap
        ).option("topic", "x").mode("append").save()


@pytest.mark.krafty_only
def test_starting_offsets_by_timestamp(spark, kafka, bootstrap):
    topic = kafka.topic("ts", partitions=2)
    base = int(time.time() * 1000) - 600_000  # recent: older records would expire by retention
    kafka.produce(
        topic,
        [{"value": f"v{i}".encode(), "partition": i % 2, "timestamp": base + i * 1000} for i in range(100)],
    )

    def values(df):
        return sorted(int(bytes(r.value)[1:]) for r in df.select("value").collect())

    # one timestamp for every partition: records whose timestamp >= it
    assert values(_read(spark, bootstrap, subscribe=topic, startingTimestamp=str(base + 60_000))) == list(
        range(60, 100)
    )
    # between two records: the first one after it
    assert values(_read(spark, bootstrap, subscribe=topic, startingTimestamp=str(base + 60_500))) == list(
        range(61, 100)
    )
    # per partition
    per = json.dumps({topic: {"0": base + 90_000, "1": base + 11_000}})
    got = values(_read(spark, bootstrap, subscribe=topic, startingOffsetsByTimestamp=per))
    assert got == sorted(
        [i for i in range(90, 100) if i % 2 == 0] + [i for i in range(11, 100) if i % 2 == 1]
    )
    # endingTimestamp: stop before the first record at or after it
    ending = _read(
        spark,
        bootstrap,
        subscribe=topic,
        startingTimestamp=str(base + 20_000),
        endingTimestamp=str(base + 70_000),
    )
    assert values(ending) == list(range(20, 70))
    # timestamp after the last record: error by default, empty with strategy=latest
    with pytest.raises(Exception, match="timestamp"):
        _read(spark, bootstrap, subscribe=topic, startingTimestamp=str(base + 10**9)).collect()
    late = _read(
        spark,
        bootstrap,
        subscribe=topic,
        startingTimestamp=str(base + 10**9),
        startingOffsetsByTimestampStrategy="latest",
    )
    assert late.count() == 0
    # and the timestamp column carries the record timestamps
    ms = sorted(
        r.ms
        for r in _read(spark, bootstrap, subscribe=topic)
        .select(F.unix_millis("timestamp").alias("ms"))
        .collect()
    )
    assert ms == [base + i * 1000 for i in range(100)]


def test_a_mistyped_option_fails_naming_it(spark, kafka, bootstrap):
    topic = kafka.topic("typo", partitions=1)
    # a source option: named, with the likely intended one and the accepted ones
    with pytest.raises(Exception, match=r"unknown option 'startingoffset' \(did you mean 'startingOffsets'\?\); "
                                        r"accepted options: .*endingOffsets.*subscribe"):
        _read(spark, bootstrap, subscribe=topic, startingOffset="earliest").collect()
    # a sink option
    df = spark.createDataFrame([("v",)], "value STRING")
    with pytest.raises(Exception, match=r"krafty sink: unknown option 'topics' \(did you mean 'topic'\?\)"):
        df.write.format("krafty").option("kafka.bootstrap.servers", bootstrap).option("topics", topic) \
            .mode("append").save()
    # a streaming source option: the query fails as it starts
    q = spark.readStream.format("krafty").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic) \
        .option("maxOffsetPerTrigger", "10").load().writeStream.format("noop").start()
    try:
        with pytest.raises(Exception, match=r"unknown option 'maxoffsetpertrigger' \(did you mean "
                                            r"'maxOffsetsPerTrigger'\?\)"):
            q.awaitTermination(600)
    finally:
        q.stop()
    # a Kafka client key neither the Java client nor librdkafka knows
    with pytest.raises(Exception, match=r"kafka.fetch.max.byte is not usable.*No such configuration property"):
        _read(spark, bootstrap, subscribe=topic, **{"kafka.fetch.max.byte": "1000"}).collect()


def test_bad_options_fail_clearly(spark, bootstrap):
    with pytest.raises(Exception, match="exactly one of"):
        _read(spark, bootstrap).collect()
    with pytest.raises(Exception, match="bootstrap.servers"):
        spark.read.format("krafty").option("subscribe", "x").load().collect()
    with pytest.raises(Exception, match="startingOffsets"):
        _read(spark, bootstrap, subscribe="x", startingOffsets="latest").collect()
