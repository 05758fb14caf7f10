"""How long a partition reassignment takes, with and without a replication throttle, and how long
a DeleteRecords takes on an RF 3 partition.

    .venv/bin/python bench/reassign.py --size-mb 1024 --throttle 10000000

Starts 1 controller + 3 brokers (local processes), fills a single-replica partition on broker 2
with --size-mb of 1 KiB records (16 KiB batches), then moves it to brokers [2, 3] unthrottled and
to [2, 4] with `krafty reassign-partitions --throttle` (the rates set as static broker configs:
dynamic broker configs are another branch's), timing each until the new replica is in sync.
Then DeleteRecords latency (median of --deletes calls, RF 3, each moving the log start by 1000).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from confluent_kafka import Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.cluster.conftest import FAST, ROOT, Cluster, wait_until  # noqa: E402


def isr(admin, topic) -> tuple[int, ...]:
    return tuple(sorted(admin.list_topics(topic, timeout=10).topics[topic].partitions[0].isrs))


def fill(bootstrap: str, topic: str, size_mb: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5, "batch.size": 16384,
                  "queue.buffering.max.kbytes": 65536})
    value = b"x" * 1024
    for i in range(size_mb * 1024):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10000 == 0:
            p.poll(0)
    assert p.flush(600) == 0


def move(bootstrap: str, admin, d: str, topic: str, target: list[int], throttle: int | None) -> float:
    plan = os.path.join(d, f"{topic}-plan.json")
    with open(plan, "w") as f:
        json.dump({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": target}]}, f)
    cmd = [sys.executable, "-m", "krafty", "reassign-partitions", "--bootstrap-server", bootstrap, "--execute",
           "--reassignment-json-file", plan] + (["--throttle", str(throttle)] if throttle else [])
    t0 = time.monotonic()
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
    wait_until(lambda: isr(admin, topic) == tuple(sorted(target)), 3600, f"{topic} on {target}", interval=0.2)
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--throttle", type=int, default=10_000_000, help="bytes/s")
    ap.add_argument("--deletes", type=int, default=20)
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="krafty-reassign-")
    overrides = {**FAST, "leader.replication.throttled.rate": str(a.throttle),
                 "follower.replication.throttled.rate": str(a.throttle), "log.segment.bytes": str(64 << 20)}
    c = Cluster(d, controllers=1, brokers=4, overrides=overrides)
    c.start()
    try:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == 4, 60, "brokers")
        admin.create_topics([NewTopic(t, num_partitions=1, replica_assignment=[[2]],
                                      config={"min.insync.replicas": "1"}) for t in ("moved", "del")])
        wait_until(lambda: "moved" in admin.list_topics(timeout=5).topics, 30, "topic")
        t0 = time.monotonic()
        fill(c.bootstrap, "moved", a.size_mb)
        print(f"filled {a.size_mb} MB in {time.monotonic() - t0:.1f} s", flush=True)
        free = move(c.bootstrap, admin, d, "moved", [2, 3], None)
        print(f"reassignment of {a.size_mb} MB, unthrottled: {free:.1f} s ({a.size_mb / free:.1f} MB/s)", flush=True)
        slow = move(c.bootstrap, admin, d, "moved", [2, 3, 4], a.throttle)
        print(f"reassignment of {a.size_mb} MB, throttled at {a.throttle / 1e6:.1f} MB/s: {slow:.1f} s "
              f"({a.size_mb / slow:.1f} MB/s)", flush=True)
        # DeleteRecords latency on an RF 3 partition
        move(c.bootstrap, admin, d, "del", [2, 3, 4], None)
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
        for _ in range(a.deletes * 1000):
            p.produce("del", b"y" * 100)
            p.poll(0)
        assert p.flush(60) == 0
        times = []
        for i in range(1, a.deletes + 1):
            t0 = time.monotonic()
            res = admin.delete_records([TopicPartition("del", 0, i * 1000)])
            next(iter(res.values())).result(30)
            times.append((time.monotonic() - t0) * 1000)
        print(f"DeleteRecords RF 3: median {statistics.median(times):.1f} ms, max {max(times):.1f} ms "
              f"over {len(times)}", flush=True)
    finally:
        c.shutdown()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
