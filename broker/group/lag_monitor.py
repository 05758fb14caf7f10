"""The shell of consumer-lag export: every ``interval`` it samples the high watermark of each
partition a group on this coordinator has committed offsets for, into an OffsetTimeline
(broker/group/lag.py). Partitions this broker leads are read in memory; the others are asked
of their leaders with one ListOffsets (latest, read_uncommitted: the high watermark) per
leader broker, over the inter-broker listener, as kafka-exporter asks from outside. It runs
only while metrics are served."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from broker.group.lag import OffsetTimeline
from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from common.clock import SYSTEM, Clock

log = logging.getLogger("krafty.metrics")
LIST_OFFSETS_VERSION = 4
TopicPartition = tuple[str, int]


class ConsumerLagMonitor:
    def __init__(self, broker, interval_s: float, *, clock: Clock = SYSTEM):
        self.broker = broker
        self.interval_s = interval_s
        self.clock = clock
        self.timelines: dict[TopicPartition, OffsetTimeline] = {}
        self._conns: dict[int, KafkaConnection] = {}
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="consumer-lag")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    def committed(self) -> set[TopicPartition]:
        """Every partition with a committed offset in a group this broker coordinates."""
        gc = self.broker.apis.group_coordinator
        return {tp for shard in gc.loaded_shards() for offs in shard.offsets.values() for tp in offs}

    async def _run(self) -> None:
        while True:
            try:
                await self.sample()
            except Exception:  # noqa: BLE001 - a failed sample must not end the export
                log.exception("consumer lag sampling failed")
            await asyncio.sleep(self.interval_s)

    async def sample(self) -> None:
        wanted = self.committed()
        for tp in [tp for tp in self.timelines if tp not in wanted]:
            del self.timelines[tp]
        if not wanted:
            return
        image = self.broker.loader.image
        replicas = self.broker.replicas
        remote: dict[int, list[TopicPartition]] = {}
        now = self.clock.wall_ms()
        for tp in wanted:
            part = replicas.partitions.get(tp)
            if part is not None and part.state.is_leader:
                self._observe(tp, part.state.high_watermark, now)
                continue
            t = image.topics_by_name.get(tp[0])
            reg = t.partitions.get(tp[1]) if t else None
            if reg is not None and reg.leader >= 0:
                remote.setdefault(reg.leader, []).append(tp)
        if remote:
            await asyncio.gather(*(self._ask(leader, tps) for leader, tps in remote.items()))

    def _observe(self, tp: TopicPartition, hw: int, now_ms: int) -> None:
        tl = self.timelines.get(tp)
        if tl is None:
            tl = self.timelines[tp] = OffsetTimeline()
        tl.observe(hw, now_ms)

    async def _ask(self, leader: int, tps: list[TopicPartition]) -> None:
        ep = self.broker._endpoint_of(leader)
        if ep is None:
            return
        conn = self._conns.get(leader)
        if conn is None or (conn.host, conn.port) != ep:
            if conn is not None:
                conn.close()
            conn = self._conns[leader] = KafkaConnection(
                ep[0], ep[1], client_id=f"broker-{self.broker.node_id}-lag",
                security=self.broker.inter_broker_security)
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        try:
            resp = await conn.request(ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, {
                "replica_id": -1, "isolation_level": 0, "topics": [
                    {"name": t, "partitions": [{"partition_index": p, "current_leader_epoch": -1, "timestamp": -1}
                                               for p in ps]} for t, ps in by_topic.items()]},
                timeout=max(self.interval_s, 5.0))
        except (ConnectionError, TimeoutError) as e:
            log.debug("consumer lag: ListOffsets to broker %d failed: %s", leader, e)
            return
        now = self.clock.wall_ms()
        for t in resp.topics:
            for p in t.partitions:
                if int(p.error_code) == 0 and p.offset >= 0:
                    self._observe((t.name, p.partition_index), p.offset, now)
