"""The transaction coordinator's simulation (sim/txn): the real TxnCoordinatorCore under
coordinator failovers and restarts, lost and duplicated markers, retrying producers, zombies,
timeouts and clock steps, over many seeds; and the checker catches known bugs put back in."""

from __future__ import annotations

import pytest

from broker.txn import state as st
from common.errors import ErrorCode as E
from sim.txn.world import InvariantViolation, run_seed

SEEDS = 200
CHUNK = 50


@pytest.mark.parametrize("start", range(0, SEEDS, CHUNK))
def test_seeds_keep_the_invariants_and_finish_every_transaction(start):
    results = [run_seed(seed) for seed in range(start, start + CHUNK)]
    assert sum(r.committed for r in results) > CHUNK  # real work was done
    assert {r.tv_level for r in results} == {st.TV_0, st.TV_2}  # both transaction versions


def test_a_seed_replays_exactly():
    def trace(seed):
        lines: list[str] = []
        r = run_seed(seed, trace=lines.append)
        return lines, r

    assert trace(7) == trace(7)
    assert trace(7)[0] != trace(8)[0]


def _first_failure(seeds=range(300)):
    for seed in seeds:
        try:
            run_seed(seed)
        except (InvariantViolation, AssertionError) as e:
            return str(e)
    return None


def test_checker_catches_partition_leaders_that_do_not_verify(monkeypatch):
    """Without KIP-890's verification a batch that arrives after its transaction's abort
    opens a transaction no coordinator will ever end (a hanging transaction), or joins the
    producer's next one."""
    monkeypatch.setattr(st.TxnCoordinatorCore, "verify_partitions",
                        lambda self, tid, pid, epoch, parts: dict.fromkeys(parts, E.NONE))
    failure = _first_failure() or ""
    assert "hanging" in failure or "went into transaction" in failure, failure


def test_checker_catches_markers_counted_on_retriable_answers(monkeypatch):
    monkeypatch.setattr(st, "MARKER_DONE", st.MARKER_DONE | st.MARKER_RETRIABLE)
    assert _first_failure() is not None


def test_checker_catches_a_new_producer_that_does_not_bump_the_epoch(monkeypatch):
    def no_bump(self, timeout_ms, expected, now):
        return self._transit(st.TxnState.EMPTY, producer_epoch=max(self.producer_epoch, 0), last_producer_epoch=-1,
                             timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1, last_update_ms=now.wall)
    monkeypatch.setattr(st.TxnMetadata, "prepare_increment_producer_epoch", no_bump)
    assert _first_failure() is not None


def test_checker_catches_a_coordinator_that_forgets_prepared_transactions_when_loading(monkeypatch):
    def load(self, partition, epoch, shard, now):
        self.loading.pop(partition, None)
        self.shards[partition] = shard
        return st.Effects()
    monkeypatch.setattr(st.TxnCoordinatorCore, "complete_load", load)
    assert _first_failure() is not None
