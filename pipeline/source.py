"""The ``krafty`` PySpark data source: Spark's Kafka source and sink, in Python.

Batch and streaming reads, batch and streaming writes, with the option names and the output
schema of Spark's built-in Kafka connector.
"""

from __future__ import annotations

import logging
import time

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from . import client
from .options import (
    OptionError,
    admit,
    offsets_behind_latest,
    offsets_from_json,
    offsets_to_json,
    parse_read_options,
    parse_write_options,
    rate_limit,
    split_ranges,
)

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType(), True), StructField("value", BinaryType(), True)]), True
)


def kafka_schema(include_headers: bool) -> StructType:
    fields = [
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("timestampType", IntegerType(), True),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE, True))
    return StructType(fields)


class KafkaRange(InputPartition):
    """One Spark task: records [start, end) of one topic partition."""

    def __init__(self, topic: str, partition: int, start: int, end: int):
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


class KraftyDataSource(DataSource):
    """``spark.read.format("krafty")`` / ``readStream`` / ``write`` / ``writeStream``."""

    @classmethod
    def name(cls) -> str:
        return "krafty"

    def schema(self):
        from .options import _get, parse_bool

        return kafka_schema(parse_bool(_get(self.options, "includeHeaders"), "includeHeaders", False))

    def reader(self, schema: StructType) -> DataSourceReader:
        return KraftyBatchReader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KraftyStreamReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return KraftyBatchWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        return KraftyStreamWriter(self.options, schema)


log = logging.getLogger("krafty.pipeline")

# Spark's warning when kafka.group.id is set (KafkaSourceProvider.CUSTOM_GROUP_ID_ERROR_MESSAGE); the
# krafty source never joins that group (the name is only given to the driver's metadata client)
_GROUP_ID_WARNING = ("option 'kafka.group.id' is set: Spark's Kafka source uses it as the consumer group of "
                     "every query reading with these options; the krafty source only names its driver client "
                     "with it and joins no group, so queries sharing it do not interfere")


def _check_kafka(opts, what: str) -> None:
    client.check_conf(opts.kafka, what)
    if "group.id" in {k.lower() for k in opts.kafka}:
        log.warning("krafty %s: %s", what, _GROUP_ID_WARNING)


def _metadata(o, default_prefix: str) -> client.Metadata:
    return client.Metadata(o.kafka, group_id_prefix=o.group_id_prefix or default_prefix,
                           retries=o.fetch_offset_retries, retry_interval_ms=o.fetch_offset_retry_interval_ms)


def _read_partition(opts, schema: StructType, part):
    from pyspark.sql.pandas.types import to_arrow_schema

    if not isinstance(part, KafkaRange):
        return  # Spark plans one placeholder partition when partitions() returned none

    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    yield from client.read_range(
        opts.kafka,
        part.topic,
        part.partition,
        part.start,
        part.end,
        fail_on_data_loss=opts.fail_on_data_loss,
        include_headers=opts.include_headers,
        arrow_schema=arrow_schema,
        batch_rows=opts.batch_rows,
        poll_timeout_ms=opts.poll_timeout_ms,
    )


def _check_ranges(starts: dict, ends: dict, fail_on_data_loss: bool, what: str) -> list:
    ranges = []
    for tp, end in sorted(ends.items()):
        start = starts[tp]
        if end < start:
            msg = f"{tp[0]}-{tp[1]}: {what} end offset {end} is before start offset {start}"
            if fail_on_data_loss:
                raise client.data_loss(msg)
            continue
        ranges.append((tp[0], tp[1], start, end))
    return ranges


class KraftyBatchReader(DataSourceReader):
    def __init__(self, options, schema: StructType):
        self.opts = parse_read_options(options, streaming=False)
        self.schema = schema
        _check_kafka(self.opts, "source")

    def partitions(self):
        o = self.opts
        meta = _metadata(o, "spark-kafka-relation")
        try:
            tps = meta.partitions(o.subscription)
            if not tps:
                return []
            marks = meta.watermarks(tps)
            starts = meta.resolve(o.starting, tps, ending=False, strategy=o.timestamp_strategy, marks=marks)
            ends = meta.resolve(o.ending, tps, ending=True, marks=marks)
        finally:
            meta.close()
        for tp in tps:
            if ends[tp] < starts[tp] and not o.ending.per_partition and not o.ending.by_timestamp:
                # latest end before the requested start: nothing to read, not data loss
                ends[tp] = starts[tp]
            if starts[tp] < marks[tp][0]:
                msg = f"{tp[0]}-{tp[1]}: starting offset {starts[tp]} is below the log start {marks[tp][0]}"
                if o.fail_on_data_loss:
                    raise client.data_loss(msg)
        for tp in tps:
            if ends[tp] < starts[tp]:
                raise OptionError(
                    f"{tp[0]}-{tp[1]}: ending offset {ends[tp]} is before starting offset {starts[tp]}"
                )
        ranges = [(t, p, starts[(t, p)], ends[(t, p)]) for t, p in tps]
        return [KafkaRange(*r) for r in split_ranges(ranges, o.min_partitions, o.max_records_per_partition)]

    def read(self, partition: KafkaRange):
        return _read_partition(self.opts, self.schema, partition)


class KraftyStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``{topic: {partition: next offset}}``, exactly like Spark's Kafka source."""

    def __init__(self, options, schema: StructType):
        self.opts = parse_read_options(options, streaming=True)
        self.schema = schema
        _check_kafka(self.opts, "streaming source")
        self._meta: client.Metadata | None = None
        self._target: dict | None = None  # Trigger.AvailableNow: never read past this
        self._latest: dict | None = None  # the latest offsets seen by the last latestOffset (metrics)
        self._last_trigger_ms = 0  # when the last micro-batch was admitted (minOffsetsPerTrigger)

    @property
    def meta(self) -> client.Metadata:
        if self._meta is None:
            self._meta = _metadata(self.opts, "spark-kafka-source")
        return self._meta

    def initialOffset(self) -> dict:
        o = self.opts
        tps = self.meta.partitions(o.subscription)
        return offsets_to_json(
            self.meta.resolve(o.starting, tps, ending=False, strategy=o.timestamp_strategy)
        )

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def _latest_marks(self) -> tuple[dict, dict]:
        tps = self.meta.partitions(self.opts.subscription)
        marks = self.meta.watermarks(tps)
        return {tp: hw for tp, (_, hw) in marks.items()}, marks

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        o = self.opts
        begin = offsets_from_json(start)
        if self._target is not None:
            latest = dict(self._target)
            # partitions created after the target was taken are not read by this run
            marks = self.meta.watermarks(list(latest))
        else:
            latest, marks = self._latest_marks()
        for tp in begin:
            if tp not in latest:
                msg = f"partition {tp[0]}-{tp[1]} is gone (topic deleted or partitions reduced)"
                if o.fail_on_data_loss:
                    raise client.data_loss(msg)
        effective = {}
        for tp, hw in latest.items():
            if tp in begin:
                s = begin[tp]
                if hw < s:
                    msg = f"{tp[0]}-{tp[1]}: offset went back from {s} to {hw}"
                    if o.fail_on_data_loss:
                        raise client.data_loss(msg)
                    s = marks[tp][0]  # log was reset: read it again from its start
                elif s < marks[tp][0]:
                    msg = f"{tp[0]}-{tp[1]}: offsets [{s}, {marks[tp][0]}) were deleted before they were read"
                    if o.fail_on_data_loss:
                        raise client.data_loss(msg)
                    s = marks[tp][0]
                effective[tp] = s
            else:
                effective[tp] = marks[tp][0]  # a new partition is read from its start (as Spark does)
        self._latest = dict(latest)
        if o.min_offsets_per_trigger and self._target is None and not isinstance(limit, ReadAllAvailable):
            now_ms = int(time.time() * 1000)
            if not admit(effective, latest, o.min_offsets_per_trigger, o.max_trigger_delay_ms,
                         self._last_trigger_ms, now_ms):
                return start  # fewer than minOffsetsPerTrigger records and maxTriggerDelay not over: wait
            self._last_trigger_ms = now_ms
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(effective, latest, limit.max_rows)
        else:
            end = dict(latest)
        # keep partitions we had but no longer see so Spark's offsets never lose a key
        for tp, s in begin.items():
            end.setdefault(tp, s)
        return offsets_to_json(end)

    def reportLatestOffset(self):
        """The latest offsets the last ``latestOffset`` saw (the query progress's ``latestOffset``)."""
        return offsets_to_json(self._latest) if self._latest else None

    def metrics(self, latest_consumed_offset: dict | None) -> dict:
        """Spark's Kafka source metrics (ReportsSourceMetrics): min/max/avg offsets behind latest of
        the consumed offsets. PySpark 4.3 does not yet call this for Python sources; the same
        figures come from a query's progress with ``pipeline.kafka_metrics``."""
        if not latest_consumed_offset or not self._latest:
            return {}
        return offsets_behind_latest(offsets_from_json(latest_consumed_offset), self._latest)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target, _ = self._latest_marks()

    def partitions(self, start: dict, end: dict):
        o = self.opts
        begin = offsets_from_json(start)
        stop = offsets_from_json(end)
        need_marks = [tp for tp in stop if tp not in begin or stop[tp] < begin[tp]]
        marks = self.meta.watermarks(need_marks) if need_marks else {}
        starts = {}
        for tp, e in stop.items():
            if tp not in begin:
                starts[tp] = min(marks[tp][0], e)
            elif e < begin[tp]:
                # the log was reset (see latestOffset); re-read the new log from its start
                starts[tp] = min(marks[tp][0], e)
            else:
                starts[tp] = begin[tp]
        ranges = _check_ranges(starts, stop, o.fail_on_data_loss, "planned")
        return [KafkaRange(*r) for r in split_ranges(ranges, o.min_partitions, o.max_records_per_partition)]

    def read(self, partition: KafkaRange):
        return _read_partition(self.opts, self.schema, partition)

    def commit(self, end: dict) -> None:
        pass  # offsets live in Spark's checkpoint; nothing is committed to the broker

    def stop(self) -> None:
        if self._meta is not None:
            self._meta.close()


def _validate_sink_schema(schema: StructType, topic_option: str | None, include_headers: bool | None = None) -> None:
    names = {f.name.lower(): f for f in schema.fields}
    if include_headers and "headers" not in names:
        raise OptionError("krafty sink: option 'includeHeaders' is true but the DataFrame has no 'headers' column "
                          "(array<struct<key:string,value:binary>>)")
    if "value" not in names:
        raise OptionError("krafty sink: the DataFrame needs a 'value' column (string or binary)")
    for col in ("key", "value"):
        if col in names and not isinstance(names[col].dataType, (StringType, BinaryType)):
            raise OptionError(
                f"krafty sink: column {col!r} must be string or binary, not {names[col].dataType.simpleString()}"
            )
    if "topic" in names and not isinstance(names["topic"].dataType, StringType):
        raise OptionError("krafty sink: column 'topic' must be a string")
    if topic_option is None and "topic" not in names:
        raise OptionError("krafty sink: set the 'topic' option or give the DataFrame a 'topic' column")
    if "partition" in names and not isinstance(names["partition"].dataType, (IntegerType, LongType)):
        raise OptionError("krafty sink: column 'partition' must be an int")
    if "headers" in names:
        t = names["headers"].dataType
        ok = (
            isinstance(t, ArrayType)
            and isinstance(t.elementType, StructType)
            and [f.name for f in t.elementType.fields] == ["key", "value"]
        )
        if not ok:
            raise OptionError("krafty sink: column 'headers' must be array<struct<key:string,value:binary>>")


class _Written(WriterCommitMessage):
    def __init__(self, count: int):
        self.count = count


def _write(opts, iterator, streaming: bool) -> _Written:
    """One task's rows: at least once, or with ``exactlyOnce`` in a transaction of this task slot's
    transactional id, recording the micro-batch as done (client.write_batches_exactly_once)."""
    if opts.include_headers is False:  # includeHeaders=false: a headers column is not written
        iterator = (b.drop_columns([n for n in b.schema.names if n.lower() == "headers"]) for b in iterator)
    if not opts.exactly_once:
        return _Written(client.write_batches(opts.kafka, opts.topic, iterator))
    from pyspark import TaskContext

    ctx = TaskContext.get()
    batch_id = ctx.getLocalProperty("streaming.sql.batchId") if streaming else None
    tid = f"{opts.transactional_id_prefix}-{ctx.partitionId()}"
    return _Written(client.write_batches_exactly_once(opts.kafka, opts.topic, iterator, tid,
                                                      int(batch_id) if batch_id is not None else None))


class KraftyBatchWriter(DataSourceArrowWriter):
    def __init__(self, options, schema: StructType):
        self.opts = parse_write_options(options)
        _validate_sink_schema(schema, self.opts.topic, self.opts.include_headers)
        _check_kafka(self.opts, "sink")

    def write(self, iterator):
        return _write(self.opts, iterator, streaming=False)


class KraftyStreamWriter(DataSourceStreamArrowWriter):
    """At-least-once like Spark's Kafka sink (a batch replayed after a failure is written again),
    or exactly once with the ``exactlyOnce`` option."""

    def __init__(self, options, schema: StructType):
        self.opts = parse_write_options(options)
        _validate_sink_schema(schema, self.opts.topic, self.opts.include_headers)
        _check_kafka(self.opts, "sink")

    def write(self, iterator):
        return _write(self.opts, iterator, streaming=True)

    def commit(self, messages, batchId: int) -> None:
        pass

    def abort(self, messages, batchId: int) -> None:
        pass
