"""Kafka client side of the krafty Spark data source (confluent-kafka / librdkafka).

* ``Metadata`` runs on the driver: lists partitions and resolves earliest/latest/timestamp
  offsets. It never joins a consumer group and never commits.
* ``read_range`` runs in an executor task: it assigns one topic partition at an explicit offset
  and yields Arrow record batches of at most ``batch_rows`` rows until the planned end offset,
  so memory stays bounded whatever the size of the partition.
* ``write_batches`` runs in an executor task: an idempotent producer (acks=all) that raises if
  any record was not acknowledged.
* ``write_batches_exactly_once`` (sink option ``exactlyOnce``): the task's rows in one Kafka
  transaction; with a micro-batch id, the transaction also records the batch as done (see there),
  so a batch that Spark runs again after a failure is not written twice.
"""

from __future__ import annotations

import time
import uuid

import confluent_kafka as ck

from .options import EARLIEST, LATEST, OffsetSpec, Subscription


class DataLossError(RuntimeError):
    """Records that the query planned to read are gone (deleted, truncated or topic recreated)."""


DATA_LOSS_HINT = (
    "Some data may have been lost because it is no longer available in the broker: the data "
    "may have been aged out by retention, deleted, or the topic was deleted and recreated. "
    "If you want your query to continue in that case, set the source option "
    '"failOnDataLoss" to "false".'
)


def data_loss(message: str) -> DataLossError:
    return DataLossError(f"krafty data loss: {message}. {DATA_LOSS_HINT}")


def _consumer(kafka: dict, **extra) -> ck.Consumer:
    conf = {
        # librdkafka insists on a group.id; we never subscribe, fetch group offsets or commit.
        "group.id": f"krafty-spark-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "enable.partition.eof": True,
        # Spark's Kafka source (Java client) reads uncommitted by default; librdkafka would not
        "isolation.level": "read_uncommitted",
        "client.id": "krafty-spark",
        "socket.timeout.ms": 30000,
    }
    conf.update(kafka)
    conf.update(extra)
    return ck.Consumer(conf)


class Metadata:
    """Driver-side lookups: topic partitions and offsets."""

    def __init__(self, kafka: dict, timeout: float = 30.0):
        self.kafka = dict(kafka)
        self.timeout = timeout
        self._c: ck.Consumer | None = None

    @property
    def consumer(self) -> ck.Consumer:
        if self._c is None:
            self._c = _consumer(self.kafka)
        return self._c

    def close(self) -> None:
        if self._c is not None:
            try:
                self._c.close()
            finally:
                self._c = None

    def partitions(self, sub: Subscription) -> list[tuple[str, int]]:
        if sub.kind == "assign":
            return list(sub.assigned)
        if sub.kind == "subscribe" and len(sub.topics) == 1:
            md = self.consumer.list_topics(sub.topics[0], timeout=self.timeout)
        else:
            md = self.consumer.list_topics(timeout=self.timeout)
        out = []
        for name, tmd in md.topics.items():
            if tmd.error is not None:
                if tmd.error.code() == ck.KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue
                if sub.kind == "subscribe" and name in sub.topics:
                    raise ck.KafkaException(tmd.error)
                continue
            if sub.kind == "subscribePattern" and name.startswith("__"):
                continue  # internal topics, like Kafka's pattern subscription
            if sub.matches(name):
                out.extend((name, p) for p in tmd.partitions)
        return sorted(out)

    def watermarks(self, tps) -> dict:
        """{(topic, partition): (low, high)} — the log start and the high watermark."""
        out = {}
        for t, p in tps:
            out[(t, p)] = self.consumer.get_watermark_offsets(
                ck.TopicPartition(t, p), timeout=self.timeout, cached=False
            )
        return out

    def for_times(self, wanted: dict) -> dict:
        """{tp: ts} -> {tp: first offset with timestamp >= ts, or None if there is none}."""
        if not wanted:
            return {}
        res = self.consumer.offsets_for_times(
            [ck.TopicPartition(t, p, int(ts)) for (t, p), ts in wanted.items()], timeout=self.timeout
        )
        out = {}
        for tp in res:
            if tp.error is not None:
                raise ck.KafkaException(tp.error)
            out[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else None
        return out

    def resolve(self, spec: OffsetSpec, tps, *, ending: bool, strategy: str = "error", marks=None) -> dict:
        """Turn an OffsetSpec into concrete offsets for the given partitions."""
        marks = marks if marks is not None else self.watermarks(tps)
        out = {}
        if spec.by_timestamp:
            if spec.global_timestamp is not None:
                wanted = {tp: spec.global_timestamp for tp in tps}
            else:
                missing = [tp for tp in tps if tp not in spec.per_partition]
                if missing and not ending:
                    raise ValueError(
                        f"startingOffsetsByTimestamp does not cover partitions {missing}; give a timestamp "
                        "for every partition read"
                    )
                wanted = {tp: spec.per_partition[tp] for tp in tps if tp in spec.per_partition}
            found = self.for_times(wanted)
            for tp in tps:
                if tp not in wanted:
                    out[tp] = marks[tp][1] if spec.default == LATEST else marks[tp][0]
                    continue
                off = found.get(tp)
                if off is None:
                    if ending or strategy == "latest":
                        off = marks[tp][1]
                    else:
                        raise ValueError(
                            f"no record in {tp[0]}-{tp[1]} has a timestamp >= {wanted[tp]} "
                            "(set startingOffsetsByTimestampStrategy=latest to start at the end instead)"
                        )
                out[tp] = off
            return out
        for tp in tps:
            off = spec.per_partition.get(tp, spec.default)
            if off == EARLIEST:
                off = marks[tp][0]
            elif off == LATEST:
                off = marks[tp][1]
            out[tp] = off
        if spec.per_partition:
            unknown = set(spec.per_partition) - set(tps)
            if unknown:
                raise ValueError(f"offsets given for partitions that are not read: {sorted(unknown)}")
        return out


def read_range(
    kafka: dict,
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    fail_on_data_loss: bool,
    include_headers: bool,
    arrow_schema,
    batch_rows: int = 8192,
    poll_timeout_ms: int = 120_000,
):
    """Yield pyarrow.RecordBatch for records [start, end) of one partition, in offset order."""
    import pyarrow as pa

    if end <= start:
        return
    # Bounded prefetch: librdkafka buffers at most ~16 MB (queued.max.messages.kbytes) for the one
    # assigned partition; the task itself holds at most batch_rows decoded records.
    c = _consumer(
        kafka,
        **{
            "queued.max.messages.kbytes": int(kafka.get("queued.max.messages.kbytes", 16384)),
            "queued.min.messages": int(kafka.get("queued.min.messages", 100000)),
            "fetch.queue.backoff.ms": int(kafka.get("fetch.queue.backoff.ms", 10)),
        },
    )
    where = f"{topic}-{partition}"
    cols: tuple[list, ...] = ([], [], [], [], [], [], [], [])
    keys, values, offsets, stamps, stypes, headers = cols[0], cols[1], cols[4], cols[5], cols[6], cols[7]

    def flush():
        n = len(offsets)
        arrays = [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array([topic] * n, pa.string()),
            pa.array([partition] * n, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array(stamps, pa.int64()).cast(arrow_schema.field("timestamp").type),
            pa.array(stypes, pa.int32()),
        ]
        if include_headers:
            arrays.append(pa.array(headers, arrow_schema.field("headers").type))
        batch = pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)
        for col in cols:
            col.clear()
        return batch

    try:
        c.assign([ck.TopicPartition(topic, partition, start)])
        expected = start
        last_progress = time.monotonic()
        low, low_checked_at = -1, 0.0
        while expected < end:
            # consume() waits for num_messages or the timeout, so never ask for more than is left
            want = max(1, min(batch_rows - len(offsets), end - expected))
            msgs = c.consume(num_messages=want, timeout=0.5)
            if not msgs:
                if (time.monotonic() - last_progress) * 1000 > poll_timeout_ms:
                    raise TimeoutError(
                        f"krafty: no record from {where} at offset {expected} for {poll_timeout_ms} ms "
                        "(kafkaConsumer.pollTimeoutMs)"
                    )
                continue
            last_progress = time.monotonic()
            # Fast path (the common case): no error events, dense offsets starting where we are
            # and ending before the planned end — take whole columns with comprehensions.
            n = len(msgs)
            first, last = msgs[0], msgs[-1]
            if (
                first.error() is None
                and last.error() is None
                and first.offset() == expected
                and last.offset() == expected + n - 1
                and last.offset() < end
                and not any([m.error() is not None for m in msgs])
            ):
                keys.extend([m.key() for m in msgs])
                values.extend([m.value() for m in msgs])
                offsets.extend(range(expected, expected + n))
                ts = [m.timestamp() for m in msgs]
                stamps.extend([t * 1000 if k != ck.TIMESTAMP_NOT_AVAILABLE else None for k, t in ts])
                stypes.extend([k - 1 if k != ck.TIMESTAMP_NOT_AVAILABLE else -1 for k, _ in ts])
                if include_headers:
                    headers.extend(
                        [
                            [{"key": k, "value": v} for k, v in h] if h else None
                            for h in [m.headers() for m in msgs]
                        ]
                    )
                expected += n
                if len(offsets) >= batch_rows:
                    yield flush()
                continue
            for m in msgs:
                err = m.error()
                if err is not None:
                    code = err.code()
                    if code == ck.KafkaError._PARTITION_EOF:
                        # The log ends before the planned end offset: it was truncated or recreated.
                        if m.offset() >= end:
                            expected = end
                            break
                        _, high = c.get_watermark_offsets(
                            ck.TopicPartition(topic, partition), timeout=30, cached=False
                        )
                        if high >= end:
                            continue  # a stale end-of-partition event (e.g. a new leader catching up)
                        msg = (
                            f"{where}: planned to read offsets [{expected}, {end}) but the log ends at {high}"
                        )
                        if fail_on_data_loss:
                            raise data_loss(msg)
                        expected = end
                        break
                    if code == ck.KafkaError._AUTO_OFFSET_RESET or code == ck.KafkaError.OFFSET_OUT_OF_RANGE:
                        low, high = c.get_watermark_offsets(
                            ck.TopicPartition(topic, partition), timeout=30, cached=False
                        )
                        msg = f"{where}: offset {expected} is out of range, the log now holds [{low}, {high})"
                        if fail_on_data_loss:
                            raise data_loss(msg)
                        if expected < low < end:
                            expected = low
                            c.assign([ck.TopicPartition(topic, partition, low)])
                            break
                        expected = end
                        break
                    raise ck.KafkaException(err)
                off = m.offset()
                if off >= end:
                    expected = end
                    break
                if off < expected:
                    continue  # never hand out a record twice
                if off > expected and fail_on_data_loss:
                    # A gap is normal for compacted topics and transaction markers; it is data
                    # loss only if the log start moved past what we expected to read. Ask the
                    # broker at most once a second (compacted topics have many gaps).
                    if time.monotonic() - low_checked_at > 1.0:
                        low, _ = c.get_watermark_offsets(
                            ck.TopicPartition(topic, partition), timeout=30, cached=False
                        )
                        low_checked_at = time.monotonic()
                    if low > expected:
                        raise data_loss(
                            f"{where}: offsets [{expected}, {min(low, off)}) were deleted before they were read"
                        )
                keys.append(m.key())
                values.append(m.value())
                offsets.append(off)
                ttype, ts = m.timestamp()
                stamps.append(ts * 1000 if ttype != ck.TIMESTAMP_NOT_AVAILABLE else None)
                # Kafka: 0 = CreateTime, 1 = LogAppendTime; librdkafka counts from 1
                stypes.append(ttype - 1 if ttype != ck.TIMESTAMP_NOT_AVAILABLE else -1)
                if include_headers:
                    h = m.headers()
                    headers.append([{"key": k, "value": v} for k, v in h] if h else None)
                expected = off + 1
                if len(offsets) >= batch_rows:
                    yield flush()
            else:
                continue
        if offsets:
            yield flush()
    finally:
        c.close()


class DeliveryError(RuntimeError):
    pass


def producer(kafka: dict) -> ck.Producer:
    conf = {
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "client.id": "krafty-spark-writer",
    }
    conf.update(kafka)
    return ck.Producer(conf)


def _produce_rows(p: ck.Producer, default_topic: str | None, batches, failures: list) -> int:
    """Produce every row of an iterator of pyarrow.RecordBatch; stops at the first failed delivery."""

    def on_delivery(err, msg):
        if err is not None and len(failures) < 10:
            failures.append(f"{msg.topic()}[{msg.partition()}]: {err}")

    n = 0
    for batch in batches:
        names = batch.schema.names
        col = {name.lower(): batch.column(i).to_pylist() for i, name in enumerate(names)}
        values = col["value"]
        keys = col.get("key")
        topics = col.get("topic")
        parts = col.get("partition")
        hdrs = col.get("headers")
        for i in range(batch.num_rows):
            topic = default_topic or (topics[i] if topics is not None else None)
            if not topic:
                raise ValueError(
                    "krafty sink: row has no topic; set the 'topic' option or a non-null 'topic' column"
                )
            kwargs = {"value": values[i], "on_delivery": on_delivery}
            if keys is not None and keys[i] is not None:
                kwargs["key"] = keys[i]
            if parts is not None and parts[i] is not None:
                kwargs["partition"] = int(parts[i])
            if hdrs is not None and hdrs[i]:
                kwargs["headers"] = [(h["key"], h["value"]) for h in hdrs[i]]
            while True:
                try:
                    p.produce(topic, **kwargs)
                    break
                except BufferError:
                    p.poll(0.05)  # local queue full: wait for acknowledgements (backpressure)
            n += 1
            if failures:
                break
        p.poll(0)
        if failures:
            break
    return n


def write_batches(kafka: dict, default_topic: str | None, batches) -> int:
    """Produce every row of an iterator of pyarrow.RecordBatch; return the number written."""
    p = producer(kafka)
    failures: list = []
    n = _produce_rows(p, default_topic, batches, failures)
    remaining = p.flush(120)
    if failures:
        raise DeliveryError("krafty sink: records were not acknowledged: " + "; ".join(failures))
    if remaining:
        raise DeliveryError(f"krafty sink: {remaining} records still unacknowledged after 120 s")
    return n


def write_batches_exactly_once(kafka: dict, topic: str, batches, transactional_id: str,
                               batch_id: int | None = None, timeout: float = 120.0) -> int:
    """Write every row in one transaction of the producer ``transactional_id`` (one per Spark task
    slot: a retried or speculative attempt of the task fences the earlier one, whose open
    transaction the coordinator aborts). Returns the rows written (0 when skipped).

    With ``batch_id`` (a streaming micro-batch), the same transaction commits ``batch_id + 1`` as
    the offset of the consumer group ``transactional_id`` on ``topic`` partition 0
    (TxnOffsetCommit: it becomes visible only if the transaction commits). A task that finds that
    offset above ``batch_id`` (read with ``require_stable``) knows its rows of this batch are
    already in the topic, and writes nothing: Spark re-runs a micro-batch with the same id and
    the same input when the query failed or stopped before the batch was recorded as done."""
    conf = {**kafka, "transactional.id": transactional_id,
            "transaction.timeout.ms": int(timeout * 1000), "message.timeout.ms": int(timeout * 1000)}
    p = producer(conf)
    group = None
    try:
        p.init_transactions(timeout)
        if batch_id is not None:
            group = _consumer(kafka, **{"group.id": transactional_id, "isolation.level": "read_committed"})
            (done,) = group.committed([ck.TopicPartition(topic, 0)], timeout=timeout)
            if done.error is None and done.offset > batch_id:
                return 0
        p.begin_transaction()
        failures: list = []
        n = _produce_rows(p, topic, batches, failures)
        remaining = p.flush(timeout)
        if failures or remaining:
            p.abort_transaction(timeout)
            raise DeliveryError("krafty sink: records were not acknowledged (transaction aborted): "
                                + ("; ".join(failures) or f"{remaining} unanswered"))
        if group is not None:
            p.send_offsets_to_transaction([ck.TopicPartition(topic, 0, batch_id + 1)],
                                          group.consumer_group_metadata(), timeout)
        p.commit_transaction(timeout)
        return n
    finally:
        if group is not None:
            group.close()
