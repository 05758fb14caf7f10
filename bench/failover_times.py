"""Failover times on a real 3-controller + 3-broker cluster (local processes, loopback).

(a) partition leader failover: kill -9 the broker leading partition 0 of a RF-3 topic, then time
    until a surviving broker's Metadata (a raw Metadata v1 request sent to that broker) shows a
    new leader; the killed broker is restarted and back in the ISR before the next trial.
    Run once with the default broker.session.timeout.ms (9000, heartbeat 2000) and once with
    3000 / heartbeat 500.
(b) controller failover: kill -9 the active controller, then time until the first successful
    CreateTopics (a fresh RF-3 topic per attempt, retried every 100 ms); the killed controller is
    restarted before the next trial.

    .venv/bin/python bench/failover_times.py                   # 10 trials of each
    .venv/bin/python bench/failover_times.py --trials 5 --json /tmp/failover.json

Prints median and p99 (the max when there are fewer than 20 trials).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.cluster.conftest import Cluster, wait_until  # noqa: E402

TOPIC = "failover"


def partition_state(port: int, topic: str, pid: int = 0, timeout: float = 5) -> tuple[int, tuple, tuple]:
    """(leader, replicas, isr) of one partition as the broker on ``port`` itself reports it."""
    client, t = b"failover-bench", topic.encode()
    body = struct.pack(">hhih", 3, 1, 1, len(client)) + client + struct.pack(">ih", 1, len(t)) + t
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        hdr = b""
        while len(hdr) < 4:
            hdr += s.recv(4 - len(hdr)) or _closed()
        size = struct.unpack(">i", hdr)[0]
        data = b""
        while len(data) < size:
            data += s.recv(size - len(data)) or _closed()
    pos = 4
    def i16():
        nonlocal pos; pos += 2; return struct.unpack_from(">h", data, pos - 2)[0]  # noqa: E702
    def i32():
        nonlocal pos; pos += 4; return struct.unpack_from(">i", data, pos - 4)[0]  # noqa: E702
    def string():
        nonlocal pos
        n = i16()
        pos += max(n, 0)
        return data[pos - n:pos].decode() if n >= 0 else None
    for _ in range(i32()):
        i32(), string(), i32(), string()
    i32()
    for _ in range(i32()):
        err, name = i16(), string()
        pos += 1
        for _ in range(i32()):
            _perr, p, leader = i16(), i32(), i32()
            replicas = tuple(i32() for _ in range(i32()))
            isr = tuple(sorted(i32() for _ in range(i32())))
            if name == topic and p == pid:
                return leader, replicas, isr
    raise LookupError(f"{topic}-{pid} not in metadata from port {port} (error {err})")


def _closed():
    raise ConnectionError("closed")


def port_of(c: Cluster, broker_id: int) -> int:
    return c.base + broker_id - c.n_controllers - 1


def summary(xs: list[float]) -> str:
    if not xs:
        return "no successful trials"
    s = sorted(xs)
    p99 = s[max(0, int(round(0.99 * len(s))) - 1)] if len(s) >= 20 else s[-1]
    tag = "p99" if len(s) >= 20 else "max"
    return f"n={len(s)} median={statistics.median(s):.2f}s {tag}={p99:.2f}s min={s[0]:.2f}s"


def leader_trials(c: Cluster, trials: int, log) -> list[float]:
    ports = [c.base + i for i in range(c.n_brokers)]
    all_ids = tuple(range(c.n_controllers + 1, c.n_controllers + c.n_brokers + 1))

    def healthy():
        st = [partition_state(p, TOPIC) for p in ports]
        return all(s[0] >= 0 and s[2] == all_ids for s in st) and len({s[0] for s in st}) == 1 and st[0]
    out = []
    for i in range(trials):
        leader = wait_until(healthy, 120, "partition 0 with a leader and full ISR on every broker", interval=0.2)[0]
        survivors = [p for p in ports if p != port_of(c, leader)]
        t0 = time.monotonic()
        c.kill(c.broker_name(leader))
        killed_at = time.monotonic()

        def new_leader(survivors=survivors, leader=leader):
            for p in survivors:
                ld = partition_state(p, TOPIC)[0]
                if ld >= 0 and ld != leader:
                    return ld
            return None
        try:
            nl = wait_until(new_leader, 120, "a new leader", interval=0.02)
            dt = time.monotonic() - t0
            out.append(dt)
            log(f"  trial {i + 1}: killed broker {leader}, new leader {nl} after {dt:.2f}s "
                f"(kill took {killed_at - t0:.3f}s)")
        except AssertionError as e:
            log(f"  trial {i + 1}: killed broker {leader}: {e}")
        c.start(c.broker_name(leader))
    return out


def controller_trials(c: Cluster, trials: int, log, settle=None) -> list[float]:
    """kill -9 of the active controller -> the first CreateTopics that succeeds, ``trials`` times.
    ``settle(name)``, if given, waits for the restarted controller before the next trial (else 3 s)."""
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    out = []
    for i in range(trials):
        # a healthy quorum first: a CreateTopics succeeds and every controller is running
        name = f"warm-{i}-{time.time_ns()}"
        wait_until(lambda name=name: admin.create_topics([NewTopic(name, 1, 3)], request_timeout=10)[name].result(15) or True,
                   120, "CreateTopics before the kill", interval=0.5)
        time.sleep(1.0)
        active = wait_until(c.active_controller, 30, "an active controller")
        t0 = time.monotonic()
        c.kill(active)
        attempt = 0
        ok = None
        while time.monotonic() - t0 < 120:
            attempt += 1
            n = f"cf-{i}-{attempt}-{time.time_ns()}"
            try:
                admin.create_topics([NewTopic(n, 1, 3)], operation_timeout=5, request_timeout=5)[n].result(6)
                ok = time.monotonic() - t0
                break
            except Exception as e:  # noqa: BLE001 - retried until one succeeds
                last = e
                time.sleep(0.1)
        if ok is None:
            log(f"  trial {i + 1}: killed {active}: no CreateTopics success in 120s (last: {last!r})")
        else:
            out.append(ok)
            log(f"  trial {i + 1}: killed {active}, CreateTopics ok after {ok:.2f}s ({attempt} attempts), "
                f"new active {c.active_controller()}")
        c.start(active)
        if settle is None:
            time.sleep(3.0)
        else:
            settle(active)
    return out


def run_config(label: str, overrides: dict, trials: int, ctrl_trials: int, keep: bool, log) -> dict:
    d = tempfile.mkdtemp(prefix="krafty-failover-")
    c = Cluster(d, overrides=overrides)
    res: dict = {"config": label, "overrides": overrides}
    c.start()
    try:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == c.n_brokers, 120, "all brokers registered")
        # registered is not unfenced: retry until RF 3 is accepted
        wait_until(lambda: admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(30) or True, 120,
                   f"topic {TOPIC} created", interval=1)
        log(f"[{label}] partition leader failover, {trials} trials")
        res["leader_failover_s"] = leader_trials(c, trials, log)
        log(f"[{label}] leader failover: {summary(res['leader_failover_s'])}")
        if ctrl_trials:
            log(f"[{label}] controller failover, {ctrl_trials} trials")
            res["controller_failover_s"] = controller_trials(c, ctrl_trials, log)
            log(f"[{label}] controller failover: {summary(res['controller_failover_s'])}")
    finally:
        c.shutdown()
        if not keep:
            shutil.rmtree(d, ignore_errors=True)
        else:
            log(f"[{label}] logs kept in {d}")
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=10, help="leader-failover trials per session timeout")
    ap.add_argument("--controller-trials", type=int, default=10, help="controller-failover trials (default config)")
    ap.add_argument("--only", choices=["default", "fast"], help="run one session-timeout config only")
    ap.add_argument("--keep", action="store_true", help="keep the cluster directories (logs)")
    ap.add_argument("--json", help="also write the results as JSON here")
    a = ap.parse_args()

    def log(msg):
        print(msg, flush=True)
    configs = [("session 9000 ms (default), heartbeat 2000 ms", "default", {}),
               ("session 3000 ms, heartbeat 500 ms", "fast",
                {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"})]
    results = []
    for label, key, ov in configs:
        if a.only and a.only != key:
            continue
        results.append(run_config(label, ov, a.trials, a.controller_trials if key == "default" or a.only else 0,
                                  a.keep, log))
    print("\nsummary")
    for r in results:
        print(f"  leader failover, {r['config']}: {summary(r['leader_failover_s'])}")
        if "controller_failover_s" in r:
            print(f"  controller failover (kill -9 active -> first CreateTopics ok), {r['config']}: "
                  f"{summary(r['controller_failover_s'])}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
