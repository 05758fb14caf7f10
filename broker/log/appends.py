"""Appends to a partition log, as leader (offsets assigned here, producer state checked) and
as follower (batches copied from the leader), written on the loop or in a writer thread; the
transaction index entry of an aborted transaction whose marker is appended; segment rolls.

Concurrency: the event loop assigns offsets, checks producer state and picks the segment
(``_prepare_*``, ``_stage``); a writer thread (``krafty.log.writer.threads``; none: the loop)
only does the write syscall (``PendingWrite.run``); the loop then commits (``_commit``:
segment end, indexes, producer state). Until the commit nothing else sees the batches. Async
appends to one log are serialised by ``_append_turn`` (an asyncio.Lock); ``abort_append`` drops
a write in flight (waiting for its syscall if it started) before a truncation, leadership
change or close. Changes of the segment list (``roll``) hold ``lock`` against the flush and
cleaner threads."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from common import stallwatch
from common.errors import ErrorCode, KafkaError

from . import fileio as fio
from .batch import (
    BatchHeader,
    assign_offsets,
    batch_crc_ok,
    parse_batches,
    read_end_txn_marker,
    records_limit,
)
from .log_types import AppendAborted, AppendInfo, LogClosedError, UnexpectedAppendOffsetError, _locked
from .producer_state import CLIENT, CompletedTxn
from .segment import INT32_MAX, LogSegment, SegmentFile, write_at
from .txn_index import AbortedTxn
from .validator import CODECS, recompress, validate_async, validate_now

logger = logging.getLogger("krafty.log")


class PendingWrite:
    """One append between its offsets being assigned (on the event loop) and its bytes being
    on file (``run``, in a writer thread). The log's size and end offset move only when the
    loop commits it, so readers, followers and the high watermark never see it early."""

    __slots__ = ("seg", "file", "data", "headers", "nbytes", "start", "staged", "info", "error",
                 "_lock", "_started", "aborted", "_done")

    def __init__(self, seg: LogSegment, file: SegmentFile, data: memoryview, headers: list[BatchHeader],
                 nbytes: int):
        self.seg = seg
        self.file = file  # held: keeps the fd open (and its number unused) until the write is over
        self.data = data
        self.headers = headers
        self.nbytes = nbytes
        self.start = seg.size
        self.staged = None  # leader appends: producer state to commit
        self.info: AppendInfo | None = None
        self.error: OSError | None = None
        self.aborted = False
        self._started = False
        # made by hand_off(), for a write in another thread only: the produce path that writes
        # on the loop (the default) pays for no lock or event
        self._lock: threading.Lock | None = None
        self._done: threading.Event | None = None

    def hand_off(self) -> None:
        """This write will run in another thread: arm the hand-shake with ``abort``."""
        self._lock = threading.Lock()
        self._done = threading.Event()

    def run(self) -> None:
        if self._done is None:
            self._write()
            return
        with self._lock:
            if self.aborted:
                self._done.set()
                return
            self._started = True
        try:
            self._write()
        finally:
            self._done.set()

    def _write(self) -> None:
        sec = stallwatch.enter("log write of %d bytes to %s", len(self.data), self.seg.log_path)
        try:
            write_at(self.file, self.data, self.start)
        except OSError as e:
            self.error = e
        finally:
            stallwatch.leave(sec)

    def abort(self) -> None:
        """Mark it dropped; if its write already started, wait for it and cut it off the file.
        Only a handed-off write can be in flight when this is called."""
        with self._lock:
            self.aborted = True
            started = self._started
        if started:
            self._done.wait()
            try:
                fio.ftruncate(self.file.fd, self.start)
            except OSError:
                pass  # the segment is gone, or the next append overwrites the tail anyway


class LogAppends:
    """Mixin of ``Log``: appends and rolls."""

    def append_as_leader(self, buf: bytearray, headers: list[BatchHeader], leader_epoch: int, now_ms: int,
                         **producer_checks) -> AppendInfo:
        """Append client batches already checked by ``validate_produce_batches``.

        Producer state is checked for every batch before anything is written; a retried
        batch returns its original offsets with ``duplicate=True`` and writes nothing.
        ``producer_checks`` (see ``ProducerStateManager.check_client_batches``): ``origin``
        (CLIENT, or COORDINATOR for markers and transactional offset commits),
        ``verification_guard`` and ``require_verification`` (KIP-890), ``transaction_version``.
        Writes in the calling thread; ``append_as_leader_async`` writes in a writer thread.
        """
        w = self._prepare_leader(buf, headers, leader_epoch, now_ms, producer_checks)
        if isinstance(w, AppendInfo):
            return w
        w.run()
        return self._commit(w)

    def append_as_follower(self, buf, headers: list[BatchHeader] | None = None, now_ms: int = 0) -> AppendInfo:
        """Append batches copied from the leader (offsets and epochs already assigned).

        ``headers`` defaults to ``parse_batches(buf)`` (a trailing partial batch is ignored).
        Each batch is CRC-checked; offsets must be increasing and start at or after the log end.
        """
        w = self._prepare_follower(buf, headers, now_ms)
        if isinstance(w, AppendInfo):
            return w
        w.run()
        return self._commit(w)

    async def append_as_leader_async(self, buf: bytearray, headers: list[BatchHeader],
                                     leader_epoch: Callable[[], int], now_ms: int, executor,
                                     **producer_checks) -> AppendInfo:
        """``append_as_leader`` with the write syscall in ``executor`` (krafty.log.writer.threads;
        None: on the loop), so a write the kernel makes wait (block allocation, dirty-page
        throttling) stalls this partition, not the event loop. Appends to the log are serialised: ``leader_epoch()`` is called once this
        append's turn comes and must raise if the broker no longer leads the partition."""
        async with self._append_turn():
            w = self._prepare_leader(buf, headers, leader_epoch(), now_ms, producer_checks)
            if isinstance(w, AppendInfo):
                return w
            return await self._write_async(w, executor)

    def try_append_as_leader(self, buf: bytearray, headers: list[BatchHeader], leader_epoch: Callable[[], int],
                             now_ms: int, executor, **producer_checks) -> AppendInfo | None:
        """``append_as_leader_async`` when it need not wait (the produce path's usual case:
        writes on the loop, no other append of this log in progress): done at once, without the
        coroutines and the lock that only a wait needs. None, having done nothing, when it
        would wait: then await ``append_as_leader_async``."""
        turn = self._turn
        if executor is not None or (turn is not None and (turn.locked() or turn._waiters)):
            return None
        w = self._prepare_leader(buf, headers, leader_epoch(), now_ms, producer_checks)
        if isinstance(w, AppendInfo):
            return w
        w.run()
        return self._commit(w)

    async def append_as_follower_async(self, buf, headers: list[BatchHeader] | None, now_ms: int, executor,
                                       still_following: Callable[[], bool]) -> AppendInfo:
        """``append_as_follower`` with the write in ``executor``; ``still_following()`` is
        checked when this append's turn comes (AppendAborted if not)."""
        async with self._append_turn():
            if not still_following():
                raise AppendAborted(f"{self.topic}-{self.partition} stopped following")
            w = self._prepare_follower(buf, headers, now_ms)
            if isinstance(w, AppendInfo):
                return w
            return await self._write_async(w, executor)

    def append_turn(self) -> asyncio.Lock:
        """The lock appends to this log take in turn (a replica move swaps logs holding it)."""
        return self._append_turn()

    def _append_turn(self) -> asyncio.Lock:
        if self._turn is None:
            self._turn = asyncio.Lock()  # made on first use: logs are opened before the loop runs
        return self._turn

    async def _write_async(self, w: PendingWrite, executor) -> AppendInfo:
        if executor is None:  # krafty.log.writer.threads=0: write right here, on the loop
            w.run()
            return self._commit(w)
        w.hand_off()
        self._inflight = w
        fut = asyncio.get_running_loop().run_in_executor(executor, w.run)
        cancelled = False
        while not fut.done():
            try:
                await asyncio.shield(fut)
            except asyncio.CancelledError:
                # The caller went away (its connection closed), but the bytes are being written
                # under offsets this log handed out: finish the append before letting go.
                cancelled = True
        try:
            return self._commit(w)
        finally:
            if cancelled:
                raise asyncio.CancelledError

    def _prepare_leader(self, buf, headers: list[BatchHeader], leader_epoch: int,
                        now_ms: int, producer_checks: dict) -> PendingWrite | AppendInfo:
        if self.closed:
            raise LogClosedError(self)
        if not headers:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "no record batches to append")
        if isinstance(buf, bytes) or (isinstance(buf, memoryview) and buf.readonly):
            buf = bytearray(buf)  # offsets are patched in place: pass a bytearray to avoid this copy
        target = CODECS.get(self.config.compression_type)
        if target is not None and any(h.compression != target and not h.is_control for h in headers):
            buf, headers = self._recompress(buf, headers, target)
        lat = now_ms if self.config.log_append_time else None
        first = self.log_end_offset
        assign_offsets(buf, headers, first, leader_epoch, lat)
        last_h = headers[-1]
        last = last_h.base_offset + last_h.last_offset_delta
        producer_checks.setdefault("origin", CLIENT)
        staged, dup = self.producer_state.check_client_batches(
            headers, marker_of=lambda h: read_end_txn_marker(memoryview(buf)[h.pos:h.pos + h.size]),
            **producer_checks)
        if dup is not None:
            return AppendInfo(dup.first_offset, dup.last_offset, dup.timestamp if lat is not None else -1,
                              self._log_start_offset, duplicate=True)
        self.leader_epoch_cache.assign(leader_epoch, first)
        w = self._stage(buf, headers, now_ms)
        w.staged = staged
        w.info = AppendInfo(first, last, lat if lat is not None else -1, self._log_start_offset)
        return w

    def _recompress(self, buf, headers: list[BatchHeader], target: int) -> tuple[bytearray, list[BatchHeader]]:
        """The topic's compression.type is not ``producer`` and differs from the batch codec:
        re-encode each such batch (producer fields, sequences and timestamps kept), as Kafka's
        LogValidator does. Produce requests were converted by ``validate_client_batches``
        already; this is for appends that were not (bounded like every decoder)."""
        return recompress(buf, headers, target, self.config.max_message_bytes)

    async def validate_client_batches(self, buf, headers: list[BatchHeader], now_ms: int):
        """Kafka's LogValidator for a produce request's batches (see validator.py): returns the
        (possibly re-encoded) batches to append, or raises the error for the client. Runs in a
        worker thread unless the batches are small."""
        return await validate_async(buf, headers, self.config, now_ms, f"{self.topic}-{self.partition}")

    def validate_client_batches_now(self, buf, headers: list[BatchHeader], now_ms: int):
        """``validate_client_batches`` if it can be done on the loop (small batches), else None."""
        return validate_now(buf, headers, self.config, now_ms, f"{self.topic}-{self.partition}")

    def _prepare_follower(self, buf, headers: list[BatchHeader] | None, now_ms: int) -> PendingWrite | AppendInfo:
        if self.closed:
            raise LogClosedError(self)
        if headers is None:
            headers = parse_batches(buf)
        if not headers:
            leo = self.log_end_offset
            return AppendInfo(leo, leo - 1, -1, self._log_start_offset)
        expected = self.log_end_offset
        for h in headers:
            if h.magic != 2 or not batch_crc_ok(buf, h):
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"replicated batch at offset {h.base_offset} is corrupt")
            if h.base_offset < expected:
                raise UnexpectedAppendOffsetError(
                    f"replicated batch at offset {h.base_offset} is below the expected offset {expected}",
                    headers[0].base_offset, headers[-1].last_offset)
            expected = h.base_offset + h.last_offset_delta + 1
        for h in headers:
            self.leader_epoch_cache.assign(h.partition_leader_epoch, h.base_offset)
        w = self._stage(buf, headers, now_ms)
        w.info = AppendInfo(headers[0].base_offset, headers[-1].last_offset, -1, self._log_start_offset)
        return w

    def _stage(self, buf, headers: list[BatchHeader], now_ms: int) -> PendingWrite:
        """Pick the segment (rolling if due) for whole batches about to be written at its end."""
        if self._inflight is not None:
            raise RuntimeError(f"{self}: append while another is being written")
        last_h = headers[-1]
        nbytes = last_h.pos + last_h.batch_length + 12 - headers[0].pos
        seg = self.segments[-1]
        first = headers[0].base_offset
        last = last_h.base_offset + last_h.last_offset_delta
        if seg.size and self._should_roll(seg, nbytes, headers, now_ms, last):
            seg = self.roll(now_ms, first)
        elif not seg.size and seg.base_offset != first and (first < seg.base_offset or
                                                            last - seg.base_offset > INT32_MAX):
            seg = self._replace_empty_active(first, now_ms)
        start = headers[0].pos
        data = (memoryview(buf)[start:] if start else memoryview(buf))[:nbytes]
        return PendingWrite(seg, seg.prepare_append(), data, headers, nbytes)

    def _commit(self, w: PendingWrite) -> AppendInfo:
        """The write is done: make the batches part of the log (segment end and indexes,
        producer state), unless ``abort_append`` dropped it meanwhile."""
        if self._inflight is w:
            self._inflight = None
        if w.aborted:
            raise AppendAborted(f"{self.topic}-{self.partition}: the append at offset {w.info.first_offset} was "
                                f"dropped by a truncation, leadership change or close while being written")
        if w.error is not None:
            # Nothing was recorded in memory and the partial write was cut off.
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"cannot write to {w.seg.log_path}: {w.error.strerror}") from w.error
        w.seg.commit_append(w.headers, w.start, w.nbytes)
        ps = self.producer_state
        if w.staged is not None:
            ps.commit(w.staged, w.info.last_offset + 1)
            for txn in w.staged.completed:
                self._complete_txn(w.seg, txn)
        else:
            base = w.headers[0].pos
            for h in w.headers:
                marker = None
                if h.is_control and h.producer_id >= 0:
                    try:
                        marker = read_end_txn_marker(w.data[h.pos - base:h.pos - base + h.size],
                                                     records_limit(self.config.max_message_bytes))
                    except KafkaError as e:
                        logger.error("%s-%d: replicated control batch at offset %d does not decode: %s", self.topic,
                                     self.partition, h.base_offset, e.message)
                done = ps.apply_batch(h, marker)
                if done is not None:
                    self._complete_txn(w.seg, done)
        self._maybe_flush_by_count()
        return w.info

    def _complete_txn(self, seg: LogSegment | None, txn: CompletedTxn) -> None:
        """A marker ended ``txn``: an aborted one goes into the transaction index of ``seg``
        (the marker's segment; None: it is there already) with the LSO of the moment."""
        ps = self.producer_state
        try:
            if seg is not None and txn.aborted:
                self.any_aborted = True
                seg.txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset,
                                                ps.lso_for_completed(txn)))
        except OSError as e:  # the entry is kept in memory (reads use it) and written with the next one
            logger.error("%s-%d: cannot write %s: %s", self.topic, self.partition, seg.txn_index.path, e)
        finally:
            ps.complete_txn(txn)

    def abort_append(self) -> None:
        """Drop the append being written, if any: wait for its write syscall (if it started)
        and cut its bytes off the file; its ``_commit`` raises AppendAborted. Called before
        anything that moves the log end or changes leadership, so a late write can never land
        over newer data or under a new leader epoch."""
        w = self._inflight
        if w is None:
            return
        self._inflight = None
        w.abort()

    def _should_roll(self, seg: LogSegment, nbytes: int, headers: list[BatchHeader], now_ms: int,
                     last: int) -> bool:
        cfg = self.config
        if seg.size > cfg.segment_bytes - nbytes:
            return True
        if seg.index.is_full or seg.time_index.is_full:
            return True
        if last - seg.base_offset > INT32_MAX:
            return True
        first_ts = seg.first_batch_timestamp
        if first_ts is not None and first_ts >= 0:
            max_ts = max(h.max_timestamp for h in headers) if len(headers) > 1 else headers[0].max_timestamp
            waited = max_ts - first_ts
        else:
            waited = now_ms - seg.created_ms
        return waited > cfg.segment_ms

    @_locked
    def roll(self, now_ms: int, new_base: int | None = None) -> LogSegment:
        """Start a new active segment at ``new_base`` (default: the log end). The old one is
        sealed; it is fsynced by the next ``flush()`` (``flush_check`` does that)."""
        base = self.log_end_offset if new_base is None else new_base
        old = self.segments[-1]
        if old.size == 0 and old.base_offset == base:
            return old
        old.seal()
        seg = LogSegment.create(self.path, base, **self._segment_kwargs(now_ms))
        self.segments = self.segments + [seg]
        self._bases = self._bases + [base]
        for older in self.segments[:-3]:
            if older.is_open:
                older.release()  # bound open descriptors; reads reopen on demand
        # Every batch below ``base`` is in the producer state: snapshot it like Kafka does.
        self.producer_state.map_end_offset = base
        self.producer_state.take_snapshot(sync=False)
        return seg

    @_locked
    def _replace_empty_active(self, base: int, now_ms: int) -> LogSegment:
        old = self.segments[-1]
        old.delete()
        seg = LogSegment.create(self.path, base, **self._segment_kwargs(now_ms))
        self.segments = self.segments[:-1] + [seg]
        self._bases = self._bases[:-1] + [base]
        return seg

    def _maybe_flush_by_count(self) -> None:
        if self.log_end_offset - self.recovery_point >= self.config.flush_messages:
            self.flush()
