"""Handlers of ListOffsets and OffsetForLeaderEpoch."""

from __future__ import annotations

from broker.log import fileio as fio
from broker.log import legacy
from common.errors import ErrorCode, KafkaError
from metadata.acl import AclOperation as Op
from metadata.acl import ResourceType as RT

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5


class OffsetApis:
    """Mixin of KafkaApis (broker/apis/kafka_apis.py)."""

    # --- ListOffsets / OffsetForLeaderEpoch ------------------------------------------------------
    async def list_offsets(self, ctx, body, ver):
        req = self.decode(ctx, body, ver)
        if ver == 0:
            return self._list_offsets_v0(ctx, req)
        topics = []
        for t in req.topics:
            parts = []
            allowed = self.authorize(ctx, Op.DESCRIBE, RT.TOPIC, t.name)
            for p in t.partitions:
                res = {"partition_index": p.partition_index, "error_code": 0, "timestamp": -1, "offset": -1,
                       "leader_epoch": -1}
                parts.append(res)
                try:
                    if not allowed:
                        raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                    part = self.replicas.leader_partition((t.name, p.partition_index))
                    if ver >= 4:
                        bad = part.state.check_leader_epoch(p.current_leader_epoch)
                        if bad:
                            raise KafkaError(ErrorCode[bad])
                    try:
                        await self._list_offset(part, p.timestamp, req.isolation_level if ver >= 2 else 0,
                                                req.replica_id, res)
                    except (OSError, KafkaError) as e:
                        self.replicas.io_error(part, e)  # a failed dir: KAFKA_STORAGE_ERROR
                        raise
                except KafkaError as e:
                    res["error_code"] = e.code
            topics.append({"name": t.name, "partitions": parts})
        return {"throttle_time": 0, "topics": topics}

    def _list_offsets_v0(self, ctx, req) -> dict:
        """ListOffsets v0: up to ``max_num_offsets`` segment start offsets before a time (Kafka 3.x's
        handleListOffsetRequestV0 / legacyFetchOffsetsForTimestamp); a consumer's list starts at
        most at the high watermark."""
        topics = []
        for t in req.topics:
            parts = []
            allowed = self.authorize(ctx, Op.DESCRIBE, RT.TOPIC, t.name)
            for p in t.partitions:
                res = {"partition_index": p.partition_index, "error_code": 0, "old_style_offsets": []}
                parts.append(res)
                try:
                    if not allowed:
                        raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                    part = self.replicas.leader_partition((t.name, p.partition_index))
                    lg = part.log
                    try:
                        offsets = legacy.offsets_before(lg.segments, lg.log_start_offset, lg.log_end_offset,
                                                        p.timestamp, p.max_num_offsets, self.clock.wall_ms(),
                                                        lambda s: int(fio.stat(s.log_path).st_mtime * 1000))
                    except (OSError, KafkaError) as e:
                        self.replicas.io_error(part, e)  # a failed dir: KAFKA_STORAGE_ERROR
                        raise
                    hw = part.state.high_watermark
                    if req.replica_id == -1 and any(o > hw for o in offsets):
                        offsets = [hw] + [o for o in offsets if o <= hw]
                    res["old_style_offsets"] = offsets
                except KafkaError as e:
                    res["error_code"] = e.code
            topics.append({"name": t.name, "partitions": parts})
        return {"topics": topics}

    async def _list_offset(self, part, ts: int, isolation: int, replica_id: int, res: dict) -> None:
        lg, st = part.log, part.state
        # what the asker may read: a consumer up to the high watermark, or under read_committed
        # up to the last stable offset (Kafka's lastFetchableOffset); a replica up to the log end
        hw = st.high_watermark if replica_id < 0 else lg.log_end_offset
        if replica_id < 0 and isolation == 1:
            hw = lg.last_stable_offset(st.high_watermark)
        cache = lg.leader_epoch_cache
        if ts == LATEST:
            res["offset"] = hw
            res["leader_epoch"] = cache.latest_epoch() if cache.latest_epoch() is not None else -1
        elif ts in (EARLIEST, EARLIEST_LOCAL):
            res["offset"] = lg.log_start_offset
            e = cache.epoch_for_offset(lg.log_start_offset)
            res["leader_epoch"] = e if e is not None else -1
        elif ts == MAX_TIMESTAMP:
            mts, moff = await lg.max_timestamp_and_offset_async()  # decodes a batch in a thread
            if moff >= 0 and moff < hw:
                res["timestamp"], res["offset"] = mts, moff
                e = cache.epoch_for_offset(moff)
                res["leader_epoch"] = e if e is not None else -1
        elif ts == LATEST_TIERED:
            res["offset"] = -1
        elif ts < 0:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown special timestamp {ts}")
        else:
            found = await lg.offset_for_timestamp_async(ts)  # decodes a batch in a thread
            if found is not None and found[0] < hw:
                res["offset"], res["timestamp"] = found[0], found[1]
                e = cache.epoch_for_offset(found[0])
                res["leader_epoch"] = e if e is not None else -1

    async def offset_for_leader_epoch(self, ctx, body, ver):
        req = self.decode(ctx, body, ver)
        replica_id = req.replica_id if ver >= 3 else -1  # replica_id is v3+ (consumers send v2)
        topics = []
        cluster_denied = replica_id >= 0 and not self.authorize_cluster(ctx, Op.CLUSTER_ACTION)
        for t in req.topics:
            parts = []
            auth_error = (ErrorCode.CLUSTER_AUTHORIZATION_FAILED if cluster_denied else
                          0 if replica_id >= 0 or self.authorize(ctx, Op.DESCRIBE, RT.TOPIC, t.topic)
                          else ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            for p in t.partitions:
                res = {"partition": p.partition, "error_code": 0, "leader_epoch": -1, "end_offset": -1}
                parts.append(res)
                try:
                    if auth_error:
                        raise KafkaError(auth_error)
                    part = self.replicas.partitions.get((t.topic, p.partition))
                    if part is None:
                        raise self.replicas.missing_error((t.topic, p.partition), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    if replica_id < 0 and not part.state.is_leader:
                        raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                    bad = part.state.check_leader_epoch(p.current_leader_epoch if ver >= 2 else -1)
                    if bad:
                        raise KafkaError(ErrorCode[bad])
                    epoch, end = part.log.leader_epoch_cache.end_offset_for(p.leader_epoch, part.log.log_end_offset)
                    res["leader_epoch"], res["end_offset"] = epoch, end
                except KafkaError as e:
                    res["error_code"] = e.code
            topics.append({"topic": t.topic, "partitions": parts})
        return {"throttle_time": 0, "topics": topics}
