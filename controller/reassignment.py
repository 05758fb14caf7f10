"""Partition reassignments (KIP-455), as pure functions over a ``MetadataImage`` (KRaft's
ReplicationControlManager.alterPartitionReassignments, PartitionReassignmentReplicas,
PartitionReassignmentRevert and the completion step of PartitionChangeBuilder).

A reassignment of a partition with replicas R to target T writes one change: replicas become
T followed by the members of R not in T, ``adding`` = T - R, ``removing`` = R - T; the ISR and
leader stay. The leader brings the new replicas into the ISR (AlterPartition) once they caught
up; the change that makes every target replica in sync also completes the reassignment:
``removing`` leave the replicas and the ISR, both sets are cleared, and if the leader was
removed the first in-sync target replica that may lead takes over. A reassignment that only
removes replicas (an RF decrease) completes at once. Cancelling (null target) reverts: the
replicas being added leave. Brokers act on the resulting partition changes as on any other:
new replicas start following, removed ones delete their logs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from common.errors import ErrorCode, KafkaError
from controller.placement import validate_manual_assignment
from metadata import records as r
from metadata.controller_api import OngoingReassignment
from metadata.controller_api import PartitionResult as ReassignmentResult
from metadata.image import MetadataImage, PartitionRegistration

NO_LEADER = r.NO_LEADER


def completed(reg: PartitionRegistration, isr: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """Kafka's PartitionReassignmentReplicas.maybeCompleteReassignment: the (replicas, ISR) a
    reassigning partition ends with once ``isr`` holds every target replica, else None."""
    if not reg.is_reassigning:
        return None
    new_isr = tuple(b for b in isr if b not in reg.removing)
    new_replicas = tuple(b for b in reg.replicas if b not in reg.removing)
    if not new_isr or not set(new_replicas) <= set(new_isr):
        return None
    return new_replicas, new_isr


def partition_change(topic_id, pid: int, reg: PartitionRegistration, *, leader: int, isr: tuple[int, ...],
                     replicas: tuple[int, ...] | None = None, adding: tuple[int, ...] | None = None,
                     removing: tuple[int, ...] | None = None, is_acceptable=None
                     ) -> r.PartitionChangeRecord | None:
    """The PartitionChangeRecord taking ``reg`` to the given state, after completing a
    reassignment the new ISR allows (Kafka's PartitionChangeBuilder.build); None if nothing
    changes. ``is_acceptable(broker)`` says who may lead, for a leader the completion removes."""
    replicas = reg.replicas if replicas is None else replicas
    adding = reg.adding if adding is None else adding
    removing = reg.removing if removing is None else removing
    target = dataclasses.replace(reg, replicas=replicas, adding=adding, removing=removing)
    done = completed(target, isr)
    if done is not None:
        replicas, isr = done
        adding = removing = ()
        ok = is_acceptable or (lambda b: True)
        if leader not in isr or not ok(leader) or leader in reg.offline:
            leader = next((b for b in replicas if b in isr and ok(b) and b not in reg.offline), NO_LEADER)
    offline = tuple(b for b in reg.offline if b in replicas)  # a replica that leaves takes its mark along
    if (replicas, isr, leader, adding, removing, offline) == (reg.replicas, reg.isr, reg.leader, reg.adding,
                                                              reg.removing, reg.offline):
        return None
    return r.PartitionChangeRecord(
        topic_id, pid, isr=isr if isr != reg.isr else None, leader=leader if leader != reg.leader else None,
        replicas=replicas if replicas != reg.replicas else None,
        adding_replicas=adding if adding != reg.adding else None,
        removing_replicas=removing if removing != reg.removing else None,
        offline_replicas=offline if offline != reg.offline else None)


def _reassign(image: MetadataImage, topic_id, pid: int, reg: PartitionRegistration, target: Sequence[int],
              is_acceptable) -> r.PartitionChangeRecord | None:
    registered = list(image.brokers)
    validate_manual_assignment([(0, list(target))], registered, registered_broker_ids=registered)
    target = tuple(target)
    current = reg.replicas
    replicas = target + tuple(b for b in current if b not in target)
    adding = tuple(b for b in target if b not in current)
    removing = tuple(b for b in current if b not in target)
    return partition_change(topic_id, pid, reg, leader=reg.leader, isr=reg.isr, replicas=replicas, adding=adding,
                            removing=removing, is_acceptable=is_acceptable)


def _cancel(topic_id, pid: int, reg: PartitionRegistration, is_acceptable) -> r.PartitionChangeRecord | None:
    """Kafka's PartitionReassignmentRevert: the replicas being added leave again."""
    if not reg.is_reassigning:
        raise KafkaError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)
    replicas = tuple(b for b in reg.replicas if b not in reg.adding)
    isr = tuple(b for b in reg.isr if b not in reg.adding) or reg.isr
    leader = reg.leader
    if leader not in isr or not is_acceptable(leader) or leader in reg.offline:
        leader = next((b for b in replicas if b in isr and is_acceptable(b) and b not in reg.offline), NO_LEADER)
    return partition_change(topic_id, pid, reg, leader=leader, isr=isr, replicas=replicas, adding=(), removing=())


def alter_partition_reassignments(image: MetadataImage, requests: Sequence[tuple[str, int, Sequence[int] | None]],
                                  is_acceptable) -> tuple[list[Any], list[ReassignmentResult]]:
    """``requests``: (topic, partition, target replicas or None to cancel). One result each."""
    records: list[Any] = []
    results: list[ReassignmentResult] = []
    for topic, pid, target in requests:
        t = image.topics_by_name.get(topic)
        reg = t.partitions.get(pid) if t is not None else None
        if reg is None:
            results.append(ReassignmentResult(topic, pid, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                              f"Unable to find partition {topic}:{pid}."))
            continue
        try:
            rec = (_cancel(t.topic_id, pid, reg, is_acceptable) if target is None
                   else _reassign(image, t.topic_id, pid, reg, target, is_acceptable))
        except KafkaError as e:
            results.append(ReassignmentResult(topic, pid, e.code, e.message))
            continue
        if rec is not None:
            records.append(rec)
        results.append(ReassignmentResult(topic, pid, ErrorCode.NONE))
    return records, results


def list_partition_reassignments(image: MetadataImage, topics: Sequence[tuple[str, Sequence[int]]] | None
                                 ) -> list[OngoingReassignment]:
    """The ongoing reassignments, of every partition (None) or of those named (unknown ones are
    left out, as Kafka does)."""
    out = []
    if topics is None:
        wanted = [(name, pid) for name in sorted(image.topics_by_name)
                  for pid in sorted(image.topics_by_name[name].partitions)]
    else:
        wanted = [(name, pid) for name, pids in topics for pid in pids]
    for name, pid in wanted:
        t = image.topics_by_name.get(name)
        reg = t.partitions.get(pid) if t is not None else None
        if reg is not None and reg.is_reassigning:
            out.append(OngoingReassignment(name, pid, reg.replicas, reg.adding, reg.removing))
    return out
