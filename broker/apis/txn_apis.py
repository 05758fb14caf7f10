"""Handlers of the transaction coordinator's APIs: InitProducerId with a transactional id,
AddPartitionsToTxn (v0-3 from producers; v4-5 batched from partition leaders, including
KIP-890's verifyOnly), AddOffsetsToTxn, EndTxn, DescribeTransactions and ListTransactions.
They authorize as Kafka's KafkaApis does (TransactionalId Write/Describe, Topic Write, Group
Read, ClusterAction for broker requests), ask the ``TransactionCoordinator``, and answer in the
requested version (PRODUCER_FENCED is INVALID_PRODUCER_EPOCH for clients that predate it)."""

from __future__ import annotations

import logging

from broker.group.coordinator import OFFSETS_TOPIC
from broker.protocol.apis import ApiKey
from broker.txn.coordinator import TransactionCoordinator
from broker.txn.state import TV_0, TV_2
from common.errors import ErrorCode
from common.topic_names import INTERNAL_TOPICS
from metadata.acl import AclOperation as Op
from metadata.acl import ResourceType as RT

log = logging.getLogger("krafty.apis.txn")


def _fenced_for(ver: int, first_with_producer_fenced: int, code: int) -> int:
    """Clients before PRODUCER_FENCED (KIP-588) get INVALID_PRODUCER_EPOCH, as from Kafka."""
    if code == ErrorCode.PRODUCER_FENCED and ver < first_with_producer_fenced:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


class TxnApis:
    def __init__(self, apis, coordinator: TransactionCoordinator):
        self.apis = apis  # KafkaApis: decode(), authorization, the metadata image, the group coordinator
        self.coordinator = coordinator

    def handlers(self) -> dict:
        return {
            ApiKey.ADD_PARTITIONS_TO_TXN: self.add_partitions_to_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: self.add_offsets_to_txn,
            ApiKey.END_TXN: self.end_txn,
            ApiKey.DESCRIBE_TRANSACTIONS: self.describe_transactions,
            ApiKey.LIST_TRANSACTIONS: self.list_transactions,
        }

    # --- InitProducerId (the transactional half; broker/apis/producer_apis.py calls it) ------------
    async def init_producer_id(self, ctx, req, ver: int) -> dict:
        """After the caller checked Write on the transactional id."""
        pid, epoch = (req.producer_id, req.producer_epoch) if ver >= 3 else (-1, -1)
        if (pid == -1) != (epoch == -1):
            code, pid, epoch = ErrorCode.INVALID_REQUEST, -1, -1
        else:
            code, pid, epoch = await self.coordinator.init_producer_id(
                req.transactional_id, int(req.transaction_timeout.total_seconds() * 1000),
                None if pid == -1 else (pid, epoch))
        return {"throttle_time": 0, "error_code": int(_fenced_for(ver, 4, code)), "producer_id": pid,
                "producer_epoch": epoch}

    # --- AddPartitionsToTxn -------------------------------------------------------------------------
    async def add_partitions_to_txn(self, ctx, body, ver):
        req = self.apis.decode(ctx, body, ver)
        if ver < 4:
            topics = [(t.name, list(t.partitions)) for t in req.v3_and_below_topics]
            results = await self._add_one(ctx, ver, req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
                                          req.v3_and_below_producer_epoch, False, topics)
            return {"throttle_time": 0, "results_by_topic_v3_and_below": results}
        # versions 4+ come from partition leaders only (KIP-890)
        if not self.apis.authorize_cluster(ctx, Op.CLUSTER_ACTION):
            return {"throttle_time": 0, "error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                    "results_by_transaction": []}
        return await self.add_partitions_for_brokers(ctx, req, ver)

    async def add_partitions_for_brokers(self, ctx, req, ver: int) -> dict:
        """AddPartitionsToTxn v4+ (a decoded request from partition leaders), once authorized;
        this broker's own leaders call it in process (broker/apis/loopback.py)."""
        out = []
        for txn in req.transactions:
            topics = [(t.name, list(t.partitions)) for t in txn.topics]
            results = await self._add_one(ctx, ver, txn.transactional_id, txn.producer_id, txn.producer_epoch,
                                          txn.verify_only, topics)
            out.append({"transactional_id": txn.transactional_id, "topic_results": results})
        return {"throttle_time": 0, "error_code": 0, "results_by_transaction": out}

    async def _add_one(self, ctx, ver: int, tid: str, producer_id: int, epoch: int, verify_only: bool,
                       topics: list[tuple[str, list[int]]]) -> list[dict]:
        parts = [(t, p) for t, ps in topics for p in ps]

        def results(codes: dict) -> list[dict]:
            by_topic: dict[str, list[dict]] = {}
            for (t, p), code in codes.items():
                by_topic.setdefault(t, []).append({"partition_index": p, "partition_error_code": int(code)})
            return [{"name": t, "results_by_partition": rs} for t, rs in by_topic.items()]
        if ver < 4 and not self.apis.authorize(ctx, Op.WRITE, RT.TRANSACTIONAL_ID, tid):
            return results(dict.fromkeys(parts, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
        image = self.apis.image
        failed: dict[tuple[str, int], int] = {}
        for t, p in parts:
            # clients need Write on the topics (internal topics are never theirs to write)
            if ver < 4 and (t in INTERNAL_TOPICS or not self.apis.authorize(ctx, Op.WRITE, RT.TOPIC, t)):
                failed[(t, p)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif (ti := image.topics_by_name.get(t)) is None or p not in ti.partitions:
                failed[(t, p)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if failed:
            # one failed partition fails the request; the others were not attempted
            return results({tp: failed.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in parts})
        if verify_only:
            return results(self.coordinator.verify_partitions(tid, producer_id, epoch, parts))
        # a partition leader's implicit add (KIP-890 part 2) is for a transaction version 2 producer
        tv = TV_2 if ver >= 5 else TV_0
        code = await self.coordinator.add_partitions(tid, producer_id, epoch, parts, tv)
        return results(dict.fromkeys(parts, _fenced_for(ver, 2, code)))

    # --- AddOffsetsToTxn ------------------------------------------------------------------------
    async def add_offsets_to_txn(self, ctx, body, ver):
        req = self.apis.decode(ctx, body, ver)
        if not self.apis.authorize(ctx, Op.WRITE, RT.TRANSACTIONAL_ID, req.transactional_id):
            code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        elif not self.apis.authorize(ctx, Op.READ, RT.GROUP, req.group_id):
            code = ErrorCode.GROUP_AUTHORIZATION_FAILED
        else:
            tp = (OFFSETS_TOPIC, self.apis.group_coordinator.partition_for(req.group_id))
            code = await self.coordinator.add_partitions(req.transactional_id, req.producer_id, req.producer_epoch,
                                                         [tp], TV_0)
        return {"throttle_time": 0, "error_code": int(_fenced_for(ver, 2, code))}

    # --- EndTxn ---------------------------------------------------------------------------------
    async def end_txn(self, ctx, body, ver):
        req = self.apis.decode(ctx, body, ver)
        if not self.apis.authorize(ctx, Op.WRITE, RT.TRANSACTIONAL_ID, req.transactional_id):
            return {"throttle_time": 0, "error_code": int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
                    "producer_id": -1, "producer_epoch": -1}
        # EndTxn v5 is sent only by transaction version 2 producers (KIP-890 part 2)
        code, pid, epoch = await self.coordinator.end_txn(req.transactional_id, req.producer_id, req.producer_epoch,
                                                          req.committed, TV_2 if ver >= 5 else TV_0)
        return {"throttle_time": 0, "error_code": int(_fenced_for(ver, 2, code)), "producer_id": pid,
                "producer_epoch": epoch}

    # --- DescribeTransactions / ListTransactions ----------------------------------------------------
    async def describe_transactions(self, ctx, body, ver):
        req = self.apis.decode(ctx, body, ver)
        out = []
        for tid in req.transactional_ids:
            if not self.apis.authorize(ctx, Op.DESCRIBE, RT.TRANSACTIONAL_ID, tid):
                d = dict(self.coordinator.core.describe(""), transactional_id=tid,
                         error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            else:
                d = self.coordinator.describe(tid)
            out.append({"error_code": int(d["error_code"]), "transactional_id": tid,
                        "transaction_state": d["transaction_state"],
                        "transaction_timeout": d["transaction_timeout_ms"],
                        "transaction_start_time": d["transaction_start_time_ms"],
                        "producer_id": d["producer_id"], "producer_epoch": d["producer_epoch"],
                        # only the partitions of topics the principal may describe
                        "topics": [t for t in d["topics"] if self.apis.authorize(ctx, Op.DESCRIBE, RT.TOPIC,
                                                                                 t["topic"])]})
        return {"throttle_time": 0, "transaction_states": out}

    async def list_transactions(self, ctx, body, ver):
        req = self.apis.decode(ctx, body, ver)
        duration = req.duration_filter if ver >= 1 else -1
        code, unknown, txns = self.coordinator.list_transactions(list(req.state_filters),
                                                                 [int(p) for p in req.producer_id_filters], duration)
        txns = [t for t in txns if self.apis.authorize(ctx, Op.DESCRIBE, RT.TRANSACTIONAL_ID, t["transactional_id"])]
        return {"throttle_time": 0, "error_code": int(code), "unknown_state_filters": unknown,
                "transaction_states": txns}


__all__ = ["TxnApis"]
