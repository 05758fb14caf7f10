"""The broker's metrics, with the names the Prometheus JMX exporter gives Kafka's MBeans under
Strimzi's ``kafka-metrics.yaml`` rules (README "Metrics" has the table), so that dashboards
and alerts written for Kafka work unchanged.

Two halves. The hot path (request handling, produce, fetch, the replica fetchers) bumps plain
numbers in objects made once: ``RequestStats`` per API, ``TopicStats`` per topic; one dict
lookup and a few integer additions per request or per partition of a request, never per record,
no lock. Everything that is state rather than an event (partition counts, under-replicated
partitions, log sizes, connections, groups, consumer lag) is read from the broker's own objects
when Prometheus scrapes (``collect``), the way the JMX exporter reads MBeans.

``collect`` runs on the event loop (it reads the loop's data structures) and returns metric
families, or for the per-partition series callables that build them from numbers it read
(common.metrics.expand); building those samples and rendering the text happen off the loop
(krafty/metrics_server.py)."""

from __future__ import annotations

import dataclasses
import typing

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, UnknownMetricFamily

from broker.protocol.apis import ApiKey
from common.clock import SYSTEM, Clock
from common.errors import ErrorCode
from common.metrics import Histogram, bucket_of, summary_samples

# Kafka's histograms of RequestMetrics, in the order a request goes through them
TIMES = ("RequestQueueTimeMs", "LocalTimeMs", "RemoteTimeMs", "ThrottleTimeMs", "ResponseSendTimeMs", "TotalTimeMs")
# the operation a request parked in a purgatory waits for (DelayedOperationPurgatory's names)
PURGATORIES = {ApiKey.PRODUCE: "Produce", ApiKey.FETCH: "Fetch"}


def api_name(key: int) -> str:
    """Kafka's ApiKeys name (the ``request`` label): PRODUCE -> Produce, API_VERSIONS -> ApiVersions."""
    try:
        return "".join(w.capitalize() for w in ApiKey(key).name.split("_"))
    except ValueError:
        return f"Unknown{key}"


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


E = ErrorCode
# Kafka's ReplicaManager does not count these as failed produce / fetch requests (they are the
# client's or the cluster's normal life, not a broker failure)
_EXPECTED_PRODUCE_ERRORS = frozenset({E.UNKNOWN_TOPIC_OR_PARTITION, E.NOT_LEADER_OR_FOLLOWER, E.MESSAGE_TOO_LARGE,
                                      E.RECORD_LIST_TOO_LARGE, E.CORRUPT_MESSAGE, E.KAFKA_STORAGE_ERROR})
_NOT_PRODUCE_ATTEMPTS = frozenset({E.INVALID_REQUIRED_ACKS, E.INVALID_TOPIC_EXCEPTION, E.TOPIC_AUTHORIZATION_FAILED,
                                   E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED})
_REJECTED_BYTES = frozenset({E.MESSAGE_TOO_LARGE, E.RECORD_LIST_TOO_LARGE})
_EXPECTED_FETCH_ERRORS = frozenset({E.UNKNOWN_TOPIC_OR_PARTITION, E.UNKNOWN_TOPIC_ID, E.NOT_LEADER_OR_FOLLOWER,
                                    E.UNKNOWN_LEADER_EPOCH, E.FENCED_LEADER_EPOCH, E.REPLICA_NOT_AVAILABLE,
                                    E.KAFKA_STORAGE_ERROR, E.OFFSET_OUT_OF_RANGE, E.INCONSISTENT_TOPIC_ID,
                                    E.TOPIC_AUTHORIZATION_FAILED})


class RequestStats:
    """RequestMetrics of one API (``request`` label)."""

    __slots__ = ("name", "versions", "errors", "hists")

    def __init__(self, name: str, window_s: float, now: float):
        self.name = name
        self.versions: dict[int, int] = {}  # RequestsPerSec{version}
        self.errors: dict[int, int] = {}  # ErrorsPerSec{error}
        self.hists = tuple(Histogram(window_s, now) for _ in TIMES)

    def record(self, version: int, times: tuple[float, ...]) -> None:
        """One request's times, in TIMES order (seconds). Histogram.record inlined: this runs
        for every request."""
        v = self.versions
        v[version] = v.get(version, 0) + 1
        for h, t in zip(self.hists, times):  # noqa: B905 - both have len(TIMES) items; strict costs per request
            h.count += 1
            h.sum += t
            us = int(t * 1_000_000)
            h.cur[us if 0 <= us < 16 else bucket_of(us)] += 1


class TopicStats:
    """BrokerTopicMetrics of one topic (or of all topics deleted so far, kept in the totals)."""

    __slots__ = ("messages_in", "bytes_in", "bytes_out", "bytes_rejected", "failed_produce", "failed_fetch",
                 "total_produce", "total_fetch")

    def __init__(self) -> None:
        for s in self.__slots__:
            setattr(self, s, 0)

    def add(self, other: TopicStats) -> None:
        for s in self.__slots__:
            setattr(self, s, getattr(self, s) + getattr(other, s))


# (metric name after kafka_server_brokertopicmetrics_, TopicStats field, help)
TOPIC_COUNTERS = (
    ("messagesin", "messages_in", "Records appended by produce requests (MessagesInPerSec)"),
    ("bytesin", "bytes_in", "Bytes appended by produce requests (BytesInPerSec)"),
    ("bytesout", "bytes_out", "Bytes sent to consumers (BytesOutPerSec; replicas: replicationbytesout)"),
    ("bytesrejected", "bytes_rejected", "Bytes of produce requests refused (BytesRejectedPerSec)"),
    ("failedproducerequests", "failed_produce", "Partition appends that failed (FailedProduceRequestsPerSec)"),
    ("failedfetchrequests", "failed_fetch", "Partition reads that failed (FailedFetchRequestsPerSec)"),
    ("totalproducerequests", "total_produce", "Partition appends (TotalProduceRequestsPerSec)"),
    ("totalfetchrequests", "total_fetch", "Partition reads (TotalFetchRequestsPerSec)"),
)


class BrokerMetrics:
    """Event counters of one broker and the scrape-time reading of its state."""

    def __init__(self, node_id: int, *, clock: Clock = SYSTEM, window_s: float = 60.0):
        self.node_id = node_id
        self.clock = clock
        self.window_s = window_s
        self.requests: dict[int, RequestStats] = {}
        now = clock.monotonic()
        self.fetch_consumer = RequestStats("FetchConsumer", window_s, now)
        self.fetch_follower = RequestStats("FetchFollower", window_s, now)
        self.topics: dict[str, TopicStats] = {}
        self.retired = TopicStats()  # counts of deleted topics: the all-topics totals never go down
        self.replication_bytes_out = 0
        self.produce_errors = self.stats_of(ApiKey.PRODUCE).errors  # counted per partition by the produce hooks
        self.broker = None  # broker.broker.Broker, read when scraped

    # --- events (hot path) -----------------------------------------------------------------------
    def topic(self, name: str) -> TopicStats:
        ts = self.topics.get(name)
        if ts is None:
            ts = self.topics[name] = TopicStats()
        return ts

    def stats_of(self, key: int) -> RequestStats:
        st = self.requests.get(key)
        if st is None:
            st = self.requests[key] = RequestStats(api_name(key), self.window_s, self.clock.monotonic())
        return st

    def record_request(self, ctx, start: float, dispatched: float, handled: float, sent: float) -> None:
        """One request answered (or, for acks=0, handled): its times. ``ctx.parked`` is the time it
        waited in a purgatory (RemoteTimeMs), ``ctx.throttle_ms`` the quota throttle it was given."""
        h = ctx.header
        key = h.api_key
        st = self.requests.get(key)
        if st is None:
            st = self.stats_of(key)
        remote = ctx.parked
        local = handled - dispatched - remote
        times = (dispatched - start, local if local > 0 else 0.0, remote, ctx.throttle_ms / 1000, sent - handled,
                 sent - start)
        st.record(h.api_version, times)
        if key == ApiKey.FETCH:  # Kafka times fetches twice: as Fetch and as FetchConsumer or FetchFollower
            (self.fetch_follower if ctx.from_follower else self.fetch_consumer).record(h.api_version, times)

    def count_errors(self, key: int, response) -> None:
        """ErrorsPerSec: every error code of a response (NONE included), as Kafka's errorCounts."""
        errors = self.stats_of(key).errors
        _count_errors(response, errors)

    def produced(self, topic: str, nbytes: int, records: int) -> None:
        """A partition of a produce request appended (its NONE counted here, not by count_errors)."""
        errors = self.produce_errors
        errors[0] = errors.get(0, 0) + 1
        ts = self.topics.get(topic) or self.topic(topic)
        ts.total_produce += 1
        ts.messages_in += records
        ts.bytes_in += nbytes

    def produce_failed(self, topic: str, nbytes: int, code: int) -> None:
        """A partition of a produce request refused. As in Kafka, FailedProduceRequests counts
        unexpected failures only (not a moved leader, an unknown partition, a batch too large...),
        and requests refused before the append (bad acks, internal topic, authorization) count
        nowhere but in the response's error counts."""
        errors = self.produce_errors
        errors[code] = errors.get(code, 0) + 1
        if code in _NOT_PRODUCE_ATTEMPTS:
            return
        # an unknown topic counts in the all-topics totals only (no series per name a client invents)
        ts = self.retired if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else (self.topics.get(topic)
                                                                                  or self.topic(topic))
        ts.total_produce += 1
        if code not in _EXPECTED_PRODUCE_ERRORS:
            ts.failed_produce += 1
        if code in _REJECTED_BYTES:
            ts.bytes_rejected += nbytes

    def fetched(self, ctx, topics_out, replica_id: int) -> None:
        """A Fetch's partitions: bytes out (to consumers; to replicas as replication bytes out),
        reads and failed reads per topic, and the response's error codes."""
        ctx.from_follower = replica_id >= 0
        errors = self.stats_of(ApiKey.FETCH).errors
        errors[0] = errors.get(0, 0) + 1  # the top-level error of the response
        repl = 0
        image_topics = self.broker.loader.image.topics_by_name if self.broker is not None else None
        for name, _tid, parts in topics_out:
            ts = self.topics.get(name)
            if ts is None:
                ts = self.topic(name) if image_topics is None or name in image_topics else self.retired
            for r in parts:
                ts.total_fetch += 1
                e = r.error
                errors[e] = errors.get(e, 0) + 1
                if e and e not in _EXPECTED_FETCH_ERRORS:
                    ts.failed_fetch += 1
                rec = r.records
                if rec is not None:
                    n = rec.size if hasattr(rec, "size") else len(rec)
                    if replica_id >= 0:
                        repl += n
                    else:
                        ts.bytes_out += n
        self.replication_bytes_out += repl

    def topic_deleted(self, name: str) -> None:
        ts = self.topics.pop(name, None)
        if ts is not None:
            self.retired.add(ts)

    # --- scrape ------------------------------------------------------------------------------------
    def collect(self) -> list:
        out: list = []
        now = self.clock.monotonic()
        self._collect_topics(out)
        self._collect_requests(out, now)
        b = self.broker
        if b is not None:
            from broker import metrics_state  # the state half (replicas, logs, network, groups, lag)
            metrics_state.collect(b, self, out, now)
        return out

    def _collect_topics(self, out: list[Metric]) -> None:
        if self.broker is not None:  # deleted topics: their counts stay in the totals only
            exists = self.broker.loader.image.topics_by_name
            for name in [n for n in self.topics if n not in exists]:
                self.topic_deleted(name)
        live = list(self.topics.items())
        for suffix, field, doc in TOPIC_COUNTERS:
            fam = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{suffix}", doc, labels=["topic"])
            total = getattr(self.retired, field)
            for name, ts in live:
                v = getattr(ts, field)
                total += v
                fam.add_metric([name], v)
            fam.add_sample(fam.name + "_total", {}, total)  # all topics: the series without a topic label
            out.append(fam)
        rep_in = self.broker.replicas.fetchers.bytes_in if self.broker is not None and self.broker.replicas else 0
        out.append(CounterMetricFamily("kafka_server_brokertopicmetrics_replicationbytesin",
                                       "Bytes appended by this broker's replica fetchers (ReplicationBytesInPerSec)",
                                       value=rep_in))
        out.append(CounterMetricFamily("kafka_server_brokertopicmetrics_replicationbytesout",
                                       "Bytes sent to follower replicas (ReplicationBytesOutPerSec)",
                                       value=self.replication_bytes_out))

    def _collect_requests(self, out: list[Metric], now: float) -> None:
        stats = sorted(self.requests.values(), key=lambda s: s.name)
        if ApiKey.FETCH in self.requests:
            stats += [self.fetch_consumer, self.fetch_follower]
        reqs = CounterMetricFamily("kafka_network_requestmetrics_requests", "Requests answered (RequestsPerSec)",
                                   labels=["request", "version"])
        errs = CounterMetricFamily("kafka_network_requestmetrics_errors",
                                   "Error codes in responses, NONE included (ErrorsPerSec)", labels=["request", "error"])
        for st in stats:
            for v, n in sorted(st.versions.items()):
                reqs.add_metric([st.name, str(v)], n)
            for code, n in sorted(st.errors.items()):
                errs.add_metric([st.name, error_name(code)], n)
        out += [reqs, errs]
        for i, tname in enumerate(TIMES):
            out.append(summary(f"kafka_network_requestmetrics_{tname.lower()}",
                               f"RequestMetrics {tname}: quantiles over the last 1-2 minutes, count and sum for ever",
                               [({"request": st.name}, st.hists[i]) for st in stats], now))


def summary(name: str, doc: str, series: list[tuple[dict[str, str], Histogram]], now: float) -> Metric:
    """A Prometheus summary with Kafka's percentiles (the JMX exporter's ``quantile="0.99"``
    series of a Yammer histogram), plus ``_count`` and ``_sum`` in milliseconds."""
    m = Metric(name, doc, "summary")
    for sample in summary_samples(name, series, now):
        m.add_sample(*sample)
    return m


def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def untyped(name: str, doc: str, value: float) -> UnknownMetricFamily:
    return UnknownMetricFamily(name, doc, value=value)


# --- error codes of a response -------------------------------------------------------------------
_PLANS: dict[type, tuple[bool, tuple[str, ...], tuple[str, ...]]] = {}


def _plan(t: type) -> tuple[bool, tuple[str, ...], tuple[str, ...]]:
    """For a kio response type: whether it has an error_code, its fields holding entities, and
    its fields holding tuples of entities."""
    hints = typing.get_type_hints(t)
    has_error = "error_code" in hints
    singles, seqs = [], []
    for f in dataclasses.fields(t):
        tp = hints.get(f.name)
        if typing.get_origin(tp) is tuple:
            args = typing.get_args(tp)
            if args and dataclasses.is_dataclass(args[0]):
                seqs.append(f.name)
        elif dataclasses.is_dataclass(tp):
            singles.append(f.name)
    return has_error, tuple(singles), tuple(seqs)


def _count_errors(obj, errors: dict[int, int]) -> None:
    if isinstance(obj, dict):  # a response given as a dict (codec.build_response)
        e = obj.get("error_code")
        if e is not None:
            errors[int(e)] = errors.get(int(e), 0) + 1
        for v in obj.values():
            if type(v) is list and v and isinstance(v[0], dict):
                for x in v:
                    _count_errors(x, errors)
        return
    t = type(obj)
    plan = _PLANS.get(t)
    if plan is None:
        if not dataclasses.is_dataclass(t):
            return
        plan = _PLANS[t] = _plan(t)
    has_error, singles, seqs = plan
    if has_error:
        e = int(obj.error_code)
        errors[e] = errors.get(e, 0) + 1
    for name in singles:
        v = getattr(obj, name)
        if v is not None:
            _count_errors(v, errors)
    for name in seqs:
        for x in getattr(obj, name):
            _count_errors(x, errors)
