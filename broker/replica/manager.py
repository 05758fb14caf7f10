"""The replica manager: this broker's partitions, driven by metadata deltas.

It owns the logs (through the LogManager); as leader it appends produced batches, serves
reads bounded by the high watermark, learns followers' positions from their fetches, and
sends the ISR changes the partition logic proposes to the controller (AlterPartition); as
follower it hands partitions to the replica fetchers. Waiters: fetches from consumers wait
for the high watermark to move, fetches from followers for the log end to move, acks=all
produces for the high watermark to pass their batch (the purgatories)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Callable, Iterable

from broker.log.log import Log, LogClosedError
from broker.log.manager import LogManager
from broker.log.producer_state import COORDINATOR
from broker.replica.alter_log_dirs import ReplicaAlterLogDirsManager
from broker.replica.fetcher import ReplicaFetcherManager
from broker.replica.partition import PartitionState
from broker.replica.throttle import ReplicationQuota
from broker.replica.txn_verifier import TxnVerifier
from common.clock import SYSTEM, Clock
from common.config import topic_defaults
from common.errors import ErrorCode, KafkaError
from metadata.delta import MetadataDelta
from metadata.image import MetadataImage, PartitionRegistration

log = logging.getLogger("krafty.replica")

TopicPartition = tuple[str, int]
CREATE_SLICE = 100  # a delta with more new local partitions than this creates their logs in slices


@dataclasses.dataclass(slots=True)
class Partition:
    state: PartitionState
    log: Log


def _expire(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


class _Waiters:
    def __init__(self) -> None:
        # per partition, the futures of the long polls waiting on it (a dict: O(1) removal when
        # a poll times out, with thousands of consumers on one partition)
        self._by_tp: dict[TopicPartition, dict[asyncio.Future, None]] = {}

    def wake(self, tp: TopicPartition) -> None:
        for fut in self._by_tp.pop(tp, ()):
            if not fut.done():
                fut.set_result(None)

    async def wait(self, tps: Iterable[TopicPartition], timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        keys = list(tps)
        by_tp = self._by_tp
        for tp in keys:
            waiting = by_tp.get(tp)
            if waiting is None:
                waiting = by_tp[tp] = {}
            waiting[fut] = None
        # the timeout resolves the future like a wake does (most long polls end so): a plain
        # timer, none of wait_for's waiter future, callbacks and cancellation
        timer = loop.call_later(timeout_s, _expire, fut)
        try:
            await fut
        finally:
            timer.cancel()
            for tp in keys:
                waiting = by_tp.get(tp)
                if waiting and waiting.pop(fut, 0) is None and not waiting:
                    del by_tp[tp]

    def wake_all(self) -> None:
        for tp in list(self._by_tp):
            self.wake(tp)


class ReplicaManager:
    def __init__(self, broker_id: int, config, log_manager: LogManager, *, channel=None,
                 broker_epoch: Callable[[], int] = lambda: -1,
                 endpoint_of: Callable[[int], tuple[str, int] | None] = lambda b: None, clock: Clock = SYSTEM):
        self.broker_id = broker_id
        # ISR lag and follower progress run on clock.monotonic_ms (a wall-clock step must not
        # shrink every ISR); log appends are stamped with clock.wall_ms
        self.clock = clock
        self.config = config
        self.logs = log_manager
        self.channel = channel
        self.broker_epoch = broker_epoch
        self.partitions: dict[TopicPartition, Partition] = {}
        # partitions stopped because their log dir failed, or whose log could not be made while a dir
        # is offline (KIP-858): KAFKA_STORAGE_ERROR to clients, reported to the controller -> topic id
        self.offline_partitions: dict[TopicPartition, uuid.UUID] = {}
        self.on_partitions_offline: Callable[[], None] = lambda: None  # the broker tells the controller
        log_manager.failure_channel.add_handler(self._on_dir_offline)
        self._defaults = topic_defaults(config)
        self._lag_ms = config["replica.lag.time.max.ms"]
        self._hw_waiters = _Waiters()
        self._leo_waiters = _Waiters()
        self._on_change: dict[TopicPartition, list[Callable[[], None]]] = {}  # see on_next_change
        self._low_watermark_waiters = _Waiters()  # DeleteRecords waiting for followers' log starts
        # told first whenever a partition's log end, high watermark, log start or leadership moves
        # (the fetch sessions' news, KafkaApis._partition_news)
        self.news: Callable[[TopicPartition, bool], None] | None = None  # (tp, wake followers' polls)
        self.fetchers = ReplicaFetcherManager(self, broker_id, config, endpoint_of, clock)
        # AlterReplicaLogDirs: replicas moving between this broker's log dirs
        self.alter_log_dirs = ReplicaAlterLogDirsManager(
            self, chunk_bytes=config["replica.fetch.max.bytes"],
            rate=config["replica.alter.log.dirs.io.max.bytes.per.second"], window_num=config["replication.quota.window.num"],
            window_s=config["replication.quota.window.size.seconds"], clock=clock)
        # KIP-890: transactional appends checked with the transaction coordinator first
        self.txn_verifier = TxnVerifier(lambda: self._image, endpoint_of, lambda: self.fetchers.security,
                                        timeout_s=config["request.timeout.ms"] / 1000, clock=clock)
        self.verification_enabled: bool = config["transaction.partition.verification.enable"]
        self._alter_wake: asyncio.Event | None = None
        self._tasks: list[asyncio.Task] = []
        # partitions of a large delta whose logs are still to be made: tp -> (topic id, registration, leader?)
        self._pending: dict[TopicPartition, tuple[uuid.UUID, PartitionRegistration, bool]] = {}
        self._pending_new: set[TopicPartition] = set()  # of those, the replicas just assigned (is_new)
        self._creating: asyncio.Task | None = None
        self._image: MetadataImage | None = None
        self.isr_shrinks = self.isr_expands = 0  # ISR changes committed for partitions we lead (metrics)
        # replication throttles (broker/replica/throttle.py): the leader's sends, our fetches as follower
        wn, ws = config["replication.quota.window.num"], config["replication.quota.window.size.seconds"]
        self.leader_quota = ReplicationQuota(broker_id, "leader.replication.throttled.replicas",
                                             config["leader.replication.throttled.rate"], wn, ws)
        self.follower_quota = ReplicationQuota(broker_id, "follower.replication.throttled.replicas",
                                               config["follower.replication.throttled.rate"], wn, ws)

    async def start(self) -> None:
        self._alter_wake = asyncio.Event()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._isr_shrink_loop()), loop.create_task(self._alter_partition_loop())]

    # --- metadata ------------------------------------------------------------------------
    def topic_config(self, image: MetadataImage, topic: str) -> dict:
        cfg = dict(self._defaults)
        cfg.update(image.topic_config(topic))
        return cfg

    def set_topic_defaults(self, defaults: dict) -> None:
        """The broker's topic defaults changed (dynamic log.* configs): every log takes them
        where its topic has no override."""
        self._defaults = dict(defaults)
        image = self._image
        if image is None:
            return
        for topic in {tp[0] for tp in self.partitions}:
            if topic in image.topics_by_name:
                self.logs.update_config(topic, self.topic_config(image, topic))

    def min_insync_replicas(self, image: MetadataImage, topic: str) -> int:
        v = image.topic_config(topic).get("min.insync.replicas")
        return int(v) if v is not None else self._defaults["min.insync.replicas"]

    def on_metadata(self, delta: MetadataDelta, image: MetadataImage) -> None:
        self._image = image
        changes = delta.local_changes(self.broker_id)
        for tp in changes.deletes:
            self._pending.pop(tp, None)
            self._delete(tp)
        roles = [(tp, tid, reg, True) for tp, (tid, reg) in changes.leaders.items()]
        roles += [(tp, tid, reg, False) for tp, (tid, reg) in changes.followers.items()]
        # internal topics (__consumer_offsets) are made at once: the group coordinator, a later
        # publisher of the same delta, loads their logs right away
        new = [r[0] for r in roles if r[0] not in self.partitions and r[0] not in self._pending
               and not r[0][0].startswith("__") and self.logs.get(*r[0]) is None]
        defer = set(new) if len(new) > CREATE_SLICE else set()
        now = self.clock.monotonic_ms()
        # a replica assigned by records after our registration is new: its log may be made while a
        # log dir is offline (one replayed from before may have its log in the failed dir)
        epoch = self.broker_epoch()
        after_registration = 0 <= epoch <= delta.image.offset
        for tp, tid, reg, leader in roles:
            if tp in self.offline_partitions:
                if self.offline_partitions[tp] == tid:
                    continue  # stays offline until a restart with the dir healthy
                del self.offline_partitions[tp]  # a new topic of the same name
            is_new = after_registration and self._newly_assigned(delta, tp, tid)
            if tp in self._pending or tp in defer:
                self._pending[tp] = (tid, reg, leader)  # the latest role wins when its log is made
                if is_new:
                    self._pending_new.add(tp)
            else:
                self._become(tp, tid, reg, leader, image, now, is_new=is_new)
        if defer:
            log.info("creating %d new logs in slices of %d", len(defer), CREATE_SLICE)
        if self._pending and (self._creating is None or self._creating.done()):
            self._creating = asyncio.get_running_loop().create_task(self._create_pending())
        for (rtype, name) in delta.configs:
            if rtype == 2 and name in image.topics_by_name:
                self.logs.update_config(name, self.topic_config(image, name))
        if delta.snapshot_loaded:
            # drop partitions the image no longer assigns to us (e.g. deleted while we were down)
            for tp in list(self.partitions) + list(self._pending):
                t = image.topics_by_name.get(tp[0])
                p = t.partitions.get(tp[1]) if t else None
                if p is None or self.broker_id not in p.replicas:
                    self._pending.pop(tp, None)
                    self._delete(tp)
        if self._alter_wake is not None:
            self._alter_wake.set()

    def _newly_assigned(self, delta: MetadataDelta, tp: TopicPartition, tid: uuid.UUID) -> bool:
        base = delta.image.topics_by_id.get(tid)
        old = base.partitions.get(tp[1]) if base is not None else None
        return old is None or self.broker_id not in old.replicas

    def _become(self, tp: TopicPartition, tid: uuid.UUID, reg: PartitionRegistration, leader: bool,
                image: MetadataImage, now: int, is_new: bool = True) -> None:
        try:
            part = self._partition(image, tp, tid, is_new)
        except KafkaError as e:
            if e.code != ErrorCode.KAFKA_STORAGE_ERROR:
                raise
            log.error("%s-%d: offline: %s", tp[0], tp[1], e.message)
            self.offline_partitions[tp] = tid
            self.on_partitions_offline()
            return
        lg, st = part.log, part.state
        if leader:
            isr_before = len(st.isr) if st.is_leader else None
            if st.make_leader(reg, lg.log_end_offset, now):
                lg.abort_append()  # a write still in flight belongs to the old role or epoch
                lg.leader_epoch_cache.assign(reg.leader_epoch, lg.log_end_offset)
                log.info("%s-%d: leader in epoch %d at offset %d, ISR %s", tp[0], tp[1], reg.leader_epoch,
                         lg.log_end_offset, list(reg.isr), extra={"topic": tp[0], "partition": tp[1]})
            elif isr_before is not None:  # still the leader: the controller changed the ISR (a fenced follower)
                self._count_isr_change(isr_before, len(st.isr))
            self.fetchers.unfollow(tp)
        elif st.make_follower(reg):
            lg.abort_append()
            log.info("%s-%d: following %d in epoch %d", tp[0], tp[1], reg.leader, reg.leader_epoch,
                     extra={"topic": tp[0], "partition": tp[1]})
            self.fetchers.follow(tp, reg.leader, reg.leader_epoch, st.high_watermark)
        dest = self.logs.interrupted_moves.pop(tp, None)
        if dest is not None and dest != self.logs.dir_of(lg) and not self.logs.failure_channel.is_offline(dest):
            self.alter_log_dirs.start(tp, dest)  # a move a restart interrupted starts again
        self._wake(tp)

    async def _create_pending(self) -> None:
        """Make the logs of a large metadata delta (thousands of new partitions) a slice at a
        time, yielding to requests and heartbeats between slices instead of stalling the loop
        for seconds. Until its log exists a partition answers NOT_LEADER_OR_FOLLOWER /
        UNKNOWN_TOPIC_OR_PARTITION, which clients and followers retry."""
        t0 = self.clock.monotonic()
        made = 0
        while self._pending:
            for _ in range(min(CREATE_SLICE, len(self._pending))):
                tp, (tid, reg, leader) = next(iter(self._pending.items()))
                del self._pending[tp]
                is_new = tp in self._pending_new
                self._pending_new.discard(tp)
                self._become(tp, tid, reg, leader, self._image, self.clock.monotonic_ms(), is_new=is_new)
                made += 1
            if self._alter_wake is not None:
                self._alter_wake.set()
            await asyncio.sleep(0)
        log.info("created %d logs in %.2f s", made, self.clock.monotonic() - t0)

    def _partition(self, image: MetadataImage, tp: TopicPartition, tid: uuid.UUID, is_new: bool = True) -> Partition:
        part = self.partitions.get(tp)
        if part is not None and part.state.topic_id != tid:
            self._delete(tp)  # recreated with the same name
            part = None
        if part is None:
            lg = self.logs.get_or_create(tp[0], tp[1], tid, self.topic_config(image, tp[0]), is_new=is_new)
            st = PartitionState(tp[0], tp[1], tid, self.broker_id, replica_lag_time_max_ms=self._lag_ms)
            part = self.partitions[tp] = Partition(st, lg)
        return part

    def _delete(self, tp: TopicPartition) -> None:
        self.offline_partitions.pop(tp, None)
        self.alter_log_dirs.cancel(tp)
        self.fetchers.unfollow(tp)
        part = self.partitions.pop(tp, None)
        if part is not None:
            self.logs.delete(tp[0], tp[1])
            log.info("%s-%d: deleted", tp[0], tp[1])
        self._wake(tp)

    # --- log dir failures (KIP-858) -------------------------------------------------------------
    def _on_dir_offline(self, d: str) -> None:
        """Kafka's ReplicaManager.handleLogDirFailure: the partitions of the failed dir stop (no
        fetching, no serving: KAFKA_STORAGE_ERROR), waiters are woken, and the broker tells the
        controller, which moves leadership and ISR membership away from them."""
        stopped = [tp for tp in self.offline_partitions if self.logs.offline_dir_of(*tp) == d]
        for tp, part in list(self.partitions.items()):
            if part.log.closed and self.logs.offline_dir_of(*tp) == d:
                self.fetchers.unfollow(tp)
                del self.partitions[tp]
                self.offline_partitions[tp] = part.state.topic_id
                self._wake(tp)
                stopped.append(tp)
        for tp in [tp for tp in self._pending if self.logs.offline_dir_of(*tp) == d]:
            self.offline_partitions[tp] = self._pending.pop(tp)[0]
        log.error("log dir %s failed: %d partitions offline on this broker", d, len(stopped))
        self.on_partitions_offline()

    def log_replaced(self, part: Partition) -> None:
        """A replica move swapped in the partition's new log: waiters look again."""
        self._wake((part.state.topic, part.state.partition))

    def is_offline(self, tp: TopicPartition) -> bool:
        return tp in self.offline_partitions

    def io_error(self, part: Partition | None, e: BaseException, tp: TopicPartition | None = None) -> None:
        """Called with any exception of an operation on a partition's log: a storage failure
        takes its dir offline and becomes KAFKA_STORAGE_ERROR (raised); so does any error of a
        partition already offline. Else returns (the caller re-raises ``e``)."""
        tp = tp or (part.state.topic, part.state.partition)
        if (part is not None and self.logs.report_io_error(part.log, e)) or tp in self.offline_partitions or (
                self.logs.offline_dir_of(*tp) is not None):
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"the log dir of {tp[0]}-{tp[1]} is offline: {e}") from e

    def missing_error(self, tp: TopicPartition, default: ErrorCode) -> KafkaError:
        """The error for a partition this broker does not serve: KAFKA_STORAGE_ERROR if its log
        dir failed, else ``default``."""
        if tp in self.offline_partitions:
            return KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{tp[0]}-{tp[1]} is in an offline log dir")
        return KafkaError(default)

    # --- leader: produce and follower fetches ---------------------------------------------------
    def leader_partition(self, tp: TopicPartition) -> Partition:
        part = self.partitions.get(tp)
        if part is None:
            raise self.missing_error(tp, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if not part.state.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return part

    def append(self, part: Partition, buf, headers, **producer_checks):
        """Append in the calling thread (the group coordinator's small writes to its own
        internal partitions, which must be in the log before it goes on). ``producer_checks``:
        see ``Log.append_as_leader``."""
        try:
            info = part.log.append_as_leader(buf, headers, part.state.leader_epoch, self.clock.wall_ms(),
                                             **producer_checks)
        except (OSError, KafkaError) as e:
            self.io_error(part, e)
            raise
        self._appended(part)
        return info

    def _leader_epoch_of(self, part: Partition) -> Callable[[], int]:
        tp = (part.state.topic, part.state.partition)

        def leader_epoch() -> int:
            if self.partitions.get(tp) is not part or not part.state.is_leader:
                raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return part.state.leader_epoch
        return leader_epoch

    def try_append(self, part: Partition, buf, headers, verification_guard: object = None):
        """``append_async`` done at once when it needs no wait (batches small enough to validate
        on the loop, log writes on the loop, no other append of the partition in progress):
        its AppendInfo; None, having done nothing, when ``append_async`` must be awaited."""
        lg = part.log
        writer = self.logs.writer
        turn = lg._turn
        if writer is not None or (turn is not None and (turn.locked() or turn._waiters)):
            return None
        now = self.clock.wall_ms()  # record timestamps: the wall clock
        checked = lg.validate_client_batches_now(buf, headers, now)
        if checked is None:
            return None
        buf, headers = checked
        try:
            info = lg.try_append_as_leader(buf, headers, self._leader_epoch_of(part), now, None,
                                           verification_guard=verification_guard,
                                           require_verification=self.verification_enabled)
        except (OSError, KafkaError) as e:
            self.io_error(part, e)
            raise
        self._appended(part)
        return info

    async def append_async(self, part: Partition, buf, headers, verification_guard: object = None):
        """Append produced batches after validating their records (Kafka's LogValidator, off the
        event loop unless small), the write syscall in a log writer thread if there are any
        (krafty.log.writer.threads), else on the loop; appends to one partition are
        serialised, and each re-checks leadership when its turn comes. A transactional batch
        that starts a transaction must bring the guard of its verification (KIP-890)."""
        now = self.clock.wall_ms()  # record timestamps: the wall clock
        buf, headers = await part.log.validate_client_batches(buf, headers, now)
        while True:
            lg = part.log
            try:
                info = await lg.append_as_leader_async(
                    buf, headers, self._leader_epoch_of(part), now, self.logs.writer,
                    verification_guard=verification_guard, require_verification=self.verification_enabled)
                break
            except LogClosedError as e:
                if part.log is not lg and self.partitions.get((part.state.topic, part.state.partition)) is part:
                    continue  # the replica moved to another log dir while this append waited its turn
                self.io_error(part, e)  # closed by its dir's failure: KAFKA_STORAGE_ERROR
                raise
            except (OSError, KafkaError) as e:
                self.io_error(part, e)
                raise
        self._appended(part)
        return info

    async def append_marker(self, part: Partition, buf, headers, transaction_version: int):
        """Append a transaction marker (a control batch the WriteTxnMarkers handler built), in
        turn with the other appends of the partition."""
        try:
            info = await part.log.append_as_leader_async(
                buf, headers, self._leader_epoch_of(part), self.clock.wall_ms(), self.logs.writer, origin=COORDINATOR,
                transaction_version=transaction_version)
        except (OSError, KafkaError) as e:
            self.io_error(part, e)
            raise
        self._appended(part)
        return info

    async def verify_transaction(self, txn_id: str, producer_id: int, epoch: int, parts: list[Partition],
                                 sequences: list[int], supports_epoch_bump: bool = False,
                                 ) -> tuple[dict[TopicPartition, object], dict[TopicPartition, int]]:
        """KIP-890 part 1 for the transactional batches of one request (one producer): the
        partitions where the producer has no open transaction get a verification guard and are
        checked with the coordinator in one AddPartitionsToTxn (``verify_only``; with
        transaction version 2 the partitions are added instead). Returns ``(guards, errors)``:
        the guard to append each verified partition with, and the coordinator's error for each
        partition it did not confirm. Kafka's ReplicaManager.maybeStartTransactionVerification."""
        guards: dict[TopicPartition, object] = {}
        if not self.verification_enabled and not supports_epoch_bump:
            return guards, {}
        now = self.clock.wall_ms()
        for part, seq in zip(parts, sequences, strict=True):
            g = part.log.producer_state.maybe_start_verification(producer_id, seq, epoch, now, supports_epoch_bump)
            if g is not None:
                guards[(part.state.topic, part.state.partition)] = g
        if not guards:
            return guards, {}
        errors = await self.txn_verifier.verify(txn_id, producer_id, epoch, list(guards),
                                                verify_only=not supports_epoch_bump)
        return {tp: g for tp, g in guards.items() if tp not in errors}, errors

    def _appended(self, part: Partition) -> None:
        tp = (part.state.topic, part.state.partition)
        if self.news is not None:
            self.news(tp, True)
        self._leo_waiters.wake(tp)
        if part.state.maybe_advance_hw(part.log.log_end_offset):
            self._wake(tp, hw_only=True)

    def on_follower_fetch(self, part: Partition, replica_id: int, fetch_offset: int,
                          log_start_offset: int = -1) -> None:
        st = part.state
        before = st.progress.get(replica_id)
        start_before = before.log_start_offset if before is not None else -1
        if st.on_follower_fetch(replica_id, fetch_offset, part.log.log_end_offset, self.clock.monotonic_ms(),
                                log_start_offset=log_start_offset):
            self._wake((st.topic, st.partition), hw_only=True)
        if log_start_offset != start_before:
            self._low_watermark_waiters.wake((st.topic, st.partition))
        if st.pending_alter is not None and self._alter_wake is not None:
            self._alter_wake.set()

    # --- replication throttles ------------------------------------------------------------------------
    def throttled(self, quota: ReplicationQuota, tp: TopicPartition, in_sync: bool) -> bool:
        """Whether replication of ``tp`` counts against ``quota``: the quota is set, the replica is
        not in sync and the topic lists ``tp`` on this broker (Kafka's shouldLeaderThrottle /
        shouldFollowerThrottle, before the quota-exceeded test)."""
        if not quota.enabled or in_sync or self._image is None:
            return False
        return quota.is_throttled(self._image.topic_config(tp[0]), tp[1])

    # --- DeleteRecords -----------------------------------------------------------------------------
    def advance_log_start(self, part: Partition, offset: int) -> int:
        """Move the log start offset of a partition (a DeleteRecords on the leader, or the
        leader's log start learnt by a follower); segments wholly below it are deleted."""
        lg = part.log
        before = lg.log_start_offset
        try:
            start = lg.delete_records_before(offset)
        except (OSError, KafkaError) as e:
            self.io_error(part, e)
            raise
        if start != before:
            self.logs.log_start_moved()
            tp = (part.state.topic, part.state.partition)
            self._wake(tp)  # followers' long polls carry the new log start at once
            self._low_watermark_waiters.wake(tp)
        return start

    def delete_records(self, tp: TopicPartition, offset: int) -> int:
        """Kafka's ``Partition.deleteRecordsOnLeader``: moves the leader's log start to
        ``offset`` (-1: the high watermark) and returns the offset requested. Errors:
        NOT_LEADER_OR_FOLLOWER, POLICY_VIOLATION (cleanup.policy without delete),
        OFFSET_OUT_OF_RANGE (negative, or beyond the high watermark)."""
        part = self.leader_partition(tp)
        lg, st = part.log, part.state
        if not lg.config.delete_enabled:
            raise KafkaError(ErrorCode.POLICY_VIOLATION,
                             f"Records of partition {tp[0]}-{tp[1]} can not be deleted due to the configured policy")
        if offset == -1:
            offset = st.high_watermark
        if offset < 0:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"The offset {offset} for partition {tp[0]}-{tp[1]} is not valid")
        if offset > st.high_watermark:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"Cannot increment the log start offset to {offset} of partition {tp[0]}-{tp[1]} "
                             f"since it is larger than the high watermark {st.high_watermark}")
        self.advance_log_start(part, offset)
        return offset

    def low_watermark(self, tp: TopicPartition) -> int:
        """The smallest log start offset over the live replicas (we must lead ``tp``)."""
        part = self.leader_partition(tp)
        image = self._image
        alive = {b.id for b in image.brokers.values() if not b.fenced} if image is not None else set()
        return part.state.low_watermark(part.log.log_start_offset, alive)

    async def wait_for_low_watermark(self, tps: Iterable[TopicPartition], timeout_s: float) -> None:
        """Until a follower reports a new log start for any of ``tps``, leadership changes, or the timeout."""
        await self._low_watermark_waiters.wait(tps, timeout_s)

    async def _isr_shrink_loop(self) -> None:
        """Kafka checks every replica.lag.time.max.ms / 2 for followers that fell behind."""
        while True:
            await asyncio.sleep(max(self._lag_ms / 2000, 0.05))
            now = self.clock.monotonic_ms()
            proposed = False
            for tp, part in list(self.partitions.items()):
                if part.state.is_leader and part.state.maybe_shrink_isr(part.log.log_end_offset, now):
                    log.info("%s-%d: proposing ISR shrink to %s", tp[0], tp[1], list(part.state.pending_alter.new_isr),
                             extra={"topic": tp[0], "partition": tp[1]})
                    proposed = True
            if proposed:
                self._alter_wake.set()

    async def _alter_partition_loop(self) -> None:
        """Sends the ISR changes partitions propose to the controller, at most one in
        flight per partition, and feeds the answers back."""
        while True:
            await self._alter_wake.wait()
            self._alter_wake.clear()
            reqs = []
            for part in list(self.partitions.values()):
                req = part.state.take_alter_partition()
                if req is not None:
                    reqs.append((part, req))
            if not reqs or self.channel is None:
                continue
            items = [(r.topic_id, r.partition, r.leader_epoch, r.partition_epoch, list(r.new_isr)) for _, r in reqs]
            try:
                results = await self.channel.alter_partition(self.broker_id, self.broker_epoch(), items)
            except KafkaError as e:
                log.info("AlterPartition failed: %s", e)
                for part, req in reqs:
                    part.state.on_alter_partition_error(e.code, req)
                await asyncio.sleep(0.1)
                self._alter_wake.set()
                continue
            by_key = {(tid, pid): (code, reg) for tid, pid, code, reg in results}
            resend = False
            for part, req in reqs:
                code, reg = by_key.get((req.topic_id, req.partition), (ErrorCode.UNKNOWN_SERVER_ERROR, None))
                st = part.state
                if code == ErrorCode.NONE and reg is not None:
                    self._count_isr_change(len(st.isr), len(reg.isr))
                    if st.on_isr_committed(reg, part.log.log_end_offset, req):
                        self._wake((st.topic, st.partition))
                    log.info("%s-%d: ISR now %s (partition epoch %d)", st.topic, st.partition, list(st.isr),
                             st.partition_epoch, extra={"topic": st.topic, "partition": st.partition})
                else:
                    resend |= bool(st.on_alter_partition_error(ErrorCode(code), req))
                    log.info("%s-%d: AlterPartition refused: %s", st.topic, st.partition, ErrorCode(code).name)
            if resend:  # transient errors: the partition keeps its proposal; send it again shortly
                await asyncio.sleep(0.1)
                self._alter_wake.set()

    def _count_isr_change(self, before: int, after: int) -> None:
        if after < before:
            self.isr_shrinks += 1
        elif after > before:
            self.isr_expands += 1

    # --- waiting -----------------------------------------------------------------------------------
    def wake_hw(self, tp: TopicPartition) -> None:
        self._wake(tp)

    def on_next_change(self, tp: TopicPartition, fn: Callable[[], None]) -> None:
        """Call ``fn()`` once, synchronously, the next time the high watermark or the leadership of
        ``tp`` moves: an acks=all wait that completes in the step that moved the
        watermark (Kafka's purgatory checkAndComplete), not a task woken a loop iteration later. Its
        caller bounds the wait itself (broker/coordinator_runtime.py)."""
        self._on_change.setdefault(tp, []).append(fn)

    def _wake(self, tp: TopicPartition, hw_only: bool = False) -> None:
        """The high watermark or leadership moved: consumers' long polls re-check. ``hw_only``
        (the high watermark advanced, nothing else): followers' long polls keep waiting for
        records, as Kafka's DelayedFetch of a follower (FetchIsolation.LOG_END) does; they carry
        the new watermark with their next records (or at replica.fetch.wait.max.ms)."""
        if self.news is not None:
            self.news(tp, not hw_only)
        fns = self._on_change.pop(tp, None)
        for fn in fns or ():
            try:
                fn()
            except Exception:
                log.exception("%s-%d: a high watermark listener failed", *tp)
        self._hw_waiters.wake(tp)
        self._leo_waiters.wake(tp)
        self._low_watermark_waiters.wake(tp)

    async def wait_for_data(self, tps: Iterable[TopicPartition], timeout_s: float, *, log_end: bool = False) -> None:
        """Until the high watermark (or, for followers' fetches, the log end) of any of the
        partitions moves or their leadership changes, or the timeout."""
        await (self._leo_waiters if log_end else self._hw_waiters).wait(tps, timeout_s)

    async def close(self) -> None:
        for t in self._tasks + ([self._creating] if self._creating else []):
            t.cancel()
        await self.alter_log_dirs.close()
        await self.fetchers.close()
        await self.txn_verifier.close()
        self._hw_waiters.wake_all()
        self._leo_waiters.wake_all()
        self._low_watermark_waiters.wake_all()


__all__ = ["ReplicaManager", "Partition", "PartitionRegistration"]
