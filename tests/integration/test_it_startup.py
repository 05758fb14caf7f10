"""Start-up (issue 18): a node that cannot start exits non-zero within seconds (a port in use,
a data directory another node holds), and a (re)started node accepts client connections only
once it can answer them from a caught-up image that lists itself: the first Metadata a client
gets names the broker and a leader for every partition."""

from __future__ import annotations

import socket
import struct
import subprocess
import time

import pytest
from confluent_kafka import Producer
from conftest import MOCK, create_topic
from krafty_node import KraftyNode, _recv_exact, start_or_fail

pytestmark = pytest.mark.krafty_only

EXIT_WITHIN_S = 15.0


@pytest.fixture
def node(tmp_path):
    if MOCK:
        pytest.skip("KRAFTY_IT_TARGET=mock: needs a real krafty node")
    n = KraftyNode(tmp_path / "node")
    yield n
    n.close()


def _hold(port: int) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(1)
    return s


def _exits(node: KraftyNode) -> tuple[int, float]:
    t0 = time.monotonic()
    node.spawn()
    try:
        code = node.proc.wait(EXIT_WITHIN_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the node was still running {EXIT_WITHIN_S:.0f}s after a fatal start-up error:\n"
                    f"{node.log_tail(15)}")
    return code, time.monotonic() - t0


def _refused_start(node: KraftyNode, port: int) -> None:
    with _hold(port):
        code, took = _exits(node)
    assert code == 1, node.log_tail(15)
    assert f"127.0.0.1:{port}" in node.log_tail(5), node.log_tail(15)


def test_port_in_use_exits_nonzero_promptly(node):
    for port in (node.port, node.controller_port):  # a client listener, the controller listener
        _refused_start(node, port)


def test_port_in_use_exits_nonzero_promptly_with_data(node):
    start_or_fail(node)
    create_topic(node, "t", 3)
    node.kill()
    for port in (node.port, node.controller_port):
        _refused_start(node, port)
    start_or_fail(node)  # once the ports are free the node starts on its data
    assert _metadata_v1(node.port, "t") == ([1], {0: 1, 1: 1, 2: 1})


def test_data_dir_in_use_exits_nonzero_promptly(node, tmp_path):
    start_or_fail(node)
    twin = KraftyNode(tmp_path / "twin")  # other ports, same data directory
    twin.data_dir = node.data_dir
    try:
        code, _ = _exits(twin)
        assert code == 1, twin.log_tail(15)
        assert "Failed to acquire lock on file .lock" in twin.log_tail(5), twin.log_tail(15)
    finally:
        twin.close()
    assert node.running


def _metadata_v1(port: int, topic: str, timeout: float = 5.0) -> tuple[list[int], dict[int, int]]:
    """One raw Metadata v1 request: (broker ids, {partition: leader})."""
    name = topic.encode()
    body = struct.pack(">hhih", 3, 1, 7, 5) + b"probe" + struct.pack(">ih", 1, len(name)) + name
    with socket.create_connection(("127.0.0.1", port), timeout) as s:
        s.settimeout(timeout)
        s.sendall(struct.pack(">i", len(body)) + body)
        buf = _recv_exact(s, struct.unpack(">i", _recv_exact(s, 4))[0])
    pos = 4  # correlation id

    def take(fmt: str):
        nonlocal pos
        v = struct.unpack_from(fmt, buf, pos)
        pos += struct.calcsize(fmt)
        return v[0] if len(v) == 1 else v

    def skip_string() -> None:
        nonlocal pos
        size = take(">h")
        pos += max(size, 0)

    brokers = []
    for _ in range(take(">i")):
        brokers.append(take(">i"))
        skip_string()  # host
        take(">i")  # port
        skip_string()  # rack
    take(">i")  # controller id
    leaders = {}
    for _ in range(take(">i")):
        take(">h")
        skip_string()
        take(">b")  # is_internal
        for _ in range(take(">i")):
            _err, pid, leader = take(">hii")
            leaders[pid] = leader
            for _ in range(2):  # replicas, isr
                count = take(">i")
                pos += 4 * count
    return brokers, leaders


def _accepting(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), 0.05):
            return True
    except OSError:
        return False


@pytest.mark.parametrize("crash", [False, True], ids=["stop", "kill"])
def test_restarted_node_answers_full_metadata_from_its_first_connection(node, crash):
    start_or_fail(node)
    create_topic(node, "t", 3)
    if crash:
        node.kill()
    else:
        node.stop()
    t0 = time.monotonic()
    node.spawn()
    # librdkafka clients bootstrapping while the node comes up must not stall (they did for 20 s
    # or more after a first Metadata that listed no broker): one from the spawn on, one created
    # the moment the listener accepts
    delivered: list[float] = []
    producers = [Producer({"bootstrap.servers": node.bootstrap, "message.timeout.ms": 60000})]
    producers[0].produce("t", b"early", partition=2, on_delivery=lambda err, msg: delivered.append(
        time.monotonic() - t0 if err is None else -1.0))
    while not _accepting(node.port):  # connect the moment the listener accepts
        assert node.running, node.log_tail(15)
        assert time.monotonic() - t0 < 60, node.log_tail(15)
        producers[0].poll(0)
        time.sleep(0.002)
    accepting_after = time.monotonic() - t0
    print(f"restart ({'kill -9' if crash else 'stop'}): accepting connections {accepting_after:.2f}s after spawn")
    producers.append(Producer({"bootstrap.servers": node.bootstrap, "message.timeout.ms": 60000}))
    producers[1].produce("t", b"late", partition=1, on_delivery=lambda err, msg: delivered.append(
        time.monotonic() - t0 if err is None else -1.0))
    first = _metadata_v1(node.port, "t")
    assert first == ([1], {0: 1, 1: 1, 2: 1}), f"first Metadata after start: {first}"
    for p in producers:
        p.flush(30)
    assert len(delivered) == 2 and min(delivered) >= 0, delivered
    assert max(delivered) < accepting_after + 5.0, f"deliveries {delivered} (listener accepted at {accepting_after:.2f}s)"
    # the restarted broker registered at once: after kill -9 its previous incarnation is not
    # waited for (it was the same process as the controller that restarted with it)
    restart_log = node.log_path.read_text(errors="replace").rsplit("===== krafty-it: start", 1)[-1]
    assert "registration failed" not in restart_log, restart_log[-2000:]
