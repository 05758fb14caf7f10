"""The executor side of the krafty source: read one topic partition's offset range with Kafka
Fetch requests and hand out Arrow record batches.

A task reads [start, end) of one partition from its leader over krafty's own Kafka-protocol
connection (broker/protocol/client.py: TLS and SASL PLAIN/SCRAM included), one fetch in flight
ahead of the one being decoded. The fetched record batches are decoded into Arrow columns
without a Python object per record (pipeline/arrow_records.py). Nothing joins a consumer group
and nothing is committed: the driver planned the offsets.

The asyncio loop runs in one daemon thread per Python worker process and its connections are
kept for the next task of the same worker (Spark reuses Python workers), keyed by the
connection settings.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
import uuid
from dataclasses import dataclass

from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from common.errors import ErrorCode

from . import arrow_records

# Versions we speak (Kafka 2.7+ brokers and krafty serve them): Fetch 12 (log start offset, aborted
# transactions, topic names), Metadata 12, ListOffsets 7; lower when a broker offers less.
_OURS = {ApiKey.FETCH: (4, 12), ApiKey.METADATA: (1, 12), ApiKey.LIST_OFFSETS: (1, 7)}
_LEADER_ERRORS = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.FENCED_LEADER_EPOCH,
                  ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.REPLICA_NOT_AVAILABLE,
                  ErrorCode.NOT_COORDINATOR, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.OFFSET_NOT_AVAILABLE}
# a new leader's high watermark can trail the old one's for a fetch round of its followers:
# an end offset above the high watermark is data loss only when it stays so this long
HW_GRACE_S = 3.0


class FetchError(RuntimeError):
    """The cluster refused a fetch for a reason retrying does not cure (authorization, ...)."""


@dataclass(frozen=True)
class FetchSettings:
    bootstrap: tuple[tuple[str, int], ...]
    security: object  # broker.security.sasl.ClientSecurity or None (PLAINTEXT)
    client_id: str = "krafty-spark"
    read_committed: bool = False
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 52_428_800  # fetch.max.bytes
    partition_max_bytes: int = 4 << 20  # max.partition.fetch.bytes (Java's default is 1 MiB)
    request_timeout_s: float = 30.0
    check_crcs: bool = True
    key: str = ""  # identifies the settings (a cache key: the security object is not hashable)


@dataclass
class FetchAnswer:
    error: int
    high_watermark: int
    log_start_offset: int
    records: bytes
    aborted: list


class _Loop:
    """One asyncio loop in a daemon thread (per process; created after Spark forks the worker)."""

    _lock = threading.Lock()
    _instance: _Loop | None = None
    _pid = None

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="krafty-fetch", daemon=True)
        self.thread.start()

    @classmethod
    def get(cls) -> _Loop:
        import os

        with cls._lock:
            if cls._instance is None or cls._pid != os.getpid():
                cls._instance, cls._pid = cls(), os.getpid()
                _clients.clear()
            return cls._instance

    def submit(self, coro) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)


class PartitionClient:
    """Connections to the brokers of one cluster; leader lookup, Fetch and ListOffsets."""

    def __init__(self, s: FetchSettings):
        self.s = s
        self.brokers: dict[int, tuple[str, int]] = {}
        self.leaders: dict[tuple[str, int], int] = {}
        self._conns: dict[tuple[str, int], KafkaConnection] = {}
        self._versions: dict[int, int] | None = None
        self.unknown: set[str] = set()  # topics the last Metadata answer did not know

    def _conn(self, addr: tuple[str, int]) -> KafkaConnection:
        c = self._conns.get(addr)
        if c is None:
            c = self._conns[addr] = KafkaConnection(addr[0], addr[1], client_id=self.s.client_id,
                                                    security=self.s.security)
        return c

    async def _versions_of(self, addr) -> dict[int, int]:
        if self._versions is None:
            r = await self._conn(addr).request(ApiKey.API_VERSIONS, 3, {
                "client_software_name": "krafty-spark", "client_software_version": "1"},
                timeout=self.s.request_timeout_s)
            if int(r.error_code) != 0:
                raise FetchError(f"ApiVersions to {addr[0]}:{addr[1]} failed: {ErrorCode(int(r.error_code)).name}")
            theirs = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in r.api_keys}
            out = {}
            for api, (lo, hi) in _OURS.items():
                blo, bhi = theirs.get(api, (-1, -1))
                if min(hi, bhi) < max(lo, blo):
                    raise FetchError(f"the broker at {addr[0]}:{addr[1]} does not serve {ApiKey(api).name} "
                                     f"versions {lo}-{hi} (it offers {blo}-{bhi})")
                out[api] = min(hi, bhi)
            self._versions = out
        return self._versions

    async def _request(self, addr, api: int, data: dict, timeout: float | None = None):
        v = (await self._versions_of(addr))[api]
        return await self._conn(addr).request(api, v, data, timeout=timeout or self.s.request_timeout_s)

    async def refresh(self, topic: str) -> None:
        """Leaders of ``topic`` from the first broker (known, then bootstrap) that answers."""
        errors = []
        for addr in [*self.brokers.values(), *self.s.bootstrap]:
            try:
                r = await self._request(addr, ApiKey.METADATA, {
                    "topics": [{"name": topic, "topic_id": uuid.UUID(int=0)}], "allow_auto_topic_creation": False,
                    "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False})
            except (ConnectionError, OSError, TimeoutError) as e:
                errors.append(f"{addr[0]}:{addr[1]}: {e}")
                continue
            self.brokers = {int(b.node_id): (b.host, int(b.port)) for b in r.brokers}
            for t in r.topics:
                code = int(t.error_code)
                if code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                    raise FetchError(f"not authorized to read topic {topic} (TOPIC_AUTHORIZATION_FAILED)")
                if t.name != topic:
                    continue
                for tp in [tp for tp in self.leaders if tp[0] == topic]:
                    del self.leaders[tp]
                if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    self.unknown.add(topic)
                elif code == 0:
                    self.unknown.discard(topic)
                    for p in t.partitions:
                        self.leaders[(topic, int(p.partition_index))] = int(p.leader_id)
            return
        raise ConnectionError("no broker answered a Metadata request (" + "; ".join(errors) + ")")

    async def leader_addr(self, tp: tuple[str, int]) -> tuple[str, int] | None:
        if self.leaders.get(tp, -1) not in self.brokers:
            await self.refresh(tp[0])
        return self.brokers.get(self.leaders.get(tp, -1))

    def _forget(self, addr) -> None:
        c = self._conns.pop(addr, None)
        if c is not None:
            c.close()

    async def fetch(self, tp: tuple[str, int], offset: int) -> FetchAnswer:
        """One Fetch of ``tp`` at ``offset`` from its leader; leader and connection failures are
        answered as NOT_LEADER_OR_FOLLOWER (the caller refreshes and retries)."""
        try:
            addr = await self.leader_addr(tp)
        except (ConnectionError, OSError, TimeoutError):
            return FetchAnswer(ErrorCode.LEADER_NOT_AVAILABLE, -1, -1, b"", [])
        if addr is None:
            unknown = tp[0] in self.unknown or (tp[0] in {t for t, _ in self.leaders} and tp not in self.leaders)
            return FetchAnswer(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if unknown else ErrorCode.LEADER_NOT_AVAILABLE,
                               -1, -1, b"", [])
        s = self.s
        try:
            r = await self._request(addr, ApiKey.FETCH, {
                "replica_id": -1, "max_wait": s.max_wait_ms, "min_bytes": s.min_bytes, "max_bytes": s.max_bytes,
                "isolation_level": int(s.read_committed), "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": tp[0], "partitions": [{
                    "partition": tp[1], "current_leader_epoch": -1, "fetch_offset": offset,
                    "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": s.partition_max_bytes}]}],
                "forgotten_topics_data": [], "rack_id": ""}, timeout=s.max_wait_ms / 1000 + s.request_timeout_s)
        except (ConnectionError, OSError, TimeoutError):
            self._forget(addr)
            self.leaders.pop(tp, None)
            return FetchAnswer(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1, b"", [])
        if int(r.error_code) != 0:
            return FetchAnswer(int(r.error_code), -1, -1, b"", [])
        for t in r.responses:
            for p in t.partitions:
                if int(p.partition_index) == tp[1]:
                    code = int(p.error_code)
                    if code in _LEADER_ERRORS:
                        self.leaders.pop(tp, None)
                    aborted = [(int(a.first_offset), int(a.producer_id)) for a in p.aborted_transactions or ()]
                    return FetchAnswer(code, int(p.high_watermark), int(p.log_start_offset),
                                       bytes(p.records) if p.records else b"", aborted)
        return FetchAnswer(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, b"", [])

    async def list_offset(self, tp: tuple[str, int], timestamp: int) -> tuple[int, int]:
        """(error, offset) of ListOffsets at the leader: timestamp -2 earliest, -1 latest."""
        addr = await self.leader_addr(tp)
        if addr is None:
            return ErrorCode.LEADER_NOT_AVAILABLE, -1
        try:
            r = await self._request(addr, ApiKey.LIST_OFFSETS, {
                "replica_id": -1, "isolation_level": int(self.s.read_committed),
                "topics": [{"name": tp[0], "partitions": [{"partition_index": tp[1], "current_leader_epoch": -1,
                                                           "timestamp": timestamp}]}]})
        except (ConnectionError, OSError, TimeoutError):
            self._forget(addr)
            self.leaders.pop(tp, None)
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, -1
        p = r.topics[0].partitions[0]
        if int(p.error_code) in _LEADER_ERRORS:
            self.leaders.pop(tp, None)
        return int(p.error_code), int(p.offset)


_clients: dict[str, PartitionClient] = {}


def client_for(s: FetchSettings) -> PartitionClient:
    c = _clients.get(s.key)
    if c is None:
        c = _clients[s.key] = PartitionClient(s)
    return c


def read_range(s: FetchSettings, topic: str, partition: int, start: int, end: int, *, fail_on_data_loss: bool,
               include_headers: bool, arrow_schema, poll_timeout_ms: int, data_loss):
    """Yield pyarrow.RecordBatch for the records [start, end) of one partition, in offset order,
    one per fetch (at most ``partition_max_bytes`` of records). ``data_loss(message)`` makes the
    exception raised when planned records are gone and failOnDataLoss is set."""
    if end <= start:
        return
    loop = _Loop.get()
    cl = client_for(s)
    tp = (topic, partition)
    where = f"{topic}-{partition}"
    pos = start
    last_progress = time.monotonic()
    short_since = None  # since when the high watermark has stayed below the planned end
    pending = loop.submit(cl.fetch(tp, pos))
    while pos < end:
        a = pending.result()
        pending = None
        if a.error == ErrorCode.NONE and a.records:
            secs, nxt = arrow_records.sections(a.records, pos, a.aborted, s.read_committed, where, s.check_crcs)
            if nxt > pos:
                first = secs[0][2] if secs else nxt
                if first > pos and fail_on_data_loss and a.log_start_offset > pos:
                    raise data_loss(f"{where}: offsets [{pos}, {min(a.log_start_offset, first)}) were deleted "
                                    "before they were read")
                new_pos = min(nxt, end) if nxt < end else end
                if new_pos < end:
                    pending = loop.submit(cl.fetch(tp, new_pos))  # the next fetch, while this one is decoded
                if secs:
                    batch = arrow_records.to_record_batch(secs, pos, end, topic, partition, arrow_schema,
                                                          include_headers)
                    if batch.num_rows:
                        yield batch
                pos, last_progress, short_since = new_pos, time.monotonic(), None
                continue
        if a.error == ErrorCode.OFFSET_OUT_OF_RANGE:
            low = _offset(loop, cl, tp, -2, poll_timeout_ms)
            high = _offset(loop, cl, tp, -1, poll_timeout_ms)
            if pos < low:
                msg = f"{where}: offsets [{pos}, {min(low, end)}) were deleted before they were read"
                if fail_on_data_loss:
                    raise data_loss(msg)
                pos = min(low, end)
            elif pos > high:
                msg = f"{where}: planned to read offsets [{pos}, {end}) but the log ends at {high}"
                if fail_on_data_loss:
                    raise data_loss(msg)
                pos = end
            if pos < end:
                pending = loop.submit(cl.fetch(tp, pos))
            continue
        if a.error == ErrorCode.NONE and 0 <= a.high_watermark < end and a.high_watermark <= pos:
            # the log ends before the planned end: truncated or recreated, or a new leader whose high
            # watermark has not caught up yet (then it does within a fetch round of its followers)
            short_since = short_since or time.monotonic()
            if time.monotonic() - short_since > HW_GRACE_S:
                msg = f"{where}: planned to read offsets [{pos}, {end}) but the log ends at {a.high_watermark}"
                if fail_on_data_loss:
                    raise data_loss(msg)
                return
        elif a.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            short_since = short_since or time.monotonic()
            if time.monotonic() - short_since > HW_GRACE_S and not _exists(loop, cl, tp):
                msg = f"{where}: planned to read offsets [{pos}, {end}) but the partition no longer exists"
                if fail_on_data_loss:
                    raise data_loss(msg)
                return
        elif a.error not in (ErrorCode.NONE, *_LEADER_ERRORS):
            raise FetchError(f"krafty: fetch of {where} at offset {pos} failed: {_name(a.error)}")
        else:
            short_since = None if a.error == ErrorCode.NONE else short_since
        if (time.monotonic() - last_progress) * 1000 > poll_timeout_ms:
            raise TimeoutError(f"krafty: no record from {where} at offset {pos} for {poll_timeout_ms} ms "
                               f"(kafkaConsumer.pollTimeoutMs; last answer {_name(a.error)})")
        if a.error != ErrorCode.NONE:
            time.sleep(0.2)  # a leader is being elected or the connection broke: back off, then look again
        pending = loop.submit(cl.fetch(tp, pos))
    if pending is not None:
        pending.cancel()


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def _offset(loop: _Loop, cl: PartitionClient, tp, spec: int, timeout_ms: int) -> int:
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        code, off = loop.submit(cl.list_offset(tp, spec)).result()
        if code == 0:
            return off
        if code not in _LEADER_ERRORS or time.monotonic() > deadline:
            raise FetchError(f"krafty: ListOffsets of {tp[0]}-{tp[1]} failed: {_name(code)}")
        time.sleep(0.2)


def _exists(loop: _Loop, cl: PartitionClient, tp) -> bool:
    loop.submit(cl.refresh(tp[0])).result()
    return tp in cl.leaders
