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


def encode(record: Record) -> bytes:
    d = {"t": record.TYPE}
    for f in dataclasses.fields(record):
        v = getattr(record, f.name)
        if v is not None:
            d[f.name] = _to_json(v)
    return json.dumps(d, separators=(",", ":")).encode()


_UUID_FIELDS = {"incarnation_id", "topic_id", "acl_id"}
_TUPLE_FIELDS = {"replicas", "isr"}
_BYTES_FIELDS = {"salt", "stored_key", "server_key", "seed"}


def decode(data: bytes) -> Record:
    d = json.loads(data)
    cls = RECORD_TYPES[d.pop("t")]
    for k in _UUID_FIELDS & d.keys():
        d[k] = uuid.UUID(hex=d[k])
    for k in _TUPLE_FIELDS & d.keys():
        d[k] = tuple(d[k])
    if "entity" in d:
        d["entity"] = tuple(tuple(e) for e in d["entity"])
    for k in _BYTES_FIELDS & d.keys():
        d[k] = base64.b64decode(d[k])
    if "endpoints" in d:
        d["endpoints"] = tuple(Endpoint(*e) for e in d["endpoints"])
    return cls(**d)
