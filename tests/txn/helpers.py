"""A test harness around the pure TxnCoordinatorCore: it plays the shell ("commits" appends at
once, or holds or fails them; answers markers) and records every reply and every record."""

from __future__ import annotations

import itertools

from broker.txn import records as rec
from broker.txn.state import Append, Effects, MarkerJob, Now, TxnConfig, TxnCoordinatorCore, TxnShard
from common.errors import ErrorCode


class Waiter:
    _ids = itertools.count()

    def __init__(self, kind: str):
        self.kind, self.id, self.result, self.answers = kind, next(self._ids), None, 0

    def __repr__(self) -> str:
        return f"<Waiter {self.kind}#{self.id} {self.result}>"


class Harness:
    """One broker's core leading ``partitions`` partitions of __transaction_state in epoch 5."""

    def __init__(self, *, tv_level: int = 0, num_partitions: int = 1, max_timeout_ms: int = 900_000,
                 id_expiration_ms: int = 604_800_000, wall: int = 1_700_000_000_000, mono: int = 50_000):
        self.core = TxnCoordinatorCore(TxnConfig(max_timeout_ms, id_expiration_ms, num_partitions, tv_level))
        self.wall, self.mono = wall, mono
        self.next_pid = 1000
        self.log: list[tuple[int, bytes, bytes | None]] = []  # (partition, key, value) committed
        self.held: list[Append] = []
        self.hold = False  # appends wait in self.held until release()
        self.fail: int = 0  # error code for every append
        self.messages: list[str] = []
        self.markers_pending = False
        for p in range(num_partitions):
            self.core.begin_load(p, 5)
            self.run(self.core.complete_load(p, 5, TxnShard(p, 5), self.now))

    @property
    def now(self) -> Now:
        return Now(self.wall, self.mono)

    def advance(self, ms: int) -> None:
        self.wall += ms
        self.mono += ms

    # --- the shell ---------------------------------------------------------------------------
    def run(self, fx: Effects) -> None:
        for waiter, resp in fx.replies:
            waiter.result = resp
            waiter.answers += 1
            assert waiter.answers == 1, f"{waiter} answered twice"
        self.messages += fx.log
        self.markers_pending |= fx.markers
        for a in fx.appends:
            if self.hold:
                self.held.append(a)
            else:
                self.finish(a, self.fail)

    def finish(self, a: Append, err: int = 0) -> None:
        if not err:
            key, value = a.record(self.core.config.tv_level)
            self.log.append((a.partition, key, value))
        self.run(self.core.on_append_done(a, err, self.now))

    def release(self, err: int = 0) -> None:
        held, self.held = self.held, []
        for a in held:
            self.finish(a, err)

    def call(self, method: str, *args, **kwargs):
        w = Waiter(method)
        fx = getattr(self.core, method)(w, *args, now=self.now, **kwargs)
        if fx.need_producer_id:
            self.next_pid += 1
            fx = getattr(self.core, method)(w, *args, now=self.now, new_pid=self.next_pid, **kwargs)
        self.run(fx)
        return w.result

    # --- requests ------------------------------------------------------------------------------
    def init(self, tid: str = "t1", timeout_ms: int = 60_000, expected: tuple[int, int] | None = None):
        return self.call("init_producer_id", tid, timeout_ms, expected)

    def add(self, tid: str, pid: int, epoch: int, *tps, tv: int = 0):
        return self.call("add_partitions", tid, pid, epoch, list(tps) or [("topic", 0)], client_tv=tv)

    def end(self, tid: str, pid: int, epoch: int, commit: bool, tv: int = 0):
        return self.call("end_txn", tid, pid, epoch, commit, client_tv=tv)

    # --- markers -------------------------------------------------------------------------------
    def jobs(self) -> list[MarkerJob]:
        return self.core.outstanding_markers()

    def ack_markers(self, err: int = 0) -> list[MarkerJob]:
        """Answer every outstanding marker with ``err``; returns the jobs answered."""
        jobs = self.jobs()
        for j in jobs:
            for tp in sorted(j.partitions):
                self.run(self.core.on_marker_result(j.transactional_id, j.coordinator_epoch, tp, err))
        return jobs

    def md(self, tid: str = "t1"):
        return self.core.lookup(tid)[2]

    def records(self, tid: str = "t1") -> list:
        """The decoded values written for ``tid`` (None: tombstone)."""
        key = rec.transaction_key(tid)
        return [None if v is None else rec.decode_value(v) for _, k, v in self.log if k == key]


NONE = ErrorCode.NONE
