"""KIP-848's online upgrade and downgrade through the pure GroupShard, as Kafka 4's
GroupMetadataManager does them: a classic group with members becomes a consumer group when its
first consumer-protocol member joins (the classic members keep their partitions and are served
through JoinGroup/SyncGroup/Heartbeat as members of the consumer group), and becomes a classic
group again when the last consumer-protocol member leaves; group.consumer.migration.policy
decides which ways are allowed."""

from __future__ import annotations

import struct
import uuid

import pytest

from broker.group import consumer_protocol as cp
from broker.group import consumer_records as cr
from broker.group.consumer_group import (
    LEAVE_GROUP_EPOCH,
    STABLE,
    UNREVOKED_PARTITIONS,
    ConsumerGroupConfig,
    HeartbeatError,
    HeartbeatRequest,
)
from broker.group.records import decode_key
from broker.group.shard import GroupShard
from broker.group.state import PREPARING_REBALANCE, GroupConfig
from common.errors import ErrorCode
from tests.group.helpers import Harness

T1 = uuid.UUID(int=1)
TOPICS = {"t1": (T1, 6)}


def s16(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    return struct.pack(">h", len(s.encode())) + s.encode()


def subscription(topics, owned=(), version=3, rack=None) -> bytes:
    """ConsumerProtocolSubscription, written out by hand from its spec."""
    out = struct.pack(">h", version) + struct.pack(">i", len(topics)) + b"".join(s16(t) for t in topics)
    out += struct.pack(">i", -1)  # no user data
    if version >= 1:
        by_topic: dict[str, list[int]] = {}
        for t, p in owned:
            by_topic.setdefault(t, []).append(p)
        out += struct.pack(">i", len(by_topic))
        for t, ps in by_topic.items():
            out += s16(t) + struct.pack(">i", len(ps)) + b"".join(struct.pack(">i", p) for p in ps)
    if version >= 2:
        out += struct.pack(">i", -1)
    if version >= 3:
        out += s16(rack)
    return out


def assignment(parts: dict[str, list[int]]) -> bytes:
    out = struct.pack(">hi", 0, len(parts))
    for t, ps in parts.items():
        out += s16(t) + struct.pack(">i", len(ps)) + b"".join(struct.pack(">i", p) for p in ps)
    return out + struct.pack(">i", -1)


def owned_of(assignment_bytes: bytes) -> set[int]:
    parts, _ = cp.decode_assignment(assignment_bytes)
    return set(parts.get("t1", ()))


class Mixed:
    """One group, members of both protocols, the shard played by the Harness."""

    def __init__(self, policy="bidirectional"):
        self.h = Harness(GroupConfig(initial_rebalance_delay_ms=0))
        self.h.shard = GroupShard(0, self.h.config, topics=lambda: TOPICS,
                                  consumer_config=ConsumerGroupConfig(migration_policy=policy))
        self.shard = self.h.shard
        self.classic: dict[str, dict] = {}  # name -> {member_id, generation, owned}
        self.consumers: dict[str, dict] = {}  # member id -> {epoch, owned}

    # classic members (cooperative: they report what they own when they join)
    def cjoin(self, name: str):
        c = self.classic.setdefault(name, {"member_id": "", "generation": -1, "owned": set()})
        protos = [("cooperative-sticky", subscription(["t1"], [("t1", p) for p in sorted(c["owned"])]))]
        w = self.h.join("g", member_id=c["member_id"], protocols=protos, client=name)
        if w.result and w.result["error_code"] == ErrorCode.MEMBER_ID_REQUIRED:
            c["member_id"] = w.result["member_id"]
            w = self.h.join("g", member_id=c["member_id"], protocols=protos, client=name)
        return w

    def csync(self, name: str, assignments=None):
        c = self.classic[name]
        w = self.h.sync(c["member_id"], c["generation"], assignments=assignments)
        if w.result and w.result["error_code"] == 0:
            c["owned"] = owned_of(w.result["assignment"])
        return w

    def chb(self, name: str) -> int:
        c = self.classic[name]
        return self.h.heartbeat(c["member_id"], c["generation"])

    def ccycle(self, name: str):
        """Join then sync, as a classic consumer does after REBALANCE_IN_PROGRESS."""
        w = self.cjoin(name)
        assert w.result is not None and w.result["error_code"] == 0, w
        self.classic[name]["member_id"] = w.result["member_id"]
        self.classic[name]["generation"] = w.result["generation_id"]
        return w, self.csync(name)

    # consumer-protocol members
    def hb(self, member: str, epoch: int | None = None):
        c = self.consumers.setdefault(member, {"epoch": 0, "owned": {}})
        e = c["epoch"] if epoch is None else epoch
        req = HeartbeatRequest("g", member, e, None, None, 30_000 if e == 0 else -1, ["t1"] if e == 0 else None,
                               None, None, [(t, sorted(ps)) for t, ps in c["owned"].items()] if e >= 0 else None,
                               "c", "/h")
        resp, w, fx = self.shard.consumer_heartbeat(self.h.now, req, member)
        self.h.run(fx)
        if w is not None:
            self.h.run_write(w)
        c["epoch"] = resp["member_epoch"]
        if resp["assignment"] is not None:
            c["owned"] = {t: ps for t, ps in resp["assignment"].items() if ps}
        return resp

    def owners(self) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        for name, c in self.classic.items():
            for p in c["owned"]:
                out.setdefault(p, []).append(name)
        for mid, c in self.consumers.items():
            for p in c["owned"].get(T1, ()):
                out.setdefault(p, []).append(mid)
        return out

    def rebuilt(self) -> GroupShard:
        s = GroupShard(0, self.h.config, topics=lambda: TOPICS)
        for i, (k, v) in enumerate(self.h.log):
            s.replay(k, v, self.h.now, i)
        return s


def _classic_group_of_two(m: Mixed) -> None:
    """Members a and b in a Stable classic group, each with half of t1."""
    wa = m.cjoin("a")
    wb = m.cjoin("b")
    assert wa.result is None and wb.result is None
    m.h.advance(1)  # the join completes (a and b are in; nobody else)
    for n, w in (("a", wa), ("b", wb)):
        m.classic[n]["member_id"], m.classic[n]["generation"] = w.result["member_id"], w.result["generation_id"]
    leader = wa.result["leader"]
    ids = {m.classic["a"]["member_id"]: [0, 1, 2], m.classic["b"]["member_id"]: [3, 4, 5]}
    first = "a" if m.classic["a"]["member_id"] == leader else "b"
    other = "b" if first == "a" else "a"
    s1 = m.csync(first, {mid: assignment({"t1": ps}) for mid, ps in ids.items()})
    s2 = m.csync(other)
    assert s1.result["error_code"] == 0 and s2.result["error_code"] == 0
    assert m.owners() == {p: [n] for n in ("a", "b") for p in m.classic[n]["owned"]}


def test_the_first_consumer_member_upgrades_a_classic_group_and_the_classic_members_keep_their_partitions():
    m = Mixed()
    _classic_group_of_two(m)
    generation = m.classic["a"]["generation"]
    log_before = len(m.h.log)
    m.hb("c")
    g = m.shard.consumer_groups["g"]
    assert "g" not in m.shard.groups
    new = m.h.log[log_before:]
    assert decode_key(new[0][0]).__class__.__name__ == "GroupKey" and new[0][1] is None, \
        "the classic group's tombstone comes first"
    a, b = (g.members[m.classic[n]["member_id"]] for n in ("a", "b"))
    assert a.classic is not None and a.classic.protocols[0][0] == "cooperative-sticky"
    assert {p for ps in a.assigned.values() for p in ps} == m.classic["a"]["owned"], "a keeps its partitions"
    assert a.epoch == generation and g.epoch == generation + 1, "the new member bumped the epoch"
    assert m.consumers["c"]["owned"] == {}, "every partition is owned: c waits for them"
    # the classic members learn from their heartbeats that they must join again
    assert m.chb("a") == ErrorCode.REBALANCE_IN_PROGRESS
    assert m.chb("b") == ErrorCode.REBALANCE_IN_PROGRESS
    for name in ("a", "b"):
        join, sync = m.ccycle(name)
        assert join.result["leader"] == "" and join.result["members"] == [], "the coordinator assigns"
        assert join.result["protocol_name"] == "cooperative-sticky"
        assert sync.result["error_code"] == 0
        assert g.members[m.classic[name]["member_id"]].state == UNREVOKED_PARTITIONS
        assert all(len(o) == 1 for o in m.owners().values())
        # having revoked, the cooperative member joins again and moves to the new epoch
        m.ccycle(name)
        assert m.classic[name]["generation"] == g.epoch
    m.hb("c")
    assert all(len(o) == 1 for o in m.owners().values()) and set(m.owners()) == set(range(6))
    assert sorted(len(c["owned"]) for c in m.classic.values()) + [len(m.consumers["c"]["owned"][T1])] == [2, 2, 2]
    assert g.state() == STABLE
    assert m.chb("a") == ErrorCode.NONE
    r = m.rebuilt().consumer_groups["g"]
    assert {k: (x.classic, x.current()) for k, x in r.members.items()} == \
        {k: (x.classic, x.current()) for k, x in g.members.items()}, "the log rebuilds the mixed group"


def test_the_last_consumer_member_leaving_downgrades_the_group_to_a_classic_group_that_rebalances():
    m = Mixed()
    _classic_group_of_two(m)
    m.hb("c")
    for name in ("a", "b"):
        m.chb(name)
        m.ccycle(name)
        m.ccycle(name)
    m.hb("c")
    epoch = m.shard.consumer_groups["g"].epoch
    m.hb("c", LEAVE_GROUP_EPOCH)
    assert "g" not in m.shard.consumer_groups
    g = m.shard.groups["g"]
    assert g.state == PREPARING_REBALANCE and g.generation == epoch and g.protocol_name == "cooperative-sticky"
    assert set(g.members) == {m.classic[n]["member_id"] for n in ("a", "b")}
    key, value = m.h.log[-1]
    assert decode_key(key).__class__.__name__ == "GroupKey" and value is not None, \
        "the classic group's record follows the consumer group's tombstones"
    # the classic members rejoin and the leader assigns, as in any classic group
    assert m.chb("a") in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION)
    wa, wb = m.cjoin("a"), m.cjoin("b")
    assert wa.result["error_code"] == 0 and wb.result["error_code"] == 0
    assert wa.result["generation_id"] == epoch + 1
    leader = next(w for w in (wa, wb) if w.result["leader"] == w.result["member_id"])
    assert {x["member_id"] for x in leader.result["members"]} == set(g.members)
    rebuilt = m.rebuilt()
    assert "g" in rebuilt.groups and "g" not in rebuilt.consumer_groups


def test_a_disabled_migration_policy_refuses_the_upgrade_and_keeps_a_consumer_group():
    m = Mixed(policy="downgrade")
    _classic_group_of_two(m)
    with pytest.raises(HeartbeatError) as ei:
        m.hb("c")
    assert ei.value.code == ErrorCode.GROUP_ID_NOT_FOUND and "online upgrade is disabled" in str(ei.value)
    assert m.shard.groups["g"].members and "g" not in m.shard.consumer_groups

    m = Mixed(policy="upgrade")
    _classic_group_of_two(m)
    m.hb("c")
    m.hb("c", LEAVE_GROUP_EPOCH)
    g = m.shard.consumer_groups["g"]
    assert len(g.members) == 2 and all(x.classic is not None for x in g.members.values()), \
        "without downgrades the classic members stay in the consumer group"


def test_a_classic_member_that_does_not_rejoin_within_its_rebalance_timeout_is_fenced():
    m = Mixed(policy="upgrade")
    _classic_group_of_two(m)
    m.hb("c")
    assert m.chb("a") == ErrorCode.REBALANCE_IN_PROGRESS
    a = m.classic["a"]["member_id"]
    for _ in range(6):  # (heartbeats keep its session, not its place)
        m.h.advance(4_800)
        m.chb("a")
        m.chb("b")
        m.hb("c")
    assert a in m.shard.consumer_groups["g"].members
    m.h.advance(2_000)
    assert a not in m.shard.consumer_groups["g"].members, "fenced: it did not join within 30 s"
    assert m.classic["b"]["member_id"] in m.shard.consumer_groups["g"].members, "b was told later"
    assert m.chb("a") == ErrorCode.UNKNOWN_MEMBER_ID


def test_classic_members_of_a_consumer_group_commit_with_their_generation():
    m = Mixed()
    _classic_group_of_two(m)
    m.hb("c")
    a = m.classic["a"]
    assert m.h.commit("g", a["generation"], a["member_id"], {("t1", 0): 5}, version=8) == {("t1", 0): 0}
    assert m.h.commit("g", a["generation"] - 1, a["member_id"], {("t1", 0): 6}, version=8) == \
        {("t1", 0): ErrorCode.ILLEGAL_GENERATION}


def test_member_metadata_carries_the_classic_protocols_in_tagged_field_0():
    md = cr.MemberMetadata("i", None, "c", "/h", ("t1",), None, 30_000, None,
                           cr.ClassicMemberMetadata(10_000, (("range", b"\x00\x01"),)))
    v = cr.member_metadata_value(md)
    # ... serverAssignor null | tagged fields: 1 field, tag 0, size, then the struct
    tag = struct.pack(">i", 10_000) + bytes([2, 6]) + b"range" + bytes([3]) + b"\x00\x01" + b"\x00" + b"\x00"
    assert v.endswith(b"\x00" + b"\x01\x00" + bytes([len(tag)]) + tag)
    assert cr.decode_member_metadata(v) == md
    plain = cr.MemberMetadata("i", None, "c", "/h", ("t1",), None, 30_000, None)
    assert cr.member_metadata_value(plain).endswith(b"\x00\x00") and cr.decode_member_metadata(
        cr.member_metadata_value(plain)) == plain


def test_a_static_classic_member_restarted_with_the_consumer_protocol_takes_over_its_instance():
    m = Mixed()
    protos = [("range", subscription(["t1"], version=1))]
    w = m.h.join("g", instance="i1", protocols=protos, client="s")
    m.h.advance(1)
    mid, gen = w.result["member_id"], w.result["generation_id"]
    s = m.h.sync(mid, gen, assignments={mid: assignment({"t1": [0, 1, 2, 3, 4, 5]})}, instance="i1")
    assert s.result["error_code"] == 0
    w2 = m.h.join("g", protocols=protos, client="o")  # a second, dynamic classic member
    w2 = m.h.join("g", member_id=w2.result["member_id"], protocols=protos, client="o")
    m.h.join("g", member_id=mid, instance="i1", protocols=protos, client="s")
    m.h.advance(1)
    assert len(m.shard.groups["g"].members) == 2
    req = HeartbeatRequest("g", "new", 0, "i1", None, 30_000, ["t1"], None, None, [], "c", "/h")
    resp, w, fx = m.shard.consumer_heartbeat(m.h.now, req, "new")
    m.h.run(fx)
    m.h.run_write(w)
    g = m.shard.consumer_groups["g"]
    assert g.static_members["i1"] == "new" and mid not in g.members, "no UNRELEASED_INSTANCE_ID for a classic one"
    assert g.members["new"].classic is None


def test_a_group_whose_assignments_carry_user_data_is_not_upgraded():
    """Kafka 4 (KAFKA-18134): the user data of a custom (or librdkafka's sticky) assignor would be
    lost, so the consumer-protocol member is refused and the classic group stays as it was."""
    m = Mixed()
    _classic_group_of_two(m)
    g = m.shard.groups["g"]
    mid = m.classic["a"]["member_id"]
    g.members[mid].assignment = assignment({"t1": [0, 1, 2]})[:-4] + struct.pack(">i", 2) + b"ud"
    with pytest.raises(HeartbeatError) as ei:
        m.hb("c")
    assert ei.value.code == ErrorCode.GROUP_ID_NOT_FOUND and "custom assignor" in str(ei.value)
    assert m.shard.groups["g"] is g and "g" not in m.shard.consumer_groups
    assert m.chb("a") == ErrorCode.NONE, "the classic group goes on undisturbed"


def test_a_classic_static_member_replacing_the_last_consumer_one_downgrades_the_group():
    m = Mixed()
    _classic_group_of_two(m)
    req = HeartbeatRequest("g", "s1", 0, "i1", None, 30_000, ["t1"], None, None, [], "c", "/h")
    resp, w, fx = m.shard.consumer_heartbeat(m.h.now, req, "s1")
    m.h.run(fx)
    m.h.run_write(w)
    g = m.shard.consumer_groups["g"]
    req = HeartbeatRequest("g", "s1", -2, "i1", None, -1, None, None, None, None, "c", "/h")
    _, w, fx = m.shard.consumer_heartbeat(m.h.now, req, "s1")  # the static member restarts...
    m.h.run(fx)
    m.h.run_write(w)
    assert "g" in m.shard.consumer_groups and g.members["s1"].epoch == -2
    j = m.h.join("g", instance="i1", protocols=[("range", subscription(["t1"], version=1))], client="s")
    assert j.result["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "a protocol the classic members lack"
    protos = [("cooperative-sticky", subscription(["t1"], version=1))]
    j = m.h.join("g", instance="i1", protocols=protos, client="s")  # ... with the classic protocol
    assert j.result["error_code"] == 0, j
    assert "g" not in m.shard.consumer_groups, "no consumer-protocol member is left: the group is classic"
    cg = m.shard.groups["g"]
    assert cg.static_members["i1"] == j.result["member_id"] and len(cg.members) == 3
    assert cg.leader_id != j.result["member_id"], "the joining member is added last, as Kafka does"
    assert m.rebuilt().groups["g"].members.keys() == cg.members.keys()
