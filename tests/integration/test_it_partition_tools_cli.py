"""The partition tools run as a Kafka user types them (subprocesses against a real node):
``krafty delete-records``, ``krafty leader-election``, ``krafty reassign-partitions`` (on 3-broker
clusters: tests/cluster/test_elect_leaders.py, test_reassign_partitions.py)."""

from __future__ import annotations

import json
import subprocess

import pytest
from clients import Confluent, Rec
from conftest import create_topic
from krafty_node import REPO, free_port, krafty_python

pytestmark = pytest.mark.krafty_only


def cli(verb: str, *args: str, check: int | None = 0) -> subprocess.CompletedProcess:
    p = subprocess.run([krafty_python(), "-m", "krafty", verb, *args], cwd=str(REPO), capture_output=True,
                       text=True, timeout=60)
    if check is not None:
        assert p.returncode == check, f"rc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


def test_delete_records_as_kafka_users_type_it(broker, topic, tmp_path):
    create_topic(broker, topic, 2)
    assert len(Confluent().produce(broker.bootstrap, topic, [Rec(b"k", b"v%d" % i) for i in range(10)],
                                   partition=0)) == 10
    spec = tmp_path / "offsets.json"
    spec.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0, "offset": 4},
                                               {"topic": topic, "partition": 1, "offset": 3},
                                               {"topic": "no-such-topic", "partition": 0, "offset": 1}],
                                "version": 1}))
    out = cli("delete-records", "--bootstrap-server", broker.bootstrap, "--offset-json-file", str(spec)).stdout
    assert out.splitlines() == [
        "Executing records delete operation",
        "Records delete operation completed:",
        f"partition: {topic}-0\tlow_watermark: 4",
        f"partition: {topic}-1\terror: OFFSET_OUT_OF_RANGE",  # partition 1 is empty: 3 is beyond its end
        "partition: no-such-topic-0\terror: UNKNOWN_TOPIC_OR_PARTITION",
    ]
    assert Confluent().watermarks(broker.bootstrap, topic, 0) == (4, 10)
    spec.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0, "offset": -1}]}))
    out = cli("delete-records", "--bootstrap-server", broker.bootstrap, "--offset-json-file", str(spec)).stdout
    assert f"partition: {topic}-0\tlow_watermark: 10" in out


@pytest.mark.parametrize("doc, needle", [
    ({"partitions": [{"topic": "t", "partition": 0, "offset": 1}], "version": 2}, "Not supported version field value 2"),
    ({"version": 1}, "Missing partitions field"),
    ({"partitions": [{"topic": "t", "partition": 0, "offset": 1}, {"topic": "t", "partition": 0, "offset": 2}]},
     "duplicate topic partitions: t-0"),
    ({"partitions": [{"topic": "t", "partition": "0", "offset": 1}]}, "integers"),
])
def test_delete_records_bad_json_file(tmp_path, doc, needle):
    spec = tmp_path / "offsets.json"
    spec.write_text(json.dumps(doc))
    p = cli("delete-records", "--bootstrap-server", "127.0.0.1:1", "--offset-json-file", str(spec), check=2)
    assert needle in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_delete_records_unreachable_cluster_is_one_line_and_exit_1(tmp_path):
    spec = tmp_path / "offsets.json"
    spec.write_text(json.dumps({"partitions": [{"topic": "t", "partition": 0, "offset": 1}]}))
    p = cli("delete-records", "--bootstrap-server", f"127.0.0.1:{free_port()}", "--offset-json-file", str(spec),
            check=1)
    assert p.stderr.startswith("Error: cannot connect to any --bootstrap-server") and \
        len(p.stderr.strip().splitlines()) == 1, p.stderr
    p = cli("delete-records", "--bootstrap-server", "127.0.0.1:9092", "--offset-json-file", str(spec),
            "--command-config", str(tmp_path / "missing.properties"), check=2)
    assert "cannot read --command-config" in p.stderr


@pytest.mark.parametrize("args, needle", [
    (["--election-type", "preferred"], "One and only one of the following options is required"),
    (["--election-type", "preferred", "--topic", "t", "--all-topic-partitions"], "One and only one"),
    (["--election-type", "preferred", "--topic", "t"], "Missing required option(s) [partition]"),
    (["--election-type", "preferred", "--all-topic-partitions", "--partition", "1"], "--partition only goes with"),
    (["--election-type", "dirty", "--all-topic-partitions"], "invalid choice"),
])
def test_leader_election_bad_arguments(args, needle):
    p = cli("leader-election", "--bootstrap-server", "127.0.0.1:1", *args, check=2)
    assert needle in p.stderr, p.stderr


def test_leader_election_unreachable_cluster_is_one_line_and_exit_1():
    p = cli("leader-election", "--bootstrap-server", f"127.0.0.1:{free_port()}", "--election-type", "preferred",
            "--all-topic-partitions", check=1)
    assert p.stderr.startswith("Error: cannot connect to any --bootstrap-server") and \
        len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_leader_election_on_a_single_node(broker, topic):
    create_topic(broker, topic, 1)
    p = cli("leader-election", "--bootstrap-server", broker.bootstrap, "--election-type", "preferred",
            "--topic", topic, "--partition", "0")
    assert p.stdout == f"Valid replica already elected for partitions {topic}-0\n"


def test_reassign_partitions_generate_and_list_on_a_single_node(broker, topic, tmp_path):
    create_topic(broker, topic, 2)
    spec = tmp_path / "topics.json"
    spec.write_text(json.dumps({"topics": [{"topic": topic}], "version": 1}))
    p = cli("reassign-partitions", "--bootstrap-server", broker.bootstrap, "--generate", "--topics-to-move-json-file",
            str(spec), "--broker-list", "1")
    lines = p.stdout.splitlines()
    assert lines[0] == "Current partition replica assignment" and lines[3] == \
        "Proposed partition reassignment configuration", p.stdout
    current, proposed = json.loads(lines[1]), json.loads(lines[4])
    assert current == proposed == {"version": 1, "partitions": [
        {"topic": topic, "partition": i, "replicas": [1], "log_dirs": ["any"]} for i in range(2)]}
    assert cli("reassign-partitions", "--bootstrap-server", broker.bootstrap, "--list").stdout == \
        "No partition reassignments found.\n"
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [7]}]}))
    p = cli("reassign-partitions", "--bootstrap-server", broker.bootstrap, "--execute", "--reassignment-json-file",
            str(plan), check=1)
    assert p.stderr.strip() == "Error: INVALID_REPLICA_ASSIGNMENT: Unknown broker id(s) 7", p.stderr
    p = cli("reassign-partitions", "--bootstrap-server", broker.bootstrap, "--generate", "--topics-to-move-json-file",
            str(spec), "--broker-list", "1,2", check=1)
    assert p.stderr.strip() == "Error: INVALID_REPLICA_ASSIGNMENT: Unknown broker id(s) 2", p.stderr


@pytest.mark.parametrize("args, doc, needle", [
    (["--execute"], None, "Missing required argument \"[reassignment-json-file]\" for --execute"),
    (["--execute", "--verify", "--reassignment-json-file", "F"], {}, "exactly one action"),
    (["--generate", "--broker-list", "1"], None, "--generate needs --topics-to-move-json-file and --broker-list"),
    (["--verify", "--reassignment-json-file", "F"], {"version": 1, "partitions": []},
     "Partition reassignment list cannot be empty"),
    (["--execute", "--reassignment-json-file", "F"],
     {"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 1]}]},
     "Partition replica lists may not contain duplicate entries: t-0 contains 1"),
    (["--execute", "--reassignment-json-file", "F"],
     {"partitions": [{"topic": "t", "partition": 0, "replicas": [1]}, {"topic": "t", "partition": 0, "replicas": [2]}]},
     "Partition reassignment contains duplicate topic partitions: t-0"),
])
def test_reassign_partitions_bad_input(tmp_path, args, doc, needle):
    f = tmp_path / "f.json"
    if doc is not None:
        f.write_text(json.dumps(doc))
    args = [str(f) if a == "F" else a for a in args]
    p = cli("reassign-partitions", "--bootstrap-server", f"127.0.0.1:{free_port()}", *args, check=2)
    assert needle in p.stderr, p.stderr


def test_log_dirs_describe_as_kafka_users_type_it(broker, topic):
    create_topic(broker, topic, 2)
    assert len(Confluent().produce(broker.bootstrap, topic, [Rec(b"k", b"v" * 100)] * 5, partition=1)) == 5
    p = cli("log-dirs", "--bootstrap-server", broker.bootstrap, "--describe", "--topic-list", topic)
    lines = p.stdout.splitlines()
    assert lines[:2] == ["Querying brokers for log directories information",
                         "Received log directory information from brokers 1"], p.stdout
    doc = json.loads(lines[2])
    [b] = doc["brokers"]
    [d] = b["logDirs"]
    assert doc["version"] == 1 and b["broker"] == 1 and d["error"] is None and d["logDir"].startswith("/")
    parts = {p["partition"]: p for p in d["partitions"]}
    assert set(parts) == {f"{topic}-0", f"{topic}-1"}
    assert parts[f"{topic}-0"]["size"] == 0 and parts[f"{topic}-1"]["size"] > 500
    assert parts[f"{topic}-1"]["offsetLag"] == 0 and parts[f"{topic}-1"]["isFuture"] is False
    p = cli("log-dirs", "--bootstrap-server", broker.bootstrap, "--describe", "--broker-list", "1,7", check=1)
    assert p.stderr.strip() == "ERROR: The given brokers do not exist from --broker-list: 7. Current existent " \
        "brokers: 1"
    cli("log-dirs", "--bootstrap-server", broker.bootstrap, check=2)  # --describe is required
    # kafka-python's AdminClient reads the same
    from kafka import KafkaAdminClient
    ka = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        res = ka.describe_log_dirs({topic: [1]})
        text = str(res)
        assert topic in text and d["logDir"] in text, text
    finally:
        ka.close()


def test_describe_topic_partitions_through_kafka_python_pages_with_the_cursor(broker, topic):
    from kafka import KafkaAdminClient
    create_topic(broker, topic, 3)
    ka = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        first = ka.describe_topic_partitions([topic], response_partition_limit=2)
        assert [p["partition_index"] for p in first["topics"][0]["partitions"]] == [0, 1]
        assert first["next_cursor"] == {"topic_name": topic, "partition_index": 2}
        rest = ka.describe_topic_partitions([topic], response_partition_limit=2, cursor=first["next_cursor"])
        [t] = rest["topics"]
        assert [(p["partition_index"], p["leader_id"], p["replica_nodes"]) for p in t["partitions"]] == [(2, 1, [1])]
        assert rest["next_cursor"] is None and t["error_code"] == 0 and not t["is_internal"]
        missing = ka.describe_topic_partitions(["no-such-topic"])
        assert missing["topics"][0]["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION
    finally:
        ka.close()


def test_delete_records_through_aiokafka(broker, topic):
    import asyncio

    from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
    from aiokafka.structs import TopicPartition as ATP
    create_topic(broker, topic, 1)
    assert len(Confluent().produce(broker.bootstrap, topic, [Rec(b"k", b"v%d" % i) for i in range(8)],
                                   partition=0)) == 8

    async def run():
        a = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await a.start()
        try:
            return await a.delete_records({ATP(topic, 0): RecordsToDelete(before_offset=5)})
        finally:
            await a.close()
    assert asyncio.run(run()) == {ATP(topic, 0): 5}
    assert Confluent().watermarks(broker.bootstrap, topic, 0) == (5, 8)
