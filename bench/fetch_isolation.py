"""Cost of a Fetch request on the broker, read_uncommitted against read_committed (the LSO bound
and the aborted-transaction lookup), measured over the wire against an in-process node.

    .venv/bin/python bench/fetch_isolation.py                  # a log with no transactions
    .venv/bin/python bench/fetch_isolation.py --aborted 50     # and 50 aborted transactions in it

Each round sends --requests Fetch v12 requests (one partition, from offset 0, --fetch-bytes) and
takes the CPU time of the whole process (client and broker share it) per request; the figure is
the median over --rounds rounds, isolation levels alternating. The response data is sent with
sendfile either way. Runs on any krafty (read_committed is ignored by brokers without transactions)
so it can be compared before/after a change.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker.log.batch import Record, build_batch  # noqa: E402
from broker.protocol import codec  # noqa: E402
from broker.protocol.apis import ApiKey  # noqa: E402
from tests.protocol.conftest import RawClient, start_node  # noqa: E402


def batch(n: int, size: int, pid: int = -1, seq: int = -1, transactional: bool = False) -> bytes:
    return bytes(build_batch([Record(i, 1000 + i, None, b"x" * size, []) for i in range(n)], base_offset=0,
                             producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq,
                             transactional=transactional))


async def produce(c: RawClient, records: bytes, txn_id: str | None = None) -> None:
    resp = await c.call(ApiKey.PRODUCE, 9, codec.build(codec.request_type(ApiKey.PRODUCE, 9), {
        "transactional_id": txn_id, "acks": 1, "timeout": 5000,
        "topic_data": [{"name": "bench", "partition_data": [{"index": 0, "records": records}]}]}))
    assert int(resp.responses[0].partition_responses[0].error_code) == 0, resp


def fetch_body(isolation: int, max_bytes: int) -> bytes:
    return codec.encode(codec.build(codec.request_type(ApiKey.FETCH, 12), {
        "replica_id": -1, "max_wait": datetime.timedelta(milliseconds=0), "min_bytes": 1, "max_bytes": max_bytes,
        "isolation_level": isolation, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": "bench", "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                                      "last_fetched_epoch": -1, "log_start_offset": -1,
                                                      "partition_max_bytes": max_bytes}]}],
        "forgotten_topics_data": [], "rack_id": ""}))


async def main(args) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        node = await start_node(Path(tmp), transaction_partition_verification_enable="false") if args.aborted \
            else await start_node(Path(tmp))
        try:
            from metadata.controller_api import NewTopic
            [res] = await node.controller.create_topics([NewTopic("bench", 1, 1, configs={})])
            assert res.error == 0, res
            c = await RawClient.connect(node.port)
            for i in range(args.batches):
                await produce(c, batch(16, 1024))
                if i < args.aborted:  # an aborted transaction every few batches
                    from tests.protocol.txn_helpers import write_markers
                    pid = 100 + i
                    await produce(c, batch(2, 100, pid, 0, True), txn_id=f"t{i}")
                    assert await write_markers(node.port, [(pid, 0, False, 0, [("bench", 0)])]) == {(pid, "bench", 0): 0}
            bodies = {iso: fetch_body(iso, args.fetch_bytes) for iso in (0, 1)}
            samples: dict[int, list[float]] = {0: [], 1: []}
            for r in range(args.rounds):
                for iso in ((0, 1) if r % 2 == 0 else (1, 0)):
                    t0 = time.process_time()
                    for _ in range(args.requests):
                        await c.request(ApiKey.FETCH, 12, bodies[iso])
                    samples[iso].append((time.process_time() - t0) / args.requests * 1e6)
            c.close()
        finally:
            await node.stop()
    for iso, name in ((0, "read_uncommitted"), (1, "read_committed")):
        s = samples[iso]
        print(f"{name:17} {statistics.median(s):7.1f} us CPU per Fetch (median of {len(s)} rounds; "
              f"min {min(s):.1f}, max {max(s):.1f})")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, default=200, help="16 x 1 KiB record batches in the log")
    ap.add_argument("--aborted", type=int, default=0, help="aborted transactions among them")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--fetch-bytes", type=int, default=1 << 20)
    asyncio.run(main(ap.parse_args()))
