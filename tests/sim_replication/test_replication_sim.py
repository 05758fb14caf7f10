"""The seeded replication simulation: safety invariants after every event, convergence
after healing, exact replay; and the checker catches a known Kafka data-loss bug."""

from __future__ import annotations

import dataclasses
import random

import pytest

from broker.replica.follower import FollowerFetchState
from sim.replication import simlog
from sim.replication.simlog import SimLog
from sim.replication.world import Config, InvariantViolation, World, run_seed

CHUNK = 40


@pytest.mark.parametrize("start", range(0, 200, CHUNK))
def test_swarm_seeds_keep_invariants_and_converge(start):
    for seed in range(start, start + CHUNK):
        run_seed(seed)


@pytest.mark.parametrize("rf", [3, 5])
def test_fixed_replication_factor_seeds(rf):
    for seed in range(1000, 1030):
        run_seed(seed, Config.swarm(random.Random(seed), rf=rf))


def test_a_seed_replays_exactly():
    def trace(seed):
        lines: list[str] = []
        w = World(seed, trace=lines.append)
        r = w.run()
        return lines, sorted(w.checker.committed.items()), r

    assert trace(11) == trace(11)
    assert trace(11)[0] != trace(12)[0]


# Seeds whose schedule loses a committed record when KIP-966's unclean-shutdown handling is off
# (found with `python -m sim.replication.run --seeds 600 --no-unclean-shutdown-detection
# --no-disk-faults`; refresh the list that way if the simulation's schedule changes).
PRE_KIP966_LOSS_SEEDS = [235, 247, 263, 303]


def test_checker_catches_election_of_isr_member_that_lost_data_without_kip966():
    # Before KIP-966 a broker that restarted after losing its unflushed tail stayed in the ISR
    # and could be elected, truncating records the other ISR members held.
    caught = []
    for seed in PRE_KIP966_LOSS_SEEDS:
        cfg = dataclasses.replace(Config.swarm(random.Random(seed * 7919 + 1)), unclean_shutdown_detection=False,
                                  disk_faults=False)
        try:
            run_seed(seed, cfg)
        except InvariantViolation as e:
            caught.append((seed, str(e)))
    assert caught and all("committed" in msg for _, msg in caught)
    for seed, _ in caught:
        run_seed(seed, dataclasses.replace(Config.swarm(random.Random(seed * 7919 + 1)), disk_faults=False))


# Seeds that lose committed records when the HW ignores a pending ISR expansion (found with
# `python -m sim.replication.run --seeds 1000 --hw-over-committed-isr --no-disk-faults`).
COMMITTED_ISR_HW_LOSS_SEEDS = [699, 757, 917]


def test_checker_catches_hw_that_ignores_pending_isr_expansion():
    # KIP-497: while adding a follower is pending, the HW must wait for it; otherwise the
    # controller commits the expansion, elects the new member, and committed records vanish.
    caught = []
    for seed in COMMITTED_ISR_HW_LOSS_SEEDS:
        cfg = dataclasses.replace(Config.swarm(random.Random(seed * 7919 + 1)), hw_over_maximal_isr=False,
                                  disk_faults=False)
        try:
            run_seed(seed, cfg)
        except InvariantViolation as e:
            caught.append(seed)
            assert "committed" in str(e)
    assert caught
    for seed in caught:
        run_seed(seed, dataclasses.replace(Config.swarm(random.Random(seed * 7919 + 1)), disk_faults=False))


# --- issue 18: the disk model's torn tails and bad blocks -----------------------------------------

def _open_flushed_before_issue_18(self, seg, last):
    """Log.open after a clean shutdown before issue 18: the index is trusted and a last segment
    whose tail does not parse from its last index entry falls back to its base offset."""
    if not last:
        return SimLog._open_flushed_checked(self, seg, last)
    buf = bytes(self.disk.open(seg.name).data)
    positions = self._index(seg.base) or []
    if positions:
        k = len(positions) - 1
        h, problem = simlog.check(buf, positions[k], seg.base + k, seg.base, crc=False)
        if problem is not None or positions[k] + h.size != len(buf):
            positions = []
    seg.positions = positions


def test_checker_catches_recovery_that_falls_back_below_the_last_valid_batch(monkeypatch):
    monkeypatch.setattr(SimLog, "_open_flushed_checked", SimLog._open_flushed, raising=False)
    monkeypatch.setattr(SimLog, "_open_flushed", _open_flushed_before_issue_18)
    caught = []
    for seed in range(5):
        try:
            run_seed(seed)
        except InvariantViolation as e:
            caught.append(str(e))
    assert caught and all("below the end" in msg for msg in caught)


# Seeds where a follower that drops its damaged copy while still in the ISR is elected and
# makes the others drop committed records (found by running the swarm with on_local_damage
# ignoring ``in_isr``; refresh that way if the simulation's schedule changes).
HEAL_IN_ISR_LOSS_SEEDS = [36]


def test_checker_catches_a_follower_dropping_its_damaged_copy_while_in_the_isr(monkeypatch):
    fixed = FollowerFetchState.on_local_damage
    with monkeypatch.context() as m:
        m.setattr(FollowerFetchState, "on_local_damage", lambda self, log, offset, in_isr: fixed(self, log, offset, False))
        for seed in HEAL_IN_ISR_LOSS_SEEDS:
            with pytest.raises(InvariantViolation, match="truncates committed offset"):
                run_seed(seed)
    for seed in HEAL_IN_ISR_LOSS_SEEDS:
        run_seed(seed)
