"""MirrorMaker 2's record formats, byte for byte, so MM2's tools (and MM2 itself) read what
``krafty mirror`` writes and the other way round.

The internal topics' keys and values are Kafka protocol ``Struct``s (big-endian, STRING =
int16 length + UTF-8, no nulls; the encoding of ``__consumer_offsets``' records)::

    OffsetSync  (mm2-offset-syncs.<target>.internal, partition 0)
        key   = topic STRING, partition INT32
        value = upstreamOffset INT64, offset INT64
    Checkpoint  (<source>.checkpoints.internal on the target, partition 0)
        key   = group STRING, topic STRING, partition INT32
        value = version INT16 (0), upstreamOffset INT64, offset INT64, metadata STRING
    Heartbeat   (heartbeats)
        key   = sourceClusterAlias STRING, targetClusterAlias STRING
        value = version INT16 (0), timestamp INT64
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from broker.group.records import RecordFormatError as SchemaError  # MM2's SchemaException
from broker.group.records import _Reader
from broker.group.records import _str as _string

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_TWO_I64 = struct.Struct(">qq")


def _reader(buf: bytes | None) -> _Reader:
    if buf is None:
        raise SchemaError("null key or value")
    return _Reader(bytes(buf))


@dataclass(frozen=True, slots=True)
class OffsetSync:
    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int

    def key(self) -> bytes:
        return _string(self.topic) + _I32.pack(self.partition)

    def value(self) -> bytes:
        return _TWO_I64.pack(self.upstream_offset, self.downstream_offset)

    @classmethod
    def decode(cls, key: bytes | None, value: bytes | None) -> OffsetSync:
        k, v = _reader(key), _reader(value)
        topic, partition = k.string(), k.i32()
        return cls(topic, partition, v.i64(), v.i64())


@dataclass(frozen=True, slots=True)
class Checkpoint:
    group: str
    topic: str  # the topic on the target (renamed by the replication policy)
    partition: int
    upstream_offset: int
    downstream_offset: int
    metadata: str = ""

    def key(self) -> bytes:
        return _string(self.group) + _string(self.topic) + _I32.pack(self.partition)

    def value(self) -> bytes:
        return _I16.pack(0) + _TWO_I64.pack(self.upstream_offset, self.downstream_offset) + _string(self.metadata)

    @classmethod
    def decode(cls, key: bytes | None, value: bytes | None) -> Checkpoint:
        k, v = _reader(key), _reader(value)
        group, topic, partition = k.string(), k.string(), k.i32()
        version = v.i16()
        if version != 0:
            raise SchemaError(f"checkpoint value version {version} (only 0 exists)")
        return cls(group, topic, partition, v.i64(), v.i64(), v.string())


@dataclass(frozen=True, slots=True)
class Heartbeat:
    source: str
    target: str
    timestamp: int

    def key(self) -> bytes:
        return _string(self.source) + _string(self.target)

    def value(self) -> bytes:
        return _I16.pack(0) + _I64.pack(self.timestamp)

    @classmethod
    def decode(cls, key: bytes | None, value: bytes | None) -> Heartbeat:
        k, v = _reader(key), _reader(value)
        source, target = k.string(), k.string()
        version = v.i16()
        if version != 0:
            raise SchemaError(f"heartbeat value version {version} (only 0 exists)")
        return cls(source, target, v.i64())
