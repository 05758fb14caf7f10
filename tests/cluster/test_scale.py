"""Scale: 10,000 partitions on 3 controllers + 3 brokers, then kill -9 of the active controller.

    .venv/bin/python -m pytest -m slow tests/cluster/test_scale.py -s

Creates 100 topics x 100 partitions (RF 3) with confluent_kafka's AdminClient in batches, kills the
active controller, and checks that a new controller takes over and that every broker, asked
directly (a raw Metadata v1 request on its own listener), lists all 10,000 partitions with the
same leaders, replicas and ISR. Prints the time to create, the time to converge after the
failover and each process's RSS (VmRSS)."""

from __future__ import annotations

import os
import socket
import struct
import time

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import Cluster, wait_until

TOPICS, PER_TOPIC, RF, BATCH = 100, 100, 3, 10
TOTAL = TOPICS * PER_TOPIC


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(min(1 << 20, n - len(buf)))
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return bytes(buf)


def broker_metadata(host: str, port: int, timeout: float = 60) -> dict[tuple[str, int], tuple[int, tuple, tuple]]:
    """All topics' partitions as one broker itself sees them: Metadata v1 (null topics = all)
    sent straight to that broker, so no client routing picks another one."""
    client = b"scale-test"
    body = struct.pack(">hhih", 3, 1, 7, len(client)) + client + struct.pack(">i", -1)
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", _recv_exact(s, 4))[0]
        data = _recv_exact(s, size)
    pos = 0

    def i16():
        nonlocal pos
        pos += 2
        return struct.unpack_from(">h", data, pos - 2)[0]

    def i32():
        nonlocal pos
        pos += 4
        return struct.unpack_from(">i", data, pos - 4)[0]

    def string():
        nonlocal pos
        n = i16()
        if n < 0:
            return None
        pos += n
        return data[pos - n:pos].decode()

    assert i32() == 7  # correlation id
    for _ in range(i32()):  # brokers
        i32(), string(), i32(), string()
    i32()  # controller id
    out = {}
    for _ in range(i32()):
        err, name = i16(), string()
        pos += 1  # is_internal
        assert err == 0, (name, err)
        for _ in range(i32()):
            perr, pid, leader = i16(), i32(), i32()
            replicas = tuple(i32() for _ in range(i32()))
            isr = tuple(sorted(i32() for _ in range(i32())))
            out[(name, pid)] = (leader, replicas, isr, perr)
    return out


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _scale_topics(snap) -> dict:
    return {k: v for k, v in snap.items() if k[0].startswith("scale-") and k[0][6:].isdigit()}


def _consistent(c: Cluster, ports: list[int]) -> dict | None:
    """The partition map when every broker reports all TOTAL partitions, each with a leader and
    a full ISR, and all brokers agree; otherwise None."""
    first = None
    for port in ports:
        snap = _scale_topics(broker_metadata("127.0.0.1", port))
        if len(snap) != TOTAL:
            return None
        if any(v[0] < 0 or len(v[2]) != RF or v[3] != 0 for v in snap.values()):
            return None
        if first is None:
            first = snap
        elif snap != first:
            return None
    return first


@pytest.mark.slow
def test_10k_partitions_survive_active_controller_kill(tmp_path):
    # Kafka's default session/heartbeat/lag settings: the 3 s session of conftest.FAST fences
    # brokers while they create 1,000 partitions at a time
    c = Cluster(str(tmp_path))
    ports = [c.base + i for i in range(c.n_brokers)]
    c.start()
    report: list[str] = []
    try:
        admin = AdminClient({"bootstrap.servers": c.bootstrap, "socket.timeout.ms": 120000})
        wait_until(lambda: len(admin.list_topics(timeout=10).brokers) == c.n_brokers, 120, "all brokers registered")

        # registered is not unfenced: wait until an RF-3 CreateTopics is accepted
        wait_until(lambda: admin.create_topics([NewTopic("scale-probe", 1, RF)])["scale-probe"].result(30) or True,
                   120, "an RF-3 CreateTopics accepted", interval=1)
        t0 = time.time()
        names = [f"scale-{i:03d}" for i in range(TOPICS)]
        refused = 0  # INVALID_REPLICATION_FACTOR while a broker is (briefly) fenced under load
        pending = list(names)
        deadline = time.time() + 1200
        while pending and time.time() < deadline:
            batch, pending = pending[:BATCH], pending[BATCH:]
            for name, fut in admin.create_topics([NewTopic(n, PER_TOPIC, RF) for n in batch],
                                                 operation_timeout=300, request_timeout=600).items():
                try:
                    fut.result(600)
                except KafkaException as e:
                    if e.args[0].code() != KafkaError.INVALID_REPLICATION_FACTOR:
                        raise
                    refused += 1
                    pending.append(name)
                    time.sleep(1)
        assert not pending, f"topics not created: {pending[:5]}..."
        t_acked = time.time() - t0
        before = wait_until(lambda: _consistent(c, ports), 900, "10,000 partitions with leaders and full ISR on every broker",
                            interval=2)
        t_created = time.time() - t0
        report.append(f"create: {refused} CreateTopics refused with INVALID_REPLICATION_FACTOR and retried")
        report.append(f"create: CreateTopics acked after {t_acked:.1f}s; all brokers consistent "
                      f"(leaders + full ISR) after {t_created:.1f}s")
        for name, p in sorted(c.procs.items()):
            report.append(f"RSS before failover {name}: {rss_mib(p.pid):.0f} MiB")

        active = wait_until(c.active_controller, 30, "an active controller")
        t1 = time.time()
        c.kill(active)
        new_active = wait_until(lambda: (n := c.active_controller()) != active and n, 120, "a new active controller",
                                interval=0.2)
        t_new = time.time() - t1
        # the new controller works: a CreateTopics completes through it
        admin.create_topics([NewTopic("scale-after-failover", 1, RF)], operation_timeout=60,
                            request_timeout=120)["scale-after-failover"].result(180)
        t_create_after = time.time() - t1
        after = wait_until(lambda: _consistent(c, ports), 600, "all brokers consistent after the failover",
                           interval=1)
        t_conv = time.time() - t1
        report.append(f"failover: killed {active}; {new_active} active after {t_new:.1f}s; "
                      f"first CreateTopics after {t_create_after:.1f}s; all brokers consistent after {t_conv:.1f}s")
        assert set(after) == set(before)
        # replicas never move on a controller failover
        assert all(after[k][1] == before[k][1] for k in before)
        for name, p in sorted(c.procs.items()):
            report.append(f"RSS after failover  {name}: {rss_mib(p.pid):.0f} MiB")
        log_bytes = {n: os.path.getsize(os.path.join(c.dir, f"{n}.log")) for n in c.configs}
        report.append(f"log sizes: {log_bytes}")
    finally:
        print("\n" + "\n".join(report))
        c.shutdown()
