"""The cluster id on every inter-node gRPC call (Raft RPCs between controllers and from brokers,
the brokers' controller RPCs), as Kafka puts ClusterId in its quorum and registration requests.

A client interceptor adds the sender's cluster id to each call's metadata; a server interceptor
refuses a call that carries another one with FAILED_PRECONDITION and a message starting
``INCONSISTENT_CLUSTER_ID`` (Kafka's error; a call without it, from a tool, is served)."""

from __future__ import annotations

import grpc

METADATA_KEY = "krafty-cluster-id"
REFUSAL = "INCONSISTENT_CLUSTER_ID"


class ClusterIdClientInterceptor(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self, cluster_id: str):
        self.cluster_id = cluster_id

    async def intercept_unary_unary(self, continuation, details, request):
        metadata = list(details.metadata or ()) + [(METADATA_KEY, self.cluster_id)]
        details = grpc.aio.ClientCallDetails(details.method, details.timeout, metadata, details.credentials,
                                             details.wait_for_ready)
        return await continuation(details, request)


class ClusterIdServerInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, cluster_id: str):
        self.cluster_id = cluster_id

    async def intercept_service(self, continuation, details):
        theirs = next((v for k, v in details.invocation_metadata or () if k == METADATA_KEY), None)
        if theirs is None or theirs == self.cluster_id:
            return await continuation(details)
        message = (f"{REFUSAL}: the request is for cluster {theirs}, but this node belongs to cluster "
                   f"{self.cluster_id}")

        async def refuse(_request, context):
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, message)
        return grpc.unary_unary_rpc_method_handler(refuse)


def refused_for_cluster_id(e: grpc.aio.AioRpcError) -> str | None:
    """The peer's message if it refused the call for another cluster id, else None."""
    if e.code() == grpc.StatusCode.FAILED_PRECONDITION and (e.details() or "").startswith(REFUSAL):
        return e.details()
    return None


def client_interceptors(cluster_id: str | None) -> list:
    return [ClusterIdClientInterceptor(cluster_id)] if cluster_id else []


def server_interceptors(cluster_id: str | None) -> list:
    return [ClusterIdServerInterceptor(cluster_id)] if cluster_id else []
