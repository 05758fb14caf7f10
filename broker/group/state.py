"""The classic group protocol (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) as a pure state
machine, one ``ClassicGroup`` per group id (Kafka's ClassicGroup + the classic parts of
GroupMetadataManager).

States and transitions::

    Empty --join--> PreparingRebalance --all joined / rebalance timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup persisted--> Stable
    Stable / CompletingRebalance --member joins, leaves, changes protocols, expires--> PreparingRebalance
    PreparingRebalance --nobody rejoined--> Empty;  any --group deleted / unloaded--> Dead

Sans-IO: every method takes ``now`` (ms, monotonic: deadlines and sessions) and returns ``Effects``: replies to parked
JoinGroup/SyncGroup requests (``waiter`` objects are opaque; the shell maps them to
futures) and ``Write``s of ``__consumer_offsets`` records whose replies go out once the
records are committed. Timers are deadlines the shell asks for with ``next_deadline``
and fires with ``tick``. Member ids are made by the shell (it owns randomness).

Two clocks (DESIGN.md): deadlines are monotonic, but the state timestamp a group records is
a wall-clock date users read; ``wall_offset_ms`` (wall minus monotonic, set by the shard from
the ``wall`` its callers pass) converts one to the other, so a step of the wall clock moves
the timestamps and never a deadline.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from broker.group import records as rec
from common.errors import ErrorCode

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"
STATES = (EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE, DEAD)

_VALID_PREVIOUS = {
    PREPARING_REBALANCE: {STABLE, COMPLETING_REBALANCE, EMPTY},
    COMPLETING_REBALANCE: {PREPARING_REBALANCE},
    STABLE: {COMPLETING_REBALANCE},
    EMPTY: {PREPARING_REBALANCE},
    DEAD: set(STATES),
}

log = logging.getLogger("krafty.group")

CONSUMER_PROTOCOL_TYPE = "consumer"
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000  # Kafka's group.new.member.join.timeout


class GroupStats:
    """Rebalances of the groups sharing one GroupConfig (one coordinator), for its metrics."""

    __slots__ = ("rebalances", "completed_rebalances")

    def __init__(self) -> None:
        self.rebalances = self.completed_rebalances = 0


@dataclasses.dataclass(frozen=True, slots=True)
class GroupConfig:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    max_size: int = 2**31 - 1
    new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS
    stats: GroupStats = dataclasses.field(default_factory=GroupStats, compare=False, repr=False)


@dataclasses.dataclass(slots=True)
class Write:
    """Records to append to the group's ``__consumer_offsets`` partition (acks=all).
    ``replies`` are sent once they are committed; if the write fails (at once, or later: the
    commit timeout, a lost leadership) the shell calls ``on_fail(error, now)`` (when set) and
    answers ``replies`` with the mapped error. ``on_done(error, now)`` (when set) runs once the
    write is over either way (error 0: committed), before ``replies`` are answered."""

    records: list[tuple[bytes, bytes | None]]
    replies: list[tuple[Any, dict]] = dataclasses.field(default_factory=list)
    on_fail: Callable[[int, int], Effects] | None = None
    on_append: Callable[[], None] | None = None  # applies the records to the state once appended
    on_done: Callable[[int, int], Effects | None] | None = None
    # a transactional offset commit (TxnOffsetCommit): the records go in a transactional batch of
    # this producer, appended with the guard of its KIP-890 verification
    producer_id: int = -1
    producer_epoch: int = -1
    verification_guard: Any = None
    base_offset: int = -1  # set by the shell before on_append: where the records went in the log


@dataclasses.dataclass(slots=True)
class Effects:
    replies: list[tuple[Any, dict]] = dataclasses.field(default_factory=list)
    writes: list[Write] = dataclasses.field(default_factory=list)

    def add(self, other: Effects | None) -> Effects:
        if other is not None:
            self.replies += other.replies
            self.writes += other.writes
        return self

    def reply(self, waiter: Any, response: dict) -> None:
        if waiter is not None:
            self.replies.append((waiter, response))


@dataclasses.dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_waiter: Any = None
    sync_waiter: Any = None
    heartbeat_deadline: int = 0
    is_new: bool = False
    awaiting_join: bool = False

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return len(protocols) == len(self.protocols) and all(
            a[0] == b[0] and bytes(a[1]) == bytes(b[1]) for a, b in zip(protocols, self.protocols, strict=True))


@dataclasses.dataclass(slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    client_host: str
    require_known_member_id: bool  # JoinGroup v4+
    supports_skip_assignment: bool  # JoinGroup v9+
    new_member_id: str  # used when the member has none (made by the shell)


def join_error(code: int, member_id: str = "") -> dict:
    return {"error_code": int(code), "generation_id": -1, "protocol_type": None, "protocol_name": None,
            "leader": "", "skip_assignment": False, "member_id": member_id, "members": []}


def sync_error(code: int) -> dict:
    return {"error_code": int(code), "protocol_type": None, "protocol_name": None, "assignment": b""}


class ClassicGroup:
    def __init__(self, group_id: str, now: int, config: GroupConfig, wall: int | None = None):
        self.group_id = group_id
        self.config = config
        self.state = EMPTY
        self.previous_state = EMPTY
        self.wall_offset_ms = 0 if wall is None else wall - now  # wall clock minus monotonic, at the last call
        self.state_timestamp = now + self.wall_offset_ms  # wall clock ms
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation = 0
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}  # group instance id -> member id
        self.pending_members: dict[str, int] = {}  # member id -> deadline (JoinGroup handshake, KIP-394)
        self.pending_sync: set[str] = set()
        self.join_deadline: int | None = None  # the rebalance completes (or gives up waiting) then
        self.initial_delay_remaining = 0  # left of the rebalance timeout during the initial delay
        self.in_initial_delay = False
        self.new_member_added = False
        self.sync_deadline: int | None = None

    # --- basic queries ----------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"<ClassicGroup {self.group_id} {self.state} gen={self.generation} members={list(self.members)}>"

    def is_empty(self) -> bool:
        return not self.members

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def awaiting_join_count(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join)

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.awaiting_join_count() and not self.pending_members

    def transition(self, state: str, now: int) -> None:
        if self.state not in _VALID_PREVIOUS[state] and state != self.state:
            raise AssertionError(f"group {self.group_id}: illegal transition {self.state} -> {state}")
        if state != self.state and state in (PREPARING_REBALANCE, STABLE):
            stats = self.config.stats
            if state == STABLE:
                stats.completed_rebalances += 1
            else:
                stats.rebalances += 1
        self.previous_state = self.state
        self.state = state
        self.state_timestamp = now + self.wall_offset_ms

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        sets = [set(m.protocol_names()) for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        names = {n for n, _ in protocols}
        if not self.members:
            return bool(protocol_type) and bool(names)
        return self.protocol_type == protocol_type and bool(names & self.candidate_protocols())

    def select_protocol(self) -> str | None:
        """Each member votes for its most preferred protocol among those all support; the
        most votes wins (ties: the one preferred first by the most senior member)."""
        candidates = self.candidate_protocols()
        if not candidates:
            return None
        votes: dict[str, int] = {}
        order: list[str] = []
        for m in self.members.values():
            for name in m.protocol_names():
                if name in candidates:
                    votes[name] = votes.get(name, 0) + 1
                    if name not in order:
                        order.append(name)
                    break
        best = max(votes.values())
        return next(n for n in order if votes[n] == best)

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol), None when unknown."""
        if not self.members:
            return set()
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        out: set[str] = set()
        for m in self.members.values():
            topics = rec.subscribed_topics(m.metadata(self.protocol_name))
            if topics is None:
                return None
            out |= topics
        return out

    def next_deadline(self) -> int | None:
        ds = [m.heartbeat_deadline for m in self.members.values()]
        ds += list(self.pending_members.values())
        if self.join_deadline is not None:
            ds.append(self.join_deadline)
        if self.sync_deadline is not None:
            ds.append(self.sync_deadline)
        return min(ds) if ds else None

    # --- membership -------------------------------------------------------------------------
    def _add(self, member: Member, waiter: Any) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        member.join_waiter = waiter
        member.awaiting_join = True

    def _remove(self, member_id: str, fx: Effects, code: int = ErrorCode.UNKNOWN_MEMBER_ID) -> None:
        m = self.members.pop(member_id, None)
        if m is None:
            return
        if m.group_instance_id is not None and self.static_members.get(m.group_instance_id) == member_id:
            del self.static_members[m.group_instance_id]
        if m.join_waiter is not None:
            fx.reply(m.join_waiter, join_error(code, member_id))
            m.join_waiter = None
        if m.sync_waiter is not None:
            fx.reply(m.sync_waiter, sync_error(code))
            m.sync_waiter = None
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            joined = [mid for mid, x in self.members.items() if x.awaiting_join]
            self.leader_id = joined[0] if joined else next(iter(self.members), None)

    def _heartbeat(self, m: Member, now: int, timeout: int | None = None) -> None:
        m.heartbeat_deadline = now + (m.session_timeout_ms if timeout is None else timeout)

    def _member_list(self) -> list[dict]:
        return [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                 "metadata": m.metadata(self.protocol_name)} for m in self.members.values()]

    def _join_response(self, member_id: str, members: list[dict] | None = None, skip: bool = False,
                       leader: str | None = None) -> dict:
        return {"error_code": 0, "generation_id": self.generation, "protocol_type": self.protocol_type,
                "protocol_name": self.protocol_name, "leader": (self.leader_id if leader is None else leader) or "",
                "skip_assignment": skip, "member_id": member_id, "members": members or []}

    def validate_member(self, member_id: str, instance_id: str | None) -> int:
        """UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID as Kafka's validateExistingMember."""
        if instance_id is None:
            return ErrorCode.NONE if member_id in self.members else ErrorCode.UNKNOWN_MEMBER_ID
        known = self.static_members.get(instance_id)
        if known is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if known != member_id:
            return ErrorCode.FENCED_INSTANCE_ID
        return ErrorCode.NONE

    # --- JoinGroup ----------------------------------------------------------------------------
    def _accepts_joining_member(self, member_id: str) -> bool:
        if self.state in (EMPTY, DEAD):
            return True
        m = self.members.get(member_id)
        if self.state == PREPARING_REBALANCE:
            return (m is not None and m.awaiting_join) or self.awaiting_join_count() < self.config.max_size
        return m is not None or len(self.members) < self.config.max_size

    def join(self, now: int, req: JoinRequest, waiter: Any) -> Effects:
        fx = Effects()
        if self.state == DEAD:
            fx.reply(waiter, join_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, req.member_id))
            return fx
        if not self.supports_protocols(req.protocol_type, req.protocols):
            fx.reply(waiter, join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, req.member_id))
            return fx
        if not self._accepts_joining_member(req.member_id):
            fx.reply(waiter, join_error(ErrorCode.GROUP_MAX_SIZE_REACHED, req.member_id))
            if self.state == PREPARING_REBALANCE:
                fx.add(self._maybe_complete_join(now))
            return fx
        if req.member_id == "":
            if req.group_instance_id is not None:
                existing = self.static_members.get(req.group_instance_id)
                if existing is not None:
                    return fx.add(self._update_static_member(now, req, existing, waiter))
                return fx.add(self._add_member_and_rebalance(now, req, req.new_member_id, waiter))
            if req.require_known_member_id:
                self.pending_members[req.new_member_id] = now + req.session_timeout_ms
                fx.reply(waiter, join_error(ErrorCode.MEMBER_ID_REQUIRED, req.new_member_id))
                return fx
            return fx.add(self._add_member_and_rebalance(now, req, req.new_member_id, waiter))
        # a known (or pending) member id
        if req.member_id in self.pending_members:
            del self.pending_members[req.member_id]
            return fx.add(self._add_member_and_rebalance(now, req, req.member_id, waiter))
        err = self.validate_member(req.member_id, req.group_instance_id)
        if err:
            fx.reply(waiter, join_error(err, req.member_id))
            return fx
        m = self.members[req.member_id]
        if self.state == PREPARING_REBALANCE:
            return fx.add(self._update_member_and_rebalance(now, m, req, waiter))
        if self.state == COMPLETING_REBALANCE:
            if m.matches(req.protocols):
                # the member missed the JoinGroup response: send it again
                self._heartbeat(m, now)
                leader = self.leader_id == m.member_id
                fx.reply(waiter, self._join_response(m.member_id, self._member_list() if leader else None))
                return fx
            return fx.add(self._update_member_and_rebalance(now, m, req, waiter))
        if self.state == STABLE:
            if self.leader_id == m.member_id or not m.matches(req.protocols):
                return fx.add(self._update_member_and_rebalance(now, m, req, waiter))
            self._heartbeat(m, now)
            fx.reply(waiter, self._join_response(m.member_id))
            return fx
        fx.reply(waiter, join_error(ErrorCode.UNKNOWN_MEMBER_ID, req.member_id))
        return fx

    def _add_member_and_rebalance(self, now: int, req: JoinRequest, member_id: str, waiter: Any) -> Effects:
        m = Member(member_id, req.group_instance_id, req.client_id, req.client_host, req.rebalance_timeout_ms,
                   req.session_timeout_ms, req.protocol_type, list(req.protocols), is_new=True)
        if self.state == PREPARING_REBALANCE and self.previous_state == EMPTY:
            self.new_member_added = True
        self._add(m, waiter)
        # a parked new member cannot heartbeat; give up on it after the new-member timeout
        self._heartbeat(m, now, self.config.new_member_join_timeout_ms)
        return self._maybe_prepare_rebalance_or_complete_join(now, f"adding new member {member_id}")

    def _update_member_and_rebalance(self, now: int, m: Member, req: JoinRequest, waiter: Any) -> Effects:
        fx = Effects()
        if m.join_waiter is not None and m.join_waiter is not waiter:
            fx.reply(m.join_waiter, join_error(ErrorCode.UNKNOWN_MEMBER_ID, m.member_id))
        m.protocols = list(req.protocols)
        m.rebalance_timeout_ms = req.rebalance_timeout_ms
        m.session_timeout_ms = req.session_timeout_ms
        m.join_waiter = waiter
        m.awaiting_join = True
        self._heartbeat(m, now)
        return fx.add(self._maybe_prepare_rebalance_or_complete_join(now, f"updating metadata of member {m.member_id}"))

    def _update_static_member(self, now: int, req: JoinRequest, old_id: str, waiter: Any) -> Effects:
        """A static member came back with a new member id (KIP-345): in Stable it gets its
        assignment back without a rebalance unless the group's protocol would change."""
        fx = Effects()
        new_id = req.new_member_id
        current_leader = self.leader_id
        m = self.members.pop(old_id)
        # fence the old incarnation if it is still parked somewhere
        if m.join_waiter is not None:
            fx.reply(m.join_waiter, join_error(ErrorCode.FENCED_INSTANCE_ID, old_id))
            m.join_waiter = None
            m.awaiting_join = False
        if m.sync_waiter is not None:
            fx.reply(m.sync_waiter, sync_error(ErrorCode.FENCED_INSTANCE_ID))
            m.sync_waiter = None
        old = (m.protocols, m.rebalance_timeout_ms, m.session_timeout_ms)
        m.member_id = new_id
        self.members[new_id] = m
        self.static_members[req.group_instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        m.protocols = list(req.protocols)
        m.rebalance_timeout_ms = req.rebalance_timeout_ms
        m.session_timeout_ms = req.session_timeout_ms
        self._heartbeat(m, now)
        if self.state == STABLE:
            if self.protocol_name == self.select_protocol():
                generation = self.generation
                is_leader = self.leader_id == new_id
                if req.supports_skip_assignment:
                    resp = self._join_response(new_id, self._member_list() if is_leader else None, skip=is_leader)
                else:
                    resp = self._join_response(new_id, leader=current_leader)

                def failed(code: int, now2: int, _old=old) -> Effects:
                    fx2 = Effects()
                    if self.static_members.get(req.group_instance_id) == new_id and self.generation == generation:
                        mm = self.members.pop(new_id)
                        mm.member_id = old_id
                        mm.protocols, mm.rebalance_timeout_ms, mm.session_timeout_ms = _old
                        self.members[old_id] = mm
                        self.static_members[req.group_instance_id] = old_id
                        if self.leader_id == new_id:
                            self.leader_id = old_id
                    return fx2

                fx.writes.append(Write([self.metadata_record(now)], [(waiter, resp)], on_fail=failed))
                return fx
            m.join_waiter = waiter
            m.awaiting_join = True
            return fx.add(self._maybe_prepare_rebalance_or_complete_join(
                now, f"static member {req.group_instance_id} changed its protocols"))
        m.join_waiter = waiter
        m.awaiting_join = True
        if self.state == COMPLETING_REBALANCE:
            return fx.add(self._prepare_rebalance(now, f"static member {req.group_instance_id} rejoined"))
        return fx.add(self._maybe_complete_join(now))

    # --- rebalance ----------------------------------------------------------------------------
    def _maybe_prepare_rebalance_or_complete_join(self, now: int, reason: str) -> Effects:
        if self.state in (STABLE, COMPLETING_REBALANCE, EMPTY):
            return self._prepare_rebalance(now, reason)
        return self._maybe_complete_join(now)

    def prepare_rebalance(self, now: int, reason: str) -> Effects:
        """A rebalance the coordinator starts (a consumer group downgraded: a member left)."""
        return self._prepare_rebalance(now, reason)

    def _prepare_rebalance(self, now: int, reason: str) -> Effects:
        log.info("Preparing to rebalance group %s in state %s with old generation %d (reason: %s)", self.group_id,
                 self.state, self.generation, reason)
        fx = Effects()
        if self.state == COMPLETING_REBALANCE:
            self._reset_assignment_with_error(ErrorCode.REBALANCE_IN_PROGRESS, fx)
        self.sync_deadline = None
        self.pending_sync.clear()
        initial = self.state == EMPTY
        timeout = self.rebalance_timeout_ms()
        if initial:
            delay = min(self.config.initial_rebalance_delay_ms, timeout)
            self.initial_delay_remaining = max(timeout - self.config.initial_rebalance_delay_ms, 0)
            self.in_initial_delay = True
            self.new_member_added = False
            self.join_deadline = now + delay
        else:
            self.in_initial_delay = False
            self.join_deadline = now + timeout
        self.transition(PREPARING_REBALANCE, now)
        return fx.add(self._maybe_complete_join(now))

    def _maybe_complete_join(self, now: int) -> Effects:
        if (self.state == PREPARING_REBALANCE and not self.in_initial_delay and self.has_all_members_joined()):
            return self._complete_join(now)
        return Effects()

    def _reset_assignment_with_error(self, code: int, fx: Effects) -> None:
        for m in self.members.values():
            m.assignment = b""
            if m.sync_waiter is not None:
                fx.reply(m.sync_waiter, sync_error(code))
                m.sync_waiter = None

    def _complete_join(self, now: int) -> Effects:
        fx = Effects()
        if self.state == DEAD:
            return fx
        self.join_deadline = None
        self.in_initial_delay = False
        # dynamic members that did not rejoin in time are gone
        gone = [mid for mid, m in self.members.items() if not m.awaiting_join and m.group_instance_id is None]
        for mid in gone:
            self._remove(mid, fx)
        if gone:
            log.info("Group %s removed dynamic members who have not joined: %s", self.group_id, gone)
        self.pending_members.clear()
        if self.leader_id is None or not self.members.get(self.leader_id, Member("", None, "", "", 0, 0, "", [])
                                                          ).awaiting_join:
            joined = [mid for mid, m in self.members.items() if m.awaiting_join]
            if joined:
                self.leader_id = joined[0]
        self.generation += 1
        if not self.members:
            log.info("Group %s with generation %d is now empty", self.group_id, self.generation)
            self.protocol_name = None
            self.leader_id = None
            self.transition(EMPTY, now)
            fx.writes.append(Write([self.metadata_record(now)]))
            return fx
        self.protocol_name = self.select_protocol()
        self.transition(COMPLETING_REBALANCE, now)
        log.info("Stabilized group %s generation %d with %d members", self.group_id, self.generation,
                 len(self.members))
        members = self._member_list()
        for m in self.members.values():
            if m.awaiting_join:
                fx.reply(m.join_waiter, self._join_response(
                    m.member_id, members if m.member_id == self.leader_id else None))
            m.join_waiter = None
            m.awaiting_join = False
            m.is_new = False
            self._heartbeat(m, now)
        # members must send SyncGroup within the rebalance timeout
        self.pending_sync = set(self.members)
        self.sync_deadline = now + self.rebalance_timeout_ms()
        return fx

    # --- SyncGroup ----------------------------------------------------------------------------
    def sync(self, now: int, member_id: str, instance_id: str | None, generation: int, protocol_type: str | None,
             protocol_name: str | None, assignments: dict[str, bytes], waiter: Any) -> Effects:
        fx = Effects()
        if self.state == DEAD:
            fx.reply(waiter, sync_error(ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return fx
        err = self.validate_member(member_id, instance_id)
        if not err and generation != self.generation:
            err = ErrorCode.ILLEGAL_GENERATION
        if not err and ((protocol_type is not None and protocol_type != self.protocol_type)
                        or (protocol_name is not None and protocol_name != self.protocol_name)):
            err = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if err:
            fx.reply(waiter, sync_error(err))
            return fx
        m = self.members[member_id]
        if self.state == PREPARING_REBALANCE:
            fx.reply(waiter, sync_error(ErrorCode.REBALANCE_IN_PROGRESS))
            return fx
        if self.state == COMPLETING_REBALANCE:
            if m.sync_waiter is not None and m.sync_waiter is not waiter:
                fx.reply(m.sync_waiter, sync_error(ErrorCode.REBALANCE_IN_PROGRESS))
            m.sync_waiter = waiter
            self._heartbeat(m, now)
            self.pending_sync.discard(member_id)
            if member_id == self.leader_id:
                # the leader's assignment: persist it, and only then (still in CompletingRebalance
                # meanwhile: a follower's SyncGroup parks) does everyone get theirs together
                assignment = {mid: bytes(assignments.get(mid, b"")) for mid in self.members}
                fx.writes.append(Write([self.metadata_record(now, assignment)],
                                       on_done=self._assignment_stored(generation, assignment)))
            return fx
        # Stable: the assignment is already known
        self._heartbeat(m, now)
        self.pending_sync.discard(member_id)
        if not self.pending_sync:
            self.sync_deadline = None
        fx.reply(waiter, self._sync_response(m))
        return fx

    def _assignment_stored(self, generation: int, assignment: dict[str, bytes]) -> Callable[[int, int], Effects]:
        """What happens once the leader's assignment is written (Kafka's SyncGroup append
        callback): nothing if the group moved on meanwhile (a member joined or left: another
        rebalance); else, stored: Stable, and every parked SyncGroup gets its assignment;
        failed: every parked SyncGroup gets the error and the group rebalances."""

        def done(code: int, now: int) -> Effects:
            fx = Effects()
            if self.state != COMPLETING_REBALANCE or self.generation != generation:
                return fx
            if code:
                self._reset_assignment_with_error(code, fx)
                return fx.add(self._prepare_rebalance(now, f"writing the assignment failed: error {code}"))
            for mid, m in self.members.items():
                m.assignment = assignment.get(mid, b"")
            self.transition(STABLE, now)
            for m in self.members.values():
                if m.sync_waiter is not None:
                    fx.reply(m.sync_waiter, self._sync_response(m))
                    m.sync_waiter = None
            if not self.pending_sync:
                self.sync_deadline = None
            return fx

        return done

    def _sync_response(self, m: Member) -> dict:
        return {"error_code": 0, "protocol_type": self.protocol_type, "protocol_name": self.protocol_name,
                "assignment": m.assignment}

    # --- Heartbeat ----------------------------------------------------------------------------
    def heartbeat(self, now: int, member_id: str, instance_id: str | None, generation: int) -> int:
        if self.state == DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        err = self.validate_member(member_id, instance_id)
        if err:
            return err
        if generation != self.generation:
            return ErrorCode.ILLEGAL_GENERATION
        m = self.members[member_id]
        if self.state == EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._heartbeat(m, now)
        if self.state == PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def touch(self, now: int, member_id: str) -> None:
        """An offset commit from a member also counts as a heartbeat."""
        m = self.members.get(member_id)
        if m is not None:
            self._heartbeat(m, now)

    # --- LeaveGroup ---------------------------------------------------------------------------
    def leave(self, now: int, identities: list[tuple[str, str | None]]) -> tuple[list[dict], Effects]:
        fx = Effects()
        results = []
        removed = False
        for member_id, instance_id in identities:
            res = {"member_id": member_id, "group_instance_id": instance_id, "error_code": 0}
            results.append(res)
            if self.state == DEAD:
                res["error_code"] = ErrorCode.COORDINATOR_NOT_AVAILABLE
                continue
            if instance_id is not None:
                known = self.static_members.get(instance_id)
                if known is None:
                    res["error_code"] = ErrorCode.UNKNOWN_MEMBER_ID
                elif member_id not in ("", known):
                    res["error_code"] = ErrorCode.FENCED_INSTANCE_ID
                else:
                    self._remove(known, fx)
                    removed = True
            elif member_id in self.pending_members:
                del self.pending_members[member_id]
                removed = True
            elif member_id not in self.members:
                res["error_code"] = ErrorCode.UNKNOWN_MEMBER_ID
            else:
                self._remove(member_id, fx)
                removed = True
        if removed:
            fx.add(self._after_removal(now, "members left the group: " + ", ".join(r["member_id"] for r in results
                                                                               if not r["error_code"])))
        return results, fx

    def _after_removal(self, now: int, reason: str) -> Effects:
        if self.state in (STABLE, COMPLETING_REBALANCE):
            return self._prepare_rebalance(now, reason)
        if self.state == PREPARING_REBALANCE:
            return self._maybe_complete_join(now)
        return Effects()

    # --- timers -------------------------------------------------------------------------------
    def tick(self, now: int) -> Effects:
        fx = Effects()
        if self.state == DEAD:
            return fx
        if self.join_deadline is not None and now >= self.join_deadline and self.state == PREPARING_REBALANCE:
            if self.in_initial_delay and self.new_member_added and self.initial_delay_remaining > 0:
                # more members are arriving: wait a little longer (bounded by the rebalance timeout)
                delay = min(self.config.initial_rebalance_delay_ms, self.initial_delay_remaining)
                self.initial_delay_remaining = max(self.initial_delay_remaining - self.config.initial_rebalance_delay_ms, 0)
                self.new_member_added = False
                self.join_deadline = now + delay
            elif self.in_initial_delay:
                self.in_initial_delay = False
                if self.has_all_members_joined():
                    fx.add(self._complete_join(now))
                else:
                    self.join_deadline = now + self.rebalance_timeout_ms()
            else:
                fx.add(self._complete_join(now))
        if self.sync_deadline is not None and now >= self.sync_deadline:
            self.sync_deadline = None
            if self.state in (COMPLETING_REBALANCE, STABLE) and self.pending_sync:
                late = sorted(self.pending_sync)
                for mid in late:
                    self._remove(mid, fx, ErrorCode.REBALANCE_IN_PROGRESS)
                fx.add(self._prepare_rebalance(now, f"members {late} did not send SyncGroup in time"))
            self.pending_sync.clear()
        for mid, deadline in list(self.pending_members.items()):
            if now >= deadline:
                del self.pending_members[mid]
                fx.add(self._maybe_complete_join(now))
        expired = []
        for mid, m in list(self.members.items()):
            if now < m.heartbeat_deadline:
                continue
            if not m.is_new and (m.awaiting_join or m.sync_waiter is not None):
                self._heartbeat(m, now)  # parked in a rebalance: the rebalance timeout bounds it
                continue
            log.info("Member %s in group %s has failed (no heartbeat in its session timeout), removing it",
                     mid, self.group_id)
            self._remove(mid, fx)
            expired.append(mid)
        if expired:
            fx.add(self._after_removal(now, f"removing members {expired} on heartbeat expiration"))
        return fx

    # --- deletion -----------------------------------------------------------------------------
    def make_dead(self, now: int, code: int = ErrorCode.NOT_COORDINATOR) -> Effects:
        """Unloaded or deleted: every parked request is answered with ``code``."""
        fx = Effects()
        for m in self.members.values():
            if m.join_waiter is not None:
                fx.reply(m.join_waiter, join_error(code, m.member_id))
                m.join_waiter = None
            if m.sync_waiter is not None:
                fx.reply(m.sync_waiter, sync_error(code))
                m.sync_waiter = None
        self.previous_state = self.state
        self.state = DEAD
        self.state_timestamp = now + self.wall_offset_ms
        self.join_deadline = self.sync_deadline = None
        self.pending_members.clear()
        return fx

    # --- persistence --------------------------------------------------------------------------
    def to_value(self, now: int, assignment: dict[str, bytes] | None = None) -> rec.GroupValue:
        """The group as its GroupMetadata record says it; ``assignment``: the members'
        assignments to write instead of those in memory (the leader's, not applied yet)."""
        members = tuple(
            rec.MemberValue(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                            m.session_timeout_ms, m.metadata(self.protocol_name),
                            m.assignment if assignment is None else assignment.get(m.member_id, b""))
            for m in self.members.values()) if self.state != EMPTY else ()
        return rec.GroupValue(self.protocol_type or "", self.generation, self.protocol_name, self.leader_id,
                              self.state_timestamp, members)

    def metadata_record(self, now: int, assignment: dict[str, bytes] | None = None) -> tuple[bytes, bytes]:
        return rec.group_metadata_key(self.group_id), rec.group_metadata_value(self.to_value(now, assignment))

    @classmethod
    def from_value(cls, group_id: str, v: rec.GroupValue, now: int, config: GroupConfig,
                   wall: int | None = None) -> ClassicGroup:
        """A group as loaded from its last GroupMetadata record: Stable with its members
        (who must heartbeat within their session timeout), or Empty."""
        g = cls(group_id, now, config, wall)
        if v.current_state_timestamp >= 0:
            g.state_timestamp = v.current_state_timestamp
        g.protocol_type = v.protocol_type or None
        g.generation = v.generation
        g.protocol_name = v.protocol
        g.leader_id = v.leader
        for mv in v.members:
            m = Member(mv.member_id, mv.group_instance_id, mv.client_id, mv.client_host, mv.rebalance_timeout,
                       mv.session_timeout, v.protocol_type, [(v.protocol or "", mv.subscription)], mv.assignment)
            m.heartbeat_deadline = now + mv.session_timeout
            g.members[m.member_id] = m
            if m.group_instance_id is not None:
                g.static_members[m.group_instance_id] = m.member_id
        if g.members:
            g.state = STABLE
        else:
            g.leader_id = None
        return g
