"""Helpers for the ``krafty mirror`` tests: two local clusters, a mirror process, a produce stream
and record-by-record comparison of a source and a target partition. No pytest in here (the
cluster suite and bench/mirror.py import it too)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from krafty_node import REPO, KraftyNode

# settings for the small clusters of these tests: one replica of the internal topics,
# a short initial rebalance delay
NODE_PROPS = {
    "group.initial.rebalance.delay.ms": "200",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "5",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "5",
}
# record timestamps of the tests: recent, as time-based retention (7 days by default, 30 minutes
# on some test topics) would delete records stamped long ago while a test runs
T0 = int(time.time() * 1000) - 120_000
CLUSTER_IDS = {"A": "MVwAhj2lQR2sdYQm2rUjbw", "B": "a8W1Xr6mQwCJ7iPrJcvX1A", "C": "3KR7h1PnT5qNhMjTmzdfSw"}


def start_cluster(workdir: Path, alias: str) -> KraftyNode:
    """A one-node (broker and controller) cluster with its own cluster id."""
    node = KraftyNode(workdir, node_id=1, extra_properties={**NODE_PROPS, "cluster.id": CLUSTER_IDS[alias]})
    return node.start()


def wait_until(fn, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            v = fn()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - retried until the deadline
            last = e
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def mirror_config(a: str, b: str, **keys: str) -> str:
    """An MM2 config for flow A->B with small internal topics and short intervals."""
    lines = {
        "clusters": "A, B",
        "A.bootstrap.servers": a,
        "B.bootstrap.servers": b,
        "A->B.enabled": "true",
        "replication.factor": "1",
        "offset-syncs.topic.replication.factor": "1",
        "checkpoints.topic.replication.factor": "1",
        "heartbeats.topic.replication.factor": "1",
        "refresh.topics.interval.seconds": "2",
        "sync.topic.configs.interval.seconds": "2",
        "refresh.groups.interval.seconds": "2",
        "emit.checkpoints.interval.seconds": "1",
        "sync.group.offsets.interval.seconds": "1",
        "offset.flush.interval.ms": "1000",
    }
    lines.update(keys)
    return "".join(f"{k} = {v}\n" for k, v in lines.items())


class MirrorProcess:
    """``python -m krafty mirror CONFIG`` with JSON progress every second."""

    def __init__(self, workdir: Path, config: str, name: str = "mirror", extra_args: list[str] | None = None):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.config_path = self.workdir / f"{name}.properties"
        self.config_path.write_text(config)
        self.out_path = self.workdir / f"{name}.out"
        self.err_path = self.workdir / f"{name}.err"
        self.extra_args = extra_args or []
        self.proc: subprocess.Popen | None = None

    def start(self) -> MirrorProcess:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        with open(self.out_path, "ab") as out, open(self.err_path, "ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "krafty", "--log-level", "INFO", "mirror", str(self.config_path),
                 "--progress-interval", "1", "--progress-format", "json", *self.extra_args],
                cwd=str(REPO), stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def progress(self) -> list[dict]:
        out = []
        try:
            text = self.out_path.read_text()
        except OSError:
            return out
        for line in text.splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    def last_progress(self) -> dict | None:
        p = self.progress()
        return p[-1] if p else None

    def log(self) -> str:
        try:
            return self.err_path.read_text(errors="replace")
        except OSError:
            return ""

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(15)

    def stop(self, timeout: float = 60) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stop(30)
        self.kill()


def read_partition(bootstrap: str, topic: str, partition: int, committed: bool = False,
                   timeout: float = 60) -> list:
    """Every record of a partition from its start to its end now: (key, value, headers, timestamp)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "mirror-test-reader", "enable.auto.commit": False,
                  "isolation.level": "read_committed" if committed else "read_uncommitted",
                  "enable.partition.eof": True})
    try:
        tp = TopicPartition(topic, partition)
        lo, hi = c.get_watermark_offsets(tp, timeout=10)
        if hi <= lo:
            if hi < 0 or lo < 0:
                raise AssertionError(f"no watermarks for {topic}-{partition}: {(lo, hi)}")
            return []
        c.assign([TopicPartition(topic, partition, lo)])
        out = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                err = m.error()
                if err is not None:
                    if err.code() == err._PARTITION_EOF:
                        return out
                    raise KafkaException(err)
                out.append((m.key(), m.value(), tuple(m.headers() or ()), m.timestamp()[1]))
        raise AssertionError(f"reading {topic}-{partition} did not reach its end in {timeout}s")
    finally:
        c.close()


def dedupe(records: list) -> list:
    """A target's records with the copies an at-least-once restart made dropped (first kept)."""
    seen, out = set(), []
    for r in records:
        if r not in seen:
            seen.add(r)
            out.append(r)
    return out


class ProduceStream:
    """An idempotent acks=all producer writing ``key-seq`` records to every partition of a topic
    in a thread, with a header and an explicit timestamp on each, until stopped."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float = 500.0, value_size: int = 100):
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.rate, self.value_size = rate, value_size
        self.acked = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                      "linger.ms": 5})

        def delivered(err, msg):
            if err is None:
                self.acked += 1
            else:
                self.errors.append(err.str())

        seq = 0
        t0 = time.monotonic()
        pad = b"x" * max(0, self.value_size - 20)
        while not self._stop.is_set():
            due = t0 + seq / self.rate
            now = time.monotonic()
            if due > now:
                p.poll(min(due - now, 0.05))
                continue
            part = seq % self.partitions
            p.produce(self.topic, key=f"k{seq}".encode(), value=b"v%d-" % seq + pad, partition=part,
                      headers=[("seq", str(seq).encode())], timestamp=T0 + seq,
                      on_delivery=delivered)
            seq += 1
            p.poll(0)
        p.flush(60)
        self.sent = seq

    def start(self) -> ProduceStream:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(90)
