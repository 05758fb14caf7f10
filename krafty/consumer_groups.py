"""``krafty consumer-groups`` -- Kafka's kafka-consumer-groups.sh for krafty (and any Kafka).

    consumer-groups --bootstrap-server H:P --list [--state [STATE,...]]
    consumer-groups --bootstrap-server H:P --describe --group G [--members [--verbose] | --state]
    consumer-groups --bootstrap-server H:P --delete --group G
    consumer-groups --bootstrap-server H:P --reset-offsets --group G (--topic T[:P,P] ... | --all-topics)
        (--to-earliest | --to-latest | --to-current | --to-offset N | --shift-by N
         | --to-datetime YYYY-MM-DDTHH:mm:SS.sss | --by-duration PnDTnHnMnS) [--dry-run | --execute]
    consumer-groups --bootstrap-server H:P --delete-offsets --group G --topic T[:P,P]

It speaks the Kafka protocol through krafty's own client (broker/protocol/client.py): the
group's coordinator is found with FindCoordinator, groups are read with ListGroups and
DescribeGroups, offsets with OffsetFetch and ListOffsets (at each partition's leader), and
written with OffsetCommit (as an admin: generation -1, no member id), exactly like Kafka's
AdminClient does. Output columns and messages follow Kafka's tool.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import re
import struct
import sys
from dataclasses import dataclass, field

from broker.protocol.apis import ApiKey
from common.clock import SYSTEM
from common.errors import ErrorCode
from krafty.admin_tool import (
    AdminClient,
    Parser,
    ToolError,
    UsageError,
    command_config_security,
    parse_bootstrap,
)
from krafty.admin_tool import err_code as _err
from krafty.admin_tool import err_name as _err_name

CLIENT_ID = "krafty-consumer-groups"
EARLIEST, LATEST = -2, -1

# The versions this tool can speak, per API: the highest both sides support is used.
OUR_VERSIONS = {
    ApiKey.METADATA: (1, 12),
    ApiKey.FIND_COORDINATOR: (1, 4),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.OFFSET_FETCH: (2, 8),
    ApiKey.OFFSET_COMMIT: (2, 8),
    ApiKey.LIST_OFFSETS: (1, 7),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
}

_COORDINATOR_RETRY = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                      ErrorCode.NOT_COORDINATOR}


# --------------------------------------------------------------------- consumer protocol
def decode_assignment(data: bytes) -> list[tuple[str, int]]:
    """The partitions in a ConsumerProtocolAssignment (any version):
    version int16 | [topic string, [partition int32]] | user_data bytes."""
    if not data or len(data) < 6:
        return []
    pos = 2
    out: list[tuple[str, int]] = []
    (n_topics,) = struct.unpack_from(">i", data, pos)
    pos += 4
    for _ in range(max(0, n_topics)):
        (tlen,) = struct.unpack_from(">h", data, pos)
        pos += 2
        topic = data[pos:pos + tlen].decode("utf-8", "replace")
        pos += tlen
        (n_parts,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for _ in range(max(0, n_parts)):
            (p,) = struct.unpack_from(">i", data, pos)
            pos += 4
            out.append((topic, p))
    return out


# ------------------------------------------------------------------------------ client
@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: list[tuple[str, int]]


@dataclass
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[Member] = field(default_factory=list)
    coordinator: tuple[int, str, int] | None = None
    error: ErrorCode | int = ErrorCode.NONE


class GroupAdmin(AdminClient):
    """The group requests behind the tool, over krafty.admin_tool.AdminClient's connections."""

    our_versions = OUR_VERSIONS  # what the calling tool speaks (a subclass may widen it)
    client_id = CLIENT_ID

    async def find_coordinator(self, group: str, deadline: float | None = None, key_type: int = 0,
                               what: str = "group") -> tuple[int, str, int]:
        deadline = deadline or SYSTEM.monotonic() + max(self.timeout, 10.0)
        last = "no answer"
        while True:
            v = self.version(ApiKey.FIND_COORDINATOR)
            r = await self._send(self._any, ApiKey.FIND_COORDINATOR,
                                 {"key": group, "key_type": key_type, "coordinator_keys": [group]}, v)
            c = r.coordinators[0] if v >= 4 else r
            code = _err(c.error_code)
            if code == ErrorCode.NONE:
                return int(c.node_id), c.host, int(c.port)
            last = _err_name(code)
            if code not in _COORDINATOR_RETRY or SYSTEM.monotonic() > deadline:
                raise ToolError(f"FindCoordinator for {what} '{group}' failed: {last}")
            await asyncio.sleep(0.2)

    async def _coordinated(self, group: str, api: int, data: dict, error_of):
        """Send to the group's coordinator; find it again on NOT_COORDINATOR and the like."""
        deadline = SYSTEM.monotonic() + max(self.timeout, 10.0)
        while True:
            node = await self.find_coordinator(group, deadline)
            r = await self._send((node[1], node[2]), api, data)
            code = _err(error_of(r))
            if code in _COORDINATOR_RETRY and SYSTEM.monotonic() < deadline:
                await asyncio.sleep(0.2)
                continue
            return node, r

    # ---- groups
    async def list_groups(self) -> list[tuple[str, str, str]]:
        """(group, protocol_type, state) from every broker."""
        if not self.brokers:
            await self.refresh_brokers()
        seen: dict[str, tuple[str, str, str]] = {}
        self.group_types: dict[str, str] = {}  # group -> classic | consumer (ListGroups v5)
        v = self.version(ApiKey.LIST_GROUPS)
        for node, addr in sorted(self.brokers.items()):
            r = await self._send(addr, ApiKey.LIST_GROUPS, {"states_filter": [], **({"types_filter": []} if v >= 5
                                                                                   else {})}, version=v)
            if int(r.error_code) != 0:
                raise ToolError(f"ListGroups on broker {node} failed: {_err_name(r.error_code)}")
            for g in r.groups:
                seen[g.group_id] = (g.group_id, g.protocol_type, getattr(g, "group_state", ""))
                self.group_types[g.group_id] = getattr(g, "group_type", "") or "classic"
        return sorted(seen.values())

    async def describe_group(self, group: str) -> GroupDescription:
        node, r = await self._coordinated(group, ApiKey.DESCRIBE_GROUPS,
                                          {"groups": [group], "include_authorized_operations": False},
                                          lambda r: r.groups[0].error_code)
        g = r.groups[0]
        if (_err(g.error_code) == ErrorCode.GROUP_ID_NOT_FOUND or g.group_state == "Dead") \
                and ApiKey.CONSUMER_GROUP_DESCRIBE in self._versions:
            return await self._describe_consumer_group(group)  # a KIP-848 group, as Kafka 4's tool does
        d = GroupDescription(group, g.group_state, g.protocol_type, g.protocol_data, coordinator=node,
                             error=_err(g.error_code))
        for m in g.members:
            assignment = []
            if g.protocol_type in ("consumer", ""):
                try:
                    assignment = decode_assignment(bytes(m.member_assignment))
                except struct.error:
                    assignment = []
            d.members.append(Member(m.member_id, getattr(m, "group_instance_id", None), m.client_id,
                                    m.client_host, assignment))
        return d

    async def _describe_consumer_group(self, group: str) -> GroupDescription:
        """ConsumerGroupDescribe: the protocol column shows the group's server-side assignor."""
        node, r = await self._coordinated(group, ApiKey.CONSUMER_GROUP_DESCRIBE,
                                          {"group_ids": [group], "include_authorized_operations": False},
                                          lambda r: r.groups[0].error_code)
        g = r.groups[0]
        d = GroupDescription(group, g.group_state or "Dead", "consumer", g.assignor_name, coordinator=node,
                             error=_err(g.error_code))
        for m in g.members:
            d.members.append(Member(m.member_id, m.instance_id, m.client_id, m.client_host,
                                    [(tp.topic_name, p) for tp in m.assignment.topic_partitions
                                     for p in tp.partitions]))
        return d

    async def committed_offsets(self, group: str) -> dict[tuple[str, int], int]:
        v = self.version(ApiKey.OFFSET_FETCH)
        if v >= 8:
            data = {"groups": [{"group_id": group, "topics": None}], "require_stable": False}

            def error_of(r):
                return r.groups[0].error_code
        else:
            data = {"group_id": group, "topics": None, "require_stable": False}

            def error_of(r):
                return r.error_code
        _, r = await self._coordinated(group, ApiKey.OFFSET_FETCH, data, error_of)
        code = _err(error_of(r))
        if code != ErrorCode.NONE:
            raise ToolError(f"OffsetFetch for group '{group}' failed: {_err_name(code)}")
        topics = r.groups[0].topics if v >= 8 else r.topics
        out = {}
        for t in topics:
            for p in t.partitions:
                if int(p.error_code) == 0 and int(p.committed_offset) >= 0:
                    out[(t.name, int(p.partition_index))] = int(p.committed_offset)
        return out

    async def commit_offsets(self, group: str, offsets: dict[tuple[str, int], int]) -> dict:
        topics: dict[str, list] = {}
        for (t, p), off in sorted(offsets.items()):
            topics.setdefault(t, []).append({"partition_index": p, "committed_offset": off,
                                             "committed_leader_epoch": -1, "committed_metadata": ""})
        data = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                "group_instance_id": None, "retention_time": -1,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

        def first_error(r):
            for t in r.topics:
                for p in t.partitions:
                    if int(p.error_code) != 0:
                        return p.error_code
            return 0
        _, r = await self._coordinated(group, ApiKey.OFFSET_COMMIT, data, first_error)
        return {(t.name, int(p.partition_index)): _err(p.error_code) for t in r.topics for p in t.partitions}

    async def delete_group(self, group: str) -> ErrorCode | int:
        _, r = await self._coordinated(group, ApiKey.DELETE_GROUPS, {"groups_names": [group]},
                                       lambda r: r.results[0].error_code)
        return _err(r.results[0].error_code)

    async def delete_offsets(self, group: str, tps: list[tuple[str, int]]):
        topics: dict[str, list] = {}
        for t, p in tps:
            topics.setdefault(t, []).append({"partition_index": p})
        _, r = await self._coordinated(group, ApiKey.OFFSET_DELETE,
                                       {"group_id": group,
                                        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]},
                                       lambda r: r.error_code)
        return _err(r.error_code), {(t.name, int(p.partition_index)): _err(p.error_code)
                                     for t in r.topics for p in t.partitions}


# ---------------------------------------------------------------------------- formatting
def table(header: tuple[str, ...], rows: list[tuple]) -> str:
    cells = [header] + [tuple("-" if c is None else str(c) for c in row) for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


OFFSETS_HEADER = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                  "HOST", "CLIENT-ID")
MEMBERS_HEADER = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
STATE_HEADER = ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")
RESET_HEADER = ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")


def _assignment_str(assignment: list[tuple[str, int]]) -> str:
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(assignment):
        by_topic.setdefault(t, []).append(p)
    return ",".join(f"{t}({','.join(map(str, ps))})" for t, ps in by_topic.items()) or "-"


# ---------------------------------------------------------------------------- arguments
_DATETIME = re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?)(Z|[+-]\d{2}:?\d{2})?")
_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?")


def parse_datetime_ms(value: str) -> int:
    m = _DATETIME.fullmatch(value.strip())
    if not m:
        raise ToolError(f"--to-datetime {value!r}: expected YYYY-MM-DDTHH:mm:SS.sss "
                        "(optionally with a zone: Z or +HH:mm), e.g. 2026-01-31T13:45:00.000")
    try:
        dt = datetime.datetime.fromisoformat(m.group(1))
        zone = m.group(2)
        if zone == "Z":
            dt = dt.replace(tzinfo=datetime.UTC)
        elif zone:
            z = zone.replace(":", "")
            off = datetime.timedelta(hours=int(z[1:3]), minutes=int(z[3:5]))
            dt = dt.replace(tzinfo=datetime.timezone(off if z[0] == "+" else -off))
        else:
            dt = dt.astimezone()  # local time, like Kafka's tool
    except ValueError as e:
        raise ToolError(f"--to-datetime {value!r}: {e}") from None
    return int(dt.timestamp() * 1000)


def parse_duration_ms(value: str) -> int:
    m = _DURATION.fullmatch(value.strip())
    if not m or value.strip() in ("P", "PT") or value.strip().endswith("T"):
        raise ToolError(f"--by-duration {value!r}: expected an ISO-8601 duration PnDTnHnMnS, e.g. PT1H30M")
    d, h, mi, s = m.groups()
    return int(((int(d or 0) * 24 + int(h or 0)) * 60 + int(mi or 0)) * 60_000 + float(s or 0) * 1000)


def parse_topic_specs(values: list[str]) -> list[tuple[str, list[int] | None]]:
    out = []
    for v in values:
        topic, sep, parts = v.partition(":")
        if not topic:
            raise ToolError(f"--topic {v!r}: the topic name is empty")
        if not sep:
            out.append((topic, None))
            continue
        try:
            ps = [int(x) for x in parts.split(",") if x.strip() != ""]
        except ValueError:
            raise ToolError(f"--topic {v!r}: expected TOPIC or TOPIC:PARTITION[,PARTITION...] "
                            "with integer partitions") from None
        if not ps or any(p < 0 for p in ps):
            raise ToolError(f"--topic {v!r}: expected TOPIC:PARTITION[,PARTITION...] with partitions >= 0")
        out.append((topic, ps))
    return out


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="krafty consumer-groups",
               description="List, describe, delete consumer groups and reset their offsets "
                           "(like Kafka's kafka-consumer-groups.sh).")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT[,HOST:PORT]", help="brokers to connect to (required)")
    p.add_argument("--command-config", metavar="FILE", help="Kafka client properties for the connection "
                   "(security.protocol, sasl.*, ssl.*)")
    p.add_argument("--timeout", type=int, default=5000, metavar="MS", help="timeout per request (default 5000)")
    a = p.add_argument_group("actions (exactly one)")
    a.add_argument("--list", action="store_true", help="list all consumer groups")
    a.add_argument("--describe", action="store_true", help="describe groups: offsets and lag (default view), "
                                                           "--members or --state")
    a.add_argument("--delete", action="store_true", help="delete groups (they must have no members)")
    a.add_argument("--reset-offsets", action="store_true", help="reset committed offsets (dry run unless --execute)")
    a.add_argument("--delete-offsets", action="store_true", help="delete a group's committed offsets for topics")
    p.add_argument("--group", action="append", metavar="GROUP", help="the group (repeatable)")
    p.add_argument("--all-groups", action="store_true", help="every group (describe, delete, reset-offsets)")
    p.add_argument("--members", action="store_true", help="with --describe: the members")
    p.add_argument("--verbose", action="store_true", help="with --describe --members: each member's assignment")
    p.add_argument("--state", nargs="?", const="", default=None, metavar="STATE,...",
                   help="with --describe: the group state; with --list: show (or filter by) states")
    p.add_argument("--type", nargs="?", const="", default=None, metavar="TYPE,...",
                   help="with --list: show (or filter by) group types: classic, consumer")
    p.add_argument("--topic", action="append", metavar="TOPIC[:P,P]", help="reset/delete-offsets scope (repeatable)")
    p.add_argument("--all-topics", action="store_true", help="reset-offsets scope: every topic the group committed")
    s = p.add_argument_group("reset-offsets target (exactly one)")
    s.add_argument("--to-earliest", action="store_true")
    s.add_argument("--to-latest", action="store_true")
    s.add_argument("--to-current", action="store_true")
    s.add_argument("--to-offset", type=int, metavar="N")
    s.add_argument("--shift-by", type=int, metavar="N")
    s.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss")
    s.add_argument("--by-duration", metavar="PnDTnHnMnS")
    p.add_argument("--dry-run", action="store_true", help="only show the new offsets (the default)")
    p.add_argument("--execute", action="store_true", help="apply the reset")
    return p


RESET_TARGETS = ("to_earliest", "to_latest", "to_current", "to_offset", "shift_by", "to_datetime", "by_duration")


def _opt(name: str) -> str:
    return "--" + name.replace("_", "-")


def validate(args) -> None:
    actions = [n for n in ("list", "describe", "delete", "reset_offsets", "delete_offsets") if getattr(args, n)]
    if len(actions) != 1:
        raise ToolError("exactly one action is needed: --list, --describe, --delete, --reset-offsets or "
                        f"--delete-offsets (got {', '.join(map(_opt, actions)) or 'none'})")
    if not args.bootstrap_server:
        raise ToolError("missing required option --bootstrap-server HOST:PORT")
    if args.timeout <= 0:
        raise ToolError(f"--timeout {args.timeout}: must be a positive number of milliseconds")
    action = actions[0]
    targets = [t for t in RESET_TARGETS if getattr(args, t) not in (None, False)]
    if action == "list":
        if args.group or args.all_groups:
            raise ToolError("--list takes no --group/--all-groups (use --describe)")
    elif not (args.group or args.all_groups):
        raise ToolError(f"{_opt(action)} needs --group GROUP (or --all-groups)")
    if args.group and args.all_groups:
        raise ToolError("use either --group or --all-groups, not both")
    if args.group and any(not g for g in args.group):
        raise ToolError("--group: the group id is empty")
    if action != "describe" and (args.members or args.verbose):
        raise ToolError("--members and --verbose only go with --describe")
    if args.members and args.state is not None:
        raise ToolError("--describe takes at most one of --members, --state")
    if action == "describe" and args.state:
        raise ToolError(f"--state {args.state!r}: with --describe, --state takes no value")
    if action not in ("list", "describe") and args.state is not None:
        raise ToolError("--state only goes with --list or --describe")
    if action != "list" and args.type is not None:
        raise ToolError("--type only goes with --list")
    if action != "reset_offsets":
        if targets:
            raise ToolError(f"{_opt(targets[0])} only goes with --reset-offsets")
        if args.execute or args.dry_run:
            raise ToolError("--execute and --dry-run only go with --reset-offsets")
        if args.all_topics:
            raise ToolError("--all-topics only goes with --reset-offsets")
    if action not in ("reset_offsets", "delete_offsets") and args.topic:
        raise ToolError("--topic only goes with --reset-offsets or --delete-offsets")
    if action == "reset_offsets":
        if len(targets) != 1:
            raise ToolError("--reset-offsets needs exactly one of " + ", ".join(map(_opt, RESET_TARGETS))
                            + (f" (got {', '.join(map(_opt, targets))})" if targets else ""))
        if bool(args.topic) == bool(args.all_topics):
            raise ToolError("--reset-offsets needs exactly one of --topic TOPIC[:P,P] or --all-topics")
        if args.execute and args.dry_run:
            raise ToolError("use either --execute or --dry-run, not both")
        if args.to_datetime is not None:
            parse_datetime_ms(args.to_datetime)
        if args.by_duration is not None:
            parse_duration_ms(args.by_duration)
    if action == "delete_offsets":
        if not args.topic:
            raise ToolError("--delete-offsets needs --topic TOPIC[:P,P]")
        if args.all_groups or len(args.group or []) != 1:
            raise ToolError("--delete-offsets takes exactly one --group")
    if args.topic:
        parse_topic_specs(args.topic)


# ------------------------------------------------------------------------------- actions
class Tool:
    """The tool's actions; `krafty share-groups` is the same tool over share groups (a subclass)."""

    admin_class = GroupAdmin

    def __init__(self, args, out=None, err=None):
        self.args = args
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.admin = self.admin_class(parse_bootstrap(args.bootstrap_server), args.timeout / 1000,
                                      command_config_security(args.command_config))
        self.rc = 0

    def print(self, text: str = "") -> None:
        print(text, file=self.out)

    def error(self, text: str) -> None:
        print(f"Error: {text}", file=self.err)
        self.rc = 1

    async def run(self) -> int:
        try:
            await self.admin.start()
            a = self.args
            if a.list:
                await self.do_list()
            elif a.describe:
                await self.do_describe()
            elif a.delete:
                await self.do_delete()
            elif a.reset_offsets:
                await self.do_reset()
            else:
                await self.do_delete_offsets()
        finally:
            self.admin.close()
        return self.rc

    async def groups(self) -> list[str]:
        if self.args.all_groups:
            return [g for g, ptype, _ in await self.admin.list_groups() if ptype in ("consumer", "")]
        return list(dict.fromkeys(self.args.group))

    async def do_list(self) -> None:
        groups = await self.admin.list_groups()
        state, gtype = self.args.state, self.args.type
        if state is None and gtype is None:
            for g, _, _ in groups:
                self.print(g)
            return
        wanted = {s.strip().lower() for s in (state or "").split(",") if s.strip()}
        types = {s.strip().lower() for s in (gtype or "").split(",") if s.strip()}
        types_of = self.admin.group_types
        rows = [(g, types_of.get(g, "classic"), st) for g, _, st in groups
                if (not wanted or st.lower() in wanted) and (not types or types_of.get(g, "classic") in types)]
        # Kafka 4's columns: GROUP TYPE STATE, GROUP TYPE, or GROUP STATE
        if gtype is not None and state is not None:
            self.print(table(("GROUP", "TYPE", "STATE"), rows))
        elif gtype is not None:
            self.print(table(("GROUP", "TYPE"), [(g, t) for g, t, _ in rows]))
        else:
            self.print(table(("GROUP", "STATE"), [(g, st) for g, _, st in rows]))

    async def do_describe(self) -> None:
        for i, group in enumerate(await self.groups()):
            if i:
                self.print()
            d = await self.admin.describe_group(group)
            if d.error == ErrorCode.GROUP_ID_NOT_FOUND or (d.error == ErrorCode.NONE and d.state == "Dead"):
                self.error(f"Consumer group '{group}' does not exist.")
                continue
            if d.error != ErrorCode.NONE:
                self.error(f"DescribeGroups for '{group}' failed: {_err_name(d.error)}")
                continue
            if d.protocol_type not in ("consumer", ""):
                self.error(f"Group '{group}' is not a consumer group (protocol type {d.protocol_type!r}).")
                continue
            if self.args.state is not None:
                node, host, port = d.coordinator
                self.print()
                self.print(table(STATE_HEADER, [(group, f"{host}:{port} ({node})", d.protocol or "",
                                                 d.state, len(d.members))]))
                continue
            self._state_notes(d)
            if self.args.members:
                header = MEMBERS_HEADER + (("ASSIGNMENT",) if self.args.verbose else ())
                rows = []
                for m in sorted(d.members, key=lambda m: m.member_id):
                    row = (group, m.member_id, m.host, m.client_id, len(m.assignment))
                    rows.append(row + ((_assignment_str(m.assignment),) if self.args.verbose else ()))
                if rows:
                    self.print()
                    self.print(table(header, rows))
                continue
            await self._describe_offsets(d)

    def _state_notes(self, d: GroupDescription) -> None:
        if d.state in ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"):
            self.print(f"\nWarning: Consumer group '{d.group_id}' is rebalancing.")
        elif not d.members:
            self.print(f"\nConsumer group '{d.group_id}' has no active members.")

    async def _describe_offsets(self, d: GroupDescription) -> None:
        committed = await self.admin.committed_offsets(d.group_id)
        owner: dict[tuple[str, int], Member] = {}
        for m in d.members:
            for tp in m.assignment:
                owner[tp] = m
        tps = sorted(set(committed) | set(owner))
        leaders = await self.admin.partitions(sorted({t for t, _ in tps})) if tps else {}
        existing = [tp for tp in tps if tp[1] in leaders.get(tp[0], {})]
        try:
            ends = await self.admin.list_offsets(existing, LATEST, leaders) if existing else {}
        except ToolError as e:
            print(f"Warning: log-end offsets unavailable: {e}", file=self.err)
            ends = {}
        rows = []
        for tp in tps:
            cur, end, m = committed.get(tp), ends.get(tp), owner.get(tp)
            lag = max(0, end - cur) if cur is not None and end is not None and end >= 0 else None
            rows.append((d.group_id, tp[0], tp[1], cur, end, lag, m.member_id if m else None,
                         m.host if m else None, m.client_id if m else None))
        for m in sorted(d.members, key=lambda m: m.member_id):
            if not m.assignment:
                rows.append((d.group_id, None, None, None, None, None, m.member_id, m.host, m.client_id))
        if rows:
            self.print()
            self.print(table(OFFSETS_HEADER, rows))

    async def do_delete(self) -> None:
        groups = await self.groups()
        ok, failed = [], []
        for g in groups:
            code = await self.admin.delete_group(g)
            (ok if code == ErrorCode.NONE else failed).append((g, code))
        if ok:
            names = ", ".join(f"'{g}'" for g, _ in ok)
            self.print(f"Deletion of requested consumer groups ({names}) was successful.")
        if failed:
            reasons = {ErrorCode.NON_EMPTY_GROUP: "The group is not empty.",
                       ErrorCode.GROUP_ID_NOT_FOUND: "The group id does not exist."}
            lines = [f"* Group '{g}' could not be deleted due to: {_err_name(c)}"
                     + (f" ({reasons[c]})" if c in reasons else "") for g, c in failed]
            self.error("Deletion of some consumer groups failed:\n" + "\n".join(lines))

    async def _scope(self, group: str, committed: dict[tuple[str, int], int]) -> tuple[list, dict]:
        if self.args.all_topics:
            tps = sorted(committed)
            leaders = await self.admin.partitions(sorted({t for t, _ in tps})) if tps else {}
            return tps, leaders
        specs = parse_topic_specs(self.args.topic)
        leaders = await self.admin.partitions(sorted({t for t, _ in specs}))
        tps = []
        for t, ps in specs:
            if t not in leaders:
                raise ToolError(f"--topic {t}: the topic does not exist")
            for p in ps if ps is not None else sorted(leaders[t]):
                if p not in leaders[t]:
                    raise ToolError(f"--topic {t}:{p}: the topic has no partition {p} "
                                    f"(it has {len(leaders[t])})")
                tps.append((t, p))
        return sorted(set(tps)), leaders

    async def do_reset(self) -> None:
        a = self.args
        if not a.execute and not a.dry_run:
            print("WARN: No action will be performed as the --execute option is missing. "
                  "Add --execute to apply the reset (--dry-run only shows it).", file=self.err)
        for group in await self.groups():
            d = await self.admin.describe_group(group)
            if d.error not in (ErrorCode.NONE, ErrorCode.GROUP_ID_NOT_FOUND):
                self.error(f"DescribeGroups for '{group}' failed: {_err_name(d.error)}")
                continue
            if d.error == ErrorCode.NONE and d.state not in ("Empty", "Dead"):
                self.error(f"Assignments can only be reset if the group '{group}' is inactive, "
                           f"but the current state is {d.state}.")
                continue
            committed = await self.admin.committed_offsets(group)
            tps, leaders = await self._scope(group, committed)
            new = await self._targets(tps, committed, leaders)
            if a.execute and new:
                results = await self.admin.commit_offsets(group, new)
                bad = {tp: c for tp, c in results.items() if c != ErrorCode.NONE}
                if bad:
                    self.error("OffsetCommit failed for " + ", ".join(
                        f"{t}-{p}: {_err_name(c)}" for (t, p), c in sorted(bad.items())))
                    continue
            self.print()
            self.print(table(RESET_HEADER, [(group, t, p, off) for (t, p), off in sorted(new.items())]))

    async def _targets(self, tps, committed, leaders) -> dict[tuple[str, int], int]:
        a = self.args
        if not tps:
            return {}
        if a.to_earliest:
            return await self.admin.list_offsets(tps, EARLIEST, leaders)
        if a.to_latest:
            return await self.admin.list_offsets(tps, LATEST, leaders)
        if a.to_current:
            missing = [tp for tp in tps if tp not in committed]
            ends = await self.admin.list_offsets(missing, LATEST, leaders) if missing else {}
            return {tp: committed.get(tp, ends.get(tp)) for tp in tps}
        if a.to_datetime is not None or a.by_duration is not None:
            ts = (parse_datetime_ms(a.to_datetime) if a.to_datetime is not None
                  else SYSTEM.wall_ms() - parse_duration_ms(a.by_duration))
            found = await self.admin.list_offsets(tps, ts, leaders)
            late = [tp for tp, off in found.items() if off < 0]
            ends = await self.admin.list_offsets(late, LATEST, leaders) if late else {}
            return {tp: (found[tp] if found[tp] >= 0 else ends[tp]) for tp in tps}
        if a.shift_by is not None:
            missing = [tp for tp in tps if tp not in committed]
            if missing:
                t, p = missing[0]
                raise ToolError(f"--shift-by: cannot shift the offset of {t}-{p}: the group has no committed "
                                "offset for it (use --to-offset, --to-earliest or --to-latest)")
            wanted = {tp: committed[tp] + a.shift_by for tp in tps}
        else:
            if a.to_offset < 0:
                raise ToolError(f"--to-offset {a.to_offset}: must be >= 0")
            wanted = {tp: a.to_offset for tp in tps}
        lo = await self.admin.list_offsets(tps, EARLIEST, leaders)
        hi = await self.admin.list_offsets(tps, LATEST, leaders)
        return {tp: min(max(off, lo[tp]), hi[tp]) for tp, off in wanted.items()}

    async def do_delete_offsets(self) -> None:
        group = self.args.group[0]
        specs = parse_topic_specs(self.args.topic)
        leaders = await self.admin.partitions(sorted({t for t, _ in specs}))
        tps = []
        for t, ps in specs:
            if ps is None:
                if t not in leaders:
                    raise ToolError(f"--topic {t}: the topic does not exist")
                ps = sorted(leaders[t])
            tps += [(t, p) for p in ps]
        code, results = await self.admin.delete_offsets(group, tps)
        if code != ErrorCode.NONE:
            self.error(f"Deleting offsets of group '{group}' failed: {_err_name(code)}")
            return
        rows = [(t, p, "Successful" if c == ErrorCode.NONE else f"Error: {_err_name(c)}")
                for (t, p), c in sorted(results.items())]
        if any(c != ErrorCode.NONE for c in results.values()):
            self.rc = 1
        self.print()
        self.print(table(("TOPIC", "PARTITION", "STATUS"), rows))


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        validate(args)
        tool = Tool(args)
    except (ToolError, UsageError) as e:
        print(f"consumer-groups: error: {e}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(tool.run())
    except ToolError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
