"""GROUP config resources (KIP-848, resource type 32): DescribeConfigs / IncrementalAlterConfigs /
AlterConfigs of a group's consumer.session.timeout.ms and consumer.heartbeat.interval.ms against an
in-process node: the broker's group.consumer.* defaults and bounds, Kafka's error codes and
messages, storage in the metadata log (it survives a restart), and librdkafka's admin client."""

from __future__ import annotations

import asyncio

import pytest

from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from common.errors import ErrorCode
from metadata import records as r
from tests.protocol.conftest import start_node
from tests.protocol.test_dynamic_broker_configs import DELETE, SET, alter, describe, syn

GROUP, GROUP_CONFIG, DEFAULT = 32, 8, 5
SESSION, HEARTBEAT = "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"


async def galter(conn, name, *ops, validate_only=False):
    return await alter(conn, name, *ops, rtype=GROUP, validate_only=validate_only)


async def values(conn, name, prefix="consumer.") -> dict[str, tuple[str, int]]:
    """The group's configs of one kind (consumer.* or share.*)."""
    return {k: (e.value, e.config_source) for k, e in (await describe(conn, name, rtype=GROUP)).items()
            if k.startswith(prefix)}


async def test_a_group_without_configs_has_the_broker_defaults(conn):
    got = await describe(conn, "no-such-group", rtype=GROUP)
    assert {k: (e.value, e.config_source, e.config_type, e.read_only) for k, e in got.items()} == {
        SESSION: ("45000", DEFAULT, 3, False), HEARTBEAT: ("5000", DEFAULT, 3, False),
        # share groups' (KIP-932): ints (3) and strings (2)
        "share.session.timeout.ms": ("45000", DEFAULT, 3, False), "share.heartbeat.interval.ms": ("5000", DEFAULT, 3, False),
        "share.record.lock.duration.ms": ("30000", DEFAULT, 3, False), "share.delivery.count.limit": ("5", DEFAULT, 3, False),
        "share.auto.offset.reset": ("latest", DEFAULT, 2, False),
        "share.isolation.level": ("read_uncommitted", DEFAULT, 2, False)}
    assert syn(got[SESSION]) == [(SESSION, "45000", DEFAULT)]
    only = await describe(conn, "no-such-group", keys=[HEARTBEAT], rtype=GROUP)
    assert list(only) == [HEARTBEAT]


async def test_set_and_delete_a_group_config_through_the_metadata_log(node, conn):
    assert await galter(conn, "app", (SESSION, SET, "50000")) == (0, None)
    assert await values(conn, "app") == {SESSION: ("50000", GROUP_CONFIG), HEARTBEAT: ("5000", DEFAULT)}
    assert node.broker.apis.image.configs[(r.RESOURCE_GROUP, "app")] == {SESSION: "50000"}
    assert await values(conn, "other") == {SESSION: ("45000", DEFAULT), HEARTBEAT: ("5000", DEFAULT)}
    assert await galter(conn, "app", (HEARTBEAT, SET, "6000"), validate_only=True) == (0, None)
    assert (await values(conn, "app"))[HEARTBEAT] == ("5000", DEFAULT), "validate_only stores nothing"
    assert await galter(conn, "app", (SESSION, DELETE, None)) == (0, None)
    assert await values(conn, "app") == {SESSION: ("45000", DEFAULT), HEARTBEAT: ("5000", DEFAULT)}


@pytest.mark.parametrize("name,ops,code,words", [
    ("app", [(SESSION, SET, "44999")], ErrorCode.INVALID_CONFIG,
     "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"),
    ("app", [(SESSION, SET, "60001")], ErrorCode.INVALID_CONFIG,
     "consumer.session.timeout.ms must be less than or equal to group.consumer.max.session.timeout.ms"),
    ("app", [(HEARTBEAT, SET, "4999")], ErrorCode.INVALID_CONFIG,
     "consumer.heartbeat.interval.ms must be greater than or equal to group.consumer.min.heartbeat.interval.ms"),
    ("app", [(HEARTBEAT, SET, "15001")], ErrorCode.INVALID_CONFIG,
     "consumer.heartbeat.interval.ms must be less than or equal to group.consumer.max.heartbeat.interval.ms"),
    ("app", [(SESSION, SET, "abc")], ErrorCode.INVALID_CONFIG, "Not a number of type INT"),
    ("app", [("session.timeout.ms", SET, "50000")], ErrorCode.INVALID_CONFIG,
     "Unknown group config name: session.timeout.ms"),
    ("app", [(SESSION, 2, "1")], ErrorCode.INVALID_CONFIG, "because its type is not LIST"),
    ("", [(SESSION, SET, "50000")], ErrorCode.INVALID_REQUEST, "Default group resources are not allowed."),
])
async def test_bad_group_config_changes_get_kafkas_errors_and_store_nothing(node, conn, name, ops, code, words):
    err, msg = await galter(conn, name, *ops)
    assert err == code and words in (msg or ""), (err, msg)
    assert (r.RESOURCE_GROUP, name) not in node.broker.apis.image.configs


async def test_session_timeout_must_exceed_the_heartbeat_interval_of_the_same_group(tmp_path):
    n = await start_node(tmp_path, group_consumer_min_session_timeout_ms="5000")
    c = KafkaConnection("127.0.0.1", n.port)
    try:
        err, msg = await galter(c, "app", (SESSION, SET, "5000"))
        assert (err, msg) == (ErrorCode.INVALID_CONFIG,
                              "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms")
        assert await galter(c, "app", (SESSION, SET, "7000"), (HEARTBEAT, SET, "6000")) == (0, None)
    finally:
        c.close()
        await n.stop()


async def test_legacy_alter_configs_replaces_the_group_configs(conn):
    assert await galter(conn, "app", (SESSION, SET, "50000"), (HEARTBEAT, SET, "6000")) == (0, None)
    resp = await conn.request(ApiKey.ALTER_CONFIGS, 2, {"resources": [
        {"resource_type": GROUP, "resource_name": "app", "configs": [{"name": HEARTBEAT, "value": "7000"}]}],
        "validate_only": False})
    assert resp.responses[0].error_code == 0
    assert await values(conn, "app") == {SESSION: ("45000", DEFAULT), HEARTBEAT: ("7000", GROUP_CONFIG)}


async def test_group_configs_survive_a_restart(tmp_path):
    n = await start_node(tmp_path)
    try:
        c = KafkaConnection("127.0.0.1", n.port)
        assert await galter(c, "app", (SESSION, SET, "55000")) == (0, None)
        c.close()
    finally:
        await n.stop()
    n = await start_node(tmp_path)
    try:
        c = KafkaConnection("127.0.0.1", n.port)
        assert (await values(c, "app"))[SESSION] == ("55000", GROUP_CONFIG)
        c.close()
    finally:
        await n.stop()


async def test_librdkafka_admin_client_alters_and_describes_group_configs(node):
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    def run():
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{node.port}"})
        res = ConfigResource(ResourceType.GROUP, "rdk-group", incremental_configs=[
            ConfigEntry(SESSION, "50000", incremental_operation=AlterConfigOpType.SET)])
        for f in admin.incremental_alter_configs([res]).values():
            f.result(timeout=20)
        got = admin.describe_configs([ConfigResource(ResourceType.GROUP, "rdk-group")])
        return next(iter(got.values())).result(timeout=20)

    entries = await asyncio.to_thread(run)
    assert entries[SESSION].value == "50000" and entries[HEARTBEAT].value == "5000"


async def test_share_group_configs_are_checked_and_stored(conn):
    """KIP-932's group keys: share.auto.offset.reset and the share.* ints within the broker's bounds."""
    assert await galter(conn, "sq", ("share.auto.offset.reset", SET, "earliest"),
                        ("share.record.lock.duration.ms", SET, "20000")) == (0, None)
    got = await values(conn, "sq", prefix="share.")
    assert got["share.auto.offset.reset"] == ("earliest", GROUP_CONFIG)
    assert got["share.record.lock.duration.ms"] == ("20000", GROUP_CONFIG)
    assert await galter(conn, "sq", ("share.auto.offset.reset", SET, "by_duration:PT1H")) == (0, None)
    code, msg = await galter(conn, "sq", ("share.auto.offset.reset", SET, "sometimes"))
    assert code == ErrorCode.INVALID_CONFIG and "share.auto.offset.reset" in msg
    code, msg = await galter(conn, "sq", ("share.record.lock.duration.ms", SET, "1000"))
    assert code == ErrorCode.INVALID_CONFIG and "group.share.min.record.lock.duration.ms" in msg
    code, msg = await galter(conn, "sq", ("share.delivery.count.limit", SET, "11"))
    assert code == ErrorCode.INVALID_CONFIG and "group.share.max.delivery.count.limit" in msg
