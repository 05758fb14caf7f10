"""The seeded simulation of the transactional data plane (sim/txn_log) on the product's Log:
its invariants hold over a swarm of seeds, a seed replays exactly, and the checker catches a
log that exposes a transaction before its marker is replicated."""

from __future__ import annotations

import logging

import pytest

from broker.log.producer_state import ProducerStateManager
from sim.txn_log.world import Config, InvariantViolation, World, run_seed

CHUNK = 12


@pytest.fixture(autouse=True)
def _quiet():
    logging.disable(logging.WARNING)  # indexes rebuilt after each simulated kill -9
    yield
    logging.disable(logging.NOTSET)


@pytest.mark.parametrize("start", range(0, 48, CHUNK))
def test_swarm_seeds_keep_invariants_and_converge(start):
    for seed in range(start, start + CHUNK):
        run_seed(seed)


def test_compacted_seeds():
    for seed in range(500, 506):
        run_seed(seed, Config(rf=3, producers=3, steps=120, segment_bytes=500, compacted=True, p_fault=0.15))


def test_a_seed_replays_exactly():
    def trace(seed):
        lines: list[str] = []
        stats = World(seed, trace=lines.append).run()
        return lines, stats

    assert trace(7) == trace(7)
    assert trace(7)[0] != trace(8)[0]


def test_checker_catches_an_lso_that_ignores_unreplicated_markers(monkeypatch):
    def eager(self, high_watermark):  # completed transactions count as stable at once
        self.unreplicated.clear()
        return next(iter(self.ongoing), None)

    monkeypatch.setattr(ProducerStateManager, "first_unstable_offset", eager)
    with pytest.raises(InvariantViolation, match="not below the high watermark"):
        for seed in range(20):
            run_seed(seed)
