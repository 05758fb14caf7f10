"""The pure core of GROUP configs (KIP-848): Kafka's GroupConfig.validate against the broker's
group.consumer.* bounds, the broker defaults of keys a group does not set, the controller's
records (ConfigRecords of resource type GROUP), and the startup check of the bounds."""

from __future__ import annotations

import pytest

from common.config import Config, ConfigError
from common.dynamic_config import DynamicConfigError
from common.errors import ErrorCode, KafkaError
from common.group_config import group_config, validate_group_config
from controller.configs import alter_group_configs
from metadata import records as r
from metadata.delta import image_from_records

BASE = {"node.id": "1", "process.roles": "broker,controller",
        "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        "controller.quorum.voters": "1@127.0.0.1:9093"}


def test_defaults_come_from_the_broker_and_a_group_overrides_them():
    cfg = Config(dict(BASE, **{"group.consumer.session.timeout.ms": "50000"}))
    assert group_config(cfg, {}) == {"consumer.session.timeout.ms": 50000, "consumer.heartbeat.interval.ms": 5000,
                                     # share groups' (KIP-932)
                                     "share.session.timeout.ms": 45000, "share.heartbeat.interval.ms": 5000,
                                     "share.record.lock.duration.ms": 30000, "share.delivery.count.limit": 5,
                                     "share.auto.offset.reset": "latest", "share.isolation.level": "read_uncommitted"}
    assert group_config(cfg, {"consumer.heartbeat.interval.ms": "6000"})["consumer.heartbeat.interval.ms"] == 6000


@pytest.mark.parametrize("props,words", [
    ({"consumer.session.timeout.ms": "0"}, "Value must be at least 1"),
    ({"consumer.session.timeout.ms": "2147483648"}, "Not a number of type INT"),
    ({"consumer.heartbeat.interval.ms": "x"}, "Not a number of type INT"),
    ({"share.bogus.ms": "30000"}, "Unknown group config name: share.bogus.ms"),
    ({"share.session.timeout.ms": "30000"}, "must be greater than or equal to group.share.min.session.timeout.ms"),
    ({"share.auto.offset.reset": "soon"}, "Invalid value soon for configuration share.auto.offset.reset"),
    ({"consumer.session.timeout.ms": "70000"}, "must be less than or equal to group.consumer.max.session.timeout.ms"),
])
def test_bad_values_are_invalid_config(props, words):
    with pytest.raises(DynamicConfigError) as ei:
        validate_group_config(Config(BASE), props)
    assert ei.value.code == "INVALID_CONFIG" and words in str(ei.value)


def test_controller_records_and_refusals():
    image = image_from_records([r.ConfigRecord(r.RESOURCE_GROUP, "g", "consumer.session.timeout.ms", "50000")])
    recs = alter_group_configs(image, "g", [("consumer.session.timeout.ms", 1, None),
                                            ("consumer.heartbeat.interval.ms", 0, "6000")])
    assert recs == [r.ConfigRecord(32, "g", "consumer.session.timeout.ms", None),
                    r.ConfigRecord(32, "g", "consumer.heartbeat.interval.ms", "6000")]
    for name, ops, code in [("", [("consumer.session.timeout.ms", 0, "50000")], ErrorCode.INVALID_REQUEST),
                            ("g", [("nope", 0, "1")], ErrorCode.INVALID_CONFIG)]:
        with pytest.raises(KafkaError) as ei:
            alter_group_configs(image, name, ops)
        assert ei.value.code == code


def test_a_default_outside_its_bounds_stops_startup():
    with pytest.raises(ConfigError, match="'group.consumer.heartbeat.interval.ms' \\(20000\\) must be between"):
        Config(dict(BASE, **{"group.consumer.heartbeat.interval.ms": "20000"}))
