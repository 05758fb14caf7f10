"""What metrics cost a broker (krafty.metrics.port), and what a scrape costs.

    .venv/bin/python bench/metrics_cost.py requests [--requests 30000] [--rounds 3]
        broker CPU per Produce request (1 record of 100 B per request, acks=1, confluent-kafka with
        batch.num.messages=1), metrics off and on alternately, each round on a fresh node; with
        metrics on, /metrics is scraped every 5 s meanwhile, as Prometheus would
    .venv/bin/python bench/metrics_cost.py scrape [--partitions 10000]
        scrape time and size of /metrics on a node with that many partitions (one topic), and how
        long the scrape held the event loop (krafty_metrics_collect_seconds)

The throughput side is bench/produce_consume.py --metrics (the same node with metrics on,
scraped every 5 s)."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from krafty_node import KraftyNode, free_port  # noqa: E402


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Scraper(threading.Thread):
    def __init__(self, port: int, every_s: float):
        super().__init__(daemon=True)
        self.url, self.every_s, self.stop, self.n = f"http://127.0.0.1:{port}/metrics", every_s, threading.Event(), 0

    def run(self) -> None:
        while not self.stop.wait(self.every_s):
            urllib.request.urlopen(self.url, timeout=30).read()
            self.n += 1


def one_round(metrics: bool, n: int) -> float:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    with tempfile.TemporaryDirectory(prefix="krafty-metrics-cost-") as d:
        mport = free_port()
        overrides = {"krafty.metrics.port": str(mport), "krafty.metrics.host": "127.0.0.1"} if metrics else {}
        node = KraftyNode(d, overrides=overrides)
        try:
            node.start()
            admin = AdminClient({"bootstrap.servers": node.bootstrap})  # must outlive its futures
            admin.create_topics([NewTopic("c", 1, 1)])["c"].result(30)
            p = Producer({"bootstrap.servers": node.bootstrap, "acks": "1", "linger.ms": 0, "batch.num.messages": 1,
                          "enable.idempotence": False, "queue.buffering.max.messages": 1_000_000})
            for _ in range(200):  # warm up: connections, metadata
                p.produce("c", b"w" * 100)
            p.flush(30)
            scraper = Scraper(mport, 5.0) if metrics else None
            if scraper:
                scraper.start()
            c0, t0 = cpu_s(node.proc.pid), time.monotonic()
            for _ in range(n):
                p.produce("c", b"x" * 100)
                p.poll(0)
            p.flush(120)
            dt, cpu = time.monotonic() - t0, cpu_s(node.proc.pid) - c0
            if scraper:
                scraper.stop.set()
            us = cpu / n * 1e6
            print(f"  metrics {'on ' if metrics else 'off'}: {n / dt:,.0f} req/s, broker CPU {us:.1f} us/request"
                  + (f" ({scraper.n} scrapes)" if scraper else ""), flush=True)
            return us
        finally:
            node.close()


def requests_cmd(args) -> None:
    off, on = [], []
    for i in range(args.rounds):  # alternating which goes first, so a trend in the machine's load cancels out
        for metrics in ((False, True) if i % 2 == 0 else (True, False)):
            (on if metrics else off).append(one_round(metrics, args.requests))
    print(f"broker CPU per Produce request: off median {statistics.median(off):.1f} us "
          f"({', '.join(f'{x:.1f}' for x in off)}), on median {statistics.median(on):.1f} us "
          f"({', '.join(f'{x:.1f}' for x in on)})")


def scrape_cmd(args) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    with tempfile.TemporaryDirectory(prefix="krafty-metrics-scrape-") as d:
        mport = free_port()
        node = KraftyNode(d, overrides={"krafty.metrics.port": str(mport), "krafty.metrics.host": "127.0.0.1"})
        try:
            node.start()
            admin = AdminClient({"bootstrap.servers": node.bootstrap})  # must outlive its futures
            half = args.partitions // 2  # one operation writes at most 10,000 records (a topic + its partitions)
            for name, n in (("many-a", half), ("many-b", args.partitions - half)):
                admin.create_topics([NewTopic(name, n, 1)], operation_timeout=120)[name].result(180)
            url = f"http://127.0.0.1:{mport}/metrics"

            def logs() -> int:
                text = urllib.request.urlopen(url, timeout=60).read().decode()
                return sum(1 for ln in text.splitlines() if ln.startswith("kafka_log_log_size{"))
            deadline = time.monotonic() + 300
            while logs() < args.partitions and time.monotonic() < deadline:
                time.sleep(1)
            times, sizes, collect = [], [], []
            for _ in range(args.scrapes):
                t0 = time.monotonic()
                body = urllib.request.urlopen(url, timeout=60).read()
                times.append(time.monotonic() - t0)
                sizes.append(len(body))
                for ln in body.decode().splitlines():
                    if ln.startswith("krafty_metrics_collect_seconds "):
                        collect.append(float(ln.split()[1]))  # the scrape before this one
            samples = sum(1 for ln in body.decode().splitlines() if ln and not ln.startswith("#"))
            print(f"{args.partitions} partitions: /metrics {statistics.median(sizes) / 1e6:.2f} MB, {samples:,} samples; "
                  f"scrape {statistics.median(times) * 1000:.0f} ms median (min {min(times) * 1000:.0f}, "
                  f"max {max(times) * 1000:.0f}); event loop held {statistics.median(collect[1:]) * 1000:.0f} ms "
                  f"median per scrape")
        finally:
            node.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("requests")
    r.add_argument("--requests", type=int, default=30_000)
    r.add_argument("--rounds", type=int, default=3)
    s = sub.add_parser("scrape")
    s.add_argument("--partitions", type=int, default=10_000)
    s.add_argument("--scrapes", type=int, default=10)
    args = ap.parse_args()
    (requests_cmd if args.cmd == "requests" else scrape_cmd)(args)


if __name__ == "__main__":
    main()
