"""The transaction coordinator's asyncio shell: ``__transaction_state`` through the shared
``CoordinatorRuntime`` (load on leadership, unload when it moves, acks=all writes, topic
creation), the pure ``TxnCoordinatorCore`` for every decision, the marker sender
(markers.py), producer ids from the broker's allocator, and the two timers (abort timed-out
transactions, expire idle transactional ids).

Each request builds its effects in the core; appends go to the log at once and their results
go back to the core when committed (or failed); replies resolve the requests' futures.
"""

from __future__ import annotations

import asyncio
import logging

from broker.coordinator_runtime import CoordinatorRuntime, TopicSpec
from broker.txn.markers import TxnMarkerSender
from broker.txn.state import TV_0, Append, Effects, Now, TxnConfig, TxnCoordinatorCore, TxnShard
from common.clock import SYSTEM, Clock
from common.errors import ErrorCode, KafkaError

log = logging.getLogger("krafty.txn")

TXN_TOPIC = "__transaction_state"
TV_FEATURE = "transaction.version"
# An AddPartitionsToTxn/AddOffsetsToTxn that arrives while the previous transaction's markers are
# still being written would get CONCURRENT_TRANSACTIONS, and the client would retry after its
# backoff (librdkafka and the Java client: 20 ms or more, longer than the markers take here). It
# waits this long at most for the transaction to complete instead (parked in the core, see
# TxnCoordinatorCore.add_partitions), then is answered as Kafka answers.
CONCURRENT_WAIT_S = 0.5
NO_ID = (ErrorCode.NONE, -1, -1)


class TransactionCoordinator:
    def __init__(self, config, broker_id: int, replicas, loader, controller, producer_ids, clock: Clock = SYSTEM):
        self.config = config
        self.broker_id = broker_id
        self.loader = loader
        self.producer_ids = producer_ids
        self.clock = clock
        self.core = TxnCoordinatorCore(TxnConfig(
            max_timeout_ms=config["transaction.max.timeout.ms"],
            id_expiration_ms=config["transactional.id.expiration.ms"],
            num_partitions=config["transaction.state.log.num.partitions"]))
        min_isr = config["transaction.state.log.min.isr"]
        # Kafka's transactionTopicConfigs; min.insync.replicas capped by the replication factor
        # the live brokers allowed (as the replication factor itself is)
        spec = TopicSpec(TXN_TOPIC, config["transaction.state.log.num.partitions"],
                         config["transaction.state.log.replication.factor"],
                         lambda rf: {"cleanup.policy": "compact", "compression.type": "uncompressed",
                                     "unclean.leader.election.enable": "false",
                                     "min.insync.replicas": str(min(min_isr, rf)),
                                     "segment.bytes": str(config["transaction.state.log.segment.bytes"])})
        self.runtime = CoordinatorRuntime(spec, self, broker_id=broker_id, replicas=replicas, loader=loader,
                                          controller=controller,
                                          load_buffer=config["transaction.state.log.load.buffer.size"], clock=clock)
        self.markers = TxnMarkerSender(self.core, loader, replicas.fetchers, broker_id, self._run,
                                       request_timeout_ms=config["request.timeout.ms"], clock=clock)
        self._tasks: list[asyncio.Task] = []
        self.active = False

    def now(self) -> Now:
        return Now(self.clock.wall_ms(), self.clock.monotonic_ms())

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._every(self.config["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
                                         self._abort_timed_out)),
            loop.create_task(self._every(self.config["transaction.remove.expired.transaction.cleanup.interval.ms"],
                                         lambda: self._run(self.core.expire_transactional_ids(self.now())))),
        ]
        self.markers.start()
        self.runtime.start()
        self.active = True

    async def close(self) -> None:
        self.active = False
        for t in self._tasks:
            t.cancel()
        await self.markers.close()
        self.runtime.close()

    # --- CoordinatorRuntime hooks --------------------------------------------------------------
    def on_metadata(self, delta, image) -> None:
        self.core.config.num_partitions = self.runtime.num_partitions()
        self.core.config.tv_level = image.features.get(TV_FEATURE, TV_0)
        self.runtime.on_metadata(delta, image)
        self.markers.wake()  # partition leaders may have moved

    def new_shard(self, pid: int, epoch: int) -> TxnShard:
        self._run(self.core.begin_load(pid, epoch))
        return TxnShard(pid, epoch)

    def replay_marker(self, shard: TxnShard, producer_id: int, commit: bool) -> None:
        pass  # __transaction_state holds no transactional records

    def replay(self, shard: TxnShard, key: bytes | None, value: bytes | None, offset: int = -1,
               producer_id: int = -1) -> None:
        shard.replay(key, value)

    def on_loaded(self, pid: int, epoch: int, shard: TxnShard, records: int, bad: int, seconds: float) -> None:
        log.log(logging.INFO if records else logging.DEBUG,
                "%s-%d: loaded %d transactional ids (%d records%s) in epoch %d in %.3fs", TXN_TOPIC, pid,
                len(shard.txns), records, f", {bad} undecodable" if bad else "", epoch, seconds)
        self._run(self.core.complete_load(pid, epoch, shard, self.now()))

    def on_unloaded(self, pid: int, epoch: int, shard: TxnShard | None) -> None:
        self._run(self.core.unload(pid))
        log.debug("%s-%d: unloaded transaction coordinator state of epoch %d", TXN_TOPIC, pid, epoch)

    # --- effects -----------------------------------------------------------------------------------
    def _run(self, fx: Effects) -> None:
        for msg in fx.log:
            log.info("%s", msg)
        for waiter, resp in fx.replies:
            if not waiter.done():
                waiter.set_result(resp)
        for a in fx.appends:
            self._append(a)
        if fx.markers:
            self.markers.wake()

    def _append(self, a: Append) -> None:
        committed: list[int] = []  # its result, if it comes before on_appended ran

        def done(err: int) -> None:
            if in_log:
                self._run(self.core.on_append_done(a, err, self.now()))
            else:
                committed.append(err)
        in_log = False
        err, fut = self.runtime.append(a.partition, [a.record(self.core.config.tv_level)],
                                       timeout_ms=max(a.timeout_ms, 1), epoch=a.coordinator_epoch, on_done=done)
        if fut is None:
            self._run(self.core.on_append_done(a, err, self.now()))
            return
        self._run(self.core.on_appended(a, self.now()))  # in the log: a Complete* is taken as done
        in_log = True
        if committed:  # acknowledged at once (one replica, or the watermark already past it)
            self._run(self.core.on_append_done(a, committed[0], self.now()))

    async def _call(self, build, needs_pid: bool = True, tid: str | None = None):
        """Run one request through the core: ``build(waiter, new_pid)`` returns its effects."""
        waiter = asyncio.get_running_loop().create_future()
        fx = build(waiter, None)
        if fx.need_producer_id and needs_pid:
            try:
                pid = await self.producer_ids.next_id()
            except KafkaError as e:
                return e.code if e.code != ErrorCode.NOT_CONTROLLER else ErrorCode.COORDINATOR_NOT_AVAILABLE, None
            fx = build(waiter, pid)
        self._run(fx)
        return await self._answer(fx, waiter, tid)

    async def _answer(self, fx: Effects, waiter: asyncio.Future, tid: str | None) -> tuple[int, object]:
        """``(NONE, the request's reply)`` once the core answered (``fx`` ran). With ``tid``: a
        success answered at once from the in-memory state (no write of its own, e.g. partitions
        already in the transaction, a retried EndTxn) waits until that state is committed, and
        becomes the error if it cannot be (its records may then be lost)."""
        if tid is not None and waiter.done() and not fx.appends:
            res = waiter.result()
            if (res if isinstance(res, int) else res[0]) == ErrorCode.NONE:
                err = await self.runtime.await_state_committed(self.partition_for(tid), self.config["request.timeout.ms"])
                if err:
                    return err, None
            return ErrorCode.NONE, res
        return ErrorCode.NONE, await waiter

    # --- requests ------------------------------------------------------------------------------------
    async def init_producer_id(self, tid: str, timeout_ms: int, expected: tuple[int, int] | None) -> tuple:
        err, res = await self._call(lambda w, pid: self.core.init_producer_id(w, tid, timeout_ms, expected, self.now(),
                                                                             new_pid=pid))
        return res if not err else (err, -1, -1)

    async def add_partitions(self, tid: str, producer_id: int, epoch: int, partitions, client_tv: int = TV_0) -> int:
        waiter = asyncio.get_running_loop().create_future()
        fx = self.core.add_partitions(waiter, tid, producer_id, epoch, partitions, self.now(), client_tv, park=True)
        self._run(fx)
        if fx.parked:
            # the previous transaction's markers are being written: it goes on the moment they are
            # done (the core appends its Ongoing right behind the CompleteCommit); a wait longer
            # than CONCURRENT_WAIT_S is answered as Kafka answers at once
            try:
                await asyncio.wait_for(asyncio.shield(waiter), CONCURRENT_WAIT_S)
            except TimeoutError:
                if self.core.unpark(tid, waiter):
                    return ErrorCode.CONCURRENT_TRANSACTIONS
            return await waiter
        err, res = await self._answer(fx, waiter, tid)
        return err or res

    def verify_partitions(self, tid: str, producer_id: int, epoch: int, partitions) -> dict:
        return self.core.verify_partitions(tid, producer_id, epoch, partitions)

    async def end_txn(self, tid: str, producer_id: int, epoch: int, commit: bool, client_tv: int = TV_0) -> tuple:
        err, res = await self._call(lambda w, pid: self.core.end_txn(w, tid, producer_id, epoch, commit, self.now(),
                                                                     client_tv, new_pid=pid), tid=tid)
        return res if not err else (err, -1, -1)

    def describe(self, tid: str) -> dict:
        if not self.active:
            return dict(self.core.describe(""), transactional_id=tid, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return self.core.describe(tid)

    def list_transactions(self, states, producer_ids, duration_ms: int) -> tuple[int, list, list]:
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, [], []
        return self.core.list_transactions(states, producer_ids, duration_ms, self.now())

    def partition_for(self, tid: str) -> int:
        return self.runtime.partition_for(tid)

    async def ensure_topic(self) -> int:
        return await self.runtime.ensure_topic()

    # --- timers ------------------------------------------------------------------------------------
    def _abort_timed_out(self) -> None:
        self._run(self.core.abort_timed_out(self.now()))
        self._run(self.core.retry_complete())

    async def _every(self, interval_ms: int, fn) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                fn()
            except Exception:
                log.exception("transaction coordinator timer failed")


__all__ = ["TransactionCoordinator", "TXN_TOPIC"]
