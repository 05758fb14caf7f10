"""Seed runner: ``python -m sim.run --seeds N [--start S] [--verbose]``.

Runs seeds S..S+N-1 of the swarm simulation (sim.cluster.run_seed); a failing seed prints
itself with the command that replays it exactly, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from sim.cluster import LIVENESS_BOUND_MS, InvariantViolation, run_seed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.run", description=__doc__)
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--safety-ms", type=int, default=8000, help="virtual time with faults on, per seed")
    ap.add_argument("--verbose", action="store_true", help="print the event trace")
    ap.add_argument("--dynamic", action="store_true", help="a KIP-853 quorum whose voters change during the run")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    failed = []
    sim_ms = 0
    recoveries = []
    for seed in range(args.start, args.start + args.seeds):
        try:
            r = run_seed(seed, safety_ms=args.safety_ms, verbose=args.verbose, dynamic=args.dynamic)
        except InvariantViolation as e:
            print(f"FAIL {e}", flush=True)
            failed.append(seed)
            continue
        except Exception as e:  # a crash inside the core is a failure of that seed too
            print(f"FAIL seed {seed}: {type(e).__name__}: {e}\n"
                  f"replay: python -m sim.run --seeds 1 --start {seed} --verbose", flush=True)
            failed.append(seed)
            continue
        sim_ms += r.sim_ms
        recoveries.append(r.recovery_ms)
        if args.verbose:
            print(r)
    wall = time.perf_counter() - t0
    ok = args.seeds - len(failed)
    rec = sorted(recoveries)
    print(f"{ok}/{args.seeds} seeds passed in {wall:.1f} s wall; {sim_ms / 1000:.0f} s simulated "
          f"({sim_ms / 1000 / max(wall, 1e-9):.0f} simulated s per wall s)")
    if rec:
        print(f"recovery after healing: median {statistics.median(rec)} ms, max {rec[-1]} ms "
              f"(bound {LIVENESS_BOUND_MS} ms)")
    if failed:
        print("failed seeds:", " ".join(map(str, failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
