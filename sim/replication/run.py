"""Seed runner: ``python -m sim.replication.run --seeds N [--start S] [--rf 3|5] [--verbose]``.

Runs seeds S..S+N-1 of the replication simulation; a failing seed prints itself with the
command that replays it exactly, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

from sim.replication.world import Config, InvariantViolation, World


def make_config(seed: int, rf: int | None, overrides: dict) -> Config | None:
    import random

    if rf is None and not overrides:
        return None
    cfg = Config.swarm(random.Random(seed * 7919 + 1), rf=rf)
    return dataclasses.replace(cfg, **overrides)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.replication.run", description=__doc__)
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--rf", type=int, choices=(3, 5), default=None, help="default: chosen per seed")
    ap.add_argument("--verbose", action="store_true", help="print the event trace")
    ap.add_argument("--no-unclean-shutdown-detection", action="store_true",
                    help="controller keeps restarted brokers in the ISR (pre KIP-966 behaviour)")
    ap.add_argument("--no-broker-epochs", action="store_true", help="AlterPartition without KIP-903 checks")
    ap.add_argument("--hw-over-committed-isr", action="store_true",
                    help="HW ignores a pending ISR expansion (not KIP-497's maximal ISR)")
    ap.add_argument("--strict-durability", action="store_true",
                    help="fail when an acked write is lost while a member of its ack-time ISR kept it")
    ap.add_argument("--no-disk-faults", action="store_true",
                    help="no torn tails after clean stops and no bad blocks (the earlier disk model)")
    args = ap.parse_args(argv)
    overrides = {}
    flags = ""
    if args.no_unclean_shutdown_detection:
        overrides["unclean_shutdown_detection"] = False
        flags += " --no-unclean-shutdown-detection"
    if args.no_broker_epochs:
        overrides["check_broker_epochs"] = False
        flags += " --no-broker-epochs"
    if args.hw_over_committed_isr:
        overrides["hw_over_maximal_isr"] = False
        flags += " --hw-over-committed-isr"
    if args.strict_durability:
        overrides["strict_durability"] = True
        flags += " --strict-durability"
    if args.no_disk_faults:
        overrides["disk_faults"] = False
        flags += " --no-disk-faults"
    if args.rf:
        flags += f" --rf {args.rf}"
    t0 = time.perf_counter()
    failed = []
    acked = excused = faults = lost_everywhere = 0
    for seed in range(args.start, args.start + args.seeds):
        cfg = make_config(seed, args.rf, overrides)
        try:
            r = World(seed, cfg, trace=print if args.verbose else None).run()
        except Exception as e:  # an invariant, or a crash inside the core: the seed failed
            kind = "" if isinstance(e, InvariantViolation) else f"{type(e).__name__}: "
            print(f"FAIL seed {seed}: {kind}{e}\n"
                  f"replay: python -m sim.replication.run --seeds 1 --start {seed}{flags} --verbose", flush=True)
            failed.append(seed)
            continue
        acked += r.acked
        excused += r.excused
        faults += r.faults
        lost_everywhere += r.lost_everywhere
    dt = time.perf_counter() - t0
    print(f"{args.seeds - len(failed)}/{args.seeds} seeds passed in {dt:.1f}s: {acked} acked writes, "
          f"{faults} faults, {excused} records lost by every ISR member in power losses or to bad blocks "
          f"(permitted); {lost_everywhere} runs stuck at a record whose last copy a bad block took (no "
          f"liveness promised)")
    if failed:
        print(f"failed seeds: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
