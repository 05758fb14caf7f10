"""Scale: a 3-controller + 3-broker cluster with 100,000 partitions (RF 3), and every figure
of issue #24's goal 5, from real processes on loopback.

    make bench-scale SCALE_PARTITIONS=30000 SCALE_BASE_PORT=42000     # the same through make
    .venv/bin/python bench/scale.py                                   # 100,000 partitions, all phases
    .venv/bin/python bench/scale.py --partitions 10000 --phases create,metadata,controller
    .venv/bin/python bench/scale.py --dir /tmp/scale --keep           # keep the cluster's directory
    .venv/bin/python bench/scale.py --dir /tmp/scale --reuse --phases restart   # on a kept cluster

Phases (``--phases``, in this order):
  create      CreateTopics of ``--partitions`` partitions (topics of ``--per-topic``, RF 3) in requests
              of at most ``--batch`` partitions (krafty, as Kafka, bounds one controller operation to
              10,000 partitions); time until acked, time until every broker lists every partition
              with a leader and a full ISR; each broker's RSS before (empty) and every 10,000
              partitions, and the RSS per partition above the empty broker.
  metadata    ``--changes`` metadata changes (a CreateTopics of one RF-3 partition each): from the
              request to the moment every broker answers a Metadata request with it (a raw Metadata
              v4 request to each broker's own listener, polled every ms), p50/p99/max.
  controller  kill -9 of the active controller -> the first CreateTopics that succeeds (retried
              every 100 ms with 5 s timeouts), ``--controller-trials`` times; the killed controller
              is restarted and caught up before the next trial.
  restart     kill -9 of a broker; once the others have it out of every ISR (fenced), it is started
              again: time to its listener, to 1/3 of its partitions and to all of them back in the
              ISR (full Metadata from another broker every 2 s).
  idle        ``--idle-connections`` client connections to one broker, each sends one ApiVersions and
              stays idle: the broker's RSS per connection, and the latency of another client's
              Metadata (one topic) and acks=all produce round trips before and while they are open.

Memory guard: the run stops if the cluster's processes together pass ``--max-rss-gib`` (default 8).
Loopback only; ports from ``--base-port`` (brokers base..base+2, controllers base+100..base+102).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from confluent_kafka import KafkaError, KafkaException, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.failover_times import controller_trials  # noqa: E402
from krafty.cluster import node_configs  # noqa: E402
from tests.cluster.conftest import Cluster, wait_until  # noqa: E402
from tests.cluster.test_scale import _recv_exact  # noqa: E402

RF = 3
PHASES = ("create", "metadata", "controller", "restart", "idle")


# --- raw Metadata v4 (allow_auto_topic_creation=false) --------------------------------------------
def metadata_request(corr: int, topics: list[str] | None) -> bytes:
    client = b"scale-bench"
    body = struct.pack(">hhih", 3, 4, corr, len(client)) + client
    if topics is None:
        body += struct.pack(">i", -1)
    else:
        body += struct.pack(">i", len(topics))
        for t in topics:
            tb = t.encode()
            body += struct.pack(">h", len(tb)) + tb
    body += b"\x00"  # allow_auto_topic_creation
    return struct.pack(">i", len(body)) + body


def parse_metadata(data: bytes) -> tuple[list[int], dict[str, tuple[int, list[tuple[int, int, tuple]]]]]:
    """(broker ids, {topic: (error, [(partition, leader, isr), ...])}) of a Metadata v4 response."""
    unpack = struct.unpack_from
    pos = 8  # correlation id, throttle
    brokers = []
    (n,) = unpack(">i", data, pos)
    pos += 4
    for _ in range(n):
        (bid,) = unpack(">i", data, pos)
        brokers.append(bid)
        (hl,) = unpack(">h", data, pos + 4)
        pos += 6 + hl + 4
        (rl,) = unpack(">h", data, pos)
        pos += 2 + max(rl, 0)
    (cl,) = unpack(">h", data, pos)
    pos += 2 + max(cl, 0) + 4  # cluster id, controller id
    topics = {}
    (n,) = unpack(">i", data, pos)
    pos += 4
    for _ in range(n):
        err, tl = unpack(">hh", data, pos)
        pos += 4
        name = data[pos:pos + tl].decode()
        pos += tl + 1  # is_internal
        (np,) = unpack(">i", data, pos)
        pos += 4
        parts = []
        for _ in range(np):
            _perr, pid, leader, nr = unpack(">hiii", data, pos)
            pos += 14 + 4 * nr
            (ni,) = unpack(">i", data, pos)
            isr = unpack(f">{ni}i", data, pos + 4)
            pos += 4 + 4 * ni
            parts.append((pid, leader, isr))
        topics[name] = (err, parts)
    return brokers, topics


class MetadataConn:
    """A persistent connection to one broker for raw Metadata requests."""

    def __init__(self, port: int, timeout: float = 60):
        self.port, self.timeout = port, timeout
        self.s: socket.socket | None = None
        self.corr = 0

    def ask(self, topics: list[str] | None):
        if self.s is None:
            self.s = socket.create_connection(("127.0.0.1", self.port), timeout=self.timeout)
            self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.corr += 1
        try:
            self.s.sendall(metadata_request(self.corr, topics))
            size = struct.unpack(">i", _recv_exact(self.s, 4))[0]
            data = _recv_exact(self.s, size)
        except OSError:
            self.close()
            raise
        return parse_metadata(data)

    def close(self) -> None:
        if self.s is not None:
            self.s.close()
            self.s = None


# --- process figures ----------------------------------------------------------------------------
def rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def load_avg() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


class RssGuard(threading.Thread):
    """Stops the run (SIGKILL to every node, then exits) if the cluster grows past the limit."""

    def __init__(self, c: Cluster, limit_kib: int):
        super().__init__(daemon=True)
        self.c, self.limit = c, limit_kib
        self.peak = 0
        self.tripped = False

    def run(self) -> None:
        while True:
            total = sum(rss_kib(p.pid) for p in list(self.c.procs.values()))
            self.peak = max(self.peak, total)
            if total > self.limit:
                self.tripped = True
                print(f"!! cluster RSS {total / 2**20:.2f} GiB is over the limit: stopping", flush=True)
                for p in list(self.c.procs.values()):
                    p.send_signal(signal.SIGKILL)
                os._exit(3)
            time.sleep(0.5)


# --- the cluster ----------------------------------------------------------------------------------
def make_cluster(directory: str, base_port: int, overrides: dict[str, str], reuse: bool) -> Cluster:
    c = Cluster(directory)
    c.base = base_port
    cfg_path = os.path.join(directory, "scale-configs.json")
    if reuse:
        with open(cfg_path) as f:
            c.configs = json.load(f)
    else:
        c.configs = dict(node_configs(3, 3, base_port, directory, extra=overrides))
        with open(cfg_path, "w") as f:
            json.dump(c.configs, f)
    return c


def broker_ports(c: Cluster) -> dict[str, int]:
    return {f"broker-{c.n_controllers + i + 1}": c.base + i for i in range(c.n_brokers)}


def broker_pids(c: Cluster) -> dict[str, int]:
    return {n: p.pid for n, p in c.procs.items() if n.startswith("broker")}


def fmt_rss(c: Cluster) -> str:
    return ", ".join(f"{n} {rss_kib(p.pid) / 1024:.0f} MiB" for n, p in sorted(c.procs.items()))


def full_state(port: int, prefix: str) -> dict[tuple[str, int], tuple[int, tuple]]:
    """{(topic, partition): (leader, isr)} of the bench's topics as the broker on ``port`` sees them."""
    conn = MetadataConn(port, timeout=120)
    try:
        _, topics = conn.ask(None)
    finally:
        conn.close()
    return {(t, pid): (leader, isr) for t, (_, parts) in topics.items() if t.startswith(prefix)
            for pid, leader, isr in parts}


def converged(c: Cluster, total: int, prefix: str, ports: list[int]) -> bool:
    for port in ports:
        st = full_state(port, prefix)
        if len(st) != total or any(leader < 0 or len(isr) != RF for leader, isr in st.values()):
            return False
    return True


# --- phases -----------------------------------------------------------------------------------------
def phase_create(c: Cluster, a, out: dict, log) -> None:
    admin = AdminClient({"bootstrap.servers": c.bootstrap, "socket.timeout.ms": 300000})
    pids = broker_pids(c)
    empty = {n: rss_kib(pid) for n, pid in pids.items()}
    out["rss_empty_kib"] = empty
    log(f"empty brokers: {fmt_rss(c)}")
    per_topic = a.per_topic
    n_topics = a.partitions // per_topic
    topics_per_req = max(1, a.batch // (per_topic + 1))  # records: a TopicRecord + 1 per partition
    names = [f"{a.prefix}{i:05d}" for i in range(n_topics)]
    t0 = time.monotonic()
    curve = []
    pending = list(names)
    created = 0
    refused = 0
    while pending:
        batch, pending = pending[:topics_per_req], pending[topics_per_req:]
        tb = time.monotonic()
        futs = admin.create_topics([NewTopic(n, per_topic, RF) for n in batch], operation_timeout=600,
                                   request_timeout=900)
        for name, fut in futs.items():
            try:
                fut.result(900)
                created += per_topic
            except KafkaException as e:
                code = e.args[0].code()
                if code == KafkaError.TOPIC_ALREADY_EXISTS:
                    created += per_topic
                    continue
                if code not in (KafkaError.INVALID_REPLICATION_FACTOR, KafkaError.REQUEST_TIMED_OUT,
                                KafkaError.NOT_CONTROLLER):
                    raise
                refused += 1
                pending.append(name)
                time.sleep(1)
        if created // 10000 > len(curve) or not pending:
            rss = {n: rss_kib(pid) for n, pid in pids.items()}
            curve.append({"partitions": created, "t": time.monotonic() - t0, "rss_kib": rss,
                          "fds": {n: open_fds(pid) for n, pid in pids.items()}})
            log(f"  {created:>7,} partitions acked after {time.monotonic() - t0:6.1f}s (last request "
                f"{time.monotonic() - tb:.1f}s); brokers RSS "
                + ", ".join(f"{rss[n] / 1024:.0f}" for n in sorted(rss)) + " MiB; fds "
                + ", ".join(str(curve[-1]['fds'][n]) for n in sorted(pids)) + f"; load {load_avg()}")
    t_acked = time.monotonic() - t0
    ports = list(broker_ports(c).values())
    wait_until(lambda: converged(c, a.partitions, a.prefix, ports), a.converge_timeout,
               "every partition with a leader and a full ISR on every broker", interval=3)
    t_conv = time.monotonic() - t0
    time.sleep(5)  # let the last logs settle before the memory figure
    full = {n: rss_kib(pid) for n, pid in pids.items()}
    # an idle cluster's brokers still replicate: every follower fetch round (a long poll of
    # replica.fetch.wait.max.ms) walks the partitions it follows
    c0, t0i = {n: cpu_s(pid) for n, pid in pids.items()}, time.monotonic()
    time.sleep(a.idle_cpu_seconds)
    idle_cpu = {n: (cpu_s(pid) - c0[n]) / (time.monotonic() - t0i) for n, pid in pids.items()}
    out["idle_cpu_share"] = idle_cpu
    log("idle cluster: broker CPU " + ", ".join(f"{n} {v * 100:.0f}%" for n, v in sorted(idle_cpu.items()))
        + f" of a core over {a.idle_cpu_seconds:.0f}s (load {load_avg()})")
    per_part = {n: (full[n] - empty[n]) * 1024 / a.partitions for n in full}
    out.update(create_acked_s=t_acked, create_converged_s=t_conv, refused=refused, curve=curve,
               rss_full_kib=full, bytes_per_partition=per_part,
               fds={n: open_fds(pid) for n, pid in pids.items()},
               cpu_s={n: cpu_s(p.pid) for n, p in c.procs.items()})
    log(f"create: {a.partitions:,} partitions in {n_topics} topics acked after {t_acked:.1f}s "
        f"({refused} refused and retried); all brokers consistent after {t_conv:.1f}s")
    log("memory: " + ", ".join(f"{n} {empty[n] / 1024:.0f} -> {full[n] / 1024:.0f} MiB = {per_part[n]:.0f} B/partition"
                               for n in sorted(full)))
    log(f"after create: {fmt_rss(c)}; fds {out['fds']}; CPU s " +
        ", ".join(f"{n} {v:.0f}" for n, v in sorted(out['cpu_s'].items())))


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(q * len(s))) - 1))]


def phase_metadata(c: Cluster, a, out: dict, log) -> None:
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    conns = {n: MetadataConn(p) for n, p in broker_ports(c).items()}
    samples, per_broker, failed = [], {n: [] for n in conns}, []
    run = time.time_ns()
    for i in range(a.changes):
        name = f"mdprobe-{run}-{i}"
        t0 = time.monotonic()
        fut = admin.create_topics([NewTopic(name, 1, RF)], operation_timeout=30, request_timeout=60)[name]
        seen: dict[str, float] = {}
        while len(seen) < len(conns) and time.monotonic() - t0 < 60:
            if fut.done() and fut.exception() is not None:
                break
            for n, conn in conns.items():
                if n in seen:
                    continue
                _, topics = conn.ask([name])
                err, parts = topics.get(name, (3, []))
                if err == 0 and parts and parts[0][1] >= 0:
                    seen[n] = time.monotonic() - t0
            time.sleep(0.001)
        try:
            fut.result(60)
        except KafkaException as e:  # e.g. NOT_CONTROLLER while the quorum elects: counted, not timed
            failed.append(e.args[0].code())
            log(f"  change {i}: CreateTopics failed after {time.monotonic() - t0:.1f}s: {e.args[0]}")
            continue
        if len(seen) < len(conns):
            log(f"  change {i}: not on every broker after 60 s: {seen}")
            continue
        if i % 10 == 9:
            log(f"  {i + 1} changes, the last on every broker after {max(seen.values()) * 1000:.0f} ms")
        samples.append(max(seen.values()))
        for n, v in seen.items():
            per_broker[n].append(v)
        time.sleep(a.change_interval)
    for conn in conns.values():
        conn.close()
    ms = [x * 1000 for x in samples]
    out.update(metadata_ms=ms, metadata_failed=len(failed))
    if not ms:
        log(f"metadata: no change succeeded ({len(failed)} failed)")
        return
    log(f"metadata: a change (CreateTopics of 1 partition) on every broker after p50 {pct(ms, .5):.0f} ms, "
        f"p99 {pct(ms, .99):.0f} ms, max {max(ms):.0f} ms (n={len(ms)}, {len(failed)} CreateTopics failed); per broker p99 "
        + ", ".join(f"{n} {pct([x * 1000 for x in v], .99):.0f}" for n, v in sorted(per_broker.items())) + " ms")


def phase_controller(c: Cluster, a, out: dict, log) -> None:
    def settle(name: str) -> None:
        # caught up: the restarted controller has replayed the log (its RSS stops growing) before the next kill
        t1 = time.monotonic()
        wait_until(lambda: _stable_rss(c.procs[name].pid), 300, f"{name} caught up", interval=1)
        log(f"  {name} restarted, settled after {time.monotonic() - t1:.1f}s")
    res = controller_trials(c, a.controller_trials, log, settle=settle)
    out["controller_failover_s"] = res
    if res:
        log(f"controller: kill -9 of the active controller -> CreateTopics ok after median {statistics.median(res):.2f}s, "
            f"max {max(res):.2f}s (n={len(res)})")


def _stable_rss(pid: int, window: float = 3.0) -> bool:
    r0 = rss_kib(pid)
    time.sleep(window)
    r1 = rss_kib(pid)
    return r0 > 0 and abs(r1 - r0) < 2048


def phase_restart(c: Cluster, a, out: dict, log) -> None:
    ports = broker_ports(c)
    victim = a.restart_broker
    vid = int(victim.split("-")[1])
    other = next(p for n, p in ports.items() if n != victim)
    state = full_state(other, a.prefix)
    total = len(state)
    mine = sum(1 for _, isr in state.values() if vid in isr)
    log(f"restart: {victim} holds {mine:,} of {total:,} partitions' replicas; kill -9")
    c.kill(victim)
    t_kill = time.monotonic()
    wait_until(lambda: sum(1 for _, isr in full_state(other, a.prefix).values() if vid in isr) == 0, 600,
               f"{victim} out of every ISR", interval=2)
    log(f"  out of every ISR {time.monotonic() - t_kill:.1f}s after the kill; starting it again")
    t0 = time.monotonic()
    c.start(victim)
    pid = c.procs[victim].pid
    listening = None
    third = None
    full = None
    while time.monotonic() - t0 < a.restart_timeout:
        if listening is None:
            try:
                socket.create_connection(("127.0.0.1", ports[victim]), timeout=1).close()
                listening = time.monotonic() - t0
                log(f"  listener accepts after {listening:.1f}s (RSS {rss_kib(pid) / 1024:.0f} MiB)")
            except OSError:
                pass
        try:
            back = sum(1 for _, isr in full_state(other, a.prefix).values() if vid in isr)
        except OSError:
            back = 0
        now = time.monotonic() - t0
        if third is None and back >= mine / 3:
            third = now
            log(f"  {back:,} back in the ISR after {now:.1f}s")
        if back >= mine:
            full = now
            break
        time.sleep(2)
    out.update(restart_partitions=mine, restart_listening_s=listening, restart_third_isr_s=third,
               restart_full_isr_s=full, restart_rss_kib=rss_kib(pid), restart_cpu_s=cpu_s(pid))
    def s(x):
        return "never" if x is None else f"{x:.1f}s"
    log(f"restart: {victim} (kill -9, {mine:,} replicas): listener after {s(listening)}, 1/3 back in the ISR after "
        f"{s(third)}, all after {s(full)}; RSS {rss_kib(pid) / 1024:.0f} MiB, CPU {cpu_s(pid):.0f}s")


def _latency_probe(port: int, topic: str, producer: Producer, n: int) -> dict:
    conn = MetadataConn(port)
    md = []
    for _ in range(n):
        t = time.perf_counter()
        conn.ask([topic])
        md.append((time.perf_counter() - t) * 1000)
        time.sleep(0.005)
    conn.close()
    prod = []
    for _ in range(n // 2):
        t = time.perf_counter()
        done = []
        producer.produce(topic, b"x" * 100, partition=0, on_delivery=lambda err, _m, done=done: done.append(err))
        while not done:
            producer.poll(0.01)
        if done[0] is None:
            prod.append((time.perf_counter() - t) * 1000)
        time.sleep(0.005)
    return {"metadata_p50": pct(md, .5), "metadata_p99": pct(md, .99),
            "produce_p50": pct(prod, .5), "produce_p99": pct(prod, .99)}


def phase_idle(c: Cluster, a, out: dict, log) -> None:
    ports = broker_ports(c)
    target = sorted(ports)[0]
    port = ports[target]
    pid = c.procs[target].pid
    # the target broker and this process each need a descriptor per connection
    with open(f"/proc/{pid}/limits") as f:
        limit = next(int(line.split()[3]) for line in f if line.startswith("Max open files"))
    room = min(limit - open_fds(pid), resource.getrlimit(resource.RLIMIT_NOFILE)[0] - open_fds(os.getpid())) - 500
    n_conns = min(a.idle_connections, max(room, 0))
    if n_conns < a.idle_connections:
        log(f"idle: only {n_conns:,} of {a.idle_connections:,} connections fit under the open files limit ({limit})")
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    topic = f"idle-probe-{time.time_ns()}"
    leader_id = int(target.split("-")[1])
    others = [int(n.split("-")[1]) for n in sorted(ports) if n != target]
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[leader_id, *others]])])[topic].result(60)
    # the probe's partition led by the target broker: its produce latency is the target's
    wait_until(lambda: _leader_of(port, topic) >= 0, 60, "probe topic leader")
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "acks": "all", "linger.ms": 0})
    _latency_probe(port, topic, producer, 50)  # warm up
    before = _latency_probe(port, topic, producer, a.probe_requests)
    rss0 = rss_kib(pid)
    fds0 = open_fds(pid)
    api_versions = struct.pack(">hhih", 18, 0, 1, 4) + b"idle"
    frame = struct.pack(">i", len(api_versions)) + api_versions
    socks = []
    t0 = time.monotonic()
    try:
        for _ in range(n_conns):
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            s.sendall(frame)
            socks.append(s)
            if len(socks) % 500 == 0:  # read the answers as we go (the server answers every one)
                for x in socks[-500:]:
                    size = struct.unpack(">i", _recv_exact(x, 4))[0]
                    _recv_exact(x, size)
        for x in socks[len(socks) - len(socks) % 500:]:
            size = struct.unpack(">i", _recv_exact(x, 4))[0]
            _recv_exact(x, size)
        t_open = time.monotonic() - t0
        time.sleep(3)
        rss1 = rss_kib(pid)
        fds1 = open_fds(pid)
        during = _latency_probe(port, topic, producer, a.probe_requests)
        per_conn = (rss1 - rss0) * 1024 / len(socks)
    finally:
        for s in socks:
            s.close()
    producer.flush(10)
    out.update(idle_connections=len(socks), idle_open_s=t_open, idle_rss_before_kib=rss0, idle_rss_after_kib=rss1,
               idle_bytes_per_connection=per_conn, idle_fds=(fds0, fds1), latency_before=before, latency_during=during,
               probe_leader=_leader_of(port, topic), target=target)
    log(f"idle: {len(socks):,} connections to {target} opened in {t_open:.1f}s; RSS {rss0 / 1024:.0f} -> "
        f"{rss1 / 1024:.0f} MiB = {per_conn:.0f} B per connection; fds {fds0} -> {fds1}")
    log(f"idle: other client's latency (ms) before / with them: Metadata p50 {before['metadata_p50']:.2f} / "
        f"{during['metadata_p50']:.2f}, p99 {before['metadata_p99']:.2f} / {during['metadata_p99']:.2f}; "
        f"produce acks=all p50 {before['produce_p50']:.2f} / {during['produce_p50']:.2f}, p99 "
        f"{before['produce_p99']:.2f} / {during['produce_p99']:.2f} (partition leader {out['probe_leader']})")


def _leader_of(port: int, topic: str) -> int:
    conn = MetadataConn(port)
    try:
        _, topics = conn.ask([topic])
    finally:
        conn.close()
    err, parts = topics.get(topic, (3, []))
    return parts[0][1] if err == 0 and parts else -1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=100000)
    ap.add_argument("--per-topic", type=int, default=100, help="partitions per topic")
    ap.add_argument("--batch", type=int, default=10000, help="records (topics + partitions) per CreateTopics request at most")
    ap.add_argument("--prefix", default="scale-", help="topic name prefix")
    ap.add_argument("--phases", default=",".join(PHASES))
    ap.add_argument("--idle-cpu-seconds", type=float, default=20, help="broker CPU measured idle after create")
    ap.add_argument("--changes", type=int, default=100, help="metadata changes timed")
    ap.add_argument("--change-interval", type=float, default=0.05)
    ap.add_argument("--controller-trials", type=int, default=3)
    ap.add_argument("--restart-broker", default="broker-6")
    ap.add_argument("--restart-timeout", type=float, default=900)
    ap.add_argument("--idle-connections", type=int, default=10000)
    ap.add_argument("--probe-requests", type=int, default=1000)
    ap.add_argument("--converge-timeout", type=float, default=1800)
    ap.add_argument("--base-port", type=int, default=42000)
    ap.add_argument("--dir", help="cluster directory (default: a temporary one, removed unless --keep)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--reuse", action="store_true", help="start the cluster kept in --dir (skip create)")
    ap.add_argument("--override", action="append", default=[], help="key=value for every node")
    ap.add_argument("--max-rss-gib", type=float, default=8.0)
    ap.add_argument("--json", help="also write the figures as JSON here")
    a = ap.parse_args()
    phases = [p for p in a.phases.split(",") if p]
    for p in phases:
        if p not in PHASES:
            ap.error(f"unknown phase {p!r} (one of {', '.join(PHASES)})")
    directory = a.dir or tempfile.mkdtemp(prefix="krafty-scale-")
    os.makedirs(directory, exist_ok=True)
    overrides = dict(kv.split("=", 1) for kv in a.override)

    def log(msg):
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)
    # a broker keeps at most krafty.log.open.files.max segment files open (default: half its open
    # files limit), whatever the number of partitions; the idle phase opens --idle-connections
    # sockets here and on one broker: the nodes inherit this process's limit
    want = 2 * a.idle_connections + 10000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(want, soft), max(want, hard)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        log(f"open files limit {hard} (could not raise it to {want}): a broker caches at most {hard // 2} "
            f"segment files; fewer idle connections than asked may fit")
    c = make_cluster(directory, a.base_port, overrides, a.reuse)
    out: dict = {"partitions": a.partitions, "per_topic": a.per_topic, "overrides": overrides, "load_start": load_avg()}
    log(f"cluster in {directory}, brokers {c.bootstrap}; load {load_avg()}")
    guard = RssGuard(c, int(a.max_rss_gib * 2**20))
    c.start()
    guard.start()
    try:
        for port in broker_ports(c).values():  # listeners first: librdkafka logs every refused connect
            wait_until(lambda port=port: socket.create_connection(("127.0.0.1", port), timeout=1).close() or True,
                       600, f"the listener on {port}", interval=0.5)
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        wait_until(lambda: len(admin.list_topics(timeout=10).brokers) == c.n_brokers, 600, "all brokers registered")
        probe = f"probe-{time.time_ns()}"
        wait_until(lambda: admin.create_topics([NewTopic(probe, 1, RF)])[probe].result(30) or True,
                   600, "an RF-3 CreateTopics accepted", interval=1)
        if a.reuse:
            ports = list(broker_ports(c).values())
            t0 = time.monotonic()
            wait_until(lambda: converged(c, a.partitions, a.prefix, ports), a.converge_timeout,
                       "the kept cluster converged", interval=3)
            log(f"kept cluster converged {time.monotonic() - t0:.1f}s after registration: {fmt_rss(c)}")
        fns = {"create": phase_create, "metadata": phase_metadata, "controller": phase_controller,
               "restart": phase_restart, "idle": phase_idle}
        for p in phases:
            if p == "create" and a.reuse:
                continue
            log(f"--- {p} (load {load_avg()})")
            fns[p](c, a, out, log)
        out["peak_cluster_rss_kib"] = guard.peak
        out["load_end"] = load_avg()
        log(f"peak cluster RSS {guard.peak / 2**20:.2f} GiB; load {load_avg()}")
    finally:
        c.shutdown()
        if a.json:
            with open(a.json, "w") as f:
                json.dump(out, f, indent=1)
        if not a.keep and not a.dir:
            shutil.rmtree(directory, ignore_errors=True)
        elif a.keep or a.dir:
            log(f"cluster directory kept: {directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
