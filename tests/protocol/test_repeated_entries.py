"""A request naming the same thing many times costs what naming it once does (the fuzzer: a
mutated request naming the broker ~100,000 times in 1 MB held the loop until the canary
failed). DescribeConfigs answers a repeated resource INVALID_REQUEST without configs, so the
work and the response are bounded by the distinct resources, as a Kafka client's request is;
Metadata answers each topic once, as Kafka does (a set of the names)."""

from __future__ import annotations

import time

from broker.protocol import codec
from tests.protocol.conftest import RawClient, start_node
from tests.protocol.test_bad_input import create_topic


async def test_repeated_resources_are_refused_and_cost_nothing(tmp_path):
    node = await start_node(tmp_path)
    try:
        await create_topic(node, "t")
        resources = [{"resource_type": 4, "resource_name": "", "configuration_keys": None}] * 2000 + [
            {"resource_type": 2, "resource_name": "t", "configuration_keys": None}] * 2
        req = codec.build(codec.request_type(32, 4), {"resources": resources, "include_synonyms": True,
                                                      "include_documentation": False})
        c = await RawClient.connect(node.port)
        t0 = time.monotonic()
        raw = await c.request(32, 4, codec.encode(req))
        took = time.monotonic() - t0
        resp, _ = codec._reader(codec.response_type(32, 4))(raw, 5)
        first, *repeats, topic, topic_again = resp.results
        assert first.error_code == 0 and len(first.configs) > 100
        assert topic.error_code == 0 and any(e.name == "cleanup.policy" for e in topic.configs)
        assert all(r.error_code == 42 and not r.configs for r in [*repeats, topic_again])  # INVALID_REQUEST
        assert len(raw) < 500_000, f"a response of {len(raw)} bytes for 2 distinct resources"
        assert took < 3, f"{took:.1f}s"
        c.close()
    finally:
        await node.stop()


async def test_metadata_answers_a_repeated_topic_once(tmp_path):
    node = await start_node(tmp_path)
    try:
        await create_topic(node, "t", partitions=3)
        req = codec.build(codec.request_type(3, 12), {
            "topics": [{"topic_id": None, "name": "t"}] * 5000 + [{"topic_id": None, "name": "nope"}] * 2,
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
        c = await RawClient.connect(node.port)
        raw = await c.request(3, 12, codec.encode(req))
        resp, _ = codec._reader(codec.response_type(3, 12))(raw, 5)
        assert [(t.name, len(t.partitions)) for t in resp.topics] == [("t", 3), ("nope", 0)]
        c.close()
    finally:
        await node.stop()
