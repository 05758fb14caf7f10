"""Where one broker's time and memory go per partition, in one process (no cluster): the
production ReplicaManager, LogManager and metadata code fed the deltas a 3-broker cluster
would send when ``--partitions`` partitions (RF 3, all replicas on this broker, 1/3 led
by it) are created in CreateTopics of 10,000, then a restart from the same log dir.

    .venv/bin/python bench/scale_profile.py --partitions 20000
    .venv/bin/python bench/scale_profile.py --partitions 20000 --tracemalloc 15   # top allocation sites
    .venv/bin/python bench/scale_profile.py --partitions 20000 --cprofile create   # CPU profile of a phase

Prints per phase: wall and CPU time (per partition), RSS growth (per partition), open fds:
  create    the deltas' publisher calls plus the background creation of every log
  small     a delta of one new RF-3 topic with one partition, after all of them exist (x --small)
  restart   a new LogManager + ReplicaManager on the same dir, the image loaded as a snapshot
            (after a kill -9 right after the creation, or with --synced once the flush check ran)
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import os
import pstats
import random
import resource
import shutil
import sys
import tempfile
import time
import tracemalloc
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from broker.log.manager import LogManager  # noqa: E402
from broker.replica.manager import ReplicaManager  # noqa: E402
from common.config import Config  # noqa: E402
from controller import topics as t  # noqa: E402
from metadata import records as r  # noqa: E402
from metadata.delta import MetadataDelta, image_from_records  # noqa: E402
from metadata.image import EMPTY  # noqa: E402

ME = 1


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def brokers_image():
    recs = [r.RegisterBrokerRecord(i, uuid.uuid4(), 1, (r.Endpoint("PLAINTEXT", "127.0.0.1", 1 + i),), None,
                                   fenced=False) for i in (1, 2, 3)]
    return image_from_records(recs, len(recs) - 1, 1)


class Phase:
    def __init__(self, name: str, n: int, prof: str | None, top: int):
        self.name, self.n, self.prof, self.top = name, n, prof, top

    def __enter__(self):
        gc.collect()
        self.r0, self.c0, self.w0 = rss_kib(), cpu(), time.perf_counter()
        self.p = cProfile.Profile() if self.prof == self.name else None
        if self.p:
            self.p.enable()
        return self

    def __exit__(self, *exc):
        if self.p:
            self.p.disable()
        gc.collect()
        w, c, rs = time.perf_counter() - self.w0, cpu() - self.c0, rss_kib() - self.r0
        self.figures = (w, c, rs)
        print(f"{self.name:>8}: wall {w:7.2f}s  CPU {c:7.2f}s = {c / self.n * 1e6:8.1f} us per partition; "
              f"RSS +{rs / 1024:7.1f} MiB = {rs * 1024 / self.n:7.0f} B per partition; fds {fds()}", flush=True)
        if self.p:
            pstats.Stats(self.p).sort_stats("cumulative").print_stats(self.top)
            pstats.Stats(self.p).sort_stats("tottime").print_stats(self.top)


def publish(rm: ReplicaManager, img, offset: int, reqs: list, rng):
    """The controller's records for ``reqs`` as one delta, published to the broker: (image, offset)."""
    recs, _ = t.create_topics(img, reqs, t.TopicDefaults(), rng)
    dl = MetadataDelta(img)
    for rec in recs:
        dl.replay(rec)
    offset += len(recs)
    img = dl.apply(offset, 1)
    rm.on_metadata(dl, img)
    return img, offset


async def wait_created(rm: ReplicaManager, n: int) -> None:
    while len(rm.partitions) < n:
        await asyncio.sleep(0.005)


async def run(a) -> None:
    d = a.dir or tempfile.mkdtemp(prefix="krafty-scale-profile-")
    cfg = Config({"node.id": str(ME), "log.dirs": d})
    if a.tracemalloc:
        tracemalloc.start(1)
    img = brokers_image()
    rng = random.Random(7)
    print(f"{a.partitions:,} partitions of {a.per_topic}, RF 3 on brokers 1-3 (this one is 1), dir {d}")
    r_start = rss_kib()
    lm = LogManager([d], {}, now_ms=0)
    rm = ReplicaManager(ME, cfg, lm, endpoint_of=lambda b: None)
    await rm.start()
    offset = 10
    n_topics = a.partitions // a.per_topic
    per_req = max(1, 10000 // (a.per_topic + 1))  # a TopicRecord and its PartitionRecords each
    with Phase("create", a.partitions, a.cprofile, a.top):
        for start in range(0, n_topics, per_req):
            reqs = [t.NewTopic(f"scale-{i:05d}", a.per_topic, 3) for i in range(start, min(n_topics, start + per_req))]
            img, offset = publish(rm, img, offset, reqs, rng)
            await asyncio.sleep(0)
        await wait_created(rm, a.partitions)
    print(f"   image + broker: RSS {r_start / 1024:.0f} -> {rss_kib() / 1024:.0f} MiB")
    if a.tracemalloc:
        cur, peak = tracemalloc.get_traced_memory()
        print(f"tracemalloc: current {cur / a.partitions:.0f} B, peak {peak / a.partitions:.0f} B per partition")
        snap = tracemalloc.take_snapshot()
        print(f"tracemalloc: {sum(s.size for s in snap.statistics('filename')) / a.partitions:.0f} B per partition traced")
        for s in snap.statistics("filename")[: a.tracemalloc]:
            print(f"  {s.size / a.partitions:8.1f} B/partition  {s.count / a.partitions:6.2f} blocks/partition  "
                  f"{s.traceback}")
        for s in snap.statistics("lineno")[: a.tracemalloc]:
            print(f"  {s.size / a.partitions:8.1f} B/partition  {s.count / a.partitions:6.2f} blocks/partition  "
                  f"{s.traceback}")
    with Phase("small", a.small, a.cprofile, a.top):
        for i in range(a.small):
            img, offset = publish(rm, img, offset, [t.NewTopic(f"small-{i}", 1, 3)], rng)
        await wait_created(rm, a.partitions + a.small)
    await rm.close()
    if a.synced:  # the broker's periodic flush check ran (new logs' directories and partition.metadata durable)
        t0 = time.perf_counter()
        lm.flush_check(int(time.time() * 1000))
        print(f"   flush check of the new logs: {time.perf_counter() - t0:.1f}s wall")
    if a.clean:
        lm.close()
    else:  # as after kill -9: nothing flushed or closed, only the descriptors dropped
        for lg in list(lm.all_logs()):
            for seg in lg.segments:
                seg._file = None
        if lm.writer:
            lm.writer.shutdown()
    del rm, lm
    gc.collect()
    with Phase("restart", a.partitions, a.cprofile, a.top):
        lm = LogManager([d], {}, now_ms=0)
        rm = ReplicaManager(ME, cfg, lm, endpoint_of=lambda b: None)
        await rm.start()
        dl = MetadataDelta(EMPTY)
        for rec in img.to_records():
            dl.replay(rec)
        dl.snapshot_loaded = True
        rm.on_metadata(dl, img)
        await wait_created(rm, a.partitions + a.small)
    await rm.close()
    lm.close()
    if not a.dir:
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=20000)
    ap.add_argument("--per-topic", type=int, default=100)
    ap.add_argument("--small", type=int, default=20, help="single-partition deltas timed after the creation")
    ap.add_argument("--clean", action="store_true", help="close the logs cleanly before the restart (else as kill -9)")
    ap.add_argument("--synced", action="store_true",
                    help="run the flush check before the kill -9 (as the broker does every few seconds): else the "
                         "restart also writes every partition.metadata that creation deferred")
    ap.add_argument("--tracemalloc", type=int, default=0, help="print the N top allocation sites after create")
    ap.add_argument("--cprofile", choices=["create", "small", "restart"], help="cProfile one phase")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--dir")
    a = ap.parse_args()
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    asyncio.run(run(a))


if __name__ == "__main__":
    main()
