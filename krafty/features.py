"""``krafty features``, as ``kafka-features.sh``:

    features --bootstrap-server H:P describe
    features --bootstrap-server H:P upgrade --metadata 4.0 | --release-version 4.0-IV3 | --feature name=level [--dry-run]
    features --bootstrap-server H:P downgrade --metadata 3.9 | --feature name=level [--unsafe] [--dry-run]
    features --bootstrap-server H:P disable --feature name [--unsafe] [--dry-run]

describe reads ApiVersions' supported and finalized features; the others send UpdateFeatures
(the controller refuses what Kafka refuses: an unknown feature or level, a downgrade that
would lose metadata, ...). A refused update is reported and the exit code is 1."""

from __future__ import annotations

import argparse
import asyncio
import sys

from broker.protocol.apis import ApiKey
from common.errors import ErrorCode
from krafty.admin_tool import UsageError, connect_any
from metadata.features import level_name, metadata_version_level


def _feature_args(args) -> list[tuple[str, int]]:
    out = []
    mv = getattr(args, "metadata", None) or getattr(args, "release_version", None)
    if mv:
        try:
            out.append(("metadata.version", metadata_version_level(mv)))
        except ValueError as e:
            raise UsageError(str(e)) from None
    for item in getattr(args, "feature", None) or []:
        name, sep, level = item.partition("=")
        if args.verb == "disable":
            out.append((item.strip(), 0))
            continue
        if not sep or not level.strip().lstrip("-").isdigit():
            raise UsageError(f"--feature {item!r} is not name=level")
        out.append((name.strip(), int(level)))
    if not out:
        raise UsageError(f"{args.verb} needs --feature{' or --metadata' if args.verb != 'disable' else ''}")
    return out


async def _describe(conn) -> int:
    r = await conn.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "krafty-features",
                                                   "client_software_version": "1"})
    finalized = {f.name: f.max_version_level for f in r.finalized_features or ()}
    epoch = r.finalized_features_epoch
    for f in sorted(r.supported_features or (), key=lambda f: f.name):
        level = finalized.get(f.name)
        print(f"Feature: {f.name}\tSupportedMinVersion: {level_name(f.name, f.min_version)}\t"
              f"SupportedMaxVersion: {level_name(f.name, f.max_version)}\t"
              f"FinalizedVersionLevel: {'-' if level is None else level_name(f.name, level)}\t"
              f"Epoch: {'-' if level is None or epoch < 0 else epoch}")
    return 0


async def _update(conn, args, updates: list[tuple[str, int]]) -> int:
    upgrade = 1 if args.verb == "upgrade" else 3 if args.unsafe else 2
    failed = 0
    for name, level in updates:  # one request each, so each gets its own answer (as kafka-features.sh)
        r = await conn.request(ApiKey.UPDATE_FEATURES, 1, {
            "timeout": 60_000, "validate_only": args.dry_run,
            "feature_updates": [{"feature": name, "max_version_level": level, "upgrade_type": upgrade}]})
        shown = level_name(name, level)
        if args.verb == "disable":
            done, verb = "can be disabled" if args.dry_run else "was disabled", "disable"
        else:
            past = "upgraded" if args.verb == "upgrade" else "downgraded"
            done, verb = (f"can be {past} to {shown}" if args.dry_run else f"was {past} to {shown}"), args.verb
        if r.error_code == 0:
            print(f"{name} {done}.")
        else:
            failed += 1
            target = name if args.verb == "disable" else f"{name} to {shown}"
            print(f"Could not {verb} {target}. {ErrorCode(r.error_code).name}: {r.error_message or ''}")
    if failed:
        print(f"{failed} out of {len(updates)} operation(s) failed.", file=sys.stderr)
        return 1
    return 0


async def _run(args) -> int:
    updates = _feature_args(args) if args.verb != "describe" else []
    conn = await connect_any(args, "krafty-features")
    try:
        return await (_describe(conn) if args.verb == "describe" else _update(conn, args, updates))
    finally:
        conn.close()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="krafty features", description="describe and change the cluster's finalized "
                                "feature levels (kafka-features.sh)")
    p.add_argument("--bootstrap-server", required=True)
    p.add_argument("--command-config", help="Kafka client properties (security.protocol, sasl.*, ssl.*)")
    sub = p.add_subparsers(dest="verb", required=True)
    sub.add_parser("describe", help="supported and finalized features")
    for verb in ("upgrade", "downgrade", "disable"):
        v = sub.add_parser(verb, help=f"{verb} features")
        if verb != "disable":
            v.add_argument("--metadata", help="the metadata.version, e.g. 4.0 or 4.0-IV3")
        if verb == "upgrade":
            v.add_argument("--release-version", help="the metadata.version, e.g. 4.0-IV3")
        v.add_argument("--feature", action="append", help="name=level" if verb != "disable" else "name")
        if verb != "upgrade":
            v.add_argument("--unsafe", action="store_true", help="allow a downgrade that may lose metadata")
        v.add_argument("--dry-run", action="store_true", help="validate only")
    args = p.parse_args(argv)
    try:
        return asyncio.run(_run(args))
    except UsageError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - one clear line (unreachable broker, ...)
        print(f"Error: {e}", file=sys.stderr)
        return 1
