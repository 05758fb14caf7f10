"""The Spark source's translation of Java Kafka client options (pipeline/kafka_conf.py): JAAS
login modules to SASL username/password, JKS/PKCS12/PEM stores to PEM, renamed and Java-only
keys. Stores are made with the openssl CLI and the JDK's keytool (JKS)."""

from __future__ import annotations

import shutil
import ssl

import pytest

from pipeline.kafka_conf import KafkaConfError, client_security, translate
from tests.security.certs import make_ca

needs_keytool = pytest.mark.skipif(shutil.which("keytool") is None, reason="needs the JDK's keytool (JKS files)")
SCRAM = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="a-pw";'


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return make_ca(tmp_path_factory.mktemp("kconf-ca"))


def _certs(pem: str) -> int:
    return pem.count("BEGIN CERTIFICATE")


def test_jaas_login_modules_become_username_and_password():
    conf, dropped = translate({"bootstrap.servers": "h:1", "security.protocol": "SASL_SSL",
                               "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": SCRAM})
    assert conf == {"bootstrap.servers": "h:1", "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
                    "sasl.username": "alice", "sasl.password": "a-pw"}
    assert dropped == []
    plain = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";'
    assert translate({"sasl.mechanism": "PLAIN", "sasl.jaas.config": plain})[0]["sasl.username"] == "u"
    with pytest.raises(KafkaConfError, match="does not go with kafka.sasl.mechanism=SCRAM-SHA-256"):
        translate({"sasl.mechanism": "SCRAM-SHA-256", "sasl.jaas.config": plain})
    with pytest.raises(KafkaConfError, match="Krb5LoginModule is not supported"):
        translate({"sasl.mechanism": "GSSAPI",
                   "sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;"})
    with pytest.raises(KafkaConfError, match="kafka.sasl.jaas.config"):
        translate({"sasl.jaas.config": "not jaas at all"})


def test_renamed_java_only_and_librdkafka_keys():
    conf, dropped = translate({"bootstrap.servers": "h:1", "receive.buffer.bytes": "65536", "fetch.max.wait.ms": "100",
                               "max.poll.records": "500", "ssl.keymanager.algorithm": "SunX509",
                               "ssl.endpoint.identification.algorithm": "", "queued.min.messages": "10"})
    assert conf == {"bootstrap.servers": "h:1", "socket.receive.buffer.bytes": "65536", "fetch.wait.max.ms": "100",
                    "ssl.endpoint.identification.algorithm": "none", "queued.min.messages": "10"}
    assert sorted(dropped) == ["max.poll.records", "ssl.keymanager.algorithm"]


def test_pkcs12_and_pem_stores_become_pem(ca, tmp_path):
    ts = ca.truststore_p12("tpw")
    ks = ca.keystore_p12("client-p12", "alice", "kpw")
    conf, _ = translate({"ssl.truststore.location": str(ts), "ssl.truststore.type": "PKCS12",
                         "ssl.truststore.password": "tpw", "ssl.keystore.location": str(ks),
                         "ssl.keystore.type": "PKCS12", "ssl.keystore.password": "kpw"})
    assert _certs(conf["ssl.ca.pem"]) == 1 and "ssl.truststore.location" not in conf
    assert "BEGIN PRIVATE KEY" in conf["ssl.key.pem"] and _certs(conf["ssl.certificate.pem"]) >= 1
    # the type is found from the file when not given (PEM here), as a Java job's PEM stores
    pem, _ = translate({"ssl.truststore.location": str(ca.ca_cert)})
    assert _certs(pem["ssl.ca.pem"]) == 1
    with pytest.raises(KafkaConfError, match="kafka.ssl.truststore.location"):
        translate({"ssl.truststore.location": str(tmp_path / "missing.jks")})
    with pytest.raises(KafkaConfError, match="PKCS12"):
        translate({"ssl.truststore.location": str(ts), "ssl.truststore.type": "PKCS12",
                   "ssl.truststore.password": "wrong"})


@needs_keytool
def test_jks_stores_become_pem(ca):
    ts = ca.truststore_jks("trust-pw")
    ks = ca.keystore_jks("client-jks", "alice", "store-pw", "key-pw")
    conf, _ = translate({"ssl.truststore.location": str(ts), "ssl.truststore.password": "trust-pw",
                         "ssl.keystore.location": str(ks), "ssl.keystore.password": "store-pw",
                         "ssl.key.password": "key-pw"})  # no types given: Java's default JKS, found from the bytes
    assert conf["ssl.ca.pem"].strip() == ca.ca_cert.read_text().strip()
    assert "BEGIN PRIVATE KEY" in conf["ssl.key.pem"] and _certs(conf["ssl.certificate.pem"]) == 2
    with pytest.raises(KafkaConfError, match="wrong key password"):
        translate({"ssl.keystore.location": str(ks), "ssl.keystore.password": "store-pw",
                   "ssl.key.password": "nope"})
    with pytest.raises(KafkaConfError, match="password was incorrect"):
        translate({"ssl.truststore.location": str(ts), "ssl.truststore.password": "nope"})
    sec = client_security({"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-256",
                           "sasl.username": "alice", "sasl.password": "pw", **conf})
    assert sec.mechanism == "SCRAM-SHA-256" and sec.username == "alice"
    assert sec.ssl_context.verify_mode == ssl.CERT_REQUIRED and sec.ssl_context.check_hostname
    assert len(sec.ssl_context.get_ca_certs()) == 1


def test_client_security_needs_credentials_and_a_known_mechanism():
    assert client_security({"bootstrap.servers": "h:1"}) is None
    with pytest.raises(KafkaConfError, match="sasl.jaas.config"):
        client_security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN"})
    with pytest.raises(KafkaConfError, match="GSSAPI is not supported"):
        client_security({"security.protocol": "SASL_PLAINTEXT", "sasl.username": "u", "sasl.password": "p"})
    with pytest.raises(KafkaConfError, match="unknown protocol"):
        client_security({"security.protocol": "TLS"})
