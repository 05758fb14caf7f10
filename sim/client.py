"""Simulated clients of a world: an admin, idempotent producers and consumers speaking the
Kafka protocol over the simulated network, through krafty's own client connection
(broker/protocol/client.py). They run as processes of their own (``NODE`` = ("client", i)),
so a cut can isolate them like any node.

What they record is what the invariants check (sim/world.py): every acknowledged acks=all
write (partition, offset, value), every record a consumer was given, and every offset it saw.
"""

from __future__ import annotations

import asyncio
import logging

from broker.log.batch import Record, build_batch, iter_records, parse_batches
from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from common.errors import ErrorCode

log = logging.getLogger("krafty.sim.client")

RETRIABLE = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
             ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.LEADER_NOT_AVAILABLE,
             ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.NOT_CONTROLLER,
             ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.UNKNOWN_SERVER_ERROR,
             ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.OFFSET_NOT_AVAILABLE}


class Cluster:
    """Connections to the brokers and the metadata a client learnt (leaders per partition)."""

    def __init__(self, world, name: str):
        self.world = world
        self.name = name
        self.conns: dict[int, KafkaConnection] = {}
        self.leaders: dict[tuple[str, int], int] = {}
        self.rng = world.rng_for(name)

    def conn(self, broker: int) -> KafkaConnection:
        c = self.conns.get(broker)
        if c is None:
            from sim.world import BROKER_PORT, host_of
            c = self.conns[broker] = KafkaConnection(host_of(broker), BROKER_PORT, client_id=self.name)
        return c

    async def request(self, broker: int, api: int, version: int, data: dict, timeout: float = 10.0):
        c = self.conn(broker)
        try:
            return await c.request(api, version, data, timeout=timeout)
        except (ConnectionError, TimeoutError, OSError):
            c.close()
            self.conns.pop(broker, None)
            raise

    async def refresh(self, topic: str) -> bool:
        b = self.rng.choice(self.world.broker_ids)
        try:
            r = await self.request(b, ApiKey.METADATA, 12, {"topics": [{"name": topic, "topic_id": None}],
                                                              "allow_auto_topic_creation": False,
                                                              "include_topic_authorized_operations": False})
        except (ConnectionError, TimeoutError, OSError):
            return False
        for t in r.topics:
            for p in t.partitions:
                if int(p.error_code) == 0 and int(p.leader_id) >= 0:
                    self.leaders[(t.name, int(p.partition_index))] = int(p.leader_id)
        return True

    def close(self) -> None:
        for c in self.conns.values():
            c.close()
        self.conns.clear()


async def create_topic(cl: Cluster, topic: str, partitions: int, rf: int) -> None:
    while True:
        b = cl.rng.choice(cl.world.broker_ids)
        try:
            r = await cl.request(b, ApiKey.CREATE_TOPICS, 5, {"topics": [
                {"name": topic, "num_partitions": partitions, "replication_factor": rf, "assignments": [],
                 "configs": []}], "timeout": 10000, "validate_only": False})
        except (ConnectionError, TimeoutError, OSError):
            await asyncio.sleep(0.2)
            continue
        code = ErrorCode(int(r.topics[0].error_code))
        if code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            return
        await asyncio.sleep(0.2)


class Producer:
    """An idempotent producer with one request in flight (max.in.flight=1), acks=all,
    retrying a batch with its sequence until it is acknowledged."""

    def __init__(self, world, name: str, topic: str, partitions: int, pause_s: float = 0.05):
        self.world, self.name, self.topic, self.partitions = world, name, topic, partitions
        self.cl = Cluster(world, name)
        self.pause_s = pause_s  # mean pause between two batches
        self.pid = self.epoch = -1
        self.seq = [0] * partitions
        self.sent = 0
        self.acked: list[tuple[int, int, bytes]] = []  # (partition, offset, value)
        self.unknown: set[bytes] = set()  # abandoned: may or may not be in the log

    async def init(self) -> None:
        while self.pid < 0:
            b = self.cl.rng.choice(self.world.broker_ids)
            try:
                r = await self.cl.request(b, ApiKey.INIT_PRODUCER_ID, 4, {
                    "transactional_id": None, "transaction_timeout": -1, "producer_id": -1, "producer_epoch": -1})
            except (ConnectionError, TimeoutError, OSError):
                await asyncio.sleep(0.1)
                continue
            if int(r.error_code) == 0:
                self.pid, self.epoch = int(r.producer_id), int(r.producer_epoch)
                self.seq = [0] * self.partitions
            else:
                await asyncio.sleep(0.1)

    async def run(self, until: float) -> None:
        loop = asyncio.get_running_loop()
        await self.init()
        while True:  # at least one batch, however long the producer id took
            p = self.cl.rng.randrange(self.partitions)
            n = self.cl.rng.randint(1, 3)
            values = [f"{self.name}/{self.pid}/{p}/{self.seq[p] + i}".encode() for i in range(n)]
            await self.send(p, values, until)
            if loop.time() >= until:
                return
            await asyncio.sleep(self.cl.rng.random() * 2 * self.pause_s)

    async def send(self, p: int, values: list[bytes], until: float) -> None:
        loop = asyncio.get_running_loop()
        ts = self.world.wall_ms()
        batch = bytes(build_batch([Record(i, ts, None, v, []) for i, v in enumerate(values)],
                                  producer_id=self.pid, producer_epoch=self.epoch, base_sequence=self.seq[p]))
        tp = (self.topic, p)
        while True:
            leader = self.cl.leaders.get(tp)
            if leader is None:
                await self.cl.refresh(self.topic)
                leader = self.cl.leaders.get(tp)
                if leader is None:
                    await asyncio.sleep(0.1)
                    continue
            self.sent += 1
            try:
                r = await self.cl.request(leader, ApiKey.PRODUCE, 9, {
                    "transactional_id": None, "acks": -1, "timeout": 3000,
                    "topic_data": [{"name": self.topic, "partition_data": [{"index": p, "records": batch}]}]})
                pr = r.responses[0].partition_responses[0]
                code = ErrorCode(int(pr.error_code))
            except (ConnectionError, TimeoutError, OSError):
                code = ErrorCode.REQUEST_TIMED_OUT
                pr = None
            if code == ErrorCode.NONE:
                base = int(pr.base_offset)
                self.acked += [(p, base + i, v) for i, v in enumerate(values)]
                self.seq[p] += len(values)
                return
            if code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                self.unknown.update(values)  # written before (an earlier try): where is not said
                self.seq[p] += len(values)
                return
            if code in RETRIABLE and loop.time() < until + 30:
                self.cl.leaders.pop(tp, None)
                await asyncio.sleep(0.05 + self.cl.rng.random() * 0.1)
                continue
            # OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID...: a new producer id (the
            # batch may or may not have been written)
            log.info("%s: %s on %s; new producer id", self.name, code.name, tp)
            self.unknown.update(values)
            self.world.note(f"{self.name}: {code.name} on partition {p}")
            self.pid = -1
            await self.init()
            return


async def read_partition(cl: Cluster, topic: str, p: int, start: int, isolation: int = 0,
                         max_wait_ms: int = 200) -> tuple[int, list[tuple[int, bytes]]] | None:
    """One Fetch of ``topic``/``p`` from ``start`` on its leader: (high watermark, [(offset, value)])."""
    leader = cl.leaders.get((topic, p))
    if leader is None:
        await cl.refresh(topic)
        leader = cl.leaders.get((topic, p))
        if leader is None:
            return None
    try:
        r = await cl.request(leader, ApiKey.FETCH, 12, {
            "replica_id": -1, "max_wait": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": isolation,
            "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [{
                "partition": p, "current_leader_epoch": -1, "fetch_offset": start, "last_fetched_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}], "forgotten_topics_data": [], "rack_id": ""})
    except (ConnectionError, TimeoutError, OSError):
        cl.leaders.pop((topic, p), None)
        return None
    pd = r.responses[0].partitions[0]
    if int(pd.error_code) != 0:
        cl.leaders.pop((topic, p), None)
        return None
    out = []
    data = bytes(pd.records or b"")
    for h in parse_batches(data):
        for rec in iter_records(memoryview(data)[h.pos:h.pos + h.size]):
            if rec.offset >= start:
                out.append((rec.offset, rec.value))
    return int(pd.high_watermark), out


class Consumer:
    """Reads every partition from offset 0 as the log grows (read_committed is not needed:
    no transactions), as one session: it must never be given a record twice, skip an offset
    below the high watermark it was told, or be given at an offset a record other than the
    one it was given there before (the checker compares with the end)."""

    def __init__(self, world, name: str, topic: str, partitions: int):
        self.world, self.name, self.topic, self.partitions = world, name, topic, partitions
        self.cl = Cluster(world, name)
        self.pos = [0] * partitions
        self.seen: dict[tuple[int, int], bytes] = {}

    async def run(self, until: float) -> None:
        loop = asyncio.get_running_loop()
        while loop.time() < until:
            for p in range(self.partitions):
                got = await read_partition(self.cl, self.topic, p, self.pos[p])
                if got is None:
                    await asyncio.sleep(0.05)
                    continue
                _hw, recs = got
                for off, value in recs:
                    if off < self.pos[p]:
                        continue
                    if (p, off) in self.seen and not self.world.durability_excused():
                        raise self.world.violation(f"{self.name} was given offset {off} of partition {p} twice")
                    self.seen[(p, off)] = value
                    self.pos[p] = off + 1
            await asyncio.sleep(0.02)


TOPIC_POOL = ("orders", "clicks", "payments", "audit")


class Admin:
    """Creates topics from a small pool, the same names from several admins at once, through
    whichever broker it picks (forwarded to the active controller): a name must be created
    successfully at most once, and every topic acknowledged must exist in the end."""

    def __init__(self, world, name: str):
        self.world, self.name = world, name
        self.cl = Cluster(world, name)
        self.created: list[str] = []

    async def run(self, until: float) -> None:
        loop = asyncio.get_running_loop()
        while loop.time() < until:
            await asyncio.sleep(0.2 + self.cl.rng.random() * 0.6)
            topic = self.cl.rng.choice(TOPIC_POOL)
            b = self.cl.rng.choice(self.world.broker_ids)
            try:
                r = await self.cl.request(b, ApiKey.CREATE_TOPICS, 5, {"topics": [
                    {"name": topic, "num_partitions": 1, "replication_factor": self.cl.rng.randint(1, 3),
                     "assignments": [], "configs": []}], "timeout": 5000, "validate_only": False})
            except (ConnectionError, TimeoutError, OSError):
                continue
            if ErrorCode(int(r.topics[0].error_code)) == ErrorCode.NONE:
                self.created.append(topic)


class Committer:
    """A consumer's offset commits (a simple consumer: generation -1, no membership) to its
    group's coordinator, found with FindCoordinator and found again when it moves. Committed
    offsets never go back: every OffsetFetch answer is at least the last acknowledged commit,
    across coordinator failovers (the group coordinator reloads __consumer_offsets)."""

    def __init__(self, world, consumer: Consumer, group: str = "sim-group"):
        self.world, self.consumer, self.group = world, consumer, group
        self.cl = Cluster(world, f"{consumer.name}-commits")
        self.coordinator: int | None = None
        self.acked = [-1] * consumer.partitions  # the last acknowledged commit per partition (-1: none)
        self.commits = self.fetches = 0

    async def _find(self) -> int | None:
        if self.coordinator is None:
            b = self.cl.rng.choice(self.world.broker_ids)
            try:
                r = await self.cl.request(b, ApiKey.FIND_COORDINATOR, 3, {"key": self.group, "key_type": 0})
            except (ConnectionError, TimeoutError, OSError):
                return None
            if int(r.error_code) == 0:
                self.coordinator = int(r.node_id)
        return self.coordinator

    async def _call(self, api: int, version: int, data: dict):
        node = await self._find()
        if node is None:
            return None
        try:
            return await self.cl.request(node, api, version, data)
        except (ConnectionError, TimeoutError, OSError):
            self.coordinator = None
            return None

    async def commit(self) -> None:
        pos = list(self.consumer.pos)
        r = await self._call(ApiKey.OFFSET_COMMIT, 8, {
            "group_id": self.group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": self.consumer.topic, "partitions": [
                {"partition_index": p, "committed_offset": off, "committed_leader_epoch": -1,
                 "committed_metadata": None} for p, off in enumerate(pos)]}]})
        if r is None:
            return
        for pr in r.topics[0].partitions:
            if int(pr.error_code) == 0:
                p = int(pr.partition_index)
                self.acked[p] = max(self.acked[p], pos[p])
                self.commits += 1
            elif ErrorCode(int(pr.error_code)) in RETRIABLE:
                self.coordinator = None

    async def check(self) -> bool:
        """OffsetFetch: each committed offset at least the last acknowledged one."""
        floor = list(self.acked)
        r = await self._call(ApiKey.OFFSET_FETCH, 7, {"group_id": self.group, "require_stable": False, "topics": [
            {"name": self.consumer.topic, "partition_indexes": list(range(self.consumer.partitions))}]})
        if r is None or int(r.error_code) != 0:
            if r is not None:
                self.coordinator = None
            return False
        for pr in r.topics[0].partitions:
            if int(pr.error_code) != 0:
                self.coordinator = None
                return False
            p, off = int(pr.partition_index), int(pr.committed_offset)
            if off < floor[p] and not self.world.durability_excused():
                raise self.world.violation(f"committed offset of partition {p} went back from {floor[p]} to {off}")
        self.fetches += 1
        return True

    async def run(self, until: float) -> None:
        loop = asyncio.get_running_loop()
        while loop.time() < until:
            await asyncio.sleep(0.1 + self.cl.rng.random() * 0.3)
            if self.cl.rng.random() < 0.6:
                await self.commit()
            else:
                await self.check()
