"""The broker's channel to the controllers (broker/controller_channel.py) gets its heartbeats
through promptly once a controller it could not reach answers again.

gRPC's default reconnect backoff starts at 1 s and grows 1.6x per failed attempt (to 120 s), and
while it waits every call fails at once. In 10-minute chaos kill runs (2026-11-28, a majority of
the controllers killed for ~10 s, then restarted) the restarted controller became active, gave
every broker a fresh 3 s session, and fenced brokers that were heartbeating all along: their
channel to it was still backing off (its metadata log: broker 5 fenced 3.3 s after the leader
change, unfenced 1.8 s later). With all three brokers fenced, partitions had no leader for up to
18 s. Kafka's clients reconnect within reconnect.backoff.max.ms (1 s)."""

from __future__ import annotations

import asyncio
import itertools
import socket
import time

import grpc

from broker.controller_channel import ControllerChannel
from common.errors import KafkaError
from proto import controller_pb2 as pb
from proto import controller_pb2_grpc as pb_grpc

HEARTBEAT_S = 0.5  # the chaos harness's broker.heartbeat.interval.ms
MAX_GAP_S = 1.0  # Kafka's reconnect.backoff.max.ms


class Controller(pb_grpc.ControllerServiceServicer):
    async def BrokerHeartbeat(self, request, context):
        return pb.BrokerHeartbeatResponse(is_caught_up=True, is_fenced=False)


async def _heartbeat(ch: ControllerChannel) -> bool:
    try:
        await ch.heartbeat(4, 1, 0, False, False, timeout=max(HEARTBEAT_S, 1.0))  # as the broker's loop
        return True
    except KafkaError:
        return False


async def test_heartbeats_reach_a_controller_within_a_second_of_it_answering_again():
    # the controller's port accepts connections and drops them at once (a node that is not
    # serving): every connection attempt of the channel is seen, with its time
    lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lst.bind(("127.0.0.1", 0))
    lst.listen(64)
    lst.setblocking(False)
    port = lst.getsockname()[1]
    attempts: list[float] = []

    async def drop_all() -> None:
        loop = asyncio.get_running_loop()
        while True:
            conn, _ = await loop.sock_accept(lst)
            attempts.append(time.monotonic())
            conn.close()

    ch = ControllerChannel([(1, "127.0.0.1", port)], lambda: 1)
    dropper = asyncio.create_task(drop_all())
    server = None
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 4.0:
            assert not await _heartbeat(ch)
            await asyncio.sleep(HEARTBEAT_S)
        dropper.cancel()
        lst.close()
        gaps = [round(b - a, 2) for a, b in itertools.pairwise(attempts)]
        assert len(attempts) >= 4 and max(gaps) <= MAX_GAP_S, \
            f"the channel waited {max(gaps, default=0)} s between connection attempts ({gaps})"

        server = grpc.aio.server()
        pb_grpc.add_ControllerServiceServicer_to_server(Controller(), server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        up = time.monotonic()
        while not await _heartbeat(ch):
            assert time.monotonic() - up < 3 * MAX_GAP_S, "no heartbeat got through in 3 s"
            await asyncio.sleep(0.05)
    finally:
        dropper.cancel()
        lst.close()
        await ch.close()
        if server is not None:
            await server.stop(None)
