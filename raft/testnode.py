"""A stand-alone quorum member for tests and benchmarks:
``python -m raft.testnode --config server.properties --kv-port PORT``.

Runs ``RaftMetadataLog`` with a key/value test state machine and serves the TestKV gRPC
service (proto/testkv.proto) on 127.0.0.1:PORT: ``Put`` appends ``key=value`` through the
quorum (on the leader) and answers once committed; ``Get`` returns the applied state.
SIGTERM / SIGINT close the log gracefully (a leader resigns with EndQuorumEpoch).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Iterable, Sequence

import grpc

from common.clock import SYSTEM
from common.config import Config, ConfigError
from common.errors import ErrorCode
from common.ports import free_port
from proto import testkv_pb2 as kvpb
from proto import testkv_pb2_grpc as kvpb_grpc
from raft.api import Batch, LeaderAndEpoch, NotLeaderError, Snapshot
from raft.driver import RaftMetadataLog


class KVStateMachine:
    """Records are ``key=value``; a snapshot is the sorted items."""

    def __init__(self) -> None:
        self.items: dict[str, str] = {}
        self.applied_end = 0
        self.log: list[str] = []  # committed records since start (or the last snapshot load)
        self.leader = LeaderAndEpoch(None, 0)

    def handle_commit(self, batches: Iterable[Batch]) -> None:
        for b in batches:
            for i, r in enumerate(b.records):
                k, _, v = r.decode().partition("=")
                self.items[k] = v
                self.log.append(f"{b.base_offset + i}:{b.epoch}:{r.decode()}")
            self.applied_end = b.last_offset + 1

    def handle_load_snapshot(self, snapshot: Snapshot) -> None:
        self.items = dict(r.decode().split("=", 1) for r in snapshot.records)
        self.applied_end = snapshot.end_offset
        self.log = [f"snapshot:{snapshot.end_offset}"]

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.leader = leader

    def snapshot_records(self, end_offset: int) -> Sequence[bytes]:
        return [f"{k}={v}".encode() for k, v in sorted(self.items.items())]


class KVServicer(kvpb_grpc.TestKVServicer):
    def __init__(self, mlog: RaftMetadataLog, sm: KVStateMachine) -> None:
        self.mlog, self.sm = mlog, sm

    async def Put(self, request, context):
        try:
            off = await asyncio.wait_for(self.mlog.append([f"{request.key}={request.value}".encode()]), 10)
        except NotLeaderError as e:
            lid = e.leader.leader_id
            return kvpb.PutResponse(error=int(ErrorCode.NOT_LEADER_OR_FOLLOWER), offset=-1, epoch=e.leader.epoch,
                                    leader_id=-1 if lid is None else lid)
        except TimeoutError:
            return kvpb.PutResponse(error=int(ErrorCode.REQUEST_TIMED_OUT), offset=-1)
        ld = self.mlog.leader()
        return kvpb.PutResponse(error=0, offset=off, epoch=ld.epoch,
                                leader_id=-1 if ld.leader_id is None else ld.leader_id)

    async def Get(self, request, context):
        ld = self.mlog.leader()
        return kvpb.GetResponse(items=self.sm.items, applied_end=self.sm.applied_end,
                                leader_id=-1 if ld.leader_id is None else ld.leader_id, epoch=ld.epoch,
                                log=self.sm.log)


async def serve(cfg: Config, kv_port: int) -> int:
    sm = KVStateMachine()
    mlog = RaftMetadataLog.from_config(cfg, snapshot_provider=sm.snapshot_records)
    mlog.register(sm)
    await mlog.start()
    server = grpc.aio.server()
    kvpb_grpc.add_TestKVServicer_to_server(KVServicer(mlog, sm), server)
    if server.add_insecure_port(f"127.0.0.1:{kv_port}") == 0:
        print(f"cannot bind 127.0.0.1:{kv_port}", file=sys.stderr)
        await mlog.close()
        return 1
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"testnode {cfg['node.id']} ready", flush=True)
    await stop.wait()
    await server.stop(grace=None)
    await mlog.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m raft.testnode", description=__doc__)
    ap.add_argument("--config", required=True, help="server.properties")
    ap.add_argument("--kv-port", type=int, required=True, help="port of the TestKV gRPC service on 127.0.0.1")
    ap.add_argument("--override", action="append", default=[], help="key=value")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        cfg = Config.from_file(args.config, args.override)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return asyncio.run(serve(cfg, args.kv_port))


if __name__ == "__main__":
    sys.exit(main())


# --------------------------------------------------------------------------- launcher
class ProcessQuorum:
    """Local ``raft.testnode`` processes forming one quorum on 127.0.0.1 (for tests and
    bench/raft_election.py). Each process runs in its own process group; ``close()`` kills
    whatever is still running."""

    def __init__(self, workdir: str, n_voters: int = 3, overrides: dict[str, str] | None = None,
                 program: str = "testnode") -> None:
        """``program``: "testnode" (this module, with the TestKV service) or "krafty"
        (``krafty node``, process.roles=controller)."""
        import os

        self.workdir = workdir
        self.program = program
        ports = [free_port() for _ in range(2 * n_voters)]
        self.ids = list(range(1, n_voters + 1))
        self.ctrl_port = {nid: ports[i] for i, nid in enumerate(self.ids)}
        self.kv_port = {nid: ports[n_voters + i] for i, nid in enumerate(self.ids)}
        voters = ",".join(f"{nid}@127.0.0.1:{self.ctrl_port[nid]}" for nid in self.ids)
        self.procs: dict = {}
        self.config_path: dict[int, str] = {}
        for nid in self.ids:
            d = os.path.join(workdir, f"node{nid}")
            os.makedirs(d, exist_ok=True)
            props = {
                "node.id": str(nid),
                "process.roles": "controller",
                "controller.quorum.voters": voters,
                "listeners": f"CONTROLLER://127.0.0.1:{self.ctrl_port[nid]}",
                "controller.listener.names": "CONTROLLER",
                "metadata.log.dir": os.path.join(d, "metadata"),
                "log.dirs": os.path.join(d, "data"),
                "cluster.id": "a3JhZnR5LXRlc3Qtbm9kZQ",  # formats the empty directories on first start
                **(overrides or {}),
            }
            path = os.path.join(d, "server.properties")
            with open(path, "w") as f:
                f.write("".join(f"{k}={v}\n" for k, v in props.items()))
            self.config_path[nid] = path

    def start(self, nid: int) -> None:
        import os
        import subprocess

        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
        logf = open(os.path.join(self.workdir, f"node{nid}", "out.log"), "ab")  # noqa: SIM115 - owned by the proc
        if self.program == "krafty":
            cmd = [sys.executable, "-m", "krafty.cli", "node", "--config", self.config_path[nid]]
        else:
            cmd = [sys.executable, "-m", "raft.testnode", "--config", self.config_path[nid],
                   "--kv-port", str(self.kv_port[nid])]
        self.procs[nid] = (subprocess.Popen(
            cmd,
            cwd=root, env=env, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True), logf)

    def start_all(self) -> None:
        for nid in self.ids:
            self.start(nid)

    def kill(self, nid: int) -> None:
        """kill -9 (the whole process group)."""
        import os

        proc, logf = self.procs.pop(nid)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        logf.close()

    def stop(self, nid: int, timeout: float = 10.0) -> int:
        import os
        import subprocess

        proc, logf = self.procs.pop(nid)
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            rc = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
        except ProcessLookupError:
            rc = proc.wait()
        logf.close()
        return rc

    def close(self) -> None:
        for nid in list(self.procs):
            self.kill(nid)

    def alive(self) -> list[int]:
        return sorted(self.procs)

    def get(self, nid: int, timeout: float = 1.0) -> kvpb.GetResponse | None:
        with grpc.insecure_channel(f"127.0.0.1:{self.kv_port[nid]}") as ch:
            try:
                return kvpb_grpc.TestKVStub(ch).Get(kvpb.GetRequest(), timeout=timeout)
            except grpc.RpcError:
                return None

    def put(self, nid: int, key: str, value: str, timeout: float = 10.0) -> kvpb.PutResponse | None:
        with grpc.insecure_channel(f"127.0.0.1:{self.kv_port[nid]}") as ch:
            try:
                return kvpb_grpc.TestKVStub(ch).Put(kvpb.PutRequest(key=key, value=value), timeout=timeout)
            except grpc.RpcError:
                return None

    def describe(self, nid: int, timeout: float = 1.0):
        from proto import raft_pb2 as pb
        from proto import raft_pb2_grpc as pb_grpc

        with grpc.insecure_channel(f"127.0.0.1:{self.ctrl_port[nid]}") as ch:
            try:
                return pb_grpc.RaftQuorumStub(ch).DescribeQuorum(pb.DescribeQuorumRequest(), timeout=timeout)
            except grpc.RpcError:
                return None

    def wait_leader(self, timeout: float = 30.0, min_epoch: int = 0, poll_s: float = 0.05) -> tuple[int, int]:
        """(leader id, epoch) once a live node leads an epoch >= min_epoch and has committed in it."""
        import time

        end = SYSTEM.monotonic() + timeout
        while SYSTEM.monotonic() < end:
            for nid in self.alive():
                d = self.describe(nid, timeout=0.5)
                if d is not None and d.error == 0 and d.leader_epoch >= min_epoch and d.high_watermark >= 0:
                    return d.leader_id, d.leader_epoch
            time.sleep(poll_s)
        raise TimeoutError(f"no leader with epoch >= {min_epoch} within {timeout} s")
