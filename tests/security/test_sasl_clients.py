"""SASL and TLS with real clients (confluent-kafka, kafka-python, aiokafka, kcat) against a
krafty node that has PLAINTEXT, SSL (client auth required), SASL_PLAINTEXT, SASL_SSL and a
SASL listener with connections.max.reauth.ms."""

from __future__ import annotations

import asyncio
import functools
import logging
import shutil
import socket
import ssl
import struct
import subprocess
import time
import uuid

import pytest

from broker.protocol import codec
from broker.protocol.apis import ApiKey, is_flexible
from common.errors import ErrorCode
from tests.security.conftest import USERS, produce_timed, run_cli

MECHS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
PROTOS = ["SASL_PLAINTEXT", "SASL_SSL"]


# --------------------------------------------------------------------------- client adapters
def confluent_roundtrip(sn, proto, mech, user, password, topic, extra=None) -> list[bytes]:
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    errors = []
    conf = {"bootstrap.servers": sn.bootstrap(proto), "security.protocol": proto, "sasl.mechanism": mech,
            "sasl.username": user, "sasl.password": password, "error_cb": errors.append,
            "message.timeout.ms": 15000, "socket.timeout.ms": 10000}
    if "SSL" in proto:
        conf["ssl.ca.location"] = str(sn.ca.ca_cert)
    conf.update(extra or {})
    p = Producer(conf)
    delivered = []
    p.produce(topic, b"hello-" + mech.encode(), on_delivery=lambda err, msg: delivered.append(err))
    deadline = time.time() + 20
    while not delivered and time.time() < deadline and not any(e.code() == -169 for e in errors):
        p.poll(0.2)  # until delivered, or refused (no need to wait out message.timeout.ms)
    auth = [e for e in errors if e.code() == -169]  # KafkaError._AUTHENTICATION
    if auth:
        raise PermissionError(str(auth[0]))
    if not delivered or delivered[0] is not None:
        raise KafkaException(f"not delivered: {delivered} {errors}")
    c = Consumer({k: v for k, v in conf.items() if k not in ("message.timeout.ms",)} | {"group.id": "x",
                 "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    out, deadline = [], time.time() + 20
    while not out and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            out.append(m.value())
    c.close()
    return out


def kafka_python_roundtrip(sn, proto, mech, user, password, topic, bootstrap_timeout_ms=8000) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.errors import KafkaError as KPError

    kw = {"bootstrap_servers": sn.bootstrap(proto), "security_protocol": proto, "sasl_mechanism": mech,
          "sasl_plain_username": user, "sasl_plain_password": password, "request_timeout_ms": 15000}
    if "SSL" in proto:
        kw["ssl_cafile"] = str(sn.ca.ca_cert)
    # kafka-python retries a failed bootstrap until bootstrap_timeout_ms, logging each cause
    seen = _LogLines()
    kafka_log = logging.getLogger("kafka")
    kafka_log.addHandler(seen)
    try:
        p = KafkaProducer(**kw, bootstrap_timeout_ms=bootstrap_timeout_ms)
    except KPError as e:
        if any("authenticat" in line.lower() for line in seen.lines):
            raise PermissionError(f"{e!r}: {seen.lines[-1]}") from None
        raise
    finally:
        kafka_log.removeHandler(seen)
    p.send(topic, b"hello-" + mech.encode()).get(timeout=20)
    p.close()
    c = KafkaConsumer(**kw)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek(tp, 0)
    out = []
    deadline = time.time() + 20
    while not out and time.time() < deadline:
        for recs in c.poll(timeout_ms=500).values():
            out += [r.value for r in recs]
    c.close()
    return out


class _LogLines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def aiokafka_roundtrip(sn, proto, mech, user, password, topic) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.errors import KafkaError as AKError
    from aiokafka.helpers import create_ssl_context

    async def run():
        kw = {"bootstrap_servers": sn.bootstrap(proto), "security_protocol": proto, "sasl_mechanism": mech,
              "sasl_plain_username": user, "sasl_plain_password": password, "request_timeout_ms": 15000}
        if "SSL" in proto:
            kw["ssl_context"] = create_ssl_context(cafile=str(sn.ca.ca_cert))
        p = AIOKafkaProducer(**kw)
        try:
            await p.start()
        except AKError as e:
            await p.stop()
            raise PermissionError(repr(e)) from None
        try:
            await p.send_and_wait(topic, b"hello-" + mech.encode())
        finally:
            await p.stop()
        c = AIOKafkaConsumer(**kw)
        await c.start()
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            c.seek(tp, 0)
            batch = await c.getmany(tp, timeout_ms=10000)
            return [m.value for m in batch.get(tp, [])]
        finally:
            await c.stop()
    return asyncio.run(run())


CLIENTS = {"confluent-kafka": confluent_roundtrip, "kafka-python": kafka_python_roundtrip,
           "aiokafka": aiokafka_roundtrip}


def _topic() -> str:
    return f"sec-{uuid.uuid4().hex[:8]}"


def _create_topic(sn, topic):
    from confluent_kafka.admin import AdminClient, NewTopic

    a = AdminClient({"bootstrap.servers": sn.bootstrap("PLAINTEXT")})
    a.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    deadline = time.time() + 30
    while time.time() < deadline:
        t = a.list_topics(topic, timeout=10).topics.get(topic)
        if t is not None and t.error is None and all(p.leader >= 0 for p in t.partitions.values()):
            return
        time.sleep(0.2)
    raise AssertionError(f"topic {topic} has no leader")


# --------------------------------------------------------------------------- right and wrong creds
@pytest.mark.parametrize("client", list(CLIENTS))
@pytest.mark.parametrize("proto", PROTOS)
@pytest.mark.parametrize("mech", MECHS)
def test_client_authenticates_and_round_trips(secure_node, client, proto, mech):
    topic = _topic()
    _create_topic(secure_node, topic)
    got = CLIENTS[client](secure_node, proto, mech, "alice", USERS["alice"], topic)
    assert got == [b"hello-" + mech.encode()]


@pytest.mark.parametrize("client", list(CLIENTS))
@pytest.mark.parametrize("proto", PROTOS)
@pytest.mark.parametrize("mech", MECHS)
def test_wrong_password_is_refused(secure_node, client, proto, mech):
    topic = _topic()
    roundtrip = CLIENTS[client]
    if client == "kafka-python":  # it retries the refused bootstrap until its timeout, then raises
        roundtrip = functools.partial(kafka_python_roundtrip, bootstrap_timeout_ms=2500)
    with pytest.raises(PermissionError):
        roundtrip(secure_node, proto, mech, "alice", "not-the-password", topic)


@pytest.mark.parametrize("mech", MECHS)
def test_unknown_user_is_refused_like_a_wrong_password(secure_node, mech):
    msgs = []
    for user, pw in (("alice", "wrong"), ("nobody", "wrong")):
        conn = RawConn(secure_node.ports["SASL_PLAINTEXT"])
        assert conn.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mech}).error_code == 0
        if mech == "PLAIN":
            res = conn.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": f"\0{user}\0{pw}".encode()})
        else:
            first = conn.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": f"n,,n={user},r=abcdefgh".encode()})
            assert first.error_code == 0  # unknown users get a decoy salt: nothing to tell them apart yet
            assert b",s=" in first.auth_bytes and b",i=" in first.auth_bytes
            nonce = first.auth_bytes.split(b",")[0][2:].decode()
            res = conn.request(ApiKey.SASL_AUTHENTICATE, 2,
                               {"auth_bytes": f"c=biws,r={nonce},p=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=".encode()})
        assert res.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        msgs.append(res.error_message)
        assert conn.closed_by_peer()
    assert msgs[0] == msgs[1]  # one generic message, no hint which part was wrong


def test_scram_users_are_managed_with_krafty_configs(secure_node):
    bs = secure_node.node.bootstrap
    res = run_cli("configs", "--bootstrap-server", bs, "--describe", "--entity-type", "users", "--entity-name", "alice")
    assert res.returncode == 0, res.stderr
    assert "SCRAM-SHA-256=iterations=8192" in res.stdout and "SCRAM-SHA-512=iterations=4096" in res.stdout
    res = run_cli("configs", "--bootstrap-server", bs, "--alter", "--entity-type", "users", "--entity-name", "carol",
                  "--add-config", "SCRAM-SHA-256=[iterations=4096,password=carol-pw]")
    assert res.returncode == 0, res.stderr
    topic = _topic()
    _create_topic(secure_node, topic)
    assert confluent_roundtrip(secure_node, "SASL_PLAINTEXT", "SCRAM-SHA-256", "carol", "carol-pw", topic)
    res = run_cli("configs", "--bootstrap-server", bs, "--alter", "--entity-type", "users", "--entity-name", "carol",
                  "--delete-config", "SCRAM-SHA-256")
    assert res.returncode == 0, res.stderr
    with pytest.raises(PermissionError):
        confluent_roundtrip(secure_node, "SASL_PLAINTEXT", "SCRAM-SHA-256", "carol", "carol-pw", topic)
    # errors name the problem
    res = run_cli("configs", "--bootstrap-server", bs, "--alter", "--entity-type", "users", "--entity-name", "carol",
                  "--delete-config", "SCRAM-SHA-256")
    assert res.returncode == 1 and "RESOURCE_NOT_FOUND" in res.stderr
    res = run_cli("configs", "--bootstrap-server", bs, "--alter", "--entity-type", "users", "--entity-name", "dave",
                  "--add-config", "SCRAM-SHA-256=[iterations=10,password=x]")
    assert res.returncode == 1 and "UNACCEPTABLE_CREDENTIAL" in res.stderr
    res = run_cli("configs", "--bootstrap-server", bs, "--describe", "--entity-type", "users", "--entity-name", "dave")
    assert res.returncode == 1 and "RESOURCE_NOT_FOUND" in res.stderr


def test_configs_cli_over_sasl_ssl(secure_node, tmp_path):
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                     f"ssl.truststore.location={secure_node.ca.ca_cert}\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                     f'username="alice" password="{USERS["alice"]}";\n')
    res = run_cli("configs", "--bootstrap-server", secure_node.bootstrap("SASL_SSL"), "--command-config", str(props),
                  "--describe", "--entity-type", "users")
    assert res.returncode == 0, res.stderr
    assert "user-principal 'bob'" in res.stdout


# --------------------------------------------------------------------------- TLS
def test_ssl_listener_requires_a_client_certificate_from_the_ca(secure_node):
    from confluent_kafka.admin import AdminClient

    base = {"bootstrap.servers": secure_node.bootstrap("SSL"), "security.protocol": "SSL",
            "ssl.ca.location": str(secure_node.ca.ca_cert), "socket.timeout.ms": 5000}
    ok = AdminClient({**base, "ssl.certificate.location": str(secure_node.ca.client_cert),
                      "ssl.key.location": str(secure_node.ca.client_key)})
    assert 1 in ok.list_topics(timeout=15).brokers
    for extra in ({}, {"ssl.certificate.location": str(secure_node.ca.rogue_cert),
                       "ssl.key.location": str(secure_node.ca.rogue_key)}):
        bad = AdminClient({**base, **extra})
        with pytest.raises(Exception):  # noqa: B017 (librdkafka raises KafkaException on any transport failure)
            bad.list_topics(timeout=5)


def test_tls_client_rejects_a_broker_it_does_not_trust(secure_node):
    ctx = ssl.create_default_context()  # the system CAs do not know our test CA
    with socket.create_connection(("127.0.0.1", secure_node.ports["SASL_SSL"]), timeout=10) as s:
        with pytest.raises(ssl.SSLCertVerificationError):
            ctx.wrap_socket(s, server_hostname="127.0.0.1")


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed")
def test_kcat_over_sasl_ssl_scram(secure_node):
    topic = _topic()
    _create_topic(secure_node, topic)
    args = ["kcat", "-b", secure_node.bootstrap("SASL_SSL"), "-X", "security.protocol=SASL_SSL",
            "-X", "sasl.mechanism=SCRAM-SHA-256", "-X", "sasl.username=bob", "-X", f"sasl.password={USERS['bob']}",
            "-X", f"ssl.ca.location={secure_node.ca.ca_cert}", "-t", topic]
    subprocess.run([*args, "-P"], input=b"from-kcat\n", check=True, timeout=60)
    out = subprocess.run([*args, "-C", "-e", "-o", "beginning"], capture_output=True, check=True, timeout=60)
    assert out.stdout.strip() == b"from-kcat"


# --------------------------------------------------------------------------- the SASL gate
class RawConn:
    """A bare Kafka-protocol socket client (no library in between)."""

    def __init__(self, port: int, tls_ca=None):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        if tls_ca:
            self.sock = ssl.create_default_context(cafile=str(tls_ca)).wrap_socket(self.sock, server_hostname="127.0.0.1")
        self.cid = 0

    def send(self, api_key: int, version: int, data: dict) -> None:
        self.cid += 1
        body = codec.encode(codec.build(codec.request_type(api_key, version), data))
        header = struct.pack(">hhih", api_key, version, self.cid, 4) + b"test"
        if is_flexible(api_key, version):
            header += b"\x00"
        self.sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)

    def recv_frame(self) -> bytes:
        size = struct.unpack(">i", self._exact(4))[0]
        return self._exact(size)

    def request(self, api_key: int, version: int, data: dict):
        self.send(api_key, version, data)
        raw = self.recv_frame()
        pos = 4
        if api_key != ApiKey.API_VERSIONS and is_flexible(api_key, version):
            pos += 1
        return codec._reader(codec.response_type(api_key, version))(raw, pos)[0]

    def _exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed by the broker")
            buf += chunk
        return buf

    def closed_by_peer(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except (ConnectionError, OSError):
            return True


@pytest.mark.parametrize("proto", PROTOS)
def test_unauthenticated_connection_may_send_only_api_versions_and_handshake(secure_node, proto):
    tls = secure_node.ca.ca_cert if proto == "SASL_SSL" else None
    conn = RawConn(secure_node.ports[proto], tls)
    res = conn.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    assert res.error_code == 0
    keys = {k.api_key for k in res.api_keys}
    assert {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE} <= keys
    conn.send(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False})
    assert conn.closed_by_peer()
    # after the handshake only SaslAuthenticate: ApiVersions now closes the connection too
    conn = RawConn(secure_node.ports[proto], tls)
    assert conn.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 0
    conn.send(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    assert conn.closed_by_peer()
    # an unsupported mechanism gets the list of enabled ones
    conn = RawConn(secure_node.ports[proto], tls)
    res = conn.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
    assert res.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert set(res.mechanisms) == set(MECHS)


def test_sasl_handshake_v0_with_bare_tokens(secure_node):
    conn = RawConn(secure_node.ports["SASL_PLAINTEXT"])
    assert conn.request(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}).error_code == 0
    token = f"\0alice\0{USERS['alice']}".encode()
    conn.sock.sendall(struct.pack(">i", len(token)) + token)
    assert conn.recv_frame() == b""
    res = conn.request(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False})
    assert res.brokers and res.brokers[0].port == secure_node.ports["SASL_PLAINTEXT"]


def test_sasl_requests_on_a_plaintext_listener_get_illegal_sasl_state(secure_node):
    conn = RawConn(secure_node.ports["PLAINTEXT"])
    assert conn.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == ErrorCode.ILLEGAL_SASL_STATE


# --------------------------------------------------------------------------- KIP-368
def _authenticate(conn: RawConn, user: str, password: str, version: int = 2):
    assert conn.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 0
    return conn.request(ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": f"\0{user}\0{password}".encode()})


def test_session_lifetime_and_reauthentication(secure_node):
    port = secure_node.ports["REAUTH"]
    meta = {"topics": None, "allow_auto_topic_creation": False}
    conn = RawConn(port)
    res = _authenticate(conn, "alice", USERS["alice"])
    assert res.error_code == 0 and res.session_lifetime.total_seconds() == 1.5
    assert conn.request(ApiKey.METADATA, 12, meta).brokers
    time.sleep(1.0)
    res = _authenticate(conn, "alice", USERS["alice"])  # re-authenticate in time: the connection lives on
    assert res.error_code == 0
    time.sleep(1.0)
    assert conn.request(ApiKey.METADATA, 12, meta).brokers
    # re-authenticating as somebody else is refused
    assert _authenticate(conn, "bob", USERS["bob"]).error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert conn.closed_by_peer()
    # without re-authentication the session ends: the next request closes the connection
    conn = RawConn(port)
    assert _authenticate(conn, "alice", USERS["alice"]).error_code == 0
    time.sleep(1.8)
    conn.send(ApiKey.METADATA, 12, meta)
    assert conn.closed_by_peer()


def test_librdkafka_reauthenticates_and_keeps_producing(secure_node):
    from confluent_kafka import Producer

    topic = _topic()
    _create_topic(secure_node, topic)
    errors, delivered = [], []
    p = Producer({"bootstrap.servers": secure_node.bootstrap("REAUTH"), "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "bob", "sasl.password": USERS["bob"],
                  "error_cb": errors.append, "linger.ms": 0})
    deadline = time.time() + 5
    while time.time() < deadline:
        p.produce(topic, b"x", on_delivery=lambda err, msg: delivered.append(err))
        p.poll(0.2)
    p.flush(15)
    assert len(delivered) >= 10 and all(e is None for e in delivered), (delivered, errors)


# --------------------------------------------------------------------------- fuzzing over the wire
def test_fuzzed_sasl_exchanges_fail_cleanly_and_the_broker_stays_up(secure_node):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    port = secure_node.ports["SASL_PLAINTEXT"]

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(mech=st.sampled_from(MECHS), first=st.binary(max_size=120), final=st.binary(max_size=120),
           truncate=st.integers(min_value=0, max_value=12))
    def exchange(mech, first, final, truncate):
        conn = RawConn(port)
        assert conn.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mech}).error_code == 0
        if truncate:  # a SaslAuthenticate frame cut short: the broker closes the connection
            body = codec.encode(codec.build(codec.request_type(ApiKey.SASL_AUTHENTICATE, 2), {"auth_bytes": first}))
            header = struct.pack(">hhih", ApiKey.SASL_AUTHENTICATE, 2, 99, 1) + b"t\x00"
            frame = (header + body)[:len(header) + max(0, len(body) - truncate)]
            conn.sock.sendall(struct.pack(">i", len(frame)) + frame)
            assert conn.closed_by_peer()
            return
        res = conn.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": first})
        if res.error_code == 0:  # a SCRAM server-first: now a random client-final
            assert mech != "PLAIN"
            res = conn.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": final})
        assert res.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert conn.closed_by_peer()

    exchange()
    ok = RawConn(port)
    assert _authenticate(ok, "alice", USERS["alice"]).error_code == 0
    assert secure_node.node.running


# --------------------------------------------------------------------------- quotas per SASL user
def test_user_quota_throttles_only_that_user(secure_node):
    """A producer_byte_rate quota on User:bob (set with krafty configs) throttles bob's
    producer, authenticated with SCRAM, and not alice's."""
    topic = _topic()
    _create_topic(secure_node, topic)
    bs = secure_node.node.bootstrap

    def configs(*args):
        res = run_cli("configs", "--bootstrap-server", bs, "--alter", "--entity-type", "users", "--entity-name", "bob",
                      *args)
        assert res.returncode == 0, res.stderr
    configs("--add-config", "producer_byte_rate=100000")
    time.sleep(0.5)

    def produce_as(user: str) -> tuple[float, int]:
        return produce_timed({"bootstrap.servers": secure_node.bootstrap("SASL_PLAINTEXT"),
                              "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                              "sasl.username": user, "sasl.password": USERS[user]}, topic, 1_600_000)

    try:
        slow, bob_throttle = produce_as("bob")
        fast, alice_throttle = produce_as("alice")
    finally:
        configs("--delete-config", "producer_byte_rate")
    assert bob_throttle > 0 and alice_throttle == 0, (bob_throttle, alice_throttle)
    assert slow > 4.0 and fast < slow / 2, (slow, fast)
