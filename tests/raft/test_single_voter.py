"""Single-voter quorums: a restart, and voter changes on a static or standalone dynamic voter."""

from __future__ import annotations

import random

import pytest

from raft.core import QuorumState, RaftCore, Role


def test_a_restarted_single_voter_leads_at_its_first_poll():
    # a single-controller node restarted after leading (kill -9 or a clean stop) must not wait an
    # election timeout: nobody else can vote; that wait was 1-2 s of every restart
    core = RaftCore(1, [1], random.Random(0), state=QuorumState(epoch=3, voted_for=1, leader_id=1), now_ms=1000)
    core.poll(1000)
    assert core.role is Role.LEADER and core.epoch == 4


def test_a_static_quorum_refuses_voter_changes_and_only_a_leader_makes_them():
    # kraft.version 0 (controller.quorum.voters): Kafka's UNSUPPORTED_VERSION; a follower: not the leader
    import random

    from common.errors import ErrorCode
    from raft.api import NotLeaderError
    from raft.core import RaftCore, Role, Voter, VoterChangeError

    core = RaftCore(1, [1], random.Random(0), now_ms=0)
    core.poll(0)
    while (r := core.take_ready()) is not None:
        core.advance(r, 0)
    assert core.role is Role.LEADER and not core.dynamic
    with pytest.raises(VoterChangeError) as ei:
        core.add_voter(Voter(2), 0)
    assert ei.value.code == ErrorCode.UNSUPPORTED_VERSION and "kraft.version" in ei.value.message
    follower = RaftCore(2, [1, 2, 3], random.Random(0), now_ms=0, initial_voters=[Voter(1), Voter(2), Voter(3)])
    with pytest.raises(NotLeaderError):
        follower.remove_voter(1, "", 0)


def test_a_standalone_dynamic_voter_writes_its_voter_set_and_snapshots_carry_it():
    import random

    from raft.core import VOTERS_PREFIX, RaftCore, Role, Voter

    core = RaftCore(1, [1], random.Random(0), now_ms=0, initial_voters=[Voter(1, "dir-1", "h", 9)])
    core.poll(0)
    notes = []
    while (r := core.take_ready()) is not None:
        notes += r.notifications
        core.advance(r, 0)
    assert core.role is Role.LEADER and core.voter_info == {1: Voter(1, "dir-1", "h", 9)}
    assert core.log[1].control and core.log[1].data.startswith(VOTERS_PREFIX) and core.hw == 2
    core.propose([b"x"], 0)
    core.poll(100)
    while (r := core.take_ready()) is not None:
        core.advance(r, 100)
    snap = core.take_snapshot(3, [b"state"])
    assert snap.records[0].startswith(VOTERS_PREFIX) and snap.records[1:] == (b"state",)
    again = RaftCore(1, [1], random.Random(0), snapshot=snap, now_ms=0)  # restart: no initial voters given
    r = again.take_ready()
    assert again.voter_info == {1: Voter(1, "dir-1", "h", 9)} and again.dynamic
    loaded = [n for n in r.notifications if type(n).__name__ == "LoadSnapshot"]
    assert loaded[0].snapshot.records == (b"state",)  # the state machine never sees the voter set record
