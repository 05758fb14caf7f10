"""``krafty log-dirs`` -- Kafka's kafka-log-dirs.sh.

    log-dirs --bootstrap-server H:P --describe [--broker-list 1,2] [--topic-list t1,t2] [--command-config FILE]

Sends DescribeLogDirs to each broker (all brokers by default) and prints Kafka's tool's output:
two lines, then one JSON document
``{"version": 1, "brokers": [{"broker": 1, "logDirs": [{"logDir": ..., "error": null,
"partitions": [{"partition": "t-0", "size": 123, "offsetLag": 0, "isFuture": false}]}]}]}``.
"""

from __future__ import annotations

import json
import sys

from broker.protocol.apis import ApiKey
from common.errors import ErrorCode
from krafty.admin_tool import Parser, UsageError, add_connection_options, error_text, make_admin, run_tool

VERSIONS = {ApiKey.DESCRIBE_LOG_DIRS: (1, 4)}
# the exception class Kafka's tool prints for a dir's error
EXCEPTIONS = {ErrorCode.KAFKA_STORAGE_ERROR: "org.apache.kafka.common.errors.KafkaStorageException",
              ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "org.apache.kafka.common.errors.ClusterAuthorizationException"}


def parse_ids(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--broker-list {text!r}: expected broker ids separated by commas") from None


def build_parser() -> Parser:
    p = Parser(prog="krafty log-dirs", description="Describe the log dirs of brokers (like Kafka's kafka-log-dirs.sh).")
    add_connection_options(p)
    p.add_argument("--describe", action="store_true", help="describe the log dirs (required)")
    p.add_argument("--broker-list", metavar="ID,ID,...", help="the brokers to query (default: all)")
    p.add_argument("--topic-list", metavar="TOPIC,TOPIC,...", help="only these topics' partitions (default: all)")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)

    async def run() -> int:
        if not args.describe:
            raise UsageError("Missing required argument \"[describe]\"")
        brokers_wanted = parse_ids(args.broker_list) if args.broker_list else None
        topics = {t for t in (args.topic_list or "").split(",") if t}
        admin = make_admin(args, VERSIONS, "krafty-log-dirs")
        try:
            await admin.start()
            existing = sorted(admin.brokers)
            ids = brokers_wanted if brokers_wanted is not None else existing
            missing = [b for b in ids if b not in admin.brokers]
            if missing:
                print(f"ERROR: The given brokers do not exist from --broker-list: {','.join(map(str, missing))}. "
                      f"Current existent brokers: {','.join(map(str, existing))}", file=sys.stderr)
                return 1
            print("Querying brokers for log directories information")
            out = []
            for b in ids:
                r = await admin._send(admin.brokers[b], ApiKey.DESCRIBE_LOG_DIRS, {"topics": None})
                if int(getattr(r, "error_code", 0)) != 0:
                    print(f"Error: broker {b}: {error_text(r.error_code)}", file=sys.stderr)
                    return 1
                dirs = []
                for d in r.results:
                    code = int(d.error_code)
                    dirs.append({"partitions": [
                        {"partition": f"{t.name}-{p.partition_index}", "size": int(p.partition_size),
                         "offsetLag": int(p.offset_lag), "isFuture": bool(p.is_future_key)}
                        for t in d.topics if not topics or t.name in topics for p in t.partitions],
                        "error": None if code == 0 else EXCEPTIONS.get(code, error_text(code)), "logDir": d.log_dir})
                out.append({"broker": b, "logDirs": dirs})
        finally:
            admin.close()
        print(f"Received log directory information from brokers {','.join(map(str, ids))}")
        print(json.dumps({"brokers": out, "version": 1}, separators=(",", ":")))
        return 0

    return run_tool("log-dirs", run)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
