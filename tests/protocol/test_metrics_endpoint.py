"""The metrics endpoint of an in-process node (krafty.metrics.port): real clients move the
broker's metrics as Kafka's would, /health and /ready say what a container health check needs,
and everything /metrics serves parses with prometheus_client's own parser."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from common.config import Config
from krafty.node import Node
from tests.protocol.conftest import TEST_CLUSTER_ID, free_port, start_node


def http_get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


async def get(port: int, path: str) -> tuple[int, bytes]:
    return await asyncio.get_running_loop().run_in_executor(None, http_get, port, path)


async def scrape(port: int) -> dict:
    """{sample name: {frozenset(labels): value}} of one scrape."""
    status, body = await get(port, "/metrics")
    assert status == 200
    out: dict = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out.setdefault(s.name, {})[frozenset(s.labels.items())] = s.value
    return out


def L(**kw) -> frozenset:
    return frozenset((k, str(v)) for k, v in kw.items())


@pytest.fixture
async def mnode(tmp_path):
    n = await start_node(tmp_path, krafty_metrics_port="0", krafty_metrics_host="127.0.0.1",
                         group_initial_rebalance_delay_ms="0", krafty_metrics_consumer_lag_interval_ms="100")
    yield n
    await n.stop()


async def test_health_ready_and_unknown_paths(mnode):
    port = mnode.metrics_server.port
    status, body = await get(port, "/health")
    assert status == 200 and json.loads(body)["status"] == "UP"
    status, body = await get(port, "/ready")
    ready = json.loads(body)
    assert status == 200 and ready["status"] == "READY", ready
    assert ready["broker"]["state"] == "running" and ready["controller"]["active"] is True
    assert (await get(port, "/nope"))[0] == 404


async def test_produce_fetch_and_consumer_lag_move_their_metrics(mnode):
    port = mnode.metrics_server.port
    bootstrap = f"127.0.0.1:{mnode.port}"
    loop = asyncio.get_running_loop()

    def produce_and_commit() -> None:
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for i in range(100):
            p.produce("m", value=b"v" * 100, key=str(i).encode(), partition=0)
        assert p.flush(30) == 0
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "enable.auto.commit": False,
                      "auto.offset.reset": "earliest"})
        c.assign([TopicPartition("m", 0, 0)])
        got = 0
        while got < 100:
            got += sum(1 for m in c.consume(100, 5) if m.error() is None)
        c.commit(offsets=[TopicPartition("m", 0, 40)], asynchronous=False)
        c.close()

    before = await scrape(port)
    await loop.run_in_executor(None, produce_and_commit)
    await asyncio.sleep(0.5)  # the lag monitor samples every 100 ms
    m = await scrape(port)
    assert m["kafka_server_brokertopicmetrics_messagesin_total"][L(topic="m")] == 100
    assert m["kafka_server_brokertopicmetrics_messagesin_total"][frozenset()] >= 100
    assert m["kafka_server_brokertopicmetrics_bytesin_total"][L(topic="m")] > 100 * 100
    assert m["kafka_server_brokertopicmetrics_bytesout_total"][L(topic="m")] >= 100 * 100
    assert m["kafka_server_brokertopicmetrics_totalproducerequests_total"][L(topic="m")] >= 1
    assert m["kafka_server_brokertopicmetrics_totalfetchrequests_total"][L(topic="m")] >= 1
    produces = sum(v for k, v in m["kafka_network_requestmetrics_requests_total"].items()
                   if ("request", "Produce") in k)
    assert produces >= 1 and not any(("request", "Produce") in k for k in
                                     before.get("kafka_network_requestmetrics_requests_total", {}))
    assert m["kafka_network_requestmetrics_errors_total"][L(request="Produce", error="NONE")] >= 1
    assert m["kafka_network_requestmetrics_totaltimems_count"][L(request="Produce")] == produces
    assert m["kafka_network_requestmetrics_totaltimems"][L(request="FetchConsumer", quantile="0.99")] > 0
    assert m["kafka_network_requestmetrics_totaltimems_count"][L(request="OffsetCommit")] == 1
    # the log and the replica manager
    assert m["kafka_log_log_logendoffset"][L(topic="m", partition=0)] == 100
    assert m["kafka_log_log_size"][L(topic="m", partition=0)] > 100 * 100
    assert m["kafka_server_replicamanager_leadercount"][frozenset()] >= 1
    assert m["kafka_server_replicamanager_underreplicatedpartitions"][frozenset()] == 0
    # consumer lag of group g, exported by its coordinator (this node)
    g = L(consumergroup="g", topic="m", partition=0)
    assert m["kafka_consumergroup_current_offset"][g] == 40
    assert m["kafka_consumergroup_lag"][g] == 60
    assert 0 < m["kafka_consumergroup_lag_seconds"][g] < 60
    assert m["kafka_coordinator_group_groupmetadatamanager_numoffsets"][frozenset()] >= 1
    # the controller, the metadata log and the loop
    assert m["kafka_controller_kafkacontroller_activecontrollercount"][frozenset()] == 1
    assert m["kafka_controller_kafkacontroller_globaltopiccount"][frozenset()] >= 1
    assert m["kafka_server_raftmetrics_current_state"][L(current_state="leader")] == 1
    assert m["kafka_server_raftmetrics_current_leader"][frozenset()] == 1
    assert m["kafka_server_kafkaserver_brokerstate"][frozenset()] == 3
    assert "krafty_eventloop_lag_seconds" in m and "process_open_fds" in m
    assert m["kafka_server_socket_server_metrics_connection_count"][L(listener="PLAINTEXT", networkProcessor=0)] >= 0


async def test_metrics_are_off_by_default(tmp_path):
    n = await start_node(tmp_path)
    try:
        assert n.metrics_server is None and n.broker.metrics is None and n.broker.apis.metrics is None
        assert all(s.metrics is None for s in n.broker.servers)
    finally:
        await n.stop()


async def test_ready_is_503_while_the_controller_has_no_quorum(tmp_path):
    """A controller whose quorum cannot elect a leader (the other voter never starts) is alive
    but not ready, and says why."""
    mport, cport = free_port(), free_port()
    n = Node(Config({"node.id": "1", "process.roles": "controller",
                     "listeners": f"CONTROLLER://127.0.0.1:{cport}",
                     "controller.quorum.voters": f"1@127.0.0.1:{cport},2@127.0.0.1:{free_port()}",
                     "log.dirs": str(tmp_path / "data"), "krafty.metrics.port": str(mport),
                     "krafty.metrics.host": "127.0.0.1", "cluster.id": TEST_CLUSTER_ID}))
    await n.start()
    try:
        await asyncio.sleep(1.0)
        status, body = await get(mport, "/ready")
        ready = json.loads(body)
        assert status == 503 and ready["status"] == "NOT_READY" and ready["controller"]["leader"] is None, ready
        assert (await get(mport, "/health"))[0] == 200
        m = await scrape(mport)
        assert m["kafka_controller_kafkacontroller_activecontrollercount"][frozenset()] == 0
        assert m["kafka_server_raftmetrics_current_leader"][frozenset()] == -1
    finally:
        await n.stop()
