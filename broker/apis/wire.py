"""Hand-written codecs for the hot paths: the Produce request and response, the Fetch request
(read by every leader, written by every follower's fetcher) and the Fetch response (written by
leaders, read by followers' fetchers). The generated codec costs ~10x as much per message: kio's
objects are built field by field, and its writer makes a buffer per flexible struct.
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
from broker.protocol.codec import LEGACY_STRING_MAX, FramingError, read_uvarint
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
_iiii = struct.Struct(">iiii")


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



def _truncated() -> FramingError:
    return FramingError("produce request truncated")


def parse_produce(body: memoryview, version: int) -> ProduceRequest:
    """The Produce request; FramingError if it does not parse. Written out flat (no reader
    object): it runs once per produce request."""
    end = len(body)
    flex = version >= 9
    try:
        txn, pos = _string(body, 0, flex, end, "replace") if version >= 3 else (None, 0)  # (v0-2: none)
        acks, timeout = _hi.unpack_from(body, pos)
        n_topics, pos = _array_len(body, pos + 6, flex, end, "topic_data")
        topics = []
        for _ in range(n_topics):
            name, pos = _string(body, pos, flex, end, "replace")
            n_parts, pos = _array_len(body, pos, flex, end, "partition_data")
            parts = []
            for _ in range(n_parts):
                if flex:
                    (idx,) = _i.unpack_from(body, pos)
                    n, pos = _uv(body, pos + 4)
                    n -= 1
                else:
                    idx, n = _ii.unpack_from(body, pos)
                    pos += 8
                if n < 0:
                    records = None
                else:
                    if pos + n > end:
                        raise _truncated()
                    records = body[pos:pos + n]
                    pos += n
                parts.append(ProducePartition(idx, records))
                if flex:
                    pos = _skip_tags(body, pos, end)
            if flex:
                pos = _skip_tags(body, pos, end)
            topics.append((name or "", parts))
        if flex:
            pos = _skip_tags(body, pos, end)
    except struct.error:
        raise _truncated() from None
    return ProduceRequest(txn, acks, timeout, topics)


_hi = struct.Struct(">hi")


def _uv(buf, pos: int) -> tuple[int, int]:
    """An unsigned varint (a compact length: one byte for lengths below 127)."""
    if pos < len(buf):
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
    try:
        return read_uvarint(buf, pos)
    except FramingError:
        raise _truncated() from None


def _check_array(n: int, end: int, name: str) -> None:
    if n > end:
        raise FramingError("array length larger than the request")
    if n < 0:  # as Kafka's generated reader: the request does not parse
        raise FramingError(f"non-nullable field {name} was serialized as null")


def _skip_tags(buf, pos: int, end: int) -> int:
    n, pos = _uv(buf, pos)
    for _ in range(n):
        _, pos = _uv(buf, pos)
        size, pos = _uv(buf, pos)
        pos += size
        if pos > end:
            raise _truncated()
    return pos


# --- Fetch request -------------------------------------------------------------------------
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


_UUIDS: dict[bytes, uuid.UUID] = {}
_iiqiqi = struct.Struct(">iiqiqi")
_iiqqi = struct.Struct(">iiqqi")
_iqqi = struct.Struct(">iqqi")
_iqi = struct.Struct(">iqi")
_iiiib = struct.Struct(">iiiib")
_iiib = struct.Struct(">iiib")
_iii = struct.Struct(">iii")


def _uuid(body, pos: int) -> uuid.UUID:
    raw = bytes(body[pos:pos + 16])
    if len(raw) != 16:
        raise FramingError("fetch request truncated")
    u = _UUIDS.get(raw)
    if u is None:
        if len(_UUIDS) > 10_000:
            _UUIDS.clear()
        u = _UUIDS[raw] = uuid.UUID(bytes=raw)
    return u


def _fetch_truncated() -> FramingError:
    return FramingError("fetch request truncated")


def parse_fetch(body, version: int) -> FetchRequest:
    """The Fetch request (any version); FramingError when it does not parse, as the generated
    reader with its bounds check (broker/protocol/guard.py) would refuse it. Written out flat:
    it runs for every consumer and follower fetch. The partitions are the fetch sessions'
    PartitionData."""
    flex = version >= 12
    ids = version >= 13
    end = len(body)
    try:
        if version >= 15:
            replica_id = -1
            max_wait, min_bytes, max_bytes, isolation = _iiib.unpack_from(body, 0)
            pos = 13
        elif version >= 4:
            replica_id, max_wait, min_bytes, max_bytes, isolation = _iiiib.unpack_from(body, 0)
            pos = 17
        elif version == 3:
            replica_id, max_wait, min_bytes, max_bytes = _iiii.unpack_from(body, 0)
            isolation, pos = 0, 16
        else:
            replica_id, max_wait, min_bytes = _iii.unpack_from(body, 0)
            max_bytes, isolation, pos = 0x7FFFFFFF, 0, 12
        if version >= 7:
            session_id, session_epoch = _ii.unpack_from(body, pos)
            pos += 8
        else:
            session_id, session_epoch = 0, -1
        n_topics, pos = _array_len(body, pos, flex, end, "topics")
        topics = []
        for _ in range(n_topics):
            if ids:
                topic, topic_id, pos = "", _uuid(body, pos), pos + 16
            else:
                topic, pos = _string(body, pos, flex, end)
                if topic is None:
                    raise FramingError("non-nullable field topic was serialized as null")
                topic_id = None
            n_parts, pos = _array_len(body, pos, flex, end, "partitions")
            parts = []
            for _ in range(n_parts):
                if version >= 12:
                    partition, leader_epoch, offset, last_epoch, start, max_part = _iiqiqi.unpack_from(body, pos)
                    pos += 32
                elif version >= 9:
                    partition, leader_epoch, offset, start, max_part = _iiqqi.unpack_from(body, pos)
                    last_epoch = -1
                    pos += 28
                elif version >= 5:
                    partition, offset, start, max_part = _iqqi.unpack_from(body, pos)
                    leader_epoch = last_epoch = -1
                    pos += 24
                else:
                    partition, offset, max_part = _iqi.unpack_from(body, pos)
                    leader_epoch = last_epoch = start = -1
                    pos += 16
                p = PartitionData(partition, offset, max_part, leader_epoch, last_epoch, start)
                parts.append(p)
                if flex:  # tagged fields: 0 is the replica directory id (v17), the others are skipped
                    if pos < end and body[pos] == 0:
                        pos += 1
                    else:
                        n_tags, pos = _uv(body, pos)
                        for _ in range(n_tags):
                            tag, pos = _uv(body, pos)
                            size, pos = _uv(body, pos)
                            if pos + size > end:
                                raise _fetch_truncated()
                            if tag == 0 and version >= 17:
                                p.replica_directory_id = _uuid(body, pos)
                            pos += size
            if flex:
                pos = _skip_tags(body, pos, end)
            topics.append(FetchTopicRequest(topic, topic_id, parts))
        req = FetchRequest(max_wait, min_bytes, topics, replica_id, -1, max_bytes, isolation, session_id,
                           session_epoch)
        if version >= 7:
            forgotten = req.forgotten_topics_data
            n_forgotten, pos = _array_len(body, pos, flex, end, "forgotten_topics_data")
            for _ in range(n_forgotten):
                topic, topic_id, pos = _topic_key(body, pos, ids, flex, end)
                n, pos = _array_len(body, pos, flex, end, "partitions")
                if pos + 4 * n > end:
                    raise _fetch_truncated()
                forgotten.append(ForgottenTopic(topic or "", topic_id, list(struct.unpack_from(f">{n}i", body, pos))))
                pos += 4 * n
                if flex:
                    pos = _skip_tags(body, pos, end)
        if version >= 11:
            rack, pos = _string(body, pos, flex, end)
            if rack is None:
                raise FramingError("non-nullable field rack_id was serialized as null")
            req.rack_id = rack
        if flex:  # tagged fields: 0 the cluster id, 1 the replica state (v15+), the others are skipped
            n_tags, pos = _uv(body, pos)
            for _ in range(n_tags):
                tag, pos = _uv(body, pos)
                size, pos = _uv(body, pos)
                if pos + size > end:
                    raise _fetch_truncated()
                if tag == 0:
                    req.cluster_id, _ = _string(body, pos, True, pos + size)
                elif tag == 1 and version >= 15:
                    req.replica_id, req.replica_epoch = _iq.unpack_from(body, pos)
                pos += size
    except struct.error:
        raise _fetch_truncated() from None
    return req


def _topic_key(body, pos: int, ids: bool, flex: bool, end: int) -> tuple[str | None, uuid.UUID | None, int]:
    """(name, None) before Fetch v13, (None, topic id) from v13; and the position after it."""
    if ids:
        return None, _uuid(body, pos), pos + 16
    name, pos = _string(body, pos, flex, end)
    return name, None, pos


def _array_len(body, pos: int, flex: bool, end: int, name: str) -> tuple[int, int]:
    if flex:
        n, pos = _uv(body, pos)
        n -= 1
    else:
        (n,) = _i.unpack_from(body, pos)
        pos += 4
    _check_array(n, end - pos, name)
    return n, pos


def _string(body, pos: int, flex: bool, end: int, errors: str = "strict") -> tuple[str | None, int]:
    if flex:
        n, pos = _uv(body, pos)
        n -= 1
    else:
        (n,) = _h.unpack_from(body, pos)
        pos += 2
    if n < 0:
        return None, pos
    if pos + n > end:
        raise FramingError("request truncated")
    # strict: a malformed request (UnicodeDecodeError), as the generated reader has it
    return bytes(body[pos:pos + n]).decode("utf-8", errors), pos + n


def _uvarint(n: int) -> bytes:
    if n < 0x80:
        return _SMALL_UVARINT[n]
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL_UVARINT = [bytes([n]) for n in range(0x80)]
_ihq = struct.Struct(">ihq")
_NO_LEADER = {"leader_id": -1, "leader_epoch": -1}


def _nullable_str(s: str | None, flex: bool) -> bytes:
    if s is None:
        return b"\x00" if flex else b"\xff\xff"
    b = s.encode()
    if not flex and len(b) > LEGACY_STRING_MAX:  # an error message: cut to fit, as codec.encode_response
        b = b[:LEGACY_STRING_MAX - 3].decode("utf-8", "ignore").encode() + b"..."
    return (_uvarint(len(b) + 1) if flex else _h.pack(len(b))) + b


def encode_produce_response(version: int, results: dict[str, list[dict]], throttle_ms: int = 0) -> bytes:
    """The Produce response body from the handler's per-partition dicts (``index``,
    ``error_code``, ``base_offset``, ``log_append_time``, ``log_start_offset``,
    ``record_errors`` [{batch_index, batch_index_error_message}], and ``error_message`` and
    ``current_leader`` {leader_id, leader_epoch} when set): the bytes the generated codec
    writes for the same dict (tests/unit/test_wire.py holds them equal), without building
    its objects."""
    flex = version >= 9
    out = bytearray(_uvarint(len(results) + 1) if flex else _i.pack(len(results)))
    for name, parts in results.items():
        nb = name.encode()
        out += (_uvarint(len(nb) + 1) if flex else _h.pack(len(nb))) + nb
        out += _uvarint(len(parts) + 1) if flex else _i.pack(len(parts))
        for r in parts:
            out += _ihq.pack(r["index"], r["error_code"], r["base_offset"])
            if version >= 5:
                out += _qq.pack(r["log_append_time"], r["log_start_offset"])
            elif version >= 2:
                out += _q.pack(r["log_append_time"])
            if version >= 8:
                errs = r["record_errors"]
                out += _uvarint(len(errs) + 1) if flex else _i.pack(len(errs))
                for e in errs:
                    out += _i.pack(e["batch_index"]) + _nullable_str(e.get("batch_index_error_message"), flex)
                    if flex:
                        out += b"\x00"
                out += _nullable_str(r.get("error_message"), flex)
            if flex:
                leader = r.get("current_leader")
                if version >= 10 and leader is not None and leader != _NO_LEADER:
                    out += b"\x01\x00\x09" + _ii.pack(leader["leader_id"], leader["leader_epoch"]) + b"\x00"
                else:
                    out += b"\x00"
        if flex:
            out += b"\x00"
    if version >= 1:
        out += _i.pack(throttle_ms)
    if flex:
        out += b"\x00"
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
