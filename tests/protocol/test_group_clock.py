"""Group member sessions are timed with the monotonic clock (DESIGN.md, "Two clocks"): a wall-clock
step on the coordinator must neither expel a live member (step forward) nor keep a dead one in the
group (step back). The step moves ``time.time`` of this process, as NTP or libfaketime would, while
an in-process node coordinates the group."""

from __future__ import annotations

import asyncio
import time

import pytest

from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from common.errors import ErrorCode
from tests.protocol.conftest import free_port
from tests.protocol.test_group_apis import TOPICS, _config, _start, find, subscription


@pytest.fixture
async def gnode(tmp_path):
    port, cport = free_port(), free_port()
    n = await _start(_config(tmp_path, port, cport, **{"group.min.session.timeout.ms": "300"}), port)
    c = KafkaConnection("127.0.0.1", port, client_id="group-clock-test")
    r = await c.request(ApiKey.CREATE_TOPICS, 5, {"topics": [
        {"name": t, "num_partitions": n_, "replication_factor": 1, "assignments": [], "configs": []}
        for t, n_ in TOPICS.items()], "timeout": 10000, "validate_only": False})
    assert all(int(t.error_code) == 0 for t in r.topics), r
    yield n, c
    c.close()
    await n.stop()


async def _member(conn, group: str, session_ms: int) -> tuple[str, int]:
    req = {"group_id": group, "session_timeout": session_ms, "rebalance_timeout": 10000, "member_id": "",
           "group_instance_id": None, "protocol_type": "consumer",
           "protocols": [{"name": "range", "metadata": subscription("t1")}], "reason": None}
    await find(conn, group)
    r = await conn.request(ApiKey.JOIN_GROUP, 9, req)
    r = await conn.request(ApiKey.JOIN_GROUP, 9, dict(req, member_id=r.member_id))
    assert int(r.error_code) == 0, r
    s = await conn.request(ApiKey.SYNC_GROUP, 5, {
        "group_id": group, "generation_id": r.generation_id, "member_id": r.member_id, "group_instance_id": None,
        "protocol_type": "consumer", "protocol_name": "range", "assignments": [{"member_id": r.member_id,
                                                                                 "assignment": b""}]})
    assert int(s.error_code) == 0, s
    return r.member_id, r.generation_id


async def _heartbeat(conn, group: str, member: str, generation: int) -> int:
    r = await conn.request(ApiKey.HEARTBEAT, 4, {"group_id": group, "generation_id": generation,
                                                 "member_id": member, "group_instance_id": None})
    return int(r.error_code)


def _step_wall_clock(monkeypatch, seconds: float) -> None:
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + seconds)


async def test_a_wall_clock_step_forward_on_the_coordinator_expels_no_member(gnode, monkeypatch):
    _, conn = gnode
    member, gen = await _member(conn, "g-forward", session_ms=10_000)
    _step_wall_clock(monkeypatch, 60)
    await asyncio.sleep(1.2)  # the coordinator's timers run at least once a second
    assert await _heartbeat(conn, "g-forward", member, gen) == ErrorCode.NONE, \
        "a wall-clock step expelled a live member"


async def test_a_wall_clock_step_back_still_expels_a_dead_member_on_time(gnode, monkeypatch):
    _, conn = gnode
    member, gen = await _member(conn, "g-back", session_ms=600)
    _step_wall_clock(monkeypatch, -60)  # and the member stops heartbeating
    await asyncio.sleep(2.0)
    assert await _heartbeat(conn, "g-back", member, gen) == ErrorCode.UNKNOWN_MEMBER_ID, \
        "a wall-clock step back kept a dead member in the group"
