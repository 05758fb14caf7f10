"""A job written for Spark's Kafka source with the Java client's security options runs unchanged
(format "krafty" instead of "kafka") against a SASL_SSL (SCRAM-SHA-512) listener with ACLs:
``kafka.security.protocol``, ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config`` with
ScramLoginModule, a JKS truststore made by the JDK's keytool, Java-only keys warned about. Batch
and streaming, read and write; a topic without an ACL for the user is refused."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from krafty_node import KraftyNode, free_port  # noqa: E402

from tests.security.certs import make_ca  # noqa: E402

pytestmark = [pytest.mark.krafty_only,
              pytest.mark.skipif(shutil.which("keytool") is None, reason="needs the JDK's keytool (JKS truststore)")]

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ALICE_PW = "alice-secret"
STORE_PW = "trust-pass"


class SecureKrafty:
    def __init__(self, tmp: Path):
        self.ca = make_ca(tmp / "ca")
        keystore = self.ca.keystore_pem("server", "localhost", server=True)
        self.truststore = self.ca.truststore_jks(STORE_PW)
        self.sasl_port = free_port()
        self.node = KraftyNode(tmp / "node")
        n = self.node
        n.extra_properties = {
            "listeners": f"PLAINTEXT://127.0.0.1:{n.port},CONTROLLER://127.0.0.1:{n.controller_port},"
                         f"SASL_SSL://127.0.0.1:{self.sasl_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
            "authorizer.class.name": AUTHORIZER,
            # the PLAINTEXT listener (User:ANONYMOUS) is the test's administration door
            "super.users": "User:admin;User:ANONYMOUS",
            "offsets.topic.replication.factor": "1",
        }

    @property
    def plain(self) -> str:
        return self.node.bootstrap

    @property
    def sasl(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    def cli(self, *args: str) -> str:
        r = subprocess.run([sys.executable, "-m", "krafty", *args], cwd=REPO, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr + r.stdout
        return r.stdout

    def java_options(self, user: str = "alice", password: str = ALICE_PW) -> dict:
        """What a Spark job written for format("kafka") sets, unchanged."""
        return {
            "kafka.bootstrap.servers": self.sasl,
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                      f'username="{user}" password="{password}";',
            "kafka.ssl.truststore.location": str(self.truststore),
            "kafka.ssl.truststore.password": STORE_PW,
            "kafka.ssl.truststore.type": "JKS",
            "kafka.ssl.endpoint.identification.algorithm": "https",
            "kafka.ssl.keymanager.algorithm": "SunX509",  # Java-only: warned about and dropped
        }


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    s = SecureKrafty(tmp_path_factory.mktemp("secure-krafty"))
    s.node.start(timeout=120)
    try:
        s.cli("configs", "--bootstrap-server", s.plain, "--alter", "--entity-type", "users", "--entity-name",
              "alice", "--add-config", f"SCRAM-SHA-512=[iterations=4096,password={ALICE_PW}]")
        yield s
    finally:
        s.node.close()


def _topic(secure, prefix, partitions=2) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": secure.plain})  # (kept alive until the topic is there)
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(60)
    return name


def _allow(secure, op: str, topic: str) -> None:
    secure.cli("acls", "--bootstrap-server", secure.plain, "--add", "--allow-principal", "User:alice",
               "--operation", op, "--topic", topic)


def _read(spark, opts, **more):
    r = spark.read.format("krafty")
    for k, v in {**opts, **more}.items():
        r = r.option(k, v)
    return r.load()


def _wait_acl(fn, timeout=60):
    """ACLs reach the broker's authorizer through the metadata log: retry until they apply."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - AnalysisException/Py4JJavaError until the ACL is seen
            if "AUTHORIZATION" not in str(e).upper() or time.monotonic() > deadline:
                raise
            time.sleep(1)


def test_java_style_sasl_ssl_options_read_and_write_a_secured_topic(spark, secure, tmp_path):
    import confluent_kafka as ck

    src, dst, secret = _topic(secure, "sec-in"), _topic(secure, "sec-out"), _topic(secure, "sec-secret")
    for op in ("Read", "Describe"):
        _allow(secure, op, src)
    for op in ("Write", "Describe"):
        _allow(secure, op, dst)
    p = ck.Producer({"bootstrap.servers": secure.plain})
    for i in range(200):
        p.produce(src, f"s{i}".encode(), partition=i % 2)
        p.produce(secret, b"hidden")
    assert p.flush(60) == 0
    opts = secure.java_options()

    # batch read -> batch write, through SASL_SSL with SCRAM, a JKS truststore and the ACLs
    rows = _wait_acl(lambda: _read(spark, opts, subscribe=src).selectExpr("CAST(value AS STRING) v").collect())
    assert sorted(r.v for r in rows) == sorted(f"s{i}" for i in range(200))
    df = _read(spark, opts, subscribe=src).selectExpr("CONCAT(CAST(value AS STRING), '!') AS value")
    w = df.write.format("krafty").option("topic", dst)
    for k, v in opts.items():
        w = w.option(k, v)
    _wait_acl(lambda: w.mode("append").save())
    got = _read(spark, opts, subscribe=dst)

    # reading the destination needs Read: not granted yet, so it is refused by the authorizer
    with pytest.raises(Exception, match="(?i)authorization"):
        got.collect()
    _allow(secure, "Read", dst)
    rows = _wait_acl(lambda: got.selectExpr("CAST(value AS STRING) v").collect())
    assert sorted(r.v for r in rows) == sorted(f"s{i}!" for i in range(200))

    # a topic alice has no ACL for stays closed
    with pytest.raises(Exception, match="(?i)authorization"):
        _read(spark, opts, subscribe=secret).collect()

    # streaming read -> streaming write with the same options
    out = _topic(secure, "sec-stream")
    for op in ("Write", "Describe", "Read"):
        _allow(secure, op, out)
    stream = spark.readStream.format("krafty")
    for k, v in {**opts, "subscribe": src, "startingOffsets": "earliest"}.items():
        stream = stream.option(k, v)
    q = stream.load().selectExpr("value").writeStream.format("krafty")
    for k, v in {**opts, "topic": out, "checkpointLocation": str(tmp_path / "ckpt")}.items():
        q = q.option(k, v)

    def run_stream():
        query = q.trigger(availableNow=True).start()
        try:
            assert query.awaitTermination(300)
        finally:
            if query.isActive:
                query.stop()
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))

    _wait_acl(run_stream)
    rows = _wait_acl(lambda: _read(spark, opts, subscribe=out).selectExpr("CAST(value AS STRING) v").collect())
    assert sorted(r.v for r in rows) == sorted(f"s{i}" for i in range(200))


def test_wrong_password_is_refused_clearly(spark, secure):
    src = _topic(secure, "sec-pw")
    opts = secure.java_options(password="not-the-password")
    with pytest.raises(Exception, match="(?i)authentication"):
        _read(spark, opts, subscribe=src).collect()
