"""Durable quorum state, log and snapshot in SQLite (through aiosqlite).

WAL journal with ``synchronous=FULL``: a committed transaction is fsync'd before
``apply`` returns, and the driver sends nothing that depends on a Ready until then. Each
Ready's ops go in one transaction, so a crash leaves either all of them or none.

Layout (one file, ``<metadata.log.dir>/__cluster_metadata-0/raft.db``):
  quorum_state(k=0, epoch, voted_for, leader_id)      -- KIP-595 quorum-state
  entries(offset PK, epoch, timestamp_ms, control, data, crc)
  snapshot(k=0, end_offset, epoch, records, crc)       -- records length-prefixed

SQLite keeps no checksums of its pages: a block of the file that goes bad under a row changes
the row silently. So every entry and the snapshot carry a CRC32C (as each batch of Kafka's
``__cluster_metadata`` log does), checked on ``open``: a mismatch is ``CorruptMetadataLogError``
(an EIO naming the file and the offset), and the node does not start with a changed record.
Rows written before the column existed (NULL) are not checked.
"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Sequence

import aiosqlite
from crc32c import crc32c

from raft.api import Snapshot
from raft.core import Append, QuorumState, SaveSnapshot, SaveState, Truncate
from raft.messages import Entry

_SCHEMA = """
CREATE TABLE IF NOT EXISTS quorum_state (k INTEGER PRIMARY KEY CHECK (k = 0), epoch INTEGER NOT NULL,
    voted_for INTEGER, leader_id INTEGER);
CREATE TABLE IF NOT EXISTS entries (offset INTEGER PRIMARY KEY, epoch INTEGER NOT NULL,
    timestamp_ms INTEGER NOT NULL, control INTEGER NOT NULL, data BLOB NOT NULL, crc INTEGER);
CREATE TABLE IF NOT EXISTS snapshot (k INTEGER PRIMARY KEY CHECK (k = 0), end_offset INTEGER NOT NULL,
    epoch INTEGER NOT NULL, records BLOB NOT NULL, crc INTEGER);
"""

_ENTRY_HEAD = struct.Struct(">qq?")  # epoch, timestamp, control: covered by the CRC with the data


class CorruptMetadataLogError(OSError):
    """A stored entry or snapshot does not match its CRC (a bad block under the file)."""


def entry_crc(e: Entry) -> int:
    """CRC32C of an entry: its epoch, timestamp, control flag and data."""
    return crc32c(e.data, crc32c(_ENTRY_HEAD.pack(e.epoch, e.timestamp_ms, e.control)))


def snapshot_crc(end_offset: int, epoch: int, records: bytes) -> int:
    return crc32c(records, crc32c(struct.pack(">qi", end_offset, epoch)))


def check_entry(path: str, offset: int, e: Entry, crc: int | None) -> None:
    """``CorruptMetadataLogError`` unless ``e`` matches its stored ``crc`` (None: not stored)."""
    if crc is not None and entry_crc(e) != crc:
        raise CorruptMetadataLogError(errno.EIO, f"metadata log {path}: the entry at offset {offset} does not match "
                                                 f"its CRC (a corrupt block); the node cannot start with it. Move "
                                                 f"this broker's metadata log directory away to have it fetched "
                                                 f"again from the controllers")


def encode_records(records: Sequence[bytes]) -> bytes:
    return b"".join(struct.pack(">I", len(r)) + r for r in records)


def decode_records(blob: bytes) -> tuple[bytes, ...]:
    out, i = [], 0
    while i < len(blob):
        (n,) = struct.unpack_from(">I", blob, i)
        out.append(bytes(blob[i + 4:i + 4 + n]))
        i += 4 + n
    return tuple(out)


class SqliteStore:
    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.path = os.path.join(directory, "raft.db")
        self._db: aiosqlite.Connection | None = None

    async def open(self) -> tuple[QuorumState, Snapshot | None, list[Entry]]:
        os.makedirs(self.directory, exist_ok=True)
        self._db = await aiosqlite.connect(self.path, isolation_level=None)
        await self._db.execute("PRAGMA journal_mode=WAL")
        await self._db.execute("PRAGMA synchronous=FULL")
        await self._db.executescript(_SCHEMA)
        for table in ("entries", "snapshot"):  # (files from before the CRC column)
            async with self._db.execute(f"PRAGMA table_info({table})") as cur:
                if "crc" not in [row[1] for row in await cur.fetchall()]:
                    await self._db.execute(f"ALTER TABLE {table} ADD COLUMN crc INTEGER")
        state = QuorumState()
        async with self._db.execute("SELECT epoch, voted_for, leader_id FROM quorum_state WHERE k = 0") as cur:
            row = await cur.fetchone()
            if row:
                state = QuorumState(row[0], row[1], row[2])
        snap = None
        async with self._db.execute("SELECT end_offset, epoch, records, crc FROM snapshot WHERE k = 0") as cur:
            row = await cur.fetchone()
            if row:
                if row[3] is not None and snapshot_crc(row[0], row[1], row[2]) != row[3]:
                    raise CorruptMetadataLogError(errno.EIO, f"metadata log {self.path}: the snapshot at offset "
                                                             f"{row[0]} does not match its CRC (a corrupt block)")
                snap = Snapshot(row[0], row[1], decode_records(row[2]))
        start = snap.end_offset if snap else 0
        entries: list[Entry] = []
        async with self._db.execute(
                "SELECT offset, epoch, timestamp_ms, control, data, crc FROM entries WHERE offset >= ? ORDER BY offset",
                (start,)) as cur:
            while rows := await cur.fetchmany(10_000):  # (a thread hop per row made a restart slow)
                if rows[0][0] != start + len(entries) or rows[-1][0] != start + len(entries) + len(rows) - 1:
                    raise RuntimeError(f"metadata log {self.path} has a gap after offset {start + len(entries)}; "
                                       "the file is corrupt")
                for off, epoch, ts, control, data, crc in rows:
                    e = Entry(epoch, ts, data, bool(control))
                    check_entry(self.path, off, e, crc)
                    entries.append(e)
        return state, snap, entries

    async def apply(self, ops) -> None:
        """Make ``ops`` durable, atomically, before returning."""
        if not ops:
            return
        db = self._db
        await db.execute("BEGIN IMMEDIATE")
        try:
            for op in ops:
                if isinstance(op, Truncate):
                    await db.execute("DELETE FROM entries WHERE offset >= ?", (op.offset,))
                elif isinstance(op, Append):
                    await db.executemany(
                        "INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?, ?, ?)",
                        [(op.base_offset + i, e.epoch, e.timestamp_ms, int(e.control), e.data, entry_crc(e))
                         for i, e in enumerate(op.entries)])
                elif isinstance(op, SaveState):
                    s = op.state
                    await db.execute("INSERT OR REPLACE INTO quorum_state VALUES (0, ?, ?, ?)",
                                     (s.epoch, s.voted_for, s.leader_id))
                elif isinstance(op, SaveSnapshot):
                    s = op.snapshot
                    records = encode_records(s.records)
                    await db.execute("INSERT OR REPLACE INTO snapshot VALUES (0, ?, ?, ?, ?)",
                                     (s.end_offset, s.epoch, records, snapshot_crc(s.end_offset, s.epoch, records)))
                    await db.execute("DELETE FROM entries WHERE offset < ?", (s.end_offset,))
                else:
                    raise TypeError(f"unknown persistence op {op!r}")
            await db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                await db.execute("ROLLBACK")
            raise

    async def close(self) -> None:
        if self._db is not None:
            await self._db.close()
            self._db = None
