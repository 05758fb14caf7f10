"""The shapes of requests and results between brokers and the active controller, shared by
the controller (which serves them) and the broker's controller channel (which sends them)."""

from __future__ import annotations

import dataclasses
import uuid

from common.errors import ErrorCode


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
