"""Every inter-node gRPC call carries the sender's cluster id; a node of another cluster is
refused with INCONSISTENT_CLUSTER_ID, a call without one (a tool) is served (proto/cluster_id.py)."""

from __future__ import annotations

import grpc
import pytest

from proto import raft_pb2 as pb
from proto import raft_pb2_grpc as pb_grpc
from proto.cluster_id import client_interceptors, refused_for_cluster_id, server_interceptors

MINE, OTHER = "a3JhZnR5LXRlc3Qtbm9kZQ", "VooDHOqVQDmEcPv6VrzhYw"


class Quorum(pb_grpc.RaftQuorumServicer):
    async def DescribeQuorum(self, request, context):
        return pb.DescribeQuorumResponse(leader_id=1, cluster_id=MINE)


async def test_another_clusters_calls_are_refused_and_say_so():
    server = grpc.aio.server(interceptors=server_interceptors(MINE))
    pb_grpc.add_RaftQuorumServicer_to_server(Quorum(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        for cid, ok in ((MINE, True), (None, True), (OTHER, False)):
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", interceptors=client_interceptors(cid)) as ch:
                call = pb_grpc.RaftQuorumStub(ch).DescribeQuorum(pb.DescribeQuorumRequest(), timeout=5)
                if ok:
                    assert (await call).leader_id == 1
                    continue
                with pytest.raises(grpc.aio.AioRpcError) as ei:
                    await call
                msg = refused_for_cluster_id(ei.value)
                assert msg and msg.startswith("INCONSISTENT_CLUSTER_ID") and OTHER in msg and MINE in msg
    finally:
        await server.stop(None)
