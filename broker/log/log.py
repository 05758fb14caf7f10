"""One partition's log: an ordered list of segments in ``<dir>/<topic>-<partition>``.

Appends validate and stamp whole batches (see ``batch.py``) and write them with one
``pwrite``; reads return a file region (``ReadSlice``) to be sent with ``os.sendfile``.
Around the segments live the partition's leader epoch cache, idempotent producer state and
``partition.metadata`` (topic id), all next to the segments as in Kafka.

Threading: everything runs on the caller's event loop except ``flush()``, which may be run
in a worker thread (it works on a snapshot of the segment list and only fsyncs), and the
write syscall of the async appends when writer threads are configured: the loop assigns
offsets and picks the segment, a writer thread writes, the loop commits (segment end, indexes, producer state). Until the
commit nothing else sees the batches; ``abort_append`` drops a write in flight before a
truncation, leadership change or close.

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
import base64
import contextlib
import functools
import logging
import os
import re
import shutil
import threading
import uuid
from bisect import bisect_right
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from common import stallwatch
from common.config import TOPIC_KEYS
from common.errors import ErrorCode, KafkaError

from .batch import (
    BatchHeader,
    EndTxnMarker,
    assign_offsets,
    batch_crc_ok,
    iter_record_timestamps,
    parse_batches,
    read_end_txn_marker,
    records_limit,
)
from .leader_epoch import LeaderEpochCache, fsync_dir
from .producer_state import CLIENT, CompletedTxn, ProducerStateManager
from .segment import (
    INDEX_SUFFIX,
    INT32_MAX,
    LOG_SUFFIX,
    TIMEINDEX_SUFFIX,
    CorruptBatchError,
    LogSegment,
    SegmentDeletedError,
    SegmentFile,
    write_at,
)
from .txn_index import TXNINDEX_SUFFIX, AbortedTxn
from .validator import CODECS, recompress, validate_async

log = logging.getLogger("krafty.log")

logger = logging.getLogger("krafty.log")

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

    _FIELDS: ClassVar[dict[str, str]] = {
        "segment.bytes": "segment_bytes", "segment.ms": "segment_ms", "retention.ms": "retention_ms",
        "retention.bytes": "retention_bytes", "index.interval.bytes": "index_interval_bytes",
        "segment.index.bytes": "segment_index_bytes", "flush.messages": "flush_messages",
        "flush.ms": "flush_ms", "max.message.bytes": "max_message_bytes",
        "message.timestamp.type": "message_timestamp_type", "cleanup.policy": "cleanup_policy",
        "delete.retention.ms": "delete_retention_ms", "compression.type": "compression_type",
        "message.timestamp.before.max.ms": "message_timestamp_before_max_ms",
        "message.timestamp.after.max.ms": "message_timestamp_after_max_ms",
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


class PendingWrite:
    """One append between its offsets being assigned (on the event loop) and its bytes being
    on file (``run``, in a writer thread). The log's size and end offset move only when the
    loop commits it, so readers, followers and the high watermark never see it early."""

    __slots__ = ("seg", "file", "data", "headers", "nbytes", "start", "staged", "info", "error",
                 "_lock", "_started", "aborted", "_done")

    def __init__(self, seg: LogSegment, file: SegmentFile, data: memoryview, headers: list[BatchHeader],
                 nbytes: int):
        self.seg = seg
        self.file = file  # held: keeps the fd open (and its number unused) until the write is over
        self.data = data
        self.headers = headers
        self.nbytes = nbytes
        self.start = seg.size
        self.staged = None  # leader appends: producer state to commit
        self.info: AppendInfo | None = None
        self.error: OSError | None = None
        self.aborted = False
        self._started = False
        # made by hand_off(), for a write in another thread only: the produce path that writes
        # on the loop (the default) pays for no lock or event
        self._lock: threading.Lock | None = None
        self._done: threading.Event | None = None

    def hand_off(self) -> None:
        """This write will run in another thread: arm the hand-shake with ``abort``."""
        self._lock = threading.Lock()
        self._done = threading.Event()

    def run(self) -> None:
        if self._done is None:
            self._write()
            return
        with self._lock:
            if self.aborted:
                self._done.set()
                return
            self._started = True
        try:
            self._write()
        finally:
            self._done.set()

    def _write(self) -> None:
        sec = stallwatch.enter("log write of %d bytes to %s", len(self.data), self.seg.log_path)
        try:
            write_at(self.file, self.data, self.start)
        except OSError as e:
            self.error = e
        finally:
            stallwatch.leave(sec)

    def abort(self) -> None:
        """Mark it dropped; if its write already started, wait for it and cut it off the file.
        Only a handed-off write can be in flight when this is called."""
        with self._lock:
            self.aborted = True
            started = self._started
        if started:
            self._done.wait()
            try:
                os.ftruncate(self.file.fd, self.start)
            except OSError:
                pass  # the segment is gone, or the next append overwrites the tail anyway


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


class Log:
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

    # =====================================================================================
    # opening and recovery
    # =====================================================================================
    @classmethod
    def open(cls, dir: str, topic: str, partition: int, config: LogConfig, *, topic_id: uuid.UUID | None = None,
             now_ms: int, recovery_point: int = 0, log_start_offset: int = 0,
             clean_shutdown: bool = False, defer_sync: bool = False, name: str | None = None) -> Log:
        """Open (creating if needed) the log of ``topic``-``partition`` under the log dir ``dir``.

        Segments from the one containing ``recovery_point`` on are CRC-checked unless
        ``clean_shutdown``; a torn or corrupt tail is truncated, and the segments after a
        corruption are deleted. Missing or insane indexes are rebuilt. Even after a clean
        shutdown the tail of the last segment (from its last index entry) is CRC-checked, and
        a tail torn by a power cut is cut after the last valid batch: the log end never falls
        below it. A flushed segment found damaged keeps its bytes (``damaged_offset``).

        ``defer_sync`` (for logs the metadata creates, possibly thousands at once): a new
        directory and its partition.metadata are made durable by the next ``flush`` rather
        than fsynced here; an empty log lost in a crash is simply created again.
        ``name``: the directory's name if not ``<topic>-<partition>`` (a future replica's).
        """
        path = os.path.join(dir, name or partition_dir_name(topic, partition))
        created = False
        if not os.path.isdir(path):
            os.makedirs(path, exist_ok=True)
            created = True
        log = cls(path, topic, partition, config)
        if created:
            if defer_sync:
                log._unsynced_dirs = [dir, path]
            else:
                fsync_dir(dir)
        if created and defer_sync:
            log.topic_id = topic_id  # partition.metadata is written by the flush thread (_sync_created)
            log._metadata_pending = topic_id is not None
        else:
            log._load_partition_metadata(topic_id)
        log._load_segments(now_ms, recovery_point, clean_shutdown, log_start_offset)
        log._log_start_offset = max(log_start_offset, log.segments[0].base_offset)
        if log._log_start_offset > log.log_end_offset:
            log._log_start_offset = log.log_end_offset
        log.recovery_point = log.log_end_offset if clean_shutdown else min(recovery_point, log.log_end_offset)
        # in memory now, on disk by the next flush (fsyncs on every start of every log were most
        # of a restart's time; Kafka defers them too since KAFKA-15046)
        log.leader_epoch_cache.truncate_from_end(log.log_end_offset, flush=False)
        log.leader_epoch_cache.truncate_from_start(log._log_start_offset, flush=False)
        log._rebuild_producer_state()
        log.any_aborted = any(s.txn_index.entries for s in log.segments)
        log.last_flush_ms = now_ms
        return log

    def _load_partition_metadata(self, topic_id: uuid.UUID | None) -> None:
        p = os.path.join(self.path, PARTITION_METADATA_FILE)
        stored: uuid.UUID | None = None
        try:
            with open(p, encoding="utf-8") as f:
                for line in f:
                    k, _, v = line.partition(":")
                    if k.strip() == "topic_id":
                        stored = _topic_id_parse(v.strip())
        except FileNotFoundError:
            pass
        except ValueError:
            stored = None
        if topic_id is not None and stored is not None and stored != topic_id:
            raise KafkaError(ErrorCode.INCONSISTENT_TOPIC_ID,
                             f"log {self.path} belongs to topic id {stored}, not {topic_id}")
        self.topic_id = stored or topic_id
        if stored is None and topic_id is not None:
            self._write_partition_metadata()

    def _write_partition_metadata(self, sync_dir: bool = True) -> None:
        assert self.topic_id is not None
        p = os.path.join(self.path, PARTITION_METADATA_FILE)
        tmp = p + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(f"version: 0\ntopic_id: {_topic_id_str(self.topic_id)}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
        if sync_dir:
            fsync_dir(self.path)

    def _sync_created(self) -> None:
        """fsync what ``defer_sync`` left unsynced: partition.metadata, the log's directory and
        its entry in the log dir."""
        dirs, self._unsynced_dirs = self._unsynced_dirs, []
        if not dirs:
            return
        segs = self.segments
        if segs:
            segs[-1].ensure_index_files()
        if self._metadata_pending:
            self._metadata_pending = False
            self._write_partition_metadata(sync_dir=False)  # the directory is fsynced below
        for d in reversed(dirs):
            fsync_dir(d)

    @property
    def needs_sync(self) -> bool:
        """Something only ``flush`` makes durable is pending (a new directory, epoch entries)."""
        return bool(self._unsynced_dirs) or self.leader_epoch_cache.dirty

    def set_topic_id(self, topic_id: uuid.UUID) -> None:
        if self.topic_id is not None and self.topic_id != topic_id:
            raise KafkaError(ErrorCode.INCONSISTENT_TOPIC_ID,
                             f"log {self.path} belongs to topic id {self.topic_id}, not {topic_id}")
        if self.topic_id is None:
            self.topic_id = topic_id
            self._write_partition_metadata()

    def _segment_kwargs(self, now_ms: int) -> dict:
        return {"index_interval_bytes": self.config.index_interval_bytes,
                "index_max_bytes": self.config.segment_index_bytes, "created_ms": now_ms}

    def _load_segments(self, now_ms: int, recovery_point: int, clean_shutdown: bool, log_start_offset: int) -> None:
        bases: list[int] = []
        names = os.listdir(self.path)
        for name in names:
            full = os.path.join(self.path, name)
            if name.endswith(_STRAY_SUFFIXES):
                os.unlink(full)
                continue
            m = _LOG_FILE_RE.match(name)
            if m:
                bases.append(int(m.group(1)))
        bases.sort()
        # Indexes without a log file are leftovers of an interrupted delete.
        txn_bases = set()
        for name in names:
            for suffix in (INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX):
                if not name.endswith(suffix):
                    continue
                base = int(name[:20]) if name[:20].isdigit() else -1
                if base not in bases:
                    os.unlink(os.path.join(self.path, name))
                elif suffix == TXNINDEX_SUFFIX:
                    txn_bases.add(base)
        segments: list[LogSegment] = []
        corrupted = False
        for i, base in enumerate(bases):
            if corrupted:
                _delete_segment_files(self.path, base)
                continue
            next_base = bases[i + 1] if i + 1 < len(bases) else None
            recover = not clean_shutdown and (next_base is None or next_base > recovery_point)
            seg, truncated = LogSegment.open(self.path, base, recover=recover, on_batch=self._recovered_batch,
                                             last=next_base is None, txn_index=base in txn_bases,
                                             **self._segment_kwargs(now_ms))
            if segments and seg.size and seg.base_offset < segments[-1].next_offset:
                truncated = 1  # overlapping segments: keep the earlier data
                seg.delete()
                corrupted = True
                continue
            segments.append(seg)
            if truncated:
                corrupted = True  # anything after a corrupt batch cannot be trusted
        if not segments:
            segments.append(LogSegment.create(self.path, max(log_start_offset, 0), **self._segment_kwargs(now_ms)))
        for seg in segments[:-1]:
            seg.release()  # reopened when read: idle partitions hold one descriptor
        self.segments = segments
        self._bases = [s.base_offset for s in segments]
        for seg in segments:
            if seg.damage is not None:
                self._note_damage(seg.damage)

    def _recovered_batch(self, h) -> None:
        # entries past the recovery point may not have reached the checkpoint (assign defers it)
        self.leader_epoch_cache.assign(h.partition_leader_epoch, h.base_offset)

    def _rebuild_producer_state(self) -> None:
        """Load the newest snapshot at or below the log end and replay the batches after it.
        A segment whose transaction index must be rebuilt (recovered, or a bad .txnindex)
        gets its entries again on the way, so the replay starts at or before it (Kafka's
        LogLoader rebuilds producer state up to a segment before recovering it)."""
        leo = self.log_end_offset
        ps = self.producer_state
        ps.delete_snapshots_after(leo)
        upto = min([leo] + [s.base_offset for s in self.segments if s.txn_stale])
        start = ps.load_latest_snapshot(upto)
        self._replay_producer_state(start)
        ps.map_end_offset = leo

    def _replay_producer_state(self, start: int) -> None:
        ps = self.producer_state
        for seg in list(self.segments):
            rebuild = seg.txn_stale
            seg.txn_stale = False
            if seg.next_offset <= start:
                continue
            pos = seg.index.lookup(start) if start > seg.base_offset else 0
            try:
                for h in seg.iter_headers(pos):
                    if h.base_offset < start:
                        continue
                    marker = self._stored_marker(seg, h) if h.is_control and h.producer_id >= 0 else None
                    done = ps.apply_batch(h, marker)
                    if done is not None:
                        self._complete_txn(seg if rebuild else None, done)
            except CorruptBatchError:
                continue  # a damaged segment (known: reads report it): its batches after the damage are unknown

    def _stored_marker(self, seg: LogSegment, h: BatchHeader) -> EndTxnMarker | None:
        try:
            return read_end_txn_marker(seg.read_batch(h.pos, h.size), records_limit(self.config.max_message_bytes))
        except KafkaError as e:
            logger.error("%s-%d: the control batch at offset %d (position %d of %s) does not decode: %s", self.topic,
                         self.partition, h.base_offset, h.pos, seg.log_path, e.message)
            return None

    def _complete_txn(self, seg: LogSegment | None, txn: CompletedTxn) -> None:
        """A marker ended ``txn``: an aborted one goes into the transaction index of ``seg``
        (the marker's segment; None: it is there already) with the LSO of the moment."""
        ps = self.producer_state
        try:
            if seg is not None and txn.aborted:
                self.any_aborted = True
                seg.txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset,
                                                ps.lso_for_completed(txn)))
        except OSError as e:  # the entry is kept in memory (reads use it) and written with the next one
            logger.error("%s-%d: cannot write %s: %s", self.topic, self.partition, seg.txn_index.path, e)
        finally:
            ps.complete_txn(txn)

    # =====================================================================================
    # properties
    # =====================================================================================
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

    # =====================================================================================
    # appends
    # =====================================================================================
    def append_as_leader(self, buf: bytearray, headers: list[BatchHeader], leader_epoch: int, now_ms: int,
                         **producer_checks) -> AppendInfo:
        """Append client batches already checked by ``validate_produce_batches``.

        Producer state is checked for every batch before anything is written; a retried
        batch returns its original offsets with ``duplicate=True`` and writes nothing.
        ``producer_checks`` (see ``ProducerStateManager.check_client_batches``): ``origin``
        (CLIENT, or COORDINATOR for markers and transactional offset commits),
        ``verification_guard`` and ``require_verification`` (KIP-890), ``transaction_version``.
        Writes in the calling thread; ``append_as_leader_async`` writes in a writer thread.
        """
        w = self._prepare_leader(buf, headers, leader_epoch, now_ms, producer_checks)
        if isinstance(w, AppendInfo):
            return w
        w.run()
        return self._commit(w)

    def append_as_follower(self, buf, headers: list[BatchHeader] | None = None, now_ms: int = 0) -> AppendInfo:
        """Append batches copied from the leader (offsets and epochs already assigned).

        ``headers`` defaults to ``parse_batches(buf)`` (a trailing partial batch is ignored).
        Each batch is CRC-checked; offsets must be increasing and start at or after the log end.
        """
        w = self._prepare_follower(buf, headers, now_ms)
        if isinstance(w, AppendInfo):
            return w
        w.run()
        return self._commit(w)

    async def append_as_leader_async(self, buf: bytearray, headers: list[BatchHeader],
                                     leader_epoch: Callable[[], int], now_ms: int, executor,
                                     **producer_checks) -> AppendInfo:
        """``append_as_leader`` with the write syscall in ``executor`` (krafty.log.writer.threads;
        None: on the loop), so a write the kernel makes wait (block allocation, dirty-page
        throttling) stalls this partition, not the event loop. Appends to the log are serialised: ``leader_epoch()`` is called once this
        append's turn comes and must raise if the broker no longer leads the partition."""
        async with self._append_turn():
            w = self._prepare_leader(buf, headers, leader_epoch(), now_ms, producer_checks)
            if isinstance(w, AppendInfo):
                return w
            return await self._write_async(w, executor)

    async def append_as_follower_async(self, buf, headers: list[BatchHeader] | None, now_ms: int, executor,
                                       still_following: Callable[[], bool]) -> AppendInfo:
        """``append_as_follower`` with the write in ``executor``; ``still_following()`` is
        checked when this append's turn comes (AppendAborted if not)."""
        async with self._append_turn():
            if not still_following():
                raise AppendAborted(f"{self.topic}-{self.partition} stopped following")
            w = self._prepare_follower(buf, headers, now_ms)
            if isinstance(w, AppendInfo):
                return w
            return await self._write_async(w, executor)

    def append_turn(self) -> asyncio.Lock:
        """The lock appends to this log take in turn (a replica move swaps logs holding it)."""
        return self._append_turn()

    def _append_turn(self) -> asyncio.Lock:
        if self._turn is None:
            self._turn = asyncio.Lock()  # made on first use: logs are opened before the loop runs
        return self._turn

    async def _write_async(self, w: PendingWrite, executor) -> AppendInfo:
        if executor is None:  # krafty.log.writer.threads=0: write right here, on the loop
            w.run()
            return self._commit(w)
        w.hand_off()
        self._inflight = w
        fut = asyncio.get_running_loop().run_in_executor(executor, w.run)
        cancelled = False
        while not fut.done():
            try:
                await asyncio.shield(fut)
            except asyncio.CancelledError:
                # The caller went away (its connection closed), but the bytes are being written
                # under offsets this log handed out: finish the append before letting go.
                cancelled = True
        try:
            return self._commit(w)
        finally:
            if cancelled:
                raise asyncio.CancelledError

    def _prepare_leader(self, buf, headers: list[BatchHeader], leader_epoch: int,
                        now_ms: int, producer_checks: dict) -> PendingWrite | AppendInfo:
        if self.closed:
            raise LogClosedError(self)
        if not headers:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "no record batches to append")
        if isinstance(buf, bytes) or (isinstance(buf, memoryview) and buf.readonly):
            buf = bytearray(buf)  # offsets are patched in place: pass a bytearray to avoid this copy
        target = CODECS.get(self.config.compression_type)
        if target is not None and any(h.compression != target and not h.is_control for h in headers):
            buf, headers = self._recompress(buf, headers, target)
        lat = now_ms if self.config.log_append_time else None
        first = self.log_end_offset
        assign_offsets(buf, headers, first, leader_epoch, lat)
        last_h = headers[-1]
        last = last_h.base_offset + last_h.last_offset_delta
        producer_checks.setdefault("origin", CLIENT)
        staged, dup = self.producer_state.check_client_batches(
            headers, marker_of=lambda h: read_end_txn_marker(memoryview(buf)[h.pos:h.pos + h.size]),
            **producer_checks)
        if dup is not None:
            return AppendInfo(dup.first_offset, dup.last_offset, dup.timestamp if lat is not None else -1,
                              self._log_start_offset, duplicate=True)
        self.leader_epoch_cache.assign(leader_epoch, first)
        w = self._stage(buf, headers, now_ms)
        w.staged = staged
        w.info = AppendInfo(first, last, lat if lat is not None else -1, self._log_start_offset)
        return w

    def _recompress(self, buf, headers: list[BatchHeader], target: int) -> tuple[bytearray, list[BatchHeader]]:
        """The topic's compression.type is not ``producer`` and differs from the batch codec:
        re-encode each such batch (producer fields, sequences and timestamps kept), as Kafka's
        LogValidator does. Produce requests were converted by ``validate_client_batches``
        already; this is for appends that were not (bounded like every decoder)."""
        return recompress(buf, headers, target, self.config.max_message_bytes)

    async def validate_client_batches(self, buf, headers: list[BatchHeader], now_ms: int):
        """Kafka's LogValidator for a produce request's batches (see validator.py): returns the
        (possibly re-encoded) batches to append, or raises the error for the client. Runs in a
        worker thread unless the batches are small."""
        return await validate_async(buf, headers, self.config, now_ms, f"{self.topic}-{self.partition}")

    def _prepare_follower(self, buf, headers: list[BatchHeader] | None, now_ms: int) -> PendingWrite | AppendInfo:
        if self.closed:
            raise LogClosedError(self)
        if headers is None:
            headers = parse_batches(buf)
        if not headers:
            leo = self.log_end_offset
            return AppendInfo(leo, leo - 1, -1, self._log_start_offset)
        expected = self.log_end_offset
        for h in headers:
            if h.magic != 2 or not batch_crc_ok(buf, h):
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"replicated batch at offset {h.base_offset} is corrupt")
            if h.base_offset < expected:
                raise UnexpectedAppendOffsetError(
                    f"replicated batch at offset {h.base_offset} is below the expected offset {expected}",
                    headers[0].base_offset, headers[-1].last_offset)
            expected = h.base_offset + h.last_offset_delta + 1
        for h in headers:
            self.leader_epoch_cache.assign(h.partition_leader_epoch, h.base_offset)
        w = self._stage(buf, headers, now_ms)
        w.info = AppendInfo(headers[0].base_offset, headers[-1].last_offset, -1, self._log_start_offset)
        return w

    def _stage(self, buf, headers: list[BatchHeader], now_ms: int) -> PendingWrite:
        """Pick the segment (rolling if due) for whole batches about to be written at its end."""
        if self._inflight is not None:
            raise RuntimeError(f"{self}: append while another is being written")
        last_h = headers[-1]
        nbytes = last_h.pos + last_h.batch_length + 12 - headers[0].pos
        seg = self.segments[-1]
        first = headers[0].base_offset
        last = last_h.base_offset + last_h.last_offset_delta
        if seg.size and self._should_roll(seg, nbytes, headers, now_ms, last):
            seg = self.roll(now_ms, first)
        elif not seg.size and seg.base_offset != first and (first < seg.base_offset or
                                                            last - seg.base_offset > INT32_MAX):
            seg = self._replace_empty_active(first, now_ms)
        start = headers[0].pos
        data = (memoryview(buf)[start:] if start else memoryview(buf))[:nbytes]
        return PendingWrite(seg, seg.prepare_append(), data, headers, nbytes)

    def _commit(self, w: PendingWrite) -> AppendInfo:
        """The write is done: make the batches part of the log (segment end and indexes,
        producer state), unless ``abort_append`` dropped it meanwhile."""
        if self._inflight is w:
            self._inflight = None
        if w.aborted:
            raise AppendAborted(f"{self.topic}-{self.partition}: the append at offset {w.info.first_offset} was "
                                f"dropped by a truncation, leadership change or close while being written")
        if w.error is not None:
            # Nothing was recorded in memory and the partial write was cut off.
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"cannot write to {w.seg.log_path}: {w.error.strerror}") from w.error
        w.seg.commit_append(w.headers, w.start, w.nbytes)
        ps = self.producer_state
        if w.staged is not None:
            ps.commit(w.staged, w.info.last_offset + 1)
            for txn in w.staged.completed:
                self._complete_txn(w.seg, txn)
        else:
            base = w.headers[0].pos
            for h in w.headers:
                marker = None
                if h.is_control and h.producer_id >= 0:
                    try:
                        marker = read_end_txn_marker(w.data[h.pos - base:h.pos - base + h.size],
                                                     records_limit(self.config.max_message_bytes))
                    except KafkaError as e:
                        logger.error("%s-%d: replicated control batch at offset %d does not decode: %s", self.topic,
                                     self.partition, h.base_offset, e.message)
                done = ps.apply_batch(h, marker)
                if done is not None:
                    self._complete_txn(w.seg, done)
        self._maybe_flush_by_count()
        return w.info

    def abort_append(self) -> None:
        """Drop the append being written, if any: wait for its write syscall (if it started)
        and cut its bytes off the file; its ``_commit`` raises AppendAborted. Called before
        anything that moves the log end or changes leadership, so a late write can never land
        over newer data or under a new leader epoch."""
        w = self._inflight
        if w is None:
            return
        self._inflight = None
        w.abort()

    def _should_roll(self, seg: LogSegment, nbytes: int, headers: list[BatchHeader], now_ms: int,
                     last: int) -> bool:
        cfg = self.config
        if seg.size > cfg.segment_bytes - nbytes:
            return True
        if seg.index.is_full or seg.time_index.is_full:
            return True
        if last - seg.base_offset > INT32_MAX:
            return True
        first_ts = seg.first_batch_timestamp
        if first_ts is not None and first_ts >= 0:
            max_ts = max(h.max_timestamp for h in headers) if len(headers) > 1 else headers[0].max_timestamp
            waited = max_ts - first_ts
        else:
            waited = now_ms - seg.created_ms
        return waited > cfg.segment_ms

    @_locked
    def roll(self, now_ms: int, new_base: int | None = None) -> LogSegment:
        """Start a new active segment at ``new_base`` (default: the log end). The old one is
        sealed; it is fsynced by the next ``flush()`` (``flush_check`` does that)."""
        base = self.log_end_offset if new_base is None else new_base
        old = self.segments[-1]
        if old.size == 0 and old.base_offset == base:
            return old
        old.seal()
        seg = LogSegment.create(self.path, base, **self._segment_kwargs(now_ms))
        self.segments = self.segments + [seg]
        self._bases = self._bases + [base]
        for older in self.segments[:-3]:
            if older.is_open:
                older.release()  # bound open descriptors; reads reopen on demand
        # Every batch below ``base`` is in the producer state: snapshot it like Kafka does.
        self.producer_state.map_end_offset = base
        self.producer_state.take_snapshot(sync=False)
        return seg

    @_locked
    def _replace_empty_active(self, base: int, now_ms: int) -> LogSegment:
        old = self.segments[-1]
        old.delete()
        seg = LogSegment.create(self.path, base, **self._segment_kwargs(now_ms))
        self.segments = self.segments[:-1] + [seg]
        self._bases = self._bases[:-1] + [base]
        return seg

    def _maybe_flush_by_count(self) -> None:
        if self.log_end_offset - self.recovery_point >= self.config.flush_messages:
            self.flush()

    # =====================================================================================
    # reads
    # =====================================================================================
    def _segment_index_for(self, offset: int) -> int:
        return max(0, bisect_right(self._bases, offset) - 1)

    def read(self, offset: int, max_bytes: int, max_offset: int, min_one_batch: bool = True) -> ReadSlice | None:
        """Whole batches from the batch containing ``offset``, all with last offset <
        ``max_offset`` (the high watermark, exclusive), at most ``max_bytes`` unless
        ``min_one_batch`` and the first batch alone is larger (KIP-74). One segment at most.

        A batch that does not parse (its length, magic or offsets; the first batch's CRC, or
        for a large one its length) is logged with its file and position and remembered: reads from it on raise
        CorruptBatchError (CORRUPT_MESSAGE), reads before it stop short of it. An I/O error
        is KAFKA_STORAGE_ERROR. Kafka's LogSegment.read / ReplicaManager.readFromLog.
        """
        for _attempt in range(3):
            try:
                return self._read(offset, max_bytes, max_offset, min_one_batch)
            except SegmentDeletedError:
                if self.closed:
                    raise LogClosedError(self) from None
                continue  # replaced by the cleaner or removed by retention meanwhile: read the list again
            except CorruptBatchError as e:
                seg = next((s for s in self.segments if s.log_path == e.path), None)
                if seg is None:
                    raise
                known = seg.damage
                damage = known if known is not None and known.position == e.position else seg.confirm_damage(e)
                if damage is None:
                    continue  # an index entry was wrong (rebuilt): read again
                if damage is not known:
                    self._note_damage(damage)
                if offset >= damage.offset:
                    raise damage from None
                # the read starts before the damage: again, now bounded by it
            except OSError as e:
                logger.error("%s-%d: reading offset %d failed: %s", self.topic, self.partition, offset, e)
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                                 f"cannot read {self.topic}-{self.partition} at offset {offset}: "
                                 f"{e.strerror or e}") from e
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{self.topic}-{self.partition}: cannot read offset {offset}")

    def _read(self, offset: int, max_bytes: int, max_offset: int, min_one_batch: bool) -> ReadSlice | None:
        segments = self.segments
        leo = segments[-1].next_offset
        if offset < self._log_start_offset or offset > leo:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"offset {offset} is outside [{self._log_start_offset}, {leo}] of {self.topic}-"
                             f"{self.partition}")
        if offset >= leo or offset >= max_offset:
            return None
        i = self._segment_index_for(offset)
        while i < len(segments):
            seg = segments[i]
            d = seg.damage
            if d is not None and offset >= d.offset and (i + 1 == len(segments) or offset < segments[i + 1].base_offset):
                raise d
            h = seg.translate(offset) if offset < seg.next_offset else None
            if h is not None:
                break
            i += 1
            if i < len(segments):
                offset = max(offset, segments[i].base_offset)
        else:
            return None
        if h.base_offset + h.last_offset_delta >= max_offset:
            return None
        # the batch the reader asked for is checked whole: when its framing or contents went bad
        # the reader gets an error here rather than bytes it cannot parse, again and again
        seg.check_read_start(h)
        start = h.pos
        d = seg.damage
        if d is not None and d.position > start and max_offset > d.offset:
            limit = d.position
        else:
            limit = seg.position_of(max_offset, start)
        first_size = h.batch_length + 12
        if limit - start <= max_bytes:
            end = limit
        else:
            end = seg.boundary_at_or_before(start + max_bytes, start)
            if end <= start:
                if not min_one_batch:
                    return None
                end = start + first_size
        file = seg.file
        return ReadSlice(file.fd, start, end - start, h.base_offset, file, seg.base_offset)

    def _note_damage(self, damage: CorruptBatchError) -> None:
        logger.error("%s-%d: %s. Readers get CORRUPT_MESSAGE from offset %d on; as a follower this replica "
                     "truncates to it and fetches it again from the leader; as the leader, move leadership to "
                     "another in-sync replica (kafka-leader-election / reassignment) so it can.",
                     self.topic, self.partition, damage, damage.offset)
        if self._damage is None or damage.offset < self._damage.offset:
            self._damage = damage

    @property
    def damaged_offset(self) -> int | None:
        """The first offset of the lowest batch known not to parse, or None."""
        return None if self._damage is None else self._damage.offset

    # --- transactions ---------------------------------------------------------------------
    def last_stable_offset(self, high_watermark: int) -> int:
        """LSO: the first offset of the earliest transaction still open, or completed with its
        marker not yet below ``high_watermark``; the high watermark when there is none. Never
        below the log start (retention or DeleteRecords may have taken a transaction's start,
        as in Kafka's maybeIncrementFirstUnstableOffset)."""
        lso = self.producer_state.last_stable_offset(high_watermark)
        return lso if lso >= self._log_start_offset else min(self._log_start_offset, high_watermark)

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound), from the transaction
        indexes of the segment holding ``fetch_offset`` on, until one entry says every
        transaction started below the bound had ended (Kafka's collectAbortedTransactions)."""
        segs = self.segments
        out: list[AbortedTxn] = []
        for seg in segs[self._segment_index_for(fetch_offset):]:
            if not seg.txn_index.entries:
                continue
            found, complete = seg.txn_index.collect(fetch_offset, upper_bound)
            out += found
            if complete:
                break
        return out

    def has_aborted_transactions(self, from_offset: int) -> bool:
        """Does any segment from the one holding ``from_offset`` on have aborted transactions?"""
        if not self.any_aborted:
            return False
        segs = self.segments
        return any(segs[i].txn_index.entries for i in range(self._segment_index_for(from_offset), len(segs)))

    def fetch_upper_bound(self, sl: ReadSlice) -> int:
        """An offset at or above every offset in the region ``sl``: the first offset index entry
        at or after its end, else the end of its segment (Kafka's fetchUpperBoundOffset)."""
        segs = self.segments
        i = self._segment_index_for(sl.segment_base_offset)
        seg = segs[i]
        if seg.base_offset != sl.segment_base_offset:
            return self.log_end_offset  # the segment went meanwhile: the log end bounds it
        end = sl.position + sl.size
        if end < seg.size:
            found = seg.index.offset_at_or_after(end)
            if found is not None:
                return found
        return segs[i + 1].base_offset if i + 1 < len(segs) else seg.next_offset

    def read_bytes(self, slice: ReadSlice) -> bytes:
        out = bytearray()
        pos, left = slice.position, slice.size
        while left > 0:
            chunk = os.pread(slice.fd, left, pos)
            if not chunk:
                break
            out += chunk
            pos += len(chunk)
            left -= len(chunk)
        return bytes(out)

    def _batch_bytes(self, seg: LogSegment, h: BatchHeader) -> bytes:
        return seg.read_batch(h.pos, h.batch_length + 12)

    def offset_for_timestamp(self, ts_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``ts_ms`` at or after the
        log start, or None. Uses the time index to find where to start, then decodes the
        timestamps of the batch that holds the answer. A batch that cannot be decoded raises
        CORRUPT_MESSAGE. The broker calls ``offset_for_timestamp_async``."""
        for _attempt in self._attempts():
            with self._segments_may_go():
                for seg, h, start in self._timestamp_candidates(ts_ms):
                    found = self._first_at_or_after(seg, h, self._batch_bytes(seg, h), ts_ms, start)
                    if found is not None:
                        return found
                return None
        raise self._segments_kept_changing()

    async def offset_for_timestamp_async(self, ts_ms: int) -> tuple[int, int] | None:
        """``offset_for_timestamp`` decoding in a worker thread: decoding is bounded but linear
        in the batch, while index lookups and reads stay on the event loop with the appends."""
        for _attempt in self._attempts():
            with self._segments_may_go():
                for seg, h, start in self._timestamp_candidates(ts_ms):
                    data = self._batch_bytes(seg, h)
                    found = await asyncio.to_thread(self._first_at_or_after, seg, h, data, ts_ms, start)
                    if found is not None:
                        return found
                return None
        raise self._segments_kept_changing()

    def _attempts(self):
        """Attempts of a search over the segments that the cleaner or retention may change under
        it (each failed one ends in SegmentDeletedError, swallowed by ``_segments_may_go``)."""
        for attempt in range(3):
            if self.closed:
                raise LogClosedError(self)
            yield attempt

    @contextlib.contextmanager
    def _segments_may_go(self):
        try:
            yield
        except SegmentDeletedError:
            if self.closed:
                raise LogClosedError(self) from None

    def _segments_kept_changing(self) -> KafkaError:
        return KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER if self.closed else ErrorCode.KAFKA_STORAGE_ERROR,
                          f"{self.topic}-{self.partition}: its segments kept changing during the search; try again")

    def _timestamp_candidates(self, ts_ms: int):
        """(segment, header, log start) of each batch, in order, that may hold the first record
        with timestamp >= ``ts_ms`` at or after the log start."""
        start_offset = self._log_start_offset
        for seg in list(self.segments):
            if seg.max_timestamp < ts_ms or seg.next_offset <= start_offset:
                continue
            from_offset = seg.time_index.lookup_before(ts_ms)
            from_offset = max(from_offset if from_offset is not None else seg.base_offset, start_offset)
            pos = seg.index.lookup(from_offset)
            for h in seg.iter_headers(pos):
                if h.base_offset + h.last_offset_delta < from_offset or h.max_timestamp < ts_ms:
                    continue
                yield seg, h, start_offset

    def _first_at_or_after(self, seg: LogSegment, h: BatchHeader, data: bytes, ts_ms: int,
                           start_offset: int) -> tuple[int, int] | None:
        if h.timestamp_type == 1:
            return max(h.base_offset, start_offset), h.max_timestamp
        for off, t in self._record_timestamps(seg, h, data):
            if t >= ts_ms and off >= start_offset:
                return off, t
        return None

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """(max timestamp, offset of the first record having it), or (-1, -1) if no batch has
        a timestamp. For ListOffsets MAX_TIMESTAMP (KIP-734); decodes one batch like
        ``offset_for_timestamp``. The broker calls ``max_timestamp_and_offset_async``."""
        for _attempt in self._attempts():
            with self._segments_may_go():
                answer, todo = self._max_timestamp_batch()
                return answer if todo is None else self._offset_of_max(*todo)
        raise self._segments_kept_changing()

    async def max_timestamp_and_offset_async(self) -> tuple[int, int]:
        for _attempt in self._attempts():
            with self._segments_may_go():
                answer, todo = self._max_timestamp_batch()
                return answer if todo is None else await asyncio.to_thread(self._offset_of_max, *todo)
        raise self._segments_kept_changing()

    def _max_timestamp_batch(self) -> tuple[tuple[int, int], None] | tuple[None, tuple]:
        """(answer, None), or (None, (segment, header, batch bytes, max timestamp)) of the batch
        that must be decoded for the answer."""
        best: LogSegment | None = None
        for seg in list(self.segments):
            if seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        if best is None:
            return (-1, -1), None
        ts = best.max_timestamp
        h = best.translate(best.offset_of_max_timestamp)
        if h is None:
            return (ts, best.offset_of_max_timestamp), None
        if h.timestamp_type == 1:
            return (ts, h.base_offset), None
        return None, (best, h, self._batch_bytes(best, h), ts)

    def _offset_of_max(self, seg: LogSegment, h: BatchHeader, data: bytes, ts: int) -> tuple[int, int]:
        for off, t in self._record_timestamps(seg, h, data):
            if t == ts:
                return ts, off
        return ts, h.base_offset + h.last_offset_delta

    def _record_timestamps(self, seg: LogSegment, h: BatchHeader, data: bytes):
        try:
            yield from iter_record_timestamps(data, records_limit(self.config.max_message_bytes))
        except KafkaError as e:
            log.error("%s-%d: cannot decode the record batch at position %d of %s (offsets %d-%d): %s", self.topic,
                      self.partition, h.pos, seg.log_path, h.base_offset, h.last_offset, e.message)
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"the record batch at offset {h.base_offset} is corrupt: "
                             f"{e.message}") from None

    # =====================================================================================
    # truncation, log start, retention
    # =====================================================================================
    @_locked
    def truncate_to(self, offset: int) -> None:
        """Remove everything at or after ``offset`` (follower truncation). The batch holding
        ``offset`` goes too if ``offset`` is not a batch boundary."""
        self.abort_append()
        if offset >= self.log_end_offset:
            return
        if offset < self._log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return
        self._truncations += 1
        keep = [s for s in self.segments if s.base_offset < offset]
        for s in self.segments[len(keep):]:
            s.delete()
        if not keep:
            keep = [LogSegment.create(self.path, offset, **self._segment_kwargs(self.last_flush_ms))]
        else:
            keep[-1].truncate_to(offset)
        self.segments = keep
        self._bases = [s.base_offset for s in keep]
        self._damage = min((s.damage for s in keep if s.damage is not None), key=lambda d: d.offset, default=None)
        leo = self.log_end_offset
        if leo < self.recovery_point:
            self.recovery_point = leo
            self.recovery_point_lowered = True
        self.leader_epoch_cache.truncate_from_end(leo)
        self.producer_state.delete_snapshots_after(leo)
        self._rebuild_producer_state()

    @_locked
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and restart it at ``offset`` (log start = log end = offset)."""
        self.abort_append()
        self._truncations += 1
        for s in self.segments:
            s.delete()
        seg = LogSegment.create(self.path, offset, **self._segment_kwargs(self.last_flush_ms))
        self.segments = [seg]
        self._bases = [offset]
        self._damage = None
        self._log_start_offset = offset
        if offset < self.recovery_point:
            self.recovery_point_lowered = True
        self.recovery_point = offset
        self.leader_epoch_cache.clear()
        self.producer_state.delete_snapshots_after(-1)
        self.producer_state.reset()
        self.producer_state.map_end_offset = offset

    @_locked
    def delete_records_before(self, offset: int) -> int:
        """Advance the log start offset to ``offset`` (DeleteRecords); returns the new log start.
        Segments wholly below it are deleted. The caller bounds ``offset`` by the high watermark."""
        if offset > self.log_end_offset or offset < 0:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"cannot delete records before {offset}: log end is {self.log_end_offset}")
        if offset > self._log_start_offset:
            self._log_start_offset = offset
            self.leader_epoch_cache.truncate_from_start(offset)
            self._delete_prefix(self._count_below_log_start(), now_ms=self.last_flush_ms)
        return self._log_start_offset

    def _count_below_log_start(self) -> int:
        n = 0
        segs = self.segments
        while n + 1 < len(segs) and segs[n + 1].base_offset <= self._log_start_offset:
            n += 1
        return n

    @_locked
    def apply_retention(self, now_ms: int, high_watermark: int | None = None) -> int:
        """Delete whole old segments by retention.ms (a segment's largest timestamp) and
        retention.bytes, never past ``high_watermark`` (default: the log end). When every
        segment is due, a new empty active segment is rolled first, as Kafka does, so the
        active segment itself is never deleted. Returns the number of segments deleted."""
        cfg = self.config
        upper = self.log_end_offset if high_watermark is None else min(high_watermark, self.log_end_offset)
        segs = self.segments
        n = self._count_below_log_start()
        if cfg.delete_enabled:
            diff = self.size_in_bytes - cfg.retention_bytes if cfg.retention_bytes >= 0 else -1
            for i in range(len(segs)):
                if i < n:
                    diff -= segs[i].size
                    continue
                seg = segs[i]
                seg_end = segs[i + 1].base_offset if i + 1 < len(segs) else seg.next_offset
                if seg_end > upper or (seg.size == 0 and i == len(segs) - 1):
                    break
                if seg.size == 0:  # emptied by the cleaner: nothing to keep
                    n = i + 1
                    continue
                by_time = False
                if cfg.retention_ms >= 0:
                    largest = seg.max_timestamp if seg.max_timestamp >= 0 else seg.created_ms
                    by_time = now_ms - largest > cfg.retention_ms
                by_size = diff >= 0 and diff - seg.size >= 0
                if not (by_time or by_size):
                    break
                diff -= seg.size
                n = i + 1
        if n == 0:
            return 0
        return self._delete_prefix(n, now_ms)

    @_locked
    def _delete_prefix(self, n: int, now_ms: int) -> int:
        if n <= 0:
            return 0
        if n >= len(self.segments):
            if self._inflight is None:  # with an append being written into the active one: next time
                self.roll(now_ms)
            n = len(self.segments) - 1
        if n <= 0:
            return 0
        dead, keep = self.segments[:n], self.segments[n:]
        self.segments = keep
        self._bases = [s.base_offset for s in keep]
        for s in dead:
            s.delete()
        new_start = keep[0].base_offset
        if new_start > self._log_start_offset:
            self._log_start_offset = new_start
            self.leader_epoch_cache.truncate_from_start(new_start)
        self.recovery_point = max(self.recovery_point, new_start)
        self.producer_state.delete_snapshots_before(new_start)
        return len(dead)

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        return self.producer_state.remove_expired(now_ms, expiration_ms)

    # =====================================================================================
    # flush, close, delete
    # =====================================================================================
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

    def delete(self, remove: bool = True) -> str | None:
        """Remove the partition's directory (open reads keep working on their descriptors).
        As Kafka does, the directory is first renamed ``<topic>-<partition>.<id>-delete``
        (atomic: a crash never leaves half a log at the log's path, and the next start removes
        it), then removed: here, or, if not ``remove``, by the caller (off the event loop:
        unlinking segments can wait on the disk for a second), given the returned path."""
        self.abort_append()
        with self.lock:
            if self.deleted:
                return None
            self.closed = self.deleted = True
            for s in self.segments:
                s.detach()
            doomed = f"{self.path}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
            try:
                os.rename(self.path, doomed)
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


def _delete_segment_files(path: str, base: int) -> None:
    prefix = os.path.join(path, f"{base:020d}")
    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX):
        try:
            os.unlink(prefix + suffix)
        except FileNotFoundError:
            pass
