"""Handler of Produce: the hand-parsed hot path (broker/apis/wire.py), record validation,
append through the replica manager and the acks=all wait."""

from __future__ import annotations

from broker.apis import wire
from broker.log.batch import validate_produce_batches
from broker.log.validator import RecordValidationError
from broker.protocol import codec
from broker.security.quotas import PRODUCE
from common.errors import ErrorCode, KafkaError
from common.topic_names import INTERNAL_TOPICS
from metadata.acl import AclOperation as Op
from metadata.acl import ResourceType as RT


class CloseConnection(Exception):
    """Close the connection without a response (acks=0 produce that failed, as Kafka does)."""


class ProduceApis:
    """Mixin of KafkaApis (broker/apis/kafka_apis.py)."""

    # --- Produce ------------------------------------------------------------------------------
    async def produce(self, ctx, body, ver):
        try:
            req = wire.parse_produce(body, ver)
        except codec.FramingError:
            raise
        image = self.image
        results: dict[str, list[dict]] = {}
        appended: list[tuple[tuple[str, int], int, dict]] = []
        any_error = False
        txn_denied = req.transactional_id is not None and not self.authorize(
            ctx, Op.WRITE, RT.TRANSACTIONAL_ID, req.transactional_id)
        for name, parts in req.topics:
            out = results.setdefault(name, [])
            auth_error = (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if txn_denied else
                          0 if self.authorize(ctx, Op.WRITE, RT.TOPIC, name) else ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            for p in parts:
                res = {"index": p.index, "error_code": 0, "base_offset": -1, "log_append_time": -1,
                       "log_start_offset": -1, "record_errors": []}
                out.append(res)
                try:
                    if auth_error:
                        raise KafkaError(auth_error)
                    if req.acks not in (-1, 0, 1):
                        raise KafkaError(ErrorCode.INVALID_REQUIRED_ACKS)
                    if name in INTERNAL_TOPICS:  # written by the coordinators only, as in Kafka
                        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"cannot append to internal topic {name}")
                    if name not in image.topics_by_name:
                        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    part = self.replicas.leader_partition((name, p.index))
                    if p.records is None:
                        raise KafkaError(ErrorCode.INVALID_RECORD, "null records")
                    headers = validate_produce_batches(p.records, part.log.config.max_message_bytes,
                                                       produce_version=ver)
                    min_isr = self.replicas.min_insync_replicas(image, name)
                    if req.acks == -1:
                        code = part.state.can_append_acks_all(min_isr)
                        if code != ErrorCode.NONE:
                            raise KafkaError(code)
                    info = await self.replicas.append_async(part, p.records, headers)
                    res["base_offset"] = info.first_offset
                    res["log_append_time"] = info.log_append_time_ms
                    res["log_start_offset"] = info.log_start_offset
                    if self.metrics is not None:
                        self.metrics.produced(name, len(p.records), info.last_offset - info.first_offset + 1)
                    if req.acks == -1:
                        appended.append(((name, p.index), info.last_offset, min_isr, res))
                except KafkaError as e:
                    any_error = True
                    if self.metrics is not None:
                        self.metrics.produce_failed(name, len(p.records) if p.records is not None else 0, e.code)
                    res["error_code"] = e.code
                    res["error_message"] = e.message
                    if isinstance(e, RecordValidationError):  # KIP-467 (v8+)
                        res["record_errors"] = [{"batch_index": i, "batch_index_error_message": m}
                                                for i, m in e.record_errors]
                    if e.code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                        t = image.topics_by_name.get(name)
                        reg = t.partitions.get(p.index) if t else None
                        if reg is not None:
                            res["current_leader"] = {"leader_id": reg.leader, "leader_epoch": reg.leader_epoch}
        throttle = await self._throttle(ctx, PRODUCE, len(body), ver >= 6) if self.image.client_quotas else 0
        if req.acks == 0:
            if any_error:
                raise CloseConnection()
            return None
        if appended:
            await self._await_replication(ctx, appended, req.timeout_ms)
        return {"responses": [{"name": n, "partition_responses": ps} for n, ps in results.items()],
                "throttle_time": throttle}

    async def _await_replication(self, ctx, appended, timeout_ms: int) -> None:
        """The produce purgatory: acks=all completes when the HW passes each batch."""
        deadline = self.clock.monotonic() + max(timeout_ms, 0) / 1000
        for tp, last_offset, min_isr, res in appended:
            while True:
                part = self.replicas.partitions.get(tp)
                if part is None or not part.state.is_leader:
                    res["error_code"] = ErrorCode.NOT_LEADER_OR_FOLLOWER
                    break
                done = part.state.acks_all_result(last_offset, min_isr)
                if done is not None:
                    res["error_code"] = done
                    break
                left = deadline - self.clock.monotonic()
                if left <= 0:
                    res["error_code"] = ErrorCode.REQUEST_TIMED_OUT
                    break
                await ctx.park(self.replicas.wait_for_data([tp], left))
