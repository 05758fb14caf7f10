"""MirrorMaker 2's configuration file (``connect-mirror-maker.properties``), read the way MM2's
MirrorMakerConfig reads it::

    clusters = A, B
    A.bootstrap.servers = a1:9092
    B.bootstrap.servers = b1:9092
    A->B.enabled = true
    A->B.topics = orders.*, payments
    replication.factor = 3

- ``clusters``: the aliases; ``<alias>.<client property>`` configures the clients of one cluster
  (``<alias>.consumer.*``, ``<alias>.producer.*``, ``<alias>.admin.*`` one kind of client);
  security keys at the top level apply to every cluster.
- A flow ``A->B`` runs when ``A->B.enabled = true``; every connector key (``topics``, ``groups``,
  ``sync.group.offsets.enabled``, ``emit.checkpoints.interval.seconds``, ...) may be given at
  the top level or for one flow (``A->B.<key>``), which wins.
- Heartbeats are emitted for every pair of clusters unless ``emit.heartbeats.enabled = false``
  (globally or ``A->B.emit.heartbeats.enabled``), as MM2 does (so B -> A emits into A even when
  only A -> B replicates: A's heartbeats then reach B as ``A.heartbeats``).

Every problem is a ``MirrorConfigError`` whose text names the key (and line) in one line.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass, field

from mirror.policy import (
    CONFIG_PROPERTIES_EXCLUDE_DEFAULT,
    DEFAULT_POLICY,
    GROUPS_EXCLUDE_DEFAULT,
    POLICIES,
    TOPICS_EXCLUDE_DEFAULT,
    NameFilter,
    ReplicationPolicy,
    compile_pattern_list,
)


class MirrorConfigError(Exception):
    """A bad configuration: one line naming the key."""


def _list(v: str) -> list[str]:
    return [] if v.strip() == "" else [x.strip() for x in v.split(",")]


# connector keys: name -> (type, default). Types: bool, int, list, regexlist, str, enum:<a|b>, policy
CONNECTOR_KEYS: dict[str, tuple[str, object]] = {
    "enabled": ("bool", False),
    "topics": ("regexlist", [".*"]),
    "topics.exclude": ("regexlist", TOPICS_EXCLUDE_DEFAULT),
    "groups": ("regexlist", [".*"]),
    "groups.exclude": ("regexlist", GROUPS_EXCLUDE_DEFAULT),
    "config.properties.exclude": ("regexlist", CONFIG_PROPERTIES_EXCLUDE_DEFAULT),
    "use.defaults.from": ("enum:target|source", "target"),
    "replication.policy.class": ("policy", DEFAULT_POLICY),
    "replication.policy.separator": ("str", "."),
    "replication.policy.internal.topic.separator.enabled": ("bool", True),
    "replication.factor": ("int", 2),
    "offset-syncs.topic.replication.factor": ("int", 3),
    "offset-syncs.topic.location": ("enum:source|target", "source"),
    "checkpoints.topic.replication.factor": ("int", 3),
    "heartbeats.topic.replication.factor": ("int", 3),
    "refresh.topics.enabled": ("bool", True),
    "refresh.topics.interval.seconds": ("int", 600),
    "refresh.groups.enabled": ("bool", True),
    "refresh.groups.interval.seconds": ("int", 600),
    "sync.topic.configs.enabled": ("bool", True),
    "sync.topic.configs.interval.seconds": ("int", 600),
    "sync.topic.acls.enabled": ("bool", True),
    "sync.topic.acls.interval.seconds": ("int", 600),
    "emit.checkpoints.enabled": ("bool", True),
    "emit.checkpoints.interval.seconds": ("int", 60),
    "sync.group.offsets.enabled": ("bool", False),
    "sync.group.offsets.interval.seconds": ("int", 60),
    "emit.heartbeats.enabled": ("bool", True),
    "emit.heartbeats.interval.seconds": ("int", 1),
    "heartbeats.replication.enabled": ("bool", True),
    "emit.offset-syncs.enabled": ("bool", True),
    "offset.lag.max": ("int", 100),
    "consumer.poll.timeout.ms": ("int", 1000),
    "admin.timeout.ms": ("int", 60000),
    # Kafka Connect worker keys MM2 takes at the top level or per flow
    "exactly.once.source.support": ("enum:disabled|preparing|enabled", "disabled"),
    "exactly.once.support": ("enum:requested|required", "requested"),
    "transaction.boundary": ("enum:poll|interval", "poll"),
    "transaction.boundary.interval.ms": ("int", None),
    "offset.flush.interval.ms": ("int", 10000),
    "offset.flush.timeout.ms": ("int", 5000),
    "group.id": ("str", None),
}
# keys of MM2 / Connect that have no meaning here: accepted with a warning saying why
NOT_USED = {
    "tasks.max": "partitions are shared by the instances' consumer group, not by tasks",
    "dedicated.mode.enable.internal.rest": "instances coordinate through their consumer group, not a REST API",
    "key.converter": "records are copied as bytes", "value.converter": "records are copied as bytes",
    "header.converter": "records are copied as bytes",
    "config.storage.topic": "there is no configs topic: the config file is the configuration",
    "config.storage.replication.factor": "there is no configs topic: the config file is the configuration",
    "status.storage.topic": "there is no status topic", "status.storage.replication.factor": "there is no status topic",
    "offset.storage.topic": "source offsets are the committed offsets of the flow's group on the target",
    "offset.storage.replication.factor": "source offsets are kept in the target's __consumer_offsets",
    "offset.storage.partitions": "source offsets are kept in the target's __consumer_offsets",
    "sync.topic.acls.enabled.deprecated": "",
}
# top-level client keys MM2 passes to every cluster's clients (security)
_CLIENT_TOP = re.compile(r"(security\.protocol|ssl\..+|sasl\..+|client\.dns\.lookup)")
# Java client properties librdkafka has no use for (dropped quietly: they describe the JVM client)
_JAVA_ONLY = {"key.serializer", "value.serializer", "key.deserializer", "value.deserializer", "max.poll.records",
              "ssl.truststore.type", "ssl.keystore.type", "buffer.memory", "interceptor.classes",
              "sasl.login.callback.handler.class", "sasl.client.callback.handler.class"}
CLIENT_KINDS = ("consumer", "producer", "admin")


def unescape_value(v: str) -> str:
    """java.util.Properties' escapes in a value (``\\\\`` -> ``\\``, ``\\t``, ``\\uXXXX``, ``\\x`` -> x):
    a regex written ``.*\\\\.internal`` in the file is ``.*\\.internal``."""
    def sub(m: re.Match) -> str:
        c = m.group(1)
        if c.startswith("u"):
            return chr(int(c[1:], 16))
        return {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(c, c)
    return re.sub(r"\\(u[0-9a-fA-F]{4}|.)", sub, v)


@dataclass
class ClusterClients:
    """One cluster's librdkafka configurations, with the user's key for each (for error lines)."""

    alias: str
    common: dict[str, str] = field(default_factory=dict)
    kinds: dict[str, dict[str, str]] = field(default_factory=lambda: {k: {} for k in CLIENT_KINDS})
    origin: dict[str, str] = field(default_factory=dict)  # "kind:librdkafka key" -> the file's key

    def conf(self, kind: str, **extra: str) -> dict[str, str]:
        out = dict(self.common)
        out.update(self.kinds[kind])
        out.update(extra)
        return out

    def key_of(self, kind: str, prop: str) -> str:
        return self.origin.get(f"{kind}:{prop}") or self.origin.get(f"*:{prop}") or prop


@dataclass
class FlowConfig:
    source: str
    target: str
    values: dict[str, object]
    policy: ReplicationPolicy
    topic_filter: NameFilter
    group_filter: NameFilter
    config_exclude: re.Pattern | None

    def __getitem__(self, key: str):
        return self.values[key]

    @property
    def name(self) -> str:
        return f"{self.source}->{self.target}"

    @property
    def exactly_once(self) -> bool:
        return self.values["exactly.once.source.support"] == "enabled"

    @property
    def group_id(self) -> str:
        return self.values["group.id"] or f"{self.source}-mm2"


@dataclass
class MirrorConfig:
    clusters: dict[str, ClusterClients]
    flows: list[FlowConfig]           # enabled replication flows
    heartbeat_pairs: list[tuple[str, str, int, int]]  # (source, target, interval s, topic RF)
    warnings: list[str]


def _parse_value(key: str, kind: str, raw: str):
    v = raw.strip()
    if kind == "bool":
        if v.lower() not in ("true", "false"):
            raise ValueError("expected true or false")
        return v.lower() == "true"
    if kind == "int":
        try:
            return int(v)
        except ValueError:
            raise ValueError("expected a whole number") from None
    if kind == "regexlist":
        items = _list(v)
        for item in items:
            try:
                re.compile(item)
            except re.error as e:
                raise ValueError(f"{item!r} is not a regular expression ({e})") from None
        return items
    if kind.startswith("enum:"):
        allowed = kind[5:].split("|")
        if v.lower() not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}")
        return v.lower()
    if kind == "policy":
        if v not in POLICIES:
            raise ValueError("expected org.apache.kafka.connect.mirror.DefaultReplicationPolicy or "
                             "org.apache.kafka.connect.mirror.IdentityReplicationPolicy")
        return v
    return v


def _client_props(key: str, raw: str, warnings: list[str]) -> dict[str, str]:
    """A Java client property as librdkafka's (sasl.jaas.config -> sasl.username/password,
    ssl.truststore.location -> ssl.ca.location); {} for JVM-only ones."""
    if key in _JAVA_ONLY:
        warnings.append(f"'{key}' is a Java client property librdkafka does not use: ignored")
        return {}
    if key == "sasl.jaas.config":
        from broker.security.sasl import parse_jaas
        from common.config import ConfigError

        try:
            opts = parse_jaas(raw, key)[1]
        except ConfigError as e:
            raise ValueError(str(e).split(": ", 1)[-1]) from None
        out = {}
        if "username" in opts:
            out["sasl.username"] = opts["username"]
        if "password" in opts:
            out["sasl.password"] = opts["password"]
        return out
    if key == "ssl.truststore.location":
        return {"ssl.ca.location": raw}
    if key == "ssl.endpoint.identification.algorithm" and raw == "":
        return {key: "none"}
    return {key: raw}


def load(path: str) -> MirrorConfig:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise MirrorConfigError(f"cannot read the mirror config {path}: {e.strerror}") from None
    return parse(text, source=path)


def parse(text: str, source: str = "<config>") -> MirrorConfig:
    from common.config import parse_properties

    raw: dict[str, tuple[str, int]] = {}
    for key, value, line in parse_properties(text):
        raw[key] = (unescape_value(value), line)

    def where(key: str) -> str:
        return f"{source}:{raw[key][1]}" if key in raw else source

    def bad(key: str, msg: str) -> MirrorConfigError:
        val = raw[key][0] if key in raw else ""
        shown = "(hidden)" if re.search(r"password|secret|jaas", key) else repr(val)
        return MirrorConfigError(f"mirror config {where(key)}: {key} = {shown}: {msg}")

    if "clusters" not in raw:
        raise MirrorConfigError(f"mirror config {source}: 'clusters' is missing (e.g. clusters = A, B)")
    aliases = _list(raw["clusters"][0])
    if not aliases:
        raise bad("clusters", "expected a comma-separated list of cluster aliases")
    for a in aliases:
        if not re.fullmatch(r"[A-Za-z0-9_\-]+", a):
            raise bad("clusters", f"alias {a!r} may hold only letters, digits, '_' and '-'")
    if len(set(aliases)) != len(aliases):
        raise bad("clusters", "an alias is listed twice")
    warnings: list[str] = []
    clusters = {a: ClusterClients(a) for a in aliases}
    top: dict[str, object] = {}
    per_flow: dict[tuple[str, str], dict[str, object]] = {}
    alias_rx = "|".join(re.escape(a) for a in sorted(aliases, key=len, reverse=True))
    flow_rx = re.compile(rf"({alias_rx})->({alias_rx})\.(.+)")
    cluster_rx = re.compile(rf"({alias_rx})\.(.+)")
    top_security: dict[str, tuple[str, str]] = {}

    for key, (value, _line) in raw.items():
        if key == "clusters":
            continue
        m = flow_rx.fullmatch(key)
        if m:
            s, t, rest = m.groups()
            if s == t:
                raise bad(key, "a flow needs two different clusters")
            if rest in NOT_USED:
                warnings.append(f"{where(key)}: {key} is not used by krafty mirror: {NOT_USED[rest]}")
                continue
            if rest not in CONNECTOR_KEYS:
                raise bad(key, f"unknown key '{rest}' for flow {s}->{t}")
            try:
                per_flow.setdefault((s, t), {})[rest] = _parse_value(key, CONNECTOR_KEYS[rest][0], value)
            except ValueError as e:
                raise bad(key, str(e)) from None
            continue
        if "->" in key.split(".", 1)[0]:
            raise bad(key, f"the flow names a cluster that is not in 'clusters' ({', '.join(aliases)})")
        m = cluster_rx.fullmatch(key)
        if m:
            alias, prop = m.groups()
            kind = prop.split(".", 1)[0]
            c = clusters[alias]
            if kind in CLIENT_KINDS and "." in prop:
                sub = prop.split(".", 1)[1]
                try:
                    props = _client_props(sub, value, warnings)
                except ValueError as e:
                    raise bad(key, str(e)) from None
                c.kinds[kind].update(props)
                for p in props:
                    c.origin[f"{kind}:{p}"] = key
            else:
                try:
                    props = _client_props(prop, value, warnings)
                except ValueError as e:
                    raise bad(key, str(e)) from None
                c.common.update(props)
                for p in props:
                    c.origin[f"*:{p}"] = key
            continue
        if key in CONNECTOR_KEYS:
            try:
                top[key] = _parse_value(key, CONNECTOR_KEYS[key][0], value)
            except ValueError as e:
                raise bad(key, str(e)) from None
            continue
        if key in NOT_USED:
            warnings.append(f"{where(key)}: {key} is not used by krafty mirror: {NOT_USED[key]}")
            continue
        if _CLIENT_TOP.fullmatch(key):
            top_security[key] = (value, key)
            continue
        raise bad(key, "unknown key (expected clusters, <alias>.<client property>, <source>-><target>.<key> "
                       "or a MirrorMaker 2 key such as topics, groups, replication.factor)")

    for c in clusters.values():  # top-level security keys, unless a cluster sets its own
        for key, (value, _) in top_security.items():
            try:
                props = _client_props(key, value, warnings)
            except ValueError as e:
                raise bad(key, str(e)) from None
            for p, v in props.items():
                if p not in c.common:
                    c.common[p] = v
                    c.origin.setdefault(f"*:{p}", key)

    def value_of(s: str, t: str, key: str):
        if key in per_flow.get((s, t), {}):
            return per_flow[(s, t)][key]
        if key in top:
            return top[key]
        return CONNECTOR_KEYS[key][1]

    def key_name(s: str, t: str, key: str) -> str:
        return f"{s}->{t}.{key}" if key in per_flow.get((s, t), {}) else key

    flows: list[FlowConfig] = []
    heartbeats: list[tuple[str, str, int, int]] = []
    used: set[str] = set()
    for s in aliases:
        for t in aliases:
            if s == t:
                continue
            values = {k: value_of(s, t, k) for k in CONNECTOR_KEYS}
            for k, (kind, _) in CONNECTOR_KEYS.items():
                v = values[k]
                if kind == "int" and k.endswith("replication.factor") and (v == 0 or v < -1):
                    raise bad(key_name(s, t, k), "expected a replication factor >= 1 (or -1: the broker default)")
                if kind == "int" and k.endswith((".ms",)) and v is not None and v <= 0:
                    raise bad(key_name(s, t, k), "expected a positive number of milliseconds")
            if values["emit.heartbeats.enabled"] and values["emit.heartbeats.interval.seconds"] > 0:
                heartbeats.append((s, t, values["emit.heartbeats.interval.seconds"],
                                   values["heartbeats.topic.replication.factor"]))
                used.update((s, t))
            if not values["enabled"]:
                continue
            if values["exactly.once.support"] == "required" and values["exactly.once.source.support"] != "enabled":
                raise bad(key_name(s, t, "exactly.once.support"),
                          "exactly-once is required but exactly.once.source.support is not 'enabled'")
            if values["exactly.once.source.support"] == "enabled":
                iso = clusters[s].conf("consumer").get("isolation.level")
                if iso is not None and iso != "read_committed":
                    raise MirrorConfigError(
                        f"mirror config {source}: {clusters[s].key_of('consumer', 'isolation.level')} = {iso!r}: "
                        "exactly-once mirroring needs the source consumer at read_committed; otherwise records of "
                        "aborted and open transactions would be copied")
            policy_cls = POLICIES[values["replication.policy.class"]]
            try:
                if policy_cls is ReplicationPolicy:
                    policy = policy_cls(values["replication.policy.separator"],
                                        values["replication.policy.internal.topic.separator.enabled"])
                else:
                    policy = policy_cls(values["replication.policy.separator"],
                                        values["replication.policy.internal.topic.separator.enabled"], source_alias=s)
            except ValueError as e:
                raise bad(key_name(s, t, "replication.policy.separator"), str(e)) from None
            flows.append(FlowConfig(
                s, t, values, policy,
                NameFilter(compile_pattern_list(values["topics"]), compile_pattern_list(values["topics.exclude"])),
                NameFilter(compile_pattern_list(values["groups"]), compile_pattern_list(values["groups.exclude"])),
                compile_pattern_list(values["config.properties.exclude"])))
            used.update((s, t))
    if not flows:
        raise MirrorConfigError(f"mirror config {source}: no flow is enabled (set e.g. {aliases[0]}->"
                                f"{aliases[-1] if len(aliases) > 1 else 'B'}.enabled = true)")
    for alias in sorted(used):
        if "bootstrap.servers" not in clusters[alias].common:
            raise MirrorConfigError(f"mirror config {source}: {alias}.bootstrap.servers is missing "
                                    f"(cluster {alias} is in a flow)")
    return MirrorConfig(clusters, flows, heartbeats, warnings)


def default_instance_id() -> str:
    return socket.gethostname()
