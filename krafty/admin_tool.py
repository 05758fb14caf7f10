"""What krafty's admin tools share (``consumer-groups``, ``transactions``, ``topics``, ``get-offsets``,
``delete-records``, ``leader-election``, ``reassign-partitions``, ``log-dirs``, ``configs``, ``acls``,
``features``, ...): the Kafka-style options every network tool takes (--bootstrap-server,
--command-config), the admin client (AdminClient over broker/protocol/client.py, one connection
per broker, versions negotiated with ApiVersions), JSON files as Kafka's tools read them, and
one-line errors: exit code 1 with one line when no broker answers or the cluster refuses, 2 for a
bad command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import uuid

from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from broker.security.sasl import client_security_from_properties
from common.config import ConfigError, parse_properties
from common.errors import ErrorCode

# what every tool may send; a tool widens or adds with AdminClient(versions=...) or a subclass
BASE_VERSIONS = {
    ApiKey.METADATA: (1, 12),
    ApiKey.LIST_OFFSETS: (1, 7),
}


class UsageError(Exception):
    """A bad command line (exit code 2, as argparse)."""


class ToolError(Exception):
    """A failure to report to the user (one line, no traceback)."""


def err_code(code) -> ErrorCode | int:
    try:
        return ErrorCode(int(code))
    except ValueError:
        return int(code)


def err_name(code) -> str:
    e = err_code(code)
    return e.name if isinstance(e, ErrorCode) else f"error code {e}"


def parse_bootstrap(value: str) -> list[tuple[str, int]]:
    out = []
    for part in value.split(","):
        part = part.strip()
        m = re.fullmatch(r"\[?([^\[\]]+?)\]?:(\d+)", part)
        if not m or not 0 < int(m.group(2)) < 65536:
            raise ToolError(f"--bootstrap-server {value!r}: expected HOST:PORT[,HOST:PORT...], got {part!r}")
        out.append((m.group(1), int(m.group(2))))
    return out


class AdminClient:
    """The requests behind the tools, over KafkaConnection (one connection per broker)."""

    our_versions = BASE_VERSIONS  # what the calling tool speaks (a subclass may widen it)
    client_id = "krafty-admin"

    def __init__(self, bootstrap: list[tuple[str, int]], timeout: float = 5.0, security=None, *,
                 versions: dict[int, tuple[int, int]] | None = None, client_id: str | None = None):
        self.bootstrap = bootstrap
        self.timeout = timeout
        self.security = security  # broker.security.sasl.ClientSecurity (--command-config); None: PLAINTEXT
        self.our_versions = {**self.our_versions, **(versions or {})}
        if client_id is not None:
            self.client_id = client_id
        self.brokers: dict[int, tuple[str, int]] = {}
        self._conns: dict[tuple[str, int], KafkaConnection] = {}
        self._versions: dict[int, tuple[int, int]] = {}
        self._any: tuple[str, int] | None = None

    # ---- plumbing
    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    def _conn(self, addr: tuple[str, int]) -> KafkaConnection:
        c = self._conns.get(addr)
        if c is None:
            c = self._conns[addr] = KafkaConnection(addr[0], addr[1], client_id=self.client_id,
                                                    security=self.security)
        return c

    def version(self, api: int) -> int:
        lo, hi = self.our_versions[api]
        blo, bhi = self._versions.get(api, (-1, -1))
        v = min(hi, bhi)
        if v < max(lo, blo):
            raise ToolError(f"the broker does not support {ApiKey(api).name} (it offers versions "
                            f"{blo}-{bhi}, this tool needs {lo}-{hi})")
        return v

    async def _send(self, addr: tuple[str, int], api: int, data: dict, version: int | None = None):
        v = self.version(api) if version is None else version
        try:
            return await self._conn(addr).request(api, v, data, timeout=self.timeout)
        except (ConnectionError, OSError, TimeoutError) as e:
            raise ToolError(f"{ApiKey(api).name} to {addr[0]}:{addr[1]} failed: {e}") from None

    async def start(self) -> None:
        errors = []
        for addr in self.bootstrap:
            try:
                c = self._conn(addr)
                await c.connect(timeout=self.timeout)
                r = await c.request(ApiKey.API_VERSIONS, 3, {"client_software_name": self.client_id,
                                                             "client_software_version": "1"},
                                    timeout=self.timeout)
                if int(r.error_code) != 0:
                    raise ConnectionError(f"ApiVersions failed: {err_name(r.error_code)}")
                self._versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in r.api_keys}
                self._any = addr
                await self.refresh_brokers()
                return
            except (ConnectionError, OSError, TimeoutError) as e:
                self._conns.pop(addr, None)
                errors.append(f"{addr[0]}:{addr[1]}: {e or type(e).__name__}")
        raise ToolError("cannot connect to any --bootstrap-server (" + "; ".join(errors) + ")")

    async def metadata(self, topics: list[str] | None = None):
        req_topics = None if topics is None else [{"name": t, "topic_id": uuid.UUID(int=0)} for t in topics]
        r = await self._send(self._any, ApiKey.METADATA, {"topics": req_topics, "allow_auto_topic_creation": False,
                                                           "include_topic_authorized_operations": False})
        self.brokers = {int(b.node_id): (b.host, int(b.port)) for b in r.brokers}
        return r

    async def refresh_brokers(self) -> None:
        await self.metadata([])

    async def partitions(self, topics: list[str] | None) -> dict[str, dict[int, int]]:
        """{topic: {partition: leader}} for existing topics (all topics when None)."""
        r = await self.metadata(topics)
        out: dict[str, dict[int, int]] = {}
        for t in r.topics:
            if int(t.error_code) == 0 and t.name is not None:
                out[t.name] = {int(p.partition_index): int(p.leader_id) for p in t.partitions}
        return out

    async def list_offsets(self, tps: list[tuple[str, int]], timestamp: int,
                           leaders: dict[str, dict[int, int]]) -> dict[tuple[str, int], int]:
        """{tp: offset} for a ListOffsets spec (EARLIEST, LATEST or a time in ms); -1 = none."""
        for t, p in tps:
            leader = leaders.get(t, {}).get(p, -1)
            if leader < 0 or leader not in self.brokers:
                raise ToolError(f"partition {t}-{p} has no leader at the moment; try again")
        out = {}
        for (t, p), (code, offset) in (await self.list_offsets_each(tps, timestamp, leaders)).items():
            if code != 0:
                raise ToolError(f"ListOffsets for {t}-{p} failed: {err_name(code)}")
            out[(t, p)] = offset
        return out

    async def list_offsets_each(self, tps: list[tuple[str, int]], timestamp: int, leaders: dict[str, dict[int, int]],
                                isolation_level: int = 0) -> dict[tuple[str, int], tuple[int, int]]:
        """{tp: (error code, offset)}, each asked of its leader (LEADER_NOT_AVAILABLE without one)."""
        by_leader: dict[int, list[tuple[str, int]]] = {}
        out: dict[tuple[str, int], tuple[int, int]] = {}
        for t, p in tps:
            leader = leaders.get(t, {}).get(p, -1)
            if leader < 0 or leader not in self.brokers:
                out[(t, p)] = (ErrorCode.LEADER_NOT_AVAILABLE, -1)
            else:
                by_leader.setdefault(leader, []).append((t, p))
        for leader, items in by_leader.items():
            topics: dict[str, list] = {}
            for t, p in items:
                topics.setdefault(t, []).append({"partition_index": p, "timestamp": timestamp,
                                                 "current_leader_epoch": -1})
            data = {"replica_id": -1, "isolation_level": isolation_level,
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
            if self.version(ApiKey.LIST_OFFSETS) >= 10:
                data["timeout"] = int(self.timeout * 1000)
            r = await self._send(self.brokers[leader], ApiKey.LIST_OFFSETS, data)
            for t in r.topics:
                for p in t.partitions:
                    out[(t.name, int(p.partition_index))] = (int(p.error_code), int(p.offset))
        return out


class Parser(argparse.ArgumentParser):
    def error(self, message):  # exit code 2 and the usage, with one clear line
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def add_connection_options(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--bootstrap-server", required=required, metavar="HOST:PORT[,HOST:PORT]",
                   help="the brokers to connect to")
    p.add_argument("--command-config", metavar="FILE",
                   help="Kafka client properties for the connection (security.protocol, sasl.*, ssl.*)")


def read_properties(path: str, option: str) -> dict[str, str]:
    """A Java properties file given on the command line (--command-config, --producer.config, ...)."""
    try:
        with open(path, encoding="utf-8") as f:
            return {k: v for k, v, _ in parse_properties(f.read())}
    except OSError as e:
        raise UsageError(f"cannot read {option} {path}: {e.strerror}") from None


def security_of(props: dict[str, str], where: str):
    """The TLS/SASL settings of Kafka client properties (None: PLAINTEXT)."""
    if not props:
        return None
    try:
        return client_security_from_properties(props)
    except (ConfigError, ValueError) as e:
        raise UsageError(f"{where}: {e}") from None


def command_config_security(path: str | None):
    """The TLS/SASL settings of a --command-config properties file (None: PLAINTEXT)."""
    if not path:
        return None
    return security_of(read_properties(path, "--command-config"), f"--command-config {path}")


async def connect_any(args, client_id: str, timeout_s: float = 5.0) -> KafkaConnection:
    """One connection to the first --bootstrap-server that answers (for tools that send every
    request to one broker); ConnectionError naming each address tried when none does."""
    try:
        bootstrap = parse_bootstrap(args.bootstrap_server)
    except ToolError as e:
        raise UsageError(str(e)) from None
    security = command_config_security(getattr(args, "command_config", None))
    errors = []
    for host, port in bootstrap:
        conn = KafkaConnection(host, port, client_id=client_id, security=security)
        try:
            await conn.connect(timeout=timeout_s)
            return conn
        except (OSError, ConnectionError, TimeoutError) as e:
            conn.close()
            errors.append(f"{host}:{port}: {e or type(e).__name__}")
    raise ConnectionError("cannot connect to any --bootstrap-server (" + "; ".join(errors) + ")")


def make_admin(args, versions: dict[int, tuple[int, int]], client_id: str, timeout_s: float = 30.0) -> AdminClient:
    try:
        bootstrap = parse_bootstrap(args.bootstrap_server)
    except ToolError as e:
        raise UsageError(str(e)) from None
    return AdminClient(bootstrap, timeout_s, security=command_config_security(args.command_config),
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
