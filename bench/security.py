"""Produce (and consume) throughput over PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL
(SCRAM-SHA-256) listeners of one krafty node, in the same run, with confluent-kafka.

    .venv/bin/python bench/security.py                    # 3 rounds x 300k x 1 KiB records per listener, acks=1
    .venv/bin/python bench/security.py --records 100000 --acks all --json /tmp/sec.json

It makes a throwaway CA with openssl, starts a node with the four listeners, creates a SCRAM
user with ``krafty configs``, then for each listener produces --records records of
--value-bytes into a fresh single-partition topic (linger.ms=5, batch.size=1 MiB, no
compression) and consumes them back, with the node's CPU time per MB of each (from /proc, medians).
MB = 10^6 bytes of record values."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "integration"))

from krafty_node import KraftyNode, free_port  # noqa: E402

from tests.security.certs import make_ca  # noqa: E402

LISTENERS = ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]


def client_conf(proto: str, port: int, ca: Path) -> dict:
    conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": proto}
    if "SSL" in proto:
        conf["ssl.ca.location"] = str(ca)
    if proto.startswith("SASL"):
        conf.update({"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "bench", "sasl.password": "bench-pw"})
    return conf


def cpu_s(pid: int) -> float:
    """CPU time of a process (every thread), from /proc."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_one(proto: str, conf: dict, records: int, value_bytes: int, acks: str, pid: int) -> dict:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"bench-{proto.lower()}-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    time.sleep(1)
    p = Producer({**conf, "acks": acks, "linger.ms": 5, "batch.size": 1 << 20, "queue.buffering.max.kbytes": 1 << 20,
                  "compression.type": "none"})
    value = b"x" * value_bytes
    c0 = cpu_s(pid)
    t0 = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                p.produce(topic, value, partition=0)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(120) == 0
    produce_s = time.perf_counter() - t0
    produce_cpu = cpu_s(pid) - c0
    c = Consumer({**conf, "group.id": "bench", "enable.auto.commit": False, "fetch.max.bytes": 50 << 20,
                  "max.partition.fetch.bytes": 10 << 20})
    c.assign([TopicPartition(topic, 0, 0)])
    got, t0, c0 = 0, time.perf_counter(), cpu_s(pid)
    while got < records and time.perf_counter() - t0 < 120:
        for m in c.consume(10000, 1.0):
            if not m.error():
                got += 1
    consume_s = time.perf_counter() - t0
    consume_cpu = cpu_s(pid) - c0
    c.close()
    mb = records * value_bytes / 1e6
    return {"listener": proto, "records": records, "value_bytes": value_bytes, "acks": acks,
            "produce_s": round(produce_s, 2), "produce_mbps": round(mb / produce_s, 1),
            "consumed": got, "consume_mbps": round(got * value_bytes / 1e6 / consume_s, 1),
            "produce_cpu_ms_per_mb": round(produce_cpu / mb * 1000, 3),
            "consume_cpu_ms_per_mb": round(consume_cpu / max(got * value_bytes / 1e6, 1e-9) * 1000, 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--value-bytes", type=int, default=1024)
    ap.add_argument("--acks", default="1")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median is reported")
    ap.add_argument("--json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="krafty-bench-sec-") as tmp:
        ca = make_ca(Path(tmp) / "ca")
        keystore = ca.keystore_pem("server", "localhost", server=True)
        node = KraftyNode(Path(tmp) / "node")
        ports = {"PLAINTEXT": node.port, **{n: free_port() for n in LISTENERS[1:]}}
        node.extra_properties = {
            "listeners": f"CONTROLLER://127.0.0.1:{node.controller_port},"
                         + ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore),
        }
        node.start()
        try:
            subprocess.run([sys.executable, "-m", "krafty", "configs", "--bootstrap-server", node.bootstrap, "--alter",
                            "--entity-type", "users", "--entity-name", "bench", "--add-config",
                            "SCRAM-SHA-256=[iterations=4096,password=bench-pw]"], cwd=REPO, check=True, timeout=60)
            runs = {p: [] for p in LISTENERS}
            for rnd in range(args.rounds):  # interleaved rounds: machine noise hits every listener alike
                order = LISTENERS if rnd % 2 == 0 else LISTENERS[::-1]
                for p in order:
                    runs[p].append(run_one(p, client_conf(p, ports[p], ca.ca_cert), args.records,
                                           args.value_bytes, args.acks, node.proc.pid))
            results = []
            for p in LISTENERS:
                rs = sorted(runs[p], key=lambda r: r["produce_mbps"])
                med = dict(rs[len(rs) // 2])
                med["produce_mbps_all"] = [r["produce_mbps"] for r in runs[p]]
                med["consume_mbps"] = sorted(r["consume_mbps"] for r in runs[p])[len(rs) // 2]
                for k in ("produce_cpu_ms_per_mb", "consume_cpu_ms_per_mb"):
                    med[k] = sorted(r[k] for r in runs[p])[len(rs) // 2]
                results.append(med)
        finally:
            node.close()
    print(f"{'listener':<16}{'produce MB/s':>14}{'consume MB/s':>14}{'broker ms/MB in':>17}{'broker ms/MB out':>18}"
          "   produce MB/s per round")
    for r in results:
        print(f"{r['listener']:<16}{r['produce_mbps']:>14}{r['consume_mbps']:>14}{r['produce_cpu_ms_per_mb']:>17}"
              f"{r['consume_cpu_ms_per_mb']:>18}   {r['produce_mbps_all']}")
    base = results[0]["produce_mbps"]
    for r in results[1:]:
        print(f"{r['listener']}: produce at {r['produce_mbps'] / base:.0%} of PLAINTEXT")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
