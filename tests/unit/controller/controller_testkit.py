"""Builders shared by the controller manager tests: small clusters as metadata images, and
applying manager records through ``MetadataDelta`` as the controller's replay does."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from metadata import records as r
from metadata.delta import MetadataDelta, image_from_records
from metadata.image import MetadataImage, PartitionRegistration


def endpoint(bid: int) -> tuple[r.Endpoint, ...]:
    return (r.Endpoint("PLAINTEXT", f"broker{bid}", 9092),)


def incarnation(bid: int, generation: int = 0) -> uuid.UUID:
    return uuid.UUID(int=(bid << 32) | generation)


def cluster(broker_ids: Iterable[int] = (1, 2, 3, 4, 5), fenced: Iterable[int] = ()) -> MetadataImage:
    """Registered brokers; each one's epoch is the offset of its registration record."""
    fenced = set(fenced)
    recs = [r.RegisterBrokerRecord(bid, incarnation(bid), i, endpoint(bid), None, fenced=bid in fenced)
            for i, bid in enumerate(broker_ids)]
    return image_from_records(recs, len(recs) - 1, 1)


def apply(image: MetadataImage, records: Iterable[r.Record]) -> MetadataImage:
    """Replay ``records`` on ``image`` and apply them, as committing them would."""
    records = list(records)
    d = MetadataDelta(image)
    for rec in records:
        d.replay(rec)
    return d.apply(image.offset + len(records), image.epoch)


def with_topic(image: MetadataImage, name: str, assignment: dict[int, tuple[int, ...]],
               configs: dict[str, str] | None = None, *, isr: dict[int, tuple[int, ...]] | None = None,
               leader: dict[int, int] | None = None, topic_id: uuid.UUID | None = None) -> MetadataImage:
    tid = topic_id or uuid.uuid5(uuid.NAMESPACE_DNS, name)
    recs: list[r.Record] = [r.TopicRecord(name, tid)]
    for k, v in (configs or {}).items():
        recs.append(r.ConfigRecord(r.RESOURCE_TOPIC, name, k, v))
    for pid, replicas in assignment.items():
        p_isr = (isr or {}).get(pid, replicas)
        p_leader = (leader or {}).get(pid, p_isr[0])
        recs.append(r.PartitionRecord(tid, pid, replicas, p_isr, p_leader, 0, 0))
    return apply(image, recs)


def part(image: MetadataImage, topic: str, pid: int = 0) -> PartitionRegistration:
    return image.topics_by_name[topic].partitions[pid]


def topic_id(image: MetadataImage, topic: str) -> uuid.UUID:
    return image.topics_by_name[topic].topic_id
