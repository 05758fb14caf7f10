"""The data-plane side of transactions, on the partition leaders: WriteTxnMarkers (the
transaction coordinator ends a transaction on each of its partitions with a COMMIT or ABORT
marker) and DescribeProducers (the producer state of a partition, for kafka-transactions.sh
and ``krafty transactions describe-producers``). The coordinator itself lives elsewhere."""

from __future__ import annotations

import asyncio
import logging

from broker.group.coordinator import OFFSETS_TOPIC
from broker.log.batch import build_end_txn_marker, parse_batches
from broker.protocol.apis import ApiKey
from common.clock import SYSTEM, Clock
from common.errors import ErrorCode, KafkaError
from metadata.acl import AclOperation as Op
from metadata.acl import ResourceType as RT

log = logging.getLogger("krafty.apis.txn")


class TxnDataApis:
    def __init__(self, apis, clock: Clock = SYSTEM):
        self.apis = apis  # KafkaApis: decode, authorization, the replica manager, the acks=all wait
        self.clock = clock

    def handlers(self) -> dict:
        return {
            ApiKey.WRITE_TXN_MARKERS: self.write_txn_markers,
            ApiKey.DESCRIBE_PRODUCERS: self.describe_producers,
        }

    # --- WriteTxnMarkers ----------------------------------------------------------------------
    async def write_txn_markers(self, ctx, body, ver):
        """Each marker is appended as the leader of each of its partitions (acks=all), checked
        against the producer state: an older producer epoch is INVALID_PRODUCER_EPOCH, an older
        coordinator epoch TRANSACTION_COORDINATOR_FENCED. Markers for ``__consumer_offsets``
        go through the group coordinator, which commits or drops the transaction's pending
        offsets with them. Kafka's KafkaApis.handleWriteTxnMarkersRequest."""
        req = self.apis.decode(ctx, body, ver)
        return await self.write_markers(ctx, req, denied=not self.apis.authorize_cluster(ctx, Op.CLUSTER_ACTION))

    async def write_markers(self, ctx, req, denied: bool = False) -> dict:
        """WriteTxnMarkers on a decoded request (``denied``: every partition gets
        CLUSTER_AUTHORIZATION_FAILED); this broker's own coordinator calls it in process
        (broker/apis/loopback.py)."""
        apis = self.apis
        image = apis.image
        timeout_ms = apis.config["request.timeout.ms"]
        appended: list = []  # (tp, last offset, min ISR, result) for the acks=all wait
        groups: list = []  # (result, coroutine) of the __consumer_offsets partitions
        out = []
        for m in req.markers:
            tv = getattr(m, "transaction_version", 0)
            topics = []
            out.append({"producer_id": m.producer_id, "topics": topics})
            for t in m.topics:
                parts = []
                topics.append({"name": t.name, "partitions": parts})
                for index in t.partition_indexes:
                    res = {"partition_index": index, "error_code": 0}
                    parts.append(res)
                    if denied:
                        res["error_code"] = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                        continue
                    tp = (t.name, index)
                    part = apis.replicas.partitions.get(tp)
                    if part is None or t.name not in image.topics_by_name:  # (an offline log dir: KAFKA_STORAGE_ERROR)
                        res["error_code"] = apis.replicas.missing_error(tp, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION).code
                        continue
                    if t.name == OFFSETS_TOPIC:
                        groups.append((res, apis.group_coordinator.complete_transaction(
                            index, m.producer_id, m.producer_epoch, m.coordinator_epoch, m.transaction_result, tv,
                            timeout_ms)))
                        continue
                    try:
                        part = apis.replicas.leader_partition(tp)
                        min_isr = apis.replicas.min_insync_replicas(image, t.name)
                        code = part.state.can_append_acks_all(min_isr)
                        if code != ErrorCode.NONE:
                            raise KafkaError(code)
                        batch = build_end_txn_marker(m.producer_id, m.producer_epoch, m.transaction_result,
                                                     m.coordinator_epoch, self.clock.wall_ms())
                        info = await apis.replicas.append_marker(part, batch, parse_batches(batch), tv)
                        appended.append((tp, info.last_offset, min_isr, res))
                    except KafkaError as e:
                        res["error_code"] = e.code
                        if e.code not in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_ENOUGH_REPLICAS):
                            log.info("%s-%d: transaction marker of producer %d refused: %s", t.name, index,
                                     m.producer_id, e.message or ErrorCode(e.code).name)
        if groups:
            codes = await asyncio.gather(*(c for _, c in groups))
            for (res, _), code in zip(groups, codes, strict=True):
                res["error_code"] = int(code)
        if appended:
            await apis._await_replication(ctx, appended, timeout_ms)
        return {"markers": out}

    # --- DescribeProducers --------------------------------------------------------------------
    async def describe_producers(self, ctx, body, ver):
        """The active producers of each partition hosted here (leader or follower), as Kafka's
        Partition.activeProducerState: id, epoch, last sequence and timestamp, the epoch of
        the coordinator that wrote its last marker, the start of its open transaction."""
        apis = self.apis
        req = apis.decode(ctx, body, ver)
        image = apis.image
        topics = []
        for t in req.topics:
            parts = []
            allowed = apis.authorize(ctx, Op.READ, RT.TOPIC, t.name)
            timg = image.topics_by_name.get(t.name)
            for index in t.partition_indexes:
                res = {"partition_index": index, "error_code": 0, "error_message": None, "active_producers": []}
                parts.append(res)
                part = apis.replicas.partitions.get((t.name, index))
                if not allowed:
                    res["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                elif part is None:
                    known = timg is not None and index in timg.partitions
                    res["error_code"] = apis.replicas.missing_error(
                        (t.name, index), ErrorCode.NOT_LEADER_OR_FOLLOWER if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION).code
                else:
                    res["active_producers"] = [
                        {"producer_id": e.producer_id, "producer_epoch": e.epoch, "last_sequence": e.last_seq,
                         "last_timestamp": e.last_timestamp, "coordinator_epoch": e.coordinator_epoch,
                         "current_txn_start_offset": e.current_txn_first_offset}
                        for e in list(part.log.producer_state.producers.values())]
            topics.append({"name": t.name, "partitions": parts})
        return {"throttle_time": 0, "topics": topics}


__all__ = ["TxnDataApis"]
