"""Read your writes after admin calls (1 controller + 2 brokers, separate processes): a broker
answers CreateTopics, CreatePartitions, IncrementalAlterConfigs, CreateAcls, DeleteTopics only
once its own metadata image has the change, so the same client's next request to the same
broker sees it. Without that, the change reaches the broker a fetch of the metadata log
(1-24 ms) after the answer, and these checks fail within a few rounds."""

from __future__ import annotations

import asyncio
import uuid

from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from tests.cluster.conftest import FAST, running_cluster, wait_until

ROUNDS = 15
OVERRIDES = {**FAST, "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
             "allow.everyone.if.no.acl.found": "true"}


async def check(port: int) -> list[str]:
    conn = KafkaConnection("127.0.0.1", port, client_id="ryw")
    await conn.connect()
    stale = []
    try:
        for i in range(ROUNDS):
            name = f"ryw-{i}-{uuid.uuid4().hex[:6]}"
            r = await conn.request(ApiKey.CREATE_TOPICS, 7, {"topics": [
                {"name": name, "num_partitions": 2, "replication_factor": 2, "assignments": [], "configs": []}],
                "timeout": 30_000, "validate_only": False})
            assert r.topics[0].error_code == 0, r
            md = await conn.request(ApiKey.METADATA, 12, {"topics": [{"name": name, "topic_id": uuid.UUID(int=0)}],
                                                          "allow_auto_topic_creation": False,
                                                          "include_topic_authorized_operations": False})
            t = md.topics[0]
            if t.error_code != 0 or len(t.partitions) != 2 or any(p.leader_id < 0 for p in t.partitions):
                stale.append(f"CreateTopics {name}: {t.error_code} {len(t.partitions)}")
            r = await conn.request(ApiKey.CREATE_PARTITIONS, 3, {"topics": [
                {"name": name, "count": 3, "assignments": None}], "timeout": 30_000, "validate_only": False})
            assert r.results[0].error_code == 0, r
            md = await conn.request(ApiKey.METADATA, 12, {"topics": [{"name": name, "topic_id": uuid.UUID(int=0)}],
                                                          "allow_auto_topic_creation": False,
                                                          "include_topic_authorized_operations": False})
            if len(md.topics[0].partitions) != 3:
                stale.append(f"CreatePartitions {name}: {len(md.topics[0].partitions)}")
            r = await conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
                {"resource_type": 2, "resource_name": name, "configs": [
                    {"name": "retention.ms", "config_operation": 0, "value": str(1000 + i)}]}], "validate_only": False})
            assert r.responses[0].error_code == 0, r
            dc = await conn.request(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
                {"resource_type": 2, "resource_name": name, "configuration_keys": ["retention.ms"]}],
                "include_synonyms": False, "include_documentation": False})
            if [c.value for c in dc.results[0].configs] != [str(1000 + i)]:
                stale.append(f"IncrementalAlterConfigs {name}: {[c.value for c in dc.results[0].configs]}")
            # a group ACL (the topic stays open to everyone)
            acl = {"resource_type": 3, "resource_name": name, "resource_pattern_type": 3, "principal": "User:x",
                   "host": "*", "operation": 3, "permission_type": 3}
            r = await conn.request(ApiKey.CREATE_ACLS, 3, {"creations": [acl]})
            assert r.results[0].error_code == 0, r
            da = await conn.request(ApiKey.DESCRIBE_ACLS, 3, {
                "resource_type_filter": 3, "resource_name_filter": name, "pattern_type_filter": 3,
                "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
            if len(da.resources) != 1:
                stale.append(f"CreateAcls {name}: {len(da.resources)}")
            r = await conn.request(ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": name, "topic_id": uuid.UUID(int=0)}],
                                                             "timeout": 30_000})
            assert r.responses[0].error_code == 0, r
            md = await conn.request(ApiKey.METADATA, 12, {"topics": [{"name": name, "topic_id": uuid.UUID(int=0)}],
                                                          "allow_auto_topic_creation": False,
                                                          "include_topic_authorized_operations": False})
            if md.topics[0].error_code == 0:
                stale.append(f"DeleteTopics {name}: still there")
    finally:
        conn.close()
    return stale


def test_admin_changes_are_visible_on_the_answering_broker_at_once(tmp_path, request):
    with running_cluster(tmp_path, request, controllers=1, brokers=2, overrides=OVERRIDES) as c:
        ports = [c.base + i for i in range(2)]

        def up():
            from confluent_kafka.admin import AdminClient
            return len(AdminClient({"bootstrap.servers": c.bootstrap}).list_topics(timeout=5).brokers) == 2
        wait_until(up, 60, "brokers up")
        stale = asyncio.run(check(ports[1]))
        assert stale == [], stale
