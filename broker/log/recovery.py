"""Opening a partition log and recovering it after a crash or a clean stop (``Log.open``):
the segments and their indexes, partition.metadata (the topic id), the leader epoch cache and
the producer state rebuilt from the batches (also after a truncation: ``_rebuild_producer_state``).

Concurrency: ``open`` runs before the log is shared (the broker opens its logs before the event
loop serves them); ``set_topic_id`` and the producer-state rebuild of a truncation run on the
loop (the latter under ``lock``); ``_sync_created`` runs inside ``flush`` (a worker thread, under
``lock``) and touches only what ``open`` deferred (``defer_sync``)."""

from __future__ import annotations

import logging
import os
import uuid
from typing import TYPE_CHECKING

from common.errors import ErrorCode, KafkaError

from . import fileio as fio
from .batch import BatchHeader, EndTxnMarker, read_end_txn_marker, records_limit
from .leader_epoch import fsync_dir
from .log_types import (
    _LOG_FILE_RE,
    _STRAY_SUFFIXES,
    PARTITION_METADATA_FILE,
    LogConfig,
    _topic_id_parse,
    _topic_id_str,
    partition_dir_name,
)
from .segment import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, CorruptBatchError, LogSegment
from .txn_index import TXNINDEX_SUFFIX

if TYPE_CHECKING:
    from .log import Log

logger = logging.getLogger("krafty.log")


class LogRecovery:
    """Mixin of ``Log``: opening and recovery."""

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
            fio.makedirs(path, exist_ok=True)
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
            fio.fsync(f.fileno())
        fio.replace(tmp, p)
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
        names = fio.listdir(self.path)
        for name in names:
            full = os.path.join(self.path, name)
            if name.endswith(_STRAY_SUFFIXES):
                fio.unlink(full)
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
                    fio.unlink(os.path.join(self.path, name))
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


def _delete_segment_files(path: str, base: int) -> None:
    prefix = os.path.join(path, f"{base:020d}")
    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX):
        try:
            fio.unlink(prefix + suffix)
        except FileNotFoundError:
            pass
