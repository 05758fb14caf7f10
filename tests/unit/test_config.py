import logging

import pytest

from common.config import Config, ConfigError, parse_properties, topic_defaults


def test_properties_parsing_handles_comments_separators_and_continuations():
    text = "# c\n! c\nnode.id=3\nlog.dirs : /a,\\\n  /b\nbroker.rack rack1\n"
    assert [(k, v) for k, v, _ in parse_properties(text)] == [
        ("node.id", "3"), ("log.dirs", "/a,/b"), ("broker.rack", "rack1")]


def test_invalid_value_names_the_key():
    with pytest.raises(ConfigError, match="'log.segment.bytes'"):
        Config({"node.id": "1", "log.segment.bytes": "lots"})


def test_value_below_minimum_names_the_key():
    with pytest.raises(ConfigError, match="'num.partitions'.*>= 1"):
        Config({"node.id": "1", "num.partitions": "0"})


def test_unknown_key_warns_and_is_reported(caplog):
    with caplog.at_level(logging.WARNING):
        cfg = Config({"node.id": "1", "no.such.key": "x"})
    assert cfg.unknown == ["no.such.key"]
    assert "no.such.key" in caplog.text


def test_missing_node_id_is_an_error():
    with pytest.raises(ConfigError, match="node.id"):
        Config({})


def test_retention_derived_from_hours_minutes_ms():
    assert Config({"node.id": "1"})["log.retention.ms"] == 168 * 3600_000
    assert Config({"node.id": "1", "log.retention.minutes": "2"})["log.retention.ms"] == 120_000
    assert Config({"node.id": "1", "log.retention.ms": "5", "log.retention.minutes": "2"})["log.retention.ms"] == 5


def test_topic_defaults_come_from_broker_keys():
    d = topic_defaults(Config({"node.id": "1", "log.segment.bytes": "1024", "min.insync.replicas": "2"}))
    assert d["segment.bytes"] == 1024 and d["min.insync.replicas"] == 2 and d["cleanup.policy"] == "delete"


def test_listeners_and_voters_parse():
    cfg = Config({"node.id": "1", "listeners": "PLAINTEXT://127.0.0.1:9,CONTROLLER://127.0.0.1:10",
                  "controller.quorum.voters": "1@127.0.0.1:10,2@[::1]:11"})
    assert cfg.listener("PLAINTEXT").port == 9
    assert cfg["controller.quorum.voters"] == [(1, "127.0.0.1", 10), (2, "::1", 11)]
    assert [lst.name for lst in cfg["advertised.listeners"]] == ["PLAINTEXT"]


def test_bad_listener_names_the_key():
    with pytest.raises(ConfigError, match="'listeners'"):
        Config({"node.id": "1", "listeners": "PLAINTEXT:/oops"})


def test_voter_port_must_match_the_controller_listener():
    with pytest.raises(ConfigError, match="'controller.quorum.voters'"):
        Config({"node.id": "1", "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
                "controller.quorum.voters": "1@127.0.0.1:9999"})
