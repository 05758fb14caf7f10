"""The ``krafty`` command line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from common.config import Config, ConfigError


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=LOG_LEVELS.get(level.upper(), logging.INFO), stream=sys.stderr,
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


# verb -> (module with main(argv), help); each verb parses its own flags (Kafka's tools' flags)
VERBS: dict[str, tuple[str, str]] = {
    "topics": ("krafty.topics", "create, list, describe, alter, delete topics"),
    "configs": ("krafty.configs", "describe/alter topic and broker configs, broker log levels, users' SCRAM "
                "credentials and client quotas"),
    "consumer-groups": ("krafty.consumer_groups", "list, describe, delete consumer groups, reset offsets"),
    "share-groups": ("krafty.share_groups", "list, describe, delete share groups, reset and delete their offsets"),
    "console-producer": ("krafty.console_producer", "produce lines from stdin (kafka-console-producer.sh)"),
    "console-consumer": ("krafty.console_consumer", "print records to stdout (kafka-console-consumer.sh)"),
    "get-offsets": ("krafty.get_offsets", "partitions' offsets at a time (kafka-get-offsets.sh)"),
    "delete-records": ("krafty.delete_records", "delete records up to an offset"),
    "leader-election": ("krafty.leader_election", "elect preferred or unclean leaders"),
    "reassign-partitions": ("krafty.reassign_partitions", "move partition replicas between brokers"),
    "log-dirs": ("krafty.log_dirs", "describe brokers' log dirs"),
    "dump-log": ("krafty.dump_log", "print log segments, indexes, snapshots and the metadata log "
                 "(kafka-dump-log.sh)"),
    "acls": ("krafty.acls", "add, remove, list ACLs"),
    "features": ("krafty.features", "describe, upgrade, downgrade, disable feature levels such as metadata.version"),
    "metadata-quorum": ("krafty.metadata_quorum", "describe the metadata quorum, add and remove controllers"),
    "transactions": ("krafty.transactions", "list, describe, find hanging and abort transactions"),
    "storage": ("krafty.storage", "format a node's directories, show their cluster identity, make a cluster id"),
    "healthcheck": ("krafty.healthcheck", "exit 0 when a broker answers ApiVersions / a controller is in the quorum"),
    "chaos": ("chaos.runner", "run a cluster under faults and check the history"),
    "mirror": ("mirror.runner", "replicate topics, consumer-group offsets and configs between clusters "
               "(MirrorMaker 2's config file)"),
}
# verb -> the modules that come with an extra, not with krafty itself, and the extra that brings each
EXTRAS = {"chaos": {"confluent_kafka": "chaos", "yaml": "chaos"}, "mirror": {"confluent_kafka": "mirror"}}
LOG_LEVELS = {"TRACE": 5, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
              "WARNING": logging.WARNING, "ERROR": logging.ERROR, "FATAL": logging.CRITICAL,
              "CRITICAL": logging.CRITICAL, "OFF": logging.CRITICAL + 10}


def _leading_log_level(argv: list[str]) -> tuple[str | None, list[str]]:
    """``--log-level LEVEL`` (or ``--log-level=LEVEL``) before the verb, and the rest."""
    if argv and argv[0] == "--log-level" and len(argv) > 1:
        return argv[1], argv[2:]
    if argv and argv[0].startswith("--log-level="):
        return argv[0].split("=", 1)[1], argv[1:]
    return None, argv


def run_verb(verb: str, argv: list[str]) -> int:
    import importlib

    module, _ = VERBS[verb]
    try:  # (a module of an extra may also be imported late, e.g. chaos --cluster compose's yaml)
        return importlib.import_module(module).main(argv)
    except ModuleNotFoundError as e:
        extra = EXTRAS.get(verb, {}).get((e.name or "").split(".")[0])
        if extra is None:
            raise
        print(f"krafty {verb} needs the '{extra}' extra ({e.name} is not installed): "
              f"pip install 'krafty[{extra}]'", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    level, argv = _leading_log_level(argv)
    if level is not None and level.upper() not in LOG_LEVELS:
        print(f"krafty: --log-level {level!r}: expected one of {', '.join(LOG_LEVELS)}", file=sys.stderr)
        return 2
    if argv and argv[0] in VERBS:
        _setup_logging(level or "ERROR")  # tools are quiet unless asked: errors are their one line
        return run_verb(argv[0], argv[1:])
    if argv[:2] == ["cluster", "health"]:
        _setup_logging(level or "ERROR")
        from krafty.cluster_health import main as health_main
        return health_main(argv[2:])
    if level is not None:
        argv = ["--log-level", level, *argv]
    p = argparse.ArgumentParser(prog="krafty", description="A Kafka-compatible broker cluster")
    p.add_argument("--log-level", default="INFO", type=str.upper, choices=list(LOG_LEVELS),
                   help="the log level of any verb, given before it (default: INFO for node and cluster up, "
                   "ERROR for the tools)")
    sub = p.add_subparsers(dest="cmd", required=True)
    node = sub.add_parser("node", help="run a node (broker, controller or both)")
    node.add_argument("--config", required=True, help="server.properties file (Kafka key names)")
    node.add_argument("--override", action="append", metavar="KEY=VALUE", help="override a config key")
    node.set_defaults(fn=cmd_node)
    for verb, (_, text) in VERBS.items():
        sub.add_parser(verb, help=f"{text} (see: krafty {verb} --help)")
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
    csub.add_parser("health", help="brokers up, the active controller, leaderless and under-replicated partitions; "
                    "exit 1 when unhealthy (see: krafty cluster health --help)")
    args = p.parse_args(argv)
    _setup_logging(args.log_level)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
