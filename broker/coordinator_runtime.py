"""The lifecycle every coordinator of an internal topic shares (Kafka's CoordinatorRuntime /
the load and unload machinery of its GroupMetadataManager and TransactionStateManager).

A coordinator (the group coordinator on ``__consumer_offsets``, the transaction coordinator
on ``__transaction_state``) owns the partitions of its topic this broker leads. When this
broker becomes the leader of one (a metadata delta), the runtime reads the partition from its
log start to its end and replays every record into a new *shard* (the coordinator's pure
state for that partition); requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS. When the
leadership moves (or its epoch changes) the shard is dropped (NOT_COORDINATOR from then on).
The coordinator epoch of a partition is its leader epoch.

Writes are acks=all appends to the partition: the record is appended at once (so the shard
and the log agree in order) and the returned future resolves to an error code once the high
watermark passes it, or the leadership is lost, or the commit timeout runs out. Append errors
are mapped to what Kafka's coordinators tell clients (``map_append_error``).

The topic is created through the controller on first use, with the coordinator's configs.

What a coordinator plugs in (``CoordinatorHooks``): how to make a shard, how to replay one
record into it, and what to do once a shard is loaded or dropped.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import Any, Protocol

from broker.group.records import java_string_hashcode, partition_for  # noqa: F401 (re-exported)
from broker.log.batch import (
    Record,
    build_batch,
    build_end_txn_marker,
    decode_records,
    parse_batches,
    read_end_txn_marker,
    records_limit,
)
from broker.log.producer_state import COORDINATOR
from common.clock import SYSTEM, Clock
from common.errors import ErrorCode, KafkaError
from metadata.controller_api import NewTopic

log = logging.getLogger("krafty.coordinator")


_TO_COORDINATOR_NOT_AVAILABLE = {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                                 ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT}
_TO_NOT_COORDINATOR = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR}
_TOO_LARGE = {ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE}


def map_append_error(code: int, offsets: bool = False) -> int:
    """What a client is told when a coordinator append fails (Kafka's mapping, the same for
    groups and transactions; offset commits say INVALID_COMMIT_OFFSET_SIZE for too large)."""
    if code in _TO_COORDINATOR_NOT_AVAILABLE:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in _TO_NOT_COORDINATOR:
        return ErrorCode.NOT_COORDINATOR
    if code in _TOO_LARGE:
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE if offsets else ErrorCode.UNKNOWN_SERVER_ERROR
    return code


def _decode_batches(topic: str, data: bytes, headers, limit: int, pid: int, file_position: int,
                    segment: int) -> list[tuple[object, object]]:
    """(header, records) of the batches read while loading, (header, marker) of transaction
    markers (a coordinator with transactional records, the group coordinator, completes them);
    a batch that cannot be decoded is skipped with an error naming where it is (the rest of the
    partition still loads)."""
    out: list = []
    for h in headers:
        try:
            if h.is_control:
                marker = read_end_txn_marker(data[h.pos:h.pos + h.size], limit)
                if marker is not None:
                    out.append((h, marker))
                continue
            out.append((h, decode_records(data[h.pos:h.pos + h.size], limit)))
        except KafkaError as e:
            log.error("%s-%d: skipping the undecodable record batch at offsets %d-%d (position %d of segment %d): %s",
                      topic, pid, h.base_offset, h.last_offset, file_position + h.pos, segment, e.message)
    return out


class CoordinatorHooks(Protocol):
    def new_shard(self, partition: int, epoch: int) -> Any:
        """An empty shard for a partition whose loading starts now."""

    def replay(self, shard: Any, key: bytes | None, value: bytes | None, offset: int, producer_id: int) -> None:
        """Apply one record (at log ``offset``; ``producer_id``: of its transactional batch, or -1);
        raises ValueError (e.g. a RecordFormatError) when undecodable."""

    def replay_marker(self, shard: Any, producer_id: int, commit: bool) -> None:
        """A transaction marker of ``producer_id`` in the partition."""

    def on_loaded(self, partition: int, epoch: int, shard: Any, records: int, bad: int, seconds: float) -> None: ...

    def on_unloaded(self, partition: int, epoch: int, shard: Any | None) -> None:
        """The partition is no longer ours (``shard`` is None if it was still loading)."""


@dataclasses.dataclass(slots=True)
class Slot:
    epoch: int  # the coordinator epoch: the partition's leader epoch
    shard: Any = None  # None while loading
    task: asyncio.Task | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class TopicSpec:
    """How the coordinator's internal topic is created (and how many partitions it has until
    it exists)."""
    name: str
    num_partitions: int
    replication_factor: int  # capped by the live brokers when created
    configs: Callable[[int], dict[str, str]]  # topic configs, given the replication factor chosen


class CoordinatorRuntime:
    def __init__(self, spec: TopicSpec, hooks: CoordinatorHooks, *, broker_id: int, replicas, loader, controller,
                 load_buffer: int, clock: Clock = SYSTEM):
        self.spec = spec
        self.topic = spec.name
        self.hooks = hooks
        self.broker_id = broker_id
        self.replicas = replicas
        self.loader = loader
        self.controller = controller
        self.load_buffer = load_buffer
        self.clock = clock
        self.slots: dict[int, Slot] = {}
        self._watching: set[Callable[[int], None]] = set()  # the ends of the acks=all waits (_watch_commit)
        self._create_lock: asyncio.Lock | None = None
        self.started = False

    def start(self) -> None:
        self._create_lock = asyncio.Lock()
        self.started = True
        self.on_metadata(None, self.loader.image)

    def close(self) -> None:
        self.started = False
        for finish in list(self._watching):
            finish(ErrorCode.NOT_LEADER_OR_FOLLOWER)  # the coordinator is closing
        for pid in list(self.slots):
            self._unload(pid)

    # --- which partitions we coordinate ------------------------------------------------------
    def num_partitions(self) -> int:
        t = self.loader.image.topics_by_name.get(self.topic)
        return len(t.partitions) if t and t.partitions else self.spec.num_partitions

    def partition_for(self, key: str) -> int:
        return partition_for(key, self.num_partitions())

    def on_metadata(self, delta, image) -> None:
        """A metadata publisher: load the partitions we now lead, unload the others. Runs
        after the replica manager's publisher, so our partitions already have their logs."""
        if not self.started:
            return
        t = image.topics_by_name.get(self.topic)
        led: dict[int, int] = {}
        if t is not None:
            for pid, p in t.partitions.items():
                if p.leader == self.broker_id:
                    led[pid] = p.leader_epoch
        for pid in list(self.slots):
            if led.get(pid) != self.slots[pid].epoch:
                self._unload(pid)
        for pid, epoch in led.items():
            if pid not in self.slots:
                slot = self.slots[pid] = Slot(epoch)
                shard = self.hooks.new_shard(pid, epoch)  # loading starts now (COORDINATOR_LOAD_IN_PROGRESS)
                slot.task = asyncio.get_running_loop().create_task(self._load(pid, epoch, shard))

    def _unload(self, pid: int) -> None:
        slot = self.slots.pop(pid, None)
        if slot is None:
            return
        if slot.task is not None and not slot.task.done():
            slot.task.cancel()
        self.hooks.on_unloaded(pid, slot.epoch, slot.shard)
        log.debug("%s-%d: unloaded coordinator state of epoch %d", self.topic, pid, slot.epoch)

    def current(self, pid: int, epoch: int) -> bool:
        slot = self.slots.get(pid)
        return slot is not None and slot.epoch == epoch

    async def _load(self, pid: int, epoch: int, shard: Any) -> None:
        t0 = self.clock.monotonic()
        tp = (self.topic, pid)
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
                batches = await asyncio.to_thread(_decode_batches, self.topic, data, headers, records_limit(
                    lg.config.max_message_bytes), pid, sl.position, sl.segment_base_offset)
                for h, records in batches:
                    if h.is_control:
                        self.hooks.replay_marker(shard, h.producer_id, records.commit)
                        continue
                    txn_pid = h.producer_id if h.is_transactional else -1
                    for r in records:
                        try:
                            self.hooks.replay(shard, r.key, r.value, r.offset, txn_pid)
                            n += 1
                        except ValueError as e:
                            bad += 1
                            log.warning("%s-%d: skipping undecodable record at offset %d: %s", self.topic, pid,
                                        r.offset, e)
                await asyncio.sleep(0)
                if not self.current(pid, epoch):
                    return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s-%d: loading coordinator state failed; will retry on the next leadership change",
                          self.topic, pid)
            return
        # The state counts once it is committed: records above the high watermark (the previous
        # leader's, never acknowledged) may still be truncated away if the leadership moves on, and
        # an answer read from them, or markers written for a PrepareCommit among them, would then
        # outlive them. Until the followers have them: COORDINATOR_LOAD_IN_PROGRESS (Kafka 4.x's
        # coordinator runtime reads its state as of the last committed offset).
        if not await self._committed_through(pid, epoch, end):
            return
        slot = self.slots.get(pid)
        if slot is None or slot.epoch != epoch:
            return
        slot.shard = shard
        slot.task = None
        self.hooks.on_loaded(pid, epoch, shard, n, bad, self.clock.monotonic() - t0)

    async def _committed_through(self, pid: int, epoch: int, end: int) -> bool:
        """True once our partition ``pid``'s high watermark reaches ``end`` in leader epoch
        ``epoch``; False if the leadership moves first."""
        tp = (self.topic, pid)
        done: asyncio.Future = asyncio.get_running_loop().create_future()

        def check() -> None:
            if done.done():
                return
            part = self.replicas.partitions.get(tp)
            if part is None or not part.state.is_leader or part.state.leader_epoch != epoch or not self.current(pid, epoch):
                done.set_result(False)
            elif part.state.high_watermark >= end:
                done.set_result(True)
            else:
                self.replicas.on_next_change(tp, check)
        check()
        return await done

    def slot_for(self, key: str) -> tuple[int, Slot]:
        """(partition, loaded slot) of a key; raises NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS."""
        if self.topic not in self.loader.image.topics_by_name:
            raise KafkaError(ErrorCode.NOT_COORDINATOR)
        pid = self.partition_for(key)
        slot = self.slots.get(pid)
        if slot is None:
            raise KafkaError(ErrorCode.NOT_COORDINATOR)
        if slot.shard is None:
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        return pid, slot

    def loaded(self) -> list[tuple[int, Slot]]:
        return [(pid, s) for pid, s in self.slots.items() if s.shard is not None]

    def any_loading(self) -> bool:
        return any(s.shard is None for s in self.slots.values())

    # --- writes -------------------------------------------------------------------------------
    def append(self, pid: int, records: list[tuple[bytes, bytes | None]], *, timeout_ms: int, offsets: bool = False,
               epoch: int | None = None, producer_id: int = -1, producer_epoch: int = -1,
               verification_guard: Any = None, on_appended: Callable[[int], None] | None = None,
               on_done: Callable[[int], None] | None = None) -> tuple[int, asyncio.Future | None]:
        """Append ``records`` to our partition ``pid`` now, acks=all. Returns ``(error, None)``
        when the append failed at once (the error mapped for clients), else ``(NONE, future)``:
        the future resolves to the mapped error once the high watermark passes the records (or
        leadership is lost, or ``timeout_ms`` runs out); ``on_done(error)``, if given, is called
        then, synchronously (in the step that moved the watermark; possibly before this returns).
        ``epoch``: append only in this coordinator epoch (NOT_COORDINATOR otherwise). With
        ``producer_id`` the records go in a transactional batch of that producer (TxnOffsetCommit),
        checked by the log against its epoch and KIP-890 ``verification_guard``;
        ``on_appended(first offset)`` runs once they are in."""
        slot = self.slots.get(pid)
        tp = (self.topic, pid)
        try:
            if slot is None or slot.shard is None or (epoch is not None and slot.epoch != epoch):
                raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            part = self.replicas.leader_partition(tp)
            if part.state.leader_epoch != slot.epoch:
                raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            now = self.clock.wall_ms()
            txn = producer_id >= 0
            batch = build_batch([Record(i, now, k, v, []) for i, (k, v) in enumerate(records)], base_offset=0,
                                producer_id=producer_id, producer_epoch=producer_epoch,
                                base_sequence=0 if txn else -1, transactional=txn)
            if len(batch) > part.log.config.max_message_bytes:
                raise KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE)
            headers = parse_batches(batch)
            min_isr = self.replicas.min_insync_replicas(self.loader.image, self.topic)
            code = part.state.can_append_acks_all(min_isr)
            if code != ErrorCode.NONE:
                raise KafkaError(code)
            if txn:
                info = self.replicas.append(part, batch, headers, origin=COORDINATOR,
                                            verification_guard=verification_guard,
                                            require_verification=self.replicas.verification_enabled)
            else:
                info = self.replicas.append(part, batch, headers)
            if on_appended is not None:
                on_appended(info.first_offset)
        except KafkaError as e:
            err = map_append_error(e.code, offsets)
            log.info("%s-%d: coordinator append failed: %s", self.topic, pid, ErrorCode(e.code).name)
            return err, None
        done: asyncio.Future = asyncio.get_running_loop().create_future()
        self._watch_commit(pid, slot.epoch, info.last_offset, min_isr, timeout_ms, done,
                           (lambda e: map_append_error(e, offsets)), on_done)
        return ErrorCode.NONE, done

    async def await_state_committed(self, pid: int, timeout_ms: int) -> int:
        """NONE once everything in our partition ``pid``'s log as of now is committed (the high
        watermark reached the log end), else the error mapped for clients. For answers read
        from the in-memory state without a write of their own: a new leader loads its log to
        the end, and records above the high watermark there (appended by the old leader, never
        acknowledged) may be truncated away by the leader after it (Kafka's new coordinator
        runtime likewise holds such answers until its last written offset is committed)."""
        slot = self.slots.get(pid)
        part = self.replicas.partitions.get((self.topic, pid))
        if (slot is None or slot.shard is None or part is None or not part.state.is_leader
                or part.state.leader_epoch != slot.epoch):
            return map_append_error(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        end = part.log.log_end_offset
        if part.state.is_acked(end - 1):
            return ErrorCode.NONE
        done: asyncio.Future = asyncio.get_running_loop().create_future()
        self._watch_commit(pid, slot.epoch, end - 1, self.replicas.min_insync_replicas(self.loader.image, self.topic),
                           timeout_ms, done, map_append_error)
        return await done

    def _watch_commit(self, pid: int, epoch: int, last_offset: int, min_isr: int, timeout_ms: int,
                      done: asyncio.Future, mapping: Callable[[int], int],
                      on_done: Callable[[int], None] | None = None) -> None:
        """Resolve ``done`` (and call ``on_done``) with ``mapping(error)`` once the high watermark of
        our partition ``pid`` passes ``last_offset`` in coordinator epoch ``epoch`` (NONE, or the
        acks=all error), the leadership is lost, ``timeout_ms`` runs out (REQUEST_TIMED_OUT) or the
        coordinator closes; checked now and in the step that moves the watermark or leadership
        (``ReplicaManager.on_next_change``)."""
        tp = (self.topic, pid)
        timer = None

        def finish(err: int) -> None:
            if done.done():
                return
            self._watching.discard(finish)
            if timer is not None:
                timer.cancel()
            code = mapping(err) if err else err
            done.set_result(code)
            if on_done is not None:
                on_done(code)

        def check() -> None:
            if done.done():
                return
            part = self.replicas.partitions.get(tp)
            if part is None or not part.state.is_leader or part.state.leader_epoch != epoch:
                return finish(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            res = part.state.acks_all_result(last_offset, min_isr)
            if res is not None:
                return finish(res)
            self.replicas.on_next_change(tp, check)

        self._watching.add(finish)
        check()
        if not done.done():
            timer = asyncio.get_running_loop().call_later(timeout_ms / 1000, finish, ErrorCode.REQUEST_TIMED_OUT)

    def append_marker(self, pid: int, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                      transaction_version: int, *, timeout_ms: int) -> tuple[int, asyncio.Future | None]:
        """WriteTxnMarkers for our partition ``pid``: the COMMIT/ABORT marker appended now, acks=all,
        with the partition's errors unmapped (what the transaction coordinator expects); a
        partition not loaded here is NOT_LEADER_OR_FOLLOWER (the coordinator retries)."""
        slot = self.slots.get(pid)
        try:
            if slot is None or slot.shard is None:
                raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            part = self.replicas.leader_partition((self.topic, pid))
            if part.state.leader_epoch != slot.epoch:
                raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            min_isr = self.replicas.min_insync_replicas(self.loader.image, self.topic)
            code = part.state.can_append_acks_all(min_isr)
            if code != ErrorCode.NONE:
                raise KafkaError(code)
            batch = build_end_txn_marker(producer_id, producer_epoch, commit, coordinator_epoch, self.clock.wall_ms())
            info = self.replicas.append(part, batch, parse_batches(batch), origin=COORDINATOR,
                                        transaction_version=transaction_version)
        except KafkaError as e:
            return e.code, None
        self.hooks.replay_marker(slot.shard, producer_id, commit)
        done: asyncio.Future = asyncio.get_running_loop().create_future()
        self._watch_commit(pid, slot.epoch, info.last_offset, min_isr, timeout_ms, done, lambda e: e)
        return ErrorCode.NONE, done

    # --- topic creation -----------------------------------------------------------------------
    async def ensure_topic(self) -> int:
        """Create the topic through the controller if it does not exist (Kafka does it on the
        first FindCoordinator). Returns an error code."""
        if self.topic in self.loader.image.topics_by_name:
            return ErrorCode.NONE
        async with self._create_lock:
            if self.topic in self.loader.image.topics_by_name:
                return ErrorCode.NONE
            live = len(self.loader.image.live_brokers())
            rf = min(self.spec.replication_factor, live)
            if rf < 1:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            try:
                results = await self.controller.create_topics(
                    [NewTopic(self.topic, self.spec.num_partitions, rf, None, self.spec.configs(rf))])
            except KafkaError as e:
                log.info("creating %s failed: %s", self.topic, e)
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            for r in results:
                if r.error not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                    log.warning("creating %s failed: %s %s", self.topic, ErrorCode(r.error).name, r.message)
                    return ErrorCode.COORDINATOR_NOT_AVAILABLE
            log.info("created %s with %d partitions, replication factor %d", self.topic, self.spec.num_partitions, rf)
            for _ in range(100):  # the topic reaches our metadata image shortly after it commits
                if self.topic in self.loader.image.topics_by_name:
                    break
                await asyncio.sleep(0.02)
            return ErrorCode.NONE

    def coordinator_endpoint(self, key: str, listener: str) -> tuple[int, int, str, int]:
        """(error, node id, host, port) of the coordinator of ``key`` for a client of
        ``listener`` (FindCoordinator), once the topic exists."""
        image = self.loader.image
        t = image.topics_by_name.get(self.topic)
        if t is None or not t.partitions:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        p = t.partitions.get(partition_for(key, len(t.partitions)))
        b = image.brokers.get(p.leader) if p is not None and p.leader >= 0 else None
        ep = b.endpoint(listener) if b is not None and not b.fenced else None
        if ep is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        return ErrorCode.NONE, b.id, ep.host, ep.port


__all__ = ["CoordinatorRuntime", "CoordinatorHooks", "Slot", "TopicSpec", "map_append_error", "partition_for",
           "java_string_hashcode"]
