"""A seeded simulation of the transaction coordinator under faults.

What runs is the real ``TxnCoordinatorCore`` (broker/txn/state.py) on each of three brokers,
one of which leads the single ``__transaction_state`` partition; around it, thin models of
what the shell and the rest of the cluster do:

  * the partition log: an append is committed (acks=all) after a replication delay, in order;
    a coordinator failover (or a crash and restart of the coordinator) keeps the committed
    records plus any prefix of the uncommitted ones, the old coordinator's pending appends
    fail with NOT_COORDINATOR, and the new leader loads the log after a delay;
  * the marker sender (broker/txn/markers.py): outstanding markers go to the data partitions,
    one in flight per partition and transaction, resent after a lost request or a retriable
    answer;
  * data partitions modelled from Kafka's data plane: producer epochs, sequence numbers,
    KIP-890's verification (AddPartitionsToTxn verifyOnly to the coordinator, with the
    verification guard a marker clears), markers fenced by producer and coordinator epochs;
  * transactional producers doing Kafka's client protocol: InitProducerId, AddPartitionsToTxn,
    one batch per partition, EndTxn (commit or abort), retrying on lost requests and retriable
    errors, rediscovering the coordinator; transaction version 0 or 2 per seed.

Faults: lost, delayed and duplicated messages, coordinator failover and restart, a second
producer with the same transactional id (a zombie), producers stalling past their transaction
timeout (the coordinator aborts), wall-clock steps on the brokers.

Invariants, checked after every event: a transaction is committed or aborted on every partition
it wrote to, never both; never against what its producer was told (EndTxn's answer); the epochs
of a transactional id in the committed log never go back; a fenced producer (an older epoch than
one a newer producer was given) never completes a transaction. After the faults heal, every
transaction gets its markers (no partition keeps an open transaction: no hanging transaction),
no transactional id stays in PrepareCommit/PrepareAbort, and every producer finishes.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import random

from broker.txn import records as rec
from broker.txn.state import (
    MARKER_RETRIABLE,
    TV_0,
    TV_2,
    Effects,
    Now,
    TxnConfig,
    TxnCoordinatorCore,
    TxnShard,
    TxnState,
)
from common.errors import ErrorCode as E

WALL0 = 1_700_000_000_000
RETRIABLE_RPC = {E.NOT_COORDINATOR, E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE,
                 E.CONCURRENT_TRANSACTIONS}
FENCED = {E.PRODUCER_FENCED, E.INVALID_PRODUCER_EPOCH, E.INVALID_PRODUCER_ID_MAPPING}


class InvariantViolation(AssertionError):
    pass


@dataclasses.dataclass
class Params:
    tv_level: int
    brokers: int = 3
    partitions: int = 4
    producers: int = 3
    drop: float = 0.05  # a message is lost
    dup: float = 0.05  # a partition processes a marker twice (a resent request meets the first one)
    late: float = 0.02  # a produce request is held back past its producer's timeout (then arrives)
    give_up: float = 0.3  # a producer whose batch timed out aborts instead of resending (delivery timeout)
    failover_every: tuple[int, int] = (300, 1500)
    zombie: float = 0.05  # per transaction: a second instance of the transactional id starts
    stall: float = 0.05  # per transaction: the producer waits past its timeout before EndTxn
    clock_step: float = 0.3  # per failover: some broker's wall clock steps
    park: bool = True  # AddPartitionsToTxn waits for the previous transaction's markers (as the shell does)
    abort_refused: float = 0.2  # a producer whose AddPartitionsToTxn is refused aborts at once (librdkafka)


@dataclasses.dataclass
class Broker:
    id: int
    core: TxnCoordinatorCore
    wall_offset: int = 0
    inflight: dict = dataclasses.field(default_factory=dict)  # (tid, tp) -> (coordinator epoch, request id)
    retry_at: dict = dataclasses.field(default_factory=dict)
    round_at: int | None = None


@dataclasses.dataclass
class Pending:
    broker: int
    epoch: int
    append: object
    record: tuple[bytes, bytes | None]


class DataPartition:
    """One data partition's leader, as far as transactions go (Kafka's ProducerStateManager,
    the verification guard of KIP-890 part 1, WriteTxnMarkers' checks)."""

    def __init__(self, world: World, idx: int):
        self.w = world
        self.tp = ("data", idx)
        self.epoch: dict[int, int] = {}  # producer id -> producer epoch
        self.last_seq: dict[int, int] = {}
        self.coord_epoch: dict[int, int] = {}
        self.open: dict[int, int] = {}  # producer id -> uid of its open transaction
        self.guard: dict[int, object] = {}  # producer id -> the verification in flight

    def produce(self, pid: int, epoch: int, seq: int, uid: int, tid: str, reply) -> None:
        cur = self.epoch.get(pid, -1)
        if epoch < cur:
            return reply(E.INVALID_PRODUCER_EPOCH)
        if epoch > cur:
            self.epoch[pid], self.last_seq[pid] = epoch, -1
        if seq <= self.last_seq[pid]:
            return reply(E.NONE)  # a duplicate (a retry after a lost answer)
        if self.open.get(pid) is not None:
            self._append(pid, seq, uid)
            return reply(E.NONE)
        # the first batch of a transaction here: ask the coordinator first (verifyOnly)
        guard = self.guard[pid] = object()

        def verified(err: int) -> None:
            if self.guard.get(pid) is not guard:
                return reply(E.TRANSACTION_ABORTABLE)  # a marker came meanwhile: this transaction is over here
            self.guard.pop(pid, None)
            if err in RETRIABLE_RPC:
                return reply("retriable")
            if err in FENCED:
                return reply(err)
            if err:
                return reply(E.TRANSACTION_ABORTABLE)
            if self.epoch.get(pid, -1) != epoch:
                return reply(E.INVALID_PRODUCER_EPOCH)
            self.open[pid] = uid
            self._append(pid, seq, uid)
            reply(E.NONE)
        self.w.verify(tid, pid, epoch, self.tp, verified)

    def _append(self, pid: int, seq: int, uid: int) -> None:
        if self.open[pid] != uid:
            raise InvariantViolation(f"{self.tp}: a batch of transaction {uid} went into transaction {self.open[pid]}")
        self.last_seq[pid] = seq
        self.w.data[uid].add(self.tp)

    def marker(self, pid: int, epoch: int, commit: bool, coordinator_epoch: int) -> int:
        if coordinator_epoch < self.coord_epoch.get(pid, -1):
            return E.TRANSACTION_COORDINATOR_FENCED
        if epoch < self.epoch.get(pid, -1):
            return E.INVALID_PRODUCER_EPOCH
        self.coord_epoch[pid] = coordinator_epoch
        if epoch > self.epoch.get(pid, -1):
            self.epoch[pid], self.last_seq[pid] = epoch, -1
        self.guard.pop(pid, None)
        uid = self.open.pop(pid, None)
        if uid is not None:
            self.w.outcome(uid, self.tp, commit)
        return E.NONE


class Producer:
    """One transactional producer instance (Kafka's TransactionManager, reduced)."""

    def __init__(self, world: World, tid: str, timeout_ms: int):
        self.w = world
        self.tid = tid
        self.timeout_ms = timeout_ms
        self.id = next(world.ids)
        self.pid = self.epoch = -1
        self.state = "init"
        self.coord: int | None = None
        self.rpc_id = 0
        self.uid: int | None = None
        self.parts: list[int] = []
        self.commit = True
        self.acked: set[int] = set()
        self.seq: dict[int, int] = {}
        self.bump = False  # after aborting over a lost batch: InitProducerId with our epoch (KIP-360)
        self.refused_in: int | None = None  # the coordinator epoch that refused the add of an empty abort
        self.stopping = False
        world.live_producers.add(self)

    # --- requests to the coordinator ----------------------------------------------------------
    def call(self, kind: str, *args) -> None:
        w = self.w
        self.rpc_id += 1
        rid, sent = self.rpc_id, w.now
        if self.coord is None or w.rng.random() < 0.1:
            self.coord = w.leader if w.rng.random() < 0.8 else w.rng.randrange(len(w.brokers))
        broker = self.coord

        def at_broker() -> None:
            epoch = w.leader_epoch  # of the coordinator answering (only the leader has the state loaded)
            w.handle(broker, kind, args, lambda resp: w.net(lambda: self.on_reply(rid, kind, resp, sent, epoch)))
        w.net(at_broker)
        w.at(w.now + 400, lambda: self.on_reply(rid, kind, "timeout", sent))

    def on_reply(self, rid: int, kind: str, resp, sent: int, epoch: int | None = None) -> None:
        if rid != self.rpc_id or self.state == "dead":
            return
        self.rpc_id += 1  # later answers to this request are stale
        err = resp if resp == "timeout" else (resp if isinstance(resp, int) else resp[0])
        if (kind == "add" and err == E.CONCURRENT_TRANSACTIONS and self.state == "add"
                and self.w.rng.random() < self.w.p.abort_refused):
            # librdkafka's abort_transaction() right after begin: its EndTxn was already queued
            # behind the AddPartitionsToTxn the coordinator refused (librdkafka issue 4849)
            self.w.trace(f"producer {self.id} aborts transaction {self.uid} before any partition was added")
            self.commit, self.parts, self.state = False, [], "end"
            self.refused_in = epoch
            return self.retry()
        if resp == "timeout" or err in RETRIABLE_RPC:
            if resp == "timeout" or err in (E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE):
                self.coord = None
            return self.w.at(self.w.now + self.w.rng.randint(20, 100), self.retry)
        getattr(self, f"on_{kind}")(err, resp, sent)

    def retry(self) -> None:
        if self.state == "init":
            self.call("init", self.tid, self.timeout_ms, (self.pid, self.epoch) if self.bump else None)
        elif self.state == "add":
            self.call("add", self.tid, self.pid, self.epoch, [("data", p) for p in self.parts], self.w.p.tv_level)
        elif self.state == "end":
            self.call("end", self.tid, self.pid, self.epoch, self.commit, self.w.p.tv_level)

    def die(self, why: str) -> None:
        self.state = "dead"
        self.w.live_producers.discard(self)
        self.w.trace(f"producer {self.id} ({self.tid}) dies: {why}")
        if not self.w.healing and self.w.current.get(self.tid) is self:
            self.w.at(self.w.now + self.w.rng.randint(50, 300), lambda: self.w.start_producer(self.tid))

    # --- the transaction ------------------------------------------------------------------------
    def on_init(self, err, resp, sent) -> None:
        if err:
            return self.die(f"InitProducerId: {E(err).name}")
        if self.bump and (resp[1], resp[2]) != (self.pid, self.epoch + 1):
            raise InvariantViolation(f"producer {self.id}: the KIP-360 epoch bump of ({self.pid}, {self.epoch}) gave "
                                     f"{resp[1:]}")
        _, self.pid, self.epoch = resp
        self.bump = False
        self.seq = {}  # sequences start again in a new epoch
        self.w.inits.setdefault(self.tid, []).append((self.w.now, self.pid, self.epoch))
        self.state = "idle"
        self.w.at(self.w.now + self.w.rng.randint(0, 50), self.begin)

    def begin(self) -> None:
        if self.state != "idle":
            return
        if self.stopping or self.w.healing_stop_new:
            self.state = "done"
            self.w.live_producers.discard(self)
            return
        w = self.w
        self.uid = next(w.uids)
        w.data[self.uid] = set()
        w.owner[self.uid] = (self.tid, self.id)
        self.parts = sorted(w.rng.sample(range(len(w.partitions)), w.rng.randint(1, min(3, len(w.partitions)))))
        self.commit = w.rng.random() < 0.75
        self.acked = set()
        self.state = "add"
        if w.rng.random() < w.p.zombie and not w.healing:
            w.trace(f"a second producer starts for {self.tid}: producer {self.id} becomes a zombie")
            w.start_producer(self.tid)
        self.retry()

    def on_add(self, err, resp, sent) -> None:
        if err in FENCED:
            return self.die(f"AddPartitionsToTxn: {E(err).name}")
        if err:
            raise InvariantViolation(f"producer {self.id}: AddPartitionsToTxn answered {E(err).name}")
        self.state = "produce"
        for p in self.parts:
            self.seq[p] = self.seq.get(p, -1) + 1
            self.send_batch(p)

    def send_batch(self, p: int) -> None:
        w, uid, seq, pid, epoch = self.w, self.uid, self.seq[p], self.pid, self.epoch

        def reply(err: int) -> None:
            w.net(lambda: self.on_batch(uid, p, err))
        w.net(lambda: w.partitions[p].produce(pid, epoch, seq, uid, self.tid, reply), late=w.p.late)
        w.at(w.now + 400, lambda: self.on_batch(uid, p, "timeout"))

    def resend(self, uid: int, p: int) -> None:
        if self.state == "produce" and uid == self.uid and p not in self.acked:
            self.send_batch(p)

    def on_batch(self, uid: int, p: int, err) -> None:
        if self.state != "produce" or uid != self.uid or p in self.acked:
            return
        if err == "timeout":
            if self.w.faults and self.w.rng.random() < self.w.p.give_up:
                # delivery timeout: give the batch up (it may still arrive) and abort the transaction;
                # its sequence number is spent, so the producer bumps its epoch afterwards (KIP-360)
                self.w.trace(f"producer {self.id} gives up a batch of transaction {self.uid} on {p}")
                self.commit = False
                self.bump = self.w.p.tv_level < TV_2
                err = "given-up"
            else:
                return self.send_batch(p)
        if err == "retriable":
            return self.w.at(self.w.now + self.w.rng.randint(20, 100), lambda: self.resend(uid, p))
        if err in FENCED:
            return self.die(f"Produce: {E(err).name}")
        if err in (E.TRANSACTION_ABORTABLE, "given-up"):
            self.commit = False
        elif err:
            raise InvariantViolation(f"producer {self.id}: Produce answered {E(err).name}")
        self.acked.add(p)
        if self.acked == set(self.parts):
            stall = self.timeout_ms + 200 if (self.w.rng.random() < self.w.p.stall and not self.w.healing) else 0
            self.w.at(self.w.now + stall + self.w.rng.randint(0, 30), self.end)

    def end(self) -> None:
        if self.state == "produce":
            self.state = "end"
            self.retry()

    def on_end(self, err, resp, sent) -> None:
        w = self.w
        if err in FENCED:
            return self.die(f"EndTxn: {E(err).name}")
        if err == E.INVALID_TXN_STATE and not self.parts and self.refused_in not in (None, w.leader_epoch):
            # the coordinator that refused the add moved (what it knew went with it): Kafka's answer
            return self.die("EndTxn(abort) of a transaction that added nothing, after the coordinator moved: "
                            "INVALID_TXN_STATE")
        self.refused_in = None
        if err:
            raise InvariantViolation(f"producer {self.id}: EndTxn({'commit' if self.commit else 'abort'}) "
                                     f"answered {E(err).name}")
        # a fenced producer never completes a transaction: no newer epoch was handed out before this request
        for t, pid, epoch in w.inits.get(self.tid, []):
            if t < sent and pid == self.pid and epoch > self.epoch:
                raise InvariantViolation(f"producer {self.id} ({self.tid}, epoch {self.epoch}) completed transaction "
                                         f"{self.uid} although epoch {epoch} was handed out at {t}")
        w.told[self.uid] = self.commit
        w.check_uid(self.uid)
        if w.p.tv_level >= TV_2 and resp[2] >= 0:
            self.pid, self.epoch = resp[1], resp[2]
            self.seq = {}  # sequences start again in a new epoch
        if self.bump:
            self.state = "init"
            return self.retry()
        self.state = "idle"
        w.at(w.now + w.rng.randint(0, 50), self.begin)


class World:
    def __init__(self, seed: int, params: Params | None = None, trace=None):
        self.rng = random.Random(seed)
        self.seed = seed
        self.p = params or Params(tv_level=TV_0 if self.rng.random() < 0.5 else TV_2, park=self.rng.random() < 0.7)
        self.trace_fn = trace
        self.now = 0
        self.queue: list = []
        self.seq = itertools.count()
        self.ids = itertools.count()
        self.uids = itertools.count()
        self.req_ids = itertools.count()
        self.next_pid = 1000
        self.faults = True
        self.healing = False
        self.healing_stop_new = False
        cfg = dict(max_timeout_ms=900_000, id_expiration_ms=10**12, num_partitions=1, tv_level=self.p.tv_level)
        self.brokers = [Broker(i, TxnCoordinatorCore(TxnConfig(**cfg))) for i in range(self.p.brokers)]
        self.leader, self.leader_epoch = 0, 0
        self.log: list[tuple[bytes, bytes | None]] = []  # committed records of __transaction_state-0
        self.pending: list[Pending] = []
        self.last_commit_at = 0
        self.partitions = [DataPartition(self, i) for i in range(self.p.partitions)]
        self.data: dict[int, set] = {}  # uid -> partitions that took its data
        self.outcomes: dict[int, dict] = {}  # uid -> {partition: commit?}
        self.told: dict[int, bool] = {}  # uid -> what EndTxn answered (commit?)
        self.owner: dict[int, tuple[str, int]] = {}
        self.inits: dict[str, list] = {}
        self.epochs_in_log: dict[str, tuple[int, int]] = {}
        self.current: dict[str, Producer] = {}
        self.live_producers: set[Producer] = set()
        self.events_run = 0
        b0 = self.brokers[0]
        self.run_fx(b0, b0.core.begin_load(0, 0))
        self.run_fx(b0, b0.core.complete_load(0, 0, TxnShard(0, 0), self.now_of(b0)))
        for i in range(self.p.producers):
            self.start_producer(f"tx-{i}")
        self.at(self.rng.randint(*self.p.failover_every), self.failover)
        self.at(100, self.tick)

    # --- plumbing -------------------------------------------------------------------------------
    def trace(self, msg: str) -> None:
        if self.trace_fn:
            self.trace_fn(f"{self.now:6d} {msg}")

    def at(self, t: int, fn) -> None:
        heapq.heappush(self.queue, (t, next(self.seq), fn))

    def net(self, fn, late: float = 0.0) -> None:
        """Deliver ``fn`` after a network delay (shorter than any request timeout, as on a TCP
        connection); lost, or with probability ``late`` held back for seconds, while faults are on."""
        if self.faults and self.rng.random() < self.p.drop:
            return
        if self.faults and self.rng.random() < late:
            return self.at(self.now + self.rng.randint(500, 3000), fn)
        self.at(self.now + self.rng.randint(1, 20), fn)

    def now_of(self, b: Broker) -> Now:
        return Now(WALL0 + self.now + b.wall_offset, self.now)

    def run_until(self, t: int) -> None:
        while self.queue and self.queue[0][0] <= t:
            self.now, _, fn = heapq.heappop(self.queue)
            fn()
            self.events_run += 1
        self.now = max(self.now, t)

    def start_producer(self, tid: str) -> None:
        p = Producer(self, tid, self.rng.choice([500, 1500, 4000]))
        self.current[tid] = p
        self.trace(f"producer {p.id} starts for {tid}")
        p.retry()

    # --- the coordinator shell ------------------------------------------------------------------
    def handle(self, bid: int, kind: str, args, reply) -> None:
        b = self.brokers[bid]
        core, now = b.core, self.now_of(b)
        if kind == "init":
            fx = core.init_producer_id(reply, *args, now)
            if fx.need_producer_id:
                self.next_pid += 1
                fx = core.init_producer_id(reply, *args, now, new_pid=self.next_pid)
        elif kind == "add":
            tid, pid, epoch, parts, tv = args
            fx = core.add_partitions(reply, tid, pid, epoch, parts, now, tv, park=self.p.park)
            if fx.parked:  # the shell's bound on the wait (CONCURRENT_WAIT_S)
                self.at(self.now + 500, lambda: core.unpark(tid, reply) and reply(E.CONCURRENT_TRANSACTIONS))
        else:
            tid, pid, epoch, commit, tv = args
            fx = core.end_txn(reply, tid, pid, epoch, commit, now, tv)
            if fx.need_producer_id:
                self.next_pid += 1
                fx = core.end_txn(reply, tid, pid, epoch, commit, now, tv, new_pid=self.next_pid)
        self.run_fx(b, fx)

    def verify(self, tid: str, pid: int, epoch: int, tp, done) -> None:
        """AddPartitionsToTxn verifyOnly from a partition leader to the coordinator."""
        bid = self.leader if self.rng.random() < 0.9 else self.rng.randrange(len(self.brokers))

        def at_coordinator() -> None:
            err = self.brokers[bid].core.verify_partitions(tid, pid, epoch, [tp])[tp]
            self.net(lambda: done(err))
        self.net(at_coordinator)
        # a lost request or answer: the leader gives up and the producer retries the batch
        # (it gets REQUEST_TIMED_OUT-like silence; modelled by the producer's own timeout)

    def run_fx(self, b: Broker, fx: Effects) -> None:
        for waiter, resp in fx.replies:
            waiter(resp)
        for msg in fx.log:
            self.trace(f"broker {b.id}: {msg}")
        for a in fx.appends:
            self.append(b, a)
        if fx.markers:
            self.schedule_round(b, 0)

    def append(self, b: Broker, a) -> None:
        if b.id != self.leader or a.coordinator_epoch != self.leader_epoch or 0 in b.core.loading:
            self.at(self.now, lambda: self.run_fx(b, b.core.on_append_done(a, E.NOT_COORDINATOR, self.now_of(b))))
            return
        entry = Pending(b.id, self.leader_epoch, a, a.record(self.p.tv_level))
        self.pending.append(entry)
        self.last_commit_at = max(self.last_commit_at, self.now + self.rng.randint(1, 40))
        self.at(self.last_commit_at, lambda: self.commit(entry))
        # in the leader's log, not committed yet (what this appends goes after it, committed after it)
        self.run_fx(b, b.core.on_appended(a, self.now_of(b)))

    def commit(self, entry: Pending) -> None:
        if not self.pending or self.pending[0] is not entry:
            return  # lost in a failover
        self.pending.pop(0)
        self.commit_record(entry.record)
        b = self.brokers[entry.broker]
        self.run_fx(b, b.core.on_append_done(entry.append, E.NONE, self.now_of(b)))

    def commit_record(self, record) -> None:
        self.log.append(record)
        key, value = record
        tid = rec.decode_key(key)
        if value is None:
            return
        v = rec.decode_value(value)
        prev = self.epochs_in_log.get(tid)
        if prev is not None and (v.producer_id != prev[0] or v.producer_epoch < prev[1]):
            if not (v.producer_id != prev[0] and v.producer_epoch == 0):  # a new producer id starts at 0
                raise InvariantViolation(f"{tid}: the log goes from producer {prev} to ({v.producer_id}, "
                                         f"{v.producer_epoch}) in {TxnState(v.status).kafka_name}")
        self.epochs_in_log[tid] = (v.producer_id, v.producer_epoch)

    def failover(self) -> None:
        if not self.faults:
            return
        old = self.brokers[self.leader]
        new = self.rng.randrange(len(self.brokers))  # the same broker: it crashed and restarted
        keep = self.rng.randint(0, len(self.pending))
        self.trace(f"failover: coordinator {old.id} -> {new} (epoch {self.leader_epoch + 1}), "
                   f"{keep} of {len(self.pending)} uncommitted records survive")
        for entry in self.pending[:keep]:
            self.commit_record(entry.record)
        lost, self.pending = self.pending, []
        self.run_fx(old, old.core.unload(0))
        if new == old.id:  # a restart loses the in-memory state
            old.core = TxnCoordinatorCore(dataclasses.replace(old.core.config))
            old.inflight.clear()
        for entry in lost:
            b = self.brokers[entry.broker]
            self.run_fx(b, b.core.on_append_done(entry.append, E.NOT_COORDINATOR, self.now_of(b)))
        if self.rng.random() < self.p.clock_step:
            victim = self.rng.choice(self.brokers)
            victim.wall_offset += self.rng.choice([-3_600_000, 3_600_000, 90_000])
            self.trace(f"broker {victim.id}'s wall clock steps to offset {victim.wall_offset}")
        self.leader, self.leader_epoch = new, self.leader_epoch + 1
        b, epoch = self.brokers[new], self.leader_epoch
        self.run_fx(b, b.core.begin_load(0, epoch))

        def loaded() -> None:
            if self.leader_epoch != epoch:
                return
            shard = TxnShard(0, epoch)
            for k, v in self.log:
                shard.replay(k, v)
            self.run_fx(b, b.core.complete_load(0, epoch, shard, self.now_of(b)))
        self.at(self.now + self.rng.randint(5, 60), loaded)
        self.at(self.now + self.rng.randint(*self.p.failover_every), self.failover)

    def tick(self) -> None:
        """Every 100 ms: the coordinators' timers (abort timed-out transactions, retry Complete*)."""
        for b in self.brokers:
            self.run_fx(b, b.core.abort_timed_out(self.now_of(b)))
            self.schedule_round(b, 0)
        self.at(self.now + 100, self.tick)

    # --- the marker sender ----------------------------------------------------------------------
    def schedule_round(self, b: Broker, delay: int) -> None:
        t = self.now + delay
        if b.round_at is None or b.round_at > t:
            b.round_at = t
            self.at(t, lambda: self.marker_round(b, t))

    def marker_round(self, b: Broker, t: int) -> None:
        if b.round_at != t:
            return
        b.round_at = None
        self.run_fx(b, b.core.retry_complete())
        next_retry = None
        for job in b.core.outstanding_markers():
            for tp in sorted(job.partitions):
                key = (job.transactional_id, tp)
                if key in b.inflight:
                    continue
                if b.retry_at.get(key, -1) > self.now:
                    next_retry = min(next_retry or b.retry_at[key], b.retry_at[key])
                    continue
                self.send_marker(b, job, tp)
        if next_retry is not None:
            self.schedule_round(b, next_retry - self.now)

    def send_marker(self, b: Broker, job, tp) -> None:
        key, rid = (job.transactional_id, tp), next(self.req_ids)
        b.inflight[key] = rid
        part = self.partitions[tp[1]]

        def answered(err) -> None:
            if b.inflight.get(key) != rid:
                return
            del b.inflight[key]
            if err == "timeout" or err in MARKER_RETRIABLE:
                b.retry_at[key] = self.now + 50
                self.schedule_round(b, 50)
            if err != "timeout":  # as broker/txn/markers.py: every answer goes to the core
                self.run_fx(b, b.core.on_marker_result(job.transactional_id, job.coordinator_epoch, tp, err))

        def at_partition() -> None:
            if self.faults and self.rng.random() < 0.03:
                err = E.NOT_LEADER_OR_FOLLOWER
            else:
                err = part.marker(job.producer_id, job.producer_epoch, job.commit, job.coordinator_epoch)
                if self.faults and self.rng.random() < self.p.dup:
                    part.marker(job.producer_id, job.producer_epoch, job.commit, job.coordinator_epoch)
            self.net(lambda: answered(err))
        self.net(at_partition)
        self.at(self.now + 300, lambda: answered("timeout"))

    # --- invariants -----------------------------------------------------------------------------
    def outcome(self, uid: int, tp, commit: bool) -> None:
        self.outcomes.setdefault(uid, {})[tp] = commit
        self.check_uid(uid)

    def check_uid(self, uid: int) -> None:
        got = set(self.outcomes.get(uid, {}).values())
        if len(got) > 1:
            raise InvariantViolation(f"transaction {uid} of {self.owner[uid]} committed on some partitions and "
                                     f"aborted on others: {self.outcomes[uid]}")
        if uid in self.told and got and got != {self.told[uid]}:
            raise InvariantViolation(f"transaction {uid} of {self.owner[uid]}: its producer was told "
                                     f"{'commit' if self.told[uid] else 'abort'}, the partitions "
                                     f"{self.outcomes[uid]}")

    def check_liveness(self) -> None:
        for p in self.partitions:
            if p.open:
                raise InvariantViolation(f"{p.tp} keeps open transactions after healing (hanging): {p.open}")
        for uid, tps in self.data.items():
            missing = tps - set(self.outcomes.get(uid, {}))
            if missing:
                raise InvariantViolation(f"transaction {uid} never got its markers on {sorted(missing)}")
            if self.told.get(uid) is True and not all(self.outcomes[uid].values()):
                raise InvariantViolation(f"transaction {uid} was committed but not on every partition")
        core = self.brokers[self.leader].core
        for shard in core.shards.values():
            for md in shard.txns.values():
                if md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT) or md.pending is not None:
                    raise InvariantViolation(f"{md.transactional_id} stays {md.state.kafka_name} "
                                             f"(pending {md.pending}) after healing")
        if self.live_producers:
            raise InvariantViolation(f"producers never finished: {[(p.id, p.tid, p.state) for p in self.live_producers]}")


@dataclasses.dataclass
class Result:
    seed: int
    tv_level: int
    transactions: int
    committed: int
    aborted: int
    events: int
    sim_ms: int


def run_seed(seed: int, safety_ms: int = 3000, liveness_ms: int = 8000, trace=None,
             params: Params | None = None) -> Result:
    w = World(seed, params, trace)
    try:
        w.run_until(safety_ms)
        # heal: no more faults; producers finish what they are doing and stop
        w.faults = False
        w.healing = True
        w.healing_stop_new = True
        w.trace("healing")
        for p in list(w.live_producers):
            p.stopping = True
        end = safety_ms + liveness_ms
        while w.now < end and (w.live_producers or any(p.open for p in w.partitions)
                               or w.brokers[w.leader].core.outstanding_markers() or w.pending):
            w.run_until(w.now + 100)
        w.run_until(w.now + 2500)  # time for the coordinator to abort what dead producers left open
        w.check_liveness()
    except InvariantViolation as e:
        raise InvariantViolation(f"seed {seed}: {e}\nreplay: python -m sim.txn.run --seeds 1 --start {seed} "
                                 f"--verbose") from None
    committed = sum(1 for v in w.told.values() if v)
    return Result(seed, w.p.tv_level, len(w.data), committed, len(w.told) - committed, w.events_run, w.now)


__all__ = ["World", "Params", "run_seed", "InvariantViolation", "Result"]
