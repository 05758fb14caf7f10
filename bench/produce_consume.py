"""Produce/consume throughput of a krafty broker with a confluent-kafka client, next to librdkafka's mock cluster.

    .venv/bin/python bench/produce_consume.py                      # starts its own krafty node in a temp dir
    .venv/bin/python bench/produce_consume.py --bootstrap 127.0.0.1:9092   # an already running broker
    .venv/bin/python bench/produce_consume.py --records 200000 --max-seconds 20 --json /tmp/pc.json
    .venv/bin/python bench/produce_consume.py --metrics            # krafty.metrics.port on, scraped every 5 s

For each target (krafty, then the mock cluster as a reference), each value size (1 KiB, 100 B) and
each acks setting (1, all) it produces --records records into a fresh single-partition topic
(linger.ms=5, batch.size=1 MiB, --compression, default none), then consumes them back from the beginning with
manual assignment and large fetch sizes. Each phase stops early at --max-seconds. MB = 10^6 bytes of
record values (keys are not sent).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from krafty_node import KraftyNode, MockCluster, free_port, wait_until  # noqa: E402


@dataclass
class Result:
    target: str
    value_bytes: int
    acks: str
    records: int
    produce_s: float
    produce_rps: float
    produce_mbps: float
    consumed: int
    consume_s: float
    consume_rps: float
    consume_mbps: float
    produce_broker_cpu_ms_per_mb: float | None = None  # the node's CPU (all threads) per MB produced


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far, all threads (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def create_topic(bootstrap: str, topic: str, mock: bool, config: dict[str, str] | None = None) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    if not mock:
        admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive its futures
        fs = admin.create_topics(
            [NewTopic(topic, num_partitions=1, replication_factor=1, config=config or {})], operation_timeout=30
        )
        fs[topic].result(60)
    p = Producer({"bootstrap.servers": bootstrap})

    def ready():
        t = p.list_topics(topic, timeout=10).topics.get(topic)
        return (
            t is not None
            and t.error is None
            and t.partitions
            and all(x.leader >= 0 for x in t.partitions.values())
        )

    wait_until(ready, 60, message=f"topic {topic}")


def produce(bootstrap: str, topic: str, n: int, size: int, acks: str, max_s: float,
            compression: str = "none", keyed: bool = False) -> tuple[int, float]:
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": 5,
            "batch.size": 1024 * 1024,
            "batch.num.messages": 1_000_000,
            "compression.type": compression,
            "enable.idempotence": acks == "all",
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1024 * 1024,
            "message.max.bytes": 2 * 1024 * 1024,
            "message.timeout.ms": 300_000,
        }
    )
    value = os.urandom(size)
    errors = [0]
    delivered = [0]

    def cb(err, _msg):
        if err is not None:
            errors[0] += 1
        else:
            delivered[0] += 1

    sent = 0
    t0 = time.perf_counter()
    deadline = t0 + max_s
    produce_ = p.produce
    while sent < n:
        try:
            if keyed:
                produce_(topic, value, key=b"%08d" % sent, partition=0, on_delivery=cb)
            else:
                produce_(topic, value, partition=0, on_delivery=cb)
            sent += 1
        except BufferError:
            p.poll(0.01)
            if time.perf_counter() > deadline:
                break
            continue
        if sent % 10000 == 0:
            p.poll(0)
            if time.perf_counter() > deadline:
                break
    left = p.flush(300)
    elapsed = time.perf_counter() - t0
    if left or errors[0]:
        raise RuntimeError(f"produce: {left} undelivered, {errors[0]} delivery errors")
    return delivered[0], elapsed


def consume(bootstrap: str, topic: str, n: int, max_s: float,
            isolation: str = "read_committed") -> tuple[int, int, float]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "fetch.max.bytes": 64 * 1024 * 1024,
            "max.partition.fetch.bytes": 16 * 1024 * 1024,
            "fetch.wait.max.ms": 100,
            "queued.max.messages.kbytes": 512 * 1024,
            "queued.min.messages": 10_000_000,
            "receive.message.max.bytes": 80 * 1024 * 1024,
            "enable.partition.eof": True,  # stop at the end of the log (the mock cluster keeps only ~5 MB)
            "isolation.level": isolation,  # librdkafka's default is read_committed (reads stop at the LSO)
        }
    )
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = nbytes = 0
    t0 = None
    start = time.perf_counter()
    try:
        while got < n:
            now = time.perf_counter()
            if (t0 or start) + max_s < now:
                break
            msgs = c.consume(10000, 1.0)
            for m in msgs:
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        if got:
                            n = got  # reached the end of what the broker still holds
                        continue
                    raise RuntimeError(f"consume error: {m.error()}")
                if t0 is None:
                    t0 = (
                        time.perf_counter()
                    )  # exclude connection set-up, as on the produce side's first batch
                got += 1
                nbytes += len(m.value())
    finally:
        c.close()
    elapsed = time.perf_counter() - (t0 or start)
    return got, nbytes, elapsed


def run_target(name: str, bootstrap: str, mock: bool, args, pid: int | None = None) -> list[Result]:
    """``pid``: the broker process, whose CPU time per MB produced is reported (less sensitive to
    other load on the machine than the rates)."""
    results = []
    for size in args.sizes:
        for acks in args.acks:
            topic = f"bench-{size}b-acks{acks}-{uuid.uuid4().hex[:6]}"
            create_topic(bootstrap, topic, mock, {"cleanup.policy": "compact"} if args.compacted else None)
            cpu0 = process_cpu_s(pid) if pid else 0.0
            n, ps = produce(bootstrap, topic, args.records, size, acks, args.max_seconds, args.compression,
                            keyed=args.compacted)
            cpu_ms_per_mb = round((process_cpu_s(pid) - cpu0) * 1e3 / (n * size / 1e6), 2) if pid else None
            if mock:
                # The mock cluster keeps only ~5 MB per partition: its consume rate is no reference.
                got, nbytes, cs = 0, 0, 0.0
            else:
                got, nbytes, cs = consume(bootstrap, topic, n, args.max_seconds, args.isolation)
            r = Result(
                name,
                size,
                acks,
                n,
                round(ps, 3),
                round(n / ps),
                round(n * size / ps / 1e6, 1),
                got,
                round(cs, 3),
                round(got / cs) if cs else 0,
                round(nbytes / cs / 1e6, 1) if cs else 0.0,
                cpu_ms_per_mb,
            )
            cons = (
                f"consume {r.consume_rps:>9,} rec/s {r.consume_mbps:>7} MB/s   ({n:,} produced, {got:,} consumed)"
                if cs
                else f"consume n/a   ({n:,} produced)"
            )
            print(
                f"  {name:7} {size:>5} B  acks={acks:<3}  produce {r.produce_rps:>9,} rec/s {r.produce_mbps:>7} MB/s"
                f"   {cons}" + (f"   broker CPU {cpu_ms_per_mb} ms/MB produced" if pid else ""),
                flush=True,
            )
            results.append(r)
    return results


def table(results: list[Result]) -> str:
    head = (
        "target",
        "value",
        "acks",
        "produced",
        "produce rec/s",
        "produce MB/s",
        "consumed",
        "consume rec/s",
        "consume MB/s",
    )
    rows = [
        (
            r.target,
            f"{r.value_bytes} B",
            r.acks,
            f"{r.records:,}",
            f"{r.produce_rps:,}",
            f"{r.produce_mbps}",
            f"{r.consumed:,}" if r.consume_s else "n/a",
            f"{r.consume_rps:,}" if r.consume_s else "n/a",
            f"{r.consume_mbps}" if r.consume_s else "n/a",
        )
        for r in results
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=True)]
    line = lambda cells: "| " + " | ".join(str(c).rjust(w) for c, w in zip(cells, widths, strict=True)) + " |"  # noqa: E731
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(head), sep, *(line(r) for r in rows)])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", help="use this running broker instead of starting a krafty node")
    ap.add_argument(
        "--records", type=int, default=1_000_000, help="records per run (default 1M: ~1 GB at 1 KiB)"
    )
    ap.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[1024, 100])
    ap.add_argument("--acks", type=lambda s: s.split(","), default=["1", "all"])
    ap.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"],
                    help="producer compression.type (random values: measures the broker's work, not the ratio)")
    ap.add_argument("--compacted", action="store_true",
                    help="cleanup.policy=compact topics, each record with its own 8-byte key (not counted in MB)")
    ap.add_argument("--max-seconds", type=float, default=60.0, help="cap per produce / consume phase")
    ap.add_argument("--isolation", default="read_committed", choices=["read_committed", "read_uncommitted"],
                    help="the consumer's isolation.level (librdkafka's default: read_committed)")
    ap.add_argument("--no-mock", action="store_true", help="skip the librdkafka mock-cluster reference")
    ap.add_argument("--no-krafty", action="store_true", help="only the mock-cluster reference")
    ap.add_argument("--json", help="also write the results (and the machine) to this JSON file")
    ap.add_argument("--metrics", action="store_true",
                    help="serve metrics on the krafty node (krafty.metrics.port) and scrape them every 5 s, as "
                         "Prometheus would (bench/metrics_cost.py has the per-request CPU)")
    args = ap.parse_args(argv)

    import confluent_kafka

    print(
        f"confluent-kafka {confluent_kafka.version()[0]} / librdkafka {confluent_kafka.libversion()[0]}, "
        f"python {platform.python_version()}, {os.cpu_count()} cpus",
        flush=True,
    )
    results: list[Result] = []
    if not args.no_krafty:
        if args.bootstrap:
            results += run_target("krafty", args.bootstrap, False, args)
        else:
            with tempfile.TemporaryDirectory(prefix="krafty-bench-") as d:
                mport = free_port()
                node = KraftyNode(d, overrides={"krafty.metrics.port": str(mport), "krafty.metrics.host": "127.0.0.1"}
                                  if args.metrics else None)
                scraper = None
                try:
                    node.start()
                    print(f"krafty node on {node.bootstrap} (data in {d})"
                          + (f", metrics on :{mport} scraped every 5 s" if args.metrics else ""), flush=True)
                    if args.metrics:
                        from metrics_cost import Scraper
                        scraper = Scraper(mport, 5.0)
                        scraper.start()
                    results += run_target("krafty+metrics" if args.metrics else "krafty", node.bootstrap, False, args,
                                          pid=node.proc.pid)
                finally:
                    if scraper is not None:
                        scraper.stop.set()
                    node.close()
    if not args.no_mock:
        mock = MockCluster().start()
        try:
            results += run_target("mock", mock.bootstrap, True, args)
        finally:
            mock.close()
    print()
    print(table(results))
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "machine": {
                        "cpus": os.cpu_count(),
                        "platform": platform.platform(),
                        "librdkafka": confluent_kafka.libversion()[0],
                    },
                    "args": {k: v for k, v in vars(args).items()},
                    "results": [asdict(r) for r in results],
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
