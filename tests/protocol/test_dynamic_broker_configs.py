"""Dynamic broker configs (DescribeConfigs / IncrementalAlterConfigs / AlterConfigs on BROKER,
per broker and for the cluster default) and run-time log levels (BROKER_LOGGER), against an
in-process node: Kafka's sources and synonyms, Kafka's error codes for bad changes, and each
change taking effect without a restart."""

from __future__ import annotations

import asyncio
import logging

import pytest

from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from common.errors import ErrorCode
from tests.protocol.conftest import RawClient, start_node
from tests.protocol.test_bad_input import create_topic, produce_body, produce_error, record_batch

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT, LOGGER = 2, 3, 4, 5, 6


async def alter(conn, name: str, *ops, rtype: int = 4, validate_only: bool = False):
    r = await conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
        {"resource_type": rtype, "resource_name": name,
         "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops]}],
        "validate_only": validate_only})
    return int(r.responses[0].error_code), r.responses[0].error_message


async def describe(conn, name: str, keys=None, rtype: int = 4):
    r = await conn.request(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": rtype, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": True, "include_documentation": False})
    res = r.results[0]
    assert res.error_code == 0, (res.error_code, res.error_message)
    return {c.name: c for c in res.configs}


def syn(entry) -> list[tuple[str, str | None, int]]:
    return [(s.name, s.value, s.source) for s in entry.synonyms]


async def test_per_broker_and_default_values_with_kafka_sources_and_synonyms(node, conn):
    assert await alter(conn, "", ("log.retention.ms", SET, "7000")) == (0, None)
    e = (await describe(conn, "1", ["log.retention.ms"]))["log.retention.ms"]
    assert (e.value, e.config_source, e.read_only) == ("7000", DYNAMIC_DEFAULT, False)
    assert await alter(conn, "1", ("log.retention.ms", SET, "5000")) == (0, None)
    e = (await describe(conn, "1", ["log.retention.ms"]))["log.retention.ms"]
    assert (e.value, e.config_source) == ("5000", DYNAMIC_BROKER)
    assert syn(e) == [("log.retention.ms", "5000", DYNAMIC_BROKER), ("log.retention.ms", "7000", DYNAMIC_DEFAULT),
                      ("log.retention.hours", "168", DEFAULT)]
    # the default resource lists only the cluster-wide dynamic values
    d = await describe(conn, "")
    assert list(d) == ["log.retention.ms"] and syn(d["log.retention.ms"]) == [("log.retention.ms", "7000",
                                                                                 DYNAMIC_DEFAULT)]
    # a static key is read-only, its source STATIC_BROKER_CONFIG
    e = (await describe(conn, "1", ["message.max.bytes", "log.dirs"]))
    assert (e["message.max.bytes"].config_source, e["message.max.bytes"].read_only) == (STATIC, False)
    assert (e["log.dirs"].config_source, e["log.dirs"].read_only) == (STATIC, True)
    # deleting the per-broker value falls back to the default
    assert await alter(conn, "1", ("log.retention.ms", DELETE, None)) == (0, None)
    e = (await describe(conn, "1", ["log.retention.ms"]))["log.retention.ms"]
    assert (e.value, e.config_source) == ("7000", DYNAMIC_DEFAULT)


async def test_log_defaults_reach_existing_logs_and_topic_describe(node, conn):
    await create_topic(node, "t")
    await create_topic(node, "own")
    r = await conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
        {"resource_type": 2, "resource_name": "own",
         "configs": [{"name": "retention.ms", "config_operation": SET, "value": "999"}]}], "validate_only": False})
    assert r.responses[0].error_code == 0
    assert await alter(conn, "", ("log.retention.ms", SET, "4242"), ("log.segment.bytes", SET, "123456")) == (0, None)
    assert node.broker.logs.get("t", 0).config.retention_ms == 4242
    assert node.broker.logs.get("t", 0).config.segment_bytes == 123456
    assert node.broker.logs.get("own", 0).config.retention_ms == 999  # the topic's own value wins
    r = await conn.request(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": 2, "resource_name": "t", "configuration_keys": ["retention.ms"]}],
        "include_synonyms": True, "include_documentation": False})
    e = r.results[0].configs[0]
    assert (e.value, e.config_source) == ("4242", DYNAMIC_DEFAULT)
    assert syn(e)[0] == ("log.retention.ms", "4242", DYNAMIC_DEFAULT)


async def test_message_max_bytes_takes_effect_at_once(node, conn):
    await create_topic(node, "t")
    c = await RawClient.connect(node.port)
    try:
        err, _ = produce_error(await c.request(0, 8, produce_body("t", 0, record_batch([b"x" * 50_000]))))
        assert err == 0
        assert await alter(conn, "1", ("message.max.bytes", SET, "20000")) == (0, None)
        err, _ = produce_error(await c.request(0, 8, produce_body("t", 0, record_batch([b"x" * 50_000]))))
        assert err == ErrorCode.MESSAGE_TOO_LARGE
        assert await alter(conn, "1", ("message.max.bytes", DELETE, None)) == (0, None)
        err, _ = produce_error(await c.request(0, 8, produce_body("t", 0, record_batch([b"x" * 50_000]))))
        assert err == 0
    finally:
        c.close()


async def test_max_connections_per_ip_takes_effect_for_new_connections(node, conn):
    assert await alter(conn, "", ("max.connections.per.ip", SET, "2")) == (0, None)
    assert node.broker.limits.max_per_ip == 2
    extra = KafkaConnection("127.0.0.1", node.port)
    await extra.connect()  # the second connection from 127.0.0.1
    third = KafkaConnection("127.0.0.1", node.port)
    try:
        with pytest.raises((ConnectionError, OSError, TimeoutError, asyncio.IncompleteReadError)):
            await third.connect()
            await third.request(ApiKey.API_VERSIONS, 0, {}, timeout=3)
    finally:
        third.close()
        extra.close()


async def test_other_background_settings_take_effect(node, conn):
    assert await alter(conn, "1", ("producer.id.expiration.ms", SET, "60000"),
                       ("background.threads", SET, "12")) == (0, None)
    assert node.broker.logs.producer_id_expiration_ms == 60000
    assert node.broker._background._max_workers == 12
    assert await alter(conn, "", ("unclean.leader.election.enable", SET, "true")) == (0, None)
    assert node.controller.unclean_default is True


async def test_replication_throttle_rates_take_effect_at_once(node, conn):
    """kafka-reassign-partitions --throttle sets these on every broker: the quotas change at once."""
    assert not node.broker.replicas.leader_quota.enabled
    assert await alter(conn, "", ("leader.replication.throttled.rate", SET, "10000000"),
                       ("follower.replication.throttled.rate", SET, "20000000")) == (0, None)
    assert node.broker.replicas.leader_quota.rate == 10_000_000
    assert node.broker.replicas.follower_quota.rate == 20_000_000
    assert await alter(conn, "", ("leader.replication.throttled.rate", DELETE, None)) == (0, None)
    assert not node.broker.replicas.leader_quota.enabled


@pytest.mark.parametrize("name, ops, code, words", [
    ("1", [("foo.bar", SET, "1")], ErrorCode.INVALID_CONFIG, "foo.bar"),
    ("1", [("log.dirs", SET, "/x")], ErrorCode.INVALID_REQUEST, "Cannot update these configs dynamically: log.dirs"),
    ("1", [("listeners", SET, "PLAINTEXT://:1")], ErrorCode.INVALID_REQUEST, "listeners"),
    ("1", [("ssl.keystore.location", SET, "/x")], ErrorCode.INVALID_REQUEST, "per-listener"),
    ("", [("listener.name.plaintext.ssl.keystore.location", SET, "/x")], ErrorCode.INVALID_REQUEST,
     "broker id must be specified"),
    ("", [("sasl.kerberos.min.time.before.relogin", SET, "1")], ErrorCode.INVALID_REQUEST,
     "broker id must be specified"),
    ("1", [("log.retention.ms", SET, "soon")], ErrorCode.INVALID_REQUEST, "log.retention.ms"),
    ("1", [("log.segment.bytes", SET, "1")], ErrorCode.INVALID_REQUEST, "log.segment.bytes"),
    ("1", [("log.retention.ms", APPEND, "1")], ErrorCode.INVALID_CONFIG, "not LIST"),
    ("1", [("background.threads", SET, "21")], ErrorCode.INVALID_REQUEST, "double"),
    ("1", [("background.threads", SET, "4")], ErrorCode.INVALID_REQUEST, "half"),
    ("1", [("log.retention.ms", SET, None)], ErrorCode.INVALID_REQUEST, "Null value"),
    ("1", [("log.retention.ms", SET, "1"), ("log.retention.ms", DELETE, None)], ErrorCode.INVALID_REQUEST,
     "duplicate"),
    ("2", [("log.retention.ms", SET, "1")], ErrorCode.INVALID_REQUEST, "expected 1"),
    ("x", [("log.retention.ms", SET, "1")], ErrorCode.INVALID_REQUEST, "integer"),
])
async def test_bad_changes_get_kafkas_errors_and_store_nothing(node, conn, name, ops, code, words):
    before = dict(node.loader.image.configs)
    err, msg = await alter(conn, name, *ops)
    assert err == code and words in (msg or ""), (err, msg)
    assert node.loader.image.configs == before


async def test_append_subtract_validate_only_and_legacy_alter(node, conn):
    assert await alter(conn, "1", ("log.cleanup.policy", APPEND, "compact")) == (0, None)
    assert node.broker.config["log.cleanup.policy"] == "compact,delete"
    assert await alter(conn, "1", ("log.cleanup.policy", SUBTRACT, "delete")) == (0, None)
    assert node.broker.config["log.cleanup.policy"] == "compact"
    assert await alter(conn, "1", ("log.retention.ms", SET, "1234"), validate_only=True) == (0, None)
    assert "log.retention.ms" not in node.broker.config.dynamic_broker
    # legacy AlterConfigs: the given set replaces every dynamic config of the resource
    r = await conn.request(ApiKey.ALTER_CONFIGS, 2, {"resources": [
        {"resource_type": 4, "resource_name": "1", "configs": [{"name": "log.retention.ms", "value": "777"}]}],
        "validate_only": False})
    assert r.responses[0].error_code == 0
    assert node.broker.config.dynamic_broker == {"log.retention.ms": "777"}
    assert node.broker.config["log.cleanup.policy"] == "delete"
    r = await conn.request(ApiKey.ALTER_CONFIGS, 2, {"resources": [
        {"resource_type": 8, "resource_name": "1", "configs": [{"name": "root", "value": "INFO"}]}],
        "validate_only": False})
    assert r.responses[0].error_code == ErrorCode.INVALID_REQUEST


async def test_dynamic_configs_survive_a_restart(tmp_path):
    n = await start_node(tmp_path)
    try:
        c = KafkaConnection("127.0.0.1", n.port)
        await c.connect()
        assert await alter(c, "1", ("log.retention.ms", SET, "31337")) == (0, None)
        c.close()
    finally:
        await n.stop()
    n = await start_node(tmp_path)
    try:
        assert n.broker.config["log.retention.ms"] == 31337
        assert n.broker.logs.default_topic_config["retention.ms"] == 31337
    finally:
        await n.stop()


async def test_dynamic_listener_secret_is_never_shown(node, conn):
    assert await alter(conn, "1", ("listener.name.plaintext.sasl.kerberos.service.name", SET, "kafka"),
                       ("listener.name.plaintext.plain.sasl.jaas.config", SET,
                        'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="s3cr3t";')) == (0, None)
    d = await describe(conn, "1")
    e = d["listener.name.plaintext.plain.sasl.jaas.config"]
    assert e.value is None and e.is_sensitive and e.config_source == DYNAMIC_BROKER
    assert all(s.value is None for s in e.synonyms)
    assert d["listener.name.plaintext.sasl.kerberos.service.name"].value == "kafka"


async def test_broker_logger_levels_at_run_time(node, conn):
    d = await describe(conn, "1", rtype=8)
    assert "root" in d and "krafty.broker" in d and d["root"].config_source == LOGGER
    lg = logging.getLogger("krafty.broker")
    try:
        assert await alter(conn, "1", ("krafty.broker", SET, "DEBUG"), rtype=8) == (0, None)
        assert lg.level == logging.DEBUG
        assert (await describe(conn, "1", ["krafty.broker"], rtype=8))["krafty.broker"].value == "DEBUG"
        assert await alter(conn, "1", ("krafty.broker", SET, "TRACE"), rtype=8, validate_only=True) == (0, None)
        assert lg.level == logging.DEBUG
        assert await alter(conn, "1", ("krafty.broker", DELETE, None), rtype=8) == (0, None)
        assert lg.level == logging.NOTSET
    finally:
        lg.setLevel(logging.NOTSET)
    for ops, code in ([("no.such.logger", SET, "INFO")], ErrorCode.INVALID_CONFIG), \
                     ([("krafty.broker", SET, "LOUD")], ErrorCode.INVALID_CONFIG), \
                     ([("root", DELETE, None)], ErrorCode.INVALID_REQUEST), \
                     ([("root", APPEND, "INFO")], ErrorCode.INVALID_REQUEST):
        assert (await alter(conn, "1", *ops, rtype=8))[0] == code, ops
    assert (await alter(conn, "", ("root", SET, "INFO"), rtype=8))[0] == ErrorCode.INVALID_REQUEST
    assert (await alter(conn, "2", ("root", SET, "INFO"), rtype=8))[0] == ErrorCode.INVALID_REQUEST
