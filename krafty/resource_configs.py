"""``krafty configs`` for topics, brokers and broker-loggers, as ``kafka-configs.sh`` does:

    configs --bootstrap-server H:P --entity-type topics --entity-name t --describe [--all]
    configs --bootstrap-server H:P --entity-type topics --entity-name t --alter \\
        --add-config 'retention.ms=3600000,cleanup.policy=[compact,delete]' --delete-config segment.ms
    configs --bootstrap-server H:P --entity-type brokers --entity-name 1 --alter --add-config log.cleaner.backoff.ms=5000
    configs --bootstrap-server H:P --entity-type brokers --entity-default --alter --add-config max.connections=1000
    configs --bootstrap-server H:P --entity-type brokers [--entity-name 1 | --entity-default] --describe [--all]
    configs --bootstrap-server H:P --entity-type broker-loggers --entity-name 1 --alter --add-config krafty.broker=DEBUG

Changes go through IncrementalAlterConfigs (SET for --add-config, DELETE for --delete-config);
a broker's own configs and log levels are asked of that broker, as Kafka's tool does."""

from __future__ import annotations

import sys

from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from common.errors import ErrorCode

TYPES = {"topics": 2, "brokers": 4, "broker-loggers": 8}
SINGULAR = {"topics": "topic", "brokers": "broker", "broker-loggers": "broker-logger"}
SOURCES = {1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
           4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG"}
# what --describe without --all shows: the values set at that level
DYNAMIC_SOURCE = {"topics": 1, "brokers": 2, "broker-loggers": 6}


class CommandError(Exception):
    """A request the cluster refused: printed in one line, exit code 1."""


def parse_configs(text: str) -> dict[str, str]:
    """``k1=v1,k2=[a,b],k3=v3`` (kafka-configs.sh's --add-config: brackets keep commas in a value)."""
    out: dict[str, str] = {}
    i, n = 0, len(text)
    while i < n:
        eq = text.find("=", i)
        if eq < 0:
            raise ValueError(f"--add-config: {text[i:]!r} is not key=value")
        key = text[i:eq].strip()
        j = eq + 1
        if j < n and text[j] == "[":
            end = text.find("]", j)
            if end < 0:
                raise ValueError(f"--add-config: the value of {key} has '[' without ']'")
            value, i = text[j + 1:end], end + 1
            if i < n and text[i] != ",":
                raise ValueError(f"--add-config: expected ',' after the value of {key}")
        else:
            end = text.find(",", j)
            end = n if end < 0 else end
            value, i = text[j:end], end
        i += 1
        if not key:
            raise ValueError("--add-config: a key is empty")
        out[key] = value.strip()
    return out


async def run(args, connect) -> int:
    """``connect()`` gives a connection to a bootstrap broker (krafty/configs.py)."""
    etype = args.entity_type[0]
    names = args.entity_names or []
    if len(args.entity_type) != 1 or len(names) > 1:
        raise ValueError(f"--entity-type {etype} takes one --entity-name or --entity-default")
    name = names[0] if names else ""
    default = bool(names) and names[0] is None
    if default and etype != "brokers":
        raise ValueError(f"--entity-default is for brokers, not {etype}")
    if args.alter and not names:
        raise ValueError(f"--alter needs --entity-name{' or --entity-default' if etype == 'brokers' else ''}")
    if etype == "broker-loggers" and args.describe and not names:
        raise ValueError("--entity-type broker-loggers needs --entity-name <broker id>")
    for n in names:
        if n is not None and etype in ("brokers", "broker-loggers") and not n.isdigit():
            raise ValueError(f"--entity-name of {etype} is a broker id, not {n!r}")
    conn = await connect()
    try:
        if args.alter:
            add = parse_configs(args.add_config) if args.add_config else {}
            delete = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
            if not add and not delete:
                raise ValueError("--alter needs --add-config and/or --delete-config")
            target = await _broker_conn(conn, int(name)) if etype != "topics" and not default else conn
            try:
                await _alter(target, TYPES[etype], "" if default else name, add, delete)
            finally:
                if target is not conn:
                    target.close()
            print("Completed updating default config for brokers in the cluster." if default else
                  f"Completed updating config for {SINGULAR[etype]} {name}.")
            return 0
        if default:
            entities = [""]
        elif names:
            entities = [name]
        elif etype == "topics":
            entities = sorted(t.name for t in (await _metadata(conn)).topics)
        else:
            entities = [str(b.node_id) for b in sorted((await _metadata(conn)).brokers, key=lambda b: b.node_id)]
        for entity in entities:
            target = await _broker_conn(conn, int(entity)) if etype != "topics" and entity else conn
            try:
                configs = await _describe(target, TYPES[etype], entity)
            finally:
                if target is not conn:
                    target.close()
            if not args.all:
                want = 3 if default else DYNAMIC_SOURCE[etype]
                configs = [c for c in configs if c.config_source == want]
            if default:
                print("Default configs for brokers in the cluster are:")
            else:
                print(f"{'All' if args.all else 'Dynamic'} configs for {SINGULAR[etype]} {entity} are:")
            for c in sorted(configs, key=lambda c: c.name):
                value = "null" if c.is_sensitive or c.value is None else c.value
                syn = ", ".join(f"{SOURCES.get(s.source, s.source)}:{s.name}={'null' if s.value is None else s.value}"
                                for s in c.synonyms)
                print(f"  {c.name}={value} sensitive={'true' if c.is_sensitive else 'false'} synonyms={{{syn}}}")
        return 0
    finally:
        conn.close()


async def _metadata(conn: KafkaConnection):
    return await conn.request(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                                    "include_topic_authorized_operations": False})


async def _broker_conn(conn: KafkaConnection, broker_id: int) -> KafkaConnection:
    """A connection to the broker with this id (its advertised listener), as kafka-configs.sh
    sends a broker's configs to that broker."""
    md = await _metadata(conn)
    b = next((b for b in md.brokers if b.node_id == broker_id), None)
    if b is None:
        raise CommandError(f"broker {broker_id} is not in the cluster (brokers: "
                           f"{', '.join(str(x.node_id) for x in md.brokers)})")
    target = KafkaConnection(b.host, b.port, client_id=conn.client_id, security=conn.security)
    await target.connect()
    return target


async def _alter(conn: KafkaConnection, rtype: int, name: str, add: dict[str, str], delete: list[str]) -> None:
    ops = [{"name": k, "config_operation": 0, "value": v} for k, v in add.items()]
    ops += [{"name": k, "config_operation": 1, "value": None} for k in delete]
    r = await conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {
        "resources": [{"resource_type": rtype, "resource_name": name, "configs": ops}], "validate_only": False})
    res = r.responses[0]
    if res.error_code != 0:
        raise CommandError(f"{ErrorCode(res.error_code).name}: {res.error_message or ''}")


async def _describe(conn: KafkaConnection, rtype: int, name: str) -> list:
    r = await conn.request(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": rtype, "resource_name": name, "configuration_keys": None}],
        "include_synonyms": True, "include_documentation": False})
    res = r.results[0]
    if res.error_code != 0:
        raise CommandError(f"{ErrorCode(res.error_code).name}: {res.error_message or ''}")
    return list(res.configs)


def report(e: Exception) -> int:
    print(f"Error: {e}", file=sys.stderr)
    return 1
