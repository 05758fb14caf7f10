"""The compose file's Prometheus (deploy/prometheus) on a real Docker engine: it scrapes all six
nodes (its targets API reports them up), and the UnderReplicatedPartitions query an alert would
use goes from 0 to > 0 when a broker container is killed and back to 0 once it returns."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.docker.conftest import run, wait_until

URP = "sum(kafka_server_replicamanager_underreplicatedpartitions)"


def _api(c, path: str, **params) -> dict:
    url = f"http://localhost:{c.prometheus_port}/api/v1/{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=10) as r:
        doc = json.loads(r.read())
    assert doc["status"] == "success", doc
    return doc["data"]


def _query(c, expr: str) -> float | None:
    result = _api(c, "query", query=expr)["result"]
    return float(result[0]["value"][1]) if result else None


def _targets_up(c) -> dict[str, str]:
    return {t["labels"]["instance"]: t["health"] for t in _api(c, "targets")["activeTargets"]}


def test_prometheus_scrapes_every_node_and_sees_a_killed_broker(compose_cluster):
    c = compose_cluster
    expected = {f"{s}:9404" for s in c.services}
    wait_until(lambda: _targets_up(c) == dict.fromkeys(expected, "up"), 120,
               f"prometheus reporting {sorted(expected)} up (now {_targets_up(c) if c else None})", interval=2)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic("urp", 6, 3)])["urp"].result(60)
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
    for i in range(60):
        p.produce("urp", value=f"v{i}".encode(), partition=i % 6)
    assert p.flush(60) == 0
    wait_until(lambda: _query(c, URP) == 0 and _query(c, "sum(kafka_controller_kafkacontroller_activecontrollercount)")
               == 1, 60, "UnderReplicatedPartitions 0 and one active controller", interval=2)
    victim = c.container("broker-6")
    run(["docker", "kill", victim])
    wait_until(lambda: (_query(c, URP) or 0) > 0, 90, "UnderReplicatedPartitions > 0 with broker-6 killed", interval=2)
    run(["docker", "start", victim])
    wait_until(lambda: _query(c, URP) == 0, 180, "UnderReplicatedPartitions back to 0 with broker-6 back", interval=2)
    wait_until(lambda: _targets_up(c) == dict.fromkeys(expected, "up"), 60, "all six targets up again", interval=2)
