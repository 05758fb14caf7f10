"""``krafty topics`` -- Kafka's kafka-topics.sh.

    topics --bootstrap-server H:P --create --topic T [--partitions N] [--replication-factor R]
           [--replica-assignment 1:2,2:3,...] [--config k=v ...] [--if-not-exists]
    topics --bootstrap-server H:P --list [--topic REGEX] [--exclude-internal]
    topics --bootstrap-server H:P --describe [--topic REGEX | --topic-id ID] [--exclude-internal] [--if-exists]
           [--under-replicated-partitions | --unavailable-partitions | --under-min-isr-partitions
            | --at-min-isr-partitions | --topics-with-overrides]
    topics --bootstrap-server H:P --alter --topic REGEX --partitions N [--replica-assignment ...] [--if-exists]
    topics --bootstrap-server H:P --delete --topic REGEX [--if-exists]

As Kafka's TopicCommand: --topic is a regular expression (a full match; ',' separates
alternatives) except with --create; --describe reads DescribeTopicPartitions (Metadata when the
broker lacks it), DescribeConfigs, DescribeCluster and ListPartitionReassignments and prints
Kafka's lines; a request the cluster refuses prints ``Error while executing topic command :
<message>`` on stdout and exits 1, a topic that does not exist ``Topic 'T' does not exist as
expected`` on stderr (exit 1); a bad command line exits 2 with one line.
"""

from __future__ import annotations

import base64
import re
import sys
import uuid
from dataclasses import dataclass, field

from broker.protocol.apis import ApiKey
from common.errors import ErrorCode
from common.topic_names import INTERNAL_TOPICS
from krafty.admin_tool import (
    AdminClient,
    Parser,
    ToolError,
    UsageError,
    add_connection_options,
    err_name,
    make_admin,
    run_tool,
)

VERSIONS = {
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.DESCRIBE_CLUSTER: (0, 1),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (0, 0),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
}
DEFAULT_CONFIG_SOURCE = 5  # DescribeConfigs' DEFAULT_CONFIG: what Kafka's tool leaves out of "Configs:"
TIMEOUT_MS = 30_000


class CommandFailed(ToolError):
    """A request the cluster refused: ``Error while executing topic command : ...`` (stdout, exit 1)."""


class NotFound(ToolError):
    """``Topic 'T' does not exist as expected`` (stderr, exit 1): Kafka's IllegalArgumentException."""


# ------------------------------------------------------------------------------ parsing
def parse_replica_assignment(text: str) -> dict[int, list[int]]:
    """``1:2,2:3`` -> {0: [1, 2], 1: [2, 3]} (Kafka's TopicCommand.parseReplicaAssignment)."""
    out: dict[int, list[int]] = {}
    for i, part in enumerate(text.split(",")):
        try:
            brokers = [int(b.strip()) for b in part.split(":")]
        except ValueError:
            raise UsageError(f"--replica-assignment {text!r}: expected broker ids, ':' between replicas and ',' "
                             "between partitions") from None
        dups = sorted({b for b in brokers if brokers.count(b) > 1})
        if dups:
            raise UsageError("Partition replica lists may not contain duplicate entries: " + ",".join(map(str, dups)))
        out[i] = brokers
        if len(brokers) != len(out[0]):
            raise UsageError(f"Partition {i} has different replication factor: [{', '.join(map(str, brokers))}]")
    return out


def parse_topic_configs(values: list[str]) -> dict[str, str]:
    out = {}
    for kv in values:
        parts = re.split(r"\s*=\s*", kv)
        if len(parts) != 2:
            raise UsageError("requirement failed: Invalid topic config: all configs to be added must be in the "
                             "format \"key=val\".")
        out[parts[0].strip()] = parts[1].strip()
    return out


def include_list(pattern: str):
    """Kafka's TopicFilter.IncludeList: ',' means '|', spaces and surrounding quotes dropped; a topic
    matches when the whole name matches."""
    regex = re.sub(r"[\"']+$", "", re.sub(r"^[\"']+", "", pattern.strip().replace(",", "|").replace(" ", "")))
    try:
        return re.compile(regex)
    except re.error as e:
        raise UsageError(f"{regex} is an invalid regex: {e}") from None


def select_topics(all_topics, pattern: str | None, exclude_internal: bool) -> list[str]:
    rx = include_list(pattern) if pattern else None
    return [t for t in sorted(all_topics)
            if (rx is None or rx.fullmatch(t)) and not (exclude_internal and t in INTERNAL_TOPICS)]


def kafka_uuid(u: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(u.bytes).rstrip(b"=").decode()


def parse_kafka_uuid(text: str) -> uuid.UUID:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        if len(raw) != 16:
            raise ValueError
        return uuid.UUID(bytes=raw)
    except ValueError:
        raise UsageError(f"--topic-id {text!r} is not a topic id (22 characters of URL-safe base64)") from None


# ------------------------------------------------------------------------------ describing
@dataclass
class PartitionInfo:
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    elr: list[int] | None = None  # None: the broker did not say (Metadata): "N/A"
    last_known_elr: list[int] | None = None
    adding: list[int] | None = None  # an ongoing reassignment
    removing: list[int] | None = None

    @property
    def replication_factor(self) -> int:
        """Kafka's getReplicationFactor: during a reassignment, the target's size."""
        changing = set(self.adding or ()) | set(self.removing or ())
        if self.adding is not None and changing & set(self.replicas):
            return len(self.replicas) - len(self.adding)
        return len(self.replicas)


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: list[PartitionInfo] = field(default_factory=list)
    configs: list[tuple[str, str | None, int]] = field(default_factory=list)  # (name, value, source)

    def config(self, key: str) -> str | None:
        return next((v for k, v, _ in self.configs if k == key), None)

    @property
    def overrides(self) -> list[tuple[str, str | None]]:
        return [(k, v) for k, v, src in self.configs if src != DEFAULT_CONFIG_SOURCE]


def _ids(xs) -> str:
    return ",".join(map(str, xs))


def topic_line(t: TopicInfo) -> str:
    out = f"Topic: {t.name}"
    if t.topic_id.int:
        out += f"\tTopicId: {kafka_uuid(t.topic_id)}"
    rf = t.partitions[0].replication_factor if t.partitions else 0
    configs = ",".join(f"{k}={'' if v is None else v}" for k, v in t.overrides)
    return out + f"\tPartitionCount: {len(t.partitions)}\tReplicationFactor: {rf}\tConfigs: {configs}"


def partition_line(topic: str, p: PartitionInfo) -> str:
    out = (f"\tTopic: {topic}\tPartition: {p.partition}\tLeader: {p.leader if p.leader >= 0 else 'none'}"
           f"\tReplicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}")
    if p.adding is not None:
        out += f"\tAdding Replicas: {_ids(p.adding)}\tRemoving Replicas: {_ids(p.removing or [])}"
    out += f"\tElr: {'N/A' if p.elr is None else _ids(p.elr)}"
    out += f"\tLastKnownElr: {'N/A' if p.last_known_elr is None else _ids(p.last_known_elr)}"
    return out


def min_isr(t: TopicInfo) -> int:
    try:
        return int(t.config("min.insync.replicas") or 1)
    except ValueError:
        return 1


def partition_filter(args, live: set[int]):
    """Which partitions --describe prints (Kafka's DescribeOptions.shouldPrintTopicPartition)."""
    reports = (args.under_replicated_partitions, args.unavailable_partitions, args.under_min_isr_partitions,
               args.at_min_isr_partitions)

    def keep(t: TopicInfo, p: PartitionInfo) -> bool:
        if not any(reports):
            return True
        has_leader = p.leader >= 0
        m = min_isr(t)
        return bool((args.under_replicated_partitions and p.replication_factor - len(p.isr) > 0)
                    or (args.unavailable_partitions and (not has_leader or p.leader not in live))
                    or (args.under_min_isr_partitions and (not has_leader or len(p.isr) < m))
                    or (args.at_min_isr_partitions and len(p.isr) == m))
    return keep


def describe_lines(args, topics: list[TopicInfo], live: set[int]) -> list[str]:
    reports = (args.under_replicated_partitions or args.unavailable_partitions or args.under_min_isr_partitions
               or args.at_min_isr_partitions)
    keep = partition_filter(args, live)
    lines = []
    for t in topics:
        if not reports and t.partitions and (not args.topics_with_overrides or t.overrides):
            lines.append(topic_line(t))
        if not args.topics_with_overrides:
            lines += [partition_line(t.name, p) for p in sorted(t.partitions, key=lambda p: p.partition)
                      if keep(t, p)]
    return lines


# ------------------------------------------------------------------------------ requests
class TopicAdmin:
    """kafka-topics.sh's requests (Kafka's TopicService), over an AdminClient."""

    def __init__(self, admin: AdminClient):
        self.admin = admin

    def _supports(self, api: int) -> bool:
        try:
            self.admin.version(api)
            return True
        except ToolError:
            return False

    async def list_topics(self) -> list[str]:
        r = await self.admin.metadata(None)
        return [t.name for t in r.topics if int(t.error_code) == 0 and t.name is not None]

    async def create(self, name: str, partitions: int | None, rf: int | None,
                     assignment: dict[int, list[int]] | None, configs: dict[str, str]) -> tuple[int, str | None]:
        r = await self.admin._send(self.admin._any, ApiKey.CREATE_TOPICS, {"topics": [{
            "name": name, "num_partitions": -1 if assignment or partitions is None else partitions,
            "replication_factor": -1 if assignment or rf is None else rf,
            "assignments": [{"partition_index": i, "broker_ids": bs} for i, bs in (assignment or {}).items()],
            "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
            "timeout": TIMEOUT_MS, "validate_only": False})
        t = r.topics[0]
        return int(t.error_code), t.error_message

    async def create_partitions(self, counts: dict[str, tuple[int, list[list[int]] | None]]
                                ) -> list[tuple[str, int, str | None]]:
        r = await self.admin._send(self.admin._any, ApiKey.CREATE_PARTITIONS, {"topics": [
            {"name": t, "count": n, "assignments": None if a is None else [{"broker_ids": bs} for bs in a]}
            for t, (n, a) in counts.items()], "timeout": TIMEOUT_MS, "validate_only": False})
        return [(x.name, int(x.error_code), x.error_message) for x in r.results]

    async def delete(self, names: list[str]) -> list[tuple[str, int, str | None]]:
        v = self.admin.version(ApiKey.DELETE_TOPICS)
        data = {"timeout": TIMEOUT_MS}
        if v >= 6:
            data["topics"] = [{"name": n, "topic_id": uuid.UUID(int=0)} for n in names]
        else:
            data["topic_names"] = names
        r = await self.admin._send(self.admin._any, ApiKey.DELETE_TOPICS, data)
        return [(x.name, int(x.error_code), getattr(x, "error_message", None)) for x in r.responses]

    async def describe(self, names: list[str], limit: int = 2000) -> list[TopicInfo]:
        """The partitions of ``names`` (DescribeTopicPartitions, with its cursor; else Metadata)."""
        out: dict[str, TopicInfo] = {}
        if self._supports(ApiKey.DESCRIBE_TOPIC_PARTITIONS):
            cursor = None
            while True:
                r = await self.admin._send(self.admin._any, ApiKey.DESCRIBE_TOPIC_PARTITIONS, {
                    "topics": [{"name": n} for n in names], "response_partition_limit": limit, "cursor": cursor})
                for t in r.topics:
                    self._check(t.name, t.error_code)
                    info = out.setdefault(t.name, TopicInfo(t.name, t.topic_id))
                    info.partitions += [PartitionInfo(
                        int(p.partition_index), int(p.leader_id), [int(b) for b in p.replica_nodes],
                        [int(b) for b in p.isr_nodes], [int(b) for b in p.eligible_leader_replicas or ()],
                        [int(b) for b in p.last_known_elr or ()]) for p in t.partitions]
                if r.next_cursor is None:
                    break
                cursor = {"topic_name": r.next_cursor.topic_name, "partition_index": r.next_cursor.partition_index}
        else:
            r = await self.admin.metadata(names)
            for t in r.topics:
                self._check(t.name, t.error_code)
                out[t.name] = TopicInfo(t.name, getattr(t, "topic_id", None) or uuid.UUID(int=0), [PartitionInfo(
                    int(p.partition_index), int(p.leader_id), [int(b) for b in p.replica_nodes],
                    [int(b) for b in p.isr_nodes]) for p in t.partitions])
        return [out[n] for n in names if n in out]

    @staticmethod
    def _check(name: str, code) -> None:
        if int(code) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise CommandFailed(f"This server does not host this topic-partition. (topic {name})")
        if int(code) != 0:
            raise CommandFailed(f"{name}: {err_name(code)}")

    async def add_configs(self, topics: list[TopicInfo]) -> None:
        if not topics:
            return
        r = await self.admin._send(self.admin._any, ApiKey.DESCRIBE_CONFIGS, {"resources": [
            {"resource_type": 2, "resource_name": t.name, "configuration_keys": None} for t in topics],
            "include_synonyms": False, "include_documentation": False})
        by_name = {t.name: t for t in topics}
        for res in r.results:
            if int(res.error_code) != 0:
                raise CommandFailed(res.error_message or f"{res.resource_name}: {err_name(res.error_code)}")
            by_name[res.resource_name].configs = [(c.name, c.value, int(c.config_source)) for c in res.configs]

    async def add_reassignments(self, topics: list[TopicInfo]) -> None:
        """Ongoing reassignments (ignored when the broker lacks the API or refuses it, as Kafka's tool)."""
        if not topics or not self._supports(ApiKey.LIST_PARTITION_REASSIGNMENTS):
            return
        r = await self.admin._send(self.admin._any, ApiKey.LIST_PARTITION_REASSIGNMENTS, {
            "timeout": TIMEOUT_MS, "topics": [
                {"name": t.name, "partition_indexes": [p.partition for p in t.partitions]} for t in topics]})
        if int(r.error_code) != 0:
            return
        parts = {(t.name, p.partition): p for t in topics for p in t.partitions}
        for t in r.topics:
            for x in t.partitions:
                p = parts.get((t.name, int(x.partition_index)))
                if p is not None:
                    p.adding, p.removing = list(x.adding_replicas), list(x.removing_replicas)

    async def live_brokers(self) -> set[int]:
        if self._supports(ApiKey.DESCRIBE_CLUSTER):
            r = await self.admin._send(self.admin._any, ApiKey.DESCRIBE_CLUSTER,
                                       {"include_cluster_authorized_operations": False})
            if int(r.error_code) == 0:
                return {int(b.broker_id) for b in r.brokers}
        await self.admin.refresh_brokers()
        return set(self.admin.brokers)


# ------------------------------------------------------------------------------ the command
def build_parser() -> Parser:
    p = Parser(prog="krafty topics", description="Create, delete, describe, or change a topic "
               "(like Kafka's kafka-topics.sh).")
    add_connection_options(p)
    for action, text in (("list", "List all available topics."), ("create", "Create a new topic."),
                         ("delete", "Delete a topic."),
                         ("alter", "Alter the number of partitions and replica assignment. (To alter topic "
                          "configurations, use krafty configs.)"),
                         ("describe", "List details for the given topics.")):
        p.add_argument(f"--{action}", action="store_true", help=text)
    p.add_argument("--topic", help="the topic to create, alter, describe or delete; a regular expression except "
                   "with --create")
    p.add_argument("--topic-id", help="the topic id to describe")
    p.add_argument("--config", action="append", default=[], metavar="NAME=VALUE",
                   help="a topic config for the topic being created (repeatable)")
    p.add_argument("--partitions", type=int, help="the number of partitions (--create: the cluster default when "
                   "not given; --alter: the new count)")
    p.add_argument("--replication-factor", type=int, help="the replication factor (--create; the cluster default "
                   "when not given)")
    p.add_argument("--replica-assignment", metavar="B1:B2,B1:B2,...",
                   help="manual partition-to-broker assignments for the topic being created or altered")
    p.add_argument("--under-replicated-partitions", action="store_true",
                   help="with --describe: only under-replicated partitions")
    p.add_argument("--unavailable-partitions", action="store_true",
                   help="with --describe: only partitions whose leader is not available")
    p.add_argument("--under-min-isr-partitions", action="store_true",
                   help="with --describe: only partitions whose ISR is smaller than min.insync.replicas")
    p.add_argument("--at-min-isr-partitions", action="store_true",
                   help="with --describe: only partitions whose ISR size equals min.insync.replicas")
    p.add_argument("--topics-with-overrides", action="store_true",
                   help="with --describe: only topics that have overridden configs")
    p.add_argument("--if-exists", action="store_true", help="with --alter, --delete, --describe: only if the topic "
                   "exists")
    p.add_argument("--if-not-exists", action="store_true", help="with --create: no error if the topic exists")
    p.add_argument("--exclude-internal", action="store_true", help="with --list, --describe: leave out internal "
                   "topics")
    p.add_argument("--partition-size-limit-per-response", type=int, metavar="N",
                   help="the most partitions in one DescribeTopicPartitions response (default 2000)")
    return p


_REPORTS = ("under_replicated_partitions", "unavailable_partitions", "under_min_isr_partitions",
            "at_min_isr_partitions")


def _only_with(args, option: str, allowed: tuple[str, ...]) -> None:
    if getattr(args, option.replace("-", "_")) not in (None, False, []) and \
            not any(getattr(args, a) for a in allowed):
        raise UsageError(f"Option \"[{option}]\" can't be used with option \"[{_action(args)}]\"")


def _action(args) -> str:
    return next((a for a in ("create", "list", "alter", "describe", "delete") if getattr(args, a)), "")


def validate(args) -> None:
    """Kafka's TopicCommandOptions.checkArgs, as UsageError (exit 2)."""
    if sum(bool(getattr(args, a)) for a in ("create", "list", "alter", "describe", "delete")) != 1:
        raise UsageError("Command must include exactly one action: --list, --describe, --create, --alter or --delete")
    if not (args.list or args.describe) and not args.topic:
        raise UsageError("Missing required argument \"[topic]\"")
    if args.alter:
        if args.config:
            raise UsageError("Option \"[config]\" can't be used with option \"[alter]\" (To alter topic "
                             "configurations, use krafty configs.)")
        if args.partitions is None:
            raise UsageError("Missing required argument \"[partitions]\"")
    _only_with(args, "config", ("create",))
    _only_with(args, "partitions", ("create", "alter"))
    _only_with(args, "replication-factor", ("create",))
    _only_with(args, "replica-assignment", ("create", "alter"))
    if args.create and args.replica_assignment and (args.partitions is not None or args.replication_factor is not None):
        raise UsageError("Option \"[replica-assignment]\" can't be used with option \"[partitions]\" or "
                         "\"[replication-factor]\"")
    reports = [a for a in _REPORTS if getattr(args, a)]
    for a in reports:
        if not args.describe or args.topics_with_overrides:
            raise UsageError(f"Option \"[{a.replace('_', '-')}]\" can't be used with option "
                             f"\"[{'topics-with-overrides' if args.describe else _action(args)}]\"")
    _only_with(args, "topics-with-overrides", ("describe",))
    _only_with(args, "if-exists", ("alter", "delete", "describe"))
    _only_with(args, "if-not-exists", ("create",))
    _only_with(args, "exclude-internal", ("list", "describe"))
    _only_with(args, "topic-id", ("describe",))
    if args.describe and args.if_exists and not (args.topic or args.topic_id):
        raise UsageError("--topic or --topic-id is required to describe a topic")
    if args.create:
        if args.replication_factor is not None and not 1 <= args.replication_factor <= 32767:
            raise UsageError("The replication factor must be between 1 and 32767 inclusive")
        if args.partitions is not None and args.partitions < 1:
            raise UsageError("The partitions must be greater than 0")
    if args.partition_size_limit_per_response is not None and args.partition_size_limit_per_response < 1:
        raise UsageError("--partition-size-limit-per-response must be at least 1")


def _message(code: int, message: str | None) -> str:
    return message or err_name(code)


async def run(args) -> int:
    validate(args)
    assignment = parse_replica_assignment(args.replica_assignment) if args.replica_assignment else None
    configs = parse_topic_configs(args.config)
    topic_id = parse_kafka_uuid(args.topic_id) if args.topic_id else None
    admin = make_admin(args, VERSIONS, "krafty-topics")
    tool = TopicAdmin(admin)
    try:
        await admin.start()
        if args.create:
            if "_" in args.topic or "." in args.topic:
                print("WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') "
                      "could collide. To avoid issues it is best to use either, but not both.")
            code, msg = await tool.create(args.topic, args.partitions, args.replication_factor, assignment, configs)
            if code == ErrorCode.TOPIC_ALREADY_EXISTS and args.if_not_exists:
                return 0
            if code != 0:
                raise CommandFailed(_message(code, msg))
            print(f"Created topic {args.topic}.")
            return 0
        if topic_id is not None:  # --describe --topic-id
            r = await admin.metadata(None)
            names = [t.name for t in r.topics if getattr(t, "topic_id", None) == topic_id
                     and not (args.exclude_internal and t.name in INTERNAL_TOPICS)]
            if not names and not args.if_exists:
                raise NotFound(f"TopicId '{args.topic_id}' does not exist as expected")
        else:
            names = select_topics(await tool.list_topics(), args.topic, args.exclude_internal)
            if args.list:
                print("\n".join(names))
                return 0
            if args.topic and not names and not args.if_exists:
                raise NotFound(f"Topic '{args.topic}' does not exist as expected")
        if args.delete:
            failed = [(n, c, m) for n, c, m in await tool.delete(names) if c != 0]
            if failed:
                raise CommandFailed(_message(failed[0][1], failed[0][2]))
            return 0
        if args.alter:
            counts = {}
            for t in (await tool.describe(names)) if assignment else [TopicInfo(n, uuid.UUID(int=0)) for n in names]:
                extra = None
                if assignment is not None:
                    extra = [assignment[i] for i in sorted(assignment) if i >= len(t.partitions)]
                counts[t.name] = (args.partitions, extra)
            if counts:
                failed = [(n, c, m) for n, c, m in await tool.create_partitions(counts) if c != 0]
                if failed:
                    raise CommandFailed(_message(failed[0][1], failed[0][2]))
            return 0
        topics = await tool.describe(names, args.partition_size_limit_per_response or 2000) if names else []
        await tool.add_configs(topics)
        live = await tool.live_brokers()
        await tool.add_reassignments(topics)
        for line in describe_lines(args, topics, live):
            print(line)
        return 0
    finally:
        admin.close()


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)

    async def go() -> int:
        try:
            return await run(args)
        except CommandFailed as e:
            print(f"Error while executing topic command : {e}")
            return 1
        except NotFound as e:
            print(str(e), file=sys.stderr)
            return 1

    return run_tool("topics", go)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
