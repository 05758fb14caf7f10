"""The broker's request memory pool (queued.max.request.bytes)."""

from __future__ import annotations

import asyncio

import pytest

from broker.memory_pool import RequestMemoryPool
from common.config import Config, ConfigError


async def test_a_frame_that_does_not_fit_waits_and_smaller_ones_pass_it():
    pool = RequestMemoryPool(100)
    assert pool.try_reserve(60) == 60
    big = asyncio.ensure_future(pool.reserve(50))
    await asyncio.sleep(0)
    assert not big.done() and pool.waiting == 1
    assert await pool.reserve(30) == 30  # first fit: a small one fits now, it does not queue behind
    pool.release(60)
    assert await asyncio.wait_for(big, 1) == 50
    assert pool.used == 80
    pool.release(50)
    pool.release(30)
    assert pool.used == 0 and pool.waiting == 0


async def test_waiters_are_granted_in_arrival_order_when_room_comes():
    pool = RequestMemoryPool(100)
    assert pool.try_reserve(100) == 100
    first, second = asyncio.ensure_future(pool.reserve(70)), asyncio.ensure_future(pool.reserve(70))
    await asyncio.sleep(0)
    pool.release(100)
    await asyncio.sleep(0)
    assert first.done() and not second.done()
    pool.release(70)
    assert await asyncio.wait_for(second, 1) == 70


async def test_a_cancelled_waiter_takes_nothing():
    pool = RequestMemoryPool(100)
    pool.try_reserve(100)
    waiter = asyncio.ensure_future(pool.reserve(10))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    pool.release(100)
    assert pool.used == 0 and pool.waiting == 0


async def test_a_frame_larger_than_the_pool_waits_for_all_of_it_and_unbounded_never_waits():
    pool = RequestMemoryPool(100)
    pool.try_reserve(1)
    assert pool.try_reserve(500) is None
    pool.release(1)
    assert pool.try_reserve(500) == 100
    unbounded = RequestMemoryPool(-1)
    assert unbounded.try_reserve(10**12) == 0 and unbounded.used == 0


def test_queued_max_request_bytes_must_hold_the_largest_request():
    base = {"node.id": "1", "process.roles": "broker,controller", "controller.quorum.voters": "1@127.0.0.1:9093",
            "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"}
    assert RequestMemoryPool.from_config(Config(base)).limit == 256 * 1024 * 1024
    assert RequestMemoryPool.from_config(Config({**base, "queued.max.request.bytes": "-1"})).limit is None
    with pytest.raises(ConfigError, match="queued.max.request.bytes"):
        RequestMemoryPool.from_config(Config({**base, "queued.max.request.bytes": "1000"}))
