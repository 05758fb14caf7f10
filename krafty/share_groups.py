"""``krafty share-groups`` -- Kafka's kafka-share-groups.sh (KIP-932) for krafty (and any Kafka 4.1+).

    share-groups --bootstrap-server H:P --list [--state [STATE,...]]
    share-groups --bootstrap-server H:P --describe --group G [--offsets | --members [--verbose] | --state [--verbose]]
    share-groups --bootstrap-server H:P --reset-offsets --group G (--topic T[:P,P] ... | --all-topics)
        (--to-earliest | --to-latest | --to-offset N | --to-datetime YYYY-MM-DDTHH:mm:SS.sss | --by-duration PnDTnHnMnS)
        [--dry-run | --execute]
    share-groups --bootstrap-server H:P --delete-offsets --group G --topic T ...
    share-groups --bootstrap-server H:P --delete --group G ... | --all-groups

It speaks the Kafka protocol as Kafka's AdminClient does: ListGroups (type share),
ShareGroupDescribe, DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets
and DeleteGroups at the group's coordinator (FindCoordinator), ListOffsets at partition leaders.
Offsets can be reset or deleted, and groups deleted, only while the group has no members.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from broker.protocol.apis import ApiKey
from common.clock import SYSTEM
from common.errors import ErrorCode
from krafty.admin_tool import Parser, ToolError, UsageError
from krafty.admin_tool import err_code as _err
from krafty.admin_tool import err_name as _err_name
from krafty.consumer_groups import (
    EARLIEST,
    LATEST,
    OUR_VERSIONS,
    GroupAdmin,
    parse_datetime_ms,
    parse_duration_ms,
    parse_topic_specs,
    table,
)
from krafty.consumer_groups import Tool as GroupsTool

CLIENT_ID = "krafty-share-groups"
SHARE_VERSIONS = {**OUR_VERSIONS, ApiKey.LIST_GROUPS: (5, 5), ApiKey.SHARE_GROUP_DESCRIBE: (1, 1),
                  ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (0, 1), ApiKey.ALTER_SHARE_GROUP_OFFSETS: (0, 0),
                  ApiKey.DELETE_SHARE_GROUP_OFFSETS: (0, 0)}

OFFSETS_HEADER = ("GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG")
MEMBERS_HEADER = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
STATE_HEADER = ("GROUP", "COORDINATOR (ID)", "STATE", "#MEMBERS")
RESET_HEADER = ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")


class ShareAdmin(GroupAdmin):
    our_versions = SHARE_VERSIONS
    client_id = CLIENT_ID

    async def list_share_groups(self) -> list[tuple[str, str]]:
        """(group, state) of every share group, from every broker."""
        if not self.brokers:
            await self.refresh_brokers()
        seen = {}
        for node, addr in sorted(self.brokers.items()):
            r = await self._send(addr, ApiKey.LIST_GROUPS, {"states_filter": [], "types_filter": ["share"]})
            if int(r.error_code) != 0:
                raise ToolError(f"ListGroups on broker {node} failed: {_err_name(r.error_code)}")
            for g in r.groups:
                if (g.group_type or "") == "share":
                    seen[g.group_id] = g.group_state
        return sorted(seen.items())

    async def describe_share_group(self, group: str):
        node, r = await self._coordinated(group, ApiKey.SHARE_GROUP_DESCRIBE,
                                          {"group_ids": [group], "include_authorized_operations": False},
                                          lambda r: r.groups[0].error_code)
        return node, r.groups[0]

    async def share_offsets(self, group: str, topics: list[tuple[str, list[int]]] | None):
        data = {"groups": [{"group_id": group, "topics": None if topics is None else [
            {"topic_name": t, "partitions": ps} for t, ps in topics]}]}
        _, r = await self._coordinated(group, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, data,
                                       lambda r: r.groups[0].error_code)
        g = r.groups[0]
        if _err(g.error_code) != ErrorCode.NONE:
            raise ToolError(f"DescribeShareGroupOffsets for group '{group}' failed: {_err_name(g.error_code)}"
                            + (f" ({g.error_message})" if g.error_message else ""))
        return [(t.topic_name, p) for t in g.topics for p in t.partitions]

    async def alter_share_offsets(self, group: str, offsets: dict[tuple[str, int], int]):
        by_topic: dict[str, list] = {}
        for (t, p), off in sorted(offsets.items()):
            by_topic.setdefault(t, []).append({"partition_index": p, "start_offset": off})
        _, r = await self._coordinated(group, ApiKey.ALTER_SHARE_GROUP_OFFSETS, {
            "group_id": group, "topics": [{"topic_name": t, "partitions": ps} for t, ps in by_topic.items()]},
            lambda r: r.error_code)
        return r

    async def delete_share_offsets(self, group: str, topics: list[str]):
        _, r = await self._coordinated(group, ApiKey.DELETE_SHARE_GROUP_OFFSETS, {
            "group_id": group, "topics": [{"topic_name": t} for t in topics]}, lambda r: r.error_code)
        return r


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="krafty share-groups",
               description="List, describe and delete share groups, reset and delete their offsets "
                           "(like Kafka's kafka-share-groups.sh).")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT[,HOST:PORT]", help="brokers to connect to (required)")
    p.add_argument("--command-config", metavar="FILE", help="Kafka client properties for the connection")
    p.add_argument("--timeout", type=int, default=5000, metavar="MS", help="timeout per request (default 5000)")
    a = p.add_argument_group("actions (exactly one)")
    a.add_argument("--list", action="store_true", help="list all share groups")
    a.add_argument("--describe", action="store_true", help="describe groups: --offsets (default), --members, --state")
    a.add_argument("--delete", action="store_true", help="delete groups (they must have no members)")
    a.add_argument("--reset-offsets", action="store_true", help="reset start offsets (dry run unless --execute)")
    a.add_argument("--delete-offsets", action="store_true", help="delete a group's offsets of topics")
    p.add_argument("--group", action="append", metavar="GROUP", help="the group (repeatable)")
    p.add_argument("--all-groups", action="store_true", help="every share group (describe, delete)")
    p.add_argument("--offsets", action="store_true", help="with --describe: start offsets and lag (the default)")
    p.add_argument("--members", action="store_true", help="with --describe: the members")
    p.add_argument("--verbose", action="store_true", help="with --describe --members/--state: more columns")
    p.add_argument("--state", nargs="?", const="", default=None, metavar="STATE,...",
                   help="with --describe: the group state; with --list: show (or filter by) states")
    p.add_argument("--topic", action="append", metavar="TOPIC[:P,P]", help="reset/delete-offsets scope (repeatable)")
    p.add_argument("--all-topics", action="store_true", help="reset-offsets scope: every topic the group has offsets of")
    s = p.add_argument_group("reset-offsets target (exactly one)")
    s.add_argument("--to-earliest", action="store_true")
    s.add_argument("--to-latest", action="store_true")
    s.add_argument("--to-offset", type=int, metavar="N")
    s.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss")
    s.add_argument("--by-duration", metavar="PnDTnHnMnS")
    p.add_argument("--dry-run", action="store_true", help="only show the new offsets (the default)")
    p.add_argument("--execute", action="store_true", help="apply the reset")
    return p


TARGETS = ("to_earliest", "to_latest", "to_offset", "to_datetime", "by_duration")


def _opt(name: str) -> str:
    return "--" + name.replace("_", "-")


def validate(args) -> None:
    actions = [n for n in ("list", "describe", "delete", "reset_offsets", "delete_offsets") if getattr(args, n)]
    if len(actions) != 1:
        raise ToolError("exactly one action is needed: --list, --describe, --delete, --reset-offsets or "
                        f"--delete-offsets (got {', '.join(map(_opt, actions)) or 'none'})")
    if not args.bootstrap_server:
        raise ToolError("missing required option --bootstrap-server HOST:PORT")
    action = actions[0]
    targets = [t for t in TARGETS if getattr(args, t) not in (None, False)]
    if action == "list":
        if args.group or args.all_groups:
            raise ToolError("--list takes no --group/--all-groups (use --describe)")
    elif not (args.group or args.all_groups):
        raise ToolError(f"{_opt(action)} needs --group GROUP" + (" (or --all-groups)" if action in
                                                                 ("describe", "delete") else ""))
    if args.all_groups and action not in ("describe", "delete"):
        raise ToolError(f"--all-groups does not go with {_opt(action)}")
    if args.group and any(not g for g in args.group):
        raise ToolError("--group: the group id is empty")
    views = [v for v in ("offsets", "members") if getattr(args, v)] + (["state"] if args.state is not None
                                                                        and action == "describe" else [])
    if action != "describe" and (args.members or args.offsets or args.verbose):
        raise ToolError("--offsets, --members and --verbose only go with --describe")
    if len(views) > 1:
        raise ToolError("--describe takes at most one of --offsets, --members, --state")
    if action == "describe" and args.state:
        raise ToolError(f"--state {args.state!r}: with --describe, --state takes no value")
    if action not in ("list", "describe") and args.state is not None:
        raise ToolError("--state only goes with --list or --describe")
    if action != "reset_offsets":
        if targets:
            raise ToolError(f"{_opt(targets[0])} only goes with --reset-offsets")
        if args.execute or args.dry_run or args.all_topics:
            raise ToolError("--execute, --dry-run and --all-topics only go with --reset-offsets")
    if action not in ("reset_offsets", "delete_offsets") and args.topic:
        raise ToolError("--topic only goes with --reset-offsets or --delete-offsets")
    if action in ("reset_offsets", "delete_offsets") and len(args.group or []) != 1:
        raise ToolError(f"{_opt(action)} takes exactly one --group")
    if action == "reset_offsets":
        if len(targets) != 1:
            raise ToolError("--reset-offsets needs exactly one of " + ", ".join(map(_opt, TARGETS)))
        if bool(args.topic) == bool(args.all_topics):
            raise ToolError("--reset-offsets needs exactly one of --topic TOPIC[:P,P] or --all-topics")
        if args.execute and args.dry_run:
            raise ToolError("use either --execute or --dry-run, not both")
        if args.to_offset is not None and args.to_offset < 0:
            raise ToolError(f"--to-offset {args.to_offset}: must be >= 0")
        if args.to_datetime is not None:
            parse_datetime_ms(args.to_datetime)
        if args.by_duration is not None:
            parse_duration_ms(args.by_duration)
    if action == "delete_offsets":
        if not args.topic:
            raise ToolError("--delete-offsets needs --topic TOPIC")
        if any(ps is not None for _, ps in parse_topic_specs(args.topic)):
            raise ToolError("--delete-offsets deletes whole topics: --topic TOPIC, without partitions")
    if args.topic:
        parse_topic_specs(args.topic)


class Tool(GroupsTool):
    admin_class = ShareAdmin

    async def groups(self) -> list[str]:
        if self.args.all_groups:
            return [g for g, _ in await self.admin.list_share_groups()]
        return list(dict.fromkeys(self.args.group))

    async def do_list(self) -> None:
        groups = await self.admin.list_share_groups()
        if self.args.state is None:
            for g, _ in groups:
                self.print(g)
            return
        wanted = {s.strip().lower() for s in self.args.state.split(",") if s.strip()}
        self.print(table(("GROUP", "STATE"), [(g, st) for g, st in groups if not wanted or st.lower() in wanted]))

    async def _describe(self, group: str):
        node, g = await self.admin.describe_share_group(group)
        code = _err(g.error_code)
        if code == ErrorCode.GROUP_ID_NOT_FOUND:
            self.error(f"Share group '{group}' does not exist." if not g.error_message or "not found" in
                       g.error_message else f"Group '{group}' is not a share group.")
            return None, None
        if code != ErrorCode.NONE:
            self.error(f"ShareGroupDescribe for '{group}' failed: {_err_name(code)}")
            return None, None
        return node, g

    async def do_describe(self) -> None:
        a = self.args
        for i, group in enumerate(await self.groups()):
            if i:
                self.print()
            node, g = await self._describe(group)
            if g is None:
                continue
            if a.state is not None:
                header = STATE_HEADER + (("GROUP-EPOCH", "ASSIGNMENT-EPOCH") if a.verbose else ())
                row = (group, f"{node[1]}:{node[2]} ({node[0]})", g.group_state, len(g.members))
                self.print()
                self.print(table(header, [row + ((g.group_epoch, g.assignment_epoch) if a.verbose else ())]))
                continue
            if not g.members:
                self.print(f"\nShare group '{group}' has no active members.")
            if a.members:
                header = MEMBERS_HEADER + (("MEMBER-EPOCH", "ASSIGNMENT") if a.verbose else ())
                rows = []
                for m in sorted(g.members, key=lambda m: m.member_id):
                    parts = [(tp.topic_name, p) for tp in m.assignment.topic_partitions for p in tp.partitions]
                    row = (group, m.member_id, m.client_host, m.client_id, len(parts))
                    if a.verbose:
                        by: dict[str, list[int]] = {}
                        for t, p in sorted(parts):
                            by.setdefault(t, []).append(p)
                        row += (m.member_epoch, ",".join(f"{t}:{','.join(map(str, ps))}" for t, ps in by.items())
                                or "-")
                    rows.append(row)
                if rows:
                    self.print()
                    self.print(table(header, rows))
                continue
            offsets = await self.admin.share_offsets(group, None)
            rows = []
            for t, p in sorted(offsets, key=lambda x: (x[0], x[1].partition_index)):
                start = int(p.start_offset)
                rows.append((group, t, p.partition_index, None if p.leader_epoch < 0 else p.leader_epoch,
                             None if start < 0 else start, None if getattr(p, "lag", -1) < 0 else p.lag))
            if rows:
                self.print()
                self.print(table(OFFSETS_HEADER, rows))

    async def do_delete(self) -> None:
        ok, failed = [], []
        for g in await self.groups():
            code = await self.admin.delete_group(g)
            (ok if code == ErrorCode.NONE else failed).append((g, code))
        if ok:
            self.print(f"Deletion of requested share groups ({', '.join(repr(g) for g, _ in ok)}) was successful.")
        if failed:
            reasons = {ErrorCode.NON_EMPTY_GROUP: "The group is not empty.",
                       ErrorCode.GROUP_ID_NOT_FOUND: "The group id does not exist."}
            self.error("Deletion of some share groups failed:\n" + "\n".join(
                f"* Share group '{g}' could not be deleted due to: {_err_name(c)}"
                + (f" ({reasons[c]})" if c in reasons else "") for g, c in failed))

    async def do_reset(self) -> None:
        a = self.args
        group = a.group[0]
        if not a.execute and not a.dry_run:
            print("WARN: No action will be performed as the --execute option is missing. "
                  "Add --execute to apply the reset (--dry-run only shows it).", file=self.err)
        node, g = await self._describe(group)
        if g is not None and g.members:
            self.error(f"Share group '{group}' is not empty: its offsets can only be reset while it has no "
                       f"members (state {g.group_state}).")
            return
        if a.all_topics:
            tps = sorted({(t, p.partition_index) for t, p in await self.admin.share_offsets(group, None)}) \
                if g is not None else []
            leaders = await self.admin.partitions(sorted({t for t, _ in tps})) if tps else {}
        else:
            specs = parse_topic_specs(a.topic)
            leaders = await self.admin.partitions(sorted({t for t, _ in specs}))
            tps = []
            for t, ps in specs:
                if t not in leaders:
                    raise ToolError(f"--topic {t}: the topic does not exist")
                for p in ps if ps is not None else sorted(leaders[t]):
                    if p not in leaders[t]:
                        raise ToolError(f"--topic {t}:{p}: the topic has no partition {p}")
                    tps.append((t, p))
        if not tps:
            return
        if a.to_earliest:
            new = await self.admin.list_offsets(tps, EARLIEST, leaders)
        elif a.to_latest:
            new = await self.admin.list_offsets(tps, LATEST, leaders)
        elif a.to_offset is not None:
            lo = await self.admin.list_offsets(tps, EARLIEST, leaders)
            hi = await self.admin.list_offsets(tps, LATEST, leaders)
            new = {tp: min(max(a.to_offset, lo[tp]), hi[tp]) for tp in tps}
        else:
            ts = (parse_datetime_ms(a.to_datetime) if a.to_datetime is not None
                  else SYSTEM.wall_ms() - parse_duration_ms(a.by_duration))
            found = await self.admin.list_offsets(tps, ts, leaders)
            late = [tp for tp, off in found.items() if off < 0]
            ends = await self.admin.list_offsets(late, LATEST, leaders) if late else {}
            new = {tp: found[tp] if found[tp] >= 0 else ends[tp] for tp in tps}
        if a.execute:
            r = await self.admin.alter_share_offsets(group, new)
            if _err(r.error_code) != ErrorCode.NONE:
                self.error(f"AlterShareGroupOffsets for '{group}' failed: {_err_name(r.error_code)}"
                           + (f" ({r.error_message})" if r.error_message else ""))
                return
            bad = [(t.topic_name, p.partition_index, p.error_code) for t in r.responses for p in t.partitions
                   if int(p.error_code)]
            if bad:
                self.error("AlterShareGroupOffsets failed for " + ", ".join(
                    f"{t}-{p}: {_err_name(c)}" for t, p, c in bad))
                return
        self.print()
        self.print(table(RESET_HEADER, [(group, t, p, off) for (t, p), off in sorted(new.items())]))

    async def do_delete_offsets(self) -> None:
        group = self.args.group[0]
        topics = [t for t, _ in parse_topic_specs(self.args.topic)]
        r = await self.admin.delete_share_offsets(group, topics)
        if _err(r.error_code) != ErrorCode.NONE:
            self.error(f"Deleting offsets of share group '{group}' failed: {_err_name(r.error_code)}"
                       + (f" ({r.error_message})" if r.error_message else ""))
            return
        rows = [(t.topic_name, "Successful" if not int(t.error_code) else f"Error: {_err_name(t.error_code)}")
                for t in r.responses]
        if any(int(t.error_code) for t in r.responses):
            self.rc = 1
        self.print()
        self.print(table(("TOPIC", "STATUS"), rows))


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        validate(args)
        tool = Tool(args)
    except (ToolError, UsageError) as e:
        print(f"share-groups: error: {e}", file=sys.stderr)
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
