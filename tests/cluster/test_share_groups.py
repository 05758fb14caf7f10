"""Share groups (KIP-932) on a real 3-controller + 3-broker cluster: ``kill -9`` of the share
partition's leader, then of the share coordinator, loses no acknowledged state. confluent-kafka's
ShareConsumer acknowledges records (explicit mode); every acknowledgement the broker confirmed is
recorded. After each kill the consumers go on with the new leader / coordinator: no confirmed
record is ever delivered again, records that were in flight come back, and in the end every
record was confirmed once and the group's start offset is at the log end."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer, TopicCollection
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from broker.coordinator_runtime import partition_for
from tests.cluster.conftest import FAST, running_cluster, wait_until
from tests.integration.cli_inproc import krafty

TOPIC, GROUP, N = "jobs", "workers", 400
OVERRIDES = {**FAST, "offsets.topic.num.partitions": "6", "share.coordinator.state.topic.num.partitions": "6",
             "group.share.min.record.lock.duration.ms": "1000"}


@pytest.fixture
def scluster(tmp_path, request):
    with running_cluster(tmp_path, request, overrides=OVERRIDES) as c:
        yield c


class Worker:
    """A share consumer that accepts what it gets and records what the broker confirmed."""

    def __init__(self, bootstrap: str, delivered: list, confirmed: set):
        self.delivered, self.confirmed = delivered, confirmed
        self.c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                                "share.acknowledgement.mode": "explicit", "max.poll.records": "25"})
        self.c.set_acknowledgement_commit_callback(self._acked)
        self.c.subscribe([TOPIC])

    def _acked(self, offsets, exc) -> None:
        if exc is None:
            for _tp, offs in offsets.items():
                self.confirmed.update(offs)

    def round(self) -> int:
        n = 0
        for m in self.c.poll(0.5):
            if m.error() is not None:
                continue
            self.delivered.append((m.offset(), m.delivery_count(), time.monotonic()))
            self.c.acknowledge(m, AcknowledgeType.ACCEPT)
            n += 1
        try:
            self.c.commit_sync(10)
        except Exception:  # noqa: BLE001 (a failover: those acknowledgements are not confirmed)
            pass
        return n

    def close(self) -> None:
        try:
            self.c.close()
        except Exception:  # noqa: BLE001
            pass


def _leader(admin: AdminClient, topic: str, pid: int) -> int:
    md = admin.list_topics(topic, timeout=10)
    return md.topics[topic].partitions[pid].leader


def test_kill_9_of_share_partition_leader_and_coordinator_loses_no_acknowledgement(scluster):
    c = scluster
    b = c.bootstrap
    admin = AdminClient({"bootstrap.servers": b})
    admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(30)
    r = ConfigResource(ResourceType.GROUP, GROUP, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "3000"}.items()])
    for f in admin.incremental_alter_configs([r]).values():
        f.result(30)
    p = Producer({"bootstrap.servers": b, "acks": "all"})
    for i in range(N):
        p.produce(TOPIC, value=f"job-{i}".encode())
    assert p.flush(60) == 0
    delivered: list = []
    confirmed: set[int] = set()
    w = Worker(b, delivered, confirmed)
    try:
        wait_until(lambda: w.round() >= 0 and len(confirmed) >= N // 4, 90, "a quarter of the records confirmed")
        # 1. kill -9 the share partition's leader
        before = set(confirmed)
        leader = _leader(admin, TOPIC, 0)
        c.kill(c.broker_name(leader))
        t_kill = time.monotonic()
        wait_until(lambda: w.round() >= 0 and len(confirmed) >= N // 2, 120, "half the records confirmed")
        again = [o for o, _, t in delivered if t > t_kill and o in before]
        assert not again, f"acknowledged records delivered again after the leader's kill: {sorted(again)[:10]}"
        c.start(c.broker_name(leader))
        # 2. kill -9 the share coordinator of this share partition (the leader of its __share_group_state partition)
        tid = admin.describe_topics(TopicCollection([TOPIC]))[TOPIC].result(30).topic_id
        # the share coordinator's key: group:topicId:partition, the id in Kafka's URL-safe base64
        key = f"{GROUP}:{str(tid).replace('+', '-').replace('/', '_')}:0"
        coordinator = _leader(admin, "__share_group_state", partition_for(key, 6))
        wait_until(lambda: w.round() >= 0 and len(confirmed) >= 3 * N // 4, 120, "three quarters confirmed")
        before = set(confirmed)
        c.kill(c.broker_name(coordinator))
        t_kill = time.monotonic()
        wait_until(lambda: w.round() >= 0 and len(confirmed) >= N, 180, "every record confirmed")
        again = [o for o, _, t in delivered if t > t_kill and o in before]
        assert not again, f"acknowledged records delivered again after the coordinator's kill: {sorted(again)[:10]}"
        assert confirmed == set(range(N))
    finally:
        w.close()
    # every record was delivered (in-flight ones again after a kill, with a higher count), and the
    # group's start offset reached the log end
    assert {o for o, _, _ in delivered} == set(range(N))
    counts: dict[int, list[int]] = {}
    for o, n, _ in delivered:
        counts.setdefault(o, []).append(n)
    assert all(ns == sorted(ns) for ns in counts.values())

    def described():
        out = krafty("share-groups", "--bootstrap-server", b, "--describe", "--group", GROUP, check=None).stdout
        return [line.split() for line in out.splitlines() if line.startswith(GROUP)]
    rows = wait_until(lambda: (rows := described()) and rows[0][4] == str(N) and rows, 60, "the start offset at the end")
    assert rows[0][:3] == [GROUP, TOPIC, "0"] and rows[0][5] == "0"
