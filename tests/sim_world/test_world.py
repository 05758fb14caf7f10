"""Whole-cluster worlds: the real nodes (3 controllers + 3 brokers) on the deterministic loop,
over the simulated network and Raft stores, with clients, faults and invariants (sim/)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from sim.loop import SimDeadlock, SimLoop
from sim.scenario import run_seed


@pytest.fixture(autouse=True)
def _quiet():
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


def test_the_loop_runs_coroutines_in_virtual_time():
    loop = SimLoop(1)
    out = []

    async def sleeper(n, d):
        await asyncio.sleep(d)
        out.append((n, loop.time()))

    async def main():
        await asyncio.gather(*(sleeper(i, 100 - i) for i in range(3)))
        return "done"
    assert loop.run_task(main()) == "done"
    assert out == [(2, 1098.0), (1, 1099.0), (0, 1100.0)]


def test_a_coroutine_waiting_for_nothing_is_a_deadlock():
    loop = SimLoop(1)

    async def stuck():
        await loop.create_future()
    loop.create_task(stuck())
    with pytest.raises(SimDeadlock):
        loop.run_until(float("inf"))


def test_a_seed_replays_exactly():
    a, b = run_seed(3, safety_s=4.0), run_seed(3, safety_s=4.0)
    assert a.trace == b.trace and a.steps == b.steps and a.acked == b.acked and a.consumed == b.consumed
    assert a.acked > 0 and a.consumed > 0 and a.commits > 0


@pytest.mark.parametrize("seed", range(4))
def test_world_seeds(seed):
    r = run_seed(seed, safety_s=6.0)
    assert r.acked > 0
