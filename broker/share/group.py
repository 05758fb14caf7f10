"""Share groups (KIP-932) in the group coordinator as a pure state machine: one ``ShareGroup`` per
group id (Kafka's ShareGroup and the share-group parts of GroupMetadataManager).

Members heartbeat (ShareGroupHeartbeat) with the topics they subscribe to; the coordinator
assigns partitions with the simple assignor (``assign``): a partition may go to several members
(queue semantics: the partition leader hands each record to one of them at a time), and with more
members than partitions every member still gets one. There is no revocation protocol: a member
takes its target as soon as it heartbeats (member epoch = the target's epoch).

Only partitions whose share-group state is *initialized* in the share coordinator are assigned
(Kafka 4.1): a newly subscribed partition is first recorded as initializing
(ShareGroupStatePartitionMetadata), the shell initializes its state (InitializeShareGroupState),
then records it initialized, which bumps the group epoch and assigns it.

Every change is a record of Kafka's formats (broker/share/records.py), applied at once through
``replay`` (the same code that rebuilds the group when its ``__consumer_offsets`` partition is
loaded). Sans-IO: ``now`` is monotonic ms.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Mapping

from broker.group import consumer_records as cr
from broker.share import records as sr
from common.errors import ErrorCode

log = logging.getLogger("krafty.share")

EMPTY, STABLE, DEAD = "Empty", "Stable", "Dead"
GROUP_TYPE_SHARE = "share"
SHARE_PROTOCOL_TYPE = "share"
ASSIGNOR = "simple"
LEAVE_GROUP_EPOCH = -1
MEMBER_STABLE = 0

Assignment = dict[uuid.UUID, frozenset[int]]
Records = list[tuple[bytes, bytes | None]]
Topics = Mapping[str, tuple[uuid.UUID, int]]  # topic name -> (topic id, partitions), from the metadata image


class ShareHeartbeatError(Exception):
    def __init__(self, code: int, message: str | None = None):
        super().__init__(message or ErrorCode(code).name)
        self.code = code
        self.message = message


@dataclasses.dataclass(frozen=True, slots=True)
class ShareGroupConfig:
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5000
    max_size: int = 200
    group_config: object = None  # group id -> its GROUP configs (share.session.timeout.ms, ...)

    def _get(self, group_id: str, key: str, default: int) -> int:
        if self.group_config is None:
            return default
        return int(self.group_config(group_id).get(key, default))

    def session_ms(self, group_id: str) -> int:
        return self._get(group_id, "share.session.timeout.ms", self.session_timeout_ms)

    def heartbeat_ms(self, group_id: str) -> int:
        return self._get(group_id, "share.heartbeat.interval.ms", self.heartbeat_interval_ms)


@dataclasses.dataclass(slots=True)
class ShareMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    topics: tuple[str, ...] = ()
    epoch: int = 0
    previous_epoch: int = -1
    assigned: Assignment = dataclasses.field(default_factory=dict)
    session_deadline: int | None = None

    def metadata(self) -> sr.MemberMetadata:
        return sr.MemberMetadata(self.rack_id, self.client_id, self.client_host, self.topics)


def assign(subscriptions: Mapping[str, set[uuid.UUID]], partitions: Mapping[uuid.UUID, int],
           current: Mapping[str, Mapping[uuid.UUID, frozenset[int]]]) -> dict[str, Assignment]:
    """Kafka's SimpleAssignor, per topic: with at least as many members as partitions every member
    gets one partition and each partition goes to ceil(members / partitions) members at most;
    with fewer members each partition goes to one member, floor or ceil of partitions / members
    each. Members keep what they had where the balance allows (sticky); deterministic."""
    out: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in subscriptions}
    for tid in sorted(partitions, key=lambda t: t.bytes):
        n = partitions[tid]
        members = sorted(m for m, ts in subscriptions.items() if tid in ts)
        if not members or n <= 0:
            continue
        if len(members) >= n:
            cap = -(-len(members) // n)  # members per partition
            load = [0] * n
            pending = []
            for m in members:
                kept = [p for p in sorted(current.get(m, {}).get(tid, ())) if p < n and load[p] < cap]
                if kept:
                    load[kept[0]] += 1
                    out[m][tid] = {kept[0]}
                else:
                    pending.append(m)
            for m in pending:
                p = min(range(n), key=lambda i: (load[i], i))
                load[p] += 1
                out[m][tid] = {p}
        else:
            base, extra = divmod(n, len(members))
            quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(members)}
            owner: dict[int, str] = {}
            for m in members:
                for p in sorted(current.get(m, {}).get(tid, ())):
                    if p < n and p not in owner and len(out[m].setdefault(tid, set())) < quota[m]:
                        owner[p] = m
                        out[m][tid].add(p)
            for p in range(n):
                if p in owner:
                    continue
                m = min(members, key=lambda x: (len(out[x].get(tid, ())) - quota[x], x))
                out[m].setdefault(tid, set()).add(p)
    return {m: {t: frozenset(ps) for t, ps in a.items() if ps} for m, a in out.items()}


class ShareGroup:
    def __init__(self, group_id: str):
        self.group_id = group_id
        self.epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ShareMember] = {}
        self.target: dict[str, Assignment] = {}
        self.state_meta = sr.StatePartitionMetadata()
        self.dead = False

    def __repr__(self) -> str:
        return f"<ShareGroup {self.group_id} {self.state()} epoch={self.epoch} members={list(self.members)}>"

    def state(self) -> str:
        if self.dead:
            return DEAD
        return STABLE if self.members else EMPTY

    def subscribed_topic_names(self) -> set[str]:
        return {t for m in self.members.values() for t in m.topics}

    def initialized(self) -> dict[uuid.UUID, tuple[str, frozenset[int]]]:
        return dict(self.state_meta.initialized)

    def next_deadline(self) -> int | None:
        ds = [m.session_deadline for m in self.members.values() if m.session_deadline is not None]
        return min(ds) if ds else None

    # --- replay --------------------------------------------------------------------------------
    def replay(self, k: sr.ShareKey, value: bytes | None) -> None:
        kind = k.kind
        if kind == sr.GROUP_EPOCH_KEY:
            if value is None:
                self.dead = True
            else:
                self.epoch = cr.decode_int_value(value)
        elif kind == sr.PARTITION_METADATA_KEY:
            return  # Kafka 4.0's subscription metadata: 4.1 reads the metadata image instead
        elif kind == sr.TARGET_METADATA_KEY:
            self.assignment_epoch = 0 if value is None else cr.decode_int_value(value)
        elif kind == sr.TARGET_MEMBER_KEY:
            if value is None:
                self.target.pop(k.member, None)
            else:
                self.target[k.member] = dict(cr.decode_target_member(value))
        elif kind == sr.MEMBER_METADATA_KEY:
            if value is None:
                self.members.pop(k.member, None)
                return
            md = sr.decode_member_metadata(value)
            m = self.members.get(k.member)
            if m is None:
                m = self.members[k.member] = ShareMember(k.member)
            m.rack_id, m.client_id, m.client_host, m.topics = (md.rack_id, md.client_id, md.client_host,
                                                               md.subscribed_topic_names)
        elif kind == sr.CURRENT_ASSIGNMENT_KEY:
            m = self.members.get(k.member)
            if m is None:
                if value is None:
                    return
                m = self.members[k.member] = ShareMember(k.member)
            if value is None:
                m.epoch, m.previous_epoch, m.assigned = LEAVE_GROUP_EPOCH, LEAVE_GROUP_EPOCH, {}
            else:
                c = sr.decode_current_assignment(value)
                m.epoch, m.previous_epoch, m.assigned = c.member_epoch, c.previous_member_epoch, dict(c.assigned)
        elif kind == sr.STATE_PARTITION_METADATA_KEY:
            self.state_meta = (sr.StatePartitionMetadata() if value is None
                               else sr.decode_state_partition_metadata(value))

    def _emit(self, records: Records, kind: int, member: str | None, value: bytes | None) -> None:
        records.append((sr.key(kind, self.group_id, member), value))
        self.replay(sr.ShareKey(kind, self.group_id, member), value)

    def _bump(self, records: Records) -> None:
        self._emit(records, sr.GROUP_EPOCH_KEY, None, cr.group_epoch_value(self.epoch + 1))
        log.info("[GroupId %s] Bumped share group epoch to %d.", self.group_id, self.epoch)

    def _remove_member(self, records: Records, member_id: str) -> None:
        self._emit(records, sr.CURRENT_ASSIGNMENT_KEY, member_id, None)
        self._emit(records, sr.TARGET_MEMBER_KEY, member_id, None)
        self._emit(records, sr.MEMBER_METADATA_KEY, member_id, None)

    def fence(self, records: Records, member_id: str, reason: str) -> None:
        log.info("[GroupId %s] Share member %s removed from the group because %s.", self.group_id, member_id, reason)
        self._remove_member(records, member_id)
        self._bump(records)

    # --- the target assignment ------------------------------------------------------------------
    def assignable(self, topics: Topics) -> dict[uuid.UUID, int]:
        """The partitions the assignor may hand out: those of subscribed topics whose state is
        initialized (topic id -> number of partitions: 0..n-1 initialized)."""
        out = {}
        init = self.state_meta.initialized
        for name in self.subscribed_topic_names():
            t = topics.get(name)
            if t is None:
                continue
            tid, n = t
            done = init.get(tid, ("", frozenset()))[1]
            k = 0
            while k < n and k in done:
                k += 1
            if k:
                out[tid] = k
        return out

    def target_stale(self, topics: Topics) -> bool:
        """Whether the target assignment does not cover exactly the assignable partitions (a topic
        created, deleted or grown, or partitions initialized since it was computed)."""
        want = {(t, p) for t, n in self.assignable(topics).items() for p in range(n)}
        have = {(t, p) for a in self.target.values() for t, ps in a.items() for p in ps}
        return want != have or set(self.target) != set(self.members)

    def _update_target(self, records: Records, topics: Topics) -> None:
        parts = self.assignable(topics)
        subs = {mid: {topics[t][0] for t in m.topics if t in topics} for mid, m in self.members.items()}
        new = assign(subs, parts, self.target)
        for mid in sorted(new):
            if mid not in self.target or new[mid] != self.target[mid]:
                self._emit(records, sr.TARGET_MEMBER_KEY, mid, cr.target_member_value(new[mid]))
        self._emit(records, sr.TARGET_METADATA_KEY, None, cr.target_metadata_value(self.epoch))

    def needs_initializing(self, topics: Topics) -> dict[uuid.UUID, tuple[str, frozenset[int]]]:
        """Subscribed partitions whose share-group state is not initialized yet (some may be being
        initialized: the shell knows which requests are in flight)."""
        out = {}
        meta = self.state_meta
        for name in sorted(self.subscribed_topic_names()):
            t = topics.get(name)
            if t is None:
                continue
            tid, n = t
            missing = frozenset(range(n)) - meta.initialized.get(tid, ("", frozenset()))[1]
            if missing:
                out[tid] = (name, missing)
        return out

    def mark_initializing(self, records: Records, parts: Mapping[uuid.UUID, tuple[str, frozenset[int]]]) -> None:
        ing = dict(self.state_meta.initializing)
        for tid, (name, ps) in parts.items():
            ing[tid] = (name, ing.get(tid, (name, frozenset()))[1] | ps)
        if ing == dict(self.state_meta.initializing):
            return
        self._emit(records, sr.STATE_PARTITION_METADATA_KEY, None, sr.state_partition_metadata_value(
            dataclasses.replace(self.state_meta, initializing=ing)))

    def mark_initialized(self, records: Records, parts: Mapping[uuid.UUID, tuple[str, frozenset[int]]],
                         topics: Topics) -> None:
        """Their state exists in the share coordinator now: assignable from a new group epoch."""
        if not parts:
            return
        ing = dict(self.state_meta.initializing)
        done = dict(self.state_meta.initialized)
        for tid, (name, ps) in parts.items():
            left = ing.get(tid, (name, frozenset()))[1] - ps
            if left:
                ing[tid] = (name, left)
            else:
                ing.pop(tid, None)
            done[tid] = (name, done.get(tid, (name, frozenset()))[1] | ps)
        self._emit(records, sr.STATE_PARTITION_METADATA_KEY, None, sr.state_partition_metadata_value(
            sr.StatePartitionMetadata(ing, done, dict(self.state_meta.deleting))))
        if self.members and self.target_stale(topics):
            self._bump(records)
            self._update_target(records, topics)

    def mark_deleted(self, records: Records, topic_ids: set[uuid.UUID]) -> None:
        """The state of these topics was deleted (DeleteShareGroupOffsets, a deleted topic)."""
        meta = self.state_meta
        if not any(t in meta.initialized or t in meta.initializing or t in meta.deleting for t in topic_ids):
            return
        self._emit(records, sr.STATE_PARTITION_METADATA_KEY, None, sr.state_partition_metadata_value(
            sr.StatePartitionMetadata({t: v for t, v in meta.initializing.items() if t not in topic_ids},
                                      {t: v for t, v in meta.initialized.items() if t not in topic_ids},
                                      {t: v for t, v in meta.deleting.items() if t not in topic_ids})))

    # --- ShareGroupHeartbeat ---------------------------------------------------------------------
    def heartbeat(self, now: int, member_id: str, member_epoch: int, rack_id: str | None,
                  subscribed: list[str] | None, client_id: str, client_host: str, topics: Topics,
                  cfg: ShareGroupConfig) -> tuple[dict, Records]:
        """One heartbeat (join: epoch 0, leave: -1). Returns the response fields (``assignment``:
        None when unchanged) and the records written; raises ShareHeartbeatError."""
        records: Records = []
        if member_epoch == LEAVE_GROUP_EPOCH:
            if member_id not in self.members:
                raise ShareHeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                          f"Member {member_id} is not a member of group {self.group_id}.")
            self.fence(records, member_id, "the member left the group")
            if self.members:
                self._update_target(records, topics)
            return {"member_id": member_id, "member_epoch": LEAVE_GROUP_EPOCH, "heartbeat_interval_ms": 0,
                    "assignment": None}, records
        m = self.members.get(member_id)
        if m is None:
            if member_epoch != 0:
                raise ShareHeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                          f"Member {member_id} is not a member of group {self.group_id}.")
            if len(self.members) >= cfg.max_size:
                raise ShareHeartbeatError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                          f"The share group has reached its maximum capacity of {cfg.max_size} "
                                          "members.")
        elif member_epoch != 0 and member_epoch != m.epoch and member_epoch != m.previous_epoch:
            raise ShareHeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH,
                                      f"The share group member has a {'greater' if member_epoch > m.epoch else 'smaller'}"
                                      f" member epoch ({member_epoch}) than the one known by the group coordinator "
                                      f"({m.epoch}). The member must abandon all its partitions and rejoin.")
        joining = m is None or member_epoch == 0
        old = m or ShareMember(member_id)
        upd = dataclasses.replace(old, rack_id=rack_id if rack_id is not None else old.rack_id,
                                  topics=tuple(subscribed) if subscribed is not None else old.topics,
                                  client_id=client_id, client_host=client_host)
        bump = False
        if m is None or upd.metadata() != m.metadata():
            self._emit(records, sr.MEMBER_METADATA_KEY, member_id, sr.member_metadata_value(upd.metadata()))
            bump = m is None or upd.topics != m.topics
        m = self.members[member_id]
        if bump or self.target_stale(topics):
            self._bump(records)
        if self.epoch > self.assignment_epoch:
            self._update_target(records, topics)
        before = dict(m.assigned)
        if m.epoch != self.assignment_epoch or m.assigned != self.target.get(member_id, {}):
            self._emit(records, sr.CURRENT_ASSIGNMENT_KEY, member_id, sr.current_assignment_value(
                sr.CurrentAssignment(self.assignment_epoch, m.epoch, MEMBER_STABLE, self.target.get(member_id, {}))))
        m.session_deadline = now + cfg.session_ms(self.group_id)
        resp = {"member_id": member_id, "member_epoch": m.epoch, "heartbeat_interval_ms": cfg.heartbeat_ms(self.group_id),
                "assignment": m.assigned if joining or m.assigned != before else None}
        return resp, records

    def refresh(self, now: int, topics: Topics) -> Records:
        """The metadata image changed (or the group was just loaded): a new target assignment when
        the subscribed partitions changed."""
        records: Records = []
        if self.members and self.target_stale(topics):
            self._bump(records)
            self._update_target(records, topics)
        return records

    def tick(self, now: int) -> Records:
        records: Records = []
        for mid in sorted(self.members):
            m = self.members[mid]
            if m.session_deadline is not None and now >= m.session_deadline:
                self.fence(records, mid, "the member session expired")
        return records

    def on_loaded(self, now: int, cfg: ShareGroupConfig) -> None:
        for m in self.members.values():
            m.session_deadline = now + cfg.session_ms(self.group_id)

    def tombstones(self) -> Records:
        records: Records = []
        for mid in sorted(self.members):
            self._remove_member(records, mid)
        self._emit(records, sr.TARGET_METADATA_KEY, None, None)
        self._emit(records, sr.STATE_PARTITION_METADATA_KEY, None, None)
        self._emit(records, sr.GROUP_EPOCH_KEY, None, None)
        return records

    # --- ShareGroupDescribe ----------------------------------------------------------------------
    def describe(self, names: Mapping[uuid.UUID, str]) -> dict:
        def tps(a: Assignment) -> dict:
            return {"topic_partitions": [{"topic_id": t, "topic_name": names.get(t, ""), "partitions": sorted(ps)}
                                         for t, ps in sorted(a.items(), key=lambda kv: kv[0].bytes)]}
        return {"error_code": 0, "error_message": None, "group_id": self.group_id, "group_state": self.state(),
                "group_epoch": self.epoch, "assignment_epoch": self.assignment_epoch, "assignor_name": ASSIGNOR,
                "members": [{"member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.epoch,
                             "client_id": m.client_id, "client_host": m.client_host,
                             "subscribed_topic_names": list(m.topics), "assignment": tps(m.assigned)}
                            for m in self.members.values()]}


__all__ = ["ShareGroup", "ShareGroupConfig", "ShareHeartbeatError", "assign", "GROUP_TYPE_SHARE", "ASSIGNOR"]
