"""One partition's log: an ordered list of segments in ``<dir>/<topic>-<partition>``.

Appends validate and stamp whole batches (see ``batch.py``) and write them with one
``pwrite``; reads return a file region (``ReadSlice``) to be sent with ``os.sendfile``.
Around the segments live the partition's leader epoch cache, idempotent producer state and
``partition.metadata`` (topic id), all next to the segments as in Kafka.

``Log`` is put together from parts, one job each, each with its concurrency rule at its top:
``recovery.py`` (opening and recovery), ``appends.py`` (the loop assigns, a writer thread
writes, the loop commits), ``reads.py`` (reads on the loop, no lock), ``retention.py``
(truncation, log start, retention: segment-list changes under ``lock``) and this module (the
state the parts share, flush, close, delete). ``log_types.py`` holds the shapes they share.

Concurrency of this module: everything runs on the caller's event loop except ``flush()``,
which may be run in a worker thread (it works on a snapshot of the segment list and only
fsyncs; what it writes by path it writes under ``lock``); ``close`` and ``delete`` take ``lock``.

Lifetime: the log owns its files. Work that writes files by path (flush's checkpoint,
partition.metadata and index writes; the cleaner's swap) does so under ``lock`` and only while
the log is open; ``delete()`` and ``close()`` take the same lock, so nothing of a deleted log
is ever written again, in its directory or in a new log's at the same path. A segment that
retention, a truncation or the cleaner replaced under a reader raises SegmentDeletedError, and
the reader reads the segment list again; once the log itself is closed or deleted, reads,
appends and flushes refuse with LogClosedError (NOT_LEADER_OR_FOLLOWER: clients look up the
partition's leader again).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import threading
import uuid

from common.clock import SYSTEM

from . import fileio as fio
from .appends import LogAppends, PendingWrite
from .leader_epoch import LeaderEpochCache, fsync_dir
from .log_types import (
    DELETE_DIR_SUFFIX,
    PARTITION_METADATA_FILE,
    AppendAborted,
    AppendInfo,
    LogClosedError,
    LogConfig,
    ReadSlice,
    UnexpectedAppendOffsetError,
    parse_partition_dir_name,
    partition_dir_name,
)
from .producer_state import ProducerStateManager
from .reads import LogReads
from .recovery import LogRecovery, _delete_segment_files
from .retention import LogRetention
from .segment import CorruptBatchError, LogSegment

logger = logging.getLogger("krafty.log")

__all__ = ["DELETE_DIR_SUFFIX", "PARTITION_METADATA_FILE", "AppendAborted", "AppendInfo", "Log", "LogClosedError",
           "LogConfig", "PendingWrite", "ReadSlice", "UnexpectedAppendOffsetError", "_delete_segment_files",
           "parse_partition_dir_name", "partition_dir_name", "remove_deleted_dir"]


class Log(LogRecovery, LogAppends, LogReads, LogRetention):
    """A partition's log: the state its parts share (see the module doc), flush, close, delete."""

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
        self.deleted = False
        # Serialises changes of the segment list between the loop and a cleaner/flush thread.
        self.lock = threading.RLock()
        self.cleaner_offset = 0  # the log cleaner has compacted everything below this
        self._truncations = 0  # lets a flush running in a thread notice a concurrent truncation
        self._inflight: PendingWrite | None = None  # an append whose write is running in a writer thread
        self._turn: asyncio.Lock | None = None  # orders async appends
        self._damage: CorruptBatchError | None = None  # the lowest known batch that does not parse
        self.recovery_point_lowered = False  # a truncation moved it down: checkpoint it soon
        # some segment may hold aborted transactions (set when one is indexed; cleared only by a
        # new open): read_committed fetches of a log that never saw an abort skip the index scan
        self.any_aborted = False

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
        Safe to run in a worker thread while the loop keeps appending: what it writes by path
        it writes under ``lock`` while the log is open (see the module doc), the long fsyncs of
        segment data through their descriptors outside it. A closed or deleted log: nothing."""
        with self.lock:
            if self.closed:
                return
            self._sync_created()
            self.leader_epoch_cache.sync()  # before the recovery point passes its entries
            generation = self._truncations
            segs = list(self.segments)
        target = segs[-1].next_offset if up_to is None else min(up_to, segs[-1].next_offset)
        if target <= self.recovery_point:
            return
        todo = []
        for i, seg in enumerate(segs):
            seg_end = segs[i + 1].base_offset if i + 1 < len(segs) else seg.next_offset
            if seg_end <= self.recovery_point and i + 1 < len(segs):
                continue
            if seg.base_offset >= target:
                break
            todo.append(seg)
        for seg in todo:
            seg.flush_data()
        with self.lock:
            if self.closed:
                return
            for seg in todo:
                seg.flush_indexes()
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
        with self.lock:  # a cleaner's swap or a flush thread's writes are over, and none follows
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
                s.detach()  # never reopened by path: a new log may be created there
            self.closed = True

    def delete(self, remove: bool = True, unique: uuid.UUID | None = None) -> str | None:
        """Remove the partition's directory (open reads keep working on their descriptors).
        As Kafka does, the directory is first renamed ``<topic>-<partition>.<id>-delete``
        (atomic: a crash never leaves half a log at the log's path, and the next start removes
        it), then removed: here, or, if not ``remove``, by the caller (off the event loop:
        unlinking segments can wait on the disk for a second), given the returned path.
        ``unique``: the ``<id>`` (the log manager draws it from its clock)."""
        self.abort_append()
        with self.lock:
            if self.deleted:
                return None
            self.closed = self.deleted = True
            for s in self.segments:
                s.detach(self.config.file_delete_delay_ms / 1000)
            doomed = f"{self.path}.{(unique or SYSTEM.uuid4()).hex}{DELETE_DIR_SUFFIX}"
            try:
                fio.rename(self.path, doomed)
            except OSError as e:
                logger.warning("%s-%d: cannot rename %s before deleting it: %s", self.topic, self.partition,
                               self.path, e)
                doomed = self.path
        if remove:
            remove_deleted_dir(doomed)
            return None
        return doomed


def remove_deleted_dir(doomed: str) -> None:
    """The rename made durable (a crash before leaves the log at its old path, which the next
    start, told by the metadata that it is deleted, deletes again), then the files removed."""
    fsync_dir(os.path.dirname(doomed))
    shutil.rmtree(doomed, ignore_errors=True)
