"""Seed runner: ``python -m sim.txn.run --seeds N [--start S] [--verbose]``.

Runs seeds S..S+N-1 of the transaction coordinator simulation (sim.txn.world.run_seed); a failing
seed prints itself with the command that replays it exactly (``--verbose`` prints its trace),
and the exit status is 1."""

from __future__ import annotations

import argparse
import sys
import time

from sim.txn.world import InvariantViolation, run_seed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.txn.run", description=__doc__)
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--safety-ms", type=int, default=3000, help="virtual time with faults on, per seed")
    ap.add_argument("--verbose", action="store_true", help="print the event trace")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    failed, sim_ms, txns, committed, events = [], 0, 0, 0, 0
    for seed in range(args.start, args.start + args.seeds):
        try:
            r = run_seed(seed, safety_ms=args.safety_ms, trace=print if args.verbose else None)
        except InvariantViolation as e:
            print(f"FAIL {e}", flush=True)
            failed.append(seed)
            continue
        except Exception as e:  # a crash inside the core (an IllegalTransition) fails the seed too
            print(f"FAIL seed {seed}: {type(e).__name__}: {e}\n"
                  f"replay: python -m sim.txn.run --seeds 1 --start {seed} --verbose", flush=True)
            failed.append(seed)
            continue
        sim_ms += r.sim_ms
        txns += r.transactions
        committed += r.committed
        events += r.events
        if args.verbose:
            print(r)
    wall = time.perf_counter() - t0
    print(f"{args.seeds - len(failed)}/{args.seeds} seeds passed in {wall:.1f} s wall; {sim_ms / 1000:.0f} s simulated "
          f"({sim_ms / 1000 / max(wall, 1e-9):.0f} simulated s per wall s); {txns} transactions, {committed} "
          f"committed, {events} events")
    if failed:
        print("failed seeds:", " ".join(map(str, failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
