"""The replica manager: this broker's partitions, driven by metadata deltas.

It owns the logs (through the LogManager), appends produced batches as leader, serves reads
bounded by the high watermark, and wakes fetches waiting for data (the fetch purgatory).
It is the publisher that turns ``delta.local_changes(broker_id)`` into leader/follower
transitions and log deletions."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import Iterable

from broker.log.log import Log
from broker.log.manager import LogManager
from broker.replica.partition import PartitionState
from common.config import topic_defaults
from common.errors import ErrorCode, KafkaError
from metadata.delta import MetadataDelta
from metadata.image import MetadataImage

log = logging.getLogger("krafty.replica")

TopicPartition = tuple[str, int]


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclasses.dataclass(slots=True)
class Partition:
    state: PartitionState
    log: Log


class ReplicaManager:
    def __init__(self, broker_id: int, config, log_manager: LogManager):
        self.broker_id = broker_id
        self.config = config
        self.logs = log_manager
        self.partitions: dict[TopicPartition, Partition] = {}
        self._defaults = topic_defaults(config)
        self._waiters: dict[TopicPartition, list[asyncio.Future]] = {}

    # --- metadata ------------------------------------------------------------------------
    def topic_config(self, image: MetadataImage, topic: str) -> dict:
        cfg = dict(self._defaults)
        cfg.update(image.topic_config(topic))
        return cfg

    def min_insync_replicas(self, image: MetadataImage, topic: str) -> int:
        v = image.topic_config(topic).get("min.insync.replicas")
        return int(v) if v is not None else self._defaults["min.insync.replicas"]

    def on_metadata(self, delta: MetadataDelta, image: MetadataImage) -> None:
        changes = delta.local_changes(self.broker_id)
        for tp in changes.deletes:
            self._delete(tp)
        for tp, (tid, reg) in list(changes.leaders.items()) + list(changes.followers.items()):
            self._apply(image, tp, tid, reg)
        # config changes for partitions we host
        for (rtype, name) in delta.configs:
            if rtype == 2 and name in image.topics_by_name:
                self.logs.update_config(name, self.topic_config(image, name))
        if delta.snapshot_loaded:
            # drop partitions the image no longer assigns to us (e.g. deleted while we were down)
            for tp in list(self.partitions):
                t = image.topics_by_name.get(tp[0])
                p = t.partitions.get(tp[1]) if t else None
                if p is None or self.broker_id not in p.replicas:
                    self._delete(tp)

    def _apply(self, image: MetadataImage, tp: TopicPartition, tid: uuid.UUID, reg) -> None:
        part = self.partitions.get(tp)
        if part is not None and part.state.topic_id != tid:
            self._delete(tp)  # recreated with the same name
            part = None
        if part is None:
            lg = self.logs.get_or_create(tp[0], tp[1], tid, self.topic_config(image, tp[0]))
            part = Partition(PartitionState(tp[0], tp[1], tid, self.broker_id), lg)
            self.partitions[tp] = part
        st = part.state
        if st.become(reg.leader, reg.leader_epoch, reg.partition_epoch, reg.replicas, reg.isr):
            if st.is_leader:
                log.info("%s-%d: leader in epoch %d at offset %d", tp[0], tp[1], reg.leader_epoch,
                         part.log.log_end_offset)
                part.log.leader_epoch_cache.assign(reg.leader_epoch, part.log.log_end_offset)
                st.high_watermark = max(st.high_watermark, 0)
                st.maybe_advance_hw(part.log.log_end_offset)
            self._wake(tp)

    def _delete(self, tp: TopicPartition) -> None:
        part = self.partitions.pop(tp, None)
        if part is not None:
            self.logs.delete(tp[0], tp[1])
            log.info("%s-%d: deleted", tp[0], tp[1])
        self._wake(tp)

    # --- produce ----------------------------------------------------------------------------
    def leader_partition(self, tp: TopicPartition) -> Partition:
        part = self.partitions.get(tp)
        if part is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if not part.state.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return part

    def append(self, part: Partition, buf, headers):
        info = part.log.append_as_leader(buf, headers, part.state.leader_epoch, now_ms())
        if part.state.maybe_advance_hw(part.log.log_end_offset):
            self._wake((part.state.topic, part.state.partition))
        return info

    # --- fetch purgatory ---------------------------------------------------------------------
    def _wake(self, tp: TopicPartition) -> None:
        for fut in self._waiters.pop(tp, ()):
            if not fut.done():
                fut.set_result(None)

    async def wait_for_data(self, tps: Iterable[TopicPartition], timeout_s: float) -> None:
        """Returns when any of the partitions' high watermark or state changes, or on timeout."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        keys = list(tps)
        for tp in keys:
            self._waiters.setdefault(tp, []).append(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            pass
        finally:
            for tp in keys:
                lst = self._waiters.get(tp)
                if lst:
                    try:
                        lst.remove(fut)
                    except ValueError:
                        pass
                    if not lst:
                        del self._waiters[tp]

    def close(self) -> None:
        for tp in list(self._waiters):
            self._wake(tp)
