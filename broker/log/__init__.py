"""Partition log storage: segments, indexes, recovery, retention, compaction, zero-copy reads."""

from .batch import (
    HEADER_SIZE,
    BatchHeader,
    Record,
    assign_offsets,
    build_batch,
    decode_records,
    parse_batches,
    validate_produce_batches,
)
from .leader_epoch import LeaderEpochCache
from .log import AppendInfo, Log, LogConfig, ReadSlice
from .manager import LogManager
from .producer_state import ProducerStateManager

__all__ = [
    "HEADER_SIZE", "AppendInfo", "BatchHeader", "LeaderEpochCache", "Log", "LogConfig", "LogManager",
    "ProducerStateManager", "ReadSlice", "Record", "assign_offsets", "build_batch", "decode_records",
    "parse_batches", "validate_produce_batches",
]
