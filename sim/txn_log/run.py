"""Seed runner: ``python -m sim.txn_log.run --seeds N [--start S] [--jobs J] [--verbose]``.

Runs seeds S..S+N-1 of the transactional data-plane simulation (``world.py``) through
sim/runner.py; a failing seed prints itself with the command that replays it, and the exit
status is 1.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from sim.runner import report, run_seeds
from sim.txn_log.world import World


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.txn_log.run", description=__doc__)
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--verbose", action="store_true", help="print the event trace")
    args = ap.parse_args(argv)
    if not args.verbose:  # the logs' own warnings (indexes rebuilt after a kill -9) are expected here
        logging.disable(logging.WARNING)

    def one(seed: int) -> tuple[float, dict]:
        stats = World(seed, trace=print if args.verbose else None).run()
        return 0.0, {k: v for k, v in stats.items() if k != "leo"}  # (steps, not simulated seconds)
    t0 = time.perf_counter()
    outcomes = run_seeds(list(range(args.start, args.start + args.seeds)), one, args.jobs)
    return report("transactional data-plane", outcomes, time.perf_counter() - t0,
                  lambda s: f"python -m sim.txn_log.run --seeds 1 --start {s} --verbose")


if __name__ == "__main__":
    sys.exit(main())
