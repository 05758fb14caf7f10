"""Kafka client side of the krafty Spark data source.

* ``rd_conf`` turns the ``kafka.*`` options (Java client keys too) into librdkafka settings
  (pipeline/kafka_conf.py); ``check_conf`` has librdkafka judge them up front.
* ``Metadata`` runs on the driver (confluent-kafka): lists partitions and resolves
  earliest/latest/timestamp offsets. It never joins a consumer group and never commits.
* ``read_range`` runs in an executor task: Fetch requests at the partition's leader over krafty's
  own protocol client, decoded into Arrow columns without a Python object per record
  (pipeline/fetcher.py, pipeline/arrow_records.py); memory stays bounded by the fetch size
  (``max.partition.fetch.bytes``, default 4 MiB, one fetch in flight) whatever the range.
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

from .options import EARLIEST, LATEST, OffsetSpec, OptionError, Subscription


class KafkaClientError(RuntimeError):
    """The driver's Kafka client could not do a lookup; the message carries what it reported."""


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


_rd_cache: dict = {}


def rd_conf(kafka: dict) -> dict:
    """librdkafka settings of the ``kafka.*`` options (Java client keys translated, stores read
    here: pipeline/kafka_conf.py), cached per process; Java-only keys are named in a warning."""
    from . import kafka_conf

    key = kafka_conf.fingerprint(kafka)
    conf = _rd_cache.get(key)
    if conf is None:
        try:
            conf, dropped = kafka_conf.translate(kafka)
        except kafka_conf.KafkaConfError as e:
            raise OptionError(str(e)) from None
        kafka_conf.warn_dropped(dropped, "Kafka source/sink")
        _rd_cache[key] = conf
    return conf


def check_conf(kafka: dict, what: str) -> None:
    """Let librdkafka judge every ``kafka.*`` option up front: a key neither the Java client nor
    librdkafka knows, or a bad value, is an OptionError naming the option."""
    import re

    conf = {**rd_conf(kafka), "group.id": "krafty-spark-check"}
    try:
        c = ck.Consumer(conf)
    except ck.KafkaException as e:
        err = e.args[0]
        text = err.str() if hasattr(err, "str") else str(err)
        m = re.search(r'property:?\s*"?([A-Za-z0-9_.\-]+)"?', text)
        name = f"kafka.{m.group(1)}" if m else "a kafka.* option"
        raise OptionError(f"krafty {what}: {name} is not usable: {text}") from None
    c.close()


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
    conf.update(rd_conf(kafka))
    conf.update(extra)
    return ck.Consumer(conf)


class Metadata:
    """Driver-side lookups: topic partitions and offsets."""

    def __init__(self, kafka: dict, timeout: float = 30.0, *, group_id_prefix: str | None = None,
                 retries: int = 3, retry_interval_ms: int = 1000):
        self.kafka = dict(kafka)
        self.timeout = timeout
        self._c: ck.Consumer | None = None
        # Spark names the driver's consumer group <groupIdPrefix>-<uuid>-driver unless kafka.group.id
        # is set; the group is never joined (no subscribe, no commit): the name is only seen by the broker
        self.group_id = None if "group.id" in {k.lower() for k in kafka} else \
            f"{group_id_prefix or 'spark-kafka-source'}-{uuid.uuid4()}-driver"
        self.retries, self.retry_interval_ms = retries, retry_interval_ms  # fetchOffset.numRetries/retryIntervalMs

    @property
    def consumer(self) -> ck.Consumer:
        if self._c is None:
            self._errors: list[str] = []
            self._c = _consumer(self.kafka, **({"group.id": self.group_id} if self.group_id else {}),
                                error_cb=self._on_error)
        return self._c

    def _on_error(self, err) -> None:
        # librdkafka reports why it cannot reach the cluster (authentication, TLS, refused
        # connections) here, while a lookup only times out: keep the last few for the message
        self._errors = (self._errors + [err.str()])[-3:]

    def _failed(self, what: str, e: ck.KafkaException) -> Exception:
        try:
            self._c.poll(0.2)  # serves the client's error events (error_cb); nothing is assigned
        except (RuntimeError, ck.KafkaException):
            pass
        seen = "; ".join(dict.fromkeys(self._errors))
        return KafkaClientError(f"krafty: {what} failed: {e.args[0].str() if e.args else e}"
                                + (f" (the Kafka client reported: {seen})" if seen else ""))

    def close(self) -> None:
        if self._c is not None:
            try:
                self._c.close()
            finally:
                self._c = None

    def partitions(self, sub: Subscription) -> list[tuple[str, int]]:
        if sub.kind == "assign":
            return list(sub.assigned)
        try:
            if sub.kind == "subscribe" and len(sub.topics) == 1:
                md = self.consumer.list_topics(sub.topics[0], timeout=self.timeout)
            else:
                md = self.consumer.list_topics(timeout=self.timeout)
        except ck.KafkaException as e:
            raise self._failed("reading the topics' metadata", e) from None
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
            for attempt in range(self.retries + 1):
                try:
                    out[(t, p)] = self.consumer.get_watermark_offsets(
                        ck.TopicPartition(t, p), timeout=self.timeout, cached=False
                    )
                    break
                except ck.KafkaException as e:
                    if attempt == self.retries:
                        raise self._failed(f"looking up the offsets of {t}-{p}", e) from None
                    time.sleep(self.retry_interval_ms / 1000)  # a leader is moving: fetchOffset.retryIntervalMs
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
    batch_rows: int | None = None,
    poll_timeout_ms: int = 120_000,
):
    """Yield pyarrow.RecordBatch for records [start, end) of one partition, in offset order: one
    per fetch (pipeline/fetcher.py), cut into batches of at most ``batch_rows`` rows when set."""
    from . import fetcher

    batches = fetcher.read_range(
        fetch_settings(kafka), topic, partition, start, end, fail_on_data_loss=fail_on_data_loss,
        include_headers=include_headers, arrow_schema=arrow_schema, poll_timeout_ms=poll_timeout_ms,
        data_loss=data_loss)
    for b in batches:
        if batch_rows and b.num_rows > batch_rows:
            for i in range(0, b.num_rows, batch_rows):
                yield b.slice(i, batch_rows)
        else:
            yield b


_settings_cache: dict = {}


def fetch_settings(kafka: dict):
    """The fetcher's connection settings of the ``kafka.*`` options (cached per process)."""
    from . import fetcher, kafka_conf

    key = kafka_conf.fingerprint(kafka)
    s = _settings_cache.get(key)
    if s is not None:
        return s
    conf = {k.lower(): v for k, v in rd_conf(kafka).items()}
    bootstrap = []
    for part in str(conf["bootstrap.servers"]).split(","):
        host, _, port = part.strip().rpartition(":")
        if not host or not port.isdigit():
            raise OptionError(f"option 'kafka.bootstrap.servers': expected HOST:PORT[,HOST:PORT...], got {part!r}")
        bootstrap.append((host.strip("[]"), int(port)))

    def num(*names, default):
        for n in names:
            if n in conf:
                try:
                    return int(conf[n])
                except ValueError:
                    raise OptionError(f"option 'kafka.{n}' must be an integer, got {conf[n]!r}") from None
        return default

    try:
        security = kafka_conf.client_security(conf)
    except kafka_conf.KafkaConfError as e:
        raise OptionError(str(e)) from None
    s = fetcher.FetchSettings(
        bootstrap=tuple(bootstrap),
        security=security,
        client_id=str(conf.get("client.id", "krafty-spark")),
        read_committed=str(conf.get("isolation.level", "read_uncommitted")).lower() == "read_committed",
        max_wait_ms=num("fetch.wait.max.ms", default=500),
        min_bytes=num("fetch.min.bytes", default=1),
        max_bytes=num("fetch.max.bytes", default=52_428_800),
        partition_max_bytes=num("max.partition.fetch.bytes", "fetch.message.max.bytes", default=4 << 20),
        request_timeout_s=num("request.timeout.ms", "socket.timeout.ms", default=30_000) / 1000,
        check_crcs=str(conf.get("check.crcs", "true")).lower() != "false",
        key=key,
    )
    _settings_cache[key] = s
    return s


class DeliveryError(RuntimeError):
    pass


def producer(kafka: dict) -> ck.Producer:
    conf = {
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "client.id": "krafty-spark-writer",
    }
    conf.update(rd_conf(kafka))
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
