"""Handlers of the partition operations an operator runs: DeleteRecords, ElectLeaders,
AlterPartitionReassignments and ListPartitionReassignments (the last three are forwarded to the
active controller, as KRaft brokers do)."""

from __future__ import annotations

import time

from broker.protocol.apis import ApiKey
from common.errors import ErrorCode, KafkaError
from common.topic_names import INTERNAL_TOPICS
from metadata.acl import AclOperation as Op
from metadata.acl import ResourceType as RT

INVALID_LOW_WATERMARK = -1


class PartitionOpsApis:
    def __init__(self, apis):
        self.apis = apis  # KafkaApis: decode(), authorize(), the image and the replica manager

    def handlers(self) -> dict:
        return {ApiKey.DELETE_RECORDS: self.delete_records, ApiKey.ELECT_LEADERS: self.elect_leaders,
                ApiKey.ALTER_PARTITION_REASSIGNMENTS: self.alter_partition_reassignments,
                ApiKey.LIST_PARTITION_REASSIGNMENTS: self.list_partition_reassignments}

    # --- DeleteRecords -----------------------------------------------------------------------
    async def delete_records(self, ctx, body, ver):
        """Kafka's handleDeleteRecordsRequest + ReplicaManager.deleteRecords: each partition's
        leader moves its log start offset (offset -1: the high watermark), then the answer waits
        (a purgatory, up to the request's timeout) until every live replica has moved its own,
        which followers do when their fetches bring them the leader's log start. The answer's
        low watermark is the smallest log start over the live replicas."""
        apis = self.apis
        req = apis.decode(ctx, body, ver)
        image = apis.image
        rm = apis.replicas
        results: dict[tuple[str, int], dict] = {}
        pending: dict[tuple[str, int], int] = {}  # waiting for the low watermark to reach the offset
        for t in req.topics:
            allowed = apis.authorize(ctx, Op.DELETE, RT.TOPIC, t.name)
            timg = image.topics_by_name.get(t.name)
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                res = results[tp] = {"partition_index": p.partition_index, "low_watermark": INVALID_LOW_WATERMARK,
                                     "error_code": ErrorCode.NONE}
                pending.pop(tp, None)  # named twice: the last one counts, as in Kafka's map
                try:
                    if not allowed:
                        raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                    if timg is None or p.partition_index not in timg.partitions:
                        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    if t.name in INTERNAL_TOPICS:
                        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                         f"Cannot delete records of internal topic {t.name}")
                    requested = rm.delete_records(tp, p.offset)
                    res["low_watermark"] = rm.low_watermark(tp)
                    if res["low_watermark"] < requested:
                        pending[tp] = requested
                except KafkaError as e:
                    res["error_code"] = e.code
        deadline = time.monotonic() + max(req.timeout.total_seconds(), 0)
        while pending:
            for tp, requested in list(pending.items()):
                res = results[tp]
                try:
                    res["low_watermark"] = rm.low_watermark(tp)
                except KafkaError as e:  # leadership moved meanwhile
                    res["error_code"], res["low_watermark"] = e.code, INVALID_LOW_WATERMARK
                if res["error_code"] or res["low_watermark"] >= requested:
                    del pending[tp]
            left = deadline - time.monotonic()
            if not pending:
                break
            if left <= 0:
                for tp in pending:
                    results[tp]["error_code"] = ErrorCode.REQUEST_TIMED_OUT
                break
            await ctx.park(rm.wait_for_low_watermark(list(pending), left))
        topics: dict[str, list] = {}
        for (name, _), res in results.items():
            topics.setdefault(name, []).append(res)
        return {"throttle_time": 0, "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]}

    # --- ElectLeaders --------------------------------------------------------------------------
    async def elect_leaders(self, ctx, body, ver):
        """Forwarded to the controller (KRaft's ControllerApis.handleElectLeaders); ALTER on the
        cluster is required. Partitions named twice are answered once."""
        apis = self.apis
        req = apis.decode(ctx, body, ver)
        tps = None if req.topic_partitions is None else [(t.topic, list(t.partitions)) for t in req.topic_partitions]
        election_type = req.election_type if ver >= 1 else 0
        try:
            if not apis.authorize_cluster(ctx, Op.ALTER):
                raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
            results = await apis.controller.elect_leaders(election_type, tps)
        except KafkaError as e:  # the request as a whole (ElectLeadersRequest.getErrorResponse)
            out = {"throttle_time": 0, "replica_election_results": [
                {"topic": t, "partition_result": [{"partition_id": p, "error_code": e.code,
                                                   "error_message": e.message} for p in dict.fromkeys(ps)]}
                for t, ps in tps or ()]}
            if ver >= 1:
                out["error_code"] = e.code
            return out
        by_topic: dict[str, list] = {}
        for res in results:
            by_topic.setdefault(res.topic, []).append(
                {"partition_id": res.partition, "error_code": res.error, "error_message": res.message})
        out = {"throttle_time": 0, "replica_election_results": [
            {"topic": t, "partition_result": ps} for t, ps in by_topic.items()]}
        if ver >= 1:
            out["error_code"] = ErrorCode.NONE
        return out

    # --- AlterPartitionReassignments / ListPartitionReassignments ---------------------------------
    async def alter_partition_reassignments(self, ctx, body, ver):
        """KIP-455: start (replicas), change or cancel (null replicas) reassignments; ALTER on the
        cluster. Answered once the controller committed the changes, not when they complete."""
        apis = self.apis
        req = apis.decode(ctx, body, ver)
        requests = [(t.name, p.partition_index, None if p.replicas is None else list(p.replicas))
                    for t in req.topics for p in t.partitions]
        try:
            if not apis.authorize_cluster(ctx, Op.ALTER):
                raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
            results = await apis.controller.alter_partition_reassignments(requests)
        except KafkaError as e:  # the request as a whole (AlterPartitionReassignmentsRequest.getErrorResponse)
            return {"throttle_time": 0, "error_code": e.code, "error_message": e.message, "responses": [
                {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": e.code,
                                                 "error_message": e.message} for p in t.partitions]}
                for t in req.topics]}
        by_topic: dict[str, list] = {}
        for res in results:
            by_topic.setdefault(res.topic, []).append(
                {"partition_index": res.partition, "error_code": res.error, "error_message": res.message})
        return {"throttle_time": 0, "error_code": ErrorCode.NONE, "error_message": None,
                "responses": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

    async def list_partition_reassignments(self, ctx, body, ver):
        apis = self.apis
        req = apis.decode(ctx, body, ver)
        topics = None if req.topics is None else [(t.name, list(t.partition_indexes)) for t in req.topics]
        try:
            if not apis.authorize_cluster(ctx, Op.DESCRIBE):
                raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
            ongoing = await apis.controller.list_partition_reassignments(topics)
        except KafkaError as e:
            return {"throttle_time": 0, "error_code": e.code, "error_message": e.message, "topics": []}
        by_topic: dict[str, list] = {}
        for o in ongoing:
            by_topic.setdefault(o.topic, []).append({"partition_index": o.partition, "replicas": list(o.replicas),
                                                     "adding_replicas": list(o.adding),
                                                     "removing_replicas": list(o.removing)})
        return {"throttle_time": 0, "error_code": ErrorCode.NONE, "error_message": None,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}
