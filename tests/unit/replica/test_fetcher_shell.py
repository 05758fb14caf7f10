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
    """A leader's Fetch answers over a fetch session (KIP-227), through the broker's own session
    cache: a full request gets every partition, an incremental one only those with news (a
    high watermark the fetcher has not seen). ``hw[partition]`` is the leader's high watermark
    (its log end too: nothing to read below it for the fake log)."""

    def __init__(self, high_watermark: int, partitions=(0,)):
        import random

        from broker.fetch_session import FetchSessionCache
        self.hw = dict.fromkeys(partitions, high_watermark)
        self.cache = FetchSessionCache(random.Random(1))
        self.requests = []

    @property
    def high_watermark(self):
        return self.hw[0]

    async def request_body(self, api_key, version, body, timeout=None):
        req = wire.parse_fetch(memoryview(body), version)  # (the leader's own parser)
        self.requests.append(req)
        requested = [((t.topic, p.partition), p) for t in req.topics for p in t.partitions]
        forgotten = [(t.topic, pid) for t in req.forgotten_topics_data for pid in t.partitions]
        ctx = self.cache.context(req.session_id, req.session_epoch, requested, forgotten, 0, True)
        if ctx.error:
            return memoryview(b"".join(wire.encode_fetch_response(version, [], error=ctx.error)))
        chosen = ctx.select({k: (0, self.hw[k[1]], 0, False, False) for k, _ in ctx.parts})
        parts = [wire.FetchPartitionResult(k[1], 0, self.hw[k[1]], self.hw[k[1]], 0, b"") for k, _ in ctx.parts
                 if k in chosen]
        return memoryview(b"".join(wire.encode_fetch_response(
            version, [("t", None, parts)] if parts else [], session_id=ctx.session_id)))


def _follower(n: int, leader_hw: int = 10):
    """A manager following partitions ("t", 0..n-1) of leader 2 on fake logs (log end 10), its
    fetcher's rounds driven by hand against a ``_Leader``."""
    parts = {("t", i): types.SimpleNamespace(state=PartitionState("t", i, uuid.uuid4(), 1), log=_Log())
             for i in range(n)}
    woken = []
    rm = types.SimpleNamespace(partitions=parts, wake_hw=woken.append, logs=types.SimpleNamespace(writer=None),
                               follower_quota=ReplicationQuota(1, "follower.replication.throttled.replicas", UNLIMITED))
    m = ReplicaFetcherManager(rm, 1, Config({"node.id": "1"}), lambda b: None)
    for tp in parts:
        m.follow(tp, leader=2, leader_epoch=1, high_watermark=0)
    th = m.threads[(2, 0)]
    th.task.cancel()
    for fs in th.states.values():
        fs.phase = fs.phase.FETCHING
    leader = _Leader(leader_hw, range(n))
    th._connection = lambda: leader
    return m, th, leader, parts, woken


async def test_idle_partitions_wait_in_the_session_and_a_round_does_not_walk_them():
    """Issue 24: with many partitions most of a follower's rounds are idle, and an incremental
    response leaves every unchanged partition out. Such a partition is parked with its request
    in flight (the leader's session holds it): later rounds send nothing for it, apply nothing
    and do not look at it, until an answer names it (its HW moved): applied, woken, parked
    again once idle."""
    m, th, leader, parts, woken = _follower(3)
    try:
        await th._round()  # full: the session starts, every HW moves 0 -> 10
        assert {tp: p.state.high_watermark for tp, p in parts.items()} == dict.fromkeys(parts, 10)
        assert sorted(woken) == sorted(parts)
        await th._round()  # incremental, nothing new: all three park
        assert set(th.parked) == set(parts) and not th.active
        assert all(th.states[tp].in_flight is th.parked[tp] for tp in parts)
        for _ in range(3):
            await th._round()
            assert leader.requests[-1].topics == [] and leader.requests[-1].forgotten_topics_data == []
        assert len(leader.requests) == 5 and len(woken) == 3  # still a long poll each round; nothing applied
        # the rounds do not look at a parked partition (nor its log)
        looked = []

        class Watched(dict):
            def get(self, k, default=None):
                looked.append(k)
                return super().get(k, default)

        m.rm.partitions = Watched(parts)
        await th._round()
        assert looked == []
        leader.hw[1] = 12  # news for one partition: its parked request gets the answer
        await th._round()
        assert parts[("t", 1)].state.high_watermark == 10  # min(leader HW, our log end 10)
        assert woken.count(("t", 1)) == 2  # answered (its waiters woken)
        parts[("t", 1)].log.log_end_offset = 12  # (as if it had appended the records)
        assert ("t", 1) in th.active and ("t", 1) not in th.parked and th.states[("t", 1)].in_flight is None
        await th._round()  # asks again from its new log end; the leader answers it (a changed request)
        await th._round()  # idle again: parked
        assert set(th.parked) == set(parts)
        assert parts[("t", 1)].state.high_watermark == 12 and woken.count(("t", 1)) == 3
    finally:
        await m.close()


async def test_a_new_session_names_every_partition_the_parked_ones_with_their_requests():
    """When the leader loses the session (a restart: FETCH_SESSION_ID_NOT_FOUND) the parked
    requests are withdrawn and the next, full, request names every partition again."""
    m, th, leader, parts, woken = _follower(4)
    try:
        await th._round()
        await th._round()
        assert set(th.parked) == set(parts)
        leader.cache.sessions.clear()  # the leader restarted
        await th._round()  # FETCH_SESSION_ID_NOT_FOUND
        assert not th.parked and all(fs.in_flight is None for fs in th.states.values())
        await th._round()
        full = leader.requests[-1]
        assert full.session_epoch == 0 and sorted(p.partition for t in full.topics for p in t.partitions) == [0, 1, 2, 3]
        await th._round()
        assert set(th.parked) == set(parts)
        # a partition no longer followed leaves the session; one whose log changed under its
        # parked request (retention moved its log start) is taken back by the sweep
        m.unfollow(("t", 3))
        parts[("t", 2)].log.log_start_offset = 5
        th._sweep_at = 0
        await th._round()
        req = leader.requests[-1]
        assert [(t.topic, t.partitions) for t in req.forgotten_topics_data] == [("t", [3])]
        assert [(p.partition, p.log_start_offset) for t in req.topics for p in t.partitions] == [(2, 5)]
        assert set(leader.cache.sessions[req.session_id].parts) == {("t", 0), ("t", 1), ("t", 2)}
    finally:
        await m.close()


async def test_idle_incremental_round_applies_nothing_unless_the_high_watermark_moves():
    """An idle partition's HW stays: nothing is applied and its waiters are not woken
    (on_next_change: "the next time the high watermark moves"). One whose HW differs from what
    the leader last said (e.g. reset by a truncation) still gets it."""
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
            await th._fetch(leader, [(("t", 0), fs, act)], [])
            if th.parked:  # (parked: its request stays in flight; taken back here to drive it by hand)
                th._unpark_all()
            assert fs.in_flight is None

        await round_()  # full: the session starts, the HW moves 0 -> 10
        assert part.state.high_watermark == 10 and woken == [("t", 0)]
        for _ in range(3):  # incremental, nothing new
            await round_()
        assert leader.requests[-1].topics == []  # nothing changed: nothing sent
        assert part.state.high_watermark == 10 and woken == [("t", 0)]
        part.state.high_watermark = 4  # moved here meanwhile: the leader's (remembered) 10 is news again
        fs.high_watermark = 4
        await round_()
        assert part.state.high_watermark == 10 and woken == [("t", 0), ("t", 0)]
    finally:
        await m.close()
