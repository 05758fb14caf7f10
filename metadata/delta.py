"""``MetadataDelta``: records replayed on top of an image; ``apply()`` gives the next image.

Publishers receive ``(delta, new_image)`` and act on what changed, e.g. a broker asks
``delta.local_changes(broker_id)`` which partitions it now leads, follows or must delete
(KRaft's ``TopicsDelta.localChanges``)."""

from __future__ import annotations

import dataclasses
import uuid

from metadata import records as r
from metadata.acl import AclBinding
from metadata.image import BrokerRegistration, MetadataImage, PartitionRegistration, TopicImage, acl_binding


@dataclasses.dataclass(slots=True)
class TopicDelta:
    name: str
    topic_id: uuid.UUID
    base: TopicImage | None  # None for a topic created in this delta
    changed: dict[int, PartitionRegistration] = dataclasses.field(default_factory=dict)

    def partition(self, pid: int) -> PartitionRegistration | None:
        p = self.changed.get(pid)
        if p is None and self.base is not None:
            p = self.base.partitions.get(pid)
        return p

    def apply(self) -> TopicImage:
        parts = dict(self.base.partitions) if self.base else {}
        parts.update(self.changed)
        return TopicImage(self.name, self.topic_id, parts)


@dataclasses.dataclass(frozen=True, slots=True)
class LocalReplicaChanges:
    """What one broker must do after a delta. Keys are (topic name, partition)."""

    leaders: dict[tuple[str, int], tuple[uuid.UUID, PartitionRegistration]]
    followers: dict[tuple[str, int], tuple[uuid.UUID, PartitionRegistration]]
    deletes: set[tuple[str, int]]


class MetadataDelta:
    def __init__(self, image: MetadataImage):
        self.image = image
        self.cluster_id: str | None = None
        self.features: dict[str, int] = {}
        self.brokers: dict[int, BrokerRegistration | None] = {}  # None = unregistered
        self.topics: dict[uuid.UUID, TopicDelta] = {}
        self.deleted_topics: dict[uuid.UUID, TopicImage] = {}
        self.configs: dict[tuple[int, str], dict[str, str | None]] = {}
        self.next_producer_id: int | None = None
        self.acls: dict[uuid.UUID, AclBinding | None] = {}  # None = removed
        self.client_quotas: dict[tuple, dict[str, float | None]] = {}  # None = removed
        self.scram_credentials: dict[tuple[str, str], r.UserScramCredentialRecord | None] = {}  # None = removed
        self.scram_decoy_seed: bytes | None = None
        self.snapshot_loaded = False

    # --- lookups through the delta ---------------------------------------------------
    def broker(self, bid: int) -> BrokerRegistration | None:
        if bid in self.brokers:
            return self.brokers[bid]
        return self.image.brokers.get(bid)

    def topic_delta(self, topic_id: uuid.UUID) -> TopicDelta:
        td = self.topics.get(topic_id)
        if td is None:
            base = self.image.topics_by_id.get(topic_id)
            if base is None:
                raise KeyError(f"unknown topic id {topic_id}")
            td = self.topics[topic_id] = TopicDelta(base.name, topic_id, base)
        return td

    # --- replay ----------------------------------------------------------------------
    def replay(self, rec: r.Record) -> None:
        m = getattr(self, "_replay_" + rec.TYPE)
        m(rec)

    def _replay_ClusterId(self, rec: r.ClusterIdRecord) -> None:
        self.cluster_id = rec.cluster_id

    def _replay_FeatureLevel(self, rec: r.FeatureLevelRecord) -> None:
        self.features[rec.name] = rec.feature_level

    def _replay_NoOp(self, rec: r.NoOpRecord) -> None:
        pass

    def _replay_RegisterBroker(self, rec: r.RegisterBrokerRecord) -> None:
        self.brokers[rec.broker_id] = BrokerRegistration(
            rec.broker_id, rec.incarnation_id, rec.broker_epoch, rec.endpoints, rec.rack, rec.fenced,
            rec.in_controlled_shutdown)

    def _replay_UnregisterBroker(self, rec: r.UnregisterBrokerRecord) -> None:
        self.brokers[rec.broker_id] = None

    def _replay_BrokerRegistrationChange(self, rec: r.BrokerRegistrationChangeRecord) -> None:
        b = self.broker(rec.broker_id)
        if b is None:
            raise ValueError(f"registration change for unknown broker {rec.broker_id}")
        changes = {}
        if rec.fenced is not None:
            changes["fenced"] = rec.fenced
        if rec.in_controlled_shutdown is not None:
            changes["in_controlled_shutdown"] = rec.in_controlled_shutdown
        self.brokers[rec.broker_id] = dataclasses.replace(b, **changes)

    def _replay_Topic(self, rec: r.TopicRecord) -> None:
        self.topics[rec.topic_id] = TopicDelta(rec.name, rec.topic_id, None)

    def _replay_RemoveTopic(self, rec: r.RemoveTopicRecord) -> None:
        td = self.topics.pop(rec.topic_id, None)
        base = self.image.topics_by_id.get(rec.topic_id)
        if base is not None:
            self.deleted_topics[rec.topic_id] = base
        elif td is None:
            raise ValueError(f"RemoveTopic for unknown topic id {rec.topic_id}")
        name = base.name if base else td.name
        self.configs[(r.RESOURCE_TOPIC, name)] = {k: None for k in self.image.topic_config(name)}

    def _replay_Partition(self, rec: r.PartitionRecord) -> None:
        td = self.topic_delta(rec.topic_id)
        td.changed[rec.partition_id] = PartitionRegistration(
            rec.replicas, rec.isr, rec.leader, rec.leader_epoch, rec.partition_epoch,
            rec.adding_replicas or (), rec.removing_replicas or (), rec.offline_replicas or ())

    def _replay_PartitionChange(self, rec: r.PartitionChangeRecord) -> None:
        td = self.topic_delta(rec.topic_id)
        p = td.partition(rec.partition_id)
        if p is None:
            raise ValueError(f"PartitionChange for unknown partition {rec.topic_id}:{rec.partition_id}")
        td.changed[rec.partition_id] = p.merge(rec)

    def _replay_Config(self, rec: r.ConfigRecord) -> None:
        self.configs.setdefault((rec.resource_type, rec.resource_name), {})[rec.name] = rec.value

    def _replay_ProducerIds(self, rec: r.ProducerIdsRecord) -> None:
        self.next_producer_id = rec.next_producer_id

    def _replay_UserScramCredential(self, rec: r.UserScramCredentialRecord) -> None:
        self.scram_credentials[(rec.name, rec.mechanism)] = rec

    def _replay_RemoveUserScramCredential(self, rec: r.RemoveUserScramCredentialRecord) -> None:
        self.scram_credentials[(rec.name, rec.mechanism)] = None

    def _replay_ScramDecoySeed(self, rec: r.ScramDecoySeedRecord) -> None:
        self.scram_decoy_seed = rec.seed

    def _replay_AccessControlEntry(self, rec: r.AccessControlEntryRecord) -> None:
        self.acls[rec.acl_id] = acl_binding(rec)

    def _replay_RemoveAccessControlEntry(self, rec: r.RemoveAccessControlEntryRecord) -> None:
        if rec.acl_id not in self.image.acls and self.acls.get(rec.acl_id) is None:
            raise ValueError(f"RemoveAccessControlEntry for unknown ACL id {rec.acl_id}")
        self.acls[rec.acl_id] = None

    def _replay_ClientQuota(self, rec: r.ClientQuotaRecord) -> None:
        self.client_quotas.setdefault(rec.entity, {})[rec.key] = None if rec.remove else rec.value

    # --- apply -----------------------------------------------------------------------
    def apply(self, offset: int, epoch: int) -> MetadataImage:
        img = self.image
        brokers = img.brokers
        if self.brokers:
            brokers = dict(brokers)
            for bid, b in self.brokers.items():
                if b is None:
                    brokers.pop(bid, None)
                else:
                    brokers[bid] = b
        by_id, by_name = img.topics_by_id, img.topics_by_name
        if self.topics or self.deleted_topics:
            by_id, by_name = dict(by_id), dict(by_name)
            for tid, t in self.deleted_topics.items():
                by_id.pop(tid, None)
                if by_name.get(t.name) is t:
                    del by_name[t.name]
            for tid, td in self.topics.items():
                t = td.apply()
                by_id[tid] = t
                by_name[t.name] = t
        configs = _merge_nested(img.configs, self.configs)
        features = {**img.features, **self.features} if self.features else img.features
        scram_credentials = _merge(img.scram_credentials, self.scram_credentials)
        acls = _merge(img.acls, self.acls)
        quotas = _merge_nested(img.client_quotas, self.client_quotas)
        return MetadataImage(
            offset=offset,
            epoch=epoch,
            cluster_id=self.cluster_id or img.cluster_id,
            features=features,
            brokers=brokers,
            topics_by_id=by_id,
            topics_by_name=by_name,
            configs=configs,
            next_producer_id=self.next_producer_id if self.next_producer_id is not None else img.next_producer_id,
            acls=acls,
            client_quotas=quotas,
            scram_credentials=scram_credentials,
            scram_decoy_seed=self.scram_decoy_seed if self.scram_decoy_seed is not None else img.scram_decoy_seed,
        )

    def local_changes(self, broker_id: int) -> LocalReplicaChanges:
        leaders, followers, deletes = {}, {}, set()
        for t in self.deleted_topics.values():
            for pid, p in t.partitions.items():
                if broker_id in p.replicas:
                    deletes.add((t.name, pid))
        for td in self.topics.values():
            for pid, p in td.changed.items():
                key = (td.name, pid)
                old = td.base.partitions.get(pid) if td.base else None
                if broker_id in p.replicas:
                    if p.leader == broker_id:
                        leaders[key] = (td.topic_id, p)
                    else:
                        followers[key] = (td.topic_id, p)
                elif old is not None and broker_id in old.replicas:
                    deletes.add(key)
        return LocalReplicaChanges(leaders, followers, deletes)


def image_from_records(records, offset: int = -1, epoch: int = -1, base: MetadataImage | None = None) -> MetadataImage:
    from metadata.image import EMPTY

    d = MetadataDelta(base or EMPTY)
    for rec in records:
        d.replay(rec)
    return d.apply(offset, epoch)


def _merge(base: dict, changes: dict) -> dict:
    """``base`` with ``changes`` applied (a None value removes the key); ``base`` itself if no change."""
    if not changes:
        return base
    out = dict(base)
    for k, v in changes.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def _merge_nested(base: dict, changes: dict) -> dict:
    """Per-resource key/value changes (None removes a key); a resource left with no keys goes."""
    if not changes:
        return base
    out = dict(base)
    for res, kv in changes.items():
        merged = _merge(out.get(res, {}), kv)
        if merged:
            out[res] = merged
        else:
            out.pop(res, None)
    return out
