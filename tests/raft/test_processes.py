"""Real processes: three ``python -m raft.testnode`` controllers on loopback (until
``krafty node`` exists), kill -9 of the leader, and the metadata-quorum tool."""

from __future__ import annotations

import time

import pytest

from raft import cli
from raft.testnode import ProcessQuorum


@pytest.fixture
def quorum(tmp_path):
    q = ProcessQuorum(str(tmp_path), 3)
    q.start_all()
    try:
        yield q
    finally:
        q.close()


def put_on_leader(q: ProcessQuorum, key: str, value: str, timeout: float = 20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        leader, _ = q.wait_leader(timeout=max(0.1, end - time.monotonic()))
        r = q.put(leader, key, value)
        if r is not None and r.error == 0:
            return r
        time.sleep(0.05)
    raise AssertionError(f"could not commit {key}={value}")


def test_kill_9_of_the_leader_elects_a_new_one_that_has_every_committed_entry(quorum):
    leader, epoch = quorum.wait_leader()
    committed = {}
    for i in range(10):
        r = put_on_leader(quorum, f"k{i}", f"v{i}")
        committed[f"k{i}"] = f"v{i}"
        assert r.offset >= 0
    quorum.kill(leader)
    new_leader, new_epoch = quorum.wait_leader(timeout=20, min_epoch=epoch + 1)
    assert new_leader != leader and new_epoch > epoch
    got = quorum.get(new_leader)
    assert dict(got.items) == committed
    # The quorum keeps committing with two of three, and the killed node catches up on restart.
    r = put_on_leader(quorum, "after", "kill")
    quorum.start(leader)
    end = time.monotonic() + 20
    while time.monotonic() < end:
        g = quorum.get(leader)
        if g is not None and g.applied_end > r.offset:
            break
        time.sleep(0.05)
    assert dict(quorum.get(leader).items) == {**committed, "after": "kill"}


def test_metadata_quorum_tool_describes_status_and_replication(quorum, capsys):
    leader, epoch = quorum.wait_leader()
    put_on_leader(quorum, "a", "1")
    follower = next(n for n in quorum.ids if n != leader)
    # Asking a follower works too: the tool follows it to the leader.
    assert cli.main(["--bootstrap-controller", f"127.0.0.1:{quorum.ctrl_port[follower]}", "describe", "--status"]) == 0
    out = capsys.readouterr().out
    fields = dict(line.split(":", 1) for line in out.strip().splitlines())
    assert int(fields["LeaderId"]) == leader and int(fields["LeaderEpoch"]) >= epoch
    assert int(fields["HighWatermark"]) >= 2
    assert fields["CurrentVoters"].strip() == "[1,2,3]"
    assert cli.main(["--bootstrap-controller", f"127.0.0.1:{quorum.ctrl_port[leader]}", "describe",
                     "--replication"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split() == ["NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp",
                                "Status"]
    status = {int(line.split()[0]): line.split()[-1] for line in lines[1:]}
    assert status[leader] == "Leader" and sorted(status) == [1, 2, 3]
    assert sorted(v for k, v in status.items() if k != leader) == ["Follower", "Follower"]


def test_sigterm_of_the_leader_resigns_gracefully(quorum):
    leader, epoch = quorum.wait_leader()
    put_on_leader(quorum, "x", "1")
    t0 = time.monotonic()
    assert quorum.stop(leader) == 0
    new_leader, new_epoch = quorum.wait_leader(timeout=20, min_epoch=epoch + 1, poll_s=0.01)
    assert new_leader != leader
    assert time.monotonic() - t0 < 5
    assert dict(quorum.get(new_leader).items) == {"x": "1"}


def test_cli_reports_an_unreachable_controller(capsys):
    assert cli.main(["--bootstrap-controller", "127.0.0.1:1", "describe", "--status"]) == 1
    assert "cannot reach the controller" in capsys.readouterr().err


def test_three_krafty_node_controllers_survive_kill_9_of_the_leader(tmp_path, capsys):
    q = ProcessQuorum(str(tmp_path), 3, program="krafty")
    q.start_all()
    try:
        leader, epoch = q.wait_leader(timeout=60)
        before = q.describe(leader)
        hw_before = before.high_watermark
        assert hw_before >= 1
        q.kill(leader)
        new_leader, new_epoch = q.wait_leader(timeout=30, min_epoch=epoch + 1)
        assert new_leader != leader
        after = q.describe(new_leader)
        # Everything committed before the kill is in the new leader's log (and committed again).
        assert after.high_watermark > hw_before
        me = next(v for v in after.voters if v.replica_id == new_leader)
        assert me.log_end_offset > hw_before
        assert cli.main(["--bootstrap-controller", f"127.0.0.1:{q.ctrl_port[new_leader]}", "describe",
                         "--status"]) == 0
        assert f"LeaderId:               {new_leader}" in capsys.readouterr().out
    finally:
        q.close()


def test_no_acknowledged_write_is_lost_when_the_leader_is_killed_mid_stream(quorum):
    import threading

    acked: dict[str, str] = {}
    stop = threading.Event()

    def writer():
        i = 0
        while not stop.is_set():
            leader = None
            for nid in quorum.alive():
                g = quorum.get(nid, timeout=0.5)
                if g is not None and g.leader_id == nid:
                    leader = nid
                    break
            if leader is None:
                time.sleep(0.02)
                continue
            r = quorum.put(leader, f"w{i}", str(i), timeout=3)
            if r is not None and r.error == 0:
                acked[f"w{i}"] = str(i)
            i += 1

    leader, epoch = quorum.wait_leader()
    t = threading.Thread(target=writer, daemon=True)
    t.start()
    time.sleep(1.0)
    quorum.kill(leader)
    new_leader, _ = quorum.wait_leader(timeout=20, min_epoch=epoch + 1)
    time.sleep(1.0)
    stop.set()
    t.join(10)
    assert len(acked) > 5
    final_leader, _ = quorum.wait_leader(timeout=20)
    items = dict(quorum.get(final_leader).items)
    missing = {k for k in acked if items.get(k) != acked[k]}
    assert not missing, f"acknowledged writes lost: {sorted(missing)[:10]}"
