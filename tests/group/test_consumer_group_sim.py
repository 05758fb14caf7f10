"""The consumer group protocol's simulation (sim/consumer_group.py): the real ConsumerGroup core
under joins, leaves, pauses, subscription changes, new partitions, lost responses and coordinator
failovers over many seeds; a seed replays exactly; and the checker catches known bugs put back in."""

from __future__ import annotations

import pytest

from broker.group import consumer_group as cg
from sim.consumer_group import InvariantViolation, run_seed

SEEDS = 60
CHUNK = 30


@pytest.mark.parametrize("start", range(0, SEEDS, CHUNK))
def test_seeds_keep_the_invariants_and_converge(start):
    results = [run_seed(seed) for seed in range(start, start + CHUNK)]
    assert sum(r.failovers for r in results) > CHUNK and sum(r.fenced for r in results) > 0  # faults happened


def test_a_seed_replays_exactly():
    def trace(seed):
        lines: list[str] = []
        run_seed(seed, trace=lines.append)
        return lines

    assert trace(3) == trace(3)
    assert trace(3) != trace(4)


def _first_failure(seeds=range(60)):
    for seed in seeds:
        try:
            run_seed(seed)
        except InvariantViolation as e:
            return str(e)
    return None


def test_checker_catches_partitions_given_before_their_owner_released_them(monkeypatch):
    real = cg.ConsumerGroup._next_assignment

    def eager(self, m, member_epoch, target, owned):
        saved, self.partition_epochs = self.partition_epochs, {}
        try:
            return real(self, m, member_epoch, target, owned)
        finally:
            self.partition_epochs = saved
    monkeypatch.setattr(cg.ConsumerGroup, "_next_assignment", eager)
    assert "both own" in (_first_failure() or "") or "held by" in (_first_failure() or "")


def test_checker_catches_revocations_that_are_not_waited_for(monkeypatch):
    monkeypatch.setattr(cg, "_owns_any", lambda owned, a: False)
    assert _first_failure() is not None
