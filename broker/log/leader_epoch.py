"""Leader epoch cache: which leader epoch started at which offset (KIP-101/279).

Persisted in ``leader-epoch-checkpoint`` in Kafka's text checkpoint format::

    0            <- version
    2            <- number of entries
    0 0          <- epoch start_offset
    3 1500
"""

from __future__ import annotations

import os
import threading
from bisect import bisect_right
from dataclasses import dataclass

from . import fileio as fio

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
CHECKPOINT_FILE = "leader-epoch-checkpoint"


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


def write_checkpoint_file(path: str, version: int, lines: list[str]) -> None:
    """Write-temp, fsync, rename, fsync dir: a checkpoint is either old or new after a crash."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(f"{version}\n{len(lines)}\n")
        for line in lines:
            f.write(line + "\n")
        f.flush()
        fio.fsync(f.fileno())
    fio.replace(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")


def read_checkpoint_file(path: str, fields: int) -> list[list[str]] | None:
    """Lines of a Kafka checkpoint file split into ``fields`` fields; None if missing/malformed."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return None
    try:
        if int(lines[0]) != 0:
            return None
        n = int(lines[1])
        out = [line.split() for line in lines[2:2 + n]]
    except (IndexError, ValueError):
        return None
    if len(out) != n or any(len(x) != fields for x in out):
        return None
    return out


def fsync_dir(path: str) -> None:
    try:
        fd = fio.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        fio.fsync(fd)
    except OSError:
        pass
    finally:
        fio.close(fd)


class LeaderEpochCache:
    # one per partition: no instance dict, and the checkpoint's path derived from the log's
    __slots__ = ("_dir", "_epochs", "_offsets", "dirty", "_lock", "_write_lock", "_on_disk")

    def __init__(self, dir: str | None):
        self._dir = dir
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        # assign() only changes memory and sets ``dirty``; sync() (from Log.flush, in the flush
        # thread) writes the checkpoint before the log's recovery point passes the new entries,
        # and recovery re-derives entries from the batches past the recovery point, as Kafka
        # does since KAFKA-15046. Truncations are written at once. The lock guards the lists
        # against the flush thread's snapshot; the write lock
        # keeps two writers of the file apart.
        self.dirty = False
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._on_disk: list[str] | None = None  # the rows the file holds, when known: unchanged ones are not rewritten
        if self.path:
            rows = read_checkpoint_file(self.path, 2)
            for epoch, offset in rows or []:
                self._epochs.append(int(epoch))
                self._offsets.append(int(offset))
            if rows is not None:
                self._on_disk = self._rows()

    @property
    def path(self) -> str | None:
        return os.path.join(self._dir, CHECKPOINT_FILE) if self._dir else None

    # --- queries ------------------------------------------------------------------------
    @property
    def entries(self) -> list[EpochEntry]:
        return [EpochEntry(e, o) for e, o in zip(self._epochs, self._offsets, strict=True)]

    def latest_epoch(self) -> int:
        """The newest epoch, or UNDEFINED_EPOCH (-1) when the cache is empty."""
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def latest_entry(self) -> EpochEntry | None:
        return EpochEntry(self._epochs[-1], self._offsets[-1]) if self._epochs else None

    def epoch_for_offset(self, offset: int) -> int:
        i = bisect_right(self._offsets, offset)
        return self._epochs[i - 1] if i else UNDEFINED_EPOCH

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetForLeaderEpoch answers: the end offset of the largest
        epoch <= requested is the start offset of the next larger epoch (or the LEO)."""
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._epochs[-1]:
            return requested_epoch, log_end_offset
        i = bisect_right(self._epochs, requested_epoch)  # first epoch > requested
        if i == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if i == 0:
            return requested_epoch, self._offsets[0]
        return self._epochs[i - 1], self._offsets[i]

    # --- updates ------------------------------------------------------------------------
    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` if it is new; returns True if changed.
        Entries with a larger epoch or a start offset >= start_offset are dropped, as Kafka does."""
        if epoch < 0:
            return False
        if self._epochs and self._epochs[-1] == epoch:
            return False
        if self._epochs and epoch < self._epochs[-1] and self._offsets[-1] <= start_offset:
            return False  # an older epoch showing up late; ignore
        with self._lock:
            while self._epochs and (self._epochs[-1] >= epoch or self._offsets[-1] >= start_offset):
                self._epochs.pop()
                self._offsets.pop()
            self._epochs.append(epoch)
            self._offsets.append(start_offset)
            self.dirty = True
        return True

    def truncate_from_end(self, end_offset: int, flush: bool = True) -> None:
        """Drop the entries starting at or after ``end_offset`` (log truncated to it). Written
        at once, unless not ``flush`` (a log being opened: the next flush writes it, before the
        recovery point passes anything, and until then every open truncates the same way)."""
        changed = False
        with self._lock:
            while self._offsets and self._offsets[-1] >= end_offset:
                self._epochs.pop()
                self._offsets.pop()
                changed = True
        if changed:
            self._changed(flush)

    def truncate_from_start(self, start_offset: int, flush: bool = True) -> None:
        """Log start moved to ``start_offset``: drop entries wholly before it, clamping the one
        that covers it. ``flush`` as for ``truncate_from_end``."""
        i = bisect_right(self._offsets, start_offset)
        if i == 0:
            return
        if i == 1 and self._offsets[0] == start_offset:
            return
        with self._lock:
            epoch = self._epochs[i - 1]
            del self._epochs[:i]
            del self._offsets[:i]
            self._epochs.insert(0, epoch)
            self._offsets.insert(0, start_offset)
        self._changed(flush)

    def _changed(self, flush: bool) -> None:
        if flush:
            self._persist()
        else:
            with self._lock:
                self.dirty = True

    def clear(self) -> None:
        with self._lock:
            self._epochs.clear()
            self._offsets.clear()
        self._persist()

    def sync(self) -> None:
        """Write the checkpoint (durably) if assign() changed it since the last write."""
        if self.dirty:
            self._persist()

    def _rows(self) -> list[str]:
        return [f"{e} {o}" for e, o in zip(self._epochs, self._offsets, strict=True)]

    def _persist(self) -> None:
        if not self.path:
            return
        with self._write_lock:  # one writer at a time, each with the newest lists
            with self._lock:
                rows = self._rows()
                self.dirty = False
            if rows == self._on_disk:
                return  # two fsyncs saved (a restart drops and re-adds entries: 10,000 logs took 8 s)
            try:
                write_checkpoint_file(self.path, 0, rows)
            except BaseException:
                self.dirty = True
                raise
            self._on_disk = rows
