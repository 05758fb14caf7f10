"""The shapes of requests and results between brokers and the active controller, shared by
the controller (which serves them) and the broker's controller channel (which sends them)."""

from __future__ import annotations

import dataclasses
import uuid

from common.errors import ErrorCode

# Kafka's bounds on one controller operation (QuorumController.MAX_RECORDS_PER_USER_OP, its
# batch size, and ReplicationControlManager.MAX_PARTITIONS_PER_BATCH), with Kafka's messages
# (POLICY_VIOLATION). Checked before anything is placed or allocated: a CreateTopics of 2^31-1
# partitions used to grow the node until it was killed, and one of 1,000,000 wrote 3 M records.
MAX_RECORDS_PER_USER_OP = 10_000
MAX_PARTITIONS_PER_BATCH = 10_000
TOO_MANY_PARTITIONS = "Excessively large number of partitions per request."
TOO_MANY_RECORDS = "Unable to perform excessively large batch operation."
# gRPC trailing metadata of an admin operation's answer: the metadata offset the controller had
# applied; the broker answers its client once its own image reached it (read your writes)
METADATA_OFFSET_KEY = "krafty-metadata-offset"


def too_many_partitions(topics, default_num_partitions: int) -> bool:
    """Kafka's ReplicationControlManager.validateTotalNumberOfPartitions: would a CreateTopics
    (its topics: ``num_partitions`` and ``assignments`` each) make more than
    MAX_PARTITIONS_PER_BATCH partitions? Stops counting as soon as it would."""
    total = 0
    for t in topics:
        n = t.num_partitions
        total += len(t.assignments) if t.assignments else default_num_partitions if n == -1 else max(n, 0)
        if total > MAX_PARTITIONS_PER_BATCH:
            return True
    return False


@dataclasses.dataclass(frozen=True)
class NewTopic:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: dict[int, list[int]] | None = None
    configs: dict[str, str | None] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class CreateTopicResult:
    name: str
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    topic_id: uuid.UUID | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True)
class HeartbeatResult:
    is_caught_up: bool
    is_fenced: bool
    should_shut_down: bool
    in_controlled_shutdown: bool = False


@dataclasses.dataclass(frozen=True)
class ScramChange:
    """One AlterUserScramCredentials change: the broker salts and derives the keys."""

    user: str
    mechanism: str  # SCRAM-SHA-256 | SCRAM-SHA-512
    delete: bool
    salt: bytes = b""
    stored_key: bytes = b""
    server_key: bytes = b""
    iterations: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionResult:
    """One partition's result of an ElectLeaders or AlterPartitionReassignments."""

    topic: str
    partition: int
    error: ErrorCode
    message: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class OngoingReassignment:
    """A partition being reassigned: its replicas (targets first) and those being added/removed."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]
