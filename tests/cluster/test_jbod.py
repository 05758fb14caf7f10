"""JBOD on real processes (1 controller + 3 brokers): one of a broker's two log dirs is a small
tmpfs that is filled up under an acks=all idempotent stream: only its partitions go offline on that
broker (KAFKA_STORAGE_ERROR, DescribeLogDirs says so), leadership moves to the other replicas and
confluent-kafka follows it, the broker keeps serving its other dir, nothing acknowledged is lost.
Then replicas are moved between log dirs with `krafty reassign-partitions` (log_dirs in the JSON,
AlterReplicaLogDirs) under a stream. Prints the figures: how long the produce stream to the failed
dir's partitions stalled, and the move's speed."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import FAST, ROOT, Cluster, wait_until

PARTITIONS = 6


def describe_log_dirs(bootstrap: str, broker_id: int):
    """{log dir: (error code, {(topic, partition, is_future)})} of one broker, through krafty's admin client."""
    from broker.protocol.apis import ApiKey
    from krafty.consumer_groups import GroupAdmin, parse_bootstrap

    async def run():
        a = GroupAdmin(parse_bootstrap(bootstrap), 10.0, versions={ApiKey.DESCRIBE_LOG_DIRS: (1, 4)})
        try:
            await a.start()
            r = await a._send(a.brokers[broker_id], ApiKey.DESCRIBE_LOG_DIRS, {"topics": None})
            return {x.log_dir: (int(x.error_code), {(t.name, p.partition_index, p.is_future_key)
                                                    for t in x.topics for p in t.partitions}) for x in r.results}
        finally:
            a.close()
    return asyncio.run(run())


class KeyedStream:
    """An acks=all idempotent producer writing numbered records to every partition in turn; keeps
    the acknowledged (partition, value) pairs and the time of each partition's acks."""

    def __init__(self, bootstrap: str, topic: str):
        self.acked: list[tuple[int, int]] = []
        self.ack_times: dict[int, list[float]] = {p: [] for p in range(PARTITIONS)}
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                           "linger.ms": 5, "message.timeout.ms": 120000})
        self.topic = topic
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _cb(self, err, msg):
        if err is None:
            self.acked.append((msg.partition(), int(msg.value())))
            self.ack_times[msg.partition()].append(time.monotonic())
        else:
            self.errors.append(str(err))

    def _run(self):
        i = 0
        while not self.stop.is_set():
            self.p.produce(self.topic, value=b"%d" % i, partition=i % PARTITIONS, on_delivery=self._cb)
            i += 1
            self.p.poll(0.001)
        self.p.flush(120)

    def close(self):
        self.stop.set()
        self.t.join(150)


def consume_all(bootstrap: str, topic: str, expect: int) -> list[tuple[int, int]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.time()}", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out: list[tuple[int, int]] = []
    deadline = time.time() + 90
    idle = 0
    while time.time() < deadline and (len(out) < expect or idle < 2):
        msgs = c.consume(10_000, 1)
        idle = 0 if msgs else idle + 1
        out += [(m.partition(), int(m.value())) for m in msgs if m.error() is None]
    c.close()
    return out


def check_nothing_lost(bs: str, topic: str, stream: KeyedStream) -> None:
    assert not stream.errors, stream.errors[:5]
    got = consume_all(bs, topic, len(stream.acked))
    assert len(got) == len(set(got)), "duplicates"
    lost = set(stream.acked) - set(got)
    assert not lost, f"{len(lost)} acknowledged records lost"


def leaders(admin, topic) -> dict[int, tuple[int, tuple[int, ...]]]:
    md = admin.list_topics(topic, timeout=5).topics[topic].partitions
    return {p: (md[p].leader, tuple(md[p].isrs)) for p in md}


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 24 MB tmpfs (root can mount one; a full one answers ENOSPC as a full disk does)."""
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (the test fills a small file system)")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield str(mnt)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def fill(path: str) -> None:
    with open(os.path.join(path, "filler"), "wb") as f:
        try:
            while True:
                f.write(b"\0" * (1 << 20))
                f.flush()
        except OSError:
            pass


def test_a_full_log_dir_takes_only_its_partitions_offline(tmp_path, small_tmpfs):
    c = Cluster(str(tmp_path / "cluster"), controllers=1, brokers=3, overrides=FAST)
    os.makedirs(c.dir)
    full, healthy = os.path.join(small_tmpfs, "d1"), os.path.join(c.dir, "broker-2-d2")
    c.configs["broker-2"]["log.dirs"] = f"{full},{healthy}"
    c.configs["broker-2"]["metadata.log.dir"] = os.path.join(c.dir, "broker-2-meta")
    c.start()
    try:
        bs = c.bootstrap
        admin = AdminClient({"bootstrap.servers": bs})
        wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == 3, 60, "brokers up")
        admin.create_topics([NewTopic("jbod", num_partitions=PARTITIONS, replication_factor=3)])["jbod"].result(30)
        wait_until(lambda: all(ld >= 0 for ld, _ in leaders(admin, "jbod").values()), 30, "leaders")
        dirs = describe_log_dirs(bs, 2)
        in_full = {p for _t, p, _f in dirs[full][1]}
        assert in_full and len(in_full) < PARTITIONS, dirs  # both dirs hold some
        stream = KeyedStream(bs, "jbod")
        try:
            wait_until(lambda: len(stream.acked) > 3000, 60, "records flowing")
            led = {p for p, (ld, _isr) in leaders(admin, "jbod").items() if ld == 2 and p in in_full}
            t_fill = time.monotonic()
            fill(small_tmpfs)
            wait_until(lambda: describe_log_dirs(bs, 2)[full][0] == 56, 30, "the full dir reported offline")
            # the controller took broker 2's replicas in that dir out of leadership and the ISR ...
            wait_until(lambda: all(ld != 2 and 2 not in isr for p, (ld, isr) in leaders(admin, "jbod").items()
                                   if p in in_full), 30, "replicas of the full dir out of the ISR")
            # ... and only those: broker 2 is alive and still in the ISR of its other partitions
            assert c.procs["broker-2"].poll() is None
            assert all(2 in isr for p, (_ld, isr) in leaders(admin, "jbod").items() if p not in in_full)
            n = len(stream.acked)
            wait_until(lambda: len(stream.acked) > n + 3000, 60, "records flowing after the failure")
            # the longest pause in acks of a partition of the full dir, from the fill on
            stalls = {}
            for p in in_full:
                ts = [t for t in stream.ack_times[p] if t >= t_fill - 1]
                stalls[p] = max((b - a for a, b in zip(ts, ts[1:], strict=False)), default=0.0)
            print(f"\nFIGURE jbod: longest pause of acks after the fill, partitions of the full dir led by broker 2 "
                  f"(new leader elected): {', '.join(f'{stalls[p]:.2f}' for p in sorted(led)) or 'none led'} s; "
                  f"followed there: {', '.join(f'{stalls[p]:.2f}' for p in sorted(in_full - led))} s")
        finally:
            stream.close()
        check_nothing_lost(bs, "jbod", stream)
        assert "log dir " + full in c.log_text("broker-2")
    finally:
        c.shutdown()


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "krafty", "reassign-partitions", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_reassign_partitions_moves_replicas_between_log_dirs_under_a_stream(tmp_path):
    c = Cluster(str(tmp_path / "cluster"), controllers=1, brokers=3, overrides=FAST)
    os.makedirs(c.dir)
    for b in (2, 3, 4):
        c.configs[f"broker-{b}"]["log.dirs"] = ",".join(os.path.join(c.dir, f"broker-{b}-d{i}") for i in (1, 2))
    c.start()
    try:
        bs = c.bootstrap
        admin = AdminClient({"bootstrap.servers": bs})
        wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == 3, 60, "brokers up")
        admin.create_topics([NewTopic("mv", num_partitions=PARTITIONS, replica_assignment=[[2, 3]] * PARTITIONS,
                                      config={"segment.bytes": "262144"})])["mv"].result(30)
        wait_until(lambda: all(ld >= 0 for ld, _ in leaders(admin, "mv").values()), 30, "leaders")
        stream = KeyedStream(bs, "mv")
        try:
            wait_until(lambda: len(stream.acked) > 3000, 60, "records flowing")
            where = describe_log_dirs(bs, 2)
            now = {p: d for d, (_e, tps) in where.items() for _t, p, _f in tps}
            other = {p: next(d for d in where if d != now[p]) for p in range(PARTITIONS)}
            d4 = os.path.join(c.dir, "broker-4-d2")
            # partitions 0-2: broker 2's replica to its other dir; partition 0 also from broker 3 to broker 4's d2
            plan = {"version": 1, "partitions": [
                {"topic": "mv", "partition": p, "replicas": [2, 4] if p == 0 else [2, 3],
                 "log_dirs": [other[p], d4 if p == 0 else "any"]} for p in range(3)]}
            f = tmp_path / "plan.json"
            f.write_text(json.dumps(plan))
            r = cli("--bootstrap-server", bs, "--execute", "--reassignment-json-file", str(f))
            assert r.returncode == 0, r.stdout + r.stderr
            assert "Successfully started log directory move(s) for: mv-0-2,mv-0-4,mv-1-2,mv-2-2" in r.stdout

            def done():
                out = cli("--bootstrap-server", bs, "--verify", "--reassignment-json-file", str(f)).stdout
                return out.count("completed successfully.") == 4 and "is completed." in out
            wait_until(done, 90, "moves completed", interval=0.5)
            after2, after4 = describe_log_dirs(bs, 2), describe_log_dirs(bs, 4)
            for p in range(3):
                assert ("mv", p, False) in after2[other[p]][1]
            assert ("mv", 0, False) in after4[d4][1]
            assert not any(fut for _e, tps in after2.values() for _t, _p, fut in tps)
            n = len(stream.acked)
            wait_until(lambda: len(stream.acked) > n + 2000, 30, "records flowing after the moves")
        finally:
            stream.close()
        check_nothing_lost(bs, "mv", stream)
        for p in range(3):  # the old directories are gone
            wait_until(lambda p=p: not os.path.exists(os.path.join(now[p], f"mv-{p}")), 30, "old dir removed")
    finally:
        c.shutdown()
