"""Producer state of one partition (Kafka's ProducerStateManager, ProducerAppendInfo,
ProducerStateEntry, TxnMetadata and VerificationStateEntry).

Per producer id: the epoch, the metadata of its last 5 batches (Kafka clients keep at most 5
requests in flight per connection, so a retry is always one of these), the coordinator epoch
of the last transaction marker and the first offset of its open transaction. Appends from
clients are checked: a retried batch is recognised as a duplicate and answered with the
offsets it got the first time; a stale epoch is fenced; a sequence gap is refused.

Transactions: a transactional batch of a producer without an open transaction starts one
(``ongoing``, by first offset); a COMMIT/ABORT marker (a control batch written by the
transaction coordinator through WriteTxnMarkers) ends it. A marker with an older producer
epoch is INVALID_PRODUCER_EPOCH, one from an older coordinator epoch
TRANSACTION_COORDINATOR_FENCED. A completed transaction stays *unstable* until the high
watermark passes its marker (``unreplicated``): the last stable offset (LSO) is the first
offset of the earliest unstable transaction, or the high watermark. KIP-890 part 1: before a
transactional batch may start a transaction, the leader checks with the coordinator that the
partition is part of it; ``maybe_start_verification`` hands out a guard for that check and
the append must present it. Any transactional append or marker of the producer clears the
guard, so a marker that lands between the check and the append makes the append fail
(INVALID_TXN_STATE) instead of leaving a hanging transaction.

Snapshots (``<offset>.snapshot``, the state of all batches below ``offset``) make reopening
cheap: the state is loaded from the newest snapshot at or below the log end and the batches
after it are replayed. Kafka's snapshot format, version 1 (one entry per producer, its last
batch only; all integers big-endian)::

    version int16 (1) | crc uint32 (CRC32C of everything after it) | count int32 | entries:
      producerId int64 | epoch int16 | lastSequence int32 | lastOffset int64 | offsetDelta int32 |
      timestamp int64 | coordinatorEpoch int32 | currentTxnFirstOffset int64 (-1: none)
"""

from __future__ import annotations

import logging
import os
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from crc32c import crc32c

from common.errors import ErrorCode, KafkaError

from . import fileio as fio
from .batch import BatchHeader, EndTxnMarker

log = logging.getLogger("krafty.log")

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOTS_TO_KEEP = 3  # older ones only help a deep truncation, which can replay the log instead
_SNAPSHOT_RE = re.compile(r"^(\d{20})\.snapshot$")
SNAPSHOT_VERSION = 1
_SNAP_HEADER = struct.Struct(">hI")
_ENTRY = struct.Struct(">qhiqiqiq")
_SEQ_MASK = 0x7FFFFFFF

# where an append comes from (Kafka's AppendOrigin): clients are fully checked, the coordinators'
# own writes (markers, transactional offset commits) have no sequences, replication is trusted
CLIENT = "client"
COORDINATOR = "coordinator"
REPLICATION = "replication"


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
        """Offset of the producer's last data record (-1: none known)."""
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

    def update_epoch(self, epoch: int) -> None:
        """Kafka's maybeUpdateProducerEpoch: a new epoch forgets the batches of the old one."""
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch

    def add_batch(self, epoch: int, h: BatchHeader) -> None:
        self.update_epoch(epoch)
        self.batches.append(BatchMetadata(h.base_sequence, h.last_sequence, h.base_offset,
                                          h.base_offset + h.last_offset_delta, h.max_timestamp))
        if len(self.batches) > NUM_BATCHES_TO_RETAIN:
            del self.batches[0]
        self.last_timestamp = h.max_timestamp

    def end_txn(self, epoch: int, marker: EndTxnMarker) -> None:
        self.update_epoch(epoch)
        self.coordinator_epoch = marker.coordinator_epoch
        self.last_timestamp = marker.timestamp
        self.current_txn_first_offset = -1


@dataclass(slots=True)
class TxnMetadata:
    producer_id: int
    first_offset: int
    last_offset: int = -1  # the marker's offset once completed


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool


class VerificationStateEntry:
    """KIP-890 part 1: one producer's verification in progress on this partition. ``guard`` is
    unique to it; the lowest sequence seen while verifying blocks higher ones from being
    written first (an out-of-order loop otherwise)."""

    __slots__ = ("timestamp", "guard", "lowest_sequence", "epoch", "supports_epoch_bump")

    def __init__(self, timestamp: int, sequence: int, epoch: int, supports_epoch_bump: bool):
        self.timestamp = timestamp
        self.guard = object()
        self.lowest_sequence = sequence
        self.epoch = epoch
        self.supports_epoch_bump = supports_epoch_bump

    def update(self, sequence: int, epoch: int) -> None:
        if epoch == self.epoch and sequence < self.lowest_sequence:
            self.lowest_sequence = sequence
        if epoch > self.epoch:
            self.epoch = epoch
            self.lowest_sequence = sequence


@dataclass(slots=True)
class StagedAppend:
    """The producer state one leader append would leave, computed before its write."""

    entries: dict[int, ProducerEntry] = field(default_factory=dict)
    started: list[TxnMetadata] = field(default_factory=list)
    completed: list[CompletedTxn] = field(default_factory=list)
    transactional: set[int] = field(default_factory=set)  # producers whose verification ends


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == ((last_seq + 1) & _SEQ_MASK)


class ProducerStateManager:
    # True: a producer without state must start at sequence 0 (stricter than Kafka 4.x, which
    # only demands that of transactional producers).
    reject_unknown_producer_sequence = False
    # one per partition: no instance dict
    __slots__ = ("dir", "producers", "map_end_offset", "ongoing", "unreplicated", "verification")

    def __init__(self, dir: str | None):
        self.dir = dir
        self.producers: dict[int, ProducerEntry] = {}
        self.map_end_offset = 0  # the state covers the batches below this offset
        # open transactions by first offset; transactions start in log order, so the dict's
        # order is the offset order and its first key the earliest
        self.ongoing: dict[int, TxnMetadata] = {}
        # completed transactions whose markers may still be at or above the high watermark
        self.unreplicated: dict[int, TxnMetadata] = {}
        self.verification: dict[int, VerificationStateEntry] = {}

    # --- transactions -------------------------------------------------------------------
    def has_ongoing_transaction(self, producer_id: int, epoch: int) -> bool:
        e = self.producers.get(producer_id)
        return e is not None and e.current_txn_first_offset >= 0 and e.epoch == epoch

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the earliest transaction that is open, or completed with its
        marker at or above ``high_watermark`` (those below it are forgotten here)."""
        un = self.unreplicated
        if un:
            for k in [k for k, t in un.items() if t.last_offset < high_watermark]:
                del un[k]
        first = next(iter(self.ongoing), None)
        if un:
            low = min(un)
            first = low if first is None or low < first else first
        return first

    def last_stable_offset(self, high_watermark: int) -> int:
        """LSO: read_committed consumers read below it. Never above the high watermark."""
        if not self.ongoing and not self.unreplicated:
            return high_watermark
        first = self.first_unstable_offset(high_watermark)
        return high_watermark if first is None or first > high_watermark else first

    def lso_for_completed(self, txn: CompletedTxn) -> int:
        """The LSO recorded with an aborted transaction in the transaction index: the first
        offset of the earliest open transaction of another producer, else after the marker."""
        for t in self.ongoing.values():
            if t.producer_id != txn.producer_id:
                return t.first_offset
        return txn.last_offset + 1

    def complete_txn(self, txn: CompletedTxn) -> None:
        meta = self.ongoing.pop(txn.first_offset, None) or TxnMetadata(txn.producer_id, txn.first_offset)
        meta.last_offset = txn.last_offset
        self.unreplicated[txn.first_offset] = meta

    # --- KIP-890 part 1 -----------------------------------------------------------------
    def maybe_start_verification(self, producer_id: int, sequence: int, epoch: int, now_ms: int,
                                 supports_epoch_bump: bool = False) -> object | None:
        """The guard a transactional append must present, after the coordinator confirmed the
        partition is in the producer's transaction; None when the producer already has an
        open transaction here in this epoch (nothing to verify)."""
        if self.has_ongoing_transaction(producer_id, epoch):
            return None
        v = self.verification.get(producer_id)
        if v is None:
            v = self.verification[producer_id] = VerificationStateEntry(now_ms, sequence, epoch, supports_epoch_bump)
        else:
            v.update(sequence, epoch)
        return v.guard

    def verification_guard(self, producer_id: int) -> object | None:
        v = self.verification.get(producer_id)
        return None if v is None else v.guard

    # --- checks on append ---------------------------------------------------------------
    def check_client_batches(self, headers: list[BatchHeader], *, origin: str = CLIENT,
                             marker_of: Callable[[BatchHeader], EndTxnMarker | None] | None = None,
                             verification_guard: object = None, require_verification: bool = False,
                             transaction_version: int = 0) -> tuple[StagedAppend, BatchMetadata | None]:
        """Validate the producer batches of one leader append (offsets already assigned).
        ``marker_of(header)``: the marker of a control batch.

        Returns ``(staged, duplicate)``: the state to commit after the write, or the metadata
        of the original batch when a client append is a retry. Raises KafkaError.
        """
        staged = StagedAppend()
        for h in headers:
            pid = h.producer_id
            if pid < 0:
                continue
            current = self.producers.get(pid)
            entry = staged.entries.get(pid)
            if entry is None:
                entry = current.copy() if current is not None else ProducerEntry(pid)
                staged.entries[pid] = entry
            if origin == CLIENT:
                dup = entry.find_duplicate(h)
                if dup is not None:
                    return StagedAppend(), dup
            epoch = h.producer_epoch
            if h.is_transactional and not h.is_control and not self.has_ongoing_transaction(pid, epoch):
                # Kafka's UnifiedLog.analyzeAndValidateProducerState: a batch that would start a
                # transaction must present the guard of a verification the coordinator confirmed
                if current is not None and epoch < current.epoch:
                    raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH,
                                     f"epoch of producer {pid} is {epoch}, which is smaller than the last seen "
                                     f"epoch {current.epoch}")
                if require_verification and (verification_guard is None
                                             or self.verification_guard(pid) is not verification_guard):
                    raise KafkaError(ErrorCode.INVALID_TXN_STATE, "Record was not part of an ongoing transaction")
            if h.is_control:
                marker = marker_of(h) if marker_of is not None else None
                if marker is not None:
                    done = self._end_txn(entry, h, marker, origin, transaction_version)
                    if done is not None:
                        staged.completed.append(done)
            else:
                self._append_data(entry, h, origin, staged)
            if h.is_transactional and not self._next_v2_transaction_started(h):
                staged.transactional.add(pid)
        return staged, None

    def _next_v2_transaction_started(self, h: BatchHeader) -> bool:
        """A marker that leaves the producer's verification in place (Kafka's UnifiedLog): with
        transaction version 2 the marker carries the bumped epoch, the one the producer's next
        transaction runs at, so a verification in that epoch is the next transaction's, started
        while this marker was on its way (its guard stays good); any other transactional batch
        ends the verification (the transaction is complete, or has its first offset)."""
        v = self.verification.get(h.producer_id)
        return v is not None and v.supports_epoch_bump and h.is_control and h.producer_epoch == v.epoch

    def _append_data(self, entry: ProducerEntry, h: BatchHeader, origin: str, staged: StagedAppend | None) -> None:
        epoch = h.producer_epoch
        pid = entry.producer_id
        if epoch < entry.epoch:
            if origin == REPLICATION:
                log.warning("producer %d at offset %d has epoch %d, older than %d", pid, h.base_offset, epoch,
                            entry.epoch)
            else:
                raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH,
                                 f"producer {pid} epoch {epoch} is older than the current epoch {entry.epoch}")
        if origin == CLIENT and h.base_sequence >= 0:
            self._check_sequence(entry, h)
        entry.add_batch(epoch, h)
        if h.is_transactional:
            if entry.current_txn_first_offset < 0:
                entry.current_txn_first_offset = h.base_offset
                txn = TxnMetadata(pid, h.base_offset)
                if staged is not None:
                    staged.started.append(txn)
                else:
                    self.ongoing[h.base_offset] = txn
        elif entry.current_txn_first_offset >= 0 and origin != REPLICATION:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE, f"expected a transactional write from producer {pid} "
                             f"at offset {h.base_offset}: its transaction is still open")

    def _check_sequence(self, entry: ProducerEntry, h: BatchHeader) -> None:
        pid, epoch, seq = entry.producer_id, h.producer_epoch, h.base_sequence
        v = self.verification.get(pid)
        if v is not None:
            if v.supports_epoch_bump and seq != 0 and entry.epoch == NO_PRODUCER_EPOCH:
                raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                 f"producer {pid}: expected sequence 0 from a transactions v2 producer with no state, "
                                 f"got {seq}")
            if seq > v.lowest_sequence:
                raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                 f"producer {pid}: sequence {seq} is above the lowest one being verified "
                                 f"({v.lowest_sequence})")
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

    @staticmethod
    def _end_txn(entry: ProducerEntry, h: BatchHeader, marker: EndTxnMarker, origin: str,
                 transaction_version: int) -> CompletedTxn | None:
        """Kafka's ProducerAppendInfo.appendEndTxnMarker."""
        pid, epoch, current = entry.producer_id, h.producer_epoch, entry.epoch
        tv2 = transaction_version >= 2 and origin != REPLICATION
        if epoch < current or (tv2 and epoch == current):
            # a retried TV2 marker of a transaction that already ended (KAFKA-19999) is written again
            retry = tv2 and epoch == current and entry.current_txn_first_offset < 0
            if not retry:
                message = (f"epoch of producer {pid} at offset {h.base_offset} is {epoch}, which is "
                           f"{'<=' if tv2 else '<'} the last seen epoch {current} (TV{transaction_version})")
                if origin == REPLICATION:
                    log.warning("%s", message)
                else:
                    raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH, message)
        if entry.coordinator_epoch > marker.coordinator_epoch:
            message = (f"invalid coordinator epoch for producer {pid} at offset {h.base_offset}: "
                       f"{marker.coordinator_epoch} (zombie), {entry.coordinator_epoch} (current)")
            if origin == REPLICATION:
                log.info("%s", message)
            else:
                raise KafkaError(ErrorCode.TRANSACTION_COORDINATOR_FENCED, message)
        done = None
        if entry.current_txn_first_offset >= 0:
            done = CompletedTxn(pid, entry.current_txn_first_offset, h.base_offset, not marker.commit)
        entry.end_txn(epoch, marker)
        return done

    def commit(self, staged: StagedAppend, end_offset: int) -> None:
        """The staged append is on file: make its state current. The caller then completes
        ``staged.completed`` (``lso_for_completed`` + the transaction index + ``complete_txn``)."""
        self.producers.update(staged.entries)
        for txn in staged.started:
            self.ongoing[txn.first_offset] = txn
        for pid in staged.transactional:
            self.verification.pop(pid, None)
        self.map_end_offset = end_offset

    def apply_batch(self, h: BatchHeader, marker: EndTxnMarker | None = None) -> CompletedTxn | None:
        """Apply a batch that is already in the log (replication, rebuild): no checks. Returns
        the transaction its marker completes, if any (``marker``: that of a control batch)."""
        pid = h.producer_id
        done = None
        if pid >= 0:
            entry = self.producers.get(pid)
            if entry is None:
                entry = self.producers[pid] = ProducerEntry(pid)
            if h.is_control:
                if marker is not None:
                    done = self._end_txn(entry, h, marker, REPLICATION, 0)
            elif h.base_sequence >= 0 or h.is_transactional:
                self._append_data(entry, h, REPLICATION, None)
            if h.is_transactional and not self._next_v2_transaction_started(h):
                self.verification.pop(pid, None)
        self.map_end_offset = h.base_offset + h.last_offset_delta + 1
        return done

    # --- housekeeping -------------------------------------------------------------------
    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for longer than producer.id.expiration.ms (no open txn), and
        verifications that never led to an append."""
        dead = [pid for pid, e in self.producers.items()
                if e.current_txn_first_offset < 0 and e.last_timestamp >= 0
                and now_ms - e.last_timestamp >= expiration_ms]
        for pid in dead:
            del self.producers[pid]
        for pid in [pid for pid, v in self.verification.items() if now_ms - v.timestamp >= expiration_ms]:
            del self.verification[pid]
        return len(dead)

    def truncate_and_reload(self, end_offset: int) -> int:
        """Forget everything at or above ``end_offset``; load the newest usable snapshot and
        return the offset from which the caller must replay the log."""
        self.delete_snapshots_after(end_offset)
        return self.load_latest_snapshot(end_offset)

    def reset(self) -> None:
        self.producers.clear()
        self.ongoing.clear()
        self.unreplicated.clear()
        self.verification.clear()
        self.map_end_offset = 0

    # --- snapshots ----------------------------------------------------------------------
    def snapshot_offsets(self) -> list[int]:
        if not self.dir:
            return []
        out = []
        for name in fio.listdir(self.dir):
            m = _SNAPSHOT_RE.match(name)
            if m:
                out.append(int(m.group(1)))
        return sorted(out)

    def _snapshot_path(self, offset: int) -> str:
        assert self.dir
        return os.path.join(self.dir, f"{offset:020d}{SNAPSHOT_SUFFIX}")

    def snapshot_bytes(self) -> bytes:
        body = bytearray(struct.pack(">i", len(self.producers)))
        for e in self.producers.values():
            b = e.batches[-1] if e.batches else None
            body += _ENTRY.pack(e.producer_id, e.epoch, b.last_seq if b else -1, b.last_offset if b else -1,
                                b.last_offset - b.first_offset if b else 0, e.last_timestamp, e.coordinator_epoch,
                                e.current_txn_first_offset)
        return _SNAP_HEADER.pack(SNAPSHOT_VERSION, crc32c(body)) + body

    def take_snapshot(self, sync: bool = True) -> None:
        """Write the state as ``<map_end_offset>.snapshot``."""
        if not self.dir:
            return
        data = self.snapshot_bytes()
        path = self._snapshot_path(self.map_end_offset)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            if sync:
                f.flush()
                fio.fsync(f.fileno())
        fio.replace(tmp, path)
        for off in self.snapshot_offsets()[:-SNAPSHOTS_TO_KEEP]:
            fio.unlink(self._snapshot_path(off))

    def load_latest_snapshot(self, max_offset: int) -> int:
        """Load the newest valid snapshot at or below ``max_offset`` (deleting corrupt ones);
        returns its offset, or 0 with an empty state if there is none."""
        for off in reversed(self.snapshot_offsets()):
            if off > max_offset:
                continue
            producers = self._read_snapshot(self._snapshot_path(off))
            if producers is None:
                fio.unlink(self._snapshot_path(off))
                continue
            self.reset()
            self.producers = producers
            for first, pid in sorted((e.current_txn_first_offset, pid) for pid, e in producers.items()
                                     if e.current_txn_first_offset >= 0):
                self.ongoing[first] = TxnMetadata(pid, first)
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
        return parse_snapshot(data)

    def delete_snapshots_after(self, offset: int) -> None:
        for off in self.snapshot_offsets():
            if off > offset:
                fio.unlink(self._snapshot_path(off))

    def delete_snapshots_before(self, offset: int) -> None:
        """Delete snapshots below ``offset`` but always keep the newest one."""
        offs = self.snapshot_offsets()
        for off in offs[:-1]:
            if off < offset:
                fio.unlink(self._snapshot_path(off))


def parse_snapshot(data: bytes) -> dict[int, ProducerEntry] | None:
    """The producers of a snapshot file's bytes, or None if it is not a valid version-1 snapshot."""
    if len(data) < _SNAP_HEADER.size + 4:
        return None
    version, crc = _SNAP_HEADER.unpack_from(data, 0)
    body = memoryview(data)[_SNAP_HEADER.size:]
    if version != SNAPSHOT_VERSION or crc32c(body) != crc:
        return None
    (n,) = struct.unpack_from(">i", body, 0)
    if n < 0 or 4 + n * _ENTRY.size != len(body):
        return None
    out: dict[int, ProducerEntry] = {}
    for i in range(n):
        pid, epoch, last_seq, last_offset, delta, ts, ce, txn = _ENTRY.unpack_from(body, 4 + i * _ENTRY.size)
        batches = []
        if last_offset >= 0:
            first_seq = (last_seq - delta) & _SEQ_MASK if last_seq >= 0 else -1
            batches.append(BatchMetadata(first_seq, last_seq, last_offset - delta, last_offset, ts))
        out[pid] = ProducerEntry(pid, epoch, batches, ce, txn, ts)
    return out
