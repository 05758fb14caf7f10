"""KIP-853 end to end: a controller quorum formatted for dynamic voters (`krafty storage format
--initial-controllers`), a fourth controller that joins through controller.quorum.bootstrap.servers
and is added with `krafty metadata-quorum add-controller`, an old one removed with
`remove-controller`, then each remaining controller killed and restarted in turn: the quorum
keeps committing (a topic is created after every step) and the broker keeps serving."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from krafty_node import TEST_CLUSTER_ID, free_port, wait_until

pytestmark = pytest.mark.krafty_only
REPO = Path(__file__).resolve().parents[2]


def krafty(*args, timeout=90):
    return subprocess.run([sys.executable, "-m", "krafty", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


class Proc:
    def __init__(self, tmp: Path, name: str, props: dict[str, str]):
        self.dir = tmp / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config = self.dir / "server.properties"
        self.config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        self.log = self.dir / "node.log"
        self.p: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.p = subprocess.Popen([sys.executable, "-m", "krafty", "node", "--config", str(self.config)], cwd=REPO,
                                      stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self, sig=signal.SIGKILL) -> None:
        if self.p is not None and self.p.poll() is None:
            os.killpg(self.p.pid, sig)
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:  # a node that does not stop is killed: none outlives the test
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait(30)
                raise


def describe(ctrl_port: int) -> str:
    return krafty("metadata-quorum", "--bootstrap-controller", f"127.0.0.1:{ctrl_port}", "describe", "--status").stdout


def observers(ctrl_port: int) -> list[str]:
    out = describe(ctrl_port)
    line = next((ln for ln in out.splitlines() if ln.startswith("CurrentObservers:")), "[]")
    return line.split("[", 1)[1].rstrip("]").split(",")


def create_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    a = AdminClient({"bootstrap.servers": bootstrap})
    a.create_topics([NewTopic(name, 1, 1)])[name].result(30)


def test_replace_a_controller_without_downtime(tmp_path):
    ids = [1, 2, 3, 4]
    cport = {i: free_port() for i in ids}
    dirs = {i: krafty("storage", "random-uuid").stdout.strip() for i in ids}
    boot = ",".join(f"127.0.0.1:{cport[i]}" for i in (1, 2, 3))
    initial = ",".join(f"{i}@127.0.0.1:{cport[i]}:{dirs[i]}" for i in (1, 2, 3))
    nodes: dict[int, Proc] = {}
    for i in ids:
        nodes[i] = Proc(tmp_path, f"c{i}", {
            "node.id": str(i), "process.roles": "controller", "listeners": f"CONTROLLER://127.0.0.1:{cport[i]}",
            "controller.listener.names": "CONTROLLER", "controller.quorum.bootstrap.servers": boot,
            "log.dirs": str(tmp_path / f"c{i}" / "data")})
        fmt = ["--initial-controllers", initial] if i != 4 else []
        res = krafty("storage", "format", "--config", str(nodes[i].config), "--cluster-id", TEST_CLUSTER_ID, *fmt)
        assert res.returncode == 0, res
    bport = free_port()
    broker = Proc(tmp_path, "b11", {
        "node.id": "11", "process.roles": "broker", "listeners": f"PLAINTEXT://127.0.0.1:{bport}",
        "controller.listener.names": "CONTROLLER", "controller.quorum.bootstrap.servers": boot,
        "log.dirs": str(tmp_path / "b11" / "data"), "cluster.id": TEST_CLUSTER_ID,
        "offsets.topic.replication.factor": "1"})
    bootstrap = f"127.0.0.1:{bport}"
    try:
        for i in (1, 2, 3):
            nodes[i].start()
        broker.start()
        wait_until(lambda: "CurrentVoters:          [1,2,3]" in describe(cport[1]), 60, message="initial quorum")
        wait_until(lambda: _try(create_topic, bootstrap, "t0"), 60, message="the broker serves")
        res = krafty("features", "--bootstrap-server", bootstrap, "describe")
        assert "Feature: kraft.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 1" \
            in res.stdout, res
        # a fourth controller joins as an observer (it finds the quorum through the bootstrap servers)...
        nodes[4].start()
        wait_until(lambda: "4" in observers(cport[1]), 60, message="4 observes")
        t0 = time.monotonic()
        res = krafty("metadata-quorum", "--bootstrap-controller", f"127.0.0.1:{cport[2]}", "--command-config",
                     str(nodes[4].config), "add-controller")
        add_s = time.monotonic() - t0
        assert res.returncode == 0 and "Added controller 4 with directory id" in res.stdout, res
        assert "CurrentVoters:          [1,2,3,4]" in describe(cport[4])
        res = krafty("metadata-quorum", "--bootstrap-server", bootstrap, "remove-controller", "--controller-id", "9")
        assert res.returncode == 1 and "VOTER_NOT_FOUND" in res.stderr, res
        res = krafty("metadata-quorum", "--bootstrap-controller", f"127.0.0.1:{cport[1]}", "--command-config",
                     str(nodes[4].config), "add-controller")
        assert res.returncode == 1 and "DUPLICATE_VOTER" in res.stderr, res
        create_topic(bootstrap, "t1")
        # ... and an old one leaves
        meta1 = (tmp_path / "c1" / "data" / "meta.properties").read_text()
        dir1 = next(ln.split("=", 1)[1] for ln in meta1.splitlines() if ln.startswith("directory.id="))
        assert dir1 == dirs[1]
        t0 = time.monotonic()
        res = krafty("metadata-quorum", "--bootstrap-server", bootstrap, "remove-controller",  # through the broker
                     "--controller-id", "1", "--controller-directory-id", dir1)
        remove_s = time.monotonic() - t0
        assert res.returncode == 0 and "Removed KRaft controller 1" in res.stdout, res
        wait_until(lambda: "CurrentVoters:          [2,3,4]" in describe(cport[2]), 30, message="1 removed")
        nodes[1].kill(signal.SIGTERM)
        create_topic(bootstrap, "t2")
        # every remaining controller in turn: killed, the quorum keeps committing, restarted
        for i in (2, 3, 4):
            nodes[i].kill()
            create_topic(bootstrap, f"t-kill-{i}")
            nodes[i].start()
            other = cport[3 if i == 2 else 2]
            wait_until(lambda other=other: "CurrentVoters:          [2,3,4]" in describe(other), 30)
        out = describe(cport[3])
        assert "CurrentVoters:          [2,3,4]" in out, out
        # a voter restarted on another port tells the leader (UpdateRaftVoter): the others reach it there
        nodes[3].kill(signal.SIGTERM)
        new_port = free_port()
        nodes[3].config.write_text(nodes[3].config.read_text().replace(f":{cport[3]}", f":{new_port}"))
        cport[3] = new_port
        nodes[3].start()
        wait_until(lambda: "the voter set now has this node's listener" in nodes[3].log.read_text(), 30,
                   message="controller 3's new address in the voter set")
        nodes[2].kill()  # now 3 and 4 must form the majority: 4 reaches 3 only at its new port
        create_topic(bootstrap, "t-after-move")
        nodes[4].kill()
        nodes[4].start()
        create_topic(bootstrap, "t-after-move-2")
        print(f"\nadd-controller took {add_s:.2f} s, remove-controller {remove_s:.2f} s")
    finally:
        for p, sig in [(broker, signal.SIGTERM), *((n, signal.SIGKILL) for n in nodes.values())]:
            try:
                p.kill(sig)
            except subprocess.TimeoutExpired:
                pass  # killed with SIGKILL meanwhile; the others are stopped all the same


def _try(fn, *args) -> bool:
    try:
        fn(*args)
        return True
    except Exception:  # noqa: BLE001 - retried by wait_until
        return False
