"""The group coordinator's asyncio shell: which ``__consumer_offsets`` partitions this
broker coordinates, loading and unloading them as leadership moves, the timers of the
groups, and appends of their records through the replica manager (acks=all).

A group's coordinator is the leader of partition ``partition_for(group_id)``. When this
broker becomes that leader (a metadata delta) it reads the partition from its log start
to its end and rebuilds the shard (requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS);
when it stops being leader the shard is dropped and its parked requests get
NOT_COORDINATOR. The group logic itself is the pure ``GroupShard``/``ClassicGroup``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from broker.group import records as rec
from broker.group.shard import GroupShard
from broker.group.state import Effects, GroupConfig, Write
from broker.log.batch import CONTROL_BIT, Record, build_batch, decode_records, parse_batches, records_limit
from common.clock import SYSTEM, Clock
from common.errors import ErrorCode, KafkaError
from metadata.controller_api import NewTopic

log = logging.getLogger("krafty.group")

OFFSETS_TOPIC = "__consumer_offsets"


def _decode_batches(data: bytes, headers, limit: int, pid: int, file_position: int,
                    segment: int) -> list[list[Record]]:
    """The records of the batches read while loading; a batch that cannot be decoded is
    skipped with an error naming where it is (the rest of the partition still loads)."""
    out = []
    for h in headers:
        if h.attributes & CONTROL_BIT:
            continue
        try:
            out.append(decode_records(data[h.pos:h.pos + h.size], limit))
        except KafkaError as e:
            log.error("%s-%d: skipping the undecodable record batch at offsets %d-%d (position %d of segment %d): %s",
                      OFFSETS_TOPIC, pid, h.base_offset, h.last_offset, file_position + h.pos, segment, e.message)
    return out


_TO_COORDINATOR_NOT_AVAILABLE = {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                                 ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT}
_TO_NOT_COORDINATOR = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR}
_TOO_LARGE = {ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE}


def map_append_error(code: int, offsets: bool) -> int:
    """What a client is told when a coordinator append fails (Kafka's mapping)."""
    if code in _TO_COORDINATOR_NOT_AVAILABLE:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in _TO_NOT_COORDINATOR:
        return ErrorCode.NOT_COORDINATOR
    if code in _TOO_LARGE:
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE if offsets else ErrorCode.UNKNOWN_SERVER_ERROR
    return code


@dataclasses.dataclass(slots=True)
class _Slot:
    epoch: int
    shard: GroupShard | None = None  # None while loading
    task: asyncio.Task | None = None


class GroupCoordinator:
    def __init__(self, config, broker_id: int, replicas, loader, controller, clock: Clock = SYSTEM):
        self.config = config
        # Member sessions and rebalance timers run on clock.monotonic_ms; records carry
        # clock.wall_ms timestamps (a wall-clock step must never expel a member)
        self.clock = clock
        self.broker_id = broker_id
        self.replicas = replicas
        self.loader = loader
        self.controller = controller
        self.group_config = GroupConfig(
            min_session_timeout_ms=config["group.min.session.timeout.ms"],
            max_session_timeout_ms=config["group.max.session.timeout.ms"],
            initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
            max_size=config["group.max.size"])
        self.metadata_max_bytes = config["offset.metadata.max.bytes"]
        self.commit_timeout_ms = config["offsets.commit.timeout.ms"]
        self.load_buffer = config["offsets.load.buffer.size"]
        self.retention_ms = config["offsets.retention.minutes"] * 60_000
        self.retention_check_ms = config["offsets.retention.check.interval.ms"]
        self.slots: dict[int, _Slot] = {}
        self._wake: asyncio.Event | None = None
        self._tasks: list[asyncio.Task] = []
        self._pending: set[asyncio.Task] = set()
        self._create_lock: asyncio.Lock | None = None
        self._started = False

    async def start(self) -> None:
        self._wake = asyncio.Event()
        self._create_lock = asyncio.Lock()
        loop = asyncio.get_running_loop()
        self._started = True
        self._tasks = [loop.create_task(self._timer_loop()), loop.create_task(self._expiry_loop())]
        self.on_metadata(None, self.loader.image)

    async def close(self) -> None:
        self._started = False
        for t in self._tasks + list(self._pending):
            t.cancel()
        now = self.now()
        for pid in list(self.slots):
            self._unload(pid, now)

    def now(self) -> int:
        """Monotonic ms: the time of sessions and deadlines (the shard's ``now``)."""
        return self.clock.monotonic_ms()

    def wall(self) -> int:
        """Wall-clock ms: the timestamps records carry (the shard's ``wall``)."""
        return self.clock.wall_ms()

    # --- which partitions we coordinate ------------------------------------------------------
    def num_partitions(self) -> int:
        t = self.loader.image.topics_by_name.get(OFFSETS_TOPIC)
        return len(t.partitions) if t and t.partitions else self.config["offsets.topic.num.partitions"]

    def partition_for(self, group_id: str) -> int:
        return rec.partition_for(group_id, self.num_partitions())

    def on_metadata(self, delta, image) -> None:
        """A metadata publisher: load the partitions we now lead, unload the others. Runs
        after the replica manager's publisher, so our partitions already have their logs."""
        if not self._started:
            return
        t = image.topics_by_name.get(OFFSETS_TOPIC)
        led: dict[int, int] = {}
        if t is not None:
            for pid, p in t.partitions.items():
                if p.leader == self.broker_id:
                    led[pid] = p.leader_epoch
        now = self.now()
        for pid in list(self.slots):
            if led.get(pid) != self.slots[pid].epoch:
                self._unload(pid, now)
        for pid, epoch in led.items():
            if pid not in self.slots:
                slot = self.slots[pid] = _Slot(epoch)
                slot.task = asyncio.get_running_loop().create_task(self._load(pid, epoch))

    def _unload(self, pid: int, now: int) -> None:
        slot = self.slots.pop(pid, None)
        if slot is None:
            return
        if slot.task is not None and not slot.task.done():
            slot.task.cancel()
        if slot.shard is not None:
            self._run(pid, slot.shard.unload(now))
            log.debug("%s-%d: unloaded group coordinator state", OFFSETS_TOPIC, pid)

    async def _load(self, pid: int, epoch: int) -> None:
        t0 = self.clock.monotonic()
        shard = GroupShard(pid, self.group_config, metadata_max_bytes=self.metadata_max_bytes)
        tp = (OFFSETS_TOPIC, pid)
        n = bad = 0
        try:
            part = self.replicas.partitions.get(tp)
            if part is None:
                raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "no local replica")
            lg = part.log
            end = lg.log_end_offset
            offset = lg.log_start_offset
            while offset < end:
                try:
                    sl = lg.read(offset, self.load_buffer, end, min_one_batch=True)
                except KafkaError as e:
                    if e.code == ErrorCode.OFFSET_OUT_OF_RANGE and offset < lg.log_start_offset:
                        offset = lg.log_start_offset  # retention or compaction moved the start
                        continue
                    raise
                if sl is None:
                    break
                data = lg.read_bytes(sl)
                headers = parse_batches(data)
                if not headers:
                    break
                offset = headers[-1].next_offset
                # bounded decoding, but linear in the bytes read: off the event loop
                batches = await asyncio.to_thread(_decode_batches, data, headers, records_limit(
                    lg.config.max_message_bytes), pid, sl.position, sl.segment_base_offset)
                now, wall = self.now(), self.wall()
                for records in batches:
                    for r in records:
                        try:
                            shard.replay(r.key, r.value, now, wall)
                            n += 1
                        except (rec.RecordFormatError, ValueError) as e:
                            bad += 1
                            log.warning("%s-%d: skipping undecodable record at offset %d: %s", OFFSETS_TOPIC, pid,
                                        r.offset, e)
                await asyncio.sleep(0)
                if self.slots.get(pid) is None or self.slots[pid].epoch != epoch:
                    return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s-%d: loading group state failed; will retry on the next leadership change",
                          OFFSETS_TOPIC, pid)
            return
        slot = self.slots.get(pid)
        if slot is None or slot.epoch != epoch:
            return
        now = self.now()
        for g in shard.groups.values():
            for m in g.members.values():
                m.heartbeat_deadline = now + m.session_timeout_ms
        slot.shard = shard
        slot.task = None
        log.log(logging.INFO if n else logging.DEBUG,
                "%s-%d: loaded %d groups (%d records%s) in epoch %d in %.3fs", OFFSETS_TOPIC, pid,
                 len(shard.groups), n, f", {bad} undecodable" if bad else "", epoch, self.clock.monotonic() - t0)
        self._kick()

    def shard_for(self, group_id: str) -> GroupShard:
        """The loaded shard of a group; raises NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS."""
        if OFFSETS_TOPIC not in self.loader.image.topics_by_name:
            raise KafkaError(ErrorCode.NOT_COORDINATOR)
        slot = self.slots.get(self.partition_for(group_id))
        if slot is None:
            raise KafkaError(ErrorCode.NOT_COORDINATOR)
        if slot.shard is None:
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        return slot.shard

    def loaded_shards(self) -> list[GroupShard]:
        return [s.shard for s in self.slots.values() if s.shard is not None]

    def any_loading(self) -> bool:
        return any(s.shard is None for s in self.slots.values())

    # --- effects ------------------------------------------------------------------------------
    def _run(self, pid: int, fx: Effects | None) -> None:
        if fx is None:
            return
        for waiter, resp in fx.replies:
            if not waiter.done():
                waiter.set_result(resp)
        for w in fx.writes:
            self.write(pid, w)
        if fx.writes or fx.replies:
            self._kick()

    def run(self, shard: GroupShard, fx: Effects | None) -> None:
        self._run(shard.partition, fx)
        self._kick()

    def _kick(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def write(self, pid: int, w: Write, offsets: bool = False) -> asyncio.Future:
        """Append ``w.records`` to our partition now (so the state and the log agree in order)
        and resolve to the error code once the high watermark passes them."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future = loop.create_future()
        slot = self.slots.get(pid)
        now = self.now()
        try:
            if slot is None or slot.shard is None:
                raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            part = self.replicas.leader_partition((OFFSETS_TOPIC, pid))
            if part.state.leader_epoch != slot.epoch:
                raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            ts = self.wall()
            batch = build_batch([Record(i, ts, k, v, []) for i, (k, v) in enumerate(w.records)], base_offset=0)
            if len(batch) > part.log.config.max_message_bytes:
                raise KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE)
            headers = parse_batches(batch)
            min_isr = self.replicas.min_insync_replicas(self.loader.image, OFFSETS_TOPIC)
            code = part.state.can_append_acks_all(min_isr)
            if code != ErrorCode.NONE:
                raise KafkaError(code)
            info = self.replicas.append(part, batch, headers)
        except KafkaError as e:
            err = map_append_error(e.code, offsets)
            log.info("%s-%d: group coordinator append failed: %s", OFFSETS_TOPIC, pid, ErrorCode(e.code).name)
            if w.on_fail is not None:
                self._run(pid, w.on_fail(err, now))
            self._reply_all(w.replies, err)
            done.set_result(err)
            return done
        if w.on_append is not None:
            w.on_append()
        task = loop.create_task(self._await_commit(pid, slot.epoch, info.last_offset, min_isr, w, offsets, done))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return done

    async def _await_commit(self, pid: int, epoch: int, last_offset: int, min_isr: int, w: Write, offsets: bool,
                            done: asyncio.Future) -> None:
        tp = (OFFSETS_TOPIC, pid)
        deadline = self.clock.monotonic() + self.commit_timeout_ms / 1000
        err = ErrorCode.NONE
        try:
            while True:
                part = self.replicas.partitions.get(tp)
                if part is None or not part.state.is_leader or part.state.leader_epoch != epoch:
                    err = ErrorCode.NOT_LEADER_OR_FOLLOWER
                    break
                res = part.state.acks_all_result(last_offset, min_isr)
                if res is not None:
                    err = res
                    break
                left = deadline - self.clock.monotonic()
                if left <= 0:
                    err = ErrorCode.REQUEST_TIMED_OUT
                    break
                await self.replicas.wait_for_data([tp], left)
        finally:
            err = map_append_error(err, offsets) if err else ErrorCode.NONE
            self._reply_all(w.replies, err)
            if not done.done():
                done.set_result(err)

    @staticmethod
    def _reply_all(replies, err: int) -> None:
        for waiter, resp in replies:
            if waiter.done():
                continue
            if err:
                resp = dict(resp, error_code=int(err))
            waiter.set_result(resp)

    # --- timers -------------------------------------------------------------------------------
    async def _timer_loop(self) -> None:
        while True:
            now, wall = self.now(), self.wall()
            nearest = None
            for pid, slot in list(self.slots.items()):
                if slot.shard is None:
                    continue
                try:
                    self._run(pid, slot.shard.tick(now, wall))
                except Exception:
                    log.exception("%s-%d: group timer failed", OFFSETS_TOPIC, pid)
                d = slot.shard.next_deadline() if pid in self.slots else None
                if d is not None and (nearest is None or d < nearest):
                    nearest = d
            self._wake.clear()
            wait = 1.0 if nearest is None else min(max((nearest - self.now()) / 1000, 0.005), 1.0)
            try:
                await asyncio.wait_for(self._wake.wait(), wait)
            except TimeoutError:
                pass

    async def _expiry_loop(self) -> None:
        while True:
            await asyncio.sleep(self.retention_check_ms / 1000)
            self.expire_offsets(self.wall())

    def expire_offsets(self, now: int) -> int:
        """``now``: the wall clock (offsets expire by their wall-clock commit timestamps)."""
        n = 0
        for pid, slot in list(self.slots.items()):
            if slot.shard is None:
                continue
            w = slot.shard.expire_offsets(now, self.retention_ms)
            if w is not None:
                n += len(w.records)
                log.info("%s-%d: expiring %d offsets/groups", OFFSETS_TOPIC, pid, len(w.records))
                self.write(pid, w, offsets=True)
        return n

    # --- __consumer_offsets creation ----------------------------------------------------------
    async def ensure_offsets_topic(self) -> int:
        """Create ``__consumer_offsets`` through the controller if it does not exist (Kafka
        does it on the first FindCoordinator). Returns an error code."""
        if OFFSETS_TOPIC in self.loader.image.topics_by_name:
            return ErrorCode.NONE
        async with self._create_lock:
            if OFFSETS_TOPIC in self.loader.image.topics_by_name:
                return ErrorCode.NONE
            live = len(self.loader.image.live_brokers())
            rf = min(self.config["offsets.topic.replication.factor"], live)
            if rf < 1:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            configs = {"cleanup.policy": "compact", "compression.type": "producer",
                       "segment.bytes": str(self.config["offsets.topic.segment.bytes"])}
            try:
                results = await self.controller.create_topics(
                    [NewTopic(OFFSETS_TOPIC, self.config["offsets.topic.num.partitions"], rf, None, configs)])
            except KafkaError as e:
                log.info("creating %s failed: %s", OFFSETS_TOPIC, e)
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            for r in results:
                if r.error not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                    log.warning("creating %s failed: %s %s", OFFSETS_TOPIC, ErrorCode(r.error).name, r.message)
                    return ErrorCode.COORDINATOR_NOT_AVAILABLE
            log.info("created %s with %d partitions, replication factor %d", OFFSETS_TOPIC,
                     self.config["offsets.topic.num.partitions"], rf)
            for _ in range(100):  # the topic reaches our metadata image shortly after it commits
                if OFFSETS_TOPIC in self.loader.image.topics_by_name:
                    break
                await asyncio.sleep(0.02)
            return ErrorCode.NONE

    def new_member_id(self, client_id: str) -> str:
        return f"{client_id}-{self.clock.uuid4()}"


__all__ = ["GroupCoordinator", "OFFSETS_TOPIC", "map_append_error"]
