"""KIP-227 incremental fetch sessions against a real node: over the wire with raw requests,
and with kafka-python, whose consumer fetches through sessions (librdkafka and aiokafka do not)."""

from __future__ import annotations

import asyncio

from confluent_kafka import Producer

from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from common.errors import ErrorCode
from tests.integration.conftest import create_topic


def _fetch(topic: str, session_id: int, epoch: int, parts: dict[int, int], forget=()) -> dict:
    return {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": session_id, "session_epoch": epoch,
            "topics": [{"topic": topic, "partitions": [
                {"partition": p, "fetch_offset": off, "partition_max_bytes": 1 << 20, "log_start_offset": -1,
                 "current_leader_epoch": -1, "last_fetched_epoch": -1} for p, off in parts.items()]}] if parts else [],
            "forgotten_topics_data": [{"topic": topic, "partitions": list(forget)}] if forget else [], "rack_id": ""}


def _parts(resp) -> dict[int, tuple[int, int]]:
    """partition -> (high watermark, bytes of records) of the partitions a response carries"""
    return {p.partition_index: (p.high_watermark, len(p.records or b"")) for t in resp.responses for p in t.partitions}


def test_incremental_session_over_the_wire(broker, topic):
    create_topic(broker, topic, partitions=3)
    host, port = broker.bootstrap.split(",")[0].rsplit(":", 1)
    prod = Producer({"bootstrap.servers": broker.bootstrap})
    for p in range(3):
        prod.produce(topic, b"v", partition=p)
    assert prod.flush(30) == 0

    async def run():
        conn = KafkaConnection(host, int(port))
        try:
            full = await conn.request(ApiKey.FETCH, 12, _fetch(topic, 0, 0, {0: 0, 1: 0, 2: 0}))
            sid = full.session_id
            assert full.error_code == 0 and sid > 0
            assert {p: hw for p, (hw, _) in _parts(full).items()} == {0: 1, 1: 1, 2: 1}
            # epoch 1: move partition 0 past its record; 1 and 2 keep offset 0 -> they answer
            # again with records, 0 has nothing new and is left out
            inc = await conn.request(ApiKey.FETCH, 12, _fetch(topic, sid, 1, {0: 1}))
            assert inc.error_code == 0 and inc.session_id == sid
            assert set(_parts(inc)) == {1, 2}
            # forget 1 and 2, then produce to 0: only 0 comes back, with its new watermark
            inc = await conn.request(ApiKey.FETCH, 12, _fetch(topic, sid, 2, {}, forget=[1, 2]))
            assert _parts(inc) == {}
            prod.produce(topic, b"w", partition=0)
            assert prod.flush(30) == 0
            inc = await conn.request(ApiKey.FETCH, 12, _fetch(topic, sid, 3, {}))
            assert list(_parts(inc)) == [0] and _parts(inc)[0][0] == 2 and _parts(inc)[0][1] > 0
            # a replayed epoch and an unknown session are refused
            bad = await conn.request(ApiKey.FETCH, 12, _fetch(topic, sid, 3, {}))
            assert bad.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
            bad = await conn.request(ApiKey.FETCH, 12, _fetch(topic, sid ^ 0x5A5A, 1, {}))
            assert bad.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
            # a sessionless full fetch (epoch -1) closes it
            fin = await conn.request(ApiKey.FETCH, 12, _fetch(topic, sid, -1, {0: 0}))
            assert fin.error_code == 0 and fin.session_id == 0 and _parts(fin)[0][1] > 0
            gone = await conn.request(ApiKey.FETCH, 12, _fetch(topic, sid, 4, {}))
            assert gone.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        finally:
            conn.close()

    asyncio.run(run())


def test_kafka_python_consumer_reads_everything_through_a_session(broker, topic):
    from kafka import KafkaConsumer, TopicPartition

    create_topic(broker, topic, partitions=4)
    prod = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    n = 2000
    for i in range(n):
        prod.produce(topic, str(i).encode(), partition=i % 4)
        if i % 500 == 0:
            prod.poll(0)
    assert prod.flush(30) == 0
    cons = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, fetch_max_bytes=4096,
                         max_partition_fetch_bytes=2048, consumer_timeout_ms=15000)
    try:
        tps = [TopicPartition(topic, p) for p in range(4)]
        cons.assign(tps)
        cons.seek_to_beginning(*tps)
        seen: dict[int, list[int]] = {p: [] for p in range(4)}
        for m in cons:
            seen[m.partition].append(int(m.value))
            if sum(len(v) for v in seen.values()) == n:
                break
        for p in range(4):
            assert seen[p] == list(range(p, n, 4))
        # the client really fetched incrementally in a session (epoch > 1)
        metas = [h.next_metadata for h in cons._fetcher._session_handlers.values()]
        assert any(m.session_id > 0 and m.epoch > 1 for m in metas), metas
    finally:
        cons.close()
