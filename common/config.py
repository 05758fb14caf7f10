"""Kafka-style configuration: ``server.properties`` parsing and typed, validated keys.

Every key krafty understands is declared once in ``KEYS`` with Kafka's name, type and
default. Unknown keys produce a warning (never silently ignored); a bad value raises
``ConfigError`` naming the key, which stops startup.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

log = logging.getLogger("krafty.config")


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the key."""


# --- value parsers -------------------------------------------------------------------

_INT32_MAX = 2**31 - 1  # the upper bound of Kafka's INT-typed keys (e.g. segment.bytes)


def _int(v: str) -> int:
    """Kafka's LONG (its INT keys also have max=_INT32_MAX): a longer number is refused, never
    stored (a topic config of 10^2000 reached the log code as a Python int)."""
    s = v.strip()
    if len(s) > 20:
        raise ValueError("not a 64-bit integer")
    n = int(s)
    if not -(2**63) <= n < 2**63:
        raise ValueError("not a 64-bit integer")
    return n


def _bool(v: str) -> bool:
    s = v.strip().lower()
    if s in ("true", "false"):
        return s == "true"
    raise ValueError("expected true or false")


def _ratio(v: str) -> float:
    """A DOUBLE in [0, 1] (min.cleanable.dirty.ratio)."""
    x = float(v.strip())
    if not 0.0 <= x <= 1.0:  # also refuses nan
        raise ValueError("Value must be between 0 and 1")
    return x


def _str(v: str) -> str:
    return v.strip()


def _message_format_version(v: str) -> str:
    """A Kafka release as message.format.version takes it: 0.8.0 ... 0.10.0-IV1 ... 3.0-IV1."""
    v = v.strip()
    if not re.fullmatch(r"[0-9]+\.[0-9]+(\.[0-9]+){0,2}(-IV[0-9]+)?", v):
        raise ValueError(f"{v!r} is not a Kafka version such as 0.10.0 or 3.0-IV1")
    return v


def _list(v: str) -> list[str]:
    return [x.strip() for x in v.split(",") if x.strip()]


def _roles(v: str) -> list[str]:
    roles = _list(v)
    if not roles or any(r not in ("broker", "controller") for r in roles) or len(set(roles)) != len(roles):
        raise ValueError("expected 'broker', 'controller' or 'broker,controller'")
    return roles


def _voters(v: str) -> list[tuple[int, str, int]]:
    """``1@host:port,2@host:port`` -> [(1, host, port), ...]"""
    out = []
    for item in _list(v):
        m = re.fullmatch(r"(\d+)@(\[[^\]]+\]|[^:@]+):(\d+)", item)
        if not m:
            raise ValueError(f"voter {item!r} is not of the form id@host:port")
        host = m.group(2).strip("[]")
        out.append((int(m.group(1)), host, int(m.group(3))))
    ids = [x[0] for x in out]
    if len(set(ids)) != len(ids):
        raise ValueError("duplicate voter id")
    return out


@dataclasses.dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int


def _listeners(v: str) -> list[Listener]:
    """``PLAINTEXT://127.0.0.1:9092,CONTROLLER://:9093``"""
    out = []
    for item in _list(v):
        m = re.fullmatch(r"([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:]*):(\d+)", item)
        if not m:
            raise ValueError(f"listener {item!r} is not of the form NAME://host:port")
        port = int(m.group(3))
        if not 0 <= port <= 65535:
            raise ValueError(f"port {port} out of range")
        out.append(Listener(m.group(1).upper(), m.group(2).strip("[]"), port))
    names = [x.name for x in out]
    if len(set(names)) != len(names):
        raise ValueError("duplicate listener name")
    return out


def _protocol_map(v: str) -> dict[str, str]:
    out = {}
    for item in _list(v):
        name, sep, proto = item.partition(":")
        if not sep:
            raise ValueError(f"{item!r} is not of the form LISTENER:PROTOCOL")
        proto = proto.strip().upper()
        if proto not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ValueError(f"unknown security protocol {proto!r}")
        out[name.strip().upper()] = proto
    return out


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(v: str) -> str:
        s = v.strip().lower()
        if s not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
        return s
    return parse


_ASSIGNOR_CLASSES = {"org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
                     "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range"}


def _assignors(v: str) -> list[str]:
    """group.consumer.assignors: names (uniform, range) or Kafka's class names; the first is the default."""
    names = [_ASSIGNOR_CLASSES.get(x, x) for x in _list(v)]
    bad = [x for x in names if x not in ("uniform", "range")]
    if not names or bad:
        raise ValueError(f"unknown assignor(s) {', '.join(bad) or '(none)'}: krafty has uniform and range")
    return names


def _rebalance_protocols(v: str) -> list[str]:
    names = [x.lower() for x in _list(v)]
    if "classic" not in names or any(x not in ("classic", "consumer", "share", "streams") for x in names):
        raise ValueError("a list of classic, consumer (share, streams), with classic")
    return names


def _cleanup_policy(v: str) -> str:
    parts = sorted(set(_list(v.lower())))
    if not parts or any(p not in ("delete", "compact") for p in parts):
        raise ValueError("expected delete, compact or compact,delete")
    return ",".join(parts)


@dataclasses.dataclass(frozen=True)
class Key:
    name: str
    parse: Callable[[str], Any]
    default: Any
    doc: str = ""
    min: int | None = None
    max: int | None = None
    topic_key: str | None = None  # the per-topic config this broker key is the default of

    def convert(self, raw: str) -> Any:
        shown = shown_value(self.name, raw)
        try:
            value = self.parse(raw)
        except (ValueError, TypeError) as e:
            raise ConfigError(f"invalid value {shown} for configuration key '{self.name}': {e}") from None
        if self.min is not None and isinstance(value, int) and value < self.min:
            raise ConfigError(f"invalid value {shown} for configuration key '{self.name}': must be >= {self.min}")
        if self.max is not None and isinstance(value, int) and value > self.max:
            raise ConfigError(f"invalid value {shown} for configuration key '{self.name}': must be <= {self.max}")
        return value


_H = 3_600_000
KEYS: dict[str, Key] = {
    k.name: k
    for k in [
        # node identity and roles
        Key("node.id", _int, None, "this node's id", min=0),
        Key("process.roles", _roles, ["broker", "controller"], "broker, controller or both"),
        Key("cluster.id", _str, None, "krafty: format empty data dirs with this cluster id on first start "
            "(krafty/storage.py); formatted ones must carry it"),
        Key("broker.rack", _str, None, "rack of this broker"),
        # listeners
        Key("listeners", _listeners, [Listener("PLAINTEXT", "127.0.0.1", 9092), Listener("CONTROLLER", "127.0.0.1", 9093)]),
        Key("advertised.listeners", _listeners, None),
        Key("listener.security.protocol.map", _protocol_map,
            {"PLAINTEXT": "PLAINTEXT", "CONTROLLER": "PLAINTEXT", "SSL": "SSL",
             "SASL_PLAINTEXT": "SASL_PLAINTEXT", "SASL_SSL": "SASL_SSL"}),
        Key("controller.listener.names", _list, ["CONTROLLER"]),
        Key("inter.broker.listener.name", lambda v: _str(v).upper(), "PLAINTEXT"),
        # quorum
        Key("controller.quorum.voters", _voters, [], "id@host:port,..."),
        Key("controller.quorum.bootstrap.servers", _list, []),
        Key("controller.quorum.election.timeout.ms", _int, 1000, min=1),
        Key("controller.quorum.fetch.timeout.ms", _int, 2000, min=1),
        Key("controller.quorum.election.backoff.max.ms", _int, 1000, min=1),
        Key("controller.quorum.append.linger.ms", _int, 25, min=0),
        Key("controller.quorum.request.timeout.ms", _int, 2000, min=1),
        Key("controller.quorum.retry.backoff.ms", _int, 20, min=0),
        Key("metadata.log.dir", _str, None),
        Key("metadata.log.max.record.bytes.between.snapshots", _int, 20 * 1024 * 1024, min=1),
        Key("metadata.max.idle.interval.ms", _int, 500, min=0),
        # brokers
        Key("broker.session.timeout.ms", _int, 9000, min=1),
        Key("broker.heartbeat.interval.ms", _int, 2000, min=1),
        Key("auto.leader.rebalance.enable", _bool, True),
        Key("leader.imbalance.check.interval.seconds", _int, 300, min=1),
        # storage
        Key("log.dirs", _list, None),
        Key("log.dir", _str, "/tmp/kraft-combined-logs"),
        Key("log.segment.bytes", _int, 1024 * 1024 * 1024, min=14, max=_INT32_MAX, topic_key="segment.bytes"),
        Key("log.roll.ms", _int, None, min=1, topic_key="segment.ms"),
        Key("log.roll.hours", _int, 168, min=1),
        # a segment is rolled up to this much earlier than segment.ms (a per-segment share of it),
        # so that partitions created together do not all roll at once
        Key("log.roll.jitter.ms", _int, None, min=0, topic_key="segment.jitter.ms"),
        Key("log.roll.jitter.hours", _int, 0, min=0),
        # how long a deleted segment's file stays on disk (its descriptor kept open: krafty
        # unlinks at once, so the space comes back after this delay, as with Kafka's .deleted files)
        Key("log.segment.delete.delay.ms", _int, 60_000, min=0, topic_key="file.delete.delay.ms"),
        Key("log.retention.ms", _int, None, min=-1, topic_key="retention.ms"),
        Key("log.retention.minutes", _int, None, min=-1),
        Key("log.retention.hours", _int, 168, min=-1),
        Key("log.retention.bytes", _int, -1, min=-1, topic_key="retention.bytes"),
        Key("log.retention.check.interval.ms", _int, 300_000, min=1),
        Key("log.index.interval.bytes", _int, 4096, min=0, max=_INT32_MAX, topic_key="index.interval.bytes"),
        Key("log.index.size.max.bytes", _int, 10 * 1024 * 1024, min=4, max=_INT32_MAX,
            topic_key="segment.index.bytes"),
        Key("log.flush.interval.messages", _int, 2**63 - 1, min=1, topic_key="flush.messages"),
        Key("log.flush.interval.ms", _int, None, min=0, topic_key="flush.ms"),
        Key("log.flush.scheduler.interval.ms", _int, 2**63 - 1, min=0),
        Key("log.cleanup.policy", _cleanup_policy, "delete", topic_key="cleanup.policy"),
        Key("log.cleaner.delete.retention.ms", _int, 86_400_000, min=0, topic_key="delete.retention.ms"),
        Key("log.cleaner.backoff.ms", _int, 15_000, min=1),  # pause between log cleaner runs
        # a compacted log is cleaned once its dirty part (bytes past the cleaner's offset) is at
        # least this share of the cleanable log
        Key("log.cleaner.min.cleanable.ratio", _ratio, 0.5, topic_key="min.cleanable.dirty.ratio"),
        # records younger than this stay uncompacted; a log whose oldest uncompacted record is
        # older than the max is compacted whatever its dirty ratio (and its segments roll by then)
        Key("log.cleaner.min.compaction.lag.ms", _int, 0, min=0, topic_key="min.compaction.lag.ms"),
        Key("log.cleaner.max.compaction.lag.ms", _int, 2**63 - 1, min=1, topic_key="max.compaction.lag.ms"),
        Key("log.message.timestamp.type", _choice("createtime", "logappendtime"), "createtime",
            topic_key="message.timestamp.type"),
        # KIP-937 (Kafka 4.0 defaults; message.timestamp.difference.max.ms is gone in 4.0): a CreateTime
        # record stamped further from the broker's clock is rejected with INVALID_TIMESTAMP
        Key("log.message.timestamp.before.max.ms", _int, 2**63 - 1, min=0, topic_key="message.timestamp.before.max.ms"),
        Key("log.message.timestamp.after.max.ms", _int, 3_600_000, min=0, topic_key="message.timestamp.after.max.ms"),
        Key("message.max.bytes", _int, 1024 * 1024 + 12, min=0, max=_INT32_MAX, topic_key="max.message.bytes"),
        # Fetch v0-3 read magic 0/1 messages converted from the log's v2 batches (false: UNSUPPORTED_VERSION)
        Key("log.message.downconversion.enable", _bool, True, topic_key="message.downconversion.enable"),
        # accepted and ignored, as Kafka 3.x does once inter.broker.protocol.version >= 3.0: logs
        # hold v2 batches whatever it says (older clients get theirs converted; Kafka 4 removed it)
        Key("log.message.format.version", _message_format_version, "3.0-IV1", topic_key="message.format.version"),
        Key("compression.type", _choice("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"), "producer",
            topic_key="compression.type"),
        Key("min.insync.replicas", _int, 1, min=1, max=_INT32_MAX, topic_key="min.insync.replicas"),
        Key("unclean.leader.election.enable", _bool, False, topic_key="unclean.leader.election.enable"),
        # topics
        Key("num.partitions", _int, 1, min=1),
        Key("default.replication.factor", _int, 1, min=1),
        Key("auto.create.topics.enable", _bool, True),
        Key("delete.topic.enable", _bool, True),
        # replication
        Key("replica.lag.time.max.ms", _int, 30_000, min=1),
        Key("replica.fetch.max.bytes", _int, 1024 * 1024, min=0),
        Key("replica.fetch.wait.max.ms", _int, 500, min=0),
        Key("replica.fetch.min.bytes", _int, 1, min=1),
        Key("replica.fetch.response.max.bytes", _int, 10 * 1024 * 1024, min=0),
        Key("fetch.max.bytes", _int, 55 * 1024 * 1024, min=1024),  # the most one Fetch response carries
        Key("max.incremental.fetch.session.cache.slots", _int, 1000, min=0),
        Key("max.request.partition.size.limit", _int, 2000, min=1),  # DescribeTopicPartitions (KIP-966)
        Key("replica.selector.class", _str, None),
        Key("num.replica.fetchers", _int, 1, min=1),
        # threads of the broker's background work (retention, flushes, compaction, writeback checks)
        Key("background.threads", _int, 10, min=1),
        # groups and offsets
        Key("offsets.topic.num.partitions", _int, 50, min=1),
        Key("offsets.topic.replication.factor", _int, 3, min=1),
        Key("offsets.topic.segment.bytes", _int, 100 * 1024 * 1024, min=1),
        Key("offsets.retention.minutes", _int, 10080, min=1),
        Key("offsets.retention.check.interval.ms", _int, 600_000, min=1),
        Key("offsets.commit.timeout.ms", _int, 5000, min=1),
        Key("offsets.load.buffer.size", _int, 5 * 1024 * 1024, min=1),
        Key("offset.metadata.max.bytes", _int, 4096, min=0),
        Key("group.initial.rebalance.delay.ms", _int, 3000, min=0),
        Key("group.min.session.timeout.ms", _int, 6000, min=0),
        Key("group.max.session.timeout.ms", _int, 1_800_000, min=0),
        Key("group.max.size", _int, 2**31 - 1, min=1),
        # consumer groups (KIP-848): the defaults and bounds of a group's GROUP configs
        Key("group.consumer.session.timeout.ms", _int, 45_000, min=1),
        Key("group.consumer.min.session.timeout.ms", _int, 45_000, min=1),
        Key("group.consumer.max.session.timeout.ms", _int, 60_000, min=1),
        Key("group.consumer.heartbeat.interval.ms", _int, 5000, min=1),
        Key("group.consumer.min.heartbeat.interval.ms", _int, 5000, min=1),
        Key("group.consumer.max.heartbeat.interval.ms", _int, 15_000, min=1),
        Key("group.consumer.max.size", _int, 2**31 - 1, min=1),
        Key("group.consumer.assignors", _assignors, ["uniform", "range"]),
        # KIP-848's online upgrade (a classic group becomes a consumer group with its first
        # consumer-protocol member) and downgrade (back, when the last one leaves)
        Key("group.consumer.migration.policy", _choice("disabled", "upgrade", "downgrade", "bidirectional"),
            "bidirectional"),
        Key("group.coordinator.rebalance.protocols", _rebalance_protocols, ["classic", "consumer"]),
        # share groups (KIP-932, broker/share): the defaults and bounds of a group's share.* GROUP configs
        Key("group.share.session.timeout.ms", _int, 45_000, min=1),
        Key("group.share.min.session.timeout.ms", _int, 45_000, min=1),
        Key("group.share.max.session.timeout.ms", _int, 60_000, min=1),
        Key("group.share.heartbeat.interval.ms", _int, 5000, min=1),
        Key("group.share.min.heartbeat.interval.ms", _int, 5000, min=1),
        Key("group.share.max.heartbeat.interval.ms", _int, 15_000, min=1),
        Key("group.share.record.lock.duration.ms", _int, 30_000, min=1000, max=3_600_000),
        Key("group.share.min.record.lock.duration.ms", _int, 15_000, min=1000, max=30_000),
        Key("group.share.max.record.lock.duration.ms", _int, 60_000, min=30_000, max=3_600_000),
        Key("group.share.delivery.count.limit", _int, 5, min=2, max=10),
        Key("group.share.min.delivery.count.limit", _int, 2, min=2, max=10),
        Key("group.share.max.delivery.count.limit", _int, 10, min=2, max=10),
        Key("group.share.partition.max.record.locks", _int, 2000, min=100, max=10_000),
        Key("group.share.max.size", _int, 200, min=1, max=1000),
        Key("group.share.max.share.sessions", _int, 2000, min=1),
        Key("share.coordinator.state.topic.num.partitions", _int, 50, min=1),
        Key("share.coordinator.state.topic.replication.factor", _int, 3, min=1),
        Key("share.coordinator.state.topic.min.isr", _int, 2, min=1),
        Key("share.coordinator.state.topic.segment.bytes", _int, 100 * 1024 * 1024, min=1),
        Key("share.coordinator.load.buffer.size", _int, 5 * 1024 * 1024, min=1),
        Key("share.coordinator.snapshot.update.records.per.snapshot", _int, 500, min=0, max=500),
        Key("share.coordinator.write.timeout.ms", _int, 5000, min=1),
        Key("share.coordinator.state.topic.prune.interval.ms", _int, 300_000, min=1),
        # transactions (broker/txn)
        Key("transaction.state.log.num.partitions", _int, 50, min=1),
        Key("transaction.state.log.replication.factor", _int, 3, min=1),
        Key("transaction.state.log.min.isr", _int, 2, min=1),
        Key("transaction.state.log.segment.bytes", _int, 100 * 1024 * 1024, min=1),
        Key("transaction.state.log.load.buffer.size", _int, 5 * 1024 * 1024, min=1),
        Key("transaction.max.timeout.ms", _int, 900_000, min=1),
        Key("transactional.id.expiration.ms", _int, 604_800_000, min=1),
        Key("transaction.abort.timed.out.transaction.cleanup.interval.ms", _int, 10_000, min=1),
        Key("transaction.remove.expired.transaction.cleanup.interval.ms", _int, 3_600_000, min=1),
        Key("transaction.partition.verification.enable", _bool, True),
        # network
        Key("socket.request.max.bytes", _int, 100 * 1024 * 1024, min=1),
        # bytes of all requests being read or handled (broker/memory_pool.py); <= 0: unbounded
        Key("queued.max.request.bytes", _int, 256 * 1024 * 1024),
        Key("socket.send.buffer.bytes", _int, 102_400),
        Key("socket.receive.buffer.bytes", _int, 102_400),
        Key("num.network.threads", _int, 3, min=1),
        Key("num.io.threads", _int, 8, min=1),
        Key("connections.max.idle.ms", _int, 600_000, min=-1),
        Key("max.connections", _int, 2**31 - 1, min=0),
        Key("max.connections.per.ip", _int, 2**31 - 1, min=0),
        Key("request.timeout.ms", _int, 30_000, min=0),
        Key("producer.id.expiration.ms", _int, 86_400_000, min=1),
        # security (issue 9)
        Key("sasl.enabled.mechanisms", _list, ["GSSAPI"]),
        # TLS and SASL (broker/security/ssl.py, sasl.py); any of these may also be set per listener
        # as listener.name.<listener>.<key>, and SASL JAAS configs as listener.name.<l>.<mechanism>.sasl.jaas.config
        Key("sasl.mechanism.inter.broker.protocol", _str, "GSSAPI"),
        Key("sasl.jaas.config", _str, None, "JAAS config (PlainLoginModule user_<name>=\"pw\" entries, username/password)"),
        Key("sasl.server.max.receive.size", _int, 524_288, min=1),
        # Kafka's Kerberos login settings: accepted (statically, and per broker at run time, as Kafka
        # does) but unused: krafty has no GSSAPI
        Key("sasl.kerberos.service.name", _str, None),
        Key("sasl.kerberos.min.time.before.relogin", _int, 60_000, min=0),
        Key("connections.max.reauth.ms", _int, 0, min=0),
        Key("connection.failed.authentication.delay.ms", _int, 100, min=0),
        Key("ssl.keystore.type", _str, "PKCS12"),
        Key("ssl.keystore.location", _str, None),
        Key("ssl.keystore.password", _str, None),
        Key("ssl.key.password", _str, None),
        Key("ssl.keystore.key", _str, None),
        Key("ssl.keystore.certificate.chain", _str, None),
        Key("ssl.truststore.type", _str, "PEM"),
        Key("ssl.truststore.location", _str, None),
        Key("ssl.truststore.password", _str, None),
        Key("ssl.truststore.certificates", _str, None),
        Key("ssl.client.auth", _choice("none", "requested", "required"), "none"),
        Key("ssl.enabled.protocols", _list, ["TLSv1.2", "TLSv1.3"]),
        Key("ssl.cipher.suites", _list, []),
        Key("ssl.endpoint.identification.algorithm", _str, "https"),
        Key("super.users", _str, ""),
        Key("allow.everyone.if.no.acl.found", _bool, False),
        Key("authorizer.class.name", _str, ""),
        Key("max.connections.per.ip.overrides", _str, ""),
        Key("quota.window.num", _int, 11, min=1),
        Key("quota.window.size.seconds", _int, 1, min=1),
        # replication throttles (bytes/s; Kafka's dynamic broker configs, read here as static ones), applied
        # to the replicas the topics' leader/follower.replication.throttled.replicas list
        Key("leader.replication.throttled.rate", _int, 2**63 - 1, min=0),
        Key("follower.replication.throttled.rate", _int, 2**63 - 1, min=0),
        # AlterReplicaLogDirs: the copy of a future replica between this broker's log dirs (bytes/s)
        Key("replica.alter.log.dirs.io.max.bytes.per.second", _int, 2**63 - 1, min=1),
        Key("replication.quota.window.num", _int, 11, min=1),
        Key("replication.quota.window.size.seconds", _int, 1, min=1),
        # krafty's own
        Key("krafty.log.writeback.bytes", _int, 1024 * 1024, "start the kernel's writeback of an active segment "
            "every this many appended bytes (checked every 100 ms, off the event loop; 0: leave it to the kernel)",
            min=0),
        Key("krafty.log.open.files.max", _int, 0, "segment log files the process keeps open at most: the least "
            "recently used beyond it are closed and opened again when next read or written, so that an idle "
            "partition holds no descriptor (0: half the process's open-files limit, RLIMIT_NOFILE)", min=0),
        Key("krafty.log.writer.threads", _int, 0, "threads that do the write syscalls of appends, so a write the "
            "kernel makes wait stalls only its partition (0: write on the event loop, the faster choice while the "
            "broker's CPU is busy)", min=0, max=64),
        Key("krafty.loop.stall.warn.ms", _int, 0, "log a warning with the loop thread's stack when the event "
            "loop runs no callback for this long (0: off)", min=0),
        Key("krafty.metrics.port", _int, -1, "HTTP port serving Prometheus /metrics, /health and /ready "
            "(-1: off; 0: any free port)", min=-1, max=65535),
        Key("krafty.metrics.host", _str, "0.0.0.0", "address the metrics endpoint binds to"),
        Key("krafty.metrics.consumer.lag.interval.ms", _int, 10_000, "how often the group coordinator samples "
            "the high watermarks of the partitions its groups committed offsets for (consumer lag)", min=100),
        Key("krafty.log.format", _choice("text", "json"), "text", "log lines as text, or one JSON object per line"),
    ]
}


# Kafka's PASSWORD-type keys (SslConfigs, SaslConfigs): DescribeConfigs answers them with a null
# value marked sensitive, and krafty never logs their values. A listener-prefixed variant
# (listener.name.<l>.[<mechanism>.]<key>) is as secret as the key itself, and any other key named
# like a password or a secret is taken for one (Kafka treats every key of unknown type so).
PASSWORD_KEYS = frozenset({"sasl.jaas.config", "ssl.key.password", "ssl.keystore.password", "ssl.keystore.key",
                           "ssl.keystore.certificate.chain", "ssl.truststore.password", "ssl.truststore.certificates"})
_SENSITIVE_NAME = re.compile(r"(?:^|\.)(?:" + "|".join(re.escape(k) for k in PASSWORD_KEYS) +
                             r")$|(?:password|secret|secret\.key|jaas\.config)$")


def is_sensitive(name: str) -> bool:
    """Whether a config key's value is a secret (never shown or logged)."""
    return _SENSITIVE_NAME.search(name.lower()) is not None


def shown_value(name: str, raw: str | None) -> str:
    """``raw`` as it may appear in a log line or an error message (secrets hidden, long values cut)."""
    if is_sensitive(name):
        return "[hidden]"
    return repr(raw) if raw is None or len(raw) <= 100 else repr(raw[:100]) + "..."


def parse_properties(text: str) -> list[tuple[str, str, int]]:
    """Parse Java ``.properties`` text into ``(key, value, line_number)`` triples.

    Supports ``#``/``!`` comments, ``=``, ``:`` or whitespace separators, and
    backslash line continuations, as java.util.Properties does.
    """
    out: list[tuple[str, str, int]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start = i
        line = lines[i].lstrip()
        i += 1
        if not line or line[0] in "#!":
            continue
        while line.endswith("\\") and not line.endswith("\\\\") and i < len(lines):
            line = line[:-1] + lines[i].lstrip()
            i += 1
        m = re.match(r"((?:[^=:\s\\]|\\.)+)\s*[=:\s]?\s*(.*)$", line)
        if not m:
            continue
        key = re.sub(r"\\(.)", r"\1", m.group(1))
        value = m.group(2).rstrip()
        out.append((key, value, start + 1))
    return out


class Config(Mapping[str, Any]):
    """Typed view of a node's configuration. ``cfg["log.segment.bytes"]`` gives the parsed
    value (explicit or default); ``cfg.explicit`` the keys that were set."""

    def __init__(self, values: Mapping[str, str] | None = None, *, warn_unknown: bool = True):
        self._raw: dict[str, str] = dict(values or {})
        # dynamic broker configs from the metadata log (set_dynamic): the cluster-wide default
        # (resource "") and this broker's own (resource "<node.id>"), over the static ones
        self.dynamic_default: dict[str, str] = {}
        self.dynamic_broker: dict[str, str] = {}
        self._values: dict[str, Any] = {}
        self.unknown: list[str] = []
        self._listener_values: dict[tuple[str, str], Any] = {}
        for name, raw in self._raw.items():
            key = KEYS.get(name)
            if key is None and name.startswith("listener.name.") and self._listener_key(name, raw):
                continue
            if key is None:
                self.unknown.append(name)
                if warn_unknown:
                    # (its value is not logged: a misspelt password key would show the password)
                    log.warning("unknown configuration key '%s' is ignored", name)
                continue
            self._values[name] = key.convert(raw)
        self._derive()

    def _listener_key(self, name: str, raw: str) -> bool:
        """``listener.name.<listener>.<key>``: a per-listener value of a security key, or a
        per-listener, per-mechanism JAAS config (``listener.name.<l>.<mechanism>.sasl.jaas.config``)."""
        listener, _, rest = name[len("listener.name."):].partition(".")
        if not listener:
            return False
        m = re.fullmatch(r"([a-z0-9-]+)\.sasl\.jaas\.config", rest)
        if m:
            self._listener_values[(listener.upper(), f"{m.group(1).upper()}.sasl.jaas.config")] = raw.strip()
            return True
        key = KEYS.get(rest)
        if key is None or not (rest.startswith(("ssl.", "sasl.")) or rest == "connections.max.reauth.ms"):
            return False
        self._listener_values[(listener.upper(), rest)] = dataclasses.replace(key, name=name).convert(raw)
        return True

    def listener_value(self, listener: str, name: str) -> Any:
        """A key as seen by one listener: ``listener.name.<listener>.<name>`` if set, else ``name``.
        For ``<MECHANISM>.sasl.jaas.config`` the fallback is ``sasl.jaas.config``."""
        v = self._listener_values.get((listener.upper(), name))
        if v is not None:
            return v
        if name.endswith(".sasl.jaas.config"):
            return self["sasl.jaas.config"]
        return self[name]

    # --- derived values that Kafka computes from several keys -------------------------
    def _derive(self) -> None:
        v = self._values
        if "log.dirs" not in v:
            v["log.dirs"] = [self.get_default("log.dir")] if "log.dir" not in v else [v["log.dir"]]
        if "log.retention.ms" not in v:
            if "log.retention.minutes" in v:
                v["log.retention.ms"] = v["log.retention.minutes"] * 60_000
            else:
                v["log.retention.ms"] = self.get_default("log.retention.hours") * _H
        if "log.roll.ms" not in v:
            v["log.roll.ms"] = self.get_default("log.roll.hours") * _H
        if "log.roll.jitter.ms" not in v:
            v["log.roll.jitter.ms"] = self.get_default("log.roll.jitter.hours") * _H
        if "metadata.log.dir" not in v:
            v["metadata.log.dir"] = v["log.dirs"][0]
        if "advertised.listeners" not in v:
            ctrl = set(self["controller.listener.names"])
            v["advertised.listeners"] = [lst for lst in self["listeners"] if lst.name not in ctrl]
        roles = self["process.roles"]
        if self._values.get("node.id") is None:
            raise ConfigError("missing required configuration key 'node.id'")
        if "controller" in roles and not any(lst.name in self["controller.listener.names"] for lst in self["listeners"]):
            raise ConfigError(
                "configuration key 'listeners' has no listener named in 'controller.listener.names' "
                f"({','.join(self['controller.listener.names'])}) but process.roles includes controller")
        me = [v for v in self["controller.quorum.voters"] if v[0] == self._values["node.id"]]
        if me and "controller" in roles:
            ctrl = [lst for lst in self["listeners"] if lst.name in self["controller.listener.names"]]
            if ctrl and all(lst.port != me[0][2] for lst in ctrl):
                raise ConfigError(
                    f"configuration key 'controller.quorum.voters' gives node {me[0][0]} port {me[0][2]}, but its "
                    f"controller listener in 'listeners' is on port {ctrl[0].port}")
        if me and "controller" not in roles:
            raise ConfigError(f"node {me[0][0]} is listed in 'controller.quorum.voters' but 'process.roles' "
                              "does not include controller")
        if "broker" in roles and not any(lst.name not in self["controller.listener.names"] for lst in self["listeners"]):
            raise ConfigError("configuration key 'listeners' has no broker listener but process.roles includes broker")
        if "broker" in roles:
            self._check_broker_listeners()
        for what in ("session.timeout", "heartbeat.interval"):  # Kafka's GroupCoordinatorConfig requirements
            lo, default, hi = (self[f"group.consumer.{m}{what}.ms"] for m in ("min.", "", "max."))
            if not lo <= default <= hi:
                raise ConfigError(f"'group.consumer.{what}.ms' ({default}) must be between "
                                  f"'group.consumer.min.{what}.ms' ({lo}) and 'group.consumer.max.{what}.ms' ({hi})")

    def _check_broker_listeners(self) -> None:
        """Kafka's startup checks on named listeners: every advertised listener is a bound one,
        routable, and not a controller listener; the inter-broker listener is advertised; every
        listener has a security protocol."""
        names = {lst.name for lst in self["listeners"]}
        ctrl = set(self["controller.listener.names"])
        proto = self["listener.security.protocol.map"]
        for lst in self["listeners"]:
            if lst.name not in proto:
                raise ConfigError(f"listener {lst.name} in 'listeners' has no security protocol: add "
                                  f"{lst.name}:PLAINTEXT (or SSL, SASL_...) to 'listener.security.protocol.map'")
        advertised = self["advertised.listeners"]
        for lst in advertised:
            if lst.name not in names:
                raise ConfigError(f"configuration key 'advertised.listeners' names listener {lst.name}, "
                                  f"which is not in 'listeners' ({','.join(sorted(names))})")
            if lst.name in ctrl:
                raise ConfigError(f"configuration key 'advertised.listeners' must not contain the controller "
                                  f"listener {lst.name} on a broker")
            if lst.host in ("0.0.0.0", "::"):
                raise ConfigError(f"configuration key 'advertised.listeners' gives {lst.name} the non-routable "
                                  f"address {lst.host}: clients cannot connect there; set 'advertised.listeners' "
                                  "to a host name or address clients can reach")
        ibl = self["inter.broker.listener.name"]
        if ibl not in {lst.name for lst in advertised}:
            raise ConfigError(f"configuration key 'inter.broker.listener.name' is {ibl}, which is not an "
                              f"advertised listener ({','.join(lst.name for lst in advertised)})")

    def get_default(self, name: str) -> Any:
        return self._values[name] if name in self._values else KEYS[name].default

    def __getitem__(self, name: str) -> Any:
        if name in self._values:
            return self._values[name]
        if name in KEYS:
            return KEYS[name].default
        raise KeyError(name)

    def __iter__(self):
        return iter(KEYS)

    def __len__(self) -> int:
        return len(KEYS)

    @property
    def explicit(self) -> dict[str, str]:
        """The static keys (server.properties and overrides)."""
        return dict(self._raw)

    def set_dynamic(self, default: Mapping[str, str], broker: Mapping[str, str]) -> set[str]:
        """Layers the dynamic broker configs over the static ones, in Kafka's order of precedence
        (this broker's, then the cluster default, then server.properties, then the defaults), and
        recomputes the derived values (log.retention.ms from log.retention.hours...). A dynamic
        value that does not parse (checked before it was stored, so only from an older version)
        is skipped with a warning. Returns the keys whose value changed, and every dynamic key
        set again (re-setting a keystore location reloads it, as in Kafka)."""
        layers = []
        for layer in (default, broker):
            good = {}
            for k, v in layer.items():
                try:
                    Config._convert_one(k, v)
                    good[k] = v
                except ConfigError as e:
                    log.warning("dynamic broker config skipped: %s", e)
            layers.append(good)
        try:
            new = Config({**self._raw, **layers[0], **layers[1]}, warn_unknown=False)
        except ConfigError as e:
            log.error("dynamic broker configs not applied: %s", e)
            return set()
        changed = {k for k in KEYS if self[k] != new[k]}
        changed |= {f"listener.name.{lst.lower()}.{k}" for (lst, k) in
                    set(self._listener_values) ^ set(new._listener_values)}
        changed |= {f"listener.name.{lst.lower()}.{k}" for (lst, k), v in new._listener_values.items()
                    if self._listener_values.get((lst, k), v) != v}
        changed |= set(layers[0]) | set(layers[1])
        changed |= set(self.dynamic_default) ^ set(layers[0]) | set(self.dynamic_broker) ^ set(layers[1])
        self._values, self._listener_values = new._values, new._listener_values
        self.dynamic_default, self.dynamic_broker = layers
        return changed

    @staticmethod
    def _convert_one(name: str, raw: str) -> Any:
        """One key's value parsed as the node would (listener-prefixed keys too); ConfigError if not."""
        key = KEYS.get(name)
        if key is not None:
            return key.convert(raw)
        probe = Config.__new__(Config)
        probe._listener_values = {}
        if name.startswith("listener.name.") and probe._listener_key(name, raw):
            return next(iter(probe._listener_values.values()))
        raise ConfigError(f"unknown configuration key '{name}'")

    def listener(self, name: str) -> Listener | None:
        for lst in self["listeners"]:
            if lst.name == name:
                return lst
        return None

    @classmethod
    def from_file(cls, path: str, overrides: Iterable[str] = ()) -> Config:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
        values = {k: v for k, v, _ in parse_properties(text)}
        for ov in overrides:
            k, sep, v = ov.partition("=")
            if not sep or not k.strip():
                raise ConfigError(f"override {ov!r} is not of the form key=value")
            values[k.strip()] = v.strip()
        return cls(values)


# Per-topic configuration keys (Kafka names), with the broker key each defaults from.
TOPIC_KEYS: dict[str, Key] = {
    k.topic_key: dataclasses.replace(k, name=k.topic_key) for k in KEYS.values() if k.topic_key
}
TOPIC_KEYS["retention.ms"] = dataclasses.replace(TOPIC_KEYS["retention.ms"], default=7 * 24 * _H)
TOPIC_KEYS["segment.ms"] = dataclasses.replace(TOPIC_KEYS["segment.ms"], default=7 * 24 * _H)
TOPIC_KEYS["flush.ms"] = dataclasses.replace(TOPIC_KEYS["flush.ms"], default=2**63 - 1)
TOPIC_KEYS["segment.jitter.ms"] = dataclasses.replace(TOPIC_KEYS["segment.jitter.ms"], default=0)
TOPIC_KEYS["message.timestamp.type"] = dataclasses.replace(
    TOPIC_KEYS["message.timestamp.type"], parse=lambda v: {"createtime": "CreateTime", "logappendtime": "LogAppendTime"}[
        _choice("createtime", "logappendtime")(v)])


def _throttled_replicas(v: str) -> str:
    """Kafka's ThrottledReplicaListValidator: ``*`` or ``partition:broker,...`` (or empty)."""
    v = v.strip()
    if v == "*" or not v:
        return v
    items = [x.strip() for x in v.split(",")]
    if not all(re.fullmatch(r"[0-9]+:[0-9]+", x) for x in items):
        raise ValueError("must be the literal '*' or a list of replicas in the following format: "
                         "[partitionId]:[brokerId],[partitionId]:[brokerId],...")
    return ",".join(items)


# topic keys with no broker default (Kafka's replication throttles: the replicas throttled on the
# leader's sends and on the followers' fetches during a reassignment)
for _k in ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas"):
    TOPIC_KEYS[_k] = Key(_k, _throttled_replicas, "")


# Tiered storage (KIP-405): topic keys with no broker default. krafty has no remote storage, so as a
# Kafka broker with remote.log.storage.system.enable=false it takes them but refuses
# remote.storage.enable=true; the local retention keys only matter with remote storage.
TOPIC_KEYS["remote.storage.enable"] = Key("remote.storage.enable", _bool, False)
TOPIC_KEYS["remote.log.copy.disable"] = Key("remote.log.copy.disable", _bool, False)
TOPIC_KEYS["remote.log.delete.on.disable"] = Key("remote.log.delete.on.disable", _bool, False)
TOPIC_KEYS["local.retention.ms"] = Key("local.retention.ms", _int, -2, min=-2)
TOPIC_KEYS["local.retention.bytes"] = Key("local.retention.bytes", _int, -2, min=-2)


def topic_defaults(cfg: Config) -> dict[str, Any]:
    """The effective default of each topic config on this broker (from the broker keys)."""
    out = {}
    for bkey in KEYS.values():
        if bkey.topic_key:
            val = cfg[bkey.name]
            if bkey.topic_key == "message.timestamp.type":
                val = {"createtime": "CreateTime", "logappendtime": "LogAppendTime"}[val]
            if val is None:
                val = TOPIC_KEYS[bkey.topic_key].default
            out[bkey.topic_key] = val
    for name, key in TOPIC_KEYS.items():
        out.setdefault(name, key.default)
    return out


def validate_topic_config(name: str, raw: str | None) -> Any:
    """Parse one topic config; raises ConfigError naming the key."""
    key = TOPIC_KEYS.get(name)
    if key is None:
        raise ConfigError(f"unknown topic configuration key '{name}'")
    if raw is None:
        raise ConfigError(f"null value for topic configuration key '{name}'")
    return key.convert(raw)


def validate_topic_configs(configs: Mapping[str, str | None], defaults: Mapping[str, Any] | None = None) -> None:
    """The checks of a topic's whole config (Kafka's LogConfig.validate, after each key's own):
    raises ConfigError. ``configs``: the topic's keys as they will be (None: unset);
    ``defaults``: the typed values of the keys it does not set (``topic_defaults`` of the
    checking node's config; Kafka's own defaults for keys it lacks)."""
    def value(name: str) -> Any:
        raw = configs.get(name)
        if raw is None:
            return (defaults or {}).get(name, TOPIC_KEYS[name].default)
        return TOPIC_KEYS[name].convert(raw)
    lo, hi = value("min.compaction.lag.ms"), value("max.compaction.lag.ms")
    if lo > hi:
        raise ConfigError(f"conflict topic config setting min.compaction.lag.ms ({lo}) > max.compaction.lag.ms ({hi})")
    if value("remote.storage.enable"):
        raise ConfigError("invalid value true for configuration key 'remote.storage.enable': Tiered Storage "
                          "functionality is disabled in the broker. Topic cannot be configured with remote log storage.")
