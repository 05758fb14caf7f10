"""Quorum RPC messages as the sans-IO core sees them (KIP-595 / KIP-630 / KIP-996 shapes).

The gRPC transport converts these to and from ``proto/raft.proto``; the simulator passes
them around as they are. Offsets are Kafka-style: ``log_end``/``hw`` are exclusive (the
next offset), epochs start at 0 (no leader ever).
"""

from __future__ import annotations

import dataclasses

from common.errors import ErrorCode

NONE = int(ErrorCode.NONE)
NOT_LEADER = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
FENCED_LEADER_EPOCH = int(ErrorCode.FENCED_LEADER_EPOCH)
UNKNOWN_LEADER_EPOCH = int(ErrorCode.UNKNOWN_LEADER_EPOCH)
SNAPSHOT_NOT_FOUND = int(ErrorCode.SNAPSHOT_NOT_FOUND)
INCONSISTENT_VOTER_SET = int(ErrorCode.INCONSISTENT_VOTER_SET)

_f = dataclasses.dataclass(frozen=True, slots=True)

# A node's controller listener as (host, port). KIP-853: BeginQuorumEpoch and EndQuorumEpoch
# carry the leader's own (LeaderEndpoints), every response that names a leader carries that
# leader's (NodeEndpoints), so a replica reaches a leader whose new address is in a voters
# record it has not fetched yet. None: not known (or a static quorum, kraft.version 0).
Endpoint = tuple[str, int]


@_f
class Entry:
    """One record of the replicated log; its offset is its position."""

    epoch: int
    timestamp_ms: int
    data: bytes
    control: bool = False  # leader-change record: never handed to listeners


@_f
class VoteRequest:
    epoch: int  # the epoch the candidate stands in (current + 1 for a pre-vote)
    candidate_id: int
    last_epoch: int
    log_end: int
    pre_vote: bool


@_f
class VoteResponse:
    epoch: int
    leader_id: int | None
    granted: bool
    pre_vote: bool
    error: int = NONE
    leader_endpoint: Endpoint | None = None


@_f
class BeginQuorumEpochRequest:
    epoch: int
    leader_id: int
    leader_endpoint: Endpoint | None = None  # the sender's own listener


@_f
class BeginQuorumEpochResponse:
    epoch: int
    leader_id: int | None
    error: int = NONE
    leader_endpoint: Endpoint | None = None


@_f
class EndQuorumEpochRequest:
    epoch: int
    leader_id: int
    preferred_successors: tuple[int, ...]
    leader_endpoint: Endpoint | None = None  # the sender's own listener


@_f
class EndQuorumEpochResponse:
    epoch: int
    leader_id: int | None
    error: int = NONE
    leader_endpoint: Endpoint | None = None


@_f
class FetchRequest:
    epoch: int
    replica_id: int
    fetch_offset: int
    last_fetched_epoch: int
    max_wait_ms: int


@_f
class FetchResponse:
    epoch: int
    leader_id: int | None
    error: int = NONE
    high_watermark: int = -1  # -1: the leader has not committed in its epoch yet
    log_start: int = 0
    base_offset: int = 0
    entries: tuple[Entry, ...] = ()
    diverging_epoch: int = -1  # >= 0: truncate, see KIP-595 DivergingEpoch
    diverging_end_offset: int = -1
    snapshot_end_offset: int = -1  # >= 0: too far behind, FetchSnapshot this one
    snapshot_epoch: int = -1
    leader_endpoint: Endpoint | None = None  # NodeEndpoints: the named leader's listener


@_f
class FetchSnapshotRequest:
    epoch: int
    replica_id: int
    end_offset: int
    snapshot_epoch: int
    position: int  # index of the first snapshot record wanted


@_f
class FetchSnapshotResponse:
    epoch: int
    leader_id: int | None
    error: int = NONE
    end_offset: int = -1
    snapshot_epoch: int = -1
    position: int = 0
    total: int = 0  # number of records in the whole snapshot
    records: tuple[bytes, ...] = ()
    leader_endpoint: Endpoint | None = None


REQUESTS = (VoteRequest, BeginQuorumEpochRequest, EndQuorumEpochRequest, FetchRequest, FetchSnapshotRequest)
RESPONSES = (VoteResponse, BeginQuorumEpochResponse, EndQuorumEpochResponse, FetchResponse, FetchSnapshotResponse)


@dataclasses.dataclass(frozen=True, slots=True)
class Message:
    """``corr`` pairs a response with its request: the requester picks it, the responder
    copies it."""

    src: int
    dst: int
    corr: int
    body: object

    @property
    def is_request(self) -> bool:
        return isinstance(self.body, REQUESTS)
