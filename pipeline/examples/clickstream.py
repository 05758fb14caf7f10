"""Clickstream job: clicks per user in 1-minute event-time windows, Kafka topic to Kafka topic.

Input records (topic ``clicks``): key = user id, value = JSON
``{"user": "u7", "page": "/cart", "ts": <event time, epoch ms>, "sent_at": <produce time, ms>}``.

Output records (topic ``click-stats``): key = user id, value = JSON
``{"user", "window_start", "window_end", "clicks", "pages", "last_sent_at"}`` — one record each time
a (user, window) aggregate changes (output mode ``update``), or once when the window closes
(``append``: after the watermark has passed its end).

Run it on its own:  python -m pipeline.examples.clickstream --bootstrap 127.0.0.1:9092
"""

from __future__ import annotations

import argparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

CLICK_SCHEMA = "user STRING, page STRING, ts LONG, sent_at LONG"


def clicks_per_user(raw: DataFrame, watermark: str = "10 seconds") -> DataFrame:
    """raw: a krafty/Kafka DataFrame. Returns key/value columns ready for the krafty sink."""
    events = (
        raw.select(F.from_json(F.col("value").cast("string"), CLICK_SCHEMA).alias("e"))
        .select("e.*")
        .where(F.col("user").isNotNull() & F.col("ts").isNotNull())
        .withColumn("event_time", F.timestamp_millis("ts"))
    )
    stats = (
        events.withWatermark("event_time", watermark)
        .groupBy(F.window("event_time", "1 minute").alias("w"), "user")
        .agg(
            F.count(F.lit(1)).alias("clicks"),
            F.approx_count_distinct("page").alias("pages"),
            F.max("sent_at").alias("last_sent_at"),
        )
    )
    return stats.select(
        F.col("user").alias("key"),
        F.to_json(
            F.struct(
                "user",
                F.date_format("w.start", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_start"),
                F.date_format("w.end", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_end"),
                "clicks",
                "pages",
                "last_sent_at",
            )
        ).alias("value"),
    )


def start(
    spark: SparkSession,
    bootstrap: str,
    source_topic: str,
    sink_topic: str,
    checkpoint: str,
    *,
    trigger: str = "1 second",
    output_mode: str = "update",
    watermark: str = "10 seconds",
    starting_offsets: str = "earliest",
):
    raw = (
        spark.readStream.format("krafty")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source_topic)
        .option("startingOffsets", starting_offsets)
        .load()
    )
    return (
        clicks_per_user(raw, watermark)
        .writeStream.format("krafty")
        .outputMode(output_mode)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink_topic)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=trigger)
        .queryName("clickstream")
        .start()
    )


def main(argv=None) -> None:
    import pipeline

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--source", default="clicks")
    ap.add_argument("--sink", default="click-stats")
    ap.add_argument("--checkpoint", default="/tmp/krafty-clickstream-checkpoint")
    ap.add_argument("--trigger", default="1 second")
    ap.add_argument("--output-mode", default="update", choices=["update", "append"])
    a = ap.parse_args(argv)
    spark = pipeline.session("clickstream")
    q = start(
        spark, a.bootstrap, a.source, a.sink, a.checkpoint, trigger=a.trigger, output_mode=a.output_mode
    )
    try:
        q.awaitTermination()
    except KeyboardInterrupt:
        q.stop()
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
