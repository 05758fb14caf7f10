"""``krafty acls``: add, remove and list ACLs, like ``kafka-acls.sh``.

    acls --bootstrap-server H:P --add --allow-principal User:alice --operation Read --topic orders
    acls --bootstrap-server H:P --add --deny-principal User:bob --operation All --topic pay \\
        --resource-pattern-type prefixed
    acls --bootstrap-server H:P --add --allow-principal User:alice --consumer --topic t --group g
    acls --bootstrap-server H:P --remove --force --allow-principal User:alice --operation Read --topic orders
    acls --bootstrap-server H:P --list [--topic orders] [--principal User:alice] [--resource-pattern-type match]

``--command-config FILE`` takes Kafka client properties (security.protocol, sasl.*, ssl.*)
to reach a TLS/SASL listener, as in ``krafty configs``."""

from __future__ import annotations

import argparse
import asyncio
import sys

from broker.protocol.apis import ApiKey
from common.config import ConfigError
from common.errors import ErrorCode
from krafty.admin_tool import UsageError, connect_any
from metadata.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    parse_principal,
    to_enum,
)

ACL_VERSION = 3


def parse_operation(name: str) -> AclOperation:
    key = name.replace("_", "").replace("-", "").lower()
    for op in AclOperation:
        if op.name.replace("_", "").lower() == key and op not in (AclOperation.UNKNOWN, AclOperation.ANY):
            return op
    valid = ", ".join(_title(o) for o in AclOperation if o not in (AclOperation.UNKNOWN, AclOperation.ANY))
    raise UsageError(f"--operation {name!r} is not one of {valid}")


def _title(e) -> str:
    return "".join(w.capitalize() for w in e.name.split("_"))


def _resources(args) -> list[tuple[ResourceType, str]]:
    out = [(ResourceType.TOPIC, t) for t in args.topic or []]
    out += [(ResourceType.GROUP, g) for g in args.group or []]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id or []]
    out += [(ResourceType.DELEGATION_TOKEN, t) for t in args.delegation_token or []]
    out += [(ResourceType.USER, u) for u in args.user_principal or []]
    if args.cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def _pattern_type(args, for_filter: bool) -> PatternType:
    pt = (args.resource_pattern_type or "literal").upper()
    if pt not in PatternType.__members__ or pt == "UNKNOWN":
        raise UsageError(f"--resource-pattern-type {args.resource_pattern_type!r} is not one of "
                         "literal, prefixed, any, match")
    pattern = PatternType[pt]
    if not for_filter and pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise UsageError("--add needs --resource-pattern-type literal or prefixed")
    return pattern


def _entries(args) -> list[tuple[str, str, PermissionType]]:
    """(principal, host, permission) from --allow-principal/--deny-principal and their hosts."""
    out = []
    for principals, hosts, perm in ((args.allow_principal, args.allow_host, PermissionType.ALLOW),
                                    (args.deny_principal, args.deny_host, PermissionType.DENY)):
        for p in principals or []:
            try:
                parse_principal(p)
            except ValueError as e:
                raise UsageError(str(e)) from None
            for h in hosts or ["*"]:
                out.append((p, h, perm))
    return out


def _operations(args, rtype: ResourceType) -> list[AclOperation]:
    """The operations for one resource: --operation, or the --producer / --consumer sets."""
    if args.producer or args.consumer:
        ops = []
        if args.producer:
            ops += {ResourceType.TOPIC: [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE],
                    ResourceType.TRANSACTIONAL_ID: [AclOperation.WRITE, AclOperation.DESCRIBE],
                    ResourceType.CLUSTER: [AclOperation.IDEMPOTENT_WRITE] if args.idempotent else []}.get(rtype, [])
        if args.consumer:
            ops += {ResourceType.TOPIC: [AclOperation.READ, AclOperation.DESCRIBE],
                    ResourceType.GROUP: [AclOperation.READ]}.get(rtype, [])
        return list(dict.fromkeys(ops))
    return [parse_operation(o) for o in (args.operation or ["All"])]


def bindings_of(args) -> list[AclBinding]:
    resources = _resources(args)
    if args.producer and args.idempotent and not args.cluster:
        resources.append((ResourceType.CLUSTER, CLUSTER_NAME))
    if not resources:
        raise UsageError("name a resource: --topic, --group, --cluster, --transactional-id, --delegation-token "
                         "or --user-principal")
    if args.consumer and not args.group:
        raise UsageError("--consumer needs --group")
    entries = _entries(args)
    if not entries:
        raise UsageError("--add/--remove need --allow-principal and/or --deny-principal")
    pattern = _pattern_type(args, for_filter=False)
    out = []
    for rtype, name in resources:
        for op in _operations(args, rtype):
            for principal, host, perm in entries:
                out.append(AclBinding(rtype, name, pattern, principal, host, op, perm))
    return out


def _fmt_resource(rtype, name, pattern) -> str:
    return (f"ResourcePattern(resourceType={to_enum(ResourceType, rtype).name}, name={name}, "
            f"patternType={to_enum(PatternType, pattern).name})")


def _fmt_entry(principal, host, op, perm) -> str:
    return (f"(principal={principal}, host={host}, operation={to_enum(AclOperation, op).name}, "
            f"permissionType={to_enum(PermissionType, perm).name})")


def _filter_req(f: AclBindingFilter) -> dict:
    return {"resource_type_filter": int(f.resource_type), "resource_name_filter": f.resource_name,
            "pattern_type_filter": int(f.pattern_type), "principal_filter": f.principal, "host_filter": f.host,
            "operation": int(f.operation), "permission_type": int(f.permission)}


async def list_acls(conn, filters: list[AclBindingFilter]) -> int:
    rc = 0
    for f in filters:
        res = await conn.request(ApiKey.DESCRIBE_ACLS, ACL_VERSION, _filter_req(f))
        if res.error_code != 0:
            print(f"Error: {ErrorCode(res.error_code).name}: {res.error_message or ''}", file=sys.stderr)
            rc = 1
            continue
        for r in res.resources:
            print(f"Current ACLs for resource `{_fmt_resource(r.resource_type, r.resource_name, r.pattern_type)}`: ")
            for a in r.acls:
                print(f" \t{_fmt_entry(a.principal, a.host, a.operation, a.permission_type)} ")
            print()
    return rc


async def add_acls(conn, bindings: list[AclBinding]) -> int:
    by_res: dict[tuple, list[AclBinding]] = {}
    for b in bindings:
        by_res.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    for (rt, name, pt), bs in by_res.items():
        print(f"Adding ACLs for resource `{_fmt_resource(rt, name, pt)}`: ")
        for b in bs:
            print(f" \t{_fmt_entry(b.principal, b.host, b.operation, b.permission)} ")
        print()
    res = await conn.request(ApiKey.CREATE_ACLS, ACL_VERSION, {"creations": [
        {"resource_type": int(b.resource_type), "resource_name": b.resource_name,
         "resource_pattern_type": int(b.pattern_type), "principal": b.principal, "host": b.host,
         "operation": int(b.operation), "permission_type": int(b.permission)} for b in bindings]})
    rc = 0
    for b, r in zip(bindings, res.results, strict=True):
        if r.error_code != 0:
            print(f"Error while adding ACL {_fmt_entry(b.principal, b.host, b.operation, b.permission)} on "
                  f"{_fmt_resource(b.resource_type, b.resource_name, b.pattern_type)}: "
                  f"{ErrorCode(r.error_code).name}: {r.error_message or ''}", file=sys.stderr)
            rc = 1
    return rc


async def remove_acls(conn, filters: list[AclBindingFilter]) -> int:
    res = await conn.request(ApiKey.DELETE_ACLS, ACL_VERSION, {"filters": [_filter_req(f) for f in filters]})
    rc = 0
    for r in res.filter_results:
        if r.error_code != 0:
            print(f"Error while removing ACLs: {ErrorCode(r.error_code).name}: {r.error_message or ''}",
                  file=sys.stderr)
            rc = 1
            continue
        for m in r.matching_acls:
            print(f"Removed ACL {_fmt_entry(m.principal, m.host, m.operation, m.permission_type)} from "
                  f"`{_fmt_resource(m.resource_type, m.resource_name, m.pattern_type)}`")
    return rc


def filters_of(args, removing: bool) -> list[AclBindingFilter]:
    pattern = _pattern_type(args, for_filter=True)
    resources = _resources(args)
    if removing:
        if not resources:
            raise UsageError("--remove needs a resource (--topic, --group, --cluster, ...)")
        entries = _entries(args)
        out = []
        for rtype, name in resources:
            if not entries:  # every ACL of the resource
                out.append(AclBindingFilter(rtype, name, pattern))
                continue
            ops = _operations(args, rtype) if (args.operation or args.producer or args.consumer) else [
                AclOperation.ANY]
            for principal, host, perm in entries:
                for op in ops:
                    out.append(AclBindingFilter(rtype, name, pattern, principal,
                                                host if (args.allow_host or args.deny_host) else None, op, perm))
        return out
    principals = args.principal or [None]
    if not resources:  # every ACL (of the principals), whatever its pattern type unless one is given
        pattern = pattern if args.resource_pattern_type else PatternType.ANY
        return [AclBindingFilter(principal=p, pattern_type=pattern) for p in principals]
    return [AclBindingFilter(rtype, name, pattern, p) for rtype, name in resources for p in principals]


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="krafty acls", description="add, remove and list ACLs (kafka-acls.sh)")
    p.add_argument("--bootstrap-server", required=True)
    p.add_argument("--command-config", help="Kafka client properties (security.protocol, sasl.*, ssl.*)")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--add", action="store_true")
    mode.add_argument("--remove", action="store_true")
    mode.add_argument("--list", action="store_true")
    p.add_argument("--allow-principal", action="append")
    p.add_argument("--deny-principal", action="append")
    p.add_argument("--allow-host", action="append")
    p.add_argument("--deny-host", action="append")
    p.add_argument("--principal", action="append", help="--list: only ACLs of this principal")
    p.add_argument("--operation", action="append", help="Read, Write, Create, Delete, Alter, Describe, "
                   "ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite, CreateTokens, DescribeTokens, All")
    p.add_argument("--topic", action="append")
    p.add_argument("--group", action="append")
    p.add_argument("--cluster", action="store_true")
    p.add_argument("--transactional-id", action="append")
    p.add_argument("--delegation-token", action="append")
    p.add_argument("--user-principal", action="append")
    p.add_argument("--resource-pattern-type", help="literal (default), prefixed; --list/--remove also any, match")
    p.add_argument("--producer", action="store_true", help="Write, Describe, Create on the topics")
    p.add_argument("--consumer", action="store_true", help="Read, Describe on the topics and Read on the group")
    p.add_argument("--idempotent", action="store_true", help="with --producer: IdempotentWrite on the cluster")
    p.add_argument("--force", action="store_true", help="--remove without asking")
    args = p.parse_args(argv)
    try:
        if args.add:
            bindings = bindings_of(args)
            return asyncio.run(_run(args, lambda conn: add_acls(conn, bindings)))
        if args.remove:
            filters = filters_of(args, removing=True)
            if not args.force:
                if not sys.stdin.isatty():
                    raise UsageError("--remove without --force needs a terminal to confirm")
                answer = input("Are you sure you want to remove ACLs matching "
                               f"{len(filters)} filter(s)? (y/n) ")
                if answer.strip().lower() not in ("y", "yes"):
                    return 1
            return asyncio.run(_run(args, lambda conn: remove_acls(conn, filters)))
        filters = filters_of(args, removing=False)
        return asyncio.run(_run(args, lambda conn: list_acls(conn, filters)))
    except (UsageError, ConfigError) as e:
        print(f"Error: {e}", file=sys.stderr)
        return 2
    except (ConnectionError, TimeoutError) as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1


async def _run(args, fn) -> int:
    conn = await connect_any(args, "krafty-acls")
    try:
        return await fn(conn)
    finally:
        conn.close()
