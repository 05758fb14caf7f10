"""One small synchronous adapter per real Kafka client, so that tests can be parametrised per client.

Every adapter talks to the broker only through the client library's public API (or the kcat
binary). Consumers never join a group: they assign partitions and seek.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, field

MAX_MESSAGE = 8 * 1024 * 1024  # client-side request/message size limits for the 1 MiB value tests
CODECS = ["gzip", "snappy", "lz4", "zstd"]


@dataclass
class Rec:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp: int | None = None  # ms; None = let the client pick


@dataclass
class Got:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp: int | None


class ClientError(AssertionError):
    pass


def _got(m) -> Got:
    """A kafka-python or aiokafka ConsumerRecord as a Got."""
    ts = m.timestamp if m.timestamp is not None and m.timestamp >= 0 else None
    return Got(m.offset, m.key, m.value, [(k, v) for k, v in (m.headers or [])], ts)


class _PollingReader:
    """read/read_extra over a subclass's ``_poll(timeout)`` that appends to ``self.pending``;
    ``POLLS`` are its poll timeouts while waiting for records and for stragglers, in the client's unit."""

    POLLS = (0.5, 0.3)

    def read(self, n, timeout=60):
        deadline = time.monotonic() + timeout
        while len(self.pending) < n and time.monotonic() < deadline:
            self._poll(self.POLLS[0])
        out, self.pending = self.pending[:n], self.pending[n:]
        return out

    def read_extra(self, wait=2.0):
        """Whatever else arrives within `wait` seconds (for 'nothing more' checks)."""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            self._poll(self.POLLS[1])
        out, self.pending = self.pending, []
        return out


def _acks_str(acks) -> str:
    return {0: "0", 1: "1", "all": "all", -1: "all"}[acks]


# =========================================================================== confluent-kafka
class Confluent:
    name = "confluent-kafka"
    has_admin = True
    null_header_values = True
    per_record_headers = True
    sets_timestamps = True

    def producer_conf(self, bootstrap, acks="all", compression=None, idempotent=False, **extra):
        conf = {
            "bootstrap.servers": bootstrap,
            "acks": _acks_str(acks),
            "compression.type": compression or "none",
            "enable.idempotence": bool(idempotent),
            "linger.ms": 5,
            "message.max.bytes": MAX_MESSAGE,
            "message.timeout.ms": 60000,
            "request.timeout.ms": 30000,
        }
        conf.update(extra)
        return conf

    def produce(
        self,
        bootstrap,
        topic,
        recs,
        partition=0,
        acks="all",
        compression=None,
        idempotent=False,
        timeout=90,
        **extra,
    ):
        from confluent_kafka import KafkaException, Producer

        p = Producer(self.producer_conf(bootstrap, acks, compression, idempotent, **extra))
        offsets: list = [None] * len(recs)
        errors: list = []

        def make_cb(i):
            def cb(err, msg):
                if err is not None:
                    errors.append((i, err))
                else:
                    offsets[i] = msg.offset()

            return cb

        for i, r in enumerate(recs):
            while True:
                try:
                    p.produce(
                        topic,
                        value=r.value,
                        key=r.key,
                        partition=partition,
                        headers=list(r.headers) if r.headers else None,
                        timestamp=r.timestamp or 0,
                        on_delivery=make_cb(i),
                    )
                    break
                except BufferError:
                    p.poll(0.05)
                except KafkaException as e:
                    raise ClientError(f"confluent produce() raised {e}") from e
            p.poll(0)
        left = p.flush(timeout)
        if left:
            raise ClientError(
                f"confluent producer: {left} messages undelivered after {timeout}s; errors={errors[:3]}"
            )
        if errors:
            raise ClientError(f"confluent producer: {len(errors)} delivery errors, first: {errors[0][1]}")
        if acks == 0:
            return None
        return offsets

    def consumer(self, bootstrap, topic, partition=0, start="earliest"):
        return _ConfluentConsumer(bootstrap, topic, partition, start)

    def offsets_for_time(self, bootstrap, topic, partition, ts):
        from confluent_kafka import TopicPartition

        c = _ConfluentConsumer.make(bootstrap)
        try:
            res = c.offsets_for_times([TopicPartition(topic, partition, ts)], timeout=30)
            if res[0].error:
                raise ClientError(f"offsets_for_times error: {res[0].error}")
            return res[0].offset if res[0].offset >= 0 else None
        finally:
            c.close()

    def watermarks(self, bootstrap, topic, partition=0):
        from confluent_kafka import TopicPartition

        c = _ConfluentConsumer.make(bootstrap)
        try:
            return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=30, cached=False)
        finally:
            c.close()

    # ---- admin
    def _admin(self, bootstrap):
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": bootstrap})

    def create_topic(self, bootstrap, name, partitions=1, configs=None):
        from confluent_kafka.admin import NewTopic

        admin = self._admin(bootstrap)  # must outlive the futures (else: _DESTROY)
        fs = admin.create_topics(
            [
                NewTopic(
                    name,
                    num_partitions=partitions,
                    replication_factor=1 if partitions != -1 else -1,
                    config=dict(configs or {}),
                )
            ],
            operation_timeout=30,
            request_timeout=60,
        )
        fs[name].result(60)

    def delete_topic(self, bootstrap, name):
        admin = self._admin(bootstrap)
        fs = admin.delete_topics([name], operation_timeout=30, request_timeout=60)
        fs[name].result(60)

    def create_partitions(self, bootstrap, name, total):
        from confluent_kafka.admin import NewPartitions

        admin = self._admin(bootstrap)
        fs = admin.create_partitions([NewPartitions(name, total)], operation_timeout=30, request_timeout=60)
        fs[name].result(60)

    def topic_configs(self, bootstrap, name) -> dict[str, str | None]:
        from confluent_kafka.admin import ConfigResource

        admin = self._admin(bootstrap)
        fs = admin.describe_configs([ConfigResource("topic", name)], request_timeout=60)
        (fut,) = fs.values()
        return {k: v.value for k, v in fut.result(60).items()}

    def topics(self, bootstrap) -> dict[str, int]:
        md = self._admin(bootstrap).list_topics(timeout=30)
        return {t.topic: len(t.partitions) for t in md.topics.values() if t.error is None}

    def brokers(self, bootstrap) -> dict[int, str]:
        md = self._admin(bootstrap).list_topics(timeout=30)
        return {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()}


class _ConfluentConsumer(_PollingReader):
    @staticmethod
    def make(bootstrap, eof=False):
        from confluent_kafka import Consumer

        return Consumer(
            {
                "enable.partition.eof": eof,
                "bootstrap.servers": bootstrap,
                # group.id is required by librdkafka's Consumer; we never subscribe nor commit.
                "group.id": f"it-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                "fetch.max.bytes": 64 * 1024 * 1024,
                "max.partition.fetch.bytes": 16 * 1024 * 1024,
                "receive.message.max.bytes": 80 * 1024 * 1024,
            }
        )

    def __init__(self, bootstrap, topic, partition, start):
        from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition

        self.topic, self.partition = topic, partition
        self.c = self.make(bootstrap, eof=True)
        off = {"earliest": OFFSET_BEGINNING, "latest": OFFSET_END}.get(start, start)
        self.tp = TopicPartition(topic, partition, off)
        self.c.assign([self.tp])
        self.pending: list[Got] = []
        self.eof_at: int | None = None
        if start == "latest":
            # Wait for the partition-EOF event: it proves OFFSET_END was resolved and fetched from,
            # before the caller produces anything new.
            deadline = time.monotonic() + 60
            while self.eof_at is None and time.monotonic() < deadline:
                self._poll(0.2)
            if self.eof_at is None:
                raise ClientError(
                    "confluent consumer never reached partition EOF after seeking to OFFSET_END"
                )

    def _poll(self, timeout):
        from confluent_kafka import KafkaError

        for m in self.c.consume(1000, timeout):
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    if m.topic() == self.topic and m.partition() == self.partition:
                        self.eof_at = m.offset()
                    continue
                if m.error().fatal() or m.topic() == self.topic:
                    raise ClientError(f"confluent consumer error: {m.error()}")
                continue
            ts_type, ts = m.timestamp()
            self.pending.append(
                Got(m.offset(), m.key(), m.value(), list(m.headers() or []), ts if ts_type else None)
            )

    def close(self):
        self.c.close()


# =========================================================================== kafka-python
class KafkaPython:
    name = "kafka-python"
    has_admin = True
    null_header_values = False  # its producer rejects (str, None) headers client-side
    per_record_headers = True
    sets_timestamps = True

    def produce(
        self,
        bootstrap,
        topic,
        recs,
        partition=0,
        acks="all",
        compression=None,
        idempotent=False,
        timeout=90,
        **extra,
    ):
        from kafka import KafkaProducer
        from kafka.errors import KafkaError

        kw = dict(
            bootstrap_servers=bootstrap,
            acks={0: 0, 1: 1, "all": "all"}[acks],
            compression_type=compression,
            enable_idempotence=bool(idempotent),
            linger_ms=5,
            max_request_size=MAX_MESSAGE,
            request_timeout_ms=30000,
            max_block_ms=60000,
        )
        kw.update(extra)
        p = KafkaProducer(**kw)
        try:
            try:
                futs = [
                    p.send(
                        topic,
                        value=r.value,
                        key=r.key,
                        partition=partition,
                        headers=list(r.headers) if r.headers else None,
                        timestamp_ms=r.timestamp,
                    )
                    for r in recs
                ]
            except KafkaError as e:
                raise ClientError(f"kafka-python send() raised {e!r}") from e
            p.flush(timeout)
            mds = []
            for f in futs:
                try:
                    mds.append(f.get(timeout=timeout))
                except Exception as e:
                    raise ClientError(f"kafka-python send failed: {e!r}") from e
        finally:
            p.close(timeout=10)
        return None if acks == 0 else [m.offset for m in mds]

    def consumer(self, bootstrap, topic, partition=0, start="earliest"):
        return _KPConsumer(bootstrap, topic, partition, start)

    def offsets_for_time(self, bootstrap, topic, partition, ts):
        from kafka import TopicPartition

        c = _KPConsumer.make(bootstrap)
        try:
            tp = TopicPartition(topic, partition)
            res = c.offsets_for_times({tp: ts}, timeout_ms=30000)
            r = res.get(tp)
            return None if r is None else r.offset
        finally:
            c.close()

    # ---- admin
    def _admin(self, bootstrap):
        from kafka import KafkaAdminClient

        return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=60000)

    def create_topic(self, bootstrap, name, partitions=1, configs=None):
        a = self._admin(bootstrap)
        try:
            spec = {
                "num_partitions": partitions,
                "replication_factor": 1 if partitions != -1 else -1,
                "configs": dict(configs or {}),
            }
            a.create_topics({name: spec}, timeout_ms=30000)
        finally:
            a.close()

    def delete_topic(self, bootstrap, name):
        a = self._admin(bootstrap)
        try:
            a.delete_topics([name], timeout_ms=30000)
        finally:
            a.close()

    def create_partitions(self, bootstrap, name, total):
        a = self._admin(bootstrap)
        try:
            a.create_partitions({name: total}, timeout_ms=30000)
        finally:
            a.close()

    def topic_configs(self, bootstrap, name):
        from kafka.admin import ConfigResource, ConfigResourceType

        a = self._admin(bootstrap)
        try:
            res = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)], config_filter="all")
        finally:
            a.close()
        entries = res["topic"][name]
        return {k: (v.get("value") if isinstance(v, dict) else v) for k, v in entries.items()}

    def topics(self, bootstrap):
        a = self._admin(bootstrap)
        try:
            return {
                t["name"] if "name" in t else t["topic"]: len(t["partitions"])
                for t in a.describe_topics()
                if not t.get("error_code")
            }
        finally:
            a.close()

    def brokers(self, bootstrap):
        a = self._admin(bootstrap)
        try:
            cl = a.describe_cluster()
        finally:
            a.close()
        return {b.get("broker_id", b.get("node_id")): f"{b['host']}:{b['port']}" for b in cl["brokers"]}


class _KPConsumer(_PollingReader):
    POLLS = (500, 300)  # ms

    @staticmethod
    def make(bootstrap):
        from kafka import KafkaConsumer

        return KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            request_timeout_ms=30000,
            fetch_max_bytes=64 * 1024 * 1024,
            max_partition_fetch_bytes=16 * 1024 * 1024,
        )

    def __init__(self, bootstrap, topic, partition, start):
        from kafka import TopicPartition

        self.c = self.make(bootstrap)
        self.tp = TopicPartition(topic, partition)
        self.c.assign([self.tp])
        if start == "earliest":
            self.c.seek_to_beginning(self.tp)
        elif start == "latest":
            self.c.seek_to_end(self.tp)
        else:
            self.c.seek(self.tp, start)
        self.c.position(self.tp)  # resolves the logical offset now
        self.pending: list[Got] = []

    def _poll(self, timeout_ms):
        for recs in self.c.poll(timeout_ms=timeout_ms).values():
            for m in recs:
                self.pending.append(_got(m))

    def close(self):
        self.c.close()


# =========================================================================== aiokafka
class AioKafka:
    name = "aiokafka"
    has_admin = True
    null_header_values = True
    per_record_headers = True
    sets_timestamps = True

    @staticmethod
    def run(coro):
        return asyncio.run(coro)

    def produce(
        self,
        bootstrap,
        topic,
        recs,
        partition=0,
        acks="all",
        compression=None,
        idempotent=False,
        timeout=90,
        **extra,
    ):
        from aiokafka import AIOKafkaProducer

        async def go():
            kw = dict(
                bootstrap_servers=bootstrap,
                acks={0: 0, 1: 1, "all": "all"}[acks],
                compression_type=compression,
                enable_idempotence=bool(idempotent),
                linger_ms=5,
                max_request_size=MAX_MESSAGE,
                request_timeout_ms=30000,
            )
            kw.update(extra)
            p = AIOKafkaProducer(**kw)
            await p.start()
            try:
                futs = [
                    await p.send(
                        topic,
                        value=r.value,
                        key=r.key,
                        partition=partition,
                        timestamp_ms=r.timestamp,
                        headers=list(r.headers) if r.headers else None,
                    )
                    for r in recs
                ]
                return await asyncio.wait_for(asyncio.gather(*futs), timeout)
            finally:
                await p.stop()

        try:
            mds = self.run(go())
        except (ClientError, AssertionError):
            raise
        except Exception as e:
            raise ClientError(f"aiokafka send failed: {e!r}") from e
        return None if acks == 0 else [m.offset for m in mds]

    def consumer(self, bootstrap, topic, partition=0, start="earliest"):
        return _AioConsumer(bootstrap, topic, partition, start)

    def offsets_for_time(self, bootstrap, topic, partition, ts):
        from aiokafka import TopicPartition

        async def go():
            c = _AioConsumer.make(bootstrap)
            await c.start()
            try:
                tp = TopicPartition(topic, partition)
                res = await c.offsets_for_times({tp: ts})
                r = res.get(tp)
                return None if r is None else r.offset
            finally:
                await c.stop()

        return self.run(go())

    # ---- admin
    async def _with_admin(self, bootstrap, fn):
        from aiokafka.admin import AIOKafkaAdminClient

        a = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=60000)
        await a.start()
        try:
            return await fn(a)
        finally:
            await a.close()

    def create_topic(self, bootstrap, name, partitions=1, configs=None):
        from aiokafka.admin import NewTopic

        resp = self.run(
            self._with_admin(
                bootstrap,
                lambda a: a.create_topics(
                    [
                        NewTopic(
                            name, partitions, 1 if partitions != -1 else -1, topic_configs=dict(configs or {})
                        )
                    ],
                    timeout_ms=30000,
                ),
            )
        )
        _raise_response_errors(resp, "aiokafka create_topics")

    def delete_topic(self, bootstrap, name):
        resp = self.run(self._with_admin(bootstrap, lambda a: a.delete_topics([name], timeout_ms=30000)))
        _raise_response_errors(resp, "aiokafka delete_topics")

    def create_partitions(self, bootstrap, name, total):
        from aiokafka.admin import NewPartitions

        resp = self.run(
            self._with_admin(
                bootstrap, lambda a: a.create_partitions({name: NewPartitions(total)}, timeout_ms=30000)
            )
        )
        _raise_response_errors(resp, "aiokafka create_partitions")

    def topic_configs(self, bootstrap, name):
        from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

        resps = self.run(
            self._with_admin(
                bootstrap, lambda a: a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
            )
        )
        out = {}
        for resp in resps:
            _raise_response_errors(resp, "aiokafka describe_configs")
            for res in resp.to_object()["resources"]:
                for e in res["config_entries"]:
                    out[e["config_names"] if "config_names" in e else e["config_name"]] = e["config_value"]
        return out

    def topics(self, bootstrap):
        ts = self.run(self._with_admin(bootstrap, lambda a: a.describe_topics()))
        return {t["topic"]: len(t["partitions"]) for t in ts if not t.get("error_code")}

    def brokers(self, bootstrap):
        cl = self.run(self._with_admin(bootstrap, lambda a: a.describe_cluster()))
        return {b.get("broker_id", b.get("node_id")): f"{b['host']}:{b['port']}" for b in cl["brokers"]}


def _raise_response_errors(resp, what):
    """Raise if any error_code in a (kafka-python style) response object is non-zero."""
    obj = resp.to_object() if hasattr(resp, "to_object") else resp

    def walk(o):
        if isinstance(o, dict):
            code = o.get("error_code")
            if code:
                yield code, o.get("error_message")
            for v in o.values():
                yield from walk(v)
        elif isinstance(o, (list, tuple)):
            for v in o:
                yield from walk(v)

    errs = list(walk(obj))
    if errs:
        from aiokafka.errors import for_code

        code, msg = errs[0]
        raise ClientError(f"{what}: error {code} {for_code(code).__name__}: {msg}")


class _AioConsumer(_PollingReader):
    POLLS = (500, 300)  # ms

    @staticmethod
    def make(bootstrap):
        from aiokafka import AIOKafkaConsumer

        return AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            request_timeout_ms=30000,
            fetch_max_bytes=64 * 1024 * 1024,
            max_partition_fetch_bytes=16 * 1024 * 1024,
        )

    def __init__(self, bootstrap, topic, partition, start):
        from aiokafka import TopicPartition

        self.loop = asyncio.new_event_loop()
        self.tp = TopicPartition(topic, partition)
        self.pending: list[Got] = []

        async def init():
            self.c = self.make(bootstrap)
            await self.c.start()
            self.c.assign([self.tp])
            if start == "earliest":
                await self.c.seek_to_beginning(self.tp)
            elif start == "latest":
                await self.c.seek_to_end(self.tp)
            else:
                self.c.seek(self.tp, start)
            await self.c.position(self.tp)

        try:
            self.loop.run_until_complete(init())
        except BaseException:
            self.close()
            raise

    def _poll(self, timeout_ms):
        data = self.loop.run_until_complete(self.c.getmany(self.tp, timeout_ms=timeout_ms))
        for recs in data.values():
            for m in recs:
                self.pending.append(_got(m))

    def close(self):
        try:
            if getattr(self, "c", None) is not None:
                self.loop.run_until_complete(self.c.stop())
        finally:
            self.loop.close()


# =========================================================================== kcat
KCAT_KEY_DELIM = "\\x1f"  # kcat escape syntax; the byte itself is 0x1f
_KEY_DELIM_BYTE = b"\x1f"


def kcat_bin() -> str:
    path = shutil.which("kcat") or shutil.which("kafkacat")
    if not path:
        raise ClientError("kcat is not installed: run `apt-get install -y kcat` (Debian package kcat)")
    return path


def run_kcat(args, input_bytes=None, timeout=120, check=True):
    cmd = [kcat_bin(), *args]
    try:
        cp = subprocess.run(
            cmd, input=input_bytes, capture_output=True, timeout=timeout, start_new_session=True
        )
    except subprocess.TimeoutExpired as e:
        raise ClientError(f"kcat timed out after {timeout}s: {' '.join(cmd)}\nstderr: {e.stderr!r}") from e
    if check and cp.returncode != 0:
        raise ClientError(
            f"kcat exited {cp.returncode}: {' '.join(cmd)}\nstderr: {cp.stderr.decode(errors='replace')[-2000:]}"
        )
    return cp


class Kcat:
    """kcat 1.7 (librdkafka 2.0 in Debian): -L, -P, -C -e. Text-only payloads, one header set per run."""

    name = "kcat"
    has_admin = False
    null_header_values = False
    per_record_headers = False
    sets_timestamps = False

    def produce(
        self,
        bootstrap,
        topic,
        recs,
        partition=0,
        acks="all",
        compression=None,
        idempotent=False,
        timeout=120,
        **extra,
    ):
        headers = recs[0].headers if recs else []
        for r in recs:
            if list(r.headers) != list(headers):
                raise ValueError("kcat applies one header set to every message of a run")
            for part in (r.key, r.value):
                if part is not None and (b"\n" in part or _KEY_DELIM_BYTE in part or part == b""):
                    raise ValueError("kcat test data must be non-empty and free of newlines/0x1f")
        args = [
            "-b",
            bootstrap,
            "-P",
            "-t",
            topic,
            "-p",
            str(partition),
            "-K",
            KCAT_KEY_DELIM,
            "-Z",
            "-X",
            f"acks={_acks_str(acks)}",
            "-X",
            f"message.max.bytes={MAX_MESSAGE}",
            "-X",
            f"enable.idempotence={'true' if idempotent else 'false'}",
        ]
        if compression:
            args += ["-z", compression]
        for k, v in headers:
            args += ["-H", f"{k}={(v or b'').decode()}"]
        for k, v in extra.items():
            args += ["-X", f"{k}={v}"]
        data = b"".join((r.key or b"") + _KEY_DELIM_BYTE + (r.value or b"") + b"\n" for r in recs)
        cp = run_kcat(args, data, timeout=timeout)
        err = cp.stderr.decode(errors="replace")
        if "failed" in err.lower() or "error" in err.lower():
            raise ClientError(f"kcat producer reported errors: {err[-2000:]}")
        return None

    def consumer(self, bootstrap, topic, partition=0, start="earliest"):
        if start == "latest":
            raise ValueError("kcat cannot tell when its -o end has been resolved")
        return _KcatReader(bootstrap, topic, partition, start)

    def offsets_for_time(self, bootstrap, topic, partition, ts):
        cp = run_kcat(
            [
                "-b",
                bootstrap,
                "-C",
                "-t",
                topic,
                "-p",
                str(partition),
                "-o",
                f"s@{ts}",
                "-c",
                "1",
                "-e",
                "-J",
                "-q",
            ]
        )
        lines = [ln for ln in cp.stdout.decode().splitlines() if ln.strip()]
        return json.loads(lines[0])["offset"] if lines else None

    def metadata(self, bootstrap, topic=None):
        args = ["-b", bootstrap, "-L", "-J"]
        if topic:
            args += ["-t", topic]
        return json.loads(run_kcat(args, timeout=60).stdout)

    def topics(self, bootstrap):
        md = self.metadata(bootstrap)
        return {t["topic"]: len(t["partitions"]) for t in md["topics"] if not t.get("error")}

    def brokers(self, bootstrap):
        return {b["id"]: b["name"] for b in self.metadata(bootstrap)["brokers"]}


class _KcatReader:
    def __init__(self, bootstrap, topic, partition, start):
        self.args = [
            "-b",
            bootstrap,
            "-C",
            "-t",
            topic,
            "-p",
            str(partition),
            "-e",
            "-J",
            "-q",
            "-X",
            "fetch.message.max.bytes=16777216",
            "-X",
            "receive.message.max.bytes=80000000",
        ]
        self.next = {"earliest": "beginning"}.get(start, start)

    def read(self, n, timeout=60):
        out: list[Got] = []
        deadline = time.monotonic() + timeout
        while len(out) < n and time.monotonic() < deadline:
            cp = run_kcat([*self.args, "-o", str(self.next), "-c", str(n - len(out))], timeout=timeout)
            for line in cp.stdout.decode().splitlines():
                if not line.strip():
                    continue
                j = json.loads(line)
                hs = j.get("headers") or []
                out.append(
                    Got(
                        j["offset"],
                        None if j.get("key") is None else j["key"].encode(),
                        None if j.get("payload") is None else j["payload"].encode(),
                        [
                            (hs[i], None if hs[i + 1] is None else hs[i + 1].encode())
                            for i in range(0, len(hs), 2)
                        ],
                        j.get("ts"),
                    )
                )
                self.next = j["offset"] + 1
            if len(out) < n:
                time.sleep(0.3)
        return out

    def read_extra(self, wait=2.0):
        time.sleep(wait)
        cp = run_kcat([*self.args, "-o", str(self.next)])
        return [json.loads(ln) for ln in cp.stdout.decode().splitlines() if ln.strip()]

    def close(self):
        pass


CLIENTS = {c.name: c for c in (Confluent(), KafkaPython(), AioKafka(), Kcat())}
PY_CLIENTS = ["confluent-kafka", "kafka-python", "aiokafka"]
ALL_CLIENTS = [*PY_CLIENTS, "kcat"]
