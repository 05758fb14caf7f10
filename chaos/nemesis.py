"""Nemeses: faults injected into a running cluster on a schedule drawn from one seeded
``random.Random``. Each fault has a start and a heal; ``Nemesis.heal_all`` undoes whatever is still
active (also on Ctrl-C or an exception, from the runner's ``finally``).

kinds: ``kill`` (kill -9, then restart), ``pause`` (SIGSTOP/SIGCONT), ``partition`` (network cuts:
majority/minority, isolate the leader or the active controller, one-way, packet loss), ``clock``
(restart a node with its wall clock skewed, then restart it with the real clock).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from chaos.cluster import BaseCluster
from chaos.history import History

KINDS = ("kill", "pause", "partition", "clock")


@dataclass
class Fault:
    id: int
    kind: str
    desc: str
    nodes: list[int]
    heal: object  # callable
    names: list[str] = field(default_factory=list)


class Nemesis:
    def __init__(self, cluster: BaseCluster, hist: History, kinds: list[str], rng: random.Random, probe=None,
                 topic: str = "chaos"):
        bad = [k for k in kinds if k not in KINDS]
        if bad:
            raise ValueError(f"unknown nemesis {bad[0]!r} (choose from {', '.join(KINDS)})")
        self.c, self.hist, self.kinds, self.rng, self.probe, self.topic = cluster, hist, kinds, rng, probe, topic
        self.active: list[Fault] = []
        self.ids = 0
        self.current = ""

    # -- targets -------------------------------------------------------------------------------
    def active_controller(self) -> str | None:
        ctrl = (self.probe.last if self.probe else {}).get("controller")
        return self.c.by_id(ctrl).name if ctrl is not None and ctrl > 0 else None

    def a_partition_leader(self) -> str | None:
        leaders = (self.probe.last if self.probe else {}).get("leaders") or {}
        ids = sorted({v for v in leaders.values() if v is not None and v >= 0})
        return self.c.by_id(self.rng.choice(ids)).name if ids else None

    def _busy(self) -> set[str]:
        return {n for f in self.active for n in f.names}

    def _pick(self, how: str) -> list[str]:
        names = sorted(self.c.nodes)
        if how == "active-controller":
            n = self.active_controller()
            return [n] if n else [self.rng.choice(names)]
        if how == "partition-leader":
            n = self.a_partition_leader()
            return [n] if n else [self.rng.choice([b.name for b in self.c.brokers])]
        if how == "controller-majority":
            ctrls = sorted(n.name for n in self.c.controllers)
            return self.rng.sample(ctrls, len(ctrls) // 2 + 1)
        if how == "broker":
            return [self.rng.choice([b.name for b in self.c.brokers])]
        return [self.rng.choice(names)]

    # -- faults --------------------------------------------------------------------------------
    def start(self, kind: str) -> Fault | None:
        self.ids += 1
        fid = self.ids
        rng = self.rng
        began = self.hist.now()  # the event is written once the fault is in: both times are kept
        if kind == "kill":
            # leaders twice as often: their loss is what elections are measured on
            how = rng.choice(["node", "active-controller", "active-controller", "partition-leader",
                              "partition-leader", "controller-majority", "broker"])
            names = self._pick(how)
            if set(names) & self._busy():
                return None
            for n in names:
                self.c.kill(n)

            def heal(names=names):
                for n in names:
                    self.c.start(n)
            desc = f"kill -9 {'+'.join(names)} ({how})"
        elif kind == "pause":
            how = rng.choice(["node", "active-controller", "active-controller", "partition-leader",
                              "partition-leader"])
            names = self._pick(how)
            if set(names) & self._busy():
                return None
            for n in names:
                self.c.pause(n)

            def heal(names=names):
                for n in names:
                    self.c.resume(n)
            desc = f"SIGSTOP {'+'.join(names)} ({how})"
        elif kind == "partition":
            if self.c.net is None:
                raise RuntimeError("this cluster has no network control")
            if any(f.kind == "partition" for f in self.active):
                return None
            how = rng.choice(["majority-minority", "isolate-partition-leader", "isolate-controller", "one-way",
                              "loss"])
            everyone = sorted(self.c.nodes)
            if how == "majority-minority":
                shuffled = everyone[:]
                rng.shuffle(shuffled)
                ctrls = [n.name for n in self.c.controllers]
                # the minority holds one controller and one or two brokers
                minority = [rng.choice(ctrls)] + rng.sample([b.name for b in self.c.brokers], rng.choice([1, 2]))
                majority = [n for n in everyone if n not in minority]
                self.c.cut(minority, majority)
                names, desc = minority, f"partition {'+'.join(sorted(minority))} | {'+'.join(majority)}"
            elif how in ("isolate-partition-leader", "isolate-controller"):
                n = self._pick("partition-leader" if how == "isolate-partition-leader" else "active-controller")[0]
                self.c.cut([n], [x for x in everyone if x != n])
                names, desc = [n], f"isolate {n} ({how})"
            elif how == "one-way":
                n = self._pick(rng.choice(["partition-leader", "active-controller"]))[0]
                others = [x for x in everyone if x != n]
                if rng.random() < 0.5:
                    self.c.cut([n], others, oneway=True)
                    desc = f"one-way: {n} cannot send to anyone"
                else:
                    self.c.cut(others, [n], oneway=True)
                    desc = f"one-way: nobody can send to {n}"
                names = [n]
            else:
                p = rng.choice([0.1, 0.2, 0.3])
                self.c.net.loss(everyone, p)
                names, desc = [], f"packet loss {int(p * 100)}% on every node"

            def heal():
                self.c.net.heal()
        elif kind == "clock":
            names = self._pick(rng.choice(["node", "active-controller", "partition-leader"]))
            if set(names) & self._busy():
                return None
            skew = rng.choice([-3600, -300, -30, 30, 300, 3600])
            for n in names:
                self.c.stop(n, timeout=10)
                self.c.start(n, skew_s=skew)

            def heal(names=names):
                for n in names:
                    self.c.stop(n, timeout=10)
                    self.c.start(n)
            desc = f"clock {skew:+d}s on {'+'.join(names)} (restarted)"
        else:
            raise ValueError(kind)
        nodes = [self.c.nodes[n].id for n in names]
        # a clock fault is not an outage: it restarts the node once, like a rolling restart
        f = Fault(fid, kind, desc, nodes if kind != "clock" else [], heal, names)
        self.active.append(f)
        self.hist.add("nemesis", type="start", id=fid, kind=kind, desc=desc, nodes=f.nodes, began=began)
        return f

    def stop(self, f: Fault) -> None:
        began = self.hist.now()
        try:
            f.heal()
        finally:
            self.active.remove(f)
            self.hist.add("nemesis", type="stop", id=f.id, kind=f.kind, desc=f.desc, nodes=f.nodes, began=began)

    def heal_all(self) -> None:
        """Undo every active fault; then make sure every node runs, unpaused, with no rules left."""
        errors = []
        for f in list(self.active):
            try:
                self.stop(f)
            except Exception as e:  # noqa: BLE001 - keep healing the rest
                errors.append(e)
        if self.c.net is not None:
            self.c.net.heal()
        for n in self.c.nodes.values():
            if n.paused:
                self.c.resume(n.name)
            if not n.alive:
                self.c.start(n.name)
            elif n.skew_s:
                self.c.stop(n.name, timeout=10)
                self.c.start(n.name)
        if errors:
            raise errors[0]

    def run(self, duration: float, stopping, warmup: float = 5.0, quiet=(2.0, 6.0), hold=(5.0, 12.0),
            combine: float = 0.2) -> None:
        """Faults until ``duration`` seconds (of the history's clock) have passed."""
        end = self.hist.now() + duration

        def sleep_until(t: float) -> bool:
            while self.hist.now() < t:
                if stopping.is_set():
                    return False
                time.sleep(min(0.2, max(0.0, t - self.hist.now())))
            return True
        if not sleep_until(self.hist.now() + warmup):
            return
        while self.hist.now() < end - 3:
            kind = self.rng.choice(self.kinds)
            faults = [self.start(kind)]
            if len(self.kinds) > 1 and self.rng.random() < combine:
                other = self.rng.choice([k for k in self.kinds if k != kind])
                faults.append(self.start(other))
            faults = [f for f in faults if f is not None]
            self.current = "; ".join(f.desc for f in faults)
            hold_for = self.rng.uniform(*hold)
            ok = sleep_until(min(end, self.hist.now() + hold_for))
            for f in faults:
                self.stop(f)
            self.current = ""
            if not ok or not sleep_until(min(end, self.hist.now() + self.rng.uniform(*quiet))):
                return
