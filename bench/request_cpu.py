"""Broker CPU per request and per MB, from the broker process's own CPU time (/proc/PID/stat
utime+stime, every thread), for krafty and, in the same run, librdkafka's mock cluster.

    .venv/bin/python bench/request_cpu.py                      # every phase, krafty then the mock
    .venv/bin/python bench/request_cpu.py --phases produce,fetch --rounds 3
    .venv/bin/python bench/request_cpu.py --flame bench/flames/before   # py-spy SVGs, one per phase
    .venv/bin/python bench/request_cpu.py --no-mock --base-port 40800

Phases (each on a fresh topic of the same node):
  produce     single-record acks=all idempotent Produce (v9+, librdkafka's rdkafka_performance, linger
              0, batch.num.messages=1, 100 B values) at --produce-rate requests/s in total, spread over
              --producers processes, one partition each (one producer with max.in.flight 5 cannot
              keep 5,000 requests/s in flight at this machine's round-trip times)
  fetch       empty Fetch v16 long polls (max_wait --fetch-wait-ms, min_bytes 1) on an empty
              partition, --fetch-conns connections each with one poll outstanding
  metadata    Metadata v12 for one topic, --metadata-rate requests/s over --metadata-conns connections
  produce-mb  1 KiB records, acks=1, linger 5 ms, 1 MiB batches (rdkafka_performance): MB/s and broker
              CPU per MB produced (MB = 10^6 bytes of record values)
  consume-mb  the produce-mb topic read from the beginning (rdkafka_performance -C): MB/s and CPU per MB
  floor-mb    the machine's floor for produce-mb, in this process: CPU per MB of writing new data to a
              growing file in the page cache (os.pwrite of 1 MiB, as the log does) and of reading 1 MiB
              off a loopback socket. On a VM the first write of new page-cache data also pays for the
              guest's first touch of that memory (2 ms/MB here at first, 0.3 once reused)

The fetch and metadata load comes from a raw-socket client in a child process (the frames are
encoded once; responses are only counted), which reads the broker's CPU time at the start and the
end of its measuring window (after a warm-up second). The node's idle CPU (timers, its own
controller: measured for 3 s before the phases) is subtracted: "net" figures; the "gross" ones
keep it. rdkafka_performance is built from librdkafka's source:
`make -C /tmp/suites/librdkafka/examples rdkafka_performance` (or pass --rdkafka-performance).

The mock cluster keeps only ~5 MB per partition, so it has no consume-mb figure. On a shared
machine compare the krafty/mock ratio, or alternate two checkouts (PYTHONPATH / --python)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "integration"))

from krafty_node import KraftyNode, MockCluster, free_port, wait_until  # noqa: E402

PERF = "/tmp/suites/librdkafka/examples/rdkafka_performance"
_I32 = struct.Struct(">i")
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def load() -> str:
    return "load {:.1f}/{:.1f}/{:.1f}".format(*os.getloadavg())


# --- the raw-socket client (a child process) -----------------------------------------------
def _frame(api_key: int, version: int, data: dict, cid: int) -> bytes:
    from broker.protocol import codec
    from broker.protocol.apis import is_flexible

    body = codec.encode(codec.build_request(api_key, version, data))
    client = b"request-cpu"
    header = struct.pack(">hhih", api_key, version, cid, len(client)) + client
    if is_flexible(api_key, version):
        header += b"\x00"
    return _I32.pack(len(header) + len(body)) + header + body


async def _topic_id(host: str, port: int, topic: str) -> bytes:
    from broker.protocol.apis import ApiKey
    from broker.protocol.client import KafkaConnection

    conn = KafkaConnection(host, port)
    try:
        md = await conn.request(ApiKey.METADATA, 12, {"topics": [{"name": topic, "topic_id": None}],
                                                      "allow_auto_topic_creation": False,
                                                      "include_topic_authorized_operations": False})
        t = md.topics[0]
        assert t.error_code == 0, f"Metadata of {topic}: error {t.error_code}"
        return t.topic_id
    finally:
        conn.close()


def produce_client(a) -> None:
    """Single-record acks=all idempotent Produce requests at ``a.rate`` per second, paced here
    (due times, not a sleep per record), over ``a.conns`` confluent-kafka producers (librdkafka:
    one connection each, one partition each, batch.num.messages=1, linger 0). A request
    completes with its delivery report; those inside the window are counted."""
    from confluent_kafka import Producer

    done = [0, 0]  # delivered inside the window, errors
    lat: list[float] = []
    counting = [False]

    def report(err, msg) -> None:
        if counting[0]:
            if err is not None:
                done[1] += 1
            else:
                done[0] += 1
                if len(lat) < 200_000:
                    lat.append(msg.latency())

    ps = [Producer({"bootstrap.servers": a.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 0,
                    "batch.num.messages": 1, "queue.buffering.max.messages": 1_000_000,
                    "max.in.flight.requests.per.connection": 5}) for _ in range(a.conns)]
    value = b"x" * 100
    parts = a.partitions
    for i, p in enumerate(ps):  # warm-up: producer ids, metadata, connections
        p.list_topics(a.topic, timeout=30)
        p.produce(a.topic, value, partition=i % parts)
        p.flush(30)
    interval = 1.0 / a.rate
    t_start = time.monotonic()
    window = (t_start + 1.0, t_start + 1.0 + a.seconds)
    sent, c0 = 0, None
    while True:
        now = time.monotonic()
        if c0 is None and now >= window[0]:
            counting[0], c0 = True, cpu_s(a.pid)
        if now >= window[1]:
            break
        due = int((now - t_start) / interval) + 1
        while sent < due:
            k = sent % a.conns
            ps[k].produce(a.topic, value, partition=k % parts, on_delivery=report)
            sent += 1
        for p in ps:
            p.poll(0)
        time.sleep(max(0.0, min(0.001, t_start + due * interval - time.monotonic())))
    c1 = cpu_s(a.pid)
    counting[0] = False
    for p in ps:
        p.flush(30)
    lat.sort()
    pct = {q: round(lat[int(len(lat) * q)] * 1000, 2) if lat else None for q in (0.5, 0.99)}
    print(json.dumps({"requests": done[0], "errors": done[1], "seconds": a.seconds, "cpu": c1 - c0,
                      "p50_ms": pct[0.5], "p99_ms": pct[0.99]}), flush=True)


async def client_main(a) -> None:
    import uuid

    from broker.protocol.apis import ApiKey

    host, port = a.bootstrap.rsplit(":", 1)
    port = int(port)
    if a.kind == "fetch":
        tid = await _topic_id(host, port, a.topic)
        frame = _frame(ApiKey.FETCH, 16, {
            "max_wait": a.wait_ms, "min_bytes": 1, "max_bytes": 52428800, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": [{"topic_id": uuid.UUID(bytes=bytes(tid)) if not isinstance(
                tid, uuid.UUID) else tid, "partitions": [{
                    "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                    "log_start_offset": -1, "partition_max_bytes": 1048576}]}],
            "forgotten_topics_data": [], "rack_id": ""}, 1)
        interval = 0.0
    else:
        frame = _frame(ApiKey.METADATA, 12, {"topics": [{"name": a.topic, "topic_id": None}],
                                             "allow_auto_topic_creation": False,
                                             "include_topic_authorized_operations": False}, 1)
        interval = a.conns / a.rate
    loop = asyncio.get_running_loop()
    counting = False
    count = [0]
    stop = [False]

    async def one(i: int) -> None:
        r, w = await asyncio.open_connection(host, port)
        nxt = loop.time() + (interval * i / a.conns)
        try:
            while not stop[0]:
                if interval:
                    d = nxt - loop.time()
                    if d > 0:
                        await asyncio.sleep(d)
                    nxt = max(nxt + interval, loop.time() - 1.0)
                w.write(frame)
                size = _I32.unpack(await r.readexactly(4))[0]
                await r.readexactly(size)
                if counting:
                    count[0] += 1
        finally:
            w.close()

    tasks = [asyncio.create_task(one(i)) for i in range(a.conns)]
    await asyncio.sleep(1.0)  # warm-up: connections, first answers
    counting = True
    c0, t0 = cpu_s(a.pid), time.monotonic()
    await asyncio.sleep(a.seconds)
    c1, t1, n = cpu_s(a.pid), time.monotonic(), count[0]
    stop[0] = True
    await asyncio.wait(tasks, timeout=max(5.0, a.wait_ms / 1000 * 3))
    for t in tasks:
        t.cancel()
    print(json.dumps({"requests": n, "seconds": t1 - t0, "cpu": c1 - c0}), flush=True)


# --- phases ---------------------------------------------------------------------------------
class Target:
    def __init__(self, name: str, bootstrap: str, pid: int, mock: bool):
        self.name, self.bootstrap, self.pid, self.mock = name, bootstrap, pid, mock
        self.idle = 0.0  # CPU seconds per second when idle

    def measure_idle(self, seconds: float = 3.0) -> None:
        c0, t0 = cpu_s(self.pid), time.monotonic()
        time.sleep(seconds)
        self.idle = (cpu_s(self.pid) - c0) / (time.monotonic() - t0)


def create_topic(t: Target, topic: str, partitions: int) -> int:
    """Creates ``topic`` and waits for its leaders; returns its partition count."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    if t.mock:  # the mock creates topics on first sight, with 4 partitions
        partitions = 4
    else:
        admin = AdminClient({"bootstrap.servers": t.bootstrap})  # must outlive its futures
        admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30)[topic].result(60)
    p = Producer({"bootstrap.servers": t.bootstrap, "allow.auto.create.topics": True})

    def ready():
        md = p.list_topics(topic, timeout=10).topics.get(topic)
        return md is not None and md.error is None and len(md.partitions) == partitions and all(
            x.leader >= 0 for x in md.partitions.values())
    wait_until(ready, 60, message=f"topic {topic}")
    return partitions


def perf(args, *argv: str) -> subprocess.Popen:
    return subprocess.Popen([args.rdkafka_performance, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


class Flame:
    """py-spy record of the broker during one phase (krafty only)."""

    def __init__(self, args, t: Target, phase: str):
        self.proc = None
        if args.flame and not t.mock:
            out = Path(args.flame) / f"{phase}.svg"
            out.parent.mkdir(parents=True, exist_ok=True)
            spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
            cmd = [spy, "record", "-p", str(t.pid), "-o", str(out), "-r", "250"]
            # --native needs the process stopped at each sample; without it py-spy reads on the fly
            cmd.append("--native" if args.native else "--nonblocking")
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(2)  # SIGINT: py-spy writes the SVG and exits
            self.proc.wait(60)


def phase_produce(args, t: Target, rnd: int) -> dict:
    topic = f"rq-produce-{rnd}"
    parts = create_topic(t, topic, args.producers)
    return run_client(args, t, "produce", topic, ["--conns", str(args.producers), "--rate", str(args.produce_rate),
                                                  "--partitions", str(parts)])


def run_client(args, t: Target, kind: str, topic: str, extra: list[str]) -> dict:
    flame = Flame(args, t, kind)
    cmd = [sys.executable, __file__, "_client", kind, "--bootstrap", t.bootstrap, "--pid", str(t.pid),
           "--topic", topic, "--seconds", str(args.seconds), *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.seconds * 5 + 120)
    flame.stop()
    if out.returncode != 0:
        raise RuntimeError(f"{kind} client failed: {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def phase_raw(args, t: Target, kind: str, rnd: int) -> dict:
    topic = f"rq-{kind}-{rnd}"
    create_topic(t, topic, 1)
    if kind == "fetch":
        return run_client(args, t, kind, topic, ["--conns", str(args.fetch_conns), "--wait-ms", str(args.fetch_wait_ms)])
    return run_client(args, t, kind, topic, ["--conns", str(args.metadata_conns), "--rate", str(args.metadata_rate)])


def phase_produce_mb(args, t: Target, rnd: int) -> dict:
    topic = f"rq-mb-{rnd}"
    create_topic(t, topic, 1)
    t.mb_topic = topic
    flame = Flame(args, t, "produce-mb")
    c0, t0 = cpu_s(t.pid), time.monotonic()
    p = perf(args, "-P", "-t", topic, "-p", "0", "-b", t.bootstrap, "-a", "1", "-s", "1024", "-c",
             str(args.mb_records), "-X", "linger.ms=5", "-X", "batch.size=1048576", "-X", "enable.idempotence=false",
             "-X", "queue.buffering.max.kbytes=1048576", "-X", "message.max.bytes=2000000", "-q")
    out = p.communicate(timeout=600)[0]
    dt, cpu = time.monotonic() - t0, cpu_s(t.pid) - c0
    flame.stop()
    if p.returncode != 0:
        raise RuntimeError(f"rdkafka_performance exited {p.returncode}: {out[-2000:]}")
    return {"mb": args.mb_records * 1024 / 1e6, "seconds": dt, "cpu": cpu}


def phase_consume_mb(args, t: Target, rnd: int) -> dict:
    topic = getattr(t, "mb_topic", None)
    if topic is None:
        topic = f"rq-mb-{rnd}"
        phase_produce_mb(args, t, rnd)
    flame = Flame(args, t, "consume-mb")
    c0, t0 = cpu_s(t.pid), time.monotonic()
    p = perf(args, "-C", "-t", topic, "-p", "0", "-b", t.bootstrap, "-o", "beginning", "-c", str(args.mb_records),
             "-X", "fetch.max.bytes=67108864", "-X", "max.partition.fetch.bytes=16777216",
             "-X", "queued.min.messages=10000000", "-X", "queued.max.messages.kbytes=2097151", "-q")
    out = p.communicate(timeout=600)[0]
    dt, cpu = time.monotonic() - t0, cpu_s(t.pid) - c0
    flame.stop()
    if p.returncode != 0:
        raise RuntimeError(f"rdkafka_performance exited {p.returncode}: {out[-2000:]}")
    return {"mb": args.mb_records * 1024 / 1e6, "seconds": dt, "cpu": cpu}


def phase_floor_mb(args, d: str) -> dict:
    """CPU per MB of the two copies a produced MB costs any broker: socket to user memory, user
    memory to new page-cache pages (the thread's own CPU clock)."""
    import socket
    import threading

    data = os.urandom(1 << 20)
    n = max(50, args.mb_records * 1024 >> 20)
    fd = os.open(os.path.join(d, "floor.bin"), os.O_RDWR | os.O_CREAT)
    try:
        c0 = time.thread_time()
        for i in range(n):
            os.pwrite(fd, data, i << 20)
        write = (time.thread_time() - c0) / (n * 1.048576)
    finally:
        os.close(fd)
        os.unlink(os.path.join(d, "floor.bin"))
    a, b = socket.socketpair()
    sender = threading.Thread(target=lambda: [a.sendall(data) for _ in range(n)] and a.close(), daemon=True)
    sender.start()
    c0, got = time.thread_time(), 0
    while chunk := b.recv(_READ):
        got += len(chunk)
    read = (time.thread_time() - c0) / (got / 1e6)
    sender.join()
    b.close()
    return {"write": write, "read": read}


_READ = 127 * 1024  # as broker/server.py reads a large frame


def run_phases(args, t: Target, rnd: int, results: dict) -> None:
    for ph in args.phases:
        if ph == "consume-mb" and t.mock:
            continue  # the mock keeps ~5 MB per partition
        if ph == "floor-mb":
            if t.mock:
                continue
            with tempfile.TemporaryDirectory(prefix="krafty-floor-") as d:
                f = phase_floor_mb(args, d)
            print(f"floor  {ph:10} page-cache write of new data {f['write'] * 1e3:.3f} ms/MB, socket read "
                  f"{f['read'] * 1e3:.3f} ms/MB  [{load()}]", flush=True)
            results.setdefault(("floor", "write-mb"), []).append(f["write"] * 1e3)
            continue
        if ph == "produce":
            r = phase_produce(args, t, rnd)
        elif ph in ("fetch", "metadata"):
            r = phase_raw(args, t, ph, rnd)
        elif ph == "produce-mb":
            r = phase_produce_mb(args, t, rnd)
        else:
            r = phase_consume_mb(args, t, rnd)
        net = r["cpu"] - t.idle * r["seconds"]
        if "requests" in r:
            line = (f"{t.name:6} {ph:10} {r['requests'] / r['seconds']:8,.0f} req/s  broker CPU "
                    f"{net / r['requests'] * 1e6:6.1f} us/request net ({r['cpu'] / r['requests'] * 1e6:.1f} gross, "
                    f"{r['cpu'] / r['seconds'] * 100:.0f}% of a core)")
            value = net / r["requests"] * 1e6
        else:
            line = (f"{t.name:6} {ph:10} {r['mb'] / r['seconds']:8,.1f} MB/s   broker CPU "
                    f"{net / r['mb'] * 1e3:6.3f} ms/MB net ({r['cpu'] / r['mb'] * 1e3:.3f} gross)")
            value = net / r["mb"] * 1e3
        print(f"{line}  [{load()}]", flush=True)
        results.setdefault((t.name, ph), []).append(value)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--phases", default="produce,fetch,metadata,produce-mb,consume-mb,floor-mb")
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each per-request phase")
    ap.add_argument("--rounds", type=int, default=1, help="rounds, alternating krafty and mock first")
    ap.add_argument("--produce-rate", type=int, default=5000)
    ap.add_argument("--producers", type=int, default=16, help="producers (and partitions) of the produce phase")
    ap.add_argument("--fetch-conns", type=int, default=50)
    ap.add_argument("--fetch-wait-ms", type=int, default=25)
    ap.add_argument("--metadata-rate", type=int, default=5000)
    ap.add_argument("--metadata-conns", type=int, default=8)
    ap.add_argument("--mb-records", type=int, default=500_000, help="1 KiB records for produce-mb / consume-mb")
    ap.add_argument("--no-mock", action="store_true")
    ap.add_argument("--no-krafty", action="store_true")
    ap.add_argument("--base-port", type=int, default=0, help="krafty's listener port (and +1 its controller's)")
    ap.add_argument("--override", action="append", default=[], help="KEY=VALUE for the krafty node")
    ap.add_argument("--flame", help="directory for py-spy flame graphs (krafty, one SVG per phase)")
    ap.add_argument("--native", action="store_true", help="py-spy --native")
    ap.add_argument("--rdkafka-performance", default=os.environ.get("RDKAFKA_PERFORMANCE", PERF))
    args = ap.parse_args()
    args.phases = [p for p in args.phases.split(",") if p]
    if not Path(args.rdkafka_performance).exists() and any(p in args.phases for p in ("produce", "produce-mb",
                                                                                      "consume-mb")):
        sys.exit(f"no {args.rdkafka_performance}: make -C /tmp/suites/librdkafka/examples rdkafka_performance")
    results: dict = {}
    print(f"{os.cpu_count()} cores, {load()}", flush=True)
    for rnd in range(args.rounds):
        order = ["krafty", "mock"] if rnd % 2 == 0 else ["mock", "krafty"]
        for name in order:
            if (name == "mock" and args.no_mock) or (name == "krafty" and args.no_krafty):
                continue
            if name == "krafty":
                with tempfile.TemporaryDirectory(prefix="krafty-request-cpu-") as d:
                    port = args.base_port or free_port()
                    overrides = dict(kv.split("=", 1) for kv in args.override)
                    node = KraftyNode(d, port=port, controller_port=port + 1 if args.base_port else None,
                                      overrides=overrides)
                    try:
                        node.start()
                        t = Target("krafty", node.bootstrap, node.proc.pid, False)
                        t.measure_idle()
                        run_phases(args, t, rnd, results)
                    finally:
                        node.close()
            else:
                mock = MockCluster().start()
                try:
                    t = Target("mock", mock.bootstrap, mock.proc.pid, True)
                    t.measure_idle()
                    run_phases(args, t, rnd, results)
                finally:
                    mock.close()
    if args.rounds > 1:
        print("medians:")
        for (name, ph), vals in results.items():
            unit = "ms/MB" if ph.endswith("-mb") else "us/request"
            print(f"  {name:6} {ph:10} {statistics.median(vals):7.2f} {unit}  ({', '.join(f'{v:.2f}' for v in vals)})")


def client_cli() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=("produce", "fetch", "metadata"))
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--conns", type=int, default=8)
    ap.add_argument("--wait-ms", type=int, default=25)
    ap.add_argument("--rate", type=float, default=5000)
    ap.add_argument("--partitions", type=int, default=1)
    a = ap.parse_args(sys.argv[2:])
    if a.kind == "produce":
        produce_client(a)
        return
    import uvloop
    uvloop.run(client_main(a))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_client":
        client_cli()
    else:
        main()
