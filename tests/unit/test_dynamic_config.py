"""The pure core of dynamic broker configs: which keys are dynamic and where, how a change is
checked (Kafka's DynamicBrokerConfig.validateConfigs), incremental ops, the layering of the
dynamic values over server.properties (Config.set_dynamic), the synonyms DescribeConfigs
shows, and the controller's records (Kafka's ConfigurationControlManager for BROKER)."""

from __future__ import annotations

import pytest

from common import dynamic_config as dc
from common.config import Config
from common.errors import ErrorCode, KafkaError
from controller.configs import alter_broker_configs
from metadata import records as r
from metadata.delta import image_from_records

BASE = {"node.id": "1", "process.roles": "broker,controller",
        "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        "controller.quorum.voters": "1@127.0.0.1:9093", "log.retention.hours": "24"}


def test_kafkas_dynamic_keys_and_levels():
    assert dc.is_dynamic("log.retention.ms") and dc.is_dynamic("message.max.bytes")
    assert dc.is_dynamic("max.connections") and dc.is_dynamic("background.threads")
    assert dc.is_dynamic("listener.name.ssl.ssl.keystore.location")
    assert dc.is_dynamic("listener.name.sasl_ssl.plain.sasl.jaas.config")
    assert not dc.is_dynamic("log.dirs") and not dc.is_dynamic("node.id") and not dc.is_dynamic("listeners")
    assert "ssl.keystore.location" in dc.PER_BROKER and "max.connections" not in dc.PER_BROKER
    assert dc.listener_base("listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config") == "sasl.jaas.config"


def test_validate_change_errors():
    cfg = Config(BASE)

    def code(props, per_broker=True):
        with pytest.raises(dc.DynamicConfigError) as ei:
            dc.validate_change(cfg, props, per_broker=per_broker)
        return ei.value.code, ei.value.message

    assert code({"no.such.key": "1"})[0] == "INVALID_CONFIG"
    assert code({"node.id": "2"}) == ("INVALID_REQUEST", "Cannot update these configs dynamically: node.id (set them "
                                      "in server.properties and restart the broker)")
    assert code({"ssl.truststore.location": "/x"})[0] == "INVALID_REQUEST"
    assert "broker id must be specified" in code({"listener.name.plaintext.ssl.keystore.type": "PEM"}, False)[1]
    assert "log.retention.ms" in code({"log.retention.ms": "x"})[1]
    assert "half" in code({"background.threads": "4"})[1]
    dc.validate_change(cfg, {"max.connections": "5", "log.retention.ms": "10"}, per_broker=False)
    dc.validate_change(cfg, {"background.threads": "20", "listener.name.plaintext.ssl.keystore.type": "PEM"},
                       per_broker=True)


def test_apply_ops_append_subtract_from_default():
    assert dc.apply_ops({}, [("log.cleanup.policy", dc.OP_APPEND, "compact")]) == {"log.cleanup.policy": "delete,compact"}
    assert dc.apply_ops({"log.cleanup.policy": "delete,compact"}, [("log.cleanup.policy", dc.OP_SUBTRACT, "delete")]) \
        == {"log.cleanup.policy": "compact"}
    assert dc.apply_ops({"a": "1"}, [("a", dc.OP_DELETE, None), ("b", dc.OP_SET, "2")]) == {"a": None, "b": "2"}
    with pytest.raises(dc.DynamicConfigError, match="not LIST"):
        dc.apply_ops({}, [("log.retention.ms", dc.OP_APPEND, "1")])


def test_set_dynamic_precedence_and_derived_values():
    cfg = Config(BASE)
    assert cfg["log.retention.ms"] == 24 * 3_600_000
    changed = cfg.set_dynamic({"log.retention.ms": "5000", "max.connections": "7"}, {"log.retention.ms": "3000"})
    assert cfg["log.retention.ms"] == 3000 and cfg["max.connections"] == 7
    assert {"log.retention.ms", "max.connections"} <= changed
    cfg.set_dynamic({"log.retention.ms": "5000"}, {})
    assert cfg["log.retention.ms"] == 5000 and cfg["max.connections"] == 2**31 - 1
    cfg.set_dynamic({}, {"log.retention.hours": "1"})  # a synonym: ms is unset, hours decides
    assert cfg["log.retention.ms"] == 3_600_000
    cfg.set_dynamic({}, {"log.retention.ms": "not a number"})  # never stored by a checked change: skipped
    assert cfg["log.retention.ms"] == 24 * 3_600_000
    assert cfg.explicit == BASE  # the static layer is untouched


def test_synonyms_in_kafkas_order():
    cfg = Config(BASE)
    cfg.set_dynamic({"log.retention.ms": "5000"}, {"log.retention.minutes": "3"})
    syn = dc.config_synonyms(cfg, "log.retention.ms", dc.broker_synonyms("log.retention.ms"),
                             static_default=dc.default_string)
    assert syn == [("log.retention.ms", "5000", dc.SOURCE_DYNAMIC_DEFAULT_BROKER),
                   ("log.retention.hours", "24", dc.SOURCE_STATIC_BROKER),
                   ("log.retention.hours", "168", dc.SOURCE_DEFAULT)]
    # describing the minutes key drops what precedes it
    syn = dc.config_synonyms(cfg, "log.retention.minutes", dc.broker_synonyms("log.retention.minutes"),
                             static_default=dc.default_string)
    assert syn[0] == ("log.retention.minutes", "3", dc.SOURCE_DYNAMIC_BROKER)


def test_controller_writes_one_record_per_key_even_if_unchanged():
    image = image_from_records([r.ConfigRecord(4, "1", "ssl.x", "same")])
    recs = alter_broker_configs(image, "1", [("ssl.x", 0, "same"), ("b", 1, None)])
    assert recs == [r.ConfigRecord(4, "1", "ssl.x", "same"), r.ConfigRecord(4, "1", "b", None)]
    for bad in ("x", "-1"):
        with pytest.raises(KafkaError) as ei:
            alter_broker_configs(image, bad, [("a", 0, "1")])
        assert ei.value.code == ErrorCode.INVALID_REQUEST
