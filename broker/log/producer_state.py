"""Idempotent producer state of one partition (Kafka's ProducerStateManager).

Per producer id: the epoch and the metadata of its last 5 batches (Kafka clients keep at
most 5 requests in flight per connection, so a retry is always one of these). Appends from
clients are checked: a retried batch is recognised as a duplicate and answered with the
offsets it got the first time; a stale epoch is fenced; a sequence gap is refused.

Snapshots (``<offset>.snapshot``, the state of all batches below ``offset``) make reopening
cheap: the state is loaded from the newest snapshot at or below the log end and the batch
headers after it are replayed. Our snapshot layout (not Kafka's)::

    magic b"KPS1" | crc32c uint32 of the rest | count int32 | entries:
      producerId int64, epoch int16, coordinatorEpoch int32, currentTxnFirstOffset int64,
      lastTimestamp int64, nBatches int8, nBatches x (firstSeq int32, lastSeq int32,
      firstOffset int64, lastOffset int64, timestamp int64)
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass, field

from crc32c import crc32c

from common.errors import ErrorCode, KafkaError

from .batch import BatchHeader

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOTS_TO_KEEP = 3  # older ones only help a deep truncation, which can replay the log instead
_SNAPSHOT_RE = re.compile(r"^(\d{20})\.snapshot$")
_MAGIC = b"KPS1"
_ENTRY = struct.Struct(">qhiqqb")
_BATCH = struct.Struct(">iiqqq")
_SEQ_MASK = 0x7FFFFFFF


@dataclass(slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int = NO_PRODUCER_EPOCH
    batches: list[BatchMetadata] = field(default_factory=list)
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1
    last_timestamp: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def copy(self) -> ProducerEntry:
        return ProducerEntry(self.producer_id, self.epoch, list(self.batches), self.coordinator_epoch,
                             self.current_txn_first_offset, self.last_timestamp)

    def find_duplicate(self, h: BatchHeader) -> BatchMetadata | None:
        if h.producer_epoch != self.epoch:
            return None
        first, last = h.base_sequence, h.last_sequence
        for b in self.batches:
            if b.first_seq == first and b.last_seq == last:
                return b
        return None

    def add_batch(self, epoch: int, h: BatchHeader) -> None:
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch
        self.batches.append(BatchMetadata(h.base_sequence, h.last_sequence, h.base_offset,
                                          h.base_offset + h.last_offset_delta, h.max_timestamp))
        if len(self.batches) > NUM_BATCHES_TO_RETAIN:
            del self.batches[0]
        self.last_timestamp = h.max_timestamp


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == ((last_seq + 1) & _SEQ_MASK)


class ProducerStateManager:
    # True: a producer without state must start at sequence 0 (stricter than Kafka 4.x, which
    # only demands that of transactional producers).
    reject_unknown_producer_sequence = False

    def __init__(self, dir: str | None):
        self.dir = dir
        self.producers: dict[int, ProducerEntry] = {}
        self.map_end_offset = 0  # the state covers the batches below this offset

    # --- checks on append ---------------------------------------------------------------
    def check_client_batches(self, headers: list[BatchHeader]) -> tuple[dict[int, ProducerEntry],
                                                                         BatchMetadata | None]:
        """Validate the producer batches of one client append (offsets already assigned).

        Returns ``(staged, duplicate)``: the updated entries to commit after the write, or
        the metadata of the original batch when the append is a retry. Raises KafkaError.
        """
        staged: dict[int, ProducerEntry] = {}
        for h in headers:
            pid = h.producer_id
            if pid < 0:
                continue
            entry = staged.get(pid)
            if entry is None:
                current = self.producers.get(pid)
                entry = current.copy() if current is not None else ProducerEntry(pid)
                staged[pid] = entry
            dup = entry.find_duplicate(h)
            if dup is not None:
                return {}, dup
            epoch = h.producer_epoch
            if epoch < entry.epoch:
                raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH,
                                 f"producer {pid} epoch {epoch} is older than the current epoch {entry.epoch}")
            seq = h.base_sequence
            if epoch != entry.epoch or not entry.batches:
                # Kafka (ProducerAppendInfo.checkSequence) accepts any sequence from a producer it
                # has no state for (its records may have gone with retention or DeleteRecords),
                # except from a transactional producer; a known producer's new epoch starts at 0.
                unknown = entry.epoch == NO_PRODUCER_EPOCH
                if seq != 0 and (not unknown or h.is_transactional or self.reject_unknown_producer_sequence):
                    raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                     f"producer {pid} epoch {epoch}: expected sequence 0, got {seq}")
            elif not _in_sequence(entry.last_seq, seq):
                raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                 f"producer {pid} epoch {epoch}: expected sequence "
                                 f"{(entry.last_seq + 1) & _SEQ_MASK}, got {seq}")
            entry.add_batch(epoch, h)
            self._track_txn(entry, h)
        return staged, None

    def commit(self, staged: dict[int, ProducerEntry], end_offset: int) -> None:
        self.producers.update(staged)
        self.map_end_offset = end_offset

    def update_unchecked(self, headers: list[BatchHeader]) -> None:
        """Apply batches that are already in the log (replication, rebuild): no checks."""
        for h in headers:
            self.apply_batch(h)

    def apply_batch(self, h: BatchHeader) -> None:
        pid = h.producer_id
        if pid >= 0:
            entry = self.producers.get(pid)
            if entry is None:
                entry = self.producers[pid] = ProducerEntry(pid)
            if h.is_control:
                entry.current_txn_first_offset = -1
                if h.producer_epoch > entry.epoch:
                    entry.epoch = h.producer_epoch
                    entry.batches.clear()
            elif h.base_sequence >= 0:
                entry.add_batch(h.producer_epoch, h)
                self._track_txn(entry, h)
        self.map_end_offset = h.base_offset + h.last_offset_delta + 1

    @staticmethod
    def _track_txn(entry: ProducerEntry, h: BatchHeader) -> None:
        if h.is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = h.base_offset

    # --- housekeeping -------------------------------------------------------------------
    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for longer than producer.id.expiration.ms (no open txn)."""
        dead = [pid for pid, e in self.producers.items()
                if e.current_txn_first_offset < 0 and e.last_timestamp >= 0
                and now_ms - e.last_timestamp >= expiration_ms]
        for pid in dead:
            del self.producers[pid]
        return len(dead)

    def truncate_and_reload(self, end_offset: int) -> int:
        """Forget everything at or above ``end_offset``; load the newest usable snapshot and
        return the offset from which the caller must replay the log."""
        self.delete_snapshots_after(end_offset)
        return self.load_latest_snapshot(end_offset)

    def reset(self) -> None:
        self.producers.clear()
        self.map_end_offset = 0

    # --- snapshots ----------------------------------------------------------------------
    def snapshot_offsets(self) -> list[int]:
        if not self.dir:
            return []
        out = []
        for name in os.listdir(self.dir):
            m = _SNAPSHOT_RE.match(name)
            if m:
                out.append(int(m.group(1)))
        return sorted(out)

    def _snapshot_path(self, offset: int) -> str:
        assert self.dir
        return os.path.join(self.dir, f"{offset:020d}{SNAPSHOT_SUFFIX}")

    def take_snapshot(self, sync: bool = True) -> None:
        """Write the state as ``<map_end_offset>.snapshot``."""
        if not self.dir:
            return
        body = bytearray(struct.pack(">i", len(self.producers)))
        for e in self.producers.values():
            body += _ENTRY.pack(e.producer_id, e.epoch, e.coordinator_epoch, e.current_txn_first_offset,
                                e.last_timestamp, len(e.batches))
            for b in e.batches:
                body += _BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp)
        data = _MAGIC + struct.pack(">I", crc32c(body)) + body
        path = self._snapshot_path(self.map_end_offset)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
        for off in self.snapshot_offsets()[:-SNAPSHOTS_TO_KEEP]:
            os.unlink(self._snapshot_path(off))

    def load_latest_snapshot(self, max_offset: int) -> int:
        """Load the newest valid snapshot at or below ``max_offset`` (deleting corrupt ones);
        returns its offset, or 0 with an empty state if there is none."""
        for off in reversed(self.snapshot_offsets()):
            if off > max_offset:
                continue
            producers = self._read_snapshot(self._snapshot_path(off))
            if producers is None:
                os.unlink(self._snapshot_path(off))
                continue
            self.producers = producers
            self.map_end_offset = off
            return off
        self.reset()
        return 0

    @staticmethod
    def _read_snapshot(path: str) -> dict[int, ProducerEntry] | None:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            return None
        if len(data) < 12 or data[:4] != _MAGIC:
            return None
        (crc,) = struct.unpack_from(">I", data, 4)
        body = memoryview(data)[8:]
        if crc32c(body) != crc:
            return None
        try:
            (n,) = struct.unpack_from(">i", body, 0)
            pos = 4
            out: dict[int, ProducerEntry] = {}
            for _ in range(n):
                pid, epoch, ce, txn, ts, nb = _ENTRY.unpack_from(body, pos)
                pos += _ENTRY.size
                batches = []
                for _i in range(nb):
                    batches.append(BatchMetadata(*_BATCH.unpack_from(body, pos)))
                    pos += _BATCH.size
                out[pid] = ProducerEntry(pid, epoch, batches, ce, txn, ts)
        except struct.error:
            return None
        return out

    def delete_snapshots_after(self, offset: int) -> None:
        for off in self.snapshot_offsets():
            if off > offset:
                os.unlink(self._snapshot_path(off))

    def delete_snapshots_before(self, offset: int) -> None:
        """Delete snapshots below ``offset`` but always keep the newest one."""
        offs = self.snapshot_offsets()
        for off in offs[:-1]:
            if off < offset:
                os.unlink(self._snapshot_path(off))
