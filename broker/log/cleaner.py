"""Log compaction (cleanup.policy=compact): keep only the newest record of each key.

Kafka's log cleaner in miniature, one log at a time:

1. The cleanable range is every segment before the active one whose batches are all below
   the high watermark and the first offset of any undecided transaction (Kafka's
   firstUncleanableOffset: the cleaner never judges a transaction before its marker), and before
   the first dirty segment with a record younger than min.compaction.lag.ms. A log is cleaned
   when its dirty share of that range exceeds min.cleanable.dirty.ratio (1: never by the ratio,
   as in Kafka), or when a dirty segment's first batch is older than max.compaction.lag.ms
   (whatever the ratio).
2. An offset map (key -> offset of its newest record) is built over that range, leaving out
   the records of aborted transactions (from the transaction indexes) and control batches.
3. Each cleanable segment is rewritten to ``<base>.log.cleaned``: a batch whose records are
   all kept is copied byte for byte; a batch with none kept is dropped; otherwise it is
   re-encoded with the same base offset, last offset delta, producer fields, epoch and codec
   (offset gaps inside a batch are normal after compaction). Records without a key are kept.
   A tombstone (null value) that is the newest for its key is dropped once its batch is
   older than delete.retention.ms. Transactions, as Kafka's cleaner does: the batches of an
   aborted transaction are removed; a COMMIT/ABORT marker stays while any batch of its
   transaction was still found in this pass; after that it gets a delete horizon (KIP-534:
   the delete-horizon attribute, base timestamp = now + delete.retention.ms) and goes in a
   later pass once the horizon has passed. The last batch of each producer still in the
   producer state is kept (emptied if nothing in it survives), so the producer's sequence
   and epoch outlive compaction.
4. Swap: the segment's index files are removed, ``.cleaned`` is renamed over ``.log``
   (atomic) and the segment is reopened, rebuilding its indexes; its transaction index gets
   the aborted transactions whose markers it kept. A segment left empty is removed, except
   the first (it keeps the log start offset where it was across restarts). A crash at any
   point leaves the old or the new segment; a leftover ``.cleaned`` is removed when loading
   and a missing index is rebuilt.

This decodes every record of the cleanable range: it is background work. It may run in a
worker thread: segment list changes are serialised by ``Log.lock``; a segment that was
truncated or deleted meanwhile is simply not swapped, and a log closed or deleted meanwhile is
left alone (its ``.cleaned`` file is made through a descriptor of the log's directory, so it
can never land in a new log created at the same path). ``stop`` (an Event) ends a pass between
two batches: the broker sets it when it shuts down.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from common.errors import KafkaError

from . import fileio as fio
from .batch import (
    DELETE_HORIZON_BIT,
    Record,
    build_batch,
    iter_records,
    read_end_txn_marker,
    records_limit,
    unpack_header,
)
from .index import _write_all
from .leader_epoch import fsync_dir
from .segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIMEINDEX_SUFFIX,
    LogSegment,
    SegmentDeletedError,
    filename_prefix,
)
from .txn_index import AbortedTxn

log = logging.getLogger("krafty.log.cleaner")

CLEANED_SUFFIX = ".cleaned"


@dataclass(slots=True)
class CleanStats:
    segments: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    records_removed: int = 0


def dirty_ratio(lg, high_watermark: int | None = None, now_ms: int | None = None) -> float:
    total, dirty = _cleanable_bytes(_cleanable(lg, _first_uncleanable(lg, high_watermark, now_ms)), lg.cleaner_offset)
    return dirty / total if total else 0.0


def _cleanable_bytes(segs: list[LogSegment], first_dirty: int) -> tuple[int, int]:
    """(bytes of the cleanable segments, the dirty part of them: past the cleaner's offset)."""
    return sum(s.size for s in segs), sum(s.size for s in segs if s.base_offset >= first_dirty)


def _dirty_inactive(lg) -> list[LogSegment]:
    """The segments before the active one that hold offsets past the cleaner's (Kafka's
    nonActiveLogSegmentsFrom(firstDirtyOffset))."""
    segs = lg.segments
    return [s for i, s in enumerate(segs[:-1]) if segs[i + 1].base_offset > lg.cleaner_offset]


def _first_uncleanable(lg, high_watermark: int | None, now_ms: int | None = None) -> int:
    """The high watermark, or below it the first offset of a transaction that is open or whose
    marker may not be replicated yet, or of the first dirty segment holding a record younger than
    min.compaction.lag.ms. Read without changing the producer state (the cleaner runs in a worker
    thread while the loop appends)."""
    bound = lg.log_end_offset if high_watermark is None else high_watermark
    ps = lg.producer_state
    firsts = list(ps.ongoing) + [t.first_offset for t in list(ps.unreplicated.values()) if t.last_offset >= bound]
    lag = lg.config.min_compaction_lag_ms
    if lag > 0 and now_ms is not None:
        young = next((s.base_offset for s in _dirty_inactive(lg) if s.max_timestamp > now_ms - lag), None)
        if young is not None:
            firsts.append(young)
    return min([bound, *firsts])


def compaction_delay(lg, now_ms: int) -> int:
    """How long past max.compaction.lag.ms the oldest uncompacted record is (0: not past it):
    such a log is compacted whatever its dirty ratio (Kafka's maxCompactionDelay, by the first
    batch timestamp of each dirty segment)."""
    stamps = [s.first_batch_timestamp for s in _dirty_inactive(lg)
              if s.first_batch_timestamp is not None and s.first_batch_timestamp > 0]
    if not stamps:
        return 0
    until = now_ms - max(lg.config.max_compaction_lag_ms, 0)
    return max(0, until - min(stamps))


def _cleanable(lg, upper: int) -> list[LogSegment]:
    segs = lg.segments[:-1]
    hw = upper
    out = []
    for i, s in enumerate(segs):
        end = lg.segments[i + 1].base_offset
        if end > hw:
            break
        out.append(s)
    return out


class CleanerStopped(Exception):
    """The pass was stopped (``stop`` set: the broker is shutting down)."""


def compact(lg, now_ms: int, *, high_watermark: int | None = None, force: bool = False,
            stop: threading.Event | None = None) -> CleanStats:
    """Compact ``lg`` if it is a compacted topic and dirty enough (its topic's
    ``min.cleanable.dirty.ratio``; or ``force``). Raises
    CleanerStopped once ``stop`` is set; a log closed or deleted meanwhile is left as it is."""
    stats = CleanStats()
    if lg.closed or not lg.config.compact_enabled:
        return stats
    segs = _cleanable(lg, _first_uncleanable(lg, high_watermark, now_ms))
    if not segs:
        return stats
    total, dirty = _cleanable_bytes(segs, lg.cleaner_offset)
    if not force and not (dirty and compaction_delay(lg, now_ms) > 0) and (
            not total or dirty / total <= lg.config.min_cleanable_dirty_ratio):
        return stats
    with lg.lock:
        if lg.closed:
            return stats
        dir_fd = fio.open(lg.path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        decoder = _Decoder(lg, stop)
        try:
            latest = _build_offset_map(segs, decoder, _Transactions(lg))
        except SegmentDeletedError:  # retention or a truncation took a segment meanwhile: next time
            return stats
        horizon = now_ms - lg.config.delete_retention_ms
        txns = _Transactions(lg)
        last_batches = _last_batches_of_producers(lg)
        for seg in segs:
            try:
                _clean_segment(lg, seg, latest, horizon, stats, decoder, txns, last_batches, now_ms, dir_fd)
            except FileNotFoundError:
                continue  # deleted by retention or truncation meanwhile
            if lg.closed:
                return stats
    finally:
        fio.close(dir_fd)
    lg.cleaner_offset = max(lg.cleaner_offset, segs[-1].next_offset)
    if stats.segments:
        log.info("cleaned %s-%d: %d segments, %d -> %d bytes, %d records removed", lg.topic, lg.partition,
                 stats.segments, stats.bytes_before, stats.bytes_after, stats.records_removed)
    return stats


def _batches(seg: LogSegment, stop: threading.Event | None):
    for h in seg.iter_headers(0):
        if stop is not None and stop.is_set():
            raise CleanerStopped(f"the log cleaner was stopped in {seg.log_path}")
        yield h, seg.read_batch(h.pos, h.batch_length + 12)


class _Decoder:
    """Bounded record decoding for one cleaning pass. A batch that cannot be decoded is kept as
    it is (its records cannot be judged, so none is dropped) and logged once with its place."""

    def __init__(self, lg, stop: threading.Event | None = None):
        self.lg = lg
        self.stop = stop
        self.limit = records_limit(lg.config.max_message_bytes)
        self.bad: set[tuple[int, int]] = set()  # (segment base offset, position)

    def records(self, seg: LogSegment, h, data) -> Iterator[Record] | None:
        if (seg.base_offset, h.pos) in self.bad:
            return None
        try:
            return iter_records(data, self.limit)
        except KafkaError as e:
            self.failed(seg, h, e)
            return None

    def failed(self, seg: LogSegment, h, e: KafkaError) -> None:
        self.bad.add((seg.base_offset, h.pos))
        log.error("%s-%d: the log cleaner cannot decode the record batch at position %d of %s (offsets %d-%d) and "
                  "keeps it as it is: %s", self.lg.topic, self.lg.partition, h.pos, seg.log_path, h.base_offset,
                  h.last_offset, e.message)


class _Transactions:
    """Which batches belong to aborted transactions, as the cleaner walks the log in offset
    order (Kafka's CleanedTransactionMetadata): the aborted transactions of each segment's
    range come from the transaction indexes; a data batch of a producer with an aborted
    transaction begun at or before it is aborted, until that producer's ABORT marker."""

    def __init__(self, lg):
        self.lg = lg
        self.aborted: deque[AbortedTxn] = deque()
        self.seen: set[tuple[int, int]] = set()
        self.ongoing_aborted: dict[int, list] = {}  # producer id -> [aborted txn, a batch of it was found]
        self.ongoing_committed: set[int] = set()
        self.kept_index: list[AbortedTxn] = []  # the transaction index of the segment being cleaned

    def enter_segment(self, seg: LogSegment, end: int) -> None:
        for t in self.lg.aborted_transactions(seg.base_offset, end):
            if (t.producer_id, t.first_offset) not in self.seen:
                self.seen.add((t.producer_id, t.first_offset))
                self.aborted.append(t)
        self.aborted = deque(sorted(self.aborted, key=lambda t: t.first_offset))
        self.kept_index = []

    def _consume_up_to(self, offset: int) -> None:
        while self.aborted and self.aborted[0].first_offset <= offset:
            t = self.aborted.popleft()
            self.ongoing_aborted.setdefault(t.producer_id, [t, False])

    def is_aborted(self, h) -> bool:
        """A data batch: True if it belongs to an aborted transaction (remove it)."""
        self._consume_up_to(h.last_offset)
        if not h.is_transactional:
            return False
        a = self.ongoing_aborted.get(h.producer_id)
        if a is not None:
            a[1] = True
            return True
        self.ongoing_committed.add(h.producer_id)
        return False

    def marker_discardable(self, h, marker) -> bool:
        """A control batch: True once no batch of its transaction is left in the log."""
        self._consume_up_to(h.last_offset)
        if marker is None:
            return True  # emptied by an earlier pass
        pid = h.producer_id
        if not marker.commit:
            a = self.ongoing_aborted.pop(pid, None)
            if a is not None and a[1]:
                self.kept_index.append(a[0])  # kept with its marker while its data may be read
                return False
            return True
        if pid in self.ongoing_committed:
            self.ongoing_committed.discard(pid)
            return False
        return True


def _last_batches_of_producers(lg) -> dict[int, tuple[int, int]]:
    """producer id -> (offset of its last data record or -1, epoch), for the producers in the state."""
    out = {}
    for pid, e in dict(lg.producer_state.producers).items():
        try:
            out[pid] = (e.last_offset, e.epoch)
        except IndexError:  # its batches changed under us (the loop appends meanwhile)
            continue
    return out


def _is_last_batch_of_producer(h, last_batches: dict[int, tuple[int, int]]) -> bool:
    last = last_batches.get(h.producer_id) if h.producer_id >= 0 else None
    if last is None:
        return False
    offset, epoch = last
    if offset >= 0:
        return h.last_offset == offset
    return h.is_control and h.producer_epoch == epoch


def _build_offset_map(segs: list[LogSegment], decoder: _Decoder, txns: _Transactions) -> dict[bytes, int]:
    latest: dict[bytes, int] = {}
    for i, seg in enumerate(segs):
        txns.enter_segment(seg, segs[i + 1].base_offset if i + 1 < len(segs) else seg.next_offset)
        for h, data in _batches(seg, decoder.stop):
            if h.is_control:
                txns.marker_discardable(h, _marker(data))
                continue
            if txns.is_aborted(h):
                continue
            records = decoder.records(seg, h, data)
            try:
                for r in records or ():
                    if r.key is not None:
                        latest[r.key] = r.offset
            except KafkaError as e:  # keys read before the bad record stay: that only keeps more
                decoder.failed(seg, h, e)
    return latest


def _marker(data):
    try:
        return read_end_txn_marker(data)
    except KafkaError:
        return False  # undecodable: kept as it is


def _empty_batch(h) -> bytearray:
    """The header of ``h`` without its records: what Kafka keeps of the last batch of a producer."""
    return build_batch([], base_offset=h.base_offset, last_offset_delta=h.last_offset_delta, compression=0,
                       timestamp_type=h.timestamp_type, producer_id=h.producer_id, producer_epoch=h.producer_epoch,
                       base_sequence=h.base_sequence, transactional=h.is_transactional, control=h.is_control,
                       partition_leader_epoch=h.partition_leader_epoch, base_timestamp=h.base_timestamp,
                       max_timestamp=h.max_timestamp, delete_horizon=bool(h.attributes & DELETE_HORIZON_BIT))


def _clean_marker(h, data, txns: _Transactions, last_batches, now_ms: int, delete_retention_ms: int):
    """What stays of a control batch: the bytes as they are, the batch with a delete horizon
    set, an empty batch, or None."""
    marker = _marker(data)
    if marker is False or not txns.marker_discardable(h, marker):
        return data
    has_horizon = bool(h.attributes & DELETE_HORIZON_BIT)
    if not has_horizon and marker is not None:
        (r,) = list(iter_records(data))  # the marker record, re-encoded against the new base timestamp
        return build_batch([r], base_offset=h.base_offset,
                           last_offset_delta=h.last_offset_delta, timestamp_type=h.timestamp_type,
                           producer_id=h.producer_id, producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
                           transactional=True, control=True, partition_leader_epoch=h.partition_leader_epoch,
                           base_timestamp=now_ms + delete_retention_ms, max_timestamp=h.max_timestamp,
                           delete_horizon=True)
    if marker is not None and h.base_timestamp > now_ms:
        return data  # its horizon has not passed
    if _is_last_batch_of_producer(h, last_batches):
        return data if h.records_count == 0 else _empty_batch(h)
    return None


def _clean_segment(lg, seg: LogSegment, latest: dict[bytes, int], horizon: int, stats: CleanStats,
                   decoder: _Decoder, txns: _Transactions, last_batches: dict[int, tuple[int, int]],
                   now_ms: int, dir_fd: int) -> None:
    size_before = seg.size
    out = bytearray()
    changed = False
    removed = 0
    i = lg.segments.index(seg) if seg in lg.segments else -1
    txns.enter_segment(seg, lg.segments[i + 1].base_offset if 0 <= i < len(lg.segments) - 1 else seg.next_offset)
    for h, data in _batches(seg, decoder.stop):
        if h.is_control:
            kept = _clean_marker(h, data, txns, last_batches, now_ms, lg.config.delete_retention_ms)
            if kept is not data:
                changed = True
                removed += h.records_count - (0 if kept is None else unpack_header(kept, 0).records_count)
            if kept is not None:
                out += kept
            continue
        if txns.is_aborted(h):
            changed = True
            removed += h.records_count
            if _is_last_batch_of_producer(h, last_batches):
                out += _empty_batch(h)
            continue
        it = decoder.records(seg, h, data)
        try:
            records = list(it) if it is not None else None
        except KafkaError as e:
            decoder.failed(seg, h, e)
            records = None
        if records is None:
            out += data
            continue
        kept = [r for r in records
                if r.key is None or (latest.get(r.key) == r.offset
                                     and not (r.value is None and h.max_timestamp < horizon))]
        if len(kept) == len(records):
            out += data
            continue
        changed = True
        removed += len(records) - len(kept)
        if not kept:
            if _is_last_batch_of_producer(h, last_batches):
                out += _empty_batch(h)
            continue
        out += build_batch(kept, base_offset=h.base_offset, last_offset_delta=h.last_offset_delta,
                           compression=h.compression, timestamp_type=h.timestamp_type,
                           producer_id=h.producer_id, producer_epoch=h.producer_epoch,
                           base_sequence=h.base_sequence, transactional=h.is_transactional,
                           partition_leader_epoch=h.partition_leader_epoch, base_timestamp=h.base_timestamp,
                           max_timestamp=h.max_timestamp if h.timestamp_type == 1 else None)
    if not changed:
        return
    name = os.path.basename(seg.log_path) + CLEANED_SUFFIX
    fd = fio.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=dir_fd)
    try:
        _write_all(fd, out, 0)
        fio.fsync(fd)
    finally:
        fio.close(fd)
    with lg.lock:
        if (lg.closed or seg not in lg.segments or seg is lg.segments[-1] or seg.size != size_before
                or seg.deleted):
            fio.unlink(name, dir_fd=dir_fd)
            return
        _swap(lg, seg, os.path.join(lg.path, name), txns.kept_index)
    stats.segments += 1
    stats.bytes_before += size_before
    stats.bytes_after += len(out)
    stats.records_removed += removed


def _swap(lg, seg: LogSegment, cleaned: str, txn_index: list[AbortedTxn]) -> None:
    """Under ``lg.lock``. Readers on the event loop do not take the lock: one still holding the
    old segment object reads the old file through its descriptor and its indexes from memory
    until the new list is in place, then gets SegmentDeletedError and reads the list again."""
    seg.load_indexes()  # the old object must not read the new index files by their path
    prefix = os.path.join(lg.path, filename_prefix(seg.base_offset))
    for suffix in (INDEX_SUFFIX, TIMEINDEX_SUFFIX):
        try:
            fio.unlink(prefix + suffix)  # rebuilt from the new log file, even after a crash
        except FileNotFoundError:
            pass
    fio.replace(cleaned, prefix + LOG_SUFFIX)
    fsync_dir(lg.path)
    new, _ = LogSegment.open(lg.path, seg.base_offset, recover=True, index_interval_bytes=seg.index_interval_bytes,
                             index_max_bytes=lg.config.segment_index_bytes, created_ms=seg.created_ms)
    new.txn_index.replace(txn_index)  # the aborted transactions whose markers it kept
    if txn_index:
        lg.any_aborted = True
    new.txn_stale = False
    segs = list(lg.segments)
    i = segs.index(seg)
    if new.size == 0 and i > 0:
        new.delete(lg.config.file_delete_delay_ms / 1000)
        del segs[i]
    else:
        segs[i] = new
        new.release()
    lg.segments = segs
    lg._bases = [s.base_offset for s in segs]
    # The old object's paths now name the new files: retire its descriptor, do not unlink (the
    # old data stays file.delete.delay.ms on disk, as Kafka's replaced segments do).
    seg.detach(lg.config.file_delete_delay_ms / 1000)
