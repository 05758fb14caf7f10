"""Handler of Produce: the hand-parsed hot path (broker/apis/wire.py), record validation,
transactional batches checked with their coordinator first (KIP-890), append through the
replica manager and the acks=all wait."""

from __future__ import annotations

from broker.apis import wire
from broker.log import legacy
from broker.log.batch import ATTRIBUTES_OFFSET, MAGIC_OFFSET, TRANSACTIONAL_BIT, validate_produce_batches
from broker.log.validator import RecordValidationError
from broker.protocol import codec
from broker.replica.txn_verifier import produce_error
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
        todo: list[tuple[str, object, dict, object, list]] = []  # (topic, partition data, result, partition, headers)
        any_error = False
        # Kafka: transactional records need a transactional id the principal may write
        txn_denied = (req.transactional_id is not None or _has_transactional_records(req, ver)) and (
            req.transactional_id is None or not self.authorize(ctx, Op.WRITE, RT.TRANSACTIONAL_ID, req.transactional_id))
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
                    if ver < 3 and legacy.is_legacy(p.records):  # magic 0/1: one v2 batch from here on
                        p.records = memoryview(await legacy.to_v2_async(p.records, part.log.config, f"{name}-{p.index}"))
                    headers = validate_produce_batches(p.records, part.log.config.max_message_bytes,
                                                       produce_version=ver)
                    if req.acks == -1:
                        code = part.state.can_append_acks_all(self.replicas.min_insync_replicas(image, name))
                        if code != ErrorCode.NONE:
                            raise KafkaError(code)
                    todo.append((name, p, res, part, headers))
                except KafkaError as e:
                    any_error = True
                    self._produce_error(image, name, p, res, e)
        guards, unverified = await self._verify_transactional(req, ver, todo) if req.transactional_id else ({}, {})
        for name, p, res, part, headers in todo:
            tp = (name, p.index)
            try:
                if tp in unverified:
                    code, message = unverified[tp]
                    raise KafkaError(code, message)
                min_isr = self.replicas.min_insync_replicas(image, name)
                guard = guards.get(tp) if guards else None
                info = self.replicas.try_append(part, p.records, headers, guard)
                if info is None:
                    info = await self.replicas.append_async(part, p.records, headers, verification_guard=guard)
                res["base_offset"] = info.first_offset
                res["log_append_time"] = info.log_append_time_ms
                res["log_start_offset"] = info.log_start_offset
                if self.metrics is not None:
                    self.metrics.produced(name, len(p.records), info.last_offset - info.first_offset + 1)
                if req.acks == -1:
                    appended.append((tp, info.last_offset, min_isr, res))
            except KafkaError as e:
                any_error = True
                self._produce_error(image, name, p, res, e)
        throttle = await self._throttle(ctx, PRODUCE, len(body), ver >= 6) if self.image.client_quotas else 0
        if req.acks == 0:
            if any_error:
                raise CloseConnection()
            return None
        if appended and not self._replicated(appended):
            await self._await_replication(ctx, appended, req.timeout_ms)
        return [wire.encode_produce_response(ver, results, throttle)]

    def _produce_error(self, image, name: str, p, res: dict, e: KafkaError) -> None:
        if self.metrics is not None:
            self.metrics.produce_failed(name, len(p.records) if p.records is not None else 0, e.code)
        index = p.index
        res["error_code"] = e.code
        res["error_message"] = e.message
        if isinstance(e, RecordValidationError):  # KIP-467 (v8+)
            res["record_errors"] = [{"batch_index": i, "batch_index_error_message": m} for i, m in e.record_errors]
        if e.code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            t = image.topics_by_name.get(name)
            reg = t.partitions.get(index) if t else None
            if reg is not None:
                res["current_leader"] = {"leader_id": reg.leader, "leader_epoch": reg.leader_epoch}

    async def _verify_transactional(self, req, ver: int, todo) -> tuple[dict, dict]:
        """KIP-890: the partitions whose transactional batch would start a transaction are
        checked with the transaction coordinator in one request (added to the transaction with
        Produce v12, transaction version 2). Returns the verification guards of the confirmed
        partitions and ``{tp: (code, message)}`` for the others."""
        txn = [(name, p, h[0], part) for name, p, _res, part, h in todo if h[0].is_transactional]
        if not txn:
            return {}, {}
        producers = {(h.producer_id, h.producer_epoch) for _n, _p, h, _part in txn}
        if len(producers) > 1:
            return {}, {(n, p.index): (ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                                       "Transactional records contained more than one producer ID")
                        for n, p, _h, _part in txn}
        (pid, epoch), = producers
        tv2 = ver >= 12
        guards, errors = await self.replicas.verify_transaction(
            req.transactional_id, pid, epoch, [part for *_x, part in txn], [h.base_sequence for _n, _p, h, _x in txn],
            supports_epoch_bump=tv2)
        return guards, {tp: produce_error(code, tv2) for tp, code in errors.items()}

    def _replicated(self, appended) -> bool:
        """Whether every acks=all append is done already (the high watermark passed it, as
        with a single in-sync replica): its result set, no purgatory."""
        parts = self.replicas.partitions
        for tp, last_offset, min_isr, _res in appended:
            part = parts.get(tp)
            if part is None or not part.state.is_leader or part.state.acks_all_result(last_offset, min_isr) is None:
                return False
        for tp, last_offset, min_isr, res in appended:
            res["error_code"] = parts[tp].state.acks_all_result(last_offset, min_isr)
        return True

    async def _await_replication(self, ctx, appended, timeout_ms: int) -> None:
        """The produce purgatory: acks=all completes when the HW passes each batch."""
        deadline = self.clock.monotonic() + max(timeout_ms, 0) / 1000
        for tp, last_offset, min_isr, res in appended:
            while True:
                part = self.replicas.partitions.get(tp)
                if part is None or not part.state.is_leader:
                    res["error_code"] = self.replicas.missing_error(tp, ErrorCode.NOT_LEADER_OR_FOLLOWER).code
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


def _has_transactional_records(req, ver: int) -> bool:
    """Whether a partition's first batch is transactional (Kafka's hasTransactionalRecords):
    one attribute byte per partition, no parsing (before v3 also the magic byte: magic 0/1
    messages have no such bit)."""
    at = ATTRIBUTES_OFFSET + 1  # the low byte of the int16 attributes
    return any(p.records is not None and len(p.records) > at and p.records[at] & TRANSACTIONAL_BIT
               and (ver >= 3 or p.records[MAGIC_OFFSET] == 2)
               for _name, parts in req.topics for p in parts)
