"""The executor-side partition reader on its own: bounded batches, exact ranges, no group."""

from __future__ import annotations

from pyspark.sql.pandas.types import to_arrow_schema

from pipeline import client
from pipeline.source import kafka_schema


def test_reader_yields_bounded_batches_of_exactly_the_range(kafka, bootstrap):
    topic = kafka.topic("rd", partitions=1)
    kafka.produce(topic, [{"value": b"%d" % i, "partition": 0} for i in range(1000)])
    schema = to_arrow_schema(kafka_schema(True), timezone="UTC")
    batches = list(
        client.read_range(
            {"bootstrap.servers": bootstrap},
            topic,
            0,
            123,
            877,
            fail_on_data_loss=True,
            include_headers=True,
            arrow_schema=schema,
            batch_rows=100,
        )
    )
    assert all(b.num_rows <= 100 for b in batches) and len(batches) >= 8
    offsets = [o for b in batches for o in b.column("offset").to_pylist()]
    assert offsets == list(range(123, 877))
    assert [v for b in batches for v in b.column("value").to_pylist()] == [b"%d" % i for i in range(123, 877)]


def test_metadata_resolves_earliest_latest_and_explicit(kafka, bootstrap):
    from pipeline.options import EARLIEST, LATEST, OffsetSpec, Subscription

    topic = kafka.topic("md", partitions=2)
    n = kafka.partitions(topic)  # 2 (the mock cluster makes its own count)
    kafka.produce(topic, [{"value": b"x", "partition": i % n} for i in range(30 * n)])
    meta = client.Metadata({"bootstrap.servers": bootstrap})
    try:
        tps = meta.partitions(Subscription("subscribe", topics=(topic,)))
        assert tps == [(topic, p) for p in range(n)]
        assert meta.resolve(OffsetSpec(default=EARLIEST), tps, ending=False) == {tp: 0 for tp in tps}
        assert meta.resolve(OffsetSpec(default=LATEST), tps, ending=True) == {tp: 30 for tp in tps}
        spec = OffsetSpec(default=LATEST, per_partition={(topic, 1): 4})
        assert meta.resolve(spec, tps, ending=False) == {tp: 4 if tp[1] == 1 else 30 for tp in tps}
    finally:
        meta.close()
