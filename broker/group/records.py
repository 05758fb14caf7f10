"""The records of ``__consumer_offsets``: Kafka's key and value formats, byte for byte.

A record key starts with an int16 version that says what the key is, then the key data;
a value starts with its own int16 version. A null value is a tombstone (the offset or the
group was deleted; compaction removes the key after ``delete.retention.ms``).

    OffsetCommitKey (key version 0 or 1; Kafka 4 writes 1)
        group string | topic string | partition int32
    GroupMetadataKey (key version 2)
        group string

    OffsetCommitValue v0-4 (we write v3; v1 only when an expire timestamp is set)
        offset int64 | [v3+] leaderEpoch int32 | metadata string | commitTimestamp int64
        | [v1] expireTimestamp int64 | [v4+ flexible: tagged fields]

    GroupMetadataValue v0-4 (we write v3)
        protocolType string | generation int32 | protocol nullable string
        | leader nullable string | [v2+] currentStateTimestamp int64
        | members [MemberMetadata] (int32 count; compact in v4)
    MemberMetadata
        memberId string | [v3+] groupInstanceId nullable string | clientId string
        | clientHost string | [v1+] rebalanceTimeout int32 | sessionTimeout int32
        | subscription bytes | assignment bytes

Strings are int16-length (-1 for null), bytes int32-length; version 4 (flexible) uses
compact (uvarint length + 1) strings, bytes and arrays and ends each struct with tagged
fields. Spec: apache/kafka group-coordinator/src/main/resources/common/message/*.json.
"""

from __future__ import annotations

import dataclasses
import struct

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")


def java_string_hashcode(s: str) -> int:
    """``String.hashCode()`` of Java: over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group (Kafka's Utils.abs(hashCode) % n;
    Utils.abs maps Integer.MIN_VALUE to 0)."""
    h = java_string_hashcode(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


# --- decoded forms ---------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclasses.dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclasses.dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1


@dataclasses.dataclass(frozen=True, slots=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberValue, ...]


class RecordFormatError(ValueError):
    """A __consumer_offsets record we cannot decode."""


# --- writer -----------------------------------------------------------------------------

def _str(s: str | None) -> bytes:
    if s is None:
        return _H.pack(-1)
    b = s.encode("utf-8")
    if len(b) > 0x7FFF:
        raise ValueError("string longer than 32767 bytes")
    return _H.pack(len(b)) + b


def _bytes(b: bytes | None) -> bytes:
    if b is None:
        return _I.pack(-1)
    return _I.pack(len(b)) + bytes(b)


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return _H.pack(OFFSET_COMMIT_KEY_VERSION) + _str(group) + _str(topic) + _I.pack(partition)


def group_metadata_key(group: str) -> bytes:
    return _H.pack(GROUP_METADATA_KEY_VERSION) + _str(group)


def offset_commit_value(v: OffsetValue) -> bytes:
    if v.expire_timestamp >= 0:  # only version 1 has the (deprecated) expire timestamp
        return (_H.pack(1) + _Q.pack(v.offset) + _str(v.metadata) + _Q.pack(v.commit_timestamp)
                + _Q.pack(v.expire_timestamp))
    return (_H.pack(OFFSET_COMMIT_VALUE_VERSION) + _Q.pack(v.offset) + _I.pack(v.leader_epoch) + _str(v.metadata)
            + _Q.pack(v.commit_timestamp))


def group_metadata_value(v: GroupValue) -> bytes:
    out = bytearray(_H.pack(GROUP_METADATA_VALUE_VERSION))
    out += _str(v.protocol_type) + _I.pack(v.generation) + _str(v.protocol) + _str(v.leader)
    out += _Q.pack(v.current_state_timestamp) + _I.pack(len(v.members))
    for m in v.members:
        out += (_str(m.member_id) + _str(m.group_instance_id) + _str(m.client_id) + _str(m.client_host)
                + _I.pack(m.rebalance_timeout) + _I.pack(m.session_timeout) + _bytes(m.subscription)
                + _bytes(m.assignment))
    return bytes(out)


# --- reader -----------------------------------------------------------------------------

class _Reader:
    __slots__ = ("buf", "pos", "flexible")

    def __init__(self, buf: bytes, pos: int = 0, flexible: bool = False):
        self.buf = buf
        self.pos = pos
        self.flexible = flexible

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise RecordFormatError("record runs past its end")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def i16(self) -> int:
        return _H.unpack(self._take(2))[0]

    def i32(self) -> int:
        return _I.unpack(self._take(4))[0]

    def i64(self) -> int:
        return _Q.unpack(self._take(8))[0]

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            b = self._take(1)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 35:
                raise RecordFormatError("varint too long")

    def string(self, nullable: bool = False) -> str | None:
        n = self.uvarint() - 1 if self.flexible else self.i16()
        if n < 0:
            if nullable:
                return None
            raise RecordFormatError("null string in a non-nullable field")
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as e:
            raise RecordFormatError(str(e)) from None

    def bytes_(self) -> bytes:
        n = self.uvarint() - 1 if self.flexible else self.i32()
        if n < 0:
            return b""
        return bytes(self._take(n))

    def array_len(self) -> int:
        n = self.uvarint() - 1 if self.flexible else self.i32()
        return max(n, 0)

    def tagged_fields(self) -> None:
        if not self.flexible:
            return
        for _ in range(self.uvarint()):
            self.uvarint()
            self._take(self.uvarint())


def decode_key(key: bytes):
    """OffsetKey, GroupKey, a consumer group's ConsumerKey (consumer_records.py) or a share group's
    ShareKey (broker/share/records.py)."""
    r = _Reader(bytes(key))
    version = r.i16()
    if version in (0, 1):
        return OffsetKey(r.string(), r.string(), r.i32())
    if version == 2:
        return GroupKey(r.string())
    if 3 <= version <= 8 or version == 16:  # a consumer group's (KIP-848) records
        from broker.group.consumer_records import decode_consumer_key
        return decode_consumer_key(version, r)
    if 9 <= version <= 15:  # a share group's (KIP-932) records
        from broker.share.records import decode_share_key
        return decode_share_key(version, r)
    raise RecordFormatError(f"unknown __consumer_offsets key version {version}")


def decode_offset_value(value: bytes) -> OffsetValue:
    r = _Reader(bytes(value))
    version = r.i16()
    if not 0 <= version <= 4:
        raise RecordFormatError(f"unknown OffsetCommitValue version {version}")
    r.flexible = version >= 4
    offset = r.i64()
    epoch = r.i32() if version >= 3 else -1
    metadata = r.string()
    ts = r.i64()
    expire = r.i64() if version == 1 else -1
    r.tagged_fields()
    return OffsetValue(offset, epoch, metadata, ts, expire)


def decode_group_value(value: bytes) -> GroupValue:
    r = _Reader(bytes(value))
    version = r.i16()
    if not 0 <= version <= 4:
        raise RecordFormatError(f"unknown GroupMetadataValue version {version}")
    r.flexible = version >= 4
    protocol_type = r.string()
    generation = r.i32()
    protocol = r.string(nullable=True)
    leader = r.string(nullable=True)
    ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.array_len()):
        member_id = r.string()
        instance = r.string(nullable=True) if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        session = r.i32()
        rebalance = session
        if version >= 1:
            rebalance, session = session, r.i32()
        sub = r.bytes_()
        assignment = r.bytes_()
        r.tagged_fields()
        members.append(MemberValue(member_id, instance, client_id, client_host, rebalance, session, sub, assignment))
    r.tagged_fields()
    return GroupValue(protocol_type, generation, protocol, leader, ts, tuple(members))


# --- the consumer protocol (subscriptions), for OffsetDelete and offset expiry -------------

def subscribed_topics(subscription: bytes) -> set[str] | None:
    """Topics of a ConsumerProtocolSubscription (version int16, topics [string], ...);
    None when the bytes are not one."""
    try:
        r = _Reader(bytes(subscription))
        version = r.i16()
        if version < 0:
            return None
        r.flexible = False  # the consumer protocol is never flexible
        n = r.i32()
        if n < 0 or n > 1_000_000:
            return None
        return {r.string() for _ in range(n)}
    except RecordFormatError:
        return None


# shared with the other coordinators' record formats (broker/txn/records.py)
RecordReader = _Reader
encode_string = _str
