"""Hand-written codecs for the hot paths: the Produce request, the Fetch request (read by every
leader, written by every follower's fetcher) and the Fetch response (written by leaders, read by
followers' fetchers). The generated codec costs ~10x as much per message: kio's objects are
built field by field, and its writer makes a buffer per flexible struct.

Produce request v0-v12 (flexible from v9: compact strings/arrays/bytes + tagged fields):
    [v3+ transactional_id nullable string] | acks int16 | timeout_ms int32
    topic_data [ name string | partition_data [ index int32 | records nullable bytes ] ]
The records are returned as writable memoryviews into the request frame, so offsets are
patched in place and the same bytes are appended to the log: no copy, no record decoding.

Fetch response v0-v17 (flexible from v12; topic ids instead of names from v13):
    [v1+ throttle_time_ms int32] | [v7+ error_code int16 | session_id int32]
    responses [ topic (name string | topic_id uuid) |
        partitions [ partition_index int32 | error_code int16 | high_watermark int64 |
                     [v4+ last_stable_offset int64] | [v5+ log_start_offset int64] |
                     [v4+ aborted_transactions nullable array [ producer_id int64 | first_offset int64 ]] |
                     [v11+ preferred_read_replica int32] |
                     records nullable bytes | [flexible: tagged fields] ] ]
    [v16+: node_endpoints as tagged field 0]
``records`` is written as a length followed by a log file region sent with sendfile.

Fetch request v0-v17 (flexible from v12; topic ids from v13; the replica id in a tagged
ReplicaState from v15):
    [v<15 replica_id int32] | max_wait_ms int32 | min_bytes int32 | [v3+ max_bytes int32] |
    [v4+ isolation_level int8] | [v7+ session_id int32 | session_epoch int32] |
    topics [ topic (name string | topic_id uuid) |
        partitions [ partition int32 | [v9+ current_leader_epoch int32] | fetch_offset int64 |
                     [v12+ last_fetched_epoch int32] | [v5+ log_start_offset int64] |
                     partition_max_bytes int32 | [v17 tag 0: replica_directory_id uuid] ] ] |
    [v7+ forgotten_topics_data [ topic (name | topic_id) | partitions [int32] ]] |
    [v11+ rack_id string] | [v12+ tag 0: cluster_id nullable string] |
    [v15+ tag 1: replica_state { replica_id int32 | replica_epoch int64 }]
tests/protocol/test_fetch_wire.py checks each against the generated codec, every version.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid

from broker.fetch_session import PartitionData
from broker.protocol.codec import FramingError, read_uvarint
from broker.server import FileRegion

_h = struct.Struct(">h")
_i = struct.Struct(">i")
_hq = struct.Struct(">hq")
_qq = struct.Struct(">qq")
_q = struct.Struct(">q")
_b = struct.Struct(">b")
_iq = struct.Struct(">iq")
_qi = struct.Struct(">qi")
_ii = struct.Struct(">ii")
_ZERO_UUID = uuid.UUID(int=0)


@dataclasses.dataclass(slots=True)
class ProducePartition:
    index: int
    records: memoryview | None


@dataclasses.dataclass(slots=True)
class ProduceRequest:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: list[tuple[str, list[ProducePartition]]]


class _Reader:
    __slots__ = ("buf", "pos", "flexible")

    def __init__(self, buf: memoryview, flexible: bool):
        self.buf = buf
        self.pos = 0
        self.flexible = flexible

    def need(self, n: int) -> None:
        if self.pos + n > len(self.buf) or n < 0:
            raise FramingError("request truncated")

    def i8(self) -> int:
        self.need(1)
        (v,) = _b.unpack_from(self.buf, self.pos)
        self.pos += 1
        return v

    def i64(self) -> int:
        self.need(8)
        (v,) = _q.unpack_from(self.buf, self.pos)
        self.pos += 8
        return v

    def uuid(self) -> uuid.UUID:
        self.need(16)
        v = uuid.UUID(bytes=bytes(self.buf[self.pos:self.pos + 16]))
        self.pos += 16
        return v

    def name(self, field: str) -> str:
        """A non-nullable string."""
        s = self.string()
        if s is None:
            raise FramingError(f"non-nullable field {field} was serialized as null")
        return s

    def tags(self):
        """The tagged fields of a flexible struct: (tag, reader of its value) each."""
        if not self.flexible:
            return
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            size = self.uvarint()
            self.need(size)
            sub = _Reader(self.buf[self.pos:self.pos + size], True)
            self.pos += size
            yield tag, sub

    def i16(self) -> int:
        self.need(2)
        (v,) = _h.unpack_from(self.buf, self.pos)
        self.pos += 2
        return v

    def i32(self) -> int:
        self.need(4)
        (v,) = _i.unpack_from(self.buf, self.pos)
        self.pos += 4
        return v

    def uvarint(self) -> int:
        v, self.pos = read_uvarint(self.buf, self.pos)
        return v

    def length(self, classic) -> int:
        """Length of a nullable string/bytes/array: -1 for null."""
        return self.uvarint() - 1 if self.flexible else classic()

    def string(self) -> str | None:
        n = self.length(self.i16)
        if n < 0:
            return None
        self.need(n)
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8", "replace")
        self.pos += n
        return s

    def bytes_view(self) -> memoryview | None:
        n = self.length(self.i32)
        if n < 0:
            return None
        self.need(n)
        v = self.buf[self.pos:self.pos + n]
        self.pos += n
        return v

    def array_len(self, name: str) -> int:
        n = self.length(self.i32)
        if n > len(self.buf):
            raise FramingError("array length larger than the request")
        if n < 0:  # as Kafka's generated reader: the request does not parse
            raise FramingError(f"non-nullable field {name} was serialized as null")
        return n

    def skip_tags(self) -> None:
        if not self.flexible:
            return
        for _ in range(self.uvarint()):
            self.uvarint()
            size = self.uvarint()
            self.need(size)
            self.pos += size


def parse_produce(body: memoryview, version: int) -> ProduceRequest:
    r = _Reader(body, version >= 9)
    txn = r.string() if version >= 3 else None  # (v0-2: no transactional id)
    acks = r.i16()
    timeout = r.i32()
    topics = []
    for _ in range(r.array_len("topic_data")):
        name = r.string()
        parts = []
        for _ in range(r.array_len("partition_data")):
            idx = r.i32()
            parts.append(ProducePartition(idx, r.bytes_view()))
            r.skip_tags()
        r.skip_tags()
        topics.append((name or "", parts))
    r.skip_tags()
    return ProduceRequest(txn, acks, timeout, topics)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _compact_str(s: str) -> bytes:
    b = s.encode()
    return _uvarint(len(b) + 1) + b


@dataclasses.dataclass(slots=True)
class FetchPartitionResult:
    index: int
    error: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: FileRegion | bytes | None
    preferred_read_replica: int = -1
    current_leader: tuple[int, int] | None = None  # (leader id, epoch) on leadership errors (v12+)
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset) for a diverged follower (v12+)
    aborted: list[tuple[int, int]] | None = None  # read_committed: (producer id, first offset) of aborted txns


def encode_fetch_response(version: int, topics: list[tuple[str, uuid.UUID, list[FetchPartitionResult]]],
                          *, error: int = 0, session_id: int = 0, throttle_ms: int = 0) -> list:
    """The Fetch response body as chunks (bytes and FileRegions)."""
    if version < 4:
        return _encode_fetch_response_v0_3(version, topics, throttle_ms)
    flex = version >= 12
    chunks: list = []
    out = bytearray(_i.pack(throttle_ms))
    if version >= 7:
        out += _h.pack(error) + _i.pack(session_id)
    out += _uvarint(len(topics) + 1) if flex else _i.pack(len(topics))
    for name, tid, parts in topics:
        if version >= 13:
            out += tid.bytes if tid is not None else bytes(16)
        elif flex:
            out += _compact_str(name)
        else:
            b = name.encode()
            out += _h.pack(len(b)) + b
        out += _uvarint(len(parts) + 1) if flex else _i.pack(len(parts))
        for p in parts:
            out += _i.pack(p.index) + _h.pack(p.error)
            out += struct.pack(">qq", p.high_watermark, p.last_stable_offset)
            if version >= 5:
                out += struct.pack(">q", p.log_start_offset)
            aborted = p.aborted
            if aborted is None:
                out += b"\x00" if flex else b"\xff\xff\xff\xff"  # aborted_transactions: null
            else:
                out += _uvarint(len(aborted) + 1) if flex else _i.pack(len(aborted))
                for pid, first in aborted:
                    out += _qq.pack(pid, first)
                    if flex:
                        out += b"\x00"
            if version >= 11:
                out += _i.pack(p.preferred_read_replica)
            rec = p.records
            size = 0 if rec is None else (rec.size if isinstance(rec, FileRegion) else len(rec))
            out += _uvarint(size + 1) if flex else _i.pack(size)
            if size:
                if isinstance(rec, FileRegion):
                    chunks.append(bytes(out))
                    chunks.append(rec)
                    out = bytearray()
                else:
                    out += rec
            if flex:
                tags = []
                if p.diverging_epoch is not None:
                    tags.append((0, _i.pack(p.diverging_epoch[0]) + struct.pack(">q", p.diverging_epoch[1]) + b"\x00"))
                if p.current_leader is not None:
                    tags.append((1, _i.pack(p.current_leader[0]) + _i.pack(p.current_leader[1]) + b"\x00"))
                out += _uvarint(len(tags))
                for tag, val in tags:
                    out += _uvarint(tag) + _uvarint(len(val)) + val
        if flex:
            out += b"\x00"
    if flex:
        out += b"\x00"
    chunks.append(bytes(out))
    return chunks


def _encode_fetch_response_v0_3(version: int, topics: list[tuple[str, uuid.UUID, list[FetchPartitionResult]]],
                                throttle_ms: int) -> list:
    """Fetch v0-3: no last stable offset, log start offset or aborted transactions, and the
    records are converted messages in memory (broker/log/legacy.py), never a file region."""
    out = bytearray(_i.pack(throttle_ms) if version >= 1 else b"")
    out += _i.pack(len(topics))
    for name, _tid, parts in topics:
        b = name.encode()
        out += _h.pack(len(b)) + b + _i.pack(len(parts))
        for p in parts:
            rec = p.records or b""
            out += _i.pack(p.index) + _hq.pack(p.error, p.high_watermark) + _i.pack(len(rec)) + rec
    return [bytes(out)]


# --- Fetch request --------------------------------------------------------------------------------
FetchPartitionRequest = PartitionData  # a partition of a Fetch request, as fetch sessions keep them


@dataclasses.dataclass(slots=True)
class FetchTopicRequest:
    topic: str  # "" from v13
    topic_id: uuid.UUID | None  # from v13
    partitions: list


@dataclasses.dataclass(slots=True)
class ForgottenTopic:
    topic: str
    topic_id: uuid.UUID | None
    partitions: list[int]


@dataclasses.dataclass(slots=True)
class FetchRequest:
    max_wait_ms: int
    min_bytes: int
    topics: list[FetchTopicRequest]
    replica_id: int = -1  # in the body before v15, in the tagged replica_state from v15
    replica_epoch: int = -1
    max_bytes: int = 0x7FFFFFFF
    isolation_level: int = 0
    session_id: int = 0
    session_epoch: int = -1
    forgotten_topics_data: list[ForgottenTopic] = dataclasses.field(default_factory=list)
    rack_id: str = ""
    cluster_id: str | None = None


def parse_fetch(body, version: int) -> FetchRequest:
    """A Fetch request body (any version); FramingError if it does not parse."""
    r = _Reader(memoryview(body), version >= 12)
    ids = version >= 13
    replica_id = r.i32() if version < 15 else -1
    req = FetchRequest(r.i32(), r.i32(), [], replica_id)
    if version >= 3:
        req.max_bytes = r.i32()
    if version >= 4:
        req.isolation_level = r.i8()
    if version >= 7:
        req.session_id = r.i32()
        req.session_epoch = r.i32()
    for _ in range(r.array_len("topics")):
        topic = FetchTopicRequest("", r.uuid(), []) if ids else FetchTopicRequest(r.name("topic"), None, [])
        parts = topic.partitions
        for _ in range(r.array_len("partitions")):
            p = FetchPartitionRequest(r.i32(), 0, 0)
            if version >= 9:
                p.current_leader_epoch = r.i32()
            p.fetch_offset = r.i64()
            if version >= 12:
                p.last_fetched_epoch = r.i32()
            if version >= 5:
                p.log_start_offset = r.i64()
            p.partition_max_bytes = r.i32()
            for tag, sub in r.tags():
                if tag == 0 and version >= 17:
                    p.replica_directory_id = sub.uuid()
            parts.append(p)
        r.skip_tags()
        req.topics.append(topic)
    if version >= 7:
        for _ in range(r.array_len("forgotten_topics_data")):
            f = ForgottenTopic("", r.uuid(), []) if ids else ForgottenTopic(r.name("topic"), None, [])
            n = r.array_len("partitions")
            r.need(4 * n)
            f.partitions = list(struct.unpack_from(f">{n}i", r.buf, r.pos))
            r.pos += 4 * n
            r.skip_tags()
            req.forgotten_topics_data.append(f)
    if version >= 11:
        req.rack_id = r.name("rack_id")
    for tag, sub in r.tags():
        if tag == 0:
            req.cluster_id = sub.string()
        elif tag == 1 and version >= 15:
            req.replica_id = sub.i32()
            req.replica_epoch = sub.i64()
    return req


def encode_fetch_request(version: int, req: FetchRequest) -> bytes:
    """The body of a Fetch request (v12+: what followers send)."""
    if version < 12:
        raise ValueError("encode_fetch_request writes the flexible versions (v12+)")
    ids = version >= 13
    out = bytearray() if version >= 15 else bytearray(_i.pack(req.replica_id))
    out += struct.pack(">iiibii", req.max_wait_ms, req.min_bytes, req.max_bytes, req.isolation_level, req.session_id,
                       req.session_epoch)
    out += _uvarint(len(req.topics) + 1)
    for t in req.topics:
        out += (t.topic_id or _ZERO_UUID).bytes if ids else _compact_str(t.topic)
        out += _uvarint(len(t.partitions) + 1)
        for p in t.partitions:
            out += struct.pack(">iiqiqi", p.partition, p.current_leader_epoch, p.fetch_offset, p.last_fetched_epoch,
                               p.log_start_offset, p.partition_max_bytes)
            if version >= 17 and p.replica_directory_id is not None:
                out += b"\x01\x00\x10" + p.replica_directory_id.bytes
            else:
                out += b"\x00"
        out += b"\x00"
    out += _uvarint(len(req.forgotten_topics_data) + 1)
    for f in req.forgotten_topics_data:
        out += (f.topic_id or _ZERO_UUID).bytes if ids else _compact_str(f.topic)
        out += _uvarint(len(f.partitions) + 1)
        for pid in f.partitions:
            out += _i.pack(pid)
        out += b"\x00"
    out += _compact_str(req.rack_id)
    tags = []
    if req.cluster_id is not None:
        tags.append((0, _compact_str(req.cluster_id)))
    if version >= 15 and (req.replica_id != -1 or req.replica_epoch != -1):
        tags.append((1, _iq.pack(req.replica_id, req.replica_epoch) + b"\x00"))
    out += _uvarint(len(tags))
    for tag, val in tags:
        out += _uvarint(tag) + _uvarint(len(val)) + val
    return bytes(out)


# --- Fetch response (read by followers) -----------------------------------------------------------
@dataclasses.dataclass(slots=True)
class FetchResponse:
    throttle_ms: int
    error: int
    session_id: int
    topics: list[tuple[str, uuid.UUID | None, list[FetchPartitionResult]]]


def parse_fetch_response(body, version: int) -> FetchResponse:
    """A Fetch response body (as ``encode_fetch_response`` writes it): records as bytes."""
    r = _Reader(memoryview(body), version >= 12)
    ids = version >= 13
    resp = FetchResponse(r.i32() if version >= 1 else 0, 0, 0, [])
    if version >= 7:
        resp.error = r.i16()
        resp.session_id = r.i32()
    for _ in range(r.array_len("responses")):
        name, tid = ("", r.uuid()) if ids else (r.name("topic"), None)
        parts = []
        for _ in range(r.array_len("partitions")):
            p = FetchPartitionResult(r.i32(), r.i16(), r.i64(), r.i64() if version >= 4 else -1,
                                     r.i64() if version >= 5 else -1, None)
            n = r.length(r.i32) if version >= 4 else -1  # aborted transactions (nullable)
            if n >= 0:
                if n > len(r.buf):
                    raise FramingError("array length larger than the response")
                p.aborted = []
                for _ in range(n):
                    p.aborted.append((r.i64(), r.i64()))
                    r.skip_tags()
            if version >= 11:
                p.preferred_read_replica = r.i32()
            rec = r.bytes_view()
            p.records = bytes(rec) if rec is not None else None
            for tag, sub in r.tags():
                if tag == 0:
                    p.diverging_epoch = (sub.i32(), sub.i64())
                elif tag == 1:
                    p.current_leader = (sub.i32(), sub.i32())
            parts.append(p)
        r.skip_tags()
        resp.topics.append((name, tid, parts))
    r.skip_tags()
    return resp
