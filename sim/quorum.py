"""Deterministic simulation of a KRaft quorum with the real shells: every voter and observer
is a real ``RaftMetadataLog`` (raft/driver.py) with its real gRPC transport
(raft/transport.py), run on a ``SimLoop`` in virtual time, over the simulated network
(sim/net.py: gRPC calls with delay, loss, cuts and partitions, nothing listening on a dead or
moved node) and simulated Raft stores (sim/raftstore.py: a transaction is durable once its
randomly delayed fsync is done; a kill during it loses it). One seed fixes everything.

Faults on a seeded schedule: kill -9 (and restart later), partitions, one-way cuts, heals and,
in a KIP-853 quorum (``dynamic``), AddRaftVoter/RemoveRaftVoter on the leader and voters
restarted on another port (which then ask the leader to UpdateRaftVoter their entry). Safety
invariants are checked after every step of the loop (``QuorumSim.check``); ``run_seed`` then
heals every fault and requires a leader that commits a new entry within ``LIVENESS_BOUND_MS``,
then every live node caught up with the same state.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import inspect
import logging
import random
from collections.abc import Callable

from raft import quorum
from raft.api import NotLeaderError, Snapshot
from raft.core import Role, SaveState, Timeouts, Truncate, Voter
from raft.driver import RaftMetadataLog
from sim.loop import NODE, SimLoop
from sim.net import SimNet
from sim.raftstore import SimRaftStore
from sim.world import SimClock

# After every fault has healed, a leader must be elected and commit a new entry within
# this much virtual time. With the default timeouts the worst case is a fetch timeout
# (2 s) + a randomized election timeout (<= 2 s) + a few lost pre-vote/vote rounds with
# backoff (<= 1 s each); 15 s leaves room for unlucky split votes.
LIVENESS_BOUND_MS = 15_000
CATCH_UP_MS = 3000  # after that progress, every live node has applied what the leader had committed
PORT = 9093

logging.getLogger("krafty.raft").setLevel(logging.CRITICAL)  # (the drivers' info lines: thousands per seed)
logging.getLogger("krafty.raft.transport").setLevel(logging.CRITICAL)


class InvariantViolation(AssertionError):
    pass


def host_of(nid: int) -> str:
    return f"q{nid}.sim"


class KV:
    """The state machine each node's listener feeds: records are ``key=value``; a snapshot is the
    sorted items. It reports every committed record to the simulation's checks."""

    def __init__(self, sim: QuorumSim, nid: int) -> None:
        self.sim = sim
        self.nid = nid
        self.data: dict[bytes, bytes] = {}

    def handle_commit(self, batches) -> None:
        for b in batches:
            for i, r in enumerate(b.records):
                self.sim._committed(self.nid, b.base_offset + i, b.epoch, r)
                k, _, v = r.partition(b"=")
                self.data[k] = v

    def handle_load_snapshot(self, snapshot: Snapshot) -> None:
        self.data = dict(r.split(b"=", 1) for r in snapshot.records)

    def handle_leader_change(self, leader) -> None:
        self.sim._log(f"node {self.nid} sees leader {leader.leader_id} epoch {leader.epoch}")

    def snapshot_records(self, end_offset: int) -> list[bytes]:
        return [k + b"=" + v for k, v in sorted(self.data.items())]


class _Store(SimRaftStore):
    """A node's disk; it checks what the node makes durable."""

    def __init__(self, sim: QuorumSim, nid: int, rng, sync_s) -> None:
        super().__init__(rng, sync_s)
        self.sim = sim
        self.nid = nid

    async def apply(self, ops) -> None:
        for op in ops:
            if isinstance(op, SaveState) and op.state.epoch < self.state.epoch:
                self.sim._fail(f"node {self.nid} persisted epoch {op.state.epoch} below its durable {self.state.epoch}")
        await super().apply(ops)
        for op in ops:
            if isinstance(op, Truncate):
                for o in [o for o in self.sim.committed if o >= op.offset]:
                    self.sim._check_durable_majority(o, f"node {self.nid} truncated from {op.offset}")

    def has(self, offset: int, key: tuple[int, bytes]) -> bool:
        if offset < self.log_start:
            return True  # covered by the snapshot
        i = offset - self.log_start
        if i >= len(self.entries):
            return False
        e = self.entries[i][0]
        return (e.epoch, e.data) == key


@dataclasses.dataclass
class FaultConfig:
    drop: float = 0.0
    max_delay_ms: int = 20
    fault_every_ms: int = 800
    crash_weight: float = 1.0
    partition_weight: float = 1.0
    cut_weight: float = 1.0
    heal_weight: float = 1.5
    move_weight: float = 0.0  # a KIP-853 voter restarted on another port (dynamic quorums only)
    max_disk_ms: int = 5  # fsync latency is uniform in [0, max_disk_ms]


class SimNode:
    """One simulated process incarnation after another: the real driver over this node's disk."""

    def __init__(self, sim: QuorumSim, nid: int) -> None:
        self.sim = sim
        self.id = nid
        self.store = _Store(sim, nid, random.Random(f"disk-{sim.seed}-{nid}"), (0.0, sim.faults.max_disk_ms / 1000))
        self.port = PORT
        self.incarnation = 0
        self.alive = False
        self.log: RaftMetadataLog | None = None
        self.kv: KV | None = None
        self.ctx: contextvars.Context | None = None
        self.max_epoch = 0
        self.last_hw = 0
        self.tasks: list[asyncio.Task] = []  # the tasks the simulation started in this process

    @property
    def owner(self) -> tuple[int, int]:
        return (self.id, self.incarnation)

    @property
    def core(self):
        return self.log.core if self.log is not None else None

    def start(self) -> None:
        s = self.sim
        self.incarnation += 1
        self.alive = True
        self.ctx = contextvars.copy_context()
        self.ctx.run(NODE.set, self.owner)
        clock = SimClock(s.loop, random.Random(f"clock-{s.seed}-{self.id}-{self.incarnation}"),
                         origin=s.rng.random() * 1000)
        self.kv = KV(s, self.id)
        voters = [] if s.dynamic else [(v, host_of(v), PORT) for v in s.voters]
        initial = [Voter(v, "", host_of(v), PORT) for v in s.voters] if s.dynamic else None
        log = RaftMetadataLog(self.id, voters, "", listen=(host_of(self.id), self.port), timeouts=s.timeouts,
                              snapshot_provider=self.kv.snapshot_records,
                              max_bytes_between_snapshots=s.snapshot_bytes,
                              rng=random.Random(s.rng.random()), initial_voters=initial, clock=clock, net=s.net,
                              store=self.store)
        log.advertised = (host_of(self.id), self.port)
        log.register(self.kv)
        self.log = log
        self.last_hw = -1
        self.spawn(log.start())

    def spawn(self, coro) -> None:
        """Runs ``coro`` as a task of this process."""
        self.tasks = [t for t in self.tasks if not t.done()]
        self.tasks.append(self.sim.loop.create_task(coro, context=self.ctx))

    def kill(self) -> None:
        """kill -9: nothing of this incarnation runs again; what it had not synced is lost."""
        self.alive = False
        self.sim.loop.kill(self.owner)
        self.sim.net.killed(self.owner)
        for t in self.tasks:
            coro = t.get_coro()
            if inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
                coro.close()  # (never started: nothing of it ran, nothing to finish)
        self.tasks = []
        self.max_epoch = self.store.state.epoch
        self.log = None

    def run(self, fn: Callable, *args):
        """Calls ``fn`` as this process (its callbacks and tasks belong to it)."""
        return self.ctx.run(fn, *args)


def _retrieve(fut: asyncio.Future) -> None:
    if not fut.cancelled():
        fut.exception()  # (a lost append is normal here: NotLeaderError)


class QuorumSim:
    def __init__(self, seed: int, n_voters: int = 3, n_observers: int = 1, timeouts: Timeouts | None = None,
                 faults: FaultConfig | None = None, snapshot_every: int = 60, client_every_ms: int = 40,
                 trace: Callable[[str], None] | None = None, dynamic: bool = False,
                 membership_every_ms: int = 0) -> None:
        self.seed = seed
        # KIP-853: a quorum whose voters live in the log; every membership_every_ms the leader is
        # asked to add an observer or remove a voter. The checks then count durability over the
        # voter set in force (the committing leader's).
        self.dynamic = dynamic
        self.membership_every_ms = membership_every_ms
        self.rng = random.Random(seed)
        self.voters = list(range(1, n_voters + 1))
        self.observers = list(range(100, 100 + n_observers))
        self.timeouts = timeouts or Timeouts()
        self.faults = faults or FaultConfig()
        self.snapshot_bytes = snapshot_every * 8  # (a record is ~8 bytes: k12=v345)
        self.client_every_ms = client_every_ms
        self.trace = trace
        self.loop = SimLoop(seed, start=0.0)
        self.net = SimNet(self.loop, random.Random(f"net-{seed}"),
                          delay_s=(0.001, max(self.faults.max_delay_ms, 1) / 1000), loss=self.faults.drop)
        self.nodes = {i: SimNode(self, i) for i in self.voters + self.observers}
        self.blocked: set[tuple[int, int]] = set()  # directed links (node ids) that drop everything
        self.leaders: dict[int, int] = {}  # epoch -> leader id
        self.committed: dict[int, tuple[int, bytes]] = {}  # offset -> (epoch, record) of committed records
        self.next_key = 0
        self.faults_on = True
        self.proposed = 0
        self.failure: InvariantViolation | None = None
        self.loop.on_step = self.check
        for n in self.nodes.values():
            n.start()
        self._at(self.client_every_ms, self._ev_client)
        self._at(self.faults.fault_every_ms, self._ev_fault)
        if self.membership_every_ms:
            self._at(self.membership_every_ms, self._ev_membership)

    # ------------------------------------------------------------------ scheduling
    @property
    def now(self) -> int:
        return int(self.loop.time() * 1000)

    def _at(self, ms: int, fn: Callable) -> None:
        """Runs ``fn`` at virtual ``ms`` as the world (no process owns it)."""
        self.loop.call_at(ms / 1000, fn, context=_WORLD)

    def _log(self, msg: str) -> None:
        if self.trace:
            self.trace(f"{self.now:>7} {msg}")

    def _alive(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.alive and n.core is not None]

    def _leaders(self) -> list[SimNode]:
        return [n for n in self._alive() if n.core.role is Role.LEADER]

    def _apply_cuts(self) -> None:
        """The blocked links between node ids, as cuts between their current processes."""
        self.net.cuts = {(self.nodes[a].owner, self.nodes[b].owner) for a, b in self.blocked}
        self.net._reset_crossing()

    # ------------------------------------------------------------------ events
    def _ev_client(self) -> None:
        leaders = self._leaders()
        if leaders:
            n = self.rng.choice(leaders)
            self.next_key += 1
            rec = f"k{self.next_key % 17}=v{self.next_key}".encode()
            try:
                _last, fut = n.run(n.log.propose, [rec])
                fut.add_done_callback(_retrieve)
                self.proposed += 1
            except NotLeaderError:
                pass
        self._at(self.now + 1 + self.rng.randrange(self.client_every_ms * 2), self._ev_client)

    def _ev_membership(self) -> None:
        """Ask the leader to add a caught-up observer (at its listener) or to remove a voter."""
        if not self.faults_on:
            return  # healed: the liveness phase runs on a stable voter set
        leaders = self._leaders()
        if leaders:
            ld = self.rng.choice(leaders)
            c = ld.core
            outside = [i for i in self.nodes if i not in c.voters]
            if outside and (len(c.voters) <= 2 or self.rng.random() < 0.5):
                nid = self.rng.choice(outside)
                self._log(f"add voter {nid} at leader {ld.id}")
                self._change(ld, add=Voter(nid, "", host_of(nid), self.nodes[nid].port))
            elif len(c.voters) > 1:
                nid = self.rng.choice(c.voters)
                self._log(f"remove voter {nid} at leader {ld.id}")
                self._change(ld, remove=(nid, ""))
        self._at(self.now + 1 + self.rng.randrange(self.membership_every_ms * 2), self._ev_membership)

    def _change(self, ld: SimNode, **change) -> None:
        async def call() -> None:
            r = await ld.log.change_voters(**change)
            if r.error:
                self._log(f"voter change at {ld.id} refused: {r.error_message}")
        ld.spawn(call())

    def _ev_restart(self, nid: int) -> None:
        n = self.nodes[nid]
        if not n.alive:
            self._log(f"restart node {nid}" + (f" on port {n.port}" if n.port != PORT else ""))
            n.start()
            self._apply_cuts()

    def _ev_fault(self) -> None:
        if not self.faults_on:
            return
        f = self.faults
        ids = list(self.nodes)
        kinds = ["crash", "partition", "cut", "heal", "move"]
        kind = self.rng.choices(kinds, [f.crash_weight, f.partition_weight, f.cut_weight, f.heal_weight,
                                        f.move_weight])[0]
        if kind == "move" and not self._may_move():
            kind = "crash"
        if kind in ("crash", "move"):
            alive = [i for i in ids if self.nodes[i].alive]
            if alive:
                nid = self.rng.choice(alive)
                n = self.nodes[nid]
                n.kill()
                if kind == "move":
                    # the node comes back at once on another port; the voter set still has the old
                    # one until the node's UpdateRaftVoter is committed (and fetched by each voter)
                    n.port += 1
                    self._log(f"move node {nid} to port {n.port}")
                    self._at(self.now + 1 + self.rng.randrange(50), lambda nid=nid: self._ev_restart(nid))
                else:
                    self._log(f"crash node {nid}")
                    self._at(self.now + 10 + self.rng.randrange(f.fault_every_ms * 2),
                             lambda nid=nid: self._ev_restart(nid))
        elif kind == "partition":
            side = {i for i in ids if self.rng.random() < 0.5}
            self.blocked |= {(a, b) for a in ids for b in ids if (a in side) != (b in side)}
            self._apply_cuts()
            self._log(f"partition {sorted(side)} | {sorted(set(ids) - side)}")
        elif kind == "cut":
            a, b = self.rng.sample(ids, 2)
            self.blocked.add((a, b))
            self._apply_cuts()
            self._log(f"cut {a} -> {b}")
        else:
            self.blocked.clear()
            self._apply_cuts()
            self._log("heal network")
        self._at(self.now + 1 + self.rng.randrange(f.fault_every_ms * 2), self._ev_fault)

    def _may_move(self) -> bool:
        """One voter at a time moves: only when a leader has committed every voter's current
        listener. (Voters reach each other only through the voter set, as in Kafka: a majority
        that moved before any of them was recorded could never elect a leader again.)"""
        ld = self.stable_leader()
        if ld is None or ld.core.voter_change_pending():
            return False
        return all(self.nodes[v].port == vi.port for v, vi in ld.core.voter_info.items())

    # ------------------------------------------------------------------ invariants
    def _fail(self, msg: str) -> None:
        if self.failure is None:
            self.failure = InvariantViolation(
                f"seed {self.seed} at t={self.now}ms: {msg}\nreplay: python -m sim.run --seeds 1 --start {self.seed} "
                f"--verbose" + (" --dynamic" if self.dynamic else ""))
        raise self.failure

    def _committed(self, nid: int, offset: int, epoch: int, record: bytes) -> None:
        cur = (epoch, record)
        prev = self.committed.get(offset)
        if prev is None:
            self.committed[offset] = cur
            self._check_durable_majority(offset, f"first committed by node {nid}")
        elif prev != cur:
            self._fail(f"node {nid} committed {cur} at offset {offset}, but {prev} was committed there")

    def _check_durable_majority(self, o: int, why: str) -> None:
        if self.dynamic:
            # the voter set changes between the commit and its notification: check() verifies each
            # leader's high watermark against its voter set of the moment instead
            return
        e = self.committed[o]
        holders = [v for v in self.voters if self.nodes[v].store.has(o, e)]
        if len(holders) < quorum.majority(len(self.voters)):
            self._fail(f"committed offset {o} {e} is durable only on {holders} ({why})")

    def check(self) -> None:
        """After every step of the loop: the invariants of every node whose code ran."""
        ran = self.loop.ran
        if self.failure is not None:
            raise self.failure
        for owner in list(ran):
            if owner is None:
                continue
            n = self.nodes[owner[0]]
            if not n.alive or n.owner != owner or n.core is None:
                continue
            c = n.core
            if c.epoch < n.max_epoch:
                self._fail(f"node {n.id} epoch went back from {n.max_epoch} to {c.epoch}")
            n.max_epoch = c.epoch
            if c.role is Role.LEADER:
                other = self.leaders.setdefault(c.epoch, n.id)
                if other != n.id:
                    self._fail(f"two leaders in epoch {c.epoch}: {other} and {n.id}")
                if not c.is_voter and not (self.dynamic and c.voter_change_pending()):
                    self._fail(f"observer {n.id} became leader")
            if n.last_hw < 0:
                n.last_hw = c.hw
            if c.hw < n.last_hw:
                self._fail(f"node {n.id} high watermark went back from {n.last_hw} to {c.hw}")
            if c.hw > n.last_hw and (not self.dynamic or c.role is Role.LEADER):
                # The high watermark may only pass entries a majority of voters has synced (a dynamic
                # quorum: of the leader's voter set; followers learn their high watermark from it).
                voters = c.voters if self.dynamic else self.voters
                need = quorum.majority(len(voters))
                for o in range(max(n.last_hw, c.log_start), min(c.hw, c.log_end)):
                    e = c.entry_at(o)
                    key = (e.epoch, e.data)
                    if sum(1 for v in voters if self.nodes[v].store.has(o, key)) < need:
                        self._fail(f"node {n.id} moved its high watermark to {c.hw} but offset {o} is not "
                                   f"durable on a majority")
            n.last_hw = c.hw
            failed = n.log.failure()
            if failed is not None:
                self._fail(f"node {n.id}'s metadata log died: {failed!r}")
        ran.clear()

    # ------------------------------------------------------------------ running
    def run_until(self, t_ms: int, stop: Callable[[], bool] | None = None) -> bool:
        return self.loop.run_until(t_ms / 1000, stop)

    def heal(self) -> None:
        self.faults_on = False
        self.net.loss = 0.0
        self.blocked.clear()
        self._apply_cuts()
        for n in self.nodes.values():
            if not n.alive:
                self._ev_restart(n.id)
        if self.dynamic:
            self.run_until(self.now + 1)  # (every node has opened its store: its voter set is known)
            self._roll_back_unrecorded_moves()

    def _roll_back_unrecorded_moves(self) -> None:
        """A voter that moved and whose new listener no live node has in its voter set yet (its
        UpdateRaftVoter never got through the faults) goes back to the listener recorded by the
        node with the longest log (the one that can win an election). Voters reach each other only
        through their voter sets, as in Kafka: if that node needs the moved one's vote, no election
        could succeed otherwise (an operator's fix too: restart it where the quorum expects it)."""
        alive = self._alive()
        if not alive:
            return
        best = max(alive, key=lambda n: (n.core.last_epoch(), n.core.log_end))
        back = []
        for n in self.nodes.values():
            v = best.core.voter_info.get(n.id)
            known = {a.core.voter_info[n.id].port for a in alive if n.id in a.core.voter_info}
            if v is not None and n.port not in known and n.port != v.port:
                back.append((n, v.port))
        for n, port in back:
            self._log(f"move node {n.id} back to port {port} (no voter knows port {n.port})")
            n.kill()
            n.port = port
            n.start()
        self._apply_cuts()

    def stable_leader(self) -> SimNode | None:
        """A leader that has committed in its epoch."""
        for n in self._leaders():
            c = n.core
            if c.hw > c.epoch_start >= 0:
                return n
        return None

    def close(self) -> None:
        for n in self.nodes.values():
            if n.alive:
                n.kill()
        self.loop.finish()

    def check_final(self, caught_up_to: int) -> None:
        """Every live node applied what the leader had committed, and its state machine is the
        replay of the committed records below where it applied to."""
        for n in self._alive():
            a = n.log._delivered_end
            if a < caught_up_to:
                self._fail(f"node {n.id} applied only up to {a} {(self.now - self.progress_at) / 1000:.1f} s after "
                           f"the leader committed {caught_up_to}")
            expect: dict[bytes, bytes] = {}
            for o in sorted(o for o in self.committed if o < a):
                k, _, v = self.committed[o][1].partition(b"=")
                expect[k] = v
            if n.kv.data != expect:
                self._fail(f"node {n.id} state machine differs from the committed log at offset {a}")


_WORLD = contextvars.copy_context()  # (NODE unset: the world's own callbacks)


@dataclasses.dataclass
class SeedResult:
    seed: int
    n_voters: int
    sim_ms: int
    steps: int
    committed: int
    recovery_ms: int


def run_seed(seed: int, safety_ms: int = 8000, verbose: bool = False, dynamic: bool = False) -> SeedResult:
    """One swarm run: random cluster size and fault mix from the seed, a faulty phase with
    invariants checked after every step, then heal and require progress."""
    r = random.Random(seed * 7919 + 1)
    n_voters = r.choice((3, 3, 5))
    # Kafka's defaults, or everything scaled down (more elections per simulated second).
    scale = r.choice((1, 1, 2, 5))
    timeouts = Timeouts(election_ms=1000 // scale, fetch_ms=2000 // scale, election_backoff_max_ms=1000 // scale,
                        request_ms=2000 // scale, fetch_max_wait_ms=500 // scale)
    faults = FaultConfig(
        max_disk_ms=r.choice((2, 5, 30)),
        drop=r.choice((0.0, 0.01, 0.05, 0.15)),
        max_delay_ms=r.choice((5, 20, 60)),
        fault_every_ms=r.choice((100, 300, 800, 2000)),
        crash_weight=r.choice((0.0, 0.5, 1.0, 2.0)),
        partition_weight=r.choice((0.0, 1.0, 2.0)),
        cut_weight=r.choice((0.0, 1.0)),
    )
    n_observers = r.choice((0, 1, 2))
    snapshot_every = r.choice((20, 60, 10_000))
    membership = 0
    if dynamic:  # (drawn last: the static seeds stay as they were)
        n_observers = max(n_observers, 1)
        membership = r.choice((100, 300, 1000))
        faults.move_weight = r.choice((0.5, 1.0, 2.0))
    sim = QuorumSim(seed, n_voters=n_voters, n_observers=n_observers, faults=faults, timeouts=timeouts,
                    snapshot_every=snapshot_every, trace=print if verbose else None, dynamic=dynamic,
                    membership_every_ms=membership)
    try:
        sim.run_until(safety_ms)
        sim.heal()
        healed_at = sim.now
        # Liveness: a leader commits a new entry (proposed after healing) within the bound.
        target: dict = {"offset": None, "epoch": None}

        def progressed() -> bool:
            ld = sim.stable_leader()
            if ld is None:
                return False
            if target["offset"] is None or target["epoch"] != ld.core.epoch:
                try:
                    target["offset"], fut = ld.run(ld.log.propose, [b"liveness=1"])
                except NotLeaderError:
                    return False
                fut.add_done_callback(_retrieve)
                target["epoch"] = ld.core.epoch
                return False
            return ld.core.hw > target["offset"]

        if not sim.run_until(healed_at + LIVENESS_BOUND_MS, progressed):
            sim._fail(f"no leader committed a new entry within {LIVENESS_BOUND_MS} ms after healing")
        recovery = sim.now - healed_at
        # Let every node catch up, then each live node's state machine must equal the committed log.
        # A leader cut off from the new majority only learns of it when its check-quorum timer (1.5 x the
        # fetch timeout after its last majority contact, which may come after the heal) makes it resign;
        # a removed voter gets no BeginQuorumEpoch from the new leader, so this is its only way back (as
        # in Kafka): the window is that long on top of the 3 s to catch up.
        caught_up_to = sim.stable_leader().core.hw
        sim.progress_at = sim.now
        sim.run_until(sim.now + CATCH_UP_MS + timeouts.fetch_ms * 3 // 2)
        sim.check_final(caught_up_to)
        return SeedResult(seed, n_voters, sim.now, sim.loop.steps, len(sim.committed), recovery)
    finally:
        sim.close()
