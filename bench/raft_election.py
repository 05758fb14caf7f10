"""Election time after kill -9 of the leader of a real 3-voter quorum on loopback.

    python bench/raft_election.py [--trials 20] [--override key=value ...]

Each trial: find the leader (DescribeQuorum), commit a record through it, kill -9 it,
then poll the survivors' DescribeQuorum every 2 ms until one of them leads a newer epoch
*and* has committed in it (its high watermark is known, i.e. its leader-change record is
on a majority) -- "from the kill to the first commit in the new epoch". The killed node
is restarted and allowed to catch up before the next trial. Default Kafka timeouts
(controller.quorum.election.timeout.ms=1000, fetch.timeout.ms=2000) unless overridden.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from raft.testnode import ProcessQuorum  # noqa: E402


def percentile(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100 * (len(xs) - 1)))))
    return xs[k]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--override", action="append", default=[], help="server.properties key=value")
    ap.add_argument("--pause", action="store_true",
                    help="SIGSTOP the leader instead of kill -9: a silent leader, found only by the fetch timeout")
    args = ap.parse_args(argv)
    overrides = dict(o.split("=", 1) for o in args.override)
    times: list[float] = []
    with tempfile.TemporaryDirectory(prefix="raft-election-") as work:
        q = ProcessQuorum(work, 3, overrides)
        q.start_all()
        try:
            for trial in range(args.trials):
                leader, epoch = q.wait_leader(timeout=30)
                r = q.put(leader, f"trial{trial}", "before-kill")
                if r is None or r.error != 0:
                    time.sleep(0.2)
                    continue
                # Every survivor has applied the record, so any of them may win.
                for nid in q.alive():
                    while (g := q.get(nid)) is None or g.applied_end <= r.offset:
                        time.sleep(0.01)
                t0 = time.perf_counter()
                if args.pause:
                    os.killpg(q.procs[leader][0].pid, signal.SIGSTOP)
                else:
                    q.kill(leader)
                new_leader, new_epoch = q.wait_leader(timeout=30, min_epoch=epoch + 1, poll_s=0.002)
                dt = time.perf_counter() - t0
                times.append(dt)
                got = q.get(new_leader)
                assert got is not None and got.items.get(f"trial{trial}") == "before-kill", "committed entry lost"
                print(f"trial {trial:>2}: leader {leader} (epoch {epoch}) {'paused' if args.pause else 'killed'} -> leader {new_leader} "
                      f"(epoch {new_epoch}) committed after {dt * 1000:.0f} ms", flush=True)
                if args.pause:
                    q.kill(leader)
                q.start(leader)
                while (g := q.get(leader)) is None or g.applied_end <= r.offset:
                    time.sleep(0.02)
        finally:
            q.close()
    if not times:
        print("no successful trial")
        return 1
    ms = [t * 1000 for t in times]
    print(f"\n{len(ms)} trials: median {statistics.median(ms):.0f} ms, p99 {percentile(ms, 99):.0f} ms, "
          f"min {min(ms):.0f} ms, max {max(ms):.0f} ms "
          f"({'SIGSTOP' if args.pause else 'kill -9'} -> first commit in the new epoch)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
