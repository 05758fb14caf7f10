"""The records of share groups (KIP-932), Kafka's formats byte for byte.

In ``__consumer_offsets`` (the group coordinator; group-coordinator/src/main/resources/common/
message/ShareGroup*.json). Keys are not flexible: an int16 that says what the key is, then
int16-length strings. Values are flexible version 0 (compact strings and arrays, uuids as 16
bytes, a tagged-field section at the end of every struct):

    ShareGroupPartitionMetadataKey (9): group            (deprecated in 4.1: read and ignored)
    ShareGroupMemberMetadataKey (10): group member     -> rackId ?string | clientId string
                                                          | clientHost string | subscribedTopicNames [string]
    ShareGroupMetadataKey (11): group                  -> epoch int32
    ShareGroupTargetAssignmentMetadataKey (12): group  -> assignmentEpoch int32
    ShareGroupTargetAssignmentMemberKey (13): group member -> topicPartitions [topicId uuid | partitions [int32]]
    ShareGroupCurrentMemberAssignmentKey (14): group member -> memberEpoch int32 | previousMemberEpoch int32
                                                          | state int8 | assignedPartitions [TopicPartitions]
    ShareGroupStatePartitionMetadataKey (15): group    -> initializingTopics [TopicPartitionsInfo]
                                                          | initializedTopics [TopicPartitionsInfo]
                                                          | deletingTopics [TopicInfo]
        TopicPartitionsInfo: topicId uuid | topicName string | partitions [int32]
        TopicInfo:           topicId uuid | topicName string

In ``__share_group_state`` (the share coordinator; share-coordinator/src/main/resources/common/
message/Share*.json). The key's int16 is the record type:

    ShareSnapshotKey (0) / ShareUpdateKey (1): groupId string | topicId uuid | partition int32
    ShareSnapshotValue v0: snapshotEpoch int32 | stateEpoch int32 | leaderEpoch int32 | startOffset int64
                           | createTimestamp int64 | writeTimestamp int64 | stateBatches [StateBatch]
                           | (tag 0: deliveryCompleteCount int32)
    ShareUpdateValue v0:   snapshotEpoch int32 | leaderEpoch int32 | startOffset int64 | stateBatches [StateBatch]
                           | (tag 0: deliveryCompleteCount int32)
        StateBatch: firstOffset int64 | lastOffset int64 | deliveryState int8 (0 Available, 2 Acknowledged,
                    4 Archived) | deliveryCount int16

A null value is a tombstone. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from collections.abc import Mapping

from broker.group import consumer_records
from broker.group.consumer_records import (
    _V0,
    _array,
    _cstr,
    _read_array,
    _read_topic_partitions,
    _read_uuid,
    _reader,
    _topic_partitions,
)
from broker.group.records import RecordFormatError, RecordReader, encode_string
from broker.txn.records import _uvarint

# __consumer_offsets key versions of share groups
PARTITION_METADATA_KEY = 9  # deprecated (Kafka 4.0 wrote it)
MEMBER_METADATA_KEY = 10
GROUP_EPOCH_KEY = 11
TARGET_METADATA_KEY = 12
TARGET_MEMBER_KEY = 13
CURRENT_ASSIGNMENT_KEY = 14
STATE_PARTITION_METADATA_KEY = 15
KEY_VERSIONS = range(PARTITION_METADATA_KEY, STATE_PARTITION_METADATA_KEY + 1)
_MEMBER_KEYS = (MEMBER_METADATA_KEY, TARGET_MEMBER_KEY, CURRENT_ASSIGNMENT_KEY)

# __share_group_state record types
SHARE_SNAPSHOT = 0
SHARE_UPDATE = 1

# delivery states as persisted (an acquired record is persisted as available)
AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_B = struct.Struct(">b")
_BATCH = struct.Struct(">qqbh")

Assignment = Mapping[uuid.UUID, frozenset[int]]


# --- __consumer_offsets --------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, slots=True)
class ShareKey:
    """The key of a share-group record in ``__consumer_offsets``: ``kind`` is its key version (9-15)."""
    kind: int
    group: str
    member: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class MemberMetadata:
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class CurrentAssignment:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: Assignment


@dataclasses.dataclass(frozen=True, slots=True)
class StatePartitionMetadata:
    """Which topic partitions of the group have share-group state (ShareGroupStatePartitionMetadata):
    topic id -> (name, partitions)."""
    initializing: Mapping[uuid.UUID, tuple[str, frozenset[int]]] = dataclasses.field(default_factory=dict)
    initialized: Mapping[uuid.UUID, tuple[str, frozenset[int]]] = dataclasses.field(default_factory=dict)
    deleting: Mapping[uuid.UUID, str] = dataclasses.field(default_factory=dict)


def key(kind: int, group: str, member: str | None = None) -> bytes:
    return consumer_records.key(kind, group, member, _MEMBER_KEYS)


def decode_share_key(kind: int, r: RecordReader) -> ShareKey:
    return ShareKey(*consumer_records.key_fields(kind, r, _MEMBER_KEYS))


def member_metadata_value(m: MemberMetadata) -> bytes:
    return (_V0 + _cstr(m.rack_id) + _cstr(m.client_id) + _cstr(m.client_host)
            + _array([_cstr(t) for t in m.subscribed_topic_names]) + b"\x00")


def decode_member_metadata(value: bytes) -> MemberMetadata:
    r = _reader(value)
    m = MemberMetadata(r.string(nullable=True), r.string(), r.string(), tuple(_read_array(r, lambda r: r.string())))
    r.tagged_fields()
    return m


def current_assignment_value(c: CurrentAssignment) -> bytes:
    return (_V0 + _I.pack(c.member_epoch) + _I.pack(c.previous_member_epoch) + _B.pack(c.state)
            + _topic_partitions(c.assigned) + b"\x00")


def decode_current_assignment(value: bytes) -> CurrentAssignment:
    r = _reader(value)
    epoch, prev = r.i32(), r.i32()
    state = _B.unpack(r._take(1))[0]
    c = CurrentAssignment(epoch, prev, state, _read_topic_partitions(r))
    r.tagged_fields()
    return c


def _topics_info(topics: Mapping[uuid.UUID, tuple[str, frozenset[int]]]) -> bytes:
    return _array([tid.bytes + _cstr(name) + _array([_I.pack(p) for p in sorted(ps)]) + b"\x00"
                   for tid, (name, ps) in sorted(topics.items(), key=lambda kv: kv[0].bytes)])


def state_partition_metadata_value(m: StatePartitionMetadata) -> bytes:
    return (_V0 + _topics_info(m.initializing) + _topics_info(m.initialized)
            + _array([tid.bytes + _cstr(name) + b"\x00"
                      for tid, name in sorted(m.deleting.items(), key=lambda kv: kv[0].bytes)]) + b"\x00")


def decode_state_partition_metadata(value: bytes) -> StatePartitionMetadata:
    r = _reader(value)

    def info(r):
        tid, name = _read_uuid(r), r.string()
        ps = frozenset(_read_array(r, lambda r: r.i32()))
        r.tagged_fields()
        return tid, (name, ps)

    def topic(r):
        tid, name = _read_uuid(r), r.string()
        r.tagged_fields()
        return tid, name
    m = StatePartitionMetadata(dict(_read_array(r, info)), dict(_read_array(r, info)), dict(_read_array(r, topic)))
    r.tagged_fields()
    return m


# --- __share_group_state -------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, slots=True)
class StateKey:
    """A share partition: (group, topic id, partition)."""
    group: str
    topic_id: uuid.UUID
    partition: int

    def coordinator_key(self) -> str:
        """The share coordinator's key (FindCoordinator key type SHARE): ``group:topicId:partition``,
        the topic id in Kafka's base64 form."""
        return f"{self.group}:{topic_id_str(self.topic_id)}:{self.partition}"


def topic_id_str(tid: uuid.UUID) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 without padding."""
    import base64

    return base64.urlsafe_b64encode(tid.bytes).decode().rstrip("=")


@dataclasses.dataclass(frozen=True, slots=True)
class StateBatch:
    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclasses.dataclass(frozen=True, slots=True)
class ShareState:
    """One share partition's persisted state (a ShareSnapshotValue, or a ShareUpdateValue's fields;
    -1 for a field an update leaves as it was)."""
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...] = ()
    delivery_complete_count: int = -1
    create_timestamp: int = -1
    write_timestamp: int = -1


def state_key(record_type: int, k: StateKey) -> bytes:
    return _H.pack(record_type) + encode_string(k.group) + k.topic_id.bytes + _I.pack(k.partition)


def decode_state_key(key: bytes) -> tuple[int, StateKey]:
    r = RecordReader(bytes(key))
    kind = r.i16()
    if kind not in (SHARE_SNAPSHOT, SHARE_UPDATE):
        raise RecordFormatError(f"unknown __share_group_state key version {kind}")
    group = r.string()
    tid = uuid.UUID(bytes=bytes(r._take(16)))
    return kind, StateKey(group, tid, r.i32())


def _batches(batches) -> bytes:
    return _uvarint(len(batches) + 1) + b"".join(
        _BATCH.pack(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) + b"\x00" for b in batches)


def _tags(dcc: int) -> bytes:
    if dcc < 0:
        return b"\x00"
    return b"\x01" + _uvarint(0) + _uvarint(4) + _I.pack(dcc)


def snapshot_value(s: ShareState) -> bytes:
    return (_V0 + _I.pack(s.snapshot_epoch) + _I.pack(s.state_epoch) + _I.pack(s.leader_epoch)
            + _Q.pack(s.start_offset) + _Q.pack(s.create_timestamp) + _Q.pack(s.write_timestamp)
            + _batches(s.batches) + _tags(s.delivery_complete_count))


def update_value(s: ShareState) -> bytes:
    return (_V0 + _I.pack(s.snapshot_epoch) + _I.pack(s.leader_epoch) + _Q.pack(s.start_offset)
            + _batches(s.batches) + _tags(s.delivery_complete_count))


def _read_batches(r: RecordReader) -> tuple[StateBatch, ...]:
    def one(r):
        b = StateBatch(*_BATCH.unpack(r._take(_BATCH.size)))
        r.tagged_fields()
        return b
    return tuple(_read_array(r, one))


def _read_tags(r: RecordReader) -> int:
    dcc = -1
    for _ in range(r.uvarint()):
        tag, size = r.uvarint(), r.uvarint()
        data = r._take(size)
        if tag == 0 and size == 4:
            dcc = _I.unpack(data)[0]
    return dcc


def decode_snapshot_value(value: bytes) -> ShareState:
    r = RecordReader(bytes(value), flexible=True)
    if r.i16() != 0:
        raise RecordFormatError("unknown ShareSnapshotValue version")
    snap, state_epoch, leader_epoch, start, created, written = r.i32(), r.i32(), r.i32(), r.i64(), r.i64(), r.i64()
    batches = _read_batches(r)
    return ShareState(snap, state_epoch, leader_epoch, start, batches, _read_tags(r), created, written)


def decode_update_value(value: bytes) -> ShareState:
    r = RecordReader(bytes(value), flexible=True)
    if r.i16() != 0:
        raise RecordFormatError("unknown ShareUpdateValue version")
    snap, leader_epoch, start = r.i32(), r.i32(), r.i64()
    batches = _read_batches(r)
    return ShareState(snap, -1, leader_epoch, start, batches, _read_tags(r))


__all__ = ["ShareKey", "MemberMetadata", "CurrentAssignment", "StatePartitionMetadata", "StateKey", "StateBatch",
           "ShareState", "key", "decode_share_key", "state_key", "decode_state_key", "snapshot_value", "update_value",
           "decode_snapshot_value", "decode_update_value", "topic_id_str"]
