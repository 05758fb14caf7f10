"""The data path of one flow A->B in one mirror process: "the mirror cluster simply acts as a
consumer of the source cluster" (seed 003).

Three clients:

- a *member* of the flow's consumer group on the **target** (``<source>-mm2`` unless ``group.id``),
  subscribed to the remote topics. It never fetches (its partitions stay paused): the group only
  shares the partitions among the running instances, and its committed offsets are where each
  source partition resumes (the next source offset to copy, under the remote topic's name). So
  the state lives in the target cluster, as Kafka Connect keeps MM2's source offsets there.
- a *source consumer* on the source, assigned the source partitions of the member's remote
  partitions, starting at the committed offsets (else ``auto.offset.reset``, earliest by default);
- a *producer* on the target writing each record to the same partition of the remote topic with
  its key, value, headers and timestamp.

At least once (the default): the producer is idempotent (acks=all); every ``offset.flush.interval.ms``
and before partitions move to another instance, the offsets of records the target acknowledged are
committed. A crash copies again what followed the last commit.

Exactly once (``exactly.once.source.support = enabled``): the producer is transactional and each
transaction carries the records and the offsets (``send_offsets_to_transaction`` with the member's
group metadata, KIP-447): the target holds either both or neither. A zombie instance that lost its
partitions in a rebalance is fenced by the group generation of its offset commit, and a new owner
reads the committed offsets only once no transaction holds them (KIP-447's stable offsets). A crash
aborts the open transaction (at the latest after ``transaction.timeout.ms``) and the restart resumes
at the last committed offset.

Each acknowledged record feeds MM2's offset-sync logic (``mirror.offsets.SyncEmitter``): syncs go
to ``mm2-offset-syncs.<target>.internal`` (on the source by default), only for committed records.
"""

from __future__ import annotations

import collections
import logging
import threading
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaError, KafkaException, TopicPartition

from common.clock import SYSTEM, Clock
from mirror import clients
from mirror.clients import MirrorError
from mirror.config import ClusterClients, FlowConfig
from mirror.formats import OffsetSync
from mirror.offsets import SyncEmitter

log = logging.getLogger("krafty.mirror")
_EOF = KafkaError._PARTITION_EOF
BATCH = 5000  # records per consume() at most (and per transaction in the exactly-once mode)
MAX_OUTSTANDING_SYNCS = 10


class Owned:
    """A source partition this instance copies now."""

    __slots__ = ("topic", "remote", "partition", "next", "committed", "acked", "emitter", "delayed",
                 "end", "copied", "first", "inflight")

    def __init__(self, topic: str, remote: str, partition: int, committed: int | None, max_lag: int):
        self.topic, self.remote, self.partition = topic, remote, partition
        self.committed = committed  # the next offset to copy as committed in the target (None: none yet)
        self.next = committed       # the next offset to produce
        self.acked = committed      # one past the last record the target acknowledged
        self.emitter = SyncEmitter(max_lag)
        self.delayed: tuple[int, int] | None = None  # the latest (upstream, downstream) not sent as a sync
        self.end = -1               # the source's high watermark, as the consumer last saw it
        self.copied = 0
        self.first: int | None = None  # the first offset copied when there was no committed one
        # (source offset, timestamp) of each record produced and not yet acknowledged, in order:
        # the idempotent producer reports a partition's deliveries in the order of production
        self.inflight: collections.deque = collections.deque()


@dataclass
class Progress:
    """Counters the progress reporter reads (under ``lock``)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    records: int = 0
    bytes: int = 0
    latencies_ms: list[int] = field(default_factory=list)  # source timestamp -> acknowledged, sampled
    lag: dict[str, int] = field(default_factory=dict)       # "topic-partition" (source) -> records behind
    transactions: int = 0
    aborted: int = 0
    state: str = "starting"


class Replicator:
    def __init__(self, flow: FlowConfig, source: ClusterClients, target: ClusterClients, instance_id: str,
                 clock: Clock = SYSTEM):
        self.flow = flow
        self.source, self.target = source, target
        self.clock = clock
        self.instance_id = instance_id
        self.eos = flow.exactly_once
        self.progress = Progress()
        self.owned: dict[tuple[str, int], Owned] = {}          # (source topic, partition)
        self.by_remote: dict[tuple[str, int], Owned] = {}      # (remote topic, partition)
        self.remote_to_source: dict[str, str] = {}
        self._wanted: list[str] | None = None                  # remote topics to subscribe (set by topic sync)
        self._subscribed: list[str] = []
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        self.fatal: str | None = None
        self.txn_failed: str | None = None
        self.in_txn = False
        self.pending_syncs: dict[tuple[str, int], OffsetSync] = {}
        self.txn_syncs: dict[tuple[str, int], OffsetSync] = {}
        self.outstanding_syncs = 0
        self.leader_topic: str | None = None
        self.timeout = flow["admin.timeout.ms"] / 1000
        self.flush_interval = flow["offset.flush.interval.ms"] / 1000
        boundary = flow["transaction.boundary.interval.ms"]
        self.txn_interval = (boundary if boundary is not None else flow["offset.flush.interval.ms"]) / 1000 \
            if flow["transaction.boundary"] == "interval" else 0.0
        self.sync_topic = flow.policy.offset_syncs_topic(flow.target)
        self.emit_syncs = flow["emit.offset-syncs.enabled"]
        reset = source.conf("consumer").get("auto.offset.reset", "earliest")
        # where a partition without a committed offset starts (the source consumer has no group)
        self.reset_offset = OFFSET_END if reset in ("latest", "largest", "end") else OFFSET_BEGINNING

    # ------------------------------------------------------------------ topics
    def set_topics(self, replicated: dict[str, str]) -> None:
        """Called by the topic sync (another thread) with source topic -> remote topic for the
        topics that exist on both clusters."""
        with self._lock:
            self.remote_to_source = {r: s for s, r in replicated.items()}
            self._wanted = sorted(replicated.values())

    def is_leader(self) -> bool:
        """Whether this instance owns partition 0 of the first remote topic: exactly one instance
        of a settled group does, and it alone emits checkpoints and syncs group offsets."""
        with self._lock:
            first = self._subscribed[0] if self._subscribed else None
        return first is not None and (first, 0) in self.by_remote

    # ------------------------------------------------------------------ clients
    def _make_clients(self) -> None:
        f = self.flow
        self.member = clients.consumer(self.target, **{
            "group.id": f.group_id, "isolation.level": "read_committed",
            "partition.assignment.strategy": "cooperative-sticky",
            # partitions the topic sync adds must reach the group soon (librdkafka's default: 5 min)
            "topic.metadata.refresh.interval.ms": min(30000, max(1000, f["refresh.topics.interval.seconds"] * 1000)),
            "client.id": f"krafty-mirror-{f.name}-member"})
        src_extra = {"client.id": f"krafty-mirror-{f.name}-source", "enable.partition.eof": False}
        if self.eos:
            src_extra.setdefault("isolation.level", "read_committed")
        src_conf = self.source.conf("consumer")
        if "isolation.level" not in src_conf and not self.eos:
            src_extra["isolation.level"] = "read_uncommitted"  # MM2's (the Java consumer's) default
        self.src = clients.consumer(self.source, **src_extra)
        self.producer = self._new_producer()
        if self.emit_syncs:
            where = self.source if f["offset-syncs.topic.location"] == "source" else self.target
            self.sync_producer = clients.producer(where, **{"client.id": f"krafty-mirror-{f.name}-offset-syncs",
                                                            "on_delivery": self._sync_delivered})

    def _new_producer(self):
        extra = {"client.id": f"krafty-mirror-{self.flow.name}", "on_delivery": self._delivered,
                 "linger.ms": 5, "batch.size": 1048576, "queue.buffering.max.kbytes": 65536}
        if self.eos:
            extra["transactional.id"] = f"{self.flow.group_id}-{self.flow.name}-{self.instance_id}"
            # a crashed instance's open transaction holds B's last stable offset until it times out
            extra["transaction.timeout.ms"] = self.target.conf("producer").get("transaction.timeout.ms", 10000)
        p = clients.producer(self.target, **extra)
        if self.eos:
            self._call(lambda: p.init_transactions(self.timeout), "initialize the transactional producer")
        return p

    def _call(self, fn, what: str):
        try:
            return fn()
        except KafkaException as e:
            err = e.args[0]
            raise MirrorError(f"flow {self.flow.name}: cannot {what} on {self.target.alias}: "
                              f"{err.name()}: {err.str()}") from None

    # ------------------------------------------------------------------ rebalances
    def _committed(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        deadline = self.clock.monotonic() + max(self.timeout, 30)
        while True:
            try:
                return self.member.committed(tps, timeout=self.timeout)
            except KafkaException as e:
                err = e.args[0]
                # a transaction of a previous owner still holds them (KIP-447): wait for its end
                if self.clock.monotonic() > deadline or not (err.retriable() or err.code() in (
                        KafkaError.UNSTABLE_OFFSET_COMMIT, KafkaError._TIMED_OUT)):
                    raise MirrorError(f"flow {self.flow.name}: cannot read the committed offsets of group "
                                      f"{self.flow.group_id} on {self.target.alias}: {err.name()}: {err.str()}") from None
                log.info("flow %s: committed offsets not readable yet (%s); retrying", self.flow.name, err.name())

    def _on_assign(self, consumer, partitions: list[TopicPartition]) -> None:
        mine = [tp for tp in partitions if tp.topic in self.remote_to_source]
        committed = self._committed([TopicPartition(tp.topic, tp.partition) for tp in mine]) if mine else []
        consumer.incremental_assign(partitions)  # (the member's assignor is always cooperative-sticky)
        consumer.pause(partitions)  # the member shares work; the source consumer fetches
        src_tps = []
        for tp in committed:
            source_topic = self.remote_to_source[tp.topic]
            off = tp.offset if tp.offset >= 0 else None
            st = Owned(source_topic, tp.topic, tp.partition, off, self.flow["offset.lag.max"])
            self.owned[(source_topic, tp.partition)] = st
            self.by_remote[(tp.topic, tp.partition)] = st
            src_tps.append(TopicPartition(source_topic, tp.partition, off if off is not None else self.reset_offset))
        if src_tps:
            self.src.incremental_assign(src_tps)
        log.info("flow %s: assigned %s", self.flow.name, ", ".join(f"{t.topic}-{t.partition}@{t.offset}" for t in src_tps))

    def _on_revoke(self, consumer, partitions: list[TopicPartition]) -> None:
        self._commit(final=True)
        self._release(partitions)
        consumer.incremental_unassign(partitions)

    def _on_lost(self, consumer, partitions: list[TopicPartition]) -> None:
        # the group has moved on: nothing may be committed under the old generation
        if self.eos and self.in_txn:
            self._abort("partitions lost")
        self._release(partitions)
        consumer.incremental_unassign(partitions)

    def _release(self, partitions: list[TopicPartition]) -> None:
        src_tps = []
        for tp in partitions:
            st = self.by_remote.pop((tp.topic, tp.partition), None)
            if st is None:
                continue
            self.owned.pop((st.topic, st.partition), None)
            src_tps.append(TopicPartition(st.topic, st.partition))
            with self.progress.lock:
                self.progress.lag.pop(f"{st.topic}-{st.partition}", None)
        if src_tps:
            self.src.incremental_unassign(src_tps)

    # ------------------------------------------------------------------ deliveries
    def _delivered(self, err, msg) -> None:
        st = self.by_remote.get((msg.topic(), msg.partition()))
        if st is None or not st.inflight:
            return  # a partition released meanwhile
        upstream, ts = st.inflight.popleft()
        if err is not None:
            if self.eos:
                self.txn_failed = self.txn_failed or f"{err.name()}: {err.str()}"
            else:
                self.fatal = self.fatal or (f"flow {self.flow.name}: the target refused a record of "
                                            f"{st.topic}-{st.partition} at offset {upstream}: {err.name()}: {err.str()}")
            return
        st.acked = upstream + 1
        st.copied += 1
        if ts > 0 and (st.copied & 63) == 0:
            lat = self.clock.wall_ms() - ts
            with self.progress.lock:
                if len(self.progress.latencies_ms) < 100_000:
                    self.progress.latencies_ms.append(lat)
        if self.emit_syncs:
            down = msg.offset()
            if not st.emitter.update(upstream, down):
                st.delayed = (upstream, down)
            else:
                sync = OffsetSync(st.topic, st.partition, upstream, down)
                st.delayed = None
                if self.eos:
                    self.txn_syncs[(st.topic, st.partition)] = sync  # sent once the transaction commits
                else:
                    self.pending_syncs[(st.topic, st.partition)] = sync
                    self._fire_syncs(poll=False)  # as MM2 does after each record, up to 10 in flight

    def _sync_delivered(self, err, msg) -> None:
        self.outstanding_syncs -= 1
        if err is not None:
            log.error("flow %s: an offset sync was not written to %s: %s", self.flow.name, self.sync_topic, err.str())

    def _fire_syncs(self, poll: bool = True) -> None:
        while self.pending_syncs and self.outstanding_syncs < MAX_OUTSTANDING_SYNCS:
            key = next(iter(self.pending_syncs))
            sync = self.pending_syncs.pop(key)
            self.outstanding_syncs += 1
            self.sync_producer.produce(self.sync_topic, key=sync.key(), value=sync.value(), partition=0)
        if poll:
            self.sync_producer.poll(0)

    def _promote_delayed(self) -> None:
        for st in self.owned.values():
            if st.delayed is not None:
                self.pending_syncs[(st.topic, st.partition)] = OffsetSync(st.topic, st.partition, *st.delayed)
                st.delayed = None

    # ------------------------------------------------------------------ commits
    def _commit(self, final: bool = False) -> None:
        if self.eos:
            self._commit_txn()
            return
        if final:
            self.producer.flush(self.flow["offset.flush.timeout.ms"] / 1000)
        self._check_fatal()
        offsets = [TopicPartition(st.remote, st.partition, st.acked) for st in self.owned.values()
                   if st.acked is not None and st.acked != st.committed]
        if offsets:
            try:
                self.member.commit(offsets=offsets, asynchronous=False)
            except KafkaException as e:
                err = e.args[0]
                # a rebalance took the partitions: the new owner copies again from the last commit
                log.warning("flow %s: offset commit failed: %s: %s", self.flow.name, err.name(), err.str())
                return
            for tp in offsets:
                st = self.by_remote.get((tp.topic, tp.partition))
                if st is not None:
                    st.committed = tp.offset
        if self.emit_syncs:
            self._promote_delayed()

    def _commit_txn(self) -> None:
        if not self.in_txn:
            return
        offsets = [TopicPartition(st.remote, st.partition, st.next) for st in self.owned.values()
                   if st.next is not None and st.next != st.committed]
        try:
            if not self.txn_failed:
                if offsets:
                    self.producer.send_offsets_to_transaction(offsets, self.member.consumer_group_metadata(),
                                                              self.timeout)
                for _ in range(5):
                    try:
                        self.producer.commit_transaction(self.timeout)
                        break
                    except KafkaException as e:
                        if not e.args[0].retriable():
                            raise
                else:
                    raise MirrorError(f"flow {self.flow.name}: a transaction could not be committed")
        except KafkaException as e:
            err = e.args[0]
            self.txn_failed = self.txn_failed or f"{err.name()}: {err.str()}"
            if err.fatal():
                log.warning("flow %s: the transactional producer failed (%s); starting a new one",
                            self.flow.name, self.txn_failed)
                self._rewind()
                self.producer = self._new_producer()
                return
        if self.txn_failed:
            self._abort(self.txn_failed)
            return
        self.in_txn = False
        for tp in offsets:
            st = self.by_remote.get((tp.topic, tp.partition))
            if st is not None:
                st.committed = tp.offset
        with self.progress.lock:
            self.progress.transactions += 1
        if self.emit_syncs:
            self.pending_syncs.update(self.txn_syncs)
            self.txn_syncs.clear()
            self._promote_delayed()

    def _abort(self, why: str) -> None:
        log.warning("flow %s: aborting the transaction: %s", self.flow.name, why)
        try:
            self.producer.abort_transaction(self.timeout)
            # serve the purged records' delivery reports now, before any record of the next transaction
            self.producer.flush(self.timeout)
        except KafkaException as e:
            log.warning("flow %s: abort failed (%s); starting a new producer", self.flow.name, e.args[0].str())
            self.producer = self._new_producer()
        with self.progress.lock:
            self.progress.aborted += 1
        self._rewind()

    def _rewind(self) -> None:
        """After an aborted transaction: copy again from the committed offsets."""
        self.in_txn = False
        self.txn_failed = None
        self.txn_syncs.clear()
        for key, st in self.owned.items():
            st.inflight.clear()
            st.emitter = SyncEmitter(self.flow["offset.lag.max"])
            st.delayed = None
            st.next = st.acked = st.committed
            offset = st.committed if st.committed is not None else (st.first if st.first is not None
                                                                    else self.reset_offset)
            try:
                self.src.seek(TopicPartition(key[0], key[1], offset))
            except KafkaException as e:
                log.warning("flow %s: seek %s-%d to %s failed: %s", self.flow.name, key[0], key[1], offset,
                            e.args[0].str())

    def _unknown_partition(self, e: KafkaException, st: Owned) -> None:
        """A partition the topic sync just added, not yet in the producer's metadata: refresh it."""
        err = e.args[0]
        if err.code() not in (KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC):
            raise MirrorError(f"flow {self.flow.name}: cannot produce to {st.remote}-{st.partition}: {err.str()}")
        deadline = self.clock.monotonic() + self.timeout
        while self.clock.monotonic() < deadline and not self.stopping.is_set():
            try:
                md = self.producer.list_topics(st.remote, timeout=5)
                t = md.topics.get(st.remote)
                if t is not None and st.partition in t.partitions:
                    return
            except KafkaException:
                pass
            self.stopping.wait(0.2)
        raise MirrorError(f"flow {self.flow.name}: {st.remote}-{st.partition} is not in {self.target.alias}'s "
                          f"metadata after {self.timeout:.0f} s")

    def _check_fatal(self) -> None:
        if self.fatal:
            raise MirrorError(self.fatal)

    # ------------------------------------------------------------------ the loop
    def run(self) -> None:
        self._make_clients()
        try:
            self._loop()
        finally:
            self._close()

    def _loop(self) -> None:
        clock = self.clock
        last_flush = clock.monotonic()
        txn_opened = 0.0
        with self.progress.lock:
            self.progress.state = "running"
        while not self.stopping.is_set():
            self._check_fatal()
            with self._lock:
                wanted = self._wanted
                self._wanted = None
            if wanted is not None and wanted != self._subscribed:
                if wanted:
                    self.member.subscribe(wanted, on_assign=self._on_assign, on_revoke=self._on_revoke,
                                          on_lost=self._on_lost)
                else:
                    self.member.unsubscribe()
                with self._lock:
                    self._subscribed = wanted
            self.member.poll(0 if self.owned else 0.1)
            msgs = self._fetch() if self.owned else []
            if msgs:
                if self.eos and not self.in_txn:
                    self._call(self.producer.begin_transaction, "begin a transaction")
                    self.in_txn = True
                    txn_opened = clock.monotonic()
                self._copy(msgs)
            self.producer.poll(0)
            now = clock.monotonic()
            if self.eos:
                if self.in_txn and (self.txn_interval == 0 or now - txn_opened >= self.txn_interval):
                    self._commit_txn()
            elif now - last_flush >= self.flush_interval:
                self._commit()
                last_flush = now
            if self.emit_syncs and (self.pending_syncs or self.outstanding_syncs):
                self._fire_syncs()
            if now - getattr(self, "_lag_at", 0.0) >= 1.0:
                self._lag_at = now
                self._update_lag()

    def _copy(self, msgs: list) -> None:
        """The hot path: each record to the same partition of the remote topic."""
        owned = self.owned.get
        produce = self.producer.produce
        n = nbytes = 0
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() != _EOF:
                    if err.fatal():
                        raise MirrorError(f"flow {self.flow.name}: the source consumer failed: {err.str()}")
                    log.warning("flow %s: source consumer: %s", self.flow.name, err.str())
                continue
            part = m.partition()
            st = owned((m.topic(), part))
            if st is None:
                continue  # released meanwhile
            off = m.offset()
            nxt = st.next
            if nxt is None:
                if st.first is None:
                    st.first = off
            elif off < nxt:
                continue  # fetched before a rewind
            value = m.value()
            ts = m.timestamp()[1]
            try:
                produce(st.remote, value, m.key(), partition=part, timestamp=ts if ts > 0 else 0, headers=m.headers())
            except (BufferError, KafkaException) as e:
                self._produce_retry(e, st, m)
            st.inflight.append((off, ts))
            st.next = off + 1
            n += 1
            if value:
                nbytes += len(value)
        with self.progress.lock:
            self.progress.records += n
            self.progress.bytes += nbytes

    def _produce_retry(self, e: Exception, st: Owned, m) -> None:
        """A full producer queue (wait for deliveries) or a partition not yet in its metadata."""
        while True:
            if isinstance(e, BufferError):
                self.producer.poll(0.05)
            else:
                self._unknown_partition(e, st)
            try:
                self.producer.produce(st.remote, m.value(), m.key(), partition=m.partition(),
                                      timestamp=max(m.timestamp()[1], 0), headers=m.headers())
                return
            except (BufferError, KafkaException) as again:
                e = again

    def _fetch(self) -> list:
        """What the source consumer has, without waiting for a whole batch (librdkafka's consume()
        waits for num_messages or the timeout): at most 20 ms for the first record."""
        msgs = self.src.consume(BATCH, 0)
        if msgs:
            return msgs
        m = self.src.poll(0.02)
        if m is None:
            return []
        return [m, *self.src.consume(BATCH - 1, 0)]

    def _update_lag(self) -> None:
        lag = {}
        for st in self.owned.values():
            try:
                _, hi = self.src.get_watermark_offsets(TopicPartition(st.topic, st.partition), cached=True)
            except KafkaException:
                continue
            if hi is not None and hi >= 0:
                st.end = hi
                pos = st.acked if st.acked is not None else (st.next if st.next is not None else 0)
                lag[f"{st.topic}-{st.partition}"] = max(0, hi - pos)
        with self.progress.lock:
            self.progress.lag = lag

    def _close(self) -> None:
        with self.progress.lock:
            self.progress.state = "stopping"
        try:
            if not self.fatal:
                self._commit(final=True)
        except (MirrorError, KafkaException) as e:
            log.warning("flow %s: final commit failed: %s", self.flow.name, e)
        for c in ("member", "src"):
            client = getattr(self, c, None)
            if client is not None:
                try:
                    client.close()
                except (KafkaException, RuntimeError):
                    pass
        if getattr(self, "producer", None) is not None:
            self.producer.flush(5)
        if getattr(self, "sync_producer", None) is not None:
            self._promote_delayed()
            if self.pending_syncs:
                self._fire_syncs()
            self.sync_producer.flush(5)
        with self.progress.lock:
            self.progress.state = "stopped"
