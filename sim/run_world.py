"""Whole-cluster seeds: ``python -m sim.run_world --seeds N [--start S]`` runs seeds S..S+N-1
(sim/scenario.py) through sim/runner.py (``--jobs J``: worker processes) and reports seeds per
second and simulated seconds per wall second; a
failing seed prints the one command that replays it, and its fault schedule shrunk to the
faults it needs (``--only i,j``: replay with only those faults of the seed's schedule).

``--seed N --verbose`` replays one seed and prints its trace.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from sim.runner import report, run_seeds
from sim.scenario import run_seed, schedule
from sim.world import Settings


def _faults(seed: int, safety_s: float, only: list[int] | None):
    s = Settings()
    ids = list(range(1, s.controllers + s.brokers + 1))
    plan = schedule(seed, ids, ids[:s.controllers], safety_s)
    return plan if only is None else [plan[i] for i in only]


def fails(seed: int, safety_s: float, faults) -> BaseException | None:
    try:
        run_seed(seed, safety_s=safety_s, faults=faults)
    except Exception as e:  # noqa: BLE001 - any failure of the seed
        return e
    return None


def shrink(seed: int, safety_s: float, plan) -> list[int]:
    """Indices of a smallest-found subset of ``plan`` with which the seed still fails
    (one fault removed at a time while it keeps failing)."""
    keep = list(range(len(plan)))
    changed = True
    while changed and len(keep) > 0:
        changed = False
        for i in list(keep):
            trial = [j for j in keep if j != i]
            if fails(seed, safety_s, [plan[j] for j in trial]) is not None:
                keep = trial
                changed = True
    return keep


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.run_world", description=__doc__)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--seed", type=int, help="replay this one seed")
    ap.add_argument("--only", help="comma-separated indices of the seed's faults to keep")
    ap.add_argument("--safety-s", type=float, default=12.0, help="virtual seconds of faults per seed")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (seeds are independent)")
    ap.add_argument("--mutation", help="re-introduce a known past bug (sim/mutations.py) to see it caught")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.CRITICAL,
                        format="%(name)s %(message)s")
    if not args.verbose:
        logging.disable(logging.CRITICAL)
    if args.mutation:
        import pytest

        from sim.mutations import MUTATIONS
        MUTATIONS[args.mutation](pytest.MonkeyPatch())
    seeds = [args.seed] if args.seed is not None else list(range(args.start, args.start + args.seeds))
    only = [int(x) for x in args.only.split(",") if x] if args.only is not None else None
    mut = f" --mutation {args.mutation}" if args.mutation else ""

    def one(seed: int) -> tuple[float, dict]:
        r = run_seed(seed, safety_s=args.safety_s, faults=_faults(seed, args.safety_s, only), verbose=args.verbose)
        if args.verbose:
            print(f"seed {seed}: ok, {r.acked} writes acknowledged, {r.consumed} consumed, {r.commits} offset "
                  f"commits, {r.steps} steps, faults: {'; '.join(map(str, r.faults))}")
        return r.sim_s, {"writes acknowledged": r.acked, "offset commits": r.commits,
                         "partition log writes failed": r.disk_failures}
    t0 = time.perf_counter()
    outcomes = run_seeds(seeds, one, args.jobs)
    status = report("whole-cluster", outcomes, time.perf_counter() - t0,
                    lambda s: f"python -m sim.run_world --seed {s} --safety-s {args.safety_s}{mut}"
                              + (f" --only {args.only}" if args.only is not None else "") + " --verbose")
    for o in outcomes:
        plan = _faults(o.seed, args.safety_s, only)
        if o.error is None or args.no_shrink or only is not None or not plan:
            continue
        keep = shrink(o.seed, args.safety_s, plan)
        print(f"seed {o.seed} shrunk to {len(keep)} of {len(plan)} faults: " + "; ".join(str(plan[i]) for i in keep))
        print(f"replay shrunk: python -m sim.run_world --seed {o.seed} --safety-s {args.safety_s}{mut} "
              f"--only {','.join(map(str, keep))} --verbose")
    return status

if __name__ == "__main__":
    sys.exit(main())
