"""KIP-890 part 1 on the partition leader: before a transactional batch may start a transaction
on a partition, ask the transaction coordinator whether the partition is in the producer's
transaction (AddPartitionsToTxn v4+ ``verify_only``; with Produce v12, transaction version 2,
the leader adds it instead). Kafka's AddPartitionsToTxnManager.

The coordinator of a transactional id is the leader of its ``__transaction_state`` partition
(Java ``hashCode`` of the id, as for groups). Requests go over the inter-broker listener, one
in flight per coordinator broker; what queues up meanwhile goes out together in the next one.
A transactional id queued twice keeps its newer request: the older one is answered
INVALID_PRODUCER_EPOCH (older epoch) or NETWORK_EXCEPTION (same epoch; the client retries).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from broker.group.records import partition_for
from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from common.clock import SYSTEM, Clock
from common.errors import ErrorCode, KafkaError

log = logging.getLogger("krafty.replica.txn")

TRANSACTION_STATE_TOPIC = "__transaction_state"
ADD_PARTITIONS_TO_TXN_VERSION = 5
TopicPartition = tuple[str, int]
Endpoint = tuple[str, int]


class _Pending:
    __slots__ = ("txn_id", "producer_id", "epoch", "verify_only", "tps", "future")

    def __init__(self, txn_id: str, producer_id: int, epoch: int, verify_only: bool, tps: list[TopicPartition]):
        self.txn_id, self.producer_id, self.epoch, self.verify_only = txn_id, producer_id, epoch, verify_only
        self.tps = tps
        self.future: asyncio.Future = asyncio.get_running_loop().create_future()

    def fail(self, code: int) -> None:
        if not self.future.done():
            self.future.set_result({tp: code for tp in self.tps})


class TxnVerifier:
    def __init__(self, image: Callable[[], object], endpoint_of: Callable[[int], Endpoint | None],
                 security: Callable[[], object] = lambda: None, timeout_s: float = 30.0, clock: Clock = SYSTEM):
        self.image = image
        self.clock = clock
        self.endpoint_of = endpoint_of
        self.security = security
        self.timeout_s = timeout_s
        self._queued: dict[Endpoint, dict[str, _Pending]] = {}
        self._senders: dict[Endpoint, asyncio.Task] = {}
        self._conns: dict[Endpoint, KafkaConnection] = {}
        # this broker's own coordinator, asked in process (broker/apis/loopback.py); set by KafkaApis
        self.local = None
        self.local_broker_id: int | None = None

    def locate(self, txn_id: str) -> tuple[int, Endpoint | None]:
        """(error, endpoint) of the coordinator of ``txn_id``: COORDINATOR_NOT_AVAILABLE when the
        topic does not exist (no transaction can have started) or the partition has no live leader."""
        image = self.image()
        t = image.topics_by_name.get(TRANSACTION_STATE_TOPIC) if image is not None else None
        if t is None or not t.partitions:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        p = t.partitions.get(partition_for(txn_id, len(t.partitions)))
        b = image.brokers.get(p.leader) if p is not None and p.leader >= 0 else None
        ep = self.endpoint_of(p.leader) if b is not None and not b.fenced else None
        if ep is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        return ErrorCode.NONE, ep

    async def verify(self, txn_id: str, producer_id: int, epoch: int, tps: list[TopicPartition],
                     verify_only: bool = True) -> dict[TopicPartition, int]:
        """The partitions the coordinator did not confirm, with the error for each (empty: all
        verified). Coordinator-side codes as Kafka's AddPartitionsToTxnManager passes them on:
        PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH, TRANSACTION_ABORTABLE (for a client that
        predates it) INVALID_TXN_STATE, a connection failure NETWORK_EXCEPTION."""
        code, ep = self.locate(txn_id)
        if code:
            return {tp: code for tp in tps}
        pending = _Pending(txn_id, producer_id, epoch, verify_only, tps)
        queue = self._queued.setdefault(ep, {})
        old = queue.get(txn_id)
        if old is not None:
            if old.epoch > epoch:
                return {tp: ErrorCode.INVALID_PRODUCER_EPOCH for tp in tps}
            old.fail(ErrorCode.INVALID_PRODUCER_EPOCH if old.epoch < epoch else ErrorCode.NETWORK_EXCEPTION)
        queue[txn_id] = pending
        sender = self._senders.get(ep)
        if sender is None or sender.done():
            self._senders[ep] = asyncio.get_running_loop().create_task(self._send_loop(ep), name=f"txn-verify-{ep}")
        return await pending.future

    async def _send_loop(self, ep: Endpoint) -> None:
        while self._queued.get(ep):
            batch = self._queued.pop(ep)
            try:
                await self._send(ep, batch)
            except asyncio.CancelledError:
                for p in batch.values():
                    p.fail(ErrorCode.NETWORK_EXCEPTION)
                raise
            except Exception:
                log.exception("AddPartitionsToTxn to %s:%d failed", *ep)
                for p in batch.values():
                    p.fail(ErrorCode.NETWORK_EXCEPTION)

    async def _send(self, ep: Endpoint, batch: dict[str, _Pending]) -> None:
        txns = []
        for p in batch.values():
            topics: dict[str, list[int]] = {}
            for t, i in p.tps:
                topics.setdefault(t, []).append(i)
            txns.append({"transactional_id": p.txn_id, "producer_id": p.producer_id, "producer_epoch": p.epoch,
                         "verify_only": p.verify_only,
                         "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
        conn = self._conns.get(ep)
        if conn is None:
            if self.local is not None and ep == self.endpoint_of(self.local_broker_id):
                conn = self._conns[ep] = self.local
            else:
                conn = self._conns[ep] = KafkaConnection(ep[0], ep[1], client_id="broker-txn-verification",
                                                         security=self.security(), clock=self.clock)
        try:
            resp = await conn.request(ApiKey.ADD_PARTITIONS_TO_TXN, ADD_PARTITIONS_TO_TXN_VERSION,
                                      {"transactions": txns}, timeout=self.timeout_s)
        except (ConnectionError, KafkaError) as e:
            log.warning("AddPartitionsToTxn to the transaction coordinator at %s:%d failed: %s", *ep, e)
            for p in batch.values():
                p.fail(ErrorCode.NETWORK_EXCEPTION)
            return
        top = int(resp.error_code)
        if top:
            # the client must not see CLUSTER_AUTHORIZATION_FAILED: the verification did not complete
            code = ErrorCode.INVALID_TXN_STATE if top == ErrorCode.CLUSTER_AUTHORIZATION_FAILED else top
            log.error("AddPartitionsToTxn to %s:%d answered %s", *ep, ErrorCode(top).name)
            for p in batch.values():
                p.fail(code)
            return
        for r in resp.results_by_transaction:
            p = batch.get(r.transactional_id)
            if p is None or p.future.done():
                continue
            unverified = {}
            for t in r.topic_results:
                for pr in t.results_by_partition:
                    code = int(pr.partition_error_code)
                    if code == ErrorCode.PRODUCER_FENCED:
                        code = ErrorCode.INVALID_PRODUCER_EPOCH
                    elif code == ErrorCode.TRANSACTION_ABORTABLE and p.verify_only:
                        code = ErrorCode.INVALID_TXN_STATE
                    if code:
                        unverified[(t.name, int(pr.partition_index))] = code
            p.future.set_result(unverified)
        for p in batch.values():  # a transaction the response left out was not verified
            p.fail(ErrorCode.INVALID_TXN_STATE)

    async def close(self) -> None:
        for t in self._senders.values():
            t.cancel()
        for c in self._conns.values():
            c.close()


def produce_error(code: int, supports_epoch_bump: bool) -> tuple[ErrorCode, str | None]:
    """What a producer is told when verification fails (Kafka's ReplicaManager): retriable
    coordinator trouble becomes NOT_ENOUGH_REPLICAS, which every client retries without a
    metadata refresh (CONCURRENT_TRANSACTIONS too, before transaction version 2)."""
    code = ErrorCode(code)
    if code == ErrorCode.INVALID_TXN_STATE:
        return code, "Partition was not added to the transaction"
    if code in (ErrorCode.NETWORK_EXCEPTION, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR) or (
            code == ErrorCode.CONCURRENT_TRANSACTIONS and not supports_epoch_bump):
        return (ErrorCode.NOT_ENOUGH_REPLICAS, "Unable to verify the partition has been added to the transaction. "
                f"Underlying error: {ErrorCode(code).name}")
    return code, None
