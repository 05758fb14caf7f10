"""Replication throttles on a 1 controller + 3 broker cluster: a reassignment with
`krafty reassign-partitions --throttle` is held to the rate (the rates as static broker configs),
one without is not, and --verify clears the topics' throttled replica lists."""

from __future__ import annotations

import json
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import FAST, running_cluster, wait_until
from tests.cluster.test_reassign_partitions import cli, replicas

THROTTLE = 100_000  # B/s, as static broker configs (dynamic broker configs are another branch's)


def test_throttled_reassignment_is_held_to_the_rate(tmp_path, request):
    overrides = {**FAST, "leader.replication.throttled.rate": str(THROTTLE),
                 "follower.replication.throttled.rate": str(THROTTLE), "replica.fetch.max.bytes": "100000"}
    with running_cluster(tmp_path, request, controllers=1, brokers=3, overrides=overrides) as c:
        bs = c.bootstrap
        admin = AdminClient({"bootstrap.servers": bs})
        wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == 3, 60, "brokers up")
        for t in ("slow", "fast"):
            admin.create_topics([NewTopic(t, num_partitions=1, replica_assignment=[[2]],
                                          config={"min.insync.replicas": "1"})])[t].result(30)
        # small batches: a fetch returns at least one whole batch, so batches bound the throttle's grain
        p = Producer({"bootstrap.servers": bs, "acks": "all", "linger.ms": 5, "batch.size": 16384})
        for t in ("slow", "fast"):
            for _ in range(1500):  # ~1.5 MB each
                p.produce(t, b"x" * 1000)
        assert p.flush(60) == 0

        def move(topic: str, throttle: list[str]) -> float:
            plan = tmp_path / f"{topic}.json"
            plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0,
                                                                      "replicas": [2, 3]}]}))
            t0 = time.monotonic()
            out = cli("--bootstrap-server", bs, "--execute", "--reassignment-json-file", str(plan), *throttle)
            assert out.returncode == 0, out.stderr
            wait_until(lambda: replicas(admin, topic)[2] == (2, 3), 60, f"{topic} in sync on 2 and 3", interval=0.1)
            return time.monotonic() - t0

        fast = move("fast", [])
        slow = move("slow", ["--throttle", str(THROTTLE)])
        # ~1.5 MB at 100 kB/s, the first 10 windows' worth at once: ~15 s; unthrottled: well under that
        print(f"unthrottled {fast:.1f} s, throttled at {THROTTLE} B/s {slow:.1f} s")
        assert slow > 10 and fast < 5, (fast, slow)
        from confluent_kafka.admin import ConfigResource

        def throttles():
            [fut] = admin.describe_configs([ConfigResource("topic", "slow")]).values()
            return {k: e.value for k, e in fut.result(30).items() if "throttled.replicas" in k}
        assert throttles() == {"leader.replication.throttled.replicas": "0:2",
                               "follower.replication.throttled.replicas": "0:3"}
        out = cli("--bootstrap-server", bs, "--verify", "--reassignment-json-file", str(tmp_path / "slow.json"))
        assert "Clearing topic-level throttles on topic slow" in out.stdout, out.stdout
        assert throttles() == {"leader.replication.throttled.replicas": "",
                               "follower.replication.throttled.replicas": ""}
