"""``krafty metadata-quorum``, as ``kafka-metadata-quorum.sh``:

    metadata-quorum --bootstrap-controller HOST:PORT describe --status|--replication
    metadata-quorum --bootstrap-server HOST:PORT [--command-config F] describe --status|--replication

With --bootstrap-controller it asks the controllers directly (raft/cli.py); with
--bootstrap-server it sends DescribeQuorum to a broker, which forwards it to the quorum's
leader, as Kafka's brokers do."""

from __future__ import annotations

import asyncio
import sys
import time
from types import SimpleNamespace

from broker.protocol.apis import ApiKey
from common.errors import ErrorCode
from raft.cli import describe_quorum, format_replication, format_status, parser


async def _via_broker(args) -> SimpleNamespace:
    from krafty.configs import _connect

    conn = await _connect(args)
    try:
        r = await conn.request(ApiKey.DESCRIBE_QUORUM, 2, {"topics": [
            {"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]})
        md = await conn.request(ApiKey.METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                                      "include_topic_authorized_operations": False})
    finally:
        conn.close()
    if r.error_code != 0:
        raise ConnectionError(f"DescribeQuorum failed: {ErrorCode(r.error_code).name}")
    p = r.topics[0].partitions[0]
    if p.error_code != 0:
        raise ConnectionError(f"DescribeQuorum failed: {ErrorCode(p.error_code).name}: {p.error_message or ''}")
    return SimpleNamespace(cluster_id=md.cluster_id, leader_id=p.leader_id, leader_epoch=p.leader_epoch,
                           high_watermark=p.high_watermark, voters=list(p.current_voters), observers=list(p.observers))


def main(argv: list[str]) -> int:
    ap, where = parser("krafty metadata-quorum")
    where.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]", help="a broker, which asks the controllers")
    ap.add_argument("--command-config", help="Kafka client properties for --bootstrap-server (TLS/SASL)")
    args = ap.parse_args(argv)
    try:
        resp = asyncio.run(_via_broker(args)) if args.bootstrap_server else describe_quorum(args.bootstrap_controller)
    except Exception as e:  # noqa: BLE001 - one clear line: unreachable, refused, no leader
        print(f"Error: {e}", file=sys.stderr)
        return 1
    now_ms = int(time.time() * 1000)
    print(format_status(resp, now_ms) if args.status else format_replication(resp, now_ms))
    return 0
