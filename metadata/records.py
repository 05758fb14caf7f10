"""Metadata records: the entries of the cluster metadata log (KRaft's metadata record types).

Each record is a frozen dataclass with a stable type name. ``encode`` / ``decode`` turn a
record into the bytes stored in the metadata log (a compact JSON object with a ``t`` tag;
uuids as hex). The log itself treats records as opaque bytes.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import uuid
from typing import Any, ClassVar

NO_LEADER = -1


@dataclasses.dataclass(frozen=True, slots=True)
class Endpoint:
    name: str  # listener name
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"


@dataclasses.dataclass(frozen=True, slots=True)
class RegisterBrokerRecord:
    TYPE: ClassVar[str] = "RegisterBroker"
    broker_id: int
    incarnation_id: uuid.UUID
    broker_epoch: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class UnregisterBrokerRecord:
    TYPE: ClassVar[str] = "UnregisterBroker"
    broker_id: int
    broker_epoch: int


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerRegistrationChangeRecord:
    TYPE: ClassVar[str] = "BrokerRegistrationChange"
    broker_id: int
    broker_epoch: int
    fenced: bool | None = None
    in_controlled_shutdown: bool | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class TopicRecord:
    TYPE: ClassVar[str] = "Topic"
    name: str
    topic_id: uuid.UUID


@dataclasses.dataclass(frozen=True, slots=True)
class RemoveTopicRecord:
    TYPE: ClassVar[str] = "RemoveTopic"
    topic_id: uuid.UUID


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionRecord:
    TYPE: ClassVar[str] = "Partition"
    topic_id: uuid.UUID
    partition_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    # an ongoing reassignment (KIP-455): replicas being added / removed (None: none). Written only
    # while a reassignment runs, so a node that predates them reads every other record as before.
    removing_replicas: tuple[int, ...] | None = None
    adding_replicas: tuple[int, ...] | None = None
    # brokers whose replica sits in a log dir that failed (KIP-858); written only when some do
    offline_replicas: tuple[int, ...] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionChangeRecord:
    """Changes to a partition; ``None`` fields are unchanged. A change of leader bumps the
    leader epoch; every change bumps the partition epoch (as in KRaft)."""

    TYPE: ClassVar[str] = "PartitionChange"
    topic_id: uuid.UUID
    partition_id: int
    isr: tuple[int, ...] | None = None
    leader: int | None = None
    replicas: tuple[int, ...] | None = None
    # reassignment sets (KIP-455), None: unchanged; () clears them (the reassignment ended)
    removing_replicas: tuple[int, ...] | None = None
    adding_replicas: tuple[int, ...] | None = None
    # brokers whose replica is in an offline log dir (KIP-858; Kafka derives it from the
    # partition's directories): None unchanged, () none any more
    offline_replicas: tuple[int, ...] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class ConfigRecord:
    """A config of a topic (resource_type 2) or broker (4); value None deletes it."""

    TYPE: ClassVar[str] = "Config"
    resource_type: int
    resource_name: str
    name: str
    value: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerIdsRecord:
    TYPE: ClassVar[str] = "ProducerIds"
    broker_id: int
    broker_epoch: int
    next_producer_id: int  # the first id not yet handed out


@dataclasses.dataclass(frozen=True, slots=True)
class FeatureLevelRecord:
    TYPE: ClassVar[str] = "FeatureLevel"
    name: str
    feature_level: int


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterIdRecord:
    """krafty-specific: the cluster id, written once by the first controller leader."""

    TYPE: ClassVar[str] = "ClusterId"
    cluster_id: str


@dataclasses.dataclass(frozen=True, slots=True)
class NoOpRecord:
    TYPE: ClassVar[str] = "NoOp"


@dataclasses.dataclass(frozen=True, slots=True)
class AccessControlEntryRecord:
    """An ACL (KRaft's AccessControlEntryRecord); codes are Kafka's (metadata/acl.py)."""

    TYPE: ClassVar[str] = "AccessControlEntry"
    acl_id: uuid.UUID
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclasses.dataclass(frozen=True, slots=True)
class RemoveAccessControlEntryRecord:
    TYPE: ClassVar[str] = "RemoveAccessControlEntry"
    acl_id: uuid.UUID


@dataclasses.dataclass(frozen=True, slots=True)
class ClientQuotaRecord:
    """A client quota (KRaft's ClientQuotaRecord): ``entity`` is ((type, name or None), ...)
    with types user / client-id / ip, sorted; ``remove`` drops the key."""

    TYPE: ClassVar[str] = "ClientQuota"
    entity: tuple[tuple[str, str | None], ...]
    key: str
    value: float = 0.0
    remove: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class UserScramCredentialRecord:
    """A user's salted SCRAM credential (KRaft's UserScramCredentialRecord); never the password."""

    TYPE: ClassVar[str] = "UserScramCredential"
    name: str
    mechanism: str  # SCRAM-SHA-256 | SCRAM-SHA-512
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@dataclasses.dataclass(frozen=True, slots=True)
class RemoveUserScramCredentialRecord:
    TYPE: ClassVar[str] = "RemoveUserScramCredential"
    name: str
    mechanism: str


@dataclasses.dataclass(frozen=True, slots=True)
class ScramDecoySeedRecord:
    """A random secret of the cluster, written once by the first active controller: brokers
    derive from it the salt they show for a SCRAM user that does not exist, the same on every
    broker and across restarts, so a client cannot tell such a user from a real one."""

    TYPE: ClassVar[str] = "ScramDecoySeed"
    seed: bytes


RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_GROUP = 32

RECORD_TYPES: dict[str, type] = {
    cls.TYPE: cls
    for cls in (
        RegisterBrokerRecord, UnregisterBrokerRecord, BrokerRegistrationChangeRecord, TopicRecord,
        RemoveTopicRecord, PartitionRecord, PartitionChangeRecord, ConfigRecord, ProducerIdsRecord,
        FeatureLevelRecord, ClusterIdRecord, NoOpRecord,
        AccessControlEntryRecord, RemoveAccessControlEntryRecord, ClientQuotaRecord,
        UserScramCredentialRecord, RemoveUserScramCredentialRecord, ScramDecoySeedRecord,
    )
}

Record = Any  # one of RECORD_TYPES' classes


def _to_json(v: Any) -> Any:
    if isinstance(v, uuid.UUID):
        return v.hex
    if isinstance(v, Endpoint):
        return [v.name, v.host, v.port, v.security_protocol]
    if isinstance(v, tuple):
        return [_to_json(x) for x in v]
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    return v


_INT_LISTS = ("replicas", "isr", "removing_replicas", "adding_replicas", "offline_replicas")


def _field_encoder(name: str):
    if name in _INT_LISTS:
        return list  # of ints
    if name in ("incarnation_id", "topic_id", "acl_id"):
        return lambda v: v.hex
    if name in ("salt", "stored_key", "server_key", "seed"):
        return lambda v: base64.b64encode(v).decode()
    if name in ("entity", "endpoints"):
        return _to_json
    return None  # str, int, float, bool: as they are


# per record type, its fields and how each goes to JSON (snapshots encode every record of the image)
_ENCODERS: dict[type, tuple[tuple[str, Any], ...]] = {
    cls: tuple((f.name, _field_encoder(f.name)) for f in dataclasses.fields(cls)) for cls in RECORD_TYPES.values()
}
_json_encode = json.JSONEncoder(separators=(",", ":")).encode


def encode(record: Record) -> bytes:
    d = {"t": record.TYPE}
    for name, conv in _ENCODERS[type(record)]:
        v = getattr(record, name)
        if v is not None:
            d[name] = v if conv is None else conv(v)
    return _json_encode(d).encode()


_uuids: dict[str, uuid.UUID] = {}  # the same topic ids come back in every record of a topic


def _uuid(hex_: str) -> uuid.UUID:
    u = _uuids.get(hex_)
    if u is None:
        if len(_uuids) >= 100_000:
            _uuids.clear()
        u = _uuids[hex_] = uuid.UUID(hex=hex_)
    return u


def _fields_decoder(name: str):
    if name in ("incarnation_id", "topic_id", "acl_id"):
        return _uuid
    if name in _INT_LISTS:
        return tuple
    if name in ("salt", "stored_key", "server_key", "seed"):
        return base64.b64decode
    if name == "entity":
        return lambda v: tuple(tuple(e) for e in v)
    if name == "endpoints":
        return lambda v: tuple(Endpoint(*e) for e in v)
    return None


# per record type, the fields whose JSON form needs converting: a restart replays every record
# since the last snapshot (up to metadata.log.max.record.bytes.between.snapshots) through here
_DECODERS: dict[type, tuple[tuple[str, Any], ...]] = {
    cls: tuple((f.name, conv) for f in dataclasses.fields(cls) if (conv := _fields_decoder(f.name)) is not None)
    for cls in RECORD_TYPES.values()
}
_json_decode = json.JSONDecoder().decode


def decode(data: bytes) -> Record:
    d = _json_decode(data.decode())
    cls = RECORD_TYPES[d.pop("t")]
    for k, conv in _DECODERS[cls]:
        v = d.get(k)
        if v is not None:
            d[k] = conv(v)
    return cls(**d)
