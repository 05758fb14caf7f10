"""KIP-853 leader endpoints, end to end over loopback gRPC: a voter that moved to a new
listener and then won an election is reached there by a voter that has not fetched the
voters record with its new address yet (BeginQuorumEpoch carries the leader's endpoint, as
Kafka's v1 does, and so do the answers that name a leader)."""

from __future__ import annotations

import asyncio
import random

from common.ports import free_port
from raft.core import Role, Timeouts, Voter
from raft.driver import RaftMetadataLog
from raft.testnode import KVStateMachine

FAST = Timeouts(election_ms=300, fetch_ms=600, election_backoff_max_ms=300, request_ms=600, append_linger_ms=5,
                fetch_max_wait_ms=200)
SLOW_ELECTION = Timeouts(election_ms=3000, fetch_ms=600, election_backoff_max_ms=300, request_ms=600,
                         append_linger_ms=5, fetch_max_wait_ms=200)


async def wait_for(cond, timeout: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.02)


async def test_a_voter_reaches_a_moved_leader_before_it_has_the_voters_record_of_the_move(tmp_path):
    ports = {i: free_port() for i in (1, 2, 3)}
    initial = [Voter(i, f"dir{i}", "127.0.0.1", ports[i]) for i in (1, 2, 3)]
    voters = [(v.id, v.host, v.port) for v in initial]
    logs: dict[int, RaftMetadataLog] = {}
    sms: dict[int, KVStateMachine] = {}

    async def start(nid: int, port: int, timeouts: Timeouts) -> RaftMetadataLog:
        sm = KVStateMachine()
        log = RaftMetadataLog(nid, voters, str(tmp_path / f"n{nid}"), listen=("127.0.0.1", port), timeouts=timeouts,
                              rng=random.Random(nid), initial_voters=initial)
        log.advertised = ("127.0.0.1", port)
        log.register(sm)
        await log.start()
        logs[nid], sms[nid] = log, sm
        return log

    try:
        # 1 and 3 form the quorum; 2 stays down, so it never sees what follows. 3's long election
        # timeout makes 1 the leader.
        await start(1, ports[1], FAST)
        await start(3, ports[3], SLOW_ELECTION)
        await wait_for(lambda: logs[1].core.role is Role.LEADER and logs[1].core.hw > logs[1].core.epoch_start, 20,
                       "1 leads")
        await logs[1].append([b"a=1"])
        # 3 restarts on another port and has the leader update its entry (UpdateRaftVoter)
        await logs.pop(3).close()
        new_port = free_port()
        await start(3, new_port, SLOW_ELECTION)
        await wait_for(lambda: logs[1].core.voter_info[3].port == new_port
                       and logs[1].core.hw > logs[1].core.voters_offset, 20, "3's new listener committed")
        # 1 goes; 2 starts from scratch: the voter set it knows still has 3 at its old port. 3 (the
        # longer log) must win the election, and 2 must fetch from it at the new port.
        await logs.pop(1).close()
        two = await start(2, ports[2], FAST)
        assert two.core.voter_info[3].port == ports[3]
        await wait_for(lambda: logs[3].core.role is Role.LEADER and logs[3].core.hw > logs[3].core.epoch_start, 30,
                       "3 leads and commits with 2 (which needs 3's new address to fetch)")
        off = await logs[3].append([b"b=2"])
        await wait_for(lambda: sms[2].applied_end > off, 20, "2 applies")
        assert two.core.voter_info[3].port == new_port and two.voters[3] == ("127.0.0.1", new_port)
        assert sms[2].items == {"a": "1", "b": "2"}
    finally:
        for log in logs.values():
            await log.close()
