"""Metrics of a real 3 controller + 3 broker cluster: every node is scraped and parsed with
prometheus_client's parser; every metric and label the Grafana dashboard (deploy/grafana/
krafty.json) queries exists; a killed broker moves the replication and controller metrics the
way an operator's alerts expect (UnderReplicatedPartitions, IsrShrinks, OfflinePartitionsCount,
FencedBrokerCount) and they come back when it returns. One broker logs JSON lines."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from common.ports import free_port
from tests.cluster import conftest as cluster_conftest
from tests.cluster.conftest import FAST, Cluster, running_cluster, wait_until

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "krafty.json"
TARGET_LABELS = {"instance", "job", "role"}  # added by Prometheus from the scrape config


def http(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def scrape(port: int) -> dict[str, list]:
    """{sample name: [labels dict, ...]} with values: [(labels, value)]."""
    status, body = http(port, "/metrics")
    assert status == 200
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def value(samples: dict, name: str, **labels) -> float:
    return sum(v for lab, v in samples.get(name, []) if all(lab.get(k) == str(x) for k, x in labels.items()))


def dashboard_queries() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]


def check_dashboard_against(scrapes: list[dict]) -> None:
    """Every metric a dashboard query names is served by some node, with the labels the query
    selects on or aggregates by."""
    labels_of: dict[str, set[str]] = {}
    for sc in scrapes:
        for name, samples in sc.items():
            for lab, _ in samples:
                labels_of.setdefault(name, set()).update(lab)
    missing = []
    for expr in dashboard_queries():
        names = re.findall(r"\b((?:kafka|krafty|process)_[a-z0-9_]+)\b", expr)
        assert names, expr
        for n in names:
            if n not in labels_of:
                missing.append(f"{n} (in {expr})")
        for n, sel in re.findall(r"\b((?:kafka|krafty|process)_[a-z0-9_]+)\{([^}]*)\}", expr):
            for key in re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", sel):
                if key not in labels_of.get(n, set()):
                    missing.append(f"label {key} of {n} (in {expr})")
        for group in re.findall(r"by \(([^)]*)\)", expr):
            for key in (k.strip() for k in group.split(",")):
                if key not in TARGET_LABELS and not any(key in labels_of.get(n, set()) for n in names):
                    missing.append(f"label {key} (in {expr})")
    assert not missing, "dashboard queries name what no node serves:\n" + "\n".join(missing)


class MetricsCluster(Cluster):
    """A cluster whose nodes serve metrics, each on its own port; broker-4 logs JSON."""

    def __init__(self, directory: str, **kw):
        super().__init__(directory, **kw)
        # not one of the ports the nodes' listeners will take (a free port now may be one of them:
        # a scrape once reached a controller's gRPC listener)
        taken = {*range(self.base, self.base + 10), *range(self.base + 100, self.base + 110)}
        for props in self.configs.values():
            port = free_port()
            while port in taken:
                port = free_port()
            taken.add(port)
            props["krafty.metrics.port"] = str(port)
        self.configs["broker-4"]["krafty.log.format"] = "json"
        self.metrics_port = {n: int(p["krafty.metrics.port"]) for n, p in self.configs.items()}


@pytest.fixture
def metrics_cluster(tmp_path, request, monkeypatch):
    monkeypatch.setattr(cluster_conftest, "Cluster", MetricsCluster)
    with running_cluster(tmp_path, request, overrides={**FAST, "group.initial.rebalance.delay.ms": "0",
                                                       "krafty.metrics.host": "127.0.0.1",
                                                       "krafty.metrics.consumer.lag.interval.ms": "500"}) as c:
        yield c


def test_every_node_serves_the_dashboards_metrics_and_a_killed_broker_moves_them(metrics_cluster):
    c = metrics_cluster
    ports = c.metrics_port
    wait_until(lambda: all(http(p, "/ready")[0] == 200 for p in ports.values()), 60, "every node ready")
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic("mt", 3, 3), NewTopic("solo", num_partitions=1, replica_assignment=[[6]])])["mt"].result(30)
    wait_until(lambda: "solo" in admin.list_topics(timeout=10).topics, 30, "topic solo")
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(300):
        p.produce("mt", key=str(i).encode(), value=b"x" * 200)
    assert p.flush(30) == 0
    cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "dash", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False})
    cons.subscribe(["mt"])
    got = 0

    def consume_all() -> bool:
        nonlocal got
        got += sum(1 for m in cons.consume(500, 1) if m.error() is None)
        return got >= 300
    wait_until(consume_all, 60, "300 records consumed", interval=0)
    cons.commit(asynchronous=False)
    cons.close()

    def everyone() -> list[dict]:
        return [scrape(port) for port in ports.values()]
    # consumer lag is sampled by the coordinator every 500 ms
    wait_until(lambda: sum(value(s, "kafka_consumergroup_current_offset", consumergroup="dash", topic="mt")
                           for s in everyone()) == 300, 30, "the group's committed offsets exported")
    wait_until(lambda: any("kafka_consumergroup_lag" in s for s in everyone()), 30, "the group's lag exported")
    scrapes = everyone()
    check_dashboard_against(scrapes)
    assert sum(value(s, "kafka_consumergroup_lag", consumergroup="dash") for s in scrapes) == 0
    assert sum(value(s, "kafka_controller_kafkacontroller_activecontrollercount") for s in scrapes) == 1
    assert sum(value(s, "kafka_server_brokertopicmetrics_messagesin_total", topic="mt") for s in scrapes) == 300
    assert sum(value(s, "kafka_server_brokertopicmetrics_replicationbytesin_total") for s in scrapes) > 300 * 200
    assert sum(value(s, "kafka_server_replicamanager_underreplicatedpartitions") for s in scrapes) == 0
    voters = {value(s, "kafka_server_raftmetrics_current_leader") for n, s in zip(ports, scrapes, strict=True)}
    assert len(voters) == 1 and voters.pop() in (1, 2, 3)  # every node, observers too, knows the leader

    def brokers() -> list[dict]:
        return [scrape(ports[n]) for n in ("broker-4", "broker-5")]

    def active() -> dict:
        for n in ("controller-1", "controller-2", "controller-3"):
            s = scrape(ports[n])
            if value(s, "kafka_controller_kafkacontroller_activecontrollercount") == 1:
                return s
        raise AssertionError("no active controller")
    shrinks0 = sum(value(s, "kafka_server_replicamanager_isrshrinks_total") for s in brokers())
    c.kill("broker-6")
    wait_until(lambda: sum(value(s, "kafka_server_replicamanager_underreplicatedpartitions") for s in brokers()) > 0,
               30, "UnderReplicatedPartitions > 0 after the kill")
    assert sum(value(s, "kafka_server_replicamanager_isrshrinks_total") for s in brokers()) > shrinks0
    wait_until(lambda: value(active(), "kafka_controller_kafkacontroller_fencedbrokercount") == 1
               and value(active(), "kafka_controller_kafkacontroller_offlinepartitionscount") == 1, 30,
               "broker 6 fenced and its single-replica partition offline on the active controller")
    c.start("broker-6")
    wait_until(lambda: http(ports["broker-6"], "/ready")[0] == 200, 60, "broker 6 ready again")
    wait_until(lambda: sum(value(scrape(ports[n]), "kafka_server_replicamanager_underreplicatedpartitions")
                           for n in ("broker-4", "broker-5", "broker-6")) == 0, 60, "UnderReplicatedPartitions back to 0")
    s = active()
    assert value(s, "kafka_controller_kafkacontroller_fencedbrokercount") == 0
    assert value(s, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert sum(value(scrape(ports[n]), "kafka_server_replicamanager_isrexpands_total")
               for n in ("broker-4", "broker-5", "broker-6")) > 0
    # broker-4 logs one JSON object per line, with its node id and partition context
    lines = [json.loads(ln) for ln in c.log_text("broker-4").splitlines() if ln.startswith("{")]
    assert lines and all(ln["node_id"] == 4 and {"time", "level", "logger", "message"} <= ln.keys() for ln in lines)
    assert any(ln.get("topic") == "mt" and "partition" in ln for ln in lines)
