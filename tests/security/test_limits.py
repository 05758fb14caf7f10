"""Limits that protect the broker: max.connections, max.connections.per.ip (+ overrides),
connections.max.idle.ms, and client byte-rate quotas (AlterClientQuotas /
DescribeClientQuotas in the metadata log, throttle_time_ms in responses), checked over
real sockets and with confluent-kafka."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time

import pytest
from krafty_node import KraftyNode, free_port, start_or_fail  # noqa: I001 (on sys.path via tests/security/conftest)

from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from tests.security.conftest import produce_timed


def start(tmp, props) -> KraftyNode:
    node = KraftyNode(tmp)
    node.extra_properties = dict(props)
    return start_or_fail(node)


def open_conn(port: int, source: str = "127.0.0.1") -> socket.socket:
    s = socket.socket()
    s.bind((source, 0))
    s.settimeout(5)
    s.connect(("127.0.0.1", port))
    return s


def api_versions(s: socket.socket, timeout: float = 5.0) -> bool:
    """Sends ApiVersions v0; True on an answer, False when the broker closed the connection
    or did not answer in time."""
    s.settimeout(timeout)
    body = struct.pack(">hhih", 18, 0, 7, 4) + b"test"
    try:
        s.sendall(struct.pack(">i", len(body)) + body)
        head = s.recv(4)
        if len(head) < 4:
            return False
        (n,) = struct.unpack(">i", head)
        got = b""
        while len(got) < n:
            chunk = s.recv(n - len(got))
            if not chunk:
                return False
            got += chunk
        return struct.unpack(">i", got[:4])[0] == 7
    except (TimeoutError, ConnectionError, OSError):
        return False


def closed_by_broker(s: socket.socket, timeout: float = 10.0) -> bool:
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except TimeoutError:
        return False
    except (ConnectionError, OSError):
        return True


@pytest.fixture(scope="module")
def per_ip_node(tmp_path_factory):
    node = start(tmp_path_factory.mktemp("per-ip"), {
        "max.connections.per.ip": "3", "max.connections.per.ip.overrides": "127.0.0.2:5",
        "connections.max.idle.ms": "2000"})
    yield node
    node.close()


def test_max_connections_per_ip_closes_the_extra_connection(per_ip_node):
    socks = [open_conn(per_ip_node.port) for _ in range(3)]
    try:
        assert all(api_versions(s) for s in socks)
        extra = open_conn(per_ip_node.port)
        assert not api_versions(extra)  # closed at once
        extra.close()
        socks.pop().close()
        time.sleep(0.3)
        again = open_conn(per_ip_node.port)
        socks.append(again)
        assert api_versions(again)
    finally:
        for s in socks:
            s.close()


def test_per_ip_override(per_ip_node):
    socks = [open_conn(per_ip_node.port, "127.0.0.2") for _ in range(5)]
    try:
        assert all(api_versions(s) for s in socks)
        extra = open_conn(per_ip_node.port, "127.0.0.2")
        assert not api_versions(extra)
        extra.close()
    finally:
        for s in socks:
            s.close()


def test_idle_connections_are_closed(per_ip_node):
    idle, busy = open_conn(per_ip_node.port), open_conn(per_ip_node.port)
    try:
        assert api_versions(idle) and api_versions(busy)
        deadline = time.time() + 4.5
        while time.time() < deadline:  # a request every second keeps a connection open
            assert api_versions(busy)
            time.sleep(0.8)
        idle.settimeout(2)
        assert idle.recv(1) == b""  # the broker closed it
    finally:
        idle.close()
        busy.close()


def test_max_connections_blocks_new_connections_until_one_closes(tmp_path):
    client_port = free_port()
    node = KraftyNode(tmp_path)
    node.extra_properties = {
        "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port},"
                     f"CLIENT://127.0.0.1:{client_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,CLIENT:PLAINTEXT",
        "max.connections": "3"}
    start_or_fail(node)
    socks = []
    try:
        socks = [open_conn(client_port) for _ in range(3)]
        assert all(api_versions(s) for s in socks)
        waiting = open_conn(client_port)  # the kernel accepts it; the broker does not serve it yet
        socks.append(waiting)
        assert not api_versions(waiting, timeout=1.5)
        # the inter-broker listener (PLAINTEXT here) is exempt from max.connections; over the
        # limit, the least recently used client connection is closed (as Kafka does)
        inter = open_conn(node.port)
        socks.append(inter)
        assert api_versions(inter)
        assert closed_by_broker(socks[0]), ([x.getsockname()[1] for x in socks], node.log_tail(5))
        assert api_versions(socks[1]) and api_versions(socks[2])  # the others are still served
        socks.pop(0).close()
        socks.pop(0).close()  # 1 client + 1 inter-broker connection: a slot is free
        waiting.settimeout(10)
        head = waiting.recv(4)  # the ApiVersions sent above is answered once a slot frees up
        assert len(head) == 4
    finally:
        for s in socks:
            s.close()
        node.close()


# --------------------------------------------------------------------------------- quotas
def alter_quota(bootstrap: str, entity: list[tuple[str, str | None]], key: str, value: float | None):
    host, port = bootstrap.split(":")

    async def run():
        c = KafkaConnection(host, int(port))
        try:
            return await c.request(ApiKey.ALTER_CLIENT_QUOTAS, 1, {"entries": [{
                "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                "ops": [{"key": key, "value": value or 0.0, "remove": value is None}]}], "validate_only": False})
        finally:
            c.close()
    return asyncio.run(run())


def describe_quotas(bootstrap: str, components: list[dict]):
    host, port = bootstrap.split(":")

    async def run():
        c = KafkaConnection(host, int(port))
        try:
            return await c.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"components": components, "strict": False})
        finally:
            c.close()
    return asyncio.run(run())


@pytest.fixture(scope="module")
def quota_node(tmp_path_factory):
    node = start(tmp_path_factory.mktemp("quotas"), {})
    yield node
    node.close()


def test_client_quota_apis(quota_node):
    res = alter_quota(quota_node.bootstrap, [("client-id", "cq")], "producer_byte_rate", 1000.0)
    assert [e.error_code for e in res.entries] == [0]
    res = alter_quota(quota_node.bootstrap, [("client-id", "cq")], "bogus_rate", 1000.0)
    assert res.entries[0].error_code == 42 and "bogus_rate" in res.entries[0].error_message
    res = alter_quota(quota_node.bootstrap, [("user", "u"), ("ip", "1.2.3.4")], "producer_byte_rate", 10.0)
    assert res.entries[0].error_code == 42
    got = describe_quotas(quota_node.bootstrap, [{"entity_type": "client-id", "match_type": 0, "match": "cq"}])
    assert got.error_code == 0
    assert [(tuple((e.entity_type, e.entity_name) for e in x.entity), {v.key: v.value for v in x.values})
            for x in got.entries] == [((("client-id", "cq"),), {"producer_byte_rate": 1000.0})]
    alter_quota(quota_node.bootstrap, [("client-id", "cq")], "producer_byte_rate", None)
    got = describe_quotas(quota_node.bootstrap, [{"entity_type": "client-id", "match_type": 0, "match": "cq"}])
    assert got.entries == ()


def test_quotas_are_managed_with_krafty_configs(quota_node):
    from tests.security.conftest import run_cli

    bs = quota_node.bootstrap

    def cli(*args):
        return run_cli("configs", "--bootstrap-server", bs, *args)
    res = cli("--alter", "--entity-type", "clients", "--entity-name", "app-1",
              "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152")
    assert res.returncode == 0, res.stderr
    res = cli("--alter", "--entity-type", "users", "--entity-default", "--add-config", "producer_byte_rate=5e5")
    assert res.returncode == 0, res.stderr
    res = cli("--alter", "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
              "--entity-name", "app-1", "--add-config", "consumer_byte_rate=1000")
    assert res.returncode == 0, res.stderr
    res = cli("--describe", "--entity-type", "clients", "--entity-name", "app-1")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        "Quota configs for client-id 'app-1' are consumer_byte_rate=2097152.0,producer_byte_rate=1048576.0"]
    res = cli("--describe", "--entity-type", "users")
    assert "Quota configs for the default user-principal are producer_byte_rate=500000.0" in res.stdout
    assert "user-principal 'alice', client-id 'app-1'" not in res.stdout
    res = cli("--describe", "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
              "--entity-name", "app-1")
    assert "Quota configs for client-id 'app-1', user-principal 'alice' are consumer_byte_rate=1000.0" \
        in res.stdout, res.stdout
    got = describe_quotas(bs, [{"entity_type": "user", "match_type": 1, "match": None}])
    assert [{v.key: v.value for v in e.values} for e in got.entries] == [{"producer_byte_rate": 500000.0}]
    for args in (("--entity-type", "clients", "--entity-name", "app-1", "--delete-config", "producer_byte_rate"),
                 ("--entity-type", "users", "--entity-default", "--delete-config", "producer_byte_rate")):
        res = cli("--alter", *args)
        assert res.returncode == 0, res.stderr
    res = cli("--describe", "--entity-type", "clients", "--entity-name", "app-1")
    assert res.stdout.splitlines() == ["Quota configs for client-id 'app-1' are consumer_byte_rate=2097152.0"]
    # bad input names the problem
    res = cli("--alter", "--entity-type", "clients", "--entity-name", "x", "--add-config", "request_percentage=50")
    assert res.returncode == 1 and "INVALID_REQUEST" in res.stderr and "not enforced" in res.stderr
    res = cli("--alter", "--entity-type", "clients", "--entity-name", "x", "--add-config", "producer_byte_rate=-5")
    assert res.returncode == 2 and "positive" in res.stderr
    res = cli("--alter", "--entity-type", "clients", "--entity-name", "x", "--add-config", "SCRAM-SHA-256=[password=x]")
    assert res.returncode == 2 and "one named user" in res.stderr
    res = cli("--describe", "--entity-type", "groups")
    assert res.returncode == 2 and "'groups' is not supported" in res.stderr
    # clean up for the other tests of this module
    cli("--alter", "--entity-type", "clients", "--entity-name", "app-1", "--delete-config", "consumer_byte_rate")
    cli("--alter", "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
        "--entity-name", "app-1", "--delete-config", "consumer_byte_rate")


def _produce_timed(bootstrap, topic, client_id, total_bytes, record=10_000):
    return produce_timed({"bootstrap.servers": bootstrap, "client.id": client_id}, topic, total_bytes, record)


def test_produce_quota_throttles_the_client(quota_node):
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = "quota-produce"
    admin = AdminClient({"bootstrap.servers": quota_node.bootstrap})  # kept referenced until the result is in
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    rate = 100_000.0
    assert alter_quota(quota_node.bootstrap, [("client-id", "slow")], "producer_byte_rate", rate).entries[
        0].error_code == 0
    time.sleep(0.5)
    total = 1_600_000
    fast, _ = _produce_timed(quota_node.bootstrap, topic, "fast", total)
    slow, throttle = _produce_timed(quota_node.bootstrap, topic, "slow", total)
    # Kafka's rate is measured over at least 10 one-second samples: 1.6 MB at 100 kB/s
    # leaves ~6 s of throttling; the unthrottled client is far faster
    assert slow > 4.0, (slow, fast)
    assert fast < slow / 2, (slow, fast)
    assert throttle > 0  # throttle_time_ms reached the client


def test_fetch_quota_throttles_the_consumer(quota_node):
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = "quota-fetch"
    admin = AdminClient({"bootstrap.servers": quota_node.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    total = 1_600_000
    _produce_timed(quota_node.bootstrap, topic, "loader", total)
    assert alter_quota(quota_node.bootstrap, [("client-id", "slowc")], "consumer_byte_rate", 100_000.0).entries[
        0].error_code == 0
    time.sleep(0.5)

    def consume(client_id):
        # fetches large enough to take all 1.6 MB at once: the broker caps a throttled client's
        # response at its quota over the window (Kafka's getMaxValueInQuotaWindow), else such a
        # consumer would be answered "empty, throttled" forever
        c = Consumer({"bootstrap.servers": quota_node.bootstrap, "client.id": client_id, "group.id": client_id,
                      "enable.auto.commit": False, "max.partition.fetch.bytes": 10_000_000,
                      "statistics.interval.ms": 200, "stats_cb": stats.append})
        c.assign([TopicPartition(topic, 0, 0)])
        got, t0 = 0, time.monotonic()
        while got < total and time.monotonic() - t0 < 60:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got += len(m.value())
        elapsed = time.monotonic() - t0
        c.poll(0.5)
        c.close()
        return elapsed, got

    stats = []
    fast, got_fast = consume("fastc")
    assert max(_throttles(stats), default=0) == 0
    stats.clear()
    slow, got_slow = consume("slowc")
    assert got_fast == got_slow == total
    assert slow > 4.0 and fast < slow / 2, (slow, fast)
    assert max(_throttles(stats), default=0) > 0  # throttle_time_ms reached the consumer


def _throttles(stats: list[str]) -> list[int]:
    """librdkafka's per-broker throttle window (ms) from its statistics JSON."""
    return [b["throttle"]["max"] for s in stats for b in json.loads(s)["brokers"].values() if b.get("throttle")]
