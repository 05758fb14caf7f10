"""DescribeQuorum answered by brokers (forwarded to the quorum's leader), so
`krafty metadata-quorum --bootstrap-server` works as kafka-metadata-quorum.sh does."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from common.errors import ErrorCode


async def test_describe_quorum_through_a_broker(node):
    c = KafkaConnection("127.0.0.1", node.port)
    await c.connect()
    try:
        for ver in (0, 1, 2):
            r = await c.request(ApiKey.DESCRIBE_QUORUM, ver, {"topics": [
                {"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]})
            p = r.topics[0].partitions[0]
            assert (r.error_code, p.error_code, p.leader_id) == (0, 0, 1), r
            assert p.leader_epoch >= 1 and p.high_watermark > 0
            assert [v.replica_id for v in p.current_voters] == [1] and p.current_voters[0].log_end_offset > 0
            if ver >= 1:
                assert p.current_voters[0].last_fetch_timestamp > 0
            if ver >= 2:
                assert [(n.node_id, [(x.host, x.port) for x in n.listeners]) for n in r.nodes] == [
                    (1, [("127.0.0.1", node.cfg["controller.quorum.voters"][0][2])])]
        r = await c.request(ApiKey.DESCRIBE_QUORUM, 2, {"topics": [
            {"topic_name": "other", "partitions": [{"partition_index": 0}]}]})
        assert r.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        c.close()

    def kafka_python():
        from kafka.admin import KafkaAdminClient

        a = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{node.port}")
        try:
            return a.describe_metadata_quorum()
        finally:
            a.close()
    got = await asyncio.get_running_loop().run_in_executor(None, kafka_python)
    assert "'leader_id': 1" in repr(got) and "'replica_id': 1" in repr(got), got
    for what, first in (("--status", "ClusterId:"), ("--replication", "NodeId")):
        p = await asyncio.create_subprocess_exec(sys.executable, "-m", "krafty", "metadata-quorum", "--bootstrap-server",
                                                 f"127.0.0.1:{node.port}", "describe", what, stdout=subprocess.PIPE,
                                                 stderr=subprocess.PIPE)
        out, err = await p.communicate()
        assert p.returncode == 0 and out.decode().startswith(first), (out, err)
        if what == "--status":
            assert "LeaderId:               1" in out.decode() and "CurrentVoters:          [1]" in out.decode()
    p = await asyncio.create_subprocess_exec(sys.executable, "-m", "krafty", "metadata-quorum", "--bootstrap-server",
                                             "127.0.0.1:1", "describe", "--status", stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE)
    out, err = await p.communicate()
    assert p.returncode == 1 and err.decode().count("\n") == 1 and "127.0.0.1:1" in err.decode()


async def test_raft_voter_changes_through_a_broker_on_a_static_quorum(node):
    # controller.quorum.voters (kraft.version 0): Kafka's UNSUPPORTED_VERSION; another cluster's id: refused
    c = KafkaConnection("127.0.0.1", node.port)
    await c.connect()
    try:
        r = await c.request(ApiKey.ADD_RAFT_VOTER, 0, {"cluster_id": None, "timeout": 5000, "voter_id": 2,
                                                       "voter_directory_id": None,
                                                       "listeners": [{"name": "CONTROLLER", "host": "h", "port": 1}]})
        assert r.error_code == ErrorCode.UNSUPPORTED_VERSION and "kraft.version" in r.error_message
        r = await c.request(ApiKey.REMOVE_RAFT_VOTER, 0, {"cluster_id": "VooDHOqVQDmEcPv6VrzhYw", "voter_id": 1,
                                                          "voter_directory_id": None})
        assert r.error_code == ErrorCode.INCONSISTENT_CLUSTER_ID
    finally:
        c.close()
