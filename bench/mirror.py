"""``krafty mirror`` between two local single-node krafty clusters (A -> B, prefix naming):

1. throughput: N records (1 KiB values by default) written to A first, then one mirror process
   copies them; MB/s (and records/s) from the first record on B to the last one, and MB per CPU
   second of the mirror process (its cost, less sensitive to what else runs on the machine);
2. end-to-end lag: with the mirror caught up, a producer writes to A at a fixed rate and a
   consumer on B (read_committed in the exactly-once mode) measures, per record, its arrival
   time on B minus its timestamp (set by the producer when it called produce()): p50/p99/max;
   then the same producer and consumer on A alone (no mirror): the floor the machine gives.

Each mode (at-least-once, exactly-once) runs in its own pair of fresh clusters; with --rounds R
the modes alternate, so that the load of the machine shows in both alike.

    .venv/bin/python bench/mirror.py
    .venv/bin/python bench/mirror.py --records 200000 --rate 2000 --seconds 20 --modes alo,eos --rounds 2

MB = 10^6 bytes of record values.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "integration"))

from mirror_harness import MirrorProcess, mirror_config, start_cluster  # noqa: E402


def _end_offsets(bootstrap: str, topic: str, partitions: int) -> int:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-probe"})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions))
    finally:
        c.close()


def preload(bootstrap: str, topic: str, partitions: int, records: int, size: int) -> float:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20, "enable.idempotence": True})
    value = os.urandom(size)
    t0 = time.monotonic()
    for i in range(records):
        while True:
            try:
                p.produce(topic, value, b"%d" % i, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.01)
        if i % 10000 == 0:
            p.poll(0)
    p.flush(120)
    return records * size / 1e6 / (time.monotonic() - t0)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its threads so far (librdkafka's threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def throughput(a, b, topic: str, remote: str, partitions: int, records: int, size: int, mirror: MirrorProcess):
    mirror.start()
    first = None
    deadline = time.monotonic() + 600
    n = 0
    while time.monotonic() < deadline:
        try:
            n = _end_offsets(b.bootstrap, remote, partitions)
        except Exception:  # noqa: BLE001 - the topic may not exist yet
            n = 0
        now = time.monotonic()
        if n > 0 and first is None:
            first = (now, n, cpu_seconds(mirror.proc.pid))
        if n >= records:
            cpu = cpu_seconds(mirror.proc.pid)
            break
        time.sleep(0.05)
    else:
        raise RuntimeError(f"the mirror copied {n} of {records} records in 600 s\n{mirror.log()[-3000:]}")
    t0, n0, cpu0 = first
    dt = max(time.monotonic() - t0, 1e-6)
    mb = (records - n0) * size / 1e6
    # MB per CPU second of the mirror process: what the mirror costs, whatever else the machine runs
    return {"records_per_s": (records - n0) / dt, "mb_per_s": mb / dt, "seconds": dt,
            "mb_per_cpu_s": mb / max(cpu - cpu0, 1e-6)}


def lag(a, b, topic: str, remote: str, partitions: int, rate: float, seconds: float, size: int, committed: bool):
    """Records produced to ``topic`` on A, read from ``remote`` on B (A and B may be the same cluster
    and topic: the baseline of the clients and brokers without a mirror)."""
    import threading

    from confluent_kafka import Consumer, Producer, TopicPartition
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "bench-lag", "enable.auto.commit": False,
                  "isolation.level": "read_committed" if committed else "read_uncommitted",
                  "fetch.wait.max.ms": 10})
    ends = []
    for p in range(partitions):
        ends.append(TopicPartition(remote, p, c.get_watermark_offsets(TopicPartition(remote, p), timeout=10)[1]))
    c.assign(ends)
    lags: list[int] = []
    total = int(rate * seconds)
    done = threading.Event()

    def consume():
        while len(lags) < total and not done.is_set():
            for m in c.consume(1000, 0.2):
                if m.error() is None:
                    lags.append(int(time.time() * 1000) - m.timestamp()[1])

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    p = Producer({"bootstrap.servers": a.bootstrap, "linger.ms": 1, "enable.idempotence": True})
    value = os.urandom(size)
    t0 = time.monotonic()
    for i in range(total):
        due = t0 + i / rate
        while time.monotonic() < due:
            p.poll(max(0.0, min(0.005, due - time.monotonic())))
        p.produce(topic, value, partition=i % partitions, timestamp=int(time.time() * 1000))
    p.flush(60)
    t.join(120)
    done.set()
    c.close()
    if len(lags) < total:
        raise RuntimeError(f"only {len(lags)} of {total} records reached B")
    lags.sort()
    return {"p50_ms": lags[len(lags) // 2], "p99_ms": lags[int(len(lags) * 0.99)], "max_ms": lags[-1],
            "records": total}


def run_mode(mode: str, args, workdir: Path) -> dict:
    a = start_cluster(workdir / "a", "A")
    b = start_cluster(workdir / "b", "B")
    mirror = None
    try:
        preload_mbs = preload(a.bootstrap, "bench", args.partitions, args.records, args.size)
        keys = {"A->B.topics": "bench", "emit.heartbeats.enabled": "false", "sync.topic.configs.enabled": "false",
                "refresh.topics.interval.seconds": "600", "offset.flush.interval.ms": "5000"}
        if mode == "eos":
            keys["exactly.once.source.support"] = "enabled"
        mirror = MirrorProcess(workdir, mirror_config(a.bootstrap, b.bootstrap, **keys), f"mirror-{mode}")
        tp = throughput(a, b, "bench", "A.bench", args.partitions, args.records, args.size, mirror)
        lt = lag(a, b, "bench", "A.bench", args.partitions, args.rate, args.seconds, args.size, mode == "eos")
        # the same produce -> consume path on A alone, right after: what the machine gives without a mirror
        base = lag(a, a, "bench", "bench", args.partitions, args.rate, args.seconds, args.size, False)
        return {"mode": mode, "preload_mb_per_s": preload_mbs, **tp, **lt,
                "direct": {k: base[k] for k in ("p50_ms", "p99_ms", "max_ms")}}
    finally:
        if mirror is not None:
            mirror.close()
        b.close()
        a.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--size", type=int, default=1024, help="value bytes")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--rate", type=float, default=2000, help="records/s in the lag phase")
    ap.add_argument("--seconds", type=float, default=20, help="length of the lag phase")
    ap.add_argument("--modes", default="alo,eos", help="alo (at-least-once) and/or eos (exactly-once)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    results = []
    for r in range(args.rounds):
        for mode in args.modes.split(","):
            workdir = Path(tempfile.mkdtemp(prefix=f"bench-mirror-{mode}-"))
            try:
                res = run_mode(mode, args, workdir)
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
            res["round"] = r + 1
            res["load"] = os.getloadavg()[0]
            results.append(res)
            print(f"round {r + 1} {mode:3}: {res['mb_per_s']:7.1f} MB/s ({res['records_per_s']:,.0f} records/s, "
                  f"{res['mb_per_cpu_s']:.1f} MB per CPU second of the mirror) "
                  f"copying {args.records:,} x {args.size} B over {args.partitions} partitions; lag at "
                  f"{args.rate:,.0f} records/s: p50 {res['p50_ms']} ms, p99 {res['p99_ms']} ms, max {res['max_ms']} ms "
                  f"(direct on A: p50 {res['direct']['p50_ms']} ms, p99 {res['direct']['p99_ms']} ms; source written "
                  f"at {res['preload_mb_per_s']:.1f} MB/s; load {res['load']:.1f})", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
