"""The sans-IO KRaft core: one node of the metadata quorum as a pure state machine.

Inputs: ``step(message, now_ms)``, ``poll(now_ms)`` (timers), ``propose(records, now_ms)``,
``take_snapshot(end_offset, records, now_ms)``, ``peer_unreachable(peer, corr, now_ms)``.
Output: ``take_ready()`` returns a :class:`Ready`: the persistence ops (truncate, append,
quorum state, snapshot) the shell must make durable *first*, then the messages to send,
then the notifications (snapshot load, committed entries, leader changes) for listeners.
The shell calls ``advance(ready)`` once the ops are durable; only then does the leader
count its own entries towards the high watermark.

Roles (KIP-595 + KIP-996): unattached, follower, prospective (pre-vote), candidate,
leader, resigned. Voters elect; observers (non-voters) only fetch. Replication is pull
based: followers Fetch from the leader, which learns their durable log end from the fetch
offset and long-polls fetches that have nothing new. The leader appends a leader-change
control record when it takes office and advances the high watermark only once a
majority holds an entry of its own epoch. A leader that stops hearing from a majority
within 1.5 x fetch timeout resigns (check-quorum).

No clocks, sockets, threads or global randomness in here: time comes in as ``now_ms`` and
randomness from the injected ``rng`` (anything with ``random()``).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
from collections.abc import Sequence

from common.errors import ErrorCode
from raft import quorum
from raft.api import LeaderAndEpoch, NotLeaderError, Snapshot
from raft.messages import (
    FENCED_LEADER_EPOCH,
    NONE,
    NOT_LEADER,
    SNAPSHOT_NOT_FOUND,
    UNKNOWN_LEADER_EPOCH,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    Endpoint,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Entry,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    VoteRequest,
    VoteResponse,
)

log = logging.getLogger("krafty.raft")

NEVER = 1 << 62


class Role(enum.Enum):
    UNATTACHED = "unattached"
    FOLLOWER = "follower"
    PROSPECTIVE = "prospective"
    CANDIDATE = "candidate"
    LEADER = "leader"
    RESIGNED = "resigned"


@dataclasses.dataclass(frozen=True)
class Timeouts:
    election_ms: int = 1000  # controller.quorum.election.timeout.ms
    fetch_ms: int = 2000  # controller.quorum.fetch.timeout.ms
    election_backoff_max_ms: int = 1000  # controller.quorum.election.backoff.max.ms
    append_linger_ms: int = 25  # controller.quorum.append.linger.ms
    request_ms: int = 2000  # controller.quorum.request.timeout.ms
    retry_backoff_ms: int = 20  # controller.quorum.retry.backoff.ms
    fetch_max_wait_ms: int = 500  # how long the leader parks a fetch with nothing new
    fetch_max_records: int = 2000
    snapshot_chunk_records: int = 1000


@dataclasses.dataclass(frozen=True, slots=True)
class QuorumState:
    """What survives a restart (KIP-595 quorum-state file)."""

    epoch: int = 0
    voted_for: int | None = None
    leader_id: int | None = None


# Persistence ops, applied in order and atomically by the shell.
@dataclasses.dataclass(frozen=True, slots=True)
class Truncate:
    offset: int  # delete every entry >= offset


@dataclasses.dataclass(frozen=True, slots=True)
class Append:
    base_offset: int
    entries: tuple[Entry, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class SaveState:
    state: QuorumState


@dataclasses.dataclass(frozen=True, slots=True)
class SaveSnapshot:
    snapshot: Snapshot  # replaces the previous one; entries below its end are deleted


@dataclasses.dataclass(frozen=True, slots=True)
class Committed:
    base_offset: int
    entries: tuple[Entry, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class LoadSnapshot:
    snapshot: Snapshot


@dataclasses.dataclass(frozen=True, slots=True)
class LeaderChange:
    leader: LeaderAndEpoch


@dataclasses.dataclass(slots=True)
class Ready:
    ops: list
    messages: list[Message]
    notifications: list  # LoadSnapshot | Committed | LeaderChange, in order
    log_end: int


@dataclasses.dataclass(slots=True)
class ReplicaState:
    end_offset: int = -1
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    last_sent_hw: int = -2


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaInfo:
    replica_id: int
    log_end_offset: int
    last_fetch_ms: int
    last_caught_up_ms: int


@dataclasses.dataclass(frozen=True, slots=True)
class QuorumInfo:
    leader_id: int
    epoch: int
    high_watermark: int  # -1 until the leader has committed in its epoch
    voters: tuple[ReplicaInfo, ...]
    observers: tuple[ReplicaInfo, ...]


def leader_change_record(leader_id: int, epoch: int, voters: Sequence[int]) -> bytes:
    return f"LeaderChange leader={leader_id} epoch={epoch} voters={','.join(map(str, voters))}".encode()


# --- KIP-853: the voter set in the log ---------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class Voter:
    """A voter of a dynamic quorum: its id, the id of its metadata directory (a replaced disk is
    another voter), and where its controller listener is."""

    id: int
    directory_id: str = ""
    host: str = ""
    port: int = 0


VOTERS_PREFIX = b"KRaftVoters "  # a control entry (and a snapshot's first record): the voter set


def voters_record(voters: Sequence[Voter]) -> bytes:
    return VOTERS_PREFIX + json.dumps([[v.id, v.directory_id, v.host, v.port] for v in sorted(
        voters, key=lambda v: v.id)], separators=(",", ":")).encode()


def parse_voters_record(data: bytes) -> tuple[Voter, ...] | None:
    if not data.startswith(VOTERS_PREFIX):
        return None
    return tuple(Voter(int(i), str(d), str(h), int(p)) for i, d, h, p in json.loads(data[len(VOTERS_PREFIX):]))


class VoterChangeError(Exception):
    """AddRaftVoter / RemoveRaftVoter refused: ``code`` is Kafka's error code."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class RaftCore:
    def __init__(
        self,
        node_id: int,
        voters: Sequence[int],
        rng,
        timeouts: Timeouts = Timeouts(),
        *,
        state: QuorumState = QuorumState(),
        snapshot: Snapshot | None = None,
        entries: Sequence[Entry] = (),
        now_ms: int = 0,
        initial_voters: Sequence[Voter] | None = None,
        endpoint: Endpoint | None = None,
    ):
        self.id = node_id
        # KIP-853: this node's own controller listener (what it sends as the leader's endpoint; the
        # voter set may still hold an older one), and the endpoint the leader we follow sent us.
        self.endpoint = endpoint
        self.leader_endpoint: Endpoint | None = None
        # The voter set: the latest voters record in the log (committed or not, KIP-853), else the
        # snapshot's, else ``initial_voters`` (a quorum formatted for KIP-853, kraft.version 1), else
        # the static ``voters`` (controller.quorum.voters, kraft.version 0).
        self.static_voters = tuple(Voter(v) for v in sorted(voters)) if initial_voters is None else tuple(
            sorted(initial_voters, key=lambda v: v.id))
        self.dynamic = initial_voters is not None  # kraft.version 1
        self.snapshot_voters: tuple[Voter, ...] | None = None
        self.voters_offset = -1  # offset of the voters record in force (-1: snapshot's or initial)
        self.voter_info: dict[int, Voter] = {}
        self.voters: tuple[int, ...] = ()
        self.is_voter = False
        self.rng = rng
        self.t = timeouts
        self.epoch = state.epoch
        self.voted_for = state.voted_for
        self.leader_id = state.leader_id
        # The log: snapshot + entries[log_start:]
        if snapshot is not None:
            self._read_snapshot_voters(snapshot)
        self.snapshot = snapshot
        self.log_start = snapshot.end_offset if snapshot else 0
        self.log: list[Entry] = list(entries)
        self.epochs: list[tuple[int, int]] = []  # (epoch, start offset) per epoch present in log
        self._rebuild_epochs()
        self._refresh_voters()
        self.durable_end = self.log_end
        self.hw = self.log_start
        self.applied = self.log_start
        # outputs
        self._ops: list = []
        self._msgs: list[Message] = []
        self._notes: list = []
        self._low_since_take = self.log_end
        self._corr = 0
        self._last_notified: LeaderAndEpoch | None = None
        if snapshot is not None:
            self._notes.append(LoadSnapshot(_without_voters(snapshot)))
        # timers and per-role state
        self.deadline = NEVER  # election / fetch / backoff timer of the current role
        self.votes: set[int] = set()
        self.rejects: set[int] = set()
        self.election_attempts = 0
        self.replicas: dict[int, ReplicaState] = {}
        self.epoch_start = -1
        self.parked: dict[int, tuple[Message, int]] = {}
        self.begin_pending: dict[int, int] = {}  # voter -> when BeginQuorumEpoch was last sent
        self.check_quorum_at = NEVER
        self.accum: list[tuple[Sequence[bytes], int]] = []
        self.accum_count = 0
        self.accum_deadline = NEVER
        self.fetch_corr: int | None = None
        self.fetch_sent_ms = 0
        self.fetch_target: int | None = None
        self.retry_fetch_at = NEVER
        # When we last heard from the leader itself (not just of it): only that makes us refuse
        # pre-votes (KIP-996), so a node following a leader it cannot reach never blocks an election.
        self.last_fetch_ok_ms = -NEVER
        self.leader_unreachable = False
        self.snap_partial: tuple[int, int, list[bytes]] | None = None
        self.prospective_leader: int | None = None
        self.role = Role.UNATTACHED
        if self.leader_id == self.id:
            # Restarted after leading: the in-memory leader state is gone, so resign the epoch.
            self._become_resigned(now_ms, send_end=False)
            if self.voters == (self.id,):
                self.deadline = now_ms  # a quorum of one has nobody to wait for (as KafkaRaftClient)
        elif self.leader_id is not None:
            self._become_follower(self.epoch, self.leader_id, now_ms)
        else:
            self._become_unattached(now_ms)
        self._notify_leader()

    # ------------------------------------------------------------------ log helpers
    @property
    def log_end(self) -> int:
        return self.log_start + len(self.log)

    def _rebuild_epochs(self) -> None:
        self.epochs = []
        for i, e in enumerate(self.log):
            if not self.epochs or self.epochs[-1][0] != e.epoch:
                self.epochs.append((e.epoch, self.log_start + i))

    # ------------------------------------------------------------------ the voter set (KIP-853)
    def _read_snapshot_voters(self, snap: Snapshot) -> None:
        vs = parse_voters_record(snap.records[0]) if snap.records else None
        if vs is not None:
            self.snapshot_voters = vs
            self.dynamic = True

    def _refresh_voters(self) -> None:
        """The voter set in force: the latest voters record of the log, else the snapshot's,
        else the initial one. Called whenever the log changes (append, truncate, snapshot)."""
        found = None
        for i in range(len(self.log) - 1, -1, -1):
            e = self.log[i]
            if e.control and e.data.startswith(VOTERS_PREFIX):
                found = (self.log_start + i, parse_voters_record(e.data))
                break
        if found is not None:
            self.voters_offset, vs = found
            self.dynamic = True
        else:
            self.voters_offset = -1
            vs = self.snapshot_voters if self.snapshot_voters is not None else self.static_voters
        self.voter_info = {v.id: v for v in vs}
        old = self.voters
        self.voters = tuple(sorted(self.voter_info))
        self.is_voter = self.id in self.voter_info
        if old and old != self.voters:
            log.info("node %d: voters are now %s", self.id, list(self.voters))

    def voter_change_pending(self) -> bool:
        return self.voters_offset >= self.hw

    def _voters_at(self, end: int) -> tuple[Voter, ...] | None:
        """The voter set of the log's prefix below ``end`` (what a snapshot ending there holds)."""
        for off in range(min(end, self.log_end) - 1, self.log_start - 1, -1):
            e = self.entry_at(off)
            if e.control and e.data.startswith(VOTERS_PREFIX):
                return parse_voters_record(e.data)
        return self.snapshot_voters if self.snapshot_voters is not None else (
            self.static_voters if self.dynamic else None)

    def last_epoch(self) -> int:
        if self.log:
            return self.log[-1].epoch
        return self.snapshot.epoch if self.snapshot else 0

    def entry_at(self, offset: int) -> Entry:
        return self.log[offset - self.log_start]

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(largest epoch <= ``epoch`` in the log, the offset where it ends); (-1, -1) when the
        log holds no such epoch (it may be inside the snapshot)."""
        for i in range(len(self.epochs) - 1, -1, -1):
            e, _start = self.epochs[i]
            if e <= epoch:
                end = self.epochs[i + 1][1] if i + 1 < len(self.epochs) else self.log_end
                return e, end
        if self.snapshot is not None and self.snapshot.epoch <= epoch:
            return self.snapshot.epoch, self.log_start
        if self.snapshot is None and self.log_start == 0:
            return 0, 0
        return -1, -1

    def _append(self, entries: Sequence[Entry]) -> None:
        if not entries:
            return
        base = self.log_end
        for i, e in enumerate(entries):
            if not self.epochs or self.epochs[-1][0] != e.epoch:
                self.epochs.append((e.epoch, base + i))
        self.log.extend(entries)
        self._ops.append(Append(base, tuple(entries)))
        if any(e.control for e in entries):
            self._refresh_voters()

    def _truncate(self, offset: int) -> None:
        if offset >= self.log_end:
            return
        assert offset >= self.hw, f"node {self.id} truncating committed entries ({offset} < hw {self.hw})"
        assert offset >= self.log_start
        del self.log[offset - self.log_start:]
        while self.epochs and self.epochs[-1][1] >= offset:
            self.epochs.pop()
        self.durable_end = min(self.durable_end, offset)
        self._low_since_take = min(self._low_since_take, offset)
        self._ops.append(Truncate(offset))
        self._refresh_voters()

    # ------------------------------------------------------------------ outputs
    def _send(self, dst: int, body, corr: int | None = None) -> int:
        if corr is None:
            self._corr += 1
            corr = self._corr
        self._msgs.append(Message(self.id, dst, corr, body))
        return corr

    def _persist_state(self) -> None:
        self._ops.append(SaveState(QuorumState(self.epoch, self.voted_for, self.leader_id)))

    def _notify_leader(self) -> None:
        cur = LeaderAndEpoch(self.leader_id if self.role in (Role.FOLLOWER, Role.LEADER) else None, self.epoch)
        if cur != self._last_notified:
            self._emit_commits()
            self._last_notified = cur
            self._notes.append(LeaderChange(cur))

    def _emit_commits(self) -> None:
        end = min(self.hw, self.log_end)
        if end > self.applied:
            start = max(self.applied, self.log_start)
            self._notes.append(Committed(start, tuple(self.log[start - self.log_start:end - self.log_start])))
            self.applied = end

    def has_ready(self) -> bool:
        return bool(self._ops or self._msgs or self._notes)

    def take_ready(self) -> Ready | None:
        self._emit_commits()
        if not self.has_ready():
            return None
        r = Ready(self._ops, self._msgs, self._notes, self.log_end)
        self._ops, self._msgs, self._notes = [], [], []
        self._low_since_take = self.log_end
        return r

    def advance(self, ready: Ready, now_ms: int) -> None:
        """The ops of ``ready`` are durable (and its messages sent)."""
        self.durable_end = max(self.durable_end, min(ready.log_end, self._low_since_take))
        if self.role is Role.LEADER:
            self._update_hw(now_ms)

    def next_deadline(self) -> int:
        d = min(self.deadline, self.accum_deadline, self.check_quorum_at, self.retry_fetch_at)
        if self.role is Role.FOLLOWER and self.fetch_corr is not None:
            d = min(d, self.fetch_sent_ms + self.t.request_ms)
        if self.role is Role.LEADER:
            for _m, dl in self.parked.values():
                d = min(d, dl)
            if self.begin_pending:
                d = min(d, min(self.begin_pending.values()) + self._begin_retry_ms())
        return d

    # ------------------------------------------------------------------ transitions
    def _random_election_timeout(self) -> int:
        return self.t.election_ms + int(self.rng.random() * self.t.election_ms)

    def _reset_role_state(self) -> None:
        self.votes, self.rejects = set(), set()
        self.replicas = {}
        self.epoch_start = -1
        self.begin_pending = {}
        self.check_quorum_at = NEVER
        self.accum, self.accum_count, self.accum_deadline = [], 0, NEVER
        self.fetch_corr = None
        self.retry_fetch_at = NEVER
        self.snap_partial = None
        self.leader_unreachable = False
        self.leader_endpoint = None
        if self.parked:
            parked, self.parked = self.parked, {}
            for m, _dl in parked.values():
                self._send(m.src, FetchResponse(self.epoch, None, NOT_LEADER), m.corr)

    def _set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            assert epoch > self.epoch
            self.epoch = epoch
            self.voted_for = None

    def _become_unattached(self, now_ms: int, epoch: int | None = None, delay_ms: int | None = None) -> None:
        self._reset_role_state()
        if epoch is not None:
            self._set_epoch(epoch)
        self.role = Role.UNATTACHED
        self.leader_id = None
        self._persist_state()
        if self.is_voter:
            if delay_ms is None:
                # A quorum of one has nobody to wait for.
                delay_ms = 0 if self.voters == (self.id,) else self._random_election_timeout()
            self.deadline = now_ms + delay_ms
        else:
            self.deadline = NEVER
            self._observer_discover(now_ms)
        self._notify_leader()

    def _become_follower(self, epoch: int, leader_id: int, now_ms: int, endpoint: Endpoint | None = None) -> None:
        self._reset_role_state()
        self._set_epoch(epoch)
        self.role = Role.FOLLOWER
        self.leader_id = leader_id
        self.leader_endpoint = endpoint
        self._persist_state()
        self.last_fetch_ok_ms = -NEVER
        self.deadline = now_ms + self.t.fetch_ms
        self.election_attempts = 0
        self._send_fetch(now_ms)
        self._notify_leader()

    def _become_prospective(self, now_ms: int) -> None:
        """KIP-996 pre-vote: ask without bumping the epoch, so a node that cannot reach the
        leader does not disrupt a quorum that can."""
        had_leader = self.leader_id if self.role is Role.FOLLOWER and not self.leader_unreachable else None
        self._reset_role_state()
        self.role = Role.PROSPECTIVE
        self.prospective_leader = had_leader
        self.votes = {self.id}
        self.deadline = now_ms + self._random_election_timeout()
        self._notify_leader()
        if quorum.has_majority(self.votes, self.voters):
            self._become_candidate(now_ms)
            return
        req = VoteRequest(self.epoch + 1, self.id, self.last_epoch(), self.log_end, True)
        for v in self.voters:
            if v != self.id:
                self._send(v, req)

    def _become_candidate(self, now_ms: int) -> None:
        self._reset_role_state()
        self._set_epoch(self.epoch + 1)
        self.role = Role.CANDIDATE
        self.leader_id = None
        self.voted_for = self.id
        self._persist_state()  # the vote for ourselves is durable before anyone sees the request
        self.votes = {self.id}
        self.deadline = now_ms + self._random_election_timeout()
        self._notify_leader()
        if quorum.has_majority(self.votes, self.voters):
            self._become_leader(now_ms)
            return
        req = VoteRequest(self.epoch, self.id, self.last_epoch(), self.log_end, False)
        for v in self.voters:
            if v != self.id:
                self._send(v, req)

    def _become_leader(self, now_ms: int) -> None:
        self._reset_role_state()
        self.role = Role.LEADER
        self.leader_id = self.id
        self.election_attempts = 0
        self._persist_state()
        self.deadline = NEVER
        self.replicas = {v: ReplicaState(last_fetch_ms=now_ms) for v in self.voters if v != self.id}
        self.check_quorum_at = now_ms + self._check_quorum_ms()
        # The leader-change record: the first entry of the epoch, which must commit before the HW moves.
        self.epoch_start = self.log_end
        first = [Entry(self.epoch, now_ms, leader_change_record(self.id, self.epoch, self.voters), True)]
        if self.dynamic and self.voters_offset < 0 and self.snapshot_voters is None:
            # the first leader of a quorum formatted for KIP-853 writes its initial voter set
            first.append(Entry(self.epoch, now_ms, voters_record(self.static_voters), True))
        self._append(first)
        for v in self.voters:
            if v != self.id:
                self._send(v, BeginQuorumEpochRequest(self.epoch, self.id, self.known_leader_endpoint()))
                self.begin_pending[v] = now_ms
        self._notify_leader()
        self._update_hw(now_ms)

    def _become_resigned(self, now_ms: int, send_end: bool = True) -> None:
        successors = self._preferred_successors()
        endpoint = self.known_leader_endpoint()
        self._reset_role_state()
        self.role = Role.RESIGNED
        self.deadline = now_ms + self._random_election_timeout()
        if send_end:
            req = EndQuorumEpochRequest(self.epoch, self.id, successors, endpoint)
            for v in self.voters:
                if v != self.id:
                    self._send(v, req)
        self._notify_leader()

    def _backoff(self, now_ms: int) -> None:
        """An election was lost: wait a random, growing while, then try a pre-vote again."""
        self.election_attempts += 1
        cap = min(self.t.election_backoff_max_ms, self.t.retry_backoff_ms * (2 ** min(self.election_attempts, 16)))
        delay = int(self.rng.random() * cap)
        self._become_unattached(now_ms, delay_ms=delay)

    def _check_quorum_ms(self) -> int:
        return self.t.fetch_ms * 3 // 2

    def _begin_retry_ms(self) -> int:
        return max(self.t.retry_backoff_ms, self.t.election_ms // 4)

    def _preferred_successors(self) -> tuple[int, ...]:
        if self.role is not Role.LEADER:
            return ()
        others = [v for v in self.voters if v != self.id]
        return tuple(sorted(others, key=lambda v: (-self.replicas[v].end_offset, v)))

    def _observe_epoch(self, epoch: int, leader_id: int | None, now_ms: int, endpoint: Endpoint | None = None) -> bool:
        """Any message with a newer epoch (or naming the leader of ours) moves us along;
        ``endpoint`` is the named leader's listener, if the message carried it.
        Returns True if we changed role."""
        if epoch > self.epoch:
            if leader_id is not None and leader_id != self.id:
                self._become_follower(epoch, leader_id, now_ms, endpoint)
            else:
                self._become_unattached(now_ms, epoch=epoch)
            return True
        if (epoch == self.epoch and leader_id is not None and leader_id != self.id
                and self.role in (Role.UNATTACHED, Role.PROSPECTIVE, Role.CANDIDATE)):
            self._become_follower(epoch, leader_id, now_ms, endpoint)
            return True
        return False

    # ------------------------------------------------------------------ inputs
    def propose(self, records: Sequence[bytes], now_ms: int, expected_epoch: int | None = None) -> tuple[int, int]:
        """Queue records for the next batch; returns (epoch, offset of the last record)."""
        if self.role is not Role.LEADER or (expected_epoch is not None and expected_epoch != self.epoch):
            raise NotLeaderError(self.leader())
        if not records:
            raise ValueError("empty append")
        self.accum.append((tuple(records), now_ms))
        self.accum_count += len(records)
        last = self.log_end + self.accum_count - 1
        if self.accum_deadline == NEVER:
            self.accum_deadline = now_ms + self.t.append_linger_ms
        if self.t.append_linger_ms == 0 or self.accum_count >= self.t.fetch_max_records:
            self._drain_accumulator(now_ms)
        return self.epoch, last

    def _drain_accumulator(self, now_ms: int) -> None:
        if not self.accum:
            return
        entries = [Entry(self.epoch, ts, r) for recs, ts in self.accum for r in recs]
        self.accum, self.accum_count, self.accum_deadline = [], 0, NEVER
        self._append(entries)
        self._complete_parked(now_ms, force=True)

    def poll(self, now_ms: int) -> None:
        """Fire every timer that is due."""
        if now_ms >= self.accum_deadline and self.role is Role.LEADER:
            self._drain_accumulator(now_ms)
        if self.role is Role.LEADER:
            self._poll_leader(now_ms)
            return
        if self.role is Role.FOLLOWER:
            if self.fetch_corr is not None and now_ms >= self.fetch_sent_ms + self.t.request_ms:
                self.fetch_corr = None  # lost: send another
                self._send_fetch(now_ms)
            if now_ms >= self.retry_fetch_at:
                self.retry_fetch_at = NEVER
                if self.fetch_corr is None:
                    self._send_fetch(now_ms)
        if self.role is Role.UNATTACHED and not self.is_voter and now_ms >= self.retry_fetch_at:
            self._observer_discover(now_ms)
        if now_ms < self.deadline:
            return
        if not self.is_voter:
            # An observer that lost its leader: look for the current one among the voters.
            self._become_unattached(now_ms)
            return
        if self.role in (Role.FOLLOWER, Role.UNATTACHED, Role.RESIGNED):
            self._become_prospective(now_ms)
        elif self.role is Role.PROSPECTIVE:
            self._lost_election(now_ms)
        elif self.role is Role.CANDIDATE:
            self._backoff(now_ms)

    def _poll_leader(self, now_ms: int) -> None:
        for rid, (m, dl) in list(self.parked.items()):
            if now_ms >= dl:
                del self.parked[rid]
                self._answer_fetch(m, now_ms)
        for v, sent in list(self.begin_pending.items()):
            if now_ms >= sent + self._begin_retry_ms():
                self._send(v, BeginQuorumEpochRequest(self.epoch, self.id, self.known_leader_endpoint()))
                self.begin_pending[v] = now_ms
        if now_ms >= self.check_quorum_at:
            horizon = now_ms - self._check_quorum_ms()
            alive = {self.id} | {v for v, r in self.replicas.items() if v in self.voters and r.last_fetch_ms >= horizon}
            if quorum.has_majority(alive, self.voters):
                oldest = min((r.last_fetch_ms for v, r in self.replicas.items()
                              if v in alive and v in self.voters), default=now_ms)
                self.check_quorum_at = max(now_ms + 1, oldest + self._check_quorum_ms())
            else:
                log.info("node %d: leader of epoch %d lost contact with a majority, resigning", self.id, self.epoch)
                self._become_resigned(now_ms)

    def campaign(self, now_ms: int) -> None:
        """Stand for election now (a voter's election timer firing early); for tests and tools."""
        if self.is_voter and self.role in (Role.UNATTACHED, Role.FOLLOWER, Role.RESIGNED):
            self._become_prospective(now_ms)

    def resign(self, now_ms: int) -> None:
        """Graceful shutdown: hand leadership over with EndQuorumEpoch."""
        if self.role is Role.LEADER:
            self._become_resigned(now_ms)

    # ------------------------------------------------------------------ AddRaftVoter / RemoveRaftVoter
    def add_voter(self, voter: Voter, now_ms: int) -> int:
        """KIP-853 AddRaftVoter on the leader: appends the new voter set (which takes effect at
        once, as in Raft's single-server changes); returns the offset of the record, which the
        caller waits to see committed. The new voter must be an observer that is caught up."""
        self._check_voter_change("adding")
        if voter.id in self.voter_info:
            raise VoterChangeError(int(ErrorCode.DUPLICATE_VOTER), f"The voter id {voter.id} is already part of "
                                   "the set of voters")
        rs = self.replicas.get(voter.id)
        if rs is None or now_ms - rs.last_fetch_ms > self.t.fetch_ms or rs.end_offset < self.hw:
            raise VoterChangeError(int(ErrorCode.REQUEST_TIMED_OUT), f"The new voter {voter.id} is not caught up "
                                   "with the leader: start it (an observer) and let it fetch the metadata log first")
        return self._append_voters((*self.voter_info.values(), voter), now_ms)

    def remove_voter(self, voter_id: int, directory_id: str, now_ms: int) -> int:
        """KIP-853 RemoveRaftVoter on the leader; a leader that removes itself resigns once the
        change is committed."""
        self._check_voter_change("removing")
        v = self.voter_info.get(voter_id)
        if v is None or (directory_id and v.directory_id and directory_id != v.directory_id):
            raise VoterChangeError(int(ErrorCode.VOTER_NOT_FOUND), f"The voter {voter_id} (directory "
                                   f"{directory_id or '-'}) is not part of the set of voters {list(self.voters)}")
        if len(self.voters) == 1:
            raise VoterChangeError(int(ErrorCode.INVALID_REQUEST), "Cannot remove the only voter of the quorum")
        return self._append_voters([x for x in self.voter_info.values() if x.id != voter_id], now_ms)

    def update_voter(self, voter: Voter, now_ms: int) -> int:
        """KIP-853 UpdateRaftVoter on the leader: a voter's new controller listener (sent by the
        voter itself when it starts with an address other than the voter set's)."""
        self._check_voter_change("updating")
        v = self.voter_info.get(voter.id)
        if v is None or (voter.directory_id and v.directory_id and voter.directory_id != v.directory_id):
            raise VoterChangeError(int(ErrorCode.VOTER_NOT_FOUND), f"The voter {voter.id} (directory "
                                   f"{voter.directory_id or '-'}) is not part of the set of voters {list(self.voters)}")
        if (v.host, v.port) == (voter.host, voter.port):
            return self.voters_offset
        new = Voter(v.id, v.directory_id, voter.host, voter.port)
        return self._append_voters([new if x.id == v.id else x for x in self.voter_info.values()], now_ms)

    def _check_voter_change(self, what: str) -> None:
        if self.role is not Role.LEADER:
            raise NotLeaderError(self.leader())
        if not self.dynamic:
            raise VoterChangeError(int(ErrorCode.UNSUPPORTED_VERSION), f"Cluster doesn't support {what} voters "
                                   "because the kraft.version feature is 0 (a static quorum: controller.quorum.voters)")
        if self.hw <= self.epoch_start:
            raise VoterChangeError(int(ErrorCode.REQUEST_TIMED_OUT), "The leader has not committed in its epoch yet")
        if self.voter_change_pending():
            raise VoterChangeError(int(ErrorCode.REQUEST_TIMED_OUT), "Another voter change is in progress")

    def _append_voters(self, voters, now_ms: int) -> int:
        self._drain_accumulator(now_ms)
        self._append([Entry(self.epoch, now_ms, voters_record(voters), True)])
        self._complete_parked(now_ms, force=True)
        self._update_hw(now_ms)
        return self.voters_offset

    def peer_unreachable(self, peer: int, corr: int, now_ms: int) -> None:
        """The transport could not reach ``peer`` at all (e.g. connection refused): the
        request with ``corr`` is lost. Only a liveness hint; safety never depends on it."""
        if self.role is Role.FOLLOWER and peer == self.leader_id and corr == self.fetch_corr:
            self.fetch_corr = None
            self.retry_fetch_at = now_ms + max(self.t.retry_backoff_ms, 1)
            if not self.leader_unreachable and self.is_voter:
                self.leader_unreachable = True
                # The leader is probably gone: stand for election soon, at a random moment.
                self.deadline = min(self.deadline, now_ms + int(self.rng.random() * self.t.election_ms / 4))
        elif self.role is Role.FOLLOWER and corr == self.fetch_corr:
            self.fetch_corr = None
            self.retry_fetch_at = now_ms + max(self.t.retry_backoff_ms, 1)
        elif self.role in (Role.PROSPECTIVE, Role.CANDIDATE) and peer in self.voters:
            self.rejects.add(peer)
            if quorum.lost(self.rejects, self.voters):
                self._lost_election(now_ms)
        elif self.role is Role.UNATTACHED and not self.is_voter and corr == self.fetch_corr:
            self.fetch_corr = None
            self.retry_fetch_at = now_ms + max(self.t.retry_backoff_ms, 1)

    def step(self, m: Message, now_ms: int) -> None:
        b = m.body
        name = _HANDLERS.get(type(b))
        if name is None:
            log.debug("node %d: ignoring unknown message %r", self.id, b)
            return
        getattr(self, name)(m, now_ms)

    # ------------------------------------------------------------------ Vote
    def _log_up_to_date(self, last_epoch: int, log_end: int) -> bool:
        return (last_epoch, log_end) >= (self.last_epoch(), self.log_end)

    def _on_vote_request(self, m: Message, now_ms: int) -> None:
        req: VoteRequest = m.body
        if not self.is_voter and not self.dynamic:
            self._send(m.src, VoteResponse(self.epoch, self._known_leader(), False, req.pre_vote,
                                                  leader_endpoint=self.known_leader_endpoint()), m.corr)
            return
        # (KIP-853, as Raft's membership changes: a replica votes even when its own latest voter set
        # leaves it out; the candidate counts only the votes of its voter set. Otherwise a quorum whose
        # members hold different latest sets after a crash could never elect a leader.)
        if req.pre_vote:
            if req.epoch - 1 > self.epoch:
                # The requester already stood in (or learned of) a newer epoch than ours: that
                # epoch is real, so catch up (a leader steps down), or it could never rejoin us.
                self._observe_epoch(req.epoch - 1, None, now_ms)
            # Otherwise no state change at all: only say whether we would vote.
            granted = (
                req.epoch > self.epoch
                and self.role is not Role.LEADER
                and not (self.role is Role.FOLLOWER and not self.leader_unreachable
                         and now_ms - self.last_fetch_ok_ms < self.t.fetch_ms)
                and self._log_up_to_date(req.last_epoch, req.log_end)
            )
            self._send(m.src, VoteResponse(self.epoch, self._known_leader(), granted, True,
                                                  leader_endpoint=self.known_leader_endpoint()), m.corr)
            return
        if req.epoch < self.epoch:
            self._send(m.src, VoteResponse(self.epoch, self._known_leader(), False, False,
                                                  leader_endpoint=self.known_leader_endpoint()), m.corr)
            return
        if req.epoch > self.epoch:
            self._become_unattached(now_ms, epoch=req.epoch)
        granted = (
            self.role in (Role.UNATTACHED, Role.PROSPECTIVE)
            and self.voted_for in (None, req.candidate_id)
            and self._log_up_to_date(req.last_epoch, req.log_end)
        )
        if granted:
            if self.voted_for is None:
                self.voted_for = req.candidate_id
                self._persist_state()  # durable before the response leaves (Ready order)
            self.deadline = now_ms + self._random_election_timeout()
        self._send(m.src, VoteResponse(self.epoch, self._known_leader(), granted, False,
                                              leader_endpoint=self.known_leader_endpoint()), m.corr)

    def _on_vote_response(self, m: Message, now_ms: int) -> None:
        resp: VoteResponse = m.body
        if resp.epoch > self.epoch or (not resp.granted and resp.leader_id is not None):
            # A refusal that names a leader of our epoch: KIP-996 says follow it.
            if self._observe_epoch(resp.epoch, resp.leader_id, now_ms, resp.leader_endpoint):
                return
        if self.role is Role.PROSPECTIVE and resp.pre_vote and resp.epoch == self.epoch:
            (self.votes if resp.granted else self.rejects).add(m.src)
            if quorum.has_majority(self.votes, self.voters):
                self._become_candidate(now_ms)
            elif quorum.lost(self.rejects, self.voters):
                self._lost_election(now_ms)
        elif self.role is Role.CANDIDATE and not resp.pre_vote and resp.epoch == self.epoch:
            (self.votes if resp.granted else self.rejects).add(m.src)
            if quorum.has_majority(self.votes, self.voters):
                self._become_leader(now_ms)
            elif quorum.lost(self.rejects, self.voters):
                self._lost_election(now_ms)

    def _lost_election(self, now_ms: int) -> None:
        if self.role is Role.PROSPECTIVE and self.prospective_leader is not None:
            # KIP-996: the others still follow a live leader; go back to it.
            self._become_follower(self.epoch, self.prospective_leader, now_ms)
            return
        self._backoff(now_ms)

    # ------------------------------------------------------------------ Begin/EndQuorumEpoch
    def _on_begin_request(self, m: Message, now_ms: int) -> None:
        req: BeginQuorumEpochRequest = m.body
        if req.epoch < self.epoch:
            self._send(m.src, BeginQuorumEpochResponse(self.epoch, self._known_leader(), FENCED_LEADER_EPOCH,
                                                       self.known_leader_endpoint()), m.corr)
            return
        if req.epoch > self.epoch or self.leader_id != req.leader_id or self.role is not Role.FOLLOWER:
            if self.role is Role.LEADER and req.epoch == self.epoch:
                return  # impossible: two leaders in one epoch
            self._become_follower(req.epoch, req.leader_id, now_ms, req.leader_endpoint)
        elif req.leader_endpoint is not None:
            self.leader_endpoint = req.leader_endpoint
        self.last_fetch_ok_ms = now_ms  # straight from the leader
        self._send(m.src, BeginQuorumEpochResponse(self.epoch, self._known_leader(),
                                                   leader_endpoint=self.known_leader_endpoint()), m.corr)

    def _on_begin_response(self, m: Message, now_ms: int) -> None:
        resp: BeginQuorumEpochResponse = m.body
        if self._observe_epoch(resp.epoch, resp.leader_id, now_ms, resp.leader_endpoint):
            return
        if self.role is Role.LEADER and resp.epoch == self.epoch and resp.error == NONE:
            self.begin_pending.pop(m.src, None)

    def _on_end_request(self, m: Message, now_ms: int) -> None:
        req: EndQuorumEpochRequest = m.body
        if req.epoch > self.epoch:
            self._observe_epoch(req.epoch, None, now_ms)
        elif (req.epoch == self.epoch and self.role is Role.FOLLOWER and self.leader_id == req.leader_id
              and self.is_voter):
            # The leader steps down: the best-placed successor stands first, the others after it.
            pos = req.preferred_successors.index(self.id) if self.id in req.preferred_successors else len(self.voters)
            delay = 0 if pos == 0 else pos * 4 * max(self.t.retry_backoff_ms, 1) + int(
                self.rng.random() * max(self.t.retry_backoff_ms, 1))
            self._become_unattached(now_ms, delay_ms=delay)
        self._send(m.src, EndQuorumEpochResponse(self.epoch, self._known_leader(),
                                                 leader_endpoint=self.known_leader_endpoint()), m.corr)

    def _on_end_response(self, m: Message, now_ms: int) -> None:
        resp: EndQuorumEpochResponse = m.body
        self._observe_epoch(resp.epoch, resp.leader_id, now_ms, resp.leader_endpoint)

    # ------------------------------------------------------------------ Fetch (leader side)
    def _fetch_error(self, error: int) -> FetchResponse:
        return FetchResponse(self.epoch, self._known_leader(), error, leader_endpoint=self.known_leader_endpoint())

    def _on_fetch_request(self, m: Message, now_ms: int) -> None:
        req: FetchRequest = m.body
        if req.epoch > self.epoch:
            # The fetcher knows a newer epoch than we do: catch up, then tell it we are not its leader.
            self._observe_epoch(req.epoch, None, now_ms)
            self._send(m.src, self._fetch_error(UNKNOWN_LEADER_EPOCH), m.corr)
            return
        if self.role is not Role.LEADER:
            self._send(m.src, self._fetch_error(NOT_LEADER), m.corr)
            return
        if req.epoch < self.epoch:
            self._send(m.src, self._fetch_error(FENCED_LEADER_EPOCH), m.corr)
            return
        self.parked.pop(req.replica_id, None)  # superseded
        resp = self._validate_fetch(req)
        if resp is not None:
            self._touch_replica(req.replica_id, None, now_ms)
            self._send(m.src, resp, m.corr)
            return
        self._touch_replica(req.replica_id, req.fetch_offset, now_ms)
        if self.role is not Role.LEADER:  # that fetch committed our own removal: we resigned
            self._send(m.src, self._fetch_error(NOT_LEADER), m.corr)
            return
        rs = self.replicas[req.replica_id]
        if (req.fetch_offset >= self.log_end and rs.last_sent_hw == self._visible_hw() and req.max_wait_ms > 0):
            self.parked[req.replica_id] = (m, now_ms + req.max_wait_ms)
            return
        self._answer_fetch(m, now_ms)

    def _visible_hw(self) -> int:
        return self.hw if self.hw > self.epoch_start else -1

    def _validate_fetch(self, req: FetchRequest) -> FetchResponse | None:
        f, le = req.fetch_offset, req.last_fetched_epoch
        snap = self.snapshot
        if f < self.log_start or (f == self.log_start and snap is not None and le != snap.epoch):
            if snap is None:
                return None
            return FetchResponse(self.epoch, self.id, NONE, self._visible_hw(), self.log_start,
                                 snapshot_end_offset=snap.end_offset, snapshot_epoch=snap.epoch,
                                 leader_endpoint=self.known_leader_endpoint())
        if f == self.log_start:
            return None
        e, end = self.end_offset_for_epoch(le)
        if e < 0:
            assert snap is not None
            return FetchResponse(self.epoch, self.id, NONE, self._visible_hw(), self.log_start,
                                 snapshot_end_offset=snap.end_offset, snapshot_epoch=snap.epoch,
                                 leader_endpoint=self.known_leader_endpoint())
        if e != le or f > end:
            return FetchResponse(self.epoch, self.id, NONE, self._visible_hw(), self.log_start,
                                 diverging_epoch=e, diverging_end_offset=end,
                                 leader_endpoint=self.known_leader_endpoint())
        return None

    def _touch_replica(self, rid: int, fetch_offset: int | None, now_ms: int) -> None:
        rs = self.replicas.setdefault(rid, ReplicaState())
        rs.last_fetch_ms = now_ms
        if fetch_offset is None:
            return
        rs.end_offset = fetch_offset
        if fetch_offset >= self.log_end:
            rs.last_caught_up_ms = now_ms
        if rid in self.voters:
            self.begin_pending.pop(rid, None)
            self._update_hw(now_ms)

    def _answer_fetch(self, m: Message, now_ms: int) -> None:
        req: FetchRequest = m.body
        f = req.fetch_offset
        entries = tuple(self.log[f - self.log_start:f - self.log_start + self.t.fetch_max_records])
        hw = self._visible_hw()
        rs = self.replicas.get(req.replica_id)
        if rs is not None:
            rs.last_sent_hw = hw
        self._send(m.src, FetchResponse(self.epoch, self.id, NONE, hw, self.log_start, f, entries,
                                        leader_endpoint=self.known_leader_endpoint()), m.corr)

    def _complete_parked(self, now_ms: int, force: bool = False) -> None:
        hw = self._visible_hw()
        for rid, (m, _dl) in list(self.parked.items()):
            rs = self.replicas.get(rid)
            if force or rs is None or rs.last_sent_hw != hw:
                del self.parked[rid]
                self._answer_fetch(m, now_ms)

    def _update_hw(self, now_ms: int) -> None:
        ends = {v: r.end_offset for v, r in self.replicas.items() if v in self.voters}
        ends[self.id] = self.durable_end
        cand = quorum.committed_offset(ends, self.voters)
        if cand > self.epoch_start and cand > self.hw:
            self.hw = cand
            self._emit_commits()
            self._complete_parked(now_ms)
            if not self.is_voter and self.hw > self.voters_offset:
                # our own removal is committed: hand the leadership to the remaining voters
                log.info("node %d: removed from the voters, resigning the leadership of epoch %d", self.id,
                         self.epoch)
                self._become_resigned(now_ms)

    # ------------------------------------------------------------------ Fetch (follower side)
    def _send_fetch(self, now_ms: int) -> None:
        target = self.leader_id
        if target is None:
            return
        self.fetch_target = target
        self.fetch_sent_ms = now_ms
        self.retry_fetch_at = NEVER
        if self.snap_partial is not None:
            end, sepoch, recs = self.snap_partial
            self.fetch_corr = self._send(target, FetchSnapshotRequest(self.epoch, self.id, end, sepoch, len(recs)))
        else:
            self.fetch_corr = self._send(target, FetchRequest(self.epoch, self.id, self.log_end, self.last_epoch(),
                                                              self.t.fetch_max_wait_ms))

    def _observer_discover(self, now_ms: int) -> None:
        others = [v for v in self.voters if v != self.id]
        if not others:
            return
        target = others[int(self.rng.random() * len(others))]
        self.fetch_target = target
        self.fetch_corr = self._send(target, FetchRequest(self.epoch, self.id, self.log_end, self.last_epoch(), 0))
        self.fetch_sent_ms = now_ms
        self.retry_fetch_at = now_ms + max(self.t.retry_backoff_ms * 10, self.t.election_ms // 2)

    def _on_fetch_response(self, m: Message, now_ms: int) -> None:
        resp: FetchResponse = m.body
        if m.corr != self.fetch_corr:
            # A stale, duplicated or unsolicited answer; still learn a newer epoch from it.
            if resp.epoch > self.epoch:
                self._observe_epoch(resp.epoch, resp.leader_id, now_ms, resp.leader_endpoint)
            return
        self.fetch_corr = None
        if self._observe_epoch(resp.epoch, resp.leader_id, now_ms, resp.leader_endpoint):
            return
        if self.role is not Role.FOLLOWER or m.src != self.leader_id:
            if self.role is Role.UNATTACHED and not self.is_voter:
                self.retry_fetch_at = now_ms + self.t.retry_backoff_ms
            return
        if resp.leader_endpoint is not None and resp.leader_id == self.leader_id:
            self.leader_endpoint = resp.leader_endpoint
        if resp.error != NONE:
            if resp.error in (NOT_LEADER, FENCED_LEADER_EPOCH) and resp.epoch == self.epoch and resp.leader_id is None:
                # Our leader resigned this epoch: treat it like an unreachable leader.
                if self.is_voter and not self.leader_unreachable:
                    self.leader_unreachable = True
                    self.deadline = min(self.deadline, now_ms + int(self.rng.random() * self.t.election_ms / 4))
            self.retry_fetch_at = now_ms + max(self.t.retry_backoff_ms, 1)
            return
        self.last_fetch_ok_ms = now_ms
        self.leader_unreachable = False
        self.deadline = now_ms + self.t.fetch_ms
        if resp.snapshot_end_offset >= 0:
            self.snap_partial = (resp.snapshot_end_offset, resp.snapshot_epoch, [])
            self._send_fetch(now_ms)
            return
        if resp.diverging_epoch >= 0:
            _e, mine = self.end_offset_for_epoch(resp.diverging_epoch)
            target = min(resp.diverging_end_offset, mine if mine >= 0 else self.log_start)
            self._truncate(max(target, self.log_start))
            self._send_fetch(now_ms)
            return
        if resp.base_offset == self.log_end and resp.entries:
            self._append(resp.entries)
        if resp.high_watermark >= 0:
            new_hw = min(resp.high_watermark, self.log_end)
            if new_hw > self.hw:
                self.hw = new_hw
                self._emit_commits()
        self._send_fetch(now_ms)

    # ------------------------------------------------------------------ FetchSnapshot
    def _on_fetch_snapshot_request(self, m: Message, now_ms: int) -> None:
        req: FetchSnapshotRequest = m.body
        if req.epoch > self.epoch:
            self._observe_epoch(req.epoch, None, now_ms)
        if self.role is not Role.LEADER or req.epoch != self.epoch:
            err = FENCED_LEADER_EPOCH if req.epoch < self.epoch else NOT_LEADER
            self._send(m.src, FetchSnapshotResponse(self.epoch, self._known_leader(), err,
                                                    leader_endpoint=self.known_leader_endpoint()), m.corr)
            return
        snap = self.snapshot
        if snap is None or snap.end_offset != req.end_offset or snap.epoch != req.snapshot_epoch:
            self._send(m.src, FetchSnapshotResponse(self.epoch, self.id, SNAPSHOT_NOT_FOUND,
                                                    leader_endpoint=self.known_leader_endpoint()), m.corr)
            return
        self.replicas.setdefault(req.replica_id, ReplicaState()).last_fetch_ms = now_ms
        chunk = tuple(snap.records[req.position:req.position + self.t.snapshot_chunk_records])
        self._send(m.src, FetchSnapshotResponse(self.epoch, self.id, NONE, snap.end_offset, snap.epoch, req.position,
                                                len(snap.records), chunk, self.known_leader_endpoint()), m.corr)

    def _on_fetch_snapshot_response(self, m: Message, now_ms: int) -> None:
        resp: FetchSnapshotResponse = m.body
        if m.corr != self.fetch_corr:
            return
        self.fetch_corr = None
        if self._observe_epoch(resp.epoch, resp.leader_id, now_ms, resp.leader_endpoint):
            return
        if self.role is not Role.FOLLOWER or m.src != self.leader_id or self.snap_partial is None:
            return
        if resp.leader_endpoint is not None and resp.leader_id == self.leader_id:
            self.leader_endpoint = resp.leader_endpoint
        if resp.error != NONE:
            self.snap_partial = None  # the leader moved on to a newer snapshot: start over
            self.retry_fetch_at = now_ms + max(self.t.retry_backoff_ms, 1)
            return
        self.last_fetch_ok_ms = now_ms
        self.deadline = now_ms + self.t.fetch_ms
        end, sepoch, recs = self.snap_partial
        if resp.end_offset != end or resp.snapshot_epoch != sepoch or resp.position != len(recs):
            self._send_fetch(now_ms)
            return
        recs.extend(resp.records)
        if len(recs) >= resp.total:
            self._install_snapshot(Snapshot(end, sepoch, tuple(recs)))
        self._send_fetch(now_ms)

    def _install_snapshot(self, snap: Snapshot) -> None:
        """A snapshot fetched from the leader replaces our whole log."""
        self.snap_partial = None
        self._emit_commits()
        self.log = []
        self.epochs = []
        self._ops.append(Truncate(0))
        self._ops.append(SaveSnapshot(snap))
        self.snapshot = snap
        self._read_snapshot_voters(snap)
        self.log_start = snap.end_offset
        self.durable_end = min(self.durable_end, self.log_start)
        self._low_since_take = min(self._low_since_take, self.log_start)
        self.hw = max(self.hw, snap.end_offset)
        self.applied = snap.end_offset
        self._refresh_voters()
        self._notes.append(LoadSnapshot(_without_voters(snap)))

    # ------------------------------------------------------------------ own snapshots
    def take_snapshot(self, end_offset: int, records: Sequence[bytes]) -> Snapshot:
        """The state machine's snapshot covering every record below ``end_offset`` (which it
        has applied): store it and delete the log prefix it covers."""
        if not (self.log_start < end_offset <= self.applied):
            raise ValueError(f"snapshot end {end_offset} outside ({self.log_start}, {self.applied}]")
        vs = self._voters_at(end_offset)
        marker = (voters_record(vs),) if vs is not None else ()  # the snapshot carries the voter set
        snap = Snapshot(end_offset, self.entry_at(end_offset - 1).epoch, marker + tuple(records))
        if vs is not None:
            self.snapshot_voters = vs
        del self.log[:end_offset - self.log_start]
        self.log_start = end_offset
        self.snapshot = snap
        self._rebuild_epochs()
        self._refresh_voters()
        self._ops.append(SaveSnapshot(snap))
        return snap

    # ------------------------------------------------------------------ queries
    def _known_leader(self) -> int | None:
        return self.leader_id if self.role in (Role.FOLLOWER, Role.LEADER) else None

    def leader(self) -> LeaderAndEpoch:
        return LeaderAndEpoch(self._known_leader(), self.epoch)

    def known_leader_endpoint(self) -> Endpoint | None:
        """The listener of the leader we know of (KIP-853): our own if we lead, else the one the
        leader sent us, else its entry in our voter set; None in a static quorum (kraft.version 0:
        addresses come from controller.quorum.voters only) or without a leader."""
        if not self.dynamic:
            return None
        if self.role is Role.LEADER:
            lid, ep = self.id, self.endpoint
        elif self.role is Role.FOLLOWER:
            lid, ep = self.leader_id, self.leader_endpoint
        else:
            return None
        if ep is None:
            v = self.voter_info.get(lid)
            ep = (v.host, v.port) if v is not None and v.host else None
        return ep

    def describe(self, now_ms: int) -> QuorumInfo | None:
        if self.role is not Role.LEADER:
            return None

        def info(rid: int) -> ReplicaInfo:
            if rid == self.id:
                return ReplicaInfo(rid, self.log_end, now_ms, now_ms)
            r = self.replicas.get(rid, ReplicaState())
            return ReplicaInfo(rid, r.end_offset, r.last_fetch_ms, r.last_caught_up_ms)

        observers = sorted(r for r in self.replicas if r not in self.voters)
        return QuorumInfo(self.id, self.epoch, self._visible_hw(), tuple(info(v) for v in self.voters),
                          tuple(info(o) for o in observers))


def _without_voters(snap: Snapshot) -> Snapshot:
    """The snapshot as the state machine sees it: without the voter set record."""
    if snap.records and snap.records[0].startswith(VOTERS_PREFIX):
        return Snapshot(snap.end_offset, snap.epoch, tuple(snap.records[1:]))
    return snap


_HANDLERS = {
    VoteRequest: "_on_vote_request",
    VoteResponse: "_on_vote_response",
    BeginQuorumEpochRequest: "_on_begin_request",
    BeginQuorumEpochResponse: "_on_begin_response",
    EndQuorumEpochRequest: "_on_end_request",
    EndQuorumEpochResponse: "_on_end_response",
    FetchRequest: "_on_fetch_request",
    FetchResponse: "_on_fetch_response",
    FetchSnapshotRequest: "_on_fetch_snapshot_request",
    FetchSnapshotResponse: "_on_fetch_snapshot_response",
}
