"""The sink's ``exactlyOnce`` option: each task writes in a Kafka transaction that also records
its micro-batch as done, so a micro-batch Spark runs again (a query restarted from a checkpoint
that had not recorded the batch's commit) leaves every output record once, read with
read_committed. The same replay through the at-least-once sink writes the batch twice."""

from __future__ import annotations

import os
import uuid
from collections import Counter

import pyarrow as pa
import pytest

from pipeline import client
from pipeline.options import OptionError, parse_write_options
from tests.spark.topics import read_values

pytestmark = pytest.mark.krafty_only


def test_a_task_run_twice_for_the_same_batch_writes_once(kafka, bootstrap):
    out = kafka.topic("eo-task", partitions=2)
    rows = pa.RecordBatch.from_pydict({"value": [b"v%d" % i for i in range(50)]})
    tid = f"eo-{uuid.uuid4().hex[:6]}-0"
    kafka_conf = {"bootstrap.servers": bootstrap}
    assert client.write_batches_exactly_once(kafka_conf, out, iter([rows]), tid, batch_id=0) == 50
    assert client.write_batches_exactly_once(kafka_conf, out, iter([rows]), tid, batch_id=0) == 0  # a re-run
    assert client.write_batches_exactly_once(kafka_conf, out, iter([rows]), tid, batch_id=1) == 50  # the next batch
    assert Counter(read_values(bootstrap, out, 2)) == Counter({b"v%d" % i: 2 for i in range(50)})


B = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_options():
    assert parse_write_options({**B, "topic": "o", "exactlyOnce": "true"}).transactional_id_prefix == "krafty-spark-o"
    with pytest.raises(OptionError, match="needs the 'topic' option"):
        parse_write_options({**B, "exactlyOnce": "true"})
    with pytest.raises(OptionError, match="transactionalIdPrefix"):
        parse_write_options({**B, "topic": "o", "exactlyOnce": "true", "kafka.transactional.id": "x"})


@pytest.mark.parametrize("exactly_once", [True, False])
def test_a_replayed_micro_batch_is_written_once(spark, kafka, bootstrap, tmp_path, exactly_once):
    inp = kafka.topic("eo-in", partitions=3)
    out = kafka.topic("eo-out", partitions=2)
    kafka.produce(inp, [{"value": f"m{i}".encode()} for i in range(300)])
    ckpt = str(tmp_path / "ckpt")
    prefix = f"eo-{uuid.uuid4().hex[:6]}"  # the same for the restarted query (the default: the topic's)

    def run():
        df = (spark.readStream.format("krafty").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", inp).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "100").load())
        q = (df.selectExpr("value").writeStream.format("krafty")
             .option("kafka.bootstrap.servers", bootstrap).option("topic", out)
             .option("exactlyOnce", str(exactly_once).lower())
             .option("transactionalIdPrefix", prefix)
             .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
        try:
            assert q.awaitTermination(600)
        finally:
            if q.isActive:
                q.stop()
        assert q.exception() is None

    run()
    commits = sorted(int(f) for f in os.listdir(os.path.join(ckpt, "commits")) if f.isdigit())
    assert commits == [0, 1, 2]
    # the query "failed" after the tasks of batch 2 had written, before Spark recorded it as done
    for name in ("2", ".2.crc"):
        if os.path.exists(os.path.join(ckpt, "commits", name)):
            os.remove(os.path.join(ckpt, "commits", name))
    run()  # Spark runs batch 2 again, with the same offsets
    got = Counter(read_values(bootstrap, out, 2))
    if exactly_once:
        assert got == Counter(f"m{i}".encode() for i in range(300))
    else:  # the at-least-once sink writes the replayed batches again
        assert sum(got.values()) == 400 and set(got) == {f"m{i}".encode() for i in range(300)}
