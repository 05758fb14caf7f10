"""Requests parked in a long poll hold nothing once their client has gone: the connection's
socket is watched while its request waits, and a connection idle past connections.max.idle.ms
is closed even with a request in hand (Kafka's Selector expiry), which is what bounds a
Fetch's max_wait_ms on the broker. Also: the request memory pool (queued.max.request.bytes)
stops reading sockets when full instead of failing."""

from __future__ import annotations

import asyncio
import socket
import struct
import time

from broker.protocol import codec
from tests.protocol.conftest import RawClient, start_node
from tests.protocol.test_bad_input import create_topic, produce_body, produce_error, record_batch

HOUR_MS = 3_600_000


def fetch_frame(cid: int, max_wait_ms: int = HOUR_MS, offset: int = 0) -> bytes:
    """A Fetch v12 frame for t-0 at ``offset`` that parks until data comes or max_wait_ms."""
    req = codec.build(codec.request_type(1, 12), {
        "replica_id": -1, "max_wait": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": "t", "partitions": [
            {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20, "current_leader_epoch": -1,
             "log_start_offset": -1, "last_fetched_epoch": -1}]}],
        "forgotten_topics_data": [], "rack_id": ""})
    hdr = struct.pack(">hhih", 1, 12, cid, 4) + b"test" + b"\x00"
    body = codec.encode(req)
    return struct.pack(">i", len(hdr) + len(body)) + hdr + body


def api_versions_frame(cid: int) -> bytes:
    hdr = struct.pack(">hhih", 18, 0, cid, 4) + b"test"
    return struct.pack(">i", len(hdr)) + hdr


def connections(node) -> int:
    return sum(len(s._conns) for s in node.broker.servers)


async def wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.05)
    return predicate()


async def parked_clients(node, n: int, *, pipelined: bool = False) -> list[socket.socket]:
    """``n`` raw sockets, each with a Fetch parked for an hour (and, if ``pipelined``, an
    ApiVersions request sent behind it, which stays unread on the broker's side)."""
    before = connections(node)
    socks = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", node.port))
        s.setblocking(False)
        s.send(fetch_frame(i) + (api_versions_frame(1000 + i) if pipelined else b""))
        socks.append(s)
    assert await wait_for(lambda: connections(node) == before + n, 5)
    await asyncio.sleep(0.3)  # every fetch reached its wait
    return socks


async def test_parked_fetches_of_clients_that_closed_are_released_at_once(tmp_path):
    node = await start_node(tmp_path)
    try:
        await create_topic(node, "t")
        closed = await parked_clients(node, 20)
        reset = await parked_clients(node, 10)
        kept = await parked_clients(node, 5)
        assert connections(node) == 35
        for s in closed:
            s.close()  # FIN
        for s in reset:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()  # RST
        assert await wait_for(lambda: connections(node) == 5, 2.0), connections(node)
        assert node.broker.memory_pool.used < 5 * 1024  # the closed ones' frames went back to the pool
        # the clients still connected get their parked fetch answered when data comes
        c = await RawClient.connect(node.port)
        assert produce_error(await c.request(0, 8, produce_body("t", 0, record_batch([b"x"]))))[0] == 0
        for s in kept:
            s.setblocking(True)
            s.settimeout(5)
            (size,) = struct.unpack(">i", s.recv(4))
            assert size > 0
            s.close()
        c.close()
    finally:
        await node.stop()


async def test_parked_fetch_with_a_pipelined_request_behind_it_is_released_when_its_client_closes(tmp_path):
    """The next request is already in the socket, so the socket stays readable: the broker
    tells a closed peer from the TCP state instead."""
    node = await start_node(tmp_path)
    try:
        await create_topic(node, "t")
        socks = await parked_clients(node, 10, pipelined=True)
        for s in socks:
            s.close()
        assert await wait_for(lambda: connections(node) == 0, 3.0), connections(node)
    finally:
        await node.stop()


async def test_idle_expiry_closes_a_connection_with_a_parked_fetch(tmp_path):
    """connections.max.idle.ms bounds a long poll, as in Kafka (no I/O for that long closes the
    connection, request in hand or not); a client that keeps talking is not cut."""
    node = await start_node(tmp_path, connections_max_idle_ms="1500")
    try:
        await create_topic(node, "t")
        [parked] = await parked_clients(node, 1)
        busy = await RawClient.connect(node.port)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2.5:
            raw = await busy.request(18, 0, b"")
            assert struct.unpack_from(">ih", raw) == (busy.cid, 0)
            await asyncio.sleep(0.3)
        assert connections(node) == 1  # the parked one is gone, the busy one is not
        parked.setblocking(True)
        parked.settimeout(2)
        assert parked.recv(1) == b""
        parked.close()
        busy.close()
    finally:
        await node.stop()


async def test_full_request_memory_pool_stops_reading_instead_of_failing(tmp_path):
    """queued.max.request.bytes: a frame that does not fit waits (its socket is not read) until
    the frames in hand are done; then everything is served."""
    mib = 1024 * 1024
    node = await start_node(tmp_path, socket_request_max_bytes=str(mib), queued_max_request_bytes=str(mib))
    try:
        await create_topic(node, "t")
        big = await RawClient.connect(node.port)
        big.cid += 1
        hdr = struct.pack(">hhih", 0, 8, big.cid, 4) + b"test"
        body = produce_body("t", 0, record_batch([b"y" * 50_000]))
        pad = mib - len(hdr) - len(body)  # trailing bytes of a Produce request are ignored
        frame = struct.pack(">i", mib) + hdr + body + b"\x00" * pad
        await big.send_raw(frame[:mib // 2])  # the whole pool is reserved, half of it has arrived
        await asyncio.sleep(0.2)
        assert node.broker.memory_pool.available == 0
        small = await RawClient.connect(node.port)
        pending = asyncio.ensure_future(small.request(18, 0, b""))
        gone = await RawClient.connect(node.port)
        await gone.send_raw(api_versions_frame(1))
        await asyncio.sleep(0.5)
        assert not pending.done() and node.broker.memory_pool.waiting == 2  # back-pressure, no error
        gone.close()  # a client that leaves while its request waits for room leaves the queue
        assert await wait_for(lambda: node.broker.memory_pool.waiting == 1, 3)
        await big.send_raw(frame[mib // 2:])
        assert produce_error(await big.recv_frame())[0] == 0
        raw = await asyncio.wait_for(pending, 5)
        assert struct.unpack_from(">ih", raw) == (small.cid, 0)
        assert await wait_for(lambda: node.broker.memory_pool.used == 0, 2)
        big.close()
        small.close()
    finally:
        await node.stop()
