"""Log compaction (cleanup.policy=compact): keep only the newest record of each key.

Kafka's log cleaner in miniature, one log at a time:

1. The cleanable range is every segment before the active one whose batches are all below
   the high watermark.
2. An offset map (key -> offset of its newest record) is built over that range.
3. Each cleanable segment is rewritten to ``<base>.log.cleaned``: a batch whose records are
   all kept is copied byte for byte; a batch with none kept is dropped; otherwise it is
   re-encoded with the same base offset, last offset delta, producer fields, epoch and codec
   (offset gaps inside a batch are normal after compaction). Records without a key and
   control batches are kept. A tombstone (null value) that is the newest for its key is
   dropped once its batch is older than delete.retention.ms.
4. Swap: the segment's index files are removed, ``.cleaned`` is renamed over ``.log``
   (atomic) and the segment is reopened, rebuilding its indexes. A segment left empty is
   removed, except the first (it keeps the log start offset where it was across restarts). A crash at any point
   leaves the old or the new segment; a leftover ``.cleaned`` is removed when loading and
   a missing index is rebuilt.

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
from collections.abc import Iterator
from dataclasses import dataclass

from common.errors import KafkaError

from .batch import CONTROL_BIT, Record, build_batch, iter_records, records_limit
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

log = logging.getLogger("krafty.log.cleaner")

MIN_CLEANABLE_DIRTY_RATIO = 0.5  # Kafka's min.cleanable.dirty.ratio default
CLEANED_SUFFIX = ".cleaned"


@dataclass(slots=True)
class CleanStats:
    segments: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    records_removed: int = 0


def dirty_ratio(lg, high_watermark: int | None = None) -> float:
    segs = _cleanable(lg, high_watermark)
    total = sum(s.size for s in segs)
    if not total:
        return 0.0
    dirty = sum(s.size for s in segs if s.base_offset >= lg.cleaner_offset)
    return dirty / total


def _cleanable(lg, high_watermark: int | None) -> list[LogSegment]:
    segs = lg.segments[:-1]
    hw = lg.log_end_offset if high_watermark is None else high_watermark
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
            min_dirty_ratio: float = MIN_CLEANABLE_DIRTY_RATIO, stop: threading.Event | None = None) -> CleanStats:
    """Compact ``lg`` if it is a compacted topic and dirty enough (or ``force``). Raises
    CleanerStopped once ``stop`` is set; a log closed or deleted meanwhile is left as it is."""
    stats = CleanStats()
    if lg.closed or not lg.config.compact_enabled:
        return stats
    segs = _cleanable(lg, high_watermark)
    if not segs or (not force and dirty_ratio(lg, high_watermark) < min_dirty_ratio):
        return stats
    with lg.lock:
        if lg.closed:
            return stats
        dir_fd = os.open(lg.path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        decoder = _Decoder(lg, stop)
        try:
            latest = _build_offset_map(segs, decoder)
        except SegmentDeletedError:  # retention or a truncation took a segment meanwhile: next time
            return stats
        horizon = now_ms - lg.config.delete_retention_ms
        for seg in segs:
            try:
                _clean_segment(lg, seg, latest, horizon, stats, decoder, dir_fd)
            except FileNotFoundError:
                continue  # deleted by retention or truncation meanwhile
            if lg.closed:
                return stats
    finally:
        os.close(dir_fd)
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


def _build_offset_map(segs: list[LogSegment], decoder: _Decoder) -> dict[bytes, int]:
    latest: dict[bytes, int] = {}
    for seg in segs:
        for h, data in _batches(seg, decoder.stop):
            if h.attributes & CONTROL_BIT:
                continue
            records = decoder.records(seg, h, data)
            try:
                for r in records or ():
                    if r.key is not None:
                        latest[r.key] = r.offset
            except KafkaError as e:  # keys read before the bad record stay: that only keeps more
                decoder.failed(seg, h, e)
    return latest


def _clean_segment(lg, seg: LogSegment, latest: dict[bytes, int], horizon: int, stats: CleanStats,
                   decoder: _Decoder, dir_fd: int) -> None:
    size_before = seg.size
    out = bytearray()
    changed = False
    removed = 0
    for h, data in _batches(seg, decoder.stop):
        if h.attributes & CONTROL_BIT:
            out += data
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
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=dir_fd)
    try:
        _write_all(fd, out, 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    with lg.lock:
        if (lg.closed or seg not in lg.segments or seg is lg.segments[-1] or seg.size != size_before
                or seg.deleted):
            os.unlink(name, dir_fd=dir_fd)
            return
        _swap(lg, seg, os.path.join(lg.path, name))
    stats.segments += 1
    stats.bytes_before += size_before
    stats.bytes_after += len(out)
    stats.records_removed += removed


def _swap(lg, seg: LogSegment, cleaned: str) -> None:
    """Under ``lg.lock``. Readers on the event loop do not take the lock: one still holding the
    old segment object reads the old file through its descriptor and its indexes from memory
    until the new list is in place, then gets SegmentDeletedError and reads the list again."""
    seg.load_indexes()  # the old object must not read the new index files by their path
    prefix = os.path.join(lg.path, filename_prefix(seg.base_offset))
    for suffix in (INDEX_SUFFIX, TIMEINDEX_SUFFIX):
        try:
            os.unlink(prefix + suffix)  # rebuilt from the new log file, even after a crash
        except FileNotFoundError:
            pass
    os.replace(cleaned, prefix + LOG_SUFFIX)
    fsync_dir(lg.path)
    new, _ = LogSegment.open(lg.path, seg.base_offset, recover=True, index_interval_bytes=seg.index_interval_bytes,
                             index_max_bytes=lg.config.segment_index_bytes, created_ms=seg.created_ms)
    segs = list(lg.segments)
    i = segs.index(seg)
    if new.size == 0 and i > 0:
        new.delete()
        del segs[i]
    else:
        segs[i] = new
        new.release()
    lg.segments = segs
    lg._bases = [s.base_offset for s in segs]
    # The old object's paths now name the new files: retire its descriptor, do not unlink.
    seg.detach()
