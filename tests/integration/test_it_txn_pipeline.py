"""A Kafka Streams-style exactly-once pipeline (processing.guarantee=exactly_once_v2) with
confluent-kafka on one krafty node: two stages, each a consumer-group member (subscribe,
read_committed) with one transactional producer, writing its output and its input offsets in one
transaction with the consumer's group metadata (KIP-447: TxnOffsetCommit carries the generation
and member id). Stage 1 maps ``input`` to ``mid``; stage 2 keeps a running count per key from
``mid`` and writes it to ``counts``. Stage 1's first instance dies in the middle of a transaction
(no commit, no leave); a second instance takes its partitions after the rebalance, the dead
one's transaction is aborted by the coordinator, and the zombie's late commit is refused. In the
end ``mid`` holds every input record once, and ``counts`` counts every key exactly 1..N, as if
nothing had failed."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict

import pytest
from conftest import GROUP_PROPS, _start_node, create_topic
from txn_clients import read_committed

pytestmark = pytest.mark.krafty_only

N, KEYS = 240, 8
PROPS = {**GROUP_PROPS, "transaction.state.log.num.partitions": "3", "transaction.state.log.replication.factor": "1",
         "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}


@pytest.fixture
def pnode(tmp_path):
    node = _start_node(tmp_path, extra_properties=PROPS)
    yield node
    node.close()


class Stage:
    """One instance of a stage: a group member and its transactional producer."""

    def __init__(self, bootstrap: str, group: str, src: str, tid: str, fn, txn_timeout_ms: int = 60000):
        from confluent_kafka import Consumer, Producer
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                           "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                           "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "max.poll.interval.ms": 7000})
        self.c.subscribe([src])
        self.p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5,
                           "transaction.timeout.ms": txn_timeout_ms, "message.timeout.ms": min(txn_timeout_ms, 30000)})
        self.p.init_transactions(30)
        self.fn = fn

    def step(self, commit: bool = True) -> int:
        """One poll, one transaction: what ``fn`` makes of each record, and the input offsets."""
        msgs = [m for m in self.c.consume(50, 1.0) if m.error() is None]
        if not msgs:
            return 0
        self.p.begin_transaction()
        for m in msgs:
            for topic, key, value in self.fn(m):
                self.p.produce(topic, key=key, value=value)
        self.p.send_offsets_to_transaction(self.c.position(self.c.assignment()), self.c.consumer_group_metadata(), 30)
        if commit:
            self.p.commit_transaction(30)
        else:
            self.p.flush(10)  # the records are written, the transaction left open
        return len(msgs)


def test_two_stage_pipeline_exactly_once_through_a_crash(pnode):
    from confluent_kafka import KafkaException, Producer
    run = uuid.uuid4().hex[:6]
    src, mid, out = f"in-{run}", f"mid-{run}", f"counts-{run}"
    for t, n in ((src, 3), (mid, 3), (out, 1)):
        create_topic(pnode, t, n)
    plain = Producer({"bootstrap.servers": pnode.bootstrap})
    for i in range(N):
        plain.produce(src, key=b"k%d" % (i % KEYS), value=b"%d" % i, partition=i % 3)
    plain.flush(10)

    def double(m):
        yield mid, m.key(), b"%d" % (2 * int(m.value()))
    counts: dict[bytes, int] = defaultdict(int)

    def count(m):
        counts[m.key()] += 1
        yield out, m.key(), b"%s=%d" % (m.key(), counts[m.key()])

    b = pnode.bootstrap
    # stage 1, first instance: a committed transaction, then it dies with one open
    s1 = Stage(b, f"stage1-{run}", src, f"stage1-a-{run}", double, txn_timeout_ms=4000)
    deadline = time.monotonic() + 30
    while s1.step() == 0 and time.monotonic() < deadline:
        pass
    assert time.monotonic() < deadline, "stage 1 read nothing"
    while s1.step(commit=False) == 0 and time.monotonic() < deadline:
        pass
    # a second instance (its own transactional id, as with exactly_once_v2) takes over once the group
    # rebalances; stage 2 runs alongside
    s1b = Stage(b, f"stage1-{run}", src, f"stage1-b-{run}", double)
    s2 = Stage(b, f"stage2-{run}", mid, f"stage2-{run}", count)
    deadline = time.monotonic() + 60
    done2 = 0
    while done2 < N and time.monotonic() < deadline:
        s1b.step()
        done2 += s2.step()
    # the zombie wakes up: its transaction was aborted on its timeout, its commit is refused
    with pytest.raises(KafkaException):
        s1.p.commit_transaction(10)
    for s in (s1b, s2):
        s.c.close()
    s1.c.close()
    assert done2 == N, f"stage 2 read {done2} of {N}"
    got_mid = read_committed("confluent-kafka", b, [(mid, p) for p in range(3)], N)
    assert sorted(int(v) for v in got_mid) == sorted(2 * i for i in range(N))  # each once: nothing lost, no duplicate
    got = read_committed("confluent-kafka", b, [(out, 0)], N)
    per_key: dict[bytes, list[int]] = defaultdict(list)
    for v in got:
        k, c = v.split(b"=")
        per_key[k].append(int(c))
    assert {k: sorted(cs) for k, cs in per_key.items()} == {b"k%d" % k: list(range(1, N // KEYS + 1))
                                                            for k in range(KEYS)}
