"""ACLs on the transaction coordinator's APIs, as Kafka's KafkaApis checks them: Write on the
TransactionalId for InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn (plus Write
on each topic, Read on the group), Describe for FindCoordinator, DescribeTransactions and
ListTransactions (which hides what the principal may not describe), ClusterAction for the
brokers' AddPartitionsToTxn v4+. The client is User:ANONYMOUS on the PLAINTEXT listener; the
super user ``admin`` creates the ACLs over SASL/PLAIN."""

from __future__ import annotations

import pytest

from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from broker.security.sasl import client_security_from_properties
from common.config import Config
from common.errors import ErrorCode as E
from krafty.node import Node
from metadata.acl import AclOperation as Op
from metadata.acl import ResourceType as RT
from tests.protocol.conftest import TEST_CLUSTER_ID, free_port
from tests.protocol.test_txn_apis import until

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-pw";'


@pytest.fixture
async def acl_env(tmp_path):
    port, sport, cport = free_port(), free_port(), free_port()
    node = Node(Config({
        "node.id": "1", "process.roles": "broker,controller", "cluster.id": TEST_CLUSTER_ID,
        "listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sport},CONTROLLER://127.0.0.1:{cport}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": JAAS,
        "controller.quorum.voters": f"1@127.0.0.1:{cport}", "log.dirs": str(tmp_path / "data"),
        "authorizer.class.name": AUTHORIZER, "super.users": "User:admin",
        "offsets.topic.num.partitions": "3", "offsets.topic.replication.factor": "1",
        "transaction.state.log.num.partitions": "3"}))
    await node.start()
    admin = KafkaConnection("127.0.0.1", sport, client_id="admin", security=client_security_from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "admin",
        "sasl.password": "admin-pw"}))
    anon = KafkaConnection("127.0.0.1", port, client_id="anonymous")
    r = await admin.request(ApiKey.CREATE_TOPICS, 5, {"topics": [
        {"name": t, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
        for t in ("t1", "t2")], "timeout": 10000, "validate_only": False})
    assert all(int(t.error_code) == 0 for t in r.topics)
    for key_type, key in ((1, "admin-tx"), (0, "g")):  # creates __transaction_state and __consumer_offsets
        async def found(key_type=key_type, key=key):
            f = await admin.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": key_type, "coordinator_keys": [key]})
            return int(f.coordinators[0].error_code) == 0, f
        await until(found, "the coordinator")
    yield node, admin, anon
    admin.close()
    anon.close()
    await node.stop()


async def allow(admin, anon, rtype: RT, name: str, op: Op, check) -> None:
    r = await admin.request(ApiKey.CREATE_ACLS, 3, {"creations": [{
        "resource_type": int(rtype), "resource_name": name, "resource_pattern_type": 3, "principal": "User:ANONYMOUS",
        "host": "*", "operation": int(op), "permission_type": 3}]})
    assert int(r.results[0].error_code) == 0

    async def effective():  # ACLs reach the broker's authorizer through the metadata log
        ok = await check()
        return ok, ok
    await until(effective, f"{op.name} on {rtype.name} {name}")


async def init(conn, tid: str):
    r = await conn.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": tid, "transaction_timeout": 60000,
                                                         "producer_id": -1, "producer_epoch": -1})
    return int(r.error_code), int(r.producer_id), int(r.producer_epoch)


async def add(conn, tid: str, pid: int, epoch: int, topic: str) -> int:
    r = await conn.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid, "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": topic, "partitions": [0]}]})
    return int(r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)


async def test_transactional_id_acls(acl_env):
    node, admin, anon = acl_env
    assert (await init(admin, "admin-tx"))[0] == 0  # a transaction the anonymous user may not see

    # nothing allowed
    f = await anon.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["tx-ok"]})
    assert int(f.coordinators[0].error_code) == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert await init(anon, "tx-ok") == (E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, -1)
    assert await add(anon, "tx-ok", 1, 0, "t1") == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    r = await anon.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, {"transactional_id": "tx-ok", "producer_id": 1,
                                                           "producer_epoch": 0, "group_id": "g"})
    assert int(r.error_code) == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    r = await anon.request(ApiKey.END_TXN, 3, {"transactional_id": "tx-ok", "producer_id": 1, "producer_epoch": 0,
                                               "committed": True})
    assert int(r.error_code) == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    r = await anon.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["admin-tx"]})
    assert int(r.transaction_states[0].error_code) == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    r = await anon.request(ApiKey.LIST_TRANSACTIONS, 1, {"state_filters": [], "producer_id_filters": [],
                                                         "duration_filter": -1})
    assert (int(r.error_code), list(r.transaction_states)) == (0, [])
    r = await anon.request(ApiKey.ADD_PARTITIONS_TO_TXN, 4, {"transactions": [{
        "transactional_id": "admin-tx", "producer_id": 0, "producer_epoch": 0, "verify_only": True,
        "topics": [{"name": "t1", "partitions": [0]}]}]})
    assert (int(r.error_code), list(r.results_by_transaction)) == (E.CLUSTER_AUTHORIZATION_FAILED, [])

    # Write on the transactional id (it implies Describe)
    async def init_ok():
        return (await init(anon, "tx-ok"))[0] == 0
    await allow(admin, anon, RT.TRANSACTIONAL_ID, "tx-ok", Op.WRITE, init_ok)
    f = await anon.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["tx-ok"]})
    assert int(f.coordinators[0].error_code) == 0
    _, pid, epoch = await init(anon, "tx-ok")
    assert await add(anon, "tx-ok", pid, epoch, "t1") == E.TOPIC_AUTHORIZATION_FAILED

    async def add_ok():
        return await add(anon, "tx-ok", pid, epoch, "t1") == 0
    await allow(admin, anon, RT.TOPIC, "t1", Op.WRITE, add_ok)

    async def offsets():
        r = await anon.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, {"transactional_id": "tx-ok", "producer_id": pid,
                                                               "producer_epoch": epoch, "group_id": "g"})
        return int(r.error_code)
    assert await offsets() == E.GROUP_AUTHORIZATION_FAILED

    async def offsets_ok():
        return await offsets() == 0
    await allow(admin, anon, RT.GROUP, "g", Op.READ, offsets_ok)
    r = await anon.request(ApiKey.LIST_TRANSACTIONS, 1, {"state_filters": [], "producer_id_filters": [],
                                                         "duration_filter": -1})
    assert [t.transactional_id for t in r.transaction_states] == ["tx-ok"]
    # DescribeTransactions shows only the partitions of topics the principal may describe
    r = await anon.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["tx-ok"]})
    (d,) = r.transaction_states
    assert (int(d.error_code), d.transaction_state, sorted(t.topic for t in d.topics)) == (0, "Ongoing", ["t1"])
