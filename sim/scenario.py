"""One seed of a whole-cluster world: start 3 controllers + 3 brokers (the real nodes), create
a topic, run idempotent acks=all producers and consumers through a seeded fault schedule,
check the invariants after every event, heal, check liveness, then check the whole history.

Faults (drawn from the seed, ``Schedule``): kill -9 and restart of any node (at most one
controller down at a time, so that the quorum can always recover), partitions isolating a
node or cutting a broker off the controllers only (fenced, it still serves the other brokers:
a zombie leader), pauses (SIGSTOP/SIGCONT), one-way cuts, message loss, gRPC calls executed twice (a retried RPC whose
first reply was lost: sim/net.py), wall-clock steps of +-60 s on running nodes (controllers
included: no broker may be fenced for it), EIO from a node's Raft store (the node's
metadata log stops; the world restarts the node), EIO or ENOSPC on a broker's next partition
log write (sim/disk.py; a short write first), and power losses (unsynced log data lost, the
tail torn, sometimes garbled).

Invariants after every event (``Checker.step``): recovery ends every log of a restarted broker
exactly at its last complete valid batch (sim/world.py); at most one Raft leader per epoch; the
committed metadata log is the same on every node at every offset; no partition's high
watermark goes back on a leader within its leader epoch. At the end: every acknowledged
acks=all write is in the log at the offset it was acknowledged with, no value is written
twice (idempotence), no offset is missing below the high watermark, every record a
consumer was given is still there, unchanged, and a committed offset never goes back (across
group coordinator failovers); after healing every node runs, every broker
is registered and unfenced, and all metadata images converge, and a new write is
acknowledged, within ``LIVENESS_S``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import os
import random
import time

from broker.log.batch import parse_batches
from raft.core import Role
from raft.store import CorruptMetadataLogError
from sim.client import (
    Admin,
    Cluster,
    Committer,
    Consumer,
    GroupMember,
    Producer,
    TxnProducer,
    create_topic,
    read_committed,
    read_partition,
)
from sim.members import GroupWorkload
from sim.raftstore import SimRaftStore
from sim.world import InvariantViolation, Settings, World

TOPIC = "sim"
TXN_TOPIC = "sim-txn"  # transactional producers write here (its control batches take offsets)
PARTITIONS = 3
LIVENESS_S = 30.0


@dataclasses.dataclass(frozen=True)
class Fault:
    at: float  # virtual seconds after the workload starts
    kind: str  # kill | kill_active | partition | cut | loss | clock | eio | zombie | power | pause | disk | dup | corrupt
    node: int
    duration: float = 0.0
    arg: int = 0

    def __str__(self) -> str:
        return f"{self.at:.2f}s {self.kind} {self.node} for {self.duration:.2f}s arg={self.arg}"


def schedule(seed: int, world_nodes: list[int], controllers: list[int], safety_s: float,
             n_faults: int | None = None) -> list[Fault]:
    rng = random.Random(f"faults-{seed}")
    n = rng.randint(1, 6) if n_faults is None else n_faults
    out = []
    for _ in range(n):
        kind = rng.choices(["kill", "kill_active", "partition", "cut", "loss", "clock", "eio", "zombie", "power",
                            "pause", "disk"], [4, 2, 2, 1, 1, 2, 1, 2, 2, 2, 1])[0]
        node = rng.choice(world_nodes)
        at = rng.random() * safety_s * 0.8
        dur = 0.5 + rng.random() * 6
        arg = 0
        if kind == "clock":
            arg = rng.choice([-60_000, 60_000])
        elif kind == "loss":
            arg = rng.randint(1, 20)  # percent
        elif kind == "disk":
            arg = rng.choice([errno.EIO, errno.ENOSPC])
        out.append(Fault(at, kind, node, dur, arg))
    # faults added later draw from a stream of their own: the schedules above stay as they were
    more = random.Random(f"faults-more-{seed}")
    if n_faults is None and more.random() < 0.3:  # gRPC calls executed twice (retried RPCs)
        out.append(Fault(more.random() * safety_s * 0.8, "dup", more.choice(world_nodes), 0.5 + more.random() * 6,
                         more.randint(5, 50)))
    brokers = [n for n in world_nodes if n not in controllers]
    if n_faults is None and brokers and more.random() < 0.15:  # a bad block under a broker's metadata log
        out.append(Fault(more.random() * safety_s * 0.8, "corrupt", more.choice(brokers), 0.5 + more.random() * 3,
                         more.randrange(1 << 30)))
    return sorted(out, key=lambda f: f.at)


class Checker:
    def __init__(self, world: World):
        self.w = world
        self.leaders: dict[int, int] = {}  # raft epoch -> leader id
        self.committed: dict[int, tuple[int, bytes]] = {}  # offset -> (epoch, data) of the metadata log
        self.checked_hw: dict[tuple, int] = {}
        self.part_hw: dict[tuple, tuple] = {}  # (process, partition) -> (leader epoch, HW, ISR) it led with
        self.fenced: set[int] = set()  # brokers seen fenced (in any node's image) after the workload began
        self.leader_epochs: dict[tuple, int] = {}  # (process, topic id, partition) -> leader epoch
        self.n = 0
        self.version = -1
        self.watch: list = []
        self.by_owner: dict = {}  # process -> its entry of watch

    def _watch_list(self) -> list:
        """[nid, process, core, loader, last hw, last image, broker, its led partitions] of every
        running node whose metadata log has started (rebuilt when a process starts, dies or
        finishes starting)."""
        out = []
        for nid, p in self.w.procs.items():
            node = p.node
            if p.alive and node is not None and node.metadata_log.core is not None:
                out.append([nid, p.owner, node.metadata_log.core, node.loader, None, None, node.broker, None])
        return out

    def step(self) -> None:
        """After every batch of callbacks: the nodes whose code ran in it are looked at (only
        their own callbacks change a node's Raft state, image or partitions), and every node
        every 20th."""
        w = self.w
        if w.failure is not None:
            raise w.failure
        self.n += 1
        if self.version != w.version:
            self.version = w.version
            self.watch = self._watch_list()
            self.by_owner = {ent[1]: ent for ent in self.watch}
        ran = w.loop.ran
        if self.n % 20 == 0:
            ran.clear()
            for ent in self.watch:
                self._look(ent, True)
            if len(self.watch) != sum(1 for p in w.procs.values() if p.alive):
                self.version = -1  # a node still starting: look again
            return
        if not ran:
            return
        by_owner = self.by_owner
        for o in ran:
            ent = by_owner.get(o)
            if ent is not None:
                self._look(ent, False)
        ran.clear()

    def _look(self, ent: list, fresh: bool) -> None:
        core = ent[2]
        if core.role is Role.LEADER:
            prev = self.leaders.setdefault(core.epoch, ent[0])
            if prev != ent[0]:
                raise self.w.violation(f"two Raft leaders in epoch {core.epoch}: {prev} and {ent[0]}")
        if core.hw != ent[4]:
            ent[4] = core.hw
            self._committed(ent[0], ent[1], core)
        img = ent[3].image
        if img is not ent[5]:
            ent[5] = img
            self._image(ent[0], ent[1], img)
            fresh = True
        broker = ent[6]
        if broker is not None and broker.replicas is not None:
            led = ent[7]
            if fresh or led is None:  # leadership changes with the image: who leads what, again
                last = self.part_hw
                owner = ent[1]
                led = ent[7] = []
                for tp, part in broker.replicas.partitions.items():
                    st = part.state
                    if st.leader == st.local_broker:
                        prev = last.get((owner, tp))
                        led.append([st, tp, *(prev if prev is not None else (None, None, None))])
            for rec in led:  # [state, partition, leader epoch, HW, ISR] as last checked
                st = rec[0]
                if st.high_watermark != rec[3] or st.isr is not rec[4] or st.leader_epoch != rec[2]:
                    self._led(ent[0], ent[1], rec)

    def _led(self, nid: int, owner, rec: list) -> None:
        """A partition ``nid`` leads whose high watermark, ISR or leader epoch changed since it
        was last looked at (after a step of its own): the high watermark never goes back within
        a leader epoch, and every in-sync replica holds what the high watermark exposes (its log
        reaches it: the HW waits for every member of the ISR, a pending expansion's included,
        KIP-497)."""
        st, tp = rec[0], rec[1]
        if st.leader != st.local_broker:
            return
        hw, epoch, isr = st.high_watermark, st.leader_epoch, st.isr
        if rec[2] == epoch and hw < rec[3]:
            raise self.w.violation(f"high watermark of {tp} went back from {rec[3]} to {hw} on leader {nid} "
                                   f"in epoch {epoch}")
        rec[2], rec[3], rec[4] = epoch, hw, isr
        self.part_hw[(owner, tp)] = (epoch, hw, isr)
        self._isr_holds(nid, tp, hw, isr, epoch)

    def _committed(self, nid: int, key, core) -> None:
        """The metadata log's committed entries of one node agree with every other node's."""
        w = self.w
        hw = min(core.hw, core.log_end)
        lo = max(self.checked_hw.get(key, 0), core.log_start)
        for off in range(lo, hw):
            e = core.entry_at(off)
            mine = (e.epoch, e.data)
            seen = self.committed.setdefault(off, mine)
            if seen != mine:
                at = next((i for i, (a, b) in enumerate(zip(mine[1], seen[1], strict=False)) if a != b),
                          min(len(mine[1]), len(seen[1])))
                lo = max(0, at - 10)
                raise w.violation(f"node {nid} committed {mine[0]}:...{mine[1][lo:at + 10]!r} at metadata offset {off}, "
                                  f"another node {seen[0]}:...{seen[1][lo:at + 10]!r} (byte {at} differs)")
        if hw > lo:
            self.checked_hw[key] = hw

    def _image(self, nid: int, key, img) -> None:
        """A node's metadata image, each time it changes: what the controller managers promise."""
        w = self.w
        if nid in w.controller_ids:
            self.fenced.update(b for b, reg in img.brokers.items() if reg.fenced)
            if w.active_controller() == nid:
                self._controller_isrs(img)
        if len(img.topics_by_name) != len(img.topics_by_id):
            raise w.violation(f"node {nid}: two topics share a name at metadata offset {img.offset}")
        for t in img.topics_by_id.values():
            for pid, reg in t.partitions.items():
                where = f"node {nid}, {t.name}-{pid} at metadata offset {img.offset}"
                if not reg.isr or not set(reg.isr) <= set(reg.replicas):
                    raise w.violation(f"{where}: ISR {reg.isr} is empty or not within replicas {reg.replicas}")
                if reg.leader >= 0:
                    if reg.leader not in reg.isr:
                        raise w.violation(f"{where}: leader {reg.leader} is not in the ISR {reg.isr}")
                    b = img.brokers.get(reg.leader)
                    if b is None or b.fenced:
                        raise w.violation(f"{where}: leader {reg.leader} is fenced or unregistered")
                k = (key, t.topic_id, pid)
                if reg.leader_epoch < self.leader_epochs.get(k, -1):
                    raise w.violation(f"{where}: leader epoch went back to {reg.leader_epoch}")
                self.leader_epochs[k] = reg.leader_epoch

    def _registration(self, tp):
        """The partition as the newest committed metadata has it: the image of the running
        controller that has loaded the most (None: unknown). Not the image of whichever
        controller thinks it is active: a paused or cut-off one may still think so with an old
        image (seed 3123: its ISR still had a replica the others had already removed)."""
        img = None
        for c in self.w.controller_ids:
            n = self.w.node(c)
            if n is not None and (img is None or n.loader.image.offset > img.offset):
                img = n.loader.image
        t = img.topics_by_name.get(tp[0]) if img is not None else None
        return t.partitions.get(tp[1]) if t is not None else None

    def _controller_isrs(self, img) -> None:
        """A new committed image of the active controller: each partition's ISR holds what its
        leader's high watermark exposes (the leader's state as of now)."""
        w = self.w
        for t in img.topics_by_id.values():
            for pid, reg in t.partitions.items():
                node = w.node(reg.leader) if reg.leader >= 0 else None
                if node is None or node.broker is None or node.broker.replicas is None:
                    continue
                part = node.broker.replicas.partitions.get((t.name, pid))
                if part is None:
                    continue
                st = part.state
                if st.leader == st.local_broker and st.leader_epoch == reg.leader_epoch:
                    self._isr_holds(reg.leader, (t.name, pid), st.high_watermark, st.isr, st.leader_epoch)

    def _isr_holds(self, nid: int, tp, hw: int, isr, epoch: int) -> None:
        """Every replica in the ISR holds what leader ``nid``'s high watermark ``hw`` exposes:
        the members of its own ISR, and those of the ISR the controller has committed for it
        (which may already include a replica whose addition the leader has only proposed:
        KIP-497, the HW waits for it)."""
        w = self.w
        if w.durability_excused():
            return  # (an ISR member's unsynced tail may be gone: see World.durability_excused)
        reg = self._registration(tp)
        if reg is not None and reg.leader == nid and reg.leader_epoch == epoch:
            isr = tuple(isr) + tuple(r for r in reg.isr if r not in isr)
        for r in isr:
            if r == nid or r in w.powered:
                continue
            node = w.node(r)
            if node is None or node.broker is None or node.broker.replicas is None:
                continue
            part = node.broker.replicas.partitions.get(tp)
            if part is None or part.log is None:
                continue
            end = part.log.log_end_offset
            if end < hw:
                raise w.violation(f"{tp[0]}-{tp[1]}: the high watermark {hw} of leader {nid} is above the log end {end} "
                                  f"of in-sync replica {r} (ISR {list(isr)})")


@dataclasses.dataclass
class Result:
    seed: int
    sim_s: float
    wall_s: float
    acked: int
    consumed: int
    faults: list[Fault]
    trace: list[str]
    steps: int
    fenced: set[int]
    commits: int = 0  # offset commits acknowledged
    disk_failures: int = 0  # partition log writes failed by the simulated disk
    grpc_dups: int = 0  # gRPC calls executed twice (the "dup" fault)


def _impaired(w: World, nid: int, seconds: float) -> None:
    """``nid`` is cut off, paused or down for ``seconds`` (see ``World.durability_excused``)."""
    w.impaired[nid] = w.impaired.get(nid, 0) + 1
    now = w.loop.time()
    if nid in w.broker_ids and any(b != nid and until > now for b, until in w.power_window.items()):
        w.power_while_impaired = True

    def end():
        w.impaired[nid] -= 1
    w.loop.call_later(seconds, end)


def _apply(w: World, f: Fault, down: set[int]) -> None:
    """Starts fault ``f`` now and schedules its end."""
    loop = w.loop
    if f.kind in ("kill", "power", "pause", "partition", "zombie", "cut", "corrupt"):
        _impaired(w, f.node, f.duration)
    if f.kind == "loss":  # the whole network's: lost heartbeats may fence any broker (seed 20979)
        for n in w.broker_ids:
            _impaired(w, n, f.duration)
    if f.kind == "kill_active":  # the active controller, whichever it is now
        active = w.active_controller()
        if active is None:
            return
        f = dataclasses.replace(f, kind="kill", node=active)
    if f.kind in ("kill", "power", "corrupt"):
        if f.node in w.controller_ids and any(c in down for c in w.controller_ids):
            return  # one controller down at a time: the quorum must be able to recover
        if f.node in down or (f.kind == "corrupt" and f.node in w.controller_ids):
            return  # (a voter's metadata log is not thrown away: only brokers' get the bad block)
        down.add(f.node)
        if f.kind == "power":
            w.power_loss(f.node)
            if f.node in w.broker_ids:
                w.power_window[f.node] = loop.time() + f.duration + 10.0
        else:
            w.kill(f.node)
        store = w.stores[f.node]
        if f.kind == "corrupt" and store.entries:  # found when the restart reads it back
            i = f.arg % len(store.entries)
            store.corrupt(i)
            w.corrupted.add(f.node)
            w.note(f"a bad block under entry {store.log_start + i} of the metadata log of {f.node}")

        def restart(n=f.node):
            down.discard(n)
            w.start(n)
        loop.call_later(f.duration, restart)
    elif f.kind == "partition":
        others = [n for n in w.controller_ids + w.broker_ids if n != f.node]
        w.net.partition([w.procs[f.node].owner], [w.procs[n].owner for n in others])
        w.note(f"partition {f.node} from the rest")
        loop.call_later(f.duration, lambda: (w.net.heal(), w.note("heal")))
    elif f.kind == "pause":
        w.pause(f.node, f.duration)
    elif f.kind == "zombie":  # cut from the controllers only: fenced, yet serving the other brokers
        if f.node in w.controller_ids:
            return
        w.net.partition([w.procs[f.node].owner], [w.procs[c].owner for c in w.controller_ids])
        w.note(f"partition {f.node} from the controllers")
        loop.call_later(f.duration, lambda: (w.net.heal(), w.note("heal")))
    elif f.kind == "cut":
        other = w.controller_ids[f.arg % len(w.controller_ids)] if f.node not in w.controller_ids else \
            w.broker_ids[f.arg % len(w.broker_ids)]
        w.net.cut(w.procs[f.node].owner, w.procs[other].owner)
        w.note(f"cut {f.node} -> {other}")
        loop.call_later(f.duration, lambda: (w.net.heal(), w.note("heal")))
    elif f.kind == "loss":
        w.net.loss = f.arg / 100
        w.note(f"loss {f.arg}%")
        loop.call_later(f.duration, lambda: setattr(w.net, "loss", 0.0))
    elif f.kind == "dup":  # the whole network's gRPC calls (Raft, controller channel): some run twice
        w.net.dup = f.arg / 100
        w.note(f"gRPC calls executed twice: {f.arg}%")
        loop.call_later(f.duration, lambda: setattr(w.net, "dup", 0.0))
    elif f.kind == "clock":
        p = w.procs[f.node]
        p.clock.step_wall(f.arg)
        w.wall_offsets[f.node] += f.arg
        w.note(f"wall clock of {f.node} steps {f.arg:+d} ms")
    elif f.kind == "eio":
        w.stores[f.node].fail_next = errno.EIO
        w.note(f"EIO on the next metadata write of {f.node}")
    elif f.kind == "disk":
        if f.node in w.broker_ids:
            dirs = w.log_dirs(f.node)
            d = dirs[0] if len(dirs) == 1 else w.rng.choice(dirs)  # (one dir: the rng draws as before)
            w.files.fail_next(d, "write", f.arg)
            w.note(f"{errno.errorcode[f.arg]} on the next partition log write of {f.node} in {os.path.basename(d)}")


def _all_done(tasks: list[asyncio.Task]):
    """A stop condition of ``World.run_for`` (asked after every step): all ``tasks`` are done."""
    left = [len(tasks)]

    def one_done(_t) -> None:
        left[0] -= 1
    for t in tasks:
        t.add_done_callback(one_done)
    return lambda: left[0] == 0


def _restart_failed(w: World, down: set[int]) -> None:
    """A node whose metadata log stopped (a disk error), or whose start failed (every log dir
    failed while loading: AllLogDirsFailed), exits; the operator restarts it."""
    for nid, p in list(w.procs.items()):
        if not p.alive or p.node is None or nid in down:
            continue
        t = p.task
        why = p.node.failed()
        if why is None and t is not None and t.done() and not t.cancelled():
            why = t.exception()
        if why is not None:
            w.note(f"node {nid} stopped: {why!r}")
            w.kill(nid)
            if isinstance(why, CorruptMetadataLogError):  # the operator moves the broker's metadata log away:
                if nid not in w.corrupted:                 # it fetches it again from the controllers
                    raise w.violation(f"node {nid}: {why} (no bad block was put there)")
                w.corrupted.discard(nid)
                w.stores[nid] = SimRaftStore(random.Random(f"disk-{w.seed}-{nid}-again"))
                w.note(f"metadata log of {nid} moved away")
            down.add(nid)
            _impaired(w, nid, 1.0)  # down until the restart below, as after a kill fault

            def restart(n=nid):
                down.discard(n)
                w.start(n)
            w.loop.call_later(1.0, restart)


def run_seed(seed: int, *, safety_s: float = 12.0, settings: Settings | None = None, faults: list[Fault] | None = None,
             verbose: bool = False, reorder: bool = True) -> Result:
    t0 = time.perf_counter()
    w = World(seed, settings, reorder=reorder)
    w.replay = f"python -m sim.run_world --seed {seed} --safety-s {safety_s} --verbose"
    try:
        return _run(w, seed, safety_s, faults, verbose, t0)
    finally:
        w.close()


def _run(w: World, seed: int, safety_s: float, faults: list[Fault] | None, verbose: bool, t0: float) -> Result:
    loop = w.loop
    for n in w.controller_ids + w.broker_ids:
        w.start(n)
    if not w.run_for(60, _all_done([p.task for p in w.procs.values()])):
        raise w.violation("the cluster did not start within 60 s")
    for p in w.procs.values():
        if p.task.exception() is not None:
            raise w.violation(f"node {p.node_id} failed to start: {p.task.exception()!r}")
    admin = Cluster(w, "admin")
    for topic in (TOPIC, TXN_TOPIC):
        task = w.spawn("admin", create_topic(admin, topic, PARTITIONS, min(3, len(w.broker_ids))))
        if not w.run_for(30, task.done):
            raise w.violation("CreateTopics did not complete")
        task.result()
    checker = Checker(w)
    loop.on_step = checker.step
    plan = faults if faults is not None else schedule(seed, w.controller_ids + w.broker_ids, w.controller_ids, safety_s)
    down: set[int] = set()
    start = loop.time()
    for f in plan:
        loop.call_at(start + f.at, _apply, w, f, down)
    until = start + safety_s
    producers = [Producer(w, f"producer-{i}", TOPIC, PARTITIONS, pause_s=w.rng.uniform(0.01, 0.1)) for i in range(2)]
    consumer = Consumer(w, "consumer-0", TOPIC, PARTITIONS)
    admins = [Admin(w, f"admin-{i}") for i in range(2)]
    tasks = [w.spawn(p.name, p.run(until)) for p in producers] + [w.spawn(consumer.name, consumer.run(until))]
    tasks += [w.spawn(a.name, a.run(until)) for a in admins]
    txn_producers = [TxnProducer(w, f"txn-{i}", TXN_TOPIC, PARTITIONS) for i in range(2)]
    tasks += [w.spawn(t.name, t.run(until)) for t in txn_producers]
    book: dict = {}
    members = [GroupMember(w, f"member-{i}", "sim-members", TOPIC, PARTITIONS, book) for i in range(3)]
    tasks += [w.spawn(m.name, m.run(until)) for m in members]
    committer = Committer(w, consumer)
    tasks.append(w.spawn("committer", committer.run(until)))
    groups = GroupWorkload(w, TOPIC, PARTITIONS)  # KIP-848 members and share consumers, on some seeds
    tasks += groups.tasks(until)

    def watchdog():
        _restart_failed(w, down)
        if loop.time() < until + LIVENESS_S * 2:
            loop.call_later(0.25, watchdog)
    loop.call_soon(watchdog)
    w.run_for(safety_s)
    # heal: every fault ends (scheduled ends may still be pending: force them)
    w.net.heal()
    w.net.loss = w.net.dup = 0.0
    if not w.run_for(LIVENESS_S, _all_done(tasks)):
        raise w.violation(f"producers and consumer did not finish within {LIVENESS_S} s of healing "
                          f"(still down: {sorted(down)})")
    for t in tasks:
        if t.exception() is not None:
            raise t.exception()
    # liveness: everything runs, every broker is unfenced, images converge, a new write is acked
    def converged() -> bool:
        if down or any(not p.alive or not p.task.done() for p in w.procs.values()):
            return False
        offs = {p.node.loader.image.offset for p in w.procs.values()}
        img = w.procs[w.controller_ids[0]].node.loader.image
        return len(offs) == 1 and all(b in img.brokers and not img.brokers[b].fenced for b in w.broker_ids)
    if not w.run_for(LIVENESS_S, converged):
        states = {n: (p.alive, p.task.done(), p.node.loader.image.offset if p.node else None)
                  for n, p in w.procs.items()}
        raise w.violation(f"no convergence within {LIVENESS_S} s of healing: {states}")
    async def final_offsets():
        while not await committer.check():
            await asyncio.sleep(0.2)
    t = w.spawn("committer", final_offsets())
    if not w.run_for(LIVENESS_S, t.done):
        raise w.violation("committed offsets could not be fetched after healing")
    t.result()
    last = Producer(w, "producer-final", TOPIC, PARTITIONS)
    t = w.spawn(last.name, last.run(loop.time() + 0.5))
    if not w.run_for(LIVENESS_S, t.done) or not last.acked:
        raise w.violation("no write acknowledged after healing")
    _check_replicas_converge(w)
    loop.on_step = None
    logs = _check_history(w, producers + [last], consumer)
    groups.finish(logs, LIVENESS_S)
    _check_transactions(w, txn_producers)
    _check_generations(w, book)
    if loop.errors:  # an exception nobody handled (a task that died unseen, a callback that raised)
        e = loop.errors[0]
        raise w.violation(f"unhandled error in the event loop: {e.get('message')} {e.get('exception')!r}")
    created = [t for a in admins for t in a.created]
    if len(set(created)) != len(created):
        raise w.violation(f"a topic was created twice: {sorted(created)}")
    img = w.procs[w.controller_ids[0]].node.loader.image
    if not set(created) <= set(img.topics_by_name):
        raise w.violation(f"acknowledged topics missing: {set(created) - set(img.topics_by_name)}")
    res = Result(seed, loop.time() - 1000, time.perf_counter() - t0, sum(len(p.acked) for p in producers),
                 len(consumer.seen), plan, w.trace, loop.steps, checker.fenced, committer.commits,
                 w.files.failures, w.net.duplicated)
    if verbose:
        print("\n".join(w.trace))
    return res


def _check_history(w: World, producers: list[Producer], consumer: Consumer) -> dict[int, dict[int, bytes]] | None:
    """The partitions of TOPIC as read back after healing ({partition: {offset: value}}), checked;
    None when durability is excused (see ``World.durability_excused``)."""
    reader = Cluster(w, "verifier")
    logs: dict[int, dict[int, bytes]] = {}

    async def read_all():
        for p in range(PARTITIONS):
            got: dict[int, bytes] = {}
            pos, hw = 0, None
            while hw is None or pos < hw:
                r = await read_partition(reader, TOPIC, p, pos, max_wait_ms=0)
                if r is None:
                    continue
                hw, recs = r
                for off, v in recs:
                    got[off] = v
                    pos = off + 1
                if not recs and pos < hw:
                    raise w.violation(f"partition {p}: nothing readable at offset {pos} below the high watermark {hw}")
            logs[p] = got
    t = w.spawn("verifier", read_all())
    if not w.run_for(60, t.done):
        raise w.violation("could not read the logs back")
    t.result()
    for p, got in logs.items():
        offs = sorted(got)
        if offs != list(range(len(offs))):
            missing = sorted(set(range(offs[-1] + 1)) - set(offs)) if offs else []
            raise w.violation(f"partition {p}: offsets missing below the high watermark: {missing[:10]}")
        values = list(got.values())
        if len(set(values)) != len(values):
            dup = next(v for v in values if values.count(v) > 1)
            raise w.violation(f"partition {p}: {dup!r} written twice (idempotence)")
    if w.durability_excused():
        w.note(f"power lost on brokers {sorted(w.powered)}: acknowledged and consumed data not checked")
        return None
    for prod in producers:
        for p, off, v in prod.acked:
            if logs[p].get(off) != v:
                raise w.violation(f"acknowledged write {v!r} at {p}/{off} is lost (the log has {logs[p].get(off)!r})")
    for (p, off), v in consumer.seen.items():
        if logs[p].get(off) != v:
            raise w.violation(f"consumer was given {v!r} at {p}/{off}; the log now has {logs[p].get(off)!r}")
    return logs


def _replica_batches(lg, end: int) -> list[tuple[int, int, int, int]]:
    """(base offset, last offset, partition leader epoch, CRC) of the batches of ``lg`` below ``end``."""
    out, pos = [], lg.log_start_offset
    while pos < end:
        sl = lg.read(pos, 1 << 20, end)
        if sl is None:
            break
        hs = parse_batches(lg.read_bytes(sl))
        if not hs:
            break
        out += [(h.base_offset, h.last_offset, h.partition_leader_epoch, h.crc) for h in hs]
        pos = hs[-1].last_offset + 1
    return out


def _check_replicas_converge(w: World) -> None:
    """After healing, with the clients stopped: every replica of every partition is back in the
    ISR, at the leader's log end, and holds the leader's batches (offsets, leader epochs, CRCs)
    from the later of the two log starts: replicas that diverged (a follower that appended an
    answer fetched for a leadership that had ended) never converge. (A replica in a log dir that
    failed stays offline until its broker restarts, KIP-858: it is left out.)"""
    def online(name: str, pid: int, replicas) -> list[int]:
        return [r for r in replicas if (name, pid) not in w.node(r).broker.replicas.offline_partitions]

    def behind() -> str | None:
        """What is not caught up yet (None: all)."""
        c = w.active_controller()
        if c is None:
            return "no active controller"
        for name, t in w.node(c).loader.image.topics_by_name.items():
            for pid, reg in t.partitions.items():
                if any(w.node(r) is None or w.node(r).broker.replicas is None for r in reg.replicas):
                    return f"{name}-{pid}: a replica's broker is not running"
                replicas = online(name, pid, reg.replicas)
                if not replicas:
                    continue  # (all offline: nothing to compare)
                if not set(replicas) <= set(reg.isr) or reg.leader < 0:
                    return f"{name}-{pid}: ISR {list(reg.isr)} of replicas {list(reg.replicas)}, leader {reg.leader}"
                ends = {}
                for r in replicas:
                    part = w.node(r).broker.replicas.partitions.get((name, pid))
                    if part is None:
                        return f"{name}-{pid}: no replica on broker {r}"
                    ends[r] = part.log.log_end_offset
                    if r == reg.leader:
                        ends["hw"] = part.state.high_watermark
                if len(set(ends.values())) != 1:
                    return f"{name}-{pid}: log ends (and the leader's HW) {ends}"
        return None
    if not w.run_for(LIVENESS_S, lambda: behind() is None):
        raise w.violation(f"replicas did not catch up with their leaders within {LIVENESS_S} s of healing: "
                          f"{behind()}")
    img = w.node(w.active_controller()).loader.image
    for name, t in img.topics_by_name.items():
        for pid, reg in t.partitions.items():
            if reg.leader < 0:
                continue
            leader = w.node(reg.leader).broker.replicas.partitions[(name, pid)].log
            for r in online(name, pid, reg.replicas):
                if r == reg.leader:
                    continue
                lg = w.node(r).broker.replicas.partitions[(name, pid)].log
                start, end = max(lg.log_start_offset, leader.log_start_offset), leader.log_end_offset
                mine = [b for b in _replica_batches(lg, end) if b[0] >= start]
                theirs = [b for b in _replica_batches(leader, end) if b[0] >= start]
                if mine != theirs:
                    diff = next((a, b) for a, b in zip(mine + [None], theirs + [None], strict=False) if a != b)
                    raise w.violation(f"{name}-{pid}: replica {r} holds other batches than leader {reg.leader} "
                                      f"(first difference: {diff[0]} vs {diff[1]}; (base, last, epoch, crc))")


def _check_generations(w: World, book: dict) -> None:
    """No partition owned by two members of one generation of the classic group."""
    if w.durability_excused():
        return  # a group's generation may be lost with the data of a power cut, and reused
    for gen, owners in sorted(book.get("owners", {}).items()):
        for p, who in owners.items():
            if len(who) > 1:
                raise w.violation(f"partition {p} owned by {sorted(who)} in generation {gen} of the group")
    w.note(f"group: {len(book.get('owners', {}))} generations, last commits acknowledged {book.get('acked')}")


def _check_transactions(w: World, producers: list[TxnProducer]) -> None:
    """read_committed, after healing: the last stable offset reaches the high watermark (no
    transaction hangs), every committed value is read exactly once, no aborted one, and each
    transaction of unknown outcome whole or not at all."""
    reader = Cluster(w, "txn-verifier")
    got: list[bytes] = []

    async def read_all():
        for p in range(PARTITIONS):
            pos = 0
            while True:
                r = await read_committed(reader, TXN_TOPIC, p, pos)
                if r is None:
                    await asyncio.sleep(0.1)
                    continue
                hw, lso, recs = r
                for off, v in recs:
                    if off >= pos:
                        got.append(v)
                        pos = off + 1
                if not recs:
                    if lso >= hw and pos >= lso:
                        break
                    if pos < lso:  # only control batches or aborted data up to the LSO: ask from there
                        pos = lso
                    else:
                        await asyncio.sleep(0.2)
    t = w.spawn("txn-verifier", read_all())
    if not w.run_for(LIVENESS_S, t.done):
        if w.durability_excused():  # the coordinator's acknowledged state may be lost: nothing ends the txn
            w.note(f"power lost on brokers {sorted(w.powered)}: a transaction hangs (its coordinator state lost)")
            return
        raise w.violation(f"a transaction still hangs {LIVENESS_S} s after healing (last stable offset below the "
                          f"high watermark) or {TXN_TOPIC} cannot be read")
    t.result()
    seen = set(got)
    if w.durability_excused():  # markers and transaction indexes may be lost with the data too
        w.note("power lost on brokers: transactions not checked")
        return
    if len(seen) != len(got):
        dup = next(v for v in got if got.count(v) > 1)
        raise w.violation(f"read_committed gave {dup!r} twice")
    for prod in producers:
        if prod.aborted & seen:
            raise w.violation(f"read_committed gave aborted {sorted(prod.aborted & seen)[0]!r}")
        for txn in prod.unknown:
            if txn & seen and not txn <= seen:
                raise w.violation(f"a transaction of unknown outcome is read in part: {sorted(txn - seen)[0]!r} "
                                  f"missing, {sorted(txn & seen)[0]!r} read")
        if not prod.committed <= seen:
            raise w.violation(f"committed {sorted(prod.committed - seen)[0]!r} is not read")
    w.note(f"transactions: {sum(len(p.committed) for p in producers)} committed values, "
           f"{sum(len(p.aborted) for p in producers)} aborted, {sum(len(u) for p in producers for u in p.unknown)} "
           f"of unknown outcome")


__all__ = ["Fault", "InvariantViolation", "Result", "run_seed", "schedule"]
