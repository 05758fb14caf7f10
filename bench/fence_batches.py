"""CPU of fencing one broker of many partitions on the controller: the whole fence in one write
(what the controller did before) against the batches of FENCE_RECORDS_PER_BATCH records it writes
now, one per loop turn (controller/cluster.py fence_stale_brokers_batch).

    .venv/bin/python bench/fence_batches.py [partitions]     # default 18000, RF 3 on 3 brokers
"""

from __future__ import annotations

import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests", "unit", "controller")]

from controller_testkit import apply, endpoint, incarnation, with_topic  # noqa: E402

from controller import cluster as cc  # noqa: E402
from metadata.image import EMPTY  # noqa: E402

TIMEOUT = cc.DEFAULT_SESSION_TIMEOUT_MS


def main() -> None:
    partitions = int(sys.argv[1]) if len(sys.argv) > 1 else 18000
    img, state = EMPTY, cc.ClusterState()
    for bid in (1, 2, 3):
        recs, _ = cc.register_broker(img, state, bid, incarnation(bid), endpoint(bid), None, 0, TIMEOUT)
        img = apply(img, recs)
    for bid in (1, 2, 3):
        recs, _ = cc.heartbeat(img, state, bid, img.brokers[bid].epoch, 0, img.offset, False, False)
        img = apply(img, recs)
    for t in range(partitions // 100):
        img = with_topic(img, f"t{t:04d}", {p: ((1, 2, 3), (2, 3, 1), (3, 1, 2))[p % 3] for p in range(100)})
    for bid in (2, 3):  # broker 1 stops heartbeating
        recs, _ = cc.heartbeat(img, state, bid, img.brokers[bid].epoch, 5000, img.offset, False, False)
        img = apply(img, recs)
    t0 = time.process_time()
    recs = cc.fence_stale_brokers(img, state, TIMEOUT, TIMEOUT)
    print(f"{partitions} partitions: one write of {len(recs)} records: {(time.process_time() - t0) * 1000:.0f} ms CPU")
    done, worst, total, n, work = False, 0.0, 0.0, 0, img
    while not done:
        t0 = time.process_time()
        recs, done = cc.fence_stale_brokers_batch(work, state, TIMEOUT, TIMEOUT,
                                                  max_records=cc.FENCE_RECORDS_PER_BATCH)
        dt = time.process_time() - t0
        worst, total, n = max(worst, dt), total + dt, n + 1
        work = apply(work, recs)
    print(f"batches of {cc.FENCE_RECORDS_PER_BATCH}: {n} writes, the longest {worst * 1000:.0f} ms CPU, "
          f"{total * 1000:.0f} ms CPU in all")


if __name__ == "__main__":
    main()
