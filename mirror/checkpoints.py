"""MirrorCheckpointConnector/Task for one flow A->B: reads the offset syncs, translates the
committed offsets of A's consumer groups (``groups``/``groups.exclude``) to B's offsets, writes
them as Checkpoint records to ``A.checkpoints.internal`` on B every
``emit.checkpoints.interval.seconds`` and, with ``sync.group.offsets.enabled``, commits them to
the group on B while that group has no active member there (so it can fail over and resume where
it stopped on A, re-reading at most the records after the closest sync, skipping none)."""

from __future__ import annotations

import logging
import time

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from common.clock import SYSTEM, Clock
from mirror import clients
from mirror.clients import Admin
from mirror.config import ClusterClients, FlowConfig
from mirror.formats import Checkpoint, OffsetSync, SchemaError
from mirror.offsets import OffsetSyncStore, checkpoint_filter, group_offsets_to_sync
from mirror.policy import SourceTopics

log = logging.getLogger("krafty.mirror")


def read_to_end(consumer, topic: str, partition: int, handle, timeout: float, clock: Clock = SYSTEM) -> bool:
    """Consumes ``topic``-``partition`` (already assigned) up to its current end, passing each
    record to ``handle``; True when the end was reached within ``timeout``."""
    tp = TopicPartition(topic, partition)
    deadline = clock.monotonic() + timeout
    while True:
        try:
            _, end = consumer.get_watermark_offsets(tp, timeout=max(1.0, deadline - clock.monotonic()), cached=False)
            break
        except KafkaException as e:
            # a topic just created may not have reached every broker's metadata yet
            if clock.monotonic() > deadline or not e.args[0].retriable() and \
                    e.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                log.warning("cannot read the end of %s: %s", topic, e.args[0].str())
                return False
            time.sleep(0.2)
    while True:
        pos = consumer.position([tp])[0].offset
        if end <= 0 or (pos >= 0 and pos >= end):
            return True
        if clock.monotonic() > deadline:
            return False
        for m in consumer.consume(1000, 0.2):
            if m.error() is None:
                handle(m)


class CheckpointTask:
    def __init__(self, flow: FlowConfig, source: ClusterClients, target: ClusterClients, source_admin: Admin,
                 target_admin: Admin, clock: Clock = SYSTEM):
        self.flow = flow
        self.clock = clock
        self.source_admin, self.target_admin = source_admin, target_admin
        self.selection = SourceTopics(flow.source, flow.target, flow.policy, flow.topic_filter,
                                      flow["heartbeats.replication.enabled"])
        self.sync_topic = flow.policy.offset_syncs_topic(flow.target)
        self.checkpoints_topic = flow.policy.checkpoints_topic(flow.source)
        self.timeout = flow["admin.timeout.ms"] / 1000
        where = source if flow["offset-syncs.topic.location"] == "source" else target
        self.sync_reader = clients.consumer(where, **{"client.id": f"krafty-mirror-{flow.name}-syncs-reader",
                                                      "isolation.level": "read_uncommitted"})
        self.sync_reader.assign([TopicPartition(self.sync_topic, 0, 0)])
        self.producer = clients.producer(target, **{"client.id": f"krafty-mirror-{flow.name}-checkpoints"})
        self.store = OffsetSyncStore()
        self.checkpoints: dict[str, dict[tuple[str, int], Checkpoint]] = {}
        self.groups: list[str] = []
        self.started = False
        self._target = target

    def create_topic(self) -> None:
        self.target_admin.ensure_compacted_topic(self.checkpoints_topic, self.flow["checkpoints.topic.replication.factor"],
                                                 f"{self.flow.name}.checkpoints.topic.replication.factor")

    def start(self) -> None:
        """Loads the checkpoints emitted before and the offset syncs."""
        reader = clients.consumer(self._target, **{"client.id": f"krafty-mirror-{self.flow.name}-checkpoints-reader"})
        try:
            reader.assign([TopicPartition(self.checkpoints_topic, 0, 0)])

            def load(m):
                try:
                    cp = Checkpoint.decode(m.key(), m.value())
                except SchemaError as e:
                    log.warning("flow %s: ignored an invalid checkpoint at offset %d: %s", self.flow.name, m.offset(), e)
                    return
                self.checkpoints.setdefault(cp.group, {})[(cp.topic, cp.partition)] = cp

            loaded = read_to_end(reader, self.checkpoints_topic, 0, load, self.timeout, self.clock)
        finally:
            reader.close()
        # MM2: without the previous checkpoints only syncs read after the start may translate
        self.store.must_read_to_end = not loaded
        if not self._read_syncs():
            raise clients.MirrorError(f"flow {self.flow.name}: cannot read {self.sync_topic} to its end")
        self.store.read_to_end = True
        self.started = True

    def _read_syncs(self) -> bool:
        def handle(m):
            try:
                self.store.handle(OffsetSync.decode(m.key(), m.value()))
            except SchemaError as e:
                log.warning("flow %s: ignored an invalid offset sync at offset %d: %s", self.flow.name, m.offset(), e)
        return read_to_end(self.sync_reader, self.sync_topic, 0, handle, self.timeout, self.clock)

    # ----------------------------------------------------------------- groups on the source
    def refresh_groups(self) -> list[str]:
        """MirrorCheckpointConnector.findConsumerGroups: groups passing the filter that have an
        offset for at least one topic the flow replicates."""
        try:
            listed = self.source_admin.client.list_consumer_groups(request_timeout=self.timeout).result(self.timeout)
        except KafkaException as e:
            raise clients.MirrorError(f"cluster {self.flow.source}: cannot list consumer groups: "
                                      f"{e.args[0].str()}") from None
        groups = []
        for g in sorted(x.group_id for x in listed.valid):
            if not self.flow.group_filter(g):
                continue
            offsets = self._group_offsets(self.source_admin, g)
            if any(self.flow.topic_filter(t) for t, _ in (offsets or {})):
                groups.append(g)
        self.groups = groups
        return groups

    def _group_offsets(self, admin: Admin, group: str) -> dict[tuple[str, int], tuple[int, str]] | None:
        try:
            res = admin.client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                           request_timeout=self.timeout)[group].result(self.timeout)
        except KafkaException as e:
            log.warning("flow %s: cannot list the offsets of group %s on %s: %s", self.flow.name, group,
                        admin.alias, e.args[0].str())
            return None
        return {(tp.topic, tp.partition): (tp.offset, tp.metadata or "")
                for tp in res.topic_partitions or [] if tp.offset >= 0 and tp.error is None}

    # ----------------------------------------------------------------- checkpoints
    def emit_checkpoints(self) -> int:
        """Translates and writes every group's checkpoints; returns how many were written."""
        if not self.started:
            return 0
        self._read_syncs()
        n = 0
        for group in self.groups:
            offsets = self._group_offsets(self.source_admin, group)
            if offsets is None:
                continue
            candidates = []
            for (topic, partition), (offset, meta) in sorted(offsets.items()):
                if not self.flow.topic_filter(topic):
                    continue
                down = self.store.translate_downstream(topic, partition, offset)
                if down is None:
                    continue
                candidates.append(Checkpoint(group, self.selection.rename_for_checkpoint(topic), partition,
                                             offset, down, meta))
            new = checkpoint_filter(candidates, self.checkpoints.get(group))
            ts = self.clock.wall_ms()
            for cp in new:
                self.producer.produce(self.checkpoints_topic, key=cp.key(), value=cp.value(), partition=0, timestamp=ts)
                self.checkpoints.setdefault(group, {})[(cp.topic, cp.partition)] = cp
                n += 1
        if n:
            left = self.producer.flush(self.timeout)
            if left:
                log.warning("flow %s: %d checkpoints not acknowledged by %s", self.flow.name, left, self.flow.target)
        return n

    # ----------------------------------------------------------------- group offsets on the target
    def sync_group_offsets(self) -> dict[str, dict[tuple[str, int], int]]:
        """Commits the checkpoints' offsets to the target's groups that are empty or unknown there,
        only forward. Returns what was written, per group."""
        groups = [g for g in self.checkpoints if g in self.groups]
        if not groups:
            return {}
        try:
            described = self.target_admin.client.describe_consumer_groups(groups, request_timeout=self.timeout)
        except KafkaException as e:
            log.warning("flow %s: cannot describe groups on %s: %s", self.flow.name, self.flow.target, e.args[0].str())
            return {}
        written = {}
        for group, fut in described.items():
            try:
                state = fut.result(self.timeout).state
            except KafkaException as e:
                log.warning("flow %s: cannot describe group %s on %s: %s", self.flow.name, group, self.flow.target,
                            e.args[0].str())
                continue
            if state == ConsumerGroupState.EMPTY:
                have = self._group_offsets(self.target_admin, group)
                if have is None:
                    continue
                target_committed = {tp: off for tp, (off, _) in have.items()}
            elif state == ConsumerGroupState.DEAD:
                target_committed = None  # a group new to the target
            else:
                continue  # members are active there: their commits win
            converted = {tp: (cp.downstream_offset, cp.metadata) for tp, cp in self.checkpoints[group].items()}
            todo = group_offsets_to_sync(converted, target_committed)
            if not todo:
                continue
            tps = [TopicPartition(t, p, off, metadata=meta) if meta else TopicPartition(t, p, off)
                   for (t, p), (off, meta) in sorted(todo.items())]
            try:
                self.target_admin.client.alter_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions(group, tps)], request_timeout=self.timeout)[group].result(self.timeout)
            except KafkaException as e:
                log.warning("flow %s: unable to sync offsets for group %s on %s (is it in use there?): %s",
                            self.flow.name, group, self.flow.target, e.args[0].str())
                continue
            written[group] = {tp: off for tp, (off, _) in todo.items()}
        return written

    def close(self) -> None:
        try:
            self.sync_reader.close()
        except (KafkaException, RuntimeError):
            pass
        self.producer.flush(5)
