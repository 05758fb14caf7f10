"""Partition reassignments on real clusters: a partition moved to other brokers under an acks=all
idempotent stream (nothing acknowledged lost, no duplicate, the old replicas' logs removed),
through `krafty reassign-partitions` as Kafka users type it; an RF change 1 -> 3 -> 1, a cancel,
the error codes through kafka-python's AdminClient, and a drained broker unregistered. A 3 controller + 6 broker variant
({4,5,6} -> {7,8,9}) is marked `cluster`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import FAST, ROOT, running_cluster, wait_until


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "krafty", "reassign-partitions", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def replicas(admin, topic, pid=0) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    p = admin.list_topics(topic, timeout=5).topics[topic].partitions[pid]
    return p.leader, tuple(p.replicas), tuple(p.isrs)


class Stream:
    """An acks=all idempotent producer writing numbered records until stopped; remembers what
    was acknowledged."""

    def __init__(self, bootstrap: str, topic: str):
        self.acked: list[int] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                           "linger.ms": 2})
        self.topic = topic
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _cb(self, err, msg):
        if err is None:
            self.acked.append(int(msg.value()))
        else:
            self.errors.append(str(err))

    def _run(self):
        i = 0
        while not self.stop.is_set():
            self.p.produce(self.topic, value=b"%d" % i, on_delivery=self._cb)
            i += 1
            self.p.poll(0.002)
        self.p.flush(60)

    def close(self):
        self.stop.set()
        self.t.join(90)


def consume_all(bootstrap: str, topic: str, expect_at_least: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.time()}", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[int] = []
    deadline = time.time() + 60
    idle = 0
    while time.time() < deadline and (len(out) < expect_at_least or idle < 2):
        msgs = c.consume(10_000, 1)
        idle = 0 if msgs else idle + 1
        out += [int(m.value()) for m in msgs if m.error() is None]
    c.close()
    return out


def move_under_stream(c, tmp_path, topic: str, source: list[int], target: list[int]) -> None:
    bs = c.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == c.n_brokers, 60, "brokers up")
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[source],
                                  config={"segment.bytes": "65536"})])[topic].result(30)
    wait_until(lambda: replicas(admin, topic)[0] == source[0], 30, "topic led")
    stream = Stream(bs, topic)
    try:
        wait_until(lambda: len(stream.acked) > 2000, 30, "records flowing")
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0,
                                                                  "replicas": target}]}))
        p = cli("--bootstrap-server", bs, "--execute", "--reassignment-json-file", str(plan))
        assert p.returncode == 0, p.stderr
        assert f"Successfully started partition reassignments for {topic}-0" in p.stdout
        assert json.loads(p.stdout.split("\n\n")[1]) == {"version": 1, "partitions": [
            {"topic": topic, "partition": 0, "replicas": source, "log_dirs": ["any"] * len(source)}]}

        def done():
            out = cli("--bootstrap-server", bs, "--verify", "--reassignment-json-file", str(plan)).stdout
            return f"Reassignment of partition {topic}-0 is completed." in out
        wait_until(done, 60, "reassignment completed", interval=0.5)
        leader, reps, isr = replicas(admin, topic)
        assert reps == tuple(target) and set(isr) == set(target) and leader == target[0], (leader, reps, isr)
        assert cli("--bootstrap-server", bs, "--list").stdout.strip() == "No partition reassignments found."
        n = len(stream.acked)
        wait_until(lambda: len(stream.acked) > n + 1000, 30, "records flowing after the move")
    finally:
        stream.close()
    assert not stream.errors, stream.errors[:5]
    got = consume_all(bs, topic, len(stream.acked))
    assert len(got) == len(set(got)), "duplicates"
    lost = set(stream.acked) - set(got)
    assert not lost, f"{len(lost)} acknowledged records lost"
    for b in source:
        if b not in target:  # the old replicas' logs are gone from their disks
            d = os.path.join(c.dir, f"broker-{b}", f"{topic}-0")
            wait_until(lambda d=d: not os.path.exists(d), 30, f"{d} removed")


def test_move_a_partition_to_other_brokers_under_an_idempotent_stream(tmp_path, request):
    with running_cluster(tmp_path, request, controllers=1, brokers=4, overrides=FAST) as c:
        move_under_stream(c, tmp_path, "moving", [2, 3], [4, 5])


@pytest.mark.cluster
def test_move_a_partition_from_three_brokers_to_three_others_3_controllers_6_brokers(tmp_path, request):
    with running_cluster(tmp_path, request, controllers=3, brokers=6, overrides=FAST) as c:
        move_under_stream(c, tmp_path, "moving", [4, 5, 6], [7, 8, 9])


def unregister(bootstrap: str, broker_id: int) -> tuple[int, str | None]:
    """UnregisterBroker through krafty's admin client (no Python client has it)."""
    import asyncio

    from broker.protocol.apis import ApiKey
    from krafty.consumer_groups import GroupAdmin, parse_bootstrap

    async def run():
        admin = GroupAdmin(parse_bootstrap(bootstrap), 10, versions={ApiKey.UNREGISTER_BROKER: (0, 0)})
        try:
            await admin.start()
            r = await admin._send(admin._any, ApiKey.UNREGISTER_BROKER, {"broker_id": broker_id})
            return int(r.error_code), r.error_message
        finally:
            admin.close()
    return asyncio.run(run())


def test_rf_change_cancel_unregister_and_errors(tmp_path, request):
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTP
    with running_cluster(tmp_path, request, controllers=1, brokers=3, overrides=FAST) as c:
        bs = c.bootstrap
        admin = AdminClient({"bootstrap.servers": bs})
        wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == 3, 60, "brokers up")
        admin.create_topics([NewTopic("rf", num_partitions=1, replica_assignment=[[2]],
                                      config={"min.insync.replicas": "1"})])["rf"].result(30)
        p = Producer({"bootstrap.servers": bs, "acks": "all"})
        for i in range(100):
            p.produce("rf", b"%d" % i)
        assert p.flush(30) == 0
        ka = KafkaAdminClient(bootstrap_servers=bs)
        try:
            tp = KTP("rf", 0)
            assert ka.alter_partition_reassignments({tp: [2, 3, 4]}) == {tp: None}
            wait_until(lambda: replicas(admin, "rf") == (2, (2, 3, 4), (2, 3, 4)), 30, "RF 3")
            assert ka.list_partition_reassignments() == {} or not ka.list_partition_reassignments()
            # errors: unknown broker, duplicates, nothing to cancel, unknown partition
            res = ka.alter_partition_reassignments({tp: [2, 9]})
            assert res[tp].errno == 39, res  # INVALID_REPLICA_ASSIGNMENT
            res = ka.alter_partition_reassignments({tp: [3, 3]})
            assert res[tp].errno == 39, res  # INVALID_REPLICA_ASSIGNMENT
            res = ka.alter_partition_reassignments({tp: None})
            assert res[tp].errno == 85, res  # NO_REASSIGNMENT_IN_PROGRESS
            res = ka.alter_partition_reassignments({KTP("rf", 4): [2]})
            assert res[KTP("rf", 4)].errno == 3, res  # UNKNOWN_TOPIC_OR_PARTITION
            # back to RF 1 on another broker: completes at once, leadership moves
            assert ka.alter_partition_reassignments({tp: [4]}) == {tp: None}
            wait_until(lambda: replicas(admin, "rf") == (4, (4,), (4,)), 30, "RF 1 on broker 4")
            for b in (2, 3):
                d = os.path.join(c.dir, f"broker-{b}", "rf-0")
                wait_until(lambda d=d: not os.path.exists(d), 30, f"{d} removed")
            assert sorted(consume_all(bs, "rf", 100)) == list(range(100))
            # cancel: a reassignment to a broker that is down stays pending until cancelled
            c.stop("broker-3")
            wait_until(lambda: 3 not in admin.list_topics(timeout=5).brokers, 30, "broker 3 gone")
            ka.close()  # kafka-python keeps the controller id it first saw (any broker, in KRaft): maybe 3
            ka = KafkaAdminClient(bootstrap_servers=bs)
            assert ka.alter_partition_reassignments({tp: [4, 3]}) == {tp: None}
            ongoing = ka.list_partition_reassignments()
            assert list(ongoing.values())[0]["adding_replicas"] == [3], ongoing
            plan = tmp_path / "plan.json"
            plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "rf", "partition": 0,
                                                                      "replicas": [4, 3]}]}))
            out = cli("--bootstrap-server", bs, "--list").stdout
            assert "rf-0: replicas: 4,3. adding: 3. removing: ." in out, out
            out = cli("--bootstrap-server", bs, "--verify", "--reassignment-json-file", str(plan)).stdout
            assert "Reassignment of partition rf-0 is still in progress." in out
            out = cli("--bootstrap-server", bs, "--cancel", "--reassignment-json-file", str(plan)).stdout
            assert out.strip() == "Successfully cancelled partition reassignments for: rf-0", out
            wait_until(lambda: replicas(admin, "rf") == (4, (4,), (4,)), 30, "back to RF 1")
            out = cli("--bootstrap-server", bs, "--cancel", "--reassignment-json-file", str(plan)).stdout
            assert out.strip() == "None of the specified partition reassignments are active."
            # the drained, stopped broker 3 is unregistered: no reassignment may name it any more
            assert unregister(bs, 3) == (0, None)
            res = ka.alter_partition_reassignments({tp: [3]})
            assert res[tp].errno == 39, res  # INVALID_REPLICA_ASSIGNMENT: no such broker is registered
            assert unregister(bs, 3) == (102, "Broker ID 3 is not currently registered")  # BROKER_ID_NOT_REGISTERED
        finally:
            ka.close()

