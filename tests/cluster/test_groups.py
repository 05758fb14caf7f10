"""Consumer groups on a real 3-controller + 3-broker cluster: ``kill -9`` of the group's
coordinator. The members (confluent-kafka, kafka-python and aiokafka in one group) find the
new coordinator (the new leader of the group's ``__consumer_offsets`` partition, RF 3,
written with acks=all), the offsets committed before the kill are all there, and
consumption carries on; when the killed broker returns and takes its preferred leadership
back, the interim coordinator unloads the group and the returning one loads it again."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections import Counter

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from common.errors import ErrorCode
from tests.cluster.conftest import FAST, ROOT, running_cluster, wait_until
from tests.integration.group_workers import (
    committed_offsets,
    find_coordinator,
    make_worker,
    produce,
    split_ok,
    wait_for,
)

OVERRIDES = {
    **FAST,
    "group.initial.rebalance.delay.ms": "200",
    "offsets.topic.num.partitions": "6",  # RF 3 by default: every broker holds every partition
}
TOPIC = "orders"
CLIENTS = ["confluent-kafka", "kafka-python", "aiokafka"]


@pytest.fixture
def gcluster(tmp_path, request):
    """The cluster fixture's Cluster with a short initial rebalance delay."""
    with running_cluster(tmp_path, request, overrides=OVERRIDES) as c:
        yield c


def _cli(*args: str) -> str:
    p = subprocess.run([sys.executable, "-m", "krafty", "consumer-groups", *args], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, f"rc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p.stdout


def _offset_fetch_error(host: str, port: int, group: str) -> int:
    """The error code of an OffsetFetch for ``group`` sent straight to one broker."""
    async def go():
        conn = KafkaConnection(host, port, client_id="test-groups")
        try:
            r = await conn.request(ApiKey.OFFSET_FETCH, 8, {"groups": [{"group_id": group, "topics": None}],
                                                            "require_stable": False})
            return int(r.groups[0].error_code)
        finally:
            conn.close()
    return asyncio.run(go())


def _seen(workers) -> Counter:
    return Counter(r for w in workers for r in w.consumed())


class _ReadAll:
    """True once every partition's offsets below ``upto`` were read; says what is missing."""

    def __init__(self, workers, tps, upto: int):
        self.workers, self.tps, self.upto = workers, tps, upto

    def __call__(self) -> bool:
        seen = _seen(self.workers)
        return all((t, p, o) in seen for t, p in self.tps for o in range(self.upto))

    def __str__(self) -> str:
        seen = _seen(self.workers)
        missing = {f"{t}-{p}": [o for o in range(self.upto) if (t, p, o) not in seen] for t, p in sorted(self.tps)}
        return f"offsets below {self.upto} (missing: { {k: (v[0], len(v)) for k, v in missing.items() if v} })"


def _read_all(workers, tps, upto: int):
    return _ReadAll(workers, tps, upto)


def test_coordinator_kill_9_moves_the_group_and_keeps_committed_offsets(gcluster):
    c = gcluster
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == c.n_brokers, 90, "all brokers registered")
    admin.create_topics([NewTopic(TOPIC, 6, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(30)
    wait_until(lambda: all(p.leader >= 0 and len(p.isrs) == 3 for p in
                           admin.list_topics(TOPIC, timeout=5).topics[TOPIC].partitions.values()), 30, "leaders")
    tps = {(TOPIC, p) for p in range(6)}
    group = "orders-app"
    bs = c.bootstrap
    produce(bs, TOPIC, 6, 20)

    ws = [make_worker(client, bs, group, [TOPIC], client_id=f"m{i}") for i, client in enumerate(CLIENTS)]
    for w in ws:
        w.start()
    try:
        wait_for(lambda: split_ok(ws, tps), 90, "3 members (one per client) owning the 6 partitions", ws)
        wait_for(_read_all(ws, tps, 20), 60, "the first 20 records of each partition", ws)
        wait_for(lambda: committed_offsets(bs, group) == {tp: 20 for tp in tps}, 60, "offsets 20 committed", ws)
        assert all(n == 1 for n in _seen(ws).values()), "every record read once while nothing failed"

        coord, _, _ = find_coordinator(bs, group)
        offsets_topic = admin.list_topics("__consumer_offsets", timeout=5).topics["__consumer_offsets"]
        assert len(offsets_topic.partitions) == 6
        assert all(len(p.replicas) == 3 and len(p.isrs) == 3 for p in offsets_topic.partitions.values())

        c.kill(c.broker_name(coord))
        t_kill = time.monotonic()
        new, new_host, new_port = wait_until(lambda: (n := find_coordinator(bs, group))[0] != coord and n, 60,
                                             "a new coordinator")
        # everything committed before the kill is there, read from the new coordinator
        assert committed_offsets(bs, group) == {tp: 20 for tp in tps}
        failover_s = time.monotonic() - t_kill
        print(f"coordinator {coord} killed; broker {new} coordinates after {failover_s:.2f}s")

        produce(bs, TOPIC, 6, 20)
        pred = _read_all(ws, tps, 40)
        try:
            wait_for(pred, 90, "records 20-39 after the coordinator kill", ws)
        except AssertionError as e:
            raise AssertionError(f"{e}: {pred}") from None
        wait_for(lambda: committed_offsets(bs, group) == {tp: 40 for tp in tps}, 60, "offsets 40 committed", ws)
        seen = _seen(ws)
        assert all(seen[(t, p, o)] == 1 for t, p in tps for o in range(20)), \
            "nothing committed before the kill was read again"

        # the killed broker comes back and becomes preferred leader again: the group moves back
        c.start(c.broker_name(coord))
        wait_until(lambda: find_coordinator(bs, group)[0] == coord, 90, f"broker {coord} coordinating again")
        # the interim coordinator unloaded the group: it no longer answers for it
        wait_until(lambda: _offset_fetch_error(new_host, new_port, group) == ErrorCode.NOT_COORDINATOR, 30,
                   f"broker {new} to answer NOT_COORDINATOR for {group}")
        assert committed_offsets(bs, group) == {tp: 40 for tp in tps}
        produce(bs, TOPIC, 6, 10)
        wait_for(_read_all(ws, tps, 50), 90, "records 40-49 after the coordinator returned", ws)
        wait_for(lambda: committed_offsets(bs, group) == {tp: 50 for tp in tps}, 60, "offsets 50 committed", ws)
        assert split_ok(ws, tps)

        # the CLI against the 3 brokers: ListGroups asks each broker, --describe the coordinator
        assert group in _cli("--bootstrap-server", bs, "--list").split()
        out = _cli("--bootstrap-server", bs, "--describe", "--group", group)
        table = sorted(ln.split() for ln in out.splitlines() if ln.startswith(group + " "))
        assert [(r[1], r[2], r[3], r[4], r[5]) for r in table] == [
            (TOPIC, str(p), "50", "50", "0") for p in range(6)], out
        assert len({r[6] for r in table}) == 3, f"three members own the partitions:\n{out}"
    finally:
        for w in ws:
            if w.is_alive():
                w.stop()
