"""The Raft store of a simulated node (raft/store.py's interface: ``open``, ``apply``, ``close``).

It outlives the process that uses it (the world keeps one per node), as a disk does. An
``apply`` is one transaction made durable by an fsync that takes a random time: a process
killed during it loses the whole transaction (SQLite's WAL commit is atomic), never part of
it. Every entry carries the CRC the real store keeps with it (raft/store.py ``entry_crc``):
``corrupt`` flips a byte of one stored entry (a bad block under its row), and ``open`` checks
each entry with the real store's ``check_entry``, which refuses a changed record. ``fail_next``
makes the next ``apply`` fail with that errno (EIO, ENOSPC) and change nothing.
"""

from __future__ import annotations

import asyncio
import os

from raft.api import Snapshot
from raft.core import Append, QuorumState, SaveSnapshot, SaveState, Truncate
from raft.messages import Entry
from raft.store import check_entry
from raft.store import entry_crc as _crc


class SimRaftStore:
    def __init__(self, rng, sync_s: tuple[float, float] = (0.0001, 0.002)):
        self.rng = rng
        self.sync_s = sync_s
        self.state = QuorumState()
        self.snapshot: Snapshot | None = None
        self.log_start = 0
        self.entries: list[tuple[Entry, int]] = []  # (entry, crc)
        self.fail_next: int | None = None
        self.applies = 0

    async def open(self) -> tuple[QuorumState, Snapshot | None, list[Entry]]:
        for i, (e, crc) in enumerate(self.entries):
            check_entry("(simulated)", self.log_start + i, e, crc)
        return self.state, self.snapshot, [e for e, _ in self.entries]

    async def apply(self, ops) -> None:
        if not ops:
            return
        lo, hi = self.sync_s
        await asyncio.sleep(lo + (hi - lo) * self.rng.random())  # the fsync: a kill now loses the transaction
        if self.fail_next is not None:
            code, self.fail_next = self.fail_next, None
            raise OSError(code, os.strerror(code))
        for op in ops:
            if isinstance(op, Truncate):
                del self.entries[max(0, op.offset - self.log_start):]
            elif isinstance(op, Append):
                end = self.log_start + len(self.entries)
                if op.base_offset != end:
                    del self.entries[max(0, op.base_offset - self.log_start):]  # INSERT OR REPLACE over a tail
                    if op.base_offset > self.log_start + len(self.entries):
                        raise AssertionError(f"append at {op.base_offset} leaves a gap after {end}")
                self.entries.extend((e, _crc(e)) for e in op.entries)
            elif isinstance(op, SaveState):
                self.state = op.state
            elif isinstance(op, SaveSnapshot):
                s = op.snapshot
                drop = s.end_offset - self.log_start
                if drop >= len(self.entries):
                    self.entries = []
                elif drop > 0:
                    del self.entries[:drop]
                self.log_start = max(self.log_start, s.end_offset)
                self.snapshot = s
            else:
                raise TypeError(f"unknown persistence op {op!r}")
        self.applies += 1

    async def close(self) -> None:
        pass

    def corrupt(self, index: int) -> None:
        """A bad block under one entry: its bytes change, its stored CRC does not."""
        e, crc = self.entries[index]
        data = bytearray(e.data or b"\0")
        data[len(data) // 2] ^= 0x40
        self.entries[index] = (Entry(e.epoch, e.timestamp_ms, bytes(data), e.control), crc)
