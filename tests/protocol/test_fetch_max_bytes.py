"""fetch.max.bytes: the most one Fetch response carries, whatever max_bytes the request asks
for (Kafka's KafkaApis caps every fetch with it; the fuzzer got a 106 MB answer to a Fetch
whose max_bytes was 2^31-1, built in the broker's memory)."""

from __future__ import annotations

from broker.protocol import codec
from tests.protocol.conftest import RawClient, start_node
from tests.protocol.test_bad_input import create_topic, produce_body, produce_error, record_batch

BIG = 0x7FFFFFFF


def fetch_body(partitions: int) -> bytes:
    req = codec.build(codec.request_type(1, 12), {
        "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": BIG, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": "t", "partitions": [
            {"partition": p, "fetch_offset": 0, "partition_max_bytes": BIG, "current_leader_epoch": -1,
             "log_start_offset": -1, "last_fetched_epoch": -1} for p in range(partitions)]}],
        "forgotten_topics_data": [], "rack_id": ""})
    return codec.encode(req)


async def test_a_fetch_response_carries_at_most_fetch_max_bytes(tmp_path):
    node = await start_node(tmp_path, fetch_max_bytes="4096")
    try:
        await create_topic(node, "t", partitions=4)
        c = await RawClient.connect(node.port)
        for p in range(4):
            for _ in range(4):
                assert produce_error(await c.request(0, 8, produce_body("t", p, record_batch([b"v" * 1000]))))[0] == 0
        raw = await c.request(1, 12, fetch_body(4))  # 16 batches of ~1.1 KB are there
        # the cap, and the batch that crosses it (a response holds at least one whole batch)
        assert len(raw) < 4096 + 1200 + 400, len(raw)
        c.close()
    finally:
        await node.stop()
