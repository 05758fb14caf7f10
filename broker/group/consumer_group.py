"""The consumer group protocol (KIP-848, ConsumerGroupHeartbeat) as a pure state machine: one
``ConsumerGroup`` per group id (Kafka's ConsumerGroup, CurrentAssignmentBuilder,
TargetAssignmentBuilder and the consumer-group parts of GroupMetadataManager).

The group has an epoch, bumped whenever a member joins, leaves or changes its subscription,
or the subscribed topics change (partitions added, a topic created or deleted). When the group
epoch passes the epoch of the target assignment, the server-side assignor (assignors.py)
computes a new target. Each member then reconciles towards its target on its own heartbeats:
partitions it must give up are revoked first (the member stays in its epoch, UNREVOKED_PARTITIONS,
until it reports them gone); partitions still owned by another member are withheld until that
member releases them (UNRELEASED_PARTITIONS); then it moves to the target epoch. So no
partition is owned by two members at once, and only the partitions that move are revoked.

Every change is a record of Kafka's formats (consumer_records.py); ``heartbeat`` and the timers
emit records and apply them at once through ``replay`` — the same code that rebuilds the group
when a coordinator loads the partition — so the state and the log never disagree.

Sans-IO: ``now`` is monotonic ms (session and rebalance deadlines); member ids come from the shell.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import uuid
from collections.abc import Callable, Mapping

import re2

from broker.group import assignors
from broker.group import consumer_records as cr
from common.errors import ErrorCode

log = logging.getLogger("krafty.group")

# MemberState
MEMBER_STABLE, UNREVOKED_PARTITIONS, UNRELEASED_PARTITIONS, MEMBER_UNKNOWN = 0, 1, 2, 127
LEAVE_GROUP_EPOCH = -1
REGEX_REFRESH_MIN_MS = 10_000  # Kafka's batching of regex refreshes after metadata changes
LEAVE_GROUP_STATIC_EPOCH = -2

EMPTY, ASSIGNING, RECONCILING, STABLE, DEAD = "Empty", "Assigning", "Reconciling", "Stable", "Dead"
GROUP_TYPE_CONSUMER = "consumer"

Assignment = dict[uuid.UUID, frozenset[int]]
Records = list[tuple[bytes, bytes | None]]
Topics = Mapping[str, tuple[uuid.UUID, int]]  # topic name -> (topic id, partitions), from the metadata image


class HeartbeatError(Exception):
    def __init__(self, code: int, message: str | None = None):
        super().__init__(message or ErrorCode(code).name)
        self.code = code
        self.message = message


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5000
    max_size: int = 2**31 - 1
    assignors: tuple[str, ...] = (assignors.UNIFORM, assignors.RANGE)  # the first is the default
    # a group's own consumer.session.timeout.ms / consumer.heartbeat.interval.ms (GROUP configs)
    group_config: Callable[[str], Mapping[str, str]] = lambda _gid: {}

    def session_ms(self, group_id: str) -> int:
        return int(self.group_config(group_id).get("consumer.session.timeout.ms", self.session_timeout_ms))

    def heartbeat_ms(self, group_id: str) -> int:
        return int(self.group_config(group_id).get("consumer.heartbeat.interval.ms", self.heartbeat_interval_ms))


@dataclasses.dataclass(slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: list[tuple[uuid.UUID, list[int]]] | None = None  # TopicPartitions, None if not sent
    client_id: str = ""
    client_host: str = ""


@dataclasses.dataclass(slots=True)
class Member:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    topics: tuple[str, ...] = ()
    regex: str | None = None
    rebalance_timeout_ms: int = -1
    assignor: str | None = None
    epoch: int = 0
    previous_epoch: int = -1
    state: int = MEMBER_STABLE
    assigned: Assignment = dataclasses.field(default_factory=dict)
    pending_revocation: Assignment = dataclasses.field(default_factory=dict)
    session_deadline: int | None = None
    rebalance_deadline: int | None = None  # while UNREVOKED_PARTITIONS: fenced then if still in this epoch
    rebalance_epoch: int = -1

    def metadata(self) -> cr.MemberMetadata:
        return cr.MemberMetadata(self.instance_id, self.rack_id, self.client_id, self.client_host, self.topics,
                                 self.regex, self.rebalance_timeout_ms, self.assignor)

    def current(self) -> cr.CurrentAssignment:
        return cr.CurrentAssignment(self.epoch, self.previous_epoch, self.state, self.assigned,
                                    self.pending_revocation)

    def reconciled_to(self, epoch: int) -> bool:
        return self.state == MEMBER_STABLE and self.epoch == epoch


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False
# a topic-name pattern needs little: a hostile one that would need more (RE2's budget for its
# automata) does not compile, and few compiled ones are kept, so memory stays bounded
_RE2_OPTIONS.max_mem = 1 << 20


@functools.lru_cache(maxsize=128)
def compile_regex(pattern: str):
    """A subscription's regular expression in RE2 syntax (KIP-848: Kafka uses RE2/J); raises
    HeartbeatError INVALID_REGULAR_EXPRESSION when it does not compile."""
    try:
        return re2.compile(pattern, options=_RE2_OPTIONS)
    except re2.error as e:
        raise HeartbeatError(ErrorCode.INVALID_REGULAR_EXPRESSION,
                             f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {e}.") from None


def matching(pattern: str | None, names) -> set[str]:
    """The topic names a member's regex subscribes to (the whole name must match, as Kafka's
    Pattern.matcher(topic).matches()); none for no regex or ""."""
    if not pattern:
        return set()
    r = compile_regex(pattern)
    return {n for n in names if r.fullmatch(n)}


def _owns_any(owned: list[tuple[uuid.UUID, list[int]]] | None, a: Assignment) -> bool:
    if owned is None:
        return True
    return any(p in a.get(t, ()) for t, ps in owned for p in ps)


def _is_subset(owned: list[tuple[uuid.UUID, list[int]]] | None, a: Assignment) -> bool:
    if owned is None:
        return False
    return all(t in a and all(p in a[t] for p in ps) for t, ps in owned)


class ConsumerGroup:
    def __init__(self, group_id: str):
        self.group_id = group_id
        self.epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target: dict[str, Assignment] = {}  # member id -> target assignment
        self.partition_epochs: dict[tuple[uuid.UUID, int], int] = {}  # owned partition -> its owner's epoch
        self.subscription_metadata: dict[str, tuple[uuid.UUID, int]] = {}
        self.resolved: dict[str, frozenset[str]] = {}  # regex -> the topic names it matched
        self.regex_due: int | None = None  # a member's new regex waits for the timer to be resolved
        self.regex_refresh_all = False  # the metadata image changed: every regex is resolved again
        self.regex_refreshed_at: int | None = None
        self.dead = False

    def __repr__(self) -> str:
        return f"<ConsumerGroup {self.group_id} {self.state()} epoch={self.epoch} members={list(self.members)}>"

    # --- queries ---------------------------------------------------------------------------------
    def state(self) -> str:
        if self.dead:
            return DEAD
        if not self.members:
            return EMPTY
        if self.epoch > self.assignment_epoch:
            return ASSIGNING
        if any(not m.reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return RECONCILING
        return STABLE

    def subscribed_topic_names(self) -> set[str]:
        """Topics the members subscribe to by name, and those their regular expressions matched
        when last resolved."""
        names = {t for m in self.members.values() for t in m.topics}
        for r in {m.regex for m in self.members.values() if m.regex}:
            names |= self.resolved.get(r, frozenset())
        return names

    def member_topics(self, m: Member) -> set[str]:
        """The topics one member is subscribed to now: by name, and by its resolved regex."""
        return set(m.topics) | (self.resolved.get(m.regex, frozenset()) if m.regex else set())

    def resolve_regexes(self, topics: Topics, only_new: bool = False) -> bool:
        """Match the members' regular expressions against the metadata image's topics (Kafka
        does it off the request path: a member's new regex subscribes it on a later epoch);
        whether a resolution changed."""
        used = {m.regex for m in self.members.values() if m.regex}
        changed = bool(set(self.resolved) - used)
        self.resolved = {r: v for r, v in self.resolved.items() if r in used}
        for r in sorted(used):
            if only_new and r in self.resolved:
                continue
            got = frozenset(matching(r, topics))
            if self.resolved.get(r) != got:
                self.resolved[r] = got
                changed = True
        self.regex_due = None
        return changed

    def preferred_assignor(self, default: str) -> str:
        """The assignor most members ask for (Kafka's computePreferredServerAssignor)."""
        votes: dict[str, int] = {}
        for m in self.members.values():
            if m.assignor:
                votes[m.assignor] = votes.get(m.assignor, 0) + 1
        return max(sorted(votes), key=lambda a: votes[a]) if votes else default

    def next_deadline(self) -> int | None:
        ds = [d for m in self.members.values() for d in (m.session_deadline, m.rebalance_deadline) if d is not None]
        if self.regex_due is not None:
            ds.append(self.regex_due)
        return min(ds) if ds else None

    # --- replay: the only place the group's persistent state changes --------------------------
    def replay(self, key: cr.ConsumerKey, value: bytes | None) -> None:
        kind = key.kind
        if kind == cr.GROUP_EPOCH_KEY:
            if value is None:
                self.dead = True
            else:
                self.epoch = cr.decode_int_value(value)
        elif kind == cr.PARTITION_METADATA_KEY:
            self.subscription_metadata = {} if value is None else cr.decode_partition_metadata(value)
        elif kind == cr.TARGET_METADATA_KEY:
            self.assignment_epoch = 0 if value is None else cr.decode_int_value(value)
        elif kind == cr.TARGET_MEMBER_KEY:
            if value is None:
                self.target.pop(key.member, None)
            else:
                self.target[key.member] = cr.decode_target_member(value)
        elif kind == cr.MEMBER_METADATA_KEY:
            self._replay_member(key.member, value)
        elif kind == cr.CURRENT_ASSIGNMENT_KEY:
            m = self.members.get(key.member)
            if m is None:
                m = self.members[key.member] = Member(key.member)
            self._release(m)
            if value is None:
                m.epoch, m.previous_epoch, m.state = LEAVE_GROUP_EPOCH, LEAVE_GROUP_EPOCH, MEMBER_STABLE
                m.assigned, m.pending_revocation = {}, {}
            else:
                c = cr.decode_current_assignment(value)
                m.epoch, m.previous_epoch, m.state = c.member_epoch, c.previous_member_epoch, c.state
                m.assigned, m.pending_revocation = dict(c.assigned), dict(c.pending_revocation)
                self._hold(m)

    def _replay_member(self, member_id: str, value: bytes | None) -> None:
        if value is None:
            m = self.members.pop(member_id, None)
            if m is not None:
                self._release(m)
                if m.instance_id is not None and self.static_members.get(m.instance_id) == member_id:
                    del self.static_members[m.instance_id]
            return
        md = cr.decode_member_metadata(value)
        m = self.members.get(member_id)
        if m is None:
            m = self.members[member_id] = Member(member_id)
        if m.instance_id is not None and m.instance_id != md.instance_id \
                and self.static_members.get(m.instance_id) == member_id:
            del self.static_members[m.instance_id]
        m.instance_id, m.rack_id, m.client_id, m.client_host = md.instance_id, md.rack_id, md.client_id, md.client_host
        m.topics, m.regex = md.subscribed_topic_names, md.subscribed_topic_regex
        m.rebalance_timeout_ms, m.assignor = md.rebalance_timeout_ms, md.server_assignor
        if m.instance_id is not None:
            self.static_members[m.instance_id] = member_id

    def _release(self, m: Member) -> None:
        for a in (m.assigned, m.pending_revocation):
            for t, ps in a.items():
                for p in ps:
                    if self.partition_epochs.get((t, p)) == m.epoch:
                        del self.partition_epochs[(t, p)]

    def _hold(self, m: Member) -> None:
        for a in (m.assigned, m.pending_revocation):
            for t, ps in a.items():
                for p in ps:
                    self.partition_epochs[(t, p)] = m.epoch

    def _emit(self, records: Records, kind: int, member: str | None, value: bytes | None) -> None:
        k = cr.key(kind, self.group_id, member)
        records.append((k, value))
        self.replay(cr.ConsumerKey(kind, self.group_id, member), value)

    # --- the records of common changes -----------------------------------------------------------
    def _remove_member(self, records: Records, member_id: str) -> None:
        """Tombstones of a member, in Kafka's order (current assignment, target, metadata)."""
        self._emit(records, cr.CURRENT_ASSIGNMENT_KEY, member_id, None)
        self._emit(records, cr.TARGET_MEMBER_KEY, member_id, None)
        self._emit(records, cr.MEMBER_METADATA_KEY, member_id, None)

    def _refresh_subscription_metadata(self, records: Records, topics: Topics) -> bool:
        """The subscribed topics as the metadata image has them now; a change is recorded
        (and bumps the group epoch: the caller does)."""
        used = {m.regex for m in self.members.values() if m.regex}
        self.resolved = {r: v for r, v in self.resolved.items() if r in used}  # a regex nobody uses is forgotten
        names = self.subscribed_topic_names()
        new = {n: topics[n] for n in sorted(names) if n in topics}
        if new == self.subscription_metadata:
            return False
        self._emit(records, cr.PARTITION_METADATA_KEY, None, cr.partition_metadata_value(new))
        return True

    def _bump(self, records: Records) -> None:
        self._emit(records, cr.GROUP_EPOCH_KEY, None, cr.group_epoch_value(self.epoch + 1))
        log.info("[GroupId %s] Bumped group epoch to %d.", self.group_id, self.epoch)

    def fence(self, records: Records, member_id: str, reason: str, topics: Topics | None = None) -> None:
        """A member leaves or is fenced: its records are tombstoned and the group epoch bumped."""
        log.info("[GroupId %s] Member %s fenced from the group because %s.", self.group_id, member_id, reason)
        self._remove_member(records, member_id)
        if topics is not None:
            self._refresh_subscription_metadata(records, topics)
        self._bump(records)

    def _update_target(self, records: Records, cfg: ConsumerGroupConfig) -> None:
        """A new target assignment for the current group epoch (Kafka's TargetAssignmentBuilder):
        a record for each member whose target changed, then the target epoch."""
        by_name = self.subscription_metadata
        subs = {mid: {by_name[t][0] for t in self.member_topics(m) if t in by_name} for mid, m in self.members.items()}
        parts = {tid: n for tid, n in by_name.values()}
        name = self.preferred_assignor(cfg.assignors[0])
        new = assignors.assign(name, subs, parts, self.target)
        for mid in sorted(new):
            if new[mid] != self.target.get(mid, {}) or mid not in self.target:
                self._emit(records, cr.TARGET_MEMBER_KEY, mid, cr.target_member_value(new[mid]))
        self._emit(records, cr.TARGET_METADATA_KEY, None, cr.target_metadata_value(self.epoch))
        log.info("[GroupId %s] Computed a new target assignment for epoch %d with '%s' assignor.", self.group_id,
                 self.epoch, name)

    def _reconcile(self, records: Records, m: Member, owned, now: int) -> None:
        """Kafka's CurrentAssignmentBuilder: moves the member towards its target."""
        epoch = self.assignment_epoch
        if m.reconciled_to(epoch):
            return
        target = self.target.get(m.member_id, {})
        if m.state == MEMBER_STABLE:
            nxt = self._next_assignment(m, m.epoch, target, owned)
        elif m.state == UNREVOKED_PARTITIONS:
            if _owns_any(owned, m.pending_revocation):
                return
            nxt = self._next_assignment(m, m.epoch + 1, target, owned)
        elif m.state == UNRELEASED_PARTITIONS:
            nxt = self._next_assignment(m, m.epoch, target, owned)
        else:
            if owned is None or owned:
                raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH, "The consumer group member is in a unknown "
                                     "state. The member must abandon all its partitions and rejoin.")
            nxt = self._next_assignment(m, epoch, target, owned)
        if nxt != m.current():
            self._emit(records, cr.CURRENT_ASSIGNMENT_KEY, m.member_id, cr.current_assignment_value(nxt))
            if m.state == UNREVOKED_PARTITIONS:
                m.rebalance_deadline, m.rebalance_epoch = now + max(m.rebalance_timeout_ms, 0), m.epoch
            else:
                m.rebalance_deadline, m.rebalance_epoch = None, -1

    def _next_assignment(self, m: Member, member_epoch: int, target: Assignment, owned) -> cr.CurrentAssignment:
        unreleased = False
        assigned: Assignment = {}
        revoking: Assignment = {}
        adding: Assignment = {}
        for t in set(target) | set(m.assigned):
            tgt = target.get(t, frozenset())
            cur = m.assigned.get(t, frozenset())
            keep = cur & tgt
            gone = cur - keep
            new = set(tgt - keep)
            held = {p for p in new if (t, p) in self.partition_epochs}
            if held:
                unreleased = True
                new -= held
            if keep:
                assigned[t] = keep
            if gone:
                revoking[t] = frozenset(gone)
            if new:
                adding[t] = frozenset(new)
        # the previous epoch is the epoch the member had (Kafka's updateMemberEpoch)
        if revoking and _owns_any(owned, revoking):
            return cr.CurrentAssignment(member_epoch, m.epoch, UNREVOKED_PARTITIONS, assigned, revoking)
        for t, ps in adding.items():
            assigned[t] = assigned.get(t, frozenset()) | ps
        state = UNRELEASED_PARTITIONS if unreleased else MEMBER_STABLE
        return cr.CurrentAssignment(self.assignment_epoch, m.epoch, state, assigned, {})

    # --- ConsumerGroupHeartbeat ------------------------------------------------------------------
    def heartbeat(self, now: int, req: HeartbeatRequest, topics: Topics, cfg: ConsumerGroupConfig,
                  new_member_id: str) -> tuple[dict, Records]:
        """One heartbeat (join: epoch 0; leave: -1, or -2 for a static member coming back).
        Returns the response fields and the records written; raises HeartbeatError."""
        records: Records = []
        if req.member_epoch in (LEAVE_GROUP_EPOCH, LEAVE_GROUP_STATIC_EPOCH):
            return self._leave(now, req, topics, records), records
        joining = req.member_epoch == 0
        member_id = req.member_id or new_member_id
        if req.subscribed_topic_regex:
            compile_regex(req.subscribed_topic_regex)
        if len(self.members) >= cfg.max_size and member_id not in self.members:
            raise HeartbeatError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                 f"The consumer group has reached its maximum capacity of {cfg.max_size} members.")
        self._member_for(req, member_id, joining, records)
        m = self.members.get(member_id) or Member(member_id)
        before = dataclasses.replace(m) if member_id in self.members else None
        upd = dataclasses.replace(
            m,
            instance_id=req.instance_id if req.instance_id is not None else m.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else m.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1 else m.rebalance_timeout_ms,
            assignor=req.server_assignor if req.server_assignor is not None else m.assignor,
            topics=tuple(req.subscribed_topic_names) if req.subscribed_topic_names is not None else m.topics,
            regex=req.subscribed_topic_regex if req.subscribed_topic_regex is not None else m.regex,
            client_id=req.client_id, client_host=req.client_host)
        bump = False
        if before is None or upd.metadata() != before.metadata():
            self._emit(records, cr.MEMBER_METADATA_KEY, member_id, cr.member_metadata_value(upd.metadata()))
            bump = before is None or upd.topics != before.topics or upd.regex != before.regex
        m = self.members[member_id]
        if m.regex and m.regex not in self.resolved:
            self.regex_due = now  # resolved by the next timer run, not in this request
        if self._refresh_subscription_metadata(records, topics):
            bump = True
        if bump:
            self._bump(records)
        if self.epoch > self.assignment_epoch:
            self._update_target(records, cfg)
        assigned_before = dict(m.assigned)
        self._reconcile(records, m, req.owned, now)
        m.session_deadline = now + cfg.session_ms(self.group_id)
        resp = {"member_id": member_id, "member_epoch": m.epoch, "heartbeat_interval_ms": cfg.heartbeat_ms(self.group_id),
                "assignment": None}
        full = joining or (req.rebalance_timeout_ms != -1 and req.subscribed_topic_names is not None
                           and req.owned is not None)
        if full or m.assigned != assigned_before:
            resp["assignment"] = m.assigned
        return resp, records

    def _member_for(self, req: HeartbeatRequest, member_id: str, joining: bool, records: Records) -> None:
        """Checks the member (Kafka's getOrMaybeSubscribe*ConsumerGroupMember); a static member
        coming back under a new member id takes the old one's place (its records move)."""
        if req.instance_id is None:
            m = self.members.get(member_id)
            if m is None:
                if not joining:
                    raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                         f"Member {member_id} is not a member of group {self.group_id}.")
                return
            self._check_epoch(m, req)
            return
        existing_id = self.static_members.get(req.instance_id)
        existing = self.members.get(existing_id) if existing_id is not None else None
        if joining:
            if existing is None:
                return
            if existing.epoch != LEAVE_GROUP_STATIC_EPOCH:
                raise HeartbeatError(ErrorCode.UNRELEASED_INSTANCE_ID,
                                     f"Static member {member_id} with instance id {req.instance_id} cannot join the "
                                     f"group because the instance id is owned by {existing_id} member.")
            # the static member comes back with a new member id: it takes over the old one's
            # target and partitions, at epoch 0
            new = dataclasses.replace(existing, member_id=member_id, epoch=0, previous_epoch=0,
                                      session_deadline=None, rebalance_deadline=None)
            target = self.target.get(existing_id, {})
            self._remove_member(records, existing_id)
            self._emit(records, cr.MEMBER_METADATA_KEY, member_id, cr.member_metadata_value(new.metadata()))
            self._emit(records, cr.TARGET_MEMBER_KEY, member_id, cr.target_member_value(target))
            self._emit(records, cr.CURRENT_ASSIGNMENT_KEY, member_id, cr.current_assignment_value(new.current()))
            log.info("[GroupId %s] Static member with instance id %s re-joins the consumer group. Created a new "
                     "member %s to replace the existing member %s.", self.group_id, req.instance_id, member_id,
                     existing_id)
            return
        if existing is None:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
        if existing_id != member_id:
            raise HeartbeatError(ErrorCode.FENCED_INSTANCE_ID,
                                 f"Static member {member_id} with instance id {req.instance_id} was fenced by member "
                                 f"{existing_id}.")
        self._check_epoch(existing, req)

    @staticmethod
    def _check_epoch(m: Member, req: HeartbeatRequest) -> None:
        got = req.member_epoch
        if got > m.epoch:
            raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH,
                                 f"The consumer group member has a greater member epoch ({got}) than the one known by "
                                 f"the group coordinator ({m.epoch}). The member must abandon all its partitions and "
                                 "rejoin.")
        if got < m.epoch and (got != m.previous_epoch or not _is_subset(req.owned, m.assigned)):
            raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH,
                                 f"The consumer group member has a smaller member epoch ({got}) than the one known by "
                                 f"the group coordinator ({m.epoch}). The member must abandon all its partitions and "
                                 "rejoin.")

    def _leave(self, now: int, req: HeartbeatRequest, topics: Topics, records: Records) -> dict:
        resp = {"member_id": req.member_id, "member_epoch": req.member_epoch, "heartbeat_interval_ms": 0,
                "assignment": None}
        if req.instance_id is None:
            if req.member_id not in self.members:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"Member {req.member_id} is not a member of group {self.group_id}.")
            self.fence(records, req.member_id, "the member left the group", topics)
            return resp
        existing_id = self.static_members.get(req.instance_id)
        if existing_id is None:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
        if existing_id != req.member_id:
            raise HeartbeatError(ErrorCode.FENCED_INSTANCE_ID,
                                 f"Static member {req.member_id} with instance id {req.instance_id} was fenced by "
                                 f"member {existing_id}.")
        if req.member_epoch == LEAVE_GROUP_STATIC_EPOCH:
            # the static member will be back within its session timeout: it keeps its partitions
            m = self.members[existing_id]
            leaving = dataclasses.replace(m.current(), member_epoch=LEAVE_GROUP_STATIC_EPOCH, pending_revocation={})
            self._emit(records, cr.CURRENT_ASSIGNMENT_KEY, existing_id, cr.current_assignment_value(leaving))
            m.rebalance_deadline, m.rebalance_epoch = None, -1
            return dict(resp, member_epoch=LEAVE_GROUP_STATIC_EPOCH)
        self.fence(records, existing_id, "the static member left the group", topics)
        return resp

    # --- timers -----------------------------------------------------------------------------------
    def tick(self, now: int, topics: Topics) -> Records:
        """Members whose session expired, or who did not revoke partitions within their
        rebalance timeout, are fenced."""
        records: Records = []
        if self.regex_due is not None and now >= self.regex_due:
            full, self.regex_refresh_all, self.regex_refreshed_at = self.regex_refresh_all, False, now
            if self.resolve_regexes(topics, only_new=not full) and self._refresh_subscription_metadata(records, topics):
                self._bump(records)
        for mid in sorted(self.members):
            m = self.members.get(mid)
            if m is None:
                continue
            if m.session_deadline is not None and now >= m.session_deadline:
                self.fence(records, mid, "the member session expired", topics)
            elif m.rebalance_deadline is not None and now >= m.rebalance_deadline:
                if m.epoch == m.rebalance_epoch and m.state == UNREVOKED_PARTITIONS:
                    self.fence(records, mid, f"it failed to transition from epoch {m.epoch} within "
                                             f"{m.rebalance_timeout_ms}ms", topics)
                else:
                    m.rebalance_deadline, m.rebalance_epoch = None, -1
        return records

    def on_loaded(self, now: int, cfg: ConsumerGroupConfig, topics: Topics | None = None) -> None:
        """A coordinator took the group over: every member must heartbeat within its session;
        the members' regexes are resolved again (the metadata image is the truth)."""
        if topics is not None:
            self.resolve_regexes(topics)
        for m in self.members.values():
            m.session_deadline = now + cfg.session_ms(self.group_id)
            if m.state == UNREVOKED_PARTITIONS:
                m.rebalance_deadline, m.rebalance_epoch = now + max(m.rebalance_timeout_ms, 0), m.epoch

    def on_metadata(self, topics: Topics, now: int | None = None) -> Records:
        """The subscribed topics changed in the metadata image (a topic created or deleted,
        partitions added): a new group epoch, so a new target assignment on the next heartbeat.
        Regexes are resolved again by the timer, at most every REGEX_REFRESH_MIN_MS (Kafka
        batches them: topics created together are picked up together); at once without ``now``."""
        records: Records = []
        if now is None:
            self.resolve_regexes(topics)
        elif any(m.regex for m in self.members.values()):
            last = self.regex_refreshed_at
            due = now if last is None else max(now, last + REGEX_REFRESH_MIN_MS)
            self.regex_due = due if self.regex_due is None else min(self.regex_due, due)
            self.regex_refresh_all = True
        if self.members and self._refresh_subscription_metadata(records, topics):
            self._bump(records)
        return records

    # --- deletion ---------------------------------------------------------------------------------
    def tombstones(self) -> Records:
        """DeleteGroups of an empty group (Kafka's createGroupTombstoneRecords)."""
        records: Records = []
        for mid in sorted(self.members):
            self._remove_member(records, mid)
        self._emit(records, cr.TARGET_METADATA_KEY, None, None)
        self._emit(records, cr.PARTITION_METADATA_KEY, None, None)
        self._emit(records, cr.GROUP_EPOCH_KEY, None, None)
        return records

    # --- offsets ----------------------------------------------------------------------------------
    def validate_offset_commit(self, member_id: str, member_epoch: int, api_version: int, transactional: bool) -> int:
        """Kafka's ConsumerGroup.validateOffsetCommit."""
        if member_epoch < 0 and not self.members:
            return ErrorCode.NONE
        m = self.members.get(member_id)
        if m is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if not transactional and api_version < 9:
            return ErrorCode.UNSUPPORTED_VERSION
        if member_epoch != m.epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> int:
        if member_id is None and member_epoch < 0:
            return ErrorCode.NONE
        m = self.members.get(member_id or "")
        if m is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != m.epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    # --- ConsumerGroupDescribe ----------------------------------------------------------------------
    def describe(self, names: Mapping[uuid.UUID, str], default_assignor: str) -> dict:
        def tps(a: Assignment) -> dict:
            return {"topic_partitions": [{"topic_id": t, "topic_name": names.get(t, ""), "partitions": sorted(ps)}
                                         for t, ps in sorted(a.items(), key=lambda kv: kv[0].bytes)]}
        return {"error_code": 0, "error_message": None, "group_id": self.group_id, "group_state": self.state(),
                "group_epoch": self.epoch, "assignment_epoch": self.assignment_epoch,
                "assignor_name": self.preferred_assignor(default_assignor),
                "members": [{"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                             "member_epoch": m.epoch, "client_id": m.client_id, "client_host": m.client_host,
                             "subscribed_topic_names": list(m.topics), "subscribed_topic_regex": m.regex,
                             "assignment": tps(m.assigned), "target_assignment": tps(self.target.get(m.member_id, {}))}
                            for m in self.members.values()]}
