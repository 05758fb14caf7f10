"""The group APIs on the wire, against an in-process node (real sockets, real files): the
request shapes real clients and admin tools send — batched FindCoordinator keys, multi-group
OffsetFetch, ListGroups with a state filter, DescribeGroups, OffsetDelete, DeleteGroups,
batched LeaveGroup — and COORDINATOR_LOAD_IN_PROGRESS while a restarted coordinator loads."""

from __future__ import annotations

import asyncio
import struct
import time

import pytest

from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from common.config import Config
from common.errors import ErrorCode
from krafty.node import Node
from tests.protocol.conftest import TEST_CLUSTER_ID, free_port

TOPICS = {"t1": 3, "t2": 2}


def _config(tmp_path, port: int, cport: int, **extra) -> Config:
    return Config({
        "node.id": "1", "process.roles": "broker,controller",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
        "controller.quorum.voters": f"1@127.0.0.1:{cport}", "log.dirs": str(tmp_path / "data"),
        "group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3",
        "offsets.topic.replication.factor": "1", "cluster.id": TEST_CLUSTER_ID, **extra,
    })


async def _start(cfg: Config, port: int) -> Node:
    n = Node(cfg)
    await n.start()
    n.port = port
    return n


@pytest.fixture
async def gnode(tmp_path):
    port, cport = free_port(), free_port()
    n = await _start(_config(tmp_path, port, cport), port)
    c = KafkaConnection("127.0.0.1", port, client_id="group-apis-test")
    r = await c.request(ApiKey.CREATE_TOPICS, 5, {"topics": [
        {"name": t, "num_partitions": n_, "replication_factor": 1, "assignments": [], "configs": []}
        for t, n_ in TOPICS.items()], "timeout": 10000, "validate_only": False})
    assert all(int(t.error_code) == 0 for t in r.topics), r
    c.close()
    yield n
    await n.stop()


@pytest.fixture
async def conn(gnode):
    c = KafkaConnection("127.0.0.1", gnode.port, client_id="group-apis-test")
    yield c
    c.close()


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0: version int16 | topics [string] | user_data bytes."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


async def retry(fn, what: str, timeout: float = 20.0):
    """fn() -> (done, value); retried while the coordinator is not ready yet."""
    deadline = time.monotonic() + timeout
    while True:
        done, value = await fn()
        if done:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: last {value}")
        await asyncio.sleep(0.05)


async def find(conn, *keys: str):
    async def go():
        r = await conn.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": list(keys)})
        return all(int(c.error_code) == 0 for c in r.coordinators), r
    return await retry(go, "FindCoordinator")


async def commit(conn, group: str, offsets: dict, generation=-1, member="") -> dict:
    topics: dict[str, list] = {}
    for (t, p), o in offsets.items():
        topics.setdefault(t, []).append({"partition_index": p, "committed_offset": o,
                                         "committed_leader_epoch": -1, "committed_metadata": "m"})

    async def go():
        r = await conn.request(ApiKey.OFFSET_COMMIT, 8, {
            "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
            "group_instance_id": None, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
        codes = {(t.name, int(p.partition_index)): int(p.error_code) for t in r.topics for p in t.partitions}
        busy = {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR}
        return not (set(codes.values()) & busy), codes
    return await retry(go, f"OffsetCommit for {group}")


async def join_and_sync(conn, group: str, topics=("t1",), assignment: bytes = b"\x00\x01assign") -> tuple[str, int]:
    """One member: the v9 JoinGroup handshake, then SyncGroup as leader. Returns (member id, generation)."""
    req = {"group_id": group, "session_timeout": 10000, "rebalance_timeout": 10000, "member_id": "",
           "group_instance_id": None, "protocol_type": "consumer",
           "protocols": [{"name": "range", "metadata": subscription(*topics)}], "reason": None}
    await find(conn, group)
    r = await conn.request(ApiKey.JOIN_GROUP, 9, req)
    assert int(r.error_code) == ErrorCode.MEMBER_ID_REQUIRED, r
    r = await conn.request(ApiKey.JOIN_GROUP, 9, dict(req, member_id=r.member_id))
    assert int(r.error_code) == 0 and r.leader == r.member_id, r
    s = await conn.request(ApiKey.SYNC_GROUP, 5, {
        "group_id": group, "generation_id": r.generation_id, "member_id": r.member_id, "group_instance_id": None,
        "protocol_type": "consumer", "protocol_name": "range",
        "assignments": [{"member_id": r.member_id, "assignment": assignment}]})
    assert int(s.error_code) == 0 and bytes(s.assignment) == assignment
    return r.member_id, r.generation_id


async def test_find_coordinator_answers_every_key_of_a_batch(gnode, conn):
    r = await find(conn, "alpha", "beta", "gamma")
    assert [c.key for c in r.coordinators] == ["alpha", "beta", "gamma"]
    assert all((c.node_id, c.host, c.port) == (1, "127.0.0.1", gnode.port) for c in r.coordinators)
    single = await conn.request(ApiKey.FIND_COORDINATOR, 3, {"key": "alpha", "key_type": 0})
    assert (int(single.error_code), single.node_id, single.port) == (0, 1, gnode.port)
    # key type 1: a transactional id's coordinator (__transaction_state is created on the way)
    tx = await conn.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["tx"]})
    assert (int(tx.coordinators[0].error_code), tx.coordinators[0].port) == (0, gnode.port)


async def test_commit_to_unknown_topic_or_partition_is_refused_per_partition(conn):
    await find(conn, "g-unknown")
    codes = await commit(conn, "g-unknown", {("t1", 0): 5, ("t1", 9): 5, ("nope", 0): 5})
    assert codes == {("t1", 0): 0, ("t1", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                     ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


async def test_offset_fetch_of_several_groups_in_one_request(conn):
    await find(conn, "g1", "g2")
    await commit(conn, "g1", {("t1", 0): 10, ("t1", 1): 11, ("t2", 0): 12})
    await commit(conn, "g2", {("t2", 1): 20})
    r = await conn.request(ApiKey.OFFSET_FETCH, 8, {"groups": [
        {"group_id": "g1", "topics": None},
        {"group_id": "g2", "topics": [{"name": "t2", "partition_indexes": [0, 1]}]},
        {"group_id": "g-none", "topics": None}], "require_stable": False})
    got = {g.group_id: (int(g.error_code), {(t.name, p.partition_index): (p.committed_offset, p.metadata)
                                            for t in g.topics for p in t.partitions}) for g in r.groups}
    assert got == {
        "g1": (0, {("t1", 0): (10, "m"), ("t1", 1): (11, "m"), ("t2", 0): (12, "m")}),
        "g2": (0, {("t2", 0): (-1, ""), ("t2", 1): (20, "m")}),
        "g-none": (0, {}),
    }


async def test_list_groups_state_filter_and_describe_groups(conn):
    member, gen = await join_and_sync(conn, "busy")
    await find(conn, "idle")
    await commit(conn, "idle", {("t1", 0): 1})

    async def listed(states):
        r = await conn.request(ApiKey.LIST_GROUPS, 4, {"states_filter": states})
        assert int(r.error_code) == 0
        return {g.group_id: g.group_state for g in r.groups}

    assert await listed([]) == {"busy": "Stable", "idle": "Empty"}
    assert await listed(["Empty"]) == {"idle": "Empty"}
    assert await listed(["Stable", "PreparingRebalance"]) == {"busy": "Stable"}
    assert await listed(["Dead"]) == {}

    d = await conn.request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["busy", "idle", "ghost"],
                                                      "include_authorized_operations": False})
    busy, idle, ghost = d.groups
    assert (busy.group_state, busy.protocol_type, busy.protocol_data) == ("Stable", "consumer", "range")
    (m,) = busy.members
    assert (m.member_id, m.client_id) == (member, "group-apis-test")
    assert bytes(m.member_metadata) == subscription("t1") and bytes(m.member_assignment) == b"\x00\x01assign"
    assert (idle.group_state, idle.members) == ("Empty", ())
    assert (int(ghost.error_code), ghost.group_state) == (0, "Dead")
    d6 = await conn.request(ApiKey.DESCRIBE_GROUPS, 6, {"groups": ["ghost"], "include_authorized_operations": False})
    assert int(d6.groups[0].error_code) == ErrorCode.GROUP_ID_NOT_FOUND


async def test_offset_delete_spares_subscribed_topics_and_delete_groups_only_empty_ones(conn):
    member, gen = await join_and_sync(conn, "sub", topics=("t1",))
    await commit(conn, "sub", {("t1", 0): 3, ("t2", 0): 4}, generation=gen, member=member)
    r = await conn.request(ApiKey.OFFSET_DELETE, 0, {"group_id": "sub", "topics": [
        {"name": "t1", "partitions": [{"partition_index": 0}]},
        {"name": "t2", "partitions": [{"partition_index": 0}]}]})
    assert int(r.error_code) == 0
    assert {t.name: int(t.partitions[0].error_code) for t in r.topics} == {
        "t1": ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, "t2": 0}
    f = await conn.request(ApiKey.OFFSET_FETCH, 8, {"groups": [{"group_id": "sub", "topics": None}],
                                                    "require_stable": False})
    assert {(t.name, p.partition_index) for t in f.groups[0].topics for p in t.partitions} == {("t1", 0)}

    await find(conn, "empty-one")
    await commit(conn, "empty-one", {("t1", 1): 1})
    r = await conn.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["sub", "empty-one", "ghost"]})
    assert {x.group_id: int(x.error_code) for x in r.results} == {
        "sub": ErrorCode.NON_EMPTY_GROUP, "empty-one": 0, "ghost": ErrorCode.GROUP_ID_NOT_FOUND}
    f = await conn.request(ApiKey.OFFSET_FETCH, 8, {"groups": [{"group_id": "empty-one", "topics": None}],
                                                    "require_stable": False})
    assert f.groups[0].topics == ()

    # the member leaves (LeaveGroup v3+: a batch of members, each answered), then the group can go
    lv = await conn.request(ApiKey.LEAVE_GROUP, 5, {"group_id": "sub", "members": [
        {"member_id": member, "group_instance_id": None, "reason": None},
        {"member_id": "ghost-member", "group_instance_id": None, "reason": None}]})
    assert int(lv.error_code) == 0
    assert [(m.member_id, int(m.error_code)) for m in lv.members] == [
        (member, 0), ("ghost-member", ErrorCode.UNKNOWN_MEMBER_ID)]
    r = await conn.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["sub"]})
    assert int(r.results[0].error_code) == 0


async def test_join_with_a_session_timeout_out_of_bounds_is_refused(conn):
    await find(conn, "bounds")
    r = await conn.request(ApiKey.JOIN_GROUP, 9, {
        "group_id": "bounds", "session_timeout": 1000, "rebalance_timeout": 10000, "member_id": "",
        "group_instance_id": None, "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}],
        "reason": None})
    assert int(r.error_code) == ErrorCode.INVALID_SESSION_TIMEOUT
    hb = await conn.request(ApiKey.HEARTBEAT, 4, {"group_id": "bounds", "generation_id": 1, "member_id": "x",
                                                  "group_instance_id": None})
    assert int(hb.error_code) == ErrorCode.UNKNOWN_MEMBER_ID


async def test_a_restarted_coordinator_answers_load_in_progress_until_it_has_loaded(tmp_path):
    """Many small batches in __consumer_offsets and a 1-byte load buffer: the load takes many
    turns of the event loop, and a request meanwhile gets COORDINATOR_LOAD_IN_PROGRESS."""
    port, cport = free_port(), free_port()
    cfg = _config(tmp_path, port, cport, **{"offsets.topic.num.partitions": "1", "offsets.load.buffer.size": "1"})
    n = await _start(cfg, port)
    c = KafkaConnection("127.0.0.1", port, client_id="load-test")
    try:
        r = await c.request(ApiKey.CREATE_TOPICS, 5, {"topics": [
            {"name": "big", "num_partitions": 50, "replication_factor": 1, "assignments": [], "configs": []}],
            "timeout": 10000, "validate_only": False})
        assert int(r.topics[0].error_code) == 0
        await find(c, "loaded")
        for i in range(300):
            codes = await commit(c, "loaded", {("big", p): i for p in range(50)})
            assert set(codes.values()) == {0}
    finally:
        c.close()
        await n.stop()

    n = await _start(cfg, port)
    c = KafkaConnection("127.0.0.1", port, client_id="load-test")
    seen: list[int] = []
    try:
        while True:
            r = await c.request(ApiKey.OFFSET_FETCH, 8, {"groups": [{"group_id": "loaded", "topics": None}],
                                                         "require_stable": False})
            code = int(r.groups[0].error_code)
            seen.append(code)
            if code == 0:
                break
            assert code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), code
            assert len(seen) < 20000
            await asyncio.sleep(0.001)
        assert ErrorCode.COORDINATOR_LOAD_IN_PROGRESS in seen, seen[-5:]
        offsets = {(t.name, p.partition_index): p.committed_offset for t in r.groups[0].topics for p in t.partitions}
        assert offsets == {("big", p): 299 for p in range(50)}
    finally:
        c.close()
        await n.stop()


async def _offsets_of(conn, group: str) -> tuple[int, dict]:
    r = await conn.request(ApiKey.OFFSET_FETCH, 8, {"groups": [{"group_id": group, "topics": None}],
                                                    "require_stable": False})
    g = r.groups[0]
    return int(g.error_code), {(t.name, p.partition_index): p.committed_offset for t in g.topics for p in t.partitions}


async def _loaded_offsets(conn, group: str) -> dict:
    async def go():
        code, offs = await _offsets_of(conn, group)
        return code == 0, (code, offs)
    return (await retry(go, f"OffsetFetch of {group}"))[1]


def _offsets_log(node: Node, group: str):
    pid = node.broker.apis.group_coordinator.partition_for(group)
    return node.broker.replicas.partitions[("__consumer_offsets", pid)].log


def _record_count(lg) -> int:
    from broker.log.batch import decode_records, parse_batches
    n = 0
    for seg in lg.segments:
        with open(seg.log_path, "rb") as f:
            data = f.read(seg.size)
        for h in parse_batches(data):
            n += len(decode_records(data[h.pos:h.pos + h.batch_length + 12]))
    return n


async def _smaller(lg, limit: float) -> tuple[bool, int]:
    n = _record_count(lg)
    return n < limit, n


async def test_consumer_offsets_defaults_and_compaction_keep_the_latest_state_across_restart(tmp_path):
    """``__consumer_offsets`` gets Kafka's defaults (50 partitions, cleanup.policy=compact,
    replication factor 3 capped by the one live broker). Compaction (the broker's log cleaner,
    every log.cleaner.backoff.ms) of a partition full of superseded commits (4 KiB segments)
    keeps the newest offset of every partition, the group record of a live group, and the tombstones of a deleted group; a
    restarted coordinator rebuilds exactly that state from the compacted log."""
    port, cport = free_port(), free_port()
    cfg = Config({
        "node.id": "1", "process.roles": "broker,controller",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
        "controller.quorum.voters": f"1@127.0.0.1:{cport}", "log.dirs": str(tmp_path / "data"),
        "group.initial.rebalance.delay.ms": "0", "offsets.topic.segment.bytes": "4096",
        "log.cleaner.backoff.ms": "200", "cluster.id": TEST_CLUSTER_ID})
    n = await _start(cfg, port)
    c = KafkaConnection("127.0.0.1", port, client_id="compaction-test")
    try:
        r = await c.request(ApiKey.CREATE_TOPICS, 5, {"topics": [
            {"name": "t1", "num_partitions": 4, "replication_factor": 1, "assignments": [], "configs": []}],
            "timeout": 10000, "validate_only": False})
        assert int(r.topics[0].error_code) == 0
        await find(c, "live", "gone")
        md = await c.request(ApiKey.METADATA, 12, {"topics": [{"topic_id": None, "name": "__consumer_offsets"}],
                                                   "allow_auto_topic_creation": False,
                                                   "include_topic_authorized_operations": False})
        (t,) = md.topics
        assert (int(t.error_code), t.is_internal, len(t.partitions)) == (0, True, 50)
        assert all(list(p.replica_nodes) == [1] for p in t.partitions)
        dc = await c.request(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
            {"resource_type": 2, "resource_name": "__consumer_offsets", "configuration_keys": ["cleanup.policy"]}],
            "include_synonyms": False, "include_documentation": False})
        assert [(x.name, x.value) for x in dc.results[0].configs] == [("cleanup.policy", "compact")]

        member, gen = await join_and_sync(c, "live", topics=("t1",))
        for i in range(60):
            codes = await commit(c, "live", {("t1", p): 100 * p + i for p in range(4)}, generation=gen,
                                 member=member)
            assert set(codes.values()) == {0}
            await commit(c, "gone", {("t1", 0): i})
        r = await c.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["gone"]})
        assert int(r.results[0].error_code) == 0

        lg = _offsets_log(n, "live")
        before = 60 * 4  # records written: the commits of "live" (and of "gone" if it shares the partition)
        assert lg.log_end_offset > before
        # the broker's log cleaner runs every log.cleaner.backoff.ms
        after = await retry(lambda: _smaller(lg, before / 4), "the log cleaner to compact __consumer_offsets")
        assert after < before / 4, (before, after)
        assert await _loaded_offsets(c, "live") == {("t1", p): 100 * p + 59 for p in range(4)}
    finally:
        c.close()
        await n.stop()

    n = await _start(cfg, port)
    c = KafkaConnection("127.0.0.1", port, client_id="compaction-test")
    try:
        assert await _loaded_offsets(c, "live") == {("t1", p): 100 * p + 59 for p in range(4)}
        assert await _loaded_offsets(c, "gone") == {}
        d = await c.request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["live", "gone"],
                                                        "include_authorized_operations": False})
        live, gone = d.groups
        assert (live.group_state, [m.member_id for m in live.members]) == ("Stable", [member])
        assert bytes(live.members[0].member_assignment) == b"\x00\x01assign"
        assert gone.group_state == "Dead"
    finally:
        c.close()
        await n.stop()


async def test_offsets_expire_after_the_retention_and_stay_expired_after_a_restart(tmp_path):
    """The coordinator's periodic expiry (run here with a clock past ``offsets.retention.minutes``)
    writes tombstones: the offsets of an empty group go, and the group with them; a stable
    consumer group keeps the offsets of the topics it subscribes to and loses the others."""
    port, cport = free_port(), free_port()
    cfg = _config(tmp_path, port, cport, **{"offsets.retention.minutes": "10"})
    n = await _start(cfg, port)
    c = KafkaConnection("127.0.0.1", port, client_id="expiry-test")
    try:
        r = await c.request(ApiKey.CREATE_TOPICS, 5, {"topics": [
            {"name": t, "num_partitions": p, "replication_factor": 1, "assignments": [], "configs": []}
            for t, p in TOPICS.items()], "timeout": 10000, "validate_only": False})
        assert all(int(t.error_code) == 0 for t in r.topics)
        await find(c, "idle", "busy")
        await commit(c, "idle", {("t1", 0): 5, ("t2", 1): 6})
        member, gen = await join_and_sync(c, "busy", topics=("t1",))
        await commit(c, "busy", {("t1", 0): 7, ("t2", 0): 8}, generation=gen, member=member)

        coord = n.broker.apis.group_coordinator
        assert coord.expire_offsets(int(time.time() * 1000) + 9 * 60_000) == 0, "nothing is due before 10 min"
        assert await _loaded_offsets(c, "idle") == {("t1", 0): 5, ("t2", 1): 6}
        assert coord.expire_offsets(int(time.time() * 1000) + 11 * 60_000) == 4  # 2 + group record + 1
        await asyncio.sleep(0.2)
        assert await _loaded_offsets(c, "idle") == {}
        assert await _loaded_offsets(c, "busy") == {("t1", 0): 7}
        r = await c.request(ApiKey.LIST_GROUPS, 4, {"states_filter": []})
        assert {g.group_id for g in r.groups} == {"busy"}
    finally:
        c.close()
        await n.stop()

    n = await _start(cfg, port)
    c = KafkaConnection("127.0.0.1", port, client_id="expiry-test")
    try:
        assert await _loaded_offsets(c, "idle") == {}
        assert await _loaded_offsets(c, "busy") == {("t1", 0): 7}
    finally:
        c.close()
        await n.stop()


class _HeldWrites:
    """Holds the commit of the coordinator's writes of GroupMetadata records (key version 2; 1:
    offset commits): the append happens, the acks=all answer waits for ``release(code)`` — a
    slow follower."""

    def __init__(self, coord, key_version: int = 2):
        self.key = struct.pack(">h", key_version)
        self.runtime = coord.runtime
        self.real = self.runtime.append
        self.held: list[tuple[asyncio.Future, asyncio.Future]] = []
        self.runtime.append = self.append

    def append(self, pid, records, **kw):
        err, committed = self.real(pid, records, **kw)
        if committed is None or not any(k[:2] == self.key for k, _ in records):
            return err, committed
        held = asyncio.get_running_loop().create_future()
        self.held.append((committed, held))
        return err, held

    async def release(self, code: int | None = None) -> None:
        for committed, held in self.held:
            err = await committed
            held.set_result(err if code is None else code)
        self.held.clear()

    def restore(self) -> None:
        self.runtime.append = self.real


async def _two_members_completing(gnode, group: str):
    """Member a alone (generation 1), then b joins and a rejoins: generation 2 in
    CompletingRebalance, a the leader. Returns the two connections and (a, b, generation)."""
    ca = KafkaConnection("127.0.0.1", gnode.port, client_id="a")
    cb = KafkaConnection("127.0.0.1", gnode.port, client_id="b")
    a, _ = await join_and_sync(ca, group)
    req = {"group_id": group, "session_timeout": 10000, "rebalance_timeout": 10000, "member_id": "",
           "group_instance_id": None, "protocol_type": "consumer",
           "protocols": [{"name": "range", "metadata": subscription("t1")}], "reason": None}
    r = await cb.request(ApiKey.JOIN_GROUP, 9, req)
    b_join = asyncio.ensure_future(cb.request(ApiKey.JOIN_GROUP, 9, dict(req, member_id=r.member_id)))
    ra = await ca.request(ApiKey.JOIN_GROUP, 9, dict(req, member_id=a))
    rb = await b_join
    assert int(ra.error_code) == int(rb.error_code) == 0 and ra.leader == a, (ra, rb)
    return ca, cb, (a, rb.member_id, ra.generation_id)


def _sync(conn, group, gen, member, assignments=()):
    return asyncio.ensure_future(conn.request(ApiKey.SYNC_GROUP, 5, {
        "group_id": group, "generation_id": gen, "member_id": member, "group_instance_id": None,
        "protocol_type": "consumer", "protocol_name": "range",
        "assignments": [{"member_id": m, "assignment": x} for m, x in assignments]}))


async def _group_state(conn, group: str) -> str:
    r = await conn.request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": [group], "include_authorized_operations": False})
    return r.groups[0].group_state


async def test_a_follower_sync_arriving_during_the_assignment_write_is_answered_with_the_leader_after_it(gnode, conn):
    """aiokafka's test_kip_345_* on a 3-broker cluster: the follower's SyncGroup came in while
    the leader's assignment was being replicated and was answered at once, before the leader."""
    ca, cb, (a, b, gen) = await _two_members_completing(gnode, "g-durable")
    held = _HeldWrites(gnode.broker.apis.group_coordinator)
    try:
        leader = _sync(ca, "g-durable", gen, a, [(a, b"\x00\x01A"), (b, b"\x00\x01B")])
        while not held.held:
            await asyncio.sleep(0.01)
        follower = _sync(cb, "g-durable", gen, b)
        await asyncio.sleep(0.3)
        assert not leader.done() and not follower.done(), "answered before the assignment is durable"
        assert await _group_state(conn, "g-durable") == "CompletingRebalance"
        await held.release()
        rl, rf = await leader, await follower
        assert (int(rl.error_code), bytes(rl.assignment)) == (0, b"\x00\x01A")
        assert (int(rf.error_code), bytes(rf.assignment)) == (0, b"\x00\x01B")
        assert await _group_state(conn, "g-durable") == "Stable"
    finally:
        held.restore()
        ca.close()
        cb.close()


async def test_a_failed_assignment_write_answers_the_leader_and_the_waiting_follower_with_the_error(gnode, conn):
    ca, cb, (a, b, gen) = await _two_members_completing(gnode, "g-lost")
    held = _HeldWrites(gnode.broker.apis.group_coordinator)
    try:
        follower = _sync(cb, "g-lost", gen, b)
        leader = _sync(ca, "g-lost", gen, a, [(a, b"\x00\x01A"), (b, b"\x00\x01B")])
        while not held.held:
            await asyncio.sleep(0.01)
        await held.release(ErrorCode.COORDINATOR_NOT_AVAILABLE)  # e.g. the acks=all write timed out
        rl, rf = await leader, await follower
        assert int(rl.error_code) == int(rf.error_code) == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert await _group_state(conn, "g-lost") == "PreparingRebalance"
    finally:
        held.restore()
        ca.close()
        cb.close()


async def test_an_admin_offset_commit_into_a_group_with_live_members_is_unknown_member_id(conn):
    """AdminClient.alterConsumerGroupOffsets sends member "" and generation -1: Kafka checks
    membership before the generation."""
    member, gen = await join_and_sync(conn, "g-admin-commit")
    assert await commit(conn, "g-admin-commit", {("t1", 0): 7}) == {("t1", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    assert await commit(conn, "g-admin-commit", {("t1", 0): 7}, generation=gen + 1, member="ghost") == {
        ("t1", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    assert await commit(conn, "g-admin-commit", {("t1", 0): 7}, generation=gen, member=member) == {("t1", 0): 0}


async def test_offset_fetch_does_not_serve_an_offset_commit_until_its_write_is_committed(gnode, conn):
    await find(conn, "g-pending")
    assert await commit(conn, "g-pending", {("t1", 0): 5}) == {("t1", 0): 0}
    held = _HeldWrites(gnode.broker.apis.group_coordinator, key_version=1)
    other = KafkaConnection("127.0.0.1", gnode.port, client_id="other")
    try:
        pending = asyncio.ensure_future(commit(conn, "g-pending", {("t1", 0): 9}))
        while not held.held:
            await asyncio.sleep(0.01)
        assert await _offsets_of(other, "g-pending") == (0, {("t1", 0): 5})
        r = await other.request(ApiKey.OFFSET_FETCH, 8, {"groups": [{"group_id": "g-pending", "topics": [
            {"name": "t1", "partition_indexes": [0]}]}], "require_stable": True})
        assert int(r.groups[0].topics[0].partitions[0].error_code) == ErrorCode.UNSTABLE_OFFSET_COMMIT
        await held.release()
        assert await pending == {("t1", 0): 0}
        assert await _offsets_of(other, "g-pending") == (0, {("t1", 0): 9})
    finally:
        held.restore()
        other.close()
