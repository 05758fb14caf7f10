"""The shapes around a partition log: its config (topic configs by Kafka name), what an
append returns, a read's file region, the errors appends and reads raise, the names of
partition directories and files, and ``_locked``.

Concurrency: no state and no I/O; ``_locked`` is the one rule the other parts share: a method
that changes the segment list runs under the log's ``lock`` (an RLock shared with the flush
and cleaner threads)."""

from __future__ import annotations

import base64
import functools
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from common.config import TOPIC_KEYS
from common.errors import ErrorCode, KafkaError

from .segment import SegmentFile

if TYPE_CHECKING:
    from .log import Log

PARTITION_METADATA_FILE = "partition.metadata"
DELETE_DIR_SUFFIX = "-delete"  # a deleted log's directory while it is being removed
_LOG_FILE_RE = re.compile(r"^(\d{20})\.log$")
_STRAY_SUFFIXES = (".tmp", ".deleted", ".cleaned", ".swap")


class LogClosedError(KafkaError):
    """The log was closed (shutdown, set aside as stray) or deleted (topic deletion, replica
    moved away) while this operation was asked for or running. NOT_LEADER_OR_FOLLOWER, as Kafka
    answers for a partition whose log is not (any more) on this broker."""

    def __init__(self, log: Log):
        super().__init__(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                         f"the log of {log.topic}-{log.partition} was {'deleted' if log.deleted else 'closed'}")


class UnexpectedAppendOffsetError(KafkaError):
    """A follower append does not continue the log (Kafka's UnexpectedAppendOffsetException)."""

    def __init__(self, message: str, first_offset: int, last_offset: int):
        super().__init__(ErrorCode.UNKNOWN_SERVER_ERROR, message)
        self.first_offset = first_offset
        self.last_offset = last_offset


@dataclass(slots=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3_600_000
    retention_ms: int = 7 * 24 * 3_600_000
    retention_bytes: int = -1
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10 * 1024 * 1024
    flush_messages: int = 2**63 - 1
    flush_ms: int = 2**63 - 1
    max_message_bytes: int = 1024 * 1024 + 12
    message_timestamp_type: str = "CreateTime"
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 86_400_000
    compression_type: str = "producer"
    message_timestamp_before_max_ms: int = 2**63 - 1
    message_timestamp_after_max_ms: int = 3_600_000
    min_cleanable_dirty_ratio: float = 0.5
    message_downconversion_enable: bool = True

    _FIELDS: ClassVar[dict[str, str]] = {
        "segment.bytes": "segment_bytes", "segment.ms": "segment_ms", "retention.ms": "retention_ms",
        "retention.bytes": "retention_bytes", "index.interval.bytes": "index_interval_bytes",
        "segment.index.bytes": "segment_index_bytes", "flush.messages": "flush_messages",
        "flush.ms": "flush_ms", "max.message.bytes": "max_message_bytes",
        "message.timestamp.type": "message_timestamp_type", "cleanup.policy": "cleanup_policy",
        "delete.retention.ms": "delete_retention_ms", "compression.type": "compression_type",
        "message.timestamp.before.max.ms": "message_timestamp_before_max_ms",
        "message.timestamp.after.max.ms": "message_timestamp_after_max_ms",
        "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
        "message.downconversion.enable": "message_downconversion_enable",
    }

    @classmethod
    def from_topic_configs(cls, configs: Mapping[str, Any] | None = None) -> LogConfig:
        """Typed config from topic configs by Kafka name; values may be raw strings (parsed and
        validated, raising ConfigError) or already typed. Keys the log does not use are ignored."""
        cfg = cls()
        for name, attr in cls._FIELDS.items():
            value = (configs or {}).get(name)
            if value is None:
                continue
            if isinstance(value, str):
                value = TOPIC_KEYS[name].convert(value)
            setattr(cfg, attr, value)
        return cfg

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def delete_enabled(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @property
    def compact_enabled(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")


@dataclass(slots=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int
    duplicate: bool = False


@dataclass(slots=True)
class ReadSlice:
    """A region of a segment file holding whole batches: send it with
    ``os.sendfile(sock, slice.fd, slice.position, slice.size)``. Holding the slice keeps
    the descriptor open even if retention deletes the segment meanwhile."""

    fd: int
    position: int
    size: int
    first_batch_offset: int
    file: SegmentFile
    segment_base_offset: int


class AppendAborted(KafkaError):
    """An append was dropped while being written (truncation, leadership change, close).
    NOT_LEADER_OR_FOLLOWER to a producer, which retries against the current leader."""

    def __init__(self, message: str):
        super().__init__(ErrorCode.NOT_LEADER_OR_FOLLOWER, message)


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir_name(name: str) -> tuple[str, int] | None:
    topic, sep, p = name.rpartition("-")
    if not sep or not topic or not p.isdigit():
        return None
    return topic, int(p)


def _topic_id_str(topic_id: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()


def _topic_id_parse(s: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(s + "=" * (-len(s) % 4)))


def _locked(fn):
    """Run a method that changes the segment list under ``self.lock``."""
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        with self.lock:
            return fn(self, *args, **kwargs)
    return wrapper
