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

Members may use the classic protocol (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) in a consumer group
(KIP-848's online upgrade: a classic group becomes a consumer group when its first consumer-protocol
member joins, migration.py): such a member joins to learn its epoch (its generation) and gets its
current assignment in SyncGroup; its heartbeats answer REBALANCE_IN_PROGRESS when it must join again
to move on (a new group epoch, partitions to revoke, or partitions now free), and it is fenced when
it does not join or sync within its rebalance timeout. When the last consumer-protocol member leaves
a group of classic members, the group is downgraded (``downgraded`` is set for the shard to make
the classic group), as Kafka's GroupMetadataManager does under ``group.consumer.migration.policy``.

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
from broker.group import consumer_protocol as cp
from broker.group import consumer_records as cr
from broker.group.records import RecordFormatError
from common.errors import ErrorCode

log = logging.getLogger("krafty.group")

# MemberState
MEMBER_STABLE, UNREVOKED_PARTITIONS, UNRELEASED_PARTITIONS, MEMBER_UNKNOWN = 0, 1, 2, 127
LEAVE_GROUP_EPOCH = -1
REGEX_REFRESH_MIN_MS = 10_000  # Kafka's batching of regex refreshes after metadata changes
LEAVE_GROUP_STATIC_EPOCH = -2

MEMBER_TYPE_CLASSIC, MEMBER_TYPE_CONSUMER = 0, 1  # ConsumerGroupDescribe v1's MemberType
EMPTY, ASSIGNING, RECONCILING, STABLE, DEAD = "Empty", "Assigning", "Reconciling", "Stable", "Dead"
GROUP_TYPE_CONSUMER = "consumer"
CONSUMER_PROTOCOL_TYPE = "consumer"  # the embedded protocol type classic members must use
MIGRATION_POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")  # group.consumer.migration.policy

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
    migration_policy: str = "bidirectional"  # group.consumer.migration.policy
    classic_max_size: int = 2**31 - 1  # group.max.size: a downgraded group must fit

    @property
    def upgrade_enabled(self) -> bool:
        return self.migration_policy in ("upgrade", "bidirectional")

    @property
    def downgrade_enabled(self) -> bool:
        return self.migration_policy in ("downgrade", "bidirectional")

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
    classic: cr.ClassicMemberMetadata | None = None  # set when the member uses the classic protocol
    join_deadline: int | None = None  # a classic member told to join again must, by then
    sync_deadline: int | None = None  # a classic member that joined must send SyncGroup by then

    def metadata(self) -> cr.MemberMetadata:
        return cr.MemberMetadata(self.instance_id, self.rack_id, self.client_id, self.client_host, self.topics,
                                 self.regex, self.rebalance_timeout_ms, self.assignor, self.classic)

    def session_ms(self, cfg: ConsumerGroupConfig, group_id: str) -> int:
        return self.classic.session_timeout_ms if self.classic is not None else cfg.session_ms(group_id)

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


@dataclasses.dataclass(frozen=True, slots=True)
class ClassicMemberState:
    """A member of a group being downgraded, as its classic group gets it."""
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    assignment: dict[str, frozenset[int]]  # the partitions it may own, by topic name


@dataclasses.dataclass(frozen=True, slots=True)
class Downgrade:
    """A consumer group that became a classic group (the shard makes it): its epoch is the
    classic group's generation; ``rebalance``: a member left, so the classic group rebalances."""
    epoch: int
    members: tuple[ClassicMemberState, ...]
    rebalance: bool


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
        self.regex_unrecorded: set[str] = set()  # resolved when loaded, not in the log: recorded by the timer
        # set by the shard: the metadata image's offset and the wall clock (for regex records)
        self.image_version = -1
        self.wall_offset_ms = 0
        self.dead = False
        self.downgraded: Downgrade | None = None  # set when the group became a classic group

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

    def resolve_regexes(self, topics: Topics, records: Records, only_new: bool = False, now: int = 0) -> bool:
        """Match the members' regular expressions against the metadata image's topics (Kafka
        does it off the request path: a member's new regex subscribes it on a later epoch);
        each new resolution is a ConsumerGroupRegularExpression record (a regex nobody uses any
        more a tombstone); whether a resolution changed."""
        changed = self._forget_unused_regexes(records)
        for r in sorted({m.regex for m in self.members.values() if m.regex}):
            if only_new and r in self.resolved and r not in self.regex_unrecorded:
                continue
            got = frozenset(matching(r, topics))
            if self.resolved.get(r) != got or r in self.regex_unrecorded:
                changed = changed or self.resolved.get(r) != got
                self._emit(records, cr.REGEX_KEY, r, cr.regex_value(cr.ResolvedRegex(
                    got, self.image_version, now + self.wall_offset_ms)))
        self.regex_due = None
        return changed

    def _forget_unused_regexes(self, records: Records) -> bool:
        used = {m.regex for m in self.members.values() if m.regex}
        gone = sorted(set(self.resolved) - used)
        for r in gone:
            self._emit(records, cr.REGEX_KEY, r, None)
        return bool(gone)

    def preferred_assignor(self, default: str) -> str:
        """The assignor most members ask for (Kafka's computePreferredServerAssignor)."""
        votes: dict[str, int] = {}
        for m in self.members.values():
            if m.assignor:
                votes[m.assignor] = votes.get(m.assignor, 0) + 1
        return max(sorted(votes), key=lambda a: votes[a]) if votes else default

    def next_deadline(self) -> int | None:
        ds = [d for m in self.members.values()
              for d in (m.session_deadline, m.rebalance_deadline, m.join_deadline, m.sync_deadline) if d is not None]
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
        elif kind == cr.REGEX_KEY:
            self.regex_unrecorded.discard(key.member)
            if value is None:
                self.resolved.pop(key.member, None)
            else:
                self.resolved[key.member] = cr.decode_regex(value).topics
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
        m.rebalance_timeout_ms, m.assignor, m.classic = md.rebalance_timeout_ms, md.server_assignor, md.classic
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
        self._forget_unused_regexes(records)  # a regex nobody uses is forgotten
        names = self.subscribed_topic_names()
        new = {n: topics[n] for n in sorted(names) if n in topics}
        if new == self.subscription_metadata:
            return False
        self._emit(records, cr.PARTITION_METADATA_KEY, None, cr.partition_metadata_value(new))
        return True

    def _bump(self, records: Records) -> None:
        self._emit(records, cr.GROUP_EPOCH_KEY, None, cr.group_epoch_value(self.epoch + 1))
        log.info("[GroupId %s] Bumped group epoch to %d.", self.group_id, self.epoch)

    def fence(self, records: Records, member_id: str, reason: str, topics: Topics | None = None,
              cfg: ConsumerGroupConfig | None = None) -> None:
        """A member leaves or is fenced: its records are tombstoned and the group epoch bumped;
        or, when only classic members remain, the group becomes a classic group (with ``cfg``)."""
        self.fence_members(records, [member_id], reason, topics, cfg)

    def fence_members(self, records: Records, member_ids: list[str], reason: str, topics: Topics | None = None,
                      cfg: ConsumerGroupConfig | None = None) -> None:
        """Kafka's consumerGroupFenceMembers: the members' records are tombstoned and the group
        epoch bumped once; or the group is downgraded to a classic group of the others."""
        if not member_ids:
            return
        for mid in member_ids:
            log.info("[GroupId %s] Member %s fenced from the group because %s.", self.group_id, mid, reason)
        if cfg is not None and self._may_downgrade(set(member_ids), cfg):
            self._downgrade(records, set(member_ids), None, topics or {})
            return
        for mid in member_ids:
            self._remove_member(records, mid)
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
            if m.classic is not None:
                pass  # a classic member has its join and sync timers instead
            elif m.state == UNREVOKED_PARTITIONS:
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
            return self._leave(now, req, topics, records, cfg), records
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
            client_id=req.client_id, client_host=req.client_host, classic=None)
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
            if existing.epoch != LEAVE_GROUP_STATIC_EPOCH and existing.classic is None:
                # (a classic member's instance is taken over at once: an application upgrades a
                # static member by restarting it with the consumer protocol)
                raise HeartbeatError(ErrorCode.UNRELEASED_INSTANCE_ID,
                                     f"Static member {member_id} with instance id {req.instance_id} cannot join the "
                                     f"group because the instance id is owned by {existing_id} member.")
            # the static member comes back with a new member id: it takes over the old one's
            # target and partitions, at epoch 0
            new = dataclasses.replace(existing, member_id=member_id, epoch=0, previous_epoch=0,
                                      session_deadline=None, rebalance_deadline=None, join_deadline=None,
                                      sync_deadline=None)
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

    def _leave(self, now: int, req: HeartbeatRequest, topics: Topics, records: Records,
               cfg: ConsumerGroupConfig | None = None) -> dict:
        resp = {"member_id": req.member_id, "member_epoch": req.member_epoch, "heartbeat_interval_ms": 0,
                "assignment": None}
        if req.instance_id is None:
            if req.member_id not in self.members:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"Member {req.member_id} is not a member of group {self.group_id}.")
            self.fence(records, req.member_id, "the member left the group", topics, cfg)
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
        self.fence(records, existing_id, "the static member left the group", topics, cfg)
        return resp

    # --- timers -----------------------------------------------------------------------------------
    def tick(self, now: int, topics: Topics, cfg: ConsumerGroupConfig | None = None) -> Records:
        """Members whose session expired, who did not revoke partitions within their rebalance
        timeout, or (classic members) did not join or sync within it, are fenced; with ``cfg``,
        the last consumer-protocol member's fencing downgrades a group of classic members."""
        records: Records = []
        if self.regex_due is not None and now >= self.regex_due:
            full, self.regex_refresh_all, self.regex_refreshed_at = self.regex_refresh_all, False, now
            if self.resolve_regexes(topics, records, only_new=not full, now=now) \
                    and self._refresh_subscription_metadata(records, topics):
                self._bump(records)
        for mid in sorted(self.members):
            m = self.members.get(mid)
            if m is None or self.dead:
                continue
            if m.session_deadline is not None and now >= m.session_deadline:
                self.fence(records, mid, "the member session expired", topics, cfg)
            elif m.join_deadline is not None and now >= m.join_deadline:
                self.fence(records, mid, "the classic member failed to join within the rebalance timeout", topics,
                           cfg)
            elif m.sync_deadline is not None and now >= m.sync_deadline:
                self.fence(records, mid, "the member failed to sync within timeout", topics, cfg)
            elif m.rebalance_deadline is not None and now >= m.rebalance_deadline:
                if m.epoch == m.rebalance_epoch and m.state == UNREVOKED_PARTITIONS:
                    self.fence(records, mid, f"it failed to transition from epoch {m.epoch} within "
                                             f"{m.rebalance_timeout_ms}ms", topics, cfg)
                else:
                    m.rebalance_deadline, m.rebalance_epoch = None, -1
        return records

    def on_loaded(self, now: int, cfg: ConsumerGroupConfig, topics: Topics | None = None) -> None:
        """A coordinator took the group over: every member must heartbeat within its session;
        the regexes resolve as their records say, and again from the metadata image on the next
        timer (a regex with no record, from before they were written, is resolved now and
        recorded then)."""
        if topics is not None and any(m.regex for m in self.members.values()):
            for r in {m.regex for m in self.members.values() if m.regex} - set(self.resolved):
                self.resolved[r] = frozenset(matching(r, topics))
                self.regex_unrecorded.add(r)
            self.regex_due, self.regex_refresh_all = now, True
        for m in self.members.values():
            m.session_deadline = now + m.session_ms(cfg, self.group_id)
            if m.state == UNREVOKED_PARTITIONS and m.classic is None:
                m.rebalance_deadline, m.rebalance_epoch = now + max(m.rebalance_timeout_ms, 0), m.epoch

    # --- classic members (JoinGroup / SyncGroup / Heartbeat / LeaveGroup to a consumer group) ------
    def supports_classic_protocols(self, protocol_type: str, names: set[str]) -> bool:
        """Kafka's supportsClassicProtocols: the consumer protocol type, and a protocol every
        classic member supports."""
        if protocol_type != CONSUMER_PROTOCOL_TYPE:
            return False
        classic = [m for m in self.members.values() if m.classic is not None]
        if not self.members or not classic:
            return bool(names)
        return any(all(n in {p for p, _ in m.classic.protocols} for m in classic) for n in names)

    def _classic_member(self, member_id: str, instance_id: str | None) -> Member:
        """Kafka's validateConsumerGroupMember + throwIfMemberDoesNotUseClassicProtocol."""
        if instance_id is None:
            m = self.members.get(member_id)
            if m is None:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"Member {member_id} is not a member of group {self.group_id}.")
        else:
            mid = self.static_members.get(instance_id)
            m = self.members.get(mid) if mid is not None else None
            if m is None:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"Member with instance id {instance_id} is not a member of group "
                                     f"{self.group_id}.")
            if mid != member_id:
                raise HeartbeatError(ErrorCode.FENCED_INSTANCE_ID,
                                     f"Static member {member_id} with instance id {instance_id} was fenced by "
                                     f"member {mid}.")
        if m.classic is None:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {m.member_id} does not use the classic protocol.")
        return m

    @staticmethod
    def _check_generation(m: Member, generation: int) -> None:
        if generation != m.epoch:
            raise HeartbeatError(ErrorCode.ILLEGAL_GENERATION, f"The request generation id {generation} is not "
                                 f"equal to the member epoch {m.epoch} of member {m.member_id}.")

    def _rejoin_by(self, m: Member, now: int) -> None:
        """The member was told to join again: it must within its rebalance timeout."""
        if m.join_deadline is None:
            m.join_deadline = now + max(m.rebalance_timeout_ms, 0)

    def waiting_on_unreleased(self, m: Member) -> bool:
        """Whether partitions of the member's target are still owned by another member."""
        if m.state != UNRELEASED_PARTITIONS:
            return False
        return any(p not in m.assigned.get(t, ()) and (t, p) in self.partition_epochs
                   for t, ps in self.target.get(m.member_id, {}).items() for p in ps)

    def classic_join(self, now: int, req, topics: Topics, cfg: ConsumerGroupConfig) -> tuple[dict, Records]:
        """A JoinGroup (``req``: a state.JoinRequest) to this group with members (Kafka's
        classicGroupJoinToConsumerGroup): the member joins or rejoins as a classic member and
        reconciles with the partitions its subscription says it owns; answered with its epoch
        as the generation, no leader, no members (the coordinator assigns). Raises HeartbeatError."""
        records: Records = []
        unknown = req.member_id == ""
        member_id = req.new_member_id if unknown else req.member_id
        if len(self.members) >= cfg.max_size and member_id not in self.members:
            raise HeartbeatError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                 f"The consumer group has reached its maximum capacity of {cfg.max_size} members.")
        if not self.supports_classic_protocols(req.protocol_type, {n for n, _ in req.protocols}):
            raise HeartbeatError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"Member {member_id}'s protocols are not "
                                 "supported.")
        if unknown and req.group_instance_id is None and req.require_known_member_id:
            log.info("[GroupId %s] Dynamic member with unknown member id joins the consumer group. Created a new "
                     "member id %s and requesting the member to rejoin with this id.", self.group_id, member_id)
            return {"error_code": int(ErrorCode.MEMBER_ID_REQUIRED), "generation_id": -1, "protocol_type": None,
                    "protocol_name": None, "leader": "", "skip_assignment": False, "member_id": member_id,
                    "members": []}, records
        try:
            sub = cp.decode_subscription(req.protocols[0][1])
        except (RecordFormatError, IndexError):
            raise HeartbeatError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"Member {member_id}'s embedded consumer "
                                 "protocol subscription is malformed.") from None
        replaced: Member | None = None
        if req.group_instance_id is None:
            m = self.members.get(member_id) or Member(member_id)
            if member_id not in self.members:
                log.info("[GroupId %s] Member %s joins the consumer group using the classic protocol.",
                         self.group_id, member_id)
        else:
            existing_id = self.static_members.get(req.group_instance_id)
            existing = self.members.get(existing_id) if existing_id is not None else None
            if not unknown:
                if existing is None:
                    raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                         f"Instance id {req.group_instance_id} is unknown.")
                if existing_id != member_id:
                    raise HeartbeatError(ErrorCode.FENCED_INSTANCE_ID, f"Static member {member_id} with instance "
                                         f"id {req.group_instance_id} was fenced by member {existing_id}.")
                m = existing
            elif existing is None:
                m = Member(member_id)
            else:
                # the static member comes back under a new member id: it takes the old one's place
                replaced = existing
                self._replace_static(records, existing, member_id)
                m = self.members[member_id]
                log.info("[GroupId %s] Static member with instance id %s re-joins the consumer group using the "
                         "classic protocol. Created a new member %s to replace the existing member %s.",
                         self.group_id, req.group_instance_id, member_id, existing.member_id)
        downgrade = replaced is not None and self._may_downgrade_replacing(replaced, cfg)
        before = dataclasses.replace(m) if member_id in self.members else None
        upd = dataclasses.replace(
            m, instance_id=req.group_instance_id if req.group_instance_id is not None else m.instance_id,
            rack_id=sub.rack_id if sub.rack_id else m.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1 else m.rebalance_timeout_ms,
            topics=tuple(sub.topics), regex=None, client_id=req.client_id, client_host=req.client_host,
            classic=cr.ClassicMemberMetadata(req.session_timeout_ms, tuple((n, bytes(md)) for n, md in req.protocols)))
        bump = False
        if before is None or upd.metadata() != before.metadata():
            self._emit(records, cr.MEMBER_METADATA_KEY, member_id, cr.member_metadata_value(upd.metadata()))
            bump = before is None or upd.topics != before.topics or upd.regex != before.regex
        m = self.members[member_id]
        if self._refresh_subscription_metadata(records, topics):
            bump = True
        if bump:
            self._bump(records)
        ids = {name: tid for name, (tid, _) in topics.items()}
        owned = [(ids[t], list(ps)) for t, ps in sub.owned if t in ids]
        if downgrade:
            if not bump:
                self._reconcile(records, m, owned, now)
            resp = self._join_response(m)
            self._downgrade(records, set(), member_id, topics, replaced_id=replaced.member_id, rebalance=bump)
            return resp, records
        if self.epoch > self.assignment_epoch:
            self._update_target(records, cfg)
        self._reconcile(records, m, owned, now)
        m.session_deadline = now + m.session_ms(cfg, self.group_id)
        m.join_deadline = None
        m.sync_deadline = now + max(m.rebalance_timeout_ms, 0)
        return self._join_response(m), records

    @staticmethod
    def _join_response(m: Member) -> dict:
        return {"error_code": 0, "generation_id": m.epoch, "protocol_type": CONSUMER_PROTOCOL_TYPE,
                "protocol_name": m.classic.protocols[0][0], "leader": "", "skip_assignment": False,
                "member_id": m.member_id, "members": []}

    def _replace_static(self, records: Records, existing: Member, member_id: str) -> None:
        """A static member back under a new member id takes over the old one's target and
        partitions, at epoch 0 (Kafka's replaceMember)."""
        new = dataclasses.replace(existing, member_id=member_id, epoch=0, previous_epoch=0, session_deadline=None,
                                  rebalance_deadline=None, join_deadline=None, sync_deadline=None)
        target = self.target.get(existing.member_id, {})
        self._remove_member(records, existing.member_id)
        self._emit(records, cr.MEMBER_METADATA_KEY, member_id, cr.member_metadata_value(new.metadata()))
        self._emit(records, cr.TARGET_MEMBER_KEY, member_id, cr.target_member_value(target))
        self._emit(records, cr.CURRENT_ASSIGNMENT_KEY, member_id, cr.current_assignment_value(new.current()))

    def classic_sync(self, now: int, member_id: str, instance_id: str | None, generation: int,
                     protocol_type: str | None, protocol_name: str | None, topics: Topics,
                     cfg: ConsumerGroupConfig) -> dict:
        """A SyncGroup of a classic member (Kafka's classicGroupSyncToConsumerGroup): its current
        assignment in the consumer protocol's format. Raises HeartbeatError."""
        m = self._classic_member(member_id, instance_id)
        self._check_generation(m, generation)
        name = m.classic.protocols[0][0]
        if protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE:
            raise HeartbeatError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"The protocol type {protocol_type} from "
                                 f"member {member_id} request is not equal to the group protocol type "
                                 f"{CONSUMER_PROTOCOL_TYPE}.")
        if protocol_name is not None and protocol_name != name:
            raise HeartbeatError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"The protocol name {protocol_name} from "
                                 f"member {member_id} request is not equal to the protocol name {name} returned in "
                                 "the join response.")
        if self.epoch > m.epoch and m.state != UNREVOKED_PARTITIONS:
            self._rejoin_by(m, now)
            raise HeartbeatError(ErrorCode.REBALANCE_IN_PROGRESS, f"A new rebalance is triggered in group "
                                 f"{self.group_id} and member {member_id} should rejoin to catch up.")
        m.sync_deadline = None
        m.session_deadline = now + m.session_ms(cfg, self.group_id)
        names = {tid: n for n, (tid, _) in topics.items()}
        names.update({tid: n for n, (tid, _) in self.subscription_metadata.items()})
        assigned = {names[t]: ps for t, ps in m.assigned.items() if t in names}
        return {"error_code": 0, "protocol_type": protocol_type, "protocol_name": protocol_name,
                "assignment": cp.encode_assignment(assigned, cp.decode_version(m.classic.protocols[0][1]))}

    def classic_heartbeat(self, now: int, member_id: str, instance_id: str | None, generation: int,
                          cfg: ConsumerGroupConfig) -> int:
        """A Heartbeat of a classic member (Kafka's classicGroupHeartbeatToConsumerGroup):
        REBALANCE_IN_PROGRESS when it must join again to move on. Raises HeartbeatError."""
        m = self._classic_member(member_id, instance_id)
        self._check_generation(m, generation)
        m.session_deadline = now + m.session_ms(cfg, self.group_id)
        if (m.epoch < self.epoch or m.state == UNREVOKED_PARTITIONS
                or (m.state == UNRELEASED_PARTITIONS and not self.waiting_on_unreleased(m))):
            self._rejoin_by(m, now)
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def classic_leave(self, identities: list[tuple[str, str | None]], topics: Topics,
                      cfg: ConsumerGroupConfig) -> tuple[list[dict], Records]:
        """A LeaveGroup (Kafka's classicGroupLeaveToConsumerGroup): every member named leaves at
        once (one new group epoch), or the group becomes a classic group of the others."""
        results, leaving = [], []
        for member_id, instance_id in identities:
            res = {"member_id": member_id, "group_instance_id": instance_id, "error_code": 0}
            results.append(res)
            if instance_id is None:
                m = self.members.get(member_id)
                if m is None:
                    res["error_code"] = int(ErrorCode.UNKNOWN_MEMBER_ID)
                    continue
            else:
                mid = self.static_members.get(instance_id)
                if mid is None:
                    res["error_code"] = int(ErrorCode.UNKNOWN_MEMBER_ID)
                    continue
                if member_id not in ("", mid):
                    res["error_code"] = int(ErrorCode.FENCED_INSTANCE_ID)
                    continue
                m = self.members[mid]
            if m.member_id not in leaving:
                leaving.append(m.member_id)
        records: Records = []
        self.fence_members(records, leaving, "it left the group through an explicit LeaveGroup", topics, cfg)
        return results, records

    # --- the downgrade to a classic group --------------------------------------------------------
    def _may_downgrade(self, fenced: set[str], cfg: ConsumerGroupConfig) -> bool:
        """Kafka's validateOnlineDowngradeWithFencedMembers."""
        remaining = [m for mid, m in self.members.items() if mid not in fenced]
        if not remaining or any(m.classic is None for m in remaining):
            return False
        if not cfg.downgrade_enabled:
            log.info("Cannot downgrade consumer group %s to classic group because the online downgrade is "
                     "disabled.", self.group_id)
            return False
        if len(remaining) > cfg.classic_max_size:
            log.info("Cannot downgrade consumer group %s to classic group because its group size is greater than "
                     "classic group max size.", self.group_id)
            return False
        return True

    def _may_downgrade_replacing(self, replaced: Member, cfg: ConsumerGroupConfig) -> bool:
        """Kafka's validateOnlineDowngradeWithReplacedMember: the last consumer-protocol member is a
        static member that a classic member with its instance id replaces."""
        if replaced.classic is not None:
            return False
        if any(m.classic is None for mid, m in self.members.items()
               if m.instance_id != replaced.instance_id):
            return False
        if not cfg.downgrade_enabled or len(self.members) > cfg.classic_max_size:
            return False
        return True

    def _downgrade(self, records: Records, leaving: set[str], joining: str | None, topics: Topics,
                   replaced_id: str | None = None, rebalance: bool = True) -> None:
        """The group's records are tombstoned; ``downgraded`` says what the classic group is made
        of (Kafka's convertToClassicGroup and ClassicGroup.fromConsumerGroup): the other members,
        each with the partitions it may still own (its assigned and pending-revocation ones).
        Kafka writes the target assignments instead; but a member has not given up its pending
        ones yet, and were the classic group upgraded again before its members joined it, the
        target would let a partition go to a new member while its owner still consumes it. With
        what the members hold, the classic group's assignments never overlap; it rebalances
        when they are not the target (always when a member left)."""
        names = {tid: n for n, (tid, _) in topics.items()}
        names.update({tid: n for n, (tid, _) in self.subscription_metadata.items()})
        members = []
        moving = False
        for mid, m in self.members.items():
            if mid in leaving:
                continue
            held = {t: m.assigned.get(t, frozenset()) | m.pending_revocation.get(t, frozenset())
                    for t in set(m.assigned) | set(m.pending_revocation)}
            target = self.target.get(mid, {})
            moving = moving or {t: ps for t, ps in held.items() if ps} != {t: ps for t, ps in target.items() if ps}
            members.append(ClassicMemberState(
                mid, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms, m.classic.session_timeout_ms,
                m.classic.protocols, {names[t]: ps for t, ps in held.items() if t in names and ps}))
        if joining is not None:  # (Kafka adds the joining member last: it is not the leader)
            members.sort(key=lambda s: s.member_id == joining)
        self.downgraded = Downgrade(self.epoch, tuple(members), rebalance=joining is None or rebalance or moving)
        log.info("[GroupId %s] Converted the consumer group to a classic group.", self.group_id)
        self.tombstones(records)

    def on_metadata(self, topics: Topics, now: int | None = None) -> Records:
        """The subscribed topics changed in the metadata image (a topic created or deleted,
        partitions added): a new group epoch, so a new target assignment on the next heartbeat.
        Regexes are resolved again by the timer, at most every REGEX_REFRESH_MIN_MS (Kafka
        batches them: topics created together are picked up together); at once without ``now``."""
        records: Records = []
        if now is None:
            self.resolve_regexes(topics, records)
        elif any(m.regex for m in self.members.values()):
            last = self.regex_refreshed_at
            due = now if last is None else max(now, last + REGEX_REFRESH_MIN_MS)
            self.regex_due = due if self.regex_due is None else min(self.regex_due, due)
            self.regex_refresh_all = True
        if self.members and self._refresh_subscription_metadata(records, topics):
            self._bump(records)
        return records

    # --- deletion ---------------------------------------------------------------------------------
    def tombstones(self, records: Records | None = None) -> Records:
        """DeleteGroups of an empty group, or the group becoming a classic group (Kafka's
        createGroupTombstoneRecords)."""
        records = [] if records is None else records
        for mid in sorted(self.members):
            self._remove_member(records, mid)
        for r in sorted(self.resolved):
            self._emit(records, cr.REGEX_KEY, r, None)
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
        if not transactional and m.classic is None and api_version < 9:
            return ErrorCode.UNSUPPORTED_VERSION
        if member_epoch != m.epoch:
            return ErrorCode.ILLEGAL_GENERATION if m.classic is not None else ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> int:
        if member_id is None and member_epoch < 0:
            return ErrorCode.NONE
        m = self.members.get(member_id or "")
        if m is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != m.epoch:
            return ErrorCode.ILLEGAL_GENERATION if m.classic is not None else ErrorCode.STALE_MEMBER_EPOCH
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
                             "member_type": MEMBER_TYPE_CLASSIC if m.classic is not None else MEMBER_TYPE_CONSUMER,
                             "member_epoch": m.epoch, "client_id": m.client_id, "client_host": m.client_host,
                             "subscribed_topic_names": list(m.topics), "subscribed_topic_regex": m.regex,
                             "assignment": tps(m.assigned), "target_assignment": tps(self.target.get(m.member_id, {}))}
                            for m in self.members.values()]}
