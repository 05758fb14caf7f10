"""ACLs with real clients (confluent-kafka, kafka-python, aiokafka) against a krafty node
running Kafka's StandardAuthorizer. Principals come from SASL/PLAIN on a SASL_PLAINTEXT
listener (User:admin is a super user, User:alice and User:bob are not); the PLAINTEXT
listener's clients are User:ANONYMOUS. ACLs are managed with ``krafty acls`` (CreateAcls,
DescribeAcls, DeleteAcls) and with the clients' admin APIs."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from krafty_node import KraftyNode, free_port, start_or_fail  # noqa: I001 (on sys.path via tests/security/conftest)

from tests.security.conftest import jaas_plain, run_cli

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
PASSWORDS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30


class AclNode:
    def __init__(self, node: KraftyNode, sasl_port: int, tmp):
        self.node, self.sasl_port = node, sasl_port
        self.sasl = f"127.0.0.1:{sasl_port}"
        self.plain = node.bootstrap
        self.props = {}
        for user, pw in PASSWORDS.items():
            path = tmp / f"{user}.properties"
            path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                            f'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required '
                            f'username="{user}" password="{pw}";\n')
            self.props[user] = str(path)

    def acls(self, user: str, *args: str):
        res = run_cli("acls", "--bootstrap-server", self.sasl, "--command-config", self.props[user], *args)
        return res

    def admin_acls(self, *args: str) -> str:
        res = self.acls("admin", *args)
        assert res.returncode == 0, res.stderr + res.stdout
        return res.stdout

    def confluent(self, user: str, **extra) -> dict:
        return {"bootstrap.servers": self.sasl, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                "sasl.username": user, "sasl.password": PASSWORDS[user], **extra}

    def kafka_python(self, user: str, **extra) -> dict:
        return {"bootstrap_servers": self.sasl, "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                "sasl_plain_username": user, "sasl_plain_password": PASSWORDS[user], **extra}


def start_node(tmp, **props) -> tuple[KraftyNode, int]:
    sasl_port = free_port()
    node = KraftyNode(tmp)
    node.extra_properties = {
        "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port},"
                     f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.jaas.config": jaas_plain(PASSWORDS),
        "offsets.topic.replication.factor": "1",
        "group.initial.rebalance.delay.ms": "0",
        **props,
    }
    start_or_fail(node)
    return node, sasl_port


@pytest.fixture(scope="module")
def acl_node(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("acl-node")
    node, sasl_port = start_node(tmp, **{"authorizer.class.name": AUTHORIZER, "super.users": "User:admin",
                                         "auto.create.topics.enable": "true"})
    yield AclNode(node, sasl_port, tmp)
    node.close()


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(an: AclNode, name: str, user: str = "admin") -> int:
    """CreateTopics as ``user``; returns the Kafka error code (0 = created)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    a = AdminClient(an.confluent(user))
    fut = a.create_topics([NewTopic(name, 1, 1)], operation_timeout=20)[name]
    try:
        fut.result(30)
        return 0
    except Exception as e:  # confluent raises KafkaException(KafkaError)
        return e.args[0].code()


def produce(an: AclNode, user: str, topic: str, value: bytes = b"v", **extra):
    """Produces one record as ``user``; returns the delivery error code (0 = delivered)."""
    from confluent_kafka import Producer

    p = Producer(an.confluent(user, **{"message.timeout.ms": 15000, **extra}))
    out = []
    p.produce(topic, value, on_delivery=lambda err, msg: out.append(err))
    p.flush(30)
    assert out, "no delivery report"
    return 0 if out[0] is None else out[0].code()


def wait_visible(an: AclNode, fn, timeout=15.0):
    """ACL changes reach the broker's authorizer through the metadata log: poll until seen."""
    deadline = time.time() + timeout
    while True:
        v = fn()
        if v or time.time() > deadline:
            return v
        time.sleep(0.3)


# --------------------------------------------------------------------------------- produce
def test_produce_needs_write_and_deny_wins(acl_node):
    t = uniq("orders")
    assert create_topic(acl_node, t) == 0
    assert produce(acl_node, "alice", t) == TOPIC_AUTHORIZATION_FAILED
    acl_node.admin_acls("--add", "--allow-principal", "User:alice", "--operation", "Write", "--topic", t)
    assert wait_visible(acl_node, lambda: produce(acl_node, "alice", t) == 0)
    # bob has no ACL: still refused
    assert produce(acl_node, "bob", t) == TOPIC_AUTHORIZATION_FAILED
    # a prefixed DENY beats the literal ALLOW
    acl_node.admin_acls("--add", "--deny-principal", "User:alice", "--operation", "Write", "--topic", t[:4],
                        "--resource-pattern-type", "prefixed")
    assert wait_visible(acl_node, lambda: produce(acl_node, "alice", t) == TOPIC_AUTHORIZATION_FAILED)
    out = acl_node.admin_acls("--remove", "--force", "--deny-principal", "User:alice", "--operation", "Write",
                              "--topic", t[:4], "--resource-pattern-type", "prefixed")
    assert "Removed ACL" in out
    assert wait_visible(acl_node, lambda: produce(acl_node, "alice", t) == 0)


def test_idempotent_producer_with_topic_write(acl_node):
    """InitProducerId needs IdempotentWrite on the cluster or Write on some topic (KIP-679)."""
    t = uniq("idem")
    assert create_topic(acl_node, t) == 0
    acl_node.admin_acls("--add", "--allow-principal", "User:bob", "--operation", "Write", "--topic", t)
    assert wait_visible(acl_node, lambda: produce(acl_node, "bob", t, **{"enable.idempotence": True}) == 0)


def test_super_user_bypasses_deny(acl_node):
    t = uniq("super")
    assert create_topic(acl_node, t) == 0
    acl_node.admin_acls("--add", "--deny-principal", "User:admin", "--operation", "All", "--topic", t)
    time.sleep(1)
    assert produce(acl_node, "admin", t) == 0


# --------------------------------------------------------------------------------- metadata
def test_metadata_hides_topics_without_describe(acl_node):
    from confluent_kafka.admin import AdminClient

    visible, hidden = uniq("visible"), uniq("hidden")
    for t in (visible, hidden):
        assert create_topic(acl_node, t) == 0
    # READ implies DESCRIBE
    acl_node.admin_acls("--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", visible)

    def alice_topics():
        return set(AdminClient(acl_node.confluent("alice")).list_topics(timeout=10).topics)
    assert wait_visible(acl_node, lambda: visible in alice_topics())
    topics = alice_topics()
    assert visible in topics and hidden not in topics
    admin_topics = set(AdminClient(acl_node.confluent("admin")).list_topics(timeout=10).topics)
    assert {visible, hidden} <= admin_topics
    # asked for by name: TOPIC_AUTHORIZATION_FAILED, existence not disclosed
    md = AdminClient(acl_node.confluent("alice")).list_topics(hidden, timeout=10)
    assert md.topics[hidden].error.code() == TOPIC_AUTHORIZATION_FAILED
    md = AdminClient(acl_node.confluent("alice")).list_topics("no-such-" + hidden, timeout=10)
    assert md.topics["no-such-" + hidden].error.code() == TOPIC_AUTHORIZATION_FAILED


def test_metadata_with_kafka_python_and_anonymous_plaintext(acl_node):
    """Clients on the PLAINTEXT listener are User:ANONYMOUS; ACLs for it apply as for anyone."""
    from kafka import KafkaConsumer

    t = uniq("anon")
    assert create_topic(acl_node, t) == 0

    def anon_topics():
        c = KafkaConsumer(bootstrap_servers=acl_node.plain, request_timeout_ms=15000)
        try:
            return c.topics()
        finally:
            c.close()
    assert t not in anon_topics()
    acl_node.admin_acls("--add", "--allow-principal", "User:ANONYMOUS", "--operation", "Describe", "--topic", t)
    assert wait_visible(acl_node, lambda: t in anon_topics())


# --------------------------------------------------------------------------------- topic creation
def test_topic_creation_needs_create(acl_node):
    name = uniq("alice-new")
    assert create_topic(acl_node, name, "alice") == TOPIC_AUTHORIZATION_FAILED
    acl_node.admin_acls("--add", "--allow-principal", "User:alice", "--operation", "Create", "--topic", "alice-",
                        "--resource-pattern-type", "prefixed")
    assert wait_visible(acl_node, lambda: create_topic(acl_node, uniq("alice-new"), "alice") == 0)
    assert create_topic(acl_node, uniq("bob-new"), "alice") == TOPIC_AUTHORIZATION_FAILED


def test_auto_create_needs_create(acl_node):
    """Metadata auto-creation (a producer's first send): WRITE lets the name through, CREATE
    (on the topic or the cluster) is needed to create it."""
    from confluent_kafka.admin import AdminClient

    t = uniq("auto")
    acl_node.admin_acls("--add", "--allow-principal", "User:bob", "--operation", "Write", "--topic", t)
    time.sleep(1)
    assert produce(acl_node, "bob", t, **{"message.timeout.ms": 5000}) == TOPIC_AUTHORIZATION_FAILED
    assert t not in AdminClient(acl_node.confluent("admin")).list_topics(timeout=10).topics
    acl_node.admin_acls("--add", "--allow-principal", "User:bob", "--operation", "Create", "--topic", t)
    assert wait_visible(acl_node, lambda: produce(acl_node, "bob", t) == 0, timeout=30)
    assert t in AdminClient(acl_node.confluent("admin")).list_topics(timeout=10).topics


# --------------------------------------------------------------------------------- topic admin APIs
def list_offsets_error(an: AclNode, user: str, topic: str) -> int:
    from broker.protocol.apis import ApiKey
    from broker.protocol.client import KafkaConnection
    from broker.security.sasl import client_security_from_properties

    host, port = an.sasl.split(":")
    sec = client_security_from_properties({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                           "sasl.username": user, "sasl.password": PASSWORDS[user]})

    async def run():
        c = KafkaConnection(host, int(port), security=sec)
        try:
            res = await c.request(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
            return res.topics[0].partitions[0].error_code
        finally:
            c.close()
    return asyncio.run(run())


def test_topic_admin_apis_need_their_operations(acl_node):
    """DeleteTopics (Delete), CreatePartitions (Alter), DescribeConfigs (DescribeConfigs),
    IncrementalAlterConfigs (AlterConfigs) and ListOffsets (Describe) on a topic, with confluent-kafka."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        ResourceType,
    )

    t = uniq("admin-ops")
    assert create_topic(acl_node, t) == 0
    a = AdminClient(acl_node.confluent("alice"))
    res = ConfigResource(ResourceType.TOPIC, t)
    alter = ConfigResource(ResourceType.TOPIC, t, incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])

    def code(fut):
        try:
            fut.result(30)
            return 0
        except KafkaException as e:
            return e.args[0].code()

    def calls():
        return {"describe_configs": code(a.describe_configs([res])[res]),
                "alter_configs": code(a.incremental_alter_configs([alter])[alter]),
                "create_partitions": code(a.create_partitions([NewPartitions(t, 2)])[t])}
    assert calls() == {"describe_configs": TOPIC_AUTHORIZATION_FAILED, "alter_configs": TOPIC_AUTHORIZATION_FAILED,
                       "create_partitions": TOPIC_AUTHORIZATION_FAILED}
    # ListOffsets as a raw request (clients do not send it for a topic Metadata hides)
    assert list_offsets_error(acl_node, "alice", t) == TOPIC_AUTHORIZATION_FAILED
    assert list_offsets_error(acl_node, "admin", t) == 0
    assert code(a.delete_topics([t], operation_timeout=20)[t]) == TOPIC_AUTHORIZATION_FAILED
    for op in ("DescribeConfigs", "AlterConfigs", "Alter", "Delete"):
        acl_node.admin_acls("--add", "--allow-principal", "User:alice", "--operation", op, "--topic", t)
    assert wait_visible(acl_node, lambda: calls() == {"describe_configs": 0, "alter_configs": 0,
                                                       "create_partitions": 0})
    assert code(a.delete_topics([t], operation_timeout=20)[t]) == 0


# --------------------------------------------------------------------------------- consume + groups
def _consume_group(an, user, topic, group, timeout=25.0):
    """kafka-python consumer in a group; returns (values, error)."""
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    c = KafkaConsumer(topic, **an.kafka_python(user, group_id=group, auto_offset_reset="earliest",
                                               enable_auto_commit=False, request_timeout_ms=15000,
                                               session_timeout_ms=10000, heartbeat_interval_ms=1000))
    out = []
    try:
        deadline = time.time() + timeout
        while not out and time.time() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                out += [r.value for r in recs]
        if out:
            c.commit()
        return out, None
    except KafkaError as e:
        return out, e
    finally:
        c.close()


def test_consume_needs_topic_read_and_group_read(acl_node):
    t, g = uniq("consume"), uniq("grp")
    assert create_topic(acl_node, t) == 0
    assert produce(acl_node, "admin", t, b"payload") == 0
    acl_node.admin_acls("--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", t)
    time.sleep(1)
    out, err = _consume_group(acl_node, "alice", t, g, timeout=15)
    assert not out and err is not None and type(err).__name__ == "GroupAuthorizationFailedError", err
    acl_node.admin_acls("--add", "--allow-principal", "User:alice", "--consumer", "--topic", t, "--group", g)
    time.sleep(1)
    out, err = _consume_group(acl_node, "alice", t, g)
    assert err is None and out == [b"payload"]


def test_aiokafka_group_and_topic_denied(acl_node):
    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError

    t, g = uniq("aio"), uniq("aiogrp")
    assert create_topic(acl_node, t) == 0
    assert produce(acl_node, "admin", t, b"x") == 0
    acl_node.admin_acls("--add", "--allow-principal", "User:bob", "--operation", "Read", "--group", g)
    time.sleep(1)

    async def run():
        c = AIOKafkaConsumer(t, bootstrap_servers=acl_node.sasl, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="PLAIN", sasl_plain_username="bob", sasl_plain_password="bob-pw",
                             group_id=g, auto_offset_reset="earliest", request_timeout_ms=15000)
        await c.start()
        try:
            return await asyncio.wait_for(c.getmany(timeout_ms=5000), 30)
        finally:
            await c.stop()
    # bob may join the group but not read (or describe) the topic
    with pytest.raises((TopicAuthorizationFailedError, GroupAuthorizationFailedError)):
        asyncio.run(run())


def test_group_admin_apis_need_group_acls(acl_node):
    """ListGroups shows only groups the principal may describe; DescribeGroups needs Describe,
    DeleteGroups needs Delete on the group."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient

    t, g = uniq("grp-admin"), uniq("grp")
    assert create_topic(acl_node, t) == 0
    assert produce(acl_node, "admin", t) == 0
    c = Consumer(acl_node.confluent("admin", **{"group.id": g, "enable.auto.commit": False}))
    c.commit(offsets=[TopicPartition(t, 0, 1)], asynchronous=False)  # an empty group with committed offsets
    c.close()
    a = AdminClient(acl_node.confluent("alice"))

    def listed():
        return g in {x.group_id for x in a.list_consumer_groups().result(30).valid}

    def described():
        try:
            a.describe_consumer_groups([g])[g].result(30)
            return 0
        except KafkaException as e:
            return e.args[0].code()
    admin = AdminClient(acl_node.confluent("admin"))  # referenced until the result is in
    res = admin.list_consumer_groups().result(30)
    assert g in {x.group_id for x in res.valid}, (res.valid, res.errors)
    assert not listed()
    assert described() == GROUP_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as e:
        a.delete_consumer_groups([g])[g].result(30)
    assert e.value.args[0].code() == GROUP_AUTHORIZATION_FAILED
    acl_node.admin_acls("--add", "--allow-principal", "User:alice", "--operation", "Describe", "--operation", "Delete",
                        "--group", g)
    assert wait_visible(acl_node, lambda: listed() and described() == 0)
    a.delete_consumer_groups([g])[g].result(30)


# --------------------------------------------------------------------------------- ACL admin APIs
def test_acl_apis_need_cluster_permissions(acl_node):
    res = acl_node.acls("alice", "--list")
    assert res.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in res.stderr
    res = acl_node.acls("alice", "--add", "--allow-principal", "User:alice", "--operation", "All", "--cluster")
    assert res.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in res.stderr
    res = acl_node.acls("admin", "--add", "--allow-principal", "alice", "--operation", "Read", "--topic", "x")
    assert res.returncode == 2 and "Type:name" in res.stderr


def test_scram_and_quota_admin_need_cluster_permissions(acl_node):
    """Without ALTER on the cluster nobody may set anyone's SCRAM password (or quotas)."""
    def configs(user, *args):
        return run_cli("configs", "--bootstrap-server", acl_node.sasl, "--command-config", acl_node.props[user],
                       *args)
    scram = ("--alter", "--entity-type", "users", "--entity-name", "admin", "--add-config",
             "SCRAM-SHA-256=[password=taken-over]")
    res = configs("alice", *scram)
    assert res.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in res.stderr, res.stderr
    res = configs("alice", "--describe", "--entity-type", "users")
    assert res.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in res.stderr, res.stderr
    res = configs("alice", "--alter", "--entity-type", "clients", "--entity-name", "c", "--add-config",
                  "producer_byte_rate=1")
    assert res.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in res.stderr, res.stderr
    res = configs("admin", "--alter", "--entity-type", "users", "--entity-name", "carol", "--add-config",
                  "SCRAM-SHA-256=[password=carol-pw]")
    assert res.returncode == 0, res.stderr
    res = configs("admin", "--describe", "--entity-type", "users", "--entity-name", "carol")
    assert res.returncode == 0 and "SCRAM-SHA-256=iterations=4096" in res.stdout, res.stderr
    # ALTER on the cluster is what it takes
    acl_node.admin_acls("--add", "--allow-principal", "User:alice", "--operation", "Alter", "--cluster")
    assert wait_visible(acl_node, lambda: configs("alice", "--alter", "--entity-type", "users", "--entity-name",
                                                  "carol", "--delete-config", "SCRAM-SHA-256").returncode == 0)
    acl_node.admin_acls("--remove", "--force", "--allow-principal", "User:alice", "--operation", "Alter", "--cluster")


def test_kafka_python_admin_acl_round_trip(acl_node):
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
        ResourceType,
    )

    name = uniq("kp")
    admin = KafkaAdminClient(**acl_node.kafka_python("admin", request_timeout_ms=15000))
    try:
        acl = ACL("User:bob", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                  ResourcePattern(ResourceType.TOPIC, name, ACLResourcePatternType.LITERAL))
        res = admin.create_acls([acl])
        assert res["succeeded"] and not res["failed"]
        flt = ACLFilter("User:bob", None, ACLOperation.ANY, ACLPermissionType.ANY,
                        ResourcePatternFilter(ResourceType.TOPIC, name, ACLResourcePatternType.MATCH))
        found = wait_visible(acl_node, lambda: admin.describe_acls(flt)[0])
        assert [(a.principal, a.operation, a.resource_pattern.resource_name) for a in found] == [
            ("User:bob", ACLOperation.READ, name)]
        deleted = admin.delete_acls([flt])
        assert len(deleted[0][1]) == 1
        assert wait_visible(acl_node, lambda: not admin.describe_acls(flt)[0])
    finally:
        admin.close()


# --------------------------------------------------------------------------------- allow.everyone.if.no.acl.found
def test_allow_everyone_if_no_acl_found(tmp_path):
    node, sasl_port = start_node(tmp_path, **{"authorizer.class.name": AUTHORIZER, "super.users": "User:admin",
                                              "allow.everyone.if.no.acl.found": "true"})
    try:
        an = AclNode(node, sasl_port, tmp_path)
        open_t, guarded = uniq("open"), uniq("guarded")
        assert create_topic(an, open_t, "alice") == 0  # no ACL on the cluster/topic: allowed
        assert create_topic(an, guarded, "alice") == 0
        assert produce(an, "alice", open_t) == 0
        # an ACL on the topic (for someone else) takes away the everyone-allowed default
        an.admin_acls("--add", "--allow-principal", "User:bob", "--operation", "Write", "--topic", guarded)
        assert wait_visible(an, lambda: produce(an, "alice", guarded) == TOPIC_AUTHORIZATION_FAILED)
        assert produce(an, "bob", guarded) == 0
        assert produce(an, "alice", open_t) == 0
    finally:
        node.close()
