"""ACLs of the consumer group protocol (KIP-848) on the wire: READ on the group to heartbeat,
DESCRIBE on every topic named in the subscription (TOPIC_AUTHORIZATION_FAILED otherwise, as Kafka's
KafkaApis), DESCRIBE on the group for ConsumerGroupDescribe."""

from __future__ import annotations

from broker.protocol.apis import ApiKey
from common.errors import ErrorCode as E
from metadata.acl import AclOperation as Op
from metadata.acl import ResourceType as RT
from tests.protocol import test_txn_acls as tx

acl_env = tx.acl_env  # the fixture: a node with an authorizer, a super user and an anonymous client


def _hb(topics) -> dict:
    return {"group_id": "cg", "member_id": "m1", "member_epoch": 0, "instance_id": None, "rack_id": None,
            "rebalance_timeout": 30000, "subscribed_topic_names": topics, "subscribed_topic_regex": None,
            "server_assignor": None, "topic_partitions": []}


async def test_heartbeat_needs_read_on_the_group_and_describe_on_the_topics(acl_env):
    node, admin, anon = acl_env
    r = await anon.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, _hb(["t1"]))
    assert int(r.error_code) == E.GROUP_AUTHORIZATION_FAILED

    async def group_ok():
        r = await anon.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, _hb(["t1"]))
        return int(r.error_code) != E.GROUP_AUTHORIZATION_FAILED
    await tx.allow(admin, anon, RT.GROUP, "cg", Op.READ, group_ok)
    r = await anon.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, _hb(["t1"]))
    assert int(r.error_code) == E.TOPIC_AUTHORIZATION_FAILED, "t1 may not be described"

    async def topic_ok():
        r = await anon.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, _hb(["t1"]))
        return int(r.error_code) == 0
    await tx.allow(admin, anon, RT.TOPIC, "t1", Op.DESCRIBE, topic_ok)
    r = await anon.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, _hb(["t1", "t2"]))
    assert int(r.error_code) == E.TOPIC_AUTHORIZATION_FAILED, "t2 may not be described"
    d = await admin.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": ["cg"],
                                                              "include_authorized_operations": False})
    assert [m.subscribed_topic_names for m in d.groups[0].members] == [("t1",)]
    # ConsumerGroupDescribe: DESCRIBE on the group, and on every topic its assignments show (m2 has t2)
    r = await admin.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, dict(_hb(["t2"]), member_id="m2"))
    assert int(r.error_code) == 0

    async def described():
        d = await anon.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": ["cg"],
                                                                  "include_authorized_operations": False})
        return int(d.groups[0].error_code) != E.GROUP_AUTHORIZATION_FAILED
    await tx.allow(admin, anon, RT.GROUP, "cg", Op.DESCRIBE, described)
    d = await anon.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": ["cg"],
                                                              "include_authorized_operations": False})
    g = d.groups[0]
    assert (int(g.error_code), list(g.members)) == (E.TOPIC_AUTHORIZATION_FAILED, []), g
