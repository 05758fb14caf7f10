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
