"""The chaos harness's network faults land whole: a cut named "nobody can send to controller-3"
must never be, even for a moment, "the brokers cannot send to controller-3 but the controllers
can". The harness used to add one iptables rule per command, node after node; on a loaded machine
each ``ip netns exec .. iptables`` took over a second, and in a 10-minute run (seed 849) that cut
spent 12 s as the other fault: the active controller kept its quorum and rightly fenced every
broker, whose Metadata answers then listed no broker at all.

The unit tests record the commands the nets run (no root needed) and replay them on a model of
the rules, in every order the commands could complete in; the last test makes real namespaces."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import time

import pytest

import chaos.cluster as cc
from chaos.cluster import LocalNet, NetnsCluster


class Recorder:
    """Stands in for chaos.cluster's command runners: each call is one batch of commands that run
    at the same time (``sh``: a batch of one)."""

    def __init__(self):
        self.batches: list[list[tuple[list[str], str | None]]] = []

    def sh(self, *cmd, check=True, quiet=False):
        self.batches.append([(list(cmd), None)])
        return subprocess.CompletedProcess(list(cmd), 0, "", "")

    def sh_all(self, jobs, check=True):
        self.batches.append([(list(c), i) for c, i in jobs])
        return [subprocess.CompletedProcess(list(c), 0, "", "") for c, _ in jobs]

    def take(self):
        b, self.batches = self.batches, []
        return b


@pytest.fixture
def rec(monkeypatch):
    r = Recorder()
    monkeypatch.setattr(cc, "sh", r.sh)
    monkeypatch.setattr(cc, "sh_all", r.sh_all, raising=False)
    return r


@pytest.fixture
def netns(tmp_path, monkeypatch, rec):
    """A NetnsCluster's nodes and net, without making namespaces."""
    monkeypatch.setattr(NetnsCluster, "setup_namespaces", lambda self: None)
    c = NetnsCluster(str(tmp_path))
    c.created_ns = set(c.nodes)
    return c


NAMES = ["broker-4", "broker-5", "broker-6", "controller-1", "controller-2", "controller-3"]


def apply(c, state: dict[str, set], cmd: list[str], stdin: str | None) -> None:
    """One command's effect on the model: namespace -> {(chain, "d"|"s"|"loss", address)}."""
    assert cmd[:3] == ["ip", "netns", "exec"], cmd
    ns, rest = cmd[3], cmd[4:]
    node = next(n for n in c.nodes if c.ns(n) == ns)
    if rest[0] == "iptables-restore":
        assert "--noflush" in rest and stdin.startswith("*filter\n") and stdin.endswith("COMMIT\n")
        rules = [line.split() for line in stdin.splitlines()[1:-1]]
    else:
        args = [a for a in rest[1:] if a != "-w"]
        if args == ["-F"]:
            state[node] = set()
            return
        rules = [args]
    for r in rules:
        assert r[:2] in (["-A", "OUTPUT"], ["-A", "INPUT"]) and r[-2:] == ["-j", "DROP"], r
        if "statistic" in r:
            state[node].add((r[1], "loss", r[r.index("--probability") + 1]))
        else:
            state[node].add((r[1], r[2][1], r[3]))


def blocked(c, state) -> set[tuple[str, str]]:
    host = {n: c.nodes[n].host for n in c.nodes}
    return {(s, d) for s in c.nodes for d in c.nodes if s != d
            and (("OUTPUT", "d", host[d]) in state[s] or ("INPUT", "s", host[s]) in state[d])}


def moments(c, state, batches) -> list[set[tuple[str, str]]]:
    """The blocked pairs at every moment the batches can pass through: the commands of one batch
    run at once and may complete in any order (each one atomically)."""
    seen = []
    for batch in batches:
        for k in range(len(batch) + 1):
            for done in itertools.combinations(batch, k):
                s = {n: set(v) for n, v in state.items()}
                for cmd, stdin in done:
                    apply(c, s, cmd, stdin)
                seen.append(blocked(c, s))
        for cmd, stdin in batch:
            apply(c, state, cmd, stdin)
    return seen


def pairs(a, b, oneway=False):
    return {(x, y) for x in a for y in b} | (set() if oneway else {(y, x) for x in a for y in b})


@pytest.mark.parametrize("direction", ["nobody can send to it", "it cannot send to anyone"])
def test_a_one_way_cut_is_never_another_cut_on_its_way_in_or_out(netns, rec, direction):
    c = netns
    n = "controller-3"
    others = [x for x in NAMES if x != n]
    state = {x: set() for x in c.nodes}
    if direction == "nobody can send to it":
        c.cut(others, [n], oneway=True)
        want = pairs(others, [n], oneway=True)
    else:
        c.cut([n], others, oneway=True)
        want = pairs([n], others, oneway=True)
    on = moments(c, state, rec.take())
    assert on[-1] == want
    partial = [sorted(m) for m in on if m and m != want]
    assert not partial, f"on its way in the cut was {partial[0]}, not {direction}"
    c.net.heal()
    off = moments(c, state, rec.take())
    assert off[-1] == set()
    assert all(m in (set(), want) for m in off), "healed in parts"


def test_isolating_a_node_lands_and_heals_whole(netns, rec):
    c = netns
    state = {x: set() for x in c.nodes}
    n = "broker-4"  # first in name order: the old heal freed it from its own side first
    others = [x for x in NAMES if x != n]
    c.cut([n], others)
    want = pairs([n], others)
    on = moments(c, state, rec.take())
    assert on[-1] == want and all(m in (set(), want) for m in on)
    c.net.heal()
    off = moments(c, state, rec.take())
    assert off[-1] == set() and all(m in (set(), want) for m in off)


def test_a_partition_is_whole_after_one_step(netns, rec):
    """Each node of the minority is cut off by one transaction of its own, all at the same time."""
    c = netns
    state = {x: set() for x in c.nodes}
    minority = ["controller-1", "broker-6"]
    majority = [x for x in NAMES if x not in minority]
    c.cut(minority, majority)
    batches = rec.take()
    want = pairs(minority, majority)
    first = batches[0]
    assert sorted(cmd[3] for cmd, _ in first) == sorted(c.ns(x) for x in minority)
    moments(c, state, batches[:1])
    assert blocked(c, state) == want
    moments(c, state, batches[1:])
    assert blocked(c, state) == want


def test_packet_loss_starts_on_every_node_at_once(netns, rec):
    c = netns
    state = {x: set() for x in c.nodes}
    c.net.loss(NAMES, 0.3)
    batches = rec.take()
    assert len(batches) == 1 and len(batches[0]) == len(NAMES)
    moments(c, state, batches)
    assert all(state[x] == {("OUTPUT", "loss", "0.300")} for x in NAMES)


def test_a_local_cut_is_one_iptables_transaction(tmp_path, rec):
    nodes = [cc.Node(name, {"node.id": str(i + 1), "process.roles": "broker"}, "127.0.0.1", [42600 + i])
             for i, name in enumerate(NAMES)]
    net = LocalNet("t", nodes)
    others = NAMES[:-1]
    want = pairs(others, ["controller-3"], oneway=True)
    net.block(sorted(want), primary={"controller-3"})
    batches = rec.take()
    assert len(batches) == 1 and len(batches[0]) == 1
    cmd, stdin = batches[0][0]
    assert cmd[0] == "iptables-restore" and "--noflush" in cmd
    rules = stdin.splitlines()[1:-1]
    assert len(rules) == 2 * len(want) and all(r.startswith(f"-A {net.chain} -m cgroup --path ") for r in rules)
    net.loss(NAMES, 0.1)
    assert len(rec.take()) == 1


PORT = 42790  # (in each node's own namespace)
RECEIVE = """
import select, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
print("bound", flush=True)
got = set()
while True:  # until the test closes our stdin
    ready, _, _ = select.select([s, sys.stdin], [], [])
    if s in ready:
        got.add(s.recvfrom(64)[0].decode())
    elif not sys.stdin.read(1):
        break
print(" ".join(sorted(got)))
"""
SEND = """
import socket, sys, time
for _ in range(5):
    for d in sys.argv[3:]:
        try:
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(sys.argv[1].encode(), (d, int(sys.argv[2])))
        except OSError:  # EPERM: dropped on the way out
            pass
    time.sleep(0.1)
"""


def _delivered(c, links) -> set[tuple[str, str]]:
    """Which (src, dst) links carry a UDP datagram right now (a receiver in each dst's namespace)."""
    def run(name, code, *args):
        return subprocess.Popen(["ip", "netns", "exec", c.ns(name), sys.executable, "-c", code, *args],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    receivers = {d: run(d, RECEIVE, c.nodes[d].host, str(PORT)) for d in sorted({d for _, d in links})}
    for p in receivers.values():
        assert p.stdout.readline().strip() == "bound"
    senders = [run(s, SEND, s, str(PORT), *[c.nodes[d].host for x, d in links if x == s])
               for s in sorted({s for s, _ in links})]
    for p in senders:
        p.communicate(timeout=30)
    time.sleep(0.2)  # the last datagrams in flight
    got = set()
    for d, p in receivers.items():
        out, _ = p.communicate("", timeout=30)  # EOF on its stdin: it prints what it got
        got |= {(s, d) for s in out.split()}
    return got


@pytest.mark.cluster
def test_one_way_cut_in_real_namespaces(tmp_path):
    """Real namespaces and iptables-restore: nothing from the others reaches controller-3, while
    controller-3's own datagrams still arrive; the heal lets everything through again."""
    if os.geteuid() != 0 or not shutil.which("iptables-restore"):
        pytest.skip("network namespaces and iptables need root and iptables")
    c = NetnsCluster(str(tmp_path))
    try:
        n = "controller-3"
        others = [x for x in NAMES if x != n]
        links = pairs(others, [n], oneway=True) | pairs([n], others, oneway=True) | {("broker-4", "broker-5")}
        assert _delivered(c, links) == links
        c.cut(others, [n], oneway=True)
        assert _delivered(c, links) == links - pairs(others, [n], oneway=True)
        c.net.heal()
        assert _delivered(c, links) == links
    finally:
        c.net.heal()
        c.teardown_namespaces()
