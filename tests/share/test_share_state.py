"""The share coordinator's pure state (broker/share/state.py), its records byte for byte
(broker/share/records.py), and the share group core (broker/share/group.py)."""

from __future__ import annotations

import uuid

from broker.group import records as grec
from broker.share import records as sr
from broker.share.group import ShareGroup, ShareGroupConfig, ShareHeartbeatError, assign
from broker.share.records import ACKNOWLEDGED, ARCHIVED, AVAILABLE, StateBatch, StateKey
from broker.share.state import MAX_STATE_SPAN, ShareStateShard, merge_batches
from common.errors import ErrorCode

T = uuid.UUID("11111111-2222-3333-4444-555555555555")
K = StateKey("g", T, 0)


def apply(shard: ShareStateShard, result_records):
    result, records = result_records
    for i, (k, v) in enumerate(records):
        shard.replay(k, v, i)
    return result


# --- records -------------------------------------------------------------------------------------

def test_state_records_are_kafkas_format():
    key = sr.state_key(sr.SHARE_SNAPSHOT, K)
    assert key == b"\x00\x00" + b"\x00\x01g" + T.bytes + b"\x00\x00\x00\x00"
    assert sr.decode_state_key(key) == (sr.SHARE_SNAPSHOT, K)
    s = sr.ShareState(3, 2, 7, 100, (StateBatch(100, 104, 0, 1), StateBatch(105, 105, 2, 1)), 1, 55, 66)
    v = sr.snapshot_value(s)
    # version | snapshotEpoch | stateEpoch | leaderEpoch | startOffset | create | write | batches | tags
    assert v[:2] == b"\x00\x00" and v[2:6] == b"\x00\x00\x00\x03" and v[6:10] == b"\x00\x00\x00\x02"
    assert v[10:14] == b"\x00\x00\x00\x07" and v[14:22] == (100).to_bytes(8, "big")
    assert v[38] == 3  # compact array of 2
    assert v.endswith(b"\x01\x00\x04\x00\x00\x00\x01")  # tag 0: deliveryCompleteCount 1
    assert sr.decode_snapshot_value(v) == s
    u = sr.ShareState(3, -1, 7, -1, (StateBatch(1, 2, 4, 3),))
    assert sr.decode_update_value(sr.update_value(u)) == u


def test_share_group_records_decode_through_the_offsets_topic_reader():
    k = sr.key(sr.MEMBER_METADATA_KEY, "sg", "m1")
    assert grec.decode_key(k) == sr.ShareKey(10, "sg", "m1")
    assert grec.decode_key(sr.key(sr.GROUP_EPOCH_KEY, "sg")) == sr.ShareKey(11, "sg")
    m = sr.MemberMetadata(None, "cid", "/127.0.0.1", ("a", "b"))
    assert sr.decode_member_metadata(sr.member_metadata_value(m)) == m
    meta = sr.StatePartitionMetadata({T: ("t", frozenset({1}))}, {T: ("t", frozenset({0}))}, {})
    assert sr.decode_state_partition_metadata(sr.state_partition_metadata_value(meta)) == meta


# --- the share coordinator -----------------------------------------------------------------------

def test_merge_batches_overwrites_and_drops_below_start():
    cur = (StateBatch(0, 9, AVAILABLE, 1),)
    new = (StateBatch(3, 4, ACKNOWLEDGED, 1),)
    assert merge_batches(cur, new, 2) == (StateBatch(2, 2, AVAILABLE, 1), StateBatch(3, 4, ACKNOWLEDGED, 1),
                                          StateBatch(5, 9, AVAILABLE, 1))


def test_write_read_and_fencing():
    s = ShareStateShard(0, records_per_snapshot=2)
    r = apply(s, s.read(K, 0))
    assert r["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert apply(s, s.write(K, 0, 0, 0, (), -1, 0))["error_code"] == ErrorCode.INVALID_REQUEST
    assert apply(s, s.initialize(K, 0, -1, 0))["error_code"] == 0
    assert apply(s, s.initialize(K, 0, 5, 0))["error_code"] == ErrorCode.FENCED_STATE_EPOCH
    r = apply(s, s.read(K, 3))  # a leader of epoch 3 takes over: recorded
    assert (r["error_code"], r["start_offset"]) == (0, -1)
    assert s.states[K].leader_epoch == 3
    assert apply(s, s.write(K, 0, 2, 0, (), -1, 0))["error_code"] == ErrorCode.FENCED_LEADER_EPOCH
    kinds = []
    for i in range(5):
        res, records = s.write(K, 0, 3, i, (StateBatch(i, i + 1, AVAILABLE, 1),), 0, 0)
        assert res["error_code"] == 0
        kinds.append(sr.decode_state_key(records[0][0])[0])
        apply(s, (res, records))
    # the leader-epoch update after the initializing snapshot, then a snapshot after every 2 updates
    U, S = sr.SHARE_UPDATE, sr.SHARE_SNAPSHOT
    assert kinds == [U, S, U, U, S]
    st = s.states[K]
    assert st.start_offset == 4 and st.batches == (StateBatch(4, 5, AVAILABLE, 1),)
    # a rebuilt shard (replaying the same records) has the same state
    assert apply(s, s.initialize(K, 1, 42, 0))["error_code"] == 0  # AlterShareGroupOffsets
    assert apply(s, s.write(K, 0, 3, 0, (), -1, 0))["error_code"] == ErrorCode.FENCED_STATE_EPOCH
    r = s.summary(K)
    assert (r["state_epoch"], r["start_offset"], r["leader_epoch"]) == (1, 42, 3)
    apply(s, s.delete(K))
    assert K not in s.states and s.prune_offset() is None


def test_a_write_of_batches_no_share_partition_leader_writes_is_refused_and_changes_nothing():
    """(found by the fuzzer: a WriteShareGroupState of a batch reaching 2^31 offsets past the start
    was stored, and the share partition loading it held the broker's event loop until memory ran
    out)"""
    s = ShareStateShard(0)
    assert apply(s, s.initialize(K, 0, 100, 0))["error_code"] == 0
    before = s.states[K]
    for bad in (StateBatch(100, 99, ACKNOWLEDGED, 1), StateBatch(-5, 3, AVAILABLE, 1),
                StateBatch(100, 100, 1, 1), StateBatch(100, 100, 3, 1), StateBatch(100, 100, AVAILABLE, -1),
                StateBatch(100, 100 + MAX_STATE_SPAN, ARCHIVED, 1), StateBatch(101, 2**31 - 1, ACKNOWLEDGED, 1)):
        res, records = s.write(K, 0, 0, -1, (StateBatch(100, 100, ACKNOWLEDGED, 1), bad), -1, 0)
        assert res["error_code"] == ErrorCode.INVALID_REQUEST and records == [], bad
        assert str(bad.first_offset) in res["error_message"]
    assert s.states[K] == before
    # the edges that are fine: a window of MAX_STATE_SPAN offsets, from a new start offset
    ok = (StateBatch(100, 99 + MAX_STATE_SPAN, ARCHIVED, 1),)
    assert apply(s, s.write(K, 0, 0, -1, ok, -1, 0))["error_code"] == 0
    far = (StateBatch(10**12, 10**12 + 5, ACKNOWLEDGED, 2),)
    assert apply(s, s.write(K, 0, 0, 10**12, far, -1, 0))["error_code"] == 0
    assert s.states[K].batches == far


def test_rebuilding_from_the_log_gives_the_same_state():
    s = ShareStateShard(0, records_per_snapshot=3)
    log = []

    def run(rr):
        res, records = rr
        for k, v in records:
            s.replay(k, v, len(log))
            log.append((k, v))
        return res
    run(s.initialize(K, 0, -1, 0))
    run(s.read(K, 1))
    for i in range(10):
        run(s.write(K, 0, 1, i, (StateBatch(i, i + 3, ARCHIVED if i % 2 else AVAILABLE, 2),), i, 0))
    t = ShareStateShard(0, records_per_snapshot=3)
    for off, (k, v) in enumerate(log):
        t.replay(k, v, off)
    assert t.states == s.states
    # pruning: everything before the latest snapshot may go
    u = ShareStateShard(0)
    keep = s.prune_offset()
    for off, (k, v) in enumerate(log[keep:], keep):
        u.replay(k, v, off)
    assert u.states[K].start_offset == s.states[K].start_offset and u.states[K].batches == s.states[K].batches


# --- the share group -----------------------------------------------------------------------------

def test_simple_assignor_shares_partitions_between_members():
    t = uuid.uuid4()
    one = assign({f"m{i}": {t} for i in range(5)}, {t: 1}, {})
    assert all(a == {t: frozenset({0})} for a in one.values())
    three = assign({f"m{i}": {t} for i in range(5)}, {t: 3}, {})
    counts = [0, 0, 0]
    for a in three.values():
        (p,) = a[t]
        counts[p] += 1
    assert sorted(counts) == [1, 2, 2]
    few = assign({"a": {t}, "b": {t}}, {t: 5}, {})
    assert sorted(len(a[t]) for a in few.values()) == [2, 3]
    assert few["a"][t] | few["b"][t] == frozenset(range(5))
    # sticky: a third member takes partitions from the others, they keep the rest
    more = assign({"a": {t}, "b": {t}, "c": {t}}, {t: 6}, {"a": {t: frozenset({0, 1, 2})}, "b": {t: frozenset({3, 4, 5})}})
    assert len(more["a"][t] & {0, 1, 2}) == 2 and len(more["b"][t] & {3, 4, 5}) == 2


def test_share_heartbeat_assigns_only_initialized_partitions():
    g = ShareGroup("sg")
    topics = {"t": (T, 2)}
    cfg = ShareGroupConfig()
    resp, records = g.heartbeat(0, "m1", 0, None, ["t"], "c", "/h", topics, cfg)
    assert resp["assignment"] == {} and g.needs_initializing(topics) == {T: ("t", frozenset({0, 1}))}
    more: list = []
    g.mark_initializing(more, g.needs_initializing(topics))
    g.mark_initialized(more, {T: ("t", frozenset({0, 1}))}, topics)
    resp, _ = g.heartbeat(1, "m1", resp["member_epoch"], None, None, "c", "/h", topics, cfg)
    assert resp["assignment"] == {T: frozenset({0, 1})} and resp["member_epoch"] == g.assignment_epoch
    # a rebuilt group equals the live one
    h = ShareGroup("sg")
    for k, v in records + more + _:
        h.replay(grec.decode_key(k), v)
    assert h.members["m1"].assigned == g.members["m1"].assigned and h.epoch == g.epoch
    # errors: unknown member, fenced epoch, leave
    try:
        g.heartbeat(2, "zz", 5, None, None, "c", "/h", topics, cfg)
        raise AssertionError("unknown member accepted")
    except ShareHeartbeatError as e:
        assert e.code == ErrorCode.UNKNOWN_MEMBER_ID
    try:
        g.heartbeat(2, "m1", 99, None, None, "c", "/h", topics, cfg)
        raise AssertionError("fenced epoch accepted")
    except ShareHeartbeatError as e:
        assert e.code == ErrorCode.FENCED_MEMBER_EPOCH
    g.heartbeat(3, "m1", -1, None, None, "c", "/h", topics, cfg)
    assert g.state() == "Empty"


def test_session_timeout_fences_the_member():
    g = ShareGroup("sg")
    g.heartbeat(0, "m1", 0, None, ["t"], "c", "/h", {}, ShareGroupConfig(session_timeout_ms=100))
    assert g.next_deadline() == 100
    assert g.tick(99) == [] and g.tick(100) and not g.members
