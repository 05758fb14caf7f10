"""``krafty delete-records`` -- Kafka's kafka-delete-records.sh.

    delete-records --bootstrap-server H:P --offset-json-file FILE [--command-config FILE]

FILE: ``{"partitions": [{"topic": "t", "partition": 0, "offset": 10}], "version": 1}``; offset -1
deletes up to the high watermark. Each partition's leader (found with Metadata) gets a
DeleteRecords request, as Kafka's AdminClient sends it; the output is Kafka's tool's:
``partition: t-0<TAB>low_watermark: 10`` or ``partition: t-0<TAB>error: ...``. As Kafka's tool,
the exit code is 0 once the request was answered, whatever each partition's result.
"""

from __future__ import annotations

import asyncio
import sys

from broker.protocol.apis import ApiKey
from common.errors import ErrorCode
from krafty.admin_tool import (
    Parser,
    UsageError,
    add_connection_options,
    error_text,
    make_admin,
    read_json_file,
    run_tool,
)

VERSIONS = {ApiKey.DELETE_RECORDS: (0, 2)}
_RETRY = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


def parse_offsets(doc) -> list[tuple[str, int, int]]:
    """Kafka's DeleteRecordsCommand.parseOffsetJsonStringWithoutDedup, with its messages."""
    if not isinstance(doc, dict):
        raise UsageError("the offset JSON file must hold an object with a \"partitions\" list")
    version = doc.get("version", 1)
    if version != 1:
        raise UsageError(f"Not supported version field value {version}")
    parts = doc.get("partitions")
    if parts is None:
        raise UsageError("Missing partitions field")
    if not isinstance(parts, list):
        raise UsageError("\"partitions\" must be a list")
    out = []
    for p in parts:
        if not isinstance(p, dict) or not isinstance(p.get("topic"), str) or not isinstance(p.get("partition"), int) \
                or not isinstance(p.get("offset"), int) or isinstance(p.get("offset"), bool):
            raise UsageError(f"each partition needs \"topic\" (string), \"partition\" and \"offset\" (integers): {p}")
        out.append((p["topic"], p["partition"], p["offset"]))
    seen, dups = set(), []
    for t, p, _ in out:
        if (t, p) in seen and f"{t}-{p}" not in dups:
            dups.append(f"{t}-{p}")
        seen.add((t, p))
    if dups:
        raise UsageError("Offset json file contains duplicate topic partitions: " + ",".join(dups))
    return out


async def delete_records(admin, offsets: list[tuple[str, int, int]], timeout_ms: int = 30_000
                         ) -> dict[tuple[str, int], tuple[int, int]]:
    """{(topic, partition): (error code, low watermark)}, each sent to the partition's leader."""
    results: dict[tuple[str, int], tuple[int, int]] = {}
    todo = list(offsets)
    for attempt in range(5):
        leaders = await admin.partitions(sorted({t for t, _, _ in todo}))
        by_leader: dict[int, list[tuple[str, int, int]]] = {}
        for t, p, off in todo:
            leader = leaders.get(t, {}).get(p)
            if leader is None:
                results[(t, p)] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)
            elif leader < 0 or leader not in admin.brokers:
                results[(t, p)] = (ErrorCode.LEADER_NOT_AVAILABLE, -1)
            else:
                by_leader.setdefault(leader, []).append((t, p, off))
        for leader, items in by_leader.items():
            topics: dict[str, list] = {}
            for t, p, off in items:
                topics.setdefault(t, []).append({"partition_index": p, "offset": off})
            r = await admin._send(admin.brokers[leader], ApiKey.DELETE_RECORDS, {
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()], "timeout": timeout_ms})
            for t in r.topics:
                for p in t.partitions:
                    results[(t.name, int(p.partition_index))] = (int(p.error_code), int(p.low_watermark))
        todo = [(t, p, off) for t, p, off in todo if results.get((t, p), (0,))[0] in _RETRY]
        if not todo:
            break
        await asyncio.sleep(0.2 * (attempt + 1))
    return results


def build_parser() -> Parser:
    p = Parser(prog="krafty delete-records",
               description="Delete records of partitions up to an offset (like Kafka's kafka-delete-records.sh).")
    add_connection_options(p)
    p.add_argument("--offset-json-file", required=True, metavar="FILE",
                   help='JSON: {"partitions": [{"topic": "t", "partition": 0, "offset": 10}], "version": 1}')
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)

    async def run() -> int:
        offsets = parse_offsets(read_json_file(args.offset_json_file, "--offset-json-file"))
        admin = make_admin(args, VERSIONS, "krafty-delete-records")
        try:
            await admin.start()
            print("Executing records delete operation")
            results = await delete_records(admin, offsets)
        finally:
            admin.close()
        print("Records delete operation completed:")
        for t, p, _ in offsets:
            code, low = results[(t, p)]
            if code == ErrorCode.NONE:
                print(f"partition: {t}-{p}\tlow_watermark: {low}")
            else:
                print(f"partition: {t}-{p}\terror: {error_text(code)}")
        return 0

    return run_tool("delete-records", run)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
