"""Transactions on the wire without a transaction coordinator: hand-built transactional
produce batches, WriteTxnMarkers as the coordinator sends them, read_committed fetches, and a
fake coordinator endpoint answering the partition leader's AddPartitionsToTxn (KIP-890)."""

from __future__ import annotations

import asyncio
import datetime
import struct

from broker.log.batch import Record, build_batch, decode_records, parse_batches
from broker.protocol import codec
from broker.protocol.apis import ApiKey
from tests.protocol.conftest import RawClient, free_port

TXN_ID = "txn-1"


def txn_batch(pid: int, epoch: int, seq: int, values: list[bytes], transactional: bool | None = None) -> bytes:
    """A producer's batch: transactional unless ``pid`` is -1 (a plain producer) or told otherwise."""
    return bytes(build_batch([Record(i, 1_000 + i, None, v, []) for i, v in enumerate(values)], base_offset=0,
                             producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                             transactional=pid >= 0 if transactional is None else transactional))


async def produce(port: int, topic: str, records: bytes, *, txn_id: str | None = TXN_ID, version: int = 9,
                  partition: int = 0, acks: int = -1):
    c = await RawClient.connect(port)
    try:
        resp = await c.call(ApiKey.PRODUCE, version, codec.build(codec.request_type(ApiKey.PRODUCE, version), {
            "transactional_id": txn_id, "acks": acks, "timeout": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}]}))
    finally:
        c.close()
    return resp.responses[0].partition_responses[0]


async def write_markers(port: int, markers: list[tuple[int, int, bool, int, list[tuple[str, int]]]],
                        version: int = 2, transaction_version: int = 0):
    """``markers``: (producer id, producer epoch, commit, coordinator epoch, partitions).
    Returns {(producer id, topic, partition): error code}."""
    def topics(tps):
        by: dict[str, list[int]] = {}
        for t, p in tps:
            by.setdefault(t, []).append(p)
        return [{"name": t, "partition_indexes": ps} for t, ps in by.items()]
    data = {"markers": [{"producer_id": pid, "producer_epoch": e, "transaction_result": commit,
                         "coordinator_epoch": ce, "topics": topics(tps),
                         **({"transaction_version": transaction_version} if version >= 2 else {})}
                        for pid, e, commit, ce, tps in markers]}
    c = await RawClient.connect(port)
    try:
        resp = await c.call(ApiKey.WRITE_TXN_MARKERS, version,
                            codec.build(codec.request_type(ApiKey.WRITE_TXN_MARKERS, version), data))
    finally:
        c.close()
    return {(m.producer_id, t.name, p.partition_index): int(p.error_code)
            for m in resp.markers for t in m.topics for p in t.partitions}


async def fetch(port: int, topic: str, offset: int = 0, *, isolation: int = 1, version: int = 12,
                partition: int = 0, max_bytes: int = 1 << 20):
    """(partition response, [(offset, value)] of the records, or with ``raw``...)."""
    c = await RawClient.connect(port)
    try:
        resp = await c.call(ApiKey.FETCH, version, codec.build(codec.request_type(ApiKey.FETCH, version), {
            "replica_id": -1, "max_wait": datetime.timedelta(milliseconds=10), "min_bytes": 1,
            "max_bytes": max_bytes, "isolation_level": isolation, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{"partition": partition, "current_leader_epoch": -1,
                                                        "fetch_offset": offset, "last_fetched_epoch": -1,
                                                        "log_start_offset": -1,
                                                        "partition_max_bytes": max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": ""}))
    finally:
        c.close()
    return resp.responses[0].partitions[0]


def committed_values(p) -> list[bytes]:
    """What a read_committed client keeps of a fetch response: the records of batches that are
    not control batches and not of an aborted transaction (by producer id from its first offset,
    until that producer's abort marker), as KIP-98 clients do."""
    data = bytes(p.records or b"")
    aborted = sorted((int(a.first_offset), int(a.producer_id)) for a in (p.aborted_transactions or ()))
    open_aborts: set[int] = set()
    out = []
    for h in parse_batches(data):
        while aborted and aborted[0][0] <= h.last_offset:
            open_aborts.add(aborted.pop(0)[1])
        if h.is_control:
            open_aborts.discard(h.producer_id)  # simplification: every marker ends the producer's abort
            continue
        if h.is_transactional and h.producer_id in open_aborts:
            continue
        out += [r.value for r in decode_records(data[h.pos:h.pos + h.size])]
    return out


async def list_latest(port: int, topic: str, isolation: int, version: int = 7) -> int:
    c = await RawClient.connect(port)
    try:
        resp = await c.call(ApiKey.LIST_OFFSETS, version, codec.build(codec.request_type(ApiKey.LIST_OFFSETS, version), {
            "replica_id": -1, "isolation_level": isolation,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                                       "timestamp": -1}]}]}))
    finally:
        c.close()
    p = resp.topics[0].partitions[0]
    assert int(p.error_code) == 0, p
    return int(p.offset)


class FakeCoordinator:
    """Answers AddPartitionsToTxn v4+ (the partition leader's verification) like a transaction
    coordinator: ``errors[(txn id, topic, partition)]`` (default NONE) per partition, or
    ``top_error`` for the whole request. Records what it was asked."""

    def __init__(self):
        self.errors: dict[tuple[str, str, int], int] = {}
        self.top_error = 0
        self.requests: list[tuple[int, object]] = []
        self.port = free_port()
        self.server: asyncio.Server | None = None

    async def start(self) -> FakeCoordinator:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        return self

    def install(self, node) -> None:
        node.broker.replicas.txn_verifier.locate = lambda txn_id: (0, ("127.0.0.1", self.port))

    async def _serve(self, r, w) -> None:
        try:
            while True:
                size = struct.unpack(">i", await r.readexactly(4))[0]
                frame = await r.readexactly(size)
                h = codec.parse_request_header(frame)
                req = codec.decode_request(h.api_key, h.api_version, frame, h.size)
                self.requests.append((h.api_version, req))
                resp = codec.build_response(h.api_key, h.api_version, {
                    "throttle_time": 0, "error_code": self.top_error, "results_by_transaction": [
                        {"transactional_id": t.transactional_id, "topic_results": [
                            {"name": tp.name, "results_by_partition": [
                                {"partition_index": i,
                                 "partition_error_code": self.errors.get((t.transactional_id, tp.name, i), 0)}
                                for i in tp.partitions]} for tp in t.topics]} for t in req.transactions]})
                w.write(codec.frame(codec.response_header(h.api_key, h.api_version, h.correlation_id),
                                    codec.encode(resp)))
                await w.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            w.close()

    async def stop(self) -> None:
        self.server.close()
        await self.server.wait_closed()
