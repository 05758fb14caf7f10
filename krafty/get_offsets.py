"""``krafty get-offsets`` -- Kafka's kafka-get-offsets.sh (GetOffsetShell).

    get-offsets --bootstrap-server H:P [--topic-partitions 't1:1,t2:0-3,t3,t4:5-,t5:-3' |
                --topic REGEX [--partitions 0,1]] [--time -1|latest|-2|earliest|-3|max-timestamp|TIMESTAMP]
                [--exclude-internal-topics] [--command-config FILE]

Prints ``topic:partition:offset`` per partition (sorted as Kafka's tool sorts them: by
``topic-partition`` as text), asking each partition's leader with ListOffsets. A partition
whose offset is unknown (a timestamp after the last record) is left out; one the leader
refuses is skipped with a line on stderr. ``Error occurred: ...`` and exit code 1 when nothing
matches or no broker answers.
"""

from __future__ import annotations

import re
import sys

from broker.protocol.apis import ApiKey
from common.topic_names import INTERNAL_TOPICS
from krafty.admin_tool import (
    Parser,
    ToolError,
    UsageError,
    add_connection_options,
    err_name,
    make_admin,
    run_tool,
)
from krafty.topics import include_list

# --time names and the ListOffsets timestamps they stand for, with the first version that has them
SPECS = {"latest": -1, "earliest": -2, "max-timestamp": -3, "earliest-local": -4, "latest-tiered": -5,
         "earliest-pending-upload": -6}
MIN_VERSION = {-3: 7, -4: 8, -5: 9, -6: 11}
VERSIONS = {ApiKey.LIST_OFFSETS: (1, 10)}
_RULE = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")


def parse_time(text: str) -> int:
    if text in SPECS:
        return SPECS[text]
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"Malformed time argument {text}. Please use -1 or latest / -2 or earliest / -3 or "
                         "max-timestamp / -4 or earliest-local / -5 or latest-tiered / -6 or earliest-pending-upload, "
                         "or a specified long format timestamp") from None


def partition_filter(args):
    """(topic -> bool, (topic, partition) -> bool) from --topic-partitions, or --topic/--partitions."""
    if args.topic_partitions is not None:
        if args.topic is not None or args.partitions is not None:
            raise UsageError("--topic-partitions cannot be used with --topic or --partitions")
        rules = []
        for spec in args.topic_partitions.split(","):
            m = _RULE.fullmatch(spec)
            if not m:
                raise UsageError(f"Invalid rule specification: {spec}")
            rx = include_list(m.group(1) or ".*")
            if m.group(2):
                lo, hi = int(m.group(2)), int(m.group(2)) + 1
            else:
                lo, hi = int(m.group(3) or 0), int(m.group(4)) if m.group(4) else 2 ** 31
            rules.append((rx, lo, hi))
        return (lambda t: any(rx.fullmatch(t) for rx, _, _ in rules),
                lambda t, p: any(rx.fullmatch(t) and lo <= p < hi for rx, lo, hi in rules))
    rx = include_list(args.topic or ".*")
    wanted: set[int] = set()
    if args.partitions:
        try:
            wanted = {int(x) for x in args.partitions.split(",")}
        except ValueError:
            raise UsageError("--partitions expects a comma separated list of numeric partition ids, but received: "
                             + args.partitions) from None
    return (lambda t: rx.fullmatch(t) is not None,
            lambda t, p: rx.fullmatch(t) is not None and (not wanted or p in wanted))


def build_parser() -> Parser:
    p = Parser(prog="krafty get-offsets", description="Get topic-partition offsets (like Kafka's "
               "kafka-get-offsets.sh).")
    add_connection_options(p)
    p.add_argument("--topic-partitions", metavar="t1:1,t2:0-3,t3,t4:5-,t5:-3",
                   help="topic regex and partition (N, N-M with M exclusive, N-, -M or none for all), comma-separated")
    p.add_argument("--topic", help="the topic (a regular expression); all topics when not given")
    p.add_argument("--partitions", metavar="ID,ID", help="partition ids (all when not given)")
    p.add_argument("--time", default="latest", help="-1 or latest / -2 or earliest / -3 or max-timestamp / "
                   "-4 or earliest-local / -5 or latest-tiered / a timestamp in ms (default: latest)")
    p.add_argument("--exclude-internal-topics", action="store_true", help="leave out internal topics")
    return p


def sort_key(tp: tuple[str, int]) -> str:
    return f"{tp[0]}-{tp[1]}"  # Kafka's tool sorts by TopicPartition.toString()


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)

    async def run() -> int:
        timestamp = parse_time(args.time)
        topic_ok, tp_ok = partition_filter(args)
        admin = make_admin(args, VERSIONS, "GetOffsetShell")
        try:
            await admin.start()
            need = MIN_VERSION.get(timestamp)
            if need is not None and admin.version(ApiKey.LIST_OFFSETS) < need:
                raise ToolError(f"the broker does not support --time {args.time} (ListOffsets v{need})")
            leaders = await admin.partitions(None)
            leaders = {t: ps for t, ps in leaders.items()
                       if topic_ok(t) and not (args.exclude_internal_topics and t in INTERNAL_TOPICS)}
            tps = [(t, p) for t, ps in leaders.items() for p in ps if tp_ok(t, p)]
            if not tps:
                raise ToolError("Could not match any topic-partitions with the specified filters")
            results = await admin.list_offsets_each(tps, timestamp, leaders)
        finally:
            admin.close()
        for tp in sorted(tps, key=sort_key):
            code, offset = results[tp]
            if code != 0:
                print(f"Skip getting offsets for topic-partition {tp[0]}-{tp[1]} due to error: {err_name(code)}",
                      file=sys.stderr)
            elif offset != -1:
                print(f"{tp[0]}:{tp[1]}:{offset}")
        return 0

    return run_tool("get-offsets", run)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
