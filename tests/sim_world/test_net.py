"""The simulated network's duplication: a gRPC call executed twice (a retried RPC)."""

from __future__ import annotations

import logging
import random

import grpc
import pytest

from sim.loop import SimLoop
from sim.net import SimGrpcServer, SimNet
from sim.scenario import Fault, run_seed


async def _serve_and_call(net: SimNet, calls: list[bytes]) -> bytes:
    async def handle(request: bytes, _ctx) -> bytes:
        calls.append(request)
        return b"answer %d" % len(calls)

    srv = SimGrpcServer(net)
    srv.add_registered_method_handlers("Svc", {"M": grpc.unary_unary_rpc_method_handler(
        handle, request_deserializer=bytes, response_serializer=bytes)})
    srv.add_insecure_port("n1.sim:9093")
    await srv.start()
    return await net.unary_call("n1.sim:9093", "/Svc/M", b"req", timeout=5.0)


@pytest.mark.parametrize(("dup", "runs"), [(0.0, 1), (1.0, 2)])
def test_a_duplicated_call_runs_twice_and_answers_once(dup, runs):
    loop = SimLoop(7)
    net = SimNet(loop, random.Random(7), dup=dup)
    calls: list[bytes] = []
    answer = loop.run_task(_serve_and_call(net, calls))
    loop.run_until(loop.time() + 1.0)  # (nothing runs a third time later)
    assert calls == [b"req"] * runs
    assert answer == b"answer %d" % runs  # the retry's answer: the first one was lost
    assert net.duplicated == runs - 1
    loop.close()


def test_a_world_keeps_its_invariants_with_duplicated_raft_and_controller_calls():
    logging.disable(logging.CRITICAL)
    try:
        r = run_seed(5003, safety_s=3.0, faults=[Fault(0.05, "dup", 1, duration=2.9, arg=40)])
    finally:
        logging.disable(logging.NOTSET)
    assert r.acked > 0
    assert r.grpc_dups > 10  # (Raft fetches, heartbeats, AlterPartition...: ~25 in this run)
