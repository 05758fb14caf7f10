"""Reads of a partition log: whole batches as a file region to send with sendfile (Fetch),
what read_committed needs (last stable offset, aborted transactions), the first offset at or
after a timestamp and the largest timestamp (ListOffsets), and the damage a read finds (a batch
that does not parse: CORRUPT_MESSAGE from there on).

Concurrency: reads run on the event loop, take no lock and never change the segment list; they
work on the list they found (retention, a truncation or the cleaner replace the list, and a
read slice keeps its file open); a segment replaced under a reader raises SegmentDeletedError
and the read looks at the list again. Decoding a batch's timestamps may run in a worker thread
(``asyncio.to_thread``) on bytes already read."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from bisect import bisect_right

from common.errors import ErrorCode, KafkaError

from . import fileio as fio
from .batch import BatchHeader, iter_record_timestamps, records_limit
from .log_types import LogClosedError, ReadSlice
from .segment import CorruptBatchError, LogSegment, SegmentDeletedError
from .txn_index import AbortedTxn

log = logging.getLogger("krafty.log")
logger = log


class LogReads:
    """Mixin of ``Log``: reads."""

    def _segment_index_for(self, offset: int) -> int:
        return max(0, bisect_right(self._bases, offset) - 1)

    def read(self, offset: int, max_bytes: int, max_offset: int, min_one_batch: bool = True) -> ReadSlice | None:
        """Whole batches from the batch containing ``offset``, all with last offset <
        ``max_offset`` (the high watermark, exclusive), at most ``max_bytes`` unless
        ``min_one_batch`` and the first batch alone is larger (KIP-74). One segment at most.

        A batch that does not parse (its length, magic or offsets; the first batch's CRC, or
        for a large one its length) is logged with its file and position and remembered: reads from it on raise
        CorruptBatchError (CORRUPT_MESSAGE), reads before it stop short of it. An I/O error
        is KAFKA_STORAGE_ERROR. Kafka's LogSegment.read / ReplicaManager.readFromLog.
        """
        for _attempt in range(3):
            try:
                return self._read(offset, max_bytes, max_offset, min_one_batch)
            except SegmentDeletedError:
                if self.closed:
                    raise LogClosedError(self) from None
                continue  # replaced by the cleaner or removed by retention meanwhile: read the list again
            except CorruptBatchError as e:
                seg = next((s for s in self.segments if s.log_path == e.path), None)
                if seg is None:
                    raise
                known = seg.damage
                damage = known if known is not None and known.position == e.position else seg.confirm_damage(e)
                if damage is None:
                    continue  # an index entry was wrong (rebuilt): read again
                if damage is not known:
                    self._note_damage(damage)
                if offset >= damage.offset:
                    raise damage from None
                # the read starts before the damage: again, now bounded by it
            except OSError as e:
                logger.error("%s-%d: reading offset %d failed: %s", self.topic, self.partition, offset, e)
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                                 f"cannot read {self.topic}-{self.partition} at offset {offset}: "
                                 f"{e.strerror or e}") from e
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{self.topic}-{self.partition}: cannot read offset {offset}")

    def _read(self, offset: int, max_bytes: int, max_offset: int, min_one_batch: bool) -> ReadSlice | None:
        segments = self.segments
        leo = segments[-1].next_offset
        if offset < self._log_start_offset or offset > leo:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"offset {offset} is outside [{self._log_start_offset}, {leo}] of {self.topic}-"
                             f"{self.partition}")
        if offset >= leo or offset >= max_offset:
            return None
        i = self._segment_index_for(offset)
        while i < len(segments):
            seg = segments[i]
            d = seg.damage
            if d is not None and offset >= d.offset and (i + 1 == len(segments) or offset < segments[i + 1].base_offset):
                raise d
            h = seg.translate(offset) if offset < seg.next_offset else None
            if h is not None:
                break
            i += 1
            if i < len(segments):
                offset = max(offset, segments[i].base_offset)
        else:
            return None
        if h.base_offset + h.last_offset_delta >= max_offset:
            return None
        # the batch the reader asked for is checked whole: when its framing or contents went bad
        # the reader gets an error here rather than bytes it cannot parse, again and again
        seg.check_read_start(h)
        start = h.pos
        d = seg.damage
        if d is not None and d.position > start and max_offset > d.offset:
            limit = d.position
        else:
            limit = seg.position_of(max_offset, start)
        first_size = h.batch_length + 12
        if limit - start <= max_bytes:
            end = limit
        else:
            end = seg.boundary_at_or_before(start + max_bytes, start)
            if end <= start:
                if not min_one_batch:
                    return None
                end = start + first_size
        file = seg.file
        return ReadSlice(file.fd, start, end - start, h.base_offset, file, seg.base_offset)

    def _note_damage(self, damage: CorruptBatchError) -> None:
        logger.error("%s-%d: %s. Readers get CORRUPT_MESSAGE from offset %d on; as a follower this replica "
                     "truncates to it and fetches it again from the leader; as the leader, move leadership to "
                     "another in-sync replica (kafka-leader-election / reassignment) so it can.",
                     self.topic, self.partition, damage, damage.offset)
        if self._damage is None or damage.offset < self._damage.offset:
            self._damage = damage

    @property
    def damaged_offset(self) -> int | None:
        """The first offset of the lowest batch known not to parse, or None."""
        return None if self._damage is None else self._damage.offset

    def last_stable_offset(self, high_watermark: int) -> int:
        """LSO: the first offset of the earliest transaction still open, or completed with its
        marker not yet below ``high_watermark``; the high watermark when there is none. Never
        below the log start (retention or DeleteRecords may have taken a transaction's start,
        as in Kafka's maybeIncrementFirstUnstableOffset)."""
        lso = self.producer_state.last_stable_offset(high_watermark)
        return lso if lso >= self._log_start_offset else min(self._log_start_offset, high_watermark)

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound), from the transaction
        indexes of the segment holding ``fetch_offset`` on, until one entry says every
        transaction started below the bound had ended (Kafka's collectAbortedTransactions)."""
        segs = self.segments
        out: list[AbortedTxn] = []
        for seg in segs[self._segment_index_for(fetch_offset):]:
            if not seg.txn_index.entries:
                continue
            found, complete = seg.txn_index.collect(fetch_offset, upper_bound)
            out += found
            if complete:
                break
        return out

    def has_aborted_transactions(self, from_offset: int) -> bool:
        """Does any segment from the one holding ``from_offset`` on have aborted transactions?"""
        if not self.any_aborted:
            return False
        segs = self.segments
        return any(segs[i].txn_index.entries for i in range(self._segment_index_for(from_offset), len(segs)))

    def fetch_upper_bound(self, sl: ReadSlice) -> int:
        """An offset at or above every offset in the region ``sl``: the first offset index entry
        at or after its end, else the end of its segment (Kafka's fetchUpperBoundOffset)."""
        segs = self.segments
        i = self._segment_index_for(sl.segment_base_offset)
        seg = segs[i]
        if seg.base_offset != sl.segment_base_offset:
            return self.log_end_offset  # the segment went meanwhile: the log end bounds it
        end = sl.position + sl.size
        if end < seg.size:
            found = seg.index.offset_at_or_after(end)
            if found is not None:
                return found
        return segs[i + 1].base_offset if i + 1 < len(segs) else seg.next_offset

    def read_bytes(self, slice: ReadSlice) -> bytes:
        out = bytearray()
        pos, left = slice.position, slice.size
        while left > 0:
            chunk = fio.pread(slice.fd, left, pos)
            if not chunk:
                break
            out += chunk
            pos += len(chunk)
            left -= len(chunk)
        return bytes(out)

    def _batch_bytes(self, seg: LogSegment, h: BatchHeader) -> bytes:
        return seg.read_batch(h.pos, h.batch_length + 12)

    def offset_for_timestamp(self, ts_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``ts_ms`` at or after the
        log start, or None. Uses the time index to find where to start, then decodes the
        timestamps of the batch that holds the answer. A batch that cannot be decoded raises
        CORRUPT_MESSAGE. The broker calls ``offset_for_timestamp_async``."""
        for _attempt in self._attempts():
            with self._segments_may_go():
                for seg, h, start in self._timestamp_candidates(ts_ms):
                    found = self._first_at_or_after(seg, h, self._batch_bytes(seg, h), ts_ms, start)
                    if found is not None:
                        return found
                return None
        raise self._segments_kept_changing()

    async def offset_for_timestamp_async(self, ts_ms: int) -> tuple[int, int] | None:
        """``offset_for_timestamp`` decoding in a worker thread: decoding is bounded but linear
        in the batch, while index lookups and reads stay on the event loop with the appends."""
        for _attempt in self._attempts():
            with self._segments_may_go():
                for seg, h, start in self._timestamp_candidates(ts_ms):
                    data = self._batch_bytes(seg, h)
                    found = await asyncio.to_thread(self._first_at_or_after, seg, h, data, ts_ms, start)
                    if found is not None:
                        return found
                return None
        raise self._segments_kept_changing()

    def _attempts(self):
        """Attempts of a search over the segments that the cleaner or retention may change under
        it (each failed one ends in SegmentDeletedError, swallowed by ``_segments_may_go``)."""
        for attempt in range(3):
            if self.closed:
                raise LogClosedError(self)
            yield attempt

    @contextlib.contextmanager
    def _segments_may_go(self):
        try:
            yield
        except SegmentDeletedError:
            if self.closed:
                raise LogClosedError(self) from None

    def _segments_kept_changing(self) -> KafkaError:
        return KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER if self.closed else ErrorCode.KAFKA_STORAGE_ERROR,
                          f"{self.topic}-{self.partition}: its segments kept changing during the search; try again")

    def _timestamp_candidates(self, ts_ms: int):
        """(segment, header, log start) of each batch, in order, that may hold the first record
        with timestamp >= ``ts_ms`` at or after the log start."""
        start_offset = self._log_start_offset
        for seg in list(self.segments):
            if seg.max_timestamp < ts_ms or seg.next_offset <= start_offset:
                continue
            from_offset = seg.time_index.lookup_before(ts_ms)
            from_offset = max(from_offset if from_offset is not None else seg.base_offset, start_offset)
            pos = seg.index.lookup(from_offset)
            for h in seg.iter_headers(pos):
                if h.base_offset + h.last_offset_delta < from_offset or h.max_timestamp < ts_ms:
                    continue
                yield seg, h, start_offset

    def _first_at_or_after(self, seg: LogSegment, h: BatchHeader, data: bytes, ts_ms: int,
                           start_offset: int) -> tuple[int, int] | None:
        if h.timestamp_type == 1:
            return max(h.base_offset, start_offset), h.max_timestamp
        for off, t in self._record_timestamps(seg, h, data):
            if t >= ts_ms and off >= start_offset:
                return off, t
        return None

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """(max timestamp, offset of the first record having it), or (-1, -1) if no batch has
        a timestamp. For ListOffsets MAX_TIMESTAMP (KIP-734); decodes one batch like
        ``offset_for_timestamp``. The broker calls ``max_timestamp_and_offset_async``."""
        for _attempt in self._attempts():
            with self._segments_may_go():
                answer, todo = self._max_timestamp_batch()
                return answer if todo is None else self._offset_of_max(*todo)
        raise self._segments_kept_changing()

    async def max_timestamp_and_offset_async(self) -> tuple[int, int]:
        for _attempt in self._attempts():
            with self._segments_may_go():
                answer, todo = self._max_timestamp_batch()
                return answer if todo is None else await asyncio.to_thread(self._offset_of_max, *todo)
        raise self._segments_kept_changing()

    def _max_timestamp_batch(self) -> tuple[tuple[int, int], None] | tuple[None, tuple]:
        """(answer, None), or (None, (segment, header, batch bytes, max timestamp)) of the batch
        that must be decoded for the answer."""
        best: LogSegment | None = None
        for seg in list(self.segments):
            if seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        if best is None:
            return (-1, -1), None
        ts = best.max_timestamp
        h = best.translate(best.offset_of_max_timestamp)
        if h is None:
            return (ts, best.offset_of_max_timestamp), None
        if h.timestamp_type == 1:
            return (ts, h.base_offset), None
        return None, (best, h, self._batch_bytes(best, h), ts)

    def _offset_of_max(self, seg: LogSegment, h: BatchHeader, data: bytes, ts: int) -> tuple[int, int]:
        for off, t in self._record_timestamps(seg, h, data):
            if t == ts:
                return ts, off
        return ts, h.base_offset + h.last_offset_delta

    def _record_timestamps(self, seg: LogSegment, h: BatchHeader, data: bytes):
        try:
            yield from iter_record_timestamps(data, records_limit(self.config.max_message_bytes))
        except KafkaError as e:
            log.error("%s-%d: cannot decode the record batch at position %d of %s (offsets %d-%d): %s", self.topic,
                      self.partition, h.pos, seg.log_path, h.base_offset, h.last_offset, e.message)
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"the record batch at offset {h.base_offset} is corrupt: "
                             f"{e.message}") from None
