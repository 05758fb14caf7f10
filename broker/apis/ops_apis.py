"""Handlers of the partition operations an operator runs: DeleteRecords, ElectLeaders,
AlterPartitionReassignments and ListPartitionReassignments (these three are forwarded to the
active controller, as KRaft brokers do), DescribeLogDirs, UnregisterBroker (forwarded too) and
DescribeTopicPartitions (KIP-966)."""

from __future__ import annotations

import os
import uuid

from broker.protocol.apis import ApiKey
from common.errors import ErrorCode, KafkaError
from common.topic_names import INTERNAL_TOPICS, validate_topic_name
from metadata.acl import AclOperation as Op
from metadata.acl import ResourceType as RT

INVALID_LOW_WATERMARK = -1
_ZERO_UUID = uuid.UUID(int=0)
_NO_OPERATIONS = -2147483648  # topic_authorized_operations when not computed


class PartitionOpsApis:
    def __init__(self, apis):
        self.apis = apis  # KafkaApis: decode(), authorize(), the image and the replica manager

    def handlers(self) -> dict:
        return {ApiKey.DELETE_RECORDS: self.delete_records, ApiKey.ELECT_LEADERS: self.elect_leaders,
                ApiKey.ALTER_PARTITION_REASSIGNMENTS: self.alter_partition_reassignments,
                ApiKey.LIST_PARTITION_REASSIGNMENTS: self.list_partition_reassignments,
                ApiKey.DESCRIBE_LOG_DIRS: self.describe_log_dirs, ApiKey.UNREGISTER_BROKER: self.unregister_broker,
                ApiKey.ALTER_REPLICA_LOG_DIRS: self.alter_replica_log_dirs,
                ApiKey.DESCRIBE_TOPIC_PARTITIONS: self.describe_topic_partitions}

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
        deadline = self.apis.clock.monotonic() + max(req.timeout.total_seconds(), 0)
        while pending:
            for tp, requested in list(pending.items()):
                res = results[tp]
                try:
                    res["low_watermark"] = rm.low_watermark(tp)
                except KafkaError as e:  # leadership moved meanwhile
                    res["error_code"], res["low_watermark"] = e.code, INVALID_LOW_WATERMARK
                if res["error_code"] or res["low_watermark"] >= requested:
                    del pending[tp]
            left = deadline - self.apis.clock.monotonic()
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

    # --- DescribeLogDirs -------------------------------------------------------------------------
    async def describe_log_dirs(self, ctx, body, ver):
        """This broker's log dirs (Kafka's ReplicaManager.describeLogDirs): per dir its partitions
        (all, or those of the topics/partitions asked for) with their size in bytes and offset lag
        (high watermark - log end, never negative), and (v4+) the file system's total and usable
        bytes. DESCRIBE on the cluster is required."""
        apis = self.apis
        req = apis.decode(ctx, body, ver)
        out: dict = {"throttle_time": 0, "results": []}
        if ver >= 3:
            out["error_code"] = ErrorCode.NONE
        if not apis.authorize_cluster(ctx, Op.DESCRIBE):
            if ver >= 3:
                out["error_code"] = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            return out
        wanted = None if req.topics is None else {(t.topic, int(p)) for t in req.topics for p in t.partitions}
        rm = apis.replicas
        by_dir = rm.logs.logs_by_dir()
        for fut in rm.logs.future_logs():  # a replica being moved here (AlterReplicaLogDirs): isFuture
            by_dir.setdefault(rm.logs.dir_of(fut), []).append(fut)
        futures = set(map(id, rm.logs.future_logs()))
        for d, logs in by_dir.items():
            topics: dict[str, list] = {}
            for lg in sorted(logs, key=lambda x: (x.topic, x.partition)):
                tp = (lg.topic, lg.partition)
                if wanted is not None and tp not in wanted:
                    continue
                part = rm.partitions.get(tp)
                leo = lg.log_end_offset
                # a future replica's lag is behind the current log (Kafka: its high watermark)
                hw = part.log.log_end_offset if id(lg) in futures and part is not None else (
                    part.state.high_watermark if part is not None else leo)
                topics.setdefault(lg.topic, []).append({"partition_index": lg.partition,
                                                        "partition_size": lg.size_in_bytes,
                                                        "offset_lag": max(hw - leo, 0),
                                                        "is_future_key": id(lg) in futures})
            res = {"error_code": ErrorCode.NONE, "log_dir": d,
                   "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
            if ver >= 4:
                try:
                    st = os.statvfs(d)
                    res["total_bytes"], res["usable_bytes"] = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
                except OSError:
                    res["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
                    res["total_bytes"] = res["usable_bytes"] = -1
            out["results"].append(res)
        for d in rm.logs.offline_log_dirs:  # a failed dir (KIP-858): its error, no partitions
            res = {"error_code": ErrorCode.KAFKA_STORAGE_ERROR, "log_dir": d, "topics": []}
            if ver >= 4:
                res["total_bytes"] = res["usable_bytes"] = -1
            out["results"].append(res)
        return out

    # --- AlterReplicaLogDirs ---------------------------------------------------------------------
    async def alter_replica_log_dirs(self, ctx, body, ver):
        """Kafka's ReplicaManager.alterReplicaLogDirs: move each named replica of this broker to the
        given log dir while it serves (a future log filled in the background, then swapped in;
        broker/replica/alter_log_dirs.py). A replica not on this broker yet gets REPLICA_NOT_AVAILABLE
        and is made in that dir when it comes (kafka-reassign-partitions sends this before the
        reassignment). ALTER on the cluster; LOG_DIR_NOT_FOUND for a dir that is not one of
        ``log.dirs``, KAFKA_STORAGE_ERROR for an offline dir or partition."""
        apis = self.apis
        req = apis.decode(ctx, body, ver)
        rm = apis.replicas
        logs = rm.logs
        allowed = apis.authorize_cluster(ctx, Op.ALTER)
        results: dict[str, dict[int, int]] = {}
        for d in req.dirs:
            for t in d.topics:
                for p in t.partitions:
                    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED if not allowed else self._alter_log_dir(
                        rm, logs, (t.name, int(p)), d.path)
                    results.setdefault(t.name, {})[int(p)] = code
        return {"throttle_time": 0, "results": [
            {"topic_name": t, "partitions": [{"partition_index": p, "error_code": c} for p, c in ps.items()]}
            for t, ps in results.items()]}

    @staticmethod
    def _alter_log_dir(rm, logs, tp: tuple[str, int], path: str) -> int:
        if len(tp[0]) > 249:
            return ErrorCode.INVALID_TOPIC_EXCEPTION
        dest = os.path.abspath(path) if os.path.isabs(path) else None
        if dest not in logs.log_dirs:
            return ErrorCode.LOG_DIR_NOT_FOUND
        if logs.failure_channel.is_offline(dest) or rm.is_offline(tp):
            return ErrorCode.KAFKA_STORAGE_ERROR
        fut = logs.future(*tp)
        if fut is not None and logs.dir_of(fut) != dest:
            rm.alter_log_dirs.cancel(tp)  # moving elsewhere now
        logs.preferred_dirs[tp] = dest  # where it is made if it is not here yet
        part = rm.partitions.get(tp)
        if part is None:
            return ErrorCode.REPLICA_NOT_AVAILABLE
        if logs.dir_of(part.log) == dest:
            logs.preferred_dirs.pop(tp, None)
            rm.alter_log_dirs.cancel(tp)
            return ErrorCode.NONE
        if logs.offline_log_dirs:  # never a future log in two dirs: not while a dir is offline (as Kafka)
            return ErrorCode.KAFKA_STORAGE_ERROR
        rm.alter_log_dirs.start(tp, dest)
        return ErrorCode.NONE

    # --- UnregisterBroker ----------------------------------------------------------------------
    async def unregister_broker(self, ctx, body, ver):
        """An operator removes a broker's registration (a drained, stopped broker); forwarded to
        the controller, which first moves leadership and ISR membership away as fencing does.
        ALTER on the cluster; BROKER_ID_NOT_REGISTERED for an unknown id."""
        apis = self.apis
        req = apis.decode(ctx, body, ver)
        try:
            if not apis.authorize_cluster(ctx, Op.ALTER):
                raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
            await apis.controller.unregister_broker(req.broker_id)
        except KafkaError as e:
            return {"throttle_time": 0, "error_code": e.code, "error_message": e.message}
        return {"throttle_time": 0, "error_code": ErrorCode.NONE, "error_message": None}

    # --- DescribeTopicPartitions (KIP-966) ----------------------------------------------------------
    async def describe_topic_partitions(self, ctx, body, ver):
        """Kafka's DescribeTopicPartitionsRequestHandler: the topics asked for (all when none),
        in name order from the cursor on, at most ``response_partition_limit`` partitions (and
        at most max.request.partition.size.limit), with a next cursor where the answer stopped.
        Unknown topics asked for by name get UNKNOWN_TOPIC_OR_PARTITION, unauthorized ones
        TOPIC_AUTHORIZATION_FAILED (appended last, without a topic id)."""
        apis = self.apis
        req = apis.decode(ctx, body, ver)
        try:
            return self._describe_topic_partitions(ctx, req)
        except KafkaError as e:  # the request as a whole (DescribeTopicPartitionsRequest.getErrorResponse)
            return {"throttle_time": 0, "next_cursor": None, "topics": [
                {"error_code": e.code, "name": t.name, "topic_id": _ZERO_UUID, "is_internal": False, "partitions": [],
                 "topic_authorized_operations": _NO_OPERATIONS} for t in req.topics]}

    def _describe_topic_partitions(self, ctx, req) -> dict:
        apis = self.apis
        image = apis.image
        cursor = req.cursor
        cursor_topic = cursor.topic_name if cursor is not None else ""
        fetch_all = not req.topics
        names = image.topics_by_name if fetch_all else [t.name for t in req.topics]
        topics = sorted({n for n in names if n >= cursor_topic})
        if cursor is not None and not fetch_all and cursor.topic_name not in topics:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"DescribeTopicPartitionsRequest topic list should contain the cursor topic: "
                             f"{cursor.topic_name}")
        if cursor is not None and cursor.partition_index < 0:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"DescribeTopicPartitionsRequest cursor partition must be valid: {cursor}")
        out_topics, denied = [], []
        remaining = max(min(apis.config["max.request.partition.size.limit"], req.response_partition_limit), 1)
        next_cursor = None
        for name in topics:
            if not apis.authorize(ctx, Op.DESCRIBE, RT.TOPIC, name):
                if not fetch_all:
                    denied.append({"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": name,
                                   "topic_id": _ZERO_UUID, "is_internal": False, "partitions": [],
                                   "topic_authorized_operations": _NO_OPERATIONS})
                continue
            if remaining <= 0:
                next_cursor = {"topic_name": name, "partition_index": 0}
                break
            t = image.topics_by_name.get(name)
            if t is None:
                if not fetch_all:
                    try:
                        validate_topic_name(name)
                        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    except KafkaError as e:
                        code = e.code
                    out_topics.append({"error_code": code, "name": name, "topic_id": _ZERO_UUID,
                                       "is_internal": name in INTERNAL_TOPICS, "partitions": [],
                                       "topic_authorized_operations": _NO_OPERATIONS})
                continue
            start = cursor.partition_index if cursor is not None and name == cursor_topic else 0
            upper = min(len(t.partitions), start + remaining)
            meta = apis._topic_metadata(image, t)
            parts = [dict(p, error_code=ErrorCode.NONE, eligible_leader_replicas=[], last_known_elr=[])
                     for p in meta["partitions"] if start <= p["partition_index"] < upper]
            out_topics.append({"error_code": ErrorCode.NONE, "name": name, "topic_id": t.topic_id,
                               "is_internal": meta["is_internal"], "partitions": parts,
                               "topic_authorized_operations": apis.authorized_operations(ctx, RT.TOPIC, name)})
            if upper < len(t.partitions):
                next_cursor = {"topic_name": name, "partition_index": upper}
                break
            remaining -= len(parts)
        return {"throttle_time": 0, "topics": out_topics + denied, "next_cursor": next_cursor}
