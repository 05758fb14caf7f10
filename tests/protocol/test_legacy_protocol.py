"""The protocol versions Kafka 4 removed (KIP-896), served again as Kafka 3.x served them, against
an in-process node over a real socket: Produce v0-2 with hand-built magic 0/1 message sets (a
compressed set, a corrupt CRC, a cut-off set), Fetch v0-3 (down-converted), ListOffsets v0,
OffsetCommit v0-1 / OffsetFetch v0, the old admin versions, and ApiVersions' ranges."""

from __future__ import annotations

import gzip
import time

import pytest
from kafka.record.memory_records import MemoryRecords

from broker.protocol.apis import SUPPORTED, ApiKey
from broker.protocol.client import KafkaConnection
from common.errors import ErrorCode
from metadata.controller_api import NewTopic
from tests.protocol.conftest import start_node
from tests.unit.log.test_legacy import GZIP, kp_set, message

NOW = int(time.time() * 1000)


@pytest.fixture
async def node(tmp_path):
    n = await start_node(tmp_path, group_initial_rebalance_delay_ms="0", offsets_topic_replication_factor="1",
                         offsets_topic_num_partitions="2")
    yield n
    await n.stop()


@pytest.fixture
async def conn(node):
    c = KafkaConnection("127.0.0.1", node.port)
    await c.connect()
    yield c
    c.close()


async def make_topic(node, name: str, **configs: str) -> None:
    [res] = await node.controller.create_topics([NewTopic(name, 1, 1, None, configs)])
    assert res.error == 0, res
    for _ in range(200):
        if (name, 0) in node.broker.replicas.partitions:
            return
        await __import__("asyncio").sleep(0.02)
    raise AssertionError(f"{name}-0 has no leader")


async def produce(conn, version: int, topic: str, records: bytes, acks: int = -1) -> tuple[int, int, object]:
    resp = await conn.request(ApiKey.PRODUCE, version, {"acks": acks, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
    p = resp.responses[0].partition_responses[0]
    return int(p.error_code), p.base_offset, p


async def fetch(conn, version: int, topic: str, offset: int = 0, max_bytes: int = 1 << 20, **extra):
    body = {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": extra.pop("response_max_bytes", 1 << 24),
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset,
                                                        "partition_max_bytes": max_bytes}]}]}
    if version >= 7:  # no fetch session (KIP-227)
        body.update(session_id=0, session_epoch=-1, forgotten_topics_data=[])
    resp = await conn.request(ApiKey.FETCH, version, body)
    p = resp.responses[0].partitions[0]
    return int(p.error_code), p.high_watermark, bytes(p.records or b"")


async def fetch_all(conn, version: int, topic: str, end: int) -> list:
    """What a consumer reads from offset 0 to ``end`` with Fetch ``version``, fetch after fetch
    (a response holds about as many bytes of messages as the batches it converts: fewer messages)."""
    got: list = []
    offset = 0
    for _ in range(100):
        if offset >= end:
            return got
        err, _hw, data = await fetch(conn, version, topic, offset)
        assert err == 0
        new = [g for g in read_back(data) if g[1] >= offset]
        assert new, f"no progress at offset {offset}"
        got += new
        offset = new[-1][1] + 1
    raise AssertionError("no end")


def read_back(data: bytes) -> list[tuple[int, int, int | None, bytes | None, bytes | None]]:
    out = []
    for batch in MemoryRecords(data):
        assert batch.validate_crc()
        for r in batch:
            out.append((batch.magic, r.offset, r.timestamp, r.key, r.value))
    return out


async def test_api_versions_advertises_kafka_3_9s_oldest_versions(conn):
    resp = await conn.request(ApiKey.API_VERSIONS, 0, {})
    ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    for key, lo in [(ApiKey.PRODUCE, 0), (ApiKey.FETCH, 0), (ApiKey.LIST_OFFSETS, 0), (ApiKey.METADATA, 0),
                    (ApiKey.OFFSET_COMMIT, 0), (ApiKey.OFFSET_FETCH, 0), (ApiKey.JOIN_GROUP, 0),
                    (ApiKey.CREATE_TOPICS, 0), (ApiKey.DELETE_TOPICS, 0), (ApiKey.DESCRIBE_CONFIGS, 0),
                    (ApiKey.OFFSET_FOR_LEADER_EPOCH, 0), (ApiKey.DESCRIBE_ACLS, 0)]:
        assert ranges[key][0] == lo, ApiKey(key).name
        assert ranges[key] == SUPPORTED[key]
    # the newest versions are those of Kafka 4.x: kafka-python's inference is unchanged
    assert ranges[ApiKey.PRODUCE][1] == 12 and ranges[ApiKey.FETCH][1] == 17 and ranges[ApiKey.LIST_OFFSETS][1] == 10


def test_kafka_python_infers_kafka_4_from_the_widened_ranges():
    from kafka.protocol.broker_version_data import infer_broker_version_from_api_versions
    assert infer_broker_version_from_api_versions(dict(SUPPORTED)) == (4, 0)


@pytest.mark.parametrize("version", [0, 1, 2])
async def test_produce_v0_2_appends_magic0_and_magic1_sets_and_fetch_reads_them(node, conn, version):
    await make_topic(node, "t")
    err, base, p = await produce(conn, version, "t", kp_set(0, 0, n=3))
    assert (err, base) == (0, 0)
    err, base, p = await produce(conn, version, "t", kp_set(1, GZIP, n=4))
    assert (err, base) == (0, 3)
    if version >= 2:
        assert p.log_append_time == -1  # CreateTime topic
    # the log holds v2 batches only
    lg = node.broker.replicas.partitions[("t", 0)].log
    assert lg.log_end_offset == 7
    for fv, magic in [(0, 0), (1, 0), (2, 1), (3, 1)]:
        err, hw, data = await fetch(conn, fv, "t")
        assert (err, hw) == (0, 7) and read_back(data)
        got = await fetch_all(conn, fv, "t", 7)
        assert {m for m, *_ in got} == {magic}
        assert [o for _m, o, *_ in got] == list(range(7))
        assert [v for *_x, v in got] == [b"v0", b"v1", b"v2", b"v0", b"v1", b"v2", b"v3"]


async def test_corrupt_crc_is_corrupt_message_and_nothing_is_appended(node, conn):
    await make_topic(node, "t")
    err, base, _ = await produce(conn, 2, "t", message(0, 1) + message(1, 1, crc=4242))
    assert (err, base) == (ErrorCode.CORRUPT_MESSAGE, -1)
    inner = message(0, 1) + message(1, 1, crc=99)
    err, _, _ = await produce(conn, 2, "t", message(1, 1, GZIP, key=None, value=gzip.compress(inner)))
    assert err == ErrorCode.CORRUPT_MESSAGE
    assert node.broker.replicas.partitions[("t", 0)].log.log_end_offset == 0


async def test_cut_off_set_appends_its_whole_messages(node, conn):
    await make_topic(node, "t")
    data = kp_set(1, 0, n=3)
    err, base, _ = await produce(conn, 2, "t", data[:-4])
    assert (err, base) == (0, 0)
    assert [v for *_x, v in await fetch_all(conn, 2, "t", 2)] == [b"v0", b"v1"]
    err, base, _ = await produce(conn, 1, "t", data[:20])  # not one whole message
    assert (err, base) == (ErrorCode.INVALID_RECORD, -1)


async def test_compressed_set_gets_consecutive_offsets_and_the_topic_codec(node, conn):
    await make_topic(node, "t", **{"compression.type": "lz4"})
    inner = b"".join(message(i, 1, key=b"k%d" % i, value=b"v%d" % i) for i in range(5))
    err, base, _ = await produce(conn, 2, "t", message(4, 1, GZIP, key=None, value=gzip.compress(inner)))
    assert (err, base) == (0, 0)
    lg = node.broker.replicas.partitions[("t", 0)].log
    [h] = [h for s in lg.segments for h in s.iter_headers()]
    assert (h.compression, h.records_count, h.base_offset) == (3, 5, 0)
    got = read_back((await fetch(conn, 3, "t"))[2])
    assert [(o, k) for _m, o, _t, k, _v in got] == [(i, b"k%d" % i) for i in range(5)]


async def test_log_append_time_topic_stamps_converted_messages(node, conn):
    await make_topic(node, "t", **{"message.timestamp.type": "LogAppendTime"})
    err, base, p = await produce(conn, 2, "t", kp_set(1, 0, n=2, ts=1000))
    assert err == 0 and p.log_append_time >= NOW
    got = await fetch_all(conn, 2, "t", 2)
    assert {t for _m, _o, t, _k, _v in got} == {p.log_append_time}
    batch = next(iter(MemoryRecords((await fetch(conn, 2, "t"))[2])))
    assert batch.timestamp_type == 1


async def test_fetch_v0_3_honours_partition_max_bytes_and_v3_max_bytes(node, conn):
    await make_topic(node, "t")
    for _ in range(5):
        assert (await produce(conn, 2, "t", kp_set(1, 0, n=20)))[0] == 0
    _, _, data = await fetch(conn, 1, "t", max_bytes=300)
    assert 0 < len(data) <= 300 and len(read_back(data)) >= 1
    _, _, data = await fetch(conn, 3, "t", max_bytes=1 << 20, response_max_bytes=500)
    assert 0 < len(data) <= 500
    _, _, data = await fetch(conn, 2, "t", offset=97)
    assert [o for _m, o, *_ in read_back(data)] == [97, 98, 99]


async def test_downconversion_disabled_is_unsupported_version_for_consumers(node, conn):
    await make_topic(node, "t", **{"message.downconversion.enable": "false"})
    assert (await produce(conn, 2, "t", kp_set(1, 0)))[0] == 0  # produce is converted up: allowed
    for fv in (0, 1, 2, 3):
        assert (await fetch(conn, fv, "t"))[0] == ErrorCode.UNSUPPORTED_VERSION
    # a v4+ fetch reads the v2 batches
    resp = await conn.request(ApiKey.FETCH, 4, {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                                "isolation_level": 0, "topics": [{"topic": "t", "partitions": [
                                                    {"partition": 0, "fetch_offset": 0,
                                                     "partition_max_bytes": 1 << 20}]}]})
    assert resp.responses[0].partitions[0].error_code == 0 and resp.responses[0].partitions[0].records


async def test_zstd_topic_is_unsupported_compression_type_before_fetch_v10(node, conn):
    await make_topic(node, "t", **{"compression.type": "zstd"})
    assert (await produce(conn, 2, "t", kp_set(1, GZIP)))[0] == 0
    for version in (2, 4, 9):  # Kafka: a client that asks below v10 cannot read zstd
        assert (await fetch(conn, version, "t"))[0] == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, version
    err, hw, data = await fetch(conn, 10, "t")
    assert err == 0 and hw > 0 and data


async def test_list_offsets_v0_answers_segment_starts_before_a_time(node, conn):
    await make_topic(node, "t", **{"segment.bytes": "600"})
    for _ in range(6):
        assert (await produce(conn, 2, "t", kp_set(1, 0, n=4)))[0] == 0

    async def offsets(ts, n):
        resp = await conn.request(ApiKey.LIST_OFFSETS, 0, {"replica_id": -1, "topics": [{"name": "t", "partitions": [
            {"partition_index": 0, "timestamp": ts, "max_num_offsets": n}]}]})
        p = resp.topics[0].partitions[0]
        return int(p.error_code), list(p.old_style_offsets)

    assert await offsets(-1, 1) == (0, [24])
    assert await offsets(-2, 1) == (0, [0])
    err, all_offsets = await offsets(-1, 100)
    assert err == 0 and all_offsets[0] == 24 and all_offsets[-1] == 0 and len(all_offsets) > 2
    assert all_offsets == sorted(all_offsets, reverse=True)
    assert await offsets(1000, 10) == (0, [])  # nothing was written before 1970 + 1 s


async def test_offset_commit_v0_v1_and_offset_fetch_v0_v1(node, conn):
    await make_topic(node, "t")
    coord = await conn.request(ApiKey.FIND_COORDINATOR, 0, {"key": "g"})
    assert coord.error_code == 0
    r = await conn.request(ApiKey.OFFSET_COMMIT, 0, {"group_id": "g", "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "committed_offset": 5, "committed_metadata": "m0"}]}]})
    assert r.topics[0].partitions[0].error_code == 0
    for v in (0, 1):
        f = await conn.request(ApiKey.OFFSET_FETCH, v, {"group_id": "g", "topics": [{"name": "t",
                                                                                   "partition_indexes": [0]}]})
        p = f.topics[0].partitions[0]
        assert (p.committed_offset, p.metadata, p.error_code) == (5, "m0", 0)
    stamp = NOW - 1000
    r = await conn.request(ApiKey.OFFSET_COMMIT, 1, {"group_id": "g", "generation_id_or_member_epoch": -1,
                                                     "member_id": "", "topics": [{"name": "t", "partitions": [
                                                         {"partition_index": 0, "committed_offset": 9,
                                                          "commit_timestamp": stamp, "committed_metadata": None}]}]})
    assert r.topics[0].partitions[0].error_code == 0
    f = await conn.request(ApiKey.OFFSET_FETCH, 0, {"group_id": "g", "topics": [{"name": "t",
                                                                               "partition_indexes": [0]}]})
    assert f.topics[0].partitions[0].committed_offset == 9
    shard = node.broker.apis.group_coordinator.shard_for("g")
    assert shard.offsets["g"][("t", 0)].commit_timestamp == stamp


async def test_old_admin_versions(node, conn):
    r = await conn.request(ApiKey.CREATE_TOPICS, 0, {"topics": [{"name": "a", "num_partitions": 1,
                                                                 "replication_factor": 1, "assignments": [],
                                                                 "configs": []}], "timeout": 5000})
    assert r.topics[0].error_code == 0
    r = await conn.request(ApiKey.CREATE_TOPICS, 1, {"topics": [{"name": "a", "num_partitions": 1,
                                                                 "replication_factor": 1, "assignments": [],
                                                                 "configs": []}], "timeout": 5000,
                                                     "validate_only": False})
    assert r.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    r = await conn.request(ApiKey.DESCRIBE_CONFIGS, 0, {"resources": [{"resource_type": 2, "resource_name": "a",
                                                                       "configuration_keys": None}]})
    configs = {c.name: c for c in r.results[0].configs}
    assert configs["message.downconversion.enable"].value == "true" and configs["cleanup.policy"].is_default
    r = await conn.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, {"topics": [{"topic": "a", "partitions": [
        {"partition": 0, "leader_epoch": 0}]}]})
    assert r.topics[0].partitions[0].error_code == 0
    r = await conn.request(ApiKey.DESCRIBE_LOG_DIRS, 0, {"topics": None})
    assert r.results and r.results[0].error_code == 0
    r = await conn.request(ApiKey.DESCRIBE_ACLS, 0, {"resource_type_filter": 1, "resource_name_filter": None,
                                                     "principal_filter": None, "host_filter": None, "operation": 1,
                                                     "permission_type": 1})
    assert r.error_code == ErrorCode.SECURITY_DISABLED
    r = await conn.request(ApiKey.DELETE_TOPICS, 0, {"topic_names": ["a"], "timeout": 5000})
    assert r.responses[0].error_code == 0
