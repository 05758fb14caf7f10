"""The ``kafka.*`` options of a job written for Spark's Kafka source (Java client keys) turned into
what krafty's source runs with: librdkafka settings for the driver's lookups and the writer, and
the connection settings of the executors' fetcher (pipeline/fetcher.py).

* Translated: ``sasl.jaas.config`` with Kafka's PlainLoginModule or ScramLoginModule becomes
  ``sasl.username``/``sasl.password``; trust stores and key stores (``ssl.truststore.*``,
  ``ssl.keystore.*``, ``ssl.key.password``; JKS, PKCS12 or PEM, inline or in a file) become PEM
  (``ssl.ca.pem``, ``ssl.certificate.pem``, ``ssl.key.pem``); an empty
  ``ssl.endpoint.identification.algorithm`` becomes ``none``; Java names that librdkafka spells
  differently (``receive.buffer.bytes``, ``fetch.max.wait.ms``, ...) are renamed.
* Java-only keys (no librdkafka equivalent: ``max.poll.records``, ``ssl.keymanager.algorithm``,
  ...) are dropped and named in one warning.
* librdkafka keys pass through; a key neither knows is an error naming it (found by librdkafka
  itself when the driver builds its client).

Stores are read where the job runs (driver and executors), as the Java client does: their paths
must exist on every node.
"""

from __future__ import annotations

import hashlib
import logging

from broker.security.sasl import parse_jaas
from common.config import ConfigError

log = logging.getLogger("krafty.pipeline")

# Java client name -> librdkafka name (same meaning)
RENAMED = {
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
    "send.buffer.bytes": "socket.send.buffer.bytes",
    "fetch.max.wait.ms": "fetch.wait.max.ms",
    "max.request.size": "message.max.bytes",
    "sasl.mechanism": "sasl.mechanisms",
}

# Java consumer/producer/admin keys librdkafka has no equivalent for: dropped with a warning
JAVA_ONLY = {
    "max.poll.records", "default.api.timeout.ms", "max.block.ms", "buffer.memory", "partitioner.class",
    "partitioner.ignore.keys", "partitioner.adaptive.partitioning.enable",
    "partitioner.availability.timeout.ms", "metric.reporters", "metrics.num.samples",
    "metrics.recording.level", "metrics.sample.window.ms", "auto.include.jmx.reporter",
    "security.providers", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
    "ssl.secure.random.implementation", "ssl.engine.factory.class", "ssl.provider", "ssl.protocol",
    "ssl.enabled.protocols", "sasl.login.callback.handler.class", "sasl.client.callback.handler.class",
    "sasl.login.class", "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter",
    "sasl.login.refresh.min.period.seconds", "sasl.login.refresh.buffer.seconds",
    "sasl.login.connect.timeout.ms", "sasl.login.read.timeout.ms", "sasl.login.retry.backoff.ms",
    "sasl.login.retry.backoff.max.ms", "exclude.internal.topics", "internal.leave.group.on.close",
    "metadata.max.idle.ms", "transaction.two.phase.commit.enable", "socket.connection.setup.timeout.max.ms",
}

# the store keys this module consumes (with the translated JAAS config)
_STORE_KEYS = {
    "ssl.truststore.location", "ssl.truststore.type", "ssl.truststore.password", "ssl.truststore.certificates",
    "ssl.keystore.location", "ssl.keystore.type", "ssl.keystore.password", "ssl.keystore.key",
    "ssl.keystore.certificate.chain", "ssl.key.password",
}
_LOGIN_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": "PLAIN",
    "org.apache.kafka.common.security.scram.ScramLoginModule": "SCRAM",
}


class KafkaConfError(ValueError):
    """A ``kafka.*`` option that cannot be used; the message names it (``kafka.<key>``)."""


def _read(path: str, key: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise KafkaConfError(f"option 'kafka.{key}': cannot read {path}: {e.strerror}") from None


def _store_kind(declared: str | None, data: bytes) -> str:
    """A store's type: as declared, else found from its bytes (Java's default is JKS)."""
    from broker.security.jks import is_jks

    if declared:
        return declared.upper()
    if is_jks(data):
        return "JKS"
    return "PEM" if data.lstrip().startswith(b"-----") else "PKCS12"


def _open_store(conf: dict, which: str) -> tuple[bytes, bytes, bytes]:
    """(PEM key, PEM chain, PEM trusted certificates) of ssl.<which>store.* (a file of any type)."""
    from broker.security import ssl as kssl

    loc_key = f"ssl.{which}store.location"
    path = conf[loc_key]
    data = _read(path, loc_key)
    kind = _store_kind(conf.get(f"ssl.{which}store.type"), data)
    password = conf.get(f"ssl.{which}store.password")
    try:
        if kind == "JKS":
            return kssl._jks(path, password, conf.get("ssl.key.password"), f"kafka.{loc_key}")
        if kind == "PKCS12":
            key, chain = kssl._pkcs12(path, password, f"kafka.{loc_key}")
            return key, chain, chain if which == "trust" else b""
        if kind == "PEM":
            blocks = [(m.group(1), m.group(0)) for m in kssl._PEM_BLOCK.finditer(data)]
            key = b"".join(b for t, b in blocks if t.endswith(b"PRIVATE KEY"))
            certs = b"".join(b for t, b in blocks if t == b"CERTIFICATE")
            return key, certs, certs
    except ConfigError as e:
        raise KafkaConfError(str(e)) from None
    raise KafkaConfError(f"option 'kafka.ssl.{which}store.type': unknown type {kind!r} (expected JKS, PKCS12 or PEM)")


def _decrypt_key(pem: bytes, password: str | None) -> bytes:
    if b"ENCRYPTED" not in pem:
        return pem
    from cryptography.hazmat.primitives import serialization

    try:
        k = serialization.load_pem_private_key(pem, (password or "").encode() or None)
    except (ValueError, TypeError) as e:
        raise KafkaConfError(f"option 'kafka.ssl.key.password': cannot decrypt the private key ({e})") from None
    return k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                           serialization.NoEncryption())


def translate(kafka: dict) -> tuple[dict, list[str]]:
    """(librdkafka settings, Java-only keys dropped) of the ``kafka.*`` options (prefix removed)."""
    out: dict = {}
    dropped = []
    lower = {k.lower(): k for k in kafka}
    for k, v in kafka.items():
        kl = k.lower()
        if kl in _STORE_KEYS or kl == "sasl.jaas.config":
            continue
        if kl in JAVA_ONLY:
            dropped.append(k)
            continue
        out[RENAMED.get(kl, k)] = v
    conf = {k.lower(): v for k, v in kafka.items()}
    jaas = conf.get("sasl.jaas.config")
    if jaas:
        try:
            module, opts = parse_jaas(jaas, "kafka.sasl.jaas.config")
        except ConfigError as e:
            raise KafkaConfError(f"option {e}") from None
        if module not in _LOGIN_MODULES:
            raise KafkaConfError(f"option 'kafka.sasl.jaas.config': login module {module} is not supported "
                                 f"(supported: {', '.join(sorted(_LOGIN_MODULES))})")
        if "username" not in opts or "password" not in opts:
            raise KafkaConfError("option 'kafka.sasl.jaas.config': needs username=\"...\" and password=\"...\"")
        mech = str(conf.get("sasl.mechanism", conf.get("sasl.mechanisms", "GSSAPI"))).upper()
        if _LOGIN_MODULES[module] == "PLAIN" and mech != "PLAIN" or \
                _LOGIN_MODULES[module] == "SCRAM" and not mech.startswith("SCRAM-"):
            raise KafkaConfError(f"option 'kafka.sasl.jaas.config': {module.rsplit('.', 1)[-1]} does not go with "
                                 f"kafka.sasl.mechanism={mech}")
        out["sasl.username"], out["sasl.password"] = opts["username"], opts["password"]
    algo = conf.get("ssl.endpoint.identification.algorithm")
    if algo is not None:
        out[lower["ssl.endpoint.identification.algorithm"]] = str(algo).strip().lower() or "none"
    if conf.get("ssl.truststore.certificates"):
        out["ssl.ca.pem"] = conf["ssl.truststore.certificates"]
    elif conf.get("ssl.truststore.location"):
        _, chain, trusted = _open_store(conf, "trust")
        pem = trusted or chain
        if not pem:
            raise KafkaConfError(f"option 'kafka.ssl.truststore.location': {conf['ssl.truststore.location']} "
                                 "holds no certificate")
        out["ssl.ca.pem"] = pem.decode()
    if conf.get("ssl.keystore.key"):
        out["ssl.key.pem"] = _decrypt_key(conf["ssl.keystore.key"].encode(), conf.get("ssl.key.password")).decode()
        out["ssl.certificate.pem"] = conf.get("ssl.keystore.certificate.chain") or ""
    elif conf.get("ssl.keystore.location"):
        key, chain, _ = _open_store(conf, "key")
        if not key or not chain:
            raise KafkaConfError(f"option 'kafka.ssl.keystore.location': {conf['ssl.keystore.location']} needs a "
                                 "private key and its certificate chain")
        out["ssl.key.pem"] = _decrypt_key(key, conf.get("ssl.key.password")).decode()
        out["ssl.certificate.pem"] = chain.decode()
    elif conf.get("ssl.key.password") and "ssl.key.location" in {k.lower() for k in out}:
        out["ssl.key.password"] = conf["ssl.key.password"]  # librdkafka's own key file, encrypted
    return out, dropped


def warn_dropped(dropped: list[str], where: str) -> None:
    if dropped:
        log.warning("krafty %s: ignoring Java-only Kafka client options with no librdkafka equivalent: %s",
                    where, ", ".join(f"kafka.{k}" for k in sorted(dropped)))


def fingerprint(conf: dict) -> str:
    """A stable key for ``conf`` (caches of clients per connection settings)."""
    h = hashlib.sha256()
    for k, v in sorted(conf.items()):
        h.update(f"{k}\0{v}\0".encode())
    return h.hexdigest()


def client_security(conf: dict):
    """broker.security.sasl.ClientSecurity for the fetcher from librdkafka-style settings (the
    output of ``translate``, or a user's own librdkafka keys); None for PLAINTEXT."""
    import ssl

    from broker.security import ssl as kssl
    from broker.security.sasl import SUPPORTED_MECHANISMS, ClientSecurity

    c = {k.lower(): v for k, v in conf.items()}
    protocol = str(c.get("security.protocol", "plaintext")).upper()
    if protocol == "PLAINTEXT":
        return None
    if protocol not in ("SSL", "SASL_SSL", "SASL_PLAINTEXT"):
        raise KafkaConfError(f"option 'kafka.security.protocol': unknown protocol {protocol!r}")
    ctx = None
    if protocol in ("SSL", "SASL_SSL"):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        try:
            if c.get("ssl.ca.pem"):
                ctx.load_verify_locations(cadata=c["ssl.ca.pem"])
            elif c.get("ssl.ca.location"):
                ctx.load_verify_locations(cafile=c["ssl.ca.location"])
            else:
                ctx.load_default_certs()
            if c.get("ssl.key.pem") and c.get("ssl.certificate.pem"):
                kssl._load_pem_pair(ctx, c["ssl.key.pem"].encode(), c["ssl.certificate.pem"].encode(),
                                    c.get("ssl.key.password"), "kafka.ssl.keystore.location")
            elif c.get("ssl.key.location") and c.get("ssl.certificate.location"):
                ctx.load_cert_chain(c["ssl.certificate.location"], c["ssl.key.location"], c.get("ssl.key.password"))
        except (ssl.SSLError, OSError, ConfigError) as e:
            raise KafkaConfError(f"kafka.ssl.* options: cannot set up TLS ({e})") from None
        verify = str(c.get("enable.ssl.certificate.verification", "true")).lower() != "false"
        ctx.check_hostname = verify and str(c.get("ssl.endpoint.identification.algorithm", "https")).lower() == "https"
        ctx.verify_mode = ssl.CERT_REQUIRED if verify else ssl.CERT_NONE
    if not protocol.startswith("SASL"):
        return ClientSecurity(protocol, ctx)
    mech = str(c.get("sasl.mechanisms", c.get("sasl.mechanism", "GSSAPI"))).upper()
    if mech not in SUPPORTED_MECHANISMS:
        raise KafkaConfError(f"option 'kafka.sasl.mechanism': {mech} is not supported by the krafty source "
                             f"(supported: {', '.join(SUPPORTED_MECHANISMS)})")
    user, password = c.get("sasl.username"), c.get("sasl.password")
    if not user or password is None:
        raise KafkaConfError("SASL needs kafka.sasl.jaas.config (PlainLoginModule or ScramLoginModule with "
                             "username and password) or kafka.sasl.username and kafka.sasl.password")
    return ClientSecurity(protocol, ctx, mech, user, password)
