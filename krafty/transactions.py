"""``krafty transactions`` -- Kafka's kafka-transactions.sh for krafty (and any Kafka).

    transactions --bootstrap-server H:P [--command-config F] list [--duration-filter MS]
    transactions --bootstrap-server H:P describe --transactional-id ID
    transactions --bootstrap-server H:P describe-producers --topic T --partition P [--broker-id B]
    transactions --bootstrap-server H:P find-hanging (--broker-id B | --topic T [--partition P])
        [--max-transaction-timeout MINUTES]
    transactions --bootstrap-server H:P abort --topic T --partition P
        (--start-offset O | --producer-id ID --producer-epoch E --coordinator-epoch C)

The requests are the ones Kafka's AdminClient sends: ListTransactions to every broker,
FindCoordinator (TRANSACTION) and DescribeTransactions at the coordinator, DescribeProducers at
a partition's leader (or at --broker-id), and for ``abort`` a WriteTxnMarkers ABORT straight to
the partition's leader (with the producer's id and epoch and the coordinator epoch, which
``--start-offset`` looks up with DescribeProducers). Tables are printed as Kafka's tool prints
them (columns padded and tab-separated); a failure is one line on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from broker.protocol.apis import ApiKey
from broker.security.sasl import client_security_from_properties
from common.clock import SYSTEM
from common.config import ConfigError, parse_properties
from common.errors import ErrorCode
from krafty.consumer_groups import OUR_VERSIONS as GROUP_VERSIONS
from krafty.consumer_groups import GroupAdmin, ToolError, _err, _err_name, parse_bootstrap

CLIENT_ID = "krafty-transactions"
OUR_VERSIONS = {**GROUP_VERSIONS, ApiKey.DESCRIBE_TRANSACTIONS: (0, 0), ApiKey.LIST_TRANSACTIONS: (0, 1),
                ApiKey.DESCRIBE_PRODUCERS: (0, 0), ApiKey.WRITE_TXN_MARKERS: (1, 1)}
_RETRY = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR}

LIST_HEADER = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADER = ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                   "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions")
PRODUCERS_HEADER = ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                    "CurrentTransactionStartOffset")
HANGING_HEADER = ("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                  "LastTimestamp", "Duration(min)")


def pretty_table(header: tuple[str, ...], rows: list[tuple]) -> str:
    """Kafka's ToolsUtils.prettyPrintTable: every column padded to its widest cell, then a tab."""
    cells = [tuple(header)] + [tuple(str(c) for c in r) for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("".join(c.ljust(w) + "\t" for c, w in zip(r, widths, strict=True)) for r in cells)


class TxnAdmin(GroupAdmin):
    our_versions = OUR_VERSIONS
    client_id = CLIENT_ID

    async def list_transactions(self, duration_ms: int = -1, producer_ids=()) -> list[tuple[str, int, int, str]]:
        """(transactional id, coordinator, producer id, state) from every broker."""
        if not self.brokers:
            await self.refresh_brokers()
        v = self.version(ApiKey.LIST_TRANSACTIONS)
        if duration_ms >= 0 and v < 1:
            raise ToolError("the broker does not support --duration-filter (ListTransactions v1)")
        out = []
        for node, addr in sorted(self.brokers.items()):
            deadline = SYSTEM.monotonic() + max(self.timeout, 10.0)
            while True:
                r = await self._send(addr, ApiKey.LIST_TRANSACTIONS, {
                    "state_filters": [], "producer_id_filters": list(producer_ids), "duration_filter": duration_ms}, v)
                code = _err(r.error_code)
                if code in _RETRY and SYSTEM.monotonic() < deadline:
                    await asyncio.sleep(0.2)
                    continue
                if code != ErrorCode.NONE:
                    raise ToolError(f"Failed to list transactions: ListTransactions on broker {node} answered "
                                    f"{_err_name(code)}")
                break
            out += [(t.transactional_id, node, int(t.producer_id), t.transaction_state) for t in r.transaction_states]
        return out

    async def describe_transaction(self, tid: str, missing_ok: bool = False):
        """(coordinator id, the DescribeTransactions entry); (id, None) for an unknown id when
        ``missing_ok``."""
        deadline = SYSTEM.monotonic() + max(self.timeout, 10.0)
        while True:
            node = await self.find_coordinator(tid, deadline, key_type=1, what="transactional id")
            r = await self._send((node[1], node[2]), ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [tid]})
            d = r.transaction_states[0]
            code = _err(d.error_code)
            if code in _RETRY and SYSTEM.monotonic() < deadline:
                await asyncio.sleep(0.2)
                continue
            if code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND and missing_ok:
                return node[0], None
            if code != ErrorCode.NONE:
                raise ToolError(f"Failed to describe transaction state of transactional-id `{tid}`: {_err_name(code)}")
            return node[0], d

    async def leader_of(self, topic: str, partition: int) -> int:
        leaders = await self.partitions([topic])
        if topic not in leaders:
            raise ToolError(f"topic {topic} does not exist")
        if partition not in leaders[topic]:
            raise ToolError(f"partition {topic}-{partition} does not exist")
        leader = leaders[topic][partition]
        if leader < 0 or leader not in self.brokers:
            raise ToolError(f"partition {topic}-{partition} has no leader at the moment; try again")
        return leader

    async def describe_producers(self, tps: list[tuple[str, int]], broker_id: int | None = None) -> dict:
        """{(topic, partition): [ProducerState]} from each partition's leader, or from ``broker_id``."""
        v = self.version(ApiKey.DESCRIBE_PRODUCERS)
        by_node: dict[int, list[tuple[str, int]]] = {}
        for t, p in tps:
            node = broker_id if broker_id is not None else await self.leader_of(t, p)
            by_node.setdefault(node, []).append((t, p))
        out: dict = {}
        for node, items in by_node.items():
            if node not in self.brokers:
                raise ToolError(f"broker {node} is not in the cluster")
            topics: dict[str, list[int]] = {}
            for t, p in items:
                topics.setdefault(t, []).append(p)
            r = await self._send(self.brokers[node], ApiKey.DESCRIBE_PRODUCERS, {
                "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]}, v)
            for t in r.topics:
                for p in t.partitions:
                    code = _err(p.error_code)
                    where = f"broker {broker_id}" if broker_id is not None else "leader"
                    if code != ErrorCode.NONE:
                        raise ToolError(f"Failed to describe producers for partition {t.name}-{p.partition_index} "
                                        f"on {where}: {_err_name(code)}" + (f" ({p.error_message})"
                                                                             if p.error_message else ""))
                    out[(t.name, int(p.partition_index))] = list(p.active_producers)
        return out

    async def abort(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                    coordinator_epoch: int) -> None:
        """WriteTxnMarkers ABORT at the partition's leader (Kafka's Admin.abortTransaction)."""
        leader = await self.leader_of(topic, partition)
        r = await self._send(self.brokers[leader], ApiKey.WRITE_TXN_MARKERS, {"markers": [{
            "producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": False,
            "coordinator_epoch": coordinator_epoch, "topics": [{"name": topic, "partition_indexes": [partition]}]}]})
        for m in r.markers:
            for t in m.topics:
                for p in t.partitions:
                    code = _err(p.error_code)
                    if code != ErrorCode.NONE:
                        raise ToolError(f"Failed to abort transaction (topic {topic}, partition {partition}, "
                                        f"producer id {producer_id}, epoch {producer_epoch}, coordinator epoch "
                                        f"{coordinator_epoch}): {_err_name(code)}")


class Tool:
    def __init__(self, args, out=None, err=None):
        self.args = args
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        security = None
        if args.command_config:
            try:
                with open(args.command_config, encoding="utf-8") as f:
                    props = {k: v for k, v, _ in parse_properties(f.read())}
                security = client_security_from_properties(props)
            except OSError as e:
                raise ToolError(f"cannot read --command-config {args.command_config}: {e.strerror}") from None
            except ConfigError as e:
                raise ToolError(f"--command-config {args.command_config}: {e}") from None
        self.admin = TxnAdmin(parse_bootstrap(args.bootstrap_server), args.timeout / 1000, security=security)

    def print(self, text: str = "") -> None:
        print(text, file=self.out)

    async def run(self) -> int:
        try:
            await self.admin.start()
            await getattr(self, "do_" + self.args.command.replace("-", "_"))()
            return 0
        finally:
            self.admin.close()

    async def do_list(self) -> None:
        rows = await self.admin.list_transactions(self.args.duration_filter if self.args.duration_filter is not None
                                                  else -1)
        self.print(pretty_table(LIST_HEADER, [(tid, node, pid, state) for tid, node, pid, state in rows]))

    async def do_describe(self) -> None:
        tid = self.args.transactional_id
        node, d = await self.admin.describe_transaction(tid)
        start = int(d.transaction_start_time)
        now = SYSTEM.wall_ms()
        parts = ",".join(f"{t.topic}-{p}" for t in d.topics for p in t.partitions)
        self.print(pretty_table(DESCRIBE_HEADER, [(
            node, tid, int(d.producer_id), int(d.producer_epoch), d.transaction_state,
            int(d.transaction_timeout.total_seconds() * 1000), start if start >= 0 else "None",
            now - start if start >= 0 else "None", parts)]))

    async def do_describe_producers(self) -> None:
        a = self.args
        res = await self.admin.describe_producers([(a.topic, a.partition)], a.broker_id)
        rows = [(int(s.producer_id), int(s.producer_epoch), int(s.coordinator_epoch), int(s.last_sequence),
                 int(s.last_timestamp), int(s.current_txn_start_offset) if s.current_txn_start_offset >= 0 else "None")
                for s in res.get((a.topic, a.partition), [])]
        self.print(pretty_table(PRODUCERS_HEADER, rows))

    async def do_find_hanging(self) -> None:
        a = self.args
        if a.topic is None and a.broker_id is None:
            raise ToolError("The `find-hanging` command requires either --topic or --broker-id to limit the scope "
                            "of the search")
        if a.partition is not None and a.topic is None:
            raise ToolError("The --partition argument requires --topic to be provided")
        if a.topic is not None and a.partition is not None:
            tps = [(a.topic, a.partition)]
        else:
            r = await self.admin.metadata(None if a.topic is None else [a.topic])
            tps = []
            for t in r.topics:
                if int(t.error_code) != 0:
                    if a.topic is not None:
                        raise ToolError(f"Failed to describe topic {a.topic}: {_err_name(t.error_code)}")
                    continue
                for p in t.partitions:
                    if a.broker_id is None or a.broker_id in list(p.replica_nodes):
                        tps.append((t.name, int(p.partition_index)))
        max_ms = a.max_transaction_timeout * 60_000
        now = SYSTEM.wall_ms()
        open_txns = []  # (tp, producer state)
        batch = 500
        for i in range(0, len(tps), batch):
            res = await self.admin.describe_producers(tps[i:i + batch], a.broker_id)
            for tp, states in sorted(res.items()):
                for s in states:
                    if int(s.current_txn_start_offset) >= 0 and now - int(s.last_timestamp) > max_ms:
                        open_txns.append((tp, s))
        hanging = []
        if open_txns:
            pids = {int(s.producer_id) for _, s in open_txns}
            tids = {pid: tid for tid, _, pid, _ in await self.admin.list_transactions(-1, sorted(pids))
                    if pid in pids}
            described: dict[str, object] = {}
            for tid in set(tids.values()):
                described[tid] = (await self.admin.describe_transaction(tid, missing_ok=True))[1]
            for tp, s in open_txns:
                tid = tids.get(int(s.producer_id))
                d = described.get(tid) if tid is not None else None
                # the coordinator still lists the partition while it owes it a marker: not hanging
                if d is None or tp not in {(t.topic, p) for t in d.topics for p in t.partitions}:
                    hanging.append((tp, s))
        rows = [(t, p, int(s.producer_id), int(s.producer_epoch), int(s.coordinator_epoch),
                 int(s.current_txn_start_offset), int(s.last_timestamp), (now - int(s.last_timestamp)) // 60_000)
                for (t, p), s in hanging]
        self.print(pretty_table(HANGING_HEADER, rows))

    async def do_abort(self) -> None:
        a = self.args
        if a.start_offset is None and a.producer_id is None:
            raise ToolError("The transaction to abort must be identified either with --start-offset (for brokers on "
                            "3.0 or above) or with --producer-id, --producer-epoch, and --coordinator-epoch (for "
                            "older brokers)")
        if a.start_offset is None:
            if a.producer_epoch is None:
                raise ToolError("Missing required argument --producer-epoch")
            if a.coordinator_epoch is None:
                raise ToolError("Missing required argument --coordinator-epoch")
            # a hanging transaction begun by a new producer id has coordinator epoch -1: 0 is <= any leader epoch
            spec = (a.producer_id, a.producer_epoch, max(a.coordinator_epoch, 0))
        else:
            res = await self.admin.describe_producers([(a.topic, a.partition)])
            found = [s for s in res.get((a.topic, a.partition), []) if int(s.current_txn_start_offset) == a.start_offset]
            if not found:
                raise ToolError(f"Could not find any open transactions starting at offset {a.start_offset} on "
                                f"partition {a.topic}-{a.partition}")
            s = found[0]
            spec = (int(s.producer_id), int(s.producer_epoch), max(int(s.coordinator_epoch), 0))
        await self.admin.abort(a.topic, a.partition, *spec)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="krafty transactions", description=(
        "This tool is used to analyze the transactional state of producers in the cluster. It can be used to "
        "detect and recover from hanging transactions."))
    p.add_argument("--bootstrap-server", required=True, help="HOST:PORT[,HOST:PORT...] of the brokers")
    p.add_argument("--command-config", help="Kafka client properties (security.protocol, sasl.*, ssl.*)")
    p.add_argument("--timeout", type=int, default=30_000, help="request timeout (ms)")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list transactions").add_argument(
        "--duration-filter", type=int, help="only transactions running longer than this many milliseconds")
    d = sub.add_parser("describe", help="describe the state of an active transactional-id")
    d.add_argument("--transactional-id", required=True)
    dp = sub.add_parser("describe-producers", help="describe the states of active producers for a topic partition")
    dp.add_argument("--broker-id", type=int, help="describe the producer state on this replica (default: the leader)")
    dp.add_argument("--topic", required=True)
    dp.add_argument("--partition", type=int, required=True)
    fh = sub.add_parser("find-hanging", help="find hanging transactions")
    fh.add_argument("--broker-id", type=int, help="broker id to search for hanging transactions")
    fh.add_argument("--max-transaction-timeout", type=int, default=15,
                    help="maximum transaction timeout in minutes to limit the scope of the search (default 15)")
    fh.add_argument("--topic", help="topic name to limit search to (required if --partition is specified)")
    fh.add_argument("--partition", type=int)
    ab = sub.add_parser("abort", help="abort a hanging transaction (requires administrative privileges)")
    ab.add_argument("--topic", required=True)
    ab.add_argument("--partition", type=int, required=True)
    ab.add_argument("--start-offset", type=int, help="start offset of the transaction to abort")
    ab.add_argument("--producer-id", type=int)
    ab.add_argument("--producer-epoch", type=int)
    ab.add_argument("--coordinator-epoch", type=int)
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        tool = Tool(args)
        return asyncio.run(tool.run())
    except ToolError as e:
        print(str(e), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
