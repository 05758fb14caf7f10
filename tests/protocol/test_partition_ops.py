"""Partition operations against an in-process node. DeleteRecords: the log start moves, segments
wholly below it leave the disk, the low watermark is answered. ElectLeaders through the broker to
the controller, every version. Bad input gets Kafka's error codes."""

from __future__ import annotations

import os
import time

from broker.protocol import codec
from common.errors import ErrorCode
from metadata.controller_api import NewTopic
from tests.protocol.conftest import RawClient, start_node
from tests.protocol.test_bad_input import produce_body, produce_error
from tests.unit.log.batch_builder import make_batch

DELETE_RECORDS = 21


async def make_topic(node, name: str, partitions: int = 1, **configs: str) -> None:
    [res] = await node.controller.create_topics([NewTopic(name, partitions, 1, None, configs)])
    assert res.error == 0, res


async def produce(c: RawClient, topic: str, n: int, partition: int = 0, size: int = 100) -> None:
    for i in range(n):
        batch = make_batch([b"%05d" % i * size], keys=[b"k%d" % i], base_timestamp=int(time.time() * 1000))
        err, _ = produce_error(await c.request(0, 8, produce_body(topic, partition, bytes(batch))))
        assert err == 0


async def delete_records(c: RawClient, offsets: dict[tuple[str, int], int], version: int = 2, timeout_ms: int = 5000):
    topics: dict[str, list] = {}
    for (t, p), off in offsets.items():
        topics.setdefault(t, []).append({"partition_index": p, "offset": off})
    req = codec.build(codec.request_type(DELETE_RECORDS, version),
                      {"topics": [{"name": t, "partitions": ps} for t, ps in topics.items()], "timeout": timeout_ms})
    resp = await c.call(DELETE_RECORDS, version, req)
    return {(t.name, p.partition_index): (int(p.error_code), p.low_watermark) for t in resp.topics for p in t.partitions}


def segment_files(node, topic: str, partition: int = 0) -> list[int]:
    d = os.path.join(node.cfg["log.dirs"][0], f"{topic}-{partition}")
    return sorted(int(f[:-4]) for f in os.listdir(d) if f.endswith(".log"))


async def test_delete_records_moves_log_start_and_deletes_segments_below_it(tmp_path):
    node = await start_node(tmp_path)
    try:
        await make_topic(node, "t", **{"segment.bytes": "2000", "retention.ms": "-1"})
        c = await RawClient.connect(node.port)
        await produce(c, "t", 40)  # ~600-byte batches: a few per segment
        before = segment_files(node, "t")
        assert len(before) > 5
        cut = before[3] + 1  # inside the fourth segment: the first three are wholly below it
        for version in (0, 1, 2):
            assert await delete_records(c, {("t", 0): cut}, version) == {("t", 0): (0, cut)}
        after = segment_files(node, "t")
        assert after == before[3:], "segments wholly below the new log start stay on disk"
        lg = node.broker.replicas.partitions[("t", 0)].log
        assert lg.log_start_offset == cut
        # an offset below the current log start changes nothing; -1 means the high watermark
        assert await delete_records(c, {("t", 0): 2}) == {("t", 0): (0, cut)}
        assert await delete_records(c, {("t", 0): -1}) == {("t", 0): (0, 40)}
        assert segment_files(node, "t") == [after[-1]], "only the active segment is left"
        c.close()
    finally:
        await node.stop()
    # the log start survives a restart (log-start-offset-checkpoint), though its segment starts lower
    node = await start_node(tmp_path)
    try:
        assert node.broker.logs.get("t", 0).log_start_offset == 40
    finally:
        await node.stop()


async def test_delete_records_errors(tmp_path):
    node = await start_node(tmp_path)
    try:
        await make_topic(node, "t", 2)
        await make_topic(node, "compacted", **{"cleanup.policy": "compact"})
        await make_topic(node, "both", **{"cleanup.policy": "compact,delete"})
        c = await RawClient.connect(node.port)
        await produce(c, "t", 5)
        await produce(c, "both", 3)
        # a consumer offset topic exists once a Metadata names it (as the coordinator makes it)
        await node.controller.create_topics([NewTopic("__consumer_offsets", 1, 1)])
        got = await delete_records(c, {("t", 0): 6, ("t", 1): -2, ("t", 2): 0, ("nope", 0): 0,
                                       ("compacted", 0): 0, ("both", 0): 2, ("__consumer_offsets", 0): 0})
        assert got == {
            ("t", 0): (ErrorCode.OFFSET_OUT_OF_RANGE, -1),  # beyond the high watermark (5)
            ("t", 1): (ErrorCode.OFFSET_OUT_OF_RANGE, -1),  # negative (only -1, the high watermark, is special)
            ("t", 2): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
            ("nope", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
            ("compacted", 0): (ErrorCode.POLICY_VIOLATION, -1),
            ("both", 0): (0, 2),
            ("__consumer_offsets", 0): (ErrorCode.INVALID_TOPIC_EXCEPTION, -1),
        }
        assert node.broker.replicas.partitions[("t", 0)].log.log_start_offset == 0
        c.close()
    finally:
        await node.stop()


async def test_fetch_and_list_offsets_see_the_new_log_start(tmp_path):
    node = await start_node(tmp_path)
    try:
        await make_topic(node, "t")
        c = await RawClient.connect(node.port)
        await produce(c, "t", 10)
        assert await delete_records(c, {("t", 0): 7}) == {("t", 0): (0, 7)}
        lo = codec.build(codec.request_type(2, 7), {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -2}]}]})
        resp = await c.call(2, 7, lo)
        assert resp.topics[0].partitions[0].offset == 7
        fetch = codec.build(codec.request_type(1, 11), {
            "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": "t", "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": 3,
                                                      "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]})
        raw = await c.request(1, 11, codec.encode(fetch))
        resp, _ = codec._reader(codec.response_type(1, 11))(raw, 4)
        p = resp.responses[0].partitions[0]
        assert (int(p.error_code), p.log_start_offset) == (ErrorCode.OFFSET_OUT_OF_RANGE, 7)
        c.close()
    finally:
        await node.stop()


ELECT_LEADERS = 43


async def test_elect_leaders_every_version(tmp_path):
    node = await start_node(tmp_path)
    try:
        await make_topic(node, "t", 2)
        c = await RawClient.connect(node.port)
        for version in (0, 1, 2):
            for election_type in ((0,) if version == 0 else (0, 1)):
                data = {"topic_partitions": [{"topic": "t", "partitions": [0, 1, 9]}, {"topic": "nope", "partitions": [0]}],
                        "timeout": 5000}
                if version >= 1:
                    data["election_type"] = election_type
                resp = await c.call(ELECT_LEADERS, version, codec.build(codec.request_type(ELECT_LEADERS, version), data))
                got = {(t.topic, p.partition_id): int(p.error_code) for t in resp.replica_election_results
                       for p in t.partition_result}
                assert got == {("t", 0): ErrorCode.ELECTION_NOT_NEEDED, ("t", 1): ErrorCode.ELECTION_NOT_NEEDED,
                               ("t", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                               ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}, (version, election_type)
                if version >= 1:
                    assert resp.error_code == 0
        # null topic_partitions: every partition, and those needing nothing are left out
        resp = await c.call(ELECT_LEADERS, 2, codec.build(codec.request_type(ELECT_LEADERS, 2), {
            "election_type": 0, "topic_partitions": None, "timeout": 5000}))
        assert resp.error_code == 0 and [p for t in resp.replica_election_results for p in t.partition_result] == []
        c.close()
    finally:
        await node.stop()


ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS = 45, 46


async def test_partition_reassignment_apis_on_a_single_node(tmp_path):
    node = await start_node(tmp_path)
    try:
        await make_topic(node, "t", 1)
        c = await RawClient.connect(node.port)

        async def alter(parts):
            req = codec.build(codec.request_type(ALTER_REASSIGNMENTS, 0), {"timeout": 5000, "topics": [
                {"name": t, "partitions": [{"partition_index": p, "replicas": rs}]} for t, p, rs in parts]})
            resp = await c.call(ALTER_REASSIGNMENTS, 0, req)
            assert resp.error_code == 0
            return [(r.name, p.partition_index, int(p.error_code), p.error_message)
                    for r in resp.responses for p in r.partitions]

        assert await alter([("t", 0, [1]), ("t", 0, [2]), ("t", 0, [1, 1]), ("t", 0, None), ("t", 3, [1]),
                            ("nope", 0, [1])]) == [
            ("t", 0, 0, None),
            ("t", 0, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
             "The manual partition assignment includes broker 2, but no such broker is registered."),
            ("t", 0, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
             "The manual partition assignment includes the broker 1 more than once."),
            ("t", 0, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None),
            ("t", 3, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition t:3."),
            ("nope", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition nope:0."),
        ]
        for topics in (None, [{"name": "t", "partition_indexes": [0, 5]}]):
            req = codec.build(codec.request_type(LIST_REASSIGNMENTS, 0), {"timeout": 5000, "topics": topics})
            resp = await c.call(LIST_REASSIGNMENTS, 0, req)
            assert (resp.error_code, list(resp.topics)) == (0, [])
        c.close()
    finally:
        await node.stop()


DESCRIBE_LOG_DIRS = 35


async def test_describe_log_dirs_every_version(tmp_path):
    node = await start_node(tmp_path, log_dirs=f"{tmp_path}/d1,{tmp_path}/d2")
    try:
        await make_topic(node, "t", 2)
        await make_topic(node, "u", 1)
        c = await RawClient.connect(node.port)
        await produce(c, "t", 3, partition=1)
        for version in (1, 2, 3, 4):
            for topics, want in ((None, {("t", 0), ("t", 1), ("u", 0)}),
                                 ([{"topic": "t", "partitions": [1, 7]}], {("t", 1)})):
                req = codec.build(codec.request_type(DESCRIBE_LOG_DIRS, version), {"topics": topics})
                resp = await c.call(DESCRIBE_LOG_DIRS, version, req)
                assert sorted(r.log_dir for r in resp.results) == [f"{tmp_path}/d1", f"{tmp_path}/d2"]
                got = {(t.name, p.partition_index): (p.partition_size, p.offset_lag, p.is_future_key, r.log_dir)
                       for r in resp.results for t in r.topics for p in t.partitions}
                assert set(got) == want, version
                if ("t", 1) in got:
                    lg = node.broker.logs.get("t", 1)
                    assert got[("t", 1)] == (lg.size_in_bytes, 0, False, os.path.dirname(lg.path)) and lg.size_in_bytes > 0
                if version >= 4:
                    assert all(r.total_bytes >= r.usable_bytes > 0 for r in resp.results)
        # new partitions were spread over both dirs (the one with fewest partitions first)
        dirs = {os.path.dirname(node.broker.logs.get(t, p).path) for t, p in (("t", 0), ("t", 1), ("u", 0))}
        assert len(dirs) == 2
        c.close()
    finally:
        await node.stop()


DESCRIBE_TOPIC_PARTITIONS, UNREGISTER_BROKER = 75, 64


async def test_describe_topic_partitions_pages_with_its_cursor(tmp_path):
    node = await start_node(tmp_path)
    try:
        await make_topic(node, "a", 3)
        await make_topic(node, "b", 2)
        await make_topic(node, "c", 1)
        c = await RawClient.connect(node.port)

        async def describe(topics, limit=2000, cursor=None):
            req = codec.build(codec.request_type(DESCRIBE_TOPIC_PARTITIONS, 0), {
                "topics": [{"name": t} for t in topics], "response_partition_limit": limit, "cursor": cursor})
            resp = await c.call(DESCRIBE_TOPIC_PARTITIONS, 0, req)
            got = [(t.name, int(t.error_code), [p.partition_index for p in t.partitions]) for t in resp.topics]
            nc = resp.next_cursor
            return got, (nc.topic_name, nc.partition_index) if nc is not None else None

        assert await describe([]) == ([("a", 0, [0, 1, 2]), ("b", 0, [0, 1]), ("c", 0, [0])], None)
        # pages of 2 partitions: the cursor says where the next page starts
        pages, cursor = [], None
        while True:
            got, nxt = await describe([], 2, cursor and {"topic_name": cursor[0], "partition_index": cursor[1]})
            pages.append(got)
            if nxt is None:
                break
            cursor = nxt
        assert pages == [[("a", 0, [0, 1])], [("a", 0, [2]), ("b", 0, [0])], [("b", 0, [1]), ("c", 0, [0])]]
        # named topics (sorted), unknown and invalid names, the cursor outside the list, a negative partition
        got, _ = await describe(["bad/name"])
        assert got == [("bad/name", ErrorCode.INVALID_TOPIC_EXCEPTION, [])]
        got, nxt = await describe(["c", "nope", "a"], 3)
        assert got == [("a", 0, [0, 1, 2])] and nxt == ("c", 0)
        got, nxt = await describe(["c", "nope"], 3)
        assert got == [("c", 0, [0]), ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])] and nxt is None
        got, _ = await describe(["a"], cursor={"topic_name": "b", "partition_index": 0})
        assert got == [("a", ErrorCode.INVALID_REQUEST, [])]
        got, _ = await describe(["a"], cursor={"topic_name": "a", "partition_index": -1})
        assert got == [("a", ErrorCode.INVALID_REQUEST, [])]
        # the partitions carry what Metadata says
        req = codec.build(codec.request_type(DESCRIBE_TOPIC_PARTITIONS, 0), {
            "topics": [{"name": "b"}], "response_partition_limit": 10, "cursor": None})
        [t] = (await c.call(DESCRIBE_TOPIC_PARTITIONS, 0, req)).topics
        assert t.topic_id == node.broker.loader.image.topics_by_name["b"].topic_id and not t.is_internal
        assert [(p.leader_id, list(p.replica_nodes), list(p.isr_nodes)) for p in t.partitions] == [(1, [1], [1])] * 2
        c.close()
    finally:
        await node.stop()


async def test_unregister_broker(tmp_path):
    node = await start_node(tmp_path)
    try:
        c = await RawClient.connect(node.port)
        req = codec.build(codec.request_type(UNREGISTER_BROKER, 0), {"broker_id": 7})
        resp = await c.call(UNREGISTER_BROKER, 0, req)
        assert resp.error_code == ErrorCode.BROKER_ID_NOT_REGISTERED
        assert resp.error_message == "Broker ID 7 is not currently registered"
        c.close()
    finally:
        await node.stop()


async def test_authorization_of_the_partition_operations(tmp_path):
    # an authorizer that allows nothing without an ACL: the anonymous client gets Kafka's errors
    node = await start_node(tmp_path, **{"authorizer.class.name":
                                         "org.apache.kafka.metadata.authorizer.StandardAuthorizer"})
    try:
        await make_topic(node, "t", 1)
        c = await RawClient.connect(node.port)
        assert await delete_records(c, {("t", 0): 0}) == {("t", 0): (ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1)}
        req = codec.build(codec.request_type(ELECT_LEADERS, 2), {
            "election_type": 0, "topic_partitions": [{"topic": "t", "partitions": [0]}], "timeout": 5000})
        resp = await c.call(ELECT_LEADERS, 2, req)
        assert resp.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert [int(p.error_code) for t in resp.replica_election_results for p in t.partition_result] == [
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
        req = codec.build(codec.request_type(ALTER_REASSIGNMENTS, 0), {"timeout": 5000, "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "replicas": [1]}]}]})
        assert (await c.call(ALTER_REASSIGNMENTS, 0, req)).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        req = codec.build(codec.request_type(LIST_REASSIGNMENTS, 0), {"timeout": 5000, "topics": None})
        assert (await c.call(LIST_REASSIGNMENTS, 0, req)).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        req = codec.build(codec.request_type(DESCRIBE_LOG_DIRS, 4), {"topics": None})
        resp = await c.call(DESCRIBE_LOG_DIRS, 4, req)
        assert (resp.error_code, list(resp.results)) == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, [])
        req = codec.build(codec.request_type(UNREGISTER_BROKER, 0), {"broker_id": 1})
        assert (await c.call(UNREGISTER_BROKER, 0, req)).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        req = codec.build(codec.request_type(DESCRIBE_TOPIC_PARTITIONS, 0), {
            "topics": [{"name": "t"}], "response_partition_limit": 10, "cursor": None})
        [t] = (await c.call(DESCRIBE_TOPIC_PARTITIONS, 0, req)).topics
        assert (t.name, t.error_code, t.topic_id) == ("t", ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)  # zero uuid
        c.close()
    finally:
        await node.stop()
