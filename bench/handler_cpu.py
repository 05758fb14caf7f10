"""CPU per request of the broker's request path without sockets: an in-process node, requests
handed to its listener's dispatch (KafkaApis) as the connection would, timed with the thread's
own CPU clock (so other processes on a loaded machine barely move it). The socket side is
bench/request_read.py; the whole broker under a client is bench/request_cpu.py.

    .venv/bin/python bench/handler_cpu.py                       # every kind, 20,000 requests each
    .venv/bin/python bench/handler_cpu.py --kinds produce --n 50000 --profile   # + cProfile's top functions
    PYTHONPATH=<other checkout> .venv/bin/python bench/handler_cpu.py   # compare checkouts

Kinds: produce (one record of 100 B, acks=all, idempotent, Produce v9), produce-v3 (the same
in Produce v3, classic encoding), produce-1m (1,000 records of 1 KiB in one batch: CPU per MB), fetch (an empty Fetch v16 with max_wait 0: the long poll's
answer without its wait), metadata (Metadata v12 for one topic), fetch-session (an incremental
Fetch v16 with max_wait 0 in a KIP-227 session of --session-partitions partitions of which nothing
moved: what every idle round of a follower or a session consumer costs the leader)."""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import struct
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from broker.protocol import codec  # noqa: E402
from broker.protocol.apis import ApiKey, is_flexible  # noqa: E402
from broker.server import RequestContext  # noqa: E402


def _batch(producer_id: int, epoch: int, seq: int, value: bytes, n: int = 1) -> bytes:
    from broker.log.batch import Record, build_batch

    ts = int(time.time() * 1000)
    return bytes(build_batch([Record(i, ts, None, value, []) for i in range(n)], producer_id=producer_id,
                             producer_epoch=epoch, base_sequence=seq))


def _frame(api_key: int, version: int, data: dict, cid: int = 1) -> bytearray:
    body = codec.encode(codec.build_request(api_key, version, data))
    client = b"handler-cpu"
    header = struct.pack(">hhih", api_key, version, cid, len(client)) + client
    if is_flexible(api_key, version):
        header += b"\x00"
    return bytearray(header + body)


async def run(args) -> None:
    sys.path.insert(0, str(REPO / "tests"))
    from metadata.controller_api import NewTopic
    from tests.protocol.conftest import start_node

    with tempfile.TemporaryDirectory(prefix="krafty-handler-cpu-") as d:
        node = await start_node(Path(d), message_max_bytes="4000000")
        try:
            sp = args.session_partitions
            for res in await node.controller.create_topics([NewTopic("t", 1, 1), NewTopic("e", 1, 1),
                                                            NewTopic("s", sp, 1)]):
                assert res.error == 0, res
            apis = node.broker.apis
            for _ in range(600):
                parts = node.broker.replicas.partitions
                if all(tp in parts and parts[tp].state.is_leader
                       for tp in [("t", 0), ("e", 0)] + [("s", i) for i in range(sp)]):
                    break
                await asyncio.sleep(0.05)

            async def call(frame: bytearray):
                header = codec.parse_request_header(frame)
                ctx = RequestContext(header, "PLAINTEXT", "127.0.0.1", 1)
                return await apis(ctx, memoryview(frame)[header.size:])

            resp = await call(_frame(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": -1,
                                                                   "producer_id": -1, "producer_epoch": -1}))
            init, _ = codec._reader(codec.response_type(ApiKey.INIT_PRODUCER_ID, 4))(b"".join(resp[1:]), 0)
            pid, epoch = init.producer_id, init.producer_epoch
            md = await call(_frame(ApiKey.METADATA, 12, {"topics": [{"name": "e", "topic_id": None}],
                                                         "allow_auto_topic_creation": False,
                                                         "include_topic_authorized_operations": False}))
            mdr, _ = codec._reader(codec.response_type(ApiKey.METADATA, 12))(b"".join(md[1:]), 0)
            topic_id = mdr.topics[0].topic_id
            md = await call(_frame(ApiKey.METADATA, 12, {"topics": [{"name": "s", "topic_id": None}],
                                                         "allow_auto_topic_creation": False,
                                                         "include_topic_authorized_operations": False}))
            s_id = codec._reader(codec.response_type(ApiKey.METADATA, 12))(b"".join(md[1:]), 0)[0].topics[0].topic_id
            session = {"id": 0, "epoch": 0}
            seq = [0]

            def produce_frames(version: int, n: int, records: int = 1, size: int = 100) -> list[bytearray]:
                out = []
                for _ in range(n):
                    out.append(_frame(ApiKey.PRODUCE, version, {
                        "transactional_id": None, "acks": -1, "timeout": 30000, "topic_data": [{
                            "name": "t", "partition_data": [{"index": 0, "records": _batch(
                                pid, epoch, seq[0], bytes(size), records)}]}]}))
                    seq[0] += records
                return out

            def fetch_frames(n: int) -> list[bytearray]:
                f = _frame(ApiKey.FETCH, 16, {
                    "max_wait": 0, "min_bytes": 1, "max_bytes": 52428800, "isolation_level": 0,
                    "session_id": 0, "session_epoch": -1, "topics": [{"topic_id": topic_id, "partitions": [{
                        "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                        "log_start_offset": -1, "partition_max_bytes": 1048576}]}],
                    "forgotten_topics_data": [], "rack_id": ""})
                return [bytearray(f) for _ in range(n)]

            def session_frame(epoch: int, full: bool) -> bytearray:
                return _frame(ApiKey.FETCH, 16, {
                    "max_wait": 0, "min_bytes": 1, "max_bytes": 52428800, "isolation_level": 0,
                    "session_id": session["id"], "session_epoch": epoch, "topics": [{"topic_id": s_id, "partitions": [{
                        "partition": i, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                        "log_start_offset": -1, "partition_max_bytes": 1048576} for i in range(sp)]}] if full else [],
                    "forgotten_topics_data": [], "rack_id": ""})

            def session_frames(n: int) -> list[bytearray]:
                out = []
                for _ in range(n):
                    out.append(session_frame(session["epoch"], False))
                    session["epoch"] += 1
                return out

            def metadata_frames(n: int) -> list[bytearray]:
                f = _frame(ApiKey.METADATA, 12, {"topics": [{"name": "t", "topic_id": None}],
                                                 "allow_auto_topic_creation": False,
                                                 "include_topic_authorized_operations": False})
                return [bytearray(f) for _ in range(n)]

            makers = {"produce": lambda n: produce_frames(9, n), "produce-v3": lambda n: produce_frames(3, n),
                      "produce-1m": lambda n: produce_frames(9, n, 1000, 1024),
                      "fetch": fetch_frames, "metadata": metadata_frames, "fetch-session": session_frames}
            def check(kind: str, resp) -> None:
                """The answer must be a success: a benchmark of error answers measures nothing."""
                key, ver = {"produce": (0, 9), "produce-v3": (0, 3), "produce-1m": (0, 9), "fetch": (1, 16),
                            "metadata": (3, 12), "fetch-session": (1, 16)}[kind]
                obj, _ = codec._reader(codec.response_type(key, ver))(b"".join(resp[1:]), 0)
                if key == 0:
                    errs = [p.error_code for t in obj.responses for p in t.partition_responses]
                elif key == 1:
                    errs = [obj.error_code] + [p.error_code for t in obj.responses for p in t.partitions]
                else:
                    errs = [t.error_code for t in obj.topics]
                if any(int(e) for e in errs):
                    raise SystemExit(f"{kind}: the node answered {errs}")

            if "fetch-session" in args.kinds:  # open the session: a full fetch of every partition
                resp = codec._reader(codec.response_type(ApiKey.FETCH, 16))(
                    b"".join((await call(session_frame(0, True)))[1:]), 0)[0]
                session["id"], session["epoch"] = resp.session_id, 1
                assert resp.session_id and len(resp.responses[0].partitions) == sp, resp.error_code
            for kind in args.kinds:
                for rnd in range(args.rounds):
                    frames = makers[kind](args.n)
                    for f in frames[:100]:  # warm-up
                        check(kind, await call(f))
                    frames = frames[100:]
                    pr = cProfile.Profile(time.thread_time) if args.profile and rnd == args.rounds - 1 else None
                    cpu = 0.0
                    for i in range(0, len(frames), 100):
                        # the node's own timers (heartbeats, Raft) run between slices, off the clock
                        await asyncio.sleep(0.002)
                        if pr:
                            pr.enable()
                        t0 = time.thread_time()
                        for f in frames[i:i + 100]:
                            await call(f)
                        cpu += time.thread_time() - t0
                        if pr:
                            pr.disable()
                    check(kind, await call(makers[kind](1)[0]))
                    if pr:
                        pr.disable()
                    per_mb = f", {cpu / (len(frames) * 1.024) * 1e3:.3f} ms/MB" if kind == "produce-1m" else ""
                    print(f"{kind:11} {cpu / len(frames) * 1e6:7.1f} us/request{per_mb} (handler, no sockets; "
                          f"{len(frames)} requests){' [profiled]' if pr else ''}", flush=True)
                    if pr:
                        pstats.Stats(pr).sort_stats(args.sort).print_stats(args.top)
        finally:
            await node.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kinds", default="produce,produce-v3,fetch,metadata")
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--session-partitions", type=int, default=1000, help="partitions of the fetch-session kind")
    ap.add_argument("--profile", action="store_true", help="cProfile the last round (slower: for where, not how much)")
    ap.add_argument("--sort", default="tottime")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    args.kinds = [k for k in args.kinds.split(",") if k]
    args.n += 100
    import uvloop
    uvloop.run(run(args))


if __name__ == "__main__":
    main()
