"""The share coordinator's state for one ``__share_group_state`` partition, pure (Kafka's
ShareCoordinatorShard): the persisted state of every share partition (group, topic id,
partition) whose key hashes to it, and the records its requests write.

A share partition's state is its start offset (SPSO), its state epoch (bumped when the group's
offsets are altered: writes of an older epoch are fenced), the leader epoch of the partition
leader that last read or wrote it (an older leader's writes are fenced), and state batches:
offset ranges with their delivery state (0 available, 2 acknowledged, 4 archived) and count.

WriteShareGroupState appends a ShareUpdate (the batches written, merged over the state on
replay) or, every ``records_per_snapshot`` updates, a ShareSnapshot of the whole merged state;
InitializeShareGroupState a new snapshot; DeleteShareGroupState tombstones. A ReadShareGroupState
of a newer leader epoch records that epoch (a ShareUpdate) before answering, so that the
previous leader can no longer write. Requests return the records to append without changing
the state: the shell replays them once appended (replay is the only place the state changes).
"""

from __future__ import annotations

import dataclasses

from broker.share import records as sr
from broker.share.records import ShareState, StateBatch, StateKey
from common.errors import ErrorCode

Records = list[tuple[bytes, bytes | None]]
UNINITIALIZED_START_OFFSET = -1


def merge_batches(current: tuple[StateBatch, ...], new: tuple[StateBatch, ...], start: int) -> tuple[StateBatch, ...]:
    """``current`` with ``new`` written over the offsets it covers, everything below ``start``
    dropped, adjacent ranges of the same state and count joined."""
    out: list[StateBatch] = []
    cuts = sorted((b.first_offset, b.last_offset) for b in new)
    for b in current:
        pieces = [(b.first_offset, b.last_offset)]
        for f, la in cuts:
            nxt = []
            for pf, pl in pieces:
                if la < pf or f > pl:
                    nxt.append((pf, pl))
                    continue
                if pf < f:
                    nxt.append((pf, f - 1))
                if la < pl:
                    nxt.append((la + 1, pl))
            pieces = nxt
        out += [StateBatch(pf, pl, b.delivery_state, b.delivery_count) for pf, pl in pieces]
    out += list(new)
    trimmed = []
    for b in sorted(out, key=lambda b: b.first_offset):
        if b.last_offset < start:
            continue
        if b.first_offset < start:
            b = dataclasses.replace(b, first_offset=start)
        if (trimmed and trimmed[-1].last_offset + 1 == b.first_offset
                and (trimmed[-1].delivery_state, trimmed[-1].delivery_count) == (b.delivery_state, b.delivery_count)):
            trimmed[-1] = dataclasses.replace(trimmed[-1], last_offset=b.last_offset)
        else:
            trimmed.append(b)
    return tuple(trimmed)


# How far past its start offset a written state may reach. A share partition leader writes the
# records in flight in its window (group.share.partition.max.record.locks, at most 10,000, plus
# offsets a compacted log no longer has), and loads a state offset by offset: a state reaching
# billions of offsets past its start (a WriteShareGroupState no leader sends) held the loading
# broker's event loop until it ran out of memory.
MAX_STATE_SPAN = 100_000
_DELIVERY_STATES = (sr.AVAILABLE, sr.ACKNOWLEDGED, sr.ARCHIVED)


def batches_problem(start: int, batches: tuple[StateBatch, ...]) -> str | None:
    """Why state batches written over a state starting at ``start`` are invalid, or None."""
    for b in batches:
        if b.first_offset < 0 or b.last_offset < b.first_offset:
            return f"State batch [{b.first_offset}, {b.last_offset}] is not an offset range."
        if b.delivery_state not in _DELIVERY_STATES:
            return f"State batch [{b.first_offset}, {b.last_offset}] has delivery state {b.delivery_state} " \
                   f"(must be 0 available, 2 acknowledged or 4 archived)."
        if b.delivery_count < 0:
            return f"State batch [{b.first_offset}, {b.last_offset}] has delivery count {b.delivery_count}."
        if b.last_offset - max(start, 0) >= MAX_STATE_SPAN:
            return f"State batch [{b.first_offset}, {b.last_offset}] reaches more than {MAX_STATE_SPAN} offsets " \
                   f"past the start offset {start}."
    return None


def _result(error: int = 0, message: str | None = None, **kw) -> dict:
    return {"error_code": int(error), "error_message": message, **kw}


class ShareStateShard:
    def __init__(self, partition: int, records_per_snapshot: int = 500):
        self.partition = partition
        self.records_per_snapshot = records_per_snapshot
        self.states: dict[StateKey, ShareState] = {}
        self.updates: dict[StateKey, int] = {}  # ShareUpdates since the key's last snapshot
        self.snapshot_offsets: dict[StateKey, int] = {}  # log offset of the key's latest snapshot

    # --- replay --------------------------------------------------------------------------------
    def replay(self, key: bytes | None, value: bytes | None, offset: int = -1) -> None:
        if key is None:
            raise sr.RecordFormatError("record without a key")
        kind, k = sr.decode_state_key(key)
        if value is None:
            self.states.pop(k, None)
            self.updates.pop(k, None)
            self.snapshot_offsets.pop(k, None)
            return
        if kind == sr.SHARE_SNAPSHOT:
            self.states[k] = sr.decode_snapshot_value(value)
            self.updates[k] = 0
            self.snapshot_offsets[k] = offset
            return
        u = sr.decode_update_value(value)
        cur = self.states.get(k)
        if cur is None:  # an update with no snapshot before it: as a snapshot
            self.states[k] = dataclasses.replace(u, state_epoch=0)
            self.snapshot_offsets[k] = offset
        else:
            start = u.start_offset if u.start_offset != -1 else cur.start_offset
            self.states[k] = dataclasses.replace(
                cur, snapshot_epoch=u.snapshot_epoch, leader_epoch=max(cur.leader_epoch, u.leader_epoch),
                start_offset=start, batches=merge_batches(cur.batches, u.batches, start),
                delivery_complete_count=(u.delivery_complete_count if u.delivery_complete_count != -1
                                         else cur.delivery_complete_count))
        self.updates[k] = self.updates.get(k, 0) + 1

    def prune_offset(self) -> int | None:
        """The first log offset still needed to rebuild the state (the oldest latest snapshot), or
        None when there is no state."""
        return min(self.snapshot_offsets.values(), default=None)

    @staticmethod
    def _emit(records: Records, kind: int, k: StateKey, value: bytes | None) -> None:
        records.append((sr.state_key(kind, k), value))

    # --- requests ------------------------------------------------------------------------------
    def read(self, k: StateKey, leader_epoch: int) -> tuple[dict, Records]:
        """ReadShareGroupState of one share partition by its leader (``leader_epoch``)."""
        records: Records = []
        s = self.states.get(k)
        if s is None:
            return _result(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The share partition state is not initialized.",
                           state_epoch=0, start_offset=UNINITIALIZED_START_OFFSET, state_batches=[]), records
        if leader_epoch != -1 and leader_epoch < s.leader_epoch:
            return _result(ErrorCode.FENCED_LEADER_EPOCH, f"Leader epoch {leader_epoch} is older than "
                           f"{s.leader_epoch}.", state_epoch=0, start_offset=-1, state_batches=[]), records
        if leader_epoch > s.leader_epoch:
            self._emit(records, sr.SHARE_UPDATE, k, sr.update_value(ShareState(s.snapshot_epoch, -1, leader_epoch, -1)))
        return _result(state_epoch=s.state_epoch, start_offset=s.start_offset,
                       state_batches=[dataclasses.asdict(b) for b in s.batches]), records

    def summary(self, k: StateKey) -> dict:
        s = self.states.get(k)
        if s is None:
            return _result(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The share partition state is not initialized.",
                           state_epoch=0, leader_epoch=-1, start_offset=-1, delivery_complete_count=-1)
        return _result(state_epoch=s.state_epoch, leader_epoch=s.leader_epoch, start_offset=s.start_offset,
                       delivery_complete_count=s.delivery_complete_count)

    def write(self, k: StateKey, state_epoch: int, leader_epoch: int, start_offset: int,
              batches: tuple[StateBatch, ...], delivery_complete_count: int, now_wall: int) -> tuple[dict, Records]:
        records: Records = []
        s = self.states.get(k)
        if s is None:
            return _result(ErrorCode.INVALID_REQUEST, "Write sent for uninitialized share partition."), records
        if leader_epoch != -1 and leader_epoch < s.leader_epoch:
            return _result(ErrorCode.FENCED_LEADER_EPOCH, f"Leader epoch {leader_epoch} is older than "
                           f"{s.leader_epoch}."), records
        if state_epoch != -1 and state_epoch < s.state_epoch:
            return _result(ErrorCode.FENCED_STATE_EPOCH, f"State epoch {state_epoch} is older than "
                           f"{s.state_epoch}."), records
        problem = batches_problem(s.start_offset if start_offset == -1 else start_offset, batches)
        if problem is not None:
            return _result(ErrorCode.INVALID_REQUEST, problem), records
        leader_epoch = s.leader_epoch if leader_epoch == -1 else leader_epoch
        if self.updates.get(k, 0) >= self.records_per_snapshot:
            start = s.start_offset if start_offset == -1 else start_offset
            full = ShareState(s.snapshot_epoch + 1, s.state_epoch if state_epoch == -1 else state_epoch, leader_epoch,
                              start, merge_batches(s.batches, batches, start),
                              delivery_complete_count if delivery_complete_count != -1 else s.delivery_complete_count,
                              s.create_timestamp, now_wall)
            self._emit(records, sr.SHARE_SNAPSHOT, k, sr.snapshot_value(full))
        else:
            self._emit(records, sr.SHARE_UPDATE, k, sr.update_value(ShareState(
                s.snapshot_epoch, -1, leader_epoch, start_offset, batches, delivery_complete_count)))
        return _result(), records

    def initialize(self, k: StateKey, state_epoch: int, start_offset: int, now_wall: int) -> tuple[dict, Records]:
        """InitializeShareGroupState: a new state (AlterShareGroupOffsets: a newer state epoch)."""
        records: Records = []
        s = self.states.get(k)
        if s is not None and s.state_epoch >= state_epoch:
            return _result(ErrorCode.FENCED_STATE_EPOCH, f"State epoch {state_epoch} is not newer than "
                           f"{s.state_epoch}."), records
        snap = -1 if s is None else s.snapshot_epoch
        self._emit(records, sr.SHARE_SNAPSHOT, k, sr.snapshot_value(ShareState(
            snap + 1, state_epoch, -1 if s is None else s.leader_epoch, start_offset, (), -1, now_wall, now_wall)))
        return _result(), records

    def delete(self, k: StateKey) -> tuple[dict, Records]:
        records: Records = []
        if k in self.states:
            self._emit(records, sr.SHARE_SNAPSHOT, k, None)
            self._emit(records, sr.SHARE_UPDATE, k, None)
        return _result(), records


__all__ = ["ShareStateShard", "merge_batches", "batches_problem", "MAX_STATE_SPAN", "UNINITIALIZED_START_OFFSET"]
