"""KIP-858 against an in-process node with two log dirs: a dir whose writes fail (an injected EIO
in the log's file layer: works as root) takes only its partitions offline. Produce, Fetch and
ListOffsets answer KAFKA_STORAGE_ERROR for them, DescribeLogDirs reports the dir with it, the
controller takes the replica out of leadership, the other dir goes on serving; a restart with
the dir healthy brings the partition back with its data; every dir failing stops the node."""

from __future__ import annotations

import asyncio
import errno
import os
import time

from broker.log import fileio
from broker.protocol import codec
from common.errors import ErrorCode
from tests.protocol.conftest import RawClient, start_node
from tests.protocol.test_bad_input import produce_body, produce_error
from tests.protocol.test_partition_ops import make_topic
from tests.unit.log.batch_builder import make_batch
from tests.unit.log.disk_faults import failing_dir

FETCH, LIST_OFFSETS, METADATA, DESCRIBE_LOG_DIRS, DESCRIBE_PRODUCERS = 1, 2, 3, 35, 61


async def _produce(c, topic, partition, value: bytes) -> tuple[int, int]:
    batch = make_batch([value], base_timestamp=int(time.time() * 1000))
    return produce_error(await c.request(0, 8, produce_body(topic, partition, bytes(batch))))


async def _fetch_error(c, topic, partition) -> int:
    req = codec.build(codec.request_type(FETCH, 12), {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
        "topics": [{"topic": topic, "partitions": [{"partition": partition, "current_leader_epoch": -1,
                                                    "fetch_offset": 0, "last_fetched_epoch": -1,
                                                    "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]})
    resp = await c.call(FETCH, 12, req)
    return int(resp.responses[0].partitions[0].error_code)


async def _list_offsets_error(c, topic, partition) -> int:
    req = codec.build(codec.request_type(LIST_OFFSETS, 7), {
        "replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
            {"partition_index": partition, "current_leader_epoch": -1, "timestamp": -1}]}]})
    resp = await c.call(LIST_OFFSETS, 7, req)
    return int(resp.topics[0].partitions[0].error_code)


async def _describe_log_dirs(c) -> dict[str, int]:
    req = codec.build(codec.request_type(DESCRIBE_LOG_DIRS, 4), {"topics": None})
    resp = await c.call(DESCRIBE_LOG_DIRS, 4, req)
    return {r.log_dir: int(r.error_code) for r in resp.results}


async def _offline_replicas(c, topic) -> dict[int, list[int]]:
    req = codec.build(codec.request_type(METADATA, 12), {
        "topics": [{"topic_id": None, "name": topic}], "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False})
    resp = await c.call(METADATA, 12, req)
    return {p.partition_index: list(p.offline_replicas) for p in resp.topics[0].partitions}


async def _until(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def test_failed_log_dir_takes_only_its_partitions_offline(tmp_path, monkeypatch):
    d1, d2 = f"{tmp_path}/d1", f"{tmp_path}/d2"
    opts = {"log_dirs": f"{d1},{d2}", "metadata_log_dir": f"{tmp_path}/meta"}
    node = await start_node(tmp_path, **opts)
    try:
        await make_topic(node, "t", 2)
        logs = node.broker.logs
        bad_p = next(p for p in (0, 1) if os.path.dirname(logs.get("t", p).path) == d1)
        good_p = 1 - bad_p
        c = await RawClient.connect(node.port)
        assert await _produce(c, "t", bad_p, b"before") == (0, 0)
        assert await _produce(c, "t", good_p, b"before") == (0, 0)
        logs.get("t", bad_p).flush()
        with failing_dir(monkeypatch, d1):
            err, _ = await _produce(c, "t", bad_p, b"fails")
            assert err == ErrorCode.KAFKA_STORAGE_ERROR
            await _until(lambda: ("t", bad_p) in node.broker.replicas.offline_partitions)
            # every API answers KAFKA_STORAGE_ERROR for the partition of the failed dir ...
            assert (await _produce(c, "t", bad_p, b"again"))[0] == ErrorCode.KAFKA_STORAGE_ERROR
            assert await _fetch_error(c, "t", bad_p) == ErrorCode.KAFKA_STORAGE_ERROR
            assert await _list_offsets_error(c, "t", bad_p) == ErrorCode.KAFKA_STORAGE_ERROR
            req = codec.build(codec.request_type(DESCRIBE_PRODUCERS, 0),
                              {"topics": [{"name": "t", "partition_indexes": [bad_p]}]})
            resp = await c.call(DESCRIBE_PRODUCERS, 0, req)
            assert int(resp.topics[0].partitions[0].error_code) == ErrorCode.KAFKA_STORAGE_ERROR
            # ... and the other dir's partition is served as before
            assert await _produce(c, "t", good_p, b"after") == (0, 1)
            assert await _fetch_error(c, "t", good_p) == 0
            assert await _describe_log_dirs(c) == {d1: ErrorCode.KAFKA_STORAGE_ERROR, d2: 0}
            # the controller heard it from the heartbeat: the replica is offline and leads no more
            await _until(lambda: node.loader.image.topics_by_name["t"].partitions[bad_p].offline == (1,))
            reg = node.loader.image.topics_by_name["t"].partitions[bad_p]
            assert reg.leader == -1 and reg.isr == (1,)
            assert await _offline_replicas(c, "t") == {bad_p: [1], good_p: []}
            assert node.failed() is None  # the broker goes on with its other dir
        c.close()
    finally:
        await node.stop()
    # a restart with the dir healthy: recovery, the replica online and leading again, its data there
    node = await start_node(tmp_path, **opts)
    try:
        await _until(lambda: node.loader.image.topics_by_name["t"].partitions[bad_p].leader == 1)
        assert node.loader.image.topics_by_name["t"].partitions[bad_p].offline == ()
        c = await RawClient.connect(node.port)
        assert await _produce(c, "t", bad_p, b"back") == (0, 1)  # offset 0 ("before") kept
        assert await _describe_log_dirs(c) == {d1: 0, d2: 0}
        c.close()
    finally:
        await node.stop()


async def test_every_log_dir_failing_stops_the_node(tmp_path, monkeypatch):
    d1, d2 = f"{tmp_path}/d1", f"{tmp_path}/d2"
    node = await start_node(tmp_path, log_dirs=f"{d1},{d2}", metadata_log_dir=f"{tmp_path}/meta")
    try:
        await make_topic(node, "t", 2)
        c = await RawClient.connect(node.port)
        with failing_dir(monkeypatch, str(tmp_path), errno.ENOSPC):
            for p in (0, 1):
                assert (await _produce(c, "t", p, b"x"))[0] == ErrorCode.KAFKA_STORAGE_ERROR
            await _until(lambda: node.failed() is not None)
        assert "all log dirs" in str(node.failed())
        c.close()
    finally:
        await node.stop()


async def test_a_dir_that_cannot_be_read_at_start_up_leaves_its_partitions_offline(tmp_path, monkeypatch):
    d1, d2 = f"{tmp_path}/d1", f"{tmp_path}/d2"
    opts = {"log_dirs": f"{d1},{d2}", "metadata_log_dir": f"{tmp_path}/meta"}
    node = await start_node(tmp_path, **opts)
    try:
        await make_topic(node, "t", 2)
        logs = node.broker.logs
        bad_p = next(p for p in (0, 1) if os.path.dirname(logs.get("t", p).path) == d1)
        good_p = 1 - bad_p
        c = await RawClient.connect(node.port)
        for p in (0, 1):
            assert await _produce(c, "t", p, b"before") == (0, 0)
        c.close()
    finally:
        await node.stop()
    from broker.log.manager import LogManager
    load = LogManager._load_dir

    def unreadable(self, d, now_ms):
        if d == d1:
            raise OSError(errno.EIO, "Input/output error")
        return load(self, d, now_ms)
    monkeypatch.setattr(LogManager, "_load_dir", unreadable)
    node = await start_node(tmp_path, **opts)
    try:
        # the broker cannot know what the dir held: the partition whose log it lacks is offline (not
        # made afresh in the other dir, where an empty log could be elected over the data)
        assert node.broker.logs.get("t", bad_p) is None
        assert ("t", bad_p) in node.broker.replicas.offline_partitions
        await _until(lambda: node.loader.image.topics_by_name["t"].partitions[bad_p].offline == (1,))
        c = await RawClient.connect(node.port)
        assert (await _produce(c, "t", bad_p, b"x"))[0] == ErrorCode.KAFKA_STORAGE_ERROR
        assert await _produce(c, "t", good_p, b"after") == (0, 1)
        assert await _describe_log_dirs(c) == {d1: ErrorCode.KAFKA_STORAGE_ERROR, d2: 0}
        c.close()
    finally:
        await node.stop()
    monkeypatch.setattr(LogManager, "_load_dir", load)
    node = await start_node(tmp_path, **opts)
    try:
        await _until(lambda: node.loader.image.topics_by_name["t"].partitions[bad_p].leader == 1)
        assert node.broker.logs.get("t", bad_p).log_end_offset == 1  # its data, where it was
    finally:
        await node.stop()


async def test_a_read_error_takes_the_dir_offline_too(tmp_path, monkeypatch):
    d1, d2 = f"{tmp_path}/d1", f"{tmp_path}/d2"
    node = await start_node(tmp_path, log_dirs=f"{d1},{d2}", metadata_log_dir=f"{tmp_path}/meta")
    try:
        await make_topic(node, "t", 2)
        logs = node.broker.logs
        bad_p = next(p for p in (0, 1) if os.path.dirname(logs.get("t", p).path) == d1)
        c = await RawClient.connect(node.port)
        for i in range(30):
            assert (await _produce(c, "t", bad_p, b"v%d" % i))[0] == 0
        with failing_dir(monkeypatch, d1, reads=True):
            # a consumer's fetch from the middle of the log reads batch headers from the file
            req = codec.build(codec.request_type(FETCH, 12), {
                "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
                "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
                "topics": [{"topic": "t", "partitions": [{"partition": bad_p, "current_leader_epoch": -1,
                                                          "fetch_offset": 17, "last_fetched_epoch": -1,
                                                          "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]})
            resp = await c.call(FETCH, 12, req)
            assert int(resp.responses[0].partitions[0].error_code) == ErrorCode.KAFKA_STORAGE_ERROR
            await _until(lambda: logs.offline_log_dirs == [d1])
        c.close()
    finally:
        await node.stop()


async def test_below_metadata_version_3_7_iv2_a_failed_dir_stops_the_broker(tmp_path, monkeypatch):
    import io

    from krafty import storage
    from krafty.node import Node
    from metadata import records as r
    from tests.protocol.conftest import TEST_CLUSTER_ID, node_config

    d1, d2 = f"{tmp_path}/d1", f"{tmp_path}/d2"
    cfg, port = node_config(tmp_path, log_dirs=f"{d1},{d2}", metadata_log_dir=f"{tmp_path}/meta")
    storage.format_directories(cfg, TEST_CLUSTER_ID, bootstrap=[r.FeatureLevelRecord("metadata.version", 16)],
                               out=io.StringIO())  # 3.7-IV1: KRaft before JBOD (KIP-858)
    node = Node(cfg)
    await node.start()
    node.port = port
    try:
        await make_topic(node, "t", 2)
        c = await RawClient.connect(node.port)
        with failing_dir(monkeypatch, d1):
            for p in (0, 1):
                await _produce(c, "t", p, b"x")  # one of them is in d1
            await _until(lambda: node.failed() is not None)
        assert "3.7-IV2" in str(node.failed())
        assert node.loader.image.features["metadata.version"] == 16
        assert not any(reg.offline for reg in node.loader.image.topics_by_name["t"].partitions.values())
        c.close()
    finally:
        await node.stop()


async def test_the_failed_dir_holding_the_metadata_log_stops_the_node(tmp_path, monkeypatch):
    d1, d2 = f"{tmp_path}/d1", f"{tmp_path}/d2"
    node = await start_node(tmp_path, log_dirs=f"{d1},{d2}")  # metadata.log.dir: the first log dir
    try:
        await make_topic(node, "t", 2)
        c = await RawClient.connect(node.port)
        with failing_dir(monkeypatch, d1):
            for p in (0, 1):
                await _produce(c, "t", p, b"x")
            await _until(lambda: node.failed() is not None)
        assert "metadata log dir" in str(node.failed())
        c.close()
    finally:
        await node.stop()


async def test_out_of_file_descriptors_while_making_a_log_takes_only_that_partition_offline(tmp_path):
    """EMFILE while a new partition's log is made (the process's open-files limit reached): the
    partition goes offline (KAFKA_STORAGE_ERROR, reported to the controller), its dir stays
    online, the broker goes on serving and making its other partitions."""
    node = await start_node(tmp_path)
    below = fileio.current()

    class OutOfDescriptors(fileio.Files):
        @staticmethod
        def open(path, flags, mode=0o777):
            if f"{os.sep}emf-" in path:
                raise OSError(errno.EMFILE, "Too many open files")
            return below.open(path, flags, mode)

    prev = fileio.install(OutOfDescriptors())
    try:
        await make_topic(node, "emf", 1)
        await make_topic(node, "fine", 1)
        await _until(lambda: ("emf", 0) in node.broker.replicas.offline_partitions)
        await _until(lambda: node.loader.image.topics_by_name["emf"].partitions[0].offline == (1,))
        c = await RawClient.connect(node.port)
        assert (await _produce(c, "emf", 0, b"x"))[0] == ErrorCode.KAFKA_STORAGE_ERROR
        await _until(lambda: node.broker.logs.get("fine", 0) is not None)
        assert await _produce(c, "fine", 0, b"ok") == (0, 0)
        assert await _describe_log_dirs(c) == {node.broker.logs.log_dirs[0]: 0}  # the dir is healthy
        assert node.failed() is None
        c.close()
    finally:
        fileio.install(prev)
        await node.stop()
