"""The seeded Raft-quorum simulation (sim/quorum.py: the real raft/driver.py and raft/transport.py
on the deterministic loop): safety invariants after every step, liveness after healing."""

from __future__ import annotations

import pytest

from raft.core import RaftCore
from sim.mutations import MUTATIONS
from sim.quorum import InvariantViolation, QuorumSim, run_seed

SEEDS = 200
CHUNK = 20


@pytest.mark.parametrize("start", range(0, SEEDS, CHUNK))
def test_swarm_seeds_keep_invariants_and_recover(start):
    for seed in range(start, start + CHUNK):
        run_seed(seed)


def test_a_seed_replays_exactly():
    def trace(seed):
        lines: list[str] = []
        sim = QuorumSim(seed, n_voters=5, n_observers=1, trace=lines.append, dynamic=True, membership_every_ms=300)
        sim.faults.move_weight = 1.0
        try:
            sim.run_until(6000)
            return lines, sorted(sim.committed.items()), sim.loop.steps
        finally:
            sim.close()

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
    assert "3/3 swarm seeds passed" in out


DYNAMIC_SEEDS = 200


@pytest.mark.parametrize("start", range(0, DYNAMIC_SEEDS, 50))
def test_dynamic_quorum_seeds_keep_invariants_and_recover(start):
    # KIP-853: the leader is asked every 100 ms-1 s to add an observer or remove a voter, under the
    # same faults; the voter set in force decides every high watermark
    for seed in range(start, start + 50):
        run_seed(seed, dynamic=True)


def test_a_cut_off_leader_removed_from_the_voters_catches_up_after_its_check_quorum():
    # seed 337 of the core-only simulation this one replaced: voter 1, removed by an uncommitted
    # record, was elected by the third voter; the others elected a leader whose voter set lacks 1,
    # so 1 heard of it only when its check-quorum (1.5 x the fetch timeout) made it resign, after
    # the heal: run_seed's final catch-up window allows for that. (The same seed number draws
    # another schedule now; it stays as one more dynamic seed.)
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


def test_a_metadata_log_survives_a_timed_out_voter_change_followed_by_a_snapshot():
    # seed 87 of --dynamic (found when the seeds began to run the real driver): a voter change
    # times out on the leader (its waiter's future is cancelled), the node then loads a snapshot
    # covering the change's offset, and the driver set an exception on the cancelled future:
    # InvalidStateError ended the metadata log (the controller process stopped)
    run_seed(87, dynamic=True)


MOVE_SEEDS = (19, 22, 93)


def test_checker_catches_a_leader_that_sends_no_endpoints(monkeypatch):
    # task 1's race (KIP-853 leader endpoints): a voter that has not fetched the voters record of
    # another voter's move must reach it, once it leads, at its new listener
    with monkeypatch.context() as mp:
        MUTATIONS["no_leader_endpoints"](mp)
        caught = None
        for seed in MOVE_SEEDS:
            try:
                run_seed(seed, dynamic=True)
            except InvariantViolation as e:
                caught = seed
                assert "applied only up to" in str(e) or "no leader committed" in str(e), e
                break
        assert caught is not None, f"no_leader_endpoints went unnoticed in seeds {MOVE_SEEDS}"
    run_seed(caught, dynamic=True)  # the same seed passes on the real code
