"""Consumer groups with real clients (confluent-kafka, kafka-python, aiokafka) against one krafty node.

Every member runs in its own thread (group_workers.py) and talks to the node only through its
client's public API. Checked per client:
  * 3 members of one group split a 6-partition topic: full coverage, no overlap; each record
    is read exactly once while members commit synchronously after every batch;
  * a member that leaves hands its partitions to the others;
  * after a stop (the last batch read but not committed) a restarted group resumes from the
    committed offsets: exactly the uncommitted batch is read again, nothing is skipped;
  * a static member (group.instance.id) restart causes no rebalance;
  * the range and roundrobin assignors give the assignments of seed 000's worked example;
and cooperative-sticky (incremental) rebalancing through confluent-kafka; a member process
killed with SIGKILL is expelled after its session timeout.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections import Counter

import pytest
from conftest import create_topic, start_group_node
from group_workers import (
    committed_offsets,
    describe_group,
    make_worker,
    produce,
    split_ok,
    wait_for,
)

CLIENTS = ["confluent-kafka", "kafka-python", "aiokafka"]

pytestmark = pytest.mark.krafty_only

@pytest.fixture(scope="module")
def gnode(tmp_path_factory):
    node = start_group_node(tmp_path_factory, "groups")
    yield node
    node.close()


@pytest.fixture
def workers():
    """Every worker a test makes is stopped at teardown."""
    made = []

    def make(*args, **kw):
        w = make_worker(*args, **kw)
        made.append(w)
        w.start()
        return w

    yield make
    for w in made:
        if w.is_alive():
            w.stop()


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def tps_of(topic: str, n: int) -> set[tuple[str, int]]:
    return {(topic, p) for p in range(n)}


def by_partition(records) -> dict[tuple[str, int], list[int]]:
    out: dict[tuple[str, int], list[int]] = {}
    for t, p, off in records:
        out.setdefault((t, p), []).append(off)
    return out


def assert_exactly(records, expected: dict[tuple[str, int], range], what: str) -> None:
    """records holds each expected offset exactly once and nothing else."""
    got = Counter(records)
    want = Counter((t, p, o) for (t, p), r in expected.items() for o in r)
    missing = sorted(want - got)
    extra = sorted(got - want)
    assert not missing and not extra, (f"{what}: {len(missing)} records never read (first {missing[:5]}), "
                                       f"{len(extra)} read more than expected (first {extra[:5]})")


def all_read(workers_, expected: dict[tuple[str, int], range], since: dict | None = None):
    since = since or {}

    def pred():
        seen = set()
        for w in workers_:
            seen.update(w.consumed()[since.get(w, 0):])
        return all((t, p, o) in seen for (t, p), r in expected.items() for o in r)

    return pred


@pytest.mark.parametrize("client", CLIENTS)
def test_members_split_leave_and_resume_from_committed_offsets(gnode, workers, client):
    topic, group = uniq("split"), uniq("g-split")
    create_topic(gnode, topic, 6)
    all_tps = tps_of(topic, 6)
    bs = gnode.bootstrap

    ws = [workers(client, bs, group, [topic], client_id=f"c{i}") for i in range(3)]
    wait_for(lambda: split_ok(ws, all_tps) and all(len(w.assignment) == 2 for w in ws), 60,
             "3 members owning 2 partitions each", ws)

    # Phase 1: 3 members, each record read exactly once, by the member that owns its partition.
    produce(bs, topic, 6, 20)
    phase1 = {tp: range(0, 20) for tp in all_tps}
    wait_for(all_read(ws, phase1), 60, "phase-1 records", ws)
    for w in ws:
        for t, p, _ in w.consumed():
            assert (t, p) in w.assignment, f"{w.name} read {t}-{p} which it does not own"
    assert_exactly([r for w in ws for r in w.consumed()], phase1, "3 members")
    wait_for(lambda: committed_offsets(bs, group) == {tp: 20 for tp in all_tps}, 30, "commits of phase 1", ws)

    # Phase 2: one member leaves; the two others take over its partitions.
    leaver = ws[0]
    leaver.stop()
    rest = ws[1:]
    wait_for(lambda: split_ok(rest, all_tps), 60, "2 members owning all 6 partitions", rest)
    before = {w: len(w.consumed()) for w in rest}
    produce(bs, topic, 6, 20)
    phase2 = {tp: range(20, 40) for tp in all_tps}
    wait_for(all_read(rest, phase2, before), 60, "phase-2 records", rest)
    assert_exactly([r for w in rest for r in w.consumed()[before[w]:]], phase2, "after one member left")
    wait_for(lambda: committed_offsets(bs, group) == {tp: 40 for tp in all_tps}, 30, "commits of phase 2", rest)

    # Phase 3: read a batch without committing it, then stop everybody.
    for w in rest:
        w.commit_batches = False
    before = {w: len(w.consumed()) for w in rest}
    produce(bs, topic, 6, 10)
    uncommitted = {tp: range(40, 50) for tp in all_tps}
    wait_for(all_read(rest, uncommitted, before), 60, "the uncommitted batch", rest)
    for w in rest:
        w.stop()
    assert committed_offsets(bs, group) == {tp: 40 for tp in all_tps}

    # Phase 4: a new generation of 3 members resumes from the committed offsets: exactly the
    # uncommitted batch is read again (nothing below offset 40, nothing skipped).
    again = [workers(client, bs, group, [topic], client_id=f"r{i}") for i in range(3)]
    wait_for(all_read(again, uncommitted), 60, "the uncommitted batch, read again", again)
    wait_for(lambda: split_ok(again, all_tps), 60, "3 restarted members owning all partitions", again)
    time.sleep(1.0)  # anything read beyond the batch would show up now
    resumed = [r for w in again for r in w.consumed()]
    assert_exactly(resumed, uncommitted, "after restart")
    firsts = {tp: offs[0] for tp, offs in by_partition(resumed).items()}
    assert firsts == {tp: 40 for tp in all_tps}


@pytest.mark.parametrize("client", CLIENTS)
def test_static_member_restart_causes_no_rebalance(gnode, workers, client):
    topic, group = uniq("static"), uniq("g-static")
    create_topic(gnode, topic, 6)
    all_tps = tps_of(topic, 6)
    bs = gnode.bootstrap
    ws = [workers(client, bs, group, [topic], client_id=f"s{i}", instance_id=f"{group}-inst-{i}")
          for i in range(3)]
    wait_for(lambda: split_ok(ws, all_tps) and all(len(w.assignment) == 2 for w in ws), 60,
             "3 static members owning 2 partitions each", ws)
    time.sleep(1.5)  # settle: no rebalance pending
    d0 = describe_group(bs, group)
    assert d0.state == "Stable" and len(d0.members) == 3, d0
    ids0 = {m.group_instance_id: m.member_id for m in d0.members}
    assert set(ids0) == {f"{group}-inst-{i}" for i in range(3)}

    others = ws[1:]
    marks = {w: len(w.events) for w in others}
    owned = {w: w.assignment for w in ws}
    restarted_owned = ws[0].assignment
    ws[0].stop()  # a static member does not send LeaveGroup: the coordinator keeps its slot
    back = workers(client, bs, group, [topic], client_id="s0", instance_id=f"{group}-inst-0")
    wait_for(lambda: back.assignment, 30, "the restarted static member's assignment", [back, *others])
    assert back.assignment == restarted_owned, "a static member gets its old partitions back"
    time.sleep(3.0)  # > several heartbeats: a rebalance would have reached the others by now
    for w in others:
        new_events = w.events[marks[w]:]
        assert not new_events, f"{w.name} saw a rebalance after a static member restarted: {new_events}"
        assert w.assignment == owned[w]
    d1 = describe_group(bs, group)
    ids1 = {m.group_instance_id: m.member_id for m in d1.members}
    assert d1.state == "Stable" and len(d1.members) == 3
    for i in (1, 2):
        assert ids1[f"{group}-inst-{i}"] == ids0[f"{group}-inst-{i}"]
    assert ids1[f"{group}-inst-0"] != ids0[f"{group}-inst-0"], "the restarted member has a new member id"


SEED_EXAMPLES = {  # seed 000_76703637d076966c.txt: RangeAssignor / RoundRobinAssignor javadoc examples
    "range": {"C0": ["t0p0", "t0p1", "t1p0", "t1p1"], "C1": ["t0p2", "t1p2"]},
    "roundrobin": {"C0": ["t0p0", "t0p2", "t1p1"], "C1": ["t0p1", "t1p0", "t1p2"]},
}


@pytest.mark.parametrize("assignor", ["range", "roundrobin"])
@pytest.mark.parametrize("client", CLIENTS)
def test_assignor_matches_seed_example(gnode, workers, client, assignor):
    """C0 and C1 subscribed to t0 and t1 (3 partitions each): the seed's assignment."""
    base = uniq("asg")
    names = {"t0": f"{base}-t0", "t1": f"{base}-t1"}  # same sort order as t0 < t1
    for t in names.values():
        create_topic(gnode, t, 3)
    group = uniq(f"g-{assignor}")
    all_tps = tps_of(names["t0"], 3) | tps_of(names["t1"], 3)
    ws = {c: workers(client, gnode.bootstrap, group, list(names.values()), client_id=c, assignor=assignor)
          for c in ("C0", "C1")}
    wait_for(lambda: split_ok(list(ws.values()), all_tps), 60, "C0 and C1 owning t0 and t1", list(ws.values()))
    time.sleep(0.5)
    back = {v: k for k, v in names.items()}
    got = {c: sorted(f"{back[t]}p{p}" for t, p in w.assignment) for c, w in ws.items()}
    assert got == SEED_EXAMPLES[assignor]
    d = describe_group(gnode.bootstrap, group)
    assert d.protocol == assignor
    # member ids are client.id + "-" + a UUID, which is what makes C0 sort before C1
    assert sorted(m.client_id for m in d.members) == ["C0", "C1"]
    assert all(m.member_id.startswith(m.client_id + "-") for m in d.members), [m.member_id for m in d.members]


def test_cooperative_sticky_rebalances_incrementally(gnode, workers):
    """A third member joins: the others give up only what it takes and keep reading the rest."""
    topic, group = uniq("coop"), uniq("g-coop")
    create_topic(gnode, topic, 6)
    all_tps = tps_of(topic, 6)
    bs = gnode.bootstrap
    first = [workers("confluent-kafka", bs, group, [topic], client_id=f"k{i}", assignor="cooperative-sticky")
             for i in range(2)]
    wait_for(lambda: split_ok(first, all_tps) and all(len(w.assignment) == 3 for w in first), 60,
             "2 cooperative members with 3 partitions each", first)
    assert describe_group(bs, group).protocol == "cooperative-sticky"
    produce(bs, topic, 6, 10)
    wait_for(all_read(first, {tp: range(0, 10) for tp in all_tps}), 60, "first records", first)
    before = {w: w.assignment for w in first}
    marks = {w: len(w.events) for w in first}

    third = workers("confluent-kafka", bs, group, [topic], client_id="k2", assignor="cooperative-sticky")
    ws = [*first, third]
    wait_for(lambda: split_ok(ws, all_tps) and all(len(w.assignment) == 2 for w in ws), 60,
             "3 cooperative members with 2 partitions each", ws)
    for w in first:
        assert w.assignment <= before[w], "sticky: an existing member only loses partitions"
        revoked = frozenset().union(*[s for kind, s in w.events[marks[w]:] if kind == "revoke"] or [frozenset()])
        assert revoked == before[w] - w.assignment, (
            f"{w.name}: revoked {sorted(revoked)}, but only {sorted(before[w] - w.assignment)} moved")
        assert all(kind != "assign" or not s for kind, s in w.events[marks[w]:]), "no new partitions for old members"
    assert third.assignment == frozenset(all_tps) - first[0].assignment - first[1].assignment

    marks = {w: len(w.consumed()) for w in ws}
    produce(bs, topic, 6, 10)
    wait_for(all_read(ws, {tp: range(10, 20) for tp in all_tps}, marks), 60, "records after the join", ws)
    assert_exactly([r for w in ws for r in w.consumed()], {tp: range(0, 20) for tp in all_tps},
                   "cooperative rebalance")


_MEMBER_PROCESS = r"""
import sys
from confluent_kafka import Consumer
bootstrap, group, topic, session_ms = sys.argv[1:5]
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": "doomed",
              "enable.auto.commit": False, "session.timeout.ms": int(session_ms), "heartbeat.interval.ms": 500})
c.subscribe([topic], on_assign=lambda _c, ps: print("ASSIGNED", len(ps), flush=True))
while True:
    c.poll(0.1)
"""


def test_a_killed_member_is_expelled_after_its_session_timeout(gnode, workers):
    """A member process killed with SIGKILL sends no LeaveGroup: the coordinator expires it
    when its session timeout passes without a heartbeat, and the others take its partitions."""
    topic, group = uniq("expel"), uniq("g-expel")
    create_topic(gnode, topic, 6)
    all_tps = tps_of(topic, 6)
    bs = gnode.bootstrap
    session_ms = 6000
    ws = [workers("confluent-kafka", bs, group, [topic], client_id=f"e{i}") for i in range(2)]
    proc = subprocess.Popen([sys.executable, "-c", _MEMBER_PROCESS, bs, group, topic, str(session_ms)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        wait_for(lambda: describe_group(bs, group).state == "Stable" and len(describe_group(bs, group).members) == 3
                 and sum(len(w.assignment) for w in ws) == 4, 60, "3 members, 2 partitions each", ws)
        marks = {w: len(w.events) for w in ws}
        proc.kill()
        proc.wait(10)
        t_kill = time.monotonic()
        wait_for(lambda: split_ok(ws, all_tps), 60, "the 2 live members owning all 6 partitions", ws)
        took = time.monotonic() - t_kill
        assert took >= session_ms / 1000 - 1.0, f"taken over after {took:.1f}s: before the session timed out?"
        assert took <= session_ms / 1000 + 10, f"taken over only after {took:.1f}s"
        d = describe_group(bs, group)
        assert d.state == "Stable" and sorted(m.client_id for m in d.members) == ["e0", "e1"]
        assert all(len(w.events) > marks[w] for w in ws), "both live members went through a rebalance"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
