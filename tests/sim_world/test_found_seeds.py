"""Fault schedules that whole-cluster seeds found bugs with, fixed here (each failed before its
fix), so that they stay meaningful when the random schedule generator changes."""

from __future__ import annotations

import errno
import logging

import pytest

from sim.scenario import Fault, run_seed


@pytest.fixture(autouse=True)
def _quiet():
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


# Seed 20337 (shrunk): ENOSPC stops broker 4, the coordinator of txn-1, with its AddPartitions
# of sim-txn-1 in the log but not yet replicated to broker 5. Broker 6 takes over, loads that
# record from its log end and told the retried AddPartitions "already in the transaction" at
# once; the producer wrote to sim-txn-1. Then EIO stops broker 6, broker 5 (in the ISR, without
# the record) leads, and the abort never sent sim-txn-1 a marker: its last stable offset hung.
# Answers read from loaded state now wait until that state is committed.
UNCOMMITTED_COORDINATOR_STATE = [Fault(0.39, "partition", 5, duration=0.89),
                                 Fault(1.08, "disk", 4, duration=6.18, arg=errno.ENOSPC),
                                 Fault(2.18, "disk", 6, duration=3.56, arg=errno.EIO)]


def test_a_transaction_answered_from_uncommitted_coordinator_state_does_not_hang():
    r = run_seed(20337, safety_s=4.0, faults=UNCOMMITTED_COORDINATOR_STATE)
    assert r.acked > 0
