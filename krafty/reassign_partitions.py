"""``krafty reassign-partitions`` -- Kafka's kafka-reassign-partitions.sh.

    reassign-partitions --bootstrap-server H:P --generate --topics-to-move-json-file F --broker-list 4,5,6
        [--disable-rack-aware]
    reassign-partitions --bootstrap-server H:P --execute --reassignment-json-file F [--additional]
    reassign-partitions --bootstrap-server H:P --verify --reassignment-json-file F
    reassign-partitions --bootstrap-server H:P --cancel --reassignment-json-file F
    reassign-partitions --bootstrap-server H:P --list
    (each with [--command-config FILE])

Files as Kafka's: topics to move ``{"topics": [{"topic": "t"}], "version": 1}``; a reassignment
``{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [4, 5, 6]}]}``, with
optional ``"log_dirs": ["any", "/data/2", ...]`` (one per replica: the log dir of the replica on
that broker, "any" for the broker's choice). --generate
places replicas with Kafka's (rack-aware) algorithm; --execute sends AlterReplicaLogDirs to the
brokers of replicas with a log dir (a replica not there yet is made in that dir when it comes; the
tool asks again until each broker has it, up to --timeout), then AlterPartitionReassignments,
--cancel the same with null replicas, --verify and --list read ListPartitionReassignments and the
metadata. ``--execute --throttle B`` sets the topics' leader/follower.replication.throttled.replicas
to the moving replicas and the brokers' leader/follower.replication.throttled.rate (a dynamic broker
config: until brokers take those, set the rate in their configs); --verify removes the topic
throttles once nothing moves. Output lines are Kafka's tool's.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys

from broker.protocol.apis import ApiKey
from common.clock import SYSTEM
from common.errors import ErrorCode, KafkaError
from controller.placement import BrokerPlacement, assign_replicas
from krafty.admin_tool import (
    Parser,
    UsageError,
    add_connection_options,
    error_text,
    make_admin,
    read_json_file,
    run_tool,
)

VERSIONS = {ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0), ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
            ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1), ApiKey.DESCRIBE_CONFIGS: (1, 4),
            ApiKey.ALTER_REPLICA_LOG_DIRS: (1, 2), ApiKey.DESCRIBE_LOG_DIRS: (1, 4)}
LEADER_THROTTLED, FOLLOWER_THROTTLED = "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"
LEADER_RATE, FOLLOWER_RATE = "leader.replication.throttled.rate", "follower.replication.throttled.rate"
ACTIONS = ("generate", "execute", "verify", "cancel", "list")
TP = tuple[str, int]


def parse_reassignment(doc) -> dict[TP, list[int]]:
    """Kafka's parsePartitionReassignmentData and its checks."""
    if not isinstance(doc, dict) or not isinstance(doc.get("partitions"), list):
        raise UsageError("the reassignment JSON file must hold {\"version\": 1, \"partitions\": [...]}")
    if doc.get("version", 1) != 1:
        raise UsageError(f"Not supported version field value {doc.get('version')}")
    out: dict[TP, list[int]] = {}
    dups = []
    for p in doc["partitions"]:
        if (not isinstance(p, dict) or not isinstance(p.get("topic"), str) or not isinstance(p.get("partition"), int)
                or not isinstance(p.get("replicas"), list) or not all(isinstance(b, int) for b in p["replicas"])):
            raise UsageError(f"each partition needs \"topic\", \"partition\" and \"replicas\" (a list of broker "
                             f"ids): {p}")
        tp = (p["topic"], p["partition"])
        if tp in out:
            dups.append(f"{tp[0]}-{tp[1]}")
        seen = set()
        for b in p["replicas"]:
            if b in seen:
                raise UsageError(f"Partition replica lists may not contain duplicate entries: {tp[0]}-{tp[1]} "
                                 f"contains {b}")
            seen.add(b)
        out[tp] = list(p["replicas"])
    if dups:
        raise UsageError("Partition reassignment contains duplicate topic partitions: " + ",".join(dups))
    if not out:
        raise UsageError("Partition reassignment list cannot be empty")
    return out


def parse_log_dirs(doc) -> dict[tuple[str, int, int], str]:
    """The log dir wanted for each replica, (topic, partition, broker) -> dir, from the ``log_dirs``
    of a reassignment file already checked by parse_reassignment ("any" entries left out)."""
    out = {}
    for p in doc["partitions"]:
        dirs = p.get("log_dirs")
        if dirs is None:
            continue
        if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
            raise UsageError(f"\"log_dirs\" must be a list of strings: {p}")
        if len(dirs) != len(p["replicas"]):
            raise UsageError(f"Size of replicas list {p['replicas']} is different from size of log dirs list "
                             f"{dirs} for partition {p['topic']}-{p['partition']}")
        for b, d in zip(p["replicas"], dirs, strict=True):
            if d != "any":
                out[(p["topic"], p["partition"], b)] = d
    return out


def parse_topics_to_move(doc) -> list[str]:
    if not isinstance(doc, dict) or not isinstance(doc.get("topics"), list):
        raise UsageError("the topics JSON file must hold {\"topics\": [{\"topic\": \"t\"}], \"version\": 1}")
    topics = []
    for t in doc["topics"]:
        if not isinstance(t, dict) or not isinstance(t.get("topic"), str):
            raise UsageError(f"each entry needs \"topic\": {t}")
        topics.append(t["topic"])
    dups = sorted({t for t in topics if topics.count(t) > 1})
    if dups:
        raise UsageError("List of topics to reassign contains duplicate entries: " + ",".join(dups))
    return topics


def parse_broker_list(text: str) -> list[int]:
    try:
        ids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--broker-list {text!r}: expected broker ids separated by commas") from None
    if not ids:
        raise UsageError("--broker-list is empty")
    if len(set(ids)) != len(ids):
        raise UsageError(f"Duplicate brokers in the broker list: {text}")
    return ids


def assignment_json(assignment: dict[TP, list[int]]) -> str:
    """Kafka's formatAsReassignmentJson."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": rs, "log_dirs": ["any"] * len(rs)}
        for (t, p), rs in sorted(assignment.items())]}, separators=(",", ":"))


def generate(current: dict[TP, list[int]], brokers: list[int], racks: dict[int, str | None],
             rack_aware: bool, rng: random.Random) -> dict[TP, list[int]]:
    """Kafka's generateAssignment: each topic placed anew over the brokers, its RF kept."""
    placement = [BrokerPlacement(b, racks.get(b) if rack_aware else None) for b in brokers]
    if rack_aware and any(racks.get(b) for b in brokers) and not all(racks.get(b) for b in brokers):
        raise UsageError("Not all brokers have rack information. Add --disable-rack-aware in command line to "
                         "make replica assignment without rack information.")
    out: dict[TP, list[int]] = {}
    for topic in sorted({t for t, _ in current}):
        pids = sorted(p for t, p in current if t == topic)
        rf = len(current[(topic, pids[0])])
        if rf > len(brokers):
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"Replication factor: {rf} larger than available brokers: {len(brokers)}.")
        for pid, rs in assign_replicas(placement, len(pids), rf, rng=rng).items():
            out[(topic, pid)] = rs
    return out


class ReassignTool:
    def __init__(self, args):
        self.args = args
        self.admin = make_admin(args, VERSIONS, "krafty-reassign-partitions")

    async def current(self, topics: list[str] | None) -> tuple[dict[TP, list[int]], dict[int, str | None]]:
        """Every partition's replicas (of ``topics``, all when None) and the brokers' racks."""
        r = await self.admin.metadata(topics)
        out = {}
        for t in r.topics:
            if int(t.error_code) == 0 and t.name is not None:
                for p in t.partitions:
                    out[(t.name, int(p.partition_index))] = [int(b) for b in p.replica_nodes]
        return out, {int(b.node_id): b.rack for b in r.brokers}

    async def ongoing(self, tps: list[TP] | None) -> dict[TP, tuple[list[int], list[int], list[int]]]:
        topics: dict[str, list[int]] = {}
        for t, p in tps or ():
            topics.setdefault(t, []).append(p)
        r = await self.admin._send(self.admin._any, ApiKey.LIST_PARTITION_REASSIGNMENTS, {
            "timeout": 30_000, "topics": None if tps is None else [
                {"name": t, "partition_indexes": ps} for t, ps in topics.items()]})
        if int(r.error_code) != 0:
            raise KafkaError(ErrorCode(int(r.error_code)), r.error_message)
        return {(t.name, int(p.partition_index)): (list(p.replicas), list(p.adding_replicas),
                                                   list(p.removing_replicas))
                for t in r.topics for p in t.partitions}

    async def alter(self, moves: dict[TP, list[int] | None]) -> dict[TP, tuple[int, str | None]]:
        topics: dict[str, list] = {}
        for (t, p), rs in moves.items():
            topics.setdefault(t, []).append({"partition_index": p, "replicas": rs})
        r = await self.admin._send(self.admin._any, ApiKey.ALTER_PARTITION_REASSIGNMENTS, {
            "timeout": 30_000, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
        if int(r.error_code) != 0:
            raise KafkaError(ErrorCode(int(r.error_code)), r.error_message)
        return {(t.name, int(p.partition_index)): (int(p.error_code), p.error_message)
                for t in r.responses for p in t.partitions}

    async def topic_configs(self, topic: str) -> dict[str, str]:
        r = await self.admin._send(self.admin._any, ApiKey.DESCRIBE_CONFIGS, {"resources": [
            {"resource_type": 2, "resource_name": topic, "configuration_keys": [LEADER_THROTTLED, FOLLOWER_THROTTLED]}],
            "include_synonyms": False, "include_documentation": False})
        res = r.results[0]
        if int(res.error_code) != 0:
            raise KafkaError(ErrorCode(int(res.error_code)), res.error_message)
        return {c.name: c.value or "" for c in res.configs}

    async def set_topic_configs(self, topic: str, values: dict[str, str | None]) -> None:
        """IncrementalAlterConfigs SET (or DELETE for None) of a topic's keys."""
        r = await self.admin._send(self.admin._any, ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [
            {"resource_type": 2, "resource_name": topic, "configs": [
                {"name": k, "config_operation": 1 if v is None else 0, "value": v} for k, v in values.items()]}],
            "validate_only": False})
        res = r.responses[0]
        if int(res.error_code) != 0:
            raise KafkaError(ErrorCode(int(res.error_code)), res.error_message)

    async def set_throttles(self, current: dict[TP, list[int]], wanted: dict[TP, list[int]], rate: int) -> None:
        """Kafka's modifyReassignmentThrottle: each moving partition's current replicas are throttled
        on the leader side, its new replicas on the follower side (merged into the topics' lists),
        and the brokers involved get the rate (a dynamic broker config)."""
        for topic in sorted({t for t, _ in wanted}):
            moving = {p: (current[(t, p)], rs) for (t, p), rs in wanted.items() if t == topic and current[(t, p)] != rs}
            if not moving:
                continue
            have = await self.topic_configs(topic)
            leader = [x for x in have.get(LEADER_THROTTLED, "").split(",") if x]
            follower = [x for x in have.get(FOLLOWER_THROTTLED, "").split(",") if x]
            for p, (cur, target) in sorted(moving.items()):
                leader += [f"{p}:{b}" for b in cur if f"{p}:{b}" not in leader]
                follower += [f"{p}:{b}" for b in target if b not in cur and f"{p}:{b}" not in follower]
            await self.set_topic_configs(topic, {LEADER_THROTTLED: ",".join(leader),
                                                 FOLLOWER_THROTTLED: ",".join(follower)})
        brokers = sorted({b for tp, rs in wanted.items() for b in (*current[tp], *rs)})
        r = await self.admin._send(self.admin._any, ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [
            {"resource_type": 4, "resource_name": str(b), "configs": [
                {"name": k, "config_operation": 0, "value": str(rate)} for k in (LEADER_RATE, FOLLOWER_RATE)]}
            for b in brokers], "validate_only": False})
        refused = [(x.resource_name, x.error_code, x.error_message) for x in r.responses if int(x.error_code) != 0]
        if refused:
            b, code, msg = refused[0]
            print(f"Warning: broker {b} refused the throttle rate ({error_text(code, msg)}): set {LEADER_RATE} and "
                  f"{FOLLOWER_RATE} in the brokers' configs; the throttled replicas are set on the topics",
                  file=sys.stderr)
        else:
            print(f"The inter-broker throttle limit was set to {rate} B/s")

    async def clear_throttles(self, topics: list[str]) -> None:
        for topic in topics:
            await self.set_topic_configs(topic, {LEADER_THROTTLED: None, FOLLOWER_THROTTLED: None})
            print(f"Clearing topic-level throttles on topic {topic}")

    # ---- actions
    async def do_generate(self) -> int:
        a = self.args
        topics, brokers = a.topics_to_move, a.brokers
        current, racks = await self.current(topics)
        missing = [t for t in topics if not any(tp[0] == t for tp in current)]
        if missing:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {missing[0]} not found")
        unknown = [b for b in brokers if b not in racks]
        if unknown:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"Unknown broker id(s) {','.join(map(str, unknown))}")
        proposed = generate(current, brokers, racks, not a.disable_rack_aware, SYSTEM.rng)
        print("Current partition replica assignment")
        print(assignment_json(current))
        print()
        print("Proposed partition reassignment configuration")
        print(assignment_json(proposed))
        return 0

    async def do_execute(self) -> int:
        a = self.args
        wanted = a.plan
        current, racks = await self.current(sorted({t for t, _ in wanted}))
        missing = [f"{t}-{p}" for t, p in wanted if (t, p) not in current]
        if missing:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"Topic or Partition does not exist: {','.join(missing)}")
        unknown = sorted({b for rs in wanted.values() for b in rs if b not in racks})
        if unknown:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Unknown broker id(s) {','.join(map(str, unknown))}")
        if not a.additional and await self.ongoing(None):
            print("Error: Cannot execute because there is an existing partition assignment.  Use --additional to "
                  "override this and create a new partition assignment in addition to the existing one.",
                  file=sys.stderr)
            return 1
        print("Current partition replica assignment")
        print()
        print(assignment_json({tp: current[tp] for tp in wanted}))
        print()
        print("Save this to use as the --reassignment-json-file option during rollback")
        if a.throttle is not None:
            print("Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
                  "throttle is removed.")
            await self.set_throttles(current, wanted, a.throttle)
        dirs = a.log_dirs or {}
        pending = await self.alter_log_dirs(dirs) if dirs else {}  # before: new replicas are made there
        results = await self.alter(dict(wanted))
        failed = {tp: res for tp, res in results.items() if res[0] != ErrorCode.NONE}
        if failed:
            print("Error reassigning partition(s):", file=sys.stderr)
            for (t, p), (code, msg) in sorted(failed.items()):
                print(f"{t}-{p}: {error_text(code, msg)}", file=sys.stderr)
            return 1
        print("Successfully started partition reassignments for " + ",".join(f"{t}-{p}" for t, p in sorted(wanted)))
        if dirs:
            deadline = asyncio.get_running_loop().time() + a.timeout / 1000
            while pending and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.1)
                pending = await self.alter_log_dirs(pending)
            if pending:
                print("Error: Timeout waiting for replica reassignment of "
                      + ",".join(f"{t}-{p}-{b}" for t, p, b in sorted(pending)), file=sys.stderr)
                return 1
            print("Successfully started log directory move(s) for: "
                  + ",".join(f"{t}-{p}-{b}" for t, p, b in sorted(dirs)))
        return 0

    async def alter_log_dirs(self, dirs: dict[tuple[str, int, int], str]) -> dict[tuple[str, int, int], str]:
        """AlterReplicaLogDirs to each broker concerned; returns the replicas it does not have yet
        (REPLICA_NOT_AVAILABLE: asked again once the reassignment created them). Any other error
        is fatal (KafkaError), as in Kafka's tool."""
        await self.admin.refresh_brokers()
        pending = {}
        by_broker: dict[int, dict[str, dict[str, list[int]]]] = {}
        for (t, p, b), d in dirs.items():
            by_broker.setdefault(b, {}).setdefault(d, {}).setdefault(t, []).append(p)
        for b, per_dir in sorted(by_broker.items()):
            addr = self.admin.brokers.get(b)
            if addr is None:
                raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {b} is not in the cluster")
            r = await self.admin._send(addr, ApiKey.ALTER_REPLICA_LOG_DIRS, {"dirs": [
                {"path": d, "topics": [{"name": t, "partitions": ps} for t, ps in ts.items()]}
                for d, ts in per_dir.items()]})
            for res in r.results:
                for pr in res.partitions:
                    key = (res.topic_name, int(pr.partition_index), b)
                    if pr.error_code == ErrorCode.REPLICA_NOT_AVAILABLE:
                        pending[key] = dirs[key]
                    elif pr.error_code != ErrorCode.NONE:
                        raise KafkaError(ErrorCode(int(pr.error_code)), f"moving replica {key[0]}-{key[1]} of broker {b} to "
                                                             f"{dirs[key]}")
        return pending

    async def replica_log_dirs(self, brokers: set[int]) -> dict[tuple[str, int, int], tuple[str | None, str | None]]:
        """(topic, partition, broker) -> (its log dir, its future replica's dir), by DescribeLogDirs."""
        await self.admin.refresh_brokers()
        out: dict[tuple[str, int, int], tuple[str | None, str | None]] = {}
        for b in sorted(brokers):
            addr = self.admin.brokers.get(b)
            if addr is None:
                continue
            r = await self.admin._send(addr, ApiKey.DESCRIBE_LOG_DIRS, {"topics": None})
            for res in r.results:
                for t in res.topics:
                    for p in t.partitions:
                        cur, fut = out.get((t.name, int(p.partition_index), b), (None, None))
                        if p.is_future_key:
                            fut = res.log_dir
                        else:
                            cur = res.log_dir
                        out[(t.name, int(p.partition_index), b)] = (cur, fut)
        return out

    async def do_verify(self) -> int:
        wanted = self.args.plan
        ongoing = await self.ongoing(sorted(wanted))
        current, _ = await self.current(sorted({t for t, _ in wanted}))
        print("Status of partition reassignment:")
        for (t, p), target in sorted(wanted.items()):
            if (t, p) in ongoing:
                print(f"Reassignment of partition {t}-{p} is still in progress.")
            elif current.get((t, p)) == target:
                print(f"Reassignment of partition {t}-{p} is completed.")
            else:
                have = ",".join(map(str, current.get((t, p), [])))
                print(f"There is no active reassignment of partition {t}-{p}, but replica set is {have} rather "
                      f"than {','.join(map(str, target))}.")
        if self.args.log_dirs:  # Kafka's verifyReplicaMoves
            where = await self.replica_log_dirs({b for _t, _p, b in self.args.log_dirs})
            print()
            print("Reassignment of replicas to log dirs:")
            for (t, p, b), target in sorted(self.args.log_dirs.items()):
                cur, fut = where.get((t, p, b), (None, None))
                if cur is None:
                    print(f"Partition {t}-{p} cannot be found in any live log directory on broker {b}.")
                elif cur == target and fut is None:
                    print(f"Reassignment of replica {t}-{p}-{b} completed successfully.")
                elif fut == target:
                    print(f"Reassignment of replica {t}-{p}-{b} is still in progress.")
                else:
                    print(f"Partition {t}-{p} on broker {b} is not being moved from log dir {cur} to {target}.")
        if not ongoing and not self.args.preserve_throttles:  # as Kafka: throttles go once nothing moves
            print()
            await self.clear_throttles(sorted({t for t, _ in wanted}))
        return 0

    async def do_cancel(self) -> int:
        wanted = self.args.plan
        ongoing = await self.ongoing(sorted(wanted))
        todo = {tp: None for tp in sorted(wanted) if tp in ongoing}
        results = await self.alter(todo) if todo else {}
        done = [tp for tp, (code, _) in results.items() if code == ErrorCode.NONE]
        failed = {tp: res for tp, res in results.items() if res[0] != ErrorCode.NONE}
        if done:
            print("Successfully cancelled partition reassignments for: " + ",".join(f"{t}-{p}" for t, p in done))
        else:
            print("None of the specified partition reassignments are active.")
        for (t, p), (code, msg) in sorted(failed.items()):
            print(f"Error cancelling the reassignment of {t}-{p}: {error_text(code, msg)}", file=sys.stderr)
        return 1 if failed else 0

    async def do_list(self) -> int:
        ongoing = await self.ongoing(None)
        if not ongoing:
            print("No partition reassignments found.")
            return 0
        print("Current partition reassignments:")
        for (t, p), (rs, adding, removing) in sorted(ongoing.items()):
            print(f"{t}-{p}: replicas: {','.join(map(str, rs))}. adding: {','.join(map(str, adding))}. "
                  f"removing: {','.join(map(str, removing))}.")
        return 0

    async def run(self) -> int:
        action = next(x for x in ACTIONS if getattr(self.args, x))
        try:
            await self.admin.start()
            return await getattr(self, f"do_{action}")()
        except KafkaError as e:
            print(f"Error: {error_text(e.code, e.message)}", file=sys.stderr)
            return 1
        finally:
            self.admin.close()


def build_parser() -> Parser:
    p = Parser(prog="krafty reassign-partitions",
               description="Move partition replicas between brokers (like Kafka's kafka-reassign-partitions.sh).")
    add_connection_options(p)
    a = p.add_argument_group("actions (exactly one)")
    a.add_argument("--generate", action="store_true", help="propose an assignment of topics over --broker-list")
    a.add_argument("--execute", action="store_true", help="start the reassignment of --reassignment-json-file")
    a.add_argument("--verify", action="store_true", help="say which reassignments of the file have completed")
    a.add_argument("--cancel", action="store_true", help="cancel the reassignments of the file")
    a.add_argument("--list", action="store_true", help="list the reassignments in progress")
    p.add_argument("--reassignment-json-file", metavar="FILE")
    p.add_argument("--topics-to-move-json-file", metavar="FILE")
    p.add_argument("--broker-list", metavar="ID,ID,...")
    p.add_argument("--disable-rack-aware", action="store_true")
    p.add_argument("--additional", action="store_true", help="--execute while other reassignments are ongoing")
    p.add_argument("--throttle", type=int, metavar="BYTES/S",
                   help="with --execute: throttle the moving replicas' replication to this rate")
    p.add_argument("--preserve-throttles", action="store_true", help="--verify/--cancel leave the throttles")
    p.add_argument("--timeout", type=int, default=10000, metavar="MS",
                   help="with --execute: how long to wait for new replicas to exist before moving them to their "
                        "log dirs (default 10000)")
    return p


def validate(args) -> None:
    actions = [x for x in ACTIONS if getattr(args, x)]
    if len(actions) != 1:
        raise UsageError("Command must include exactly one action: --generate, --execute, --verify, --cancel, --list")
    action = actions[0]
    if action == "generate" and not (args.topics_to_move_json_file and args.broker_list):
        raise UsageError("--generate needs --topics-to-move-json-file and --broker-list")
    if action in ("execute", "verify", "cancel") and not args.reassignment_json_file:
        raise UsageError(f"Missing required argument \"[reassignment-json-file]\" for --{action}")
    if action != "generate" and (args.topics_to_move_json_file or args.broker_list or args.disable_rack_aware):
        raise UsageError("--topics-to-move-json-file, --broker-list and --disable-rack-aware only go with --generate")
    if args.additional and action != "execute":
        raise UsageError("--additional only goes with --execute")
    if args.throttle is not None and (action != "execute" or args.throttle < 0):
        raise UsageError("--throttle takes a rate in bytes/s >= 0 and only goes with --execute")
    # the files are read before connecting: a bad file is a usage error whether or not a broker answers
    doc = (read_json_file(args.reassignment_json_file, "--reassignment-json-file")
           if action in ("execute", "verify", "cancel") else None)
    args.plan = parse_reassignment(doc) if doc is not None else None
    args.log_dirs = parse_log_dirs(doc) if doc is not None else None
    args.topics_to_move = (parse_topics_to_move(read_json_file(args.topics_to_move_json_file,
                                                               "--topics-to-move-json-file"))
                           if action == "generate" else None)
    args.brokers = parse_broker_list(args.broker_list) if action == "generate" else None


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)

    async def run() -> int:
        validate(args)
        return await ReassignTool(args).run()

    return run_tool("reassign-partitions", run)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
