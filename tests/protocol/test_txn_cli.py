"""``krafty transactions`` (Kafka's kafka-transactions.sh) against an in-process node.

``list`` and ``describe`` talk to the transaction coordinator. ``describe-producers``,
``find-hanging`` and ``abort`` need the partition leaders' DescribeProducers and
WriteTxnMarkers (the data plane); here the node gets stand-ins for those two APIs that answer
from a script and record what they receive, so the tool's requests and output are checked on
the wire."""

from __future__ import annotations

import io
import time

import pytest

from broker.protocol import codec
from broker.protocol.apis import SUPPORTED, ApiKey
from krafty.consumer_groups import ToolError
from krafty.transactions import Tool, build_parser, pretty_table
from tests.protocol.test_txn_apis import Env


async def run_tool(env: Env, *argv: str) -> str:
    out = io.StringIO()
    args = build_parser().parse_args(["--bootstrap-server", f"127.0.0.1:{env.port}", *argv])
    assert await Tool(args, out=out).run() == 0
    return out.getvalue()


def rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in line.split("\t")[:-1]] for line in text.splitlines()]


@pytest.fixture
async def env(tmp_path):
    e = await Env(tmp_path).start()
    yield e
    await e.close()


def test_tables_are_printed_as_kafkas_tool_prints_them():
    assert pretty_table(("A", "Long"), [("xyz", 1)]) == "A  \tLong\t\nxyz\t1   \t"


async def test_list_and_describe(env):
    for tid in ("cli-a", "cli-b"):
        await env.find(tid)
    _, pa, ea = await env.init("cli-a")
    _, pb, eb = await env.init("cli-b")
    await env.add("cli-a", pa, ea, {"t1": [0, 2]})
    out = rows(await run_tool(env, "list"))
    assert out[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert sorted(out[1:]) == [["cli-a", "1", str(pa), "Ongoing"], ["cli-b", "1", str(pb), "Empty"]]
    assert rows(await run_tool(env, "list", "--duration-filter", "3600000"))[1:] == [["cli-b", "1", str(pb), "Empty"]]

    (header, row) = rows(await run_tool(env, "describe", "--transactional-id", "cli-a"))
    assert header == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                      "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                      "TopicPartitions"]
    assert row[:6] == ["1", "cli-a", str(pa), str(ea), "Ongoing", "60000"]
    assert abs(int(row[6]) - int(time.time() * 1000)) < 10_000 and 0 <= int(row[7]) < 10_000
    assert row[8] == "t1-0,t1-2"
    (_, row) = rows(await run_tool(env, "describe", "--transactional-id", "cli-b"))
    assert row[4:8] == ["Empty", "60000", "None", "None"]
    with pytest.raises(ToolError, match="Failed to describe transaction state of transactional-id `nobody`: "
                                        "TRANSACTIONAL_ID_NOT_FOUND"):
        await run_tool(env, "describe", "--transactional-id", "nobody")


class DataPlane:
    """Stand-ins for the partition leaders' DescribeProducers and WriteTxnMarkers on the node."""

    def __init__(self, env: Env, monkeypatch):
        self.producers: dict[tuple[str, int], list[dict]] = {}
        self.markers: list = []
        apis = env.node.broker.apis
        monkeypatch.setitem(SUPPORTED, ApiKey.DESCRIBE_PRODUCERS, (0, 0))
        monkeypatch.setitem(SUPPORTED, ApiKey.WRITE_TXN_MARKERS, (1, 1))
        monkeypatch.setitem(apis.handlers, ApiKey.DESCRIBE_PRODUCERS, self.describe_producers)
        monkeypatch.setitem(apis.handlers, ApiKey.WRITE_TXN_MARKERS, self.write_txn_markers)

    async def describe_producers(self, ctx, body, ver):
        req = codec.decode_request(ApiKey.DESCRIBE_PRODUCERS, ver, bytes(body), 0)
        return {"throttle_time": 0, "topics": [{"name": t.name, "partitions": [
            {"partition_index": p, "error_code": 0, "error_message": None,
             "active_producers": self.producers.get((t.name, p), [])} for p in t.partition_indexes]}
            for t in req.topics]}

    async def write_txn_markers(self, ctx, body, ver):
        req = codec.decode_request(ApiKey.WRITE_TXN_MARKERS, ver, bytes(body), 0)
        out = []
        for m in req.markers:
            self.markers.append(m)
            out.append({"producer_id": m.producer_id, "topics": [{"name": t.name, "partitions": [
                {"partition_index": p, "error_code": 0} for p in t.partition_indexes]} for t in m.topics]})
        return {"markers": out}


def producer(pid: int, epoch: int, start: int, last_ts: int, coordinator_epoch: int = 0) -> dict:
    return {"producer_id": pid, "producer_epoch": epoch, "last_sequence": 9, "last_timestamp": last_ts,
            "coordinator_epoch": coordinator_epoch, "current_txn_start_offset": start}


async def test_describe_producers_find_hanging_and_abort(env, monkeypatch):
    dp = DataPlane(env, monkeypatch)
    await env.find("live")
    _, pid, epoch = await env.init("live")
    await env.add("live", pid, epoch, {"t1": [0]})
    old = int(time.time() * 1000) - 20 * 60_000
    dp.producers[("t1", 0)] = [producer(pid, epoch, 100, old, 3),  # in the coordinator's open transaction
                               producer(777, 2, 120, old, 1),  # no transactional id knows it: hanging
                               producer(778, 0, 130, int(time.time() * 1000))]  # too recent to tell
    dp.producers[("t1", 1)] = [producer(pid, epoch, 50, old, 3)]  # not in the transaction: hanging
    dp.producers[("t1", 2)] = [producer(779, 0, -1, old)]  # no open transaction

    out = rows(await run_tool(env, "describe-producers", "--topic", "t1", "--partition", "0"))
    assert out == [["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                    "CurrentTransactionStartOffset"], [str(pid), str(epoch), "3", "9", str(old), "100"],
                   ["777", "2", "1", "9", str(old), "120"], ["778", "0", "0", "9", out[3][4], "130"]]
    assert rows(await run_tool(env, "describe-producers", "--topic", "t1", "--partition", "2"))[1][5] == "None"

    out = rows(await run_tool(env, "find-hanging", "--topic", "t1"))
    assert out[0] == ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                      "LastTimestamp", "Duration(min)"]
    assert sorted(out[1:]) == [["t1", "0", "777", "2", "1", "120", str(old), "20"],
                               ["t1", "1", str(pid), str(epoch), "3", "50", str(old), "20"]]
    assert rows(await run_tool(env, "find-hanging", "--broker-id", "1", "--max-transaction-timeout", "30")) == [
        rows(await run_tool(env, "find-hanging", "--topic", "t1"))[0]]

    assert await run_tool(env, "abort", "--topic", "t1", "--partition", "0", "--start-offset", "120") == ""
    (m,) = dp.markers
    assert (m.producer_id, m.producer_epoch, m.transaction_result, m.coordinator_epoch,
            [(t.name, list(t.partition_indexes)) for t in m.topics]) == (777, 2, False, 1, [("t1", [0])])
    await run_tool(env, "abort", "--topic", "t1", "--partition", "1", "--producer-id", "5", "--producer-epoch", "3",
                   "--coordinator-epoch", "-1")
    assert (dp.markers[1].producer_id, dp.markers[1].coordinator_epoch) == (5, 0)
    with pytest.raises(ToolError, match="Could not find any open transactions starting at offset 99"):
        await run_tool(env, "abort", "--topic", "t1", "--partition", "0", "--start-offset", "99")
    with pytest.raises(ToolError, match="--start-offset .* or with --producer-id"):
        await run_tool(env, "abort", "--topic", "t1", "--partition", "0")
    with pytest.raises(ToolError, match="requires either --topic or --broker-id"):
        await run_tool(env, "find-hanging")


async def test_tools_needing_the_data_plane_say_so_when_the_broker_lacks_it(env, monkeypatch):
    monkeypatch.delitem(SUPPORTED, ApiKey.DESCRIBE_PRODUCERS, raising=False)
    with pytest.raises(ToolError, match="does not support DESCRIBE_PRODUCERS"):
        await run_tool(env, "describe-producers", "--topic", "t1", "--partition", "0")
