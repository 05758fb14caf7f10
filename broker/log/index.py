"""Sparse per-segment indexes, in Kafka's on-disk formats.

``.index``      entries of 8 bytes: relativeOffset int32, position int32 (big-endian)
``.timeindex``  entries of 12 bytes: timestamp int64, relativeOffset int32

Offset index entries map the base offset of a batch to its file position; one is added
after every ``index.interval.bytes`` of appended data. A time index entry (T, O) says the
largest timestamp among the batches appended up to the entry is T, first reached in the
batch whose base offset is O; entries are added alongside offset index entries when the
timestamp grows, and once more when the segment stops being active.

Opening a segment only sanity-checks an index file (whole entries, last entry inside the
segment), as Kafka does; the entries are read into memory (int arrays) on first use, and
checked then. A file that fails that check is rebuilt from the log by the ``rebuild``
callback. New entries are appended to the file lazily, at flush, roll and close: after a
crash the segments past the recovery point are re-scanned and their indexes rebuilt, so
the files only have to be right for flushed segments.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from typing import Any

from . import fileio as fio

_LITTLE = sys.byteorder == "little"


class CorruptIndexError(Exception):
    pass


def _write_all(fd: int, data, pos: int) -> None:
    mv = memoryview(data)
    while mv:
        n = fio.pwrite(fd, mv, pos)
        pos += n
        mv = mv[n:]


def _read_tail(path: str, entry_size: int) -> tuple[int, bytes]:
    """(number of entries, last entry bytes) of an index file; CorruptIndexError if unusable."""
    try:
        fd = fio.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise CorruptIndexError(f"{path} is missing") from None
    try:
        size = fio.fstat(fd).st_size
        if size % entry_size:
            raise CorruptIndexError(f"{path} has a partial entry")
        last = fio.pread(fd, entry_size, size - entry_size) if size else b""
    finally:
        fio.close(fd)
    return size // entry_size, last


def _increasing(a) -> bool:
    return all(x < y for x, y in zip(a, a[1:], strict=False))


_NONE: tuple = ()  # the entries of an index without any: shared by all, replaced on the first append


class _LazyIndex:
    """``prefix``: the segment's path without a suffix (one string shared with the segment);
    ``owner``: a weak reference to an object whose ``_rebuild_indexes()`` rebuilds a bad file
    (the segment; weak so that it holds no cycle). An idle segment's indexes hold no entries
    array (the shared empty tuple) and no dict (``__slots__``): a broker of 100,000 partitions
    keeps 200,000 of them."""

    ENTRY_SIZE = 0
    SUFFIX = ""
    __slots__ = ("_prefix", "base_offset", "max_entries", "_owner", "_loaded", "_disk_count", "_written",
                 "_on_disk", "_detached")

    def __init__(self, prefix: str, base_offset: int, max_bytes: int, owner: Callable[[], Any] | None = None):
        self._prefix = prefix
        self.base_offset = base_offset
        self.max_entries = max(1, max_bytes // self.ENTRY_SIZE)
        self._owner = owner
        self._loaded = True
        self._disk_count = 0
        self._written = 0  # entries already in the file
        self._on_disk = True  # the file exists (False for a new segment's index until its first flush)
        self._detached = False  # its segment was deleted or replaced: the path is not ours any more

    @property
    def path(self) -> str:
        return self._prefix + self.SUFFIX

    def detach(self) -> None:
        """Never read or write the file at ``path`` again: its segment was deleted or replaced,
        and another segment's index may be there now. Entries not loaded yet read as none."""
        self._detached = True

    def _ensure(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        if self._detached:
            self.reset()
            return
        try:
            with open(self.path, "rb") as f:
                data = f.read()
            if len(data) != self._disk_count * self.ENTRY_SIZE:
                raise CorruptIndexError(f"{self.path} changed size")
            self._parse(data)
            self._written = self._disk_count
        except (OSError, CorruptIndexError):
            self.reset()
            owner = self._owner() if self._owner is not None else None
            if owner is not None:
                owner._rebuild_indexes()

    def _parse(self, data: bytes) -> None:
        raise NotImplementedError

    def reset(self) -> None:
        raise NotImplementedError

    def __len__(self) -> int:
        return self._len() if self._loaded else self._disk_count

    def _len(self) -> int:
        raise NotImplementedError

    @property
    def is_full(self) -> bool:
        return len(self) >= self.max_entries

    def flush(self) -> None:
        if self._detached:
            return
        self.write_pending()
        self.ensure_file()
        _fsync_path(self.path)

    def ensure_file(self) -> None:
        """Create the (empty) file of a new segment's index; done by the flush thread, off the loop."""
        if not self._on_disk and not self._detached:
            fio.close(fio.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644))
            self._on_disk = True

    def _clear_file(self) -> None:
        """Empty the index file if there is one, without creating it: creating two files per new
        segment on the event loop was most of the cost of creating a partition; the file is made
        by the first flush (or write), and a missing one is rebuilt from the segment on open."""
        if self._detached:
            return
        try:
            fio.truncate(self.path, 0)
            self._on_disk = True
        except FileNotFoundError:
            self._on_disk = False

    def write_pending(self) -> None:
        if not self._loaded or self._detached:
            return
        n = self._len()
        if self._written == n:
            return
        data = self._encode(self._written, n)
        fd = fio.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        self._on_disk = True
        try:
            _write_all(fd, data, self._written * self.ENTRY_SIZE)
        finally:
            fio.close(fd)
        self._written = n

    def _encode(self, start: int, end: int) -> bytes:
        raise NotImplementedError

    def _truncate_file(self, entries: int) -> None:
        self._written = min(self._written, entries)
        if not self._detached and os.path.exists(self.path):
            fio.truncate(self.path, entries * self.ENTRY_SIZE)


class OffsetIndex(_LazyIndex):
    ENTRY_SIZE = 8
    SUFFIX = ".index"
    __slots__ = ("_rel", "_pos", "_disk_last")

    def __init__(self, prefix: str, base_offset: int, max_bytes: int, owner: Callable[[], Any] | None = None):
        super().__init__(prefix, base_offset, max_bytes, owner)
        self._rel: array | tuple = _NONE
        self._pos: array | tuple = _NONE
        self._disk_last: tuple[int, int] | None = None

    def load(self, log_size: int) -> None:
        """Sanity-check the file (entries are read on first use); CorruptIndexError if unusable."""
        count, last = _read_tail(self.path, self.ENTRY_SIZE)
        if count:
            rel, pos = struct.unpack(">ii", last)
            if rel < 0 or pos < 0 or pos >= log_size:
                raise CorruptIndexError(f"{self.path} points past the end of its segment")
            self._disk_last = (rel, pos)
        self._rel, self._pos = _NONE, _NONE
        self._disk_count = self._written = count
        self._loaded = not count

    def _parse(self, data: bytes) -> None:
        a = array("i")
        a.frombytes(data)
        if _LITTLE:
            a.byteswap()
        rel, pos = a[0::2], a[1::2]
        if not (_increasing(rel) and _increasing(pos)) or (rel and rel[0] < 0):
            raise CorruptIndexError(f"{self.path} entries are not increasing")
        self._rel, self._pos = rel, pos

    def reset(self) -> None:
        self._rel, self._pos = _NONE, _NONE
        self._loaded, self._written, self._disk_count = True, 0, 0
        self._clear_file()

    def _len(self) -> int:
        return len(self._rel)

    @property
    def last_entry(self) -> tuple[int, int]:
        """(offset, position) of the last entry, or (base_offset, 0)."""
        if not self._loaded:
            assert self._disk_last is not None
            return self.base_offset + self._disk_last[0], self._disk_last[1]
        if not self._rel:
            return self.base_offset, 0
        return self.base_offset + self._rel[-1], self._pos[-1]

    def lookup(self, offset: int) -> int:
        """Position of the batch of the largest entry with offset <= ``offset`` (0 if none)."""
        self._ensure()
        i = bisect_right(self._rel, offset - self.base_offset)
        return self._pos[i - 1] if i else 0

    def lookup_entry(self, offset: int) -> tuple[int | None, int]:
        """(offset, position) of the largest entry with offset <= ``offset``; (None, 0) if none."""
        self._ensure()
        i = bisect_right(self._rel, offset - self.base_offset)
        return (self.base_offset + self._rel[i - 1], self._pos[i - 1]) if i else (None, 0)

    def entry_before(self, position: int) -> tuple[int | None, int]:
        """(offset, position) of the last entry whose position is < ``position``; (None, 0) if none."""
        self._ensure()
        i = bisect_right(self._pos, position - 1)
        return (self.base_offset + self._rel[i - 1], self._pos[i - 1]) if i else (None, 0)

    def floor_position(self, position: int) -> int:
        """The largest indexed batch position <= ``position`` (0 if none)."""
        self._ensure()
        i = bisect_right(self._pos, position)
        return self._pos[i - 1] if i else 0

    def offset_at_or_after(self, position: int) -> int | None:
        """Offset of the first entry whose position is >= ``position`` (None if none): an upper
        bound of the offsets below that position (Kafka's fetchUpperBoundOffset)."""
        self._ensure()
        i = bisect_left(self._pos, position)
        return self.base_offset + self._rel[i] if i < len(self._rel) else None

    def append(self, offset: int, position: int) -> None:
        self._ensure()
        if not self._rel:
            self._rel, self._pos = array("i"), array("i")
        self._rel.append(offset - self.base_offset)
        self._pos.append(position)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries for offsets >= ``offset``."""
        self._ensure()
        i = bisect_right(self._rel, offset - self.base_offset - 1)
        if i < len(self._rel):
            del self._rel[i:]
            del self._pos[i:]
            self._truncate_file(i)

    def _encode(self, start: int, end: int) -> bytes:
        a = array("i", [0]) * (2 * (end - start))
        a[0::2] = self._rel[start:end]
        a[1::2] = self._pos[start:end]
        if _LITTLE:
            a.byteswap()
        return a.tobytes()


class TimeIndex(_LazyIndex):
    ENTRY_SIZE = 12
    SUFFIX = ".timeindex"
    __slots__ = ("_ts", "_rel", "_disk_last")

    def __init__(self, prefix: str, base_offset: int, max_bytes: int, owner: Callable[[], Any] | None = None):
        super().__init__(prefix, base_offset, max_bytes, owner)
        self._ts: list[int] | tuple = _NONE
        self._rel: list[int] | tuple = _NONE
        self._disk_last: tuple[int, int] | None = None

    def load(self, log_end_offset: int | None = None) -> None:
        count, last = _read_tail(self.path, self.ENTRY_SIZE)
        if count:
            ts, rel = struct.unpack(">qi", last)
            if rel < 0 or (log_end_offset is not None and self.base_offset + rel >= log_end_offset):
                raise CorruptIndexError(f"{self.path} points past the end of its segment")
            self._disk_last = (ts, rel)
        self._ts, self._rel = _NONE, _NONE
        self._disk_count = self._written = count
        self._loaded = not count

    def _parse(self, data: bytes) -> None:
        ts: list[int] = []
        rel: list[int] = []
        for t, r in struct.iter_unpack(">qi", data):
            ts.append(t)
            rel.append(r)
        if not _increasing(ts) or any(x > y for x, y in zip(rel, rel[1:], strict=False)) or (rel and rel[0] < 0):
            raise CorruptIndexError(f"{self.path} entries are not increasing")
        self._ts, self._rel = ts, rel

    def reset(self) -> None:
        self._ts, self._rel = _NONE, _NONE
        self._loaded, self._written, self._disk_count = True, 0, 0
        self._clear_file()

    def _len(self) -> int:
        return len(self._ts)

    @property
    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the last entry."""
        if not self._loaded:
            assert self._disk_last is not None
            return self._disk_last[0], self.base_offset + self._disk_last[1]
        if not self._ts:
            return None
        return self._ts[-1], self.base_offset + self._rel[-1]

    def maybe_append(self, timestamp: int, offset: int) -> None:
        if timestamp < 0:
            return
        last = self.last_entry
        if last is not None and timestamp <= last[0]:
            return
        self._ensure()
        if not self._ts:
            self._ts, self._rel = [], []
        self._ts.append(timestamp)
        self._rel.append(offset - self.base_offset)

    def lookup_before(self, timestamp: int) -> int | None:
        """Offset of the last entry whose timestamp is < ``timestamp``: every record up to the
        point that entry was written has a smaller timestamp, so a search may start there."""
        self._ensure()
        i = bisect_right(self._ts, timestamp - 1)
        return self.base_offset + self._rel[i - 1] if i else None

    def truncate_to(self, offset: int) -> None:
        self._ensure()
        rel = offset - self.base_offset
        i = len(self._rel)
        while i and self._rel[i - 1] >= rel:
            i -= 1
        if i < len(self._rel):
            del self._ts[i:]
            del self._rel[i:]
            self._truncate_file(i)

    def _encode(self, start: int, end: int) -> bytes:
        return b"".join(struct.pack(">qi", self._ts[i], self._rel[i]) for i in range(start, end))


def _fsync_path(path: str) -> None:
    try:
        fd = fio.open(path, os.O_RDONLY)
    except FileNotFoundError:  # the segment was deleted meanwhile
        return
    try:
        fio.fsync(fd)
    finally:
        fio.close(fd)
