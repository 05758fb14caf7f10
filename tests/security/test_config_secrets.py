"""Secrets in the broker's configuration are never shown (issue 18): DescribeConfigs(BROKER)
answers every password-type key (and every key named like one, listener-prefixed ones too)
with a null value marked sensitive, synonyms included, as Kafka does; the node's log and its
start-up errors do not carry them either."""

from __future__ import annotations

import subprocess
import sys

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from common.config import Config, ConfigError
from tests.security.certs import make_ca
from tests.security.conftest import REPO, jaas_plain

sys.path.insert(0, str(REPO / "tests" / "integration"))
from krafty_node import KraftyNode, free_port, start_or_fail  # noqa: E402

STORE_PW, TRUST_PW = "keystore-Pw-1", "truststore-Pw-2"
ADMIN_PW, ALICE_PW, LISTENER_ADMIN_PW = "admin-Pw-3", "alice-Pw-4", "listener-admin-Pw-5"
TYPO_PW = "typo-Pw-6"
SECRETS = (STORE_PW, TRUST_PW, ADMIN_PW, ALICE_PW, LISTENER_ADMIN_PW, TYPO_PW)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    ca = make_ca(tmp_path_factory.mktemp("ca"))
    keystore = ca.keystore_p12("server", "localhost", STORE_PW, server=True)
    truststore = ca.truststore_p12(TRUST_PW)
    n = KraftyNode(tmp_path_factory.mktemp("secrets"))
    ssl_port, sasl_port = free_port(), free_port()
    n.extra_properties = {
        "listeners": f"PLAINTEXT://127.0.0.1:{n.port},CONTROLLER://127.0.0.1:{n.controller_port},"
                     f"SSL://127.0.0.1:{ssl_port},SASL_SSL://127.0.0.1:{sasl_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL",
        "sasl.enabled.mechanisms": "PLAIN",
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(keystore),
        "ssl.keystore.password": STORE_PW,
        "ssl.key.password": STORE_PW,
        "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": str(truststore),
        "ssl.truststore.password": TRUST_PW,
        "listener.name.ssl.ssl.keystore.location": str(keystore),
        "listener.name.ssl.ssl.keystore.password": STORE_PW,
        "sasl.jaas.config": jaas_plain({"admin": ADMIN_PW, "alice": ALICE_PW}),
        "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas_plain({"admin": LISTENER_ADMIN_PW}),
        "ssl.keystore.pasword": TYPO_PW,  # a misspelt key: warned about, its value not logged
    }
    yield start_or_fail(n)
    n.close()


def test_describe_configs_broker_hides_every_secret(node):
    from common.config import is_sensitive

    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    res = ConfigResource(ConfigResource.Type.BROKER, "1")
    entries = admin.describe_configs([res])[res].result(30)  # librdkafka asks for synonyms
    for name in ("sasl.jaas.config", "ssl.key.password", "ssl.keystore.password", "ssl.truststore.password",
                 "listener.name.ssl.ssl.keystore.password", "listener.name.sasl_ssl.plain.sasl.jaas.config"):
        assert name in entries, sorted(entries)
        e = entries[name]
        assert e.value is None and e.is_sensitive, (name, e.value, e.is_sensitive)
        assert all(s.value is None for s in e.synonyms.values()), (name, e.synonyms)
    for name, e in entries.items():
        if is_sensitive(name):
            assert e.value is None and e.is_sensitive, name
        texts = [e.value or "", *(s.value or "" for s in e.synonyms.values())]
        assert not any(secret in t for secret in SECRETS for t in texts), name
    # non-secrets still show (the location of a keystore is not a secret)
    assert entries["ssl.keystore.location"].value and not entries["ssl.keystore.location"].is_sensitive
    assert entries["listener.name.ssl.ssl.keystore.location"].value


async def test_describe_configs_broker_named_secret_keys(node):
    # asking for the keys by name (DescribeConfigs v4, with synonyms) gets the same masked answer
    conn = KafkaConnection(node.host, node.port)
    await conn.connect()
    try:
        resp = await conn.request(ApiKey.DESCRIBE_CONFIGS, 4, {
            "resources": [{"resource_type": 4, "resource_name": "1",
                           "configuration_keys": ["sasl.jaas.config", "ssl.truststore.password"]}],
            "include_synonyms": True, "include_documentation": False})
    finally:
        conn.close()
    got = {c.name: (c.value, c.is_sensitive, [s.value for s in c.synonyms]) for c in resp.results[0].configs}
    assert got == {"sasl.jaas.config": (None, True, [None]), "ssl.truststore.password": (None, True, [None])}


def test_secrets_never_reach_the_log(node):
    text = node.log_path.read_text(errors="replace")
    assert "ssl.keystore.pasword" in text  # the misspelt key is named...
    for secret in SECRETS:
        assert secret not in text, secret  # ...but no secret value is written


def test_config_errors_do_not_echo_secrets():
    # a quote left open: the unparsable rest starts with the password
    broken_jaas = f'org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="{ADMIN_PW};'
    cfg = Config({"node.id": "1", "process.roles": "broker,controller",
                  "listeners": "PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093",
                  "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,"
                                                    "SASL_PLAINTEXT:SASL_PLAINTEXT",
                  "controller.quorum.voters": "1@127.0.0.1:9093", "sasl.enabled.mechanisms": "PLAIN",
                  "sasl.jaas.config": broken_jaas})
    from broker.security.sasl import listener_security

    with pytest.raises(ConfigError) as ei:
        listener_security(cfg, "SASL_PLAINTEXT")
    assert "sasl.jaas.config" in str(ei.value) and ADMIN_PW not in str(ei.value)


def test_configs_cli_errors_do_not_echo_passwords():
    for bad in (f"SCRAM-SHA-256=[iterations=x,password={ADMIN_PW}", f"SCRAM-SHA-256=[password=ab,{ADMIN_PW}]"):
        res = subprocess.run([sys.executable, "-m", "krafty", "configs", "--bootstrap-server", "127.0.0.1:1",
                              "--alter", "--entity-type", "users", "--entity-name", "alice", "--add-config", bad],
                             cwd=REPO, capture_output=True, text=True, timeout=60)
        assert res.returncode != 0
        assert ADMIN_PW not in res.stdout + res.stderr, res.stderr
