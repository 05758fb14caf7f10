"""The records of consumer groups (KIP-848) in ``__consumer_offsets``: Kafka's key and value
formats, byte for byte (group-coordinator/src/main/resources/common/message/ConsumerGroup*.json).

Keys are not flexible: an int16 version that says what the key is, then int16-length strings.
Values are flexible (version 0): compact strings and arrays (uvarint length + 1), uuids as 16
bytes, and a tagged-field section (empty here) at the end of every struct.

    ConsumerGroupMetadataKey (3): group              -> ConsumerGroupMetadataValue: epoch int32
    ConsumerGroupPartitionMetadataKey (4): group     -> topics [topicId uuid | topicName string
                                                        | numPartitions int32 | partitionMetadata
                                                        [partition int32 | racks [string]]]
    ConsumerGroupMemberMetadataKey (5): group member -> instanceId ?string | rackId ?string
                                                        | clientId string | clientHost string
                                                        | subscribedTopicNames [string]
                                                        | subscribedTopicRegex ?string
                                                        | rebalanceTimeoutMs int32
                                                        | serverAssignor ?string
                                                        | (tag 0: classicMemberMetadata)
    ConsumerGroupTargetAssignmentMetadataKey (6): group -> assignmentEpoch int32
    ConsumerGroupTargetAssignmentMemberKey (7): group member -> topicPartitions [topicId uuid
                                                        | partitions [int32]]
    ConsumerGroupCurrentMemberAssignmentKey (8): group member -> memberEpoch int32
                                                        | previousMemberEpoch int32 | state int8
                                                        | assignedPartitions [TopicPartitions]
                                                        | partitionsPendingRevocation [TopicPartitions]
    ConsumerGroupRegularExpressionKey (16): group regex -> topics [string] | version int64
                                                        | timestamp int64

The member metadata's tagged field 0, ClassicMemberMetadata, is set for a member that uses the
classic protocol (KIP-848's online upgrade): sessionTimeoutMs int32 | supportedProtocols [name
string | metadata bytes].

A null value is a tombstone. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from collections.abc import Mapping

from broker.group.records import RecordFormatError, RecordReader, encode_string
from broker.txn.records import _uvarint  # the flexible (KIP-482) length prefix

GROUP_EPOCH_KEY = 3
PARTITION_METADATA_KEY = 4
MEMBER_METADATA_KEY = 5
TARGET_METADATA_KEY = 6
TARGET_MEMBER_KEY = 7
CURRENT_ASSIGNMENT_KEY = 8
REGEX_KEY = 16
KEY_VERSIONS = (*range(GROUP_EPOCH_KEY, CURRENT_ASSIGNMENT_KEY + 1), REGEX_KEY)
_SECOND_KEY_FIELD = (MEMBER_METADATA_KEY, TARGET_MEMBER_KEY, CURRENT_ASSIGNMENT_KEY, REGEX_KEY)
_Q = struct.Struct(">q")

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_B = struct.Struct(">b")

Assignment = Mapping[uuid.UUID, frozenset[int]]  # topic id -> partitions


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerKey:
    """The key of a consumer-group record: ``kind`` is its key version (3-8, 16); ``member`` the
    member id, or the regular expression of a ConsumerGroupRegularExpressionKey."""
    kind: int
    group: str
    member: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """What a member that uses the classic protocol joined with (JoinGroup)."""
    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]  # (name, metadata), in the member's order of preference


@dataclasses.dataclass(frozen=True, slots=True)
class ResolvedRegex:
    """A regular expression's resolution (ConsumerGroupRegularExpressionValue): the topics it
    matched in the metadata image of ``version``, at wall-clock ``timestamp``."""
    topics: frozenset[str]
    version: int = 0
    timestamp: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class MemberMetadata:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMemberMetadata | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class CurrentAssignment:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: Assignment
    pending_revocation: Assignment


# --- keys --------------------------------------------------------------------------------

def key(kind: int, group: str, member: str | None = None, second=_SECOND_KEY_FIELD) -> bytes:
    """A group record's key; the kinds in ``second`` have a second string field (a member id, or
    the regular expression): share-group records pass their own kinds."""
    out = _H.pack(kind) + encode_string(group)
    if kind in second:
        out += encode_string(member or "")
    return out


def key_fields(kind: int, r: RecordReader, second=_SECOND_KEY_FIELD) -> tuple[int, str, str | None]:
    group = r.string()
    return kind, group, (r.string() if kind in second else None)


def decode_consumer_key(kind: int, r: RecordReader) -> ConsumerKey:
    return ConsumerKey(*key_fields(kind, r))


# --- flexible value writer ------------------------------------------------------------------

def _cstr(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    b = s.encode("utf-8")
    return _uvarint(len(b) + 1) + b


def _array(items: list[bytes]) -> bytes:
    return _uvarint(len(items) + 1) + b"".join(items)


def _topic_partitions(a: Assignment) -> bytes:
    return _array([tid.bytes + _array([_I.pack(p) for p in sorted(ps)]) + b"\x00"
                   for tid, ps in sorted(a.items(), key=lambda kv: kv[0].bytes) if ps])


_V0 = _H.pack(0)


def group_epoch_value(epoch: int) -> bytes:
    return _V0 + _I.pack(epoch) + b"\x00"


def partition_metadata_value(topics: Mapping[str, tuple[uuid.UUID, int]]) -> bytes:
    return _V0 + _array([tid.bytes + _cstr(name) + _I.pack(n) + _array([]) + b"\x00"
                         for name, (tid, n) in sorted(topics.items())]) + b"\x00"


def _cbytes(b: bytes) -> bytes:
    return _uvarint(len(b) + 1) + b


def member_metadata_value(m: MemberMetadata) -> bytes:
    out = (_V0 + _cstr(m.instance_id) + _cstr(m.rack_id) + _cstr(m.client_id) + _cstr(m.client_host)
           + _array([_cstr(t) for t in m.subscribed_topic_names]) + _cstr(m.subscribed_topic_regex)
           + _I.pack(m.rebalance_timeout_ms) + _cstr(m.server_assignor))
    if m.classic is None:
        return out + b"\x00"
    c = m.classic
    tag = (_I.pack(c.session_timeout_ms) + _array([_cstr(n) + _cbytes(bytes(md)) + b"\x00" for n, md in c.protocols])
           + b"\x00")
    return out + b"\x01" + b"\x00" + _uvarint(len(tag)) + tag  # one tagged field: tag 0, its size, the struct


def regex_value(r: ResolvedRegex) -> bytes:
    return _V0 + _array([_cstr(t) for t in sorted(r.topics)]) + _Q.pack(r.version) + _Q.pack(r.timestamp) + b"\x00"


def target_metadata_value(assignment_epoch: int) -> bytes:
    return _V0 + _I.pack(assignment_epoch) + b"\x00"


def target_member_value(a: Assignment) -> bytes:
    return _V0 + _topic_partitions(a) + b"\x00"


def current_assignment_value(c: CurrentAssignment) -> bytes:
    return (_V0 + _I.pack(c.member_epoch) + _I.pack(c.previous_member_epoch) + _B.pack(c.state)
            + _topic_partitions(c.assigned) + _topic_partitions(c.pending_revocation) + b"\x00")


# --- value reader ----------------------------------------------------------------------------

def _reader(value: bytes) -> RecordReader:
    r = RecordReader(bytes(value), flexible=True)
    version = r.i16()
    if version != 0:
        raise RecordFormatError(f"unknown consumer group record value version {version}")
    return r


def _read_array(r: RecordReader, item) -> list:
    return [item(r) for _ in range(r.array_len())]


def _read_uuid(r: RecordReader) -> uuid.UUID:
    return uuid.UUID(bytes=bytes(r._take(16)))


def _read_topic_partitions(r: RecordReader) -> dict[uuid.UUID, frozenset[int]]:
    def one(r):
        tid = _read_uuid(r)
        ps = frozenset(_read_array(r, lambda r: r.i32()))
        r.tagged_fields()
        return tid, ps
    return dict(_read_array(r, one))


def decode_int_value(value: bytes) -> int:
    """ConsumerGroupMetadataValue (epoch) and ConsumerGroupTargetAssignmentMetadataValue."""
    r = _reader(value)
    n = r.i32()
    r.tagged_fields()
    return n


def decode_partition_metadata(value: bytes) -> dict[str, tuple[uuid.UUID, int]]:
    r = _reader(value)

    def topic(r):
        tid = _read_uuid(r)
        name = r.string()
        n = r.i32()

        def part(r):
            r.i32()
            _read_array(r, lambda r: r.string())
            r.tagged_fields()
        _read_array(r, part)
        r.tagged_fields()
        return name, (tid, n)
    out = dict(_read_array(r, topic))
    r.tagged_fields()
    return out


def _classic_member_metadata(r: RecordReader) -> ClassicMemberMetadata:
    session = r.i32()

    def protocol(r):
        name, md = r.string(), r.bytes_()
        r.tagged_fields()
        return name, md
    c = ClassicMemberMetadata(session, tuple(_read_array(r, protocol)))
    r.tagged_fields()
    return c


def decode_member_metadata(value: bytes) -> MemberMetadata:
    r = _reader(value)
    fields = (r.string(nullable=True), r.string(nullable=True), r.string(), r.string(),
              tuple(_read_array(r, lambda r: r.string())), r.string(nullable=True), r.i32(), r.string(nullable=True))
    classic = None
    for _ in range(r.uvarint()):
        tag, size = r.uvarint(), r.uvarint()
        end = r.pos + size
        if tag == 0:
            classic = _classic_member_metadata(r)
        if r.pos > end:
            raise RecordFormatError("ClassicMemberMetadata runs past its tagged field")
        r.pos = end
    return MemberMetadata(*fields, classic)


def decode_regex(value: bytes) -> ResolvedRegex:
    r = _reader(value)
    topics = frozenset(_read_array(r, lambda r: r.string()))
    version, timestamp = r.i64(), r.i64()
    r.tagged_fields()
    return ResolvedRegex(topics, version, timestamp)


def decode_target_member(value: bytes) -> dict[uuid.UUID, frozenset[int]]:
    r = _reader(value)
    a = _read_topic_partitions(r)
    r.tagged_fields()
    return a


def decode_current_assignment(value: bytes) -> CurrentAssignment:
    r = _reader(value)
    epoch, prev = r.i32(), r.i32()
    state = _B.unpack(r._take(1))[0]
    c = CurrentAssignment(epoch, prev, state, _read_topic_partitions(r), _read_topic_partitions(r))
    r.tagged_fields()
    return c
