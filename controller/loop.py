"""The active quorum controller: one asyncio event loop over the metadata log.

Each write is a pure manager call ``image -> (records, result)`` (controller/topics.py
and friends). Writes run one at a time: the records are appended through the metadata
log, and the caller is answered once they are committed and replayed into the image, so
no caller ever sees state that could still be lost. Nothing uncommitted is kept in
memory, so resigning needs no revert. Standby controllers just replay the log."""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import Callable
from typing import Any

from common.errors import ErrorCode, KafkaError
from controller import topics as topic_ops
from metadata import records as r
from metadata.image import MetadataImage
from metadata.loader import MetadataLoader

log = logging.getLogger("krafty.controller")

PRODUCER_ID_BLOCK_SIZE = 1000
METADATA_VERSION = 21  # Kafka 4.0's metadata.version (4.0-IV3)


class QuorumController:
    def __init__(self, node_id: int, metadata_log, loader: MetadataLoader, *, cluster_id: str,
                 defaults: topic_ops.TopicDefaults, rng: random.Random | None = None):
        self.node_id = node_id
        self.log = metadata_log
        self.loader = loader
        self.cluster_id = cluster_id
        self.defaults = defaults
        self.rng = rng or random.Random()
        self._lock = asyncio.Lock()
        self._applied = asyncio.Event()
        self._bootstrap_task: asyncio.Task | None = None
        loader.add_publisher(self._on_publish, catch_up=False)
        loader.add_leader_listener(self._on_leader_change)

    # --- state ---------------------------------------------------------------------------
    @property
    def image(self) -> MetadataImage:
        return self.loader.image

    def is_active(self) -> bool:
        leader = self.log.leader()
        return leader.leader_id == self.node_id

    def _on_publish(self, delta, image) -> None:
        self._applied.set()

    def _on_leader_change(self, leader) -> None:
        if leader.leader_id == self.node_id:
            log.info("became the active controller in epoch %d", leader.epoch)
            self._bootstrap_task = asyncio.get_running_loop().create_task(self._bootstrap())

    async def _bootstrap(self) -> None:
        """The first active controller writes the cluster id and metadata.version."""
        def op(image: MetadataImage):
            recs = []
            if image.cluster_id is None:
                recs.append(r.ClusterIdRecord(self.cluster_id))
            if "metadata.version" not in image.features:
                recs.append(r.FeatureLevelRecord("metadata.version", METADATA_VERSION))
            return recs, None
        try:
            await self.write(op)
        except KafkaError as e:
            log.info("controller bootstrap skipped: %s", e)

    async def _wait_applied(self, offset: int) -> None:
        while self.loader.image.offset < offset:
            self._applied.clear()
            await self._applied.wait()

    async def write(self, op: Callable[[MetadataImage], tuple[list[Any], Any]]) -> Any:
        async with self._lock:
            leader = self.log.leader()
            if leader.leader_id != self.node_id:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, "this node is not the active controller")
            records, result = op(self.loader.image)
            if records:
                offset = await self.log.append([r.encode(x) for x in records], leader.epoch)
                await self._wait_applied(offset)
            return result

    # --- operations --------------------------------------------------------------------
    async def create_topics(self, new_topics: list[topic_ops.NewTopic], validate_only: bool = False
                            ) -> list[topic_ops.CreateTopicResult]:
        def op(image):
            recs, results = topic_ops.create_topics(image, new_topics, self.defaults, self.rng)
            return ([] if validate_only else recs), results
        return await self.write(op)

    async def delete_topics(self, names, ids):
        return await self.write(lambda image: topic_ops.delete_topics(image, names, ids))

    async def create_partitions(self, topic: str, count: int, assignments, validate_only: bool = False) -> None:
        def op(image):
            recs = topic_ops.create_partitions(image, topic, count, assignments, self.rng)
            return ([] if validate_only else recs), None
        return await self.write(op)

    async def alter_topic_configs(self, topic: str, ops, validate_only: bool = False) -> None:
        def op(image):
            recs = topic_ops.alter_topic_configs(image, topic, ops)
            return ([] if validate_only else recs), None
        return await self.write(op)

    async def register_broker(self, broker_id: int, incarnation_id: uuid.UUID, endpoints, rack: str | None
                              ) -> int:
        """Registers (or re-registers) a broker, unfenced; returns its broker epoch."""
        def op(image: MetadataImage):
            epoch = image.offset + 1  # KRaft uses the record's offset as the broker epoch
            rec = r.RegisterBrokerRecord(broker_id, incarnation_id, epoch, tuple(endpoints), rack, fenced=False)
            return [rec], epoch
        return await self.write(op)

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> tuple[int, int]:
        def op(image: MetadataImage):
            start = image.next_producer_id
            return [r.ProducerIdsRecord(broker_id, broker_epoch, start + PRODUCER_ID_BLOCK_SIZE)], (
                start, PRODUCER_ID_BLOCK_SIZE)
        return await self.write(op)
