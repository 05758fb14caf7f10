"""Security configuration: every bad or missing value stops startup with a message naming
the key; per-listener keys (listener.name.<l>.*) override the global ones."""

from __future__ import annotations

import shutil
import socket
import ssl
import threading

import pytest

from broker.security.sasl import inter_broker_security, listener_security
from broker.security.ssl import client_context, controller_grpc_credentials, server_context, subject_dn
from common.config import Config, ConfigError
from tests.security.certs import make_ca
from tests.security.conftest import jaas_plain, run_cli

BASE = {"node.id": "1", "controller.quorum.voters": "1@127.0.0.1:9093",
        "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093,SECURE://127.0.0.1:9094",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SECURE:SASL_SSL"}


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    ca = make_ca(tmp_path_factory.mktemp("ca"))
    ca.ks = ca.keystore_pem("srv", "localhost", server=True)
    ca.ks_enc = ca.keystore_pem("srv2", "localhost", server=True, key_password="pw")
    return ca


def cfg(**kw) -> Config:
    return Config({**BASE, **{k.replace("__", "."): v for k, v in kw.items()}}, warn_unknown=False)


def test_sasl_listener_needs_supported_mechanisms(ca):
    with pytest.raises(ConfigError, match="sasl.enabled.mechanisms.*GSSAPI"):  # Kafka's default is GSSAPI
        listener_security(Config({**BASE, "ssl.keystore.type": "PEM", "ssl.keystore.location": str(ca.ks)}), "SECURE")


def test_plain_needs_a_jaas_config_naming_the_key(ca):
    c = Config({**BASE, "sasl.enabled.mechanisms": "PLAIN", "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(ca.ks)})
    with pytest.raises(ConfigError, match="listener.name.secure.plain.sasl.jaas.config"):
        listener_security(c, "SECURE")


def test_tls_listener_needs_a_keystore():
    c = Config({**BASE, "sasl.enabled.mechanisms": "SCRAM-SHA-256"})
    with pytest.raises(ConfigError, match="listener.name.secure.ssl.keystore.location"):
        listener_security(c, "SECURE")


@pytest.mark.parametrize("kind,match", [("JKS", "not a JKS keystore"), ("XYZ", "unknown type")])
def test_unsupported_keystore_types(ca, kind, match):
    c = Config({**BASE, "sasl.enabled.mechanisms": "SCRAM-SHA-256", "ssl.keystore.type": kind,
                "ssl.keystore.location": str(ca.ks)})
    with pytest.raises(ConfigError, match=match):
        listener_security(c, "SECURE")


@pytest.mark.skipif(shutil.which("keytool") is None, reason="needs the JDK's keytool to make JKS files")
def test_jks_keystore_and_truststore(ca):
    ks = ca.keystore_jks("jks-server", "localhost", "storepass", "keypass", server=True)
    ts = ca.truststore_jks("trustpass")
    base = {**BASE, "sasl.enabled.mechanisms": "SCRAM-SHA-256", "ssl.keystore.type": "JKS",
            "ssl.keystore.location": str(ks), "ssl.keystore.password": "storepass", "ssl.key.password": "keypass",
            "ssl.truststore.type": "JKS", "ssl.truststore.location": str(ts),
            "ssl.truststore.password": "trustpass", "listener.name.secure.ssl.client.auth": "required"}
    sec = listener_security(Config(base), "SECURE")
    assert isinstance(sec.ssl_context, ssl.SSLContext)
    assert [c["subject"] for c in sec.ssl_context.get_ca_certs()] == [((("organizationName", "krafty-test"),),
                                                                       (("commonName", "krafty test CA"),))]
    with pytest.raises(ConfigError, match="wrong key password"):
        listener_security(Config({**base, "ssl.key.password": "nope"}), "SECURE")
    with pytest.raises(ConfigError, match="password was incorrect"):
        listener_security(Config({**base, "ssl.truststore.password": "nope"}), "SECURE")


def test_missing_keystore_file_and_wrong_key_password(ca, tmp_path):
    base = {**BASE, "sasl.enabled.mechanisms": "SCRAM-SHA-256", "ssl.keystore.type": "PEM"}
    with pytest.raises(ConfigError, match="no such file"):
        listener_security(Config({**base, "ssl.keystore.location": str(tmp_path / "nope.pem")}), "SECURE")
    with pytest.raises(ConfigError, match="ssl.key.password"):
        listener_security(Config({**base, "ssl.keystore.location": str(ca.ks_enc), "ssl.key.password": "bad"}),
                          "SECURE")
    sec = listener_security(Config({**base, "ssl.keystore.location": str(ca.ks_enc), "ssl.key.password": "pw"}),
                            "SECURE")
    assert isinstance(sec.ssl_context, ssl.SSLContext)


def test_inline_pem_keystore_and_per_listener_keys(ca):
    key, chain = ca.issue("inline", "localhost", server=True)
    c = Config({**BASE, "sasl.enabled.mechanisms": "PLAIN", "listener.name.secure.ssl.keystore.type": "PEM",
                "listener.name.secure.ssl.keystore.key": key.read_text(),
                "listener.name.secure.ssl.keystore.certificate.chain": chain.read_text(),
                "listener.name.secure.ssl.client.auth": "required",
                "listener.name.secure.ssl.truststore.certificates": ca.ca_cert.read_text(),
                "listener.name.secure.plain.sasl.jaas.config": jaas_plain({"u": "p"}),
                "listener.name.secure.connections.max.reauth.ms": "60000"}, warn_unknown=False)
    sec = listener_security(c, "SECURE")
    assert sec.protocol == "SASL_SSL" and sec.plain_users == {"u": "p"} and sec.reauth_ms == 60000
    assert sec.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert c["connections.max.reauth.ms"] == 0  # the global value is untouched


def _handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> dict | None:
    """A TLS handshake between the two contexts over a socket pair; the client certificate
    the server saw (None without one)."""
    a, b = socket.socketpair()
    out = {}

    def serve():
        with server_ctx.wrap_socket(a, server_side=True) as s:
            out["peer"] = s.getpeercert()
            s.sendall(b"ok")
    t = threading.Thread(target=serve)
    t.start()
    with client_ctx.wrap_socket(b, server_hostname="localhost") as c:
        assert c.recv(2) == b"ok"
    t.join(10)
    return out["peer"]


def test_pkcs12_keystore_and_truststore(ca):
    """Kafka's default keystore type: PKCS12 keystores and truststores, with mutual TLS."""
    server_ks = ca.keystore_p12("p12srv", "localhost", "store-pw", server=True)
    client_ks = ca.keystore_p12("p12cli", "p12-client", "cli-pw")
    trust = ca.truststore_p12("trust-pw")
    server = server_context(cfg(ssl__keystore__type="PKCS12", ssl__keystore__location=str(server_ks),
                                ssl__keystore__password="store-pw", ssl__truststore__type="PKCS12",
                                ssl__truststore__location=str(trust), ssl__truststore__password="trust-pw",
                                ssl__client__auth="required"), "SECURE")
    client = client_context(cfg(ssl__keystore__type="PKCS12", ssl__keystore__location=str(client_ks),
                                ssl__keystore__password="cli-pw", ssl__truststore__type="PKCS12",
                                ssl__truststore__location=str(trust), ssl__truststore__password="trust-pw"),
                            "SECURE")
    peer = _handshake(server, client)
    assert subject_dn(peer) == "CN=p12-client,O=krafty-test"
    with pytest.raises(ConfigError, match="ssl.keystore.location.*PKCS12"):
        server_context(cfg(ssl__keystore__type="PKCS12", ssl__keystore__location=str(server_ks),
                           ssl__keystore__password="wrong"), "SECURE")


def test_client_auth_needs_a_truststore(ca):
    c = Config({**BASE, "ssl.keystore.type": "PEM", "ssl.keystore.location": str(ca.ks),
                "ssl.client.auth": "required"})
    with pytest.raises(ConfigError, match="ssl.client.auth=required.*truststore"):
        server_context(c, "SECURE")


def test_bad_values_name_the_key():
    with pytest.raises(ConfigError, match="listener.name.secure.ssl.client.auth"):
        Config({**BASE, "listener.name.secure.ssl.client.auth": "sometimes"})
    with pytest.raises(ConfigError, match="ssl.enabled.protocols"):
        client_context(Config({**BASE, "ssl.enabled.protocols": "SSLv3"}), None)


def test_inter_broker_sasl_needs_credentials(ca):
    c = Config({**BASE, "inter.broker.listener.name": "SECURE", "sasl.enabled.mechanisms": "PLAIN",
                "sasl.mechanism.inter.broker.protocol": "PLAIN", "ssl.truststore.location": str(ca.ca_cert),
                "listener.name.secure.plain.sasl.jaas.config": jaas_plain({"b": "pw"})})
    with pytest.raises(ConfigError, match="username=.*listener.name.secure.plain.sasl.jaas.config"):
        inter_broker_security(c)
    c = Config({**BASE, "inter.broker.listener.name": "SECURE", "ssl.truststore.location": str(ca.ca_cert)})
    with pytest.raises(ConfigError, match="sasl.mechanism.inter.broker.protocol"):
        inter_broker_security(c)
    c = Config({**BASE, "inter.broker.listener.name": "SECURE", "sasl.mechanism.inter.broker.protocol": "PLAIN",
                "ssl.truststore.location": str(ca.ca_cert),
                "listener.name.secure.plain.sasl.jaas.config": jaas_plain({}, login=("b", "pw"))})
    sec = inter_broker_security(c)
    assert (sec.protocol, sec.mechanism, sec.username, sec.password) == ("SASL_SSL", "PLAIN", "b", "pw")


def test_controller_listener_tls_settings(ca):
    c = Config({**BASE, "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SSL,SECURE:SASL_SSL",
                "listener.name.controller.ssl.keystore.type": "PEM",
                "listener.name.controller.ssl.keystore.location": str(ca.ks),
                "listener.name.controller.ssl.truststore.location": str(ca.ca_cert),
                "listener.name.controller.ssl.client.auth": "required"})
    server, channel = controller_grpc_credentials(c)
    assert server is not None and channel is not None
    assert controller_grpc_credentials(Config(BASE)) == (None, None)
    bad = Config({**BASE, "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_SSL,SECURE:SSL"})
    with pytest.raises(ConfigError, match="PLAINTEXT or SSL"):
        controller_grpc_credentials(bad)


def test_node_refuses_to_start_with_a_bad_security_config(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text("\n".join(f"{k}={v}" for k, v in {
        **BASE, "log.dirs": str(tmp_path / "data"), "sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SECURE:SASL_PLAINTEXT"}.items()))
    res = run_cli("node", "--config", str(props), timeout=60)
    assert res.returncode != 0
    assert "sasl.enabled.mechanisms" in res.stderr + res.stdout and "OAUTHBEARER" in res.stderr + res.stdout
