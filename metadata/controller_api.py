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
