"""Moving the ends of a partition log: follower truncation (to an offset, or fully to restart
at one), DeleteRecords (the log start), retention by time and size, and producer expiry.

Concurrency: on the event loop (retention: the log manager's check), each change of the segment
list under ``lock`` (``@_locked``), shared with the flush and cleaner threads; a truncation first
aborts the append being written (``abort_append``) so a late write never lands over newer data;
``_truncations`` lets a flush running meanwhile in a thread notice it."""

from __future__ import annotations

from common.errors import ErrorCode, KafkaError

from .log_types import _locked
from .segment import LogSegment


class LogRetention:
    """Mixin of ``Log``: truncation, log start, retention."""

    @_locked
    def truncate_to(self, offset: int) -> None:
        """Remove everything at or after ``offset`` (follower truncation). The batch holding
        ``offset`` goes too if ``offset`` is not a batch boundary."""
        self.abort_append()
        if offset >= self.log_end_offset:
            # as Kafka's UnifiedLog.truncateTo: an epoch entry at the log end with no records (this
            # broker led that epoch and appended nothing) goes, or the next fetch names an epoch
            # the new leader never had
            self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
            return
        if offset < self._log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return
        self._truncations += 1
        keep = [s for s in self.segments if s.base_offset < offset]
        for s in self.segments[len(keep):]:
            s.delete(self.config.file_delete_delay_ms / 1000)
        if not keep:
            keep = [LogSegment.create(self.path, offset, **self._segment_kwargs(self.last_flush_ms))]
        else:
            keep[-1].truncate_to(offset)
        self.segments = keep
        self._bases = [s.base_offset for s in keep]
        self._damage = min((s.damage for s in keep if s.damage is not None), key=lambda d: d.offset, default=None)
        leo = self.log_end_offset
        if leo < self.recovery_point:
            self.recovery_point = leo
            self.recovery_point_lowered = True
        self.leader_epoch_cache.truncate_from_end(leo)
        self.producer_state.delete_snapshots_after(leo)
        self._rebuild_producer_state()

    @_locked
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and restart it at ``offset`` (log start = log end = offset)."""
        self.abort_append()
        self._truncations += 1
        for s in self.segments:
            s.delete(self.config.file_delete_delay_ms / 1000)
        seg = LogSegment.create(self.path, offset, **self._segment_kwargs(self.last_flush_ms))
        self.segments = [seg]
        self._bases = [offset]
        self._damage = None
        self._log_start_offset = offset
        if offset < self.recovery_point:
            self.recovery_point_lowered = True
        self.recovery_point = offset
        self.leader_epoch_cache.clear()
        self.producer_state.delete_snapshots_after(-1)
        self.producer_state.reset()
        self.producer_state.map_end_offset = offset

    @_locked
    def delete_records_before(self, offset: int) -> int:
        """Advance the log start offset to ``offset`` (DeleteRecords); returns the new log start.
        Segments wholly below it are deleted. The caller bounds ``offset`` by the high watermark."""
        if offset > self.log_end_offset or offset < 0:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"cannot delete records before {offset}: log end is {self.log_end_offset}")
        if offset > self._log_start_offset:
            self._log_start_offset = offset
            self.leader_epoch_cache.truncate_from_start(offset)
            self._delete_prefix(self._count_below_log_start(), now_ms=self.last_flush_ms)
        return self._log_start_offset

    def _count_below_log_start(self) -> int:
        n = 0
        segs = self.segments
        while n + 1 < len(segs) and segs[n + 1].base_offset <= self._log_start_offset:
            n += 1
        return n

    @_locked
    def apply_retention(self, now_ms: int, high_watermark: int | None = None) -> int:
        """Delete whole old segments by retention.ms (a segment's largest timestamp) and
        retention.bytes, never past ``high_watermark`` (default: the log end). When every
        segment is due, a new empty active segment is rolled first, as Kafka does, so the
        active segment itself is never deleted. Returns the number of segments deleted."""
        cfg = self.config
        upper = self.log_end_offset if high_watermark is None else min(high_watermark, self.log_end_offset)
        segs = self.segments
        n = self._count_below_log_start()
        if cfg.delete_enabled:
            diff = self.size_in_bytes - cfg.retention_bytes if cfg.retention_bytes >= 0 else -1
            for i in range(len(segs)):
                if i < n:
                    diff -= segs[i].size
                    continue
                seg = segs[i]
                seg_end = segs[i + 1].base_offset if i + 1 < len(segs) else seg.next_offset
                if seg_end > upper or (seg.size == 0 and i == len(segs) - 1):
                    break
                if seg.size == 0:  # emptied by the cleaner: nothing to keep
                    n = i + 1
                    continue
                by_time = False
                if cfg.retention_ms >= 0:
                    largest = seg.max_timestamp if seg.max_timestamp >= 0 else seg.created_ms
                    by_time = now_ms - largest > cfg.retention_ms
                by_size = diff >= 0 and diff - seg.size >= 0
                if not (by_time or by_size):
                    break
                diff -= seg.size
                n = i + 1
        if n == 0:
            return 0
        return self._delete_prefix(n, now_ms)

    @_locked
    def _delete_prefix(self, n: int, now_ms: int) -> int:
        if n <= 0:
            return 0
        if n >= len(self.segments):
            if self._inflight is None:  # with an append being written into the active one: next time
                self.roll(now_ms)
            n = len(self.segments) - 1
        if n <= 0:
            return 0
        dead, keep = self.segments[:n], self.segments[n:]
        self.segments = keep
        self._bases = [s.base_offset for s in keep]
        for s in dead:
            s.delete(self.config.file_delete_delay_ms / 1000)
        new_start = keep[0].base_offset
        if new_start > self._log_start_offset:
            self._log_start_offset = new_start
            self.leader_epoch_cache.truncate_from_start(new_start)
        self.recovery_point = max(self.recovery_point, new_start)
        self.producer_state.delete_snapshots_before(new_start)
        return len(dead)

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        return self.producer_state.remove_expired(now_ms, expiration_ms)
