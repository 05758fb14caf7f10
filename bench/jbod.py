"""JBOD figures: how fast AlterReplicaLogDirs moves a replica between two log dirs of a broker, and
how long the partitions of a failed log dir stop taking produce before a new leader takes them.

    .venv/bin/python bench/jbod.py --size-mb 1024            # the move of a 1 GB replica
    .venv/bin/python bench/jbod.py --size-mb 1024 --failover  # and a full log dir (root: a tmpfs)

The move: 1 controller + 1 broker with two log dirs (local processes); a single-replica partition
filled with --size-mb of 1 KiB records (16 KiB batches), then moved to the other dir with
`krafty reassign-partitions --execute` (log_dirs in the JSON: AlterReplicaLogDirs) while an
acks=all producer keeps writing to it, timed until DescribeLogDirs shows it in the new dir and no
future replica. The failover: 1 controller + 3 brokers, one of broker 2's dirs a 24 MB tmpfs that is
filled under an acks=all stream to 6 RF 3 partitions; prints the longest pause of acks of the
partitions broker 2 led in that dir (the dir fails -> clients produce to a new leader).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.reassign import fill  # noqa: E402
from tests.cluster.conftest import FAST, ROOT, Cluster, wait_until  # noqa: E402
from tests.cluster.test_jbod import KeyedStream, describe_log_dirs, leaders  # noqa: E402


def move_figure(size_mb: int) -> None:
    d = tempfile.mkdtemp(prefix="krafty-jbod-")
    c = Cluster(os.path.join(d, "cluster"), controllers=1, brokers=1, overrides=FAST)
    os.makedirs(c.dir)
    d1, d2 = os.path.join(c.dir, "d1"), os.path.join(c.dir, "d2")
    c.configs["broker-2"]["log.dirs"] = f"{d1},{d2}"
    c.configs["broker-2"]["offsets.topic.replication.factor"] = "1"
    c.start()
    try:
        bs = c.bootstrap
        admin = AdminClient({"bootstrap.servers": bs})
        wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == 1, 60, "broker up")
        admin.create_topics([NewTopic("big", 1, 1)])["big"].result(30)
        t0 = time.monotonic()
        fill(bs, "big", size_mb)
        print(f"filled {size_mb} MB in {time.monotonic() - t0:.1f} s")
        where = describe_log_dirs(bs, 2)
        src = next(x for x, (_e, tps) in where.items() if ("big", 0, False) in tps)
        dest = d2 if src == d1 else d1
        acked = [0]
        stop = threading.Event()

        def stream():
            p = Producer({"bootstrap.servers": bs, "acks": "all", "linger.ms": 5})
            while not stop.is_set():
                p.produce("big", b"y" * 1024, on_delivery=lambda err, _m: acked.__setitem__(0, acked[0] + (err is None)))
                p.poll(0.001)
            p.flush(60)
        t = threading.Thread(target=stream, daemon=True)
        t.start()
        plan = os.path.join(d, "plan.json")
        with open(plan, "w") as f:
            json.dump({"version": 1, "partitions": [{"topic": "big", "partition": 0, "replicas": [2],
                                                     "log_dirs": [dest]}]}, f)
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "krafty", "reassign-partitions", "--bootstrap-server", bs, "--execute",
                        "--reassignment-json-file", plan], cwd=ROOT, check=True, capture_output=True)

        def moved():
            w = describe_log_dirs(bs, 2)
            return ("big", 0, False) in w[dest][1] and not any(f for _e, tps in w.values() for _t, _p, f in tps)
        wait_until(moved, 3600, "moved", interval=0.2)
        took = time.monotonic() - t0
        stop.set()
        t.join(60)
        print(f"FIGURE jbod move: {size_mb} MB replica moved between log dirs in {took:.1f} s = "
              f"{size_mb / took:.0f} MB/s, under an acks=all producer ({acked[0]} records acknowledged meanwhile)")
    finally:
        c.shutdown()
        shutil.rmtree(d, ignore_errors=True)


def failover_figure() -> None:
    if os.geteuid() != 0:
        print("failover: needs root to mount a small tmpfs; skipped")
        return
    d = tempfile.mkdtemp(prefix="krafty-jbod-")
    mnt = os.path.join(d, "tmpfs")
    os.makedirs(mnt)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", mnt], check=True)
    c = Cluster(os.path.join(d, "cluster"), controllers=1, brokers=3, overrides=FAST)
    os.makedirs(c.dir)
    full = os.path.join(mnt, "d1")
    c.configs["broker-2"]["log.dirs"] = f"{full},{os.path.join(c.dir, 'broker-2-d2')}"
    c.configs["broker-2"]["metadata.log.dir"] = os.path.join(c.dir, "broker-2-meta")
    c.start()
    try:
        bs = c.bootstrap
        admin = AdminClient({"bootstrap.servers": bs})
        wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == 3, 60, "brokers up")
        admin.create_topics([NewTopic("jbod", num_partitions=6, replication_factor=3)])["jbod"].result(30)
        wait_until(lambda: all(ld >= 0 for ld, _ in leaders(admin, "jbod").values()), 30, "leaders")
        in_full = {p for _t, p, _f in describe_log_dirs(bs, 2)[full][1]}
        stream = KeyedStream(bs, "jbod")
        try:
            wait_until(lambda: len(stream.acked) > 3000, 60, "records flowing")
            led = {p for p, (ld, _i) in leaders(admin, "jbod").items() if ld == 2 and p in in_full}
            t_fill = time.monotonic()
            with open(os.path.join(mnt, "filler"), "wb") as f:
                try:
                    while True:
                        f.write(b"\0" * (1 << 20))
                        f.flush()
                except OSError:
                    pass
            wait_until(lambda: all(ld != 2 for p, (ld, _i) in leaders(admin, "jbod").items() if p in in_full), 60,
                       "new leaders")
            time.sleep(3)
        finally:
            stream.close()
        for p in sorted(in_full):
            ts = [t for t in stream.ack_times[p] if t >= t_fill - 1]
            gap = max((b - a for a, b in zip(ts, ts[1:], strict=False)), default=0.0)
            print(f"FIGURE jbod failover: partition {p} ({'led by broker 2: new leader' if p in led else 'followed'}"
                  f"): longest pause of acks {gap:.2f} s")
    finally:
        c.shutdown()
        subprocess.run(["umount", "-l", mnt], capture_output=True)
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--failover", action="store_true")
    a = ap.parse_args()
    move_figure(a.size_mb)
    if a.failover:
        failover_figure()


if __name__ == "__main__":
    main()
