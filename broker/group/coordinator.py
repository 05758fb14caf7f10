"""The group coordinator's asyncio shell: the timers of the groups and the appends of their
records; which ``__consumer_offsets`` partitions this broker coordinates, and their loading
and unloading as leadership moves, is the shared ``CoordinatorRuntime``
(broker/coordinator_runtime.py).

A group's coordinator is the leader of partition ``partition_for(group_id)``. When this
broker becomes that leader (a metadata delta) it reads the partition from its log start
to its end and rebuilds the shard (requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS);
when it stops being leader the shard is dropped and its parked requests get
NOT_COORDINATOR. The group logic itself is the pure ``GroupShard``/``ClassicGroup``.
"""

from __future__ import annotations

import asyncio
import logging

from broker.coordinator_runtime import CoordinatorRuntime, TopicSpec, map_append_error
from broker.group.consumer_group import ConsumerGroupConfig, Topics
from broker.group.shard import GroupShard
from broker.group.state import Effects, GroupConfig, Write
from broker.share.group import ShareGroupConfig
from common.clock import SYSTEM, Clock, wait_event
from metadata import records as mrec

log = logging.getLogger("krafty.group")

OFFSETS_TOPIC = "__consumer_offsets"


def _topics_changed(delta) -> bool:
    """Whether a metadata delta creates or deletes a topic or adds partitions (what consumer
    groups' subscriptions see)."""
    if delta is None or delta.deleted_topics:
        return True
    return any(td.base is None or any(pid not in td.base.partitions for pid in td.changed)
               for td in delta.topics.values())


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
        self.consumer_config = ConsumerGroupConfig(
            session_timeout_ms=config["group.consumer.session.timeout.ms"],
            heartbeat_interval_ms=config["group.consumer.heartbeat.interval.ms"],
            max_size=config["group.consumer.max.size"], assignors=tuple(config["group.consumer.assignors"]),
            migration_policy=config["group.consumer.migration.policy"], classic_max_size=config["group.max.size"],
            group_config=lambda gid: self.loader.image.configs.get((mrec.RESOURCE_GROUP, gid), {}))
        self.share_config = ShareGroupConfig(  # share groups (KIP-932, broker/share/group.py)
            session_timeout_ms=config["group.share.session.timeout.ms"],
            heartbeat_interval_ms=config["group.share.heartbeat.interval.ms"], max_size=config["group.share.max.size"],
            group_config=self.consumer_config.group_config)
        self._topics_image = None
        self._topics: Topics = {}
        self.metadata_max_bytes = config["offset.metadata.max.bytes"]
        self.commit_timeout_ms = config["offsets.commit.timeout.ms"]
        self.retention_ms = config["offsets.retention.minutes"] * 60_000
        self.retention_check_ms = config["offsets.retention.check.interval.ms"]
        spec = TopicSpec(OFFSETS_TOPIC, config["offsets.topic.num.partitions"],
                         config["offsets.topic.replication.factor"],
                         lambda rf: {"cleanup.policy": "compact", "compression.type": "producer",
                                     "segment.bytes": str(config["offsets.topic.segment.bytes"])})
        self.runtime = CoordinatorRuntime(spec, self, broker_id=broker_id, replicas=replicas, loader=loader,
                                          controller=controller, load_buffer=config["offsets.load.buffer.size"],
                                          clock=clock)
        self._wake: asyncio.Event | None = None
        self._tasks: list[asyncio.Task] = []

    @property
    def slots(self):
        return self.runtime.slots

    async def start(self) -> None:
        self._wake = asyncio.Event()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._timer_loop()), loop.create_task(self._expiry_loop())]
        self.runtime.start()

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        self.runtime.close()

    def now(self) -> int:
        """Monotonic ms: the time of sessions and deadlines (the shard's ``now``)."""
        return self.clock.monotonic_ms()

    def wall(self) -> int:
        """Wall-clock ms: the timestamps records carry (the shard's ``wall``)."""
        return self.clock.wall_ms()

    # --- which partitions we coordinate (CoordinatorRuntime and its hooks) --------------------
    def num_partitions(self) -> int:
        return self.runtime.num_partitions()

    def partition_for(self, group_id: str) -> int:
        return self.runtime.partition_for(group_id)

    def on_metadata(self, delta, image) -> None:
        self.runtime.on_metadata(delta, image)
        if not _topics_changed(delta):
            return  # (most deltas: ISR and leader changes)
        before = self._topics
        if self.topics() != before:  # consumer groups subscribed to a changed topic get a new epoch
            for pid, slot in list(self.slots.items()):
                if slot.shard is not None:
                    for w in slot.shard.consumer_metadata_changed(self.now()):
                        self.write(pid, w)
            self._kick()  # regex refreshes are timers

    def topics(self) -> Topics:
        """The topics of the metadata image as consumer groups see them: name -> (id, partitions)."""
        image = self.loader.image
        if image is not self._topics_image:
            self._topics_image = image
            self._topics = {name: (t.topic_id, len(t.partitions)) for name, t in image.topics_by_name.items()
                            if not name.startswith("__")}
        return self._topics

    def new_shard(self, pid: int, epoch: int) -> GroupShard:
        shard = GroupShard(pid, self.group_config, metadata_max_bytes=self.metadata_max_bytes,
                           consumer_config=self.consumer_config, topics=self.topics,
                           image_version=lambda: self.loader.image.offset)
        shard.share_config = self.share_config
        return shard

    def replay(self, shard: GroupShard, key: bytes | None, value: bytes | None, offset: int = -1,
               producer_id: int = -1) -> None:
        shard.replay(key, value, self.now(), offset, producer_id, self.wall())

    def replay_marker(self, shard: GroupShard, producer_id: int, commit: bool) -> None:
        """A transaction marker: the producer's pending transactional offsets commit or go."""
        shard.replay_end_txn(producer_id, commit, self.now(), self.wall())

    def on_loaded(self, pid: int, epoch: int, shard: GroupShard, records: int, bad: int, seconds: float) -> None:
        now = self.now()
        for g in shard.groups.values():
            for m in g.members.values():
                m.heartbeat_deadline = now + m.session_timeout_ms
        for cg in shard.consumer_groups.values():
            cg.on_loaded(now, self.consumer_config, self.topics())
        for sg in shard.share_groups.values():
            sg.on_loaded(now, self.share_config)
        log.log(logging.INFO if records else logging.DEBUG,
                "%s-%d: loaded %d groups (%d records%s) in epoch %d in %.3fs", OFFSETS_TOPIC, pid,
                len(shard.groups), records, f", {bad} undecodable" if bad else "", epoch, seconds)
        self._kick()

    def on_unloaded(self, pid: int, epoch: int, shard: GroupShard | None) -> None:
        if shard is not None:
            self._run(pid, shard.unload(self.now()))
            log.debug("%s-%d: unloaded group coordinator state", OFFSETS_TOPIC, pid)

    def shard_for(self, group_id: str) -> GroupShard:
        """The loaded shard of a group; raises NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS."""
        return self.runtime.slot_for(group_id)[1].shard

    def loaded_shards(self) -> list[GroupShard]:
        return [s.shard for _, s in self.runtime.loaded()]

    def any_loading(self) -> bool:
        return self.runtime.any_loading()

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

    async def run_and_wait(self, shard: GroupShard, fx: Effects) -> int:
        """``run``, then wait until the writes are committed: the first error, or 0."""
        for waiter, resp in fx.replies:
            if not waiter.done():
                waiter.set_result(resp)
        written = [self.write(shard.partition, w) for w in fx.writes]
        self._kick()
        errors = [await f for f in written]
        return next((e for e in errors if e), 0)

    def _kick(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def write(self, pid: int, w: Write, offsets: bool = False) -> asyncio.Future:
        """Append ``w.records`` to our partition now (so the state and the log agree in order)
        and resolve to the error code once the high watermark passes them."""
        err, committed = self.runtime.append(pid, w.records, timeout_ms=self.commit_timeout_ms, offsets=offsets,
                                             producer_id=w.producer_id, producer_epoch=w.producer_epoch,
                                             verification_guard=w.verification_guard,
                                             on_appended=lambda offset: setattr(w, "base_offset", offset))
        if committed is None:
            self._write_done(pid, w, err)
            done: asyncio.Future = asyncio.get_running_loop().create_future()
            done.set_result(err)
            return done
        if w.on_append is not None:
            w.on_append()
        committed.add_done_callback(lambda f: self._write_done(pid, w, f.result()))
        return committed

    def _write_done(self, pid: int, w: Write, err: int) -> None:
        """The write is committed (``err`` 0) or failed: the shard's callbacks, then the replies."""
        if err and w.on_fail is not None:
            self._run(pid, w.on_fail(err, self.now()))
        if w.on_done is not None:
            self._run(pid, w.on_done(err, self.now()))
        self._reply_all(w.replies, err)

    @staticmethod
    def _reply_all(replies, err: int) -> None:
        for waiter, resp in replies:
            if waiter.done():
                continue
            if err:
                resp = dict(resp, error_code=int(err))
            waiter.set_result(resp)

    async def complete_transaction(self, pid: int, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                                   commit: bool, transaction_version: int, timeout_ms: int) -> int:
        """WriteTxnMarkers for our partition ``pid``: the marker is written by the coordinator
        itself, so that its pending transactional offsets commit or go in the same order as the
        log (Kafka 4's GroupCoordinator.completeTransaction). Returns the partition's error code."""
        err, committed = self.runtime.append_marker(pid, producer_id, producer_epoch, commit, coordinator_epoch,
                                                    transaction_version, timeout_ms=timeout_ms)
        if committed is None:
            return err
        self._kick()
        return await committed

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
            await wait_event(self._wake, wait)

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
        """Create ``__consumer_offsets`` through the controller if it does not exist (Kafka does
        it on the first FindCoordinator). Returns an error code."""
        return await self.runtime.ensure_topic()

    def new_member_id(self, client_id: str) -> str:
        return f"{client_id}-{self.clock.uuid4()}"


__all__ = ["GroupCoordinator", "OFFSETS_TOPIC", "map_append_error"]
