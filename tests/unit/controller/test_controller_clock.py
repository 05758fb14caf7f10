"""Broker sessions on the active controller are timed with the monotonic clock (DESIGN.md, "Two
clocks"): an NTP step of the wall clock must neither fence a live broker (step forward) nor keep a
dead one registered (step back). The controller runs for real here (its fence timer included) over
an in-memory metadata log; the step is made by moving ``time.time`` as libfaketime or NTP would."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from memory_log import MemoryMetadataLog

from controller.loop import QuorumController
from controller.topics import TopicDefaults
from metadata import records as r
from metadata.loader import MetadataLoader

BROKER = 4


async def _active_controller(session_timeout_ms: int) -> tuple[QuorumController, MemoryMetadataLog]:
    loader = MetadataLoader()
    mlog = MemoryMetadataLog(1)
    mlog.register(loader)
    ctrl = QuorumController(1, mlog, loader, cluster_id="c1", defaults=TopicDefaults(1, 1),
                            session_timeout_ms=session_timeout_ms, auto_leader_rebalance=False)
    await mlog.start()
    for _ in range(100):
        if ctrl.is_active() and loader.image.cluster_id is not None:
            break
        await asyncio.sleep(0.01)
    assert ctrl.is_active()
    return ctrl, mlog


async def _unfenced_broker(ctrl: QuorumController) -> int:
    epoch = await ctrl.register_broker(BROKER, uuid.UUID(int=BROKER), [r.Endpoint("PLAINTEXT", "h", 9092)], None)
    res = await ctrl.heartbeat(BROKER, epoch, ctrl.image.offset, False, False)
    assert not res.is_fenced
    assert not ctrl.image.brokers[BROKER].fenced
    return epoch


def _step_wall_clock(monkeypatch, seconds: float) -> None:
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + seconds)


async def test_a_wall_clock_step_forward_on_the_active_controller_fences_no_broker(monkeypatch):
    ctrl, mlog = await _active_controller(session_timeout_ms=3000)
    try:
        await _unfenced_broker(ctrl)
        _step_wall_clock(monkeypatch, 60)  # far beyond broker.session.timeout.ms
        await asyncio.sleep(1.3)  # the fence timer checks at least once a second
        assert not ctrl.image.brokers[BROKER].fenced, "a wall-clock step fenced a live broker"
    finally:
        await mlog.close()


async def test_a_wall_clock_step_back_still_fences_a_dead_broker_on_time(monkeypatch):
    ctrl, mlog = await _active_controller(session_timeout_ms=400)
    try:
        await _unfenced_broker(ctrl)
        _step_wall_clock(monkeypatch, -60)  # the broker now stops heartbeating (it died)
        await asyncio.sleep(1.5)
        assert ctrl.image.brokers[BROKER].fenced, "a wall-clock step back kept a dead broker alive"
    finally:
        await mlog.close()


@pytest.fixture(autouse=True)
def _quiet(caplog):
    caplog.set_level("WARNING")


async def test_a_fence_is_logged_naming_the_broker(caplog):
    """An operator looking for why a broker lost its partitions finds Kafka's line in the active
    controller's log ("Fencing broker N because its session has timed out")."""
    ctrl, mlog = await _active_controller(session_timeout_ms=300)
    try:
        await _unfenced_broker(ctrl)
        caplog.set_level("INFO", logger="krafty.controller")
        for _ in range(300):  # the broker stops heartbeating: fenced after 300 ms (timer checks each second)
            if ctrl.image.brokers[BROKER].fenced:
                break
            await asyncio.sleep(0.01)
        assert ctrl.image.brokers[BROKER].fenced
        lines = [m.getMessage() for m in caplog.records if m.name == "krafty.controller"]
        assert any(f"Fencing broker {BROKER} because its session has timed out" in x for x in lines), lines
    finally:
        await mlog.close()


async def test_a_broker_of_many_partitions_is_fenced_in_batches_while_heartbeats_go_on(monkeypatch):
    """The fence timer writes a big fence a batch of FENCE_RECORDS_PER_BATCH records at a time
    (controller/cluster.py): the loop serves the other broker's heartbeats between the batches."""
    from controller import cluster as cluster_ops
    from metadata.controller_api import NewTopic
    monkeypatch.setattr(cluster_ops, "FENCE_RECORDS_PER_BATCH", 50)
    batches: list[tuple[float, int, bool]] = []
    real = cluster_ops.fence_stale_brokers_batch

    def spy(*a, **kw):
        recs, done = real(*a, **kw)
        if recs:
            batches.append((time.monotonic(), len(recs), done))
        return recs, done
    monkeypatch.setattr(cluster_ops, "fence_stale_brokers_batch", spy)
    ctrl, mlog = await _active_controller(session_timeout_ms=400)
    try:
        await _unfenced_broker(ctrl)
        e5 = await ctrl.register_broker(5, uuid.UUID(int=5), [r.Endpoint("PLAINTEXT", "h5", 9092)], None)
        await ctrl.heartbeat(5, e5, ctrl.image.offset, False, False)
        [res] = await ctrl.create_topics([NewTopic("t", -1, -1, {p: [4, 5] for p in range(300)})])
        assert res.error == 0, res
        beats: list[float] = []

        async def heartbeats():  # broker 5 lives on; broker 4 stopped heartbeating
            while True:
                await ctrl.heartbeat(5, e5, ctrl.image.offset, False, False)
                beats.append(time.monotonic())
                await asyncio.sleep(0.005)
        hb = asyncio.get_running_loop().create_task(heartbeats())
        try:
            for _ in range(500):
                if ctrl.image.brokers[BROKER].fenced:
                    break
                await asyncio.sleep(0.01)
        finally:
            hb.cancel()
        assert ctrl.image.brokers[BROKER].fenced and not ctrl.image.brokers[5].fenced
        assert len(batches) >= 7 and all(n <= 50 for _, n, _ in batches)  # 300 partition changes + the fence
        assert [d for _, _, d in batches] == [False] * (len(batches) - 1) + [True]
        first, last = batches[0][0], batches[-1][0]
        assert any(first < t < last for t in beats), "no heartbeat was served while the fence was written"
        t = ctrl.image.topics_by_name["t"]
        assert all(p.leader == 5 and p.isr == (5,) for p in t.partitions.values())
    finally:
        await mlog.close()
