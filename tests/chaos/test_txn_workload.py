"""The transactional chaos workload records what librdkafka's calls answered, as the checker reads
it (chaos/txn_checker.py), with a fake producer: no cluster."""

from __future__ import annotations

import random

from confluent_kafka import KafkaError, KafkaException

from chaos.history import History
from chaos.txn_checker import transactions
from chaos.txn_workload import TxnProducerWorker
from chaos.workload import Counter


class FakeProducer:
    """begin/produce succeed; commit_transaction and abort_transaction raise what they are given."""

    def __init__(self, commit_error=None, abort_error=None):
        self.commit_error, self.abort_error = commit_error, abort_error
        self.aborts = 0

    def begin_transaction(self):
        pass

    def produce(self, *_a, **_k):
        pass

    def poll(self, _t):
        return 0

    def commit_transaction(self, _t):
        if self.commit_error is not None:
            raise KafkaException(self.commit_error)

    def abort_transaction(self, _t):
        self.aborts += 1
        if self.abort_error is not None:
            raise KafkaException(self.abort_error)


def run_one(p: FakeProducer) -> tuple[bool, list[dict]]:
    hist = History()
    w = TxnProducerWorker(0, "unused:1", "chaos-txn", 3, hist, Counter(), random.Random(1), rate=1e6, abort_ratio=0.0)
    ok = w._transaction(p, "tp0.1", "tp0.1:1")
    return ok, hist.snapshot()


def test_an_abortable_commit_error_whose_abort_is_refused_is_a_definite_abort():
    # A commit that flushed into a partition (deliveries timed out: txn_requires_abort, so
    # librdkafka never sends EndTxn(commit)), then an abort answered INVALID_TXN_STATE: librdkafka
    # sends EndTxn(abort) after an AddPartitionsToTxn it got no answer to, and a coordinator that
    # never wrote that transaction refuses an abort in CompleteCommit, as Kafka's does.
    # The transaction is aborted: its commit failed definitely, not with an unknown outcome.
    timed_out = KafkaError(KafkaError._MSG_TIMED_OUT, "3 message(s) timed out on chaos-txn [0]",
                           txn_requires_abort=True)
    invalid = KafkaError(KafkaError.INVALID_TXN_STATE, "Failed to end transaction", fatal=True)
    p = FakeProducer(commit_error=timed_out, abort_error=invalid)
    ok, hist = run_one(p)
    assert not ok  # a fatal error: the instance is replaced
    assert p.aborts == 1
    kinds = [(op["type"], op.get("definite", False)) for op in hist if op["f"] == "txn"]
    assert kinds == [("begin", False), ("commit-invoke", False), ("commit-fail", True), ("abort-fail", False)]
    fail = next(op for op in hist if op.get("type") == "commit-fail")
    assert "timed out" in fail["error"]  # the commit's own error, not the abort's
    txns, _ = transactions(hist)
    assert txns["tp0.1:1"].outcome == "aborted"


def test_an_abortable_commit_error_then_an_abort_is_a_definite_abort():
    p = FakeProducer(commit_error=KafkaError(KafkaError._MSG_TIMED_OUT, "timed out", txn_requires_abort=True))
    ok, hist = run_one(p)
    assert ok and p.aborts == 1
    txns, _ = transactions(hist)
    assert txns["tp0.1:1"].outcome == "aborted"


def test_a_fatal_commit_error_leaves_the_outcome_unknown():
    p = FakeProducer(commit_error=KafkaError(KafkaError.PRODUCER_FENCED, "fenced", fatal=True))
    ok, hist = run_one(p)
    assert not ok and p.aborts == 0
    txns, _ = transactions(hist)
    assert txns["tp0.1:1"].outcome == "unknown"
