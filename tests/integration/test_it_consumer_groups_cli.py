"""`krafty consumer-groups` run as a real subprocess against a real node and a real group
(confluent-kafka members), the way kafka-consumer-groups.sh is used."""

from __future__ import annotations

import datetime
import re
import subprocess
import time
import uuid

import pytest
from conftest import create_topic, start_group_node
from group_workers import committed_offsets, describe_group, make_worker, produce, split_ok, wait_for
from krafty_node import REPO, krafty_python

pytestmark = pytest.mark.krafty_only

@pytest.fixture(scope="module")
def cnode(tmp_path_factory):
    node = start_group_node(tmp_path_factory, "cg-cli")
    yield node
    node.close()


def cli(*args: str, check: int | None = 0) -> subprocess.CompletedProcess:
    p = subprocess.run([krafty_python(), "-m", "krafty", "consumer-groups", *args], cwd=str(REPO),
                       capture_output=True, text=True, timeout=60)
    if check is not None:
        assert p.returncode == check, f"rc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


def rows(out: str, header_first: str = "GROUP") -> list[dict[str, str]]:
    """The table in the output as dicts keyed by column name."""
    lines = [ln for ln in out.splitlines() if ln.strip()]
    start = next(i for i, ln in enumerate(lines) if ln.startswith(header_first))
    header = re.split(r"\s{2,}", lines[start].strip())
    # COORDINATOR (ID) contains one space; every column is separated by two or more
    return [dict(zip(header, re.split(r"\s{2,}", ln.strip()), strict=True)) for ln in lines[start + 1:]
            if not ln.startswith(("Consumer group", "Warning"))]


@pytest.fixture
def group_setup(cnode):
    """A 3-partition topic with 10 records per partition and a 2-member group that read
    and committed them all."""
    topic, group = f"cg-{uuid.uuid4().hex[:8]}", f"cg-group-{uuid.uuid4().hex[:8]}"
    create_topic(cnode, topic, 3)
    produce(cnode.bootstrap, topic, 3, 10)
    ws = [make_worker("confluent-kafka", cnode.bootstrap, group, [topic], client_id=f"cli-member-{i}")
          for i in range(2)]
    for w in ws:
        w.start()
    try:
        all_tps = {(topic, p) for p in range(3)}
        wait_for(lambda: split_ok(ws, all_tps), 60, "2 members owning the topic", ws)
        wait_for(lambda: committed_offsets(cnode.bootstrap, group) == {tp: 10 for tp in all_tps}, 60,
                 "all records committed", ws)
        yield topic, group, ws
    finally:
        for w in ws:
            if w.is_alive():
                w.stop()


def test_list_describe_reset_delete(cnode, group_setup):
    topic, group, ws = group_setup
    bs = cnode.bootstrap

    assert group in cli("--bootstrap-server", bs, "--list").stdout.split()
    states = {r["GROUP"]: r["STATE"] for r in rows(cli("--bootstrap-server", bs, "--list", "--state").stdout)}
    assert states[group] == "Stable"

    # --describe while both members are active: one row per partition, lag 0, the owner's ids
    d = describe_group(bs, group)
    owner = {tp: m for m in d.members for tp in m.assignment}
    out = cli("--bootstrap-server", bs, "--describe", "--group", group).stdout
    table = rows(out)
    assert [(r["TOPIC"], r["PARTITION"]) for r in table] == [(topic, "0"), (topic, "1"), (topic, "2")]
    for r in table:
        m = owner[(topic, int(r["PARTITION"]))]
        assert (r["GROUP"], r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) == (group, "10", "10", "0")
        assert (r["CONSUMER-ID"], r["HOST"], r["CLIENT-ID"]) == (m.member_id, m.host, m.client_id)
        assert r["CLIENT-ID"].startswith("cli-member-") and "127.0.0.1" in r["HOST"]

    members = rows(cli("--bootstrap-server", bs, "--describe", "--group", group, "--members").stdout)
    assert sorted(r["CLIENT-ID"] for r in members) == ["cli-member-0", "cli-member-1"]
    assert sum(int(r["#PARTITIONS"]) for r in members) == 3
    verbose = rows(cli("--bootstrap-server", bs, "--describe", "--group", group, "--members", "--verbose").stdout)
    assigned = {r["CONSUMER-ID"]: r["ASSIGNMENT"] for r in verbose}
    for m in d.members:
        assert assigned[m.member_id] == f"{topic}({','.join(str(p) for _, p in sorted(m.assignment))})"
    (state,) = rows(cli("--bootstrap-server", bs, "--describe", "--group", group, "--state").stdout)
    assert (state["STATE"], state["#MEMBERS"], state["ASSIGNMENT-STRATEGY"]) == ("Stable", "2", "range")
    assert re.fullmatch(r"127\.0\.0\.1:\d+ \(\d+\)", state["COORDINATOR (ID)"])

    # Kafka refuses to reset or delete an active group
    p = cli("--bootstrap-server", bs, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
            "--execute", check=1)
    assert f"Assignments can only be reset if the group '{group}' is inactive, but the current state is Stable" \
        in p.stderr
    p = cli("--bootstrap-server", bs, "--delete", "--group", group, check=1)
    assert "NON_EMPTY_GROUP" in p.stderr
    assert committed_offsets(bs, group) == {(topic, p): 10 for p in range(3)}

    for w in ws:
        w.stop()
    produce(bs, topic, 1, 5)  # 5 more records in partition 0: lag 5 there
    out = cli("--bootstrap-server", bs, "--describe", "--group", group).stdout
    assert f"Consumer group '{group}' has no active members." in out
    table = {r["PARTITION"]: r for r in rows(out)}
    assert (table["0"]["CURRENT-OFFSET"], table["0"]["LOG-END-OFFSET"], table["0"]["LAG"]) == ("10", "15", "5")
    assert table["0"]["CONSUMER-ID"] == table["0"]["HOST"] == table["0"]["CLIENT-ID"] == "-"
    assert table["1"]["LAG"] == "0"

    # reset: a dry run by default
    p = cli("--bootstrap-server", bs, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest")
    assert "--execute" in p.stderr
    assert {r["PARTITION"]: r["NEW-OFFSET"] for r in rows(p.stdout)} == {"0": "0", "1": "0", "2": "0"}
    assert committed_offsets(bs, group) == {(topic, p): 10 for p in range(3)}
    cli("--bootstrap-server", bs, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
        "--execute")
    assert committed_offsets(bs, group) == {(topic, p): 0 for p in range(3)}
    cli("--bootstrap-server", bs, "--reset-offsets", "--group", group, "--all-topics", "--to-latest", "--execute")
    assert committed_offsets(bs, group) == {(topic, 0): 15, (topic, 1): 10, (topic, 2): 10}
    p = cli("--bootstrap-server", bs, "--reset-offsets", "--group", group, "--topic", f"{topic}:0",
            "--shift-by", "-3", "--execute")
    assert [(r["TOPIC"], r["PARTITION"], r["NEW-OFFSET"]) for r in rows(p.stdout)] == [(topic, "0", "12")]
    cli("--bootstrap-server", bs, "--reset-offsets", "--group", group, "--topic", f"{topic}:1",
        "--to-offset", "100", "--execute")  # clamped to the log end
    assert committed_offsets(bs, group)[(topic, 1)] == 10
    cli("--bootstrap-server", bs, "--reset-offsets", "--group", group, "--topic", f"{topic}:1,2",
        "--to-offset", "4", "--execute")
    assert committed_offsets(bs, group) == {(topic, 0): 12, (topic, 1): 4, (topic, 2): 4}

    # --to-datetime: the first record at or after the time
    time.sleep(0.05)
    mid = datetime.datetime.now(datetime.UTC)
    time.sleep(0.05)
    produce(bs, topic, 3, 2)  # offsets 15-16 / 10-11 / 10-11, all after `mid`
    stamp = mid.strftime("%Y-%m-%dT%H:%M:%S.") + f"{mid.microsecond // 1000:03d}Z"
    p = cli("--bootstrap-server", bs, "--reset-offsets", "--group", group, "--topic", topic,
            "--to-datetime", stamp, "--dry-run")
    assert {r["PARTITION"]: r["NEW-OFFSET"] for r in rows(p.stdout)} == {"0": "15", "1": "10", "2": "10"}
    local_past = (datetime.datetime.now() - datetime.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%S.000")
    p = cli("--bootstrap-server", bs, "--reset-offsets", "--group", group, "--topic", f"{topic}:2",
            "--to-datetime", local_past, "--execute")
    assert committed_offsets(bs, group)[(topic, 2)] == 0

    # a consumer of the group starts where the reset put it
    w = make_worker("kafka-python", bs, group, [topic], client_id="after-reset", commit_batches=False)
    w.start()
    try:
        wait_for(lambda: len({(t, p) for t, p, _ in w.consumed()}) == 3 and len(w.consumed()) >= 5 + 8 + 12, 60,
                 "the consumer to read from the reset offsets", [w])
        time.sleep(0.5)
        firsts = {}
        for _t, part, off in w.consumed():
            firsts.setdefault(part, off)
        assert firsts == {0: 12, 1: 4, 2: 0}
    finally:
        w.stop()

    # --delete-offsets, then --delete
    p = cli("--bootstrap-server", bs, "--delete-offsets", "--group", group, "--topic", f"{topic}:2")
    assert [(r["PARTITION"], r["STATUS"]) for r in rows(p.stdout, "TOPIC")] == [("2", "Successful")]
    assert (topic, 2) not in committed_offsets(bs, group)
    p = cli("--bootstrap-server", bs, "--delete", "--group", group)
    assert f"Deletion of requested consumer groups ('{group}') was successful." in p.stdout
    assert group not in cli("--bootstrap-server", bs, "--list").stdout.split()
    p = cli("--bootstrap-server", bs, "--describe", "--group", group, check=1)
    assert f"Consumer group '{group}' does not exist." in p.stderr
    assert committed_offsets(bs, group) == {}


def test_shift_by_without_committed_offset_is_refused(cnode):
    topic, group = f"cg-noc-{uuid.uuid4().hex[:8]}", f"cg-none-{uuid.uuid4().hex[:8]}"
    create_topic(cnode, topic, 1)
    p = cli("--bootstrap-server", cnode.bootstrap, "--reset-offsets", "--group", group, "--topic", topic,
            "--shift-by", "2", check=1)
    assert "--shift-by" in p.stderr and "no committed offset" in p.stderr
    p = cli("--bootstrap-server", cnode.bootstrap, "--reset-offsets", "--group", group, "--topic", "no-such-topic",
            "--to-earliest", check=1)
    assert "--topic no-such-topic" in p.stderr
    p = cli("--bootstrap-server", cnode.bootstrap, "--reset-offsets", "--group", group, "--topic", f"{topic}:7",
            "--to-earliest", check=1)
    assert f"--topic {topic}:7" in p.stderr


@pytest.mark.parametrize(("args", "needle"), [
    (["--list"], "--bootstrap-server"),
    (["--bootstrap-server", "B", "--list", "--describe"], "exactly one action"),
    (["--bootstrap-server", "B", "--describe"], "--group"),
    (["--bootstrap-server", "B", "--reset-offsets", "--group", "g", "--topic", "t"], "--to-earliest"),
    (["--bootstrap-server", "B", "--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest",
      "--to-latest"], "exactly one of"),
    (["--bootstrap-server", "B", "--reset-offsets", "--group", "g", "--to-earliest"], "--all-topics"),
    (["--bootstrap-server", "B", "--reset-offsets", "--group", "g", "--topic", "t", "--to-datetime",
      "yesterday"], "--to-datetime 'yesterday'"),
    (["--bootstrap-server", "B", "--reset-offsets", "--group", "g", "--topic", "t:x", "--to-earliest"],
     "--topic 't:x'"),
    (["--bootstrap-server", "B", "--reset-offsets", "--group", "g", "--topic", "t", "--shift-by", "two"],
     "--shift-by"),
    (["--bootstrap-server", "B", "--reset-offsets", "--group", "g", "--topic", "t", "--by-duration", "1h"],
     "--by-duration '1h'"),
    (["--bootstrap-server", "B", "--reset-offsets", "--group", "g", "--topic", "t", "--to-latest", "--execute",
      "--dry-run"], "--execute or --dry-run"),
    (["--bootstrap-server", "B", "--describe", "--group", "g", "--to-latest"], "--to-latest only goes with"),
    (["--bootstrap-server", "nohostport", "--list"], "--bootstrap-server 'nohostport'"),
])
def test_bad_input_names_the_option(args, needle):
    b = args.index("B") if "B" in args else None
    if b is not None:
        args = [*args[:b], "127.0.0.1:9", *args[b + 1:]]
    p = cli(*args, check=2)
    assert needle in p.stderr, p.stderr


def test_unreachable_bootstrap_server():
    p = cli("--bootstrap-server", "127.0.0.1:9", "--list", "--timeout", "1000", check=1)
    assert "cannot connect to any --bootstrap-server" in p.stderr and "127.0.0.1:9" in p.stderr
