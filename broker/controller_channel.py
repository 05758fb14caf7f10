"""The broker's channel to the active controller over gRPC (KRaft's
NodeToControllerChannelManager). It finds the active controller from the metadata log's
leader and the configured voters, and retries NOT_CONTROLLER and unreachable controllers
until the operation's deadline, so callers see either an answer or a Kafka error."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable

import grpc

from common.clock import SYSTEM, Clock
from common.errors import ErrorCode, KafkaError
from common.net import REAL, Net
from metadata.acl_wire import acl_to_pb, binding_from_pb, filter_to_pb
from metadata.controller_api import TOO_MANY_RECORDS, CreateTopicResult, HeartbeatResult, NewTopic
from metadata.image import PartitionRegistration
from proto import MAX_GRPC_MESSAGE
from proto import controller_pb2 as pb
from proto import controller_pb2_grpc as pb_grpc

log = logging.getLogger("krafty.broker.channel")

_RETRIABLE = {ErrorCode.NOT_CONTROLLER, ErrorCode.UNKNOWN_SERVER_ERROR}


class ControllerChannel:
    def __init__(self, voters: list[tuple[int, str, int]], leader_id: Callable[[], int | None], *,
                 request_timeout_ms: int = 30_000, retry_backoff_ms: int = 50,
                 credentials: grpc.ChannelCredentials | None = None, clock: Clock = SYSTEM,
                 net: Net = REAL):
        self.clock = clock
        self.net = net  # gRPC to the controllers (or sim/'s network)  # deadlines of calls (monotonic)
        self.credentials = credentials  # TLS to the controllers (broker/security/ssl.py); None = plaintext
        self.voters = {vid: (host, port) for vid, host, port in voters}
        self.leader_id = leader_id
        self.timeout = request_timeout_ms / 1000
        self.backoff = retry_backoff_ms / 1000
        self._channels: dict[int, tuple[grpc.aio.Channel, pb_grpc.ControllerServiceStub]] = {}
        self._rr = 0

    def _stub(self, vid: int) -> pb_grpc.ControllerServiceStub:
        ch = self._channels.get(vid)
        if ch is None:
            host, port = self.voters[vid]
            opts = [("grpc.max_receive_message_length", MAX_GRPC_MESSAGE),
                    ("grpc.max_send_message_length", MAX_GRPC_MESSAGE)]
            channel = self.net.grpc_channel(f"{host}:{port}", self.credentials, opts)
            ch = self._channels[vid] = (channel, pb_grpc.ControllerServiceStub(channel))
        return ch[1]

    def _target(self) -> int:
        lid = self.leader_id()
        if lid is not None and lid in self.voters:
            return lid
        ids = sorted(self.voters)
        self._rr += 1
        return ids[self._rr % len(ids)]

    async def _call(self, method: str, request, timeout: float | None = None):
        deadline = self.clock.monotonic() + (timeout or self.timeout)
        last_error: KafkaError | None = None
        while True:
            left = deadline - self.clock.monotonic()
            if left <= 0:
                raise last_error or KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"controller did not answer {method}")
            vid = self._target()
            try:
                resp = await getattr(self._stub(vid), method)(request, timeout=min(left, 5.0))
            except grpc.aio.AioRpcError as e:
                if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:  # too large to send: retrying cannot help
                    raise KafkaError(ErrorCode.POLICY_VIOLATION, TOO_MANY_RECORDS) from None
                last_error = KafkaError(ErrorCode.NOT_CONTROLLER, f"controller {vid} unreachable: {e.code().name}")
                log.debug("%s to controller %d failed: %s", method, vid, e.code().name)
                await asyncio.sleep(self.backoff)
                continue
            code = ErrorCode(resp.error_code)
            if code in _RETRIABLE:
                last_error = KafkaError(code, getattr(resp, "error_message", None) or None)
                await asyncio.sleep(self.backoff)
                continue
            if code != ErrorCode.NONE:
                raise KafkaError(code, getattr(resp, "error_message", None) or None)
            return resp

    async def close(self) -> None:
        for channel, _ in self._channels.values():
            await channel.close()
        self._channels.clear()

    # --- operations (same signatures as controller.loop.QuorumController) -------------
    async def register_broker(self, broker_id: int, incarnation_id: uuid.UUID, endpoints, rack) -> int:
        req = pb.RegisterBrokerRequest(broker_id=broker_id, incarnation_id=incarnation_id.bytes)
        for e in endpoints:
            req.endpoints.add(name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol)
        if rack is not None:
            req.rack = rack
        return (await self._call("RegisterBroker", req)).broker_epoch

    async def heartbeat(self, broker_id: int, broker_epoch: int, metadata_offset: int, want_fence: bool,
                        want_shutdown: bool, timeout: float | None = None) -> HeartbeatResult:
        resp = await self._call("BrokerHeartbeat", pb.BrokerHeartbeatRequest(
            broker_id=broker_id, broker_epoch=broker_epoch, current_metadata_offset=metadata_offset,
            want_fence=want_fence, want_shutdown=want_shutdown), timeout)
        return HeartbeatResult(resp.is_caught_up, resp.is_fenced, resp.should_shut_down)

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> tuple[int, int]:
        resp = await self._call("AllocateProducerIds", pb.AllocateProducerIdsRequest(
            broker_id=broker_id, broker_epoch=broker_epoch))
        return resp.producer_id_start, resp.producer_id_len

    async def alter_partition(self, broker_id: int, broker_epoch: int, items) -> list:
        req = pb.AlterPartitionRequest(broker_id=broker_id, broker_epoch=broker_epoch)
        for tid, pid, leader_epoch, partition_epoch, isr in items:
            req.partitions.add(topic_id=tid.bytes, partition=pid, leader_epoch=leader_epoch,
                               partition_epoch=partition_epoch, new_isr=isr)
        resp = await self._call("AlterPartition", req)
        return [(uuid.UUID(bytes=p.topic_id), p.partition, ErrorCode(p.error_code),
                 PartitionRegistration((), tuple(p.isr), p.leader, p.leader_epoch, p.partition_epoch)
                 if p.error_code == 0 else None) for p in resp.partitions]

    async def create_topics(self, new_topics: list[NewTopic], validate_only: bool = False) -> list[CreateTopicResult]:
        req = pb.CreateTopicsRequest(validate_only=validate_only)
        for t in new_topics:
            nt = req.topics.add(name=t.name, num_partitions=t.num_partitions, replication_factor=t.replication_factor)
            for p, brokers in (t.assignments or {}).items():
                nt.assignments.add(partition=p, broker_ids=brokers)
            for k, v in t.configs.items():
                c = nt.configs.add(name=k)
                if v is not None:
                    c.value = v
        resp = await self._call("CreateTopics", req)
        return [CreateTopicResult(t.name, ErrorCode(t.error_code), t.error_message if t.HasField("error_message")
                                  else None, uuid.UUID(bytes=t.topic_id) if t.topic_id else None, t.num_partitions,
                                  t.replication_factor, {c.name: c.value for c in t.configs})
                for t in resp.topics]

    async def delete_topics(self, names, ids):
        req = pb.DeleteTopicsRequest()
        for n, i in zip(names, ids, strict=True):
            tr = req.topics.add(topic_id=i.bytes if i else b"")
            if n is not None:
                tr.name = n
        resp = await self._call("DeleteTopics", req)
        return [(t.name if t.HasField("name") else None, uuid.UUID(bytes=t.topic_id) if t.topic_id else None,
                 ErrorCode(t.error_code), t.error_message if t.HasField("error_message") else None)
                for t in resp.topics]

    async def create_partitions(self, topic: str, count: int, assignments, validate_only: bool = False) -> None:
        req = pb.CreatePartitionsRequest(topic=topic, count=count, validate_only=validate_only)
        for a in assignments or []:
            req.assignments.add(broker_ids=a)
        await self._call("CreatePartitions", req)

    async def alter_topic_configs(self, topic: str, ops, validate_only: bool = False) -> None:
        req = pb.AlterTopicConfigsRequest(topic=topic, validate_only=validate_only)
        for name, op, value in ops:
            c = req.configs.add(name=name, op=op)
            if value is not None:
                c.value = value
        await self._call("AlterTopicConfigs", req)

    async def create_acls(self, bindings) -> list:
        req = pb.CreateAclsRequest()
        for b in bindings:
            acl_to_pb(b, req.creations.add())
        resp = await self._call("CreateAcls", req)
        return [(ErrorCode(a.error_code), a.error_message if a.HasField("error_message") else None)
                for a in resp.results]

    async def delete_acls(self, filters) -> list:
        req = pb.DeleteAclsRequest()
        for f in filters:
            filter_to_pb(f, req.filters.add())
        resp = await self._call("DeleteAcls", req)
        return [(ErrorCode(a.error_code), a.error_message if a.HasField("error_message") else None,
                 [binding_from_pb(m) for m in a.matching]) for a in resp.results]

    async def alter_client_quotas(self, alterations, validate_only: bool = False) -> list:
        req = pb.AlterClientQuotasRequest(validate_only=validate_only)
        for entity, ops in alterations:
            a = req.entries.add()
            for etype, ename in entity:
                e = a.entity.add(entity_type=etype)
                if ename is not None:
                    e.entity_name = ename
            for key, value, remove in ops:
                a.ops.add(key=key, value=value, remove=remove)
        resp = await self._call("AlterClientQuotas", req)
        return [(ErrorCode(a.error_code), a.error_message if a.HasField("error_message") else None)
                for a in resp.results]

    async def alter_user_scram_credentials(self, changes) -> list:
        """changes: [metadata.controller_api.ScramChange]; returns [(user, error code, message)]."""
        req = pb.AlterUserScramCredentialsRequest()
        for c in changes:
            req.changes.add(user=c.user, mechanism=c.mechanism, delete=c.delete, salt=c.salt,
                            stored_key=c.stored_key, server_key=c.server_key, iterations=c.iterations)
        resp = await self._call("AlterUserScramCredentials", req)
        return [(u.user, ErrorCode(u.error_code), u.error_message if u.HasField("error_message") else None)
                for u in resp.results]
