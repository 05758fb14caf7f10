"""Seed runner: ``python -m sim.txn_log.run --seeds N [--start S] [--verbose]``.

Runs seeds S..S+N-1 of the transactional data-plane simulation (``world.py``); a failing seed
prints itself with the command that replays it, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from sim.txn_log.world import InvariantViolation, World


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.txn_log.run", description=__doc__)
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--verbose", action="store_true", help="print the event trace")
    args = ap.parse_args(argv)
    if not args.verbose:  # the logs' own warnings (indexes rebuilt after a kill -9) are expected here
        logging.disable(logging.WARNING)
    t0 = time.monotonic()
    totals: dict[str, int] = {}
    for seed in range(args.start, args.start + args.seeds):
        w = World(seed, trace=print if args.verbose else None)
        try:
            stats = w.run()
        except InvariantViolation as e:
            print(f"seed {seed}: {e}\n  replay: python -m sim.txn_log.run --seeds 1 --start {seed} --verbose")
            return 1
        for k, v in stats.items():
            totals[k] = totals.get(k, 0) + v
    print(f"{args.seeds} seeds ok in {time.monotonic() - t0:.1f}s: " + ", ".join(f"{k} {v}" for k, v in totals.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
