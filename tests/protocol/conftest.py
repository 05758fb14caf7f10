"""An in-process krafty node (real sockets, real files) and a raw Kafka-protocol client."""

from __future__ import annotations

import asyncio
import struct

import pytest

from broker.protocol import codec
from common.config import Config
from common.ports import free_port  # noqa: F401 (re-exported to the tests)
from krafty.node import Node

TEST_CLUSTER_ID = "a3JhZnR5LXRlc3Qtbm9kZQ"




async def start_node(tmp_path, **overrides: str) -> Node:
    """A started in-process node; ``overrides`` are config keys with dots written as ``_``."""
    cfg, port = node_config(tmp_path, **overrides)
    n = Node(cfg)
    await n.start()
    n.port = port
    return n


def node_config(tmp_path, **overrides: str) -> tuple[Config, int]:
    """The configuration start_node uses, and its client port."""
    port, cport = free_port(), free_port()
    props = {
        "node.id": "1", "process.roles": "broker,controller",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
        "controller.quorum.voters": f"1@127.0.0.1:{cport}", "log.dirs": str(tmp_path / "data"),
        "socket.request.max.bytes": str(1024 * 1024 * 4), "message.max.bytes": "100000",
        "cluster.id": TEST_CLUSTER_ID,  # formats the empty data dir on first start
    }
    props.update({k.replace("_", "."): v for k, v in overrides.items()})
    return Config(props), port


@pytest.fixture
async def node(tmp_path):
    n = await start_node(tmp_path)
    yield n
    await n.stop()


@pytest.fixture
async def conn(node):
    """A connected KafkaConnection to ``node``."""
    from broker.protocol.client import KafkaConnection

    c = KafkaConnection("127.0.0.1", node.port)
    await c.connect()
    yield c
    c.close()


class RawClient:
    def __init__(self, reader, writer):
        self.r, self.w = reader, writer
        self.cid = 0

    @classmethod
    async def connect(cls, port: int) -> RawClient:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        return cls(r, w)

    async def send_raw(self, data: bytes) -> None:
        self.w.write(data)
        await self.w.drain()

    async def recv_frame(self, timeout: float = 5) -> bytes:
        size = struct.unpack(">i", await asyncio.wait_for(self.r.readexactly(4), timeout))[0]
        return await asyncio.wait_for(self.r.readexactly(size), timeout)

    async def request(self, api_key: int, version: int, body: bytes, *, flexible_header: bool | None = None):
        self.cid += 1
        flex = codec.is_flexible(api_key, version) if flexible_header is None else flexible_header
        hdr = struct.pack(">hhih", api_key, version, self.cid, 4) + b"test" + (b"\x00" if flex else b"")
        await self.send_raw(struct.pack(">i", len(hdr) + len(body)) + hdr + body)
        return await self.recv_frame()

    async def call(self, api_key: int, version: int, obj):
        """Encode a kio request, send it, decode the response."""
        raw = await self.request(api_key, version, codec.encode(obj))
        resp_flex = api_key != 18 and codec.is_flexible(api_key, version)
        (cid,) = struct.unpack_from(">i", raw)
        assert cid == self.cid
        body_start = 5 if resp_flex else 4
        cls = codec.response_type(api_key, version)
        obj, _ = codec._reader(cls)(raw, body_start)
        return obj

    async def closed(self, timeout: float = 5) -> bool:
        try:
            data = await asyncio.wait_for(self.r.read(1), timeout)
        except (ConnectionError, TimeoutError):
            return True
        return data == b""

    def close(self) -> None:
        self.w.close()
