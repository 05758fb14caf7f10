"""The ``krafty`` command line."""

from __future__ import annotations

import argparse
import asyncio
import logging
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
    try:
        cfg = Config.from_file(args.config, args.override or [])
    except ConfigError as e:
        print(f"krafty: {e}", file=sys.stderr)
        return 2
    from krafty.node import run_node
    try:
        return _run(run_node(cfg))
    except ConfigError as e:
        print(f"krafty: {e}", file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "metadata-quorum":
        from raft.cli import main as mq_main
        return mq_main(argv[1:])
    p = argparse.ArgumentParser(prog="krafty", description="A Kafka-compatible broker cluster")
    p.add_argument("--log-level", default="INFO")
    sub = p.add_subparsers(dest="cmd", required=True)
    node = sub.add_parser("node", help="run a node (broker, controller or both)")
    node.add_argument("--config", required=True, help="server.properties file (Kafka key names)")
    node.add_argument("--override", action="append", metavar="KEY=VALUE", help="override a config key")
    node.set_defaults(fn=cmd_node)
    sub.add_parser("metadata-quorum", help="describe the metadata quorum (see: krafty metadata-quorum --help)")
    args = p.parse_args(argv)
    _setup_logging(args.log_level)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
