"""``krafty mirror`` under faults: a produce stream into a 3-broker source cluster while the mirror
process and a source broker are killed with SIGKILL (and the mirror is then stopped and started
again cleanly); the target must then hold every source record, partition by partition (in order; at least once by default, exactly once with
transactions). And two mirror instances sharing the partitions through their group."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import FAST, running_cluster, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from mirror_harness import (  # noqa: E402
    MirrorProcess,
    ProduceStream,
    dedupe,
    mirror_config,
    read_partition,
    start_cluster,
)

PARTS = 3


@pytest.fixture
def target(tmp_path):
    node = start_cluster(tmp_path / "target", "B")
    yield node
    node.close()


def _source(tmp_path, request):
    (tmp_path / "source").mkdir(exist_ok=True)
    return running_cluster(tmp_path / "source", request, controllers=1, brokers=3,
                           overrides={**FAST, "group.initial.rebalance.delay.ms": "200"})


def _create(bootstrap: str, topic: str, partitions: int, rf: int) -> None:
    a = AdminClient({"bootstrap.servers": bootstrap})
    wait_until(lambda: len(a.list_topics(timeout=5).brokers) >= rf, 90, "brokers registered")
    a.create_topics([NewTopic(topic, partitions, rf, config={"min.insync.replicas": str(min(2, rf))})])[topic].result(30)
    wait_until(lambda: all(p.leader >= 0 and len(p.isrs) == rf for p in
                           a.list_topics(timeout=5).topics[topic].partitions.values()), 60, "leaders and ISR")


def _leader(bootstrap: str, topic: str, partition: int) -> int:
    return AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=5).topics[topic].partitions[partition].leader


def _holds_everything(src: str, dst: str, topic: str, remote: str, exactly_once: bool) -> bool:
    for p in range(PARTS):
        s = read_partition(src, topic, p)
        d = read_partition(dst, remote, p, committed=exactly_once)
        if (d if exactly_once else dedupe(d)) != s:
            return False
    return True


def _explain(src: str, dst: str, topic: str, remote: str, exactly_once: bool) -> str:
    out = []
    for p in range(PARTS):
        s = read_partition(src, topic, p)
        d = read_partition(dst, remote, p, committed=exactly_once)
        u = d if exactly_once else dedupe(d)
        missing = [r[1][:12] for r in s if r not in set(u)]
        out.append(f"partition {p}: source {len(s)}, target {len(d)} ({len(u)} distinct), missing {len(missing)} "
                   f"{missing[:5]}, extra {len(u) - (len(s) - len(missing))}")
    return "; ".join(out)


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at-least-once", "exactly-once"])
def test_kill_9_of_the_mirror_and_a_source_broker_loses_nothing(tmp_path, request, target, exactly_once):
    # the source's internal topic with 3 replicas: it outlives the broker kill (the mirror would
    # wait for it, copying records meanwhile, with 1)
    keys = {"A->B.topics": "stream", "sync.topic.configs.enabled": "false",
            "offset-syncs.topic.replication.factor": "3"}
    if exactly_once:
        keys["exactly.once.source.support"] = "enabled"
    with _source(tmp_path, request) as source:
        _create(source.bootstrap, "stream", PARTS, 3)
        cfg = mirror_config(source.bootstrap, target.bootstrap, **keys)
        m1 = MirrorProcess(tmp_path, cfg, "mirror-1").start()
        m2 = m3 = None
        stream = ProduceStream(source.bootstrap, "stream", PARTS, rate=400).start()
        try:
            wait_until(lambda: (m1.last_progress() or {}).get("records", 0) > 500, 90, "the mirror copying")
            m1.kill()  # SIGKILL mid-stream (mid-transaction in the exactly-once mode)
            time.sleep(1)
            m2 = MirrorProcess(tmp_path, cfg, "mirror-2").start()
            wait_until(lambda: (m2.last_progress() or {}).get("records", 0) > 500, 120, "the restarted mirror copying")
            victim = _leader(source.bootstrap, "stream", 0)
            source.kill(f"broker-{victim}")  # the leader of partition 0 goes down under the stream
            time.sleep(3)
            # a clean stop commits exactly what was copied; the next start resumes right there
            assert m2.stop() == 0, m2.log()[-3000:]
            copied = m2.last_progress()["records"]
            time.sleep(1)
            m3 = MirrorProcess(tmp_path, cfg, "mirror-3").start()
            wait_until(lambda: (m3.last_progress() or {}).get("records", 0) > 500, 120, "the mirror copying again")
            time.sleep(2)
            stream.stop()
            assert stream.errors == [] and stream.acked == stream.sent > 3000
            ok = False
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and not ok:
                ok = _holds_everything(source.bootstrap, target.bootstrap, "stream", "A.stream", exactly_once)
                time.sleep(1)
            assert ok, _explain(source.bootstrap, target.bootstrap, "stream", "A.stream", exactly_once)
            counts = [len(read_partition(source.bootstrap, "stream", p)) for p in range(PARTS)]
            # every acknowledged record is in the source, and so in the target; no partition is left out
            assert sum(counts) == stream.acked and min(counts) > 1000, counts
            if exactly_once:
                # read_committed sees each record once; a read_uncommitted reader may also see the aborted copies
                assert all(len(read_partition(target.bootstrap, "A.stream", p, committed=True))
                           == len(read_partition(source.bootstrap, "stream", p)) for p in range(PARTS))
            assert copied > 0 and m3.running, m3.log()[-3000:]
            assert m3.stop() == 0, m3.log()[-3000:]
        finally:
            stream.stop()
            for m in (m1, m2, m3):
                if m is not None:
                    m.close()


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at-least-once", "exactly-once"])
def test_two_instances_share_the_partitions_and_take_over(tmp_path, request, target, exactly_once):
    a = start_cluster(tmp_path / "a", "A")
    try:
        _create(a.bootstrap, "shared", 4, 1)
        keys = {"A->B.topics": "shared", "emit.heartbeats.enabled": "false"}
        if exactly_once:
            keys["exactly.once.source.support"] = "enabled"
        cfg = mirror_config(a.bootstrap, target.bootstrap, **keys)

        def copied(p):
            d = read_partition(target.bootstrap, "A.shared", p, committed=exactly_once)
            return d if exactly_once else dedupe(d)
        m1 = MirrorProcess(tmp_path, cfg, "mirror-1").start()
        m2 = MirrorProcess(tmp_path, cfg, "mirror-2").start()
        stream = ProduceStream(a.bootstrap, "shared", 4, rate=300).start()
        try:
            def shared():
                p1, p2 = m1.last_progress() or {}, m2.last_progress() or {}
                n1, n2 = p1.get("partitions", 0), p2.get("partitions", 0)
                return n1 > 0 and n2 > 0 and n1 + n2 == 4 and p1["records"] > 0 and p2["records"] > 0
            wait_until(shared, 90, "both instances copying a share of the 4 partitions")
            m1.kill()
            wait_until(lambda: (m2.last_progress() or {}).get("partitions") == 4, 90, "the survivor taking all 4")
            stream.stop()
            assert stream.errors == []
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                if all(copied(p) == read_partition(a.bootstrap, "shared", p) for p in range(4)):
                    break
                time.sleep(1)
            for p in range(4):  # (exactly once: each record once, through the rebalances and the kill)
                assert copied(p) == read_partition(a.bootstrap, "shared", p), p
            assert m2.stop() == 0, m2.log()[-3000:]
        finally:
            stream.stop()
            m1.close()
            m2.close()
    finally:
        a.close()


def test_two_source_clusters_gather_into_one_target(tmp_path, target):
    """Seed 003: "a single cluster can mirror any number of source clusters"; one process, two flows."""
    a = start_cluster(tmp_path / "a", "A")
    c = start_cluster(tmp_path / "c", "C")
    try:
        for node in (a, c):
            _create(node.bootstrap, "events", 2, 1)
            stream = ProduceStream(node.bootstrap, "events", 2, rate=1000).start()
            time.sleep(1)
            stream.stop()
        cfg = (mirror_config(a.bootstrap, target.bootstrap, **{"clusters": "A, B, C", "A->B.topics": "events",
                                                                "C->B.enabled": "true", "C->B.topics": "events"})
               + f"C.bootstrap.servers = {c.bootstrap}\n")
        m = MirrorProcess(tmp_path, cfg, "mirror").start()
        try:
            for node, remote in ((a, "A.events"), (c, "C.events")):
                for p in range(2):
                    wait_until(lambda node=node, remote=remote, p=p: dedupe(read_partition(target.bootstrap, remote, p))
                               == read_partition(node.bootstrap, "events", p) != [], 90, f"{remote}-{p} copied")
            flows = {x["flow"] for x in m.progress()}
            assert flows == {"A->B", "C->B"}
            assert m.stop() == 0, m.log()[-3000:]
        finally:
            m.close()
    finally:
        c.close()
        a.close()
