"""Whole-cluster seeds 0..49 of the default suite (200 in four files, so that each stays well
under a minute): random fault schedules, 3 s of faults each (python -m sim.run_world runs more)."""

from __future__ import annotations

import pytest

from tests.sim_world.seeds import run_short


@pytest.mark.parametrize("seed", range(0, 50))
def test_seed(seed):
    run_short(seed)
