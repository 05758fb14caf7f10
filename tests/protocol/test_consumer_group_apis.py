"""The consumer group protocol (KIP-848) on the wire against an in-process node: ConsumerGroupHeartbeat
joins, reconciles and leaves; ConsumerGroupDescribe, ListGroups (type consumer), DescribeGroups
(not a classic group), OffsetCommit/OffsetFetch v9 member epochs, Kafka's errors for bad requests,
and the group's records reloaded after a restart."""

from __future__ import annotations

import io
import uuid

from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from common.errors import ErrorCode
from krafty.consumer_groups import Tool, build_parser
from tests.protocol.conftest import start_node
from tests.protocol.test_group_apis import find

HB, DESCRIBE = ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE


async def _topic(conn, name: str, n: int) -> uuid.UUID:
    r = await conn.request(ApiKey.CREATE_TOPICS, 7, {"topics": [
        {"name": name, "num_partitions": n, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout": 10000, "validate_only": False})
    assert int(r.topics[0].error_code) == 0, r
    return r.topics[0].topic_id


def _hb(member: str, epoch: int, topics=None, owned=(), **kw) -> dict:
    return {"group_id": "cg", "member_id": member, "member_epoch": epoch, "instance_id": None, "rack_id": None,
            "rebalance_timeout": 30000 if epoch == 0 else -1, "subscribed_topic_names": topics,
            "subscribed_topic_regex": None, "server_assignor": None,
            "topic_partitions": None if owned is None else [{"topic_id": t, "partitions": ps} for t, ps in owned],
            **kw}


def _assigned(r) -> dict:
    return {tp.topic_id: sorted(tp.partitions) for tp in r.assignment.topic_partitions} if r.assignment else None


async def _describe(conn):
    r = await conn.request(DESCRIBE, 1, {"group_ids": ["cg"], "include_authorized_operations": False})
    return r.groups[0]


async def test_join_reconcile_describe_commit_and_leave(tmp_path):
    n = await start_node(tmp_path, group_initial_rebalance_delay_ms="0", offsets_topic_num_partitions="1",
                         offsets_topic_replication_factor="1")
    c = KafkaConnection("127.0.0.1", n.port)
    try:
        tid = await _topic(c, "t1", 4)
        await find(c, "cg")
        bad = await c.request(HB, 1, _hb("a", 0, None))
        assert (int(bad.error_code), bad.error_message) == (
            ErrorCode.INVALID_REQUEST, "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        bad = await c.request(HB, 1, _hb("a", 0, ["t1"], server_assignor="sticky"))
        assert int(bad.error_code) == ErrorCode.UNSUPPORTED_ASSIGNOR
        ra = await c.request(HB, 1, _hb("a", 0, ["t1"]))
        assert (int(ra.error_code), ra.member_id, ra.member_epoch) == (0, "a", 1)
        assert _assigned(ra) == {tid: [0, 1, 2, 3]} and ra.heartbeat_interval.total_seconds() == 5
        rb = await c.request(HB, 1, _hb("b", 0, ["t1"]))
        assert (rb.member_epoch, _assigned(rb)) == (2, {}), "b waits until a revokes"
        ra = await c.request(HB, 1, _hb("a", 1, None, owned=[(tid, [0, 1, 2, 3])]))
        assert ra.member_epoch == 1 and _assigned(ra) == {tid: [0, 1]}
        ra = await c.request(HB, 1, _hb("a", 1, None, owned=[(tid, [0, 1])]))
        assert ra.member_epoch == 2
        rb = await c.request(HB, 1, _hb("b", 2, None, owned=[]))
        assert _assigned(rb) == {tid: [2, 3]}
        d = await _describe(c)
        assert (d.group_state, d.group_epoch, d.assignment_epoch, d.assignor_name) == ("Stable", 2, 2, "uniform")
        assert sorted((m.member_id, m.member_epoch, m.member_type) for m in d.members) == [("a", 2, 1), ("b", 2, 1)]
        assert {m.member_id: [(tp.topic_name, list(tp.partitions)) for tp in m.assignment.topic_partitions]
                for m in d.members} == {"a": [("t1", [0, 1])], "b": [("t1", [2, 3])]}
        out = io.StringIO()  # krafty consumer-groups describes a consumer group as Kafka 4's tool does
        args = ["--bootstrap-server", f"127.0.0.1:{n.port}", "--describe", "--group", "cg", "--members"]
        assert await Tool(build_parser().parse_args(args), out=out).run() == 0
        rows = [line.split() for line in out.getvalue().splitlines() if line.startswith("cg ")]
        assert sorted((r[1], r[-1]) for r in rows) == [("a", "2"), ("b", "2")], out.getvalue()
        out = io.StringIO()
        args = ["--bootstrap-server", f"127.0.0.1:{n.port}", "--list", "--type", "--state"]
        assert await Tool(build_parser().parse_args(args), out=out).run() == 0
        assert ["cg", "consumer", "Stable"] in [line.split() for line in out.getvalue().splitlines()], out.getvalue()
        lg = await c.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["consumer"]})
        assert [(g.group_id, g.group_type, g.group_state) for g in lg.groups] == [("cg", "consumer", "Stable")]
        dg = await c.request(ApiKey.DESCRIBE_GROUPS, 6, {"groups": ["cg"], "include_authorized_operations": False})
        assert (int(dg.groups[0].error_code), dg.groups[0].error_message) == (
            ErrorCode.GROUP_ID_NOT_FOUND, "Group cg is not a classic group.")

        async def commit(member, epoch, version=9):
            r = await c.request(ApiKey.OFFSET_COMMIT, version, {
                "group_id": "cg", "generation_id_or_member_epoch": epoch, "member_id": member,
                "group_instance_id": None, "topics": [{"name": "t1", "partitions": [
                    {"partition_index": 0, "committed_offset": 42, "committed_leader_epoch": -1,
                     "committed_metadata": ""}]}]})
            return int(r.topics[0].partitions[0].error_code)
        assert await commit("a", 2) == 0
        assert await commit("a", 1) == ErrorCode.STALE_MEMBER_EPOCH
        assert await commit("zz", 2) == ErrorCode.UNKNOWN_MEMBER_ID
        assert await commit("a", 2, version=8) == ErrorCode.UNSUPPORTED_VERSION
        f = await c.request(ApiKey.OFFSET_FETCH, 9, {"groups": [{"group_id": "cg", "member_id": "a", "member_epoch": 1,
                                                                 "topics": None}], "require_stable": False})
        assert int(f.groups[0].error_code) == ErrorCode.STALE_MEMBER_EPOCH
        f = await c.request(ApiKey.OFFSET_FETCH, 9, {"groups": [{"group_id": "cg", "member_id": "a", "member_epoch": 2,
                                                                 "topics": None}], "require_stable": False})
        assert [(p.partition_index, p.committed_offset) for p in f.groups[0].topics[0].partitions] == [(0, 42)]
        r = await c.request(HB, 1, _hb("b", -1, None, owned=None))
        assert (int(r.error_code), r.member_epoch) == (0, -1)
        fenced = await c.request(HB, 1, _hb("a", 7, None))
        assert int(fenced.error_code) == ErrorCode.FENCED_MEMBER_EPOCH
    finally:
        c.close()
        await n.stop()
    # the group comes back from its records in __consumer_offsets
    n = await start_node(tmp_path, group_initial_rebalance_delay_ms="0", offsets_topic_num_partitions="1",
                         offsets_topic_replication_factor="1")
    c = KafkaConnection("127.0.0.1", n.port)
    try:
        await find(c, "cg")
        for _ in range(100):
            d = await _describe(c)
            if int(d.error_code) != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                break
        assert (int(d.error_code), d.group_epoch) == (0, 3)
        assert [(m.member_id, m.member_epoch) for m in d.members] == [("a", 2)]
        ra = await c.request(HB, 1, _hb("a", 2, None, owned=[(tid, [0, 1])]))
        assert int(ra.error_code) == 0 and ra.member_epoch == 3
        assert _assigned(ra) == {tid: [0, 1, 2, 3]}
    finally:
        c.close()
        await n.stop()
