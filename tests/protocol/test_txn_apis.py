"""The transaction coordinator's APIs on the wire, against an in-process node: FindCoordinator
TRANSACTION (creating ``__transaction_state`` with Kafka's configs), InitProducerId with a
transactional id (KIP-360), AddPartitionsToTxn from producers (v0-3) and from partition leaders
(v4-5, verifyOnly), AddOffsetsToTxn, EndTxn (v5: TV2), DescribeTransactions, ListTransactions.

Partition leaders handle WriteTxnMarkers in the data plane; here a fake leader
(tests/protocol/fake_leader.py) stands in for them, so the markers the coordinator sends (to
whichever broker leads each partition) are checked byte for byte, with retries, lost
connections, restarts and timeouts."""

from __future__ import annotations

import time

import pytest

from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from broker.txn import records as rec
from common.config import Config
from common.errors import ErrorCode as E
from krafty.node import Node
from tests.protocol.conftest import TEST_CLUSTER_ID, free_port
from tests.protocol.fake_leader import FakeLeader, Marker, route_markers_to
from tests.protocol.test_group_apis import retry as until

TXN_PARTITIONS = 3


def _config(tmp_path, port: int, cport: int, **extra) -> Config:
    return Config({
        "node.id": "1", "process.roles": "broker,controller", "cluster.id": TEST_CLUSTER_ID,
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
        "controller.quorum.voters": f"1@127.0.0.1:{cport}", "log.dirs": str(tmp_path / "data"),
        "offsets.topic.num.partitions": "3", "offsets.topic.replication.factor": "1",
        "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "100", **extra,
    })


class Env:
    """One node; its coordinator's markers go to a fake leader, or with ``real_leader`` to the
    node itself (tests/protocol/test_txn_e2e.py)."""

    def __init__(self, tmp_path, real_leader: bool = False, **extra):
        self.tmp_path = tmp_path
        self.port, self.cport = free_port(), free_port()
        self.cfg = _config(tmp_path, self.port, self.cport, **extra)
        self.node: Node | None = None
        self.fake = None if real_leader else FakeLeader()
        self.conn: KafkaConnection | None = None

    async def start(self, create_topic: bool = True) -> Env:
        if self.fake is not None and not self.fake.port:
            await self.fake.start()
        self.node = Node(self.cfg)
        await self.node.start()
        if self.fake is not None:
            route_markers_to(self.node, self.fake)
        self.conn = KafkaConnection("127.0.0.1", self.port, client_id="txn-apis-test")
        if create_topic:
            r = await self.conn.request(ApiKey.CREATE_TOPICS, 5, {"topics": [
                {"name": "t1", "num_partitions": 3, "replication_factor": 1, "assignments": [], "configs": []}],
                "timeout": 10000, "validate_only": False})
            assert int(r.topics[0].error_code) == 0, r
        return self

    async def stop(self) -> None:
        if self.conn:
            self.conn.close()
        if self.node:
            await self.node.stop()
        self.node = None

    async def close(self) -> None:
        await self.stop()
        if self.fake is not None:
            await self.fake.stop()

    async def set_tv_level(self, level: int) -> None:
        """Finalize transaction.version ``level`` (UpdateFeatures) and wait for the coordinator."""
        r = await self.conn.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        current = {f.name: f.max_version_level for f in r.finalized_features}.get("transaction.version", 0)
        if level != current:
            r = await self.conn.request(ApiKey.UPDATE_FEATURES, 1, {"timeout": 60_000, "validate_only": False,
                                                                    "feature_updates": [{
                "feature": "transaction.version", "max_version_level": level,
                "upgrade_type": 1 if level > current else 2}]})  # UPGRADE, SAFE_DOWNGRADE
            assert r.error_code == 0, r
        core = self.node.broker.apis.txn_coordinator.core
        await until(lambda: _ready(core.config.tv_level == level), f"the coordinator at transaction.version {level}")

    # --- requests ------------------------------------------------------------------------------
    async def find(self, tid: str) -> None:
        async def go():
            r = await self.conn.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": [tid]})
            return int(r.coordinators[0].error_code) == 0, r
        await until(go, f"the coordinator of {tid}")

    async def init(self, tid: str, timeout_ms: int = 60_000, ver: int = 5, pid: int = -1, epoch: int = -1,
                   busy_ok: bool = False) -> tuple[int, int, int]:
        async def go():
            r = await self.conn.request(ApiKey.INIT_PRODUCER_ID, ver, {
                "transactional_id": tid, "transaction_timeout": timeout_ms, "producer_id": pid,
                "producer_epoch": epoch})
            res = (int(r.error_code), int(r.producer_id), int(r.producer_epoch))
            return res[0] not in (E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_COORDINATOR) and not (
                busy_ok and res[0] == E.CONCURRENT_TRANSACTIONS), res
        return await until(go, f"InitProducerId({tid})")

    async def add(self, tid: str, pid: int, epoch: int, parts: dict[str, list[int]], ver: int = 3) -> dict:
        r = await self.conn.request(ApiKey.ADD_PARTITIONS_TO_TXN, ver, {
            "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in parts.items()]})
        return {(t.name, int(p.partition_index)): int(p.partition_error_code)
                for t in r.results_by_topic_v3_and_below for p in t.results_by_partition}

    async def end(self, tid: str, pid: int, epoch: int, commit: bool, ver: int = 3) -> tuple[int, int, int]:
        r = await self.conn.request(ApiKey.END_TXN, ver, {"transactional_id": tid, "producer_id": pid,
                                                           "producer_epoch": epoch, "committed": commit})
        return int(r.error_code), int(getattr(r, "producer_id", -1)), int(getattr(r, "producer_epoch", -1))

    async def describe(self, tid: str):
        r = await self.conn.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]})
        return r.transaction_states[0]

    async def state(self, tid: str, want: str):
        async def go():
            d = await self.describe(tid)
            return d.transaction_state == want, d
        return await until(go, f"{tid} in {want}")

    def txn_log_values(self, tid: str) -> list:
        """Every value written for ``tid`` in its __transaction_state partition, decoded."""
        return [None if v is None else rec.decode_value(v) for v in self.txn_log_raw_values(tid)]

    def txn_log_raw_values(self, tid: str) -> list:
        """Every value written for ``tid`` in its __transaction_state partition, as bytes."""
        from broker.log.batch import CONTROL_BIT, decode_records, parse_batches
        pid = self.node.broker.apis.txn_coordinator.partition_for(tid)
        lg = self.node.broker.replicas.partitions[("__transaction_state", pid)].log
        key, out = rec.transaction_key(tid), []
        for seg in lg.segments:
            with open(seg.log_path, "rb") as f:
                data = f.read(seg.size)
            for h in parse_batches(data):
                if h.attributes & CONTROL_BIT:
                    continue
                for r in decode_records(data[h.pos:h.pos + h.batch_length + 12]):
                    if bytes(r.key) == key:
                        out.append(None if r.value is None else bytes(r.value))
        return out

    def leader_epoch(self, topic: str, p: int) -> int:
        return self.node.loader.image.topics_by_name[topic].partitions[p].leader_epoch


async def wait_written(fake: FakeLeader, n: int, what: str = "markers") -> list[Marker]:
    async def go():
        return len(fake.written) >= n, list(fake.written)
    return await until(go, what)


@pytest.fixture
async def env(tmp_path):
    e = await Env(tmp_path).start()
    yield e
    await e.close()


# --- FindCoordinator and __transaction_state ---------------------------------------------------

async def test_find_coordinator_creates_transaction_state_with_kafkas_configs(env):
    c = env.conn
    r = await c.request(ApiKey.INIT_PRODUCER_ID, 5, {"transactional_id": "tx-a", "transaction_timeout": 1000,
                                                      "producer_id": -1, "producer_epoch": -1})
    assert int(r.error_code) == E.NOT_COORDINATOR  # no __transaction_state yet: find the coordinator first
    await env.find("tx-a")
    old = await c.request(ApiKey.FIND_COORDINATOR, 2, {"key": "tx-a", "key_type": 1})
    assert (int(old.error_code), old.node_id, old.port) == (0, 1, env.port)
    md = await c.request(ApiKey.METADATA, 12, {"topics": [{"topic_id": None, "name": "__transaction_state"}],
                                               "allow_auto_topic_creation": False,
                                               "include_topic_authorized_operations": False})
    (t,) = md.topics
    assert (int(t.error_code), t.is_internal, len(t.partitions)) == (0, True, TXN_PARTITIONS)
    dc = await c.request(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": 2, "resource_name": "__transaction_state", "configuration_keys": [
            "cleanup.policy", "compression.type", "min.insync.replicas", "unclean.leader.election.enable",
            "segment.bytes"]}], "include_synonyms": False, "include_documentation": False})
    assert {x.name: x.value for x in dc.results[0].configs} == {
        "cleanup.policy": "compact", "compression.type": "uncompressed",
        "min.insync.replicas": "1",  # transaction.state.log.min.isr (2) capped by the replication factor (1 broker)
        "unclean.leader.election.enable": "false", "segment.bytes": str(100 * 1024 * 1024)}


# --- InitProducerId ----------------------------------------------------------------------------

async def test_init_producer_id_with_a_transactional_id(env):
    await env.find("tx-a")
    err, pid, epoch = await env.init("tx-a")
    assert (err, epoch) == (0, 0) and pid >= 0
    assert await env.init("tx-a") == (0, pid, 1)
    # KIP-360: resume with the current epoch; a stale one is fenced (INVALID_PRODUCER_EPOCH before v4)
    assert await env.init("tx-a", ver=4, pid=pid, epoch=1) == (0, pid, 2)
    assert await env.init("tx-a", ver=4, pid=pid, epoch=0) == (E.PRODUCER_FENCED, -1, -1)
    assert await env.init("tx-a", ver=3, pid=pid, epoch=0) == (E.INVALID_PRODUCER_EPOCH, -1, -1)
    assert await env.init("tx-a", ver=3, pid=pid, epoch=-1) == (E.INVALID_REQUEST, -1, -1)
    assert await env.init("tx-a", timeout_ms=900_001) == (E.INVALID_TRANSACTION_TIMEOUT, -1, -1)
    assert await env.init("tx-a", timeout_ms=0, ver=0) == (E.INVALID_TRANSACTION_TIMEOUT, -1, -1)
    # the records are Kafka's: Empty with the epoch and timeout, no partitions
    values = env.txn_log_values("tx-a")
    assert [(v.producer_id, v.producer_epoch, v.status, v.timeout_ms, v.start_ms) for v in values] == [
        (pid, 0, 0, 60_000, -1), (pid, 1, 0, 60_000, -1), (pid, 2, 0, 60_000, -1)]


# --- a whole transaction -----------------------------------------------------------------------

async def test_commit_writes_markers_to_every_partition_then_complete_commit(env):
    fake = env.fake
    await env.find("tx-c")
    r = await env.conn.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["g1"]})
    assert int(r.coordinators[0].error_code) == 0  # __consumer_offsets exists (the producer finds the group)
    _, pid, epoch = await env.init("tx-c")
    assert await env.add("tx-c", pid, epoch, {"t1": [0, 1]}) == {("t1", 0): 0, ("t1", 1): 0}
    r = await env.conn.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, {"transactional_id": "tx-c", "producer_id": pid,
                                                               "producer_epoch": epoch, "group_id": "g1"})
    assert int(r.error_code) == 0
    d = await env.describe("tx-c")
    offsets_p = env.node.broker.apis.group_coordinator.partition_for("g1")
    assert (d.transaction_state, d.producer_id, d.producer_epoch) == ("Ongoing", pid, epoch)
    assert sorted((t.topic, list(t.partitions)) for t in d.topics) == [("__consumer_offsets", [offsets_p]),
                                                                        ("t1", [0, 1])]
    assert await env.end("tx-c", pid, epoch, True) == (0, -1, -1)
    written = await wait_written(fake, 3)
    txn_p = env.node.broker.apis.txn_coordinator.partition_for("tx-c")
    ce = env.leader_epoch("__transaction_state", txn_p)
    assert sorted(written, key=lambda m: m.partition) == [
        Marker(pid, epoch, True, ce, ("__consumer_offsets", offsets_p)), Marker(pid, epoch, True, ce, ("t1", 0)),
        Marker(pid, epoch, True, ce, ("t1", 1))]
    d = await env.state("tx-c", "CompleteCommit")
    assert list(d.topics) == []
    assert await env.end("tx-c", pid, epoch, True) == (0, -1, -1)  # a retry
    assert await env.end("tx-c", pid, epoch, False) == (E.INVALID_TXN_STATE, -1, -1)
    statuses = [v.status for v in env.txn_log_values("tx-c")]
    assert statuses == [0, 1, 1, 2, 4]  # Empty, Ongoing, Ongoing, PrepareCommit, CompleteCommit


async def test_add_partitions_waits_for_the_markers_of_the_previous_transaction(env):
    """The next transaction's AddPartitionsToTxn, while the last one's markers are still being
    written, waits for them (up to 500 ms) instead of answering CONCURRENT_TRANSACTIONS at once:
    clients back off 20 ms or more after that, longer than the markers take."""
    import asyncio
    await env.find("tx-w")
    _, pid, epoch = await env.init("tx-w")
    assert await env.add("tx-w", pid, epoch, {"t1": [0]}) == {("t1", 0): 0}
    env.fake.hold = True  # the leader holds its answer: the commit stays in PrepareCommit
    assert await env.end("tx-w", pid, epoch, True) == (0, -1, -1)
    await wait_written(env.fake, 0)
    t0 = time.monotonic()
    add = asyncio.ensure_future(env.add("tx-w", pid, epoch, {"t1": [1]}))
    await asyncio.sleep(0.03)
    env.fake.hold = False  # the marker is acknowledged: CompleteCommit, then the add goes through
    assert await add == {("t1", 1): 0}
    assert time.monotonic() - t0 < 1
    assert (await env.describe("tx-w")).transaction_state == "Ongoing"
    # a leader that does not answer within the wait: CONCURRENT_TRANSACTIONS, as from Kafka
    env.fake.hold = True
    assert await env.end("tx-w", pid, epoch, False) == (0, -1, -1)
    t0 = time.monotonic()
    assert await env.add("tx-w", pid, epoch, {"t1": [2]}) == {("t1", 2): E.CONCURRENT_TRANSACTIONS}
    assert 0.45 < time.monotonic() - t0 < 2
    env.fake.hold = False


async def test_an_abort_right_after_a_commit_whose_markers_are_slow_is_not_invalid_txn_state(env):
    """What librdkafka sends when the application aborts a transaction it just began, while the
    previous commit's markers are slow (a partition, packet loss): its AddPartitionsToTxn waits and
    is refused with CONCURRENT_TRANSACTIONS, and the EndTxn(abort) it had already queued behind it
    on the connection comes next. It was answered CONCURRENT_TRANSACTIONS, then INVALID_TXN_STATE
    once the commit completed (Kafka's answer to an abort in CompleteCommit), which librdkafka takes
    as fatal: 16 producers died so in a 10-minute partition chaos run (seed 109)."""
    await env.find("tx-a")
    _, pid, epoch = await env.init("tx-a")
    assert await env.add("tx-a", pid, epoch, {"t1": [0]}) == {("t1", 0): 0}
    env.fake.hold = True
    assert await env.end("tx-a", pid, epoch, True) == (0, -1, -1)
    assert await env.add("tx-a", pid, epoch, {"t1": [1]}) == {("t1", 1): E.CONCURRENT_TRANSACTIONS}
    assert await env.end("tx-a", pid, epoch, False) == (E.CONCURRENT_TRANSACTIONS, -1, -1)
    env.fake.hold = False
    await env.state("tx-a", "CompleteCommit")
    assert await env.end("tx-a", pid, epoch, False) == (0, -1, -1)
    assert [v.status for v in env.txn_log_values("tx-a")] == [0, 1, 2, 4]  # nothing written for the abort


async def test_add_partitions_errors_on_the_wire(env):
    await env.find("tx-e")
    _, pid, epoch = await env.init("tx-e")
    assert await env.add("tx-e", pid, epoch, {"t1": [0, 7]}) == {("t1", 0): E.OPERATION_NOT_ATTEMPTED,
                                                                 ("t1", 7): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert await env.add("tx-e", pid, epoch, {"nope": [0], "t1": [1]}) == {
        ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION, ("t1", 1): E.OPERATION_NOT_ATTEMPTED}
    # a client cannot put an internal topic into a transaction (AddOffsetsToTxn does that)
    assert await env.add("tx-e", pid, epoch, {"__consumer_offsets": [0]}) == {
        ("__consumer_offsets", 0): E.TOPIC_AUTHORIZATION_FAILED}
    assert await env.add("tx-e", pid, epoch + 1, {"t1": [0]}, ver=2) == {("t1", 0): E.PRODUCER_FENCED}
    assert await env.add("tx-e", pid, epoch + 1, {"t1": [0]}, ver=1) == {("t1", 0): E.INVALID_PRODUCER_EPOCH}
    assert await env.add("tx-e", pid + 1, epoch, {"t1": [0]}) == {("t1", 0): E.INVALID_PRODUCER_ID_MAPPING}
    assert await env.end("tx-e", pid, epoch, True) == (E.INVALID_TXN_STATE, -1, -1)  # nothing begun
    r = await env.conn.request(ApiKey.ADD_OFFSETS_TO_TXN, 0, {"transactional_id": "tx-e", "producer_id": pid,
                                                               "producer_epoch": epoch + 1, "group_id": "g"})
    assert int(r.error_code) == E.INVALID_PRODUCER_EPOCH


async def test_partition_leaders_verify_and_add_partitions_in_batches(env):
    """AddPartitionsToTxn v4+ (KIP-890): one request for several transactions; verifyOnly checks
    a partition is in the transaction; without it (v5, transaction version 2) the leader adds it."""
    await env.find("tx-v1")
    await env.find("tx-v2")
    _, p1, e1 = await env.init("tx-v1")
    _, p2, e2 = await env.init("tx-v2")
    assert await env.add("tx-v1", p1, e1, {"t1": [0]}) == {("t1", 0): 0}

    async def batch(ver, *txns):
        r = await env.conn.request(ApiKey.ADD_PARTITIONS_TO_TXN, ver, {"transactions": [
            {"transactional_id": tid, "producer_id": pid, "producer_epoch": ep, "verify_only": vo,
             "topics": [{"name": "t1", "partitions": ps}]} for tid, pid, ep, vo, ps in txns]})
        assert int(r.error_code) == 0
        return {x.transactional_id: {(t.name, int(p.partition_index)): int(p.partition_error_code)
                                     for t in x.topic_results for p in t.results_by_partition}
                for x in r.results_by_transaction}
    assert await batch(4, ("tx-v1", p1, e1, True, [0, 1]), ("tx-v2", p2, e2, True, [0])) == {
        "tx-v1": {("t1", 0): 0, ("t1", 1): E.TRANSACTION_ABORTABLE},
        "tx-v2": {("t1", 0): E.TRANSACTION_ABORTABLE}}
    assert await batch(4, ("tx-v1", p1, e1 - 1, True, [0]), ("tx-v2", p2 + 100, e2, True, [0])) == {
        "tx-v1": {("t1", 0): E.PRODUCER_FENCED}, "tx-v2": {("t1", 0): E.INVALID_PRODUCER_ID_MAPPING}}
    # the implicit add of transaction version 2, then EndTxn v5: the epoch goes up with the commit
    assert await batch(5, ("tx-v2", p2, e2, False, [2])) == {"tx-v2": {("t1", 2): 0}}
    assert await batch(5, ("tx-v2", p2, e2, True, [2])) == {"tx-v2": {("t1", 2): 0}}
    assert await env.end("tx-v2", p2, e2, True, ver=5) == (0, p2, e2 + 1)
    (m,) = await wait_written(env.fake, 1)
    assert (m.partition, m.producer_epoch, m.commit) == (("t1", 2), e2 + 1, True)
    await env.state("tx-v2", "CompleteCommit")
    assert await env.end("tx-v2", p2, e2, True, ver=5) == (0, p2, e2 + 1)  # a retry of the lost answer
    last = env.txn_log_values("tx-v2")[-1]
    assert (last.status, last.producer_epoch) == (4, e2 + 1)  # CompleteCommit in the bumped epoch


# --- markers: retries, fencing, timeouts, restarts ---------------------------------------------

async def test_markers_are_retried_until_the_leader_takes_them(env):
    fake = env.fake
    fake.errors[("t1", 0)] = [E.NOT_LEADER_OR_FOLLOWER, E.NOT_ENOUGH_REPLICAS]
    fake.drop_next = 1  # the first request's connection is lost
    await env.find("tx-r")
    _, pid, epoch = await env.init("tx-r")
    await env.add("tx-r", pid, epoch, {"t1": [0, 1]})
    assert await env.end("tx-r", pid, epoch, False) == (0, -1, -1)
    await env.state("tx-r", "CompleteAbort")
    assert sorted(m.partition for m in fake.written) == [("t1", 0), ("t1", 1)]
    assert all(not m.commit for m in fake.markers)
    assert [m.partition for m in fake.markers].count(("t1", 0)) >= 3


@pytest.mark.parametrize("level", [0, 2])
async def test_a_new_producer_fences_the_open_transaction_of_its_predecessor(env, level):
    await env.set_tv_level(level)
    tv2 = 1 if level == 2 else 0  # the coordinator's abort bumps the epoch once more (Kafka: the server's TV)
    await env.find("tx-z")
    _, pid, epoch = await env.init("tx-z")
    await env.add("tx-z", pid, epoch, {"t1": [0]})
    assert await env.init("tx-z") == (E.CONCURRENT_TRANSACTIONS, -1, -1)  # the open transaction is aborted first
    (m,) = await wait_written(env.fake, 1)
    assert (m.commit, m.producer_epoch) == (False, epoch + 1 + tv2)
    assert await env.init("tx-z", busy_ok=True) == (0, pid, epoch + 2 + tv2)
    # the zombie is fenced
    assert await env.add("tx-z", pid, epoch, {"t1": [1]}) == {("t1", 1): E.PRODUCER_FENCED}
    assert await env.end("tx-z", pid, epoch, True) == (E.PRODUCER_FENCED, -1, -1)
    assert await env.end("tx-z", pid, epoch, True, ver=1) == (E.INVALID_PRODUCER_EPOCH, -1, -1)


@pytest.mark.parametrize("level", [0, 2])
async def test_a_transaction_open_past_its_timeout_is_aborted_by_the_coordinator(env, level):
    await env.set_tv_level(level)
    tv2 = 1 if level == 2 else 0  # the coordinator's abort bumps the epoch once more (Kafka: the server's TV)
    await env.find("tx-t")
    _, pid, epoch = await env.init("tx-t", timeout_ms=500)
    await env.add("tx-t", pid, epoch, {"t1": [2]})
    t0 = time.monotonic()
    (m,) = await wait_written(env.fake, 1, "the coordinator's abort")
    assert time.monotonic() - t0 >= 0.3
    assert (m.commit, m.producer_epoch, m.partition) == (False, epoch + 1 + tv2, ("t1", 2))
    d = await env.state("tx-t", "CompleteAbort")
    assert d.producer_epoch == epoch + 1 + tv2
    assert await env.end("tx-t", pid, epoch, True) == (E.PRODUCER_FENCED, -1, -1)


async def test_a_restarted_coordinator_finishes_the_commit_it_had_decided(tmp_path):
    env = await Env(tmp_path).start()
    try:
        env.fake.hold = True  # the leader does not answer: the commit stays in PrepareCommit
        await env.find("tx-p")
        _, pid, epoch = await env.init("tx-p")
        await env.add("tx-p", pid, epoch, {"t1": [0, 1]})
        assert await env.end("tx-p", pid, epoch, True) == (0, -1, -1)
        await until(lambda: _ready(len(env.fake.markers) >= 2), "the first markers")
        assert (await env.describe("tx-p")).transaction_state == "PrepareCommit"
        await env.stop()
        env.fake.hold = False
        env.fake.written.clear()
        await env.start(create_topic=False)
        written = await wait_written(env.fake, 2)
        assert {(m.partition, m.commit, m.producer_epoch) for m in written} == {(("t1", 0), True, epoch),
                                                                                (("t1", 1), True, epoch)}
        await env.state("tx-p", "CompleteCommit")
        assert await env.init("tx-p") == (0, pid, epoch + 1)
    finally:
        await env.close()


async def _ready(ok: bool):
    return ok, ok


# --- DescribeTransactions / ListTransactions -----------------------------------------------------

async def test_describe_and_list_transactions(env):
    for tid in ("l-a", "l-b", "l-c"):
        await env.find(tid)
    _, pa, ea = await env.init("l-a")
    _, pb, _ = await env.init("l-b")
    await env.add("l-a", pa, ea, {"t1": [1, 0]})
    d = await env.describe("l-a")
    assert (int(d.error_code), d.transaction_state, d.producer_id, d.producer_epoch) == (0, "Ongoing", pa, ea)
    assert int(d.transaction_timeout.total_seconds() * 1000) == 60_000
    assert abs(d.transaction_start_time - int(time.time() * 1000)) < 10_000
    assert [(t.topic, list(t.partitions)) for t in d.topics] == [("t1", [0, 1])]
    d = await env.describe("l-b")
    assert (d.transaction_state, d.transaction_start_time) == ("Empty", -1)  # Kafka's -1: no transaction
    assert int((await env.describe("nobody")).error_code) == E.TRANSACTIONAL_ID_NOT_FOUND

    async def lst(ver=1, states=(), pids=(), duration=-1):
        r = await env.conn.request(ApiKey.LIST_TRANSACTIONS, ver, {
            "state_filters": list(states), "producer_id_filters": list(pids), "duration_filter": duration})
        assert int(r.error_code) == 0
        return list(r.unknown_state_filters), sorted((t.transactional_id, t.producer_id, t.transaction_state)
                                                     for t in r.transaction_states)
    assert await lst(0) == ([], [("l-a", pa, "Ongoing"), ("l-b", pb, "Empty")])
    assert await lst(states=["Ongoing", "Nope"]) == (["Nope"], [("l-a", pa, "Ongoing")])
    assert await lst(pids=[pb]) == ([], [("l-b", pb, "Empty")])
    assert await lst(states=["Ongoing"], duration=3_600_000) == ([], [])
    assert await lst(states=["Ongoing"], duration=0) == ([], [("l-a", pa, "Ongoing")])


@pytest.mark.parametrize("end_version, tv", [(5, 2), (3, 0)])
async def test_markers_carry_the_transaction_version_of_their_transaction(env, end_version, tv):
    """WriteTxnMarkers v2 (KIP-890): a transaction ended with EndTxn v5 (transaction version 2)
    has markers of version 2, which leaders check strictly (a stale copy cannot end the next
    transaction, which runs at the bumped epoch); a version 0 one, version 0."""
    tid = f"tx-mv{end_version}"
    await env.find(tid)
    _, pid, epoch = await env.init(tid)
    assert await env.add(tid, pid, epoch, {"t1": [0]}) == {("t1", 0): 0}
    assert (await env.end(tid, pid, epoch, True, ver=end_version))[0] == 0
    (m,) = await wait_written(env.fake, 1)
    assert m.producer_epoch == epoch + (1 if tv == 2 else 0)
    assert env.fake.versions == [tv]
