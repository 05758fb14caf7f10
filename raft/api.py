"""The interface between a metadata log (Raft quorum, or the single-node local log) and the
state machines on top of it (the quorum controller, a broker's metadata loader).

It mirrors KRaft's ``RaftClient`` / ``RaftClient.Listener``: records are opaque bytes to
the log; listeners get committed batches in order, snapshots to load, and leader changes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Iterable, Sequence
from typing import Protocol


@dataclasses.dataclass(frozen=True, slots=True)
class LeaderAndEpoch:
    leader_id: int | None  # None while no leader is known
    epoch: int


@dataclasses.dataclass(frozen=True, slots=True)
class Batch:
    """A committed batch of records. Offsets are consecutive from ``base_offset``."""

    base_offset: int
    epoch: int
    append_timestamp_ms: int
    records: Sequence[bytes]

    @property
    def last_offset(self) -> int:
        return self.base_offset + len(self.records) - 1


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    """A state machine snapshot that covers every record with offset < ``end_offset``."""

    end_offset: int
    epoch: int  # epoch of the last record included
    records: Sequence[bytes]


class Listener(Protocol):
    def handle_commit(self, batches: Iterable[Batch]) -> None:
        """Committed batches, in offset order, each exactly once (after any snapshot load)."""

    def handle_load_snapshot(self, snapshot: Snapshot) -> None:
        """Replace all state with the snapshot; later commits continue from its end offset."""

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        """A new leader (or none) for a new epoch."""


class MetadataLog(Protocol):
    """What the node needs from a metadata log, whichever implementation it is."""

    node_id: int

    def register(self, listener: Listener) -> None: ...

    def leader(self) -> LeaderAndEpoch: ...

    async def append(self, records: Sequence[bytes], expected_epoch: int | None = None) -> int:
        """Append records as the leader; returns the offset of the last one once committed.
        Raises NotLeaderError if this node is not the leader (of ``expected_epoch``)."""

    def propose(self, records: Sequence[bytes], expected_epoch: int | None = None) -> tuple[int, Awaitable[int]]:
        """``append`` in two halves: queues the records now and returns the offset of the last
        one with an awaitable that completes when they are committed (or raises
        NotLeaderError). Lets a caller pipeline writes without awaiting each commit."""

    def next_offset(self) -> int:
        """The offset the next proposed record will get (leader only)."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...


class NotLeaderError(Exception):
    def __init__(self, leader: LeaderAndEpoch):
        super().__init__(f"not the leader; leader is {leader.leader_id} in epoch {leader.epoch}")
        self.leader = leader
