"""Rebalance time when an 11th member joins a stable 10-member group on a 100-partition topic: the
classic protocol (librdkafka's eager ``range`` and incremental ``cooperative-sticky`` assignors)
against the consumer protocol (KIP-848, ``group.protocol=consumer``, the broker's uniform
assignor), in one run on one cluster (3 controllers + 3 brokers, local processes, loopback,
``__consumer_offsets`` at RF 3).

For each protocol and trial: 10 confluent-kafka members form a group and settle; then an 11th
joins. Reported:
  join   from the 11th member's subscribe until every member's assignment is the new split
         (all 100 partitions, each owned once, the 11th member included);
  pause  the longest time any of the 10 members that keep partitions had none at all (the
         stop-the-world of an eager rebalance; 0 when members keep theirs while others move);
  moved  partitions that changed owner.
Clients heartbeat every --heartbeat-ms (classic: the client's heartbeat.interval.ms; consumer
protocol: the broker's group.consumer.heartbeat.interval.ms, which the coordinator sends them).

    .venv/bin/python bench/rebalance.py --trials 3 [--heartbeat-ms 500] [--json /tmp/rebalance.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from confluent_kafka import Consumer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.groups import split_done, summary  # noqa: E402
from tests.cluster.conftest import FAST, Cluster, wait_until  # noqa: E402

PROTOCOLS = ("classic-eager", "classic-cooperative", "consumer")


class Member(threading.Thread):
    """A member polled by its own thread; tracks its partitions (incrementally for the
    cooperative protocols) and how long it had none."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str, protocol: str, heartbeat_ms: int):
        super().__init__(daemon=True, name=name)
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                "enable.auto.commit": False, "auto.offset.reset": "latest"}
        if protocol == "consumer":
            conf["group.protocol"] = "consumer"
        else:
            conf.update({"session.timeout.ms": 10000, "heartbeat.interval.ms": heartbeat_ms,
                         "partition.assignment.strategy": "range" if protocol == "classic-eager"
                         else "cooperative-sticky"})
        self.conf, self.topic, self.protocol = conf, topic, protocol
        self.owned: frozenset = frozenset()
        self.changed_at = 0.0
        self.empty_since: float | None = None
        self.gaps: list[tuple[float, float]] = []  # (start, end) of times with no partition
        self.stop_evt = threading.Event()
        self.error: BaseException | None = None

    def _set(self, owned: frozenset) -> None:
        now = time.monotonic()
        if not owned and self.owned and self.empty_since is None:
            self.empty_since = now
        if owned and self.empty_since is not None:
            self.gaps.append((self.empty_since, now))
            self.empty_since = None
        self.owned, self.changed_at = owned, now

    def run(self) -> None:
        try:
            c = Consumer(self.conf)
            incremental = self.protocol != "classic-eager"

            def on_assign(_c, ps):
                got = frozenset(p.partition for p in ps)
                self._set(self.owned | got if incremental else got)

            def on_revoke(_c, ps):
                gone = frozenset(p.partition for p in ps)
                self._set(self.owned - gone if incremental else frozenset())

            c.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
            while not self.stop_evt.is_set():
                c.poll(0.02)
            c.close()
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            self.error = e

    def stop(self) -> None:
        self.stop_evt.set()
        self.join(30)


def trial(c: Cluster, topic: str, protocol: str, members: int, partitions: int, heartbeat_ms: int) -> dict:
    group = f"rb-{protocol}-{uuid.uuid4().hex[:6]}"
    ms = [Member(c.bootstrap, group, topic, f"m{k:02d}", protocol, heartbeat_ms) for k in range(members)]
    for m in ms:
        m.start()
    try:
        wait_until(lambda: split_done(ms, partitions), 180, f"{members} members split the topic", interval=0.01)
        time.sleep(2.0)  # settled: no follow-up rebalance pending
        before = {m.name: m.owned for m in ms}
        extra = Member(c.bootstrap, group, topic, "m-extra", protocol, heartbeat_ms)
        t1 = time.monotonic()
        extra.start()
        all_ = [*ms, extra]
        done = wait_until(lambda: extra.owned and split_done(all_, partitions), 180, "the 11th member in",
                          interval=0.01)
        pause = max((e - s for m in ms for s, e in m.gaps if e > t1), default=0.0)
        moved = sum(len(before[m.name] - m.owned) for m in ms)
        return {"join": done - t1, "pause": pause, "moved": moved}
    finally:
        for m in ms:
            m.stop()
        extra.stop()
        for m in [*ms, extra]:
            if m.error:
                raise m.error


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--members", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--heartbeat-ms", type=int, default=500)
    ap.add_argument("--protocols", default=",".join(PROTOCOLS))
    ap.add_argument("--json", help="also write the results as JSON here")
    a = ap.parse_args()
    overrides = dict(FAST, **{"group.consumer.min.heartbeat.interval.ms": str(min(a.heartbeat_ms, 5000)),
                              "group.consumer.heartbeat.interval.ms": str(a.heartbeat_ms),
                              "group.initial.rebalance.delay.ms": "0"})
    d = tempfile.mkdtemp(prefix="krafty-rebalance-bench-")
    c = Cluster(d, overrides=overrides)
    c.start()
    res: dict = {"overrides": overrides, "cores": os.cpu_count(), "trials": {}}
    try:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == c.n_brokers, 120, "all brokers registered")
        topic = f"rebalance-{uuid.uuid4().hex[:6]}"
        wait_until(lambda: admin.create_topics([NewTopic(topic, a.partitions, 3)])[topic].result(30) or True, 120,
                   "topic creation", interval=1)
        wait_until(lambda: all(p.leader >= 0 for p in admin.list_topics(topic, timeout=5).topics[topic]
                               .partitions.values()), 60, "topic leaders")
        print(f"11th member joins a {a.members}-member group on {a.partitions} partitions, "
              f"heartbeat {a.heartbeat_ms} ms, {a.trials} trials", flush=True)
        for i in range(a.trials):
            for protocol in a.protocols.split(","):
                r = trial(c, topic, protocol, a.members, a.partitions, a.heartbeat_ms)
                res["trials"].setdefault(protocol, []).append(r)
                print(f"  trial {i + 1} {protocol:20s} join {r['join']:.2f}s pause {r['pause']:.2f}s "
                      f"moved {r['moved']}", flush=True)
        for protocol, rs in res["trials"].items():
            print(f"{protocol:20s} join: {summary([r['join'] for r in rs])}; "
                  f"pause: {summary([r['pause'] for r in rs])}; moved median {statistics.median(r['moved'] for r in rs)}")
    finally:
        c.shutdown()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
