"""How partition leaders and the group coordinator reach the share coordinator (Kafka's
DefaultStatePersister): ReadShareGroupState, WriteShareGroupState, InitializeShareGroupState,
DeleteShareGroupState and ReadShareGroupStateSummary for one share partition, sent to the leader
of its ``__share_group_state`` partition: in process when that is this broker, else over the
inter-broker listener (the replica fetchers' endpoints and security), where the calls for one
group that wait while a request to the same coordinator is in flight go together in the next one
(Kafka's persister batches so too). Retriable answers
(NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, a lost connection)
are tried again, at the then current coordinator, until ``timeout_s``; the last error is returned.
"""

from __future__ import annotations

import asyncio
import logging

from broker.coordinator_runtime import partition_for
from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from broker.share.coordinator import SHARE_STATE_TOPIC, ShareCoordinator
from broker.share.records import StateBatch, StateKey
from common.clock import SYSTEM, Clock
from common.errors import ErrorCode, KafkaError

log = logging.getLogger("krafty.share.persister")

_RETRY = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
          ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS}
BACKOFF_S = 0.05
MAX_BACKOFF_S = 0.5


class SharePersister:
    def __init__(self, coordinator: ShareCoordinator, loader, fetchers, broker_id: int, *, timeout_s: float = 10.0,
                 clock: Clock = SYSTEM):
        self.coordinator = coordinator
        self.loader = loader
        self.fetchers = fetchers
        self.broker_id = broker_id
        self.timeout_s = timeout_s
        self.clock = clock
        self.conns: dict[int, KafkaConnection] = {}
        # (broker, api, version, group) -> partitions waiting for the next request: (topic id, partition
        # data, future of its partition result); one request in flight per connection
        self._queued: dict[tuple[int, int, int, str], list] = {}
        self._sending: set[tuple[int, int, int, str]] = set()

    def close(self) -> None:
        for c in self.conns.values():
            c.close()
        self.conns.clear()

    def _leader(self, k: StateKey) -> int:
        t = self.loader.image.topics_by_name.get(SHARE_STATE_TOPIC)
        if t is None or not t.partitions:
            return -1
        p = t.partitions.get(partition_for(k.coordinator_key(), len(t.partitions)))
        return p.leader if p is not None else -1

    def _conn(self, broker: int) -> KafkaConnection | None:
        ep = self.fetchers.endpoint_of(broker)
        if ep is None:
            return None
        c = self.conns.get(broker)
        if c is None or (c.host, c.port) != ep:
            if c is not None:
                c.close()
            c = self.conns[broker] = KafkaConnection(ep[0], ep[1], client_id=f"broker-{self.broker_id}-share-persister",
                                                     security=self.fetchers.security)
        return c

    async def _call(self, k: StateKey, local, api_key: int, version: int, data: dict, result_key: str) -> dict:
        """One share partition's request; returns its partition result (a dict with error_code)."""
        deadline = self.clock.monotonic() + self.timeout_s
        backoff = BACKOFF_S
        err: dict = {"error_code": int(ErrorCode.COORDINATOR_NOT_AVAILABLE), "error_message": None}
        if SHARE_STATE_TOPIC not in self.loader.image.topics_by_name:
            code = await self.coordinator.runtime.ensure_topic()
            if code:
                return {"error_code": int(code), "error_message": None}
        while True:
            leader = self._leader(k)
            try:
                if leader == self.broker_id:
                    res = await local()
                elif leader < 0:
                    res = err
                else:
                    res = await self._remote(leader, api_key, version, data, result_key,
                                             max(deadline - self.clock.monotonic(), 0.1))
            except KafkaError as e:
                res = {"error_code": int(e.code), "error_message": e.message}
            except (ConnectionError, OSError, TimeoutError, IndexError) as e:
                log.debug("share coordinator request to broker %d failed: %s", leader, e)
                res = err
            if res["error_code"] not in _RETRY or self.clock.monotonic() + backoff > deadline:
                return res
            err = res
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    async def _remote(self, broker: int, api_key: int, version: int, data: dict, result_key: str,
                      timeout: float) -> dict:
        """One partition's request to another broker, sent with the others of its group that are
        queued for that broker."""
        if self._conn(broker) is None:
            return {"error_code": int(ErrorCode.COORDINATOR_NOT_AVAILABLE), "error_message": None}
        key = (broker, api_key, version, data["group_id"])
        t = data["topics"][0]
        fut = asyncio.get_running_loop().create_future()
        self._queued.setdefault(key, []).append((t["topic_id"], t["partitions"][0], fut))
        if key not in self._sending:
            self._sending.add(key)
            asyncio.get_running_loop().create_task(self._send(key, result_key, timeout))
        return await fut

    async def _send(self, key, result_key: str, timeout: float) -> None:
        broker, api_key, version, group = key
        try:
            while self._queued.get(key):
                batch = self._queued.pop(key)
                topics: dict = {}
                for tid, pdata, _ in batch:
                    topics.setdefault(tid, []).append(pdata)
                try:
                    conn = self._conn(broker)
                    if conn is None:
                        raise ConnectionError(f"no endpoint for broker {broker}")
                    resp = await conn.request(api_key, version, {"group_id": group, "topics": [
                        {"topic_id": tid, "partitions": ps} for tid, ps in topics.items()]}, timeout=timeout)
                    got = {}
                    for r in getattr(resp, result_key):
                        for p in r.partitions:
                            d = {f: getattr(p, f) for f in p.__dataclass_fields__}
                            d["error_code"] = int(d["error_code"])
                            got[(r.topic_id, int(p.partition))] = d
                    missing = {"error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR), "error_message": "no answer"}
                    for tid, pdata, fut in batch:
                        if not fut.done():
                            fut.set_result(got.get((tid, pdata["partition"]), missing))
                except (ConnectionError, OSError, TimeoutError) as e:
                    log.debug("share coordinator request to broker %d failed: %s", broker, e)
                    for _, _, fut in batch:
                        if not fut.done():
                            fut.set_result({"error_code": int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                                            "error_message": None})
        finally:
            self._sending.discard(key)
            for _, _, fut in self._queued.pop(key, []):
                if not fut.done():
                    fut.set_result({"error_code": int(ErrorCode.COORDINATOR_NOT_AVAILABLE), "error_message": None})

    # --- the five calls ------------------------------------------------------------------------
    async def read(self, k: StateKey, leader_epoch: int) -> dict:
        return await self._call(k, lambda: self.coordinator.read(k, leader_epoch), ApiKey.READ_SHARE_GROUP_STATE, 0,
                                {"group_id": k.group, "topics": [{"topic_id": k.topic_id, "partitions": [
                                    {"partition": k.partition, "leader_epoch": leader_epoch}]}]}, "results")

    async def write(self, k: StateKey, state_epoch: int, leader_epoch: int, start_offset: int,
                    batches: tuple[StateBatch, ...], delivery_complete_count: int) -> dict:
        return await self._call(
            k, lambda: self.coordinator.write(k, state_epoch, leader_epoch, start_offset, batches,
                                              delivery_complete_count),
            ApiKey.WRITE_SHARE_GROUP_STATE, 1,
            {"group_id": k.group, "topics": [{"topic_id": k.topic_id, "partitions": [
                {"partition": k.partition, "state_epoch": state_epoch, "leader_epoch": leader_epoch,
                 "start_offset": start_offset, "delivery_complete_count": delivery_complete_count,
                 "state_batches": [{"first_offset": b.first_offset, "last_offset": b.last_offset,
                                    "delivery_state": b.delivery_state, "delivery_count": b.delivery_count}
                                   for b in batches]}]}]}, "results")

    async def initialize(self, k: StateKey, state_epoch: int, start_offset: int) -> dict:
        return await self._call(k, lambda: self.coordinator.initialize(k, state_epoch, start_offset),
                                ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0,
                                {"group_id": k.group, "topics": [{"topic_id": k.topic_id, "partitions": [
                                    {"partition": k.partition, "state_epoch": state_epoch,
                                     "start_offset": start_offset}]}]}, "results")

    async def delete(self, k: StateKey) -> dict:
        return await self._call(k, lambda: self.coordinator.delete(k), ApiKey.DELETE_SHARE_GROUP_STATE, 0,
                                {"group_id": k.group, "topics": [{"topic_id": k.topic_id, "partitions": [
                                    {"partition": k.partition}]}]}, "results")

    async def summary(self, k: StateKey) -> dict:
        return await self._call(k, lambda: self.coordinator.summary(k), ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, 1,
                                {"group_id": k.group, "topics": [{"topic_id": k.topic_id, "partitions": [
                                    {"partition": k.partition, "leader_epoch": -1}]}]}, "results")


__all__ = ["SharePersister"]
