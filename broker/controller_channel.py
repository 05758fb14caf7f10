"""The broker's channel to the active controller over gRPC (KRaft's
NodeToControllerChannelManager). It finds the active controller from the metadata log's
leader and the configured voters, and retries NOT_CONTROLLER and unreachable controllers
until the operation's deadline, so callers see either an answer or a Kafka error."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable

import grpc

from common.clock import SYSTEM, Clock
from common.errors import ErrorCode, KafkaError
from common.net import REAL, Net
from metadata.acl_wire import acl_to_pb, binding_from_pb, filter_to_pb
from metadata.controller_api import (
    METADATA_OFFSET_KEY,
    TOO_MANY_RECORDS,
    CreateTopicResult,
    HeartbeatResult,
    NewTopic,
    OngoingReassignment,
    PartitionResult,
)
from metadata.image import PartitionRegistration
from proto import CHANNEL_OPTIONS
from proto import controller_pb2 as pb
from proto import controller_pb2_grpc as pb_grpc
from proto import partition_ops_pb2 as ops_pb
from proto import partition_ops_pb2_grpc as ops_grpc
from proto import raft_pb2 as pb_raft
from proto import raft_pb2_grpc as pb_raft_grpc
from proto.cluster_id import client_interceptors, refused_for_cluster_id

log = logging.getLogger("krafty.broker.channel")
_OPS_REQUESTS = (ops_pb.ElectLeadersRequest, ops_pb.AlterPartitionReassignmentsRequest,
                 ops_pb.ListPartitionReassignmentsRequest, ops_pb.UnregisterBrokerRequest)

_RETRIABLE = {ErrorCode.NOT_CONTROLLER, ErrorCode.UNKNOWN_SERVER_ERROR}


class ControllerChannel:
    def __init__(self, voters, leader_id: Callable[[], int | None], *,
                 request_timeout_ms: int = 30_000, retry_backoff_ms: int = 50,
                 credentials: grpc.ChannelCredentials | None = None, cluster_id: str | None = None,
                 clock: Clock = SYSTEM, net: Net = REAL):
        self.clock = clock  # deadlines of calls (monotonic)
        self.net = net  # gRPC to the controllers (or sim/'s network)
        self.credentials = credentials  # TLS to the controllers (broker/security/ssl.py); None = plaintext
        self.cluster_id = cluster_id  # sent with every call: controllers of another cluster refuse them
        # the controllers: a list of (id, host, port), or a function giving the current one (a dynamic
        # quorum, KIP-853: the voters come from the metadata log)
        self._voters_fn = voters if callable(voters) else None
        self.voters = {vid: (host, port) for vid, host, port in (voters() if callable(voters) else voters)}
        self.leader_id = leader_id
        self.timeout = request_timeout_ms / 1000
        self.backoff = retry_backoff_ms / 1000
        self._channels: dict[int, tuple[grpc.aio.Channel, pb_grpc.ControllerServiceStub]] = {}
        self._ops_stubs: dict[int, ops_grpc.PartitionOpsServiceStub] = {}  # proto/partition_ops.proto, same channel
        # read your writes: ``(offset, timeout_s)`` -> waits until this node's metadata image has
        # reached ``offset`` (set by the broker); admin answers carry the offset to wait for
        self.wait_for_offset: Callable[[int, float], Awaitable[None]] | None = None
        self._rr = 0

    def _stub(self, vid: int) -> pb_grpc.ControllerServiceStub:
        ch = self._channels.get(vid)
        if ch is None:
            host, port = self.voters[vid]
            # (reconnects within 0.5 s of a controller coming back: proto.CHANNEL_OPTIONS)
            channel = self.net.grpc_channel(f"{host}:{port}", self.credentials, CHANNEL_OPTIONS,
                                            client_interceptors(self.cluster_id))
            ch = self._channels[vid] = (channel, pb_grpc.ControllerServiceStub(channel))
        return ch[1]

    def _target(self) -> int:
        if self._voters_fn is not None:
            for vid, host, port in self._voters_fn():
                if self.voters.get(vid) != (host, port):
                    self.voters[vid] = (host, port)
                    self._channels.pop(vid, None)
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
            stub = self._stub(vid)
            if isinstance(request, _OPS_REQUESTS):
                stub = self._ops_stubs.get(vid) or self._ops_stubs.setdefault(
                    vid, ops_grpc.PartitionOpsServiceStub(self._channels[vid][0]))
            try:
                call = getattr(stub, method)(request, timeout=min(left, 5.0))
                resp = await call
            except grpc.aio.AioRpcError as e:
                if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:  # too large to send: retrying cannot help
                    raise KafkaError(ErrorCode.POLICY_VIOLATION, TOO_MANY_RECORDS) from None
                refused = refused_for_cluster_id(e)
                if refused:  # a controller of another cluster: asking again cannot help
                    raise KafkaError(ErrorCode.INCONSISTENT_CLUSTER_ID, f"controller {vid} refused {method}: "
                                     f"{refused}") from None
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
            if self.wait_for_offset is not None:
                offset = _metadata_offset(await call.trailing_metadata())
                if offset is not None:  # an admin operation: answer once our own image shows it
                    await self.wait_for_offset(offset, max(deadline - self.clock.monotonic(), 0.0))
            return resp

    async def close(self) -> None:
        for channel, _ in self._channels.values():
            await channel.close()
        self._channels.clear()
        self._ops_stubs.clear()

    # --- operations (same signatures as controller.loop.QuorumController) -------------
    async def elect_leaders(self, election_type: int, topic_partitions) -> list:
        req = ops_pb.ElectLeadersRequest(election_type=election_type, all_partitions=topic_partitions is None)
        for topic, pids in topic_partitions or ():
            req.topics.add(topic=topic, partitions=pids)
        return _partition_results(await self._call("ElectLeaders", req))

    async def alter_partition_reassignments(self, requests) -> list:
        req = ops_pb.AlterPartitionReassignmentsRequest()
        by_topic: dict[str, ops_pb.ReassignTopic] = {}
        for topic, pid, target in requests:
            t = by_topic.get(topic) or by_topic.setdefault(topic, req.topics.add(name=topic))
            t.partitions.add(partition=pid, cancel=target is None, replicas=target or ())
        return _partition_results(await self._call("AlterPartitionReassignments", req))

    async def unregister_broker(self, broker_id: int) -> None:
        await self._call("UnregisterBroker", ops_pb.UnregisterBrokerRequest(broker_id=broker_id))

    async def list_partition_reassignments(self, topics) -> list:
        req = ops_pb.ListPartitionReassignmentsRequest(all=topics is None)
        for topic, pids in topics or ():
            req.topics.add(topic=topic, partitions=pids)
        resp = await self._call("ListPartitionReassignments", req)
        return [OngoingReassignment(o.topic, o.partition, tuple(o.replicas), tuple(o.adding), tuple(o.removing))
                for o in resp.partitions]

    async def register_broker(self, broker_id: int, incarnation_id: uuid.UUID, endpoints, rack) -> int:
        req = pb.RegisterBrokerRequest(broker_id=broker_id, incarnation_id=incarnation_id.bytes)
        for e in endpoints:
            req.endpoints.add(name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol)
        if rack is not None:
            req.rack = rack
        return (await self._call("RegisterBroker", req)).broker_epoch

    async def heartbeat(self, broker_id: int, broker_epoch: int, metadata_offset: int, want_fence: bool,
                        want_shutdown: bool, timeout: float | None = None, offline_log_dirs=(),
                        offline_partitions=()) -> HeartbeatResult:
        req = pb.BrokerHeartbeatRequest(
            broker_id=broker_id, broker_epoch=broker_epoch, current_metadata_offset=metadata_offset,
            want_fence=want_fence, want_shutdown=want_shutdown, offline_log_dirs=[d.bytes for d in offline_log_dirs])
        for tid, pid in offline_partitions:
            req.offline_partitions.add(topic_id=tid.bytes, partition=pid)
        resp = await self._call("BrokerHeartbeat", req, timeout)
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
        await self._alter_configs(2, topic, ops, validate_only)

    async def alter_broker_configs(self, name: str, ops, validate_only: bool = False) -> None:
        """Dynamic configs of one broker (``name`` its id) or of every broker (``name`` "")."""
        await self._alter_configs(4, name, ops, validate_only)

    async def alter_group_configs(self, name: str, ops, validate_only: bool = False) -> None:
        await self._alter_configs(32, name, ops, validate_only)

    async def _alter_configs(self, resource_type: int, name: str, ops, validate_only: bool) -> None:
        req = pb.AlterTopicConfigsRequest(topic=name, validate_only=validate_only, resource_type=resource_type)
        for key, op, value in ops:
            c = req.configs.add(name=key, op=op)
            if value is not None:
                c.value = value
        await self._call("AlterTopicConfigs", req)

    async def describe_quorum(self, timeout: float = 5.0):
        """The metadata quorum as its leader describes it (raft.proto DescribeQuorum), asked of the
        leader we know or of each voter in turn; None if no voter leads or answers in time."""
        deadline = self.clock.monotonic() + timeout
        while self.clock.monotonic() < deadline:
            vid = self._target()
            self._stub(vid)  # makes the channel
            stub = pb_raft_grpc.RaftQuorumStub(self._channels[vid][0])
            try:
                resp = await stub.DescribeQuorum(pb_raft.DescribeQuorumRequest(),
                                                 timeout=max(0.1, min(2.0, deadline - self.clock.monotonic())))
            except grpc.aio.AioRpcError as e:
                refused = refused_for_cluster_id(e)
                if refused:
                    raise KafkaError(ErrorCode.INCONSISTENT_CLUSTER_ID, refused) from None
                await asyncio.sleep(self.backoff)
                continue
            if resp.error == 0:
                return resp
            await asyncio.sleep(self.backoff)
        return None

    async def change_voters(self, request, timeout: float = 30.0):
        """KIP-853 AddVoter (``request`` an AddVoterRequest) or RemoveVoter on the quorum's
        leader, following it; the raft.proto VoterChangeResponse."""
        method = "AddVoter" if isinstance(request, pb_raft.AddVoterRequest) else "RemoveVoter"
        deadline = self.clock.monotonic() + timeout
        while True:
            vid = self._target()
            self._stub(vid)
            stub = pb_raft_grpc.RaftQuorumStub(self._channels[vid][0])
            try:
                resp = await getattr(stub, method)(request, timeout=max(0.1, deadline - self.clock.monotonic()))
            except grpc.aio.AioRpcError as e:
                refused = refused_for_cluster_id(e)
                if refused:
                    raise KafkaError(ErrorCode.INCONSISTENT_CLUSTER_ID, refused) from None
                resp = None
            if resp is not None and resp.error != ErrorCode.NOT_LEADER_OR_FOLLOWER:
                return resp
            if self.clock.monotonic() >= deadline:
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"no controller answered {method}")
            await asyncio.sleep(self.backoff)

    async def update_features(self, updates, validate_only: bool = False) -> None:
        req = pb.UpdateFeaturesRequest(validate_only=validate_only)
        for name, level, upgrade_type in updates:
            req.updates.add(name=name, level=level, upgrade_type=upgrade_type)
        await self._call("UpdateFeatures", req)

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


def _partition_results(resp) -> list[PartitionResult]:
    return [PartitionResult(t.topic, p.partition, ErrorCode(p.error_code),
                            p.error_message if p.HasField("error_message") else None)
            for t in resp.topics for p in t.partitions]


def _metadata_offset(trailing) -> int | None:
    """The controller's applied metadata offset in an admin answer's trailing metadata."""
    for key, value in trailing or ():
        if key == METADATA_OFFSET_KEY:
            try:
                return int(value)
            except ValueError:
                return None
    return None
