"""The consumer group protocol (KIP-848) through the pure ConsumerGroup: joins, leaves, epochs,
revocation before reassignment, static members, timeouts, the records (a group rebuilt from them
is the same group), and, with hypothesis, the KIP's invariants over random member churn: no
partition owned by two members at once, and every subscribed partition assigned once stable."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.group import assignors
from broker.group import consumer_records as cr
from broker.group.consumer_group import (
    ASSIGNING,
    EMPTY,
    LEAVE_GROUP_EPOCH,
    LEAVE_GROUP_STATIC_EPOCH,
    RECONCILING,
    STABLE,
    UNRELEASED_PARTITIONS,
    UNREVOKED_PARTITIONS,
    ConsumerGroup,
    ConsumerGroupConfig,
    HeartbeatError,
    HeartbeatRequest,
)
from broker.group.records import decode_key
from common.errors import ErrorCode

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
TOPICS = {"t1": (T1, 6), "t2": (T2, 3)}
CFG = ConsumerGroupConfig()


class Client:
    """A consumer: it owns what the coordinator last gave it and reports it on each heartbeat."""

    def __init__(self, cluster: Cluster, member_id: str, topics=("t1",), instance=None, assignor=None):
        self.cluster, self.member_id, self.topics, self.instance, self.assignor = cluster, member_id, topics, instance, assignor
        self.epoch = 0
        self.owned: dict[uuid.UUID, frozenset[int]] = {}

    def heartbeat(self, **kw):
        g = self.cluster.group
        req = HeartbeatRequest("g", self.member_id, self.epoch, self.instance, None,
                               30_000 if self.epoch == 0 else -1, list(self.topics) if self.epoch == 0 else None, None,
                               self.assignor, [(t, sorted(ps)) for t, ps in self.owned.items()], "c", "/h")
        for k, v in kw.items():
            setattr(req, k, v)
        resp, records = g.heartbeat(self.cluster.now, req, self.cluster.topics, CFG, self.member_id)
        self.cluster.log += records
        self.epoch = resp["member_epoch"]
        if resp["assignment"] is not None:
            self.owned = {t: ps for t, ps in resp["assignment"].items() if ps}
        return resp

    def leave(self, epoch=LEAVE_GROUP_EPOCH):
        resp = self.heartbeat(member_epoch=epoch)
        self.owned, self.epoch = {}, 0
        return resp


class Cluster:
    def __init__(self, topics=None):
        self.group = ConsumerGroup("g")
        self.topics = dict(topics or TOPICS)
        self.now = 1_000_000
        self.log: list[tuple[bytes, bytes | None]] = []

    def rebuilt(self) -> ConsumerGroup:
        g = ConsumerGroup("g")
        for k, v in self.log:
            g.replay(decode_key(k), v)
        return g

    def settle(self, clients, rounds=10):
        for _ in range(rounds):
            for c in clients:
                c.heartbeat()
            if self.group.state() == STABLE:
                return
        raise AssertionError(f"not stable: {self.group}")


def owners(clients) -> dict[tuple[uuid.UUID, int], str]:
    out: dict[tuple[uuid.UUID, int], str] = {}
    for c in clients:
        for t, ps in c.owned.items():
            for p in ps:
                assert (t, p) not in out, f"{(t, p)} owned by {out[(t, p)]} and {c.member_id}"
                out[(t, p)] = c.member_id
    return out


def test_the_first_member_gets_every_partition_at_epoch_one():
    cl = Cluster()
    a = Client(cl, "a")
    r = a.heartbeat()
    assert (r["member_id"], r["member_epoch"], r["heartbeat_interval_ms"]) == ("a", 1, 5000)
    assert r["assignment"] == {T1: frozenset(range(6))}
    assert cl.group.state() == STABLE and cl.group.epoch == cl.group.assignment_epoch == 1
    assert a.heartbeat()["assignment"] is None, "nothing changed: no assignment in the response"


def test_a_second_member_gets_partitions_only_after_the_first_revokes_them():
    cl = Cluster()
    a, b = Client(cl, "a"), Client(cl, "b")
    a.heartbeat()
    rb = b.heartbeat()
    assert rb["member_epoch"] == 2 and rb["assignment"] == {}, "its partitions are still a's"
    assert cl.group.members["b"].state == UNRELEASED_PARTITIONS
    assert cl.group.state() == RECONCILING
    ra = a.heartbeat()
    assert ra["member_epoch"] == 1 and cl.group.members["a"].state == UNREVOKED_PARTITIONS
    assert ra["assignment"] == {T1: frozenset({0, 1, 2})}, "a keeps half and is asked to revoke the rest"
    assert b.heartbeat()["assignment"] is None and b.owned == {}, "a has not confirmed the revocation yet"
    ra = a.heartbeat()  # reports only 0-2: the revocation is done
    assert ra["member_epoch"] == 2
    rb = b.heartbeat()
    assert rb["assignment"] == {T1: frozenset({3, 4, 5})}
    assert cl.group.state() == STABLE
    assert owners([a, b]) == {(T1, p): "a" if p < 3 else "b" for p in range(6)}


def test_a_leaving_member_moves_only_its_partitions():
    cl = Cluster()
    cs = [Client(cl, m) for m in "abc"]
    cl.settle(cs)
    before = owners(cs)
    cs[2].leave()
    cl.settle(cs[:2])
    after = owners(cs[:2])
    moved = {tp for tp in after if before[tp] != after[tp]}
    assert moved == {tp for tp, m in before.items() if m == "c"}, "only c's partitions moved"


def test_stale_and_future_epochs_are_fenced_and_unknown_members_refused():
    cl = Cluster()
    a = Client(cl, "a")
    a.heartbeat()
    with pytest.raises(HeartbeatError) as ei:
        a.heartbeat(member_epoch=5)
    assert ei.value.code == ErrorCode.FENCED_MEMBER_EPOCH
    with pytest.raises(HeartbeatError) as ei:
        Client(cl, "ghost").heartbeat(member_epoch=3)
    assert ei.value.code == ErrorCode.UNKNOWN_MEMBER_ID
    # the previous epoch with a subset of the assignment is accepted (the response was lost)
    Client(cl, "b").heartbeat()
    a.heartbeat()
    a.heartbeat()
    assert cl.group.members["a"].epoch == 2
    a.heartbeat(member_epoch=1, owned=[(T1, [0])])


def test_session_expiry_and_rebalance_timeout_fence_members():
    cl = Cluster()
    a, b = Client(cl, "a"), Client(cl, "b")
    a.heartbeat()
    b.heartbeat()
    a.heartbeat()  # a must revoke 3 partitions within its rebalance timeout (30 s)
    assert cl.group.members["a"].state == UNREVOKED_PARTITIONS
    cl.now += 20_000
    b.heartbeat()
    cl.now += 11_000
    cl.log += cl.group.tick(cl.now, cl.topics)
    assert "a" not in cl.group.members, "a never confirmed the revocation"
    b.heartbeat()
    assert b.owned == {T1: frozenset(range(6))}
    cl.now += 45_000
    cl.log += cl.group.tick(cl.now, cl.topics)
    assert cl.group.members == {} and cl.group.state() == EMPTY


def test_static_member_comes_back_to_its_partitions():
    cl = Cluster()
    a, b = Client(cl, "a", instance="ia"), Client(cl, "b", instance="ib")
    cl.settle([a, b])
    mine = dict(b.owned)
    epoch = cl.group.epoch
    assert b.leave(LEAVE_GROUP_STATIC_EPOCH)["member_epoch"] == LEAVE_GROUP_STATIC_EPOCH
    with pytest.raises(HeartbeatError) as ei:
        Client(cl, "a2", instance="ia").heartbeat()
    assert ei.value.code == ErrorCode.UNRELEASED_INSTANCE_ID, "ia is still held by a"
    b2 = Client(cl, "b2", instance="ib")
    r = b2.heartbeat()
    assert r["assignment"] == mine and cl.group.epoch == epoch, "same partitions, no new group epoch"
    assert "b" not in cl.group.members and cl.group.static_members["ib"] == "b2"


def test_subscription_change_and_new_topic_partitions_bump_the_epoch():
    cl = Cluster()
    a = Client(cl, "a")
    a.heartbeat()
    a.heartbeat(subscribed_topic_names=["t1", "t2"])
    assert cl.group.epoch == 2 and a.owned == {T1: frozenset(range(6)), T2: frozenset(range(3))}
    cl.topics["t2"] = (T2, 5)
    cl.log += cl.group.on_metadata(cl.topics)
    assert cl.group.state() == ASSIGNING
    a.heartbeat()
    assert a.owned[T2] == frozenset(range(5))


def test_a_group_rebuilt_from_its_records_is_the_same_group():
    cl = Cluster()
    cs = [Client(cl, m, instance="i" + m if m == "b" else None) for m in "abc"]
    cl.settle(cs)
    cs[0].leave()
    cs[1].heartbeat()
    g, r = cl.group, cl.rebuilt()
    assert (r.epoch, r.assignment_epoch, r.target, r.subscription_metadata, r.static_members) == (
        g.epoch, g.assignment_epoch, g.target, g.subscription_metadata, g.static_members)
    assert {k: (m.metadata(), m.current()) for k, m in r.members.items()} == {
        k: (m.metadata(), m.current()) for k, m in g.members.items()}
    assert r.partition_epochs == g.partition_epochs
    assert all(decode_key(k).kind in cr.KEY_VERSIONS for k, _ in cl.log)


def test_offset_commit_and_fetch_check_the_member_epoch():
    cl = Cluster()
    a = Client(cl, "a")
    a.heartbeat()
    g = cl.group
    assert g.validate_offset_commit("a", 1, 9, False) == 0
    assert g.validate_offset_commit("a", 0, 9, False) == ErrorCode.STALE_MEMBER_EPOCH
    assert g.validate_offset_commit("x", 1, 9, False) == ErrorCode.UNKNOWN_MEMBER_ID
    assert g.validate_offset_commit("a", 1, 8, False) == ErrorCode.UNSUPPORTED_VERSION
    assert g.validate_offset_commit("", -1, 9, False) == ErrorCode.UNKNOWN_MEMBER_ID
    assert g.validate_offset_fetch(None, -1) == 0 and g.validate_offset_fetch("a", 0) == ErrorCode.STALE_MEMBER_EPOCH


@pytest.mark.parametrize("name", assignors.ASSIGNORS)
def test_assignors_balance_and_keep_what_they_can(name):
    subs = {m: {T1} for m in "abc"}
    first = assignors.assign(name, subs, {T1: 7}, {})
    counts = sorted(len(a.get(T1, ())) for a in first.values())
    assert counts == [2, 2, 3] and set().union(*(a[T1] for a in first.values())) == set(range(7))
    subs["d"] = {T1}
    second = assignors.assign(name, subs, {T1: 7}, first)
    assert sorted(len(a.get(T1, ())) for a in second.values()) == [1, 2, 2, 2]
    kept = sum(len(second[m].get(T1, frozenset()) & first[m][T1]) for m in "abc")
    assert kept >= 5, (first, second)


# --- invariants under churn (hypothesis) ------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("join leave beat beat beat expire"), st.integers(0, 5)), max_size=60),
       st.sampled_from(assignors.ASSIGNORS))
def test_no_partition_has_two_owners_and_all_are_assigned_once_stable(ops, assignor):
    cl = Cluster()
    clients: dict[str, Client] = {}
    n = 0
    for op, k in ops:
        live = sorted(clients)
        if op == "join" or not live:
            n += 1
            clients[f"m{n}"] = Client(cl, f"m{n}", topics=("t1", "t2") if k % 2 else ("t1",), assignor=assignor)
            clients[f"m{n}"].heartbeat()
        elif op == "leave":
            clients.pop(live[k % len(live)]).leave()
        elif op == "expire":
            mid = live[k % len(live)]
            cl.now += 1
            cl.group.members[mid].session_deadline = cl.now
            cl.log += cl.group.tick(cl.now, cl.topics)
            del clients[mid]
        else:
            c = clients[live[k % len(live)]]
            try:
                c.heartbeat()
            except HeartbeatError as e:
                assert e.code == ErrorCode.FENCED_MEMBER_EPOCH
                c.owned, c.epoch = {}, 0
        owners(clients.values())  # no partition owned twice, at every step
        for t, p in cl.group.partition_epochs:  # and the coordinator agrees
            assert sum(p in m.assigned.get(t, ()) or p in m.pending_revocation.get(t, ())
                       for m in cl.group.members.values()) == 1
    if clients:
        cl.settle(clients.values(), rounds=20)
        got = owners(clients.values())
        subscribed = {t for c in clients.values() for t in c.topics}
        assert set(got) == {(TOPICS[t][0], p) for t in subscribed for p in range(TOPICS[t][1])}


def test_a_regex_subscription_picks_up_matching_topics_including_ones_created_later():
    cl = Cluster({"orders-eu": (T1, 2), "orders-us": (T2, 2), "other": (uuid.UUID(int=3), 1)})
    a = Client(cl, "a", topics=("other",))
    a.heartbeat(subscribed_topic_regex="orders-.*")
    assert a.owned == {uuid.UUID(int=3): frozenset({0})}, "the regex is resolved off the request path (Kafka)"
    assert cl.group.next_deadline() == cl.now
    cl.log += cl.group.tick(cl.now, cl.topics)
    a.heartbeat()
    assert set(a.owned) == {T1, T2, uuid.UUID(int=3)} and a.owned[T1] == frozenset({0, 1})
    t4 = uuid.UUID(int=4)
    cl.topics["orders-asia"] = (t4, 3)
    cl.topics["xorders-1"] = (uuid.UUID(int=5), 1)  # the whole name must match
    cl.log += cl.group.on_metadata(cl.topics)
    a.heartbeat()
    assert set(a.owned) == {T1, T2, t4, uuid.UUID(int=3)}
    with pytest.raises(HeartbeatError) as ei:
        Client(cl, "b").heartbeat(subscribed_topic_regex="orders-(?=x)")
    assert ei.value.code == ErrorCode.INVALID_REGULAR_EXPRESSION and "orders-(?=x)" in ei.value.message
    assert "b" not in cl.group.members
    r = cl.rebuilt()
    assert r.subscription_metadata == cl.group.subscription_metadata and r.members["a"].regex == "orders-.*"
    a.leave()  # the regex's last subscriber left: a new one waits for it to be resolved again
    a.topics = ("other",)
    a.heartbeat(subscribed_topic_regex="orders-.*")
    assert a.owned == {uuid.UUID(int=3): frozenset({0})}


def test_the_shard_serves_consumer_groups_next_to_classic_ones():
    from broker.group.shard import GroupShard
    from broker.group.state import GroupConfig

    shard = GroupShard(0, GroupConfig(), topics=lambda: TOPICS)
    log: list = []

    def hb(member, epoch, **kw):
        req = HeartbeatRequest("cg", member, epoch, None, None, 30_000, ["t1"], None, None, [], "c", "/h")
        for k, v in kw.items():
            setattr(req, k, v)
        resp, w, _fx = shard.consumer_heartbeat(1000, req, "new-id")
        if w is not None:
            log.extend(w.records)
        return resp

    with pytest.raises(HeartbeatError) as ei:
        hb("a", 3)
    assert ei.value.code == ErrorCode.GROUP_ID_NOT_FOUND and "cg" not in shard.consumer_groups
    assert hb("a", 0)["member_epoch"] == 1
    assert shard.list_groups(None, {"consumer"}) == [
        {"group_id": "cg", "protocol_type": "consumer", "group_state": "Stable", "group_type": "consumer"}]
    assert shard.list_groups(None, {"classic"}) == []
    codes, _, _ = shard.delete_groups(1000, ["cg"])
    assert codes == {"cg": ErrorCode.NON_EMPTY_GROUP}
    hb("a", LEAVE_GROUP_EPOCH, subscribed_topic_names=None, owned=None)
    codes, w, _ = shard.delete_groups(1000, ["cg"])
    assert codes == {"cg": 0} and "cg" not in shard.consumer_groups
    log.extend(w.records)
    again = GroupShard(0, GroupConfig())
    for k, v in log:
        again.replay(k, v, 1000)
    assert again.consumer_groups == {} and again.groups == {}, "the tombstones delete the group on reload too"


def test_offset_delete_of_a_consumer_group_spares_its_subscribed_topics():
    from broker.group.shard import GroupShard
    from broker.group.state import GroupConfig

    shard = GroupShard(0, GroupConfig(), topics=lambda: TOPICS)
    req = HeartbeatRequest("cg", "a", 0, None, None, 30_000, ["t1"], None, None, [], "c", "/h")
    shard.consumer_heartbeat(1000, req, "a")
    for t in ("t1", "t2"):
        _, w = shard.commit_offsets(1000, "cg", "a", None, 1, 9, [(t, [(0, 5, -1, "")])])
        w.base_offset = 10 if t == "t1" else 11
        w.on_done(0, 1000)
    assert [g["group_type"] for g in shard.list_groups(None, None)] == ["consumer"], "no classic twin"
    code, out, w = shard.delete_offsets(1000, "cg", [("t1", [0]), ("t2", [0])])
    assert code == 0 and {t["name"]: t["partitions"][0]["error_code"] for t in out} == {
        "t1": ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, "t2": 0}


def test_regex_refreshes_after_metadata_changes_are_batched_as_kafka_does():
    cl = Cluster({"other": (uuid.UUID(int=3), 1)})
    a = Client(cl, "a", topics=("other",))
    a.heartbeat(subscribed_topic_regex="new-.*")
    cl.log += cl.group.tick(cl.now, cl.topics)  # the regex resolved (nothing matches yet)
    epoch = cl.group.epoch
    for k, name in enumerate(("new-1", "new-2")):
        cl.now += 1000
        cl.topics[name] = (uuid.UUID(int=10 + k), 1)
        cl.log += cl.group.on_metadata(cl.topics, cl.now)
        cl.log += cl.group.tick(cl.now, cl.topics)
        assert cl.group.epoch == epoch, "not before the refresh interval"
    cl.now += 8000
    assert cl.group.next_deadline() <= cl.now
    cl.log += cl.group.tick(cl.now, cl.topics)
    assert cl.group.epoch == epoch + 1, "both new topics in one new epoch"
    a.heartbeat()
    assert set(a.owned) == {uuid.UUID(int=3), uuid.UUID(int=10), uuid.UUID(int=11)}


def test_an_empty_group_switches_protocols_both_ways_and_a_full_consumer_group_refuses_more():
    from broker.group.records import decode_key as dk
    from broker.group.shard import GroupShard
    from broker.group.state import GroupConfig
    from tests.group.helpers import Harness

    h = Harness(GroupConfig(initial_rebalance_delay_ms=0))
    h.shard = GroupShard(0, h.config, topics=lambda: TOPICS,
                         consumer_config=ConsumerGroupConfig(max_size=1))
    shard = h.shard

    def hb(member, epoch):
        req = HeartbeatRequest("g", member, epoch, None, None, 30_000 if epoch == 0 else -1,
                               ["t1"] if epoch == 0 else None, None, None, [] if epoch == 0 else None, "c", "/h")
        resp, w, _fx = shard.consumer_heartbeat(h.now, req, member)
        if w is not None:
            h.run_write(w)
        return resp

    hb("a", 0)
    with pytest.raises(HeartbeatError) as ei:
        hb("b", 0)
    assert ei.value.code == ErrorCode.GROUP_MAX_SIZE_REACHED
    refused = h.join("g")
    assert refused.result["error_code"] == ErrorCode.GROUP_MAX_SIZE_REACHED, "a full group takes no classic member"
    hb("a", LEAVE_GROUP_EPOCH)
    w = h.join_new("g")  # the consumer group is empty: it becomes a classic group
    h.advance(0)
    assert w.result["error_code"] == 0 and "g" not in shard.consumer_groups and shard.groups["g"].members
    assert any(isinstance(dk(k), cr.ConsumerKey) and dk(k).kind == cr.GROUP_EPOCH_KEY and v is None
               for k, v in h.log), "the consumer group's tombstones were written"
    with pytest.raises(HeartbeatError) as ei:
        hb("c", 0)
    assert ei.value.code == ErrorCode.GROUP_ID_NOT_FOUND and "malformed" in str(ei.value), \
        "a live classic group whose members' subscriptions are not the consumer protocol's is not upgraded"
    assert shard.groups["g"].members, "and it stays as it was"


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(assignors.ASSIGNORS),
       st.dictionaries(st.sampled_from([f"m{i}" for i in range(8)]),
                       st.sets(st.sampled_from([T1, T2]), min_size=1), min_size=1),
       st.integers(1, 20), st.integers(1, 7), st.randoms(use_true_random=False))
def test_assignors_assign_each_subscribed_partition_once_to_a_subscriber(name, subs, n1, n2, rnd):
    parts = {T1: n1, T2: n2}
    current = {m: {t: frozenset(p for p in range(parts[t]) if rnd.random() < 0.3) for t in parts}
               for m in subs if rnd.random() < 0.5}
    out = assignors.assign(name, subs, parts, current)
    assert set(out) == set(subs)
    owners: dict = {}
    for m, a in out.items():
        for t, ps in a.items():
            assert t in subs[m], f"{m} got a topic it does not subscribe to"
            for p in ps:
                assert (t, p) not in owners and 0 <= p < parts[t]
                owners[(t, p)] = m
    assert set(owners) == {(t, p) for t in parts for p in range(parts[t]) if any(t in s for s in subs.values())}
    if name == assignors.UNIFORM and len({frozenset(s) for s in subs.values()}) == 1:
        counts = [sum(len(ps) for ps in a.values()) for a in out.values()]
        assert max(counts) - min(counts) <= 1, "same subscriptions: balanced"


def test_a_regex_too_large_for_re2s_budget_is_refused_not_compiled():
    from broker.group.consumer_group import compile_regex

    with pytest.raises(HeartbeatError) as ei:
        compile_regex("[a-z]{1000}" * 100)  # ~100,000 states: past the 1 MiB budget
    assert ei.value.code == ErrorCode.INVALID_REGULAR_EXPRESSION and "too large" in ei.value.message
    assert compile_regex("orders-[a-z]{1,30}").fullmatch("orders-eu")


def test_regex_resolutions_are_records_and_a_rebuilt_group_resolves_as_its_log_says():
    cl = Cluster({"other": (uuid.UUID(int=3), 1), "new-1": (uuid.UUID(int=10), 2)})
    a = Client(cl, "a", topics=("other",))
    a.heartbeat(subscribed_topic_regex="new-.*")
    cl.log += cl.group.tick(cl.now, cl.topics)
    regex = [(decode_key(k), v) for k, v in cl.log if decode_key(k).kind == cr.REGEX_KEY]
    assert [(k.member, cr.decode_regex(v).topics) for k, v in regex] == [("new-.*", frozenset({"new-1"}))]
    r = cl.rebuilt()
    assert r.resolved == {"new-.*": frozenset({"new-1"})} == cl.group.resolved
    # a new coordinator resolves as the log says until its timer resolves again from the image
    cl.topics["new-2"] = (uuid.UUID(int=11), 1)
    r.on_loaded(cl.now, CFG, cl.topics)
    assert r.resolved["new-.*"] == frozenset({"new-1"}) and r.next_deadline() <= cl.now
    more = r.tick(cl.now, cl.topics)
    assert r.resolved["new-.*"] == frozenset({"new-1", "new-2"})
    assert any(decode_key(k).kind == cr.REGEX_KEY and v is not None for k, v in more)
    # a regex nobody uses any more is tombstoned
    a.heartbeat(subscribed_topic_regex="")
    assert any(decode_key(k).kind == cr.REGEX_KEY and decode_key(k).member == "new-.*" and v is None
               for k, v in cl.log) and not cl.rebuilt().resolved


def test_a_loaded_group_whose_regex_has_no_record_resolves_it_and_records_it():
    cl = Cluster({"other": (uuid.UUID(int=3), 1), "new-1": (uuid.UUID(int=10), 2)})
    a = Client(cl, "a", topics=("other",))
    a.heartbeat(subscribed_topic_regex="new-.*")
    cl.log += cl.group.tick(cl.now, cl.topics)
    cl.log = [(k, v) for k, v in cl.log if decode_key(k).kind != cr.REGEX_KEY]  # written before they were
    r = cl.rebuilt()
    r.on_loaded(cl.now, CFG, cl.topics)
    assert r.resolved == {"new-.*": frozenset({"new-1"})}, "resolved at once: the subscription stays whole"
    more = r.tick(cl.now, cl.topics)
    assert [decode_key(k).member for k, v in more if decode_key(k).kind == cr.REGEX_KEY] == ["new-.*"]
