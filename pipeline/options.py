"""Option parsing for the krafty Spark data source.

Option names and meanings follow Spark's Kafka source/sink so that a job ports by changing
``format("kafka")`` into ``format("krafty")``. This module is pure (no I/O) so it can be unit
tested without a broker or a JVM.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

EARLIEST = -2
LATEST = -1

# librdkafka settings we always control ourselves; a user value would break the reader's contract.
_RESERVED_CONSUMER = {
    "enable.auto.commit",
    "enable.auto.offset.store",
    "auto.offset.reset",
    "enable.partition.eof",
    "key.deserializer",
    "value.deserializer",
}
_RESERVED_PRODUCER = {"key.serializer", "value.serializer"}


class OptionError(ValueError):
    """A bad or missing option; the message says which and why."""


# Options of Spark's Kafka source and sink (same names; Spark matches them case-insensitively) and
# krafty's own. ``kafka.*`` options are the Kafka client's (pipeline/kafka_conf.py); the ones in
# _COMMON are Spark's own, which Spark itself passes to a data source (load(path), start(path),
# checkpointLocation, queryName, partitionBy).
_COMMON = ("path", "paths", "checkpointLocation", "queryName", "__partition_columns")
READ_OPTIONS = (
    "subscribe", "subscribePattern", "assign", "startingOffsets", "startingTimestamp",
    "startingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy", "failOnDataLoss", "includeHeaders",
    "minPartitions", "maxRecordsPerPartition", "kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs", "groupIdPrefix", "maxOffsetsPerTrigger", "minOffsetsPerTrigger",
    "maxTriggerDelay", "krafty.batchRows",
)
BATCH_READ_OPTIONS = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
WRITE_OPTIONS = ("topic", "includeHeaders", "exactlyOnce", "transactionalIdPrefix")


def check_known(options, accepted, what: str) -> None:
    """An option neither Spark's Kafka connector nor krafty knows is an error naming it."""
    import difflib

    known = {n.lower(): n for n in (*accepted, *_COMMON)}
    for k in options:
        kl = k.lower()
        if kl.startswith("kafka.") or kl in known:
            continue
        close = difflib.get_close_matches(kl, list(known), n=1, cutoff=0.75)
        hint = f" (did you mean {known[close[0]]!r}?)" if close else ""
        raise OptionError(
            f"krafty {what}: unknown option {k!r}{hint}; accepted options: "
            + ", ".join(sorted(accepted, key=str.lower)) + ", and kafka.* (Kafka client settings)"
        )


_TIME_UNITS = {"ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(value, name: str, default: str) -> int:
    """Spark's time strings (Utils.timeStringAsMs): ``15m``, ``30s``, ``100ms``, ``1h``, ``1d``; a
    bare number is milliseconds."""
    s = str(default if value is None else value).strip().lower()
    m = re.fullmatch(r"(\d+)\s*([a-z]*)", s)
    if not m or (m.group(2) and m.group(2) not in _TIME_UNITS):
        raise OptionError(f"option {name!r} must be a duration like 15m, 30s or 500ms, got {value!r}")
    return int(m.group(1)) * _TIME_UNITS.get(m.group(2) or "ms")


def _get(options, name: str, default=None):
    # Spark hands us a case-insensitive dict; plain dicts (tests) are matched case-insensitively too.
    if name in options:
        return options[name]
    low = name.lower()
    for k, v in options.items():
        if k.lower() == low:
            return v
    return default


def parse_bool(value, name: str, default: bool) -> bool:
    if value is None:
        return default
    s = str(value).strip().lower()
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name!r} must be true or false, got {value!r}")


def parse_int(value, name: str, default: int | None, minimum: int | None = None) -> int | None:
    if value is None:
        return default
    try:
        n = int(str(value).strip())
    except ValueError:
        raise OptionError(f"option {name!r} must be an integer, got {value!r}") from None
    if minimum is not None and n < minimum:
        raise OptionError(f"option {name!r} must be >= {minimum}, got {n}")
    return n


def kafka_params(options, reserved=_RESERVED_CONSUMER) -> dict:
    """All ``kafka.*`` options with the prefix removed (``kafka.bootstrap.servers`` included)."""
    out = {}
    for k, v in options.items():
        if k.lower().startswith("kafka."):
            key = k[len("kafka.") :]
            if key.lower() in reserved:
                raise OptionError(
                    f"option {k!r} is not supported: the krafty source manages {key} itself "
                    "(partitions are assigned with explicit offsets, nothing is committed)"
                )
            out[key] = v
    if not out.get("bootstrap.servers"):
        raise OptionError("option 'kafka.bootstrap.servers' is required (e.g. 127.0.0.1:9092)")
    return out


@dataclass(frozen=True)
class Subscription:
    """Which topic partitions to read: exactly one of the three Spark strategies."""

    kind: str  # "subscribe" | "subscribePattern" | "assign"
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[tuple[str, int], ...] = ()

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribePattern":
            return re.fullmatch(self.pattern, topic) is not None
        return any(t == topic for t, _ in self.assigned)


def parse_subscription(options) -> Subscription:
    given = {
        name: _get(options, name)
        for name in ("subscribe", "subscribePattern", "assign")
        if _get(options, name) is not None
    }
    if len(given) != 1:
        raise OptionError(
            "exactly one of the options 'subscribe', 'subscribePattern' or 'assign' must be set"
            + (f" (got {sorted(given)})" if given else "")
        )
    ((kind, raw),) = given.items()
    if kind == "subscribe":
        topics = tuple(t.strip() for t in str(raw).split(",") if t.strip())
        if not topics:
            raise OptionError("option 'subscribe' must name at least one topic")
        return Subscription(kind, topics=topics)
    if kind == "subscribePattern":
        try:
            re.compile(raw)
        except re.error as e:
            raise OptionError(f"option 'subscribePattern' is not a valid regex: {e}") from None
        return Subscription(kind, pattern=str(raw))
    try:
        doc = json.loads(raw)
        assigned = tuple(sorted((str(t), int(p)) for t, parts in doc.items() for p in parts))
    except (ValueError, AttributeError, TypeError):
        raise OptionError(
            f'option \'assign\' must be JSON like {{"topicA":[0,1],"topicB":[2]}}, got {raw!r}'
        ) from None
    if not assigned:
        raise OptionError("option 'assign' must name at least one partition")
    return Subscription(kind, assigned=assigned)


@dataclass(frozen=True)
class OffsetSpec:
    """Where to start or stop: earliest/latest, explicit offsets, or timestamps.

    ``per_partition`` maps (topic, partition) to an offset (-2 earliest, -1 latest) or to a
    timestamp in ms when ``by_timestamp``; ``global_timestamp`` applies to every partition.
    """

    default: int = LATEST  # EARLIEST or LATEST for partitions not listed
    per_partition: dict = field(default_factory=dict)
    by_timestamp: bool = False
    global_timestamp: int | None = None

    def describe(self) -> str:
        if self.global_timestamp is not None:
            return f"timestamp {self.global_timestamp}"
        if self.per_partition:
            return ("timestamps " if self.by_timestamp else "offsets ") + str(self.per_partition)
        return "earliest" if self.default == EARLIEST else "latest"


def _parse_partition_json(raw, name: str) -> dict:
    try:
        doc = json.loads(raw)
        return {(str(t), int(p)): int(v) for t, parts in doc.items() for p, v in parts.items()}
    except (ValueError, AttributeError, TypeError):
        raise OptionError(
            f"option {name!r} must be 'earliest', 'latest' or JSON like "
            f'{{"topicA":{{"0":23,"1":-1}}}}, got {raw!r}'
        ) from None


def parse_offsets(options, which: str, default: int, streaming: bool) -> OffsetSpec:
    """Parse starting (which='starting') or ending (which='ending') positions.

    Precedence matches Spark: ``<which>Timestamp`` > ``<which>OffsetsByTimestamp`` > ``<which>Offsets``.
    """
    ts = _get(options, f"{which}Timestamp")
    if ts is not None:
        return OffsetSpec(
            default=default, by_timestamp=True, global_timestamp=parse_int(ts, f"{which}Timestamp", None, 0)
        )
    by_ts = _get(options, f"{which}OffsetsByTimestamp")
    if by_ts is not None:
        parts = _parse_partition_json(by_ts, f"{which}OffsetsByTimestamp")
        return OffsetSpec(default=default, per_partition=parts, by_timestamp=True)
    raw = _get(options, f"{which}Offsets")
    if raw is None:
        return OffsetSpec(default=default)
    s = str(raw).strip()
    if s.lower() == "earliest":
        if which == "ending":
            raise OptionError("option 'endingOffsets' cannot be 'earliest'")
        return OffsetSpec(default=EARLIEST)
    if s.lower() == "latest":
        if which == "starting" and not streaming:
            raise OptionError("option 'startingOffsets' cannot be 'latest' for a batch query")
        return OffsetSpec(default=LATEST)
    parts = _parse_partition_json(s, f"{which}Offsets")
    for tp, off in parts.items():
        if which == "ending" and off == EARLIEST:
            raise OptionError(f"option 'endingOffsets' cannot use -2 (earliest) for {tp[0]}-{tp[1]}")
        if which == "starting" and off == LATEST and not streaming:
            raise OptionError(
                f"option 'startingOffsets' cannot use -1 (latest) in a batch query ({tp[0]}-{tp[1]})"
            )
        if off < EARLIEST:
            raise OptionError(f"option '{which}Offsets' has an invalid offset {off} for {tp[0]}-{tp[1]}")
    return OffsetSpec(default=default, per_partition=parts)


@dataclass(frozen=True)
class ReadOptions:
    kafka: dict
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec | None
    fail_on_data_loss: bool
    include_headers: bool
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    timestamp_strategy: str  # "error" | "latest": when no offset matches a starting timestamp
    poll_timeout_ms: int
    batch_rows: int | None
    max_records_per_partition: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    group_id_prefix: str | None = None
    fetch_offset_retries: int = 3
    fetch_offset_retry_interval_ms: int = 1000


def parse_read_options(options, streaming: bool) -> ReadOptions:
    check_known(options, READ_OPTIONS + BATCH_READ_OPTIONS, "streaming source" if streaming else "source")
    kafka = kafka_params(options)
    sub = parse_subscription(options)
    starting = parse_offsets(options, "starting", LATEST if streaming else EARLIEST, streaming)
    ending = None
    if streaming:
        for bad in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
            if _get(options, bad) is not None:
                raise OptionError(f"option {bad!r} is not supported by a streaming query")
    else:
        ending = parse_offsets(options, "ending", LATEST, streaming)  # (the *PerTrigger options: streaming only)
    max_rows = parse_int(_get(options, "maxOffsetsPerTrigger"), "maxOffsetsPerTrigger", None, 1)
    min_rows = parse_int(_get(options, "minOffsetsPerTrigger"), "minOffsetsPerTrigger", None, 1)
    if min_rows is not None and max_rows is not None and min_rows > max_rows:
        raise OptionError(f"option 'minOffsetsPerTrigger' ({min_rows}) is higher than 'maxOffsetsPerTrigger' "
                          f"({max_rows})")
    strategy = str(_get(options, "startingOffsetsByTimestampStrategy", "error")).lower()
    if strategy not in ("error", "latest"):
        raise OptionError("option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest'")
    return ReadOptions(
        kafka=kafka,
        subscription=sub,
        starting=starting,
        ending=ending,
        fail_on_data_loss=parse_bool(_get(options, "failOnDataLoss"), "failOnDataLoss", True),
        include_headers=parse_bool(_get(options, "includeHeaders"), "includeHeaders", False),
        max_offsets_per_trigger=max_rows,
        min_partitions=parse_int(_get(options, "minPartitions"), "minPartitions", None, 1),
        timestamp_strategy=strategy,
        poll_timeout_ms=parse_int(
            _get(options, "kafkaConsumer.pollTimeoutMs"), "kafkaConsumer.pollTimeoutMs", 120_000, 1
        ),
        batch_rows=parse_int(_get(options, "krafty.batchRows"), "krafty.batchRows", None, 1),
        max_records_per_partition=parse_int(
            _get(options, "maxRecordsPerPartition"), "maxRecordsPerPartition", None, 1
        ),
        min_offsets_per_trigger=min_rows,
        max_trigger_delay_ms=parse_duration_ms(_get(options, "maxTriggerDelay"), "maxTriggerDelay", "15m"),
        group_id_prefix=_get(options, "groupIdPrefix"),
        fetch_offset_retries=parse_int(_get(options, "fetchOffset.numRetries"), "fetchOffset.numRetries", 3, 0),
        fetch_offset_retry_interval_ms=parse_int(
            _get(options, "fetchOffset.retryIntervalMs"), "fetchOffset.retryIntervalMs", 1000, 0
        ),
    )


@dataclass(frozen=True)
class WriteOptions:
    kafka: dict
    topic: str | None
    exactly_once: bool = False
    transactional_id_prefix: str | None = None
    include_headers: bool | None = None  # None: write a headers column when there is one (Spark)


def parse_write_options(options) -> WriteOptions:
    check_known(options, WRITE_OPTIONS, "sink")
    kafka = kafka_params(options, reserved=_RESERVED_PRODUCER)
    topic = _get(options, "topic")
    exactly_once = parse_bool(_get(options, "exactlyOnce"), "exactlyOnce", False)
    prefix = _get(options, "transactionalIdPrefix")
    if exactly_once and not topic:
        raise OptionError("krafty sink: option 'exactlyOnce' needs the 'topic' option (one output topic)")
    if exactly_once and "transactional.id" in kafka:
        raise OptionError("krafty sink: with 'exactlyOnce' set 'transactionalIdPrefix', not kafka.transactional.id "
                          "(each task has a transactional id of its own)")
    raw_headers = _get(options, "includeHeaders")
    return WriteOptions(kafka=kafka, topic=str(topic) if topic else None, exactly_once=exactly_once,
                        transactional_id_prefix=str(prefix) if prefix else (f"krafty-spark-{topic}" if topic else None),
                        include_headers=None if raw_headers is None else parse_bool(raw_headers, "includeHeaders",
                                                                                    False))


# ---------------------------------------------------------------------------------------------
# Planning helpers (pure)


def rate_limit(start: dict, latest: dict, max_rows: int) -> dict:
    """Split ``max_rows`` over partitions in proportion to their backlog (Spark's rule).

    ``start``/``latest`` map a partition key to an offset; partitions missing from ``start`` begin
    at 0 for the purpose of sizing. Returns the capped end offsets.
    """
    backlog = {k: max(0, latest[k] - start.get(k, 0)) for k in latest}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(latest)
    out = {}
    given = 0
    shares = {}
    for k, size in backlog.items():
        share = size * max_rows // total
        shares[k] = share
        given += share
    # hand the rounding remainder to the largest backlogs so the whole budget is used
    for k in sorted(backlog, key=lambda k: (-backlog[k], k)):
        if given >= max_rows:
            break
        if shares[k] < backlog[k]:
            shares[k] += 1
            given += 1
    for k in latest:
        out[k] = start.get(k, 0) + shares[k] if backlog[k] else latest[k]
    return out


def split_ranges(ranges: list, min_partitions: int | None, max_records: int | None = None) -> list:
    """Split (topic, partition, start, end) ranges so that none holds more than ``max_records``
    (maxRecordsPerPartition) and there are at least ``min_partitions`` (Spark's
    KafkaOffsetRangeCalculator: the first rule, then the second).

    One Spark partition per topic partition by default; a larger range gets more pieces.
    """
    ranges = [r for r in ranges if r[3] > r[2]]
    if max_records:
        capped = []
        for topic, part, start, end in ranges:
            pieces = -(-(end - start) // max_records)
            size = end - start
            for i in range(pieces):
                capped.append((topic, part, start + size * i // pieces, start + size * (i + 1) // pieces))
        ranges = capped
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r[3] - r[2] for r in ranges)
    out = []
    for topic, part, start, end in ranges:
        size = end - start
        pieces = max(1, min(size, round(size * min_partitions / total)))
        for i in range(pieces):
            a = start + size * i // pieces
            b = start + size * (i + 1) // pieces
            if b > a:
                out.append((topic, part, a, b))
    return out


def offsets_to_json(offsets: dict) -> dict:
    """{(topic, partition): offset} -> Spark Kafka's offset JSON shape {topic: {"p": offset}}."""
    out: dict = {}
    for (t, p), off in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(off)
    return out


def offsets_from_json(doc: dict) -> dict:
    return {(t, int(p)): int(off) for t, parts in doc.items() for p, off in parts.items()}


def admit(start: dict, latest: dict, min_rows: int, max_delay_ms: int, last_trigger_ms: int, now_ms: int) -> bool:
    """minOffsetsPerTrigger with maxTriggerDelay (Spark's KafkaMicroBatchStream.delayBatch): run a
    micro-batch when at least ``min_rows`` records wait or ``max_delay_ms`` passed since the last
    one ran. Partitions missing from ``start`` count from 0."""
    if now_ms - last_trigger_ms >= max_delay_ms:
        return True
    return sum(max(0, off - start.get(tp, 0)) for tp, off in latest.items()) >= min_rows


def offsets_behind_latest(consumed: dict, latest: dict) -> dict:
    """Spark's Kafka source metrics: min/max/avg of (latest offset - consumed offset) per partition,
    as strings (ReportsSourceMetrics); empty when nothing is known yet."""
    behind = [off - consumed[tp] for tp, off in latest.items() if tp in consumed]
    if not behind:
        return {}
    return {"minOffsetsBehindLatest": str(min(behind)), "maxOffsetsBehindLatest": str(max(behind)),
            "avgOffsetsBehindLatest": str(sum(behind) / len(behind))}
