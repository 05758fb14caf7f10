"""RaftMetadataLog end to end inside one event loop: three voters and an observer on
loopback gRPC, SQLite stores in a temp dir."""

from __future__ import annotations

import asyncio
import random

import pytest

from common.config import Config
from common.ports import free_port
from raft.api import NotLeaderError
from raft.core import Timeouts
from raft.driver import RaftMetadataLog
from raft.testnode import KVStateMachine

FAST = Timeouts(election_ms=300, fetch_ms=600, election_backoff_max_ms=300, request_ms=600, append_linger_ms=5,
                fetch_max_wait_ms=200)


def free_ports(n: int) -> list[int]:
    return [free_port() for _ in range(n)]


class Cluster:
    def __init__(self, tmp_path, n_voters=3, observers=(), timeouts=FAST, snapshot_bytes=20 * 1024 * 1024):
        ports = free_ports(n_voters)
        self.voters = [(i + 1, "127.0.0.1", ports[i]) for i in range(n_voters)]
        self.tmp = tmp_path
        self.timeouts = timeouts
        self.snapshot_bytes = snapshot_bytes
        self.logs: dict[int, RaftMetadataLog] = {}
        self.sms: dict[int, KVStateMachine] = {}
        self.ids = [v[0] for v in self.voters] + list(observers)

    async def start(self, nid: int) -> None:
        sm = KVStateMachine()
        log = RaftMetadataLog(nid, self.voters, str(self.tmp / f"n{nid}"), timeouts=self.timeouts,
                              snapshot_provider=sm.snapshot_records,
                              max_bytes_between_snapshots=self.snapshot_bytes, rng=random.Random(nid))
        log.register(sm)
        await log.start()
        self.logs[nid], self.sms[nid] = log, sm

    async def start_all(self) -> None:
        for nid in self.ids:
            await self.start(nid)

    async def stop(self, nid: int) -> None:
        await self.logs.pop(nid).close()

    async def close(self) -> None:
        for nid in list(self.logs):
            await self.stop(nid)

    async def leader(self, timeout: float = 10.0, exclude: int | None = None) -> RaftMetadataLog:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while loop.time() < end:
            for nid, log in self.logs.items():
                if nid != exclude and log.leader().leader_id == nid and log.core.hw > log.core.epoch_start:
                    return log
            await asyncio.sleep(0.02)
        raise AssertionError("no leader elected")

    async def wait_applied(self, offset: int, nodes=None, timeout: float = 10.0) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        nodes = list(self.logs) if nodes is None else nodes
        while loop.time() < end:
            if all(self.sms[n].applied_end > offset for n in nodes):
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"not applied up to {offset}: " + str({n: self.sms[n].applied_end for n in nodes}))


@pytest.fixture
async def cluster(tmp_path):
    c = Cluster(tmp_path, observers=(7,))
    try:
        yield c
    finally:
        await c.close()


async def test_three_voters_elect_a_leader_and_replicate_to_voters_and_observer(cluster):
    await cluster.start_all()
    leader = await cluster.leader()
    offsets = [await leader.append([f"k{i}=v{i}".encode()]) for i in range(5)]
    assert offsets == sorted(offsets) and len(set(offsets)) == 5
    await cluster.wait_applied(offsets[-1])
    for sm in cluster.sms.values():
        assert sm.items == {f"k{i}": f"v{i}" for i in range(5)}
    follower = next(log for nid, log in cluster.logs.items() if nid != leader.node_id)
    with pytest.raises(NotLeaderError):
        await follower.append([b"x=1"])
    d = leader.describe_pb()
    assert d.leader_id == leader.node_id and d.high_watermark > offsets[-1]
    assert [v.replica_id for v in d.voters] == [1, 2, 3] and [o.replica_id for o in d.observers] == [7]


async def test_graceful_close_of_the_leader_hands_over_quickly(cluster):
    await cluster.start_all()
    leader = await cluster.leader()
    off = await leader.append([b"a=1"])
    await cluster.wait_applied(off)
    old = leader.node_id
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await cluster.stop(old)
    new = await cluster.leader(exclude=old)
    # EndQuorumEpoch: no need to wait for a fetch timeout (600 ms here).
    assert loop.time() - t0 < 3.0
    off2 = await new.append([b"b=2"])
    await cluster.wait_applied(off2)
    assert cluster.sms[new.node_id].items == {"a": "1", "b": "2"}


async def test_state_survives_a_full_restart(tmp_path):
    c = Cluster(tmp_path)
    try:
        await c.start_all()
        leader = await c.leader()
        last = 0
        for i in range(20):
            last = await leader.append([f"k{i % 5}=v{i}".encode()])
        await c.wait_applied(last)
        epoch = leader.leader().epoch
        await c.close()
        await c.start_all()
        leader = await c.leader()
        assert leader.leader().epoch > epoch
        await c.wait_applied(last)
        assert all(sm.items == {f"k{j}": f"v{15 + j}" for j in range(5)} for sm in c.sms.values())
    finally:
        await c.close()


async def test_snapshot_lets_a_new_node_catch_up_without_the_log_prefix(tmp_path):
    c = Cluster(tmp_path, snapshot_bytes=200)
    try:
        for nid in (1, 2):
            await c.start(nid)
        leader = await c.leader()
        last = 0
        for i in range(60):
            last = await leader.append([f"key{i % 7}=value{i}".encode()])
        await c.wait_applied(last, nodes=[1, 2])
        assert leader.core.snapshot is not None and leader.core.log_start > 0
        await c.start(3)
        await c.wait_applied(last, nodes=[3])
        assert c.sms[3].items == c.sms[leader.node_id].items
        assert c.sms[3].log[0].startswith("snapshot:")
    finally:
        await c.close()


def test_from_config_reads_kafka_keys(tmp_path):
    cfg = Config({
        "node.id": "2", "process.roles": "controller",
        "controller.quorum.voters": "1@127.0.0.1:19091,2@127.0.0.1:19092,3@127.0.0.1:19093",
        "listeners": "CONTROLLER://127.0.0.1:19092", "metadata.log.dir": str(tmp_path),
        "controller.quorum.election.timeout.ms": "1500",
    })
    log = RaftMetadataLog.from_config(cfg)
    assert log.is_voter and log.listen == ("127.0.0.1", 19092)
    assert log.timeouts.election_ms == 1500 and log.timeouts.fetch_ms == 2000
    assert log.timeouts.election_backoff_max_ms == 1000 and log.timeouts.append_linger_ms == 25
    assert log.data_dir == str(tmp_path / "__cluster_metadata-0")
    broker = Config({"node.id": "9", "process.roles": "broker",
                     "controller.quorum.voters": "1@127.0.0.1:19091", "listeners": "PLAINTEXT://127.0.0.1:19999",
                     "metadata.log.dir": str(tmp_path)}, warn_unknown=False)
    assert not RaftMetadataLog.from_config(broker).is_voter


async def test_a_single_voter_quorum_leads_at_once_and_commits(tmp_path):
    sm = KVStateMachine()
    port = free_ports(1)[0]
    log = RaftMetadataLog(1, [(1, "127.0.0.1", port)], str(tmp_path / "solo"), timeouts=FAST)
    log.register(sm)
    await log.start()
    try:
        for _ in range(250):
            if log.leader().leader_id == 1:
                break
            await asyncio.sleep(0.02)
        off = await asyncio.wait_for(log.append([b"only=1"]), 5)
        assert off >= 1 and sm.items == {"only": "1"} and log.leader().leader_id == 1
    finally:
        await log.close()


async def test_extra_servicers_share_the_controller_listener(tmp_path):
    import grpc

    from proto import testkv_pb2 as kvpb
    from proto import testkv_pb2_grpc as kvpb_grpc
    from raft.testnode import KVServicer

    sm = KVStateMachine()
    port = free_ports(1)[0]
    log = RaftMetadataLog(1, [(1, "127.0.0.1", port)], str(tmp_path / "solo"), timeouts=FAST)
    log.register(sm)
    log.servicers.append(lambda server: kvpb_grpc.add_TestKVServicer_to_server(KVServicer(log, sm), server))
    await log.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = kvpb_grpc.TestKVStub(ch)
            for _ in range(250):
                r = await stub.Put(kvpb.PutRequest(key="a", value="1"), timeout=5)
                if r.error == 0:
                    break
                await asyncio.sleep(0.02)
            assert r.error == 0 and (await stub.Get(kvpb.GetRequest(), timeout=5)).items == {"a": "1"}
    finally:
        await log.close()
