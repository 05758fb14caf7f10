"""``krafty console-consumer --group`` against a node with a short initial rebalance delay: a
member of a classic consumer group that commits, resumes, and shares partitions with another."""

from __future__ import annotations

import subprocess

import pytest
from cli_inproc import krafty
from clients import Confluent, Rec
from conftest import create_topic, start_group_node
from krafty_node import REPO, krafty_python

pytestmark = pytest.mark.krafty_only


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    node = start_group_node(tmp_path_factory, "console-groups")
    yield node
    node.close()


def run(verb: str, *args: str, stdin: str | None = None, check: int | None = 0):
    return krafty(verb, *args, stdin=stdin, check=check)


def test_console_consumer_group_resumes_at_its_committed_offsets(broker, topic):
    create_topic(broker, topic, 2)
    Confluent().produce(broker.bootstrap, topic, [Rec(b"k%d" % i, b"%d" % i) for i in range(10)], partition=-1)
    group = topic + "-g"
    p = run("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--group", group,
            "--from-beginning", "--max-messages", "10")
    assert sorted(p.stdout.split()) == sorted(str(i) for i in range(10))
    Confluent().produce(broker.bootstrap, topic, [Rec(b"k%d" % i, b"%d" % i) for i in range(10, 13)], partition=-1)
    p = run("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--group", group,
            "--timeout-ms", "3000")
    assert sorted(p.stdout.split()) == ["10", "11", "12"]
    lag = run("consumer-groups", "--bootstrap-server", broker.bootstrap, "--describe", "--group", group).stdout
    assert all(line.split()[5] == "0" for line in lag.splitlines() if line.startswith(group)), lag


def test_two_console_consumers_of_a_group_share_the_partitions(broker, topic):
    import time

    create_topic(broker, topic, 4)
    Confluent().produce(broker.bootstrap, topic, [Rec(b"k%d" % i, b"v%d" % i) for i in range(40)], partition=-1)
    group = topic + "-g"
    cmd = [krafty_python(), "-m", "krafty", "console-consumer", "--bootstrap-server", broker.bootstrap, "--topic",
           topic, "--group", group, "--from-beginning", "--timeout-ms", "8000"]
    procs = [subprocess.Popen(cmd, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    try:
        deadline = time.monotonic() + 60
        while True:  # both are members, with two partitions each
            out = run("consumer-groups", "--bootstrap-server", broker.bootstrap, "--describe", "--group", group,
                      "--members", check=None).stdout
            rows = [line.split() for line in out.splitlines() if line.startswith(group)]
            if len(rows) == 2 and all(r[-1] == "2" for r in rows):
                break
            assert time.monotonic() < deadline, out
            time.sleep(0.3)
        outs = [p.communicate(timeout=90)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert {v for out in outs for v in out.split()} == {f"v{i}" for i in range(40)}
    lag = run("consumer-groups", "--bootstrap-server", broker.bootstrap, "--describe", "--group", group).stdout
    rows = [line.split() for line in lag.splitlines() if line.startswith(group)]
    assert len(rows) == 4 and all(r[5] == "0" for r in rows), lag  # every partition committed to its end
