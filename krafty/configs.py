"""``krafty configs``: SCRAM credentials of users and client quotas, like ``kafka-configs.sh``.

    configs --bootstrap-server H:P --describe --entity-type users [--entity-name alice]
    configs --bootstrap-server H:P --alter --entity-type users --entity-name alice \\
        --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]'
    configs --bootstrap-server H:P --alter --entity-type users --entity-name alice --delete-config SCRAM-SHA-512
    configs --bootstrap-server H:P --alter --entity-type clients --entity-name app-1 \\
        --add-config 'producer_byte_rate=1048576,consumer_byte_rate=2097152'
    configs --bootstrap-server H:P --alter --entity-type users --entity-default --add-config producer_byte_rate=1e6
    configs --bootstrap-server H:P --alter --entity-type users --entity-name alice --entity-type clients \\
        --entity-name app-1 --delete-config producer_byte_rate
    configs --bootstrap-server H:P --describe --entity-type clients [--entity-name app-1 | --entity-default]

``--command-config FILE`` takes Kafka client properties (security.protocol, sasl.mechanism,
sasl.jaas.config, ssl.truststore.location, ...) to reach a TLS/SASL listener. The password
is salted here (AlterUserScramCredentials carries the salt and salted password only).
Quotas go through AlterClientQuotas / DescribeClientQuotas; the broker enforces
producer_byte_rate and consumer_byte_rate (bytes/s, throttle_time_ms in the responses)."""

from __future__ import annotations

import argparse
import asyncio
import math
import re
import sys

from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from broker.security import scram
from common.clock import SYSTEM
from common.config import ConfigError
from common.errors import ErrorCode
from krafty import resource_configs
from krafty.admin_tool import UsageError, connect_any
from metadata.quota import ENFORCED as QUOTA_ENFORCED
from metadata.quota import KEYS as QUOTA_KEYS

DEFAULT_ITERATIONS = 4096  # kafka-configs.sh's default




def parse_add_config(text: str) -> tuple[list[tuple[str, int, str]], dict[str, float]]:
    """``SCRAM-SHA-256=[iterations=8192,password=pw],producer_byte_rate=1024`` ->
    ([(mechanism, iterations, password)], {quota key: value})."""
    scrams, quotas = [], {}
    pos = 0
    for m in re.finditer(r"\s*([A-Za-z0-9_.-]+)\s*=\s*(\[[^\]]*\]|[^,\[\]]*?)\s*(,|$)", text):
        if m.start() != pos or m.end() == m.start():
            break
        pos = m.end()
        name, value = m.group(1), m.group(2)
        if not value.startswith("["):
            quotas[name] = _quota_value(name, value)
            continue
        mech = name.upper()
        if mech not in scram.MECHANISMS:
            raise UsageError(f"--add-config: unknown SCRAM mechanism {name!r} "
                             f"(expected {', '.join(scram.MECHANISMS)})")
        opts = {}
        for item in value[1:-1].split(","):
            k, sep, v = item.partition("=")
            if not sep:
                # (not echoed: it may be the tail of a password with a comma in it)
                raise UsageError(f"--add-config: the options of {mech} must be key=value pairs separated by ',' "
                                 "(a password cannot contain ',' or ']')")
            opts[k.strip()] = v
        if "password" not in opts:
            raise UsageError(f"--add-config: {mech} needs password=...")
        try:
            iterations = int(opts.get("iterations", DEFAULT_ITERATIONS))
        except ValueError:
            raise UsageError(f"--add-config: iterations {opts['iterations']!r} is not a number") from None
        unknown = set(opts) - {"password", "iterations"}
        if unknown:
            raise UsageError(f"--add-config: unknown option(s) {', '.join(sorted(unknown))} for {mech}")
        scrams.append((mech, iterations, opts["password"]))
    if pos != len(text) or not (scrams or quotas):
        raise UsageError(f"--add-config {_hide_passwords(text)!r} is not of the form "
                         "'SCRAM-SHA-256=[iterations=N,password=P],...' "
                         "or 'producer_byte_rate=N,consumer_byte_rate=N'")
    return scrams, quotas


def _hide_passwords(text: str) -> str:
    """``text`` for an error message: every password=... value blanked out."""
    return re.sub(r"(password\s*=)[^,\]]*", r"\1[hidden]", text)


def _quota_value(key: str, value: str) -> float:
    if key not in QUOTA_KEYS:
        raise UsageError(f"--add-config: unknown config {key!r} (SCRAM mechanisms: {', '.join(scram.MECHANISMS)}; "
                         f"quotas: {', '.join(sorted(QUOTA_ENFORCED))})")
    try:
        v = float(value)
    except ValueError:
        v = float("nan")
    if not math.isfinite(v) or v <= 0:
        raise UsageError(f"--add-config: {key}={value!r} is not a positive number")
    return v


# kafka-configs.sh entity types -> quota entity types (ClientQuotaEntity)
ENTITY_TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}


def _entities(args) -> list[tuple[str, str | None]]:
    """--entity-type/--entity-name/--entity-default, paired in order as kafka-configs.sh does:
    [(quota entity type, name or None for the default)]."""
    types = args.entity_type or []
    names = args.entity_names or []
    for t in types:
        if t not in ENTITY_TYPES:
            raise UsageError(f"--entity-type {t!r} is not supported: krafty configs manages users, clients, ips, "
                             "topics, brokers and broker-loggers")
    if len(set(types)) != len(types):
        raise UsageError("each --entity-type may be given once")
    if len(names) > len(types):
        raise UsageError("more --entity-name/--entity-default than --entity-type")
    return [(ENTITY_TYPES[t], names[i] if i < len(names) else "") for i, t in enumerate(types)]


async def describe(conn: KafkaConnection, users: list[str] | None) -> int:
    res = await conn.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0,
                             {"users": [{"name": u} for u in users] if users else None})
    if res.error_code != 0:
        print(f"Error: {ErrorCode(res.error_code).name}: {res.error_message or ''}", file=sys.stderr)
        return 1
    rc = 0
    for r in res.results:
        if r.error_code != 0:
            print(f"Error describing user '{r.user}': {ErrorCode(r.error_code).name}: {r.error_message or ''}",
                  file=sys.stderr)
            rc = 1
            continue
        infos = ", ".join(f"{scram.MECHANISM_BY_ID.get(int(c.mechanism), c.mechanism)}=iterations={c.iterations}"
                          for c in r.credential_infos)
        print(f"SCRAM credential configs for user-principal '{r.user}' are {infos}")
    return rc


async def alter(conn: KafkaConnection, user: str, add: list[tuple[str, int, str]], delete: list[str]) -> int:
    upserts = []
    for mech, iterations, password in add:
        salt = SYSTEM.secret_bytes(32)
        salted = scram.salted_password(mech, password.encode(), salt, iterations) \
            if scram.MIN_ITERATIONS <= iterations <= scram.MAX_ITERATIONS else b"x"
        upserts.append({"name": user, "mechanism": scram.MECHANISMS[mech][1], "iterations": iterations,
                        "salt": salt, "salted_password": salted})
    deletions = [{"name": user, "mechanism": scram.MECHANISMS[m][1]} for m in delete]
    res = await conn.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {"deletions": deletions, "upsertions": upserts})
    rc = 0
    for r in res.results:
        if r.error_code != 0:
            print(f"Error altering user '{r.user}': {ErrorCode(r.error_code).name}: {r.error_message or ''}",
                  file=sys.stderr)
            rc = 1
    if rc == 0:
        print(f"Completed updating config for user {user}.")
    return rc


_QUOTA_MATCH_EXACT, _QUOTA_MATCH_DEFAULT, _QUOTA_MATCH_ANY = 0, 1, 2
_ENTITY_LABEL = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}


def _entity_text(entity) -> str:
    return ", ".join(f"the default {_ENTITY_LABEL[t]}" if n is None else f"{_ENTITY_LABEL[t]} '{n}'"
                     for t, n in entity)


async def describe_quotas(conn: KafkaConnection, entities: list[tuple[str, str | None]]) -> int:
    """Prints the quotas of the entities matching --entity-type/-name/-default (a type without
    a name matches every entity of that type), as kafka-configs.sh does."""
    components = [{"entity_type": t, "match_type": _QUOTA_MATCH_ANY if n == "" else
                   _QUOTA_MATCH_DEFAULT if n is None else _QUOTA_MATCH_EXACT, "match": n or None}
                  for t, n in entities]
    strict = all(n != "" for _, n in entities)
    res = await conn.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"components": components, "strict": strict})
    if res.error_code != 0:
        print(f"Error describing quotas: {ErrorCode(res.error_code).name}: {res.error_message or ''}",
              file=sys.stderr)
        return 1
    for e in res.entries or ():
        values = ",".join(f"{v.key}={v.value}" for v in e.values)
        print(f"Quota configs for {_entity_text([(x.entity_type, x.entity_name) for x in e.entity])} are {values}")
    return 0


async def alter_quotas(conn: KafkaConnection, entities: list[tuple[str, str | None]], add: dict[str, float],
                       delete: list[str]) -> int:
    ops = [{"key": k, "value": v, "remove": False} for k, v in add.items()]
    ops += [{"key": k, "value": 0.0, "remove": True} for k in delete]
    res = await conn.request(ApiKey.ALTER_CLIENT_QUOTAS, 1, {"entries": [{
        "entity": [{"entity_type": t, "entity_name": n} for t, n in entities], "ops": ops}], "validate_only": False})
    rc = 0
    for e in res.entries:
        if e.error_code != 0:
            print(f"Error altering quotas of {_entity_text(entities)}: {ErrorCode(e.error_code).name}: "
                  f"{e.error_message or ''}", file=sys.stderr)
            rc = 1
    if rc == 0:
        print(f"Completed updating quota configs for {_entity_text(entities)}.")
    return rc


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="krafty configs", description="SCRAM credentials of users, client quotas, "
                                "topic and broker configs, broker log levels (kafka-configs.sh --entity-type "
                                "users|clients|ips|topics|brokers|broker-loggers)")
    p.add_argument("--bootstrap-server", required=True)
    p.add_argument("--command-config", help="Kafka client properties (security.protocol, sasl.*, ssl.*)")
    p.add_argument("--entity-type", action="append", required=True,
                   help="users, clients or ips (repeatable); topics, brokers or broker-loggers")
    p.add_argument("--entity-name", action="append", dest="entity_names")
    p.add_argument("--entity-default", action="append_const", const=None, dest="entity_names",
                   help="the default user / client-id (quotas), or every broker (brokers)")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--describe", action="store_true")
    mode.add_argument("--alter", action="store_true")
    p.add_argument("--add-config")
    p.add_argument("--delete-config")
    p.add_argument("--all", action="store_true", help="with --describe: every config, not only the dynamic ones")
    args = p.parse_args(argv)
    if any(t in resource_configs.TYPES for t in args.entity_type):  # topics, brokers, broker-loggers
        try:
            return asyncio.run(resource_configs.run(args, lambda: connect_any(args, "krafty-configs")))
        except (ValueError, UsageError, ConfigError) as e:
            print(f"Error: {e}", file=sys.stderr)
            return 2
        except (resource_configs.CommandError, ConnectionError, TimeoutError) as e:
            return resource_configs.report(e)
    try:
        entities = _entities(args)
        scram_user = entities[0][1] if len(entities) == 1 and entities[0][0] == "user" else None
        add, quotas, delete, delete_quotas = [], {}, [], []
        if args.alter:
            if any(n == "" for _, n in entities):
                raise UsageError("--alter needs an --entity-name or --entity-default for each --entity-type")
            if not args.add_config and not args.delete_config:
                raise UsageError("--alter needs --add-config and/or --delete-config")
            add, quotas = parse_add_config(args.add_config) if args.add_config else ([], {})
            for item in (m.strip() for m in (args.delete_config or "").split(",")):
                if item.upper() in scram.MECHANISMS:
                    delete.append(item.upper())
                elif item in QUOTA_KEYS:
                    delete_quotas.append(item)
                elif item:
                    raise UsageError(f"--delete-config: {item!r} is neither a SCRAM mechanism "
                                     f"({', '.join(scram.MECHANISMS)}) nor a quota key")
            if (add or delete) and not scram_user:
                raise UsageError("SCRAM credentials belong to one named user: --entity-type users --entity-name NAME")
        elif args.add_config or args.delete_config:
            raise UsageError("--add-config/--delete-config need --alter")
        return asyncio.run(_run(args, entities, scram_user, add, delete, quotas, delete_quotas))
    except (UsageError, ConfigError) as e:
        print(f"Error: {e}", file=sys.stderr)
        return 2
    except (ConnectionError, TimeoutError) as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1


async def _run(args, entities, scram_user, add, delete, quotas, delete_quotas) -> int:
    conn = await connect_any(args, "krafty-configs")
    try:
        if args.describe:
            rc = 0
            if entities == [("user", scram_user)] or entities == [("user", "")]:
                rc = await describe(conn, [scram_user] if scram_user else None)
            return max(rc, await describe_quotas(conn, entities))
        rc = 0
        if add or delete:
            rc = await alter(conn, scram_user, add, delete)
        if quotas or delete_quotas:
            rc = max(rc, await alter_quotas(conn, entities, quotas, delete_quotas))
        return rc
    finally:
        conn.close()
