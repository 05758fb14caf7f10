"""An in-memory model of one partition's ``Log`` with the operations replication uses.

One record per offset (a batch of one): ``(epoch, value)``. The leader epoch cache is the
real ``LeaderEpochCache`` without a file. Durability follows Kafka's default
(``flush.messages``/``flush.ms`` = never fsync): the broker never flushes; the OS writes
dirty pages back now and then (``writeback()``). A process kill keeps the page cache; a
power loss (``lose_unflushed()``) drops every record past the last writeback, and the
epoch cache is cut back to the surviving log end as ``Log.open`` does on recovery.
"""

from __future__ import annotations

from broker.log.leader_epoch import LeaderEpochCache


class SimLog:
    def __init__(self) -> None:
        self.log_start_offset = 0
        self.records: list[tuple[int, int]] = []  # index = offset - log_start_offset
        self.leader_epoch_cache = LeaderEpochCache(None)
        self.flushed_offset = 0  # records below survive a power loss
        # the epoch cache checkpoint is written (fsynced) on every change in Kafka; model it
        # as durable, recovery trims it to the log end

    @property
    def log_end_offset(self) -> int:
        return self.log_start_offset + len(self.records)

    def get(self, offset: int) -> tuple[int, int] | None:
        i = offset - self.log_start_offset
        if 0 <= i < len(self.records):
            return self.records[i]
        return None

    def value_at(self, offset: int) -> int | None:
        r = self.get(offset)
        return r[1] if r is not None else None

    def append_as_leader(self, epoch: int, value: int) -> int:
        offset = self.log_end_offset
        self.leader_epoch_cache.assign(epoch, offset)
        self.records.append((epoch, value))
        return offset

    def append_as_follower(self, first_offset: int, records: list[tuple[int, int]]) -> None:
        if first_offset != self.log_end_offset:
            raise ValueError(f"append at {first_offset} does not continue log end {self.log_end_offset}")
        for i, (epoch, _value) in enumerate(records):
            self.leader_epoch_cache.assign(epoch, first_offset + i)
        self.records.extend(records)

    def read(self, offset: int, max_records: int) -> list[tuple[int, int]]:
        i = offset - self.log_start_offset
        return self.records[i:i + max_records]

    def truncate_to(self, offset: int) -> None:
        if offset >= self.log_end_offset:
            # as Kafka: drop an epoch entry that starts at the log end with no records
            self.leader_epoch_cache.truncate_from_end(offset)
            return
        if offset < self.log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return
        del self.records[offset - self.log_start_offset:]
        self.flushed_offset = min(self.flushed_offset, offset)
        self.leader_epoch_cache.truncate_from_end(offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.records = []
        self.log_start_offset = offset
        self.flushed_offset = offset
        self.leader_epoch_cache.clear()

    def writeback(self) -> None:
        self.flushed_offset = self.log_end_offset

    def lose_unflushed(self) -> list[tuple[int, int]]:
        """Power loss: returns the (offset, value) pairs lost."""
        keep = max(self.flushed_offset - self.log_start_offset, 0)
        lost = [(self.log_start_offset + keep + i, v) for i, (_e, v) in enumerate(self.records[keep:])]
        del self.records[keep:]
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        return lost
