"""How long a restarted single node (broker+controller) is unavailable, and what clients see.

For each trial the node (a topic of --partitions partitions, some records) is stopped with
SIGTERM or killed with SIGKILL and spawned again; a prober sends a raw Metadata v1 request
every 2 ms (a new connection each) and measures, from the spawn:
  answer   the first Metadata answer of any kind;
  full     the first one that lists the broker and a leader for every partition;
  empty    how many Metadata answers came back incomplete before that (clients that bootstrap on
           one of those stalled for 20 s or more);
  produce  a confluent-kafka producer created at the moment of the spawn: its first acks=all
           delivery (what an application sees).
The node log gives the split between the process start (interpreter and imports) and the node's
own start-up: "start" is the time from the node's first log line to its listener accepting.

    .venv/bin/python bench/restart.py                      # 5 trials of each
    .venv/bin/python bench/restart.py --trials 3 --partitions 100
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for p in (ROOT, os.path.join(ROOT, "tests", "integration")):
    if p not in sys.path:
        sys.path.insert(0, p)

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic  # noqa: E402
from krafty_node import KraftyNode  # noqa: E402

from tests.integration.test_it_startup import _metadata_v1  # noqa: E402

TOPIC = "restart"


def _log_start_to_listening(node: KraftyNode) -> float | None:
    text = node.log_path.read_text(errors="replace").rsplit("===== krafty-it: start", 1)[-1]
    stamps = []
    for line in text.splitlines():
        try:
            stamps.append((datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f"), line))
        except ValueError:
            continue
    listening = [t for t, line in stamps if "listening for PLAINTEXT" in line]
    return (listening[0] - stamps[0][0]).total_seconds() if stamps and listening else None


def trial(node: KraftyNode, mode: str, partitions: int) -> dict:
    # a clean stop fsyncs every log (~10 ms each here): thousands of partitions take minutes
    node.kill() if mode == "kill" else node.stop(timeout=max(30.0, partitions / 50))
    delivered: list[float] = []
    t0 = time.monotonic()
    node.spawn()
    p = Producer({"bootstrap.servers": node.bootstrap, "acks": "all", "message.timeout.ms": 120000})
    p.produce(TOPIC, b"x", partition=partitions - 1,
              on_delivery=lambda err, msg: delivered.append(time.monotonic() - t0 if err is None else -1))
    answer = full = None
    empty = 0
    while full is None and time.monotonic() - t0 < 120:
        p.poll(0)
        try:
            brokers, leaders = _metadata_v1(node.port, TOPIC, timeout=2)
        except OSError:
            time.sleep(0.002)
            continue
        answer = answer or time.monotonic() - t0
        if brokers == [node.node_id] and len(leaders) == partitions and all(x >= 0 for x in leaders.values()):
            full = time.monotonic() - t0
        else:
            empty += 1
    p.flush(120)
    return {"answer": answer, "full": full, "empty": empty, "produce": delivered[0] if delivered else None,
            "start": _log_start_to_listening(node)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=10)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="krafty-restart-") as d:
        node = KraftyNode(d)
        try:
            node.start()
            admin = AdminClient({"bootstrap.servers": node.bootstrap})
            # one controller operation makes at most 10,000 records (as in Kafka): large topics grow in steps
            step = 5000
            admin.create_topics([NewTopic(TOPIC, min(args.partitions, step), 1)])[TOPIC].result(60)
            for n in range(2 * step, args.partitions + step, step):
                total = min(n, args.partitions)
                admin.create_partitions([NewPartitions(TOPIC, total)])[TOPIC].result(120)
            p = Producer({"bootstrap.servers": node.bootstrap})
            for i in range(args.partitions):
                p.produce(TOPIC, b"seed", partition=i)
            assert p.flush(max(30.0, args.partitions / 50)) == 0, "seed records not delivered"
            for mode in ("stop", "kill"):
                rows = [trial(node, mode, args.partitions) for _ in range(args.trials)]
                print(f"{mode:>4}: " + "  ".join(
                    f"{k} median {statistics.median(r[k] for r in rows):.3f}s "
                    f"[{min(r[k] for r in rows):.3f}-{max(r[k] for r in rows):.3f}]"
                    for k in ("answer", "full", "produce", "start")) +
                      f"  incomplete Metadata answers: {sum(r['empty'] for r in rows)} in {len(rows)} restarts")
        finally:
            node.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
