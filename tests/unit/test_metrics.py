"""The pure parts of the metrics: latency histograms and their quantiles, windowed stats, the
consumer-lag timeline, response error counting, names, JSON logs, and the controller's and
replica manager's gauges read from their state."""

from __future__ import annotations

import json
import logging
import random
import types

import pytest
from prometheus_client.core import Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker.group.lag import MAX_SAMPLES, OffsetTimeline
from broker.metrics import BrokerMetrics, api_name
from broker.protocol import codec
from broker.replica.partition import PartitionState
from common.errors import ErrorCode
from common.jsonlog import JsonFormatter
from common.metrics import NUM_BUCKETS, Histogram, WindowedStat, bucket_bounds, bucket_of, expand
from controller.metrics import collect as controller_collect
from tests.unit.controller.controller_testkit import cluster, with_topic


def render(families: list[Metric]) -> dict:
    """Families as a scraper sees them: {sample name: {frozenset(labels): value}}."""
    class Reg:
        def collect(self):
            return expand(families)
    out: dict = {}
    for fam in text_string_to_metric_families(generate_latest(Reg()).decode()):
        for s in fam.samples:
            out.setdefault(s.name, {})[frozenset(s.labels.items())] = s.value
    return out


# --- histograms ------------------------------------------------------------------------------------
def test_buckets_cover_every_duration_and_are_ordered():
    prev_hi = 0.0
    for i in range(NUM_BUCKETS):
        lo, hi = bucket_bounds(i)
        assert lo == prev_hi and hi > lo
        prev_hi = hi
    for us in [0, 1, 15, 16, 17, 31, 32, 1000, 123_456, 10**9, 2**45]:
        lo, hi = bucket_bounds(bucket_of(us))
        assert lo <= us < hi or bucket_of(us) == NUM_BUCKETS - 1


def test_quantiles_are_within_the_bucket_resolution():
    rng = random.Random(7)
    values = [rng.lognormvariate(0, 1.5) / 1000 for _ in range(20_000)]  # seconds, median ~1 ms
    h = Histogram(window_s=60, now=0)
    for v in values:
        h.record(v)
    values.sort()
    for label, q in h.quantiles_ms(1.0):
        true_ms = values[min(len(values) - 1, int(float(label) * len(values)))] * 1000
        assert q == pytest.approx(true_ms, rel=0.07), label
    assert h.count == 20_000 and h.sum == pytest.approx(sum(values))


def test_quantiles_cover_the_last_one_or_two_windows_only():
    h = Histogram(window_s=10, now=0)
    for _ in range(100):
        h.record(0.5)  # 500 ms
    assert dict(h.quantiles_ms(5))["0.99"] == pytest.approx(500, rel=0.07)
    h.record(0.001)
    assert dict(h.quantiles_ms(12))["0.50"] == pytest.approx(500, rel=0.07)  # previous window still counts
    h.record(0.001)
    assert dict(h.quantiles_ms(23))["0.99"] == pytest.approx(1, rel=0.07)  # the 500 ms window has gone
    assert dict(h.quantiles_ms(60))["0.50"] == 0.0  # nothing recorded lately
    assert h.count == 102  # count and sum are for ever


def test_windowed_stat_avg_max_rate():
    w = WindowedStat(window_s=30, now=0)
    for t, v in [(1, 10.0), (2, 30.0), (40, 5.0)]:
        w.record(v, t)
    assert w.avg(41) == pytest.approx(15.0) and w.max(41) == 30.0
    assert w.avg(100) == 0.0 and w.max(100) == 0.0
    r = WindowedStat(window_s=10, now=0)
    for t in range(10):
        r.record(100, t)
    assert r.rate(10) == pytest.approx(1000 / 10)


# --- consumer lag in seconds -------------------------------------------------------------------------
def test_lag_seconds_interpolates_between_high_watermark_samples():
    tl = OffsetTimeline()
    for hw, t in [(0, 0), (100, 10_000), (200, 20_000), (200, 30_000)]:
        tl.observe(hw, t)
    assert tl.samples == [(0, 0), (100, 10_000), (200, 20_000)]  # an unchanged watermark keeps its first time
    assert tl.lag_seconds(200, 40_000) == 0.0  # at the end: no lag
    assert tl.lag_seconds(150, 40_000) == pytest.approx(40 - 15.1)  # record 150 appended ~15.1 s in
    assert tl.lag_seconds(99, 12_000) == pytest.approx(12 - 10)
    assert tl.lag_seconds(0, 40_000) == pytest.approx(40 - 0.1)


def test_lag_seconds_extrapolates_beyond_the_timeline_and_restarts_after_truncation():
    tl = OffsetTimeline()
    tl.observe(1000, 100_000)
    tl.observe(2000, 110_000)  # 100 records/s
    assert tl.lag_seconds(500, 110_000) == pytest.approx(10 + 4.99)
    tl.observe(10, 120_000)  # a recreated topic
    assert tl.samples == [(10, 120_000)] and tl.lag_seconds(5, 121_000) == pytest.approx(1.0)
    for i in range(MAX_SAMPLES + 10):
        tl.observe(100 + i, 130_000 + i)
    assert len(tl.samples) == MAX_SAMPLES


# --- names and error counts ---------------------------------------------------------------------------
def test_request_label_is_kafkas_api_name():
    assert [api_name(k) for k in (0, 1, 3, 18, 23, 32, 50)] == [
        "Produce", "Fetch", "Metadata", "ApiVersions", "OffsetForLeaderEpoch", "DescribeConfigs",
        "DescribeUserScramCredentials"]


def test_errors_are_counted_from_nested_kio_responses_and_dicts():
    m = BrokerMetrics(1)
    resp = codec.build_response(3, 12, {"throttle_time": 0, "brokers": [], "cluster_id": "c", "controller_id": 1, "topics": [
        {"error_code": 3, "name": "a", "topic_id": None, "is_internal": False, "partitions": [
            {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 0, "replica_nodes": [1],
             "isr_nodes": [1], "offline_replicas": []},
            {"error_code": 9, "partition_index": 1, "leader_id": 1, "leader_epoch": 0, "replica_nodes": [1],
             "isr_nodes": [1], "offline_replicas": []}], "topic_authorized_operations": 0}]})
    m.count_errors(3, resp)
    assert m.requests[3].errors == {3: 1, 0: 1, 9: 1}
    m.count_errors(0, {"responses": [{"name": "t", "partition_responses": [{"error_code": 0}, {"error_code": 6}]}],
                       "throttle_time": 0})
    assert m.requests[0].errors == {0: 1, 6: 1}


def test_produce_failures_count_as_kafka_counts_them():
    m = BrokerMetrics(1)
    m.produced("t", 1000, 10)
    m.produce_failed("t", 500, ErrorCode.NOT_LEADER_OR_FOLLOWER)  # expected: a request, not a failure
    m.produce_failed("t", 700, ErrorCode.MESSAGE_TOO_LARGE)  # rejected bytes
    m.produce_failed("t", 100, ErrorCode.INVALID_RECORD)  # a real failure
    m.produce_failed("t", 100, ErrorCode.INVALID_REQUIRED_ACKS)  # refused before the append: nowhere
    m.produce_failed("nope", 100, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)  # no series for an invented name
    t = m.topics["t"]
    assert (t.messages_in, t.bytes_in, t.total_produce, t.failed_produce, t.bytes_rejected) == (10, 1000, 4, 1, 700)
    assert "nope" not in m.topics and m.retired.total_produce == 1
    got = render(m.collect())
    assert got["kafka_server_brokertopicmetrics_messagesin_total"] == {frozenset({("topic", "t")}): 10,
                                                                       frozenset(): 10}
    assert got["kafka_server_brokertopicmetrics_totalproducerequests_total"][frozenset()] == 5


def test_request_times_split_as_kafkas_request_metrics():
    m = BrokerMetrics(1)
    header = codec.RequestHeader(1, 13, 7, "c", 0)
    ctx = types.SimpleNamespace(header=header, parked=0.200, throttle_ms=0, from_follower=True)
    m.record_request(ctx, 10.0, 10.001, 10.251, 10.252)
    got = render(m.collect())
    follower = frozenset({("request", "FetchFollower"), ("quantile", "0.50")})
    assert got["kafka_network_requestmetrics_remotetimems"][follower] == pytest.approx(200, rel=0.07)
    assert got["kafka_network_requestmetrics_localtimems"][follower] == pytest.approx(50, rel=0.07)
    assert got["kafka_network_requestmetrics_totaltimems"][
        frozenset({("request", "Fetch"), ("quantile", "0.99")})] == pytest.approx(252, rel=0.07)
    assert got["kafka_network_requestmetrics_requests_total"] == {
        frozenset({("request", "Fetch"), ("version", "13")}): 1,
        frozenset({("request", "FetchFollower"), ("version", "13")}): 1}
    assert frozenset({("request", "FetchConsumer")}) in got["kafka_network_requestmetrics_totaltimems_count"]


# --- state read at scrape time ------------------------------------------------------------------------
def _fake_broker(parts):
    from broker.metrics_state import _replicas
    rm = types.SimpleNamespace(partitions=parts, isr_shrinks=0, isr_expands=0, min_insync_replicas=lambda i, t: 2,
                               fetchers=types.SimpleNamespace(leader_hw={}, following={}),
                               offline_partitions={}, logs=types.SimpleNamespace(offline_log_dirs=[]))
    b = types.SimpleNamespace(replicas=rm, loader=types.SimpleNamespace(image=None), servers=[])
    return b, rm, _replicas


def test_under_replicated_and_min_isr_gauges_follow_the_isr():
    st = PartitionState("t", 0, None, 1)
    st.become(1, 0, 0, (1, 2, 3), (1, 2, 3))
    part = types.SimpleNamespace(state=st, log=None)
    b, rm, collect = _fake_broker({("t", 0): part})

    def gauges():
        out: list[Metric] = []
        collect(b, out)
        got = render(out)
        return (got["kafka_server_replicamanager_underreplicatedpartitions"][frozenset()],
                got["kafka_server_replicamanager_atminisrpartitioncount"][frozenset()],
                got["kafka_server_replicamanager_underminisrpartitioncount"][frozenset()],
                got["kafka_cluster_partition_underreplicated"][frozenset({("topic", "t"), ("partition", "0")})])
    assert gauges() == (0, 0, 0, 0)
    st.isr = (1, 2)
    assert gauges() == (1, 1, 0, 1)
    st.isr = (1,)
    assert gauges() == (1, 0, 1, 1)


def test_controller_gauges_count_offline_partitions_and_fenced_brokers_on_the_active_controller_only():
    # broker 3 fenced; partition 0's only in-sync replica was 3: no leader
    image = with_topic(cluster((1, 2, 3), fenced=(3,)), "t", {0: (3, 1), 1: (1, 2), 2: (2, 1)},
                       isr={0: (3,)}, leader={0: -1})
    ctrl = types.SimpleNamespace(loader=types.SimpleNamespace(image=image), is_active=lambda: True,
                                 log=types.SimpleNamespace(core=types.SimpleNamespace(hw=image.offset + 1)),
                                 processing_times=Histogram())
    out: list[Metric] = []
    controller_collect(ctrl, out, 0.0)
    got = {k: v[frozenset()] for k, v in render(out).items() if frozenset() in v}
    k = "kafka_controller_kafkacontroller_"
    assert got[k + "activecontrollercount"] == 1
    assert got[k + "offlinepartitionscount"] == 1
    assert got[k + "fencedbrokercount"] == 1 and got[k + "activebrokercount"] == 2
    assert got[k + "globalpartitioncount"] == 3 and got[k + "globaltopiccount"] == 1
    ctrl.is_active = lambda: False
    out = []
    controller_collect(ctrl, out, 0.0)
    got = {k: v[frozenset()] for k, v in render(out).items() if frozenset() in v}
    assert got[k + "activecontrollercount"] == 0 and got[k + "offlinepartitionscount"] == 0


# --- JSON logs -----------------------------------------------------------------------------------------
def test_json_log_lines_carry_context_fields():
    rec = logging.LogRecord("krafty.replica", logging.INFO, __file__, 1, "%s-%d: leader", ("t", 3), None)
    rec.topic, rec.partition = "t", 3
    line = json.loads(JsonFormatter(node_id=4).format(rec))
    assert line["message"] == "t-3: leader" and line["logger"] == "krafty.replica" and line["level"] == "INFO"
    assert line["node_id"] == 4 and line["topic"] == "t" and line["partition"] == 3
    assert line["time"].endswith("Z") and "T" in line["time"]
