"""A deterministic simulation of a consumer group whose members use both protocols (KIP-848's online
migration): the real GroupShard as the coordinator of one group, simulated consumers in virtual
time, from one seed.

Classic consumers (eager: they give up everything before they join again) run JoinGroup (v4+,
MEMBER_ID_REQUIRED), SyncGroup (the leader assigns round-robin when the group is classic),
Heartbeat and LeaveGroup; consumer-protocol consumers run ConsumerGroupHeartbeat. Consumers of
either kind come and go, so the group is upgraded to a consumer group when a consumer-protocol
member joins a classic group, and downgraded when the last one leaves. Consumers pause (their
sessions expire), responses are lost, partitions are added, and the coordinator fails over
(the uncommitted suffix of its log is lost; parked requests get NOT_COORDINATOR; the shard is
rebuilt from the committed records). Checked after every event:

* in a consumer group, no partition is in two members' assigned or pending-revocation sets;
* no two consumers that the coordinator counts as members both believe they own a partition;
* the group rebuilt from the committed log equals the live group (every 20 steps, nothing pending).

After the faults stop, the group must converge: stable, of the live consumers, every partition
owned by exactly one of them.

    .venv/bin/python -m sim.mixed_group --seeds 200 [--start 0]
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import struct
import uuid

from broker.group import consumer_protocol as cp
from broker.group.consumer_group import STABLE as CG_STABLE
from broker.group.consumer_group import ConsumerGroupConfig, HeartbeatError, HeartbeatRequest
from broker.group.records import encode_string
from broker.group.shard import GroupShard
from broker.group.state import STABLE, Effects, GroupConfig, JoinRequest
from common.errors import ErrorCode
from sim.consumer_group import InvariantViolation, check_held_once, check_owned_once

GCFG = GroupConfig(initial_rebalance_delay_ms=0)
TOPICS0 = {"a": (uuid.UUID(int=1), 4), "b": (uuid.UUID(int=2), 3)}
SESSION, REBALANCE = 10_000, 20_000
REJOIN = {ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION}
RESET = {ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID, ErrorCode.FENCED_MEMBER_EPOCH}


def subscription(topics) -> bytes:
    """ConsumerProtocolSubscription v1 of an eager member: it owns nothing when it joins."""
    return (struct.pack(">hi", 1, len(topics)) + b"".join(encode_string(t) for t in topics)
            + struct.pack(">i", -1) + struct.pack(">i", 0))


class Waiter:
    def __init__(self, consumer, kind: str):
        self.consumer, self.kind, self.answered = consumer, kind, False

    def done(self) -> bool:
        return self.answered


@dataclasses.dataclass
class Consumer:
    name: str
    classic: bool
    member_id: str = ""
    epoch: int = 0  # the generation of a classic consumer
    owned: dict = dataclasses.field(default_factory=dict)  # topic id -> partitions
    busy: bool = False  # a request in flight (a classic join/sync parked, a heartbeat being written)
    phase: str = "join"  # classic: join, sync, stable
    paused_until: int = 0
    left: bool = False
    full: bool = True


@dataclasses.dataclass
class Result:
    seed: int
    upgrades: int
    downgrades: int
    failovers: int


class World:
    def __init__(self, seed: int, trace=None):
        self.rng = random.Random(seed)
        self.seed, self.trace = seed, trace
        self.now = 1_000_000
        self.topics = dict(TOPICS0)
        self.cfg = ConsumerGroupConfig(session_timeout_ms=SESSION, heartbeat_interval_ms=1000)
        self.shard = self._new_shard()
        self.committed: list = []
        self.pending: list = []  # writes appended, not committed: [Write]
        self.consumers: dict[str, Consumer] = {}
        self.n = 0
        self.failovers = self.upgrades = self.downgrades = self.steps = 0
        self.kind = "none"

    def _new_shard(self) -> GroupShard:
        return GroupShard(0, GCFG, consumer_config=self.cfg, topics=lambda: self.topics)

    def log(self, msg: str) -> None:
        if self.trace is not None:
            self.trace(f"{self.now} {msg}")

    # --- the shell ----------------------------------------------------------------------------------
    def run(self, fx: Effects) -> None:
        for w, resp in fx.replies:
            self.answer(w, resp)
        for wr in fx.writes:
            wr.base_offset = len(self.committed) + sum(len(p.records) for p in self.pending)
            if wr.on_append is not None:
                wr.on_append()
            self.pending.append(wr)

    def commit_one(self) -> None:
        wr = self.pending.pop(0)
        self.committed += wr.records
        if wr.on_done is not None:
            self.run(wr.on_done(0, self.now) or Effects())
        for w, resp in wr.replies:
            self.answer(w, resp)

    def failover(self) -> None:
        self.failovers += 1
        lost, self.pending = self.pending, []
        for wr in lost:  # the writes fail: their requests are answered with the error
            for w, resp in wr.replies:
                self.answer(w, dict(resp, error_code=int(ErrorCode.NOT_COORDINATOR)))
        self.run(self.shard.unload(self.now))
        for c in self.consumers.values():
            c.busy = False
        s = self._new_shard()
        for i, (k, v) in enumerate(self.committed):
            s.replay(k, v, self.now, i)
        for g in s.groups.values():
            for m in g.members.values():
                m.heartbeat_deadline = self.now + m.session_timeout_ms
        for g in s.consumer_groups.values():
            g.on_loaded(self.now, self.cfg, self.topics)
        self.shard = s
        self.log("coordinator failover")
        for c in self.consumers.values():  # clients see NOT_COORDINATOR and start over their step
            if c.classic and c.phase != "stable":
                c.phase = "join"

    def answer(self, w: Waiter, resp: dict) -> None:
        if w.answered:
            raise InvariantViolation(f"seed {self.seed}: a request answered twice")
        w.answered = True
        c = w.consumer
        c.busy = False
        if c.left:
            return
        if self.rng.random() < 0.05:
            self.log(f"response to {c.name} lost")
            if c.classic:
                self.revoke(c)
                c.phase = "join"
            else:
                c.full = True
            return
        code = ErrorCode(int(resp.get("error_code", 0)))
        self.log(f"{w.kind} {c.name} -> {code.name} {resp.get('generation_id', '')}")
        if w.kind == "hb":
            self.on_heartbeat(c, code, resp)
        elif w.kind == "join":
            self.on_join(c, code, resp)
        else:
            self.on_sync(c, code, resp)

    # --- classic consumers --------------------------------------------------------------------------
    def revoke(self, c: Consumer) -> None:
        c.owned = {}

    def join(self, c: Consumer) -> None:
        req = JoinRequest("g", c.member_id, None, "consumer", [("range", subscription(sorted(self.topics)))],
                          SESSION, REBALANCE, c.name, "/h", True, True, f"{c.name}-{self.n}-{self.rng.random():.6f}")
        c.busy, c.phase = True, "join"
        self.run(self.shard.join(self.now, req, Waiter(c, "join")))

    def on_join(self, c: Consumer, code: ErrorCode, resp: dict) -> None:
        if code == ErrorCode.MEMBER_ID_REQUIRED:
            c.member_id = resp["member_id"]
            return
        if code:
            if code in RESET:
                c.member_id = ""
            c.phase = "join"
            return
        c.member_id, c.epoch, c.phase = resp["member_id"], resp["generation_id"], "sync"
        assignments = {}
        if resp["leader"] == c.member_id:  # the classic group's leader assigns round-robin
            members = sorted(m["member_id"] for m in resp["members"])
            parts = [(t, p) for t in sorted(self.topics) for p in range(self.topics[t][1])]
            by_member: dict[str, dict] = {m: {} for m in members}
            for i, (t, p) in enumerate(parts):
                by_member[members[i % len(members)]].setdefault(t, set()).add(p)
            assignments = {m: cp.encode_assignment(a) for m, a in by_member.items()}
        c.busy = True
        self.run(self.shard.sync(self.now, "g", c.member_id, None, c.epoch, "consumer", resp["protocol_name"],
                                 assignments, Waiter(c, "sync")))

    def on_sync(self, c: Consumer, code: ErrorCode, resp: dict) -> None:
        if code:
            if code in RESET:
                c.member_id = ""
            c.phase = "join"
            return
        parts, _ = cp.decode_assignment(resp["assignment"])
        c.owned = {self.topics[t][0]: frozenset(ps) for t, ps in parts.items() if t in self.topics and ps}
        c.phase = "stable"

    def classic_heartbeat(self, c: Consumer) -> None:
        code = ErrorCode(self.shard.heartbeat(self.now, "g", c.member_id, None, c.epoch))
        if code in REJOIN or code in RESET:
            self.revoke(c)  # eager: everything is given up before joining again
            if code in RESET:
                c.member_id = ""
            c.phase = "join"

    # --- consumer-protocol consumers ------------------------------------------------------------------
    def heartbeat(self, c: Consumer) -> None:
        epoch = -1 if c.left else c.epoch
        req = HeartbeatRequest("g", c.member_id, epoch, None, None, REBALANCE if c.full else -1,
                               sorted(self.topics) if c.full else None, None, None,
                               [(t, sorted(ps)) for t, ps in c.owned.items()], c.name, "/h")
        try:
            resp, w, fx = self.shard.consumer_heartbeat(self.now, req, c.member_id)
        except HeartbeatError as e:
            self.log(f"hb {c.name} e{epoch} -> {ErrorCode(e.code).name}")
            if e.code in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.GROUP_ID_NOT_FOUND):
                c.owned, c.epoch, c.full = {}, 0, True
            if c.left:
                self.consumers.pop(c.name, None)
            return
        self.run(fx)
        self.log(f"hb {c.name} e{epoch} -> {resp['member_epoch']} {resp['assignment']}")
        if c.left:
            self.consumers.pop(c.name, None)
            if w is not None:
                self.run(Effects(writes=[w]))
            return
        if w is None:
            self.on_heartbeat(c, ErrorCode.NONE, resp)
            return
        w.replies.append((Waiter(c, "hb"), resp))  # answered once its records are committed
        c.busy = True
        self.run(Effects(writes=[w]))

    def on_heartbeat(self, c: Consumer, code: ErrorCode, resp: dict) -> None:
        if code:
            c.full = True
            return
        c.epoch, c.full = resp["member_epoch"], False
        if resp["assignment"] is not None:
            c.owned = {t: frozenset(ps) for t, ps in resp["assignment"].items() if ps}

    # --- checks ---------------------------------------------------------------------------------------
    def members(self) -> set[str]:
        g = self.shard.consumer_groups.get("g")
        if g is not None:
            return set(g.members)
        cg = self.shard.groups.get("g")
        return set(cg.members) if cg is not None else set()

    def check(self) -> None:
        g = self.shard.consumer_groups.get("g")
        kind = "consumer" if g is not None else ("classic" if "g" in self.shard.groups else "none")
        if kind != self.kind:
            if self.kind == "classic" and kind == "consumer":
                self.upgrades += 1
            elif self.kind == "consumer" and kind == "classic" and self.shard.groups["g"].members:
                self.downgrades += 1
            self.kind = kind
        if g is not None:
            check_held_once(g, self.seed, self.now)
        members = self.members()
        check_owned_once(((c.name, c.owned) for c in self.consumers.values()
                          if not c.left and c.member_id in members), self.seed, self.now, f" ({kind} group)")
        self.steps += 1
        if not self.pending and self.steps % 20 == 0:
            r = self._new_shard()
            for i, (k, v) in enumerate(self.committed):
                r.replay(k, v, self.now, i)
            rg = r.consumer_groups.get("g")
            if (rg is None) != (g is None):
                raise InvariantViolation(f"seed {self.seed}: the rebuilt group is of another type at {self.now}")
            if g is not None and ((rg.epoch, rg.assignment_epoch, rg.target) != (g.epoch, g.assignment_epoch, g.target)
                                  or {k: (m.classic, m.current()) for k, m in rg.members.items()}
                                  != {k: (m.classic, m.current()) for k, m in g.members.items()}):
                raise InvariantViolation(f"seed {self.seed}: the group rebuilt from its log differs at {self.now}")

    # --- the run --------------------------------------------------------------------------------------
    def step(self, faults: bool) -> None:
        rng = self.rng
        self.now += rng.randint(50, 1500) if faults else 200
        roll = rng.random()
        live = [c for c in self.consumers.values() if not c.left]
        if (faults and roll < 0.05) or not live:
            self.n += 1
            classic = rng.random() < 0.5
            c = Consumer(f"{'k' if classic else 'c'}{self.n}", classic,
                         member_id="" if classic else f"c{self.n}")
            self.consumers[c.name] = c
        elif faults and roll < 0.08 and len(live) > 1:
            c = rng.choice(live)
            if not c.busy:
                c.left = True
                if c.classic:
                    if c.member_id:
                        _, _, fx = self.shard.leave(self.now, "g", [(c.member_id, None)])
                        self.run(fx)
                    self.consumers.pop(c.name, None)
                else:
                    self.heartbeat(c)
        elif faults and roll < 0.10:
            rng.choice(live).paused_until = self.now + rng.randint(5_000, 40_000)
        elif faults and roll < 0.11:
            name = rng.choice(sorted(self.topics))
            tid, n = self.topics[name]
            self.topics[name] = (tid, n + 1)
            for w in self.shard.consumer_metadata_changed(self.now):
                self.run(Effects(writes=[w]))
        elif faults and roll < 0.13:
            self.failover()
        for c in sorted((c for c in self.consumers.values() if not c.left), key=lambda c: c.name):
            if c.busy or c.paused_until > self.now or rng.random() > (0.5 if faults else 1):
                continue
            if not c.classic:
                self.heartbeat(c)
            elif c.phase == "join":
                self.join(c)
            elif c.phase == "stable":
                self.classic_heartbeat(c)
        while self.pending and rng.random() < (0.7 if faults else 1):
            self.commit_one()
        self.run(self.shard.tick(self.now))
        self.check()

    def settled(self) -> bool:
        if self.pending or any(c.busy for c in self.consumers.values()):
            return False
        live = [c for c in self.consumers.values() if not c.left]
        members = self.members()
        if not live or members != {c.member_id for c in live}:
            return False
        g = self.shard.consumer_groups.get("g")
        if g is not None and g.state() != CG_STABLE:
            return False
        if g is None and (self.shard.groups["g"].state != STABLE or any(c.phase != "stable" for c in live)):
            return False
        want = sorted((tid, p) for tid, n in self.topics.values() for p in range(n))
        got = sorted((t, p) for c in live for t, ps in c.owned.items() for p in ps)
        return got == want


def run_seed(seed: int, steps: int = 400, trace=None) -> Result:
    w = World(seed, trace)
    for _ in range(steps):
        w.step(faults=True)
    for c in w.consumers.values():
        c.paused_until = 0
    for _ in range(3000):
        if w.settled():
            return Result(seed, w.upgrades, w.downgrades, w.failovers)
        w.step(faults=False)
    raise InvariantViolation(f"seed {seed}: no convergence: {w.shard.consumer_groups.get('g') or w.shard.groups.get('g')}"
                             f", consumers {[(c.name, c.member_id, c.phase, c.epoch, c.owned) for c in w.consumers.values()]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--start", type=int, default=0)
    a = ap.parse_args()
    rs = [run_seed(s) for s in range(a.start, a.start + a.seeds)]
    print(f"{len(rs)} seeds: {sum(r.upgrades for r in rs)} upgrades, {sum(r.downgrades for r in rs)} downgrades, "
          f"{sum(r.failovers for r in rs)} failovers; all invariants held, all converged")


if __name__ == "__main__":
    main()
