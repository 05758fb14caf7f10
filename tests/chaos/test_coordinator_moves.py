"""Moving a consumer group's coordinator (issue 18, item 13), with the chaos workload's group members
(confluent-kafka, session.timeout.ms=10000, heartbeat 1 s, a synchronous commit after every batch) on a
real 3 controller + 3 broker cluster: how long the members go without records when the broker leading
the group's ``__consumer_offsets`` partition is killed or stopped, and that they get records again
within the checker's liveness bound after the fault.

What the figures rest on (see the report of issue 18): a killed coordinator is found again as soon as
the controller moves the partition (broker.session.timeout.ms=3000 here), and the members keep their
ids; a stopped one leaves the client's heartbeat hanging, so a pause shorter than the session timeout
costs only the pause, and a longer one makes librdkafka drop its member id and rejoin, which the new
coordinator completes once the abandoned ids' sessions expired."""

from __future__ import annotations

import random
import time

import pytest

from chaos import checker
from chaos.coordinator_moves import coordinator, group_workload, longest_gap

pytestmark = pytest.mark.cluster

def wait_for(fn, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_coordinator_kill_and_pause_stalls(tmp_path):
    rng = random.Random(18)
    with group_workload(str(tmp_path / "cluster")) as (c, hist, members, admin):
        def all_fed_since(t):
            return all(m.last_records_t is not None and m.last_records_t > t for m in members)

        def fault(kind: str, hold: float) -> tuple[float, float]:
            time.sleep(rng.uniform(4, 6))  # a few heartbeats and commits in the stable group
            node = c.by_id(wait_for(lambda: coordinator(admin), 30, "the group's coordinator"))
            fid = f"{kind}-{hold:g}s"
            start = hist.add("nemesis", type="start", id=fid, kind=kind, nodes=[node.id])["t"]
            c.kill(node.name) if kind == "kill" else c.pause(node.name)
            time.sleep(hold)
            c.start(node.name) if kind == "kill" else c.resume(node.name)
            healed = hist.add("nemesis", type="stop", id=fid, kind=kind, nodes=[node.id])["t"]
            hist.add("heal")
            bound = checker.default_group_liveness_s(hist.snapshot())
            wait_for(lambda: all_fed_since(healed), bound + 5, f"records after the {kind}")
            time.sleep(8)  # the coordinator moves back (preferred leader) while records flow
            return start, hist.now()

        def stall(since: float, until: float) -> float:
            """The longest time either member went without records around a fault."""
            return max(longest_gap(hist, p, since - 2, until) for p in ("g0", "g1"))

        def rebalances(since: float, until: float) -> int:
            """Assignments the members got (each reads the committed offsets: a "committed" event)."""
            return sum(1 for op in hist.snapshot() if op["f"] == "committed" and since <= op["t"] <= until)

        kill, short_pause, long_pause = fault("kill", 8.0), fault("pause", 7.0), fault("pause", 12.0)
        print(f"coordinator kill -9 for 8 s: longest stall {stall(*kill):.1f}s; SIGSTOP 7 s: "
              f"{stall(*short_pause):.1f}s; SIGSTOP 12 s: {stall(*long_pause):.1f}s")
        # a killed coordinator: found again once the partition moves (3 s session), no rebalance
        assert stall(*kill) < 8 and rebalances(*kill) == 0
        # a pause shorter than the session timeout costs the pause (the synchronous commit waits), no rebalance
        assert stall(*short_pause) < 7 + 3 and rebalances(*short_pause) == 0
        # a longer one: a rebalance, and records again within the liveness bound of the heal
        assert rebalances(*long_pause) > 0
        assert checker.check_group_liveness(hist.snapshot()) == []
