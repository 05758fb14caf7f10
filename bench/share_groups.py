"""Share-group throughput (KIP-932): records per second acknowledged by 1 and by 5 confluent-kafka
ShareConsumers (each in its own process) reading one partition.

A topic of one partition gets ``--records`` records of ``--size`` bytes; a fresh share group
(share.auto.offset.reset=earliest) per run reads it. Each consumer ACCEPTs every record
it gets and commits its acknowledgements asynchronously after each poll; a run is timed from the
first record delivered to the last acknowledgement the broker confirmed (written to the share
coordinator before it is confirmed); then the group's start offset must be at the log end.
The 1- and 5-consumer runs alternate (A/B) so that the load of a shared machine falls on both.

    .venv/bin/python bench/share_groups.py                          # one node (RF 1)
    .venv/bin/python bench/share_groups.py --cluster --rounds 3     # 3 controllers + 3 brokers, RF 3
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from confluent_kafka import Producer, ShareConsumer  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from tests.integration.cli_inproc import krafty  # noqa: E402

TOPIC = "share-bench"


def consume(bootstrap: str, group: str, stop, confirmed, i: int, first, last) -> None:
    """Explicit acknowledgement: every record ACCEPTed, committed asynchronously after each poll;
    ``confirmed[i]`` counts what the broker confirmed (the acknowledgement commit callback)."""
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "max.poll.records": "500",
                       "share.acknowledgement.mode": "explicit"})

    def acked(offsets, exc) -> None:
        if exc is None:
            confirmed[i] += sum(len(v) for v in offsets.values())
            with last.get_lock():
                last.value = max(last.value, time.monotonic())
    c.set_acknowledgement_commit_callback(acked)
    c.subscribe([TOPIC])
    try:
        while not stop.is_set():
            msgs = [m for m in c.poll(0.2) if m.error() is None]
            if msgs:
                with first.get_lock():
                    if first.value == 0:
                        first.value = time.monotonic()
                for m in msgs:
                    c.acknowledge(m)
                c.commit_async()
    finally:
        c.close()


def start_offset(bootstrap: str, group: str) -> int:
    out = krafty("share-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group, check=None).stdout
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == group and len(f) >= 5 and f[4].isdigit():
            return int(f[4])
    return -1


def run(bootstrap: str, consumers: int, records: int) -> float:
    group = f"bench-{consumers}-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    r = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([r]).values():
        f.result(30)
    stop = mp.Event()
    counts = mp.Array("q", consumers)
    first, last = mp.Value("d", 0.0), mp.Value("d", 0.0)
    procs = [mp.Process(target=consume, args=(bootstrap, group, stop, counts, i, first, last))
             for i in range(consumers)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + 600
    while sum(counts) < records and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    for p in procs:
        p.join(60)
    assert start_offset(bootstrap, group) == records, "the group's start offset is not at the log end"
    per = list(counts)
    took = last.value - first.value
    print(f"  {consumers} consumer(s): {records} records acknowledged in {took:.2f}s = {records / took:,.0f} "
          f"records/s (confirmed per consumer: {per})", flush=True)
    return records / took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cluster", action="store_true", help="3 controllers + 3 brokers, RF 3 (else one node)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="share-bench-")
    if args.cluster:
        from tests.cluster.conftest import FAST, Cluster
        c = Cluster(tmp, overrides={**FAST})
        c.start()
        bootstrap, rf, close = c.bootstrap, 3, c.shutdown
    else:
        from tests.integration.krafty_node import KraftyNode, start_or_fail
        n = start_or_fail(KraftyNode(tmp, extra_properties={
            "offsets.topic.replication.factor": "1", "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1"}))
        bootstrap, rf, close = n.bootstrap, 1, n.close
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        deadline = time.monotonic() + 60
        while True:
            try:
                admin.create_topics([NewTopic(TOPIC, 1, rf)])[TOPIC].result(30)
                break
            except Exception:  # noqa: BLE001 (the cluster is still starting)
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"})
        value = b"x" * args.size
        for _ in range(args.records):
            while True:
                try:
                    p.produce(TOPIC, value=value)
                    break
                except BufferError:
                    p.poll(0.1)
        assert p.flush(120) == 0
        print(f"{'3+3 cluster, RF 3' if args.cluster else 'one node, RF 1'}; {args.records} records of "
              f"{args.size} B on one partition; load average {os.getloadavg()[0]:.1f}", flush=True)
        res: dict[int, list[float]] = {1: [], 5: []}
        for _ in range(args.rounds):
            for k in (1, 5):
                res[k].append(run(bootstrap, k, args.records))
        for k, xs in res.items():
            print(f"{k} consumer(s): median {statistics.median(xs):,.0f} records/s acknowledged "
                  f"(runs: {', '.join(f'{x:,.0f}' for x in xs)})")
        print(f"load average after: {os.getloadavg()[0]:.1f}")
    finally:
        close()


if __name__ == "__main__":
    main()
