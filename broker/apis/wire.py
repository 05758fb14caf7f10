"""Hand-written codecs for the hot paths: the Produce request and the Fetch response.

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
"""

from __future__ import annotations

import dataclasses
import struct
import uuid

from broker.protocol.codec import FramingError, read_uvarint
from broker.server import FileRegion

_h = struct.Struct(">h")
_i = struct.Struct(">i")
_hq = struct.Struct(">hq")
_qq = struct.Struct(">qq")


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
            raise FramingError("produce request truncated")

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
