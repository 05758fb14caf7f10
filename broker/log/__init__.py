"""Partition log storage: segments, indexes, recovery, retention, zero-copy reads."""

from .batch import HEADER_SIZE, BatchHeader, assign_offsets, parse_batches, validate_produce_batches
from .leader_epoch import LeaderEpochCache
from .log import AppendInfo, Log, LogConfig, ReadSlice
from .manager import LogManager
from .producer_state import ProducerStateManager

__all__ = [
    "HEADER_SIZE", "AppendInfo", "BatchHeader", "LeaderEpochCache", "Log", "LogConfig", "LogManager",
    "ProducerStateManager", "ReadSlice", "assign_offsets", "parse_batches", "validate_produce_batches",
]
