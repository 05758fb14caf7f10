"""The data plane of transactions on one in-process node, over the wire: transactional
produce verified with a (fake) transaction coordinator (KIP-890), WriteTxnMarkers as the
coordinator sends them, read_committed Fetch and ListOffsets (LSO, aborted_transactions),
DescribeProducers, TxnOffsetCommit with pending offsets and OffsetFetch require_stable."""

from __future__ import annotations

import asyncio

import pytest

from broker.protocol import codec
from broker.protocol.apis import ApiKey
from common.errors import ErrorCode
from tests.protocol.conftest import RawClient, free_port
from tests.protocol.test_produce_record_errors import create_topic
from tests.protocol.txn_helpers import (
    TXN_ID,
    FakeCoordinator,
    committed_values,
    fetch,
    list_latest,
    produce,
    txn_batch,
    write_markers,
)

A, B = 4000, 5000


@pytest.fixture
async def coordinator(node):
    c = await FakeCoordinator().start()
    c.install(node)
    yield c
    await c.stop()


async def test_read_committed_stops_at_the_lso_and_skips_aborted_data(node, coordinator):
    await create_topic(node, "t", {})
    assert (await produce(node.port, "t", txn_batch(-1, -1, -1, [b"plain"]), txn_id=None)).error_code == 0  # 0
    assert (await produce(node.port, "t", txn_batch(A, 0, 0, [b"a1", b"a2"]))).error_code == 0               # 1-2
    assert (await produce(node.port, "t", txn_batch(B, 0, 0, [b"b1"]), txn_id="txn-2")).error_code == 0      # 3
    p = await fetch(node.port, "t", isolation=1)
    assert (p.high_watermark, p.last_stable_offset) == (4, 1)
    assert committed_values(p) == [b"plain"]
    assert await list_latest(node.port, "t", isolation=1) == 1
    assert await list_latest(node.port, "t", isolation=0) == 4
    p = await fetch(node.port, "t", isolation=0)  # read_uncommitted sees everything, no aborted list
    assert p.last_stable_offset == 1 and p.aborted_transactions is None
    assert len(committed_values(p)) == 4
    # the coordinator aborts A and commits B
    assert await write_markers(node.port, [(A, 0, False, 3, [("t", 0)])]) == {(A, "t", 0): 0}            # 4
    assert await write_markers(node.port, [(B, 0, True, 3, [("t", 0)])]) == {(B, "t", 0): 0}             # 5
    p = await fetch(node.port, "t", isolation=1)
    assert (p.high_watermark, p.last_stable_offset) == (6, 6)
    assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == [(A, 1)]
    assert committed_values(p) == [b"plain", b"b1"]
    assert await list_latest(node.port, "t", isolation=1) == 6
    # verification: each producer's first batch was checked once with the coordinator, verify_only
    asked = [(t.transactional_id, t.producer_id, t.verify_only) for _v, r in coordinator.requests for t in r.transactions]
    assert asked == [(TXN_ID, A, True), ("txn-2", B, True)]
    assert all(v == 5 for v, _ in coordinator.requests)


async def test_batches_inside_an_open_transaction_are_not_verified_again(node, coordinator):
    await create_topic(node, "t", {})
    for seq in range(3):
        assert (await produce(node.port, "t", txn_batch(A, 0, seq, [b"x"]))).error_code == 0
    assert len(coordinator.requests) == 1


async def test_late_batch_after_abort_is_refused_no_hanging_transaction(node, coordinator):
    await create_topic(node, "t", {})
    assert (await produce(node.port, "t", txn_batch(A, 0, 0, [b"a"]))).error_code == 0
    assert await write_markers(node.port, [(A, 0, False, 1, [("t", 0)])]) == {(A, "t", 0): 0}
    # the producer's second batch arrives after the abort: the coordinator no longer has the partition
    coordinator.errors[(TXN_ID, "t", 0)] = ErrorCode.INVALID_TXN_STATE
    r = await produce(node.port, "t", txn_batch(A, 0, 1, [b"late"]))
    assert r.error_code == ErrorCode.INVALID_TXN_STATE
    assert r.error_message == "Partition was not added to the transaction"
    p = await fetch(node.port, "t", isolation=1)
    assert p.last_stable_offset == p.high_watermark == 2  # nothing left open


@pytest.mark.parametrize("coordinator_error, produced_error", [
    (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_ENOUGH_REPLICAS),
    (ErrorCode.NOT_COORDINATOR, ErrorCode.NOT_ENOUGH_REPLICAS),
    (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NOT_ENOUGH_REPLICAS),
    (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH),
    (ErrorCode.TRANSACTION_ABORTABLE, ErrorCode.INVALID_TXN_STATE),
])
async def test_verification_errors_reach_the_producer_as_kafka_maps_them(node, coordinator, coordinator_error,
                                                                         produced_error):
    await create_topic(node, "t", {})
    coordinator.errors[(TXN_ID, "t", 0)] = coordinator_error
    r = await produce(node.port, "t", txn_batch(A, 0, 0, [b"a"]))
    assert r.error_code == produced_error
    assert (await fetch(node.port, "t", isolation=0)).high_watermark == 0


async def test_cluster_authorization_failure_of_the_coordinator_is_invalid_txn_state(node, coordinator):
    await create_topic(node, "t", {})
    coordinator.top_error = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert (await produce(node.port, "t", txn_batch(A, 0, 0, [b"a"]))).error_code == ErrorCode.INVALID_TXN_STATE


async def test_without_a_coordinator_transactional_produce_is_retriable(node):
    await create_topic(node, "t", {})
    # no __transaction_state topic: Kafka answers COORDINATOR_NOT_AVAILABLE -> NOT_ENOUGH_REPLICAS
    assert (await produce(node.port, "t", txn_batch(A, 0, 0, [b"a"]))).error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    # a coordinator that does not answer: NETWORK_EXCEPTION -> NOT_ENOUGH_REPLICAS
    port = free_port()
    node.broker.replicas.txn_verifier.locate = lambda txn_id: (0, ("127.0.0.1", port))
    assert (await produce(node.port, "t", txn_batch(A, 0, 0, [b"a"]))).error_code == ErrorCode.NOT_ENOUGH_REPLICAS


async def test_produce_v12_adds_the_partition_instead_of_verifying(node, coordinator):
    await create_topic(node, "t", {})
    assert (await produce(node.port, "t", txn_batch(A, 0, 0, [b"a"]), version=12)).error_code == 0
    assert [t.verify_only for _v, r in coordinator.requests for t in r.transactions] == [False]


async def test_transactional_records_need_a_transactional_id(node, coordinator):
    await create_topic(node, "t", {})
    r = await produce(node.port, "t", txn_batch(A, 0, 0, [b"a"]), txn_id=None)
    assert r.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert coordinator.requests == []


async def test_write_txn_markers_errors(node, coordinator):
    await create_topic(node, "t", {})
    assert (await produce(node.port, "t", txn_batch(A, 2, 0, [b"a"]))).error_code == 0
    res = await write_markers(node.port, [(A, 2, True, 7, [("t", 0), ("t", 9), ("nope", 0)])])
    assert res == {(A, "t", 0): 0, (A, "t", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                   (A, "nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    # a zombie coordinator (older coordinator epoch), a fenced producer epoch
    assert await write_markers(node.port, [(A, 2, False, 6, [("t", 0)])]) == {
        (A, "t", 0): ErrorCode.TRANSACTION_COORDINATOR_FENCED}
    assert await write_markers(node.port, [(A, 1, False, 7, [("t", 0)])]) == {
        (A, "t", 0): ErrorCode.INVALID_PRODUCER_EPOCH}
    # transaction version 2 (v2 requests): the marker must bump the epoch
    assert await write_markers(node.port, [(A, 2, True, 7, [("t", 0)])], transaction_version=2) == {
        (A, "t", 0): 0}  # no open transaction: a retried marker
    assert (await produce(node.port, "t", txn_batch(A, 2, 1, [b"b"]))).error_code == 0
    assert await write_markers(node.port, [(A, 2, True, 7, [("t", 0)])], transaction_version=2) == {
        (A, "t", 0): ErrorCode.INVALID_PRODUCER_EPOCH}
    assert await write_markers(node.port, [(A, 3, True, 7, [("t", 0)])], version=1, transaction_version=2) == {
        (A, "t", 0): 0}


async def test_describe_producers(node, coordinator):
    await create_topic(node, "t", {})
    assert (await produce(node.port, "t", txn_batch(-1, -1, -1, [b"p"]), txn_id=None)).error_code == 0
    assert (await produce(node.port, "t", txn_batch(A, 3, 0, [b"a", b"b"]))).error_code == 0
    c = await RawClient.connect(node.port)
    try:
        resp = await c.call(ApiKey.DESCRIBE_PRODUCERS, 0, codec.build(codec.request_type(ApiKey.DESCRIBE_PRODUCERS, 0), {
            "topics": [{"name": "t", "partition_indexes": [0, 5]}, {"name": "nope", "partition_indexes": [0]}]}))
    finally:
        c.close()
    p0, p5 = resp.topics[0].partitions
    assert int(p0.error_code) == 0
    (st,) = p0.active_producers
    assert (st.producer_id, st.producer_epoch, st.last_sequence, st.coordinator_epoch, st.current_txn_start_offset) \
        == (A, 3, 1, -1, 1)
    assert st.last_timestamp == 1_001
    assert int(p5.error_code) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert int(resp.topics[1].partitions[0].error_code) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def _find_and_wait_coordinator(node, group: str) -> int:
    """FindCoordinator (creating __consumer_offsets); the group's partition once it is loaded."""
    c = await RawClient.connect(node.port)
    try:
        for _ in range(200):
            resp = await c.call(ApiKey.FIND_COORDINATOR, 3, codec.build(codec.request_type(10, 3), {
                "key": group, "key_type": 0}))
            if int(resp.error_code) == 0:
                try:
                    node.broker.apis.group_coordinator.shard_for(group)
                    return node.broker.apis.group_coordinator.partition_for(group)
                except Exception:
                    pass
            await asyncio.sleep(0.05)
    finally:
        c.close()
    raise AssertionError("no group coordinator")


async def _txn_commit(node, group, pid, epoch, offset, version=3, generation=-1, member=""):
    c = await RawClient.connect(node.port)
    try:
        resp = await c.call(ApiKey.TXN_OFFSET_COMMIT, version, codec.build(codec.request_type(28, version), {
            "transactional_id": TXN_ID, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
            "generation_id": generation, "member_id": member, "group_instance_id": None,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                     "committed_leader_epoch": -1, "committed_metadata": "m"}]}]}))
    finally:
        c.close()
    return int(resp.topics[0].partitions[0].error_code)


async def _offset_fetch(node, group, require_stable, version=7):
    c = await RawClient.connect(node.port)
    try:
        resp = await c.call(ApiKey.OFFSET_FETCH, version, codec.build(codec.request_type(9, version), {
            "group_id": group, "topics": [{"name": "t", "partition_indexes": [0]}],
            "require_stable": require_stable}))
    finally:
        c.close()
    p = resp.topics[0].partitions[0]
    return int(p.error_code), int(p.committed_offset)


async def test_txn_offset_commit_is_pending_until_the_marker(node, coordinator):
    await create_topic(node, "t", {})
    group = "g1"
    cpart = await _find_and_wait_coordinator(node, group)
    assert await _txn_commit(node, group, A, 0, 42) == 0
    assert await _offset_fetch(node, group, True) == (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1)
    assert await _offset_fetch(node, group, False) == (0, -1)
    assert [(t.transactional_id, [(x.name, list(x.partitions)) for x in t.topics])
            for _v, r in coordinator.requests for t in r.transactions] == [(TXN_ID, [("__consumer_offsets", [cpart])])]
    # commit: the offset is materialized
    assert await write_markers(node.port, [(A, 0, True, 1, [("__consumer_offsets", cpart)])]) == {
        (A, "__consumer_offsets", cpart): 0}
    assert await _offset_fetch(node, group, True) == (0, 42)
    # abort: dropped
    assert await _txn_commit(node, group, A, 0, 50) == 0
    assert await write_markers(node.port, [(A, 0, False, 1, [("__consumer_offsets", cpart)])]) == {
        (A, "__consumer_offsets", cpart): 0}
    assert await _offset_fetch(node, group, True) == (0, 42)
    # and the coordinator reloads the same state from the log (pending, committed and aborted)
    assert await _txn_commit(node, group, B, 0, 60) == 0
    gc = node.broker.apis.group_coordinator
    if hasattr(gc, "runtime"):  # the load/unload lifecycle shared with the transaction coordinator
        gc.runtime._unload(cpart)
    else:
        gc._unload(cpart, 0)
    gc.on_metadata(None, node.broker.loader.image)  # we still lead it: loaded again from the log
    await _find_and_wait_coordinator(node, group)
    assert await _offset_fetch(node, group, False) == (0, 42)
    assert await _offset_fetch(node, group, True) == (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1)


async def test_txn_offset_commit_fencing_and_verification(node, coordinator):
    await create_topic(node, "t", {})
    group = "g2"
    await _find_and_wait_coordinator(node, group)
    # KIP-447: a generation of a group that does not exist is ILLEGAL_GENERATION
    assert await _txn_commit(node, group, A, 0, 1, generation=3, member="m") == ErrorCode.ILLEGAL_GENERATION
    coordinator.errors[(TXN_ID, "__consumer_offsets", node.broker.apis.group_coordinator.partition_for(group))] = \
        ErrorCode.INVALID_TXN_STATE
    assert await _txn_commit(node, group, A, 0, 1) == ErrorCode.INVALID_TXN_STATE


async def test_acls_of_the_data_plane_apis(tmp_path):
    """Kafka's checks, with an authorizer and no ACLs (User:ANONYMOUS may do nothing):
    ClusterAction for WriteTxnMarkers, Read on the topic for DescribeProducers, Write on the
    transactional id for transactional Produce and TxnOffsetCommit."""
    from tests.protocol.conftest import start_node

    node = await start_node(tmp_path, authorizer_class_name="org.apache.kafka.metadata.authorizer.StandardAuthorizer")
    try:
        await create_topic(node, "t", {})
        assert await write_markers(node.port, [(A, 0, True, 0, [("t", 0)])]) == {
            (A, "t", 0): ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
        c = await RawClient.connect(node.port)
        try:
            resp = await c.call(ApiKey.DESCRIBE_PRODUCERS, 0, codec.build(
                codec.request_type(ApiKey.DESCRIBE_PRODUCERS, 0), {"topics": [{"name": "t", "partition_indexes": [0]}]}))
        finally:
            c.close()
        assert int(resp.topics[0].partitions[0].error_code) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        r = await produce(node.port, "t", txn_batch(A, 0, 0, [b"a"]))
        assert r.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert await _txn_commit(node, "g", A, 0, 1) == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    finally:
        await node.stop()
