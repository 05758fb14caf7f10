"""``krafty console-consumer`` -- Kafka's kafka-console-consumer.sh.

    console-consumer --bootstrap-server H:P (--topic T | --include REGEX) [--from-beginning]
        [--partition N [--offset earliest|latest|N]] [--group G] [--max-messages N] [--timeout-ms MS]
        [--isolation-level read_committed|read_uncommitted] [--formatter NAME] [--formatter-config FILE]
        [--property print.key=true --property print.timestamp=true --property print.headers=true
         --property print.partition=true --property print.offset=true --property key.separator=...]
        [--consumer-property k=v | --consumer.config FILE] [--command-config FILE] [--skip-message-on-error]

Records go to stdout as Kafka's DefaultMessageFormatter writes them (``CreateTime:ts``,
``Partition:p``, ``Offset:o``, headers ``k:v,k2:v2`` or ``NO_HEADERS``, key, value, separated by
key.separator), ``Processed a total of N messages`` to stderr at the end. Without --group the
tool reads the partitions directly (Fetch at each leader); with --group it is a member of the
consumer group (JoinGroup/SyncGroup with the range assignor, Heartbeat, commits every
auto.commit.interval.ms and when it stops, LeaveGroup), starting at the group's committed
offsets. read_committed leaves out aborted transactions' records; control records are never
printed.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import signal
import struct
import sys
import uuid

from broker.log.batch import DEFAULT_RECORDS_LIMIT, iter_records, parse_batches
from broker.protocol.apis import ApiKey
from common.clock import SYSTEM
from common.errors import ErrorCode
from common.topic_names import INTERNAL_TOPICS
from krafty.admin_tool import Parser, ToolError, UsageError, add_connection_options, err_name, run_tool
from krafty.console_producer import (
    add_client_options,
    client_admin,
    client_properties,
    int_property,
    parse_kv,
    warn_unused,
)
from krafty.consumer_groups import GroupAdmin, decode_assignment

VERSIONS = {ApiKey.FETCH: (4, 12), ApiKey.JOIN_GROUP: (4, 9), ApiKey.SYNC_GROUP: (3, 5),
            ApiKey.HEARTBEAT: (3, 4), ApiKey.LEAVE_GROUP: (3, 5), ApiKey.OFFSET_COMMIT: (7, 8),
            ApiKey.OFFSET_FETCH: (7, 8)}
FORMATTERS = {"kafka.tools.DefaultMessageFormatter": "default",
              "org.apache.kafka.tools.consumer.DefaultMessageFormatter": "default",
              "kafka.tools.LoggingMessageFormatter": "logging",
              "org.apache.kafka.tools.consumer.LoggingMessageFormatter": "logging",
              "kafka.tools.NoOpMessageFormatter": "noop",
              "org.apache.kafka.tools.consumer.NoOpMessageFormatter": "noop"}
DESERIALIZERS = {"StringDeserializer", "ByteArrayDeserializer", "BytesDeserializer", "LongDeserializer",
                 "IntegerDeserializer", "ShortDeserializer", "DoubleDeserializer", "FloatDeserializer",
                 "UUIDDeserializer", "VoidDeserializer"}
CONSUMER_PROPERTIES = {"bootstrap.servers", "client.id", "group.id", "group.instance.id", "auto.offset.reset",
                       "isolation.level", "enable.auto.commit", "auto.commit.interval.ms", "session.timeout.ms",
                       "exclude.internal.topics", "request.timeout.ms"}
_REJOIN = {ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID,
           ErrorCode.FENCED_INSTANCE_ID}
_REFRESH = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.KAFKA_STORAGE_ERROR,
            ErrorCode.NOT_LEADER_OR_FOLLOWER}
TP = tuple[str, int]
log = logging.getLogger("krafty.console_consumer")


# ------------------------------------------------------------------------------ formatting
def deserialize(name: str | None, data: bytes) -> bytes:
    """A Kafka deserializer's toString of ``data`` (``name``: its class, simple or full name)."""
    simple = (name or "ByteArrayDeserializer").rsplit(".", 1)[-1]
    fmt = {"LongDeserializer": ">q", "IntegerDeserializer": ">i", "ShortDeserializer": ">h",
           "DoubleDeserializer": ">d", "FloatDeserializer": ">f"}.get(simple)
    if fmt is not None:
        if len(data) != struct.calcsize(fmt):
            raise ValueError(f"{simple}: {len(data)} bytes is not a {struct.calcsize(fmt) * 8}-bit value")
        v = struct.unpack(fmt, data)[0]
        return (repr(float(v)) if fmt in (">d", ">f") else str(v)).encode()
    if simple == "UUIDDeserializer":
        return str(uuid.UUID(data.decode())).encode()
    if simple == "VoidDeserializer":
        return b"null"
    return data


class Formatter:
    """Kafka's DefaultMessageFormatter (and LoggingMessageFormatter, NoOpMessageFormatter)."""

    def __init__(self, kind: str, props: dict[str, str]):
        def flag(k, default=False):
            return props[k].strip().lower() == "true" if k in props else default
        self.kind = kind
        self.print_timestamp, self.print_key, self.print_value = flag("print.timestamp"), flag("print.key"), \
            flag("print.value", True)
        self.print_partition, self.print_offset, self.print_headers = flag("print.partition"), \
            flag("print.offset"), flag("print.headers")
        self.print_delivery = flag("print.delivery")
        self.key_sep = props.get("key.separator", "\t").encode()
        self.line_sep = props.get("line.separator", "\n").encode()
        self.headers_sep = props.get("headers.separator", ",").encode()
        self.null = props.get("null.literal", "null").encode()
        self.key_deser, self.value_deser = props.get("key.deserializer"), props.get("value.deserializer")
        self.headers_deser = props.get("headers.deserializer")

    def _bytes(self, deser: str | None, data: bytes | None) -> bytes:
        return deserialize(deser, data if data is not None else self.null)

    def format(self, topic: str, partition: int, rec, timestamp_type: int) -> bytes:
        if self.kind == "noop":
            return b""
        cols: list[bytes] = []
        if self.print_timestamp:
            cols.append(f"{'LogAppendTime' if timestamp_type else 'CreateTime'}:{rec.timestamp}".encode()
                        if rec.timestamp >= 0 else b"NO_TIMESTAMP")
        if self.print_partition:
            cols.append(f"Partition:{partition}".encode())
        if self.print_offset:
            cols.append(f"Offset:{rec.offset}".encode())
        if self.print_delivery:
            cols.append(b"Delivery:NONE")
        if self.print_headers:
            cols.append(self.headers_sep.join(k.encode() + b":" + self._bytes(self.headers_deser, v)
                                              for k, v in rec.headers) if rec.headers else b"NO_HEADERS")
        if self.print_key:
            cols.append(self._bytes(self.key_deser, rec.key))
        out = self.key_sep.join(cols)
        if self.print_value:
            out = (out + self.key_sep if cols else out) + self._bytes(self.value_deser, rec.value) + self.line_sep
        elif cols:
            out += self.line_sep
        if self.kind == "logging":
            return (f"ConsumerRecord(topic = {topic}, partition = {partition}, offset = {rec.offset}, "
                    f"{'LogAppendTime' if timestamp_type else 'CreateTime'} = {rec.timestamp}, key = "
                    f"{self._bytes(None, rec.key).decode('utf-8', 'replace')}, value = "
                    f"{self._bytes(None, rec.value).decode('utf-8', 'replace')})\n").encode()
        return out


def records_of(raw: bytes, aborted: list[tuple[int, int]] | None, read_committed: bool):
    """(record, timestamp type) of the whole batches in a fetch response's records, leaving out
    control batches and, with read_committed, the batches of aborted transactions (Kafka's
    Fetcher: an aborted producer's batches from its first offset until its abort marker)."""
    aborted_from = sorted(aborted or ())  # (first_offset, producer_id)
    skipping: set[int] = set()
    for h in parse_batches(raw):
        while read_committed and aborted_from and aborted_from[0][0] <= h.last_offset:
            skipping.add(aborted_from.pop(0)[1])
        batch = memoryview(raw)[h.pos:h.pos + h.size]
        if h.is_control:
            if h.producer_id in skipping:
                skipping.discard(h.producer_id)  # the abort marker ends the aborted transaction
            continue
        if read_committed and h.is_transactional and h.producer_id in skipping:
            continue
        for rec in iter_records(batch, DEFAULT_RECORDS_LIMIT):
            yield rec, h.timestamp_type


# ------------------------------------------------------------------------------ consumer protocol
def encode_subscription(topics: list[str]) -> bytes:
    """ConsumerProtocolSubscription v0: version int16 | [topic string] | user_data bytes (null)."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        b = t.encode()
        out += struct.pack(">h", len(b)) + b
    return out + struct.pack(">i", -1)


def decode_subscription(data: bytes) -> list[str]:
    n = struct.unpack_from(">i", data, 2)[0]
    pos, out = 6, []
    for _ in range(n):
        (ln,) = struct.unpack_from(">h", data, pos)
        out.append(data[pos + 2:pos + 2 + ln].decode())
        pos += 2 + ln
    return out


def encode_assignment(tps: list[TP]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(tps):
        by_topic.setdefault(t, []).append(p)
    out = struct.pack(">hi", 0, len(by_topic))
    for t, ps in by_topic.items():
        b = t.encode()
        out += struct.pack(">h", len(b)) + b + struct.pack(">i", len(ps)) + b"".join(struct.pack(">i", p) for p in ps)
    return out + struct.pack(">i", -1)


def range_assign(members: dict[str, list[str]], partitions: dict[str, int]) -> dict[str, list[TP]]:
    """Kafka's RangeAssignor: per topic, its partitions split in ranges over the subscribed members
    (sorted by member id), the first members getting one more when it does not divide."""
    out: dict[str, list[TP]] = {m: [] for m in members}
    for topic in sorted({t for ts in members.values() for t in ts}):
        subs = sorted(m for m, ts in members.items() if topic in ts)
        n = partitions.get(topic, 0)
        per, extra = divmod(n, len(subs))
        start = 0
        for i, m in enumerate(subs):
            count = per + (1 if i < extra else 0)
            out[m] += [(topic, p) for p in range(start, start + count)]
            start += count
    return out


class ConsoleClient(GroupAdmin):
    client_id = "console-consumer"


class GroupMember:
    """One member of a classic consumer group (the range assignor), as Kafka's consumer."""

    def __init__(self, client: ConsoleClient, group: str, topics_of, session_ms: int, instance_id: str | None):
        self.c, self.group, self.topics_of = client, group, topics_of
        self.session_ms, self.instance_id = session_ms, instance_id
        self.member_id, self.generation, self.coordinator = "", -1, None
        self.assignment: list[TP] = []
        self.rejoin = True

    async def _coord(self):
        if self.coordinator is None:
            node = await self.c.find_coordinator(self.group)
            self.coordinator = (node[1], node[2])
        return self.coordinator

    async def join(self) -> list[TP]:
        deadline = SYSTEM.monotonic() + 120
        while True:
            topics = await self.topics_of()
            r = await self.c._send(await self._coord(), ApiKey.JOIN_GROUP, {
                "group_id": self.group, "session_timeout": self.session_ms, "rebalance_timeout": 60_000,
                "member_id": self.member_id, "group_instance_id": self.instance_id, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": encode_subscription(sorted(topics))}], "reason": None})
            code = int(r.error_code)
            if code == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = r.member_id
                continue
            if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS) and SYSTEM.monotonic() < deadline:
                self.coordinator = None
                await asyncio.sleep(0.2)
                continue
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if code != 0:
                raise ToolError(f"JoinGroup to group '{self.group}' failed: {err_name(code)}")
            self.member_id, self.generation = r.member_id, int(r.generation_id)
            assignments = []
            if r.leader == self.member_id and not getattr(r, "skip_assignment", False):
                subs = {m.member_id: decode_subscription(bytes(m.metadata)) for m in r.members}
                counts = {t: len(ps) for t, ps in (await self.c.partitions(
                    sorted({t for ts in subs.values() for t in ts}))).items()}
                assignments = [{"member_id": m, "assignment": encode_assignment(tps)}
                               for m, tps in range_assign(subs, counts).items()]
            s = await self.c._send(await self._coord(), ApiKey.SYNC_GROUP, {
                "group_id": self.group, "generation_id": self.generation, "member_id": self.member_id,
                "group_instance_id": self.instance_id, "protocol_type": "consumer", "protocol_name": "range",
                "assignments": assignments})
            code = int(s.error_code)
            if code in _REJOIN and SYSTEM.monotonic() < deadline:
                continue
            if code != 0:
                raise ToolError(f"SyncGroup of group '{self.group}' failed: {err_name(code)}")
            self.rejoin = False
            self.assignment = decode_assignment(bytes(s.assignment))
            return self.assignment

    async def heartbeat(self) -> None:
        r = await self.c._send(await self._coord(), ApiKey.HEARTBEAT, {
            "group_id": self.group, "generation_id": self.generation, "member_id": self.member_id,
            "group_instance_id": self.instance_id})
        code = int(r.error_code)
        if code in _REJOIN:
            self.rejoin = True
        elif code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
            self.coordinator = None

    async def committed(self) -> dict[TP, int]:
        return await self.c.committed_offsets(self.group)

    async def commit(self, positions: dict[TP, int]) -> None:
        if not positions or self.generation < 0:
            return
        topics: dict[str, list] = {}
        for (t, p), off in sorted(positions.items()):
            topics.setdefault(t, []).append({"partition_index": p, "committed_offset": off,
                                             "committed_leader_epoch": -1, "committed_metadata": ""})
        r = await self.c._send(await self._coord(), ApiKey.OFFSET_COMMIT, {
            "group_id": self.group, "generation_id_or_member_epoch": self.generation, "member_id": self.member_id,
            "group_instance_id": self.instance_id,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
        for t in r.topics:
            for p in t.partitions:
                if int(p.error_code) in _REJOIN:
                    self.rejoin = True

    async def leave(self) -> None:
        if self.member_id and self.instance_id is None:
            try:
                await self.c._send(await self._coord(), ApiKey.LEAVE_GROUP, {
                    "group_id": self.group, "members": [{"member_id": self.member_id, "group_instance_id": None,
                                                         "reason": "the console consumer is closing"}]})
            except ToolError:
                pass


# ------------------------------------------------------------------------------ the consumer
class Consumer:
    def __init__(self, args, props: dict[str, str], formatter: Formatter, out):
        self.args, self.props, self.formatter, self.out = args, props, formatter, out
        self.client = client_admin(args, props, VERSIONS, "console-consumer", ConsoleClient)
        self.read_committed = (args.isolation_level or props.get("isolation.level", "read_uncommitted")) \
            == "read_committed"
        self.positions: dict[TP, int] = {}
        self.unresolved: set[TP] = set()  # partitions whose start offset is not known yet (no leader)
        self.leaders: dict[str, dict[int, int]] = {}
        self.count = 0
        self.max_messages = args.max_messages if args.max_messages is not None else -1
        self.reset = "earliest" if args.from_beginning else props.get("auto.offset.reset", "latest")
        group = args.group or props.get("group.id")
        self.member = GroupMember(self.client, group, self.subscribed_topics,
                                  int_property(props, "session.timeout.ms", 45000),
                                  props.get("group.instance.id")) if group else None
        self.stopping = False

    async def subscribed_topics(self) -> list[str]:
        self.leaders = await self.client.partitions(None)
        if self.args.topic is not None:
            return [self.args.topic]
        rx = re.compile(self.args.include)
        return sorted(t for t in self.leaders if rx.fullmatch(t) and not (
            t in INTERNAL_TOPICS and self.props.get("exclude.internal.topics", "true") == "true"))

    async def _start_offsets(self, tps: list[TP], committed: dict[TP, int]) -> None:
        todo = [tp for tp in tps if tp not in committed]
        for tp in tps:
            if tp in committed:
                self.positions[tp] = committed[tp]
        if not todo:
            return
        if self.reset not in ("earliest", "latest"):
            raise ToolError(f"Undefined offset with no reset policy for partitions: {', '.join(f'{t}-{p}' for t, p in todo)}")
        spec = -2 if self.reset == "earliest" else -1
        offsets = await self.client.list_offsets_each(todo, spec, self.leaders, int(self.read_committed))
        for tp, (code, off) in offsets.items():
            if code in _REFRESH:  # no leader now: its position is found once it has one
                self.unresolved.add(tp)
            elif code != 0:
                raise ToolError(f"ListOffsets for {tp[0]}-{tp[1]} failed: {err_name(code)}")
            else:
                self.unresolved.discard(tp)
                self.positions[tp] = off

    async def assign(self) -> None:
        """Without a group: the --partition or every partition of the topics, at --offset."""
        topics = await self.subscribed_topics()
        missing = [t for t in topics if t not in self.leaders]
        deadline = SYSTEM.monotonic() + 60
        while missing and SYSTEM.monotonic() < deadline:  # (the topic may be being created)
            await asyncio.sleep(0.5)
            topics = await self.subscribed_topics()
            missing = [t for t in topics if t not in self.leaders]
        if missing:
            raise ToolError(f"the topic {missing[0]} does not exist")
        if self.args.partition is not None:
            tp = (self.args.topic, self.args.partition)
            if self.args.partition not in self.leaders[self.args.topic]:
                raise ToolError(f"partition {self.args.partition} of topic {self.args.topic} does not exist")
            off = self.args.offset or ("earliest" if self.args.from_beginning else "latest")
            if off in ("earliest", "latest"):
                self.reset = off
                await self._start_offsets([tp], {})
            else:
                self.positions = {tp: int(off)}
            return
        await self._start_offsets([(t, p) for t in topics for p in self.leaders[t]], {})

    async def _fetch(self, leader: int, tps: list[TP]) -> list[tuple[TP, object]]:
        topics: dict[str, list] = {}
        for t, p in tps:
            topics.setdefault(t, []).append({"partition": p, "current_leader_epoch": -1,
                                             "fetch_offset": self.positions[(t, p)], "last_fetched_epoch": -1,
                                             "log_start_offset": -1, "partition_max_bytes": 1 << 20})
        r = await self.client._send(self.client.brokers[leader], ApiKey.FETCH, {
            "replica_id": -1, "max_wait": 500, "min_bytes": 1, "max_bytes": 50 << 20,
            "isolation_level": int(self.read_committed), "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()], "forgotten_topics_data": [],
            "rack_id": ""})
        return [((t.topic, int(p.partition_index)), p) for t in r.responses for p in t.partitions]

    async def poll(self) -> bool:
        """One round of fetches (one per leader); False when --max-messages were printed."""
        if self.unresolved:
            self.leaders = await self.client.partitions(None)
            await self._start_offsets(sorted(self.unresolved), {})
        by_leader: dict[int, list[TP]] = {}
        for tp in self.positions:
            by_leader.setdefault(self.leaders.get(tp[0], {}).get(tp[1], -1), []).append(tp)
        leaderless = [b for b in by_leader if b not in self.client.brokers]  # (-1, or a broker gone)
        for b in leaderless:
            del by_leader[b]
        if not by_leader:
            self.leaders = await self.client.partitions(None)
            await asyncio.sleep(0.2)
            return True
        results = await asyncio.gather(*(self._fetch(b, tps) for b, tps in by_leader.items()))
        refresh = bool(leaderless)  # the other partitions were read meanwhile
        for answers in results:
            for tp, p in answers:
                code = int(p.error_code)
                if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    spec = -2 if self.reset == "earliest" else -1
                    (c, off), = (await self.client.list_offsets_each([tp], spec, self.leaders)).values()
                    if c == 0:
                        self.positions[tp] = off
                    continue
                if code in _REFRESH:
                    refresh = True
                    continue
                if code != 0:
                    raise ToolError(f"Fetch of {tp[0]}-{tp[1]} failed: {err_name(code)}")
                raw = bytes(p.records) if p.records else b""
                aborted = [(int(a.first_offset), int(a.producer_id)) for a in p.aborted_transactions or ()]
                pos = self.positions[tp]
                for rec, ts_type in records_of(raw, aborted, self.read_committed):
                    if rec.offset < pos:
                        continue
                    if not self._print(tp, rec, ts_type):
                        return False
                batches = parse_batches(raw)
                if batches:
                    self.positions[tp] = max(pos, batches[-1].next_offset)
        if refresh:
            self.leaders = await self.client.partitions(None)
        return True

    def _print(self, tp: TP, rec, ts_type: int) -> bool:
        try:
            self.out.write(self.formatter.format(tp[0], tp[1], rec, ts_type))
        except ValueError as e:
            if not self.args.skip_message_on_error:
                raise ToolError(f"Error processing message, terminating consumer process: {e}") from None
            print(f"Error processing message, skipping this message: {e}", file=sys.stderr)
        self.out.flush()
        self.positions[tp] = rec.offset + 1
        self.count += 1
        return self.max_messages < 0 or self.count < self.max_messages

    async def run(self) -> None:
        await self.client.start()
        timeout_s = self.args.timeout_ms / 1000 if self.args.timeout_ms is not None else None
        last_record = SYSTEM.monotonic()
        next_heartbeat = next_commit = 0.0
        commit_every = int_property(self.props, "auto.commit.interval.ms", 5000) / 1000
        auto_commit = self.props.get("enable.auto.commit", "true").lower() == "true"
        try:
            if self.member is None:
                await self.assign()
            if self.max_messages == 0:
                return
            while not self.stopping:
                now = SYSTEM.monotonic()
                if self.member is not None:
                    if self.member.rejoin:
                        if auto_commit:
                            await self.member.commit(self.positions)
                        tps = await self.member.join()
                        self.positions, self.unresolved = {}, set()
                        await self._start_offsets(tps, {tp: o for tp, o in (await self.member.committed()).items()
                                                        if tp in tps})
                        log.debug("generation %d: assigned %s, starting at %s", self.member.generation, tps,
                                  self.positions)
                        next_heartbeat = now + 3
                    elif now >= next_heartbeat:
                        await self.member.heartbeat()
                        next_heartbeat = now + 3
                    if auto_commit and now >= next_commit:
                        await self.member.commit(self.positions)
                        next_commit = now + commit_every
                before = self.count
                if not self.positions and not self.unresolved:
                    await asyncio.sleep(0.5)
                elif not await self.poll():
                    return
                if self.count > before:
                    last_record = SYSTEM.monotonic()
                elif timeout_s is not None and SYSTEM.monotonic() - last_record > timeout_s:
                    print("ERROR Error processing message, terminating consumer process: "
                          "org.apache.kafka.common.errors.TimeoutException", file=sys.stderr)
                    return
        finally:
            if self.member is not None:
                try:
                    if auto_commit:
                        await self.member.commit(self.positions)
                finally:
                    await self.member.leave()
            self.client.close()


def build_parser() -> Parser:
    p = Parser(prog="krafty console-consumer", description="Read records and print them to stdout (like Kafka's "
               "kafka-console-consumer.sh).")
    add_connection_options(p, required=False)
    p.add_argument("--topic", help="the topic to consume")
    p.add_argument("--include", "--whitelist", dest="include", metavar="REGEX",
                   help="the topics to consume: a regular expression (with --group or alone)")
    p.add_argument("--partition", type=int, help="the partition to consume (all partitions when not given)")
    p.add_argument("--offset", help="with --partition: earliest, latest (the default) or an offset")
    p.add_argument("--from-beginning", action="store_true", help="start at the earliest offset when there is no "
                   "committed offset")
    p.add_argument("--group", help="the consumer group to join")
    p.add_argument("--max-messages", type=int, help="stop after this many records")
    p.add_argument("--timeout-ms", type=int, help="stop when no record arrives for this long")
    p.add_argument("--isolation-level", choices=["read_committed", "read_uncommitted"],
                   help="read_committed leaves out aborted transactions (default read_uncommitted)")
    p.add_argument("--formatter", default="org.apache.kafka.tools.consumer.DefaultMessageFormatter",
                   help="DefaultMessageFormatter (default), LoggingMessageFormatter or NoOpMessageFormatter")
    p.add_argument("--formatter-config", metavar="FILE", help="formatter properties file")
    p.add_argument("--property", action="append", metavar="KEY=VALUE",
                   help="formatter properties: print.timestamp, print.key, print.offset, print.partition, "
                   "print.headers, print.value, key.separator, line.separator, headers.separator, null.literal, "
                   "key.deserializer, value.deserializer")
    p.add_argument("--formatter-property", action="append", dest="property", help=argparse.SUPPRESS)
    add_client_options(p, "consumer", "group.id, auto.offset.reset, isolation.level, enable.auto.commit")
    p.add_argument("--key-deserializer", help="e.g. org.apache.kafka.common.serialization.StringDeserializer")
    p.add_argument("--value-deserializer", help="e.g. org.apache.kafka.common.serialization.LongDeserializer")
    p.add_argument("--skip-message-on-error", action="store_true", help="skip a record that cannot be printed")
    p.add_argument("--enable-systest-events", action="store_true", help=argparse.SUPPRESS)
    return p


def validate(args, props: dict[str, str]) -> None:
    """Kafka's ConsoleConsumerOptions checks."""
    if (args.topic is None) == (args.include is None):
        raise UsageError("Exactly one of --include/--topic is required.")
    if args.partition is not None and args.topic is None:
        raise UsageError("The topic is required when partition is specified.")
    if args.offset is not None and args.partition is None:
        raise UsageError("The partition is required when offset is specified.")
    if args.from_beginning and args.offset is not None:
        raise UsageError("Options from-beginning and offset cannot be specified together.")
    if args.offset is not None and args.offset not in ("earliest", "latest"):
        try:
            if int(args.offset) < 0:
                raise ValueError
        except ValueError:
            raise UsageError(f"The provided offset value '{args.offset}' is incorrect. Valid values are 'earliest', "
                             "'latest', or a non-negative long.") from None
    group = args.group or props.get("group.id")
    if args.group and props.get("group.id") and props["group.id"] != args.group:
        raise UsageError(f"The group ids provided in different places (directly using '--group': {args.group}, "
                         f"via '--consumer-property': {props['group.id']}) do not match.")
    if group and args.partition is not None:
        raise UsageError("Options group and partition cannot be specified together.")
    if args.include is not None:
        try:
            re.compile(args.include)
        except re.error as e:
            raise UsageError(f"--include {args.include!r} is not a regular expression: {e}") from None
    if args.formatter not in FORMATTERS and args.formatter.rsplit(".", 1)[-1] not in \
            {n.rsplit(".", 1)[-1] for n in FORMATTERS}:
        raise UsageError(f"--formatter {args.formatter}: krafty has DefaultMessageFormatter, "
                         "LoggingMessageFormatter and NoOpMessageFormatter")
    for d in (args.key_deserializer, args.value_deserializer):
        if d is not None and d.rsplit(".", 1)[-1] not in DESERIALIZERS:
            raise UsageError(f"deserializer {d}: krafty has {', '.join(sorted(DESERIALIZERS))}")


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)

    async def run() -> int:
        props = client_properties(args)
        validate(args, props)
        warn_unused(props, CONSUMER_PROPERTIES, "console-consumer")
        fprops = {}
        if args.formatter_config:
            from krafty.admin_tool import read_properties
            fprops.update(read_properties(args.formatter_config, "--formatter-config"))
        fprops.update(parse_kv(args.property))
        if args.key_deserializer:
            fprops["key.deserializer"] = args.key_deserializer
        if args.value_deserializer:
            fprops["value.deserializer"] = args.value_deserializer
        kind = FORMATTERS.get(args.formatter) or next(v for k, v in FORMATTERS.items()
                                                      if k.rsplit(".", 1)[-1] == args.formatter.rsplit(".", 1)[-1])
        consumer = Consumer(args, props, Formatter(kind, fprops), sys.stdout.buffer)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, lambda: setattr(consumer, "stopping", True))
        try:
            await consumer.run()
        finally:
            if consumer.client._any is not None:  # (connected: as Kafka's tool, the count at the end)
                print(f"Processed a total of {consumer.count} messages", file=sys.stderr)
        return 0

    return run_tool("console-consumer", run)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
