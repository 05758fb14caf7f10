"""gRPC (grpc.aio) transport for the quorum RPCs: core messages <-> ``proto/raft.proto``.

Outbound requests from the core become unary calls; their answers come back to the core
as messages with the request's ``corr``. Inbound calls are handed to the core as request
messages with a transport-chosen ``corr``; the call completes when the core emits the
response with that ``corr`` (after the driver made everything it depends on durable).
Timeouts and unreachable peers are normal: logged at debug, the core retries on its own.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable

import grpc

from common.clock import SYSTEM, Clock
from common.net import REAL, Net
from proto import CHANNEL_OPTIONS
from proto import raft_pb2 as pb
from proto import raft_pb2_grpc as pb_grpc
from proto.cluster_id import client_interceptors, refused_for_cluster_id
from raft import messages as m
from raft.core import Voter

log = logging.getLogger("krafty.raft.transport")

def _opt(v: int | None) -> int:
    return -1 if v is None else v


def _unopt(v: int) -> int | None:
    return None if v < 0 else v


# --------------------------------------------------------------------- codec
def _ep(e: m.Endpoint | None) -> pb.Endpoint | None:
    return None if e is None else pb.Endpoint(host=e[0], port=e[1])


def _unep(p) -> m.Endpoint | None:
    """The endpoint field of a protobuf message (absent: None)."""
    if not p.HasField("leader_endpoint"):
        return None
    e = p.leader_endpoint
    return (e.host, e.port)


def _entry_to_pb(e: m.Entry) -> pb.Entry:
    return pb.Entry(epoch=e.epoch, timestamp_ms=e.timestamp_ms, data=e.data, control=e.control)


def to_pb(body):
    """Core message body -> protobuf message."""
    if isinstance(body, m.VoteRequest):
        return pb.VoteRequest(epoch=body.epoch, candidate_id=body.candidate_id, last_epoch=body.last_epoch,
                              log_end=body.log_end, pre_vote=body.pre_vote)
    if isinstance(body, m.VoteResponse):
        return pb.VoteResponse(error=body.error, epoch=body.epoch, leader_id=_opt(body.leader_id),
                               granted=body.granted, pre_vote=body.pre_vote, leader_endpoint=_ep(body.leader_endpoint))
    if isinstance(body, m.BeginQuorumEpochRequest):
        return pb.BeginQuorumEpochRequest(epoch=body.epoch, leader_id=body.leader_id,
                                          leader_endpoint=_ep(body.leader_endpoint))
    if isinstance(body, m.BeginQuorumEpochResponse):
        return pb.BeginQuorumEpochResponse(error=body.error, epoch=body.epoch, leader_id=_opt(body.leader_id),
                                           leader_endpoint=_ep(body.leader_endpoint))
    if isinstance(body, m.EndQuorumEpochRequest):
        return pb.EndQuorumEpochRequest(epoch=body.epoch, leader_id=body.leader_id,
                                        preferred_successors=list(body.preferred_successors),
                                        leader_endpoint=_ep(body.leader_endpoint))
    if isinstance(body, m.EndQuorumEpochResponse):
        return pb.EndQuorumEpochResponse(error=body.error, epoch=body.epoch, leader_id=_opt(body.leader_id),
                                         leader_endpoint=_ep(body.leader_endpoint))
    if isinstance(body, m.FetchRequest):
        return pb.FetchRequest(epoch=body.epoch, replica_id=body.replica_id, fetch_offset=body.fetch_offset,
                               last_fetched_epoch=body.last_fetched_epoch, max_wait_ms=body.max_wait_ms)
    if isinstance(body, m.FetchResponse):
        return pb.FetchResponse(
            error=body.error, epoch=body.epoch, leader_id=_opt(body.leader_id), high_watermark=body.high_watermark,
            log_start=body.log_start, base_offset=body.base_offset, entries=[_entry_to_pb(e) for e in body.entries],
            diverging_epoch=body.diverging_epoch, diverging_end_offset=body.diverging_end_offset,
            snapshot_end_offset=body.snapshot_end_offset, snapshot_epoch=body.snapshot_epoch,
            leader_endpoint=_ep(body.leader_endpoint))
    if isinstance(body, m.FetchSnapshotRequest):
        return pb.FetchSnapshotRequest(epoch=body.epoch, replica_id=body.replica_id, end_offset=body.end_offset,
                                       snapshot_epoch=body.snapshot_epoch, position=body.position)
    if isinstance(body, m.FetchSnapshotResponse):
        return pb.FetchSnapshotResponse(error=body.error, epoch=body.epoch, leader_id=_opt(body.leader_id),
                                        end_offset=body.end_offset, snapshot_epoch=body.snapshot_epoch,
                                        position=body.position, total=body.total, records=list(body.records),
                                        leader_endpoint=_ep(body.leader_endpoint))
    raise TypeError(f"no protobuf form for {type(body).__name__}")


def from_pb(p):
    """Protobuf message -> core message body."""
    if isinstance(p, pb.VoteRequest):
        return m.VoteRequest(p.epoch, p.candidate_id, p.last_epoch, p.log_end, p.pre_vote)
    if isinstance(p, pb.VoteResponse):
        return m.VoteResponse(p.epoch, _unopt(p.leader_id), p.granted, p.pre_vote, p.error, _unep(p))
    if isinstance(p, pb.BeginQuorumEpochRequest):
        return m.BeginQuorumEpochRequest(p.epoch, p.leader_id, _unep(p))
    if isinstance(p, pb.BeginQuorumEpochResponse):
        return m.BeginQuorumEpochResponse(p.epoch, _unopt(p.leader_id), p.error, _unep(p))
    if isinstance(p, pb.EndQuorumEpochRequest):
        return m.EndQuorumEpochRequest(p.epoch, p.leader_id, tuple(p.preferred_successors), _unep(p))
    if isinstance(p, pb.EndQuorumEpochResponse):
        return m.EndQuorumEpochResponse(p.epoch, _unopt(p.leader_id), p.error, _unep(p))
    if isinstance(p, pb.FetchRequest):
        return m.FetchRequest(p.epoch, p.replica_id, p.fetch_offset, p.last_fetched_epoch, p.max_wait_ms)
    if isinstance(p, pb.FetchResponse):
        return m.FetchResponse(
            p.epoch, _unopt(p.leader_id), p.error, p.high_watermark, p.log_start, p.base_offset,
            tuple(m.Entry(e.epoch, e.timestamp_ms, e.data, e.control) for e in p.entries),
            p.diverging_epoch, p.diverging_end_offset, p.snapshot_end_offset, p.snapshot_epoch, _unep(p))
    if isinstance(p, pb.FetchSnapshotRequest):
        return m.FetchSnapshotRequest(p.epoch, p.replica_id, p.end_offset, p.snapshot_epoch, p.position)
    if isinstance(p, pb.FetchSnapshotResponse):
        return m.FetchSnapshotResponse(p.epoch, _unopt(p.leader_id), p.error, p.end_offset, p.snapshot_epoch,
                                       p.position, p.total, tuple(p.records), _unep(p))
    raise TypeError(f"not a quorum message: {type(p).__name__}")


def request_source(body) -> int:
    """Who sent a request (every quorum request names its sender)."""
    if isinstance(body, m.VoteRequest):
        return body.candidate_id
    if isinstance(body, (m.BeginQuorumEpochRequest, m.EndQuorumEpochRequest)):
        return body.leader_id
    return body.replica_id


_METHODS = {
    m.VoteRequest: "Vote",
    m.BeginQuorumEpochRequest: "BeginQuorumEpoch",
    m.EndQuorumEpochRequest: "EndQuorumEpoch",
    m.FetchRequest: "Fetch",
    m.FetchSnapshotRequest: "FetchSnapshot",
}


# --------------------------------------------------------------------- transport
class GrpcTransport:
    """``deliver(message)`` hands an inbound message to the core; ``unreachable(peer, corr)``
    reports a request that could not reach its peer at all."""

    def __init__(self, node_id: int, peers: dict[int, tuple[str, int]], deliver: Callable[[m.Message], None],
                 unreachable: Callable[[int, int], None], request_timeout_s: float,
                 credentials: grpc.ChannelCredentials | None = None, cluster_id: str | None = None,
                 clock: Clock = SYSTEM, net: Net = REAL) -> None:
        self.node_id = node_id
        self.net = net
        self.clock = clock
        self.cluster_id = cluster_id  # sent with every request; a peer of another cluster refuses them
        self.credentials = credentials  # TLS to the other voters; None = plaintext
        self.peers = peers
        self.deliver = deliver
        self.unreachable = unreachable
        self.timeout = request_timeout_s
        self._stubs: dict[int, pb_grpc.RaftQuorumStub] = {}
        self._channels: list[grpc.aio.Channel] = []
        self._pending: dict[tuple[int, int], asyncio.Future] = {}
        self._inbound_corr = itertools.count(1 << 40)
        self._tasks: set[asyncio.Task] = set()
        self._closed = False
        self._cluster_refusals: dict[int, float] = {}  # peer -> when we last logged its cluster-id refusal

    def _stub(self, peer: int) -> pb_grpc.RaftQuorumStub:
        stub = self._stubs.get(peer)
        if stub is None:
            host, port = self.peers[peer]
            ch = self.net.grpc_channel(f"{host}:{port}", self.credentials, CHANNEL_OPTIONS,
                                       client_interceptors(self.cluster_id))
            self._channels.append(ch)
            stub = self._stubs[peer] = pb_grpc.RaftQuorumStub(ch)
        return stub

    def set_peer(self, peer: int, host: str, port: int) -> None:
        """A voter's (new) address, from the voter set in the log (KIP-853)."""
        if self.peers.get(peer) != (host, port):
            self.peers[peer] = (host, port)
            self._stubs.pop(peer, None)

    def send(self, msg: m.Message) -> None:
        if self._closed:
            return
        if msg.is_request:
            if msg.dst not in self.peers:
                log.debug("no address for node %d; dropping %s", msg.dst, type(msg.body).__name__)
                return
            t = asyncio.get_running_loop().create_task(self._call(msg))
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)
        else:
            fut = self._pending.pop((msg.dst, msg.corr), None)
            if fut is not None and not fut.done():
                fut.set_result(msg.body)

    async def _call(self, msg: m.Message) -> None:
        method = getattr(self._stub(msg.dst), _METHODS[type(msg.body)])
        body = msg.body
        # A parked fetch may be held for max_wait on the leader: allow for it.
        timeout = self.timeout + (body.max_wait_ms / 1000 if isinstance(body, m.FetchRequest) else 0)
        try:
            resp = await method(to_pb(body), timeout=timeout)
        except grpc.aio.AioRpcError as e:
            refused = refused_for_cluster_id(e)
            now = self.clock.monotonic()
            if refused and self._cluster_refusals.get(msg.dst, -10.0) + 10 < now:  # (every 10 s at most)
                self._cluster_refusals[msg.dst] = now
                log.error("node %d: node %d refused %s: %s", self.node_id, msg.dst, type(body).__name__, refused)
            log.debug("node %d: %s to %d failed: %s", self.node_id, type(body).__name__, msg.dst, e.code())
            if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED) and not self._closed:
                # No answer at all: the request is lost (a liveness hint for the core, never a safety input).
                self.unreachable(msg.dst, msg.corr)
            return
        except asyncio.CancelledError:
            return
        if not self._closed:
            self.deliver(m.Message(msg.dst, self.node_id, msg.corr, from_pb(resp)))

    async def handle_inbound(self, request_pb, context) -> object:
        """Servicer side: pass the request to the core and wait for its durable answer."""
        body = from_pb(request_pb)
        src = request_source(body)
        corr = next(self._inbound_corr)
        fut = asyncio.get_running_loop().create_future()
        self._pending[(src, corr)] = fut
        try:
            self.deliver(m.Message(src, self.node_id, corr, body))
            timeout = self.timeout + (body.max_wait_ms / 1000 if isinstance(body, m.FetchRequest) else 0)
            async with asyncio.timeout(timeout):
                resp = await fut
        except TimeoutError:
            self._pending.pop((src, corr), None)
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "no answer in time")
        except asyncio.CancelledError:
            self._pending.pop((src, corr), None)
            raise
        return to_pb(resp)

    async def close(self) -> None:
        self._closed = True
        for t in list(self._tasks):
            t.cancel()
        for fut in self._pending.values():
            if not fut.done():
                fut.cancel()
        self._pending.clear()
        for ch in self._channels:
            await ch.close(grace=None)
        self._channels.clear()
        self._stubs.clear()

    async def drain(self, timeout_s: float) -> None:
        """Give outbound requests already in flight (e.g. EndQuorumEpoch) a moment to land."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout_s)


class RaftServicer(pb_grpc.RaftQuorumServicer):
    def __init__(self, transport: GrpcTransport, describe: Callable[[], pb.DescribeQuorumResponse],
                 change_voters=None) -> None:
        self.t = transport
        self._describe = describe
        self._change_voters = change_voters  # RaftMetadataLog.change_voters (KIP-853)

    async def Vote(self, request, context):
        return await self.t.handle_inbound(request, context)

    async def BeginQuorumEpoch(self, request, context):
        return await self.t.handle_inbound(request, context)

    async def EndQuorumEpoch(self, request, context):
        return await self.t.handle_inbound(request, context)

    async def Fetch(self, request, context):
        return await self.t.handle_inbound(request, context)

    async def FetchSnapshot(self, request, context):
        return await self.t.handle_inbound(request, context)

    async def DescribeQuorum(self, request, context):
        return self._describe()

    async def AddVoter(self, request, context):
        return await self._change_voters(add=Voter(request.voter_id, request.directory_id, request.host,
                                                   request.port))

    async def UpdateVoter(self, request, context):
        return await self._change_voters(update=Voter(request.voter_id, request.directory_id, request.host,
                                                      request.port))

    async def RemoveVoter(self, request, context):
        return await self._change_voters(remove=(request.voter_id, request.directory_id))
