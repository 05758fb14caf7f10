"""Transactions on the wire with the real coordinator and the real partition leader on one
in-process node (no fake on either side): the coordinator's WriteTxnMarkers land on the leader,
the leader's KIP-890 verification (AddPartitionsToTxn v5 verifyOnly) is answered by the
coordinator, TxnOffsetCommit goes through the group coordinator and its offsets wait for the
``__consumer_offsets`` marker. test_txn_apis.py checks the coordinator's markers byte for byte
against a fake leader; test_txn_data.py the leader against a fake coordinator."""

from __future__ import annotations

import pytest

from broker.protocol.apis import ApiKey
from common.errors import ErrorCode as E
from tests.protocol.test_group_apis import retry as until
from tests.protocol.test_txn_apis import Env
from tests.protocol.txn_helpers import committed_values, fetch, list_latest, produce, txn_batch


@pytest.fixture
async def env(tmp_path):
    e = await Env(tmp_path, real_leader=True).start()
    yield e
    await e.close()


async def begin(env: Env, tid: str, parts: dict[str, list[int]]) -> tuple[int, int]:
    await env.find(tid)
    err, pid, epoch = await env.init(tid)
    assert err == 0
    assert set((await env.add(tid, pid, epoch, parts)).values()) == {0}
    return pid, epoch


async def settled(env: Env, tid: str, state: str, tps: list[tuple[str, int]]) -> None:
    """``tid`` reached ``state`` and every partition's LSO caught up with its high watermark."""
    await env.state(tid, state)
    for t, p in tps:
        async def go(t=t, p=p):
            r = await fetch(env.port, t, partition=p)
            return r.last_stable_offset == r.high_watermark, r
        await until(go, f"LSO of {t}-{p}")


async def read_committed(env: Env, topic: str, partition: int = 0) -> tuple[list[bytes], list[tuple[int, int]]]:
    """What a read_committed consumer gets from the start to the LSO, one fetch after the other
    (a fetch returns one segment at most): the values and the aborted transactions it was told of."""
    from broker.log.batch import parse_batches
    values, aborted, offset = [], [], 0
    while True:
        r = await fetch(env.port, topic, offset, partition=partition)
        batches = list(parse_batches(bytes(r.records or b"")))
        if not batches:  # an abort overlapping two fetches is told in both, as by Kafka
            return values, sorted(set(aborted))
        values += committed_values(r)
        aborted += [(a.producer_id, a.first_offset) for a in r.aborted_transactions or ()]
        offset = batches[-1].last_offset + 1


async def test_commit_and_abort_reach_the_partition_leaders(env):
    tid = "e2e-1"
    pid, epoch = await begin(env, tid, {"t1": [0, 1]})
    for p, seq in ((0, 0), (1, 0), (0, 1)):
        r = await produce(env.port, "t1", txn_batch(pid, epoch, seq, [b"c%d%d" % (p, seq)]), txn_id=tid, partition=p)
        assert r.error_code == 0, r
    r = await fetch(env.port, "t1", partition=0)
    assert (r.last_stable_offset, r.high_watermark, committed_values(r)) == (0, 2, [])
    assert await list_latest(env.port, "t1", isolation=1) == 0
    assert (await env.end(tid, pid, epoch, True))[0] == 0
    await settled(env, tid, "CompleteCommit", [("t1", 0), ("t1", 1)])
    r0, r1 = [await fetch(env.port, "t1", partition=p) for p in (0, 1)]
    assert (r0.high_watermark, committed_values(r0)) == (3, [b"c00", b"c01"])  # 2 records and the marker
    assert (r1.high_watermark, committed_values(r1)) == (2, [b"c10"])
    assert await list_latest(env.port, "t1", isolation=1) == 3
    # the second transaction aborts: read_committed skips it through aborted_transactions
    assert set((await env.add(tid, pid, epoch, {"t1": [0]})).values()) == {0}
    assert (await produce(env.port, "t1", txn_batch(pid, epoch, 2, [b"a0"]), txn_id=tid)).error_code == 0
    assert (await env.end(tid, pid, epoch, False))[0] == 0
    await settled(env, tid, "CompleteAbort", [("t1", 0)])
    assert await read_committed(env, "t1") == ([b"c00", b"c01"], [(pid, 3)])
    assert (await fetch(env.port, "t1")).high_watermark == 5
    # the partition leader knows the coordinator's epoch from its markers; nothing is left open
    resp = await env.conn.request(ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [{"name": "t1", "partition_indexes": [0]}]})
    (st,) = resp.topics[0].partitions[0].active_producers
    leader_epoch = env.leader_epoch("__transaction_state", env.node.broker.apis.txn_coordinator.partition_for(tid))
    assert (st.producer_id, st.coordinator_epoch, st.current_txn_start_offset) == (pid, leader_epoch, -1)


async def test_a_batch_for_a_partition_not_in_the_transaction_is_refused(env):
    tid = "e2e-2"
    pid, epoch = await begin(env, tid, {"t1": [0]})
    r = await produce(env.port, "t1", txn_batch(pid, epoch, 0, [b"x"]), txn_id=tid, partition=1)
    assert (r.error_code, r.error_message) == (E.INVALID_TXN_STATE, "Partition was not added to the transaction")
    assert (await produce(env.port, "t1", txn_batch(pid, epoch, 0, [b"y"]), txn_id=tid)).error_code == 0
    # a transactional id the coordinator does not know this producer by: refused before anything is appended
    r = await produce(env.port, "t1", txn_batch(pid, epoch, 0, [b"z"]), txn_id="e2e-2b", partition=2)
    assert r.error_code == E.INVALID_PRODUCER_ID_MAPPING
    assert (await fetch(env.port, "t1", partition=2, isolation=0)).high_watermark == 0


async def test_a_late_batch_after_the_abort_leaves_no_hanging_transaction(env):
    tid = "e2e-3"
    pid, epoch = await begin(env, tid, {"t1": [0]})
    assert (await produce(env.port, "t1", txn_batch(pid, epoch, 0, [b"a"]), txn_id=tid)).error_code == 0
    assert (await env.end(tid, pid, epoch, False))[0] == 0
    await settled(env, tid, "CompleteAbort", [("t1", 0)])
    # the producer's next batch was in flight when it aborted: the coordinator no longer has the partition
    r = await produce(env.port, "t1", txn_batch(pid, epoch, 1, [b"late"]), txn_id=tid)
    assert r.error_code == E.INVALID_TXN_STATE
    r = await fetch(env.port, "t1")
    assert r.last_stable_offset == r.high_watermark == 2 and committed_values(r) == []


async def test_a_new_producer_aborts_the_open_transaction_of_the_old_one_everywhere(env):
    tid = "e2e-4"
    pid, epoch = await begin(env, tid, {"t1": [0, 2]})
    for p in (0, 2):
        assert (await produce(env.port, "t1", txn_batch(pid, epoch, 0, [b"zombie"]), txn_id=tid,
                              partition=p)).error_code == 0
    err, pid2, epoch2 = await env.init(tid, busy_ok=True)  # fences the old producer, aborts its transaction
    assert (err, pid2) == (0, pid) and epoch2 > epoch
    await settled(env, tid, "Empty", [("t1", 0), ("t1", 2)])
    for p in (0, 2):
        assert await read_committed(env, "t1", p) == ([], [(pid, 0)])
    # the zombie's next batch is fenced by the partition leader itself (its epoch is older than the marker's)
    r = await produce(env.port, "t1", txn_batch(pid, epoch, 1, [b"zombie-2"]), txn_id=tid)
    assert r.error_code in (E.INVALID_PRODUCER_EPOCH, E.PRODUCER_FENCED)


async def test_txn_offset_commit_through_the_group_coordinator(env):
    tid, group = "e2e-5", "e2e-group"
    pid, epoch = await begin(env, tid, {"t1": [0]})
    await until(lambda: _found(env, group), "the group coordinator")
    r = await env.conn.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, {"transactional_id": tid, "producer_id": pid,
                                                             "producer_epoch": epoch, "group_id": group})
    assert int(r.error_code) == 0
    assert await _txn_offset_commit(env, tid, group, pid, epoch, 7) == 0
    assert await _offset_fetch(env, group, True) == (E.UNSTABLE_OFFSET_COMMIT, -1)
    assert await _offset_fetch(env, group, False) == (0, -1)
    assert (await env.end(tid, pid, epoch, True))[0] == 0
    await env.state(tid, "CompleteCommit")
    assert await _offset_fetch(env, group, True) == (0, 7)
    # an aborted transaction's offsets are dropped
    assert int((await env.conn.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, {
        "transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "group_id": group})).error_code) == 0
    assert await _txn_offset_commit(env, tid, group, pid, epoch, 9) == 0
    assert (await env.end(tid, pid, epoch, False))[0] == 0
    await env.state(tid, "CompleteAbort")
    assert await _offset_fetch(env, group, True) == (0, 7)
    # without AddOffsetsToTxn first, the group coordinator's verification refuses the offsets
    assert await _txn_offset_commit(env, tid, group, pid, epoch, 11) == E.INVALID_TXN_STATE
    assert await _offset_fetch(env, group, True) == (0, 7)


async def _found(env: Env, group: str):
    r = await env.conn.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})
    code = int(r.coordinators[0].error_code)
    if code == 0:
        code, _ = await _offset_fetch(env, group, False)
    return code == 0, code


async def _txn_offset_commit(env: Env, tid: str, group: str, pid: int, epoch: int, offset: int) -> int:
    r = await env.conn.request(ApiKey.TXN_OFFSET_COMMIT, 3, {
        "transactional_id": tid, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
        "generation_id": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": "t1", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                  "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
    return int(r.topics[0].partitions[0].error_code)


async def _offset_fetch(env: Env, group: str, require_stable: bool) -> tuple[int, int]:
    r = await env.conn.request(ApiKey.OFFSET_FETCH, 7, {"group_id": group, "require_stable": require_stable,
                                                       "topics": [{"name": "t1", "partition_indexes": [0]}]})
    p = r.topics[0].partitions[0]
    return int(p.error_code) or int(r.error_code), int(p.committed_offset)


async def test_a_broker_writes_its_own_markers_and_answers_its_own_verification_in_process(env):
    """Coordinator and leader on one broker: the markers and the KIP-890 check go through the
    loopback (broker/apis/loopback.py), not a connection to the broker's own listener."""
    from broker.apis.loopback import LoopbackConnection
    apis = env.node.broker.apis
    loopback = apis.txn_coordinator.markers.local
    assert isinstance(loopback, LoopbackConnection)
    tid = "e2e-loop"
    pid, epoch = await begin(env, tid, {"t1": [0]})
    r = await produce(env.port, "t1", txn_batch(pid, epoch, 0, [b"x"]), txn_id=tid)
    assert r.error_code == 0, r
    assert (await env.end(tid, pid, epoch, True))[0] == 0
    await settled(env, tid, "CompleteCommit", [("t1", 0)])
    assert loopback.sent == 2  # one AddPartitionsToTxn verifyOnly, one WriteTxnMarkers
    assert apis.txn_coordinator.markers.conns == {}
    assert all(c is loopback for c in env.node.broker.replicas.txn_verifier._conns.values())
    # the late batch of a finished transaction is still refused, as over the wire
    r = await produce(env.port, "t1", txn_batch(pid, epoch, 1, [b"late"]), txn_id=tid)
    assert r.error_code == E.INVALID_TXN_STATE
    assert loopback.sent == 3


async def test_a_failing_loopback_request_is_a_lost_connection_to_its_caller(env, monkeypatch):
    """The marker sender and the verifier retry what a lost connection would make them retry."""
    loopback = env.node.broker.apis.txn_coordinator.markers.local

    async def broken(ctx, req, denied=False):
        raise RuntimeError("boom")
    monkeypatch.setattr(env.node.broker.apis.txn_data_apis, "write_markers", broken)
    with pytest.raises(ConnectionError, match="boom"):
        await loopback.request(ApiKey.WRITE_TXN_MARKERS, 2, {"markers": []})
    with pytest.raises(ValueError, match="no loopback"):
        await loopback.request(ApiKey.PRODUCE, 9, {})
