"""Consumer-group figures on a real 3-controller + 3-broker cluster (local processes, loopback),
with ``__consumer_offsets`` at replication factor 3 (commits are acks=all appends).

(a) rebalance time: 10 confluent-kafka consumers subscribe to a 100-partition topic at once;
    timed from the first subscribe until every member's on_assign has fired for a split of
    all 100 partitions with no overlap (includes ``group.initial.rebalance.delay.ms``, Kafka's
    3000 ms by default, which an empty group waits for more members). Then an 11th member
    joins the stable group (a full eager rebalance, no initial delay) and one member leaves
    (LeaveGroup): each timed until the new split is in place everywhere.
(b) offset commit rate: K threads, each a confluent-kafka consumer of its own group (so the
    groups spread over the coordinators), doing synchronous OffsetCommits of one partition's
    offset in a loop; commits/s over all threads, for K = 1 and K = 8. As a reference, the
    same loop with synchronous acks=all produces of one small record to an RF-3 topic (the
    same replication round trip).
(c) coordinator failover: a group member commits every 50 ms; ``kill -9`` its coordinator;
    timed until FindCoordinator names another broker and an OffsetFetch there returns the
    offsets, and until the member's next successful commit. The broker is restarted (and
    gets its leadership back) before the next trial.

    .venv/bin/python bench/groups.py                      # defaults: 3 rebalance, 3 failover trials
    .venv/bin/python bench/groups.py --trials 5 --commit-seconds 10 --json /tmp/groups.json

The cluster runs with the multi-process tests' timing (broker.session.timeout.ms 3000,
heartbeat 500); every other key has Kafka's default unless given with --override k=v.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from confluent_kafka import Consumer, KafkaException, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.cluster.conftest import FAST, Cluster, wait_until  # noqa: E402
from tests.integration.group_workers import committed_offsets, find_coordinator  # noqa: E402


def summary(xs: list[float], unit: str = "s") -> str:
    if not xs:
        return "no successful trials"
    s = sorted(xs)
    return f"n={len(s)} median={statistics.median(s):.2f}{unit} min={s[0]:.2f}{unit} max={s[-1]:.2f}{unit}"


class Member(threading.Thread):
    """One confluent-kafka group member; records when its assignment changes."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str):
        super().__init__(daemon=True, name=name)
        self.conf = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                     "enable.auto.commit": False, "session.timeout.ms": 10000, "heartbeat.interval.ms": 500,
                     "partition.assignment.strategy": "range", "auto.offset.reset": "latest"}
        self.topic = topic
        self.owned: frozenset = frozenset()
        self.changed_at = 0.0
        self.stop_evt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            c = Consumer(self.conf)

            def on_assign(_c, ps):
                self.owned = frozenset(p.partition for p in ps)
                self.changed_at = time.monotonic()

            def on_revoke(_c, _ps):
                self.owned = frozenset()
                self.changed_at = time.monotonic()

            c.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
            while not self.stop_evt.is_set():
                c.poll(0.02)
            c.close()
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            self.error = e

    def stop(self) -> None:
        self.stop_evt.set()
        self.join(30)


def split_done(members, partitions: int):
    owned = [m.owned for m in members]
    if any(not o for o in owned) or sum(len(o) for o in owned) != partitions:
        return None
    if frozenset().union(*owned) != frozenset(range(partitions)):
        return None
    return max(m.changed_at for m in members)


def rebalance_trials(c: Cluster, trials: int, members: int, partitions: int, log) -> dict:
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    topic = f"rebalance-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, partitions, 3)])[topic].result(60)
    wait_until(lambda: all(p.leader >= 0 for p in admin.list_topics(topic, timeout=5).topics[topic]
                           .partitions.values()) and len(admin.list_topics(topic, timeout=5).topics[topic]
                                                         .partitions) == partitions, 60, "topic leaders")
    out: dict[str, list[float]] = {"form": [], "join": [], "leave": []}
    for i in range(trials):
        group = f"rb-{i}-{uuid.uuid4().hex[:6]}"
        ms = [Member(c.bootstrap, group, topic, f"m{k:02d}") for k in range(members)]
        t0 = time.monotonic()
        for m in ms:
            m.start()
        try:
            done = wait_until(lambda ms=ms: split_done(ms, partitions), 120, f"{members} members split the topic",
                              interval=0.01)
            out["form"].append(done - t0)
            time.sleep(1.0)
            extra = Member(c.bootstrap, group, topic, "m-extra")
            t1 = time.monotonic()
            extra.start()
            ms.append(extra)
            done = wait_until(lambda ms=ms: split_done(ms, partitions), 120, "the 11th member in", interval=0.01)
            out["join"].append(done - t1)
            time.sleep(1.0)
            leaver = ms.pop(0)
            t2 = time.monotonic()
            leaver.stop()
            done = wait_until(lambda ms=ms, t2=t2: min(m.changed_at for m in ms) > t2 and split_done(ms, partitions),
                              120, "the split after a member left", interval=0.01)
            out["leave"].append(done - t2)
            log(f"  trial {i + 1}: {members} members formed in {out['form'][-1]:.2f}s, "
                f"11th joined in {out['join'][-1]:.2f}s, one left in {out['leave'][-1]:.2f}s")
        finally:
            for m in ms:
                m.stop()
            for m in ms:
                if m.error:
                    raise m.error
    return out


def _timed_workers(threads: int, seconds: float, prepare) -> tuple[int, float]:
    """``threads`` threads each call ``prepare(k)`` (set-up and warm-up), which returns
    ``(step, close)``; once all are ready, each repeats ``step()`` for ``seconds``.
    Returns (steps done, elapsed seconds)."""
    counts = [0] * threads
    errors: list[BaseException] = []
    start = threading.Barrier(threads + 1)
    stop = threading.Event()

    def worker(k: int) -> None:
        try:
            step, close = prepare(k)
            start.wait()
            while not stop.is_set():
                step()
                counts[k] += 1
            close()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
            start.abort()

    ts = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(threads)]
    for t in ts:
        t.start()
    start.wait()
    t0 = time.monotonic()
    time.sleep(seconds)
    stop.set()
    total = sum(counts)
    elapsed = time.monotonic() - t0
    for t in ts:
        t.join(30)
    if errors:
        raise errors[0]
    return total, elapsed


def _rf3_topic(c: Cluster, prefix: str, partitions: int) -> str:
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    topic = f"{prefix}-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, partitions, 3)])[topic].result(60)
    wait_until(lambda: len(admin.list_topics(topic, timeout=5).topics[topic].partitions) == partitions, 60, "topic")
    return topic


def commit_rate(c: Cluster, threads: int, seconds: float, log) -> float:
    topic = _rf3_topic(c, "commits", threads)

    def prepare(k: int):
        cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": f"committer-{k}-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
        off = [0]
        # warm up: coordinator found, connection open
        cons.commit(offsets=[TopicPartition(topic, k, off[0])], asynchronous=False)

        def step() -> None:
            off[0] += 1
            cons.commit(offsets=[TopicPartition(topic, k, off[0])], asynchronous=False)
        return step, cons.close

    total, elapsed = _timed_workers(threads, seconds, prepare)
    rate = total / elapsed
    log(f"  {threads} committer(s): {total} synchronous commits in {elapsed:.1f}s = {rate:,.0f} commits/s")
    return rate


def produce_rate(c: Cluster, threads: int, seconds: float, log) -> float:
    """The reference for (b): synchronous acks=all produces of one small record (each thread
    its own partition of an RF-3 topic), the same replication round trip a commit makes."""
    from confluent_kafka import Producer

    topic = _rf3_topic(c, "sync-produce", threads)

    def prepare(k: int):
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 0})
        p.produce(topic, b"warm", partition=k)
        p.flush(30)

        def step() -> None:
            p.produce(topic, b"x" * 40, partition=k)
            if p.flush(30):
                raise RuntimeError("produce timed out")
        return step, lambda: None

    total, elapsed = _timed_workers(threads, seconds, prepare)
    rate = total / elapsed
    log(f"  reference, {threads} producer(s): {total} synchronous acks=all produces in {elapsed:.1f}s "
        f"= {rate:,.0f} produces/s")
    return rate


def failover_trials(c: Cluster, trials: int, log) -> dict:
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    topic = f"fo-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(60)
    out: dict[str, list[float]] = {"offset_fetch": [], "member_commit": []}
    for i in range(trials):
        group = f"fo-{i}-{uuid.uuid4().hex[:6]}"
        cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": group, "enable.auto.commit": False,
                         "session.timeout.ms": 10000, "heartbeat.interval.ms": 500})
        cons.subscribe([topic])
        wait_until(lambda cons=cons: cons.poll(0.1) is None and cons.assignment(), 60, "the member's assignment")
        ok_at: list[float] = []
        stop = threading.Event()
        off = [0]
        lock = threading.Lock()

        def committer(cons=cons, ok_at=ok_at, stop=stop, off=off, lock=lock):
            while not stop.is_set():
                with lock:
                    off[0] += 1
                    o = off[0]
                try:
                    cons.commit(offsets=[TopicPartition(topic, 0, o)], asynchronous=False)
                    ok_at.append(time.monotonic())
                except KafkaException:
                    pass
                cons.poll(0.05)

        th = threading.Thread(target=committer, daemon=True)
        th.start()
        wait_until(lambda ok_at=ok_at: len(ok_at) > 5, 30, "commits before the kill")
        coord = find_coordinator(c.bootstrap, group)[0]
        t0 = time.monotonic()
        c.kill(c.broker_name(coord))
        try:
            wait_until(lambda group=group, coord=coord: find_coordinator(c.bootstrap, group)[0] != coord
                       and committed_offsets(c.bootstrap, group), 120, "OffsetFetch at a new coordinator",
                       interval=0.05)
            out["offset_fetch"].append(time.monotonic() - t0)
            wait_until(lambda ok_at=ok_at, t0=t0: ok_at and ok_at[-1] > t0, 120, "a member commit after the kill",
                       interval=0.02)
            first = next(t for t in ok_at if t > t0)
            out["member_commit"].append(first - t0)
            log(f"  trial {i + 1}: killed coordinator {coord}: OffsetFetch at the new one after "
                f"{out['offset_fetch'][-1]:.2f}s, member's next commit after {out['member_commit'][-1]:.2f}s")
        finally:
            stop.set()
            th.join(30)
            cons.close()
            c.start(c.broker_name(coord))
        # back in the ISR of everything and leader again before the next trial
        wait_until(lambda coord=coord: coord in admin.list_topics(timeout=5).brokers, 120, "broker back")
        time.sleep(8)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=3, help="rebalance and failover trials")
    ap.add_argument("--members", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--commit-seconds", type=float, default=5.0)
    ap.add_argument("--committers", default="1,8", help="commit-rate thread counts")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="a broker config key")
    ap.add_argument("--only", default="abc", help="which measurements to run (letters a, b, c)")
    ap.add_argument("--keep", action="store_true", help="keep the cluster directory (logs)")
    ap.add_argument("--json", help="also write the results as JSON here")
    a = ap.parse_args()
    overrides = dict(FAST)
    for kv in a.override:
        k, _, v = kv.partition("=")
        overrides[k] = v

    def log(msg: str) -> None:
        print(msg, flush=True)

    d = tempfile.mkdtemp(prefix="krafty-groups-bench-")
    c = Cluster(d, overrides=overrides)
    res: dict = {"overrides": overrides, "cores": os.cpu_count()}
    c.start()
    try:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == c.n_brokers, 120, "all brokers registered")
        wait_until(lambda: admin.create_topics([NewTopic("warmup", 1, 3)])["warmup"].result(30) or True, 120,
                   "RF-3 topic creation", interval=1)
        if "a" in a.only:
            log(f"(a) rebalance: {a.members} members, {a.partitions}-partition topic, {a.trials} trials")
            rb = rebalance_trials(c, a.trials, a.members, a.partitions, log)
            res["rebalance_s"] = rb
            log(f"    group formed (incl. initial delay): {summary(rb['form'])}")
            log(f"    11th member joins a stable group:   {summary(rb['join'])}")
            log(f"    a member leaves (LeaveGroup):       {summary(rb['leave'])}")
        if "b" in a.only:
            log("(b) offset commit rate, __consumer_offsets RF 3, acks=all")
            ks = [int(k) for k in a.committers.split(",")]
            res["commits_per_s"] = {k: commit_rate(c, k, a.commit_seconds, log) for k in ks}
            res["sync_produces_per_s"] = {k: produce_rate(c, k, a.commit_seconds, log) for k in ks}
        if "c" in a.only:
            log(f"(c) coordinator failover (kill -9), {a.trials} trials")
            fo = failover_trials(c, a.trials, log)
            res["failover_s"] = fo
            log(f"    OffsetFetch at the new coordinator: {summary(fo['offset_fetch'])}")
            log(f"    member's next successful commit:    {summary(fo['member_commit'])}")
    finally:
        c.shutdown()
        if a.keep:
            log(f"logs kept in {d}")
        else:
            shutil.rmtree(d, ignore_errors=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
