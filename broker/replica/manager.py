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

from broker.log.log import Log
from broker.log.manager import LogManager
from broker.replica.fetcher import ReplicaFetcherManager
from broker.replica.partition import PartitionState
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


class _Waiters:
    def __init__(self) -> None:
        self._by_tp: dict[TopicPartition, list[asyncio.Future]] = {}

    def wake(self, tp: TopicPartition) -> None:
        for fut in self._by_tp.pop(tp, ()):
            if not fut.done():
                fut.set_result(None)

    async def wait(self, tps: Iterable[TopicPartition], timeout_s: float) -> None:
        fut = asyncio.get_running_loop().create_future()
        keys = list(tps)
        for tp in keys:
            self._by_tp.setdefault(tp, []).append(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            pass
        finally:
            for tp in keys:
                lst = self._by_tp.get(tp)
                if lst:
                    try:
                        lst.remove(fut)
                    except ValueError:
                        pass
                    if not lst:
                        del self._by_tp[tp]

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
        self._defaults = topic_defaults(config)
        self._lag_ms = config["replica.lag.time.max.ms"]
        self._hw_waiters = _Waiters()
        self._leo_waiters = _Waiters()
        self.fetchers = ReplicaFetcherManager(self, broker_id, config, endpoint_of, clock)
        self._alter_wake: asyncio.Event | None = None
        self._tasks: list[asyncio.Task] = []
        # partitions of a large delta whose logs are still to be made: tp -> (topic id, registration, leader?)
        self._pending: dict[TopicPartition, tuple[uuid.UUID, PartitionRegistration, bool]] = {}
        self._creating: asyncio.Task | None = None
        self._image: MetadataImage | None = None
        self.isr_shrinks = self.isr_expands = 0  # ISR changes committed for partitions we lead (metrics)

    async def start(self) -> None:
        self._alter_wake = asyncio.Event()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._isr_shrink_loop()), loop.create_task(self._alter_partition_loop())]

    # --- metadata ------------------------------------------------------------------------
    def topic_config(self, image: MetadataImage, topic: str) -> dict:
        cfg = dict(self._defaults)
        cfg.update(image.topic_config(topic))
        return cfg

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
        for tp, tid, reg, leader in roles:
            if tp in self._pending or tp in defer:
                self._pending[tp] = (tid, reg, leader)  # the latest role wins when its log is made
            else:
                self._become(tp, tid, reg, leader, image, now)
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

    def _become(self, tp: TopicPartition, tid: uuid.UUID, reg: PartitionRegistration, leader: bool,
                image: MetadataImage, now: int) -> None:
        part = self._partition(image, tp, tid)
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
                self._become(tp, tid, reg, leader, self._image, self.clock.monotonic_ms())
                made += 1
            if self._alter_wake is not None:
                self._alter_wake.set()
            await asyncio.sleep(0)
        log.info("created %d logs in %.2f s", made, self.clock.monotonic() - t0)

    def _partition(self, image: MetadataImage, tp: TopicPartition, tid: uuid.UUID) -> Partition:
        part = self.partitions.get(tp)
        if part is not None and part.state.topic_id != tid:
            self._delete(tp)  # recreated with the same name
            part = None
        if part is None:
            lg = self.logs.get_or_create(tp[0], tp[1], tid, self.topic_config(image, tp[0]))
            st = PartitionState(tp[0], tp[1], tid, self.broker_id, replica_lag_time_max_ms=self._lag_ms)
            part = self.partitions[tp] = Partition(st, lg)
        return part

    def _delete(self, tp: TopicPartition) -> None:
        self.fetchers.unfollow(tp)
        part = self.partitions.pop(tp, None)
        if part is not None:
            self.logs.delete(tp[0], tp[1])
            log.info("%s-%d: deleted", tp[0], tp[1])
        self._wake(tp)

    # --- leader: produce and follower fetches ---------------------------------------------------
    def leader_partition(self, tp: TopicPartition) -> Partition:
        part = self.partitions.get(tp)
        if part is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if not part.state.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return part

    def append(self, part: Partition, buf, headers):
        """Append in the calling thread (the group coordinator's small writes to its own
        internal partitions, which must be in the log before it goes on)."""
        info = part.log.append_as_leader(buf, headers, part.state.leader_epoch, self.clock.wall_ms())
        self._appended(part)
        return info

    async def append_async(self, part: Partition, buf, headers):
        """Append produced batches after validating their records (Kafka's LogValidator, off the
        event loop unless small), the write syscall in a log writer thread if there are any
        (krafty.log.writer.threads), else on the loop; appends to one partition are
        serialised, and each re-checks leadership when its turn comes."""
        tp = (part.state.topic, part.state.partition)

        def leader_epoch() -> int:
            if self.partitions.get(tp) is not part or not part.state.is_leader:
                raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return part.state.leader_epoch

        now = self.clock.wall_ms()  # record timestamps: the wall clock
        buf, headers = await part.log.validate_client_batches(buf, headers, now)
        info = await part.log.append_as_leader_async(buf, headers, leader_epoch, now, self.logs.writer)
        self._appended(part)
        return info

    def _appended(self, part: Partition) -> None:
        tp = (part.state.topic, part.state.partition)
        self._leo_waiters.wake(tp)
        if part.state.maybe_advance_hw(part.log.log_end_offset):
            self._wake(tp)

    def on_follower_fetch(self, part: Partition, replica_id: int, fetch_offset: int) -> None:
        st = part.state
        if st.on_follower_fetch(replica_id, fetch_offset, part.log.log_end_offset, self.clock.monotonic_ms()):
            self._wake((st.topic, st.partition))
        if st.pending_alter is not None and self._alter_wake is not None:
            self._alter_wake.set()

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

    def _wake(self, tp: TopicPartition) -> None:
        """The high watermark or leadership moved: consumers' and followers' long polls re-check
        (a follower's ends if the watermark is news to it, see KafkaApis.fetch)."""
        self._hw_waiters.wake(tp)
        self._leo_waiters.wake(tp)

    async def wait_for_data(self, tps: Iterable[TopicPartition], timeout_s: float, *, log_end: bool = False) -> None:
        """Until the high watermark (or, for followers' fetches, the log end) of any of the
        partitions moves or their leadership changes, or the timeout."""
        await (self._leo_waiters if log_end else self._hw_waiters).wait(tps, timeout_s)

    async def close(self) -> None:
        for t in self._tasks + ([self._creating] if self._creating else []):
            t.cancel()
        await self.fetchers.close()
        self._hw_waiters.wake_all()
        self._leo_waiters.wake_all()


__all__ = ["ReplicaManager", "Partition", "PartitionRegistration"]
