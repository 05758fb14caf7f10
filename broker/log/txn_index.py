"""The aborted transaction index of one segment: ``<base>.txnindex``, in Kafka's format.

One 34-byte entry (big-endian) per transaction whose ABORT marker is in the segment, in the
order the markers were appended (Kafka's TransactionIndex / AbortedTxn)::

    version int16 (0) | producerId int64 | firstOffset int64 | lastOffset int64 | lastStableOffset int64

``firstOffset`` is the transaction's first offset on this partition (possibly in an earlier
segment), ``lastOffset`` the marker's offset, ``lastStableOffset`` the LSO when the marker was
written: the first offset of the earliest transaction of another producer still open then (or
the offset after the marker). A read_committed fetch uses it to stop searching: once an entry
with ``lastStableOffset >= upper bound`` is found, every transaction that started before the
upper bound has completed, so no later segment can hold one of them.

The file is created on the first entry (most segments have none), written with pwrite at its
end and fsynced by the segment's flush. The entries are few; they are kept in memory.
"""

from __future__ import annotations

import dataclasses
import os
import struct

from . import fileio as fio
from .index import _fsync_path, _write_all

TXNINDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
CURRENT_VERSION = 0


@dataclasses.dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class CorruptTxnIndexError(Exception):
    pass


_NONE: tuple = ()  # the entries of every index without any (most): shared, replaced on the first append


class TransactionIndex:
    __slots__ = ("_prefix", "base_offset", "entries", "_written", "_detached", "_exists")

    def __init__(self, prefix: str, base_offset: int):
        self._prefix = prefix  # the segment's path without a suffix (shared with it)
        self.base_offset = base_offset
        self.entries: list[AbortedTxn] | tuple = _NONE
        self._written = 0  # entries on file
        self._detached = False  # its segment was deleted or replaced: the path is not ours any more
        self._exists = False

    @property
    def path(self) -> str:
        return self._prefix + TXNINDEX_SUFFIX

    def __len__(self) -> int:
        return len(self.entries)

    def load(self) -> None:
        """Read the file (if any). A partial trailing entry (a torn append) is cut off and
        CorruptTxnIndexError raised, as for entries that do not belong to the segment: the
        caller rebuilds the index from the log."""
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            self.entries, self._written, self._exists = _NONE, 0, False
            return
        self._exists = True
        whole = len(data) - len(data) % ENTRY_SIZE
        entries = []
        problem = None
        last = None
        for pos in range(0, whole, ENTRY_SIZE):
            version, pid, first, lastoff, lso = _ENTRY.unpack_from(data, pos)
            if version != CURRENT_VERSION:
                problem = f"entry {pos // ENTRY_SIZE} has version {version}"
                break
            if lastoff < self.base_offset or (last is not None and lastoff <= last):
                problem = f"entry {pos // ENTRY_SIZE} (last offset {lastoff}) is out of place"
                break
            entries.append(AbortedTxn(pid, first, lastoff, lso))
            last = lastoff
        self.entries = entries
        self._written = len(entries)
        if problem is None and whole != len(data):
            problem = f"{len(data) - whole} trailing bytes are not a whole entry"
        if problem is not None:
            self._truncate_file(len(entries))
            raise CorruptTxnIndexError(f"{self.path}: {problem}")

    @property
    def last_offset(self) -> int | None:
        return self.entries[-1].last_offset if self.entries else None

    def append(self, txn: AbortedTxn) -> None:
        last = self.last_offset
        if last is not None and txn.last_offset <= last:
            raise ValueError(f"{self.path}: aborted transaction at {txn.last_offset} is not after {last}")
        if not self.entries:
            self.entries = []
        self.entries.append(txn)
        self._write_pending()

    def detach(self) -> None:
        """Never write the file at ``path`` again (another segment's index may be there now);
        the entries stay readable in memory. delete() still unlinks it (the segment's own delete)."""
        self._detached = True

    def _write_pending(self) -> None:
        if self._written >= len(self.entries) or self._detached:
            return
        data = b"".join(_ENTRY.pack(CURRENT_VERSION, t.producer_id, t.first_offset, t.last_offset,
                                    t.last_stable_offset) for t in self.entries[self._written:])
        fd = fio.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            _write_all(fd, data, self._written * ENTRY_SIZE)
        finally:
            fio.close(fd)
        self._exists = True
        self._written = len(self.entries)

    def truncate_to(self, offset: int) -> None:
        """Remove the entries of markers at or after ``offset``."""
        keep = [t for t in self.entries if t.last_offset < offset]
        if len(keep) != len(self.entries):
            self.entries = keep
            self._truncate_file(len(keep))

    def reset(self) -> None:
        self.entries = _NONE
        self._truncate_file(0)

    def replace(self, entries: list[AbortedTxn]) -> None:
        self.reset()
        for t in entries:
            self.append(t)

    def _truncate_file(self, n: int) -> None:
        self._written = min(self._written, n)
        if n == 0:
            if not self._detached:
                self.delete()  # whether or not it was loaded: a new first entry is written at byte 0
            return
        if not self._exists or self._detached:
            return
        try:
            fio.truncate(self.path, n * ENTRY_SIZE)
        except FileNotFoundError:
            self._exists = False

    def flush(self) -> None:
        self._write_pending()  # entries an earlier write failed to store
        if self._exists and not self._detached:
            _fsync_path(self.path)

    def delete(self) -> None:
        self._exists = False
        self._written = 0
        try:
            fio.unlink(self.path)
        except FileNotFoundError:
            pass

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping [fetch_offset, upper_bound), and whether the search is complete
        (an entry's LSO reached the upper bound: later segments cannot add one)."""
        out = []
        for t in self.entries:
            if t.last_offset >= fetch_offset and t.first_offset < upper_bound:
                out.append(t)
            if t.last_stable_offset >= upper_bound:
                return out, True
        return out, False
