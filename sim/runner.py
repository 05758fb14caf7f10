"""The one seed runner of the simulations (``sim.run_world``, ``sim.txn.run``, ``sim.txn_log.run``,
``sim.run``): runs seeds, in worker processes when asked (seeds are independent; the workers
are forked from a parent that has run the first seed itself, so its imports, the codec's
schemas and every other lazily built table are made once and shared), and reports how many passed, seeds
per second, simulated seconds per wall second and CPU; each failing seed is printed with the one
command that replays it.

A simulation gives ``run_one(seed) -> (simulated seconds, {counter: n})``; an exception fails the
seed. Totals of the counters are printed with the summary.
"""

from __future__ import annotations

import dataclasses
import gc
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


_COLLECT_EVERY = 8  # seeds between two collections (each seed leaves ~10-20 MB of cyclic garbage)
_since_collect = 0


def _run(seed: int) -> Outcome:
    """One seed, with the cyclic garbage collector off while it runs, and one collection every
    ``_COLLECT_EVERY`` seeds: a seed makes ~10-20 MB of cyclic garbage, and collecting it once
    costs ~0.02-0.05 s where the collector's passes during the run cost ~10-20% of the seed (the
    objects that outlive seeds, modules and caches, are frozen out of its sight by ``_settle``)."""
    cpu = time.process_time()
    gc.disable()
    try:
        sim_s, stats = _RUN_ONE(seed)
    except Exception as e:  # noqa: BLE001 - an invariant, or a crash inside the code: the seed failed
        return Outcome(seed, error=f"{type(e).__name__}: {e}", cpu_s=_collect(cpu))
    return Outcome(seed, sim_s, None, _collect(cpu), stats)


def _collect(cpu: float) -> float:
    global _since_collect
    _since_collect += 1
    if _since_collect >= _COLLECT_EVERY:  # (off between seeds too: a young-generation pass would
        _since_collect = 0                 # walk every object the seed left, as a full one does)
        gc.collect()
    return time.process_time() - cpu


def _settle() -> None:
    """What this process holds now lives as long as it does: out of the collector's sight."""
    gc.collect()
    gc.freeze()


def run_seeds(seeds: list[int], run_one: Callable[[int], tuple[float, dict]], jobs: int = 1,
              on_outcome: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Each seed's outcome, in seed order; ``on_outcome`` sees each as it comes (in a worker pool:
    in the order they finish)."""
    global _RUN_ONE
    _RUN_ONE = run_one
    out: list[Outcome] = []
    if jobs > 1 and len(seeds) > 1:
        import multiprocessing

        # the first seed here: the workers inherit what it warmed up (copy-on-write)
        first = _run(seeds[0])
        out.append(first)
        if on_outcome is not None:
            on_outcome(first)
        _settle()
        rest = seeds[1:]
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            for o in pool.imap_unordered(_run, rest, chunksize=max(1, min(8, len(rest) // (jobs * 8)))):
                out.append(o)
                if on_outcome is not None:
                    on_outcome(o)
        gc.enable()
        order = {s: i for i, s in enumerate(seeds)}
        out.sort(key=lambda o: order[o.seed])
        return out
    try:
        for i, seed in enumerate(seeds):
            o = _run(seed)
            if i == 0:
                _settle()
            out.append(o)
            if on_outcome is not None:
                on_outcome(o)
    finally:
        gc.enable()
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
