"""The share-partition simulation (sim/share.py) passes its seeds, and finds the bugs it is
there to find when they are put back."""

from __future__ import annotations

from broker.share import partition as sp
from broker.share.records import ACKNOWLEDGED, AVAILABLE, StateBatch
from sim.share import Violation, run_seed


def test_share_simulation_seeds_pass():
    for seed in range(40):  # more: .venv/bin/python -m sim.share --seeds 1000
        stats = run_seed(seed)
        assert stats["deliveries"] > 0


def _fails_some_seed(n: int = 60) -> str:
    for seed in range(n):
        try:
            run_seed(seed)
        except Violation as e:
            return str(e)
    raise AssertionError("no seed found the bug")


def test_finds_a_record_delivered_twice_at_once(monkeypatch):
    orig = sp.SharePartition.acquire

    def greedy(self, member, batches, max_records, now):
        for r in self.recs.values():  # the bug: acquired records count as available
            if r.state == sp.ACQUIRED:
                r.state, self.acquired = AVAILABLE, self.acquired - 1
        return orig(self, member, batches, max_records, now)
    monkeypatch.setattr(sp.SharePartition, "acquire", greedy)
    assert "holds its lock" in _fails_some_seed()


def test_finds_counts_lost_in_a_failover(monkeypatch):
    orig = sp.SharePartition.snapshot

    def forgetful(self):  # the bug: acquisitions are not persisted (counts one lower)
        start, bs = orig(self)
        return start, tuple(StateBatch(b.first_offset, b.last_offset, b.delivery_state,
                                       max(b.delivery_count - 1, 0) if b.delivery_state == AVAILABLE else b.delivery_count)
                            for b in bs)
    monkeypatch.setattr(sp.SharePartition, "snapshot", forgetful)
    msg = _fails_some_seed()
    assert "limit" in msg or "delivery count" in msg


def test_finds_an_acknowledged_record_redelivered(monkeypatch):
    orig = sp.SharePartition.load

    def amnesic(self, state_epoch, start, batches):  # the bug: acknowledged records load as available
        return orig(self, state_epoch, start, [StateBatch(b.first_offset, b.last_offset, AVAILABLE
                                                          if b.delivery_state == ACKNOWLEDGED else b.delivery_state,
                                                          b.delivery_count) for b in batches])
    monkeypatch.setattr(sp.SharePartition, "load", amnesic)
    assert "acknowledged and is delivered again" in _fails_some_seed()
