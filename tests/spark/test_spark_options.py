"""Option parsing and planning rules of the krafty source (no broker, no JVM)."""

from __future__ import annotations

import pytest

from pipeline.options import (
    EARLIEST,
    LATEST,
    OptionError,
    admit,
    offsets_behind_latest,
    offsets_from_json,
    offsets_to_json,
    parse_duration_ms,
    parse_read_options,
    parse_write_options,
    rate_limit,
    split_ranges,
)

BS = {"kafka.bootstrap.servers": "127.0.0.1:1"}


def test_defaults_match_spark():
    batch = parse_read_options({**BS, "subscribe": "a,b"}, streaming=False)
    assert batch.subscription.topics == ("a", "b")
    assert batch.starting.default == EARLIEST and batch.ending.default == LATEST
    assert batch.fail_on_data_loss and not batch.include_headers
    stream = parse_read_options({**BS, "subscribe": "a"}, streaming=True)
    assert stream.starting.default == LATEST and stream.ending is None


def test_offsets_json_and_timestamps():
    o = parse_read_options(
        {
            **BS,
            "assign": '{"t":[0,1]}',
            "startingOffsets": '{"t":{"0":5,"1":-2}}',
            "endingOffsets": '{"t":{"0":-1,"1":9}}',
        },
        streaming=False,
    )
    assert o.subscription.assigned == (("t", 0), ("t", 1))
    assert o.starting.per_partition == {("t", 0): 5, ("t", 1): EARLIEST}
    assert o.ending.per_partition == {("t", 0): LATEST, ("t", 1): 9}
    # precedence: startingTimestamp > startingOffsetsByTimestamp > startingOffsets
    o = parse_read_options(
        {**BS, "subscribe": "t", "startingTimestamp": "1000", "startingOffsetsByTimestamp": '{"t":{"0":5}}'},
        streaming=True,
    )
    assert o.starting.by_timestamp and o.starting.global_timestamp == 1000
    o = parse_read_options(
        {**BS, "subscribe": "t", "startingOffsetsByTimestamp": '{"t":{"0":5}}'}, streaming=True
    )
    assert o.starting.per_partition == {("t", 0): 5} and o.starting.global_timestamp is None


@pytest.mark.parametrize(
    "opts, streaming, match",
    [
        ({"subscribe": "a"}, False, "bootstrap.servers"),
        ({**BS}, False, "exactly one of"),
        ({**BS, "subscribe": "a", "assign": '{"a":[0]}'}, False, "exactly one of"),
        ({**BS, "assign": "nope"}, False, "assign"),
        ({**BS, "subscribePattern": "("}, False, "regex"),
        ({**BS, "subscribe": "a", "startingOffsets": "latest"}, False, "batch"),
        ({**BS, "subscribe": "a", "endingOffsets": "earliest"}, False, "endingOffsets"),
        ({**BS, "subscribe": "a", "endingOffsets": "latest"}, True, "streaming"),
        ({**BS, "subscribe": "a", "failOnDataLoss": "maybe"}, False, "failOnDataLoss"),
        ({**BS, "subscribe": "a", "maxOffsetsPerTrigger": "0"}, True, "maxOffsetsPerTrigger"),
        ({**BS, "subscribe": "a", "kafka.enable.auto.commit": "true"}, True, "manages"),
        ({**BS, "subscribe": "a", "startingOffset": "earliest"}, False,
         r"unknown option 'startingOffset' \(did you mean 'startingOffsets'\?\); accepted options: "),
        ({**BS, "subscribe": "a", "maxRecordsPerPartition": "0"}, False, "maxRecordsPerPartition"),
        ({**BS, "subscribe": "a", "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"}, True,
         "minOffsetsPerTrigger"),
        ({**BS, "subscribe": "a", "maxTriggerDelay": "soon"}, True, "maxTriggerDelay"),
    ],
)
def test_bad_options(opts, streaming, match):
    with pytest.raises(OptionError, match=match):
        parse_read_options(opts, streaming=streaming)


def test_write_options():
    w = parse_write_options({**BS, "topic": "out", "kafka.linger.ms": "20"})
    assert w.topic == "out" and w.kafka == {"bootstrap.servers": "127.0.0.1:1", "linger.ms": "20"}
    assert w.include_headers is None
    assert parse_write_options({**BS, "topic": "o", "includeHeaders": "false"}).include_headers is False
    with pytest.raises(OptionError, match=r"krafty sink: unknown option 'topik' \(did you mean 'topic'\?\)"):
        parse_write_options({**BS, "topik": "o"})
    # Spark's own options may reach a sink
    parse_write_options({**BS, "topic": "o", "checkpointlocation": "/tmp/x", "path": "p", "queryname": "q"})


def test_parity_options_parse():
    o = parse_read_options({**BS, "subscribe": "a", "minOffsetsPerTrigger": "100", "maxTriggerDelay": "30s",
                            "maxRecordsPerPartition": "1000", "groupIdPrefix": "etl",
                            "fetchOffset.numRetries": "5", "fetchOffset.retryIntervalMs": "20"}, streaming=True)
    assert (o.min_offsets_per_trigger, o.max_trigger_delay_ms, o.max_records_per_partition) == (100, 30_000, 1000)
    assert (o.group_id_prefix, o.fetch_offset_retries, o.fetch_offset_retry_interval_ms) == ("etl", 5, 20)
    assert parse_read_options({**BS, "subscribe": "a"}, streaming=True).max_trigger_delay_ms == 15 * 60_000
    assert [parse_duration_ms(v, "d", "0") for v in ("250", "250ms", "2s", "3m", "1h")] == \
        [250, 250, 2000, 180_000, 3_600_000]


def test_min_offsets_per_trigger_waits_until_enough_or_the_delay():
    start, latest = {("t", 0): 10, ("t", 1): 0}, {("t", 0): 40, ("t", 1): 50}  # 80 records waiting
    assert not admit(start, latest, 100, 60_000, last_trigger_ms=1_000, now_ms=30_000)
    assert admit(start, latest, 80, 60_000, last_trigger_ms=1_000, now_ms=30_000)
    assert admit(start, latest, 100, 60_000, last_trigger_ms=1_000, now_ms=61_000)  # maxTriggerDelay passed
    # a new partition (not in start) counts from 0
    assert admit({("t", 0): 40}, {("t", 0): 40, ("t", 1): 100}, 100, 60_000, 1_000, 2_000)


def test_offsets_behind_latest_metrics():
    assert offsets_behind_latest({}, {("t", 0): 5}) == {}
    m = offsets_behind_latest({("t", 0): 5, ("t", 1): 10, ("t", 2): 7}, {("t", 0): 9, ("t", 1): 10, ("t", 2): 12})
    assert m == {"minOffsetsBehindLatest": "0", "maxOffsetsBehindLatest": "5", "avgOffsetsBehindLatest": "3.0"}


def test_rate_limit_is_proportional_and_exact():
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 50}
    latest = {("t", 0): 300, ("t", 1): 200, ("t", 2): 50}
    end = rate_limit(start, latest, 80)
    assert sum(end[k] - start[k] for k in end) == 80
    assert end[("t", 0)] - start[("t", 0)] == 60 and end[("t", 1)] - start[("t", 1)] == 20
    assert end[("t", 2)] == 50
    assert rate_limit(start, latest, 10_000) == latest
    # never past the latest offset, whatever the rounding
    end = rate_limit({("t", 0): 0, ("t", 1): 0}, {("t", 0): 1, ("t", 1): 1}, 1)
    assert sum(end.values()) == 1


def test_split_ranges_for_max_records_then_min_partitions():
    ranges = [("t", 0, 0, 1000), ("t", 1, 10, 60)]
    out = split_ranges(ranges, None, 300)
    assert [r for r in out if r[1] == 0] == [("t", 0, 0, 250), ("t", 0, 250, 500), ("t", 0, 500, 750),
                                              ("t", 0, 750, 1000)]
    assert [r for r in out if r[1] == 1] == [("t", 1, 10, 60)]
    assert all(b - a <= 300 for _, _, a, b in out)
    assert len(split_ranges(ranges, 10, 300)) > len(out)  # then minPartitions splits further (rounded, as Spark)


def test_split_ranges_for_min_partitions():
    ranges = [("t", 0, 0, 1000), ("t", 1, 0, 10), ("t", 2, 5, 5)]
    assert split_ranges(ranges, None) == [("t", 0, 0, 1000), ("t", 1, 0, 10)]
    out = split_ranges(ranges, 8)
    assert len(out) >= 8
    for p in (0, 1):
        pieces = sorted((a, b) for t, q, a, b in out if q == p)
        lo, hi = {0: (0, 1000), 1: (0, 10)}[p]
        assert pieces[0][0] == lo and pieces[-1][1] == hi
        assert all(pieces[i][1] == pieces[i + 1][0] for i in range(len(pieces) - 1))


def test_offset_json_round_trip():
    offs = {("a", 0): 5, ("a", 1): 7, ("b", 0): 0}
    doc = offsets_to_json(offs)
    assert doc == {"a": {"0": 5, "1": 7}, "b": {"0": 0}}
    assert offsets_from_json(doc) == offs
