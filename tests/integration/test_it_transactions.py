"""Transactions with real clients (confluent-kafka, kafka-python, aiokafka) against one krafty node.

The coordinator and the partition leaders together, as the clients use them: init_transactions,
commit and abort across partitions of two topics, read_committed consumers of each client that see
exactly the committed records (never an open or aborted one), a zombie producer fenced by a newer
one with the same transactional id, a transaction left open past its timeout aborted by the
coordinator, and a consume-transform-produce loop whose offsets commit with its output
(send_offsets_to_transaction) and whose aborted transaction is consumed and written again.
"""

from __future__ import annotations

import time
import uuid

import pytest
from conftest import GROUP_PROPS, _start_node, create_topic
from txn_clients import TxnFailure, make_producer, read_committed

CLIENTS = ["confluent-kafka", "kafka-python", "aiokafka"]

pytestmark = pytest.mark.krafty_only

TXN_PROPS = {**GROUP_PROPS, "transaction.state.log.num.partitions": "5",
             "transaction.state.log.replication.factor": "1",
             "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}


@pytest.fixture(scope="module")
def tnode(tmp_path_factory):
    node = _start_node(tmp_path_factory.mktemp("txn"), extra_properties=TXN_PROPS)
    yield node
    node.close()


@pytest.fixture
def producers():
    made = []

    def make(client, bootstrap, tid, **kw):
        p = make_producer(client, bootstrap, tid, **kw)
        made.append(p)
        return p
    yield make
    for p in made:
        try:
            p.close()
        except Exception:
            pass


def tid_for(client: str) -> str:
    return f"txn-{client}-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("client", CLIENTS)
def test_init_and_commit_a_transaction(tnode, topic, producers, client):
    create_topic(tnode, topic, 2)
    p = producers(client, tnode.bootstrap, tid_for(client))
    p.init()
    p.begin()
    for i in range(4):
        p.send(topic, i % 2, b"c%d" % i)
    p.commit()


@pytest.mark.parametrize("client", CLIENTS)
def test_a_zombie_producer_is_fenced_by_a_newer_one(tnode, topic, producers, client):
    create_topic(tnode, topic, 1)
    tid = tid_for(client)
    old = producers(client, tnode.bootstrap, tid)
    old.init()
    new = producers(client, tnode.bootstrap, tid)
    new.init()  # bumps the epoch: the old producer is a zombie
    with pytest.raises(TxnFailure) as e:
        old.begin()
        old.send(topic, 0, b"zombie")
        old.commit()
    assert e.value.kind == "fenced", e.value


@pytest.mark.parametrize("client", CLIENTS)
def test_a_transaction_open_past_its_timeout_is_aborted_and_its_producer_fenced(tnode, topic, producers, client):
    create_topic(tnode, topic, 1)
    p = producers(client, tnode.bootstrap, tid_for(client), timeout_ms=1000)
    p.init()
    p.begin()
    p.send(topic, 0, b"too-slow")
    time.sleep(2.5)  # the coordinator checks every 200 ms here
    with pytest.raises(TxnFailure) as e:
        p.commit()
    assert e.value.kind in ("fenced", "abortable"), e.value


@pytest.mark.parametrize("client", CLIENTS)
def test_commit_and_abort_read_committed_sees_only_committed(tnode, topic, producers, client):
    create_topic(tnode, topic, 3)
    other = topic + "-b"
    create_topic(tnode, other, 1)
    p = producers(client, tnode.bootstrap, tid_for(client))
    p.init()
    expected = []
    for n, commit in enumerate([True, False, True, False, True]):
        p.begin()
        for i in range(6):  # several partitions of two topics in each transaction
            v = b"t%d-%d-%s" % (n, i, b"c" if commit else b"a")
            p.send(topic if i % 3 else other, i % 3 if i % 3 else 0, v)
            if commit:
                expected.append(v)
        p.commit() if commit else p.abort()
    tps = [(topic, 0), (topic, 1), (topic, 2), (other, 0)]
    got = read_committed(client, tnode.bootstrap, tps, len(expected))
    assert sorted(got) == sorted(expected)  # nothing aborted, nothing twice


@pytest.mark.parametrize("client", CLIENTS)
def test_an_open_transaction_is_invisible_until_committed(tnode, topic, producers, client):
    create_topic(tnode, topic, 1)
    p = producers(client, tnode.bootstrap, tid_for(client))
    p.init()
    p.begin()
    p.send(topic, 0, b"pending")
    assert read_committed(client, tnode.bootstrap, [(topic, 0)], 1, timeout=3) == []
    p.commit()
    assert read_committed(client, tnode.bootstrap, [(topic, 0)], 1) == [b"pending"]


@pytest.mark.parametrize("client", CLIENTS)
def test_after_a_timeout_abort_a_new_producer_starts_clean(tnode, topic, producers, client):
    create_topic(tnode, topic, 1)
    tid = tid_for(client)
    p = producers(client, tnode.bootstrap, tid, timeout_ms=1000)
    p.init()
    p.begin()
    p.send(topic, 0, b"aborted-by-timeout")
    time.sleep(2.5)
    q = producers(client, tnode.bootstrap, tid)
    q.init()
    q.begin()
    q.send(topic, 0, b"after")
    q.commit()
    assert read_committed(client, tnode.bootstrap, [(topic, 0)], 1) == [b"after"]


@pytest.mark.parametrize("client", CLIENTS)
def test_consume_transform_produce_exactly_once(tnode, topic, producers, client):
    from confluent_kafka import Consumer, Producer, TopicPartition
    src, dst, group = topic, topic + "-out", f"ctp-{client}-{uuid.uuid4().hex[:6]}"
    create_topic(tnode, src, 1)
    create_topic(tnode, dst, 1)
    plain = Producer({"bootstrap.servers": tnode.bootstrap})
    for i in range(30):
        plain.produce(src, value=b"%d" % i, partition=0)
    plain.flush(10)
    c = Consumer({"bootstrap.servers": tnode.bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    c.assign([TopicPartition(src, 0)])
    p = producers(client, tnode.bootstrap, tid_for(client))
    p.init()
    done, txns, aborted, deadline = 0, 0, 0, time.monotonic() + 60
    while done < 30 and time.monotonic() < deadline:
        batch = [m for m in c.consume(10, 1.0) if m.error() is None]
        if not batch:
            continue
        assert batch[0].offset() == done, (batch[0].offset(), done)
        p.begin()
        for m in batch:
            p.send(dst, 0, b"x" + m.value())
        p.send_offsets({(src, 0): batch[-1].offset() + 1}, group, consumer=c)
        txns += 1
        if txns == 2:  # the second transaction aborts: its input is consumed and transformed again
            p.abort()
            aborted = len(batch)
            c.seek(TopicPartition(src, 0, done))
            continue
        p.commit()
        done = batch[-1].offset() + 1
    c.close()
    assert done == 30 and aborted > 0
    out = read_committed(client, tnode.bootstrap, [(dst, 0)], 30)
    assert sorted(out) == sorted(b"x%d" % i for i in range(30))
    check = Consumer({"bootstrap.servers": tnode.bootstrap, "group.id": group})
    (tp,) = check.committed([TopicPartition(src, 0)], timeout=10)
    check.close()
    assert tp.offset == 30
