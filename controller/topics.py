"""Topic operations of the quorum controller, as pure functions: ``(image, request) ->
(records, results)``. Nothing here touches committed state; the controller appends the
records and answers the callers when they commit (KRaft's ReplicationControlManager)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from common.config import TOPIC_KEYS, ConfigError, validate_topic_config, validate_topic_configs
from common.errors import ErrorCode, KafkaError
from common.topic_names import INTERNAL_TOPICS, collision_key, validate_topic_name  # noqa: F401
from controller.placement import BrokerPlacement, RandomLike, assign_replicas, validate_manual_assignment
from metadata import records as r
from metadata.controller_api import (
    MAX_PARTITIONS_PER_BATCH,
    MAX_RECORDS_PER_USER_OP,
    TOO_MANY_PARTITIONS,
    TOO_MANY_RECORDS,
    CreateTopicResult,
    NewTopic,
    too_many_partitions,
)
from metadata.image import MetadataImage


def check_records_room(used: int, more: int) -> None:
    """Raises POLICY_VIOLATION (for the whole request, as Kafka's BoundedList does) when an
    operation would write more than MAX_RECORDS_PER_USER_OP records."""
    if used + more > MAX_RECORDS_PER_USER_OP:
        raise KafkaError(ErrorCode.POLICY_VIOLATION, TOO_MANY_RECORDS)


def validate_total_partitions(topics: Sequence[NewTopic], default_num_partitions: int) -> None:
    """A CreateTopics that would make more than MAX_PARTITIONS_PER_BATCH partitions fails whole."""
    if too_many_partitions(topics, default_num_partitions):
        raise KafkaError(ErrorCode.POLICY_VIOLATION, TOO_MANY_PARTITIONS)


@dataclasses.dataclass(frozen=True)
class TopicDefaults:
    num_partitions: int = 1
    replication_factor: int = 1
    # the topic configs' defaults from this controller's broker keys (topic key -> typed value),
    # under a topic's own configs when checking a whole config (Kafka's extractLogConfigMap)
    log: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def _placement_brokers(image: MetadataImage) -> list[BrokerPlacement]:
    return [BrokerPlacement(b.id, b.rack) for b in sorted(image.brokers.values(), key=lambda b: b.id)
            if not b.fenced and not b.in_controlled_shutdown]


def create_topics(image: MetadataImage, topics: Sequence[NewTopic], defaults: TopicDefaults, rng: RandomLike,
                  new_uuid: Callable[[], uuid.UUID] | None = None) -> tuple[list[Any], list[CreateTopicResult]]:
    """Raises KafkaError(POLICY_VIOLATION) for a request too large to be one operation; every
    other error is the topic's own. Topic ids come from ``new_uuid`` (default: drawn from ``rng``)."""
    if new_uuid is None:
        def new_uuid() -> uuid.UUID:
            return uuid.UUID(int=rng.randrange(1 << 128), version=4)
    validate_total_partitions(topics, defaults.num_partitions)
    records: list[Any] = []
    results: list[CreateTopicResult] = []
    seen: dict[str, int] = {}
    for t in topics:
        seen[t.name] = seen.get(t.name, 0) + 1
    existing_keys = {collision_key(n): n for n in image.topics_by_name}
    for t in topics:
        res = CreateTopicResult(t.name)
        results.append(res)
        n_parts = len(t.assignments) if t.assignments else (
            defaults.num_partitions if t.num_partitions == -1 else t.num_partitions)
        check_records_room(len(records), 1 + len(t.configs) + max(n_parts, 0))  # before any work on the topic
        try:
            if seen[t.name] > 1:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Duplicate topic name {t.name} in the request")
            validate_topic_name(t.name)
            if t.name in image.topics_by_name:
                raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists.")
            other = existing_keys.get(collision_key(t.name))
            if other is not None:
                raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                 f"Topic '{t.name}' collides with existing topic: {other}")
            configs = {}
            for k, v in t.configs.items():
                try:
                    validate_topic_config(k, v)
                except ConfigError as e:
                    raise KafkaError(ErrorCode.INVALID_CONFIG, str(e)) from None
                configs[k] = v
            try:
                validate_topic_configs(configs, defaults.log)
            except ConfigError as e:
                raise KafkaError(ErrorCode.INVALID_CONFIG, str(e)) from None
            live = _placement_brokers(image)
            if t.assignments:
                if t.num_partitions != -1 or t.replication_factor != -1:
                    raise KafkaError(ErrorCode.INVALID_REQUEST,
                                     "Both numPartitions or replicationFactor and replicasAssignments were set. "
                                     "Both cannot be used at the same time.")
                validate_manual_assignment(t.assignments, [b.id for b in live])
                assignment = {p: list(rs) for p, rs in t.assignments.items()}
            else:
                n = defaults.num_partitions if t.num_partitions == -1 else t.num_partitions
                rf = defaults.replication_factor if t.replication_factor == -1 else t.replication_factor
                if n <= 0:
                    raise KafkaError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
                if rf <= 0:
                    raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                     "Replication factor must be larger than 0.")
                if rf > len(live):
                    raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                     f"Replication factor: {rf} larger than available brokers: {len(live)}.")
                assignment = assign_replicas(live, n, rf, rng=rng)
            min_isr = configs.get("min.insync.replicas")
            rf_actual = len(next(iter(assignment.values())))
            if min_isr is not None and int(min_isr) > rf_actual:
                raise KafkaError(ErrorCode.INVALID_CONFIG,
                                 f"min.insync.replicas {min_isr} is larger than the replication factor {rf_actual}")
        except KafkaError as e:
            res.error, res.message = e.code, e.message
            continue
        tid = new_uuid()
        res.topic_id = tid
        res.num_partitions = len(assignment)
        res.replication_factor = rf_actual
        res.configs = configs
        existing_keys[collision_key(t.name)] = t.name
        records.append(r.TopicRecord(t.name, tid))
        for k, v in configs.items():
            if v is not None:
                records.append(r.ConfigRecord(r.RESOURCE_TOPIC, t.name, k, v))
        for pid in sorted(assignment):
            replicas = tuple(assignment[pid])
            records.append(r.PartitionRecord(tid, pid, replicas, replicas, replicas[0], 0, 0))
    return records, results


def delete_topics(image: MetadataImage, names: Sequence[str | None], ids: Sequence[uuid.UUID | None]
                  ) -> tuple[list[Any], list[tuple[str | None, uuid.UUID | None, ErrorCode, str | None]]]:
    """Delete by name or by id (one of each pair is None). Results: (name, id, error, message)."""
    records: list[Any] = []
    results = []
    done: set[uuid.UUID] = set()
    for name, tid in zip(names, ids, strict=True):
        t = image.topics_by_name.get(name) if name is not None else image.topics_by_id.get(tid)
        if t is None:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if name is not None else ErrorCode.UNKNOWN_TOPIC_ID
            results.append((name, tid, code, None))
            continue
        if t.topic_id not in done:
            done.add(t.topic_id)
            records.append(r.RemoveTopicRecord(t.topic_id))
        results.append((t.name, t.topic_id, ErrorCode.NONE, None))
    return records, results


def create_partitions(image: MetadataImage, topic: str, count: int, assignments: list[list[int]] | None,
                      rng: RandomLike) -> list[Any]:
    """Records adding partitions to ``topic`` so it has ``count``; raises KafkaError."""
    t = image.topics_by_name.get(topic)
    if t is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{topic}' does not exist.")
    current = len(t.partitions)
    if count - current > MAX_PARTITIONS_PER_BATCH:  # Kafka's limit for CreatePartitions too (KAFKA-19673)
        raise KafkaError(ErrorCode.POLICY_VIOLATION, TOO_MANY_PARTITIONS)
    if count < current:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                         f"The topic {topic} currently has {current} partition(s); {count} would not be an increase.")
    if count == current:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
    rf = len(t.partitions[0].replicas)
    live = _placement_brokers(image)
    if assignments:
        if len(assignments) != count - current:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"Attempted to add {count - current} additional partition(s), but only "
                             f"{len(assignments)} assignment(s) were specified.")
        manual = {current + i: list(a) for i, a in enumerate(assignments)}
        for a in manual.values():
            if len(a) != rf:
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"The manual partition assignment includes a partition with {len(a)} "
                                 f"replica(s), but this is not consistent with previous partitions, which "
                                 f"have {rf} replica(s).")
        validate_manual_assignment({i: a for i, a in enumerate(manual.values())}, [b.id for b in live])
        assignment = manual
    else:
        if rf > len(live):
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"Replication factor: {rf} larger than available brokers: {len(live)}.")
        assignment = assign_replicas(live, count - current, rf, rng=rng, start_partition_id=current)
    recs = []
    for pid in sorted(assignment):
        replicas = tuple(assignment[pid])
        recs.append(r.PartitionRecord(t.topic_id, pid, replicas, replicas, replicas[0], 0, 0))
    return recs


def alter_topic_configs(image: MetadataImage, topic: str, ops: Sequence[tuple[str, int, str | None]],
                        defaults: TopicDefaults | None = None) -> list[Any]:
    """IncrementalAlterConfigs on a topic: ops of (name, op, value), op 0 SET 1 DELETE
    2 APPEND 3 SUBTRACT. Raises KafkaError."""
    if topic not in image.topics_by_name:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{topic}' does not exist.")
    current = dict(image.topic_config(topic))
    recs = []
    for name, op, value in ops:
        if op == 1:
            value = None
        elif op in (2, 3):
            # a key the topic does not set starts from its default, as Kafka's
            # prepareIncrementalConfigs does (APPEND compact to an unset cleanup.policy: delete,compact)
            old = current.get(name)
            if old is None and name in TOPIC_KEYS and isinstance(TOPIC_KEYS[name].default, str):
                old = TOPIC_KEYS[name].default
            items = [x for x in (old or "").split(",") if x]
            add = [x for x in (value or "").split(",") if x]
            items = items + [x for x in add if x not in items] if op == 2 else [x for x in items if x not in add]
            value = ",".join(items) if items else None
        elif op != 0:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown config operation {op}")
        try:
            if value is not None:
                validate_topic_config(name, value)
            elif name not in TOPIC_KEYS:
                raise ConfigError(f"unknown topic configuration key '{name}'")
        except ConfigError as e:
            raise KafkaError(ErrorCode.INVALID_CONFIG, str(e)) from None
        current[name] = value
        recs.append(r.ConfigRecord(r.RESOURCE_TOPIC, topic, name, value))
    try:
        validate_topic_configs(current, defaults.log if defaults else {})
    except ConfigError as e:
        raise KafkaError(ErrorCode.INVALID_CONFIG, str(e)) from None
    return recs
