"""Seed runner: ``python -m sim.txn.run --seeds N [--start S] [--jobs J] [--verbose]``.

Runs seeds S..S+N-1 of the transaction coordinator simulation (sim.txn.world.run_seed) through
sim/runner.py; a failing seed prints itself with the command that replays it exactly
(``--verbose`` prints its trace), and the exit status is 1."""

from __future__ import annotations

import argparse
import sys
import time

from sim.runner import report, run_seeds
from sim.txn.world import run_seed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.txn.run", description=__doc__)
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--safety-ms", type=int, default=3000, help="virtual time with faults on, per seed")
    ap.add_argument("--verbose", action="store_true", help="print the event trace")
    args = ap.parse_args(argv)

    def one(seed: int) -> tuple[float, dict]:
        r = run_seed(seed, safety_ms=args.safety_ms, trace=print if args.verbose else None)
        if args.verbose:
            print(r)
        return r.sim_ms / 1000, {"transactions": r.transactions, "committed": r.committed, "events": r.events}
    t0 = time.perf_counter()
    outcomes = run_seeds(list(range(args.start, args.start + args.seeds)), one, args.jobs)
    return report("transaction coordinator", outcomes, time.perf_counter() - t0,
                  lambda s: f"python -m sim.txn.run --seeds 1 --start {s} --safety-ms {args.safety_ms} --verbose")


if __name__ == "__main__":
    sys.exit(main())
