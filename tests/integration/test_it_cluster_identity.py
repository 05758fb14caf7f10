"""Cluster identity end to end: `krafty storage` as kafka-storage.sh, a node that refuses
directories of no cluster, another cluster or another node id (exit code 1, one line saying
why), and a broker pointed at another cluster's controllers, refused with
INCONSISTENT_CLUSTER_ID on every inter-node call."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from krafty_node import TEST_CLUSTER_ID, KraftyNode, free_port

pytestmark = pytest.mark.krafty_only
REPO = Path(__file__).resolve().parents[2]
OTHER = "VooDHOqVQDmEcPv6VrzhYw"


def krafty(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "krafty", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def write_config(tmp_path, **extra) -> Path:
    port, cport = free_port(), free_port()
    props = {"node.id": "1", "process.roles": "broker,controller",
             "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
             "controller.quorum.voters": f"1@127.0.0.1:{cport}", "log.dirs": f"{tmp_path}/data"}
    props.update(extra)
    path = tmp_path / "server.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def test_storage_verbs_and_a_node_on_formatted_directories(tmp_path):
    cid = krafty("storage", "random-uuid").stdout.strip()
    assert len(cid) == 22
    cfg = write_config(tmp_path)
    res = krafty("node", "--config", str(cfg))  # Kafka's behaviour: unformatted directories
    assert res.returncode == 1 and "krafty storage format" in res.stderr and "meta.properties" in res.stderr, res
    res = krafty("storage", "info", "--config", str(cfg))
    assert res.returncode == 1 and "is not formatted." in res.stdout, res
    res = krafty("storage", "format", "--config", str(cfg), "--cluster-id", "nope")
    assert res.returncode == 1 and "valid UUID" in res.stderr, res
    res = krafty("storage", "format", "--config", str(cfg), "--cluster-id", cid)
    assert res.returncode == 0 and f"Formatting metadata directory {tmp_path}/data" in res.stdout, res
    meta = (tmp_path / "data" / "meta.properties").read_text()
    assert f"cluster.id={cid}" in meta and "node.id=1" in meta and "version=1" in meta and "directory.id=" in meta
    res = krafty("storage", "format", "-c", str(cfg), "-t", cid)
    assert res.returncode == 1 and "already formatted" in res.stderr, res
    assert krafty("storage", "format", "-c", str(cfg), "-t", cid, "--ignore-formatted").returncode == 0
    res = krafty("storage", "info", "--config", str(cfg))
    assert res.returncode == 0 and f"cluster.id={cid}" in res.stdout, res
    # the node starts on them, and its cluster id is the formatted one
    n = KraftyNode(tmp_path / "n")
    n.extra_properties = {"log.dirs": f"{tmp_path}/data", "cluster.id": cid}
    try:
        n.start()
        from confluent_kafka.admin import AdminClient

        assert AdminClient({"bootstrap.servers": n.bootstrap}).list_topics(timeout=10).cluster_id == cid
    finally:
        n.close()


@pytest.mark.parametrize("change, words", [({"cluster.id": OTHER}, "Invalid cluster.id"),
                                           ({"node.id": "2"}, "Stored node id 1 doesn't match")])
def test_a_node_refuses_another_clusters_or_nodes_directories(tmp_path, change, words):
    cfg = write_config(tmp_path)
    assert krafty("storage", "format", "-c", str(cfg), "-t", TEST_CLUSTER_ID).returncode == 0
    cport = free_port()
    props = {"controller.quorum.voters": f"{change.get('node.id', '1')}@127.0.0.1:{cport}",
             "listeners": f"PLAINTEXT://127.0.0.1:{free_port()},CONTROLLER://127.0.0.1:{cport}", **change}
    res = krafty("node", "--config", str(write_config(tmp_path, **props)))
    assert res.returncode == 1 and words in res.stderr, res


def test_a_broker_pointed_at_another_clusters_controllers_is_refused(tmp_path):
    home = KraftyNode(tmp_path / "home")
    home.start()
    try:
        stray = KraftyNode(tmp_path / "stray", node_id=7, voters=home.voters, process_roles="broker")
        stray.extra_properties = {"cluster.id": OTHER, "listeners": f"PLAINTEXT://127.0.0.1:{stray.port}"}
        stray.spawn()
        try:
            code = stray.proc.wait(60)
        finally:
            stray.close()
        text = stray.log_path.read_text()
        assert code == 1 and "INCONSISTENT_CLUSTER_ID" in text and "another cluster" in text, text[-3000:]
        assert OTHER in text and TEST_CLUSTER_ID in text
        # the home cluster never saw it and keeps serving
        from confluent_kafka.admin import AdminClient

        md = AdminClient({"bootstrap.servers": home.bootstrap}).list_topics(timeout=10)
        assert sorted(md.brokers) == [1]
        time.sleep(0.5)
        assert home.running
    finally:
        home.close()
