"""A model of one partition's ``Log`` with the operations replication uses, on a simulated disk.

This is a copy of the log's rules, not broker/log itself (issue 22 replaces the copies with
the real code). It is kept close to the bytes: every record is a real v2 batch of one
record ``(leader epoch, value)`` written to segment files of a ``sim.disk.SimDisk``, which
loses what was not fsynced at a power cut, can tear the tail of the file written last even
after a clean shutdown, and can corrupt blocks. Batches are checked with the product's own
``batch_problem`` and CRC32C, and opening a log follows ``Log.open``'s rules:

- durability follows Kafka's default (never fsync on append): the OS writes dirty pages
  back now and then (``writeback()``, which also checkpoints the recovery point); with
  ``krafty_fsyncs`` a rolled segment is fsynced (krafty's flush_check) and so is a
  truncation (``Log.truncate_to``); a clean close fsyncs everything, then writes the
  clean-shutdown marker;
- open after a clean shutdown: each closed segment's tail (the batch at its last index
  entry) is framing-checked, the last segment's tail also CRC-checked; open after a crash:
  segments from the recovery point on are CRC-scanned whole, cut at the first bad batch and
  the later ones dropped. A torn tail of the last segment is cut after its last valid batch;
  a flushed segment that fails its check keeps its bytes and its first bad batch is
  remembered as damage;
- reads check the framing of every batch they return and the CRC of the first: a batch that
  does not parse is remembered as damage and raises ``SimCorruptBatch``.

The in-memory ``records`` list is what the replica can read: a record whose batch was
damaged reads as value ``None``. The index is dense (one entry per batch) and written
when a segment is rolled or closed, as krafty's is.
"""

from __future__ import annotations

import struct

from crc32c import crc32c

from broker.log.batch import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    Record,
    build_batch,
    decode_records,
    unpack_header,
)
from broker.log.leader_epoch import LeaderEpochCache
from broker.log.segment import batch_problem
from sim.disk import SimDisk

SEGMENT_RECORDS = 12  # a segment rolls after this many batches
MARKER = ".kafka_cleanshutdown"
RECOVERY_POINT = "recovery-point-offset-checkpoint"


class SimCorruptBatch(Exception):
    def __init__(self, offset: int, reason: str):
        super().__init__(f"offset {offset}: {reason}")
        self.offset = offset


def encode(offset: int, epoch: int, value: int) -> bytes:
    return bytes(build_batch([Record(offset, 0, None, b"%d" % value, [])], partition_leader_epoch=epoch))


def check(buf: bytes, pos: int, expected: int, base: int, crc: bool) -> tuple[object | None, str | None]:
    """(header, problem) of the batch at ``pos`` of a segment file's bytes ``buf``."""
    if pos + HEADER_SIZE > len(buf):
        return None, "not a whole batch header"
    h = unpack_header(buf, pos)
    problem = batch_problem(h, len(buf) - pos, expected, base)
    if problem is None and crc and crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET:pos + h.size]) != h.crc:
        problem = "CRC32C mismatch"
    return h, problem


class _Segment:
    __slots__ = ("base", "name", "positions")

    def __init__(self, base: int, name: str, positions: list[int] | None = None):
        self.base = base
        self.name = name
        self.positions = positions if positions is not None else []  # file position of each batch


class SimLog:
    def __init__(self, disk: SimDisk | None = None, prefix: str = "t-0/", krafty_fsyncs: bool = True) -> None:
        self.disk = disk or SimDisk()
        self.prefix = prefix
        self.krafty_fsyncs = krafty_fsyncs
        self.recovery_point = 0  # everything below is on the medium (checkpointed)
        self.log_start_offset = 0
        self.records: list[tuple[int, int | None]] = []  # index = offset - log_start_offset
        self.leader_epoch_cache = LeaderEpochCache(None)
        # the epoch cache checkpoint is written (fsynced) on every change in Kafka; model it
        # as durable, recovery trims it to the log end
        self.segments: list[_Segment] = []
        self.damaged_offset: int | None = None  # the lowest batch known not to parse
        self._roll(0)

    # --- files ------------------------------------------------------------------------------
    def _name(self, base: int, suffix: str) -> str:
        return f"{self.prefix}{base:020d}{suffix}"

    def _roll(self, base: int) -> None:
        if self.segments:
            self._seal(self.segments[-1], fsync=self.krafty_fsyncs)
            if self.krafty_fsyncs:
                self._checkpoint(base)
        self.segments.append(_Segment(base, self._name(base, ".log")))
        self.disk.open(self.segments[-1].name)

    def _checkpoint(self, offset: int) -> None:
        self.recovery_point = offset
        f = self.disk.open(self.prefix + RECOVERY_POINT)
        f.truncate(0)
        f.pwrite(b"%d" % offset, 0)
        f.fsync()

    def _seal(self, seg: _Segment, fsync: bool) -> None:
        """Roll or close: the index is written (and fsynced, as krafty's flush does)."""
        if fsync:
            self.disk.open(seg.name).fsync()
        idx = self.disk.open(self._name(seg.base, ".index"))
        idx.truncate(0)
        idx.pwrite(b"".join(struct.pack(">i", p) for p in seg.positions), 0)
        idx.fsync()

    @property
    def log_end_offset(self) -> int:
        return self.log_start_offset + len(self.records)

    # --- appends ----------------------------------------------------------------------------
    def _append(self, epoch: int, value: int) -> int:
        offset = self.log_end_offset
        seg = self.segments[-1]
        if len(seg.positions) >= SEGMENT_RECORDS:
            self._roll(offset)
            seg = self.segments[-1]
        f = self.disk.open(seg.name)
        seg.positions.append(f.size)
        self.disk.write(seg.name, encode(offset, epoch, value), f.size)
        self.records.append((epoch, value))
        return offset

    def append_as_leader(self, epoch: int, value: int) -> int:
        offset = self.log_end_offset
        self.leader_epoch_cache.assign(epoch, offset)
        return self._append(epoch, value)

    def append_as_follower(self, first_offset: int, records: list[tuple[int, int]]) -> None:
        if first_offset != self.log_end_offset:
            raise ValueError(f"append at {first_offset} does not continue log end {self.log_end_offset}")
        for i, (epoch, value) in enumerate(records):
            self.leader_epoch_cache.assign(epoch, first_offset + i)
            self._append(epoch, value)

    # --- reads ------------------------------------------------------------------------------
    def get(self, offset: int) -> tuple[int, int | None] | None:
        i = offset - self.log_start_offset
        if 0 <= i < len(self.records):
            return self.records[i]
        return None

    def value_at(self, offset: int) -> int | None:
        r = self.get(offset)
        return r[1] if r is not None else None

    def _locate(self, offset: int) -> tuple[_Segment, int]:
        for seg in reversed(self.segments):
            if seg.base <= offset:
                return seg, offset - seg.base
        raise IndexError(offset)

    def read(self, offset: int, max_records: int) -> list[tuple[int, int]]:
        """Records from ``offset`` through the files: the framing of each batch and the CRC of
        the first are checked (as ``Log.read``); a batch that does not parse is remembered and
        raises ``SimCorruptBatch`` when the read starts at it, else ends the read before it."""
        end = min(offset + max_records, self.log_end_offset)
        d = self.damaged_offset
        if d is not None:
            seg_end = next((s.base for s in self.segments if s.base > d), self.log_end_offset)
            if d <= offset < seg_end:  # from the damage to the end of its segment: unreadable (Log.read)
                raise SimCorruptBatch(d, "known damage")
            if offset < d:
                end = min(end, d)
        i = offset - self.log_start_offset
        out = self.records[i:i + max(end - offset, 0)]
        o = offset
        while o < offset + len(out):
            seg, k = self._locate(o)
            f = self.disk.open(seg.name)
            n = min(len(seg.positions) - k, offset + len(out) - o)
            if n <= 0:
                break
            if f.damaged:  # only a file corrupt() touched can fail (saves the simulator the work)
                buf = bytes(f.data)
                for j in range(k, k + n):
                    _h, problem = check(buf, seg.positions[j], seg.base + j, seg.base, crc=(seg.base + j == offset))
                    if problem is not None:
                        self._damage(seg.base + j)
                        if seg.base + j == offset:
                            raise SimCorruptBatch(offset, problem)
                        return out[:seg.base + j - offset]
            o += n
        return out

    def _damage(self, offset: int) -> None:
        if self.damaged_offset is None or offset < self.damaged_offset:
            self.damaged_offset = offset

    # --- truncation ---------------------------------------------------------------------------
    def truncate_to(self, offset: int) -> None:
        if offset >= self.log_end_offset:
            # as Kafka: drop an epoch entry that starts at the log end with no records
            self.leader_epoch_cache.truncate_from_end(offset)
            return
        if offset < self.log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return
        while len(self.segments) > 1 and self.segments[-1].base >= offset:
            seg = self.segments.pop()
            self.disk.remove(seg.name)
            self.disk.remove(self._name(seg.base, ".index"))
        seg = self.segments[-1]
        k = max(offset - seg.base, 0)
        if k < len(seg.positions):
            f = self.disk.open(seg.name)
            f.truncate(seg.positions[k])
            if self.krafty_fsyncs:
                f.fsync()  # divergent data must not come back after a crash (Log.truncate_to)
            else:
                del f.durable[seg.positions[k]:]
            del seg.positions[k:]
        del self.records[offset - self.log_start_offset:]
        if offset < self.recovery_point:
            self._checkpoint(offset)  # the next flush_check does (Kafka: truncateTo)
        if self.damaged_offset is not None and self.damaged_offset >= offset:
            self.damaged_offset = None
        self.leader_epoch_cache.truncate_from_end(offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        for seg in self.segments:
            self.disk.remove(seg.name)
            self.disk.remove(self._name(seg.base, ".index"))
        self.segments = []
        self.records = []
        self.log_start_offset = offset
        self.damaged_offset = None
        self.leader_epoch_cache.clear()
        self._roll(offset)
        self._checkpoint(offset)

    # --- durability -----------------------------------------------------------------------------
    def writeback(self) -> None:
        """The OS wrote the dirty pages back (and a flush checkpointed the recovery point)."""
        self.disk.fsync_all()
        self._checkpoint(self.log_end_offset)

    def close(self) -> None:
        """Clean shutdown: everything fsynced, the recovery point checkpointed, then the marker."""
        self._seal(self.segments[-1], fsync=True)
        self.disk.fsync_all()
        self._checkpoint(self.log_end_offset)
        self.disk.open(self.prefix + MARKER).fsync()

    def reopen(self) -> list[tuple[int, int]]:
        """Open the log again from its files, as ``Log.open`` does after a restart (the disk
        may have lost or damaged data meanwhile). Returns the (offset, value) pairs it held
        before and no longer does."""
        before = {self.log_start_offset + i: v for i, (_e, v) in enumerate(self.records)}
        self.open()
        return [(o, v) for o, v in before.items() if v is not None and self.value_at(o) != v]

    def valid_end(self) -> int:
        """The end of the run of complete valid batches from the start of the log's files, by
        an independent scan (each batch framing- and CRC-checked, each segment continuing the
        one before): recovery must never leave the log end below it."""
        bases = sorted(int(n[len(self.prefix):-4]) for n in self.disk.names(self.prefix) if n.endswith(".log"))
        expected = bases[0] if bases else self.log_start_offset
        for i, base in enumerate(bases):
            if base != expected and i:
                break  # the segment before ended early: the run stops there
            buf = bytes(self.disk.open(self._name(base, ".log")).data)
            pos = 0
            while pos < len(buf):
                h, problem = check(buf, pos, expected, base, crc=True)
                if problem is not None:
                    return expected
                pos += h.size
                expected = h.base_offset + h.last_offset_delta + 1
        return expected

    # --- opening ------------------------------------------------------------------------------
    def open(self) -> None:
        clean = self.disk.exists(self.prefix + MARKER)
        self.disk.remove(self.prefix + MARKER)
        rp_file = self.prefix + RECOVERY_POINT
        rp = int(self.disk.open(rp_file).data or b"0") if self.disk.exists(rp_file) else 0
        bases = sorted(int(n[len(self.prefix):-4]) for n in self.disk.names(self.prefix) if n.endswith(".log"))
        old_start = self.log_start_offset
        self.segments, self.records, self.damaged_offset = [], [], None
        self.log_start_offset = bases[0] if bases else old_start
        for i, base in enumerate(bases):
            last = i == len(bases) - 1
            seg = _Segment(base, self._name(base, ".log"))
            if clean or (not last and bases[i + 1] <= rp):
                self._open_flushed(seg, last)
            elif self._recover(seg, truncate=True) or (not last and base + len(seg.positions) < bases[i + 1]):
                # (a closed segment that ends early lost its unsynced tail: what follows it cannot be kept)
                for later in bases[i + 1:]:  # anything after a torn or corrupt batch is not trusted
                    self.disk.remove(self._name(later, ".log"))
                    self.disk.remove(self._name(later, ".index"))
                bases = bases[:i + 1]
                last = True
            self.segments.append(seg)
            values = self._values(seg)
            if not last:  # a closed segment cut short by damage still ends at the next one's base
                n = bases[i + 1] - self.log_end_offset
                values = (values + [(-1, None)] * n)[:n]
            self.records.extend(values)
            if last:
                break
        if not self.segments:
            self._roll(self.log_start_offset)
        self.recovery_point = min(rp, self.log_end_offset)
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)

    def _index(self, base: int) -> list[int] | None:
        name = self._name(base, ".index")
        if not self.disk.exists(name):
            return None
        raw = self.disk.open(name).data
        return [struct.unpack_from(">i", raw, i)[0] for i in range(0, len(raw) - len(raw) % 4, 4)]

    def _open_flushed(self, seg: _Segment, last: bool) -> None:
        """The tail from the last index entry is checked (its CRC too for the last segment);
        a failure means a scan of the whole segment, truncating only the last one."""
        buf = bytes(self.disk.open(seg.name).data)
        positions = self._index(seg.base)
        if positions:
            k = len(positions) - 1
            h, problem = check(buf, positions[k], seg.base + k, seg.base, crc=last)
            if problem is None and positions[k] + h.size == len(buf):
                seg.positions = positions
                return
        self._recover(seg, truncate=last)

    def _recover(self, seg: _Segment, truncate: bool) -> bool:
        """CRC-scan the whole segment; returns whether it was cut."""
        f = self.disk.open(seg.name)
        buf = bytes(f.data)
        pos, expected = 0, seg.base
        while pos < len(buf):
            h, problem = check(buf, pos, expected, seg.base, crc=True)
            if problem is not None:
                break
            seg.positions.append(pos)
            pos += h.size
            expected = h.base_offset + h.last_offset_delta + 1
        if pos < len(buf):
            if truncate:
                f.truncate(pos)
                f.fsync()
                return True
            self._damage(expected)  # flushed data that went bad: kept, reads report it
        return False

    def _values(self, seg: _Segment) -> list[tuple[int, int | None]]:
        """What each batch of the segment holds; None where it does not decode."""
        buf = bytes(self.disk.open(seg.name).data)
        out: list[tuple[int, int | None]] = []
        for j, p in enumerate(seg.positions):
            h, problem = check(buf, p, seg.base + j, seg.base, crc=True)
            if problem is not None:
                out.append((-1, None))
                continue
            rec = decode_records(buf[p:p + h.size])[0]
            out.append((h.partition_leader_epoch, int(rec.value)))
        return out

    # --- faults ---------------------------------------------------------------------------------
    def corrupt_closed_batch(self, rng) -> tuple[int, int] | None:
        """A bad block in a closed (fsynced) segment: one batch's length overwritten or one of
        its bytes flipped. Returns (offset, value) of the record it takes, or None."""
        closed = [s for s in self.segments[:-1] if s.positions]
        if not closed:
            return None
        seg = rng.choice(closed)
        j = rng.randrange(len(seg.positions))
        o = seg.base + j
        pos = seg.positions[j]
        if rng.random() < 0.5:
            self.disk.corrupt(seg.name, pos + 8, struct.pack(">i", rng.choice((0, 7, 2**31 - 1, 1000))))
        else:
            f = self.disk.open(seg.name)
            end = seg.positions[j + 1] if j + 1 < len(seg.positions) else f.size
            p = rng.randrange(pos + ATTRIBUTES_OFFSET, end)
            self.disk.corrupt(seg.name, p, bytes([f.data[p] ^ (1 << rng.randrange(8))]))
        r = self.get(o)
        if r is None or r[1] is None:
            return None
        self.records[o - self.log_start_offset] = (r[0], None)  # no longer readable on this replica
        return o, r[1]
