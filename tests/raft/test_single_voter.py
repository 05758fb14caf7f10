"""A single-voter quorum after a restart."""

from __future__ import annotations

import random

from raft.core import QuorumState, RaftCore, Role


def test_a_restarted_single_voter_leads_at_its_first_poll():
    # a single-controller node restarted after leading (kill -9 or a clean stop) must not wait an
    # election timeout: nobody else can vote; that wait was 1-2 s of every restart
    core = RaftCore(1, [1], random.Random(0), state=QuorumState(epoch=3, voted_for=1, leader_id=1), now_ms=1000)
    core.poll(1000)
    assert core.role is Role.LEADER and core.epoch == 4
