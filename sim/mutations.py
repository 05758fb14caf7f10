"""Known past bugs, re-introduced on demand into the real code, to show that the whole-cluster
simulation finds them (tests/sim_world/test_mutations.py; ``python -m sim.run_world
--mutation NAME``). Each is applied with a ``pytest.MonkeyPatch``-like object (``setattr``)
and undone with it.

A mutation given as source text is applied to the function's own source (as mutation-testing
tools do): the function is compiled again from its source with ``old`` replaced by ``new``, in
its module's globals, so the rest of the real code stays as it is.
"""

from __future__ import annotations

import inspect
import textwrap


def mutate_function(mp, owner, name: str, old: str, new: str) -> None:
    func = getattr(owner, name)
    src = textwrap.dedent(inspect.getsource(func))
    if old not in src:
        raise ValueError(f"{owner.__name__}.{name} no longer contains {old!r}: update the mutation")
    ns: dict = {}
    exec(compile(src.replace(old, new, 1), inspect.getsourcefile(func), "exec"), func.__globals__, ns)  # noqa: S102
    mp.setattr(owner, name, ns[name])


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


def inflight_fetch_after_leader(mp) -> None:
    """A follower's fetch that was in flight when the broker became the partition's leader is
    applied anyway (its truncation or append lands on the new leader's log)."""
    from broker.replica.fetcher import ReplicaFetcherManager
    mutate_function(mp, ReplicaFetcherManager, "apply", "if not current():\n", "if False:\n")


def hw_ignores_pending_isr_expansion(mp) -> None:
    """KIP-497: the HW is computed over the committed ISR, not the maximal one, so a replica
    being added is not waited for (the lost ISR expansion)."""
    from broker.replica.partition import PartitionState
    mp.setattr(PartitionState, "maximal_isr", property(lambda self: self.isr))


MUTATIONS = {f.__name__: f for f in (wall_clock_sessions, vote_twice, vote_for_stale_log, inflight_fetch_after_leader,
                                      hw_ignores_pending_isr_expansion)}
