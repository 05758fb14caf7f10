"""The immutable ``MetadataImage``: the cluster state after replaying the metadata log up
to ``offset``. Never mutate an image: build a ``MetadataDelta`` and ``apply()`` it."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator

from metadata import records as r
from metadata.acl import AclBinding, AclOperation, PatternType, PermissionType, ResourceType


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerRegistration:
    id: int
    incarnation_id: uuid.UUID
    epoch: int
    endpoints: tuple[r.Endpoint, ...]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool

    def endpoint(self, listener: str) -> r.Endpoint | None:
        for e in self.endpoints:
            if e.name == listener:
                return e
        return None


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionRegistration:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    # an ongoing reassignment (KIP-455): ``replicas`` holds the target replicas followed by the
    # ones being removed; ``adding`` are targets not yet in sync, ``removing`` leave at the end
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()
    # replicas in a failed log dir of their broker (KIP-858): they may not lead or join the ISR
    # until that broker restarts (a new incarnation clears them)
    offline: tuple[int, ...] = ()

    @property
    def is_reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    def merge(self, change: r.PartitionChangeRecord) -> PartitionRegistration:
        leader_changed = change.leader is not None and change.leader != self.leader
        return PartitionRegistration(
            replicas=change.replicas if change.replicas is not None else self.replicas,
            isr=change.isr if change.isr is not None else self.isr,
            leader=change.leader if change.leader is not None else self.leader,
            leader_epoch=self.leader_epoch + 1 if leader_changed else self.leader_epoch,
            partition_epoch=self.partition_epoch + 1,
            adding=change.adding_replicas if change.adding_replicas is not None else self.adding,
            removing=change.removing_replicas if change.removing_replicas is not None else self.removing,
            offline=change.offline_replicas if change.offline_replicas is not None else self.offline,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionRegistration]


@dataclasses.dataclass(frozen=True, slots=True)
class MetadataImage:
    offset: int  # offset of the last record replayed, -1 when empty
    epoch: int
    cluster_id: str | None
    features: dict[str, int]
    brokers: dict[int, BrokerRegistration]
    topics_by_id: dict[uuid.UUID, TopicImage]
    topics_by_name: dict[str, TopicImage]
    configs: dict[tuple[int, str], dict[str, str]]  # (resource type, name) -> {key: value}
    next_producer_id: int
    acls: dict[uuid.UUID, AclBinding] = dataclasses.field(default_factory=dict)  # ACLs by id
    # client quotas: entity ((type, name or None), ...) -> {quota key: value}
    client_quotas: dict[tuple[tuple[str, str | None], ...], dict[str, float]] = dataclasses.field(
        default_factory=dict)
    # (user, mechanism) -> salted SCRAM credential (broker/security/sasl.py authenticates with it)
    scram_credentials: dict[tuple[str, str], r.UserScramCredentialRecord] = dataclasses.field(default_factory=dict)
    scram_decoy_seed: bytes | None = None  # ScramDecoySeedRecord: decoy salts for unknown SCRAM users

    def topic_config(self, name: str) -> dict[str, str]:
        return self.configs.get((r.RESOURCE_TOPIC, name), {})

    def live_brokers(self) -> list[BrokerRegistration]:
        return [b for b in self.brokers.values() if not b.fenced]

    def to_records(self) -> Iterator[r.Record]:
        """The records that rebuild this image from empty: the metadata snapshot."""
        if self.cluster_id:
            yield r.ClusterIdRecord(self.cluster_id)
        for name, level in sorted(self.features.items()):
            yield r.FeatureLevelRecord(name, level)
        for b in sorted(self.brokers.values(), key=lambda b: b.id):
            yield r.RegisterBrokerRecord(b.id, b.incarnation_id, b.epoch, b.endpoints, b.rack, b.fenced,
                                         b.in_controlled_shutdown)
        for t in self.topics_by_id.values():
            yield r.TopicRecord(t.name, t.topic_id)
            for pid, p in sorted(t.partitions.items()):
                yield r.PartitionRecord(t.topic_id, pid, p.replicas, p.isr, p.leader, p.leader_epoch,
                                        p.partition_epoch, p.removing or None, p.adding or None, p.offline or None)
        for (rtype, rname), kv in self.configs.items():
            for k, v in sorted(kv.items()):
                yield r.ConfigRecord(rtype, rname, k, v)
        if self.next_producer_id:
            yield r.ProducerIdsRecord(-1, -1, self.next_producer_id)
        for acl_id, b in self.acls.items():
            yield r.AccessControlEntryRecord(acl_id, int(b.resource_type), b.resource_name, int(b.pattern_type),
                                             b.principal, b.host, int(b.operation), int(b.permission))
        for entity, kv in self.client_quotas.items():
            for k, v in sorted(kv.items()):
                yield r.ClientQuotaRecord(entity, k, v)
        for _, cred in sorted(self.scram_credentials.items()):
            yield cred
        if self.scram_decoy_seed is not None:
            yield r.ScramDecoySeedRecord(self.scram_decoy_seed)


EMPTY = MetadataImage(offset=-1, epoch=-1, cluster_id=None, features={}, brokers={}, topics_by_id={},
                      topics_by_name={}, configs={}, next_producer_id=0)


def acl_binding(rec: r.AccessControlEntryRecord) -> AclBinding:
    return AclBinding(ResourceType(rec.resource_type), rec.resource_name, PatternType(rec.pattern_type),
                      rec.principal, rec.host, AclOperation(rec.operation), PermissionType(rec.permission_type))
