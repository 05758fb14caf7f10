"""CPU of one idle follower fetch round over N partitions (issue #24 goal 5): a replica
fetcher following N partitions of one leader whose incremental Fetch responses (KIP-227) leave
every partition out (nothing new), in-process, with the fake log of
tests/unit/replica/test_fetcher_shell.py; the process's CPU time per round and per partition.

    .venv/bin/python bench/follower_round.py . 6000
    .venv/bin/python bench/follower_round.py /tmp/base 6000      # another checkout (A/B)
"""
import asyncio
import os
import sys
import time
import types
import uuid

sys.path.insert(0, os.path.abspath(sys.argv[1]))
from broker.replica.fetcher import ReplicaFetcherManager
from broker.replica.partition import PartitionState
from broker.replica.throttle import UNLIMITED, ReplicationQuota
from common.config import Config
from tests.unit.replica.test_fetcher_shell import _Log

N = int(sys.argv[2])

class Leader:
    """Answers the fetcher's hand-encoded Fetch v12: every partition in a full request (high
    watermark 10, nothing to read), none in an incremental one (nothing new)."""

    async def request_body(self, api_key, version, body, timeout=None):
        from broker.apis import wire
        req = wire.parse_fetch(memoryview(body), version)
        full = req.session_epoch == 0
        topics = [(t.topic, None, [wire.FetchPartitionResult(p.partition, 0, 10, 10, 0, None) for p in t.partitions])
                  for t in req.topics] if full else []
        return memoryview(b"".join(wire.encode_fetch_response(version, topics, session_id=7)))

async def main():
    parts = {(f"t{i // 100}", i % 100): types.SimpleNamespace(state=PartitionState(f"t{i // 100}", i % 100, uuid.uuid4(), 1), log=_Log()) for i in range(N)}
    rm = types.SimpleNamespace(partitions=parts, wake_hw=lambda tp: None, logs=types.SimpleNamespace(writer=None),
                               follower_quota=ReplicationQuota(1, "follower.replication.throttled.replicas", UNLIMITED),
                               throttled=lambda *a: False)
    m = ReplicaFetcherManager(rm, 1, Config({"node.id": "1"}), lambda b: None)
    for tp in parts:
        m.follow(tp, leader=2, leader_epoch=1, high_watermark=0)
    th = next(iter(m.threads.values()))
    for t in m.threads.values():
        t.task.cancel()
    for fs in th.states.values():
        fs.phase = fs.phase.FETCHING
    leader = Leader()
    th._connection = lambda: leader
    await th._round()  # full
    await th._round()  # the first incremental one (where idle partitions may settle)
    rounds = 50
    pr = None
    if os.environ.get("PROFILE"):
        import cProfile
        pr = cProfile.Profile()
        pr.enable()
    c0 = time.process_time()
    for _ in range(rounds):
        await th._round()
    c = (time.process_time() - c0) / rounds
    if pr:
        pr.disable()
        import pstats
        pstats.Stats(pr).sort_stats("tottime").print_stats(12)
    print(f"{len(th.states)} partitions: {c * 1000:.2f} ms CPU per idle round = {c / len(th.states) * 1e6:.2f} us per partition")
    if getattr(th, "parked", None):  # idle partitions parked in the session: their once-a-second sweep
        c0 = time.process_time()
        for _ in range(10):
            th._sweep(0)
        c = (time.process_time() - c0) / 10
        print(f"{len(th.parked)} parked: {c * 1000:.2f} ms CPU per sweep (once a second) = "
              f"{c / len(th.parked) * 1e6:.2f} us per partition")
    await m.close()

asyncio.run(main())
