"""Experiment: move a consumer group's coordinator back and forth and measure how long its members go
without records. It runs the chaos workload's group members and one producer against a local 3 + 3
cluster, then, ROUNDS times: finds the group's coordinator, kills or stops (SIGSTOP) it for HOLD seconds,
brings it back, and waits SETTLE seconds::

    python -m chaos.coordinator_moves pause|kill HOLD ROUNDS SETTLE OUT

With KRAFTY_CHAOS_CLIENT_DEBUG_DIR set the members print librdkafka's consumer-group debug log to
stderr (lines tagged g0#consumer-N, g1#consumer-N); the brokers' logs (with the group
coordinator's rebalance lines) are in OUT/cluster."""

from __future__ import annotations

import contextlib
import os
import sys
import time

from confluent_kafka.admin import AdminClient

from chaos.cluster import LocalCluster
from chaos.history import History
from chaos.runner import Options, setup_topic
from chaos.workload import Counter, GroupWorker, ProducerWorker, _NullLogger

TOPIC, GROUP = "chaos", "chaos-group"


def coordinator(admin: AdminClient, group: str = GROUP) -> int | None:
    """The node id of the group's coordinator (DescribeGroups), None when nobody answers."""
    try:
        return admin.describe_consumer_groups([group], request_timeout=5)[group].result(6).coordinator.id
    except Exception:  # noqa: BLE001 - the caller retries
        return None


def longest_gap(hist: History, process: str, since: float, until: float) -> float:
    """The longest time ``process`` went without records in [since, until] (edges count)."""
    ts = [op["t"] for op in hist.snapshot() if op["f"] == "poll" and op["process"] == process
          and since <= op["t"] <= until]
    pts = [since, *ts, until]
    return max(b - a for a, b in zip(pts, pts[1:], strict=False))


@contextlib.contextmanager
def group_workload(directory: str):
    """A local 3 + 3 cluster with the chaos topic, one producer (100 records/s) and the chaos workload's
    two group members, all receiving records: yields (cluster, history, members, admin client)."""
    c = LocalCluster(directory)
    hist = History()
    workers = []
    try:
        c.start_all()
        setup_topic(c, Options())
        members = [GroupWorker(i, c.bootstrap, TOPIC, GROUP, hist) for i in range(2)]
        workers = [ProducerWorker(0, c.bootstrap, TOPIC, 6, hist, Counter(), 100), *members]
        for w in workers:
            w.start()
        deadline = time.monotonic() + 60
        while not all(m.last_records_t for m in members):
            if time.monotonic() > deadline:
                raise RuntimeError("the group members got no records within 60 s")
            time.sleep(0.5)
        yield c, hist, members, AdminClient({"bootstrap.servers": c.bootstrap, "logger": _NullLogger()})
    finally:
        for w in workers:
            w.stop()
        for w in workers:
            w.join(60)
        c.close()


def main(argv: list[str]) -> int:
    mode, hold, rounds, settle, out = argv[0], float(argv[1]), int(argv[2]), float(argv[3]), argv[4]
    os.makedirs(out, exist_ok=True)
    with group_workload(os.path.join(out, "cluster")) as (c, hist, _members, admin):
        time.sleep(5)
        for r in range(rounds):
            coord = coordinator(admin)
            if coord is None:
                print(f"{hist.now():7.2f} round {r}: no coordinator found", flush=True)
                continue
            node = c.by_id(coord)
            start = hist.now()
            print(f"{start:7.2f} round {r}: {mode} the coordinator {node.name} for {hold:g}s", flush=True)
            c.pause(node.name) if mode == "pause" else c.kill(node.name)
            time.sleep(hold)
            c.resume(node.name) if mode == "pause" else c.start(node.name)
            healed = hist.now()
            time.sleep(settle)
            end = hist.now()
            after = [next((round(op["t"] - healed, 2) for op in hist.snapshot() if op["f"] == "poll"
                           and op["process"] == p and op["t"] > healed), None) for p in ("g0", "g1")]
            print(f"{end:7.2f} round {r}: longest time without records "
                  f"{[round(longest_gap(hist, p, start - 1, end), 2) for p in ('g0', 'g1')]}, first records "
                  f"{after} s after the heal, coordinator now {coordinator(admin)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
