"""``krafty console-producer`` -- Kafka's kafka-console-producer.sh.

    console-producer --bootstrap-server H:P --topic T [--property parse.key=true --property key.separator=:]
        [--property parse.headers=true] [--producer-property acks=1 | --producer.config FILE]
        [--request-required-acks -1|0|1] [--compression-codec [gzip|snappy|lz4|zstd]] [--sync]
        [--batch-size N] [--timeout LINGER_MS] [--command-config FILE]

One record per line of stdin, as Kafka's LineMessageReader reads it: with parse.headers=true a
line is ``h1:v1,h2:v2<TAB>key<TAB>value`` (headers.delimiter, headers.separator,
headers.key.separator), with parse.key=true ``key<TAB>value`` (key.separator); null.marker
stands for a null key, value or header value. Records go to each partition's leader in v2
batches (Kafka's default partitioner: murmur2 of the key, else one partition per batch),
idempotently (InitProducerId, sequence numbers) when acks is all, as Kafka's producer does by
default. A record the cluster refuses is reported on stderr, as Kafka's tool does, and the
exit code is then 1.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import uuid

from broker.log.batch import Record, build_batch
from broker.protocol.apis import ApiKey
from common.clock import SYSTEM
from common.errors import ErrorCode
from krafty.admin_tool import (
    AdminClient,
    Parser,
    ToolError,
    UsageError,
    add_connection_options,
    err_name,
    read_properties,
    run_tool,
    security_of,
)

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
VERSIONS = {ApiKey.PRODUCE: (3, 12), ApiKey.INIT_PRODUCER_ID: (0, 5)}
_RETRIABLE = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
              ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT,
              ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NETWORK_EXCEPTION, ErrorCode.FENCED_LEADER_EPOCH}


def murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2 (the default partitioner's hash), as a signed 32-bit int."""
    m, r, length = 0x5BD1E995, 24, len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    rest = length % 4
    tail = length - rest
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class LineReader:
    """Kafka's LineMessageReader: a line -> (key, value, headers)."""

    def __init__(self, props: dict[str, str]):
        def flag(k):
            return props.get(k, "false").strip().lower() == "true"
        self.parse_key, self.parse_headers, self.ignore_error = flag("parse.key"), flag("parse.headers"), \
            flag("ignore.error")
        self.key_sep = props.get("key.separator", "\t")
        self.headers_delim = props.get("headers.delimiter", "\t")
        self.headers_sep = props.get("headers.separator", ",")
        self.header_key_sep = props.get("headers.key.separator", ":")
        self.null_marker = props.get("null.marker")
        if self.null_marker is not None and self.null_marker in (self.key_sep, self.headers_delim, self.headers_sep,
                                                                 self.header_key_sep):
            raise UsageError(f"null.marker {self.null_marker!r} must differ from the separators")
        if self.parse_headers and self.headers_delim == self.headers_sep:
            raise UsageError("headers.delimiter and headers.separator may not be equal")
        if self.parse_headers and self.headers_sep == self.header_key_sep:
            raise UsageError("headers.separator and headers.key.separator may not be equal")
        self.line_no = 0

    def _null(self, s: str) -> bytes | None:
        return None if self.null_marker is not None and s == self.null_marker else s.encode()

    def read(self, line: str) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        self.line_no += 1
        headers: list[tuple[str, bytes | None]] = []
        rest = line
        if self.parse_headers:
            head, sep, rest = line.partition(self.headers_delim)
            if not sep:
                raise ToolError(f"No headers delimiter found on line number {self.line_no}: '{line}'")
            if head != self.null_marker:
                for pair in head.split(self.headers_sep):
                    k, s, v = pair.partition(self.header_key_sep)
                    if not s:
                        raise ToolError(f"No header key separator found in pair '{pair}' on line number "
                                        f"{self.line_no}")
                    if k == self.null_marker:
                        raise ToolError(f"Header keys should not be equal to the null marker '{self.null_marker}' "
                                        "as they can't be null")
                    headers.append((k, self._null(v)))
        key = None
        if self.parse_key:
            k, sep, v = rest.partition(self.key_sep)
            if not sep:
                if not self.ignore_error:
                    raise ToolError(f"No key separator found on line number {self.line_no}: '{line}'")
                return None, self._null(rest), headers
            key, rest = self._null(k), v
        return key, self._null(rest), headers


def client_properties(args) -> dict[str, str]:
    """--producer.config / --consumer.config, then --producer-property / --consumer-property (later wins)."""
    props: dict[str, str] = {}
    if args.command_config:
        props.update(read_properties(args.command_config, "--command-config"))
    if getattr(args, "config_file", None):
        props.update(read_properties(args.config_file, args.config_option))
    for kv in args.client_property or []:
        k, sep, v = kv.partition("=")
        if not sep:
            raise UsageError(f"{args.property_option} {kv!r} is not key=value")
        props[k.strip()] = v.strip()
    return props


def parse_kv(values: list[str] | None, option: str = "--property") -> dict[str, str]:
    out = {}
    for kv in values or []:
        k, sep, v = kv.partition("=")
        if not sep:
            raise UsageError(f"{option} {kv!r} is not key=value")
        out[k.strip()] = v
    return out


PRODUCER_PROPERTIES = {"bootstrap.servers", "client.id", "acks", "compression.type", "enable.idempotence", "linger.ms",
                       "batch.size", "max.block.ms", "request.timeout.ms"}


def warn_unused(props: dict[str, str], used: set[str], tool: str) -> None:
    """One line per client property the tool does not act on (Kafka's clients warn likewise about
    configs they do not know): nothing is silently ignored."""
    for k in sorted(props):
        if k not in used and not k.startswith(("security.", "sasl.", "ssl.")):
            print(f"WARN krafty {tool} does not use the property '{k}'", file=sys.stderr)


def int_property(props: dict[str, str], key: str, default: int) -> int:
    try:
        return int(props.get(key, default))
    except ValueError:
        raise UsageError(f"property {key}={props[key]!r} is not a number") from None


def client_admin(args, props: dict[str, str], versions, client_id: str, cls=AdminClient) -> AdminClient:
    """An AdminClient for the console tools: --bootstrap-server (or bootstrap.servers in the client
    properties), security from --command-config and the client properties."""
    from krafty.admin_tool import parse_bootstrap

    servers = args.bootstrap_server or props.get("bootstrap.servers")
    if not servers:
        raise UsageError("--bootstrap-server is required (or bootstrap.servers in the client properties)")
    try:
        bootstrap = parse_bootstrap(servers)
    except ToolError as e:
        raise UsageError(str(e)) from None
    security = security_of({k: v for k, v in props.items() if k.startswith(("security.", "sasl.", "ssl."))},
                           "client properties")
    timeout = int_property(props, "request.timeout.ms", 30000) / 1000
    return cls(bootstrap, timeout, security, versions=versions, client_id=props.get("client.id", client_id))


class Producer:
    """Batches records per partition and sends them to the leaders (Produce), idempotently with acks=all."""

    def __init__(self, admin: AdminClient, topic: str, acks: int, compression: int, idempotent: bool,
                 max_block_s: float, request_timeout_ms: int):
        self.admin, self.topic, self.acks, self.compression = admin, topic, acks, compression
        self.idempotent = idempotent
        self.max_block_s, self.request_timeout_ms = max_block_s, request_timeout_ms
        self.leaders: dict[int, int] = {}
        self.pid, self.epoch = -1, -1
        self.sequences: dict[int, int] = {}
        self.next_partition = 0
        self.failed = 0
        self.lost = False  # an idempotent batch was given up: a new producer id before the next

    async def start(self) -> None:
        await self.admin.start()
        await self.refresh(first=True)
        if self.idempotent:
            await self.init_producer_id()

    async def init_producer_id(self) -> None:
        """A producer id (again after a batch was lost: the next sequences would have a gap, which
        the leader refuses with OUT_OF_ORDER_SEQUENCE_NUMBER)."""
        r = await self.admin._send(self.admin._any, ApiKey.INIT_PRODUCER_ID, {
            "transactional_id": None, "transaction_timeout": 60_000, "producer_id": -1, "producer_epoch": -1})
        if int(r.error_code) != 0:
            raise ToolError(f"InitProducerId failed: {err_name(r.error_code)}")
        self.pid, self.epoch = int(r.producer_id), int(r.producer_epoch)
        self.sequences.clear()
        self.lost = False

    async def refresh(self, first: bool = False) -> None:
        deadline = SYSTEM.monotonic() + self.max_block_s
        while True:
            r = await self.admin._send(self.admin._any, ApiKey.METADATA, {
                "topics": [{"name": self.topic, "topic_id": uuid.UUID(int=0)}], "allow_auto_topic_creation": True,
                "include_topic_authorized_operations": False})
            self.admin.brokers = {int(b.node_id): (b.host, int(b.port)) for b in r.brokers}
            t = r.topics[0]
            code = int(t.error_code)
            if code == 0 and t.partitions and (not first or any(int(p.leader_id) >= 0 for p in t.partitions)):
                self.leaders = {int(p.partition_index): int(p.leader_id) for p in t.partitions}  # -1: none now
                return
            if code not in (0, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) or \
                    SYSTEM.monotonic() > deadline:
                if code == 0 and t.partitions:
                    raise ToolError(f"no partition of topic {self.topic} has a leader after "
                                    f"{int(self.max_block_s * 1000)} ms")
                if code in (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE):
                    raise ToolError(f"Topic {self.topic} not present in metadata after "
                                    f"{int(self.max_block_s * 1000)} ms.")
                raise ToolError(f"metadata of topic {self.topic}: {err_name(code)}")
            await asyncio.sleep(0.1)

    def partition_of(self, key: bytes | None) -> int:
        """Kafka's default partitioner: a key's murmur2 hash, else one of the partitions that have a
        leader (sticky for the records of one send)."""
        if key is not None:
            return partition_for_key(key, len(self.leaders))
        led = sorted(p for p, leader in self.leaders.items() if leader >= 0) or sorted(self.leaders)
        return led[self.next_partition % len(led)]

    async def send(self, records: list[tuple[bytes | None, bytes | None, list]]) -> None:
        """One batch per partition; the keyless records of a call go to one partition (sticky)."""
        if self.lost:
            await self.init_producer_id()
        by_partition: dict[int, list] = {}
        for key, value, headers in records:
            by_partition.setdefault(self.partition_of(key), []).append((key, value, headers))
        self.next_partition += 1
        await asyncio.gather(*(self._send_partition(p, recs) for p, recs in by_partition.items()))

    async def _send_partition(self, partition: int, recs: list) -> None:
        now = SYSTEM.wall_ms()
        batch = [Record(i, now, k, v, [(hk, hv) for hk, hv in h]) for i, (k, v, h) in enumerate(recs)]
        seq = self.sequences.get(partition, 0)
        data = bytes(build_batch(batch, base_offset=0, compression=self.compression, producer_id=self.pid,
                                 producer_epoch=self.epoch if self.idempotent else -1,
                                 base_sequence=seq if self.idempotent else -1))
        if self.idempotent:
            self.sequences[partition] = (seq + len(recs)) % (1 << 31)
        deadline = SYSTEM.monotonic() + max(self.max_block_s, self.request_timeout_ms / 1000)
        while True:
            leader = self.leaders.get(partition, -1)
            code, message = ErrorCode.LEADER_NOT_AVAILABLE, None
            if leader in self.admin.brokers:
                req = {"transactional_id": None, "acks": self.acks, "timeout": self.request_timeout_ms,
                       "topic_data": [{"name": self.topic, "partition_data": [{"index": partition, "records": data}]}]}
                try:
                    if self.acks == 0:
                        await self.admin._conn(self.admin.brokers[leader]).send_only(
                            ApiKey.PRODUCE, self.admin.version(ApiKey.PRODUCE), req)
                        return
                    r = await self.admin._send(self.admin.brokers[leader], ApiKey.PRODUCE, req)
                    p = r.responses[0].partition_responses[0]
                    code, message = int(p.error_code), p.error_message
                except ToolError as e:
                    code, message = ErrorCode.NETWORK_EXCEPTION, str(e)
            if code in (0, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
                return
            if code not in _RETRIABLE or SYSTEM.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
            try:
                await self.refresh()
            except ToolError:
                pass
        self.lost = self.idempotent
        for key, value, _ in recs:
            self.failed += 1
            print(f"ERROR Error when sending message to topic {self.topic} with key: "
                  f"{'null' if key is None else f'{len(key)} bytes'}, value: "
                  f"{'null' if value is None else f'{len(value)} bytes'} with error: {err_name(code)}"
                  f"{': ' + message if message else ''}", file=sys.stderr)


def add_client_options(p: Parser, role: str, examples: str) -> None:
    """--producer-property/--consumer-property (Kafka 4.1: --command-property) and --producer.config/
    --consumer.config (read by client_properties)."""
    p.add_argument(f"--{role}-property", "--command-property", action="append", dest="client_property",
                   metavar="KEY=VALUE", help=f"{role} properties ({examples}, client.id, security.protocol, sasl.*, "
                   "ssl.*, ...)")
    p.add_argument(f"--{role}.config", dest="config_file", metavar="FILE",
                   help=f"{role} properties file (as --command-config; --{role}-property wins)")
    p.set_defaults(config_option=f"--{role}.config", property_option=f"--{role}-property")


def parse_acks(text: str) -> int:
    v = text.strip().lower()
    if v == "all":
        return -1
    if v in ("-1", "0", "1"):
        return int(v)
    raise UsageError(f"acks {text!r}: expected all, -1, 0 or 1")


def build_parser() -> Parser:
    p = Parser(prog="krafty console-producer", description="Read records from stdin, one a line, and produce them "
               "(like Kafka's kafka-console-producer.sh).")
    add_connection_options(p, required=False)
    p.add_argument("--topic", required=True, help="the topic to produce to")
    p.add_argument("--property", action="append", metavar="KEY=VALUE",
                   help="line reader properties: parse.key, key.separator, parse.headers, headers.delimiter, "
                   "headers.separator, headers.key.separator, null.marker, ignore.error")
    p.add_argument("--reader-property", action="append", dest="property", help=argparse.SUPPRESS)  # Kafka 4.1's name
    add_client_options(p, "producer", "acks, compression.type, linger.ms, batch.size, enable.idempotence")
    p.add_argument("--request-required-acks", help="acks: -1/all (default), 0 or 1")
    p.add_argument("--compression-codec", nargs="?", const="gzip", choices=list(CODECS),
                   help="none, gzip (the default when given without a value), snappy, lz4 or zstd")
    p.add_argument("--sync", action="store_true", help="send each record on its own, waiting for the answer")
    p.add_argument("--batch-size", type=int, help="batch.size: bytes of records per batch (default 16384)")
    p.add_argument("--timeout", type=int, dest="linger_ms", help="linger.ms: how long to wait for a batch to fill "
                   "(default 1000)")
    p.add_argument("--request-timeout-ms", type=int, help="request.timeout.ms (default 30000)")
    p.add_argument("--max-block-ms", type=int, help="max.block.ms: how long to wait for the topic's metadata "
                   "(default 60000)")
    return p


def read_stdin(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue) -> None:
    """stdin's lines into ``queue``, then None (a daemon thread: stdin may be a terminal, a pipe or a
    file, and a blocked read must not hold the process when the producer fails)."""
    def put(item) -> None:
        asyncio.run_coroutine_threadsafe(queue.put(item), loop).result()

    def reader() -> None:
        try:
            for raw in sys.stdin.buffer:
                put(raw.decode("utf-8", "replace").rstrip("\n").removesuffix("\r"))
            put(None)
        except (RuntimeError, OSError, ValueError):  # the loop is gone: the producer stopped
            return
    threading.Thread(target=reader, name="stdin", daemon=True).start()


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)

    async def run() -> int:
        props = client_properties(args)
        reader = LineReader(parse_kv(args.property))
        acks = parse_acks(args.request_required_acks or props.get("acks", "all"))
        codec_name = args.compression_codec or props.get("compression.type", "none")
        if codec_name not in CODECS:
            raise UsageError(f"compression.type {codec_name!r}: expected one of {', '.join(CODECS)}")
        idempotent = acks == -1 and props.get("enable.idempotence", "true").lower() != "false"
        warn_unused(props, PRODUCER_PROPERTIES, "console-producer")
        linger_s = (args.linger_ms if args.linger_ms is not None else int_property(props, "linger.ms", 1000)) / 1000
        batch_bytes = args.batch_size or int_property(props, "batch.size", 16384)  # (Kafka's --batch-size: batch.size)
        admin = client_admin(args, props, VERSIONS, "console-producer")
        producer = Producer(admin, args.topic, acks, CODECS[codec_name], idempotent,
                            (args.max_block_ms or int_property(props, "max.block.ms", 60000)) / 1000,
                            args.request_timeout_ms or int_property(props, "request.timeout.ms", 30000))
        queue: asyncio.Queue = asyncio.Queue(maxsize=10_000)
        try:
            await producer.start()
            read_stdin(asyncio.get_running_loop(), queue)
            done = False
            while not done:
                line = await queue.get()
                if line is None:
                    break
                pending = [reader.read(line)]
                size = len(line)
                end = SYSTEM.monotonic() + linger_s
                try:
                    while not args.sync and size < batch_bytes:
                        try:
                            line = await asyncio.wait_for(queue.get(), max(0.0, end - SYSTEM.monotonic()))
                        except TimeoutError:
                            break
                        if line is None:
                            done = True
                            break
                        pending.append(reader.read(line))
                        size += len(line)
                finally:  # a line that does not parse ends the tool, after the lines before it are sent
                    await producer.send(pending)
        finally:
            admin.close()
        return 1 if producer.failed else 0

    return run_tool("console-producer", run)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
