"""Named listeners (Kafka's listeners / advertised.listeners / listener.security.protocol.map /
inter.broker.listener.name): the startup checks that keep a broker from advertising
addresses its clients or peers cannot use."""

from __future__ import annotations

import subprocess
import sys

import pytest

from common.config import Config, ConfigError

TWO = {
    "node.id": "4", "process.roles": "broker", "controller.quorum.voters": "1@c1:9093",
    "listeners": "INTERNAL://0.0.0.0:9092,EXTERNAL://0.0.0.0:19092",
    "advertised.listeners": "INTERNAL://broker-4:9092,EXTERNAL://localhost:29092",
    "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
}


def test_two_named_listeners_with_an_inter_broker_listener():
    cfg = Config(TWO)
    assert [(lst.name, lst.host, lst.port) for lst in cfg["advertised.listeners"]] == [
        ("INTERNAL", "broker-4", 9092), ("EXTERNAL", "localhost", 29092)]
    assert cfg["inter.broker.listener.name"] == "INTERNAL"


def test_inter_broker_listener_name_is_case_insensitive_like_listener_names():
    assert Config({**TWO, "inter.broker.listener.name": "internal"})["inter.broker.listener.name"] == "INTERNAL"


def test_inter_broker_listener_must_be_advertised():
    with pytest.raises(ConfigError, match="'inter.broker.listener.name' is PLAINTEXT.*INTERNAL,EXTERNAL"):
        Config({k: v for k, v in TWO.items() if k != "inter.broker.listener.name"})


def test_listener_without_security_protocol_is_refused():
    with pytest.raises(ConfigError, match="EXTERNAL.*'listener.security.protocol.map'"):
        Config({**TWO, "listener.security.protocol.map": "INTERNAL:PLAINTEXT"})


def test_advertised_listener_must_be_a_bound_listener():
    with pytest.raises(ConfigError, match="'advertised.listeners' names listener OUTSIDE"):
        Config({**TWO, "advertised.listeners": "INTERNAL://broker-4:9092,OUTSIDE://localhost:29092"})


def test_wildcard_address_cannot_be_advertised():
    # the advertised.listeners trap: binding 0.0.0.0 without saying where clients should connect
    with pytest.raises(ConfigError, match="non-routable address 0.0.0.0"):
        Config({k: v for k, v in TWO.items() if k != "advertised.listeners"})
    with pytest.raises(ConfigError, match="non-routable address ::"):
        Config({**TWO, "advertised.listeners": "INTERNAL://[::]:9092,EXTERNAL://localhost:1"})


def test_controller_listener_cannot_be_advertised_by_a_broker():
    with pytest.raises(ConfigError, match="controller listener CONTROLLER"):
        Config({"node.id": "1", "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
                "advertised.listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
                "controller.quorum.voters": "1@127.0.0.1:9093"})


def test_controllers_only_are_not_held_to_broker_listener_rules():
    cfg = Config({"node.id": "1", "process.roles": "controller", "listeners": "CONTROLLER://0.0.0.0:9093",
                  "controller.quorum.voters": "1@controller-1:9093"})
    assert cfg.listener("CONTROLLER").port == 9093


def test_node_refuses_to_start_and_names_the_key(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in TWO.items() if k != "inter.broker.listener.name"))
    p = subprocess.run([sys.executable, "-m", "krafty", "node", "--config", str(props)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert "'inter.broker.listener.name'" in p.stderr
