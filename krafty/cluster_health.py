"""``krafty cluster health`` -- like ``rpk cluster health``.

    cluster health --bootstrap-server H:P [--command-config FILE] [--watch] [--exit-when-healthy]

Asks one broker for the cluster's metadata (every topic's partitions) and the quorum
(DescribeQuorum, which the broker forwards to the active controller) and prints rpk's
overview: healthy or not and why, the active controller, every broker known (alive or
named in a replica list), the brokers down, the partitions without a live leader and the
under-replicated ones. Exit code 0 when healthy, 1 when not (or when no broker answers),
2 for a bad command line. --watch prints the overview again every 2 s until interrupted;
--exit-when-healthy waits until the cluster is healthy.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass, field

from broker.protocol.apis import ApiKey
from krafty.admin_tool import Parser, ToolError, add_connection_options, make_admin, run_tool

VERSIONS = {ApiKey.DESCRIBE_QUORUM: (0, 2)}
METADATA_TOPIC = "__cluster_metadata"


@dataclass
class Health:
    controller: int = -1
    brokers: list[int] = field(default_factory=list)
    down: list[int] = field(default_factory=list)
    leaderless: list[str] = field(default_factory=list)
    under_replicated: list[str] = field(default_factory=list)

    @property
    def reasons(self) -> list[str]:
        return [name for name, bad in (("no_elected_controller", self.controller < 0), ("nodes_down", self.down),
                                       ("leaderless_partitions", self.leaderless),
                                       ("under_replicated_partitions", self.under_replicated)) if bad]

    @property
    def healthy(self) -> bool:
        return not self.reasons

    def render(self) -> str:
        def ids(xs):
            return "[" + " ".join(map(str, xs)) + "]"
        rows = [("Healthy:", str(self.healthy).lower()), ("Unhealthy reasons:", ids(self.reasons)),
                ("Controller ID:", str(self.controller)), ("All nodes:", ids(self.brokers)),
                ("Nodes down:", ids(self.down)),
                (f"Leaderless partitions ({len(self.leaderless)}):", ids(self.leaderless)),
                (f"Under-replicated partitions ({len(self.under_replicated)}):", ids(self.under_replicated))]
        width = max(len(k) for k, _ in rows) + 2
        return "\n".join(["CLUSTER HEALTH OVERVIEW", "=======================",
                          *(k.ljust(width) + v for k, v in rows)])


def assess(metadata, quorum_leader: int) -> Health:
    """The overview from a Metadata response (all topics) and the quorum's leader (-1: none)."""
    alive = {int(b.node_id) for b in metadata.brokers}
    known = set(alive)
    h = Health(controller=quorum_leader)
    for t in sorted(metadata.topics, key=lambda t: t.name or ""):
        if int(t.error_code) != 0 or t.name is None:
            continue
        for p in sorted(t.partitions, key=lambda p: p.partition_index):
            replicas = [int(b) for b in p.replica_nodes]
            known.update(replicas)
            name = f"{t.name}/{p.partition_index}"
            if int(p.leader_id) < 0 or int(p.leader_id) not in alive:
                h.leaderless.append(name)
            elif len(p.isr_nodes) < len(replicas):
                h.under_replicated.append(name)
    h.brokers = sorted(known)
    h.down = sorted(known - alive)
    return h


async def check(admin) -> Health:
    r = await admin.metadata(None)
    leader = -1
    try:
        q = await admin._send(admin._any, ApiKey.DESCRIBE_QUORUM, {"topics": [
            {"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]})
        if int(q.error_code) == 0 and q.topics and int(q.topics[0].partitions[0].error_code) == 0:
            leader = int(q.topics[0].partitions[0].leader_id)
    except ToolError:  # a broker without DescribeQuorum: the quorum is not known
        leader = int(r.controller_id)
    return assess(r, leader)


def build_parser() -> Parser:
    p = Parser(prog="krafty cluster health", description="The cluster's health, like rpk cluster health: brokers "
               "up, the active controller, leaderless and under-replicated partitions; exit code 1 when unhealthy.")
    add_connection_options(p)
    p.add_argument("--watch", action="store_true", help="print the overview every 2 s until interrupted")
    p.add_argument("--exit-when-healthy", action="store_true", help="wait until the cluster is healthy, then exit 0")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)

    async def run() -> int:
        admin = make_admin(args, VERSIONS, "krafty-cluster-health", timeout_s=10.0)
        try:
            await admin.start()
            while True:
                h = await check(admin)
                print(h.render(), flush=True)
                if not (args.watch or args.exit_when_healthy) or (args.exit_when_healthy and h.healthy):
                    return 0 if h.healthy else 1
                await asyncio.sleep(2)
                print()
        finally:
            admin.close()

    return run_tool("cluster health", run)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
