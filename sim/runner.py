"""The one seed runner of the simulations (``sim.run_world``, ``sim.txn.run``, ``sim.txn_log.run``,
``sim.run``): runs seeds, in worker processes when asked (seeds are independent; the workers
are forked after the imports, so each pays for them once), and reports how many passed, seeds
per second, simulated seconds per wall second and CPU; each failing seed is printed with the one
command that replays it.

A simulation gives ``run_one(seed) -> (simulated seconds, {counter: n})``; an exception fails the
seed. Totals of the counters are printed with the summary.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable


@dataclasses.dataclass
class Outcome:
    seed: int
    sim_s: float = 0.0
    error: str | None = None
    cpu_s: float = 0.0
    stats: dict = dataclasses.field(default_factory=dict)


_RUN_ONE: Callable[[int], tuple[float, dict]] | None = None  # the job of forked workers


def _run(seed: int) -> Outcome:
    cpu = time.process_time()
    try:
        sim_s, stats = _RUN_ONE(seed)
    except Exception as e:  # noqa: BLE001 - an invariant, or a crash inside the code: the seed failed
        return Outcome(seed, error=f"{type(e).__name__}: {e}", cpu_s=time.process_time() - cpu)
    return Outcome(seed, sim_s, None, time.process_time() - cpu, stats)


def run_seeds(seeds: list[int], run_one: Callable[[int], tuple[float, dict]], jobs: int = 1,
              on_outcome: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Each seed's outcome, in seed order; ``on_outcome`` sees each as it comes (in a worker pool:
    in the order they finish)."""
    global _RUN_ONE
    _RUN_ONE = run_one
    out: list[Outcome] = []
    if jobs > 1 and len(seeds) > 1:
        import multiprocessing

        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            for o in pool.imap_unordered(_run, seeds, chunksize=max(1, min(8, len(seeds) // (jobs * 8)))):
                out.append(o)
                if on_outcome is not None:
                    on_outcome(o)
        out.sort(key=lambda o: seeds.index(o.seed))
        return out
    for seed in seeds:
        o = _run(seed)
        out.append(o)
        if on_outcome is not None:
            on_outcome(o)
    return out


def report(what: str, outcomes: list[Outcome], wall_s: float, replay: Callable[[int], str]) -> int:
    """Prints each failure with its replay command and the summary; the exit status (1: a seed failed)."""
    failed = [o for o in outcomes if o.error is not None]
    for o in failed:
        print(f"FAIL seed {o.seed}: {o.error}\nreplay: {replay(o.seed)}", flush=True)
    n = len(outcomes)
    sim_s = sum(o.sim_s for o in outcomes)
    cpu = sum(o.cpu_s for o in outcomes)
    totals: dict[str, int] = {}
    for o in outcomes:
        for k, v in o.stats.items():
            if not k.startswith("_"):  # (private to the simulation's own summary)
                totals[k] = totals.get(k, 0) + v
    simulated = f"{sim_s:.0f} s simulated ({sim_s / max(wall_s, 1e-9):.1f} simulated s per wall s); " if sim_s else ""
    print(f"{n - len(failed)}/{n} {what} seeds passed in {wall_s:.1f} s wall ({n / max(wall_s, 1e-9):.2f} seeds/s); "
          f"{simulated}{cpu:.1f} CPU s ({n / max(cpu, 1e-9):.2f} seeds per CPU s)"
          + "".join(f"; {v} {k}" for k, v in totals.items()))
    if failed:
        print("failed seeds:", " ".join(str(o.seed) for o in failed))
    return 1 if failed else 0
