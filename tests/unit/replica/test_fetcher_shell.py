"""The asyncio fetcher shell must never apply a follower answer that arrives after the
partition stopped following that leader (e.g. it became leader meanwhile)."""

import asyncio
import logging
import socket
import types
import uuid

from broker.apis import wire
from broker.replica.fetcher import ReplicaFetcherManager
from broker.replica.follower import AppendRecords, FetchAnswer, FetchRequest, Truncate
from broker.replica.partition import PartitionState
from broker.replica.throttle import UNLIMITED, ReplicationQuota
from common.config import Config


class _Cache:
    entries = ()

    def latest_epoch(self):
        return 1

    def end_offset_for(self, epoch, leo):
        return epoch, leo

    def truncate_from_end(self, offset):
        self.truncated = offset


class _Log:
    def __init__(self):
        self.log_start_offset, self.log_end_offset = 0, 10
        self.leader_epoch_cache = _Cache()
        self.appended = []
        self.damaged_offset = None  # no batch of ours found corrupt

    async def append_as_follower_async(self, buf, headers, now_ms, executor, still_following):
        if still_following():
            self.appended.append(buf)

    def truncate_to(self, offset):
        self.log_end_offset = min(self.log_end_offset, offset)
        if self.damaged_offset is not None and offset <= self.damaged_offset:
            self.damaged_offset = None


def _partition():
    """One partition ("t", 0) on a fake log, and the replica manager around it."""
    part = types.SimpleNamespace(state=PartitionState("t", 0, uuid.uuid4(), 1), log=_Log())
    rm = types.SimpleNamespace(partitions={("t", 0): part}, wake_hw=lambda tp: None,
                               logs=types.SimpleNamespace(writer=None),
                               follower_quota=ReplicationQuota(1, "follower.replication.throttled.replicas", UNLIMITED))
    return part, rm


async def test_answer_arriving_after_leadership_change_is_not_applied():
    cfg = Config({"node.id": "1"})
    part, rm = _partition()
    m = ReplicaFetcherManager(rm, 1, cfg, lambda b: None)
    try:
        m.follow(("t", 0), leader=2, leader_epoch=1, high_watermark=0)
        fs = m.threads[(2, 0)].states[("t", 0)]
        fs.phase = fs.phase.FETCHING
        act = fs.next_action(part.log, 0)
        assert isinstance(act, FetchRequest)
        # metadata: we now lead the partition; the old request is still out
        m.unfollow(("t", 0))
        part.state.leader = 1
        effects = fs.on_fetch_response(act, part.log, FetchAnswer(high_watermark=12, records_first_offset=10,
                                                                    records_next_offset=12), 0)
        assert effects == []
        await m.apply(("t", 0), part, fs, [Truncate(5), AppendRecords(10, 12)], (b"late", []))
        assert part.log.appended == [] and part.log.log_end_offset == 10
    finally:
        await m.close()


async def test_unreachable_leader_is_one_warning_per_outage_not_a_traceback_per_round(caplog):
    """A leader whose name no longer resolves (a stopped compose container) or refuses: the
    fetcher backs off and says so once; it logs again when fetching works."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    closed_port = s.getsockname()[1]
    s.close()
    cfg = Config({"node.id": "1", "controller.quorum.retry.backoff.ms": "20"})
    part, rm = _partition()
    endpoints = {2: ("no-such-broker.invalid", closed_port)}
    m = ReplicaFetcherManager(rm, 1, cfg, endpoints.get)
    try:
        with caplog.at_level(logging.DEBUG, logger="krafty.replica.fetcher"):
            m.follow(("t", 0), leader=2, leader_epoch=1, high_watermark=0)
            await asyncio.sleep(1.0)  # several rounds at a 0.1 s backoff
            endpoints[2] = ("127.0.0.1", closed_port)  # the leader moved; still refusing
            await asyncio.sleep(0.5)
    finally:
        await m.close()
    failed = [r for r in caplog.records if "fetch from leader 2 failed" in r.getMessage()]
    assert len(failed) >= 4
    assert [r.levelno for r in failed].count(logging.WARNING) == 1 and failed[0].levelno == logging.WARNING
    assert "no-such-broker.invalid" in failed[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


async def test_follower_whose_copy_is_corrupt_truncates_to_the_damage_and_fetches_from_there():
    """Issue 18 item 7: a read found a batch of ours that does not parse: the follower drops
    it (and what follows) and its next fetch asks the leader for it again."""
    cfg = Config({"node.id": "1", "controller.quorum.retry.backoff.ms": "20"})
    part, rm = _partition()
    part.log.damaged_offset = 4
    m = ReplicaFetcherManager(rm, 1, cfg, lambda b: None)
    try:
        m.follow(("t", 0), leader=2, leader_epoch=1, high_watermark=8)
        fs = m.threads[(2, 0)].states[("t", 0)]
        fs.phase = fs.phase.FETCHING
        for _ in range(50):
            await asyncio.sleep(0.02)
            if part.log.log_end_offset == 4:
                break
        assert part.log.log_end_offset == 4 and part.log.damaged_offset is None
        assert part.state.high_watermark <= 4
        assert fs.next_action(part.log, 10**15).fetch_offset == 4
    finally:
        await m.close()


class _Leader:
    """A leader's Fetch answers over a fetch session (KIP-227): the first (full) one carries
    the partition, the incremental ones leave it out while nothing changed."""

    def __init__(self, high_watermark: int):
        self.high_watermark = high_watermark
        self.requests = []

    async def request_body(self, api_key, version, body, timeout=None):
        req = wire.parse_fetch(memoryview(body), version)  # (the leader's own parser)
        self.requests.append(req)
        full = req.session_epoch == 0
        parts = [wire.FetchPartitionResult(0, 0, self.high_watermark, self.high_watermark, 0, b"")] if full else []
        return memoryview(b"".join(wire.encode_fetch_response(
            version, [("t", None, parts)] if parts else [], session_id=7)))


async def test_idle_incremental_round_applies_nothing_unless_the_high_watermark_moves():
    """Issue 24 goal 5: with many partitions most of a follower's rounds are idle, and an
    incremental response leaves every unchanged partition out. Such a partition's HW stays:
    nothing is applied and its waiters are not woken (on_next_change: "the next time the high
    watermark moves"), yet its request is done and the next round asks again. One whose HW
    differs from what the leader last said (e.g. reset by a truncation) still gets it."""
    cfg = Config({"node.id": "1"})
    part, rm = _partition()
    woken = []
    rm.wake_hw = woken.append
    m = ReplicaFetcherManager(rm, 1, cfg, lambda b: None)
    try:
        m.follow(("t", 0), leader=2, leader_epoch=1, high_watermark=0)
        th = m.threads[(2, 0)]
        th.task.cancel()  # the rounds are driven by hand below
        fs = th.states[("t", 0)]
        fs.phase = fs.phase.FETCHING
        leader = _Leader(high_watermark=10)

        async def round_():
            act = fs.next_action(part.log, 0)
            assert isinstance(act, FetchRequest)
            await th._fetch(leader, [(("t", 0), fs, act)])
            assert fs.in_flight is None  # answered: the next round fetches again

        await round_()  # full: the session starts, the HW moves 0 -> 10
        assert part.state.high_watermark == 10 and woken == [("t", 0)]
        for _ in range(3):  # incremental, nothing new
            await round_()
        assert leader.requests[-1].topics == []  # nothing changed: nothing sent
        assert part.state.high_watermark == 10 and woken == [("t", 0)]
        part.state.high_watermark = 4  # moved here meanwhile: the leader's (remembered) 10 is news again
        await round_()
        assert part.state.high_watermark == 10 and woken == [("t", 0), ("t", 0)]
    finally:
        await m.close()
