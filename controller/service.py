"""The gRPC service brokers talk to: thin translation between protobuf and the
QuorumController's operations. Kafka errors travel as error codes, never as gRPC errors."""

from __future__ import annotations

import logging
import uuid

import grpc

from common.errors import ErrorCode, KafkaError
from controller.ops_service import PartitionOpsService
from metadata import records as r
from metadata.acl_wire import acl_to_pb, binding_from_pb, filter_from_pb
from metadata.controller_api import METADATA_OFFSET_KEY, NewTopic, ScramChange
from proto import controller_pb2 as pb
from proto import controller_pb2_grpc as pb_grpc
from proto.partition_ops_pb2_grpc import add_PartitionOpsServiceServicer_to_server

log = logging.getLogger("krafty.controller.service")


def _uuid(b: bytes) -> uuid.UUID | None:
    return uuid.UUID(bytes=b) if b else None


class ControllerService(pb_grpc.ControllerServiceServicer):
    def __init__(self, controller):
        self.c = controller

    async def _guard(self, fn, empty, context=None):
        """Runs an operation; KafkaError -> its code. With ``context`` (the admin operations a
        client waits on), a successful answer carries the metadata offset the controller had
        applied when it answered (trailing metadata ``krafty-metadata-offset``): the broker
        answers its client only once its own image has reached it (read your writes)."""
        try:
            resp = await fn()
            if context is not None:
                context.set_trailing_metadata(((METADATA_OFFSET_KEY, str(self.c.loader.image.offset)),))
            return resp
        except KafkaError as e:
            empty.error_code = e.code
            if hasattr(empty, "error_message") and e.message:
                empty.error_message = e.message
            return empty
        except Exception as e:  # never let a bug surface as an opaque gRPC failure
            log.exception("controller operation failed")
            empty.error_code = ErrorCode.UNKNOWN_SERVER_ERROR
            if hasattr(empty, "error_message"):
                empty.error_message = str(e)
            return empty

    async def RegisterBroker(self, req, context):
        async def run():
            eps = [r.Endpoint(e.name, e.host, e.port, e.security_protocol or "PLAINTEXT") for e in req.endpoints]
            epoch = await self.c.register_broker(req.broker_id, uuid.UUID(bytes=req.incarnation_id), eps,
                                                 req.rack if req.HasField("rack") else None)
            return pb.RegisterBrokerResponse(error_code=0, broker_epoch=epoch)
        return await self._guard(run, pb.RegisterBrokerResponse())

    async def BrokerHeartbeat(self, req, context):
        async def run():
            offline = [(uuid.UUID(bytes=p.topic_id), p.partition) for p in req.offline_partitions]
            res = await self.c.heartbeat(req.broker_id, req.broker_epoch, req.current_metadata_offset,
                                         req.want_fence, req.want_shutdown, offline_partitions=offline)
            return pb.BrokerHeartbeatResponse(error_code=0, is_caught_up=res.is_caught_up, is_fenced=res.is_fenced,
                                              should_shut_down=res.should_shut_down)
        return await self._guard(run, pb.BrokerHeartbeatResponse())

    async def AllocateProducerIds(self, req, context):
        async def run():
            start, length = await self.c.allocate_producer_ids(req.broker_id, req.broker_epoch)
            return pb.AllocateProducerIdsResponse(error_code=0, producer_id_start=start, producer_id_len=length)
        return await self._guard(run, pb.AllocateProducerIdsResponse())

    async def AlterPartition(self, req, context):
        async def run():
            items = [(uuid.UUID(bytes=p.topic_id), p.partition, p.leader_epoch, p.partition_epoch, list(p.new_isr))
                     for p in req.partitions]
            results = await self.c.alter_partition(req.broker_id, req.broker_epoch, items)
            out = pb.AlterPartitionResponse(error_code=0)
            for tid, pid, code, reg in results:
                pr = out.partitions.add(topic_id=tid.bytes, partition=pid, error_code=code)
                if reg is not None:
                    pr.leader, pr.leader_epoch, pr.partition_epoch = reg.leader, reg.leader_epoch, reg.partition_epoch
                    pr.isr.extend(reg.isr)
            return out
        return await self._guard(run, pb.AlterPartitionResponse())

    async def CreateTopics(self, req, context):
        async def run():
            new = [NewTopic(t.name, t.num_partitions, t.replication_factor,
                            {a.partition: list(a.broker_ids) for a in t.assignments} or None,
                            {c.name: (c.value if c.HasField("value") else None) for c in t.configs})
                   for t in req.topics]
            results = await self.c.create_topics(new, req.validate_only)
            out = pb.CreateTopicsResponse(error_code=0)
            for res in results:
                tr = out.topics.add(name=res.name, error_code=res.error, num_partitions=res.num_partitions,
                                    replication_factor=res.replication_factor,
                                    topic_id=res.topic_id.bytes if res.topic_id else b"")
                if res.message:
                    tr.error_message = res.message
                for k, v in res.configs.items():
                    tr.configs.add(name=k, value=v)
            return out
        return await self._guard(run, pb.CreateTopicsResponse(), context)

    async def DeleteTopics(self, req, context):
        async def run():
            names = [t.name if t.HasField("name") else None for t in req.topics]
            ids = [_uuid(t.topic_id) for t in req.topics]
            results = await self.c.delete_topics(names, ids)
            out = pb.DeleteTopicsResponse(error_code=0)
            for name, tid, code, msg in results:
                dr = out.topics.add(topic_id=tid.bytes if tid else b"", error_code=code)
                if name is not None:
                    dr.name = name
                if msg:
                    dr.error_message = msg
            return out
        return await self._guard(run, pb.DeleteTopicsResponse(), context)

    async def CreatePartitions(self, req, context):
        async def run():
            assignments = [list(a.broker_ids) for a in req.assignments] or None
            await self.c.create_partitions(req.topic, req.count, assignments, req.validate_only)
            return pb.ErrorResponse(error_code=0)
        return await self._guard(run, pb.ErrorResponse(), context)

    async def AlterTopicConfigs(self, req, context):
        async def run():
            ops = [(c.name, c.op, c.value if c.HasField("value") else None) for c in req.configs]
            if req.resource_type == 4:  # BROKER
                await self.c.alter_broker_configs(req.topic, ops, req.validate_only)
            elif req.resource_type == 32:  # GROUP
                await self.c.alter_group_configs(req.topic, ops, req.validate_only)
            else:
                await self.c.alter_topic_configs(req.topic, ops, req.validate_only)
            return pb.ErrorResponse(error_code=0)
        return await self._guard(run, pb.ErrorResponse(), context)

    async def UpdateFeatures(self, req, context):
        async def run():
            await self.c.update_features([(u.name, u.level, u.upgrade_type) for u in req.updates], req.validate_only)
            return pb.ErrorResponse(error_code=0)
        return await self._guard(run, pb.ErrorResponse(), context)

    async def CreateAcls(self, req, context):
        async def run():
            return _acls_response(await self.c.create_acls([binding_from_pb(e) for e in req.creations]))
        return await self._guard(run, pb.AclsResponse(), context)

    async def DeleteAcls(self, req, context):
        async def run():
            results = await self.c.delete_acls([filter_from_pb(f) for f in req.filters])
            out = _acls_response([(code, msg) for code, msg, _ in results])
            for ar, (_, _, matched) in zip(out.results, results, strict=True):
                for b in matched:
                    acl_to_pb(b, ar.matching.add())
            return out
        return await self._guard(run, pb.AclsResponse(), context)

    async def AlterClientQuotas(self, req, context):
        async def run():
            alterations = [(tuple((e.entity_type, e.entity_name if e.HasField("entity_name") else None)
                                  for e in a.entity), [(o.key, o.value, o.remove) for o in a.ops])
                           for a in req.entries]
            return _acls_response(await self.c.alter_client_quotas(alterations, req.validate_only))
        return await self._guard(run, pb.AclsResponse(), context)

    async def AlterUserScramCredentials(self, req, context):
        async def run():
            changes = [ScramChange(c.user, c.mechanism, c.delete, c.salt, c.stored_key, c.server_key, c.iterations)
                       for c in req.changes]
            out = pb.AlterUserScramCredentialsResponse(error_code=0)
            for user, code, msg in await self.c.alter_user_scram_credentials(changes):
                res = out.results.add(user=user, error_code=code)
                if msg:
                    res.error_message = msg
            return out
        return await self._guard(run, pb.AlterUserScramCredentialsResponse(), context)


def add_to_server(server: grpc.aio.Server, controller) -> None:
    service = ControllerService(controller)
    pb_grpc.add_ControllerServiceServicer_to_server(service, server)
    add_PartitionOpsServiceServicer_to_server(PartitionOpsService(controller, service._guard), server)


def _acls_response(results) -> pb.AclsResponse:
    """One result (error code, message) per entry of an ACL or quota request."""
    out = pb.AclsResponse(error_code=0)
    for code, msg in results:
        ar = out.results.add(error_code=code)
        if msg:
            ar.error_message = msg
    return out
