"""What the partition tools (``krafty delete-records``, ``leader-election``, ``reassign-partitions``,
``log-dirs``) share: the Kafka-style options every network tool takes (--bootstrap-server,
--command-config), the admin client (krafty/consumer_groups.py's GroupAdmin over
broker/protocol/client.py), JSON files as Kafka's tools read them, and one-line errors."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from broker.security.sasl import client_security_from_properties
from common.config import ConfigError, parse_properties
from common.errors import ErrorCode
from krafty.consumer_groups import GroupAdmin, ToolError, parse_bootstrap


class UsageError(Exception):
    """A bad command line (exit code 2, as argparse)."""


class Parser(argparse.ArgumentParser):
    def error(self, message):  # exit code 2 and the usage, with one clear line
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def add_connection_options(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--bootstrap-server", required=required, metavar="HOST:PORT[,HOST:PORT]",
                   help="the brokers to connect to")
    p.add_argument("--command-config", metavar="FILE",
                   help="Kafka client properties for the connection (security.protocol, sasl.*, ssl.*)")


def command_config_security(path: str | None):
    """The TLS/SASL settings of a --command-config properties file (None: PLAINTEXT)."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            props = {k: v for k, v, _ in parse_properties(f.read())}
    except OSError as e:
        raise UsageError(f"cannot read --command-config {path}: {e.strerror}") from None
    try:
        return client_security_from_properties(props)
    except (ConfigError, ValueError) as e:
        raise UsageError(f"--command-config {path}: {e}") from None


def make_admin(args, versions: dict[int, tuple[int, int]], client_id: str, timeout_s: float = 30.0) -> GroupAdmin:
    try:
        bootstrap = parse_bootstrap(args.bootstrap_server)
    except ToolError as e:
        raise UsageError(str(e)) from None
    return GroupAdmin(bootstrap, timeout_s, security=command_config_security(args.command_config),
                      versions=versions, client_id=client_id)


def read_json_file(path: str, option: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise UsageError(f"cannot read {option} {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{option} {path} is not valid JSON: {e}") from None


def error_text(code: int, message: str | None = None) -> str:
    """``NAME: message`` for a Kafka error code."""
    try:
        name = ErrorCode(int(code)).name
    except ValueError:
        name = f"error code {int(code)}"
    return f"{name}: {message}" if message else name


def run_tool(name: str, main_coro_factory) -> int:
    """Run a tool's coroutine: 0/its code; 1 with one line when the cluster cannot be reached or
    refuses; 2 for a bad command line."""
    try:
        return asyncio.run(main_coro_factory())
    except UsageError as e:
        print(f"{name}: error: {e}", file=sys.stderr)
        return 2
    except ToolError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
