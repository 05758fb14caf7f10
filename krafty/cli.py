"""The ``krafty`` command line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from common.config import Config, ConfigError


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _run(coro) -> int:
    try:
        import uvloop
        return uvloop.run(coro)
    except ImportError:  # pragma: no cover - uvloop is a dependency; keep running without it
        return asyncio.run(coro)


def cmd_node(args) -> int:
    """Exit codes: 0 after a clean stop (SIGTERM/SIGINT), 2 for a bad configuration, 1 for any
    other fatal error (a port in use, a data directory locked by another node, a metadata log
    that cannot be read...). A fatal error ends the process at once: what started is stopped
    (within seconds), then the process exits even if a worker thread would hold it."""
    try:
        cfg = Config.from_file(args.config, args.override or [])
    except ConfigError as e:
        print(f"krafty: {e}", file=sys.stderr)
        return 2
    if cfg["krafty.log.format"] == "json":
        from common.jsonlog import use_json_logs
        use_json_logs(cfg["node.id"])
    from krafty.node import StartupError, run_node
    try:
        return _run(run_node(cfg))
    except (ConfigError, StartupError) as e:
        code = 2 if isinstance(e, ConfigError) else 1
        logging.getLogger("krafty.node").error("fatal: %s; exiting with code %d", e, code)
        print(f"krafty: {e}", file=sys.stderr)
        _exit_now(code)
    except Exception as e:
        logging.getLogger("krafty.node").exception("fatal error; exiting with code 1")
        print(f"krafty: fatal error: {type(e).__name__}: {e}", file=sys.stderr)
        _exit_now(1)


def _exit_now(code: int) -> None:
    """Exits without waiting for non-daemon threads (aiosqlite's, gRPC's) that a failed start
    may leave behind: a node that cannot run must not linger."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def cmd_cluster_up(args) -> int:
    from krafty.cluster import up
    racks = [r for r in args.racks.split(",") if r] if args.racks else None
    return up(args.controllers, args.brokers, args.base_port, args.dir, racks, args.override)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "metadata-quorum":
        from krafty.metadata_quorum import main as mq_main
        return mq_main(argv[1:])
    if argv and argv[0] == "consumer-groups":
        from krafty.consumer_groups import main as cg_main
        return cg_main(argv[1:])
    if argv and argv[0] == "transactions":
        from krafty.transactions import main as txn_main
        return txn_main(argv[1:])
    if argv and argv[0] == "chaos":
        from chaos.runner import main as chaos_main
        return chaos_main(argv[1:])
    if argv and argv[0] == "acls":
        from krafty.acls import main as acls_main
        return acls_main(argv[1:])
    if argv and argv[0] == "configs":
        from krafty.configs import main as configs_main
        return configs_main(argv[1:])
    if argv and argv[0] == "delete-records":
        from krafty.delete_records import main as dr_main
        return dr_main(argv[1:])
    if argv and argv[0] == "leader-election":
        from krafty.leader_election import main as le_main
        return le_main(argv[1:])
    if argv and argv[0] == "reassign-partitions":
        from krafty.reassign_partitions import main as rp_main
        return rp_main(argv[1:])
    if argv and argv[0] == "log-dirs":
        from krafty.log_dirs import main as ld_main
        return ld_main(argv[1:])
    if argv and argv[0] == "features":
        from krafty.features import main as features_main
        return features_main(argv[1:])
    if argv and argv[0] == "storage":
        from krafty.storage import main as storage_main
        return storage_main(argv[1:])
    if argv and argv[0] == "topics":
        from krafty.topics import main as topics_main
        return topics_main(argv[1:])
    if argv and argv[0] == "healthcheck":
        from krafty.healthcheck import main as hc_main
        return hc_main(argv[1:])
    p = argparse.ArgumentParser(prog="krafty", description="A Kafka-compatible broker cluster")
    p.add_argument("--log-level", default="INFO")
    sub = p.add_subparsers(dest="cmd", required=True)
    node = sub.add_parser("node", help="run a node (broker, controller or both)")
    node.add_argument("--config", required=True, help="server.properties file (Kafka key names)")
    node.add_argument("--override", action="append", metavar="KEY=VALUE", help="override a config key")
    node.set_defaults(fn=cmd_node)
    sub.add_parser("metadata-quorum", help="describe the metadata quorum (see: krafty metadata-quorum --help)")
    sub.add_parser("consumer-groups", help="list, describe, delete consumer groups, reset offsets "
                   "(see: krafty consumer-groups --help)")
    sub.add_parser("transactions", help="list, describe, find hanging and abort transactions "
                   "(see: krafty transactions --help)")
    sub.add_parser("healthcheck", help="exit 0 when a broker answers ApiVersions / a controller is in the quorum "
                   "(see: krafty healthcheck --help)")
    sub.add_parser("topics", help="create, list, describe, alter, delete topics (see: krafty topics --help)")
    sub.add_parser("acls", help="add, remove, list ACLs (see: krafty acls --help)")
    sub.add_parser("configs", help="describe/alter topic and broker configs, broker log levels, users' SCRAM "
                   "credentials and client quotas (see: krafty configs --help)")
    sub.add_parser("features", help="describe, upgrade, downgrade, disable feature levels such as metadata.version "
                   "(see: krafty features --help)")
    sub.add_parser("storage", help="format a node's directories, show their cluster identity, make a cluster id "
                   "(see: krafty storage --help)")
    sub.add_parser("delete-records", help="delete records up to an offset (see: krafty delete-records --help)")
    sub.add_parser("leader-election", help="elect preferred or unclean leaders (see: krafty leader-election --help)")
    sub.add_parser("reassign-partitions", help="move partition replicas between brokers "
                   "(see: krafty reassign-partitions --help)")
    sub.add_parser("log-dirs", help="describe brokers' log dirs (see: krafty log-dirs --help)")
    sub.add_parser("chaos", help="run a cluster under faults and check the history (see: krafty chaos run --help)")
    cluster = sub.add_parser("cluster", help="run a local multi-process cluster")
    csub = cluster.add_subparsers(dest="action", required=True)
    up = csub.add_parser("up", help="start controllers and brokers on loopback; Ctrl-C stops them")
    up.add_argument("--controllers", type=int, default=3)
    up.add_argument("--brokers", type=int, default=3)
    up.add_argument("--racks", default=None, help="comma-separated racks, assigned to brokers round-robin")
    up.add_argument("--base-port", type=int, default=9092, help="brokers on P, P+1, ...; controllers on P+100, ...")
    up.add_argument("--dir", default="./cluster-data")
    up.add_argument("--override", action="append", metavar="KEY=VALUE", help="config for every node")
    up.set_defaults(fn=cmd_cluster_up)
    args = p.parse_args(argv)
    _setup_logging(args.log_level)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
