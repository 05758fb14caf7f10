"""Kafka's dynamic broker configs (its DynamicBrokerConfig): which broker keys may change at run
time and at which level, how a change is checked before the controller stores it, and the
synonyms and sources DescribeConfigs shows for a broker key.

A dynamic broker config is a ConfigRecord of resource type BROKER in the metadata log, for one
broker (resource name "<node.id>") or for every broker (resource name "", the cluster default).
Precedence, as in Kafka: this broker's dynamic value, the cluster default, server.properties,
the built-in default. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from common.config import KEYS, Config, ConfigError

# DescribeConfigs ConfigSource ids
SOURCE_TOPIC = 1
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT_BROKER = 3
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
SOURCE_DYNAMIC_BROKER_LOGGER = 6

# IncrementalAlterConfigs operations
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

# SslConfigs.RECONFIGURABLE_CONFIGS: only per listener (listener.name.<l>.<key>)
SSL_RECONFIGURABLE = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.certificates"})
# DynamicListenerConfig.ReconfigurableConfigs
LISTENER_RECONFIGURABLE = frozenset({
    "listeners", "advertised.listeners", "listener.security.protocol.map", "principal.builder.class",
    "ssl.protocol", "ssl.provider", "ssl.cipher.suites", "ssl.enabled.protocols", "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm", "ssl.endpoint.identification.algorithm", "ssl.secure.random.implementation",
    "ssl.client.auth", "ssl.engine.factory.class", "sasl.mechanism.inter.broker.protocol", "sasl.jaas.config",
    "sasl.enabled.mechanisms", "sasl.kerberos.service.name", "sasl.kerberos.kinit.cmd",
    "sasl.kerberos.ticket.renew.window.factor", "sasl.kerberos.ticket.renew.jitter",
    "sasl.kerberos.min.time.before.relogin", "sasl.kerberos.principal.to.local.rules",
    "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter", "sasl.login.refresh.min.period.seconds",
    "sasl.login.refresh.buffer.seconds", "max.connections", "max.connection.creation.rate", "num.network.threads",
} | SSL_RECONFIGURABLE)
CLUSTER_LEVEL_LISTENER = frozenset({"max.connections", "max.connection.creation.rate", "num.network.threads"})
# listener.name.<l>.<mechanism>.<key>
LISTENER_MECHANISM = frozenset({"sasl.jaas.config", "sasl.login.callback.handler.class", "sasl.login.class",
                                "sasl.server.callback.handler.class", "connections.max.reauth.ms"})
# the broker keys that default a topic config, and their synonyms (ServerTopicConfigSynonyms)
LOG_RECONFIGURABLE = frozenset({k.name for k in KEYS.values() if k.topic_key} | {
    "log.roll.hours", "log.roll.jitter.ms", "log.roll.jitter.hours", "log.retention.minutes", "log.retention.hours",
    "log.flush.scheduler.interval.ms", "log.cleaner.min.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms",
    "log.cleaner.min.cleanable.ratio", "log.preallocate", "log.message.downconversion.enable"})
LOG_CLEANER_RECONFIGURABLE = frozenset({
    "log.cleaner.threads", "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.load.factor",
    "log.cleaner.io.buffer.size", "message.max.bytes", "log.cleaner.io.max.bytes.per.second", "log.cleaner.backoff.ms"})
THREAD_POOLS = frozenset({"num.io.threads", "num.replica.fetchers", "num.recovery.threads.per.data.dir",
                          "background.threads"})
SOCKET_SERVER = frozenset({"max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides",
                           "max.connection.creation.rate"})
PRODUCER_STATE = frozenset({"producer.id.expiration.ms", "transaction.partition.verification.enable"})
REPLICATION_QUOTAS = frozenset({"leader.replication.throttled.rate", "follower.replication.throttled.rate",
                                "replica.alter.log.dirs.io.max.bytes.per.second"})

ALL_DYNAMIC = (SSL_RECONFIGURABLE | LISTENER_RECONFIGURABLE | LOG_RECONFIGURABLE | LOG_CLEANER_RECONFIGURABLE
               | THREAD_POOLS | SOCKET_SERVER | PRODUCER_STATE | REPLICATION_QUOTAS | {"metric.reporters"})
PER_BROKER = (SSL_RECONFIGURABLE | LISTENER_RECONFIGURABLE) - CLUSTER_LEVEL_LISTENER

# keys Kafka can change at run time that krafty takes only from server.properties: the listeners
# themselves (a new listener needs a restart here)
NOT_DYNAMIC_HERE = frozenset({"listeners", "advertised.listeners", "listener.security.protocol.map"})

_LISTENER_KEY = re.compile(r"listener\.name\.([^.]+)\.(.*)")


class DynamicConfigError(Exception):
    """A dynamic config change Kafka refuses: ``code`` is the Kafka error code's name."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def listener_base(name: str) -> str | None:
    """``listener.name.<l>.<key>`` -> ``<key>`` (a mechanism's ``<mech>.sasl.jaas.config`` ->
    ``sasl.jaas.config``); None for a key without the listener prefix."""
    m = _LISTENER_KEY.fullmatch(name)
    if not m:
        return None
    base = m.group(2)
    mech = next((k for k in LISTENER_MECHANISM if base.endswith("." + k)), None)
    return mech or base


def is_dynamic(name: str) -> bool:
    """Whether ``name`` may be changed at run time (DescribeConfigs' read_only is its negation)."""
    base = listener_base(name)
    if base is not None:
        return base in LISTENER_RECONFIGURABLE or base in LISTENER_MECHANISM
    return name in ALL_DYNAMIC and name not in NOT_DYNAMIC_HERE


def is_list_type(name: str) -> bool:
    """A LIST-typed key (APPEND / SUBTRACT apply to it)."""
    key = KEYS.get(listener_base(name) or name)
    return key is not None and getattr(key.parse, "__name__", "") in ("_list", "_cleanup_policy")


def default_string(name: str) -> str | None:
    """The built-in default of a key as a config string (APPEND to an unset list starts from it)."""
    key = KEYS.get(name)
    if key is None or key.default is None:
        return None
    v = key.default
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return ",".join(map(str, v))
    return str(v)


def apply_ops(current: Mapping[str, str], ops, *, resource: str = "broker") -> dict[str, str | None]:
    """IncrementalAlterConfigs ops ``(name, op, value)`` on ``current`` (the stored values):
    the new value of each named key (None: deleted). APPEND/SUBTRACT start from the stored value
    or the key's default, as Kafka's ConfigurationControlManager does."""
    out: dict[str, str | None] = {}
    for name, op, value in ops:
        if op == OP_SET:
            out[name] = value
        elif op == OP_DELETE:
            out[name] = None
        elif op in (OP_APPEND, OP_SUBTRACT):
            if not is_list_type(name):
                raise DynamicConfigError("INVALID_CONFIG",
                                         f"Can't {'APPEND' if op == OP_APPEND else 'SUBTRACT'} to key {name} "
                                         "because its type is not LIST.")
            old = out[name] if name in out else current.get(name)
            if old is None:
                old = default_string(name)
            items = [x for x in (old or "").split(",") if x]
            given = (value or "").split(",")
            items = items + [x for x in given if x and x not in items] if op == OP_APPEND else [
                x for x in items if x not in given]
            out[name] = ",".join(items)
        else:
            raise DynamicConfigError("INVALID_REQUEST", f"Unknown operation type {op} for {resource} config {name}")
    return out


def validate_change(cfg: Config, props: Mapping[str, str], *, per_broker: bool) -> None:
    """Kafka's DynamicBrokerConfig.validateConfigs on the dynamic configs a broker resource
    would have after the change (``props``: key -> value), against this node's ``cfg``. Raises
    DynamicConfigError: INVALID_CONFIG for a key krafty does not know, INVALID_REQUEST (as
    Kafka) for one that is not dynamic, an SSL key without the listener prefix, a bad value, a
    per-broker key at the cluster level, or a thread count more than doubled or halved."""
    unknown = sorted(k for k in props if k not in KEYS and not _known_listener_key(k))
    if unknown:
        raise DynamicConfigError("INVALID_CONFIG", f"Unknown broker configuration key(s): {', '.join(unknown)}")
    static = sorted(k for k in props if not is_dynamic(k))
    if static:
        raise DynamicConfigError("INVALID_REQUEST", f"Cannot update these configs dynamically: {', '.join(static)} "
                                 "(set them in server.properties and restart the broker)")
    unprefixed = sorted(k for k in props if k in SSL_RECONFIGURABLE)
    if unprefixed:
        raise DynamicConfigError("INVALID_REQUEST", "These security configs can be dynamically updated only "
                                 f"per-listener using the listener prefix: {', '.join(unprefixed)}")
    for k, v in props.items():
        try:
            Config._convert_one(k, v)
        except ConfigError as e:
            raise DynamicConfigError("INVALID_REQUEST", str(e)) from None
    if not per_broker:
        only = sorted(k for k in props if k in PER_BROKER or (listener_base(k) or "") not in ("", *CLUSTER_LEVEL_LISTENER))
        if only:
            raise DynamicConfigError("INVALID_REQUEST", "Cannot update these configs at default cluster level, "
                                     f"broker id must be specified: {', '.join(only)}")
    for k in sorted(THREAD_POOLS & set(props)):
        if k not in KEYS:
            continue
        new, old = KEYS[k].convert(props[k]), cfg[k]
        if new != old:
            what = f"Dynamic thread count update validation failed for {k}={props[k]}"
            if new < old / 2:
                raise DynamicConfigError("INVALID_REQUEST", f"{what}, value should be at least half the current "
                                         f"value {old}")
            if new > old * 2:
                raise DynamicConfigError("INVALID_REQUEST", f"{what}, value should not be greater than double the "
                                         f"current value {old}")


def _known_listener_key(name: str) -> bool:
    """A listener-prefixed key the node understands (as Config reads them)."""
    m = _LISTENER_KEY.fullmatch(name)
    if not m:
        return False
    rest = m.group(2)
    if re.fullmatch(r"[a-z0-9-]+\.sasl\.jaas\.config", rest):
        return True
    return rest in KEYS and (rest.startswith(("ssl.", "sasl.")) or rest == "connections.max.reauth.ms")


def broker_synonyms(name: str) -> list[str]:
    """Kafka's DynamicBrokerConfig.brokerConfigSynonyms: the keys that set the same value, in
    order of precedence (a listener-prefixed key's synonym is its base key)."""
    for group in (("log.roll.ms", "log.roll.hours"), ("log.roll.jitter.ms", "log.roll.jitter.hours"),
                  ("log.retention.ms", "log.retention.minutes", "log.retention.hours")):
        if name in group:
            return list(group)
    if name == "log.flush.interval.ms":
        return ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"]
    base = listener_base(name)
    if base is not None:
        return [name, base]
    return [name]


def config_synonyms(cfg: Config, name: str, names: list[str], *, static_default) -> list[tuple[str, str | None, int]]:
    """Kafka's ConfigHelper.configSynonyms: (name, value string, source) of each synonym that is
    set, by source (this broker's dynamic, the dynamic default, static, built-in default), and
    within a source in the order of ``names``; entries before the first one named ``name`` are
    dropped. ``static_default(key)`` gives a key's built-in default string or None."""
    out: list[tuple[str, str | None, int]] = []
    for layer, source in ((cfg.dynamic_broker, SOURCE_DYNAMIC_BROKER),
                          (cfg.dynamic_default, SOURCE_DYNAMIC_DEFAULT_BROKER),
                          (cfg.explicit, SOURCE_STATIC_BROKER)):
        out += [(n, layer[n], source) for n in names if n in layer]
    out += [(n, d, SOURCE_DEFAULT) for n in names if (d := static_default(n)) is not None]
    while out and out[0][0] != name:
        out.pop(0)
    return out
