"""Fixtures for the Spark pipeline suite (tests/spark, `make test-spark`).

Target selection (environment):
  (default)                  start a krafty node: `python -m krafty node --config FILE`
  KRAFTY_SPARK_TARGET=mock   librdkafka's built-in mock cluster (no timestamp lookups, no topic
                             deletion: tests marked krafty_only are skipped). For checking the
                             pipeline code itself while the broker is unavailable.
  KRAFTY_SPARK_TARGET=host:port   an already running Kafka-compatible broker (left running).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from common.ports import free_port
from pipeline.local_node import answers_api_versions

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

TARGET = os.environ.get("KRAFTY_SPARK_TARGET", "krafty")
MOCK = TARGET == "mock"

pytest.importorskip("pyspark", reason="needs the spark extra: pip install krafty[spark]")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "krafty_only: needs a real broker (skipped on KRAFTY_SPARK_TARGET=mock)"
    )


def pytest_collection_modifyitems(config, items):
    if not MOCK:
        return
    skip = pytest.mark.skip(reason="KRAFTY_SPARK_TARGET=mock: librdkafka's mock cluster lacks this feature")
    for item in items:
        if "krafty_only" in item.keywords and str(item.path).startswith(str(Path(__file__).parent)):
            item.add_marker(skip)


def api_versions_ok(host: str, port: int, timeout: float = 1.0) -> bool:
    """True when the broker answers an ApiVersions v0 request with error code 0."""
    return answers_api_versions(host, port, timeout)


class KraftyProcess:
    """One combined broker+controller krafty node in its own process."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.port = free_port()
        self.cport = free_port()
        self.proc: subprocess.Popen | None = None
        self.log_path = workdir / "node.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _has_broker(self, deadline: float) -> bool:
        """ApiVersions answers as soon as the listener is up; wait until Metadata lists a broker too."""
        import confluent_kafka as ck

        c = ck.Producer({"bootstrap.servers": self.bootstrap, "log_level": 0})
        try:
            while time.monotonic() < deadline:
                try:
                    if c.list_topics(timeout=2).brokers:
                        return True
                except ck.KafkaException:
                    time.sleep(0.3)
            return False
        finally:
            c.flush(0)

    def start(self, timeout: float = 60.0) -> KraftyProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        cfg = self.workdir / "server.properties"
        cfg.write_text(
            "\n".join(
                [
                    "node.id=1",
                    "process.roles=broker,controller",
                    f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.cport}",
                    f"controller.quorum.voters=1@127.0.0.1:{self.cport}",
                    f"log.dirs={self.workdir}/data",
                    "num.partitions=1",
                    "cluster.id=a3JhZnR5LXRlc3Qtbm9kZQ",  # formats the empty data dir on first start
                    # Kafka's own key; checked every second so retention tests need not wait 5 minutes
                    "log.retention.check.interval.ms=1000",
                    "",
                ]
            )
        )
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "krafty", "node", "--config", str(cfg)],
            cwd=str(REPO),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"krafty exited with {self.proc.returncode}:\n{self.tail()}")
            if api_versions_ok("127.0.0.1", self.port):
                if self._has_broker(deadline):
                    return self
            time.sleep(0.2)
        self.close()
        raise RuntimeError(f"krafty did not answer ApiVersions within {timeout}s:\n{self.tail()}")

    def tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def close(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


class MockBroker:
    """librdkafka's in-process mock cluster; lives as long as the client that created it."""

    def __init__(self):
        import confluent_kafka as ck

        self._owner = ck.Producer({"test.mock.num.brokers": 1, "log_level": 3})
        md = self._owner.list_topics(timeout=10)
        self.bootstrap = ",".join(f"{b.host}:{b.port}" for b in md.brokers.values())

    def close(self):
        self._owner.flush(1)
        self._owner = None


@pytest.fixture(scope="session")
def bootstrap(tmp_path_factory):
    """bootstrap.servers of the broker under test, started (and stopped) by this fixture."""
    if MOCK:
        m = MockBroker()
        yield m.bootstrap
        m.close()
        return
    if TARGET != "krafty":
        yield TARGET
        return
    node = KraftyProcess(tmp_path_factory.mktemp("krafty"))
    try:
        node.start()
    except RuntimeError as e:
        pytest.fail(f"krafty did not start: {e}", pytrace=False)
    try:
        yield node.bootstrap
    finally:
        node.close()


@pytest.fixture(scope="session")
def spark():
    import pipeline

    s = pipeline.session("krafty-tests", master="local[2]")
    s.sparkContext.setLogLevel("ERROR")
    yield s
    for q in s.streams.active:
        q.stop()
    s.stop()


class Kafka:
    """Small admin/produce/consume helpers used by the tests (confluent-kafka)."""

    def __init__(self, bootstrap: str):
        import confluent_kafka as ck
        from confluent_kafka.admin import AdminClient

        self.ck = ck
        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap})

    def topic(self, prefix: str = "t", partitions: int = 1, config: dict | None = None) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.create(name, partitions, config)
        return name

    def create(self, name: str, partitions: int = 1, config: dict | None = None, timeout: float = 30) -> None:
        from confluent_kafka.admin import NewTopic

        if MOCK:
            # the mock cluster has no controller for CreateTopics; a producer's metadata request
            # auto-creates the topic (with the mock's default partition count)
            p = self.ck.Producer({"bootstrap.servers": self.bootstrap})
            p.list_topics(name, timeout=10)
            p.flush(1)
            return
        deadline = time.monotonic() + timeout
        while True:
            fut = self.admin.create_topics(
                [NewTopic(name, partitions, 1, config=config or {})], request_timeout=15
            )[name]
            try:
                fut.result()
                break
            except self.ck.KafkaException as e:
                # a topic being deleted can still be there for a moment
                if (
                    e.args[0].code() == self.ck.KafkaError.TOPIC_ALREADY_EXISTS
                    and time.monotonic() < deadline
                ):
                    time.sleep(0.5)
                    continue
                raise
        self.wait_partitions(name, partitions)

    def wait_partitions(self, name: str, partitions: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            md = self.admin.list_topics(name, timeout=10).topics.get(name)
            if md is not None and md.error is None and len(md.partitions) == partitions:
                if all(p.leader >= 0 for p in md.partitions.values()):
                    return
            time.sleep(0.2)
        raise TimeoutError(f"topic {name} has no leaders for {partitions} partitions after {timeout}s")

    def delete(self, name: str, timeout: float = 30) -> None:
        self.admin.delete_topics([name], request_timeout=15)[name].result()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            md = self.admin.list_topics(timeout=10)
            if name not in md.topics:
                return
            time.sleep(0.3)
        raise TimeoutError(f"topic {name} still listed {timeout}s after deletion")

    def set_topic_config(self, name: str, config: dict) -> None:
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

        res = ConfigResource(
            ConfigResource.Type.TOPIC,
            name,
            incremental_configs=[
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in config.items()
            ],
        )
        for fut in self.admin.incremental_alter_configs([res]).values():
            fut.result(30)

    def low_watermark(self, name: str, partition: int = 0) -> int:
        c = self.ck.Consumer(
            {"bootstrap.servers": self.bootstrap, "group.id": "lw", "enable.auto.commit": False}
        )
        try:
            return c.get_watermark_offsets(self.ck.TopicPartition(name, partition), timeout=10, cached=False)[
                0
            ]
        finally:
            c.close()

    def partitions(self, name: str) -> int:
        md = self.admin.list_topics(name, timeout=10).topics[name]
        return len(md.partitions)

    def produce(self, topic: str, records, **conf) -> list:
        """records: iterable of dicts with value and optional key/partition/headers/timestamp.

        Returns the delivered messages as dicts with partition and offset filled in.
        """
        p = self.ck.Producer(
            {"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 5, **conf}
        )
        delivered, errors = [], []

        def cb(err, msg, sent_headers=None, sent_ts=None):
            if err is not None:
                errors.append(err)
            else:
                delivered.append(
                    {
                        "key": msg.key(),
                        "value": msg.value(),
                        "partition": msg.partition(),
                        "offset": msg.offset(),
                        "timestamp": sent_ts,
                        "headers": sent_headers,
                    }
                )

        for r in records:
            kw = {
                k: v
                for k, v in r.items()
                if k in ("key", "partition", "headers", "timestamp") and v is not None
            }
            while True:
                try:
                    p.produce(
                        topic,
                        r["value"],
                        on_delivery=lambda e, m, h=r.get("headers"), t=r.get("timestamp"): cb(e, m, h, t),
                        **kw,
                    )
                    break
                except BufferError:
                    p.poll(0.1)
            p.poll(0)
        assert p.flush(60) == 0, "records not delivered"
        assert not errors, errors
        return delivered

    def consume_all(self, topic: str, timeout: float = 30) -> list:
        """Every record currently in the topic (all partitions, earliest to high watermark)."""
        c = self.ck.Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"t-{uuid.uuid4().hex[:6]}",
                "enable.auto.commit": False,
            }
        )
        try:
            md = c.list_topics(topic, timeout=10).topics[topic]
            tps, ends = [], {}
            for p in md.partitions:
                lo, hi = c.get_watermark_offsets(self.ck.TopicPartition(topic, p), timeout=10, cached=False)
                if hi > lo:
                    tps.append(self.ck.TopicPartition(topic, p, lo))
                    ends[p] = hi
            out = []
            if not tps:
                return out
            c.assign(tps)
            deadline = time.monotonic() + timeout
            done = set()
            while len(done) < len(ends) and time.monotonic() < deadline:
                for m in c.consume(1000, 0.5):
                    if m.error():
                        continue
                    out.append(m)
                    if m.offset() + 1 >= ends[m.partition()]:
                        done.add(m.partition())
            assert len(done) == len(ends), f"could not read {topic} to its end in {timeout}s"
            return out
        finally:
            c.close()


@pytest.fixture(scope="session")
def kafka(bootstrap):
    return Kafka(bootstrap)
