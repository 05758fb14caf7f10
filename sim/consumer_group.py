"""A deterministic simulation of the consumer group protocol (KIP-848): the real ConsumerGroup core
as the coordinator, simulated consumers, in virtual time, from one seed.

The coordinator appends each heartbeat's records to its log; they commit in order after a delay,
and only then does the response leave (and it may be lost). A coordinator failover drops the
uncommitted suffix and rebuilds the group from the committed records (as a new leader loads the
partition). Consumers join, leave, pause (their session expires), change subscriptions, lose
responses and retry; topics gain partitions. Checked after every event:

* no partition is in two members' assigned or pending-revocation sets (the coordinator's view);
* no two consumers that the coordinator counts as members both believe they own a partition;
* the group rebuilt from the committed log equals the live group (checked every 20 steps, when
  nothing is pending).

After the faults stop, every live consumer must converge: the group Stable and every partition
of the subscribed topics owned by exactly one consumer.

    .venv/bin/python -m sim.consumer_group --seeds 200 [--start 0]
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import uuid

from broker.group import assignors
from broker.group.consumer_group import (
    STABLE,
    ConsumerGroup,
    ConsumerGroupConfig,
    HeartbeatError,
    HeartbeatRequest,
)
from broker.group.records import decode_key
from common.errors import ErrorCode

CFG = ConsumerGroupConfig()
TOPICS0 = {"a": (uuid.UUID(int=1), 4), "b": (uuid.UUID(int=2), 3)}


class InvariantViolation(AssertionError):
    pass


def check_held_once(g: ConsumerGroup, seed: int, now: int) -> None:
    """The coordinator's view: no partition in two members' assigned or pending-revocation sets."""
    seen: dict = {}
    for m in g.members.values():
        for a in (m.assigned, m.pending_revocation):
            for t, ps in a.items():
                for p in ps:
                    if (t, p) in seen:
                        raise InvariantViolation(f"seed {seed}: {(t, p)} held by {seen[(t, p)]} and {m.member_id} "
                                                 f"at {now}")
                    seen[(t, p)] = m.member_id


def check_owned_once(owned, seed: int, now: int, what: str = "") -> None:
    """The consumers' view: of ``owned`` ((name, {topic: partitions}) of the consumers that the
    coordinator counts as members), no two believe they own one partition."""
    owners: dict = {}
    for name, parts in owned:
        for t, ps in parts.items():
            for p in ps:
                if (t, p) in owners:
                    raise InvariantViolation(f"seed {seed}: consumers {owners[(t, p)]} and {name} both own "
                                             f"{(t, p)} at {now}{what}")
                owners[(t, p)] = name


@dataclasses.dataclass
class Consumer:
    member_id: str
    topics: tuple[str, ...]
    assignor: str | None
    epoch: int = 0
    owned: dict = dataclasses.field(default_factory=dict)
    in_flight: bool = False
    paused_until: int = 0
    left: bool = False
    full: bool = True  # the next heartbeat is a full one (joining, or after an error)


@dataclasses.dataclass
class Result:
    seed: int
    events: int
    failovers: int
    fenced: int


class World:
    def __init__(self, seed: int, trace=None):
        self.rng = random.Random(seed)
        self.seed = seed
        self.trace = trace
        self.now = 1_000_000
        self.topics = dict(TOPICS0)
        self.group = ConsumerGroup("g")
        self.committed: list[tuple[bytes, bytes | None]] = []
        self.pending: list[tuple[list, Consumer, dict | None, int | None]] = []  # (records, consumer, resp, err)
        self.consumers: dict[str, Consumer] = {}
        self.n = 0
        self.failovers = self.fenced = self.steps = 0

    def log(self, msg: str) -> None:
        if self.trace is not None:
            self.trace(f"{self.now} {msg}")

    # --- the coordinator ---------------------------------------------------------------------------
    def heartbeat(self, c: Consumer) -> None:
        req = HeartbeatRequest("g", c.member_id, -1 if c.left else c.epoch, None, None,
                               30_000 if c.full else -1, list(c.topics) if c.full else None, None,
                               c.assignor if c.full else None,
                               [(t, sorted(ps)) for t, ps in c.owned.items()], "c", "/h")
        try:
            resp, records = self.group.heartbeat(self.now, req, self.topics, CFG, c.member_id)
            err = None
        except HeartbeatError as e:
            resp, records, err = None, [], e.code
        c.in_flight = True
        self.pending.append((records, c, resp, err))
        self.log(f"hb {c.member_id} e{req.member_epoch} -> {err or (resp['member_epoch'], resp['assignment'])}")

    def commit_one(self) -> None:
        records, c, resp, err = self.pending.pop(0)
        self.committed += records
        c.in_flight = False
        if self.rng.random() < 0.1:
            self.log(f"response to {c.member_id} lost")
            c.full = True
            return
        self.deliver(c, resp, err)

    def failover(self) -> None:
        self.failovers += 1
        for _, c, _, _ in self.pending:
            c.in_flight = False
            c.full = True
        self.pending.clear()
        g = ConsumerGroup("g")
        for k, v in self.committed:
            g.replay(decode_key(k), v)
        g.on_loaded(self.now, CFG)
        self.group = g
        self.log("coordinator failover")

    def tick(self) -> None:
        records = self.group.tick(self.now, self.topics)
        if records:
            self.fenced += 1
            self.pending.append((records, Consumer("-", (), None), None, None))

    # --- the consumers ---------------------------------------------------------------------------
    def deliver(self, c: Consumer, resp: dict | None, err: int | None) -> None:
        if resp is None and err is None:
            return  # the coordinator's own records (a fencing, new topic metadata): nobody waits
        if c.left:
            self.consumers.pop(c.member_id, None)
            return
        if err is not None:
            if err in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
                c.owned, c.epoch, c.full = {}, 0, True  # give everything up and rejoin
            return
        c.epoch, c.full = resp["member_epoch"], False
        if resp["assignment"] is not None:
            c.owned = {t: ps for t, ps in resp["assignment"].items() if ps}

    # --- checks ------------------------------------------------------------------------------------
    def check(self) -> None:
        g = self.group
        check_held_once(g, self.seed, self.now)
        check_owned_once(((c.member_id, c.owned) for c in self.consumers.values()
                          if c.member_id in g.members and not c.left), self.seed, self.now)
        self.steps += 1
        if not self.pending and self.steps % 20 == 0:  # (a full rebuild: every 20 steps)
            r = ConsumerGroup("g")
            for k, v in self.committed:
                r.replay(decode_key(k), v)
            if (r.epoch, r.assignment_epoch, r.target) != (g.epoch, g.assignment_epoch, g.target) or \
                    {k: m.current() for k, m in r.members.items()} != {k: m.current() for k, m in g.members.items()}:
                raise InvariantViolation(f"seed {self.seed}: the group rebuilt from its log differs at {self.now}")

    # --- the run ----------------------------------------------------------------------------------
    def step(self, faults: bool) -> None:
        rng = self.rng
        self.now += rng.randint(50, 1500) if faults else 200
        roll = rng.random()
        live = [c for c in self.consumers.values() if not c.left]
        if faults and roll < 0.06 or not live:
            self.n += 1
            c = Consumer(f"m{self.n}", rng.choice([("a",), ("a", "b"), ("b",)]), rng.choice([None, *assignors.ASSIGNORS]))
            self.consumers[c.member_id] = c
            self.heartbeat(c)
        elif faults and roll < 0.09 and len(live) > 1:
            c = rng.choice(live)
            if not c.in_flight:
                c.left = True
                self.heartbeat(c)
        elif faults and roll < 0.11:
            rng.choice(live).paused_until = self.now + rng.randint(10_000, 60_000)
        elif faults and roll < 0.12:
            name = rng.choice(sorted(self.topics))
            tid, n = self.topics[name]
            self.topics[name] = (tid, n + 1)
            records = self.group.on_metadata(self.topics)
            if records:
                self.pending.append((records, Consumer("-", (), None), None, None))
        elif faults and roll < 0.14 and any(not c.in_flight for c in live):
            c = rng.choice([c for c in live if not c.in_flight])
            c.topics = rng.choice([("a",), ("a", "b"), ("b",)])
            c.full = True
            self.heartbeat(c)
        elif faults and roll < 0.16:
            self.failover()
        # every consumer heartbeats now and then (each on its own timer in reality), and
        # the coordinator's writes commit in order, some of them later
        for c in sorted(live, key=lambda c: c.member_id):
            if not c.in_flight and not c.left and c.paused_until <= self.now and rng.random() < (0.5 if faults else 1):
                self.heartbeat(c)
        while self.pending and rng.random() < (0.7 if faults else 1):
            self.commit_one()
        self.tick()
        self.check()

    def settled(self) -> bool:
        if self.pending or any(c.in_flight for c in self.consumers.values()):
            return False
        live = [c for c in self.consumers.values() if not c.left and c.member_id in self.group.members]
        if not live or self.group.state() != STABLE or len(live) != len(self.group.members):
            return False
        want = {(self.topics[t][0], p) for c in live for t in c.topics for p in range(self.topics[t][1])}
        got = [(t, p) for c in live for t, ps in c.owned.items() for p in ps]
        return sorted(got, key=str) == sorted(want, key=str)


def run_seed(seed: int, steps: int = 400, trace=None) -> Result:
    w = World(seed, trace)
    for _ in range(steps):
        w.step(faults=True)
    for c in w.consumers.values():
        c.paused_until = 0
    for _ in range(3000):  # liveness: no more faults; everyone heartbeats and converges
        if w.settled():
            return Result(seed, steps, w.failovers, w.fenced)
        w.step(faults=False)
    raise InvariantViolation(f"seed {seed}: no convergence: {w.group}, consumers "
                             f"{[(c.member_id, c.epoch, c.owned) for c in w.consumers.values()]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--start", type=int, default=0)
    a = ap.parse_args()
    rs = [run_seed(s) for s in range(a.start, a.start + a.seeds)]
    print(f"{len(rs)} seeds: {sum(r.failovers for r in rs)} failovers, {sum(r.fenced for r in rs)} fencings; "
          "all invariants held, all converged")


if __name__ == "__main__":
    main()
