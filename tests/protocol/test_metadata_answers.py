"""Metadata answers are reused for the same request until the metadata image changes
(broker/apis/metadata_apis.py): what a client reads after any change is the new state, and a
request that auto-creates a topic is never answered from a kept answer."""

from __future__ import annotations

import asyncio

from broker.protocol import codec
from tests.protocol.conftest import RawClient, start_node
from tests.protocol.test_bad_input import create_topic


def _md_request(*names: str, auto: bool = False) -> bytes:
    return codec.encode(codec.build_request(3, 12, {"topics": [{"name": n, "topic_id": None} for n in names],
                                                    "allow_auto_topic_creation": auto,
                                                    "include_topic_authorized_operations": False}))


async def _metadata(c: RawClient, *names: str, auto: bool = False):
    raw = await c.request(3, 12, _md_request(*names, auto=auto))
    resp, _ = codec._reader(codec.response_type(3, 12))(raw, 5)
    return resp


async def _until(predicate, timeout: float = 10.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not (value := await predicate()):
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)
    return value


async def test_a_kept_metadata_answer_is_dropped_when_the_image_changes(tmp_path):
    node = await start_node(tmp_path)
    try:
        await create_topic(node, "t")
        c = await RawClient.connect(node.port)
        first = await _metadata(c, "t", "u")
        again = await _metadata(c, "t", "u")
        assert first == again and node.broker.apis._metadata_cache.answers  # kept
        assert [len(t.partitions) for t in first.topics] == [1, 0]
        assert int(first.topics[1].error_code) == 3  # UNKNOWN_TOPIC_OR_PARTITION
        await create_topic(node, "u", partitions=2)

        async def u_seen():
            resp = await _metadata(c, "t", "u")
            return resp if int(resp.topics[1].error_code) == 0 else None
        resp = await _until(u_seen)
        assert [len(t.partitions) for t in resp.topics] == [1, 2]
        c.close()
    finally:
        await node.stop()


async def test_metadata_that_auto_creates_a_topic_is_not_kept(tmp_path):
    node = await start_node(tmp_path)
    try:
        c = await RawClient.connect(node.port)
        resp = await _metadata(c, "auto-created", auto=True)
        # created by this request (answered with its leaders, or LEADER_NOT_AVAILABLE while being created)
        assert int(resp.topics[0].error_code) in (0, 5)
        assert "auto-created" in node.broker.apis.image.topics_by_name
        assert not node.broker.apis._metadata_cache.answers

        async def ready():
            r = await _metadata(c, "auto-created", auto=True)
            return r if int(r.topics[0].error_code) == 0 and r.topics[0].partitions else None
        await _until(ready)
        c.close()
    finally:
        await node.stop()
