"""A listener's accept loop: the failed set-up of one connection closes that connection only;
an accept that fails for want of a resource is retried; a listener that cannot go on is a
fatal error of the node (it exits non-zero), never a process that silently stops accepting."""

from __future__ import annotations

import asyncio
import errno
import logging
import struct
import time

import pytest

import broker.server as server_mod
from broker.server import KafkaServer
from common.config import Config
from krafty.node import StartupError, run_node
from tests.protocol.conftest import TEST_CLUSTER_ID, free_port


async def _echo_handler(ctx, body):
    return [struct.pack(">i", ctx.header.correlation_id)]


def _request(cid: int) -> bytes:
    body = struct.pack(">hhih", 18, 0, cid, 4) + b"test"  # an ApiVersions v0 header
    return struct.pack(">i", len(body)) + body


async def _answered(port: int, cid: int) -> bool:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    try:
        w.write(_request(cid))
        size = struct.unpack(">i", await asyncio.wait_for(r.readexactly(4), 2))[0]
        return struct.unpack(">i", await r.readexactly(size))[0] == cid
    except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
        return False
    finally:
        w.close()


@pytest.fixture
async def listener():
    s = KafkaServer("PLAINTEXT", "127.0.0.1", 0, _echo_handler, max_request_size=1 << 20)
    await s.start()
    yield s
    await s.close()


async def test_a_connection_whose_setup_fails_is_closed_and_the_listener_goes_on(listener, monkeypatch, caplog):
    real = server_mod.Connection
    calls = []

    def failing_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise MemoryError()
        return real(*args, **kwargs)

    monkeypatch.setattr(server_mod, "Connection", failing_once)
    with caplog.at_level(logging.ERROR, "krafty.network"):
        assert not await _answered(listener.port, 1)  # its set-up failed: closed
        assert await _answered(listener.port, 2)  # the next one is served
    assert "set-up failed" in caplog.text and "MemoryError" in caplog.text
    assert listener.failure() is None


async def test_an_accept_that_fails_for_want_of_descriptors_is_retried(listener, monkeypatch):
    loop = asyncio.get_running_loop()
    real = loop.sock_accept
    fails = [OSError(errno.EMFILE, "Too many open files"), MemoryError()]

    async def accept(sock):
        if fails:
            await real(sock)  # the connection is accepted, then the call fails
            raise fails.pop(0)
        return await real(sock)

    monkeypatch.setattr(loop, "sock_accept", accept)
    listener._accept_task.cancel()  # restart the loop so that it uses the patched accept
    listener._accept_task = loop.create_task(listener._accept_loop())
    await asyncio.sleep(0)
    assert not await _answered(listener.port, 1)
    assert not await _answered(listener.port, 2)
    assert await _answered(listener.port, 3)
    assert listener.failure() is None


async def test_a_listener_that_cannot_go_on_reports_why(listener, monkeypatch):
    loop = asyncio.get_running_loop()

    async def accept(sock):
        raise OSError(errno.EBADF, "Bad file descriptor")  # the listening socket is gone

    monkeypatch.setattr(loop, "sock_accept", accept)
    listener._accept_task.cancel()
    listener._accept_task = loop.create_task(listener._accept_loop())
    await asyncio.sleep(0.05)
    e = listener.failure()
    assert e is not None and "listener PLAINTEXT" in str(e) and "Bad file descriptor" in str(e)


async def test_the_node_exits_when_a_client_listener_dies(tmp_path, monkeypatch):
    """run_node (what `krafty node` runs) ends with StartupError, so the process exits 1."""
    async def broken(self):
        raise RuntimeError("accept loop bug")

    monkeypatch.setattr(KafkaServer, "_accept_loop", broken)
    port, cport = free_port(), free_port()
    cfg = Config({"node.id": "1", "process.roles": "broker,controller", "cluster.id": TEST_CLUSTER_ID,
                  "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
                  "controller.quorum.voters": f"1@127.0.0.1:{cport}", "log.dirs": str(tmp_path / "data")})
    with pytest.raises(StartupError, match="listener PLAINTEXT .* stopped accepting connections.*accept loop bug"):
        await asyncio.wait_for(run_node(cfg), 60)


async def test_a_client_pipelining_slow_requests_does_not_starve_other_connections(monkeypatch):
    """A connection's requests are handled one at a time, in order; between two of them the
    connection yields to the event loop, so a client pipelining hundreds of requests (librdkafka
    sends Metadata again and again while partitions have no leader: 100 ms each for a
    3,000-partition topic) does not hold the loop until its queue is empty: other connections
    and background tasks (the creation of those partitions' logs) run in between."""
    async def handler(ctx, body):
        if ctx.header.api_key == 3:
            time.sleep(0.02)  # a request whose handling never suspends (encoding a large answer)
        return [struct.pack(">i", ctx.header.correlation_id)]

    s = KafkaServer("PLAINTEXT", "127.0.0.1", 0, handler, max_request_size=1 << 20)
    await s.start()
    try:
        r, w = await asyncio.open_connection("127.0.0.1", s.port)
        body = struct.pack(">hhih", 3, 1, 7, 4) + b"test"
        t0 = time.monotonic()
        w.write((struct.pack(">i", len(body)) + body) * 100)  # 2 s of work, pipelined
        await asyncio.sleep(0.1)  # (this test's own task is starved too while the loop is held)
        assert await _answered(s.port, 1)
        took = time.monotonic() - t0
        assert took < 0.8, f"a new connection waited {took:.2f}s behind another's pipelined requests"
        w.close()
    finally:
        await s.close()
