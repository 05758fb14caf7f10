"""SQLite store (durable ops, reopen, atomic Ready) and the protobuf codec."""

from __future__ import annotations

import pytest

from raft import messages as m
from raft.api import Snapshot
from raft.core import Append, QuorumState, SaveSnapshot, SaveState, Truncate
from raft.store import SqliteStore, decode_records, encode_records
from raft.transport import from_pb, to_pb


def entries(epoch, *datas):
    return tuple(m.Entry(epoch, 100 + i, d.encode()) for i, d in enumerate(datas))


async def test_store_persists_state_log_truncation_and_snapshot_across_reopen(tmp_path):
    s = SqliteStore(str(tmp_path / "db"))
    assert await s.open() == (QuorumState(), None, [])
    await s.apply([SaveState(QuorumState(3, 2, None)), Append(0, entries(1, "a", "b", "c", "d"))])
    await s.apply([Truncate(2), Append(2, entries(3, "x"))])
    await s.close()
    s = SqliteStore(str(tmp_path / "db"))
    state, snap, log = await s.open()
    assert state == QuorumState(3, 2, None) and snap is None
    assert [e.data for e in log] == [b"a", b"b", b"x"] and log[2].epoch == 3
    await s.apply([SaveSnapshot(Snapshot(2, 1, (b"k=v", b"")))])
    await s.close()
    s = SqliteStore(str(tmp_path / "db"))
    state, snap, log = await s.open()
    assert snap == Snapshot(2, 1, (b"k=v", b"")) and [e.data for e in log] == [b"x"]
    await s.close()


async def test_a_ready_is_applied_all_or_nothing(tmp_path):
    s = SqliteStore(str(tmp_path / "db"))
    await s.open()
    await s.apply([Append(0, entries(1, "a"))])
    with pytest.raises(TypeError):
        await s.apply([SaveState(QuorumState(9, 9, 9)), Truncate(0), object()])
    await s.close()
    s = SqliteStore(str(tmp_path / "db"))
    state, _snap, log = await s.open()
    assert state == QuorumState() and [e.data for e in log] == [b"a"]
    await s.close()


def test_record_encoding_round_trips():
    recs = (b"", b"a", bytes(range(256)) * 3)
    assert decode_records(encode_records(recs)) == recs


@pytest.mark.parametrize("body", [
    m.VoteRequest(4, 2, 3, 17, True),
    m.VoteResponse(4, None, False, True, m.NONE),
    m.VoteResponse(4, 1, True, False, m.NONE),
    m.BeginQuorumEpochRequest(5, 1),
    m.BeginQuorumEpochResponse(5, 1, m.FENCED_LEADER_EPOCH),
    m.EndQuorumEpochRequest(5, 1, (3, 2)),
    m.EndQuorumEpochResponse(6, None),
    m.FetchRequest(5, 7, 100, 4, 500),
    m.FetchResponse(5, 1, m.NONE, 90, 10, 100, entries(5, "p", "q") + (m.Entry(5, 1, b"LC", True),)),
    m.FetchResponse(5, 1, m.NONE, -1, 0, 0, (), 3, 42),
    m.FetchResponse(5, 1, m.NONE, 80, 50, 0, (), -1, -1, 50, 4),
    m.FetchResponse(5, None, m.NOT_LEADER),
    m.FetchSnapshotRequest(5, 2, 50, 4, 1000),
    m.FetchSnapshotResponse(5, 1, m.NONE, 50, 4, 1000, 2000, (b"a=1", b"b=2")),
    # KIP-853: the leader's endpoint in BeginQuorumEpoch / EndQuorumEpoch and every answer naming a leader
    m.VoteResponse(4, 1, False, True, m.NONE, ("127.0.0.1", 9093)),
    m.BeginQuorumEpochRequest(5, 1, ("10.0.0.3", 9093)),
    m.BeginQuorumEpochResponse(5, 1, m.NONE, ("10.0.0.3", 9093)),
    m.EndQuorumEpochRequest(5, 1, (3, 2), ("h1", 1)),
    m.EndQuorumEpochResponse(6, 2, m.NONE, ("h2", 2)),
    m.FetchResponse(5, 1, m.NONE, 90, 10, 100, entries(5, "p"), leader_endpoint=("localhost", 19093)),
    m.FetchSnapshotResponse(5, 1, m.NONE, 50, 4, 1000, 2000, (b"a=1",), ("localhost", 19093)),
])
def test_protobuf_codec_round_trips_every_message(body):
    assert from_pb(to_pb(body)) == body


async def test_a_gap_in_the_stored_log_is_refused_on_open(tmp_path):
    import sqlite3

    s = SqliteStore(str(tmp_path / "db"))
    await s.open()
    await s.apply([Append(0, entries(1, *[f"r{i}" for i in range(25_000)]))])  # more than one read chunk
    await s.close()
    s = SqliteStore(str(tmp_path / "db"))
    assert len((await s.open())[2]) == 25_000
    await s.close()
    with sqlite3.connect(tmp_path / "db" / "raft.db") as db:
        db.execute("DELETE FROM entries WHERE offset = 17000")
    s = SqliteStore(str(tmp_path / "db"))
    with pytest.raises(RuntimeError, match="gap"):
        await s.open()
    await s.close()
