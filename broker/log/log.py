"""One partition's log: an ordered list of segments in ``<dir>/<topic>-<partition>``.

Appends validate and stamp whole batches (see ``batch.py``) and write them with one
``pwrite``; reads return a file region (``ReadSlice``) to be sent with ``os.sendfile``.
Around the segments live the partition's leader epoch cache, idempotent producer state and
``partition.metadata`` (topic id), all next to the segments as in Kafka.

The log is split by job, each module with its concurrency rule at the top:
``recovery.py`` (opening), ``appends.py`` (appends: the loop assigns, a writer thread
writes, the loop commits), ``reads.py`` (reads on the loop), ``retention.py`` (truncation,
log start, retention: segment-list changes under ``self.lock``) and this module (the state,
flush and close). ``log_types.py`` holds the shapes they share.

Threading: everything runs on the caller's event loop except ``flush()``, which may be run
in a worker thread (it works on a snapshot of the segment list and only fsyncs), the write
syscall of async appends (appends.py), and the log cleaner (cleaner.py), which swaps
segments under ``self.lock``.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import threading
import uuid

from .appends import LogAppends, PendingWrite
from .leader_epoch import LeaderEpochCache, fsync_dir
from .log_types import (
    PARTITION_METADATA_FILE,
    AppendAborted,
    AppendInfo,
    LogConfig,
    ReadSlice,
    UnexpectedAppendOffsetError,
    _locked,
    parse_partition_dir_name,
    partition_dir_name,
)
from .producer_state import ProducerStateManager
from .reads import LogReads
from .recovery import LogRecovery, _delete_segment_files
from .retention import LogRetention
from .segment import (
    CorruptBatchError,
    LogSegment,
)

log = logging.getLogger("krafty.log")

logger = logging.getLogger("krafty.log")

__all__ = ["PARTITION_METADATA_FILE", "AppendAborted", "AppendInfo", "Log", "LogConfig", "PendingWrite", "ReadSlice",
           "UnexpectedAppendOffsetError", "_delete_segment_files", "_locked", "parse_partition_dir_name",
           "partition_dir_name"]


class Log(LogRecovery, LogAppends, LogReads, LogRetention):
    """A partition log: the state the mixins share, flush and close (see the module docstring)."""

    def __init__(self, path: str, topic: str, partition: int, config: LogConfig):
        self.path = path
        self.topic = topic
        self.partition = partition
        self.config = config
        self.topic_id: uuid.UUID | None = None
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._log_start_offset = 0
        self.recovery_point = 0
        self.last_flush_ms = 0
        self.leader_epoch_cache = LeaderEpochCache(path)
        self._unsynced_dirs: list[str] = []  # created but not yet fsynced (defer_sync)
        self._metadata_pending = False  # partition.metadata still to be written (defer_sync)
        self.producer_state = ProducerStateManager(path)
        self.closed = False
        # Serialises changes of the segment list between the loop and a cleaner/flush thread.
        self.lock = threading.RLock()
        self.cleaner_offset = 0  # the log cleaner has compacted everything below this
        self._truncations = 0  # lets a flush running in a thread notice a concurrent truncation
        self._inflight: PendingWrite | None = None  # an append whose write is running in a writer thread
        self._turn: asyncio.Lock | None = None  # orders async appends
        self._damage: CorruptBatchError | None = None  # the lowest known batch that does not parse
        self.recovery_point_lowered = False  # a truncation moved it down: checkpoint it soon

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def unflushed_messages(self) -> int:
        return self.log_end_offset - self.recovery_point

    def __repr__(self) -> str:
        return (f"Log({self.topic}-{self.partition}, start={self._log_start_offset}, "
                f"end={self.log_end_offset}, segments={len(self.segments)})")

    def flush(self, up_to: int | None = None, now_ms: int | None = None) -> None:
        """fsync the segments holding offsets below ``up_to`` (default: the log end) that are
        past the recovery point, with their indexes, then advance the recovery point.
        Safe to run in a worker thread while the loop keeps appending."""
        self._sync_created()
        self.leader_epoch_cache.sync()  # before the recovery point passes its entries
        generation = self._truncations
        segs = list(self.segments)
        target = segs[-1].next_offset if up_to is None else min(up_to, segs[-1].next_offset)
        if target <= self.recovery_point:
            return
        for i, seg in enumerate(segs):
            seg_end = segs[i + 1].base_offset if i + 1 < len(segs) else seg.next_offset
            if seg_end <= self.recovery_point and i + 1 < len(segs):
                continue
            if seg.base_offset >= target:
                break
            seg.flush()
        fsync_dir(self.path)
        if generation == self._truncations:
            self.recovery_point = max(self.recovery_point, min(target, self.log_end_offset))
        if now_ms is not None:
            self.last_flush_ms = now_ms

    def close(self) -> None:
        """Seal, snapshot producer state at the log end, and fsync all of it (data, indexes,
        epoch checkpoint, snapshot, directory) before returning: the clean-shutdown marker,
        written after, vouches only for flushed data. Then release the files."""
        if self.closed:
            return
        self.abort_append()
        active = self.segments[-1]
        active.seal()
        active.ensure_index_files()
        self.producer_state.map_end_offset = self.log_end_offset
        self.producer_state.take_snapshot()
        self.flush()
        active.flush()  # the entries seal() wrote, even when nothing was left to flush
        fsync_dir(self.path)  # the snapshot's rename, new index files
        for s in self.segments:
            s.close()
        self.closed = True

    def delete(self) -> None:
        """Remove the partition's directory (open reads keep working on their descriptors)."""
        self.abort_append()
        for s in self.segments:
            s.delete()
        self.closed = True
        shutil.rmtree(self.path, ignore_errors=True)
