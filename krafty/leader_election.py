"""``krafty leader-election`` -- Kafka's kafka-leader-election.sh.

    leader-election --bootstrap-server H:P --election-type preferred|unclean
        (--topic T --partition N | --all-topic-partitions | --path-to-json-file FILE)
        [--command-config FILE | --admin.config FILE]

FILE: ``{"partitions": [{"topic": "t", "partition": 0}, ...]}``. One ElectLeaders request, which
the broker forwards to the active controller. Output and exit code as Kafka's tool: the
partitions elected, those that already had their leader, and one line per failure (exit 1).
"""

from __future__ import annotations

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

VERSIONS = {ApiKey.ELECT_LEADERS: (1, 2)}
ELECTION_TYPES = {"preferred": 0, "unclean": 1}


def parse_partitions(doc) -> list[tuple[str, int]]:
    if not isinstance(doc, dict) or not isinstance(doc.get("partitions"), list):
        raise UsageError("the JSON file must hold {\"partitions\": [{\"topic\": ..., \"partition\": ...}, ...]}")
    out = []
    for p in doc["partitions"]:
        if not isinstance(p, dict) or not isinstance(p.get("topic"), str) or not isinstance(p.get("partition"), int):
            raise UsageError(f"each partition needs \"topic\" (string) and \"partition\" (integer): {p}")
        out.append((p["topic"], p["partition"]))
    dups = sorted({f"{t}-{p}" for t, p in out if out.count((t, p)) > 1})
    if dups:
        raise UsageError("Replica election data contains duplicate partitions: " + ",".join(dups))
    return out


def build_parser() -> Parser:
    p = Parser(prog="krafty leader-election",
               description="Elect preferred or unclean leaders (like Kafka's kafka-leader-election.sh).")
    add_connection_options(p)
    p.add_argument("--admin.config", dest="admin_config", metavar="FILE", help="same as --command-config")
    p.add_argument("--election-type", required=True, type=str.lower, choices=sorted(ELECTION_TYPES),
                   help="preferred: move leadership back to the first replica; unclean: elect an out-of-sync "
                        "replica for partitions without a leader")
    p.add_argument("--topic", metavar="TOPIC", help="the topic (with --partition)")
    p.add_argument("--partition", type=int, metavar="N", help="the partition (with --topic)")
    p.add_argument("--all-topic-partitions", action="store_true", help="every partition of every topic")
    p.add_argument("--path-to-json-file", metavar="FILE",
                   help='JSON: {"partitions": [{"topic": "t", "partition": 0}]}')
    return p


def validate(args) -> None:
    chosen = [o for o, v in (("--topic", args.topic), ("--all-topic-partitions", args.all_topic_partitions),
                             ("--path-to-json-file", args.path_to_json_file)) if v]
    if len(chosen) != 1:
        raise UsageError("One and only one of the following options is required: --topic, --all-topic-partitions, "
                         "--path-to-json-file" + (f" (got {', '.join(chosen)})" if chosen else ""))
    if args.topic and args.partition is None:
        raise UsageError("Missing required option(s) [partition]")
    if args.partition is not None and not args.topic:
        raise UsageError("--partition only goes with --topic")
    if args.admin_config and args.command_config:
        raise UsageError("use either --command-config or --admin.config, not both")
    args.command_config = args.command_config or args.admin_config


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)

    async def run() -> int:
        validate(args)
        if args.topic:
            wanted: list[tuple[str, int]] | None = [(args.topic, args.partition)]
        elif args.path_to_json_file:
            wanted = parse_partitions(read_json_file(args.path_to_json_file, "--path-to-json-file"))
        else:
            wanted = None
        kind = args.election_type.upper()
        admin = make_admin(args, VERSIONS, "krafty-leader-election")
        try:
            await admin.start()
            topics: dict[str, list[int]] = {}
            for t, p in wanted or ():
                topics.setdefault(t, []).append(p)
            r = await admin._send(admin._any, ApiKey.ELECT_LEADERS, {
                "election_type": ELECTION_TYPES[args.election_type], "timeout": 30_000,
                "topic_partitions": None if wanted is None else [
                    {"topic": t, "partitions": ps} for t, ps in topics.items()]})
        finally:
            admin.close()
        if int(r.error_code) != 0:
            print(f"Error: leader election failed: {error_text(r.error_code)}", file=sys.stderr)
            return 1
        done, noop, failed = [], [], []
        for t in r.replica_election_results:
            for p in t.partition_result:
                name = f"{t.topic}-{p.partition_id}"
                code = int(p.error_code)
                if code == ErrorCode.NONE:
                    done.append(name)
                elif code == ErrorCode.ELECTION_NOT_NEEDED:
                    noop.append(name)
                else:
                    failed.append((name, error_text(code, p.error_message)))
        if done:
            print(f"Successfully completed leader election ({kind}) for partitions {', '.join(done)}")
        if noop:
            print(f"Valid replica already elected for partitions {', '.join(noop)}")
        for name, why in failed:
            print(f"Error completing leader election ({kind}) for partition: {name}: {why}")
        if failed:
            print(f"Error: {len(failed)} replica(s) could not be elected", file=sys.stderr)
            return 1
        return 0

    return run_tool("leader-election", run)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
