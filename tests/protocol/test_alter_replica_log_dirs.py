"""AlterReplicaLogDirs (v1-2) against an in-process node with two log dirs: a replica moves to the
other dir while a producer keeps writing to it, nothing acknowledged is lost, the old directory
goes, DescribeLogDirs shows the future replica meanwhile; error codes for bad input; a replica
named before it exists is made in the named dir."""

from __future__ import annotations

import asyncio
import os
import time

from broker.log.batch import decode_records, parse_batches
from broker.protocol import codec
from common.errors import ErrorCode
from tests.protocol.conftest import RawClient, start_node
from tests.protocol.test_bad_input import produce_body, produce_error
from tests.protocol.test_log_dir_failure import _until
from tests.protocol.test_partition_ops import make_topic
from tests.unit.log.batch_builder import make_batch

ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS = 34, 35


def all_values(lg) -> list[bytes]:
    out, off = [], lg.log_start_offset
    while off < lg.log_end_offset:
        data = lg.read_bytes(lg.read(off, 1 << 20, lg.log_end_offset))
        for h in parse_batches(data):
            out += [r.value for r in decode_records(data[h.pos:h.pos + h.size])]
            off = h.last_offset + 1
    return out


async def alter_log_dirs(c, moves: dict[tuple[str, int], str], version: int = 2) -> dict[tuple[str, int], int]:
    by_dir: dict[str, dict[str, list[int]]] = {}
    for (t, p), d in moves.items():
        by_dir.setdefault(d, {}).setdefault(t, []).append(p)
    req = codec.build(codec.request_type(ALTER_REPLICA_LOG_DIRS, version), {"dirs": [
        {"path": d, "topics": [{"name": t, "partitions": ps} for t, ps in ts.items()]} for d, ts in by_dir.items()]})
    resp = await c.call(ALTER_REPLICA_LOG_DIRS, version, req)
    return {(r.topic_name, p.partition_index): int(p.error_code) for r in resp.results for p in r.partitions}


async def describe(c) -> dict[tuple[str, int, bool], str]:
    req = codec.build(codec.request_type(DESCRIBE_LOG_DIRS, 4), {"topics": None})
    resp = await c.call(DESCRIBE_LOG_DIRS, 4, req)
    return {(t.name, p.partition_index, p.is_future_key): r.log_dir for r in resp.results for t in r.topics
            for p in t.partitions}


async def test_replica_moves_to_the_other_dir_under_a_producer_stream(tmp_path):
    d1, d2 = f"{tmp_path}/d1", f"{tmp_path}/d2"
    node = await start_node(tmp_path, log_dirs=f"{d1},{d2}", metadata_log_dir=f"{tmp_path}/meta",
                            replica_fetch_max_bytes="65536", log_segment_bytes="1000000")
    try:
        await make_topic(node, "t", 1)
        logs = node.broker.logs
        src = logs.dir_of(logs.get("t", 0))
        dest = d2 if src == d1 else d1
        c = await RawClient.connect(node.port)
        acked: list[bytes] = []

        async def produce(n: int) -> None:
            for _ in range(n):
                v = b"%06d" % len(acked) + b"x" * 2000
                batch = make_batch([v], base_timestamp=int(time.time() * 1000))
                err, off = produce_error(await c.request(0, 8, produce_body("t", 0, bytes(batch))))
                assert err == 0, err
                assert off == len(acked)
                acked.append(v)
        await produce(1500)  # ~3 MB: the move takes a good many chunks of 64 KiB
        old_path = logs.get("t", 0).path
        c2 = await RawClient.connect(node.port)
        stream = asyncio.get_running_loop().create_task(produce(300))
        assert await alter_log_dirs(c2, {("t", 0): dest}) == {("t", 0): 0}
        seen = await describe(c2)
        assert seen.get(("t", 0, True)) == dest and seen.get(("t", 0, False)) == src  # the future replica
        await stream
        await _until(lambda: logs.dir_of(logs.get("t", 0)) == dest and logs.future("t", 0) is None, 30)
        await produce(20)
        logs.removals_done()
        assert not os.path.exists(old_path)
        assert not [n for n in os.listdir(dest) if n.endswith("-future")]
        assert await describe(c2) == {("t", 0, False): dest}
        lg = logs.get("t", 0)
        assert lg is node.broker.replicas.partitions[("t", 0)].log
        assert all_values(lg) == acked  # every acknowledged record, in order, once
        # moving it to where it is changes nothing
        assert await alter_log_dirs(c2, {("t", 0): dest}, version=1) == {("t", 0): 0}
        assert logs.future("t", 0) is None
        c.close()
        c2.close()
    finally:
        await node.stop()
    # after a restart the partition is found in its new dir
    node = await start_node(tmp_path, log_dirs=f"{d1},{d2}", metadata_log_dir=f"{tmp_path}/meta")
    try:
        assert node.broker.logs.dir_of(node.broker.logs.get("t", 0)) == dest
        assert node.broker.logs.get("t", 0).log_end_offset == len(acked)
    finally:
        await node.stop()


async def test_alter_replica_log_dirs_errors_and_placement_of_a_replica_to_come(tmp_path):
    d1, d2 = f"{tmp_path}/d1", f"{tmp_path}/d2"
    node = await start_node(tmp_path, log_dirs=f"{d1},{d2}", metadata_log_dir=f"{tmp_path}/meta")
    try:
        await make_topic(node, "t", 1)
        c = await RawClient.connect(node.port)
        for version in (1, 2):
            got = await alter_log_dirs(c, {("t", 0): f"{tmp_path}/elsewhere", ("u", 0): "relative/dir"}, version)
            assert got == {("t", 0): ErrorCode.LOG_DIR_NOT_FOUND, ("u", 0): ErrorCode.LOG_DIR_NOT_FOUND}
        # not on this broker (yet): REPLICA_NOT_AVAILABLE, and it is made in that dir when it comes
        for p in (0, 1, 2):
            assert await alter_log_dirs(c, {("later", p): d2}) == {("later", p): ErrorCode.REPLICA_NOT_AVAILABLE}
        await make_topic(node, "later", 3)
        logs = node.broker.logs
        assert {logs.dir_of(logs.get("later", p)) for p in (0, 1, 2)} == {d2}
        c.close()
    finally:
        await node.stop()


async def test_a_move_interrupted_by_a_restart_starts_again_and_completes(tmp_path):
    d1, d2 = f"{tmp_path}/d1", f"{tmp_path}/d2"
    opts = {"log_dirs": f"{d1},{d2}", "metadata_log_dir": f"{tmp_path}/meta", "replica_fetch_max_bytes": "4096"}
    node = await start_node(tmp_path, **opts)
    try:
        await make_topic(node, "t", 1)
        logs = node.broker.logs
        src = logs.dir_of(logs.get("t", 0))
        dest = d2 if src == d1 else d1
        c = await RawClient.connect(node.port)
        values = [b"%06d" % i + b"z" * 3000 for i in range(600)]
        for v in values:
            err, _ = produce_error(await c.request(0, 8, produce_body("t", 0, bytes(make_batch([v])))))
            assert err == 0
        assert await alter_log_dirs(c, {("t", 0): dest}) == {("t", 0): 0}
        await _until(lambda: logs.future("t", 0) is not None and logs.future("t", 0).log_end_offset > 0)
        # the stop comes in the middle of the move: its copier is stopped first (the node's stop,
        # with its controlled shutdown, would otherwise leave it time to finish)
        node.broker.replicas.alter_log_dirs._tasks[("t", 0)].cancel()
        c.close()
    finally:
        await node.stop()
    assert [n for n in os.listdir(dest) if n.endswith("-future")], "the stop came after the move"
    node = await start_node(tmp_path, **opts)
    try:
        logs = node.broker.logs
        await _until(lambda: logs.get("t", 0) is not None and logs.dir_of(logs.get("t", 0)) == dest
                     and logs.future("t", 0) is None, 30)
        assert all_values(logs.get("t", 0)) == values
        logs.removals_done()
        assert not os.path.exists(os.path.join(src, "t-0"))
    finally:
        await node.stop()


async def test_kafka_python_admin_client_moves_a_replica(tmp_path):
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaStorageError, LogDirNotFoundError, NoError, ReplicaNotAvailableError

    d1, d2 = f"{tmp_path}/d1", f"{tmp_path}/d2"
    node = await start_node(tmp_path, log_dirs=f"{d1},{d2}", metadata_log_dir=f"{tmp_path}/meta")
    try:
        await make_topic(node, "t", 1)
        logs = node.broker.logs
        dest = d2 if logs.dir_of(logs.get("t", 0)) == d1 else d1

        def admin_calls():
            ka = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{node.port}")
            try:
                res = ka.alter_replica_log_dirs({("t", 0, 1): dest, ("gone", 0, 1): dest})
                bad = ka.alter_replica_log_dirs({("t", 0, 1): f"{tmp_path}/nowhere"})
                return res, bad
            finally:
                ka.close()
        res, bad = await asyncio.to_thread(admin_calls)
        assert {(k.topic, v) for k, v in res.items()} == {("t", NoError), ("gone", ReplicaNotAvailableError)}
        assert list(bad.values()) == [LogDirNotFoundError]
        await _until(lambda: logs.dir_of(logs.get("t", 0)) == dest and logs.future("t", 0) is None)
        assert KafkaStorageError  # the name kafka-python gives KAFKA_STORAGE_ERROR (tests/protocol/test_log_dir_failure.py)
    finally:
        await node.stop()


async def test_moves_are_throttled_by_replica_alter_log_dirs_io_max_bytes_per_second(tmp_path):
    d1, d2 = f"{tmp_path}/d1", f"{tmp_path}/d2"
    node = await start_node(tmp_path, log_dirs=f"{d1},{d2}", metadata_log_dir=f"{tmp_path}/meta",
                            replica_fetch_max_bytes="65536", replica_alter_log_dirs_io_max_bytes_per_second="1000000",
                            replication_quota_window_num="2")  # (Kafka's Rate: 11 samples allow a 10 s burst)
    try:
        await make_topic(node, "t", 1)
        logs = node.broker.logs
        dest = d2 if logs.dir_of(logs.get("t", 0)) == d1 else d1
        c = await RawClient.connect(node.port)
        for i in range(100):  # 3 MB
            batch = make_batch([b"%06d" % i + b"q" * 30000])
            assert produce_error(await c.request(0, 8, produce_body("t", 0, bytes(batch))))[0] == 0
        size = logs.get("t", 0).size_in_bytes
        t0 = time.monotonic()
        assert await alter_log_dirs(c, {("t", 0): dest}) == {("t", 0): 0}
        await _until(lambda: logs.dir_of(logs.get("t", 0)) == dest and logs.future("t", 0) is None, 30)
        took = time.monotonic() - t0
        assert took > 1.5, f"{size} bytes moved in {took:.2f} s at 1 MB/s"
        c.close()
    finally:
        await node.stop()
