"""What an idempotent producer is answered while a partition's ISR is below min.insync.replicas and
after it grew back: Kafka's answers, in Kafka's order (the min-ISR check of
``Partition.appendRecordsToLeader`` before the producer-state checks of the log append).

The chaos runs' duplicates came from librdkafka acting on these answers (issue #4953): a request
refused with NOT_ENOUGH_REPLICAS, the ISR back, the next request of the same partition refused
with OUT_OF_ORDER_SEQUENCE_NUMBER, so librdkafka bumps its epoch and sends again batches of other
partitions that may have been written. These are the answers a Kafka broker gives; a retried
batch is still answered with its first offsets, and never acknowledged while the ISR is short."""

from __future__ import annotations

import asyncio
import os
import signal

from confluent_kafka.admin import AdminClient, NewTopic

from broker.log.batch import Record, build_batch
from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from common.errors import ErrorCode
from tests.cluster.conftest import wait_until

TOPIC = "idem"


def _partition(admin: AdminClient):
    return admin.list_topics(TOPIC, timeout=5).topics[TOPIC].partitions[0]


async def _produce(conn: KafkaConnection, pid: int, epoch: int, seq: int, values: list[bytes]) -> tuple[int, int]:
    batch = bytes(build_batch([Record(i, 0, None, v, []) for i, v in enumerate(values)], producer_id=pid,
                              producer_epoch=epoch, base_sequence=seq))
    r = await conn.request(ApiKey.PRODUCE, 9, {"transactional_id": None, "acks": -1, "timeout": 10000, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}]}, timeout=20)
    pr = r.responses[0].partition_responses[0]
    return int(pr.error_code), int(pr.base_offset)


async def _isr(conn: KafkaConnection) -> list[int]:
    """The partition's ISR as its leader says (the stopped follower cannot answer a Metadata request)."""
    md = await conn.request(ApiKey.METADATA, 12, {"topics": [{"name": TOPIC, "topic_id": None}],
                                                  "allow_auto_topic_creation": False,
                                                  "include_topic_authorized_operations": False})
    return sorted(int(r) for r in md.topics[0].partitions[0].isr_nodes)


async def _wait_isr(conn: KafkaConnection, want: list[int], what: str) -> None:
    for _ in range(600):
        if await _isr(conn) == want:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}: ISR {await _isr(conn)}")


def test_answers_to_an_idempotent_producer_around_an_isr_below_min_insync_replicas(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == cluster.n_brokers, 90, "brokers registered")
    admin.create_topics([NewTopic(TOPIC, 1, 2, config={"min.insync.replicas": "2"})])[TOPIC].result(30)
    wait_until(lambda: _partition(admin).leader >= 0 and len(_partition(admin).isrs) == 2, 30, "leader and ISR")
    p = _partition(admin)
    leader = p.leader
    follower = next(r for r in p.replicas if r != leader)
    b = admin.list_topics(timeout=5).brokers[leader]

    async def scenario():
        conn = KafkaConnection(b.host, b.port)
        try:
            r = await conn.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                                                 "producer_id": -1, "producer_epoch": -1})
            pid, epoch = int(r.producer_id), int(r.producer_epoch)
            assert await _produce(conn, pid, epoch, 0, [b"a0", b"a1"]) == (ErrorCode.NONE, 0)

            # the follower stops: it leaves the ISR, which is then below min.insync.replicas
            proc = cluster.procs[cluster.broker_name(follower)]
            os.kill(proc.pid, signal.SIGSTOP)
            try:
                await _wait_isr(conn, [leader], "a shrunk ISR")
                r1 = [b"r1-0", b"r1-1", b"r1-2"]
                # refused before anything is checked or written: NOT_ENOUGH_REPLICAS, again and again
                assert (await _produce(conn, pid, epoch, 2, r1))[0] == ErrorCode.NOT_ENOUGH_REPLICAS
                assert (await _produce(conn, pid, epoch, 5, [b"r2"]))[0] == ErrorCode.NOT_ENOUGH_REPLICAS
            finally:
                os.kill(proc.pid, signal.SIGCONT)
            await _wait_isr(conn, sorted([leader, follower]), "the ISR grown back")

            # the ISR is back; the request after the refused one has a sequence gap: OUT_OF_ORDER_SEQUENCE_NUMBER
            # (what librdkafka answers with an epoch bump), nothing written
            assert (await _produce(conn, pid, epoch, 5, [b"r2"]))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            # the refused batch, sent again, is written; its retry is answered with the same offsets
            assert await _produce(conn, pid, epoch, 2, r1) == (ErrorCode.NONE, 2)
            assert await _produce(conn, pid, epoch, 2, r1) == (ErrorCode.NONE, 2)
            assert await _produce(conn, pid, epoch, 5, [b"r2"]) == (ErrorCode.NONE, 5)
            # a new epoch starts at sequence 0 (KIP-360: the idempotent producer bumps its own epoch)
            assert (await _produce(conn, pid, epoch + 1, 6, [b"x"]))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            assert await _produce(conn, pid, epoch + 1, 0, [b"n0"]) == (ErrorCode.NONE, 6)
            # the log end: every batch once
            md = await conn.request(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
            assert int(md.topics[0].partitions[0].offset) == 7
        finally:
            conn.close()

    asyncio.run(scenario())
