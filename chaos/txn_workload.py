"""The transactional workload of the chaos harness (``--workload txn``): transactional producers
that write transactions of several unique integers across the partitions of their own topic and
commit or abort at random, read_committed consumers, and the final read_committed read after the
heal. What they write down is judged by ``chaos/txn_checker.py`` (its docstring has the event
shapes)."""

from __future__ import annotations

import itertools
import random
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from chaos.history import History
from chaos.workload import ConsumerWorker, Counter, Worker, _NullLogger

TXN_TOPIC = "chaos-txn"
TXN_TIMEOUT_MS = 20000  # an instance that dies leaves its transaction open this long at most


class TxnProducerWorker(Worker):
    """One transactional id; an instance that hits a fatal error (fenced, timed out by the
    coordinator) is replaced by a new one with the same id, which fences the old one."""

    def __init__(self, idx: int, bootstrap: str, topic: str, partitions: int, hist: History, counter: Counter,
                 rng: random.Random, rate: float, abort_ratio: float = 0.3):
        super().__init__(f"txn-producer-{idx}", hist)
        self.idx, self.bootstrap, self.topic, self.partitions = idx, bootstrap, topic, partitions
        self.counter, self.rng, self.rate, self.abort_ratio = counter, rng, rate, abort_ratio
        self.committed = 0
        self.aborted = 0
        self.failed = 0

    def body(self) -> None:
        for gen in itertools.count(1):
            if self.stopping.is_set():
                return
            self._instance(f"tp{self.idx}.{gen}")

    def _instance(self, proc: str) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": f"chaos-txn-{self.idx}",
                      "transaction.timeout.ms": TXN_TIMEOUT_MS, "linger.ms": 5, "message.timeout.ms": 15000,
                      "request.timeout.ms": 10000, "topic.metadata.refresh.interval.ms": 2000,
                      "logger": _NullLogger()})
        try:
            if not self._call(proc, None, "init", lambda: p.init_transactions(30)):
                return
            for n in itertools.count(1):
                if self.stopping.is_set():
                    return
                if not self._transaction(p, proc, f"{proc}:{n}"):
                    return  # a fatal error: a new instance takes over
        finally:
            try:
                p.flush(5)
            except Exception:  # noqa: BLE001 - a dying instance
                pass

    def _call(self, proc: str, txn: str | None, what: str, fn) -> bool:
        """Runs ``fn`` with retries of retriable errors; False after a fatal one (recorded)."""
        for _ in range(5):
            try:
                fn()
                return True
            except KafkaException as e:
                err = e.args[0]
                if err.retriable() and not self.stopping.is_set():
                    time.sleep(0.5)
                    continue
                self.hist.add("client-error", process=proc, txn=txn, op=what, error=str(err), fatal=err.fatal())
                return False
        self.hist.add("client-error", process=proc, txn=txn, op=what, error="retries exhausted")
        return False

    def _transaction(self, p: Producer, proc: str, txn: str) -> bool:
        try:
            p.begin_transaction()
        except KafkaException as e:
            self.hist.add("client-error", process=proc, txn=txn, op="begin", error=str(e.args[0]))
            return False
        self.hist.add("txn", type="begin", process=proc, txn=txn)
        for _ in range(self.rng.randint(2, 8)):
            v = self.counter.next()
            part = self.rng.randrange(self.partitions)
            try:
                p.produce(self.topic, value=str(v).encode(), partition=part)
            except (BufferError, KafkaException):
                break  # the transaction goes on with what it has
            self.hist.add("txn-send", process=proc, txn=txn, tp=f"{self.topic}/{part}", value=v)
            p.poll(0)
        time.sleep(self.rng.uniform(0, 2.0 / self.rate))
        if self.rng.random() < self.abort_ratio:
            self.hist.add("txn", type="abort-invoke", process=proc, txn=txn)
            try:
                p.abort_transaction(30)
                self.hist.add("txn", type="abort-ok", process=proc, txn=txn)
                self.aborted += 1
                return True
            except KafkaException as e:
                self.hist.add("txn", type="abort-fail", process=proc, txn=txn, error=str(e.args[0]))
                return False
        self.hist.add("txn", type="commit-invoke", process=proc, txn=txn)
        for _ in range(5):
            try:
                p.commit_transaction(30)
                self.hist.add("txn", type="commit-ok", process=proc, txn=txn)
                self.committed += 1
                return True
            except KafkaException as e:
                err = e.args[0]
                if err.retriable():  # librdkafka: commit_transaction() may be called again
                    continue
                if err.txn_requires_abort():
                    # librdkafka raises an abortable error from commit_transaction() only when it
                    # will not send EndTxn(commit) (failed deliveries, an abortable error earlier in
                    # the transaction) or the coordinator refused it: the transaction is aborted,
                    # whether the abort below gets through or the coordinator aborts it at its timeout
                    self.hist.add("txn", type="commit-fail", process=proc, txn=txn, error=str(err), definite=True)
                    self.failed += 1
                    try:
                        p.abort_transaction(30)
                        return True
                    except KafkaException as e2:
                        # INVALID_TXN_STATE, as from Kafka: librdkafka sends EndTxn(abort) after an
                        # AddPartitionsToTxn it got no answer to, and a coordinator that never wrote
                        # that transaction (still CompleteCommit/CompleteAbort) refuses an abort
                        self.hist.add("txn", type="abort-fail", process=proc, txn=txn, error=str(e2.args[0]))
                        return False
                self.hist.add("txn", type="commit-fail", process=proc, txn=txn, error=str(err))
                self.failed += 1
                return False
        self.hist.add("txn", type="commit-fail", process=proc, txn=txn, error="retries exhausted")
        self.failed += 1
        return False


def txn_reader(idx: int, bootstrap: str, topic: str, partitions: int, hist: History,
               rng: random.Random) -> ConsumerWorker:
    """A read_committed reader of every partition in sessions: ``txn-poll`` events (and
    ``txn-assign``), which the plain checker leaves to chaos/txn_checker.py."""
    return ConsumerWorker(idx, bootstrap, topic, partitions, hist, rng, isolation="read_committed", prefix="txn-")


def final_read(bootstrap: str, hist: History, topic: str, partitions: int, t_heal: float, timeout: float) -> None:
    """After the heal: wait until each partition's last stable offset (read_committed end) reaches
    its high watermark, then read it with read_committed from its start to there."""
    rc = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-txn-final", "enable.auto.commit": False,
                   "isolation.level": "read_committed", "logger": _NullLogger()})
    ru = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-txn-final-ru", "logger": _NullLogger(),
                   "isolation.level": "read_uncommitted"})
    try:
        for pid in range(partitions):
            tp, tpo = f"{topic}/{pid}", TopicPartition(topic, pid)
            deadline = time.monotonic() + timeout
            lso = high = low = None
            settled = None
            while time.monotonic() < deadline:
                try:
                    low, lso = rc.get_watermark_offsets(tpo, timeout=5)
                    high = ru.get_watermark_offsets(tpo, timeout=5)[1]
                except KafkaException:
                    time.sleep(1)
                    continue
                if lso == high:
                    settled = round(hist.now() - t_heal, 3)
                    break
                time.sleep(0.5)
            if settled is None:
                hist.add("txn-final-read", tp=tp, msgs=[], complete=False, lso=lso, high=high, settled_s=None)
                continue
            msgs: list[list[int]] = []
            rc.assign([TopicPartition(topic, pid, low)])
            pos = low
            while pos < lso and time.monotonic() < deadline:
                for m in rc.consume(1000, 1.0):
                    if m.error() is None and m.offset() < lso:
                        msgs.append([m.offset(), int(m.value())])
                pos = max([pos] + [p.offset for p in rc.position([TopicPartition(topic, pid)]) if p.offset >= 0])
            rc.unassign()
            hist.add("txn-final-read", tp=tp, msgs=msgs, complete=pos >= lso and low == 0, lso=lso, high=high,
                     settled_s=settled)
    finally:
        rc.close()
        ru.close()


__all__ = ["TXN_TOPIC", "TxnProducerWorker", "txn_reader", "final_read"]
