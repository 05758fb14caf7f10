"""Connections that try to make a broker hold memory it never gets back, against a node that
runs as its own memory-limited process (RLIMIT_AS 1.5 GB: a regression fails the test, not the
machine), with a real client (confluent-kafka) checked on the same node after each attack:

- length prefixes announcing 100 MiB that never come (before: each allocated and zeroed at once,
  so ~40 such 5-byte sends killed a broker);
- the same on a SASL listener before authentication, where Kafka caps frames at
  sasl.server.max.receive.size (512 KiB) and closes the connection beyond it;
- thousands of connections opened, used once, left idle and closed (before: 256 KiB each,
  never given back);
- long-poll Fetches whose clients go away (before: socket, fd and buffer kept until max_wait)."""

from __future__ import annotations

import os
import resource
import socket
import struct
import time
import uuid

import pytest

from tests.integration.krafty_node import KraftyNode, free_port, start_or_fail, wait_until
from tests.protocol.test_parked_requests import fetch_frame
from tests.security.conftest import jaas_plain

MIB = 1024 * 1024
USER, PASSWORD = "alice", "alice-secret"


class Node:
    def __init__(self, node: KraftyNode, sasl_port: int):
        self.node, self.sasl_port = node, sasl_port
        self.port = node.port

    def rss(self) -> float:
        return self.node.rss_mb()

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.node.proc.pid}/fd"))


@pytest.fixture(scope="module")
def hnode(tmp_path_factory):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 12_000 and (hard == resource.RLIM_INFINITY or hard >= 12_000):
        resource.setrlimit(resource.RLIMIT_NOFILE, (12_000, hard))  # the node inherits it
    sasl_port = free_port()
    node = KraftyNode(tmp_path_factory.mktemp("hostile"), memory_limit_mb=1536)
    node.extra_properties = {
        "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port},"
                     f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.jaas.config": jaas_plain({USER: PASSWORD}),
    }
    start_or_fail(node)
    yield Node(node, sasl_port)
    node.close()


def canary(bootstrap: str, **conf) -> None:
    """A real client still produces and consumes on the node."""
    from confluent_kafka import Consumer, Producer

    topic = f"canary-{uuid.uuid4().hex[:8]}"
    value = uuid.uuid4().bytes
    p = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 20_000, **conf})
    p.produce(topic, value)
    assert p.flush(25) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest", **conf})
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                assert m.value() == value
                return
        pytest.fail("the canary consumer got nothing")
    finally:
        c.close()


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    return s


def closed_by_broker(s: socket.socket, timeout: float) -> bool:
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def api_versions(s: socket.socket, cid: int) -> None:
    hdr = struct.pack(">hhih", 18, 0, cid, 4) + b"test"
    s.sendall(struct.pack(">i", len(hdr)) + hdr)
    (size,) = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))
    assert struct.unpack(">i", s.recv(size, socket.MSG_WAITALL)[:4])[0] == cid


def test_length_prefixes_announcing_100_mib_are_not_allocated(hnode):
    """50 connections each send 5 bytes announcing 100 MiB: memory follows the bytes that
    arrive, announced sizes wait for room in the request memory pool, nothing dies."""
    base = hnode.rss()
    socks = [connect(hnode.port) for _ in range(50)]
    try:
        for s in socks:
            s.sendall(struct.pack(">i", 100 * MIB) + b"\x00")
        time.sleep(1.5)
        assert hnode.node.running, hnode.node.log_tail()
        assert hnode.rss() - base < 64, (base, hnode.rss())
        canary(hnode.node.bootstrap)  # small requests still fit while the big ones wait
    finally:
        for s in socks:
            s.close()
    assert hnode.node.running
    canary(hnode.node.bootstrap)


def test_unauthenticated_sasl_frames_are_capped_at_sasl_server_max_receive_size(hnode):
    base = hnode.rss()
    over = connect(hnode.sasl_port)
    over.sendall(struct.pack(">i", 512 * 1024 + 1) + b"\x00")
    assert closed_by_broker(over, 3)
    over.close()
    at_cap = connect(hnode.sasl_port)
    at_cap.sendall(struct.pack(">i", 512 * 1024) + b"\x00")  # allowed: waits for the rest
    assert not closed_by_broker(at_cap, 0.5)
    at_cap.close()
    socks = [connect(hnode.sasl_port) for _ in range(10)]
    for s in socks:
        s.sendall(struct.pack(">i", 100 * MIB) + b"\x00")
    assert all(closed_by_broker(s, 3) for s in socks)
    for s in socks:
        s.close()
    assert hnode.node.running and hnode.rss() - base < 64
    canary(f"127.0.0.1:{hnode.sasl_port}", **{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                              "sasl.username": USER, "sasl.password": PASSWORD})


def test_thousands_of_idle_connections_leave_no_memory_behind(hnode):
    n = 5000
    base = hnode.rss()
    socks = []
    try:
        for i in range(n):
            s = connect(hnode.port)
            api_versions(s, i)  # each connection had a request: its buffers came and went
            socks.append(s)
        opened = hnode.rss()
        assert opened - base < 150, (base, opened)
    finally:
        for s in socks:
            s.close()
    wait_until(lambda: hnode.fds() < 200, 10, message="the node closing its side")
    time.sleep(1)
    after = hnode.rss()
    print(f"RSS MB: before {base:.0f}, {n} idle connections open {opened:.0f}, after they closed {after:.0f}")
    assert after - base < 48, (base, opened, after)
    canary(hnode.node.bootstrap)


def test_parked_fetches_of_clients_that_went_away_release_their_sockets(hnode):
    """200 long-poll Fetches (max_wait one hour) parked, their clients close: the node's fds
    go back within a couple of seconds (before: until max_wait, in CLOSE-WAIT)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": hnode.node.bootstrap})
    admin.create_topics([NewTopic("t", 1, 1)])["t"].result(15)
    base = hnode.fds()
    socks = []
    for i in range(200):
        s = connect(hnode.port)
        s.sendall(fetch_frame(i))
        socks.append(s)
    wait_until(lambda: hnode.fds() >= base + 200, 10, message="the fetches to arrive")
    time.sleep(0.5)
    assert not closed_by_broker(socks[0], 0.1)  # parked, not answered
    t0 = time.monotonic()
    for s in socks:
        s.close()
    wait_until(lambda: hnode.fds() <= base + 5, 5, interval=0.05, message="the parked fetches to be released")
    print(f"200 parked fetches released {time.monotonic() - t0:.2f}s after their clients closed")
    canary(hnode.node.bootstrap)
