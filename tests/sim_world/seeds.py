"""Shared by the default suite's seed files: one short whole-cluster seed, quiet."""

from __future__ import annotations

import logging

from sim.scenario import run_seed

SHORT_SAFETY_S = 3.0


def run_short(seed: int) -> None:
    logging.disable(logging.CRITICAL)
    try:
        r = run_seed(seed, safety_s=SHORT_SAFETY_S)
    finally:
        logging.disable(logging.NOTSET)
    assert r.acked > 0
