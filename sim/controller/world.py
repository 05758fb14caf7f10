"""A seeded, virtual-time simulation of the quorum controller: the real Raft core, the real
metadata replay (``MetadataDelta`` -> ``MetadataImage``) and the real controller managers
(``controller/cluster.py``, ``replication.py``, ``topics.py``), with brokers and admin
clients as simple agents, all over the simulated network and disks of ``sim.cluster``.

Nodes: controllers ``1..n`` are Raft voters; brokers ``100..`` are Raft observers that
replay the metadata log into their own image. What runs where:

- The *active controller* is a voter that leads its Raft epoch and has applied every
  entry up to that epoch's start (the driver announces leadership only then, as
  KafkaRaftClient does). It serves requests one write at a time, exactly like
  ``controller.loop.QuorumController.write``: ``op(image) -> (records, result)`` on its
  committed image, propose the records, answer once they are committed and applied (or
  NOT_CONTROLLER if the epoch ended first). Its broker sessions (``ClusterState``) live in
  its memory only and restart on failover; a timer fences expired sessions and another
  moves leadership back to preferred replicas.
- A *broker* registers with a fresh incarnation id each time it starts, heartbeats with the
  offset of its own image, asks for a controlled shutdown when told to stop gracefully, and,
  for the partitions its image says it leads, asks the controller (AlterPartition with the
  partition epoch it knows) to put every live, unfenced replica into the ISR — followers are
  taken to catch up at once; replication itself is ``sim/replication``'s business.
- *Admin clients* send CreateTopics for names from a small pool, often the same name from
  several clients at once, to whichever controller they pick.

Faults: crashes of controllers and brokers (kill -9; unsynced metadata writes are lost),
graceful broker stops, network partitions and cuts, message loss, duplication and delay.

Invariants, checked after every event: everything ``sim.cluster`` checks for Raft; every
node's image equals every other node's image at the same log offset; topic names are
unique; an ISR is never empty, holds only replicas, and contains the leader; a fenced broker
never leads and sits in an ISR only as its last member; leader and partition epochs never
go back; a new leader always comes from the previous ISR (no unclean election);
CreateTopics succeeds at most once per name, and every acknowledged topic exists in the end.
After healing: every broker unfenced, every partition led by its preferred replica with a
full ISR, and a new CreateTopics succeeds, within a bound.
"""

from __future__ import annotations

import collections
import dataclasses
import random
import uuid
from typing import Any

from common.errors import ErrorCode, KafkaError
from controller import cluster as cluster_ops
from controller import replication as replication_ops
from controller import topics as topic_ops
from metadata import records as r
from metadata.controller_api import NewTopic
from metadata.delta import MetadataDelta
from metadata.image import EMPTY, MetadataImage
from raft.core import Role, Timeouts
from sim.cluster import FaultConfig, InvariantViolation, Sim, SimNode

BROKER_BASE = 100
TOPIC_POOL = ("orders", "clicks", "payments", "audit", "events", "logs")


@dataclasses.dataclass(frozen=True)
class Settings:
    n_controllers: int = 3
    n_brokers: int = 4
    session_timeout_ms: int = 3000
    heartbeat_ms: int = 500
    fence_check_ms: int = 250
    rebalance_ms: int = 2000
    client_every_ms: int = 300
    wait_for_epoch_start: bool = True  # False: the pre-fix behaviour (act on a stale image)
    graceful_stop_weight: float = 1.0


@dataclasses.dataclass(slots=True)
class Rpc:
    """A request or reply between controllers, brokers and clients (not Raft traffic)."""

    src: int
    dst: int
    kind: str
    payload: Any
    corr: int = 0
    is_request: bool = False  # (no connection-refused notices for these)


class MetadataStateMachine:
    """Replays committed metadata entries into an image, as ``MetadataLoader`` does."""

    def __init__(self, world: ControllerSim, node_id: int) -> None:
        self.world = world
        self.node_id = node_id
        self.image: MetadataImage = EMPTY
        self.applied_end = 0

    def load(self, snap) -> None:
        d = MetadataDelta(EMPTY)
        for raw in snap.records:
            d.replay(r.decode(raw))
        self.image = d.apply(snap.end_offset - 1, snap.epoch)
        self.applied_end = snap.end_offset
        self.world.on_image(self, None)

    def apply(self, base: int, entries) -> None:
        delta = None
        last = None
        for i, e in enumerate(entries):
            o = base + i
            if o < self.applied_end:
                continue
            assert o == self.applied_end, f"gap in commits: {o} != {self.applied_end}"
            self.applied_end = o + 1
            if e.control:
                continue
            if delta is None:
                delta = MetadataDelta(self.image)
            rec = r.decode(e.data)
            self.world.check_record(self, delta, rec)
            delta.replay(rec)
            last = (o, e.epoch)
        if delta is not None:
            old = self.image
            self.image = delta.apply(last[0], last[1])
            self.world.on_image(self, old)
        else:
            self.world.on_image(self, self.image)

    def snapshot_records(self) -> list[bytes]:
        return [r.encode(x) for x in self.image.to_records()]


class ControllerShell:
    """The active controller's loop for one voter (``QuorumController`` in virtual time)."""

    def __init__(self, world: ControllerSim, node: SimNode) -> None:
        self.world = world
        self.node = node
        self.incarnation = node.incarnation
        self.active_epoch: int | None = None
        self.cluster = cluster_ops.ClusterState()
        self.queue: collections.deque = collections.deque()
        # Pipelined writes, like QuorumController.write: (epoch, last offset, op, result) in
        # proposal order, and the image with all of them applied (None when none in flight).
        self.inflight: collections.deque = collections.deque()
        self.spec: MetadataImage | None = None
        self.spec_epoch = -1
        self.next_rebalance = 0

    # An op is (kind, request or None, fn(image) -> (records, result)).
    def refresh(self) -> None:
        """After any event at this node: gain or lose the active role, finish a write."""
        w, n = self.world, self.node
        c = n.core
        leading = n.alive and c.role is Role.LEADER
        if self.active_epoch is not None and (not leading or c.epoch != self.active_epoch):
            self._resign()
        if self.active_epoch is None and leading:
            caught_up = n.kv.applied_end > c.epoch_start >= 0
            if caught_up or not w.settings.wait_for_epoch_start:
                self._activate(c.epoch)
        while self.inflight and n.kv.applied_end > self.inflight[0][1]:
            epoch, last, op, result = self.inflight.popleft()
            ok = w.committed.get(last, (None,))[0] == epoch
            self._answer(op, result if ok else KafkaError(ErrorCode.NOT_CONTROLLER, "write lost"))
        self._run()

    def _activate(self, epoch: int) -> None:
        w = self.world
        self.active_epoch = epoch
        self.cluster.activate(self.node.kv.image, w.now)
        self.next_rebalance = w.now + w.settings.rebalance_ms
        w.active_history.append((w.now, self.node.id, epoch))
        w._log(f"controller {self.node.id} active in epoch {epoch}")

        def bootstrap(image):
            recs = []
            if image.cluster_id is None:
                recs.append(r.ClusterIdRecord("sim-cluster"))
            if "metadata.version" not in image.features:
                recs.append(r.FeatureLevelRecord("metadata.version", 21))
            return recs, None
        self.queue.appendleft(("bootstrap", None, bootstrap))

    def _resign(self) -> None:
        self.world._log(f"controller {self.node.id} no longer active (epoch {self.active_epoch})")
        self.active_epoch = None
        while self.inflight:
            self._answer(self.inflight.popleft()[2], KafkaError(ErrorCode.NOT_CONTROLLER, "resigned"))
        self.spec = None
        while self.queue:
            self._answer(self.queue.popleft(), KafkaError(ErrorCode.NOT_CONTROLLER, "resigned"))
        self.cluster = cluster_ops.ClusterState()

    def submit(self, op) -> None:
        if self.active_epoch is None:
            self._answer(op, KafkaError(ErrorCode.NOT_CONTROLLER, "not the active controller"))
            return
        self.queue.append(op)
        self._run()

    def tick(self) -> None:
        """The fence timer and the preferred-leader timer."""
        if self.active_epoch is None:
            return
        w = self.world
        if not any(op[0] == "fence" for op in self.queue):
            self.queue.append(("fence", None, lambda image: (cluster_ops.fence_stale_brokers(
                image, self.cluster, w.now, w.settings.session_timeout_ms), None)))
        if w.now >= self.next_rebalance:
            self.next_rebalance = w.now + w.settings.rebalance_ms
            self.queue.append(("rebalance", None, lambda image: (
                replication_ops.preferred_leader_elections(image), None)))
        self._run()

    def _run(self) -> None:
        n = self.node
        while self.active_epoch is not None and self.queue:
            op = self.queue.popleft()
            committed = n.kv.image
            spec = self.spec if self.spec is not None and self.spec.offset > committed.offset else None
            try:
                records, result = op[2](spec or committed)
            except KafkaError as e:
                self._answer(op, e)
                continue
            if records:
                epoch, last = n.core.propose([r.encode(x) for x in records], self.world.now, self.active_epoch)
                d = MetadataDelta(spec or committed)
                for x in records:
                    d.replay(x)
                self.spec, self.spec_epoch = d.apply(last, epoch), epoch
                self.inflight.append((epoch, last, op, result))
                self.world._after(n)
            elif spec is not None:
                self.inflight.append((self.spec_epoch, spec.offset, op, result))
            else:
                self._answer(op, result)

    def _answer(self, op, result) -> None:
        req = op[1]
        if req is None:
            return
        self.world.reply(req, result)


class BrokerAgent:
    """One broker process's dealings with the controller."""

    def __init__(self, world: ControllerSim, node: SimNode) -> None:
        self.world = world
        self.node = node
        self.incarnation = node.incarnation
        self.incarnation_id = uuid.UUID(int=world.rng.getrandbits(128))
        self.epoch = -1
        self.stopping = False
        self.alter_inflight: dict[tuple[uuid.UUID, int], int] = {}  # -> sent at

    def target(self) -> int:
        c = self.node.core
        leader = c.leader_id if c is not None else None
        return leader if leader in self.world.voters else self.world.rng.choice(self.world.voters)

    def tick(self) -> None:
        w, bid = self.world, self.node.id
        if self.epoch < 0:
            w.request(bid, self.target(), "register", (bid, self.incarnation_id))
            return
        image = self.node.kv.image
        w.request(bid, self.target(), "heartbeat", (bid, self.epoch, image.offset, self.stopping))
        me = image.brokers.get(bid)
        if me is None or me.epoch != self.epoch:
            return
        for t in image.topics_by_id.values():
            for pid, p in t.partitions.items():
                if p.leader != bid:
                    continue
                want = tuple(b for b in p.replicas if b == bid or w.replica_can_join(image, b))
                key = (t.topic_id, pid)
                if set(want) != set(p.isr) and w.now - self.alter_inflight.get(key, -10**9) > 1000:
                    self.alter_inflight[key] = w.now
                    w.request(bid, self.target(), "alter_partition",
                              (bid, self.epoch, t.topic_id, pid, p.leader_epoch, p.partition_epoch, want))

    def on_reply(self, kind: str, result) -> None:
        if kind == "register":
            if not isinstance(result, KafkaError) and self.epoch < 0:
                self.epoch = result
        elif kind == "heartbeat":
            if isinstance(result, KafkaError):
                if result.code == ErrorCode.STALE_BROKER_EPOCH:
                    self.epoch = -1
                return
            if result.should_shut_down and self.stopping:
                self.world.finish_graceful_stop(self.node.id)
        elif kind == "alter_partition":
            pass  # the metadata log brings the outcome


class ControllerSim(Sim):
    def __init__(self, seed: int, settings: Settings | None = None, *, timeouts: Timeouts | None = None,
                 faults: FaultConfig | None = None, snapshot_every: int = 60, trace=None) -> None:
        self.settings = s = settings or Settings()
        self.images: dict[int, tuple] = {}  # applied end -> image digest
        self.active_history: list[tuple[int, int, int]] = []
        self.created: dict[str, list[uuid.UUID]] = collections.defaultdict(list)
        self.create_attempts = 0
        self.clients_on = True
        self.client_replies: list[tuple[int, str, Any]] = []
        self.graceful_stops = 0
        self.shells: dict[int, ControllerShell] = {}
        self.agents: dict[int, BrokerAgent] = {}
        self.pending: dict[int, tuple] = {}  # corr -> (src, kind, incarnation)
        self.next_corr = 0
        self.uuid_rng = random.Random(seed ^ 0x5EED)
        super().__init__(seed, n_voters=s.n_controllers, n_observers=s.n_brokers, timeouts=timeouts, faults=faults,
                         snapshot_every=snapshot_every, client_every_ms=s.client_every_ms, trace=trace)
        self.brokers = list(self.observers)
        assert self.brokers[0] == BROKER_BASE
        self.defaults = topic_ops.TopicDefaults(num_partitions=2, replication_factor=min(3, s.n_brokers))
        self._push(s.heartbeat_ms, "broker_tick", None)
        self._push(s.fence_check_ms, "controller_tick", None)

    def new_state_machine(self, node_id: int):
        return MetadataStateMachine(self, node_id)

    # ------------------------------------------------------------------ per-node helpers
    def shell(self, n: SimNode) -> ControllerShell:
        sh = self.shells.get(n.id)
        if sh is None or sh.incarnation != n.incarnation:
            if sh is not None and sh.active_epoch is not None:
                sh.active_epoch = None  # died with its node; nothing of it survives
            sh = self.shells[n.id] = ControllerShell(self, n)
        return sh

    def agent(self, n: SimNode) -> BrokerAgent:
        a = self.agents.get(n.id)
        if a is None or a.incarnation != n.incarnation:
            a = self.agents[n.id] = BrokerAgent(self, n)
        return a

    def replica_can_join(self, image: MetadataImage, b: int) -> bool:
        """A follower that is running and unfenced catches up at once (sim simplification)."""
        n = self.nodes.get(b)
        reg = image.brokers.get(b)
        return n is not None and n.alive and reg is not None and not reg.fenced and not reg.in_controlled_shutdown

    # ------------------------------------------------------------------ messaging
    def request(self, src: int, dst: int, kind: str, payload) -> None:
        self.next_corr += 1
        self.pending[self.next_corr] = (src, kind, self.nodes[src].incarnation)
        self.send(Rpc(src, dst, kind, payload, self.next_corr))

    def reply(self, req: Rpc, result) -> None:
        self.send(Rpc(req.dst, req.src, "reply", result, req.corr))

    def send(self, m) -> None:
        if isinstance(m, Rpc) and m.dst == CLIENT:  # admin clients are not simulated nodes
            if not (self.faults_on and self.rng.random() < self.faults.drop):
                self._push(self.now + 1 + self.rng.randrange(self.faults.max_delay_ms), "deliver", m)
            return
        super().send(m)

    def _ev_deliver(self, m) -> None:
        if not isinstance(m, Rpc):
            super()._ev_deliver(m)
            self._refresh(self.nodes[m.dst])
            return
        if m.dst == CLIENT:
            self._client_reply(m)
            return
        n = self.nodes[m.dst]
        if not n.alive or (m.src, m.dst) in self.blocked:
            return
        if m.kind == "reply":
            src, kind, inc = self.pending.pop(m.corr, (None, None, None))
            if src == n.id and inc == n.incarnation and n.id in self.brokers:
                self.agent(n).on_reply(kind, m.payload)
            return
        self.shell(n).submit((m.kind, m, self._op_for(n, m)))
        self._refresh(n)

    def _op_for(self, n: SimNode, m: Rpc):
        sh = self.shell(n)
        s = self.settings
        if m.kind == "register":
            bid, inc = m.payload
            return lambda image: cluster_ops.register_broker(
                image, sh.cluster, bid, inc, (r.Endpoint("PLAINTEXT", f"b{bid}", 9092, 0),), None, self.now,
                s.session_timeout_ms, next_offset=n.core.log_end + n.core.accum_count)
        if m.kind == "heartbeat":
            bid, epoch, offset, stopping = m.payload
            received = self.now

            def hb(image):
                sh.cluster.touch(bid, received)
                return cluster_ops.heartbeat(image, sh.cluster, bid, epoch, self.now, offset, False, stopping,
                                             next_offset=n.core.log_end + n.core.accum_count)
            return hb
        if m.kind == "alter_partition":
            bid, epoch, tid, pid, le, pe, isr = m.payload

            def alter(image):
                recs, res = replication_ops.alter_partition(image, bid, epoch, tid, pid, le, pe, isr)
                return recs, res.error
            return alter
        if m.kind == "create_topics":
            name, parts, rf = m.payload

            def create(image):
                new_uuid = lambda: uuid.UUID(int=self.uuid_rng.getrandbits(128))  # noqa: E731
                recs, results = topic_ops.create_topics(image, [NewTopic(name, parts, rf)], self.defaults,
                                                        self.uuid_rng, new_uuid=new_uuid)
                return recs, results[0]
            return create
        raise AssertionError(m.kind)

    def _refresh(self, n: SimNode) -> None:
        if n.alive and n.id in self.voters:
            self.shell(n).refresh()

    # ------------------------------------------------------------------ events
    def _ev_synced(self, p) -> None:
        super()._ev_synced(p)
        self._refresh(self.nodes[p[0]])

    def _ev_timer(self, p) -> None:
        super()._ev_timer(p)
        self._refresh(self.nodes[p[0]])

    def _ev_unreachable(self, p) -> None:
        super()._ev_unreachable(p)
        self._refresh(self.nodes[p[0]])

    def _ev_broker_tick(self, _p) -> None:
        for b in self.brokers:
            n = self.nodes[b]
            if n.alive:
                self.agent(n).tick()
        self._push(self.now + self.settings.heartbeat_ms, "broker_tick", None)

    def _ev_controller_tick(self, _p) -> None:
        for v in self.voters:
            n = self.nodes[v]
            if n.alive:
                self._refresh(n)
                self.shell(n).tick()
        self._push(self.now + self.settings.fence_check_ms, "controller_tick", None)

    def _ev_client(self, _p) -> None:
        if self.clients_on and (self.faults_on or self.rng.random() < 0.5):
            name = self.rng.choice(TOPIC_POOL)
            if not self.faults_on:
                name = f"{name}-{self.now}"
            parts = self.rng.randint(1, 4)
            rf = self.rng.choice((1, 2, 3, 3))
            for _ in range(self.rng.choice((1, 1, 2, 3))):  # the same name from several clients
                self._client_create(name, parts, rf)
        self._push(self.now + 1 + self.rng.randrange(self.client_every_ms * 2), "client", None)

    def _client_create(self, name: str, parts: int, rf: int) -> None:
        self.create_attempts += 1
        self.next_corr += 1
        self.pending[self.next_corr] = (CLIENT, name, 0)
        # Through a broker, which forwards to the controller its metadata log says is active.
        live = [b for b in self.brokers if self.nodes[b].alive]
        target = self.agent(self.nodes[self.rng.choice(live)]).target() if live else self.rng.choice(self.voters)
        self.send(Rpc(CLIENT, target, "create_topics", (name, parts, rf), self.next_corr))

    def _client_reply(self, m: Rpc) -> None:
        _src, name, _ = self.pending.pop(m.corr, (None, None, None))
        res = m.payload
        if name is not None:
            self.client_replies.append((self.now, name, res))
        if name is None or isinstance(res, KafkaError) or res.error != ErrorCode.NONE:
            return
        self.created[name].append(res.topic_id)
        self._log(f"client: created {name} ({res.topic_id})")
        if len(self.created[name]) > 1:
            self.fail(f"CreateTopics of {name!r} succeeded {len(self.created[name])} times: {self.created[name]}")

    def _ev_fault(self, p) -> None:
        if self.faults_on and self.rng.random() < 0.15 * self.settings.graceful_stop_weight:
            live = [b for b in self.brokers if self.nodes[b].alive and not self.agent(self.nodes[b]).stopping]
            if live:
                b = self.rng.choice(live)
                self._log(f"graceful stop of broker {b} requested")
                self.agent(self.nodes[b]).stopping = True
        super()._ev_fault(p)

    def finish_graceful_stop(self, b: int) -> None:
        self._log(f"broker {b} finished its controlled shutdown")
        self.graceful_stops += 1
        self.nodes[b].crash()
        self._push(self.now + 10 + self.rng.randrange(1000), "restart", b)

    def heal(self) -> None:
        super().heal()
        for b in self.brokers:
            self.agent(self.nodes[b]).stopping = False

    # ------------------------------------------------------------------ invariants
    def fail(self, msg: str) -> None:
        raise InvariantViolation(f"seed {self.seed} at t={self.now}ms: {msg}\n"
                                 f"replay: python -m sim.controller.run --seeds 1 --start {self.seed} --verbose")

    def check_record(self, sm: MetadataStateMachine, delta: MetadataDelta, rec) -> None:
        """Per committed record, against the state just before it (clean elections)."""
        if isinstance(rec, r.PartitionChangeRecord) and rec.leader is not None and rec.leader >= 0:
            td = delta.topics.get(rec.topic_id)
            old = td.partition(rec.partition_id) if td else None
            if old is None:
                t = delta.image.topics_by_id.get(rec.topic_id)
                old = t.partitions.get(rec.partition_id) if t else None
            if old is not None and rec.leader != old.leader and rec.leader not in old.isr:
                self.fail(f"node {sm.node_id}: unclean election of {rec.leader} for "
                          f"{rec.topic_id}:{rec.partition_id} (previous ISR {old.isr})")

    def on_image(self, sm: MetadataStateMachine, old: MetadataImage | None) -> None:
        image = sm.image
        digest = tuple(r.encode(x) for x in image.to_records())
        prev = self.images.setdefault(sm.applied_end, digest)
        if prev != digest:
            self.fail(f"node {sm.node_id}'s image at offset {sm.applied_end} differs from another node's")
        if len(image.topics_by_name) != len(image.topics_by_id):
            self.fail(f"node {sm.node_id}: two topics share a name at offset {sm.applied_end}")
        for t in image.topics_by_id.values():
            for pid, p in t.partitions.items():
                where = f"node {sm.node_id}: {t.name}-{pid} at offset {sm.applied_end} ({p})"
                if not p.isr or any(b not in p.replicas for b in p.isr):
                    self.fail(f"{where}: bad ISR")
                if p.leader != -1:
                    if p.leader not in p.isr:
                        self.fail(f"{where}: leader outside the ISR")
                    lb = image.brokers.get(p.leader)
                    if lb is None or lb.fenced:
                        self.fail(f"{where}: leader {p.leader} is fenced or unregistered")
                fenced = [b for b in p.isr if (rb := image.brokers.get(b)) is None or rb.fenced]
                if fenced and len(p.isr) > 1:
                    self.fail(f"{where}: fenced brokers {fenced} in a larger ISR")
                if old is not None and (ot := old.topics_by_id.get(t.topic_id)) is not None:
                    op = ot.partitions.get(pid)
                    if op is not None and (p.leader_epoch < op.leader_epoch or p.partition_epoch < op.partition_epoch):
                        self.fail(f"{where}: epochs went back from {op}")

    def fully_recovered(self) -> bool:
        """Every broker unfenced, every partition led by its preferred replica with a full ISR."""
        live = [self.nodes[v] for v in self.voters if self.nodes[v].alive]
        if not live:
            return False
        image = max((n.kv.image for n in live), key=lambda i: i.offset)
        for b in self.brokers:
            reg = image.brokers.get(b)
            if reg is None or reg.fenced or reg.in_controlled_shutdown:
                return False
        for t in image.topics_by_id.values():
            for p in t.partitions.values():
                if not p.replicas or p.leader != p.replicas[0] or set(p.isr) != set(p.replicas):
                    return False
        return True

    def check_final(self, caught_up_to: int) -> None:
        """Every node has applied what the leader had committed 3 s ago (the images agree
        offset by offset already), and every acknowledged topic is in the latest image."""
        live = [n for n in self.nodes.values() if n.alive]
        ends = {n.id: n.kv.applied_end for n in live}
        if min(ends.values()) < caught_up_to:
            self.fail(f"nodes did not catch up to offset {caught_up_to} within 3 s: {ends}")
        image = max((n.kv.image for n in live), key=lambda i: i.offset)
        for name, ids in self.created.items():
            t = image.topics_by_name.get(name)
            if t is None or t.topic_id != ids[0]:
                self.fail(f"acknowledged topic {name} ({ids[0]}) is missing from the final image")


CLIENT = 999


# ---------------------------------------------------------------------------------------- seeds
LIVENESS_BOUND_MS = 30_000


@dataclasses.dataclass
class SeedResult:
    seed: int
    sim_ms: int
    events: int
    topics_created: int
    create_attempts: int
    controller_changes: int
    graceful_stops: int
    recovery_ms: int


def swarm(seed: int) -> tuple[Settings, Timeouts, FaultConfig, int]:
    r_ = random.Random(seed * 7919 + 3)
    scale = r_.choice((1, 2, 4))
    timeouts = Timeouts(election_ms=1000 // scale, fetch_ms=2000 // scale, election_backoff_max_ms=1000 // scale,
                        request_ms=2000 // scale, fetch_max_wait_ms=500 // scale)
    settings = Settings(n_controllers=r_.choice((1, 3, 3, 5)), n_brokers=r_.choice((3, 4, 5)),
                        session_timeout_ms=r_.choice((1500, 3000, 9000)), heartbeat_ms=r_.choice((250, 500)),
                        rebalance_ms=r_.choice((1000, 3000)), client_every_ms=r_.choice((100, 300, 800)))
    faults = FaultConfig(max_disk_ms=r_.choice((2, 5, 30)), drop=r_.choice((0.0, 0.01, 0.05)),
                         duplicate=r_.choice((0.0, 0.02)), max_delay_ms=r_.choice((5, 20, 60)),
                         fault_every_ms=r_.choice((300, 800, 2000)), crash_weight=r_.choice((0.5, 1.0, 2.0)),
                         partition_weight=r_.choice((0.0, 1.0)), cut_weight=r_.choice((0.0, 1.0)))
    return settings, timeouts, faults, r_.choice((20, 60, 10_000))


def run_seed(seed: int, safety_ms: int = 15_000, verbose: bool = False, settings: Settings | None = None
             ) -> SeedResult:
    s, timeouts, faults, snap_every = swarm(seed)
    if settings is not None:
        s = settings
    sim = ControllerSim(seed, s, timeouts=timeouts, faults=faults, snapshot_every=snap_every,
                        trace=print if verbose else None)
    sim.run_until(safety_ms)
    sim.heal()
    healed = sim.now
    if not sim.run_until(healed + LIVENESS_BOUND_MS + s.session_timeout_ms, sim.fully_recovered):
        sim.fail("the cluster did not recover after healing: some broker is fenced or some partition is not led "
                 "by its preferred replica with a full ISR")
    recovery = sim.now - healed
    # A topic created after healing must succeed.
    before = len(sim.created)
    sim.run_until(sim.now + 10_000, lambda: len(sim.created) > before)
    if len(sim.created) == before:
        sim.fail("no CreateTopics succeeded within 10 s of recovery")
    sim.clients_on = False  # quiesce: once the controller's queue drains every node must reach one offset
    sim.run_until(sim.now + 60_000, lambda: all(not sh.queue and not sh.inflight for sh in sim.shells.values()))
    leader = sim.stable_leader()
    caught_up_to = leader.core.hw if leader is not None else 0
    sim.run_until(sim.now + 3000)
    sim.check_final(caught_up_to)
    return SeedResult(seed, sim.now, sim.events_run, sum(len(v) for v in sim.created.values()),
                      sim.create_attempts, len(sim.active_history), sim.graceful_stops, recovery)
