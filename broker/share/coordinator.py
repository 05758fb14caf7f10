"""The share coordinator's asyncio shell (Kafka's ShareCoordinatorService): the share-group state
of the ``__share_group_state`` partitions this broker leads. Loading on leadership, unloading
when it moves, acks=all appends and topic creation are the shared ``CoordinatorRuntime``
(broker/coordinator_runtime.py); the state and its records are the pure ``ShareStateShard``
(broker/share/state.py).

A share partition (group, topic id, partition) belongs to partition
``partition_for("group:topicId:partition")`` of the topic (FindCoordinator key type SHARE). Each
request is answered once its record is committed (acks=all); the record is applied to the
shard when appended, so the shard and the log agree in order.

The topic's records are not compacted (an update only makes sense after its snapshot): the
topic is created with ``cleanup.policy=delete`` and no retention, and the coordinator prunes it
itself, moving the log start to the oldest snapshot any share partition still needs
(``share.coordinator.state.topic.prune.interval.ms``), as Kafka does.
"""

from __future__ import annotations

import asyncio
import logging

from broker.coordinator_runtime import CoordinatorRuntime, TopicSpec
from broker.share import records as sr
from broker.share.records import StateBatch, StateKey
from broker.share.state import ShareStateShard
from common.clock import SYSTEM, Clock
from common.errors import ErrorCode, KafkaError

log = logging.getLogger("krafty.share.coordinator")

SHARE_STATE_TOPIC = "__share_group_state"


class ShareCoordinator:
    def __init__(self, config, broker_id: int, replicas, loader, controller, clock: Clock = SYSTEM):
        self.config = config
        self.clock = clock
        self.replicas = replicas
        self.write_timeout_ms = config["share.coordinator.write.timeout.ms"]
        self.records_per_snapshot = config["share.coordinator.snapshot.update.records.per.snapshot"]
        self.prune_interval_s = config["share.coordinator.state.topic.prune.interval.ms"] / 1000
        min_isr = config["share.coordinator.state.topic.min.isr"]
        spec = TopicSpec(SHARE_STATE_TOPIC, config["share.coordinator.state.topic.num.partitions"],
                         config["share.coordinator.state.topic.replication.factor"],
                         lambda rf: {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1",
                                     "compression.type": "producer", "min.insync.replicas": str(min(min_isr, rf)),
                                     "segment.bytes": str(config["share.coordinator.state.topic.segment.bytes"])})
        self.runtime = CoordinatorRuntime(spec, self, broker_id=broker_id, replicas=replicas, loader=loader,
                                          controller=controller,
                                          load_buffer=config["share.coordinator.load.buffer.size"], clock=clock)
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        self.runtime.start()

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        self.runtime.close()

    def on_metadata(self, delta, image) -> None:
        self.runtime.on_metadata(delta, image)

    # --- CoordinatorHooks ----------------------------------------------------------------------
    def new_shard(self, pid: int, epoch: int) -> ShareStateShard:
        return ShareStateShard(pid, self.records_per_snapshot)

    def replay(self, shard: ShareStateShard, key, value, offset: int = -1, producer_id: int = -1) -> None:
        shard.replay(key, value, offset)

    def replay_marker(self, shard, producer_id: int, commit: bool) -> None:
        pass  # the share coordinator writes no transactional records

    def on_loaded(self, pid: int, epoch: int, shard: ShareStateShard, records: int, bad: int, seconds: float) -> None:
        if not self._tasks:  # pruning starts with the first partition this broker coordinates
            self._tasks.append(asyncio.get_running_loop().create_task(self._prune_loop(), name="share-state-prune"))
        log.log(logging.INFO if records else logging.DEBUG,
                "%s-%d: loaded the state of %d share partitions (%d records%s) in epoch %d in %.3fs",
                SHARE_STATE_TOPIC, pid, len(shard.states), records, f", {bad} undecodable" if bad else "", epoch,
                seconds)

    def on_unloaded(self, pid: int, epoch: int, shard) -> None:
        log.debug("%s-%d: unloaded share coordinator state", SHARE_STATE_TOPIC, pid)

    # --- requests ------------------------------------------------------------------------------
    async def _apply(self, k: StateKey, op) -> dict:
        """Run ``op(shard) -> (result, records)`` on the key's shard, append its records (acks=all)
        and answer once they are committed. Raises KafkaError NOT_COORDINATOR /
        COORDINATOR_LOAD_IN_PROGRESS when the key's partition is not loaded here."""
        pid, slot = self.runtime.slot_for(k.coordinator_key())
        shard: ShareStateShard = slot.shard
        result, records = op(shard)
        if not records:
            if result["error_code"] == ErrorCode.NONE:
                # an answer read from memory: what the last leader appended may not be committed yet
                err = await self.runtime.await_state_committed(pid, self.write_timeout_ms)
                if err:
                    return dict(result, error_code=int(err), error_message=None)
            return result
        def applied(first: int) -> None:  # appended: the shard and the log agree in order
            for i, (key, value) in enumerate(records):
                shard.replay(key, value, first + i)

        err, committed = self.runtime.append(pid, records, timeout_ms=self.write_timeout_ms, epoch=slot.epoch,
                                             on_appended=applied)
        if committed is None:
            return dict(result, error_code=int(err), error_message=None)
        err = await committed
        if err:
            return dict(result, error_code=int(err), error_message=None)
        return result

    async def read(self, k: StateKey, leader_epoch: int) -> dict:
        return await self._apply(k, lambda s: s.read(k, leader_epoch))

    async def summary(self, k: StateKey) -> dict:
        return await self._apply(k, lambda s: (s.summary(k), []))

    async def write(self, k: StateKey, state_epoch: int, leader_epoch: int, start_offset: int,
                    batches: tuple[StateBatch, ...], delivery_complete_count: int) -> dict:
        wall = self.clock.wall_ms()
        return await self._apply(k, lambda s: s.write(k, state_epoch, leader_epoch, start_offset, batches,
                                                      delivery_complete_count, wall))

    async def initialize(self, k: StateKey, state_epoch: int, start_offset: int) -> dict:
        wall = self.clock.wall_ms()
        return await self._apply(k, lambda s: s.initialize(k, state_epoch, start_offset, wall))

    async def delete(self, k: StateKey) -> dict:
        return await self._apply(k, lambda s: s.delete(k))

    # --- pruning -------------------------------------------------------------------------------
    async def _prune_loop(self) -> None:
        while True:
            await asyncio.sleep(self.prune_interval_s)
            try:
                self.prune()
            except Exception:
                log.exception("pruning %s failed", SHARE_STATE_TOPIC)

    def prune(self) -> int:
        """Moves the log start of each loaded partition to the oldest record still needed (the
        latest snapshot of every share partition and the updates after it), if committed.
        Returns how many partitions moved."""
        moved = 0
        for pid, slot in self.runtime.loaded():
            shard: ShareStateShard = slot.shard
            part = self.replicas.partitions.get((SHARE_STATE_TOPIC, pid))
            if part is None or not part.state.is_leader or part.state.leader_epoch != slot.epoch:
                continue
            keep = shard.prune_offset()
            if keep is None:
                keep = part.log.log_end_offset  # no state left: everything may go
            keep = min(keep, part.state.high_watermark)
            if keep > part.log.log_start_offset:
                try:
                    self.replicas.delete_records((SHARE_STATE_TOPIC, pid), keep)
                    moved += 1
                except KafkaError as e:
                    log.debug("%s-%d: not pruned: %s", SHARE_STATE_TOPIC, pid, e)
        return moved


def key_from(group_id: str, topic_id, partition: int) -> StateKey:
    return sr.StateKey(group_id, topic_id, partition)


__all__ = ["ShareCoordinator", "SHARE_STATE_TOPIC", "key_from"]
