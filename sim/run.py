"""Seed runner: ``python -m sim.run --seeds N [--start S] [--jobs J] [--verbose]``.

Runs seeds S..S+N-1 of the swarm simulation (sim.quorum.run_seed: the real Raft driver and transport) through sim/runner.py; a
failing seed prints itself with the command that replays it exactly, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from sim.quorum import LIVENESS_BOUND_MS, run_seed
from sim.runner import report, run_seeds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.run", description=__doc__)
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--safety-ms", type=int, default=8000, help="virtual time with faults on, per seed")
    ap.add_argument("--verbose", action="store_true", help="print the event trace")
    ap.add_argument("--dynamic", action="store_true", help="a KIP-853 quorum whose voters change during the run")
    ap.add_argument("--mutation", help="re-introduce a known past bug (sim/mutations.py) to see it caught")
    args = ap.parse_args(argv)
    if args.mutation:
        import pytest

        from sim.mutations import MUTATIONS
        MUTATIONS[args.mutation](pytest.MonkeyPatch())

    def one(seed: int) -> tuple[float, dict]:
        r = run_seed(seed, safety_ms=args.safety_ms, verbose=args.verbose, dynamic=args.dynamic)
        if args.verbose:
            print(r)
        return r.sim_ms / 1000, {"_recovery_ms": r.recovery_ms}
    t0 = time.perf_counter()
    outcomes = run_seeds(list(range(args.start, args.start + args.seeds)), one, args.jobs)
    dynamic = (" --dynamic" if args.dynamic else "") + (f" --mutation {args.mutation}" if args.mutation else "")
    status = report("swarm", outcomes, time.perf_counter() - t0,
                    lambda s: f"python -m sim.run --seeds 1 --start {s} --safety-ms {args.safety_ms}{dynamic} --verbose")
    rec = sorted(o.stats["_recovery_ms"] for o in outcomes if o.error is None)
    if rec:
        print(f"recovery after healing: median {statistics.median(rec)} ms, max {rec[-1]} ms "
              f"(bound {LIVENESS_BOUND_MS} ms)")
    return status
if __name__ == "__main__":
    sys.exit(main())
