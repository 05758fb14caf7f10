"""One share partition on its partition leader (Kafka's SharePartition), pure: which records of
a topic partition a share group has in flight, who holds them, and how often each was delivered.

    start (SPSO)          end (SPEO)
       |  in flight: each offset AVAILABLE / ACQUIRED / ACKNOWLEDGED / ARCHIVED  |  not yet read
    ...|-------------------------------------------------------------------------|...

Records below ``start`` are done (acknowledged or archived); records at or past ``end`` have
never been delivered. ``acquire`` hands a member the available records of the batches the shell
read from the log (first the released ones inside the window, then new ones past ``end``), each
under an acquisition lock until ``now + lock_ms`` and with its delivery count increased; a record
whose count has reached ``delivery_limit`` is archived instead of delivered. ``acknowledge``
applies a member's ACCEPT (acknowledged), RELEASE (available again, or archived at the limit),
REJECT and GAP (archived) to records it holds; an expired lock (``expire``) or a member that goes
away (``release_member``) releases its records. ``start`` then moves past the leading records
that are done.

The state the share coordinator keeps (``snapshot``) is the window with acquired records written
as available with their count: the shell persists it (WriteShareGroupState) before it answers an
acknowledgement or delivers acquired records, so an acknowledged record is never delivered again
and a count survives a leader failover. Sans-IO: ``now`` is monotonic ms.
"""

from __future__ import annotations

import dataclasses

from broker.share.records import ACKNOWLEDGED, ACQUIRED, ARCHIVED, AVAILABLE, StateBatch
from common.errors import ErrorCode

# AcknowledgeType (ShareFetch / ShareAcknowledge)
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
STATE_NAMES = {AVAILABLE: "Available", ACQUIRED: "Acquired", ACKNOWLEDGED: "Acknowledged", ARCHIVED: "Archived"}


@dataclasses.dataclass(slots=True)
class InFlight:
    state: int = AVAILABLE
    count: int = 0  # delivery count
    member: str | None = None  # while ACQUIRED
    deadline: int = 0  # lock expiry (monotonic ms) while ACQUIRED


@dataclasses.dataclass(frozen=True, slots=True)
class Acquired:
    first_offset: int
    last_offset: int
    delivery_count: int


class SharePartition:
    def __init__(self, group_id: str, topic: str, partition: int, *, delivery_limit: int = 5, lock_ms: int = 30_000,
                 max_locks: int = 2000):
        self.group_id = group_id
        self.topic = topic
        self.partition = partition
        self.delivery_limit = delivery_limit
        self.lock_ms = lock_ms
        self.max_locks = max_locks
        self.start = -1  # -1: not initialized yet (the shell applies share.auto.offset.reset)
        self.end = -1
        self.state_epoch = 0
        self.recs: dict[int, InFlight] = {}  # offsets in [start, end) with a state; missing: available, count 0
        self.version = 0  # bumped by every change the share coordinator must learn of
        self.acquired = 0  # records ACQUIRED now

    def __repr__(self) -> str:
        return f"<SharePartition {self.group_id} {self.topic}-{self.partition} [{self.start}, {self.end})>"

    @property
    def initialized(self) -> bool:
        return self.start >= 0

    # --- loading -------------------------------------------------------------------------------
    def load(self, state_epoch: int, start: int, batches) -> None:
        """The state read from the share coordinator (ReadShareGroupState); ``start`` -1: none yet."""
        self.state_epoch = state_epoch
        self.recs.clear()
        self.acquired = 0
        self.start = start
        self.end = start
        if start < 0:
            return
        for b in batches:
            for off in range(max(b.first_offset, start), b.last_offset + 1):
                st = b.delivery_state if b.delivery_state in (ACKNOWLEDGED, ARCHIVED) else AVAILABLE
                if st != AVAILABLE or b.delivery_count:
                    self.recs[off] = InFlight(st, b.delivery_count)
            self.end = max(self.end, b.last_offset + 1)
        self._advance()

    def initialize(self, start: int) -> None:
        """No state yet: start at ``start`` (share.auto.offset.reset)."""
        self.start = self.end = start
        self.version += 1

    def move_start(self, offset: int) -> None:
        """The log start moved past ``start`` (retention, DeleteRecords): those records are gone."""
        if offset <= self.start:
            return
        for off in range(self.start, min(offset, self.end)):
            r = self.recs.pop(off, None)
            if r is not None and r.state == ACQUIRED:
                self.acquired -= 1
        self.start = offset
        self.end = max(self.end, offset)
        self._advance()
        self.version += 1

    # --- queries -------------------------------------------------------------------------------
    def fetch_offset(self) -> int:
        """Where the next read of the log starts: the first available record in flight, else ``end``."""
        for off in range(self.start, self.end):
            r = self.recs.get(off)
            if r is None or r.state == AVAILABLE:
                return off
        return self.end

    def can_acquire(self) -> bool:
        """Whether a read may find something: a record in flight is available, or the window has room."""
        return self.fetch_offset() < self.end or self.end - self.start < self.max_locks

    def holder(self, offset: int) -> str | None:
        r = self.recs.get(offset)
        return r.member if r is not None and r.state == ACQUIRED else None

    def state_of(self, offset: int) -> tuple[int, int]:
        """(state, delivery count) of an offset; below ``start``: (ACKNOWLEDGED-or-ARCHIVED as ARCHIVED, -1)."""
        if offset < self.start:
            return ARCHIVED, -1
        r = self.recs.get(offset)
        return (AVAILABLE, 0) if r is None else (r.state, r.count)

    def delivery_complete_count(self) -> int:
        return sum(1 for r in self.recs.values() if r.state in (ACKNOWLEDGED, ARCHIVED))

    def next_deadline(self) -> int | None:
        if not self.acquired:
            return None
        return min(r.deadline for r in self.recs.values() if r.state == ACQUIRED)

    # --- acquisition ---------------------------------------------------------------------------
    def acquire(self, member: str, batches, max_records: int, now: int) -> list[Acquired]:
        """``batches``: (first offset, last offset, nothing to deliver) of what the shell read from
        the log, in order, from ``fetch_offset()`` on; a batch with nothing to deliver (a transaction
        marker, an aborted transaction's batch under read_committed) is archived. Acquires up to ``max_records`` available
        records for ``member``; returns them as ranges of one delivery count."""
        out: list[Acquired] = []
        n = 0
        deadline = now + self.lock_ms
        for first, last, control in batches:
            if n >= max_records:
                break
            if last < self.start:
                continue
            for off in range(max(first, self.start), last + 1):
                if n >= max_records:
                    break
                if off >= self.end:
                    if self.end - self.start >= self.max_locks:
                        break
                    for gap in range(self.end, off):  # offsets the log no longer has (compaction)
                        self.recs[gap] = InFlight(ARCHIVED)
                    self.end = off + 1
                    if control:  # a transaction marker: nothing to deliver
                        self.recs[off] = InFlight(ARCHIVED)
                        self.version += 1
                        continue
                    r = self.recs[off] = InFlight()
                else:
                    r = self.recs.get(off)
                    if r is None:
                        if control:
                            self.recs[off] = InFlight(ARCHIVED)
                            self.version += 1
                            continue
                        r = self.recs[off] = InFlight()
                    elif r.state != AVAILABLE:
                        continue
                    if r.count >= self.delivery_limit:  # e.g. acquired up to the limit before a failover
                        r.state = ARCHIVED
                        self.version += 1
                        continue
                r.state, r.member, r.deadline = ACQUIRED, member, deadline
                r.count += 1
                self.acquired += 1
                n += 1
                if out and out[-1].last_offset + 1 == off and out[-1].delivery_count == r.count:
                    out[-1] = Acquired(out[-1].first_offset, off, r.count)
                else:
                    out.append(Acquired(off, off, r.count))
        if out:
            self.version += 1
        self._advance()
        return out

    # --- acknowledgement -------------------------------------------------------------------------
    def acknowledge(self, member: str, batches, now: int, renew: bool = False) -> tuple[int, str | None]:
        """``batches``: (first offset, last offset, acknowledge types: one for the whole range or
        one per offset). All or nothing: (error code, message); NONE when applied."""
        ops: list[tuple[int, int]] = []
        for first, last, types in batches:
            if last < first or not types or (len(types) != 1 and len(types) != last - first + 1):
                return ErrorCode.INVALID_REQUEST, f"Invalid acknowledgement batch {first}-{last}."
            for i, off in enumerate(range(first, last + 1)):
                t = types[0] if len(types) == 1 else types[i]
                if t not in (GAP, ACCEPT, RELEASE, REJECT) and not (renew and t == RENEW):
                    return ErrorCode.INVALID_REQUEST, f"Invalid acknowledge type {t}."
                r = self.recs.get(off) if self.start <= off < self.end else None
                if r is None or r.state != ACQUIRED or r.member != member:
                    return (ErrorCode.INVALID_RECORD_STATE,
                            f"The record at offset {off} is not acquired by member {member}.")
                ops.append((off, t))
        for off, t in ops:
            r = self.recs[off]
            if t == RENEW:
                r.deadline = now + self.lock_ms
                continue
            self.acquired -= 1
            r.member = None
            if t == ACCEPT:
                r.state = ACKNOWLEDGED
            elif t == RELEASE:
                r.state = ARCHIVED if r.count >= self.delivery_limit else AVAILABLE
            else:  # REJECT, GAP
                r.state = ARCHIVED
        if ops:
            self.version += 1
        self._advance()
        return ErrorCode.NONE, None

    def _release(self, r: InFlight) -> None:
        self.acquired -= 1
        r.member = None
        r.state = ARCHIVED if r.count >= self.delivery_limit else AVAILABLE

    def release_member(self, member: str) -> bool:
        """The member's share session ended: its records are available again (or archived)."""
        changed = False
        if self.acquired:
            for r in self.recs.values():
                if r.state == ACQUIRED and r.member == member:
                    self._release(r)
                    changed = True
        if changed:
            self.version += 1
            self._advance()
        return changed

    def release_member_offsets(self, member: str, ranges) -> None:
        """Acquired records that could not be delivered (their acquisition was not written) go back."""
        changed = False
        for first, last in ranges:
            for off in range(first, last + 1):
                r = self.recs.get(off)
                if r is not None and r.state == ACQUIRED and r.member == member:
                    self._release(r)
                    changed = True
        if changed:
            self.version += 1
            self._advance()

    def still_acquired(self, member: str, acquired: list[Acquired], now: int) -> list[Acquired]:
        """The parts of ``acquired`` (what an acquisition gave ``member``) that it still holds in
        that delivery at ``now``: a lock that expired before the answer could leave (its
        acquisition was being written) gave the record back, maybe to another member already."""
        out: list[Acquired] = []
        for a in acquired:
            first = None
            for off in range(a.first_offset, a.last_offset + 2):
                r = self.recs.get(off) if off <= a.last_offset else None
                held = (r is not None and r.state == ACQUIRED and r.member == member and r.count == a.delivery_count
                        and r.deadline > now)
                if held and first is None:
                    first = off
                elif not held and first is not None:
                    out.append(Acquired(first, off - 1, a.delivery_count))
                    first = None
        return out

    def expire(self, now: int) -> bool:
        """Acquisition locks past their deadline: their records are released."""
        changed = False
        if self.acquired:
            for r in self.recs.values():
                if r.state == ACQUIRED and r.deadline <= now:
                    self._release(r)
                    changed = True
        if changed:
            self.version += 1
            self._advance()
        return changed

    def _advance(self) -> None:
        while self.start < self.end:
            r = self.recs.get(self.start)
            if r is None or r.state not in (ACKNOWLEDGED, ARCHIVED):
                break
            del self.recs[self.start]
            self.start += 1

    # --- persistence ---------------------------------------------------------------------------
    def snapshot(self) -> tuple[int, tuple[StateBatch, ...]]:
        """(start offset, state batches covering [start, end)) as the share coordinator keeps them."""
        out: list[StateBatch] = []
        for off in range(self.start, self.end):
            r = self.recs.get(off)
            st, count = (AVAILABLE, 0) if r is None else (AVAILABLE if r.state == ACQUIRED else r.state, r.count)
            if out and out[-1].last_offset + 1 == off and (out[-1].delivery_state, out[-1].delivery_count) == (st, count):
                out[-1] = StateBatch(out[-1].first_offset, off, st, count)
            else:
                out.append(StateBatch(off, off, st, count))
        return self.start, tuple(out)


__all__ = ["SharePartition", "Acquired", "InFlight", "GAP", "ACCEPT", "RELEASE", "REJECT", "RENEW", "STATE_NAMES"]
