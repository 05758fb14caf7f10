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
    res = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
        ConfigEntry("log.retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    a.incremental_alter_configs([res])[res].result(30)
    e = next(iter(a.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "1")]).values())).result(30)
    assert e["log.retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
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
        a.alter_configs([KPResource(ConfigResourceType.BROKER, "1", {"log.segment.bytes": ("DELETE", None)})])
        assert str(1024**3) == _kp_value(a, ConfigResourceType.BROKER, "log.segment.bytes")
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


def _cli(broker, *args):
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    return subprocess.run([sys.executable, "-m", "krafty", "configs", "--bootstrap-server", broker.bootstrap, *args],
                          cwd=repo, capture_output=True, text=True, timeout=60)


def test_configs_cli_topics_brokers_and_loggers_as_kafka_configs(broker, topic):
    from conftest import create_topic

    create_topic(broker, topic)
    res = _cli(broker, "--alter", "--entity-type", "topics", "--entity-name", topic,
               "--add-config", "retention.ms=3600000,cleanup.policy=[compact,delete]")
    assert res.returncode == 0 and res.stdout.strip() == f"Completed updating config for topic {topic}.", res
    res = _cli(broker, "--describe", "--entity-type", "topics", "--entity-name", topic)
    assert res.stdout.splitlines() == [
        f"Dynamic configs for topic {topic} are:",
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete, "
        "DEFAULT_CONFIG:log.cleanup.policy=delete}",
        "  retention.ms=3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=3600000}"], res.stdout
    res = _cli(broker, "--alter", "--entity-type", "brokers", "--entity-default", "--add-config", "log.retention.ms=5000")
    assert res.stdout.strip() == "Completed updating default config for brokers in the cluster.", res
    res = _cli(broker, "--describe", "--entity-type", "brokers", "--entity-default")
    assert res.stdout.splitlines() == ["Default configs for brokers in the cluster are:",
                                       "  log.retention.ms=5000 sensitive=false "
                                       "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=5000}"], res.stdout
    res = _cli(broker, "--alter", "--entity-type", "brokers", "--entity-name", "1", "--add-config",
               "max.connections.per.ip=1000", "--delete-config", "log.segment.bytes")
    assert res.returncode == 0 and "Completed updating config for broker 1." in res.stdout, res
    res = _cli(broker, "--describe", "--entity-type", "brokers", "--entity-name", "1", "--all")
    assert res.stdout.splitlines()[0] == "All configs for broker 1 are:"
    assert "  max.connections.per.ip=1000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:max.connections.per.ip=1000," \
           " DEFAULT_CONFIG:max.connections.per.ip=2147483647}" in res.stdout.splitlines()
    assert any(line.startswith("  log.retention.ms=5000 ") for line in res.stdout.splitlines())
    res = _cli(broker, "--alter", "--entity-type", "broker-loggers", "--entity-name", "1", "--add-config",
               "krafty.broker=DEBUG")
    assert res.returncode == 0, res
    res = _cli(broker, "--describe", "--entity-type", "broker-loggers", "--entity-name", "1")
    assert "  krafty.broker=DEBUG sensitive=false synonyms={}" in res.stdout.splitlines(), res.stdout
    _cli(broker, "--alter", "--entity-type", "broker-loggers", "--entity-name", "1", "--delete-config", "krafty.broker")
    _cli(broker, "--alter", "--entity-type", "brokers", "--entity-default", "--delete-config", "log.retention.ms")
    # refused changes: one line naming the key, exit code 1; usage errors exit 2
    res = _cli(broker, "--alter", "--entity-type", "brokers", "--entity-name", "1", "--add-config", "log.dirs=/x")
    assert res.returncode == 1 and res.stderr.count("\n") == 1 and "INVALID_REQUEST" in res.stderr \
        and "log.dirs" in res.stderr, res
    res = _cli(broker, "--alter", "--entity-type", "topics", "--entity-default", "--add-config", "retention.ms=1")
    assert res.returncode == 2, res
    res = subprocess_unreachable()
    assert res.returncode == 1 and res.stderr.count("\n") == 1 and "127.0.0.1:1" in res.stderr, res


def subprocess_unreachable():
    import subprocess
    import sys
    from pathlib import Path

    return subprocess.run([sys.executable, "-m", "krafty", "configs", "--bootstrap-server", "127.0.0.1:1",
                           "--describe", "--entity-type", "brokers", "--entity-name", "1"],
                          cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=60)
