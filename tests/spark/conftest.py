"""Fixtures for the Spark pipeline suite (tests/spark, `make test-spark`).

Spark: a standalone cluster (a master and two workers of one core each, started from the pyspark
installation on 127.0.0.1, pipeline/standalone.py) that every job is submitted to; with
KRAFTY_SPARK_MASTER=local[2] the jobs run in local mode instead.

Kafka (KRAFTY_SPARK_TARGET):
  (default)                  a krafty cluster of 3 controllers + 3 brokers, one process each
  KRAFTY_SPARK_TARGET=node   one combined broker+controller krafty node
  KRAFTY_SPARK_TARGET=mock   librdkafka's built-in mock cluster (no timestamp lookups, no topic
                             deletion: tests marked krafty_only are skipped). For checking the
                             pipeline code itself while the broker is unavailable.
  KRAFTY_SPARK_TARGET=host:port   an already running Kafka-compatible broker (left running).
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path

import pytest

from pipeline.local_node import LocalKrafty, answers_api_versions

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

TARGET = os.environ.get("KRAFTY_SPARK_TARGET", "cluster")
MOCK = TARGET == "mock"
MASTER = os.environ.get("KRAFTY_SPARK_MASTER", "standalone")
# krafty settings for the tests: a dead broker fenced in 3 s; retention checked every second
CLUSTER_OVERRIDES = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "5000",
    "log.retention.check.interval.ms": "1000",
}

pytest.importorskip("pyspark", reason="needs the spark extra: pip install krafty[spark]")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "krafty_only: needs a real broker (skipped on KRAFTY_SPARK_TARGET=mock)"
    )
    config.addinivalue_line(
        "markers", "krafty_cluster: needs the 3+3 krafty cluster (KRAFTY_SPARK_TARGET unset or 'cluster')"
    )


def pytest_collection_modifyitems(config, items):
    here = str(Path(__file__).parent)
    for item in items:
        if not str(item.path).startswith(here):
            continue
        if MOCK and "krafty_only" in item.keywords:
            item.add_marker(pytest.mark.skip(reason="KRAFTY_SPARK_TARGET=mock: librdkafka's mock cluster lacks this"))
        if TARGET != "cluster" and "krafty_cluster" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=f"KRAFTY_SPARK_TARGET={TARGET}: needs the 3+3 krafty cluster"))


def api_versions_ok(host: str, port: int, timeout: float = 1.0) -> bool:
    """True when the broker answers an ApiVersions v0 request with error code 0."""
    return answers_api_versions(host, port, timeout)


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


class KraftyCluster:
    """3 controllers + 3 brokers, one `krafty node` process each (tests/cluster's Cluster)."""

    def __init__(self, directory: Path):
        from tests.cluster.conftest import Cluster

        self.c = Cluster(str(directory), overrides=CLUSTER_OVERRIDES)

    @property
    def bootstrap(self) -> str:
        return self.c.bootstrap

    def start(self, timeout: float = 180) -> KraftyCluster:
        import confluent_kafka as ck

        self.c.start()
        deadline = time.monotonic() + timeout
        p = ck.Producer({"bootstrap.servers": self.bootstrap, "log_level": 0})
        try:
            while time.monotonic() < deadline:
                dead = [n for n, pr in self.c.procs.items() if pr.poll() is not None]
                if dead:
                    raise RuntimeError(f"{dead[0]} exited:\n{self.c.log_text(dead[0])[-3000:]}")
                try:
                    if len(p.list_topics(timeout=5).brokers) == self.c.n_brokers:
                        return self
                except ck.KafkaException:
                    pass
                time.sleep(0.5)
        finally:
            p.flush(0)
        raise RuntimeError(f"the krafty cluster did not list {self.c.n_brokers} brokers within {timeout}s")

    def broker_name(self, broker_id: int) -> str:
        return self.c.broker_name(broker_id)

    def kill(self, broker_id: int) -> None:
        self.c.kill(self.broker_name(broker_id))

    def restart(self, broker_id: int) -> None:
        self.c.start(self.broker_name(broker_id))

    def close(self) -> None:
        self.c.shutdown()


@pytest.fixture(scope="session")
def krafty_cluster(tmp_path_factory):
    if TARGET != "cluster":
        pytest.skip(f"KRAFTY_SPARK_TARGET={TARGET}: the 3+3 krafty cluster is not started")
    c = KraftyCluster(tmp_path_factory.mktemp("krafty-cluster"))
    try:
        c.start()
    except RuntimeError as e:
        c.close()
        pytest.fail(f"the krafty cluster did not start: {e}", pytrace=False)
    yield c
    c.close()


@pytest.fixture(scope="session")
def bootstrap(request, tmp_path_factory):
    """bootstrap.servers of the brokers under test, started (and stopped) by these fixtures."""
    if MOCK:
        m = MockBroker()
        yield m.bootstrap
        m.close()
        return
    if TARGET == "cluster":
        yield request.getfixturevalue("krafty_cluster").bootstrap
        return
    if TARGET != "node":
        yield TARGET
        return
    # Kafka's own key; checked every second so retention tests need not wait 5 minutes
    node = LocalKrafty({"log.retention.check.interval.ms": 1000}, workdir=tmp_path_factory.mktemp("krafty"))
    try:
        node.start()
    except RuntimeError as e:
        pytest.fail(f"krafty did not start: {e}", pytrace=False)
    try:
        yield node.bootstrap
    finally:
        node.stop()


@pytest.fixture(scope="session")
def standalone(tmp_path_factory):
    """A Spark standalone master and two workers (one core each) on 127.0.0.1."""
    if MASTER != "standalone":
        pytest.skip(f"KRAFTY_SPARK_MASTER={MASTER}: no standalone cluster")
    from pipeline.standalone import StandaloneSpark

    c = StandaloneSpark(workers=2, cores=1, memory="1500m", directory=str(tmp_path_factory.mktemp("spark")))
    try:
        c.start(timeout=300)
    except RuntimeError as e:
        c.stop()
        pytest.fail(f"the Spark standalone cluster did not start: {e}", pytrace=False)
    yield c
    c.stop()


def executors(spark) -> int:
    """Executors registered with the driver (the driver itself not counted)."""
    return spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1


@pytest.fixture(scope="session")
def spark(request):
    import pipeline

    if MASTER == "standalone":
        cluster = request.getfixturevalue("standalone")
        s = pipeline.session("krafty-tests", master=cluster.master_url,
                             conf={"spark.executor.memory": "1g"})
        deadline = time.monotonic() + 300
        while executors(s) < cluster.n_workers and time.monotonic() < deadline:
            time.sleep(0.5)
        assert executors(s) == cluster.n_workers, f"{executors(s)} executors registered, not {cluster.n_workers}"
    else:
        s = pipeline.session("krafty-tests", master=MASTER)
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
        # the 3+3 cluster's brokers want min.insync.replicas=2: topics there are replicated 3 times
        self.replication = 3 if TARGET == "cluster" else 1

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
                [NewTopic(name, partitions, self.replication, config=config or {})], request_timeout=15
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
