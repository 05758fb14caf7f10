"""Whole-cluster worlds: the real nodes (krafty.node.Node: controllers and brokers, with their
Raft drivers, controller loop, controller channel, replica managers, fetchers, purgatories,
group coordinators and logs) in one process, on a ``SimLoop`` in virtual time, over the
simulated network (sim/net.py) and Raft stores (sim/raftstore.py); partition logs live in a
temporary directory, written through the simulated disk's file layer (sim/disk.py: a process
kill keeps what the process wrote, as the page cache does; a power loss keeps what was fsynced
and a torn, maybe garbled, part of the rest; writes and fsyncs fail on demand). Every restart
of a broker checks that recovery ends each log exactly at the end of its last complete valid
batch, found by an independent scan of the files.

Every process incarnation runs in its own context (``NODE`` = (node id, incarnation)), with
its own clock (``SimClock``: monotonic = the loop's virtual time, wall = that plus an offset
the fault schedule steps either way) and its own seeded randomness. One seed fixes
everything: the loop's callback order, every delay and loss on the network, fsync times,
the fault schedule and the clients' choices; ``python -m sim.run_world --seed N`` replays it.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import os
import random
import shutil
import uuid

from broker.log.log_types import parse_partition_dir_name
from common.config import Config
from krafty.node import Node, unlock_data_dirs
from sim.disk import SimFiles, scratch_dir, valid_log_end
from sim.loop import NODE, SimLoop
from sim.members import GROUP_CONFIG, delivery_limit
from sim.net import SimNet
from sim.raftstore import SimRaftStore

log = logging.getLogger("krafty.sim")


class InvariantViolation(AssertionError):
    pass


class SimClock:
    """A process's clock in a world: monotonic is virtual time (plus a fixed per-process
    origin); the wall clock is monotonic plus an offset that ``step_wall`` moves."""

    __slots__ = ("loop", "origin", "wall_offset_ms", "rng")

    def __init__(self, loop: SimLoop, rng: random.Random, origin: float = 0.0,
                 wall_offset_ms: int = 1_700_000_000_000):
        self.loop = loop
        self.origin = origin
        self.wall_offset_ms = wall_offset_ms
        self.rng = rng

    def monotonic(self) -> float:
        return self.loop.time() + self.origin

    def monotonic_ms(self) -> int:
        return int((self.loop.time() + self.origin) * 1000)

    def wall_ms(self) -> int:
        return int(self.loop.time() * 1000) + self.wall_offset_ms

    def uuid4(self) -> uuid.UUID:
        return uuid.UUID(int=self.rng.getrandbits(128), version=4)

    def secret_bytes(self, n: int) -> bytes:
        return self.rng.randbytes(n)

    def step_wall(self, ms: int) -> None:
        self.wall_offset_ms += ms


@dataclasses.dataclass
class Settings:
    controllers: int = 3
    brokers: int = 3
    session_timeout_ms: int = 3000
    heartbeat_ms: int = 500
    log_dirs: int = 1  # per broker (JBOD): a disk fault then hits one of them (KIP-858)
    groups: str | None = None  # KIP-848 members / share consumers (sim/members.py): "consumer", "share",
    # "both" or "none"; None: drawn from the seed
    extra: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Proc:
    node_id: int
    incarnation: int
    owner: tuple[int, int]
    ctx: contextvars.Context
    clock: SimClock
    node: Node | None = None
    task: asyncio.Task | None = None
    alive: bool = True


CONTROLLER_PORT = 9093
BROKER_PORT = 9092


def host_of(node_id: int) -> str:
    return f"n{node_id}.sim"


class World:
    def __init__(self, seed: int, settings: Settings | None = None, *, reorder: bool = True,
                 directory: str | None = None):
        self.seed = seed
        self.settings = s = settings or Settings()
        self.rng = random.Random(f"world-{seed}")
        self.loop = SimLoop(seed, reorder=reorder)
        self.net = SimNet(self.loop, random.Random(f"net-{seed}"))
        self.dir = directory or scratch_dir(f"krafty-sim-{seed}-")  # (power losses: SimFiles)
        self._own_dir = directory is None
        self.controller_ids = list(range(1, s.controllers + 1))
        self.broker_ids = list(range(s.controllers + 1, s.controllers + s.brokers + 1))
        self.stores = {n: SimRaftStore(random.Random(f"disk-{seed}-{n}")) for n in self.controller_ids + self.broker_ids}
        self.procs: dict[int, Proc] = {}
        self.incarnations: dict[int, int] = {}
        self.wall_offsets = {n: 1_700_000_000_000 for n in self.controller_ids + self.broker_ids}
        self.cluster_id = "c" + uuid.UUID(int=self.rng.getrandbits(128), version=4).hex[:21]
        self.trace: list[str] = []
        self.powered: set[int] = set()  # nodes that lost power at some point
        self.impaired: dict[int, int] = {}  # node -> faults (cut, paused, down) it is under now
        self.power_while_impaired = False  # a broker lost power while another was impaired, or the other way round
        self.power_window: dict[int, float] = {}  # broker -> until when its power loss may leave it a short last ISR member
        self.corrupted: set[int] = set()  # nodes whose metadata log got a bad block (not yet found)
        self.files = SimFiles()
        self.files.install()
        self.failure: InvariantViolation | None = None  # found inside a node's code: raised by the checker
        self.version = 0  # bumped when a process starts, finishes starting or dies (the checker's cue)
        self.replay = f"python -m sim.run_world --seed {seed} --verbose"  # set by the scenario

    # -- configuration -------------------------------------------------------------------
    def log_dirs(self, nid: int) -> list[str]:
        """A node's log dirs: its directory, or (JBOD) directories in it."""
        d = os.path.join(self.dir, f"node-{nid}")
        n = self.settings.log_dirs if nid in self.broker_ids else 1
        return [d] if n == 1 else [os.path.join(d, f"d{i}") for i in range(n)]

    def config(self, nid: int) -> Config:
        s = self.settings
        voters = ",".join(f"{c}@{host_of(c)}:{CONTROLLER_PORT}" for c in self.controller_ids)
        props = {
            "node.id": str(nid), "controller.quorum.voters": voters, "controller.listener.names": "CONTROLLER",
            "cluster.id": self.cluster_id, "log.dirs": ",".join(self.log_dirs(nid)),
            "metadata.log.dir": os.path.join(self.dir, f"node-{nid}"),
            "broker.session.timeout.ms": str(s.session_timeout_ms),
            "broker.heartbeat.interval.ms": str(s.heartbeat_ms),
        }
        if nid in self.controller_ids:
            props.update({"process.roles": "controller", "listeners": f"CONTROLLER://{host_of(nid)}:{CONTROLLER_PORT}"})
        else:
            rf = min(3, len(self.broker_ids))
            props.update({
                "process.roles": "broker", "listeners": f"PLAINTEXT://{host_of(nid)}:{BROKER_PORT}",
                "offsets.topic.replication.factor": str(rf), "default.replication.factor": str(rf),
                "min.insync.replicas": str(min(2, rf)), "group.initial.rebalance.delay.ms": "0",
                "offsets.topic.num.partitions": "3",  # (50 by default: 150 logs made per seed)
                "transaction.state.log.num.partitions": "3", "transaction.state.log.replication.factor": str(rf),
                "transaction.state.log.min.isr": str(min(2, rf)),
                **{k: str(v) for k, v in GROUP_CONFIG.items()},
                "group.share.delivery.count.limit": str(delivery_limit(self.seed)),
            })
        props.update({k: str(v) for k, v in s.extra.items()})
        return Config(props, warn_unknown=False)

    # -- processes -------------------------------------------------------------------------
    def start(self, nid: int) -> Proc:
        assert nid not in self.procs or not self.procs[nid].alive, f"node {nid} is running"
        inc = self.incarnations[nid] = self.incarnations.get(nid, 0) + 1
        owner = (nid, inc)
        ctx = contextvars.copy_context()
        ctx.run(NODE.set, owner)
        clock = SimClock(self.loop, random.Random(f"clock-{self.seed}-{nid}-{inc}"),
                         origin=self.rng.random() * 1000, wall_offset_ms=self.wall_offsets[nid])
        p = Proc(nid, inc, owner, ctx, clock)
        self.procs[nid] = p

        expected = self._recovery_ends(nid)

        async def run() -> None:
            p.node = Node(self.config(nid), clock, self.net, self.stores[nid])
            if p.node.broker is not None:
                opened = p.node.broker.open_logs

                def open_logs() -> None:
                    opened()
                    self._check_recovery(nid, p.node.broker.logs, expected)
                p.node.broker.open_logs = open_logs
            self.version += 1
            try:
                await p.node.start()
            finally:
                self.version += 1
        p.task = self.loop.create_task(run(), context=ctx)
        self.note(f"start {nid} (incarnation {inc})")
        return p

    def _recovery_ends(self, nid: int) -> dict[str, int]:
        """Where recovery must end each partition log of ``nid`` (its directory is at rest)."""
        out = {}
        for d in self.log_dirs(nid):
            if nid not in self.broker_ids or not os.path.isdir(d):
                continue
            for name in os.listdir(d):
                path = os.path.join(d, name)
                if os.path.isdir(path) and parse_partition_dir_name(name) is not None:
                    end = valid_log_end(path)
                    if end is not None:
                        out[name] = end
        return out

    def _check_recovery(self, nid: int, logs, expected: dict[str, int]) -> None:
        for lg in logs.all_logs():
            want = expected.get(os.path.basename(lg.path))
            if want is not None and lg.log_end_offset != want and self.failure is None:
                self.failure = self.violation(
                    f"recovery of {lg.topic}-{lg.partition} on broker {nid} ended the log at {lg.log_end_offset}, "
                    f"the last complete valid batch ends at {want}")

    def kill(self, nid: int) -> None:
        """kill -9: nothing of the process runs again; its sockets reset, its locks go."""
        p = self.procs[nid]
        if not p.alive:
            return
        p.alive = False
        self.version += 1
        self.loop.kill(p.owner)
        self.net.killed(p.owner)
        if p.node is not None:
            unlock_data_dirs(p.node._locks)
            # (its log files stay open until the world ends: closing a Log would flush and seal
            # it, which a killed process never does)
        self.note(f"kill {nid}")

    def pause(self, nid: int, seconds: float) -> None:
        """SIGSTOP for ``seconds``, then SIGCONT: the process keeps its state and sockets and
        goes on where it stopped (a long GC or VM pause: its sessions may expire meanwhile)."""
        p = self.procs[nid]
        if not p.alive:
            return
        self.loop.pause(p.owner)
        self.note(f"pause {nid} for {seconds:.2f} s")

        def cont():
            self.loop.resume(p.owner)
            self.note(f"resume {nid}")
        self.loop.call_later(seconds, cont)

    def power_loss(self, nid: int) -> None:
        """The node's machine loses power: it dies, and its partition logs keep only what was
        fsynced (plus a torn part of the rest). Its Raft store commits every write (SQLite's
        fsync'd WAL), so it loses only the transaction in flight, as after a kill."""
        self.kill(nid)
        self.powered.add(nid)
        if any(n != nid and self.impaired.get(n, 0) > 0 and n in self.broker_ids for n in self.impaired):
            self.power_while_impaired = True
        lost = sum(self.files.power_loss(d, self.rng) for d in self.log_dirs(nid))  # each dir's own files kept
        self.note(f"power loss on {nid}: {lost} unsynced bytes lost")

    def durability_excused(self) -> bool:
        """acks=all does not fsync (as in Kafka): once two of the three brokers have lost
        power, an acknowledged write may have been only in page caches that are gone, so the
        checks of acknowledged and consumed data stand down for the run. They also stand down
        when a broker lost power while another one was down, cut off or paused, or while the network
        lost messages (lost heartbeats fence brokers, seed 20979): the power-cut
        broker may be the last in-sync replica, and krafty, like Kafka without KIP-966's
        eligible leader replicas, elects it with its truncated log although the others hold
        the data (a known gap, tests/sim_world/test_mutations.py shows it); and likewise when
        another broker goes down, is cut off or paused within the power-cut one's window (its
        downtime and 10 s after: seed 97 of 0..99, a broker killed while the power-cut one was
        still down, fenced the last healthy ISR member). One power loss with the others healthy
        must cost nothing."""
        return len(self.powered & set(self.broker_ids)) >= 2 or self.power_while_impaired

    def node(self, nid: int) -> Node | None:
        p = self.procs.get(nid)
        return p.node if p is not None and p.alive else None

    def note(self, what: str) -> None:
        self.trace.append(f"{self.loop.time() - 1000:10.3f} {what}")

    def run_for(self, seconds: float, stop=None) -> bool:
        return self.loop.run_until(self.loop.time() + seconds, stop)

    def close(self) -> None:
        if os.environ.get("SIM_TRACE"):
            print("\n".join(self.trace))
        for nid in list(self.procs):
            self.kill(nid)
        self.files.uninstall()
        self.loop.finish()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- what the nodes know -----------------------------------------------------------------
    def active_controller(self) -> int | None:
        for cid in self.controller_ids:
            n = self.node(cid)
            if n is not None and n.controller is not None and n.controller.is_active():
                return cid
        return None

    # -- helpers for clients and checks -------------------------------------------------------
    def rng_for(self, name: str) -> random.Random:
        return random.Random(f"{name}-{self.seed}")

    def wall_ms(self) -> int:
        return int(self.loop.time() * 1000) + 1_700_000_000_000

    def replay_command(self) -> str:
        return self.replay

    def violation(self, what: str) -> InvariantViolation:
        return InvariantViolation(f"seed {self.seed} at {self.loop.time() - 1000:.3f} s: {what}\n"
                                  f"replay: {self.replay_command()}")

    def spawn(self, name: str, coro) -> asyncio.Task:
        """Runs ``coro`` as a process of its own (a client)."""
        ctx = contextvars.copy_context()
        ctx.run(NODE.set, ("client", name))
        return self.loop.create_task(coro, context=ctx)
