"""Brokers with two named listeners (the docker-compose layout, on loopback) and the
`krafty healthcheck` command the compose health checks run, against real processes.

Each broker binds INTERNAL on 127.0.0.1:P+i (advertised as 127.0.0.1, the inter-broker
listener) and EXTERNAL on 127.0.0.1:P+5+i, advertised as localhost: a client must be told
the addresses of the listener it came in through, and replication must use INTERNAL."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import FAST, ROOT, Cluster, wait_until

BROKERS = 2


@pytest.fixture(scope="module")
def two_listener_cluster(tmp_path_factory):
    c = Cluster(str(tmp_path_factory.mktemp("listeners")), controllers=3, brokers=BROKERS, overrides=FAST)
    for i in range(BROKERS):
        props = c.configs[f"broker-{c.n_controllers + i + 1}"]
        internal, external = c.base + i, c.base + 5 + i
        props.update({
            "listeners": f"INTERNAL://127.0.0.1:{internal},EXTERNAL://127.0.0.1:{external}",
            "advertised.listeners": f"INTERNAL://127.0.0.1:{internal},EXTERNAL://localhost:{external}",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "default.replication.factor": str(BROKERS),
            "min.insync.replicas": str(BROKERS),
        })
    c.start()
    c.internal = ",".join(f"127.0.0.1:{c.base + i}" for i in range(BROKERS))
    c.external = ",".join(f"localhost:{c.base + 5 + i}" for i in range(BROKERS))
    try:
        a = AdminClient({"bootstrap.servers": c.internal})
        wait_until(lambda: len(a.list_topics(timeout=5).brokers) == BROKERS, 90, "both brokers registered")
        yield c
    finally:
        c.shutdown()


def _healthcheck(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "krafty", "healthcheck", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_each_listener_advertises_its_own_addresses(two_listener_cluster):
    c = two_listener_cluster
    for bootstrap, host, offset in ((c.internal, "127.0.0.1", 0), (c.external, "localhost", 5)):
        brokers = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers
        assert sorted((b.host, b.port) for b in brokers.values()) == [
            (host, c.base + offset + i) for i in range(BROKERS)], bootstrap


def test_produce_outside_consume_inside_replicated_over_the_internal_listener(two_listener_cluster):
    c = two_listener_cluster
    admin = AdminClient({"bootstrap.servers": c.external})
    admin.create_topics([NewTopic("two-listeners", 2, BROKERS)])["two-listeners"].result(30)
    wait_until(lambda: all(len(p.isrs) == BROKERS and p.leader >= 0 for p in
                           admin.list_topics("two-listeners", timeout=5).topics["two-listeners"].partitions.values()),
               30, "full ISR")
    p = Producer({"bootstrap.servers": c.external, "acks": "all", "enable.idempotence": True})
    errors = []
    for i in range(200):
        p.produce("two-listeners", key=str(i % 2).encode(), value=f"v{i}".encode(),
                  on_delivery=lambda err, _m: err and errors.append(err))
    assert p.flush(30) == 0 and not errors
    # acks=all with min.insync.replicas=2: every record is on the follower too, fetched over INTERNAL
    for bootstrap in (c.internal, c.external):
        cons = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
        cons.assign([TopicPartition("two-listeners", pid, 0) for pid in range(2)])
        got = []
        deadline = time.time() + 60
        while len(got) < 200 and time.time() < deadline:
            got += [m.value() for m in cons.consume(500, 1) if m.error() is None]
        cons.close()
        assert sorted(got) == sorted(f"v{i}".encode() for i in range(200)), bootstrap


def test_broker_healthcheck_answers_on_every_listener(two_listener_cluster):
    c = two_listener_cluster
    for addr in (c.internal.split(",")[0], c.external.split(",")[1]):
        r = _healthcheck("broker", addr)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("healthy: broker at")


def test_broker_healthcheck_fails_on_a_closed_port_and_on_a_non_kafka_peer():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    r = _healthcheck("broker", f"127.0.0.1:{closed}")
    assert r.returncode == 1 and r.stderr.startswith("unhealthy:"), r

    # a peer that answers with bytes that are not an ApiVersions response
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def serve():
        conn, _ = srv.accept()
        with conn:
            conn.recv(1024)
            conn.sendall(b"\x00\x00\x00\x0aHTTP/1.1 4")
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        r = _healthcheck("broker", f"127.0.0.1:{port}", "--timeout", "5")
    finally:
        srv.close()
    assert r.returncode == 1 and "unhealthy:" in r.stderr, r
    r = _healthcheck("broker", "no-port-here")
    assert r.returncode == 1 and "HOST:PORT" in r.stderr


def test_controller_healthcheck_leader_followers_and_strangers(two_listener_cluster):
    c = two_listener_cluster
    for i in range(c.n_controllers):
        r = _healthcheck("controller", f"127.0.0.1:{c.base + 100 + i}", "--node-id", str(i + 1))
        assert r.returncode == 0, r.stderr
        assert "is the quorum leader" in r.stdout or "follows leader" in r.stdout
    r = _healthcheck("controller", f"127.0.0.1:{c.base + 100}", "--node-id", "42")
    assert r.returncode == 1 and "node 42 is not a voter" in r.stderr


def test_controller_healthcheck_reports_a_dead_voter(two_listener_cluster):
    # destructive: last in this module. Kill a controller that is not the leader.
    c = two_listener_cluster
    follower = next(n for n in (f"controller-{i + 1}" for i in range(c.n_controllers))
                    if n != c.active_controller())
    nid = int(follower.rsplit("-", 1)[1])
    c.kill(follower)
    r = _healthcheck("controller", f"127.0.0.1:{c.base + 100 + nid - 1}", "--node-id", str(nid), "--timeout", "3")
    assert r.returncode == 1 and "unhealthy:" in r.stderr
    live = next(i for i in range(1, c.n_controllers + 1) if i != nid)

    def reported_dead():
        r = _healthcheck("controller", f"127.0.0.1:{c.base + 100 + live - 1}", "--node-id", str(nid),
                         "--max-lag-ms", "2000")
        return r.returncode == 1 and f"last heard from node {nid}" in r.stderr
    wait_until(reported_dead, 60, "the leader to report the killed voter as unheard", interval=1)
