"""The classic group protocol and the offsets of one ``__consumer_offsets`` partition,
driven through the pure GroupShard (no sockets, no clock): every sentence here is a rule
of Kafka's GroupCoordinator that real clients depend on."""

from __future__ import annotations

import struct

from broker.group import records as rec
from broker.group.shard import GroupShard
from broker.group.state import (
    COMPLETING_REBALANCE,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    GroupConfig,
)
from common.errors import ErrorCode
from tests.group.helpers import PROTO, Harness, decoded_log


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0: version int16 | topics [string] | user_data bytes."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def stable_group(h: Harness, n: int = 2, group: str = "g", protocols=None, **kw) -> list[str]:
    """n dynamic members joined and synced (the leader assigns b"a-<member>"); returns the member ids."""
    joins = [h.join(group, **kw, protocols=protocols) for _ in range(n)]
    ids = [w.result["member_id"] for w in joins]
    assert all(w.result["error_code"] == ErrorCode.MEMBER_ID_REQUIRED for w in joins)
    joins = [h.join(group, member_id=mid, protocols=protocols, **kw) for mid in ids]
    h.advance(0)  # the initial rebalance delay (0 here) is a timer even when it is 0, as in Kafka
    assert all(w.done() for w in joins), "everyone joined: the rebalance completes"
    gen = joins[0].result["generation_id"]
    leader = joins[0].result["leader"]
    syncs = [h.sync(mid, gen, group, assignments={m: b"a-" + m.encode() for m in ids} if mid == leader else None)
             for mid in ids]
    assert all(s.result["error_code"] == 0 for s in syncs), syncs
    assert h.group(group).state == STABLE
    return ids


# --- JoinGroup / SyncGroup ---------------------------------------------------------------------

def test_join_v4_requires_a_member_id_first_then_completes_with_the_first_member_as_leader():
    h = Harness()
    first = h.join()
    assert first.result["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
    mid = first.result["member_id"]
    assert mid.startswith("c-")
    w = h.join(member_id=mid)
    h.advance(0)
    r = w.result
    assert (r["error_code"], r["generation_id"], r["leader"], r["member_id"]) == (0, 1, mid, mid)
    assert r["protocol_name"] == "range" and r["protocol_type"] == "consumer"
    assert r["members"] == [{"member_id": mid, "group_instance_id": None, "metadata": PROTO[0][1]}]
    assert h.group().state == COMPLETING_REBALANCE


def test_old_join_versions_get_a_member_id_without_the_handshake():
    h = Harness()
    w = h.join(version=3)
    h.advance(0)
    assert w.result["error_code"] == 0 and w.result["member_id"]


def test_leader_assignments_are_relayed_byte_for_byte_and_the_group_becomes_stable():
    h = Harness()
    a, b = stable_group(h, 2)
    g = h.group()
    assert g.members[a].assignment == b"a-" + a.encode()
    assert g.members[b].assignment == b"a-" + b.encode()
    # a follower syncing again in Stable gets the same bytes
    assert h.sync(b, g.generation).result["assignment"] == b"a-" + b.encode()
    assert [type(k).__name__ for k, _ in decoded_log(h.log)][-1] == "GroupKey"


def test_follower_sync_waits_for_the_leader_sync():
    h = Harness()
    ids = [h.join().result["member_id"] for _ in range(2)]
    joins = [h.join(member_id=m) for m in ids]
    h.advance(0)
    gen, leader = joins[0].result["generation_id"], joins[0].result["leader"]
    follower = next(m for m in ids if m != leader)
    assert joins[0].result["members"] and not joins[1].result["members"]  # only the leader gets the members
    fs = h.sync(follower, gen)
    assert not fs.done()
    h.sync(leader, gen, assignments={follower: b"\x00\x01", leader: b""})
    assert fs.result == {"error_code": 0, "protocol_type": "consumer", "protocol_name": "range",
                         "assignment": b"\x00\x01"}


def _assignment_in_flight(h: Harness):
    """Three members joined (generation 1); the first follower and the leader sent SyncGroup
    and the leader's assignment is being written (held). Returns (leader, f1, f2, f1's sync,
    the leader's sync)."""
    ids = [h.join().result["member_id"] for _ in range(3)]
    joins = [h.join(member_id=m) for m in ids]
    h.advance(0)
    leader = joins[0].result["leader"]
    f1, f2 = [m for m in ids if m != leader]
    h.hold_writes = True
    s1 = h.sync(f1, 1)
    ls = h.sync(leader, 1, assignments={leader: b"L", f1: b"A", f2: b"B"})
    return leader, f1, f2, s1, ls


def test_a_follower_sync_during_the_assignment_write_waits_for_it_and_everyone_is_answered_together():
    h = Harness()
    leader, f1, f2, s1, ls = _assignment_in_flight(h)
    assert h.held, "the leader's assignment is being written"
    assert h.group().state == COMPLETING_REBALANCE, "not Stable before the assignment is durable"
    s2 = h.sync(f2, 1)  # arrives during the write
    assert not (s1.done() or ls.done() or s2.done()), "nobody is told anything before the write completes"
    assert h.heartbeat(f2, 1) == 0
    assert h.commit("g", 1, f1, {("t", 0): 1}) == {("t", 0): ErrorCode.REBALANCE_IN_PROGRESS}
    assert h.shard.describe("g")["members"][0]["member_assignment"] == b""
    h.complete_held()
    assert h.group().state == STABLE
    assert [w.result["assignment"] for w in (ls, s1, s2)] == [b"L", b"A", b"B"]
    assert all(w.result["error_code"] == 0 for w in (ls, s1, s2))
    assert h.sync(f2, 1).result["assignment"] == b"B", "a late SyncGroup in Stable gets the stored assignment"


def test_a_failed_assignment_write_answers_every_parked_sync_with_the_error_and_rebalances():
    h = Harness()
    leader, f1, f2, s1, ls = _assignment_in_flight(h)
    s2 = h.sync(f2, 1)
    h.complete_held(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    assert [w.result["error_code"] for w in (ls, s1, s2)] == [ErrorCode.COORDINATOR_NOT_AVAILABLE] * 3
    assert h.group().state == PREPARING_REBALANCE
    assert all(m.assignment == b"" for m in h.group().members.values())


def test_a_member_joining_during_the_assignment_write_starts_a_new_rebalance_and_the_write_changes_nothing():
    h = Harness()
    leader, f1, f2, s1, ls = _assignment_in_flight(h)
    h.join_new()  # a new member: a new rebalance
    assert h.group().state == PREPARING_REBALANCE
    assert [w.result["error_code"] for w in (ls, s1)] == [ErrorCode.REBALANCE_IN_PROGRESS] * 2
    h.complete_held()
    assert h.group().state == PREPARING_REBALANCE and h.group().generation == 1
    assert all(m.assignment == b"" for m in h.group().members.values())


def test_protocol_is_the_one_all_members_support_with_the_most_votes():
    h = Harness()
    both = [("range", b"r"), ("roundrobin", b"rr")]
    only_rr = [("roundrobin", b"rr2")]
    a = h.join(protocols=both).result["member_id"]
    b = h.join(protocols=only_rr).result["member_id"]
    wa = h.join(member_id=a, protocols=both)
    h.join(member_id=b, protocols=only_rr)
    h.advance(0)
    assert wa.result["protocol_name"] == "roundrobin"
    assert {m["member_id"]: m["metadata"] for m in wa.result["members"]} == {a: b"rr", b: b"rr2"}


def test_a_member_without_a_common_protocol_is_refused():
    h = Harness()
    stable_group(h, 1)
    w = h.join(protocols=[("sticky", b"")])
    assert w.result["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_session_timeout_outside_the_broker_bounds_is_refused():
    h = Harness(GroupConfig(min_session_timeout_ms=6000, max_session_timeout_ms=30000, initial_rebalance_delay_ms=0))
    assert h.join(session=5999).result["error_code"] == ErrorCode.INVALID_SESSION_TIMEOUT
    assert h.join(session=30001).result["error_code"] == ErrorCode.INVALID_SESSION_TIMEOUT
    assert h.group() is None, "a refused join leaves no group behind"


def test_sync_with_a_stale_generation_or_unknown_member_is_refused():
    h = Harness()
    a, _ = stable_group(h, 2)
    gen = h.group().generation
    assert h.sync(a, gen - 1).result["error_code"] == ErrorCode.ILLEGAL_GENERATION
    assert h.sync("nobody", gen).result["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.sync(a, gen, group="other").result["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID


# --- rebalances ---------------------------------------------------------------------------------

def test_a_new_member_makes_heartbeats_answer_rebalance_in_progress_until_everyone_rejoined():
    h = Harness()
    a, b = stable_group(h, 2)
    gen = h.group().generation
    c = h.join().result["member_id"]
    wc = h.join(member_id=c)
    assert not wc.done() and h.group().state == PREPARING_REBALANCE
    assert h.heartbeat(a, gen) == ErrorCode.REBALANCE_IN_PROGRESS
    wa = h.join(member_id=a)
    assert not wa.done()
    wb = h.join(member_id=b)
    assert all(w.result["generation_id"] == gen + 1 for w in (wa, wb, wc))
    assert h.group().state == COMPLETING_REBALANCE
    assert h.heartbeat(a, gen) == ErrorCode.ILLEGAL_GENERATION


def test_a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_dropped():
    h = Harness()
    a, b = stable_group(h, 2, rebalance=20_000)
    wa = h.join(member_id=a, rebalance=20_000)  # a's metadata is unchanged but the leader rejoining rebalances
    assert h.group().state == PREPARING_REBALANCE and not wa.done()
    for _ in range(6):  # b keeps heartbeating (within its 10 s session) but never rejoins
        h.advance(3_000)
        assert h.heartbeat(b, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    h.advance(1_999)
    assert not wa.done()
    h.advance(1)
    assert wa.result["error_code"] == 0 and wa.result["generation_id"] == 2
    assert list(h.group().members) == [a]


def test_a_member_that_stops_heartbeating_expires_after_its_session_timeout():
    h = Harness()
    a, b = stable_group(h, 2, session=10_000)
    for _ in range(3):
        h.advance(3_000)
        assert h.heartbeat(a, 1) == 0
    h.advance(3_000)
    # b has been silent for 12 s: gone, and a is told to rejoin
    assert b not in h.group().members
    assert h.heartbeat(a, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    w = h.join(member_id=a)
    assert w.result["generation_id"] == 2 and [m["member_id"] for m in w.result["members"]] == [a]


def test_leave_group_removes_a_batch_of_members_and_reports_each():
    h = Harness()
    a, b, c = stable_group(h, 3)
    top, results = h.leave((a, None), (b, None), ("ghost", None))
    assert top == 0
    assert [(r["member_id"], r["error_code"]) for r in results] == [
        (a, 0), (b, 0), ("ghost", ErrorCode.UNKNOWN_MEMBER_ID)]
    assert list(h.group().members) == [c]
    assert h.group().state == PREPARING_REBALANCE
    assert h.leave(("x", None), group="nope")[0] == ErrorCode.UNKNOWN_MEMBER_ID


def test_last_member_leaving_empties_the_group_and_persists_it_empty():
    h = Harness()
    (a,) = stable_group(h, 1)
    h.leave((a, None))
    g = h.group()
    assert g.state == EMPTY and not g.members and g.generation == 2
    key, value = decoded_log(h.log)[-1]
    assert key == rec.GroupKey("g") and value.members == () and value.protocol is None


def test_initial_rebalance_delay_waits_for_more_members_and_is_bounded_by_the_rebalance_timeout():
    h = Harness(GroupConfig(initial_rebalance_delay_ms=3000))
    a = h.join(rebalance=10_000).result["member_id"]
    wa = h.join(member_id=a, rebalance=10_000)
    h.advance(2_000)
    assert not wa.done(), "the first member waits out the initial delay"
    b = h.join(rebalance=10_000).result["member_id"]
    wb = h.join(member_id=b, rebalance=10_000)
    h.advance(1_000)  # the first delay ends, but a member arrived meanwhile: wait another delay
    assert not wa.done()
    h.advance(2_999)
    assert not wa.done()
    h.advance(1)
    assert wa.result["generation_id"] == wb.result["generation_id"] == 1
    assert len(wa.result["members"]) == 2


def test_initial_rebalance_delay_of_zero_completes_at_once():
    h = Harness(GroupConfig(initial_rebalance_delay_ms=0))
    a = h.join().result["member_id"]
    w = h.join(member_id=a)
    assert not w.done(), "even a zero delay is a timer: the join completes when it fires"
    h.advance(0)
    assert w.result["generation_id"] == 1


def test_a_member_that_never_syncs_is_removed_after_the_rebalance_timeout():
    h = Harness()
    ids = [h.join(rebalance=15_000).result["member_id"] for _ in range(2)]
    joins = [h.join(member_id=m, rebalance=15_000) for m in ids]
    h.advance(0)
    leader = joins[0].result["leader"]
    other = next(m for m in ids if m != leader)
    ls = h.sync(leader, 1, assignments={leader: b"x", other: b"y"})
    assert ls.result["error_code"] == 0
    for _ in range(2):  # both heartbeat (so no session expires), but the other never sends SyncGroup
        h.advance(5_000)
        assert h.heartbeat(leader, 1) == 0 and h.heartbeat(other, 1) == 0
    h.advance(5_000)
    assert other not in h.group().members
    assert h.heartbeat(leader, 1) == ErrorCode.REBALANCE_IN_PROGRESS


# --- static membership (KIP-345) ----------------------------------------------------------------

def test_static_member_rejoining_gets_its_assignment_back_without_a_rebalance():
    h = Harness()
    ws = [h.join(instance=f"i{k}") for k in range(3)]
    h.advance(0)
    ids = [w.result["member_id"] for w in ws]
    gen, leader = ws[0].result["generation_id"], ws[0].result["leader"]
    assert ws[0].result["error_code"] == 0 and gen == 1
    for mid in ids:
        h.sync(mid, gen, assignments={m: b"part-" + m.encode() for m in ids} if mid == leader else None,
               instance=f"i{ids.index(mid)}")
    assert h.group().state == STABLE
    old = ids[1]
    back = h.join(instance="i1")  # restarted: no member id, same instance id
    r = back.result
    assert r["error_code"] == 0 and r["generation_id"] == gen and r["member_id"] != old
    assert h.group().state == STABLE, "no rebalance"
    assert h.sync(r["member_id"], gen, instance="i1").result["assignment"] == b"part-" + old.encode()
    for k in (0, 2):
        assert h.heartbeat(ids[k], gen, instance=f"i{k}") == 0
    # the old incarnation is fenced
    assert h.heartbeat(old, gen, instance="i1") == ErrorCode.FENCED_INSTANCE_ID
    assert h.commit("g", gen, old, {("t", 0): 5}, instance="i1") == {("t", 0): ErrorCode.FENCED_INSTANCE_ID}


def test_a_rejoining_static_leader_is_told_to_skip_the_assignment_v9_or_not_to_lead_before():
    h = Harness()
    w0 = h.join(instance="i0")
    h.advance(0)
    gen, leader = w0.result["generation_id"], w0.result["member_id"]
    h.sync(leader, gen, assignments={leader: b"L"}, instance="i0")
    r = h.join(instance="i0", version=9).result
    assert r["skip_assignment"] is True and r["leader"] == r["member_id"]
    r2 = h.join(instance="i0", version=8).result
    assert r2["leader"] == r["member_id"] != r2["member_id"], "pre-v9: the leader id is the old one"
    assert h.group().state == STABLE


def test_static_member_is_not_removed_by_leave_of_a_different_member_id():
    h = Harness()
    w = h.join(instance="i0")
    h.advance(0)
    mid = w.result["member_id"]
    _, results = h.leave(("someone-else", "i0"))
    assert results[0]["error_code"] == ErrorCode.FENCED_INSTANCE_ID
    _, results = h.leave(("", "i0"))  # leave by instance id alone (kafka-consumer-groups --delete of a member)
    assert results[0]["error_code"] == 0 and mid not in h.group().members


# --- offsets --------------------------------------------------------------------------------------

def test_simple_consumer_commits_without_a_group_and_fetches_them_back():
    h = Harness()
    assert h.commit("simple", offsets={("t", 0): 10, ("t", 1): 20}) == {("t", 0): 0, ("t", 1): 0}
    got = h.shard.fetch_offsets("simple", [("t", [0, 1, 2])])
    assert [(p["partition_index"], p["committed_offset"]) for p in got[0]["partitions"]] == [(0, 10), (1, 20), (2, -1)]
    all_ = h.shard.fetch_offsets("simple", None)
    assert [(t["name"], len(t["partitions"])) for t in all_] == [("t", 2)]


def test_commits_from_members_are_checked_against_generation_and_membership():
    h = Harness()
    a, b = stable_group(h, 2)
    gen = h.group().generation
    assert h.commit("g", gen, a, {("t", 0): 1}) == {("t", 0): 0}
    assert h.commit("g", gen + 1, a, {("t", 0): 2}) == {("t", 0): ErrorCode.ILLEGAL_GENERATION}
    assert h.commit("g", gen, "ghost", {("t", 0): 3}) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    assert h.commit("g", -1, "", {("t", 0): 4}) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}, \
        "a simple commit into a group with members"
    assert h.commit("nope", 3, "m", {("t", 0): 1}, version=9) == {("t", 0): ErrorCode.GROUP_ID_NOT_FOUND}
    assert h.commit("nope", 3, "m", {("t", 0): 1}, version=8) == {("t", 0): ErrorCode.ILLEGAL_GENERATION}
    c = h.join().result["member_id"]
    h.join(member_id=c)
    h.join(member_id=a)
    h.join(member_id=b)
    assert h.group().state == COMPLETING_REBALANCE
    assert h.commit("g", gen + 1, a, {("t", 0): 5}) == {("t", 0): ErrorCode.REBALANCE_IN_PROGRESS}
    assert h.shard.fetch_offsets("g", [("t", [0])])[0]["partitions"][0]["committed_offset"] == 1


def test_offset_commit_errors_come_in_kafkas_order_membership_before_generation():
    h = Harness()
    a, b = stable_group(h, 2)
    gen = h.group().generation
    # an admin's alterConsumerGroupOffsets (member "", generation -1) into a live group
    assert h.commit("g", -1, "", {("t", 0): 1}) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    assert h.commit("g", gen + 5, "ghost", {("t", 0): 1}) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    assert h.commit("g", -1, a, {("t", 0): 1}) == {("t", 0): ErrorCode.ILLEGAL_GENERATION}
    h.join_new()  # a rebalance: Stable -> PreparingRebalance
    assert h.commit("g", -1, "", {("t", 0): 1}) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    assert h.commit("g", gen, a, {("t", 0): 2}) == {("t", 0): 0}, "the current generation may commit meanwhile"
    h.leave((a, None), (b, None))
    h.advance(30_000)  # the new member never rejoins: the group empties
    assert h.group().state == EMPTY
    assert h.commit("g", -1, "", {("t", 0): 3}) == {("t", 0): 0}, "an empty group takes admin commits"


def test_offset_commit_of_a_static_member_with_another_member_id_is_fenced():
    h = Harness()
    w = h.join(instance="i-1")
    h.advance(0)
    mid, gen = w.result["member_id"], w.result["generation_id"]
    assert h.commit("g", gen + 1, "other", {("t", 0): 1}, instance="i-1") == {("t", 0): ErrorCode.FENCED_INSTANCE_ID}
    assert h.commit("g", gen, mid, {("t", 0): 1}, instance="i-1") == {("t", 0): ErrorCode.REBALANCE_IN_PROGRESS}
    h.sync(mid, gen, assignments={mid: b"x"}, instance="i-1")
    ids = [mid]
    assert h.commit("g", gen, ids[0], {("t", 0): 1}, instance="i-2") == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    assert h.commit("g", gen, ids[0], {("t", 0): 1}, instance="i-1") == {("t", 0): 0}


def _fetched(h: Harness, group: str, require_stable: bool = False) -> tuple[int, int]:
    p = h.shard.fetch_offsets(group, [("t", [0])], require_stable)[0]["partitions"][0]
    return p["committed_offset"], p["error_code"]


def test_an_offset_commit_being_written_is_not_served_until_it_is_committed():
    h = Harness()
    assert h.commit("s", offsets={("t", 0): 5}) == {("t", 0): 0}
    h.hold_writes = True
    h.commit("s", offsets={("t", 0): 9})
    assert _fetched(h, "s") == (5, 0), "the write has not completed: the last committed offset"
    assert _fetched(h, "s", require_stable=True) == (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)
    h.complete_held()
    assert _fetched(h, "s") == (9, 0) and _fetched(h, "s", require_stable=True) == (9, 0)
    h.commit("s", offsets={("t", 0): 12})
    h.complete_held(ErrorCode.NOT_COORDINATOR)
    assert _fetched(h, "s") == (9, 0), "a failed write was never served"
    assert h.shard.pending_commits == {}
    h.commit("new", offsets={("t", 0): 1})
    assert "new" not in h.shard.groups and _fetched(h, "new") == (-1, 0)
    h.complete_held()
    assert _fetched(h, "new") == (1, 0) and "new" in h.shard.groups


def test_offset_metadata_over_the_limit_is_refused_per_partition():
    h = Harness()
    h.shard.metadata_max_bytes = 10
    out, w = h.shard.commit_offsets(h.now, "s", "", None, -1, 9,
                                    [("t", [(0, 5, -1, "short"), (1, 6, -1, "x" * 11)])])
    assert [p["error_code"] for p in out[0]["partitions"]] == [0, ErrorCode.OFFSET_METADATA_TOO_LARGE]
    assert len(w.records) == 1


def test_offset_delete_refuses_topics_the_group_is_subscribed_to():
    h = Harness()
    sub = [("range", subscription("t1"))]
    (a,) = stable_group(h, 1, protocols=sub)
    h.commit("g", 1, a, {("t1", 0): 7, ("t2", 0): 9})
    code, out, w = h.shard.delete_offsets(h.now, "g", [("t1", [0]), ("t2", [0])])
    assert code == 0
    assert [(t["name"], t["partitions"][0]["error_code"]) for t in out] == [
        ("t1", ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC), ("t2", 0)]
    h.run_write(w)
    assert h.shard.offsets["g"] == {("t1", 0): h.shard.offsets["g"][("t1", 0)]}
    assert decoded_log(h.log)[-1] == (rec.OffsetKey("g", "t2", 0), None)
    assert h.shard.delete_offsets(h.now, "ghost", [("t1", [0])])[0] == ErrorCode.GROUP_ID_NOT_FOUND


def test_list_groups_filters_by_state_case_insensitively():
    h = Harness()
    stable_group(h, 1, group="busy")
    h.commit("idle", offsets={("t", 0): 1})
    rows = {g["group_id"]: g["group_state"] for g in h.shard.list_groups(None, None)}
    assert rows == {"busy": "Stable", "idle": "Empty"}
    assert [g["group_id"] for g in h.shard.list_groups({"empty"}, None)] == ["idle"]
    assert [g["group_id"] for g in h.shard.list_groups({"stable", "preparingrebalance"}, None)] == ["busy"]
    assert h.shard.list_groups(None, {"consumer"}) == [], "only classic groups live here"
    assert len(h.shard.list_groups(None, {"classic"})) == 2


def test_delete_groups_only_deletes_empty_groups_and_writes_tombstones():
    h = Harness()
    stable_group(h, 1, group="busy")
    h.commit("idle", offsets={("t", 0): 1, ("t", 1): 2})
    codes, w, fx = h.shard.delete_groups(h.now, ["busy", "idle", "ghost"])
    assert codes == {"busy": ErrorCode.NON_EMPTY_GROUP, "idle": 0, "ghost": ErrorCode.GROUP_ID_NOT_FOUND}
    h.run_write(w)
    h.run(fx)
    assert "idle" not in h.shard.groups and "idle" not in h.shard.offsets
    tail = decoded_log(h.log)[-3:]
    assert tail == [(rec.OffsetKey("idle", "t", 0), None), (rec.OffsetKey("idle", "t", 1), None),
                    (rec.GroupKey("idle"), None)]
    assert h.reload().groups.keys() == {"busy"}


def test_offsets_of_an_empty_group_expire_after_the_retention_and_the_group_goes_with_them():
    h = Harness()
    (a,) = stable_group(h, 1)
    h.commit("g", 1, a, {("t", 0): 3})
    retention = 7 * 24 * 3600 * 1000
    h.now += retention  # members keep a group's offsets alive, however old
    h.heartbeat(a, 1)
    assert h.shard.expire_offsets(h.now, retention) is None
    h.leave((a, None))
    emptied = h.now
    h.now = emptied + retention - 1
    assert h.shard.expire_offsets(h.now, retention) is None
    h.now = emptied + retention
    w = h.shard.expire_offsets(h.now, retention)
    h.run_write(w)
    assert "g" not in h.shard.groups and "g" not in h.shard.offsets
    assert decoded_log(h.log)[-2:] == [(rec.OffsetKey("g", "t", 0), None), (rec.GroupKey("g"), None)]


def test_offsets_of_a_simple_consumer_expire_retention_after_their_commit():
    h = Harness()
    h.commit("s", offsets={("t", 0): 1})
    h.now += 500
    h.commit("s", offsets={("t", 1): 1})
    assert h.shard.expire_offsets(h.now + 999, 1000) is not None
    w = h.shard.expire_offsets(h.now + 500, 1000)
    assert [rec.decode_key(k) for k, _ in w.records] == [rec.OffsetKey("s", "t", 0)]


def test_commit_with_a_retention_time_sets_its_own_expire_timestamp():
    h = Harness()
    out, w = h.shard.commit_offsets(h.now, "s", "", None, -1, 2, [("t", [(0, 5, -1, "")])], retention_ms=1000)
    h.run_write(w)
    v = h.shard.offsets["s"][("t", 0)]
    assert v.expire_timestamp == h.now + 1000
    assert rec.decode_offset_value(w.records[0][1]).expire_timestamp == h.now + 1000  # value version 1
    assert h.shard.expire_offsets(h.now + 999, 10**12) is None
    assert h.shard.expire_offsets(h.now + 1000, 10**12) is not None


def test_offsets_of_topics_a_consumer_group_no_longer_subscribes_to_expire_while_it_is_active():
    h = Harness()
    (a,) = stable_group(h, 1, protocols=[("range", subscription("t1"))])
    h.commit("g", 1, a, {("t1", 0): 1, ("old", 0): 2})
    h.heartbeat(a, 1)
    w = h.shard.expire_offsets(h.now + 100, 100)
    assert [rec.decode_key(k) for k, _ in w.records] == [rec.OffsetKey("g", "old", 0)]


# --- persistence, failover, unload ---------------------------------------------------------------

def test_a_reloaded_shard_has_the_stable_group_its_assignments_and_offsets():
    h = Harness()
    a, b = stable_group(h, 2)
    h.commit("g", 1, a, {("t", 0): 11, ("t", 1): 12})
    h.commit("s", offsets={("u", 0): 1})
    s2 = h.reload()
    g = s2.groups["g"]
    assert g.state == STABLE and g.generation == 1 and set(g.members) == {a, b}
    assert g.members[b].assignment == b"a-" + b.encode()
    assert {tp: v.offset for tp, v in s2.offsets["g"].items()} == {("t", 0): 11, ("t", 1): 12}
    # the members carry on with the new coordinator without rejoining
    assert s2.heartbeat(h.now, "g", a, None, 1) == 0
    assert s2.groups["s"].state == EMPTY


def test_unloading_answers_parked_requests_with_not_coordinator():
    h = Harness(GroupConfig(initial_rebalance_delay_ms=3000))
    a = h.join().result["member_id"]
    parked = h.join(member_id=a)
    h.run(h.shard.unload(h.now))
    assert parked.result["error_code"] == ErrorCode.NOT_COORDINATOR
    assert h.shard.groups == {} and h.shard.offsets == {}


def test_a_failed_write_of_the_leaders_assignment_sends_the_group_back_to_rebalance():
    h = Harness()
    ids = [h.join().result["member_id"] for _ in range(2)]
    joins = [h.join(member_id=m) for m in ids]
    h.advance(0)
    leader = joins[0].result["leader"]
    h.fail_writes = ErrorCode.NOT_COORDINATOR
    s = h.sync(leader, 1, assignments={m: b"x" for m in ids})
    assert s.result["error_code"] == ErrorCode.NOT_COORDINATOR
    assert h.group().state == PREPARING_REBALANCE
    assert all(m.assignment == b"" for m in h.group().members.values())


def test_replay_of_tombstones_removes_offsets_and_groups():
    s = GroupShard(0, GroupConfig())
    s.replay(rec.offset_commit_key("g", "t", 0), rec.offset_commit_value(rec.OffsetValue(5, -1, "", 1)), 10)
    s.replay(rec.offset_commit_key("g", "t", 1), rec.offset_commit_value(rec.OffsetValue(6, -1, "", 1)), 10)
    s.replay(rec.offset_commit_key("g", "t", 0), None, 10)
    assert list(s.offsets["g"]) == [("t", 1)]
    s.replay(rec.offset_commit_key("g", "t", 1), None, 10)
    s.replay(rec.group_metadata_key("g"), None, 10)
    assert s.offsets == {} and s.groups == {}
