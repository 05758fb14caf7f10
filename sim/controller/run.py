"""Seed runner: ``python -m sim.controller.run --seeds N [--start S] [--verbose] [--stale-image]``.

Runs seeds S..S+N-1 of the controller simulation; a failing seed prints itself with the
command that replays it, and the exit status is 1. ``--stale-image`` lets a new leader act
before it has applied its predecessors' entries (the bug the driver now prevents), to show
what the simulation catches.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time

from sim.cluster import InvariantViolation
from sim.controller.world import run_seed, swarm


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.controller.run", description=__doc__)
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--verbose", action="store_true", help="print the event trace")
    ap.add_argument("--stale-image", action="store_true", help="controllers act before catching up (pre-fix)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    failed, results = [], []
    for seed in range(args.start, args.start + args.seeds):
        settings = None
        if args.stale_image:
            settings = dataclasses.replace(swarm(seed)[0], wait_for_epoch_start=False)
        try:
            results.append(run_seed(seed, verbose=args.verbose, settings=settings))
        except InvariantViolation as e:
            failed.append(seed)
            print(f"FAIL {e}", flush=True)
    took = time.perf_counter() - t0
    if results:
        rec = [x.recovery_ms for x in results]
        print(f"{len(results)} seeds passed, {len(failed)} failed in {took:.1f} s; "
              f"{sum(x.topics_created for x in results)} topics created of {sum(x.create_attempts for x in results)} "
              f"attempts, {sum(x.controller_changes for x in results)} controller activations, "
              f"{sum(x.graceful_stops for x in results)} controlled shutdowns; recovery after healing "
              f"median {statistics.median(rec):.0f} ms, max {max(rec)} ms")
    else:
        print(f"all {len(failed)} seeds failed in {took:.1f} s")
    if failed:
        print("failed seeds:", " ".join(map(str, failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
