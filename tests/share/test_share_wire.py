"""Share groups on the wire against an in-process node: ShareGroupHeartbeat, ShareFetch with share
sessions and piggy-backed acknowledgements, ShareAcknowledge, the share coordinator's
ReadShareGroupState, DescribeShareGroupOffsets, and share.version gating."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import Producer

from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from common.errors import ErrorCode
from tests.protocol.conftest import start_node

SHARE = {"offsets_topic_replication_factor": "1", "offsets_topic_num_partitions": "2",
         "share_coordinator_state_topic_replication_factor": "1", "share_coordinator_state_topic_num_partitions": "2",
         "share_coordinator_state_topic_min_isr": "1"}


@pytest.fixture
async def snode(tmp_path):
    n = await start_node(tmp_path, **SHARE)
    yield n
    await n.stop()


async def _setup(port: int, records: int):
    c = KafkaConnection("127.0.0.1", port)
    await c.connect()
    r = await c.request(ApiKey.CREATE_TOPICS, 7, {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1,
                                                              "assignments": [], "configs": []}],
                                                  "timeout": 10_000, "validate_only": False})
    assert r.topics[0].error_code == 0
    tid = r.topics[0].topic_id

    def produce():
        p = Producer({"bootstrap.servers": f"127.0.0.1:{port}"})
        for i in range(records):
            p.produce("t", value=f"v{i}".encode())
        assert p.flush(30) == 0
    await asyncio.to_thread(produce)
    r = await c.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
        {"resource_type": 32, "resource_name": "g", "configs": [
            {"name": "share.auto.offset.reset", "config_operation": 0, "value": "earliest"}]}], "validate_only": False})
    assert r.responses[0].error_code == 0
    return c, tid


async def _heartbeat(c, member="m1", epoch=0, topics=("t",)):
    """(retried while the group coordinator is being made: FindCoordinator creates __consumer_offsets)"""
    await c.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["g"]})
    for _ in range(100):
        r = await c.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {
            "group_id": "g", "member_id": member, "member_epoch": epoch, "rack_id": None,
            "subscribed_topic_names": list(topics) if topics is not None else None})
        if r.error_code not in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
            return r
        await asyncio.sleep(0.1)
    return r


async def _fetch(c, tid, epoch, member="m1", acks=(), max_wait=0, forget=False):
    parts = [{"partition_index": 0, "acknowledgement_batches": [
        {"first_offset": a, "last_offset": b, "acknowledge_types": [t]} for a, b, t in acks]}]
    return await c.request(ApiKey.SHARE_FETCH, 1, {
        "group_id": "g", "member_id": member, "share_session_epoch": epoch, "max_wait": max_wait, "min_bytes": 1,
        "max_bytes": 1 << 20, "max_records": 100, "batch_size": 100,
        "topics": [] if forget else [{"topic_id": tid, "partitions": parts}], "forgotten_topics_data": []})


async def test_share_fetch_session_acks_and_state(snode):
    c, tid = await _setup(snode.port, 5)
    try:
        hb = await _heartbeat(c)
        assert hb.error_code == 0 and hb.member_epoch > 0
        assert [(tp.topic_id, list(tp.partitions)) for tp in hb.assignment.topic_partitions] == [(tid, [0])]
        r = await _fetch(c, tid, 0, max_wait=2000)
        assert r.error_code == 0 and r.acquisition_lock_timeout.total_seconds() == 30
        p = r.responses[0].partitions[0]
        assert p.error_code == 0 and [(a.first_offset, a.last_offset, a.delivery_count)
                                      for a in p.acquired_records] == [(0, 4, 1)]
        assert len(p.records) > 0
        # the released records come back (in the same response: acknowledgements go first) with
        # their delivery count increased
        r = await _fetch(c, tid, 1, acks=[(0, 2, 1), (3, 4, 2)])
        p = r.responses[0].partitions[0]
        assert (p.error_code, p.acknowledge_error_code) == (0, 0)
        assert [(a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records] == [(3, 4, 2)]
        # acknowledgements only: nothing more to deliver, an empty record set
        r = await _fetch(c, tid, 2, acks=[(3, 4, 1)])
        p = r.responses[0].partitions[0]
        assert (p.error_code, p.acknowledge_error_code, bytes(p.records or b""), list(p.acquired_records)) == \
            (0, 0, b"", [])
        # an acknowledgement of records the member does not hold
        r = await _fetch(c, tid, 3, acks=[(0, 0, 1)])
        assert r.responses[0].partitions[0].acknowledge_error_code == ErrorCode.INVALID_RECORD_STATE
        # share session errors
        assert (await _fetch(c, tid, 9)).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        assert (await _fetch(c, tid, 1, member="nobody")).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
        r = await c.request(ApiKey.SHARE_ACKNOWLEDGE, 1, {"group_id": "g", "member_id": "m1", "share_session_epoch": 0,
                                                          "topics": []})
        assert r.error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        r = await c.request(ApiKey.SHARE_ACKNOWLEDGE, 1, {"group_id": "g", "member_id": "m1", "share_session_epoch": 4,
                                                          "topics": [{"topic_id": tid, "partitions": [
                                                              {"partition_index": 0, "acknowledgement_batches": [
                                                                  {"first_offset": 3, "last_offset": 4,
                                                                   "acknowledge_types": [1]}]}]}]})
        assert r.error_code == 0 and r.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE
        # the share coordinator has the state: everything acknowledged
        r = await c.request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, {"groups": [{"group_id": "g", "topics": None}]})
        po = r.groups[0].topics[0].partitions[0]
        assert (r.groups[0].topics[0].topic_name, po.start_offset, po.lag) == ("t", 5, 0)
        r = await c.request(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, 1, {"group_id": "g", "topics": [
            {"topic_id": tid, "partitions": [{"partition": 0, "leader_epoch": -1}]}]})
        assert (r.results[0].partitions[0].error_code, r.results[0].partitions[0].start_offset) == (0, 5)
        # a member leaving: the group is empty, its session ends with a final fetch
        assert (await _fetch(c, tid, -1, forget=True)).error_code == 0
        hb = await _heartbeat(c, epoch=-1, topics=None)
        assert hb.error_code == 0 and hb.member_epoch == -1
        r = await c.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["share"]})
        assert [(g.group_id, g.group_type, g.group_state) for g in r.groups] == [("g", "share", "Empty")]
        # a share group id is not a consumer group's
        r = await c.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, {
            "group_id": "g", "member_id": "x", "member_epoch": 0, "instance_id": None, "rack_id": None,
            "rebalance_timeout": 30000, "subscribed_topic_names": ["t"], "subscribed_topic_regex": None,
            "server_assignor": None, "topic_partitions": []})
        assert r.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    finally:
        c.close()


async def test_share_groups_need_share_version(snode):
    c, tid = await _setup(snode.port, 1)
    try:
        r = await c.request(ApiKey.UPDATE_FEATURES, 1, {"timeout": 10000, "feature_updates": [
            {"feature": "share.version", "max_version_level": 0, "upgrade_type": 2}], "validate_only": False})
        assert r.error_code == 0
        for _ in range(50):
            if snode.broker.apis.image.features.get("share.version", 0) == 0:
                break
            await asyncio.sleep(0.1)
        hb = await _heartbeat(c)
        assert hb.error_code == ErrorCode.UNSUPPORTED_VERSION and "share.version" in hb.error_message
        assert (await _fetch(c, tid, 0)).error_code == ErrorCode.UNSUPPORTED_VERSION
    finally:
        c.close()


async def test_share_fetch_of_a_partition_whose_share_state_was_never_initialized(snode):
    """A member that never heartbeated (a fuzzer's recorded ShareFetch replayed against a fresh
    node found this): the share coordinator has no state for the partition; ShareFetch and
    ShareAcknowledge answer the partition UNKNOWN_TOPIC_OR_PARTITION, as Kafka's share partition
    does when its persister read fails so, and nothing is delivered (the handler used to raise
    building the KafkaError from the int error code: UNKNOWN_SERVER_ERROR)."""
    c, tid = await _setup(snode.port, 3)
    try:
        r = await _fetch(c, tid, 0, member="never-joined", max_wait=500)
        assert r.error_code == 0, r
        p = r.responses[0].partitions[0]
        assert (p.error_code, list(p.acquired_records)) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])
        r = await c.request(ApiKey.SHARE_ACKNOWLEDGE, 1, {
            "group_id": "g", "member_id": "never-joined", "share_session_epoch": 1, "topics": [
                {"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
                    {"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}]}]}]})
        assert r.error_code == 0, r
        assert r.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        c.close()
