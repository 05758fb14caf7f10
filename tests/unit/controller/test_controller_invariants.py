"""Random broker lifecycles on a 5-broker, RF=3 cluster keep the partition invariants, and
the controller managers stay sans-IO."""

import uuid

from controller_testkit import apply, endpoint, incarnation
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from common.errors import ErrorCode, KafkaError
from controller import cluster as cc
from controller import replication as rep
from metadata import records as r
from metadata.image import EMPTY

BROKERS = (1, 2, 3, 4, 5)
TIMEOUT = cc.DEFAULT_SESSION_TIMEOUT_MS
UNCLEAN_TOPIC = "dirty"


def _setup():
    img, state = EMPTY, cc.ClusterState()
    for bid in BROKERS:
        recs, _ = cc.register_broker(img, state, bid, incarnation(bid), endpoint(bid), None, 0, TIMEOUT)
        img = apply(img, recs)
    for bid in BROKERS:
        recs, _ = cc.heartbeat(img, state, bid, img.brokers[bid].epoch, 0, img.offset, False, False)
        img = apply(img, recs)
    for name, configs in (("clean", {}), (UNCLEAN_TOPIC, {"unclean.leader.election.enable": "true"})):
        tid = uuid.uuid5(uuid.NAMESPACE_DNS, name)
        recs = [r.TopicRecord(name, tid)]
        recs += [r.ConfigRecord(r.RESOURCE_TOPIC, name, k, v) for k, v in configs.items()]
        for pid in range(5):
            replicas = tuple(BROKERS[(pid + i) % 5] for i in range(3))
            recs.append(r.PartitionRecord(tid, pid, replicas, replicas, replicas[0]))
        img = apply(img, recs)
    return img, state


def _acceptable(img, bid):
    b = img.brokers.get(bid)
    return b is not None and not b.fenced and not b.in_controlled_shutdown


def _apply_checking_epochs(img, recs):
    """Apply one write's records one at a time: each leader change bumps the leader epoch by
    exactly one, and nothing else moves it."""
    for rec in recs:
        nxt = apply(img, [rec])
        for name, t in nxt.topics_by_name.items():
            for pid, p in t.partitions.items():
                old = img.topics_by_name[name].partitions[pid]
                assert p.leader_epoch == old.leader_epoch + (p.leader != old.leader), (rec, old, p)
        img = nxt
    return img


def _check(before, after):
    """Invariants of the state after a whole write (a write's records commit together)."""
    for name, t in after.topics_by_name.items():
        for pid, p in t.partitions.items():
            old = before.topics_by_name[name].partitions[pid]
            where = f"{name}-{pid}: {old} -> {p}"
            assert p.isr, where
            assert len(set(p.isr)) == len(p.isr), where
            assert set(p.isr) <= set(p.replicas), where
            if p.leader != r.NO_LEADER:
                assert p.leader in p.isr, where
                assert not after.brokers[p.leader].fenced, where
                assert not after.brokers[p.leader].in_controlled_shutdown, where
            assert p.partition_epoch >= old.partition_epoch, where
            if p != old:
                assert p.partition_epoch > old.partition_epoch, where
            if name != UNCLEAN_TOPIC:
                if p.leader != old.leader and p.leader != r.NO_LEADER:
                    assert p.leader in old.isr, f"unclean election on a clean topic: {where}"
                if p.leader == r.NO_LEADER:
                    # leaderless only while no ISR member could lead
                    assert not any(_acceptable(after, b) for b in p.isr), where
            elif p.leader == r.NO_LEADER:
                assert not any(_acceptable(after, b) for b in p.replicas), where


_ops = st.one_of(
    st.tuples(st.just("heartbeat"), st.sampled_from(BROKERS), st.booleans(), st.booleans(), st.booleans()),
    st.tuples(st.just("fence"), st.sampled_from(BROKERS)),
    st.tuples(st.just("alter"), st.sampled_from(["clean", UNCLEAN_TOPIC]), st.integers(0, 4),
              st.lists(st.sampled_from(BROKERS), max_size=4), st.sampled_from(BROKERS), st.booleans()),
    st.tuples(st.just("tick"), st.integers(0, 2 * TIMEOUT)),
    st.tuples(st.just("reregister"), st.sampled_from(BROKERS)),
    st.tuples(st.just("rebalance"),),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_ops, min_size=1, max_size=40))
def test_random_lifecycles_preserve_partition_invariants(ops):
    img, state = _setup()
    now = 0
    generation = dict.fromkeys(BROKERS, 0)
    for op in ops:
        kind = op[0]
        recs = []
        if kind == "heartbeat":
            _, bid, fence, shutdown, lagging = op
            b = img.brokers[bid]
            offset = b.epoch - 1 if lagging else img.offset  # behind its own registration record
            recs, res = cc.heartbeat(img, state, bid, b.epoch, now, offset, fence, shutdown)
            if res.should_shut_down:
                assert res.is_fenced
            if not b.fenced and not b.in_controlled_shutdown and not fence and not shutdown:
                assert recs == [] and not res.is_fenced
            if b.fenced and not shutdown:
                assert res.is_fenced == (fence or lagging)
            event(f"heartbeat fenced={res.is_fenced} shutdown={res.should_shut_down} recs={bool(recs)}")
        elif kind == "fence":
            if not img.brokers[op[1]].fenced:
                recs = cc.fence_broker(img, op[1])
        elif kind == "alter":
            _, topic, pid, isr, sender, from_leader = op
            t = img.topics_by_name[topic]
            p = t.partitions[pid]
            sender = p.leader if from_leader and p.leader != r.NO_LEADER else sender
            new_isr = tuple(dict.fromkeys([sender, *isr]))
            recs, res = rep.alter_partition(img, sender, img.brokers[sender].epoch, t.topic_id, pid,
                                            p.leader_epoch, p.partition_epoch, new_isr)
            assert (res.error == ErrorCode.NONE) == (sender == p.leader and set(new_isr) <= set(p.replicas) and all(
                b in p.isr or _acceptable(img, b) for b in new_isr)), (p, sender, new_isr, res)
            if res.error != ErrorCode.NONE:
                assert recs == []
            event(f"alter {res.error.name} recs={bool(recs)}")
        elif kind == "tick":
            now += op[1]
            recs = cc.fence_stale_brokers(img, state, now, TIMEOUT)
        elif kind == "reregister":
            bid = op[1]
            generation[bid] += 1
            try:
                recs, _ = cc.register_broker(img, state, bid, incarnation(bid, generation[bid]), endpoint(bid), None,
                                             now, TIMEOUT)
            except KafkaError as e:
                assert e.code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
                assert state.has_valid_session(bid, now, TIMEOUT)
        elif kind == "rebalance":
            recs = rep.preferred_leader_elections(img)
        after = _apply_checking_epochs(img, recs)
        _check(img, after)
        img = after
