"""Deterministic simulation of a KRaft quorum: voters and observers in one process, in
virtual time, over a simulated network and simulated disks, all driven by one seed.

One event heap orders everything (message deliveries, timers, disk syncs, client
proposals, faults). A node persists a :class:`raft.core.Ready` through its simulated disk;
the write becomes durable only when the (randomly delayed) sync completes, and only then
are the Ready's messages sent -- a crash before that loses the writes and the messages,
which is exactly "a crash loses unsynced writes".

Safety invariants are checked after every event (see ``Sim.check``); ``run_seed`` then
heals every fault and requires a leader that commits a new entry within
``LIVENESS_BOUND_MS`` of virtual time.
"""

from __future__ import annotations

import dataclasses
import heapq
import random
from collections.abc import Callable

from raft import quorum
from raft.api import NotLeaderError, Snapshot
from raft.core import (
    NEVER,
    VOTERS_PREFIX,
    Append,
    Committed,
    LeaderChange,
    LoadSnapshot,
    QuorumState,
    RaftCore,
    Ready,
    Role,
    SaveSnapshot,
    SaveState,
    Timeouts,
    Truncate,
    Voter,
    VoterChangeError,
)
from raft.messages import Entry, Message

# After every fault has healed, a leader must be elected and commit a new entry within
# this much virtual time. With the default timeouts the worst case is a fetch timeout
# (2 s) + a randomized election timeout (<= 2 s) + a few lost pre-vote/vote rounds with
# backoff (<= 1 s each); 15 s leaves room for unlucky split votes.
LIVENESS_BOUND_MS = 15_000
CATCH_UP_MS = 3000  # after that progress, every live node has applied what the leader had committed


class InvariantViolation(AssertionError):
    pass


class KV:
    """The test state machine: records are ``key=value``; a snapshot is the sorted items."""

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}
        self.applied_end = 0  # every record below this offset is applied

    def load(self, snap: Snapshot) -> None:
        self.data = dict(r.split(b"=", 1) for r in snap.records)
        self.applied_end = snap.end_offset

    def apply(self, base: int, entries) -> None:
        for i, e in enumerate(entries):
            if base + i < self.applied_end:
                continue
            assert base + i == self.applied_end, f"gap in commits: {base + i} != {self.applied_end}"
            if not e.control:
                k, _, v = e.data.partition(b"=")
                self.data[k] = v
            self.applied_end = base + i + 1

    def snapshot_records(self) -> list[bytes]:
        return [k + b"=" + v for k, v in sorted(self.data.items())]


class SimDisk:
    """What a node has durably synced: quorum state, snapshot, log entries."""

    def __init__(self) -> None:
        self.state = QuorumState()
        self.snapshot: Snapshot | None = None
        self.log_start = 0
        self.entries: list[Entry] = []

    def apply(self, ops) -> list[tuple[int, int]]:
        """Apply ops atomically; returns the (start, end) offset ranges that were removed."""
        removed = []
        for op in ops:
            if isinstance(op, Truncate):
                end = self.log_start + len(self.entries)
                if op.offset < end:
                    removed.append((max(op.offset, self.log_start), end))
                    del self.entries[max(0, op.offset - self.log_start):]
            elif isinstance(op, Append):
                assert op.base_offset == self.log_start + len(self.entries), "append leaves a gap on disk"
                self.entries.extend(op.entries)
            elif isinstance(op, SaveState):
                self.state = op.state
            elif isinstance(op, SaveSnapshot):
                s = op.snapshot
                drop = s.end_offset - self.log_start
                if drop > 0:
                    del self.entries[:drop]
                else:
                    self.entries = []
                self.log_start = s.end_offset
                self.snapshot = s
        return removed

    def has(self, offset: int, entry: tuple[int, bytes]) -> bool:
        if offset < self.log_start:
            return True  # covered by the snapshot
        i = offset - self.log_start
        return i < len(self.entries) and (self.entries[i].epoch, self.entries[i].data) == entry


class SimNode:
    def __init__(self, sim: Sim, node_id: int) -> None:
        self.sim = sim
        self.id = node_id
        self.disk = SimDisk()
        self.alive = False
        self.incarnation = 0
        self.max_epoch = 0
        self.core: RaftCore | None = None
        self.kv = sim.new_state_machine(node_id)
        self.inflight = False
        self.timer_at = NEVER
        self.last_hw = 0

    def start(self, now: int) -> None:
        self.alive = True
        self.incarnation += 1
        self.inflight = False
        self.timer_at = NEVER
        self.kv = self.sim.new_state_machine(self.id)
        d = self.disk
        initial = [Voter(v) for v in self.sim.voters] if self.sim.dynamic else None
        self.core = RaftCore(self.id, self.sim.voters, random.Random(self.sim.rng.random()), self.sim.timeouts,
                             state=d.state, snapshot=d.snapshot, entries=list(d.entries), now_ms=now,
                             initial_voters=initial)
        self.last_hw = self.core.hw

    def crash(self) -> None:
        # What was never synced was never seen by anyone: the durable epoch is the floor now.
        self.max_epoch = self.disk.state.epoch
        self.alive = False
        self.incarnation += 1
        self.core = None
        self.inflight = False


@dataclasses.dataclass
class FaultConfig:
    drop: float = 0.0
    duplicate: float = 0.0
    max_delay_ms: int = 20
    fault_every_ms: int = 800
    crash_weight: float = 1.0
    partition_weight: float = 1.0
    cut_weight: float = 1.0
    heal_weight: float = 1.5
    max_disk_ms: int = 5  # sync latency is uniform in [0, max_disk_ms]


class Sim:
    def __init__(self, seed: int, n_voters: int = 3, n_observers: int = 1, timeouts: Timeouts | None = None,
                 faults: FaultConfig | None = None, snapshot_every: int = 60, client_every_ms: int = 40,
                 trace: Callable[[str], None] | None = None, dynamic: bool = False,
                 membership_every_ms: int = 0) -> None:
        self.seed = seed
        # KIP-853: a quorum whose voters live in the log; every membership_every_ms the leader is
        # asked to add an observer or remove a voter. The checks then count durability over the
        # voter set in force (the committing leader's, or the latest committed one).
        self.dynamic = dynamic
        self.membership_every_ms = membership_every_ms
        self.rng = random.Random(seed)
        self.voters = list(range(1, n_voters + 1))
        self.observers = list(range(100, 100 + n_observers))
        self.timeouts = timeouts or Timeouts()
        self.faults = faults or FaultConfig()
        self.snapshot_every = snapshot_every
        self.client_every_ms = client_every_ms
        self.trace = trace
        self.now = 0
        self.events: list = []
        self.seq = 0
        self.nodes = {i: SimNode(self, i) for i in self.voters + self.observers}
        self.blocked: set[tuple[int, int]] = set()  # directed links that drop everything
        self.leaders: dict[int, int] = {}  # epoch -> leader id
        self.committed: dict[int, tuple[int, bytes]] = {}  # offset -> (epoch, data)
        self.max_committed_end = 0
        self.next_key = 0
        self.faults_on = True
        self.proposed = 0
        self.events_run = 0
        for n in self.nodes.values():
            n.start(0)
            self._after(n)
        self._push(self.client_every_ms, "client", None)
        self._push(self.faults.fault_every_ms, "fault", None)
        if self.membership_every_ms:
            self._push(self.membership_every_ms, "membership", None)

    def _ev_membership(self, _p) -> None:
        """Ask the leader to add an observer (one that is caught up) or to remove a voter."""
        if not self.faults_on:
            return  # healed: the liveness phase runs on a stable voter set
        leaders = [n for n in self.nodes.values() if n.alive and n.core.role is Role.LEADER]
        if leaders:
            ld = self.rng.choice(leaders)
            c = ld.core
            outside = [i for i in self.nodes if i not in c.voters]
            try:
                if outside and (len(c.voters) <= 2 or self.rng.random() < 0.5):
                    nid = self.rng.choice(outside)
                    c.add_voter(Voter(nid), self.now)
                    self._log(f"add voter {nid} at leader {ld.id}")
                elif len(c.voters) > 1:
                    nid = self.rng.choice(c.voters)
                    c.remove_voter(nid, "", self.now)
                    self._log(f"remove voter {nid} at leader {ld.id}")
            except (VoterChangeError, NotLeaderError) as e:
                self._log(f"voter change refused: {e}")
            self._after(ld)
        self._push(self.now + 1 + self.rng.randrange(self.membership_every_ms * 2), "membership", None)

    def new_state_machine(self, node_id: int):
        """What each node replays committed entries into (``load``/``apply``/``snapshot_records``)."""
        return KV()

    # ------------------------------------------------------------------ scheduling
    def _push(self, at: int, kind: str, payload) -> None:
        self.seq += 1
        heapq.heappush(self.events, (at, self.seq, kind, payload))

    def _log(self, msg: str) -> None:
        if self.trace:
            self.trace(f"{self.now:>7} {msg}")

    def _after(self, n: SimNode) -> None:
        """After a node handled an input: start persisting its Ready, arm its timer."""
        if not n.alive:
            return
        c = n.core
        if not n.inflight and c.has_ready():
            r = c.take_ready()
            n.inflight = True
            delay = self.rng.randrange(self.faults.max_disk_ms + 1) if self.rng.random() > 0.02 else 100  # slow disk
            self._push(self.now + delay, "synced", (n.id, n.incarnation, r))
        d = c.next_deadline()
        if d < n.timer_at:
            n.timer_at = d
            self._push(max(d, self.now), "timer", (n.id, n.incarnation))

    def send(self, m: Message) -> None:
        if (m.src, m.dst) in self.blocked:
            return
        dst = self.nodes.get(m.dst)
        if dst is None:
            return
        if not dst.alive:
            if m.is_request and self.rng.random() < 0.7:
                # Connection refused: the sender learns the peer is down.
                src = self.nodes[m.src]
                self._push(self.now + 1 + self.rng.randrange(3), "unreachable", (m.src, src.incarnation, m.dst, m.corr))
            return
        if self.faults_on and self.rng.random() < self.faults.drop:
            return
        copies = 2 if self.faults_on and self.rng.random() < self.faults.duplicate else 1
        for _ in range(copies):
            self._push(self.now + 1 + self.rng.randrange(self.faults.max_delay_ms), "deliver", m)

    # ------------------------------------------------------------------ event handling
    def step_event(self) -> None:
        at, _seq, kind, p = heapq.heappop(self.events)
        self.now = max(self.now, at)
        self.events_run += 1
        getattr(self, "_ev_" + kind)(p)
        self.check()

    def _ev_deliver(self, m: Message) -> None:
        n = self.nodes[m.dst]
        if not n.alive or (m.src, m.dst) in self.blocked:
            return
        n.core.step(m, self.now)
        self._after(n)

    def _ev_unreachable(self, p) -> None:
        nid, inc, peer, corr = p
        n = self.nodes[nid]
        if n.alive and n.incarnation == inc:
            n.core.peer_unreachable(peer, corr, self.now)
            self._after(n)

    def _ev_timer(self, p) -> None:
        nid, inc = p
        n = self.nodes[nid]
        if not n.alive or n.incarnation != inc:
            return
        n.timer_at = NEVER
        n.core.poll(self.now)
        self._after(n)

    def _ev_synced(self, p) -> None:
        nid, inc, r = p
        n = self.nodes[nid]
        if not n.alive or n.incarnation != inc:
            return  # crashed before the sync completed: those writes never happened
        self._persist(n, r)
        n.inflight = False
        for m in r.messages:
            self.send(m)
        self._notify(n, r)
        n.core.advance(r, self.now)
        if n.kv.applied_end - n.core.log_start >= self.snapshot_every and n.kv.applied_end > n.core.log_start:
            n.core.take_snapshot(n.kv.applied_end, n.kv.snapshot_records())
        self._after(n)

    def _persist(self, n: SimNode, r: Ready) -> None:
        for op in r.ops:
            if isinstance(op, SaveState) and op.state.epoch < n.disk.state.epoch:
                self.fail(f"node {n.id} persisted epoch {op.state.epoch} below its durable {n.disk.state.epoch}")
        removed = n.disk.apply(r.ops)
        for start, end in removed:
            for o in range(start, end):
                if o in self.committed:
                    self._check_durable_majority(o, f"node {n.id} truncated [{start}, {end})")

    def _check_durable_majority(self, o: int, why: str) -> None:
        if self.dynamic:
            # the voter set changes between the commit and its notification: check() verifies each
            # leader's high watermark against its voter set of the moment instead
            return
        e = self.committed[o]
        voters = self.voters
        holders = [v for v in voters if self.nodes[v].disk.has(o, e)]
        if len(holders) < quorum.majority(len(voters)):
            self.fail(f"committed offset {o} {e} is durable only on {holders} ({why})")

    def _notify(self, n: SimNode, r: Ready) -> None:
        for note in r.notifications:
            if isinstance(note, LoadSnapshot):
                n.kv.load(note.snapshot)
            elif isinstance(note, Committed):
                for i, e in enumerate(note.entries):
                    o = note.base_offset + i
                    cur = (e.epoch, e.data)
                    prev = self.committed.get(o)
                    if prev is None:
                        self.committed[o] = cur
                        self._check_durable_majority(o, f"first committed by node {n.id}")
                    elif prev != cur:
                        self.fail(f"node {n.id} committed {cur} at offset {o}, but {prev} was committed there")
                    self.max_committed_end = max(self.max_committed_end, o + 1)
                n.kv.apply(note.base_offset, note.entries)
            elif isinstance(note, LeaderChange):
                self._log(f"node {n.id} sees leader {note.leader.leader_id} epoch {note.leader.epoch}")

    def _ev_client(self, _p) -> None:
        leaders = [n for n in self.nodes.values() if n.alive and n.core.role is Role.LEADER]
        if leaders:
            n = self.rng.choice(leaders)
            self.next_key += 1
            rec = f"k{self.next_key % 17}=v{self.next_key}".encode()
            n.core.propose([rec], self.now)
            self.proposed += 1
            self._after(n)
        self._push(self.now + 1 + self.rng.randrange(self.client_every_ms * 2), "client", None)

    def _ev_restart(self, nid: int) -> None:
        n = self.nodes[nid]
        if not n.alive:
            self._log(f"restart node {nid}")
            n.start(self.now)
            self._after(n)

    def _ev_fault(self, _p) -> None:
        if not self.faults_on:
            return
        f = self.faults
        ids = list(self.nodes)
        kinds = ["crash", "partition", "cut", "heal"]
        kind = self.rng.choices(kinds, [f.crash_weight, f.partition_weight, f.cut_weight, f.heal_weight])[0]
        if kind == "crash":
            alive = [i for i in ids if self.nodes[i].alive]
            if alive:
                nid = self.rng.choice(alive)
                self._log(f"crash node {nid}")
                self.nodes[nid].crash()
                self._push(self.now + 10 + self.rng.randrange(self.faults.fault_every_ms * 2), "restart", nid)
        elif kind == "partition":
            # Any split: minority/majority, possibly isolating the leader.
            side = {i for i in ids if self.rng.random() < 0.5}
            self.blocked |= {(a, b) for a in ids for b in ids if (a in side) != (b in side)}
            self._log(f"partition {sorted(side)} | {sorted(set(ids) - side)}")
        elif kind == "cut":
            a, b = self.rng.sample(ids, 2)
            self.blocked.add((a, b))
            self._log(f"cut {a} -> {b}")
        else:
            self.blocked.clear()
            self._log("heal network")
        self._push(self.now + 1 + self.rng.randrange(f.fault_every_ms * 2), "fault", None)

    # ------------------------------------------------------------------ invariants
    def fail(self, msg: str) -> None:
        raise InvariantViolation(f"seed {self.seed} at t={self.now}ms: {msg}\n"
                                 f"replay: python -m sim.run --seeds 1 --start {self.seed} --verbose"
                                 + (" --dynamic" if self.dynamic else ""))

    def check(self) -> None:
        for n in self.nodes.values():
            if not n.alive:
                continue
            c = n.core
            if c.epoch < n.max_epoch:
                self.fail(f"node {n.id} epoch went back from {n.max_epoch} to {c.epoch}")
            n.max_epoch = c.epoch
            if c.role is Role.LEADER:
                other = self.leaders.setdefault(c.epoch, n.id)
                if other != n.id:
                    self.fail(f"two leaders in epoch {c.epoch}: {other} and {n.id}")
                if not c.is_voter and not (self.dynamic and c.voter_change_pending()):
                    self.fail(f"observer {n.id} became leader")
            if c.hw < n.last_hw:
                self.fail(f"node {n.id} high watermark went back from {n.last_hw} to {c.hw}")
            if c.hw > n.last_hw and (not self.dynamic or c.role is Role.LEADER):
                # The high watermark may only pass entries a majority of voters has synced (a dynamic
                # quorum: of the leader's voter set; followers learn their high watermark from it).
                voters = c.voters if self.dynamic else self.voters
                need = quorum.majority(len(voters))
                for o in range(max(n.last_hw, c.log_start), min(c.hw, c.log_end)):
                    e = c.entry_at(o)
                    key = (e.epoch, e.data)
                    if sum(1 for v in voters if self.nodes[v].disk.has(o, key)) < need:
                        self.fail(f"node {n.id} moved its high watermark to {c.hw} but offset {o} is not "
                                  f"durable on a majority")
            n.last_hw = c.hw

    # ------------------------------------------------------------------ running
    def run_until(self, t_end: int, stop: Callable[[], bool] | None = None) -> bool:
        while self.events and self.events[0][0] <= t_end:
            self.step_event()
            if stop is not None and stop():
                return True
        self.now = max(self.now, t_end)
        return False

    def heal(self) -> None:
        self.faults_on = False
        self.blocked.clear()
        for n in self.nodes.values():
            if not n.alive:
                n.start(self.now)
                self._after(n)

    def stable_leader(self) -> SimNode | None:
        """A leader that has committed in its epoch and that every live voter follows."""
        leaders = [n for n in self.nodes.values() if n.alive and n.core.role is Role.LEADER]
        for n in leaders:
            c = n.core
            if c.hw > c.epoch_start >= 0:
                return n
        return None


@dataclasses.dataclass
class SeedResult:
    seed: int
    n_voters: int
    sim_ms: int
    events: int
    committed: int
    recovery_ms: int


def run_seed(seed: int, safety_ms: int = 8000, verbose: bool = False, dynamic: bool = False) -> SeedResult:
    """One swarm run: random cluster size and fault mix from the seed, a faulty phase with
    invariants checked after every event, then heal and require progress."""
    r = random.Random(seed * 7919 + 1)
    n_voters = r.choice((3, 3, 5))
    # Kafka's defaults, or everything scaled down (more elections per simulated second).
    scale = r.choice((1, 1, 2, 5))
    timeouts = Timeouts(election_ms=1000 // scale, fetch_ms=2000 // scale, election_backoff_max_ms=1000 // scale,
                        request_ms=2000 // scale, fetch_max_wait_ms=500 // scale)
    faults = FaultConfig(
        max_disk_ms=r.choice((2, 5, 30)),
        drop=r.choice((0.0, 0.01, 0.05, 0.15)),
        duplicate=r.choice((0.0, 0.02, 0.1)),
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
    sim = Sim(seed, n_voters=n_voters, n_observers=n_observers, faults=faults, timeouts=timeouts,
              snapshot_every=snapshot_every, trace=print if verbose else None, dynamic=dynamic,
              membership_every_ms=membership)
    sim.run_until(safety_ms)
    sim.heal()
    healed_at = sim.now
    # Liveness: a leader commits a new entry (proposed after healing) within the bound.
    target = {"offset": None}

    def progressed() -> bool:
        ld = sim.stable_leader()
        if ld is None:
            return False
        if target["offset"] is None or target["epoch"] != ld.core.epoch:
            if ld.core.role is Role.LEADER:
                target["epoch"], target["offset"] = ld.core.propose([b"liveness=1"], sim.now)
                sim._after(ld)
            return False
        return ld.core.hw > target["offset"]

    if not sim.run_until(healed_at + LIVENESS_BOUND_MS, progressed):
        sim.fail(f"no leader committed a new entry within {LIVENESS_BOUND_MS} ms after healing")
    recovery = sim.now - healed_at
    # Let every node catch up, then each live node's state machine must equal the committed log.
    # A leader cut off from the new majority only learns of it when its check-quorum timer (1.5 x the
    # fetch timeout after its last majority contact, which may come after the heal) makes it resign;
    # a removed voter gets no BeginQuorumEpoch from the new leader, so this is its only way back (as
    # in Kafka): the window is that long on top of the 3 s to catch up (seed 337 of --dynamic).
    caught_up_to = sim.stable_leader().core.hw
    sim.progress_at = sim.now
    sim.run_until(sim.now + CATCH_UP_MS + timeouts.fetch_ms * 3 // 2)
    sim.check_final(caught_up_to)
    return SeedResult(seed, n_voters, sim.now, sim.events_run, len(sim.committed), recovery)


def _check_final(self: Sim, caught_up_to: int) -> None:
    end = self.max_committed_end
    for o in range(end):
        if o not in self.committed:
            self.fail(f"committed offset {o} was never seen committed by anyone (gap below {end})")
    expect: dict[bytes, bytes] = {}
    replay_at: dict[int, dict[bytes, bytes]] = {}
    ends = {n.kv.applied_end for n in self.nodes.values() if n.alive}
    for o in range(end + 1):
        if o in ends:
            replay_at[o] = dict(expect)
        if o == end:
            break
        _ep, data = self.committed[o]
        if not data.startswith((b"LeaderChange", VOTERS_PREFIX)):
            k, _, v = data.partition(b"=")
            expect[k] = v
    for n in self.nodes.values():
        if not n.alive:
            continue
        a = n.kv.applied_end
        if a > end:
            self.fail(f"node {n.id} applied up to {a} beyond the committed end {end}")
        if n.kv.data != replay_at[a]:
            self.fail(f"node {n.id} state machine differs from the committed log at offset {a}")
        if a < caught_up_to:
            self.fail(f"node {n.id} applied only up to {a} {(self.now - self.progress_at) / 1000:.1f} s after the "
                      f"leader committed {caught_up_to}")


Sim.check_final = _check_final
