"""Share groups (KIP-932) with a real KIP-932 client: confluent-kafka's ShareConsumer (librdkafka's
share consumer) against a krafty node. Many consumers on one partition each get distinct records;
a released record comes back with its delivery count increased; a rejected record, or one past the
delivery count limit, is archived and never delivered again; a consumer killed holding records has
them delivered to another after the acquisition lock duration."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from conftest import MOCK, _start_node

pytestmark = pytest.mark.krafty_only

LOCK_MS = 2000
PROPS = {
    "offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "3",
    "share.coordinator.state.topic.replication.factor": "1", "share.coordinator.state.topic.num.partitions": "3",
    "share.coordinator.state.topic.min.isr": "1",
    "group.share.min.record.lock.duration.ms": "1000",
}


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    if MOCK:
        pytest.skip("share groups are tested against krafty")
    n = _start_node(tmp_path_factory.mktemp("share"), extra_properties=PROPS)
    yield n
    n.close()


def setup_group(bootstrap: str, topic: str, records: int, **group_configs) -> str:
    """A one-partition topic with ``records`` records and a share group reading it from the start."""
    a = AdminClient({"bootstrap.servers": bootstrap})
    a.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(records):
        p.produce(topic, value=f"r{i}".encode())
    assert p.flush(30) == 0
    group = f"sg-{uuid.uuid4().hex[:8]}"
    cfg = {"share.auto.offset.reset": "earliest", **group_configs}
    r = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k, str(v), incremental_operation=AlterConfigOpType.SET) for k, v in cfg.items()])
    for f in a.incremental_alter_configs([r]).values():
        f.result(30)
    return group


def consumer(bootstrap: str, group: str, **extra) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, **extra})
    return c


def poll_until(c: ShareConsumer, want, timeout: float = 30.0) -> list:
    """Polls until ``want(messages so far)`` or the timeout; returns the messages (no errors)."""
    got = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not want(got):
        for m in c.poll(0.5):
            assert m.error() is None, m.error()
            got.append(m)
    return got


def test_five_consumers_on_one_partition_each_get_distinct_records(node):
    b = node.bootstrap
    n = 600
    group = setup_group(b, "sq-five", 0)
    seen: dict[str, list[int]] = {}
    polled: dict[str, int] = {}
    lock = threading.Lock()
    done = threading.Event()
    errors = []

    def run(name: str) -> None:
        c = consumer(b, group, **{"max.poll.records": "20"})
        try:
            c.subscribe(["sq-five"])
            mine = seen.setdefault(name, [])
            deadline = time.monotonic() + 90
            while not done.is_set() and time.monotonic() < deadline:
                msgs = c.poll(0.2)
                polled[name] = polled.get(name, 0) + 1
                for m in msgs:
                    if m.error() is not None:
                        errors.append(str(m.error()))
                        continue
                    with lock:
                        mine.append(m.offset())
                        if sum(len(v) for v in seen.values()) >= n:
                            done.set()
                if msgs:
                    time.sleep(0.1)  # work on the batch: one consumer alone cannot keep up
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(repr(e))
        finally:
            c.close()

    threads = [threading.Thread(target=run, args=(f"c{i}",)) for i in range(5)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (len(polled) < 5 or min(polled.values()) < 10):
        time.sleep(0.1)  # every member has joined and is polling
    p = Producer({"bootstrap.servers": b, "linger.ms": 0})
    for i in range(n):
        p.produce("sq-five", value=f"r{i}".encode())
        if i % 20 == 19:
            p.flush(30)
            time.sleep(0.02)
    assert p.flush(30) == 0
    for t in threads:
        t.join(120)
    assert not errors, errors
    all_offsets = [o for v in seen.values() for o in v]
    # implicit acknowledgement and no failure: every record once, to exactly one consumer
    assert sorted(all_offsets) == list(range(n))
    assert sum(1 for v in seen.values() if v) == 5, {k: len(v) for k, v in seen.items()}


def test_released_record_is_redelivered_with_delivery_count_increased(node):
    b = node.bootstrap
    group = setup_group(b, "sq-release", 3)
    c = consumer(b, group, **{"share.acknowledgement.mode": "explicit"})
    try:
        c.subscribe(["sq-release"])
        first = poll_until(c, lambda g: len(g) >= 3)
        assert [(m.offset(), m.delivery_count()) for m in first] == [(0, 1), (1, 1), (2, 1)]
        c.acknowledge(first[0], AcknowledgeType.ACCEPT)
        c.acknowledge(first[1], AcknowledgeType.RELEASE)
        c.acknowledge(first[2], AcknowledgeType.ACCEPT)
        c.commit_sync(30)
        again = poll_until(c, lambda g: len(g) >= 1)
        assert [(m.offset(), m.delivery_count(), m.value()) for m in again] == [(1, 2, b"r1")]
        c.acknowledge(again[0], AcknowledgeType.ACCEPT)
        c.commit_sync(30)
        assert poll_until(c, lambda g: False, timeout=3) == []  # everything acknowledged: nothing comes back
    finally:
        c.close()


def test_rejected_record_and_record_past_the_delivery_limit_are_archived(node):
    b = node.bootstrap
    group = setup_group(b, "sq-reject", 3, **{"share.delivery.count.limit": "2"})
    c = consumer(b, group, **{"share.acknowledgement.mode": "explicit"})
    deliveries: dict[int, list[int]] = {}
    try:
        c.subscribe(["sq-reject"])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for m in c.poll(0.5):
                assert m.error() is None
                deliveries.setdefault(m.offset(), []).append(m.delivery_count())
                # 0: rejected at once; 1: released every time (archived at the limit); 2: accepted
                c.acknowledge(m, {0: AcknowledgeType.REJECT, 1: AcknowledgeType.RELEASE}.get(m.offset(),
                                                                                           AcknowledgeType.ACCEPT))
            c.commit_sync(30)
            if deliveries.get(1) == [1, 2] and 2 in deliveries and time.monotonic() > deadline - 25:
                break
        assert deliveries == {0: [1], 1: [1, 2], 2: [1]}
        assert poll_until(c, lambda g: False, timeout=3) == []
    finally:
        c.close()
    # a new consumer of the group gets nothing of it either: the state is the group's
    c2 = consumer(b, group)
    try:
        c2.subscribe(["sq-reject"])
        assert poll_until(c2, lambda g: False, timeout=4) == []
    finally:
        c2.close()


_HOLDER = textwrap.dedent("""
    import sys, time
    from confluent_kafka import ShareConsumer
    c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([sys.argv[3]])
    while True:
        msgs = [m for m in c.poll(0.5) if m.error() is None]
        if msgs:
            print(" ".join(str(m.offset()) for m in msgs), flush=True)
            time.sleep(3600)  # holds them, never acknowledges
""")


def test_killed_consumer_records_are_redelivered_after_the_lock_duration(node, tmp_path):
    b = node.bootstrap
    group = setup_group(b, "sq-kill", 5, **{"share.record.lock.duration.ms": str(LOCK_MS)})
    script = tmp_path / "holder.py"
    script.write_text(_HOLDER)
    p = subprocess.Popen([sys.executable, str(script), b, group, "sq-kill"], stdout=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        line = p.stdout.readline()
        acquired_at = time.monotonic()
        held = [int(x) for x in line.split()]
        assert held, "the holder got nothing"
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(10)
        c = consumer(b, group, **{"share.acknowledgement.mode": "explicit"})
        try:
            c.subscribe(["sq-kill"])
            got = {}
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not set(held) <= set(got):
                for m in c.poll(0.3):
                    assert m.error() is None
                    got.setdefault(m.offset(), (m.delivery_count(), time.monotonic()))
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
                c.commit_sync(30)
            assert set(held) <= set(got), (held, got)
            for off in held:
                count, at = got[off]
                assert count == 2, (off, count)
                # not before its lock ran out (measured from when the holder printed it)
                assert at - acquired_at >= LOCK_MS / 1000 - 0.5, (off, at - acquired_at)
        finally:
            c.close()
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)


def test_share_groups_cli_lists_describes_resets_and_deletes(node):
    from cli_inproc import krafty

    b = node.bootstrap
    group = setup_group(b, "sq-cli", 10)
    c = consumer(b, group, **{"share.acknowledgement.mode": "explicit"})
    try:
        c.subscribe(["sq-cli"])
        got = poll_until(c, lambda g: len(g) >= 10)
        for m in got[:4]:
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        for m in got[4:]:
            c.acknowledge(m, AcknowledgeType.RELEASE)
        c.commit_sync(30)
        assert group in krafty("share-groups", "--bootstrap-server", b, "--list").stdout.split()
        st = krafty("share-groups", "--bootstrap-server", b, "--list", "--state").stdout
        assert any(line.split() == [group, "Stable"] for line in st.splitlines()), st
        members = krafty("share-groups", "--bootstrap-server", b, "--describe", "--group", group, "--members",
                         "--verbose").stdout
        assert "CONSUMER-ID" in members and "sq-cli:0" in members, members
        state = krafty("share-groups", "--bootstrap-server", b, "--describe", "--group", group, "--state").stdout
        assert "Stable" in state, state
        # members: no reset, no delete
        r = krafty("share-groups", "--bootstrap-server", b, "--reset-offsets", "--group", group, "--topic",
                   "sq-cli", "--to-earliest", "--execute", check=1)
        assert "not empty" in r.stderr
        r = krafty("share-groups", "--bootstrap-server", b, "--delete", "--group", group, check=1)
        assert "NON_EMPTY_GROUP" in r.stderr
    finally:
        c.close()
    # offsets: 4 accepted records are behind the start offset, 6 released records left
    deadline = time.monotonic() + 20
    while True:
        out = krafty("share-groups", "--bootstrap-server", b, "--describe", "--group", group).stdout
        rows = [line.split() for line in out.splitlines() if line.startswith(group)]
        if rows == [[group, "sq-cli", "0", "0", "4", "6"]] or time.monotonic() > deadline:
            break
        time.sleep(0.5)  # the group becomes empty once the consumer's leave is written
    assert rows == [[group, "sq-cli", "0", "0", "4", "6"]], out
    r = krafty("share-groups", "--bootstrap-server", b, "--reset-offsets", "--group", group, "--topic", "sq-cli",
               "--to-offset", "8", "--execute")
    assert [group, "sq-cli", "0", "8"] in [line.split() for line in r.stdout.splitlines()], r.stdout
    c = consumer(b, group, **{"share.acknowledgement.mode": "explicit"})
    try:
        c.subscribe(["sq-cli"])
        got = poll_until(c, lambda g: len(g) >= 2)
        assert [(m.offset(), m.delivery_count()) for m in got] == [(8, 1), (9, 1)]
        for m in got:
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        c.commit_sync(30)
    finally:
        c.close()
    deadline = time.monotonic() + 20
    while True:
        r = krafty("share-groups", "--bootstrap-server", b, "--delete-offsets", "--group", group, "--topic",
                   "sq-cli", check=None)
        if r.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert r.returncode == 0 and "Successful" in r.stdout, (r.stdout, r.stderr)
    out = krafty("share-groups", "--bootstrap-server", b, "--describe", "--group", group).stdout
    assert "sq-cli" not in out.replace(f"'{group}'", "")
    r = krafty("share-groups", "--bootstrap-server", b, "--delete", "--group", group)
    assert "successful" in r.stdout
    assert group not in krafty("share-groups", "--bootstrap-server", b, "--list").stdout.split()
    r = krafty("share-groups", "--bootstrap-server", b, "--describe", "--group", group, check=1)
    assert "does not exist" in r.stderr


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_share_isolation_level(node, isolation):
    b = node.bootstrap
    topic = f"sq-txn-{isolation}"
    group = setup_group(b, topic, 0, **{"share.isolation.level": isolation})
    p = Producer({"bootstrap.servers": b, "transactional.id": f"tx-{isolation}"})
    p.init_transactions(30)
    for commit, values in ((True, [b"c1", b"c2"]), (False, [b"a1", b"a2"]), (True, [b"c3"])):
        p.begin_transaction()
        for v in values:
            p.produce(topic, value=v)
        p.flush(30)
        (p.commit_transaction if commit else p.abort_transaction)(30)
    c = consumer(b, group)
    try:
        c.subscribe([topic])
        want = 3 if isolation == "read_committed" else 5
        got = poll_until(c, lambda g: len(g) >= want)
        got += poll_until(c, lambda g: False, timeout=2)
        values = [m.value() for m in got]
        assert values == ([b"c1", b"c2", b"c3"] if isolation == "read_committed"
                          else [b"c1", b"c2", b"a1", b"a2", b"c3"])
    finally:
        c.close()
