"""Known past bugs, re-introduced on demand into the real code, to show that the whole-cluster
simulation finds them (tests/sim_world/test_mutations.py; ``python -m sim.run_world
--mutation NAME``). Each is applied with a ``pytest.MonkeyPatch``-like object (``setattr``)
and undone with it.
"""

from __future__ import annotations


def wall_clock_sessions(mp) -> None:
    """controller/loop.py timed broker sessions with time.time() (a wall-clock step fenced
    every broker, or kept dead ones alive)."""
    from controller.loop import QuorumController
    mp.setattr(QuorumController, "_now_ms", lambda self: self.clock.wall_ms())


def vote_twice(mp) -> None:
    """A voter forgets its vote and grants a second candidate in the same epoch."""
    from raft.core import RaftCore
    orig = RaftCore._on_vote_request

    def forgetful(self, m, now_ms):
        self.voted_for = None
        orig(self, m, now_ms)
    mp.setattr(RaftCore, "_on_vote_request", forgetful)


def vote_for_stale_log(mp) -> None:
    """A voter grants its vote without comparing logs (Raft's election restriction)."""
    from raft.core import RaftCore
    mp.setattr(RaftCore, "_log_up_to_date", lambda self, last_epoch, log_end: True)


MUTATIONS = {f.__name__: f for f in (wall_clock_sessions, vote_twice, vote_for_stale_log)}
