"""Simulated clients of a world: an admin, idempotent and transactional producers and consumers speaking the
Kafka protocol over the simulated network, through krafty's own client connection
(broker/protocol/client.py). They run as processes of their own (``NODE`` = ("client", i)),
so a cut can isolate them like any node.

What they record is what the invariants check (sim/world.py): every acknowledged acks=all
write (partition, offset, value), every record a consumer was given, and every offset it saw.
"""

from __future__ import annotations

import asyncio
import logging

from broker.log.batch import Record, build_batch, iter_records, parse_batches, read_end_txn_marker
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
        self.topic_ids: dict[str, object] = {}  # (uuid.UUID)
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
            if int(t.error_code) == 0 and t.topic_id is not None:
                self.topic_ids[t.name] = t.topic_id
            for p in t.partitions:
                if int(p.error_code) == 0 and int(p.leader_id) >= 0:
                    self.leaders[(t.name, int(p.partition_index))] = int(p.leader_id)
        return True

    async def leader_of(self, tp: tuple[str, int]) -> int | None:
        """The leader of ``tp`` this client knows, asking for metadata once if it knows none."""
        leader = self.leaders.get(tp)
        if leader is None:
            await self.refresh(tp[0])
            leader = self.leaders.get(tp)
        return leader

    async def find_coordinator(self, key: str, key_type: int) -> int | None:
        """FindCoordinator v3 (key type 0: a group, 1: a transactional id) through any broker;
        None: no answer, or an error."""
        b = self.rng.choice(self.world.broker_ids)
        try:
            r = await self.request(b, ApiKey.FIND_COORDINATOR, 3, {"key": key, "key_type": key_type})
        except (ConnectionError, TimeoutError, OSError):
            return None
        return int(r.node_id) if int(r.error_code) == 0 else None

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
            leader = await self.cl.leader_of(tp)
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


async def _fetch(cl: Cluster, topic: str, p: int, start: int, isolation: int, max_wait_ms: int):
    """One Fetch of ``topic``/``p`` from ``start`` on its leader: the partition's answer, or None."""
    leader = await cl.leader_of((topic, p))
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
    return pd


async def read_partition(cl: Cluster, topic: str, p: int, start: int, isolation: int = 0,
                         max_wait_ms: int = 200) -> tuple[int, list[tuple[int, bytes]]] | None:
    """One Fetch of ``topic``/``p`` from ``start`` on its leader: (high watermark, [(offset, value)])."""
    pd = await _fetch(cl, topic, p, start, isolation, max_wait_ms)
    if pd is None:
        return None
    out = []
    data = bytes(pd.records or b"")
    for h in parse_batches(data):
        for rec in iter_records(memoryview(data)[h.pos:h.pos + h.size]):
            if rec.offset >= start:
                out.append((rec.offset, rec.value))
    return int(pd.high_watermark), out


async def read_committed(cl: Cluster, topic: str, p: int, start: int
                         ) -> tuple[int, int, list[tuple[int, bytes]]] | None:
    """One read_committed Fetch of ``topic``/``p`` from ``start``: (high watermark, last stable
    offset, [(offset, value)]) with what a Kafka consumer drops dropped: control batches, and the
    batches of the aborted transactions the broker lists (Kafka's Fetcher: a producer's batches
    from an aborted transaction's first offset until its ABORT marker)."""
    pd = await _fetch(cl, topic, p, start, 1, 0)
    if pd is None:
        return None
    pending = sorted((int(a.first_offset), int(a.producer_id)) for a in pd.aborted_transactions or ())
    aborting: set[int] = set()
    out = []
    data = bytes(pd.records or b"")
    for h in parse_batches(data):
        batch = memoryview(data)[h.pos:h.pos + h.size]
        while pending and pending[0][0] <= h.last_offset:
            aborting.add(pending.pop(0)[1])
        if h.is_control:
            marker = read_end_txn_marker(batch)
            if marker is not None and not marker.commit:
                aborting.discard(h.producer_id)
            continue
        if h.is_transactional and h.producer_id in aborting:
            continue
        for rec in iter_records(batch):
            if rec.offset >= start:
                out.append((rec.offset, rec.value))
    return int(pd.high_watermark), int(pd.last_stable_offset), out


class TxnProducer:
    """A transactional producer (its own transactional.id, acks=all, one request in flight):
    each transaction adds 1-2 partitions (AddPartitionsToTxn v3), writes a batch to each and
    commits or aborts (EndTxn v3). It records each transaction's values by outcome: committed,
    aborted, or unknown (an EndTxn whose answer never came, a fence): a read_committed reader
    must see every committed value exactly once, no aborted one, and each unknown transaction
    whole or not at all."""

    TIMEOUT_MS = 5000  # transaction.timeout.ms: the coordinator aborts an abandoned transaction then

    def __init__(self, world, name: str, topic: str, partitions: int):
        self.world, self.name, self.topic, self.partitions = world, name, topic, partitions
        self.cl = Cluster(world, name)
        self.coordinator: int | None = None
        self.pid = self.epoch = -1
        self.seq = [0] * partitions
        self.n = 0
        self.committed: set[bytes] = set()
        self.aborted: set[bytes] = set()
        self.unknown: list[set[bytes]] = []  # per transaction

    async def _find(self) -> int | None:
        if self.coordinator is None:
            self.coordinator = await self.cl.find_coordinator(self.name, 1)
        return self.coordinator

    async def _coordinator_call(self, api: int, version: int, data: dict, code_of, until: float):
        """The answer's error code, retrying what a Kafka producer retries until ``until`` + 30 s
        (None: no answer in time)."""
        loop = asyncio.get_running_loop()
        while loop.time() < until + 30:
            node = await self._find()
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE
            if node is not None:
                try:
                    code = ErrorCode(code_of(await self.cl.request(node, api, version, data)))
                except (ConnectionError, TimeoutError, OSError):
                    code = ErrorCode.COORDINATOR_NOT_AVAILABLE
            if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                self.coordinator = None
            elif code not in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS,
                              ErrorCode.REQUEST_TIMED_OUT):
                return code
            await asyncio.sleep(0.05 + self.cl.rng.random() * 0.1)
        return None

    async def init(self, until: float) -> bool:
        data = {"transactional_id": self.name, "transaction_timeout": self.TIMEOUT_MS,
                "producer_id": self.pid, "producer_epoch": self.epoch}
        answer = {}

        def code_of(r):
            answer["r"] = r
            return int(r.error_code)
        code = await self._coordinator_call(ApiKey.INIT_PRODUCER_ID, 4, data, code_of, until)
        if code != ErrorCode.NONE:
            self.pid = self.epoch = -1  # start over as a new producer (the old epoch is fenced anyway)
            return False
        self.pid, self.epoch = int(answer["r"].producer_id), int(answer["r"].producer_epoch)
        self.seq = [0] * self.partitions
        return True

    async def run(self, until: float) -> None:
        loop = asyncio.get_running_loop()
        while loop.time() < until + 30 and not await self.init(until):
            pass
        while self.pid >= 0:
            await self.transaction(until)
            if loop.time() >= until:
                return
            await asyncio.sleep(self.cl.rng.random() * 0.6)  # (a transaction costs ~10 requests)
            while self.pid < 0 and loop.time() < until + 30 and not await self.init(until):
                pass

    async def transaction(self, until: float) -> None:
        rng = self.cl.rng
        self.n += 1
        parts = sorted(rng.sample(range(self.partitions), rng.randint(1, min(2, self.partitions))))
        values = {p: [f"{self.name}/{self.pid}.{self.epoch}/t{self.n}/{p}/{i}".encode()
                      for i in range(rng.randint(1, 3))] for p in parts}
        every = {v for vs in values.values() for v in vs}
        commit = rng.random() < 0.7
        topics = [{"name": self.topic, "partitions": parts}]
        code = await self._coordinator_call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
            "v3_and_below_transactional_id": self.name, "v3_and_below_producer_id": self.pid,
            "v3_and_below_producer_epoch": self.epoch, "v3_and_below_topics": topics},
            lambda r: max((int(x.partition_error_code) for t in r.results_by_topic_v3_and_below
                           for x in t.results_by_partition), key=lambda c: c != 0, default=0), until)
        if code != ErrorCode.NONE:
            self.unknown.append(set())  # nothing was written under it
            self.pid = -1
            return
        failed = False
        for p in parts:
            if not await self._produce(p, values[p], until):
                commit, failed = False, True
                break
        code = await self._coordinator_call(ApiKey.END_TXN, 3, {
            "transactional_id": self.name, "producer_id": self.pid, "producer_epoch": self.epoch,
            "committed": commit}, lambda r: int(r.error_code), until)
        if code == ErrorCode.NONE:
            (self.committed if commit else self.aborted).update(every)
            if failed:
                self.pid = -1  # a batch of unknown fate: a new epoch before the next transaction
        else:
            self.unknown.append(every)
            self.world.note(f"{self.name}: EndTxn {code.name if code is not None else 'unanswered'}")
            self.pid = -1

    async def _produce(self, p: int, values: list[bytes], until: float) -> bool:
        loop = asyncio.get_running_loop()
        ts = self.world.wall_ms()
        batch = bytes(build_batch([Record(i, ts, None, v, []) for i, v in enumerate(values)], producer_id=self.pid,
                                  producer_epoch=self.epoch, base_sequence=self.seq[p], transactional=True))
        tp = (self.topic, p)
        while loop.time() < until + 30:
            leader = await self.cl.leader_of(tp)
            if leader is None:
                await asyncio.sleep(0.1)
                continue
            try:
                r = await self.cl.request(leader, ApiKey.PRODUCE, 9, {
                    "transactional_id": self.name, "acks": -1, "timeout": 3000,
                    "topic_data": [{"name": self.topic, "partition_data": [{"index": p, "records": batch}]}]})
                code = ErrorCode(int(r.responses[0].partition_responses[0].error_code))
            except (ConnectionError, TimeoutError, OSError):
                code = ErrorCode.REQUEST_TIMED_OUT
            if code in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
                self.seq[p] += len(values)
                return True
            if code not in RETRIABLE:
                return False
            self.cl.leaders.pop(tp, None)
            await asyncio.sleep(0.05 + self.cl.rng.random() * 0.1)
        return False


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


class _GroupClient:
    """Requests to a group's coordinator, found with FindCoordinator and found again when it moves."""

    cl: Cluster
    group: str
    coordinator: int | None

    async def _find(self) -> int | None:
        if self.coordinator is None:
            self.coordinator = await self.cl.find_coordinator(self.group, 0)
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


class Committer(_GroupClient):
    """A consumer's offset commits (a simple consumer: generation -1, no membership) to its
    group's coordinator. Committed offsets never go back: every OffsetFetch answer is at least
    the last acknowledged commit, across coordinator failovers (the group coordinator reloads
    __consumer_offsets)."""

    def __init__(self, world, consumer: Consumer, group: str = "sim-group"):
        self.world, self.consumer, self.group = world, consumer, group
        self.cl = Cluster(world, f"{consumer.name}-commits")
        self.coordinator: int | None = None
        self.acked = [-1] * consumer.partitions  # the last acknowledged commit per partition (-1: none)
        self.commits = self.fetches = 0

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


REJOIN = {ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID}


class GroupMember(_GroupClient):
    """A classic consumer-group member: JoinGroup v5 (MEMBER_ID_REQUIRED answered), SyncGroup v3
    (the leader assigns the partitions round-robin over the members it was given), Heartbeat v3,
    OffsetCommit v8 with its generation and member id, LeaveGroup v3 at the end and now and then
    (a restart: it joins again as a new member); a rebalance, a fenced generation or a lost
    coordinator makes it join again. ``book`` (shared by the
    group's members) records who owned what in each generation and the last acknowledged commit
    per partition: two members must never own one partition in one generation, and a member
    that takes a partition over must find its committed offset at least the last acknowledged."""

    def __init__(self, world, name: str, group: str, topic: str, partitions: int, book: dict):
        self.world, self.name, self.group, self.topic, self.partitions = world, name, group, topic, partitions
        self.cl = Cluster(world, name)
        self.coordinator: int | None = None
        self.book = book
        book.setdefault("owners", {})
        book.setdefault("acked", [-1] * partitions)
        self.member_id = ""
        self.generation = -1
        self.owned: list[int] = []
        self.next: dict[int, int] = {}

    async def run(self, until: float) -> None:
        loop = asyncio.get_running_loop()
        rng = self.cl.rng
        while loop.time() < until:
            if not await self._join():
                await asyncio.sleep(0.05 + rng.random() * 0.1)
                continue
            while loop.time() < until:
                await asyncio.sleep(0.1 + rng.random() * 0.2)
                r = await self._call(ApiKey.HEARTBEAT, 3, {"group_id": self.group, "generation_id": self.generation,
                                                           "member_id": self.member_id, "group_instance_id": None})
                code = self._code(r)
                if code in REJOIN or code is None:
                    break
                if not await self._commit():
                    break
                if rng.random() < 0.05:  # a consumer restart: it leaves, and joins again as a new member
                    await self._leave()
                    break
        await self._leave()

    async def _leave(self) -> None:
        await self._call(ApiKey.LEAVE_GROUP, 3, {"group_id": self.group, "members": [
            {"member_id": self.member_id, "group_instance_id": None}]})
        self.member_id = ""

    def _code(self, r) -> ErrorCode | None:
        if r is None:
            return None
        code = ErrorCode(int(r.error_code))
        if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
            self.coordinator = None
        if code == ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        return code

    async def _join(self) -> bool:
        r = await self._call(ApiKey.JOIN_GROUP, 5, {
            "group_id": self.group, "session_timeout": 6000, "rebalance_timeout": 3000, "member_id": self.member_id,
            "group_instance_id": None, "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]})
        code = self._code(r)
        if code == ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = r.member_id
            return False
        if code != ErrorCode.NONE:
            return False
        self.member_id, generation = r.member_id, int(r.generation_id)
        assignments = []
        if r.leader == self.member_id:
            members = sorted(m.member_id for m in r.members)
            assignments = [{"member_id": m, "assignment": ",".join(
                str(p) for p in range(self.partitions) if p % len(members) == i).encode()}
                for i, m in enumerate(members)]
        r = await self._call(ApiKey.SYNC_GROUP, 3, {"group_id": self.group, "generation_id": generation,
                                                    "member_id": self.member_id, "group_instance_id": None,
                                                    "assignments": assignments})
        if self._code(r) != ErrorCode.NONE:
            return False
        self.generation = generation
        self.owned = [int(x) for x in bytes(r.assignment).decode().split(",") if x]
        owners = self.book["owners"].setdefault(generation, {})
        for p in self.owned:
            owners.setdefault(p, set()).add(self.member_id)
        return await self._resume()

    async def _resume(self) -> bool:
        """OffsetFetch of the partitions now owned: the position to go on from."""
        if not self.owned:
            return True
        floor = list(self.book["acked"])
        r = await self._call(ApiKey.OFFSET_FETCH, 7, {"group_id": self.group, "require_stable": False, "topics": [
            {"name": self.topic, "partition_indexes": self.owned}]})
        if self._code(r) != ErrorCode.NONE or any(int(pr.error_code) for pr in r.topics[0].partitions):
            return False
        for pr in r.topics[0].partitions:
            p, off = int(pr.partition_index), int(pr.committed_offset)
            if off < floor[p] and not self.world.durability_excused():
                raise self.world.violation(f"{self.name} took partition {p} over at committed offset {off}, below the "
                                           f"last acknowledged commit {floor[p]}")
            self.next[p] = max(off, 0)
        return True

    async def _commit(self) -> bool:
        """Commits one more processed record on each owned partition; False: join again."""
        if not self.owned:
            return True
        offs = {p: self.next[p] + 1 for p in self.owned}
        r = await self._call(ApiKey.OFFSET_COMMIT, 8, {
            "group_id": self.group, "generation_id_or_member_epoch": self.generation, "member_id": self.member_id,
            "group_instance_id": None, "topics": [{"name": self.topic, "partitions": [
                {"partition_index": p, "committed_offset": off, "committed_leader_epoch": -1,
                 "committed_metadata": None} for p, off in offs.items()]}]})
        if r is None:
            return False
        acked = self.book["acked"]
        for pr in r.topics[0].partitions:
            code = self._code(pr)
            p = int(pr.partition_index)
            if code == ErrorCode.NONE:
                acked[p] = max(acked[p], offs[p])
                self.next[p] = offs[p]
            elif code in REJOIN or code is None:
                return False
        return True
