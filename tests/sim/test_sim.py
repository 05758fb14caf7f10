"""The seeded swarm simulation: safety invariants after every event, liveness after healing."""

from __future__ import annotations

import pytest

from raft.core import RaftCore
from sim.cluster import InvariantViolation, Sim, run_seed

SEEDS = 200
CHUNK = 20


@pytest.mark.parametrize("start", range(0, SEEDS, CHUNK))
def test_swarm_seeds_keep_invariants_and_recover(start):
    for seed in range(start, start + CHUNK):
        run_seed(seed)


def test_a_seed_replays_exactly():
    def trace(seed):
        lines: list[str] = []
        sim = Sim(seed, n_voters=5, n_observers=1, trace=lines.append)
        sim.run_until(6000)
        return lines, sorted(sim.committed.items()), sim.events_run

    assert trace(11) == trace(11)
    assert trace(11) != trace(12)


def test_checker_catches_a_voter_that_votes_twice_in_an_epoch(monkeypatch):
    orig = RaftCore._on_vote_request

    def forgetful(self, m, now_ms):
        self.voted_for = None  # the bug: the vote is forgotten
        orig(self, m, now_ms)

    monkeypatch.setattr(RaftCore, "_on_vote_request", forgetful)
    with pytest.raises(InvariantViolation, match="two leaders in epoch|committed"):
        for seed in range(60):
            run_seed(seed)


def test_checker_catches_votes_for_stale_logs(monkeypatch):
    monkeypatch.setattr(RaftCore, "_log_up_to_date", lambda self, last_epoch, log_end: True)
    with pytest.raises((InvariantViolation, AssertionError)):
        for seed in range(60):
            run_seed(seed)


def test_run_cli_reports_pass(capsys):
    from sim.run import main

    assert main(["--seeds", "3", "--start", "500"]) == 0
    out = capsys.readouterr().out
    assert "3/3 seeds passed" in out


DYNAMIC_SEEDS = 200


@pytest.mark.parametrize("start", range(0, DYNAMIC_SEEDS, 50))
def test_dynamic_quorum_seeds_keep_invariants_and_recover(start):
    # KIP-853: the leader is asked every 100 ms-1 s to add an observer or remove a voter, under the
    # same faults; the voter set in force decides every high watermark
    for seed in range(start, start + 50):
        run_seed(seed, dynamic=True)


def test_a_cut_off_leader_removed_from_the_voters_catches_up_after_its_check_quorum():
    # seed 337: voter 1, removed by leader 2 (not yet committed), is elected in epoch 2 by the
    # third voter; dropped fetches make 2 and 3 elect 2 in epoch 3, whose voter set lacks 1, so
    # 1 hears of it only when its check-quorum (3 s) makes it resign, after the heal; then it
    # catches up. The final check used to allow 3 s in all.
    run_seed(337, dynamic=True)


def test_checker_catches_a_removed_leader_that_still_counts_itself(monkeypatch):
    from raft.core import Role

    orig = RaftCore._update_hw

    def counts_itself(self, now_ms):
        saved = self.voters
        if self.role is Role.LEADER and self.id not in self.voters:  # the bug: the old voter set
            self.voters = tuple(sorted({*self.voters, self.id}))
        try:
            orig(self, now_ms)
        finally:
            self.voters = saved

    monkeypatch.setattr(RaftCore, "_update_hw", counts_itself)
    with pytest.raises(InvariantViolation, match="not durable on a majority"):
        for seed in range(60):
            run_seed(seed, dynamic=True)
