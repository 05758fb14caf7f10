"""Offset translation, as MirrorMaker 2 does it (sans-IO: no clients, no clock).

- ``SyncEmitter`` (MM2's OffsetSyncWriter.PartitionState): for each copied record, whether an
  offset sync (upstream offset -> downstream offset) must go out now: the first of a run, when
  translation would otherwise lag ``offset.lag.max`` behind, when the source skipped an offset
  (compaction, transaction markers) or the downstream offsets went back.
- ``OffsetSyncStore``: the syncs of each source partition, kept at exponentially growing
  distances behind the latest (64 slots: invariants A-D of MM2's OffsetSyncStore), so that a
  consumer group anywhere in the topic translates to a downstream offset that is never past
  what it has consumed (at most one record past the closest sync, never more: no gaps).
- ``checkpoint_filter``: which new checkpoints to emit (monotonic downstream, rewinds pass).
- ``group_offsets_to_sync``: which translated offsets to write into the target's group.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from mirror.formats import Checkpoint, OffsetSync

SYNCS_PER_PARTITION = 64


class SyncEmitter:
    """One source partition's OffsetSyncWriter.PartitionState."""

    __slots__ = ("max_lag", "prev_upstream", "prev_downstream", "last_sync_downstream")

    def __init__(self, max_lag: int):
        self.max_lag = max_lag
        self.prev_upstream = -1
        self.prev_downstream = -1
        self.last_sync_downstream = -1

    def update(self, upstream: int, downstream: int) -> bool:
        """True when this record's (upstream, downstream) pair should be sent as a sync now
        (else it is only the latest candidate, sent by the periodic flush)."""
        emit = (self.last_sync_downstream == -1
                or downstream - (self.last_sync_downstream + 1) >= self.max_lag
                or upstream - self.prev_upstream != 1
                or downstream < self.prev_downstream)
        if emit:
            self.last_sync_downstream = downstream
        self.prev_upstream = upstream
        self.prev_downstream = downstream
        return emit


def _long(x: int) -> int:
    """Java's 64-bit wrap-around: MM2's bounds overflow on purpose (1L << 63 is negative)."""
    return ((x + (1 << 63)) & ((1 << 64) - 1)) - (1 << 63)


def _invariant_b(i_sync: OffsetSync, j_sync: OffsetSync, i: int, j: int) -> bool:
    bound = _long(j_sync.upstream_offset + _long(1 << j) - _long(1 << i))
    return i_sync is j_sync or bound < 0 or i_sync.upstream_offset <= bound


def _invariant_c(i_sync: OffsetSync, j_sync: OffsetSync, i: int) -> bool:
    bound = _long(j_sync.upstream_offset + (1 << max(i - 2, 0)))
    return i_sync is j_sync or (bound >= 0 and i_sync.upstream_offset >= bound)


class OffsetSyncStore:
    """The offset syncs read from the offset-syncs topic and the translation made from them."""

    def __init__(self, must_read_to_end: bool = True):
        self._syncs: dict[tuple[str, int], list[OffsetSync]] = {}
        self.must_read_to_end = must_read_to_end
        self.read_to_end = False

    def handle(self, sync: OffsetSync) -> None:
        tp = (sync.topic, sync.partition)
        syncs = self._syncs.get(tp)
        if syncs is None:
            self._syncs[tp] = [sync] * SYNCS_PER_PARTITION
            return
        if (not self.read_to_end and self.must_read_to_end) or sync.upstream_offset < syncs[0].upstream_offset:
            # while loading only the last sync may be used (monotonic translation), and an
            # upstream rewind (a recreated topic) makes every older sync wrong
            self._syncs[tp] = [sync] * SYNCS_PER_PARTITION
            return
        self._syncs[tp] = self._update(syncs, sync)

    @staticmethod
    def _update(original: list[OffsetSync], sync: OffsetSync) -> list[OffsetSync]:
        syncs = list(original)
        replacement = sync
        replacement_index = 0
        syncs[0] = replacement
        for current in range(1, SYNCS_PER_PARTITION):
            previous = current - 1
            while True:
                old = original[replacement_index]
                is_recent = _invariant_b(syncs[previous], old, previous, current)
                separated_prev = _invariant_c(syncs[previous], old, previous)
                nxt = current + 1
                separated_next = nxt >= SYNCS_PER_PARTITION or _invariant_c(old, syncs[nxt], current)
                nrep = replacement_index + 1
                duplicate = nrep < SYNCS_PER_PARTITION and old is original[nrep]
                promote = is_recent and separated_prev and separated_next
                if promote:
                    replacement = old
                skip = duplicate or not separated_prev
                if promote or skip:
                    replacement_index += 1
                if not (replacement_index < current and skip):
                    break
            if _invariant_b(syncs[previous], syncs[current], previous, current):
                break
            syncs[current] = replacement
        return syncs

    def translate_downstream(self, topic: str, partition: int, upstream_offset: int) -> int | None:
        """The target offset a group at ``upstream_offset`` on the source may resume from: None
        when unknown (not loaded yet, no sync), -1 when the offset is older than every sync kept."""
        if not self.read_to_end:
            return None
        syncs = self._syncs.get((topic, partition))
        if syncs is None:
            return None
        found = syncs[-1]
        for s in syncs:
            if s.upstream_offset <= upstream_offset:
                found = s
                break
        if found.upstream_offset > upstream_offset:
            return -1
        # past the sync only one record can be vouched for: more could skip records not yet copied
        return found.downstream_offset + (0 if upstream_offset == found.upstream_offset else 1)

    def syncs(self, topic: str, partition: int) -> list[OffsetSync]:
        """The distinct syncs kept for a partition, latest first (for tests and diagnostics)."""
        out: list[OffsetSync] = []
        for s in self._syncs.get((topic, partition), []):
            if not out or out[-1] is not s:
                out.append(s)
        return out


def checkpoint_filter(new: Iterable[Checkpoint],
                      last: Mapping[tuple[str, int], Checkpoint] | None) -> list[Checkpoint]:
    """MirrorCheckpointTask.checkpointIsMoreRecent over one group's candidates: emit the first,
    an upstream rewind, or a downstream advance; never move the downstream offset back otherwise."""
    out = []
    for cp in new:
        if cp.downstream_offset < 0:
            continue
        prev = (last or {}).get((cp.topic, cp.partition))
        if (prev is None or cp.upstream_offset < prev.upstream_offset
                or cp.downstream_offset > prev.downstream_offset):
            out.append(cp)
    return out


def group_offsets_to_sync(converted: Mapping[tuple[str, int], tuple[int, str]],
                          target_committed: Mapping[tuple[str, int], int | None] | None
                          ) -> dict[tuple[str, int], tuple[int, str]]:
    """MirrorCheckpointTask.syncGroupOffset for one group that is not active on the target
    (``target_committed`` None: the group is new there). Only moves a target offset forward."""
    if target_committed is None:
        return dict(converted)
    out = {}
    for tp, (offset, meta) in converted.items():
        have = target_committed.get(tp, "absent")
        if have == "absent" or have is None or have < offset:
            out[tp] = (offset, meta)
    return out
