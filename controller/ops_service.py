"""The gRPC service of the operator requests brokers forward to the active controller
(proto/partition_ops.proto): leader elections, partition reassignments, broker
unregistration. Thin translation, as controller/service.py; Kafka errors travel as codes."""

from __future__ import annotations

from proto import partition_ops_pb2 as pb
from proto import partition_ops_pb2_grpc as pb_grpc


class PartitionOpsService(pb_grpc.PartitionOpsServiceServicer):
    def __init__(self, controller, guard):
        self.c = controller
        self._guard = guard  # controller/service.py's: KafkaError -> error_code, bugs -> UNKNOWN_SERVER_ERROR

    async def ElectLeaders(self, req, context):
        async def run():
            tps = None if req.all_partitions else [(t.topic, list(t.partitions)) for t in req.topics]
            return _partition_errors(await self.c.elect_leaders(req.election_type, tps))
        return await self._guard(run, pb.PartitionErrorsResponse(), context)

    async def AlterPartitionReassignments(self, req, context):
        async def run():
            requests = [(t.name, p.partition, None if p.cancel else list(p.replicas))
                        for t in req.topics for p in t.partitions]
            return _partition_errors(await self.c.alter_partition_reassignments(requests))
        return await self._guard(run, pb.PartitionErrorsResponse(), context)

    async def ListPartitionReassignments(self, req, context):
        async def run():
            topics = None if req.all else [(t.topic, list(t.partitions)) for t in req.topics]
            out = pb.ListPartitionReassignmentsResponse(error_code=0)
            for o in await self.c.list_partition_reassignments(topics):
                out.partitions.add(topic=o.topic, partition=o.partition, replicas=o.replicas, adding=o.adding,
                                   removing=o.removing)
            return out
        return await self._guard(run, pb.ListPartitionReassignmentsResponse())

    async def UnregisterBroker(self, req, context):
        async def run():
            await self.c.unregister_broker(req.broker_id)
            return pb.OpErrorResponse(error_code=0)
        return await self._guard(run, pb.OpErrorResponse(), context)


def _partition_errors(results) -> pb.PartitionErrorsResponse:
    """Per-partition results (anything with topic, partition, error, message) by topic, in order."""
    out = pb.PartitionErrorsResponse(error_code=0)
    by_topic: dict[str, pb.TopicErrors] = {}
    for res in results:
        te = by_topic.get(res.topic)
        if te is None:
            te = by_topic[res.topic] = out.topics.add(topic=res.topic)
        pe = te.partitions.add(partition=res.partition, error_code=res.error)
        if res.message:
            pe.error_message = res.message
    return out
