"""The embedded consumer protocol of classic groups (the bytes a JoinGroup's protocol metadata and
a SyncGroup's assignment carry), as Kafka's ConsumerProtocol reads and writes them
(clients/src/main/resources/common/message/ConsumerProtocol{Subscription,Assignment}.json). The
coordinator needs them when a classic group becomes a consumer group and back (KIP-848's online
upgrade and downgrade), and to serve classic members of a consumer group.

Never flexible; an int16 version first, then the struct at that version (a newer version than
3 is read as version 3: its extra fields are at the end):

    Subscription: topics [string] | userData ?bytes | (v1+) ownedPartitions [topic string
                  | partitions [int32]] | (v2+) generationId int32 | (v3+) rackId ?string
    Assignment:   assignedPartitions [topic string | partitions [int32]] | userData ?bytes

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Mapping

from broker.group.records import RecordFormatError, RecordReader, encode_string

_H = struct.Struct(">h")
_I = struct.Struct(">i")


@dataclasses.dataclass(frozen=True, slots=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned: tuple[tuple[str, tuple[int, ...]], ...] = ()
    generation: int = -1
    rack_id: str | None = None


def _nullable_bytes(r: RecordReader) -> bytes | None:
    n = r.i32()
    return None if n < 0 else bytes(r._take(n))


def _topic_partitions(r: RecordReader) -> tuple[tuple[str, tuple[int, ...]], ...]:
    out = []
    for _ in range(r.array_len()):
        topic = r.string()
        out.append((topic, tuple(r.i32() for _ in range(r.array_len()))))
    return tuple(out)


def decode_version(data: bytes) -> int:
    """The version a subscription or assignment starts with (Kafka's deserializeVersion)."""
    if len(data) < 2:
        raise RecordFormatError("Buffer underflow while parsing consumer protocol's header")
    v = _H.unpack_from(data, 0)[0]
    if v < 0:
        raise RecordFormatError(f"Unsupported consumer protocol version {v}")
    return v


def decode_subscription(data: bytes) -> Subscription:
    """Raises RecordFormatError for bytes that are not a ConsumerProtocolSubscription."""
    version = decode_version(data)
    r = RecordReader(bytes(data), 2)
    topics = tuple(r.string() for _ in range(r.array_len()))
    user = _nullable_bytes(r)
    owned: tuple = ()
    generation, rack = -1, None
    if version >= 1:
        owned = _topic_partitions(r)
    if version >= 2:
        generation = r.i32()
    if version >= 3:
        rack = r.string(nullable=True)
    return Subscription(version, topics, user, owned, generation, rack)


def decode_assignment(data: bytes) -> tuple[dict[str, tuple[int, ...]], bytes | None]:
    """(topic -> partitions, userData) of a ConsumerProtocolAssignment; raises RecordFormatError."""
    decode_version(data)
    r = RecordReader(bytes(data), 2)
    parts = {t: ps for t, ps in _topic_partitions(r)}
    return parts, _nullable_bytes(r)


def encode_assignment(partitions: Mapping[str, frozenset[int] | set[int]], version: int = 0) -> bytes:
    """A ConsumerProtocolAssignment at ``version`` (3 at most, as Kafka's serializeAssignment)
    with no user data; topics and partitions in order."""
    out = bytearray(_H.pack(min(max(version, 0), 3)))
    topics = [(t, sorted(ps)) for t, ps in sorted(partitions.items()) if ps]
    out += _I.pack(len(topics))
    for t, ps in topics:
        out += encode_string(t) + _I.pack(len(ps)) + b"".join(_I.pack(p) for p in ps)
    out += _I.pack(-1)
    return bytes(out)
