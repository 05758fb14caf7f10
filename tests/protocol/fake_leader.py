"""A fake partition leader for the transaction coordinator's tests: a Kafka-protocol server
that answers WriteTxnMarkers v2 (and nothing else), records every marker it gets, and answers
each partition with NONE or with an error a test scripts (``errors``: a list per partition,
consumed one answer at a time). ``hold`` makes it stop answering (the connection stays open)."""

from __future__ import annotations

import asyncio
import dataclasses
import struct

from broker.protocol import codec
from broker.protocol.apis import ApiKey


@dataclasses.dataclass(frozen=True)
class Marker:
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partition: tuple[str, int]


class FakeLeader:
    def __init__(self):
        self.markers: list[Marker] = []  # every marker received, answered or not
        self.written: list[Marker] = []  # the markers answered NONE
        self.errors: dict[tuple[str, int], list[int]] = {}
        self.hold = False
        self.drop_next = 0  # close the connection instead of answering this many requests
        self.requests = 0
        self.versions: list[int] = []  # the transaction_version of every marker received
        self._server: asyncio.AbstractServer | None = None
        self.port = 0

    async def start(self) -> FakeLeader:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = struct.unpack(">i", await r.readexactly(4))[0]
                frame = await r.readexactly(size)
                h = codec.parse_request_header(frame)
                assert (h.api_key, h.api_version) == (ApiKey.WRITE_TXN_MARKERS, 2), h
                req = codec.decode_request(h.api_key, h.api_version, frame, h.size)
                self.requests += 1
                self.versions += [int(m.transaction_version) for m in req.markers]
                got = [[[Marker(int(m.producer_id), int(m.producer_epoch), bool(m.transaction_result),
                                int(m.coordinator_epoch), (t.name, int(p))) for p in t.partition_indexes]
                        for t in m.topics] for m in req.markers]
                self.markers += [mk for topics in got for parts in topics for mk in parts]
                while self.hold:
                    await asyncio.sleep(0.01)
                if self.drop_next:
                    self.drop_next -= 1
                    w.close()
                    return
                out = []
                for m, got_topics in zip(req.markers, got, strict=True):
                    topics = []
                    for t, got_parts in zip(m.topics, got_topics, strict=True):
                        parts = []
                        for p, mk in zip(t.partition_indexes, got_parts, strict=True):
                            scripted = self.errors.get((t.name, int(p)))
                            err = scripted.pop(0) if scripted else 0
                            if not err:
                                self.written.append(mk)
                            parts.append({"partition_index": p, "error_code": err})
                        topics.append({"name": t.name, "partitions": parts})
                    out.append({"producer_id": m.producer_id, "topics": topics})
                body = codec.encode(codec.build_response(ApiKey.WRITE_TXN_MARKERS, 2, {"markers": out}))
                header = codec.response_header(ApiKey.WRITE_TXN_MARKERS, 2, h.correlation_id)
                w.write(codec.frame(header, body))
                await w.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            w.close()


def route_markers_to(node, fake: FakeLeader) -> None:
    """Make ``node``'s inter-broker connections to itself (the leader of every partition of a
    one-node cluster) reach ``fake`` instead: the marker sender uses these endpoints."""
    fetchers = node.broker.replicas.fetchers
    own = fetchers.endpoint_of

    def endpoint_of(broker_id: int):
        return ("127.0.0.1", fake.port) if broker_id == node.broker.node_id else own(broker_id)
    fetchers.endpoint_of = endpoint_of
    node.broker.apis.txn_coordinator.markers.local = None  # not written in process either
