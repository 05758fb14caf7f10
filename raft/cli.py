"""``metadata-quorum`` -- Kafka's kafka-metadata-quorum tool for the krafty quorum.

    metadata-quorum --bootstrap-controller HOST:PORT describe --status
    metadata-quorum --bootstrap-controller HOST:PORT describe --replication

Sends DescribeQuorum to the controller (following it to the leader if it is not the
leader) and prints what Kafka's tool prints, with the same field and column names.
"""

from __future__ import annotations

import argparse
import sys
import time

import grpc

from common.clock import SYSTEM
from common.errors import ErrorCode
from proto import raft_pb2 as pb
from proto import raft_pb2_grpc as pb_grpc


def describe_quorum(bootstrap: str, timeout_s: float = 5.0) -> pb.DescribeQuorumResponse:
    """DescribeQuorum from the leader, found through ``bootstrap`` (host:port)."""
    target = bootstrap
    deadline = SYSTEM.monotonic() + timeout_s
    last_error = "no answer"
    while SYSTEM.monotonic() < deadline:
        with grpc.insecure_channel(target) as ch:
            try:
                resp = pb_grpc.RaftQuorumStub(ch).DescribeQuorum(
                    pb.DescribeQuorumRequest(), timeout=max(0.1, deadline - SYSTEM.monotonic()))
            except grpc.RpcError as e:
                raise ConnectionError(f"cannot reach the controller at {target}: {e.code().name}") from None
        if resp.error == ErrorCode.NONE:
            return resp
        if resp.leader_id >= 0 and resp.leader_host:
            target = f"{resp.leader_host}:{resp.leader_port}"
            last_error = f"{target} is not the leader"
        else:
            last_error = "the quorum has no leader at the moment"
            time.sleep(0.2)
    raise ConnectionError(f"DescribeQuorum failed: {last_error}")


def _lag_ms(ts: int, now_ms: int) -> int:
    return -1 if ts < 0 else max(0, now_ms - ts)


def format_status(r: pb.DescribeQuorumResponse, now_ms: int) -> str:
    hw = r.high_watermark
    followers = [v for v in r.voters if v.replica_id != r.leader_id]
    max_lag = max((max(0, hw - v.log_end_offset) for v in followers), default=0)
    max_lag_time = max((_lag_ms(v.last_caught_up_timestamp, now_ms) for v in followers), default=0)
    rows = [
        ("ClusterId", r.cluster_id or "unknown"),
        ("LeaderId", r.leader_id),
        ("LeaderEpoch", r.leader_epoch),
        ("HighWatermark", hw),
        ("MaxFollowerLag", max_lag),
        ("MaxFollowerLagTimeMs", max_lag_time),
        ("CurrentVoters", "[" + ",".join(str(v.replica_id) for v in r.voters) + "]"),
        ("CurrentObservers", "[" + ",".join(str(o.replica_id) for o in r.observers) + "]"),
    ]
    return "\n".join(f"{k + ':':<24}{v}" for k, v in rows)


def format_replication(r: pb.DescribeQuorumResponse, now_ms: int) -> str:
    header = ("NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status")
    rows = []
    leader = [v for v in r.voters if v.replica_id == r.leader_id]
    others = [v for v in r.voters if v.replica_id != r.leader_id]
    for status, group in (("Leader", leader), ("Follower", others), ("Observer", list(r.observers))):
        for v in group:
            lag = max(0, r.high_watermark - v.log_end_offset) if v.log_end_offset >= 0 else r.high_watermark
            rows.append((v.replica_id, v.log_end_offset, lag, v.last_fetch_timestamp, v.last_caught_up_timestamp,
                         status))
    table = [header] + [tuple(str(c) for c in row) for row in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table)


def parser(prog: str = "metadata-quorum"):
    """The tool's arguments: (parser, the group of where-to-ask options, for a front end to extend)."""
    ap = argparse.ArgumentParser(prog=prog, description="Describe the metadata quorum (kafka-metadata-quorum.sh).")
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--bootstrap-controller", metavar="HOST:PORT", help="a controller (its controller listener)")
    sub = ap.add_subparsers(dest="command", required=True)
    d = sub.add_parser("describe", help="describe the quorum")
    g = d.add_mutually_exclusive_group(required=True)
    g.add_argument("--status", action="store_true", help="leader, epoch, high watermark, voters, observers")
    g.add_argument("--replication", action="store_true", help="each replica's log end offset and lag")
    return ap, where


def main(argv: list[str]) -> int:
    args = parser()[0].parse_args(argv)
    try:
        resp = describe_quorum(args.bootstrap_controller)
    except ConnectionError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    now_ms = SYSTEM.wall_ms()
    print(format_status(resp, now_ms) if args.status else format_replication(resp, now_ms))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
