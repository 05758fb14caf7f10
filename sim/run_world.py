"""Whole-cluster seeds: ``python -m sim.run_world --seeds N [--start S]`` runs seeds S..S+N-1
(sim/scenario.py) and reports seeds per second and simulated seconds per wall second; a
failing seed prints the one command that replays it, and its fault schedule shrunk to the
faults it needs (``--only i,j``: replay with only those faults of the seed's schedule).

``--seed N --verbose`` replays one seed and prints its trace.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

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


def _one(job: tuple[int, float, list[int] | None]) -> tuple[int, float, str | None, float]:
    seed, safety_s, only = job
    cpu = time.process_time()
    try:
        r = run_seed(seed, safety_s=safety_s, faults=_faults(seed, safety_s, only))
    except Exception as e:  # noqa: BLE001 - a failed seed, reported
        return seed, 0.0, f"{type(e).__name__}: {e}", time.process_time() - cpu
    return seed, r.sim_s, None, time.process_time() - cpu


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
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    sim_s = 0.0
    failed = []
    if args.jobs > 1:
        import multiprocessing

        with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
            outcomes = {o[0]: o for o in pool.imap_unordered(_one, [(s, args.safety_s, only) for s in seeds],
                                                             chunksize=4)}
    else:
        outcomes = None
    for seed in seeds:
        plan = _faults(seed, args.safety_s, only)
        try:
            if outcomes is not None:
                _s, sim, err, _cpu = outcomes[seed]
                if err is not None:
                    raise RuntimeError(err)
                sim_s += sim
                continue
            r = run_seed(seed, safety_s=args.safety_s, faults=plan, verbose=args.verbose)
        except Exception as e:  # noqa: BLE001 - a failed seed, reported
            failed.append(seed)
            print(f"FAIL seed {seed}: {type(e).__name__}: {e}", flush=True)
            print(f"replay: python -m sim.run_world --seed {seed} --safety-s {args.safety_s}"
                  + (f" --mutation {args.mutation}" if args.mutation else "")
                  + (f" --only {args.only}" if args.only is not None else "") + " --verbose")
            if not args.no_shrink and only is None and plan:
                keep = shrink(seed, args.safety_s, plan)
                print(f"shrunk to {len(keep)} of {len(plan)} faults: "
                      + "; ".join(str(plan[i]) for i in keep))
                mut = f" --mutation {args.mutation}" if args.mutation else ""
                print(f"replay shrunk: python -m sim.run_world --seed {seed} --safety-s {args.safety_s}{mut} "
                      f"--only {','.join(map(str, keep))} --verbose")
            continue
        sim_s += r.sim_s
        if args.verbose:
            print(f"seed {seed}: ok, {r.acked} writes acknowledged, {r.consumed} consumed, {r.commits} offset "
                  f"commits, {r.steps} steps, "
                  f"faults: {'; '.join(map(str, r.faults))}")
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    if outcomes is not None:
        cpu = sum(o[3] for o in outcomes.values())
    ok = len(seeds) - len(failed)
    print(f"{ok}/{len(seeds)} whole-cluster seeds passed in {wall:.1f} s wall ({len(seeds) / wall:.2f} seeds/s); "
          f"{sim_s:.0f} s simulated ({sim_s / wall:.1f} simulated s per wall s); {cpu:.0f} CPU s "
          f"({len(seeds) / max(cpu, 1e-9):.2f} seeds per CPU s)")
    if failed:
        print("failed seeds:", " ".join(map(str, failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
