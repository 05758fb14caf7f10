"""Sparse per-segment indexes, in Kafka's on-disk formats.

``.index``      entries of 8 bytes: relativeOffset int32, position int32 (big-endian)
``.timeindex``  entries of 12 bytes: timestamp int64, relativeOffset int32

Offset index entries map the base offset of a batch to its file position; one is added
after every ``index.interval.bytes`` of appended data. A time index entry (T, O) says the
largest timestamp among the batches appended up to the entry is T, first reached in the
batch whose base offset is O; entries are added alongside offset index entries when the
timestamp grows, and once more when the segment stops being active.

Both are kept in memory (two int arrays) and appended to their files lazily, at flush,
roll and close: after a crash the segments past the recovery point are re-scanned and
their indexes rebuilt, so the files only have to be right for flushed segments.
"""

from __future__ import annotations

import os
import sys
from array import array
from bisect import bisect_right

_LITTLE = sys.byteorder == "little"


class CorruptIndexError(Exception):
    pass


def _write_all(fd: int, data, pos: int) -> None:
    mv = memoryview(data)
    while mv:
        n = os.pwrite(fd, mv, pos)
        pos += n
        mv = mv[n:]


class OffsetIndex:
    ENTRY_SIZE = 8

    def __init__(self, path: str, base_offset: int, max_bytes: int):
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_bytes // self.ENTRY_SIZE)
        self._rel = array("i")
        self._pos = array("i")
        self._written = 0  # entries already in the file

    # --- loading ----------------------------------------------------------------------
    def load(self, log_size: int) -> None:
        """Read the file; raise CorruptIndexError if it is missing or fails the sanity check."""
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise CorruptIndexError(f"{self.path} is missing") from None
        if len(data) % self.ENTRY_SIZE:
            raise CorruptIndexError(f"{self.path} has a partial entry")
        a = array("i")
        a.frombytes(data)
        if _LITTLE:
            a.byteswap()
        rel, pos = a[0::2], a[1::2]
        for i in range(1, len(rel)):
            if rel[i] <= rel[i - 1] or pos[i] <= pos[i - 1]:
                raise CorruptIndexError(f"{self.path} entries are not increasing at entry {i}")
        if rel and (rel[0] < 0 or pos[0] < 0 or pos[-1] >= log_size):
            raise CorruptIndexError(f"{self.path} points past the end of its segment")
        self._rel, self._pos = rel, pos
        self._written = len(rel)

    def reset(self) -> None:
        self._rel = array("i")
        self._pos = array("i")
        self._written = 0
        with open(self.path, "wb"):
            pass

    # --- queries ----------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._rel)

    @property
    def is_full(self) -> bool:
        return len(self._rel) >= self.max_entries

    @property
    def last_entry(self) -> tuple[int, int]:
        """(offset, position) of the last entry, or (base_offset, 0)."""
        if not self._rel:
            return self.base_offset, 0
        return self.base_offset + self._rel[-1], self._pos[-1]

    def lookup(self, offset: int) -> int:
        """Position of the batch of the largest entry with offset <= ``offset`` (0 if none)."""
        i = bisect_right(self._rel, offset - self.base_offset)
        return self._pos[i - 1] if i else 0

    def floor_position(self, position: int) -> int:
        """The largest indexed batch position <= ``position`` (0 if none)."""
        i = bisect_right(self._pos, position)
        return self._pos[i - 1] if i else 0

    # --- updates ----------------------------------------------------------------------
    def append(self, offset: int, position: int) -> None:
        self._rel.append(offset - self.base_offset)
        self._pos.append(position)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries for offsets >= ``offset``."""
        i = bisect_right(self._rel, offset - self.base_offset - 1)
        if i < len(self._rel):
            del self._rel[i:]
            del self._pos[i:]
            self._written = min(self._written, i)
            if os.path.exists(self.path):
                os.truncate(self.path, i * self.ENTRY_SIZE)

    def write_pending(self) -> None:
        n = len(self._rel)
        if self._written == n:
            return
        a = array("i", [0]) * (2 * (n - self._written))
        a[0::2] = self._rel[self._written:]
        a[1::2] = self._pos[self._written:]
        if _LITTLE:
            a.byteswap()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            _write_all(fd, a.tobytes(), self._written * self.ENTRY_SIZE)
        finally:
            os.close(fd)
        self._written = n

    def flush(self) -> None:
        self.write_pending()
        _fsync_path(self.path)


class TimeIndex:
    ENTRY_SIZE = 12

    def __init__(self, path: str, base_offset: int, max_bytes: int):
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_bytes // self.ENTRY_SIZE)
        self._ts: list[int] = []
        self._rel: list[int] = []
        self._written = 0

    def load(self, log_end_offset: int) -> None:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise CorruptIndexError(f"{self.path} is missing") from None
        if len(data) % self.ENTRY_SIZE:
            raise CorruptIndexError(f"{self.path} has a partial entry")
        ts: list[int] = []
        rel: list[int] = []
        mv = memoryview(data)
        for i in range(0, len(data), self.ENTRY_SIZE):
            ts.append(int.from_bytes(mv[i:i + 8], "big", signed=True))
            rel.append(int.from_bytes(mv[i + 8:i + 12], "big", signed=True))
        for i in range(1, len(ts)):
            if ts[i] <= ts[i - 1] or rel[i] < rel[i - 1]:
                raise CorruptIndexError(f"{self.path} entries are not increasing at entry {i}")
        if rel and (rel[0] < 0 or self.base_offset + rel[-1] >= log_end_offset):
            raise CorruptIndexError(f"{self.path} points past the end of its segment")
        self._ts, self._rel = ts, rel
        self._written = len(ts)

    def reset(self) -> None:
        self._ts, self._rel, self._written = [], [], 0
        with open(self.path, "wb"):
            pass

    def __len__(self) -> int:
        return len(self._ts)

    @property
    def is_full(self) -> bool:
        return len(self._ts) >= self.max_entries

    @property
    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the last entry."""
        if not self._ts:
            return None
        return self._ts[-1], self.base_offset + self._rel[-1]

    def maybe_append(self, timestamp: int, offset: int) -> None:
        if timestamp >= 0 and (not self._ts or timestamp > self._ts[-1]):
            self._ts.append(timestamp)
            self._rel.append(offset - self.base_offset)

    def lookup_before(self, timestamp: int) -> int | None:
        """Offset of the last entry whose timestamp is < ``timestamp``: every record up to the
        point that entry was written has a smaller timestamp, so a search may start there."""
        i = bisect_right(self._ts, timestamp - 1)
        return self.base_offset + self._rel[i - 1] if i else None

    def truncate_to(self, offset: int) -> None:
        rel = offset - self.base_offset
        i = len(self._rel)
        while i and self._rel[i - 1] >= rel:
            i -= 1
        if i < len(self._rel):
            del self._ts[i:]
            del self._rel[i:]
            self._written = min(self._written, i)
            if os.path.exists(self.path):
                os.truncate(self.path, i * self.ENTRY_SIZE)

    def write_pending(self) -> None:
        n = len(self._ts)
        if self._written == n:
            return
        out = bytearray()
        for i in range(self._written, n):
            out += self._ts[i].to_bytes(8, "big", signed=True)
            out += self._rel[i].to_bytes(4, "big", signed=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            _write_all(fd, out, self._written * self.ENTRY_SIZE)
        finally:
            os.close(fd)
        self._written = n

    def flush(self) -> None:
        self.write_pending()
        _fsync_path(self.path)


def _fsync_path(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:  # the segment was deleted meanwhile
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
