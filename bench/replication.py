"""Replicated produce on a real 3-broker krafty cluster (3 controllers + 3 brokers, loopback):

1. throughput: RF=3, acks=all, idempotent confluent-kafka producer, 1 KiB values, MB/s acknowledged;
2. latency: the same producer rate-limited to half that throughput, with the clients' default
   linger.ms=5 (--linger-ms), per-message delivery latency (Message.latency(): produce() call to
   delivery report, so linger is included), p50/p99/max;
3. unavailability window: a steady acks=all stream into a single-partition topic, kill -9 of its
   leader; the window is the largest gap between consecutive successful acks around the kill
   (brokers run with the default broker.session.timeout.ms unless overridden).

    .venv/bin/python bench/replication.py
    .venv/bin/python bench/replication.py --partitions 3 --seconds 20 --json /tmp/repl.json
    .venv/bin/python bench/replication.py --override broker.session.timeout.ms=3000

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

from tests.cluster.conftest import Cluster, wait_until  # noqa: E402


def _admin(c):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": c.bootstrap})


def create_topic(c, name: str, partitions: int) -> None:
    from confluent_kafka.admin import NewTopic
    a = _admin(c)
    wait_until(lambda: len(a.list_topics(timeout=5).brokers) == c.n_brokers, 120, "all brokers registered")
    a.create_topics([NewTopic(name, partitions, 3, config={"min.insync.replicas": "2"})])[name].result(60)
    wait_until(lambda: all(p.leader >= 0 and len(p.isrs) == 3 for p in
                           a.list_topics(name, timeout=5).topics[name].partitions.values()), 60, "leaders and ISR")


def _producer(c, **extra):
    from confluent_kafka import Producer
    conf = {"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
            "batch.size": 1024 * 1024, "queue.buffering.max.kbytes": 256 * 1024, "message.timeout.ms": 120000}
    conf.update(extra)
    return Producer(conf)


def throughput(c, topic: str, size: int, seconds: float) -> dict:
    p = _producer(c)
    value = os.urandom(size)
    acked = [0]
    errors: list = []

    def cb(err, _msg):
        if err:
            errors.append(str(err))
        else:
            acked[0] += 1
    # warm-up: connections, metadata, producer id
    p.produce(topic, value=value, on_delivery=cb)
    p.flush(60)
    acked[0] = 0
    t0 = time.perf_counter()
    sent = 0
    while time.perf_counter() - t0 < seconds:
        try:
            p.produce(topic, value=value, on_delivery=cb)
            sent += 1
        except BufferError:
            p.poll(0.005)
        if sent % 256 == 0:
            p.poll(0)
    p.flush(180)
    dt = time.perf_counter() - t0
    return {"records": acked[0], "errors": len(errors), "seconds": round(dt, 2),
            "mbps": round(acked[0] * size / dt / 1e6, 1), "rps": round(acked[0] / dt)}


def _window_stats(windows: list[dict]) -> dict:
    """librdkafka's per-broker statistics (one window a second, microseconds): the worst window's
    p99 and the max of the round trip (request sent to response: the broker side plus loopback)
    and of the internal queue (produce() until the batch is sent: linger, the client's own
    queueing). Tells broker-side delay from client-side delay."""
    out: dict[str, float] = {}
    for w in windows:
        for b in w.get("brokers", {}).values():
            if b.get("nodeid", -1) < 0:
                continue
            for key, name in (("rtt", "rtt"), ("int_latency", "client_queue"), ("outbuf_latency", "outbuf")):
                h = b.get(key) or {}
                if h.get("cnt", 0):
                    out[f"{name}_p99_ms"] = max(out.get(f"{name}_p99_ms", 0), round(h["p99"] / 1000, 1))
                    out[f"{name}_max_ms"] = max(out.get(f"{name}_max_ms", 0), round(h["max"] / 1000, 1))
    return out


def latency(c, topic: str, size: int, rate: float, seconds: float, linger_ms: float = 5) -> dict:
    windows: list[dict] = []
    p = _producer(c, **{"linger.ms": linger_ms, "statistics.interval.ms": 1000,
                        "stats_cb": lambda js: windows.append(json.loads(js))})
    value = os.urandom(size)
    lat: list[float] = []
    errors: list = []

    def cb(err, msg):
        if err:
            errors.append(str(err))
        else:
            lat.append(msg.latency())
            done_at.append(time.perf_counter())
    done_at: list[float] = []
    p.produce(topic, value=value, on_delivery=cb)
    p.flush(60)
    lat.clear()
    windows.clear()
    t0 = time.perf_counter()
    sent = 0
    while True:
        el = time.perf_counter() - t0
        if el >= seconds:
            break
        due = int(el * rate)
        while sent < due:
            p.produce(topic, value=value, on_delivery=cb)
            sent += 1
        # librdkafka waits whole milliseconds: poll(0.0005) would not wait at all, and this
        # loop would spin a core that the brokers on the same machine need
        p.poll(0.001)
    p.flush(120)
    dt = time.perf_counter() - t0
    # where the slow deliveries happened: per-second max latency, worst seconds first
    per_s: dict[int, float] = {}
    for t, x in zip(done_at[1:], lat, strict=False):
        k = int(t - t0)
        per_s[k] = max(per_s.get(k, 0.0), x)
    worst = sorted(per_s.items(), key=lambda kv: -kv[1])[:5]
    lat.sort()

    def q(x):
        return round(lat[min(len(lat) - 1, int(x * len(lat)))] * 1000, 2) if lat else None
    # client_stats skips librdkafka's first statistics window: it may still cover the warm-up
    return {"target_rps": round(rate), "achieved_rps": round(len(lat) / dt), "records": len(lat),
            "errors": len(errors), "p50_ms": q(0.50), "p99_ms": q(0.99), "max_ms": q(1.0),
            "worst_seconds": [(k, round(v * 1000)) for k, v in worst], "client_stats": _window_stats(windows[1:])}


def unavailability(c, topic: str, size: int, rate: float, before: float, after: float) -> dict:
    from confluent_kafka.admin import AdminClient
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    leader = a.list_topics(topic, timeout=5).topics[topic].partitions[0].leader
    p = _producer(c, **{"linger.ms": 1})
    value = os.urandom(size)
    acks: list[float] = []
    errors: list = []

    def cb(err, _msg):
        if err:
            errors.append(str(err))
        else:
            acks.append(time.time())
    t0 = time.perf_counter()
    sent = 0
    t_kill = None
    while True:
        el = time.perf_counter() - t0
        if el >= before + after:
            break
        if t_kill is None and el >= before:
            c.kill(c.broker_name(leader))
            t_kill = time.time()
        due = int(el * rate)
        while sent < due:
            p.produce(topic, value=value, on_delivery=cb)
            sent += 1
        p.poll(0.001)
    left = p.flush(180)
    acks.sort()
    # the largest gap between consecutive acks from 1 s before the kill to the end of the run
    window = [t for t in acks if t >= t_kill - 1.0]
    gaps = [(b - a_, a_) for a_, b in zip(window, window[1:], strict=False)]
    gap, at = max(gaps) if gaps else (None, None)
    new_leader = a.list_topics(topic, timeout=5).topics[topic].partitions[0].leader
    return {"killed_leader": leader, "new_leader": new_leader, "sent": sent, "acked": len(acks),
            "errors": len(errors), "unflushed": left,
            "window_s": round(gap, 2) if gap is not None else None,
            "gap_starts_after_kill_s": round(at - t_kill, 2) if at is not None else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=3, help="partitions of the throughput topic")
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--seconds", type=float, default=15, help="duration of the throughput and latency phases")
    ap.add_argument("--kill-rate", type=float, default=1000, help="records/s during the kill phase")
    ap.add_argument("--override", action="append", default=[], help="broker/controller config key=value")
    ap.add_argument("--dir", help="cluster directory (default: a temp dir, removed afterwards)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--phases", default="throughput,latency,kill", help="which phases to run")
    ap.add_argument("--rate", type=float, help="records/s of the latency phase (default: half the throughput)")
    ap.add_argument("--linger-ms", type=float, default=5,
                    help="producer linger.ms of the latency phase (5: the default of librdkafka and of Kafka 4 clients)")
    args = ap.parse_args()
    overrides = dict(kv.split("=", 1) for kv in args.override)
    d = args.dir or tempfile.mkdtemp(prefix="krafty-repl-bench-")
    os.makedirs(d, exist_ok=True)
    c = Cluster(d, overrides=overrides)
    c.start()
    res: dict = {"partitions": args.partitions, "value_bytes": args.size, "overrides": overrides}
    try:
        phases = args.phases.split(",")
        rate = args.rate
        if "throughput" in phases:
            create_topic(c, "tput", args.partitions)
            res["throughput"] = tp = throughput(c, "tput", args.size, args.seconds)
            print("throughput:", tp, flush=True)
            rate = rate or tp["rps"] / 2
        if "latency" in phases:
            create_topic(c, "lat", args.partitions)
            res["latency_half_rate"] = lt = latency(c, "lat", args.size, rate or 30000, args.seconds, args.linger_ms)
            print("latency at half rate:", lt, flush=True)
        if "kill" in phases:
            create_topic(c, "kill", 1)
            session = int(overrides.get("broker.session.timeout.ms", 9000)) / 1000
            res["unavailability"] = un = unavailability(c, "kill", args.size, args.kill_rate, 5, session + 15)
            un["session_timeout_s"] = session
            print("unavailability after kill -9 of the leader:", un, flush=True)
    finally:
        c.shutdown()
        if not args.dir:
            shutil.rmtree(d, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
