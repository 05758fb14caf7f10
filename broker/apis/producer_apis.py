"""Handler of InitProducerId, and the broker's producer-id allocator (blocks of ids from the
controller)."""

from __future__ import annotations

import asyncio

from broker.security.authorizer import ANONYMOUS
from common.errors import ErrorCode, KafkaError
from metadata.acl import AclOperation as Op
from metadata.acl import ResourceType as RT


class ProducerIdAllocator:
    """Hands out producer ids from blocks the controller allocates in the metadata log."""

    def __init__(self, controller, broker_id: int):
        self.controller = controller
        self.broker_id = broker_id
        self.broker_epoch = -1
        self._next = 0
        self._end = 0
        self._lock = asyncio.Lock()

    async def next_id(self) -> int:
        async with self._lock:
            if self._next >= self._end:
                start, length = await self.controller.allocate_producer_ids(self.broker_id, self.broker_epoch)
                self._next, self._end = start, start + length
            pid = self._next
            self._next += 1
            return pid


class ProducerApis:
    """Mixin of KafkaApis (broker/apis/kafka_apis.py)."""

    # --- InitProducerId ----------------------------------------------------------------------------
    async def init_producer_id(self, ctx, body, ver):
        req = self.decode(ctx, body, ver)
        if req.transactional_id is None and self.authorizer is not None and not (
                self.authorize_cluster(ctx, Op.IDEMPOTENT_WRITE) or self.authorizer.authorize_by_resource_type(
                    getattr(ctx, "principal", ANONYMOUS), ctx.client_host, Op.WRITE, RT.TOPIC)):
            return {"throttle_time": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "producer_id": -1,
                    "producer_epoch": -1}
        if req.transactional_id is not None and not self.authorize(ctx, Op.WRITE, RT.TRANSACTIONAL_ID,
                                                                   req.transactional_id):
            return {"throttle_time": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    "producer_id": -1, "producer_epoch": -1}
        if req.transactional_id is not None:
            return await self.txn_apis.init_producer_id(ctx, req, ver)
        try:
            pid = await self.producer_ids.next_id()
        except KafkaError as e:
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE if e.code == ErrorCode.NOT_CONTROLLER else e.code
            return {"throttle_time": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}
        return {"throttle_time": 0, "error_code": 0, "producer_id": pid, "producer_epoch": 0}
