"""The transaction coordinator on a real 3-controller + 3-broker cluster (``__transaction_state``
RF 3, min.insync.replicas 2): ``kill -9`` of the coordinator in the middle of a transaction and
right after a commit was acknowledged. The coordinator's state is written with acks=all before
anything is answered, so the broker that takes over the partition loads it: the open
transaction can still be committed through it, and an acknowledged commit stays decided
(PrepareCommit, then CompleteCommit once the partition leaders have written the markers).
With the data plane (WriteTxnMarkers, read_committed) also: every committed record is read."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from broker.protocol.apis import SUPPORTED, ApiKey
from broker.protocol.client import KafkaConnection
from tests.cluster.conftest import FAST, running_cluster, wait_until

DATA_PLANE = ApiKey.WRITE_TXN_MARKERS in SUPPORTED
OVERRIDES = {**FAST, "transaction.state.log.num.partitions": "6", "offsets.topic.num.partitions": "6"}
TOPIC = "txn-orders"


def _request(port: int, api: int, version: int, data: dict):
    async def go():
        c = KafkaConnection("127.0.0.1", port, client_id="test-txn-cluster")
        try:
            return await c.request(api, version, data, timeout=10)
        finally:
            c.close()
    return asyncio.run(go())


def _coordinator(cluster, tid: str, avoid: int | None = None) -> int | None:
    for i in range(cluster.n_brokers):
        if f"broker-{cluster.n_controllers + 1 + i}" not in cluster.procs:
            continue
        try:
            r = _request(cluster.base + i, ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": [tid]})
        except (ConnectionError, OSError, TimeoutError):
            continue
        c = r.coordinators[0]
        if int(c.error_code) == 0 and c.node_id != avoid:
            return int(c.node_id)
    return None


def _describe(cluster, broker_id: int, tid: str):
    port = cluster.base + broker_id - cluster.n_controllers - 1
    d = _request(port, ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]}).transaction_states[0]
    return int(d.error_code), d.transaction_state, int(d.producer_id), int(d.producer_epoch), \
        sorted((t.topic, p) for t in d.topics for p in t.partitions)


def _kill_coordinator(cluster, tid: str) -> int:
    coord = wait_until(lambda: _coordinator(cluster, tid), 30, f"the coordinator of {tid}")
    cluster.kill(f"broker-{coord}")
    return coord


@pytest.fixture
def tcluster(tmp_path, request):
    with running_cluster(tmp_path, request, overrides=OVERRIDES) as c:
        yield c


def test_kill_9_of_the_transaction_coordinator(tcluster):
    c = tcluster
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 3, 3)])[TOPIC].result(30)

    # 1. mid-transaction: the new coordinator has the open transaction and commits it
    p = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": "tx-mid", "acks": "all"})
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(30):
        p.produce(TOPIC, value=b"mid-%d" % i, partition=i % 3)
    p.flush(30)  # the partitions are in the transaction (AddPartitionsToTxn) and the records written
    killed = _kill_coordinator(c, "tx-mid")
    p.commit_transaction(90)  # found again through FindCoordinator, committed by the new coordinator
    new = wait_until(lambda: _coordinator(c, "tx-mid", avoid=killed), 60, "a new coordinator for tx-mid")
    err, state, _, _, _ = _describe(c, new, "tx-mid")
    assert (err, state in ("PrepareCommit", "CompleteCommit")) == (0, True), state
    c.start(f"broker-{killed}")

    # 2. right after an acknowledged commit: the decision survives the kill
    q = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": "tx-after", "acks": "all"})
    q.init_transactions(60)
    q.begin_transaction()
    for i in range(30):
        q.produce(TOPIC, value=b"after-%d" % i, partition=i % 3)
    q.commit_transaction(60)
    killed = _kill_coordinator(c, "tx-after")
    new = wait_until(lambda: _coordinator(c, "tx-after", avoid=killed), 60, "a new coordinator for tx-after")

    def decided():
        err, state, pid, epoch, parts = _describe(c, new, "tx-after")
        return err == 0 and state in ("PrepareCommit", "CompleteCommit") and (state, parts)
    state, parts = wait_until(decided, 30, "the commit of tx-after at the new coordinator")
    if state == "PrepareCommit":  # the partitions whose markers are still owed (leaders may have acknowledged some)
        assert parts and set(parts) <= {(TOPIC, 0), (TOPIC, 1), (TOPIC, 2)}
    if DATA_PLANE:
        from tests.integration.txn_clients import read_committed
        wait_until(lambda: _describe(c, new, "tx-after")[1] == "CompleteCommit", 60, "CompleteCommit")
        got = read_committed("confluent-kafka", c.bootstrap, [(TOPIC, i) for i in range(3)], 60)
        assert sorted(got) == sorted([b"mid-%d" % i for i in range(30)] + [b"after-%d" % i for i in range(30)])
