"""The transaction coordinator on a real 3-controller + 3-broker cluster (``__transaction_state``
RF 3, min.insync.replicas 2): ``kill -9`` of the coordinator in the middle of a transaction and
right after a commit was acknowledged. The coordinator's state is written with acks=all before
anything is answered, so the broker that takes over the partition loads it: the open
transaction can still be committed through it, and an acknowledged commit stays decided
(PrepareCommit, then CompleteCommit once the partition leaders have written the markers).
With the data plane (WriteTxnMarkers, read_committed) also: every committed record is read."""

from __future__ import annotations

import asyncio
import time

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
    # every broker registered first (a loaded machine starts them late: RF 3 > 2 available brokers)
    wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == c.n_brokers, 60, "all brokers registered")
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


def test_kill_9_of_a_partition_leader_mid_transaction(tcluster):
    """The leader of a transactional partition dies with the transaction open (its records
    acknowledged with acks=all); the producer goes on with the new leader and commits, a second
    transaction aborts. After the failover every committed transaction is read in full and no
    aborted one in part, by a read_committed consumer, and nothing is left open (LSO = HW)."""
    from confluent_kafka import Consumer, TopicPartition

    from tests.integration.txn_clients import read_committed
    c = tcluster
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    topic = TOPIC + "-lk"
    wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == c.n_brokers, 60, "all brokers registered")
    admin.create_topics([NewTopic(topic, 3, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
    wait_until(lambda: all(p.leader >= 0 and len(p.isrs) == 3 for p in
                           admin.list_topics(topic, timeout=5).topics[topic].partitions.values()), 60, "ISR")
    p = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": "tx-leader-kill", "acks": "all",
                  "message.timeout.ms": 60000, "transaction.timeout.ms": 120000})
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, value=b"c1-%d" % i, partition=i % 3)
    p.flush(30)
    leader = admin.list_topics(topic, timeout=5).topics[topic].partitions[0].leader
    c.kill(c.broker_name(leader))
    for i in range(30, 60):  # the rest of the transaction goes to the new leader of partition 0
        p.produce(topic, value=b"c1-%d" % i, partition=i % 3)
    p.commit_transaction(120)
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, value=b"a-%d" % i, partition=i % 3)
    p.flush(60)
    p.abort_transaction(120)
    c.start(c.broker_name(leader))
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, value=b"c2-%d" % i, partition=i % 3)
    p.commit_transaction(120)
    want = sorted([b"c1-%d" % i for i in range(60)] + [b"c2-%d" % i for i in range(30)])
    got = read_committed("confluent-kafka", c.bootstrap, [(topic, i) for i in range(3)], len(want), timeout=60)
    assert sorted(got) == want  # every committed record once, nothing of the aborted transaction
    # nothing hangs: read_committed's end (LSO) is the end of every partition (HW)
    rc, ru = (Consumer({"bootstrap.servers": c.bootstrap, "group.id": "lk-check", "isolation.level": iso})
              for iso in ("read_committed", "read_uncommitted"))
    try:
        for i in range(3):
            tp = TopicPartition(topic, i)
            wait_until(lambda tp=tp: rc.get_watermark_offsets(tp, timeout=10)[1] ==
                       ru.get_watermark_offsets(tp, timeout=10)[1], 30, f"LSO = HW on partition {i}")
    finally:
        rc.close()
        ru.close()


def test_first_produce_of_a_transaction_after_the_verification_connection_idled_out(tmp_path, request):
    """A partition leader asks the transaction coordinator over a connection of its own (KIP-890
    verification); the coordinator closes it after connections.max.idle.ms. The next
    transaction's first batches must be verified over a new connection: on the dead one the
    verification failed (NOT_ENOUGH_REPLICAS to the client) and, with two batches in flight, the
    second got OUT_OF_ORDER_SEQUENCE_NUMBER, which librdkafka answers by aborting the transaction
    (its test 0137 failed so)."""
    overrides = {**OVERRIDES, "connections.max.idle.ms": "1500"}
    with running_cluster(tmp_path, request, overrides=overrides) as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == c.n_brokers, 60, "all brokers registered")
        topic = TOPIC + "-idle"
        admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(30)
        leaders = wait_until(lambda: {p.leader for p in admin.list_topics(topic, timeout=5).topics[topic]
                                      .partitions.values() if p.leader >= 0}, 30, "leaders")
        coord = wait_until(lambda: _coordinator(c, "tx-idle"), 30, "the coordinator of tx-idle")
        assert leaders - {coord}, "a leader other than the coordinator asks over the network"
        p = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": "tx-idle", "batch.num.messages": 1,
                      "linger.ms": 0})
        p.init_transactions(60)
        for rnd in range(3):
            p.begin_transaction()
            delivered: list = []
            for i in range(6):
                p.produce(topic, value=b"%d-%d" % (rnd, i), partition=i % 3,
                          on_delivery=lambda err, _m, d=delivered: d.append(err))
            p.commit_transaction(60)
            assert delivered == [None] * 6, (rnd, delivered)
            time.sleep(3)  # every broker connection of the verification is closed as idle
