"""Dynamic broker configs and run-time log levels through real clients' AdminClients
(confluent-kafka/librdkafka and kafka-python), against a krafty node process."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

pytestmark = pytest.mark.krafty_only


def _confluent(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def test_confluent_incremental_alter_and_describe_broker(broker):
    a = _confluent(broker)
    res = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
        ConfigEntry("log.retention.ms", "86400000", incremental_operation=AlterConfigOpType.SET)])
    a.incremental_alter_configs([res])[res].result(30)
    entries = a.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "1")])
    e = next(iter(entries.values())).result(30)["log.retention.ms"]
    assert e.value == "86400000" and e.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value and not e.is_read_only
    assert e.synonyms["log.retention.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    # (neither librdkafka nor kafka-python sends the empty resource name of the cluster default:
    # `krafty configs --entity-default` and tests/protocol/test_dynamic_broker_configs.py cover it)

@pytest.mark.parametrize("key, value, code", [("no.such.key", "1", "INVALID_CONFIG"),
                                               ("log.dirs", "/tmp/x", "INVALID_REQUEST"),
                                               ("log.retention.ms", "-7", "INVALID_REQUEST")])
def test_confluent_bad_broker_configs(broker, key, value, code):
    a = _confluent(broker)
    res = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as ei:
        a.incremental_alter_configs([res])[res].result(30)
    assert ei.value.args[0].name() == code and key in ei.value.args[0].str()


def test_kafka_python_broker_configs_and_loggers(broker):
    from kafka.admin import ConfigResource as KPResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        a.alter_configs([KPResource(ConfigResourceType.BROKER, "1", {"log.segment.bytes": "10485760"})])
        assert "10485760" == _kp_value(a, ConfigResourceType.BROKER, "log.segment.bytes")
        out = a.alter_configs([KPResource(ConfigResourceType.BROKER_LOGGER, "1", {"krafty.broker": "DEBUG"})],
                              raise_on_unknown=False)
        assert out, out
        assert _kp_value(a, ConfigResourceType.BROKER_LOGGER, "krafty.broker") == "DEBUG"
        a.alter_configs([KPResource(ConfigResourceType.BROKER_LOGGER, "1", {"krafty.broker": "INFO"})],
                        raise_on_unknown=False)
    finally:
        a.close()


def _kp_value(a, rtype, key):
    from kafka.admin import ConfigResource as KPResource

    got = a.describe_configs([KPResource(rtype, "1")], config_filter="all")
    return _find(got, key)


def _find(obj, key):
    """The value of ``key`` in kafka-python's describe_configs result, whatever its nesting."""
    if isinstance(obj, dict):
        if key in obj:
            v = obj[key]
            return v.get("value") if isinstance(v, dict) else getattr(v, "value", v)
        for v in obj.values():
            found = _find(v, key)
            if found is not None:
                return found
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            found = _find(v, key)
            if found is not None:
                return found
    return None
