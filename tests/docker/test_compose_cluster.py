"""deploy/docker-compose.yml brought up on a real Docker engine (`make test-docker`):
clients on the host (kcat and confluent-kafka, through the published EXTERNAL ports) and in
the compose network (kcat in a container, through INTERNAL by service name) produce and
consume; a killed broker container leaves the clients working; a crashed broker process is
restarted by the restart policy and rejoins."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.docker.conftest import run, wait_until

KCAT = shutil.which("kcat") or "kcat"


def _admin(c) -> AdminClient:
    return AdminClient({"bootstrap.servers": c.bootstrap})


def _create(c, topic: str, partitions: int = 3) -> None:
    a = _admin(c)
    a.create_topics([NewTopic(topic, partitions, 3)])[topic].result(60)
    wait_until(lambda: all(p.leader >= 0 and len(p.isrs) == 3 for p in
                           a.list_topics(topic, timeout=10).topics[topic].partitions.values()), 60, f"{topic} ISR")


def _consume(bootstrap: str, topic: str, expected: int, timeout: float = 90) -> list[bytes]:
    cons = Consumer({"bootstrap.servers": bootstrap, "group.id": "docker-test", "enable.auto.commit": False})
    parts = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10).topics[topic].partitions
    cons.assign([TopicPartition(topic, p, 0) for p in parts])
    out: list[bytes] = []
    deadline = time.time() + timeout
    while len(out) < expected and time.time() < deadline:
        out += [m.value() for m in cons.consume(1000, 1) if m.error() is None]
    cons.close()
    return out


def test_all_six_nodes_are_healthy_and_the_quorum_has_three_voters(compose_cluster):
    c = compose_cluster
    print(f"compose up -> all healthy in {c.up_seconds:.1f}s")
    for s in c.services:
        assert c.health(s) == "running/healthy"
        assert c.inspect(s, "{{.HostConfig.RestartPolicy.Name}}") == "unless-stopped"
    out = c.run("exec", "-T", "controller-1", "krafty", "metadata-quorum", "--bootstrap-controller",
                "controller-1:9093", "describe", "--status").stdout
    assert "CurrentVoters:          [1,2,3]" in out, out
    logs = c.run("logs", "--no-color", "broker-4").stdout
    assert "produce validation walks every record with the compiled walker" in logs, logs[-3000:]


def test_host_clients_kcat_and_python(compose_cluster):
    c = compose_cluster
    meta = run([KCAT, "-b", c.bootstrap, "-L", "-m", "30"], timeout=60).stdout
    for nid, port in c.ports.items():
        assert f"broker {nid} at localhost:{port}" in meta, meta
    _create(c, "from-host")
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True})
    errors = []
    for i in range(300):
        p.produce("from-host", key=str(i).encode(), value=f"py-{i}".encode(),
                  on_delivery=lambda err, _m: err and errors.append(err))
    assert p.flush(60) == 0 and not errors
    run([KCAT, "-b", c.bootstrap, "-t", "from-host", "-P", "-X", "acks=all"], input="kcat-a\nkcat-b\n", timeout=60)
    # kcat reads everything back from the host...
    got = run([KCAT, "-b", c.bootstrap, "-t", "from-host", "-C", "-e", "-q", "-o", "beginning", "-f", "%s\n"],
              timeout=90).stdout.split()
    assert sorted(got) == sorted([f"py-{i}" for i in range(300)] + ["kcat-a", "kcat-b"])
    # ...and so does confluent-kafka
    assert len(_consume(c.bootstrap, "from-host", 302)) == 302


def test_in_network_client_uses_the_internal_listener(compose_cluster):
    c = compose_cluster
    meta = c.client("kcat", "-b", "broker-5:9092", "-L", "-m", "30").stdout
    for nid in (4, 5, 6):
        assert f"broker {nid} at broker-{nid}:9092" in meta, meta
    c.client("kcat", "-b", "broker-4:9092,broker-6:9092", "-t", "from-inside", "-P", "-X", "acks=all",
             stdin="".join(f"in-{i}\n" for i in range(50)))
    inside = c.client("kcat", "-b", "broker-6:9092", "-t", "from-inside", "-C", "-e", "-q", "-o", "beginning",
                      "-f", "%s\n").stdout.split()
    assert sorted(inside) == sorted(f"in-{i}" for i in range(50))
    # the same records from the host, through EXTERNAL
    assert sorted(_consume(c.bootstrap, "from-inside", 50)) == sorted(f"in-{i}".encode() for i in range(50))
    # the host's records from inside
    if "from-host" in _admin(c).list_topics(timeout=10).topics:
        n = c.client("kcat", "-b", "broker-4:9092", "-t", "from-host", "-C", "-e", "-q", "-o", "beginning",
                     "-f", "%s\n").stdout.split()
        assert len(n) == 302


def _stream(c, topic: str, stop: threading.Event, acked: list[str], errors: list) -> None:
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "message.timeout.ms": 120_000})

    def done(err, msg):
        if err is None:
            acked.append(msg.value().decode())
        else:
            errors.append(err)
    i = 0
    while not stop.is_set():
        p.produce(topic, value=f"s-{i}".encode(), on_delivery=done)
        i += 1
        p.poll(0.002)
        if i % 50 == 0:
            time.sleep(0.05)
    p.flush(150)


def _leader(c, topic: str, pid: int = 0) -> int:
    return _admin(c).list_topics(topic, timeout=10).topics[topic].partitions[pid].leader


def test_clients_carry_on_when_a_broker_container_is_killed(compose_cluster):
    c = compose_cluster
    _create(c, "survive", 1)
    stop, acked, errors = threading.Event(), [], []
    t = threading.Thread(target=_stream, args=(c, "survive", stop, acked, errors), daemon=True)
    t.start()
    wait_until(lambda: len(acked) >= 300, 60, "300 acks before the kill")
    victim = f"broker-{_leader(c, 'survive')}"
    run(["docker", "kill", c.container(victim)])
    at_kill = len(acked)
    # a new leader from the ISR; the producer goes on
    wait_until(lambda: _leader(c, "survive") not in (-1, int(victim.rsplit("-", 1)[1])), 60, "a new leader")
    wait_until(lambda: len(acked) >= at_kill + 300, 120, "300 more acks after the kill")
    stop.set()
    t.join(180)
    assert not errors, errors[:5]
    got = set(v.decode() for v in _consume(c.bootstrap, "survive", len(acked)))
    lost = set(acked) - got
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {sorted(lost)[:5]}"
    # inside the network too, with the killed broker still down
    inside = set(c.client("kcat", "-b", "broker-4:9092,broker-5:9092,broker-6:9092", "-t", "survive", "-C", "-e",
                          "-q", "-o", "beginning", "-f", "%s\n", timeout=180).stdout.split())
    assert set(acked) <= inside
    # `docker kill` is a manual stop: the restart policy leaves it down until started again
    assert c.inspect(victim, "{{.State.Status}}") == "exited"
    run(["docker", "start", c.container(victim)])
    c.wait_healthy([victim])
    wait_until(lambda: len(_admin(c).list_topics("survive", timeout=10).topics["survive"].partitions[0].isrs) == 3,
               120, "the restarted broker back in the ISR")


def test_restart_policy_brings_back_a_crashed_broker(compose_cluster):
    c = compose_cluster
    service = "broker-5"
    before = int(c.inspect(service, "{{.RestartCount}}"))
    pid = int(c.inspect(service, "{{.State.Pid}}"))
    assert pid > 0
    try:
        os.kill(pid, signal.SIGKILL)  # the node process itself dies, not a docker stop
    except PermissionError:
        pytest.fail("cannot signal the container's process from here (not root?)")
    wait_until(lambda: int(c.inspect(service, "{{.RestartCount}}")) > before, 60, "docker to restart broker-5")
    c.wait_healthy([service])
    _create(c, "after-restart")
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
    for i in range(30):
        p.produce("after-restart", value=f"r-{i}".encode())
    assert p.flush(60) == 0
    assert len(_consume(c.bootstrap, "after-restart", 30)) == 30
