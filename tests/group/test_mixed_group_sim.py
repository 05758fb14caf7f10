"""The simulation of groups with members of both protocols (sim/mixed_group.py): the real GroupShard
upgrading and downgrading one group as classic and consumer-protocol consumers come and go, under
pauses, lost responses, new partitions and coordinator failovers; a seed replays exactly; and the
checker catches bugs put back in."""

from __future__ import annotations

import pytest

from broker.group import consumer_group as cg
from broker.group import migration
from sim.mixed_group import InvariantViolation, run_seed

SEEDS = 30


def test_seeds_keep_the_invariants_and_converge():
    results = [run_seed(seed) for seed in range(SEEDS)]
    assert sum(r.upgrades for r in results) > SEEDS // 2 and sum(r.downgrades for r in results) > SEEDS // 4
    assert sum(r.failovers for r in results) > SEEDS


def test_a_seed_replays_exactly():
    def trace(seed):
        lines: list[str] = []
        run_seed(seed, trace=lines.append)
        return lines

    assert trace(5) == trace(5)
    assert trace(5) != trace(6)


def _first_failure(seeds=range(SEEDS)):
    for seed in seeds:
        try:
            run_seed(seed)
        except InvariantViolation as e:
            return str(e)
    return None


def test_the_checker_catches_a_sync_that_hands_out_the_target_before_it_is_released(monkeypatch):
    real = cg.ConsumerGroup.classic_sync

    def eager(self, now, member_id, instance_id, *a):
        m = self.members.get(member_id)
        if m is not None and m.classic is not None:
            m.assigned = dict(self.target.get(member_id, m.assigned))  # the bug: not yet released
        return real(self, now, member_id, instance_id, *a)

    monkeypatch.setattr(cg.ConsumerGroup, "classic_sync", eager)
    failure = _first_failure() or ""
    assert "both own" in failure or "held by" in failure, failure


def test_the_checker_catches_an_upgrade_that_forgets_what_classic_members_own(monkeypatch):
    real = migration.to_consumer_group

    def forgetful(classic, topics, cfg):
        for m in classic.members.values():
            m.assignment = b""
        return real(classic, topics, cfg)

    monkeypatch.setattr(migration, "to_consumer_group", forgetful)
    assert "both own" in (_first_failure() or "")


def test_the_checker_catches_classic_members_never_told_to_rejoin(monkeypatch):
    monkeypatch.setattr(cg.ConsumerGroup, "classic_heartbeat", lambda self, now, mid, iid, gen, cfg: 0)
    with pytest.raises(InvariantViolation, match="no convergence"):
        for seed in range(SEEDS):
            run_seed(seed)
