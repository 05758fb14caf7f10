"""``krafty metadata-quorum``, as ``kafka-metadata-quorum.sh``:

    metadata-quorum --bootstrap-controller HOST:PORT describe --status|--replication
    metadata-quorum --bootstrap-server HOST:PORT [--command-config F] describe --status|--replication
    metadata-quorum --bootstrap-controller|--bootstrap-server HOST:PORT --command-config NEW-CONTROLLER.properties \
        add-controller
    metadata-quorum --bootstrap-controller|--bootstrap-server HOST:PORT remove-controller --controller-id N \
        --controller-directory-id D

With --bootstrap-controller it asks the controllers directly (raft/cli.py); with
--bootstrap-server it sends DescribeQuorum to a broker, which forwards it to the quorum's
leader, as Kafka's brokers do."""

from __future__ import annotations

import asyncio
import sys
import time
from types import SimpleNamespace

from broker.protocol.apis import ApiKey
from common.clock import SYSTEM
from common.errors import ErrorCode
from krafty.admin_tool import connect_any
from raft.cli import describe_quorum, format_replication, format_status, parser


async def _via_broker(args) -> SimpleNamespace:
    conn = await connect_any(args, "krafty-metadata-quorum")
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


def change_voters(args) -> int:
    """AddVoter / RemoveVoter through the controllers (following the leader), as
    kafka-metadata-quorum.sh add-controller / remove-controller."""
    import grpc

    from proto import raft_pb2 as pb
    from proto import raft_pb2_grpc as pb_grpc

    if args.command == "add-controller":
        if not args.command_config:
            raise ValueError("add-controller needs --command-config: the new controller's server.properties")
        from common.config import Config
        from krafty.storage import read_meta

        cfg = Config.from_file(args.command_config)
        lst = next((cfg.listener(n) for n in cfg["controller.listener.names"] if cfg.listener(n) is not None), None)
        if lst is None or "controller" not in cfg["process.roles"]:
            raise ValueError(f"{args.command_config} is not a controller's configuration (no controller listener)")
        meta = read_meta(cfg["metadata.log.dir"]) or {}
        if not meta.get("directory.id"):
            raise ValueError(f"{cfg['metadata.log.dir']} is not formatted: start the new controller first")
        req = pb.AddVoterRequest(voter_id=cfg["node.id"], directory_id=meta["directory.id"],
                                 host=lst.host or "localhost", port=lst.port)
        args.new_listener_name = lst.name
        method, done = "AddVoter", (f"Added controller {cfg['node.id']} with directory id {meta['directory.id']} and "
                                    f"endpoints: {lst.name}://{req.host}:{req.port}")
    else:
        req = pb.RemoveVoterRequest(voter_id=args.controller_id, directory_id=args.controller_directory_id)
        method, done = "RemoveVoter", (f"Removed KRaft controller {args.controller_id} with directory id "
                                       f"{args.controller_directory_id or '-'}")
    if args.bootstrap_server:
        return asyncio.run(_change_via_broker(args, req, done))
    target, deadline = args.bootstrap_controller, SYSTEM.monotonic() + 60
    while True:
        with grpc.insecure_channel(target) as ch:
            try:
                r = getattr(pb_grpc.RaftQuorumStub(ch), method)(req, timeout=max(1.0, deadline - SYSTEM.monotonic()))
            except grpc.RpcError as e:
                raise ConnectionError(f"cannot reach the controller at {target}: {e.code().name}") from None
        if r.error == ErrorCode.NOT_LEADER_OR_FOLLOWER and r.leader_host and SYSTEM.monotonic() < deadline:
            target = f"{r.leader_host}:{r.leader_port}"
            continue
        if r.error == ErrorCode.NOT_LEADER_OR_FOLLOWER and SYSTEM.monotonic() < deadline:
            time.sleep(0.2)
            continue
        if r.error != 0:
            raise RuntimeError(f"{ErrorCode(r.error).name}: {r.error_message}")
        print(done)
        return 0


async def _change_via_broker(args, req, done: str) -> int:
    """AddRaftVoter / RemoveRaftVoter to a broker, which forwards it to the quorum's leader."""
    import base64
    import uuid

    def dir_uuid(s: str):
        return None if not s else uuid.UUID(bytes=base64.urlsafe_b64decode(s + "=" * (-len(s) % 4)))
    conn = await connect_any(args, "krafty-metadata-quorum")
    try:
        if args.command == "add-controller":
            cfg_listener = args.new_listener_name
            r = await conn.request(ApiKey.ADD_RAFT_VOTER, 0, {
                "cluster_id": None, "timeout": 30_000, "voter_id": req.voter_id,
                "voter_directory_id": dir_uuid(req.directory_id),
                "listeners": [{"name": cfg_listener, "host": req.host, "port": req.port}]}, timeout=60)
        else:
            r = await conn.request(ApiKey.REMOVE_RAFT_VOTER, 0, {
                "cluster_id": None, "voter_id": req.voter_id, "voter_directory_id": dir_uuid(req.directory_id)},
                timeout=60)
    finally:
        conn.close()
    if r.error_code != 0:
        raise RuntimeError(f"{ErrorCode(r.error_code).name}: {r.error_message or ''}")
    print(done)
    return 0


def main(argv: list[str]) -> int:
    ap, where = parser("krafty metadata-quorum")
    where.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]", help="a broker, which asks the controllers")
    ap.add_argument("--command-config", help="Kafka client properties for --bootstrap-server (TLS/SASL); for "
                    "add-controller: the new controller's server.properties")
    sub = next(a for a in ap._actions if a.dest == "command")
    sub.add_parser("add-controller", help="make a running, caught-up controller a voter (KIP-853)")
    rm = sub.add_parser("remove-controller", help="take a controller out of the voters (KIP-853)")
    rm.add_argument("--controller-id", type=int, required=True)
    rm.add_argument("--controller-directory-id", default="", help="the directory id of its metadata log dir")
    args = ap.parse_args(argv)
    if args.command in ("add-controller", "remove-controller"):
        try:
            return change_voters(args)
        except Exception as e:  # noqa: BLE001 - one clear line
            print(f"Error: {e}", file=sys.stderr)
            return 1
    try:
        resp = asyncio.run(_via_broker(args)) if args.bootstrap_server else describe_quorum(args.bootstrap_controller)
    except Exception as e:  # noqa: BLE001 - one clear line: unreachable, refused, no leader
        print(f"Error: {e}", file=sys.stderr)
        return 1
    now_ms = SYSTEM.wall_ms()
    print(format_status(resp, now_ms) if args.status else format_replication(resp, now_ms))
    return 0
