"""End-to-end clickstream demo (``make pipeline-demo``).

Starts a local krafty node (unless --bootstrap is given), creates the topics, starts the
clickstream Spark job, generates clicks in real time, waits until the job's output accounts for
every click, then prints the per-user results and the end-to-end latency (time from producing a
click to the job's output record that includes it arriving at a consumer).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")


def create_topics(bootstrap: str, names, partitions: int) -> None:
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    # replicated like a production topic where there are brokers enough (acks=all needs
    # min.insync.replicas of them)
    replication = max(1, min(3, len(admin.list_topics(timeout=15).brokers)))
    futs = admin.create_topics([NewTopic(n, partitions, replication) for n in names], request_timeout=15)
    for n, f in futs.items():
        try:
            f.result(30)
        except ck.KafkaException as e:
            code = e.args[0].code()
            if code == ck.KafkaError._TIMED_OUT:
                # librdkafka's mock cluster cannot create topics; it auto-creates them on first use
                ck.Producer({"bootstrap.servers": bootstrap}).list_topics(n, timeout=10)
            elif code != ck.KafkaError.TOPIC_ALREADY_EXISTS:
                raise


WATERMARK_MS = 10_000


def produce_clicks(bootstrap, topic, rate, seconds, users, speedup, seed=7):
    """Produce about rate*seconds clicks in real time.

    Event time runs ``speedup`` times faster than the wall clock so that 1-minute windows close
    every few seconds; clicks arrive up to 3 s (event time) out of order. A last click from user
    ``flush`` far in the future advances the watermark past every window, so all of them close.
    Returns (clicks excluding the flush one, [(event ts, sent_at ms)] in send order).
    """
    import confluent_kafka as ck

    rnd = random.Random(seed)
    p = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    sent = []
    t0 = time.time()
    v0 = int(t0 * 1000)

    def send(ev):
        while True:
            try:
                p.produce(topic, json.dumps(ev).encode(), key=ev["user"].encode())
                return
            except BufferError:
                p.poll(0.05)

    while time.time() - t0 < seconds:
        due = int((time.time() - t0) * rate)
        while len(sent) < due:
            now = int(time.time() * 1000)
            vnow = v0 + int((now - v0) * speedup)
            user = f"u{(int(rnd.paretovariate(1.2)) - 1) % users}"
            ev = {
                "user": user,
                "page": f"/p{rnd.randrange(20)}",
                "ts": vnow - rnd.randrange(0, 3000),
                "sent_at": now,
            }
            send(ev)
            sent.append((ev["ts"], now))
        p.poll(0)
        time.sleep(0.02)
    now = int(time.time() * 1000)
    flush_ts = v0 + int((now - v0) * speedup) + 2 * 60_000 + WATERMARK_MS
    send({"user": "flush", "page": "/", "ts": flush_ts, "sent_at": now})
    assert p.flush(60) == 0
    sent.append((flush_ts, now))
    return len(sent) - 1, sent


def closable_at(sent, window_end_ms):
    """Wall time (ms) the first click that moves the watermark past window_end was produced."""
    for ts, sent_at in sent:
        if ts - WATERMARK_MS >= window_end_ms:
            return sent_at
    return None


class OutputWatcher(threading.Thread):
    """Consumes the job's output topic; keeps the latest aggregate per (user, window) and latencies."""

    def __init__(self, bootstrap, topic):
        super().__init__(daemon=True)
        import confluent_kafka as ck

        # no consumer group: assign every partition of the output topic from its start
        self.c = ck.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"demo-{uuid.uuid4().hex[:6]}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        parts = self.c.list_topics(topic, timeout=10).topics[topic].partitions
        self.c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in parts])
        self.latest: dict = {}
        self.latencies_ms: list = []
        self.records = 0
        self.stop_flag = threading.Event()
        self.lock = threading.Lock()

    def run(self):
        while not self.stop_flag.is_set():
            for m in self.c.consume(500, 0.2):
                if m.error():
                    continue
                now = time.time() * 1000
                v = json.loads(m.value())
                v["arrived_ms"] = now
                with self.lock:
                    self.records += 1
                    self.latest[(v["user"], v["window_start"])] = v
        self.c.close()

    def total_clicks(self):
        with self.lock:
            return sum(v["clicks"] for v in self.latest.values() if v["user"] != "flush")


def run(
    bootstrap,
    *,
    spark=None,
    rate=500,
    seconds=20,
    users=50,
    trigger="1 second",
    speedup=10,
    partitions=3,
    quiet=False,
):
    import pipeline
    from pipeline.examples import clickstream

    src, dst = f"clicks-{uuid.uuid4().hex[:6]}", f"click-stats-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, [src, dst], partitions)
    own_spark = spark is None
    if own_spark:
        spark = pipeline.session("krafty-clickstream-demo")
        spark.sparkContext.setLogLevel("ERROR")
    ckpt = tempfile.mkdtemp(prefix="krafty-demo-ckpt-")
    watcher = OutputWatcher(bootstrap, dst)
    watcher.start()
    # append mode: a (user, window) row is written once, when the watermark passes the window's end
    q = clickstream.start(
        spark,
        bootstrap,
        src,
        dst,
        ckpt,
        trigger=trigger,
        output_mode="append",
        watermark=f"{WATERMARK_MS // 1000} seconds",
    )
    try:
        t_warm = time.time()  # first micro-batch pays for JVM and Python worker start-up
        while q.lastProgress is None and time.time() - t_warm < 120:
            if q.exception() is not None:
                raise RuntimeError(f"query failed: {q.exception()}")
            time.sleep(0.2)
        print(
            f"job running (warm-up {time.time() - t_warm:.1f}s); producing ~{rate} clicks/s for {seconds}s, "
            f"event time x{speedup} ..."
        )
        n, sent = produce_clicks(bootstrap, src, rate, seconds, users, speedup)
        t_last = time.time()
        deadline = t_last + 120
        while watcher.total_clicks() < n and time.time() < deadline:
            if q.exception() is not None:
                raise RuntimeError(f"query failed: {q.exception()}")
            time.sleep(0.05)
        t_done = time.time()
        got = watcher.total_clicks()
        progress = q.recentProgress
    finally:
        q.stop()
        watcher.stop_flag.set()
        watcher.join(10)
        if own_spark:
            spark.stop()
        shutil.rmtree(ckpt, ignore_errors=True)
    # result latency: from the moment a window could be closed (the click that moved the
    # watermark past its end was produced) to its aggregate arriving at a consumer
    ends: dict = {}
    for v in watcher.latest.values():
        if v["user"] == "flush":
            continue
        end_ms = int(datetime.fromisoformat(v["window_end"].replace("Z", "+00:00")).timestamp() * 1000)
        ends.setdefault(end_ms, []).append(v["arrived_ms"])
    lat = []
    for end_ms, arrivals in ends.items():
        c = closable_at(sent, end_ms)
        if c is not None:
            lat.extend(a - c for a in arrivals)
    durations = [p["durationMs"].get("triggerExecution", 0) for p in progress if p["numInputRows"] > 0]
    stats = {
        "produced": n,
        "counted": got,
        "output_records": watcher.records,
        "windows": len(watcher.latest),
        "latency_ms_p50": _pct(lat, 50),
        "latency_ms_p95": _pct(lat, 95),
        "latency_ms_p99": _pct(lat, 99),
        "latency_ms_max": max(lat) if lat else float("nan"),
        "batch_ms_p50": _pct(durations, 50),
        "drain_s": t_done - t_last,
    }
    if not quiet:
        per_user: dict = {}
        for (user, _), v in watcher.latest.items():
            if user != "flush":
                per_user[user] = per_user.get(user, 0) + v["clicks"]
        print("\ntop users (clicks over all 1-minute windows):")
        for user, c in sorted(per_user.items(), key=lambda kv: -kv[1])[:10]:
            print(f"  {user:>5}  {c}")
        top = max(per_user, key=per_user.get) if per_user else None
        print(f"\nwindows of the top user {top}:")
        for (user, _), v in sorted(watcher.latest.items()):
            if user == top:
                print(
                    f"  {v['window_start']} .. {v['window_end']}  clicks={v['clicks']} distinct pages~{v['pages']}"
                )
        print(
            f"\nclicks produced={n} counted by the job={got} ({'OK' if got == n else 'MISMATCH'}); "
            f"{watcher.records} output records, {len(watcher.latest)} (user, window) aggregates"
        )
        print(
            f"end-to-end latency (window closable -> its aggregate consumed from the output topic), "
            f"trigger={trigger}: p50={stats['latency_ms_p50']:.0f} ms p95={stats['latency_ms_p95']:.0f} ms "
            f"p99={stats['latency_ms_p99']:.0f} ms "
            f"max={stats['latency_ms_max']:.0f} ms; micro-batch p50 {stats['batch_ms_p50']:.0f} ms"
        )
    return stats


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", help="use this broker instead of starting a local krafty node")
    ap.add_argument("--mock", action="store_true", help="use librdkafka's mock cluster (no broker needed)")
    ap.add_argument("--rate", type=int, default=500, help="clicks per second")
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--users", type=int, default=50)
    ap.add_argument("--trigger", default="1 second")
    ap.add_argument(
        "--speedup", type=int, default=10, help="event time runs this many times faster than real time"
    )
    a = ap.parse_args(argv)
    from pipeline.local_node import LocalKrafty, MockCluster

    if a.bootstrap:
        stats = run(
            a.bootstrap, rate=a.rate, seconds=a.seconds, users=a.users, trigger=a.trigger, speedup=a.speedup
        )
    else:
        with MockCluster() if a.mock else LocalKrafty() as node:
            print(f"broker at {node.bootstrap}")
            stats = run(
                node.bootstrap,
                rate=a.rate,
                seconds=a.seconds,
                users=a.users,
                trigger=a.trigger,
                speedup=a.speedup,
            )
    return 0 if stats["counted"] == stats["produced"] else 1


if __name__ == "__main__":
    sys.exit(main())
