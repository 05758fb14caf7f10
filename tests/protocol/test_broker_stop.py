"""A broker stops promptly when no controller answers: its controlled shutdown waits no longer
than its session (broker.session.timeout.ms) once heartbeats go unanswered, since the controller
fences it by then anyway (it used to wait 30 s: a broker stopped during a controller replacement
outlived the test's 30 s bound)."""

from __future__ import annotations

import time

from common.config import Config
from krafty.node import Node
from tests.protocol.conftest import TEST_CLUSTER_ID, free_port


async def test_broker_stops_within_its_session_when_no_controller_answers(tmp_path):
    cport, bport = free_port(), free_port()
    common = {"controller.listener.names": "CONTROLLER", "controller.quorum.voters": f"1@127.0.0.1:{cport}",
              "cluster.id": TEST_CLUSTER_ID, "broker.session.timeout.ms": "2000",
              "broker.heartbeat.interval.ms": "500"}
    controller = Node(Config({**common, "node.id": "1", "process.roles": "controller",
                              "listeners": f"CONTROLLER://127.0.0.1:{cport}", "log.dirs": str(tmp_path / "c")}))
    broker = Node(Config({**common, "node.id": "2", "process.roles": "broker",
                          "listeners": f"PLAINTEXT://127.0.0.1:{bport}", "log.dirs": str(tmp_path / "b"),
                          "offsets.topic.replication.factor": "1"}))
    await controller.start()
    try:
        await broker.start()  # registered and unfenced
        await controller.stop()  # the only controller is gone
        t0 = time.monotonic()
        await broker.stop()
        took = time.monotonic() - t0
        assert took < 6, f"the broker took {took:.1f} s to stop"
    finally:
        await broker.stop()
        await controller.stop()
