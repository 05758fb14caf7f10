"""A deterministic simulation of a share partition (KIP-932): the real ``SharePartition`` core on
the partition leader and the real ``ShareStateShard`` of the share coordinator, simulated share
consumers, in virtual time, from one seed.

The leader runs what its shell does (broker/share/manager.py): acknowledgements and acquisitions
are written to the share coordinator (WriteShareGroupState: the shard's records appended to its
log and replayed) before they are answered or delivered; a write the coordinator fences is not
answered. Faults: consumers crash holding records (their locks expire), their sessions end
(records released), producers append records, the partition leader fails over (the new leader
reads the state with a higher leader epoch; the old one may still try to write and must be
fenced), the share coordinator fails over (rebuilt from its log). Consumers accept, release and
reject records at random. Checked after every step:

* a record is never held by two consumers at once under one leader (a new delivery of a record
  whose lock another consumer still holds is a violation);
* no record is delivered more than ``group.share.delivery.count.limit`` times, across failovers;
* a record whose acknowledgement was answered is never delivered again, across failovers;
* the coordinator state rebuilt from its log equals the live state (every 50 steps).

After the faults stop, consumers accept everything: the start offset must reach the log end.

    .venv/bin/python -m sim.share --seeds 500 [--start 0]
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import uuid

from broker.share.partition import ACCEPT, REJECT, RELEASE, SharePartition
from broker.share.records import StateKey
from broker.share.state import ShareStateShard
from common.errors import ErrorCode

TOPIC_ID = uuid.UUID(int=7)
KEY = StateKey("sg", TOPIC_ID, 0)


class Violation(AssertionError):
    pass


@dataclasses.dataclass
class Consumer:
    name: str
    alive: bool = True
    # offset -> (leader epoch it came from, its lock's end as the consumer was told)
    held: dict[int, tuple[int, int]] = dataclasses.field(default_factory=dict)


class Coordinator:
    """The share coordinator: the pure shard plus its durable record log."""

    def __init__(self, snapshot_every: int):
        self.snapshot_every = snapshot_every
        self.log: list[tuple[bytes, bytes | None]] = []
        self.shard = ShareStateShard(0, snapshot_every)

    def run(self, result_records) -> dict:
        result, records = result_records
        for k, v in records:
            self.shard.replay(k, v, len(self.log))
            self.log.append((k, v))
        return result

    def failover(self) -> None:
        self.shard = ShareStateShard(0, self.snapshot_every)
        for off, (k, v) in enumerate(self.log):
            self.shard.replay(k, v, off)


class World:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        r = self.rng
        self.seed = seed
        self.now = 0
        self.limit = r.randint(2, 5)
        self.lock_ms = r.choice([50, 200, 1000])
        self.max_locks = r.choice([5, 20, 200])
        self.log_end = r.randint(0, 30)
        self.coord = Coordinator(r.choice([0, 2, 5, 500]))
        self.coord.run(self.coord.shard.initialize(KEY, 0, -1, 0))
        self.leader_epoch = 0
        self.leader: SharePartition | None = None
        self.zombie: SharePartition | None = None  # a former leader that may still try to write
        self.consumers = [Consumer(f"c{i}") for i in range(r.randint(1, 5))]
        self.deliveries: dict[int, int] = {}
        self.acked: set[int] = set()  # acknowledgements answered as successful
        self.stats = {"deliveries": 0, "failovers": 0, "fenced": 0, "crashes": 0, "expired": 0, "acked": 0}
        self.failover_leader()

    # --- the leader's shell ---------------------------------------------------------------------
    def failover_leader(self) -> None:
        self.zombie = self.leader
        self.leader_epoch += 1
        res = self.coord.run(self.coord.shard.read(KEY, self.leader_epoch))
        assert res["error_code"] == 0, res
        p = SharePartition("sg", "t", 0, delivery_limit=self.limit, lock_ms=self.lock_ms, max_locks=self.max_locks)
        p.load(res["state_epoch"], res["start_offset"], [_batch(b) for b in res["state_batches"]])
        if not p.initialized:
            p.initialize(0)
        self.leader = p
        self.leader_written = p.version
        if not self.write(p, self.leader_epoch):
            raise Violation("a new leader's first write was refused")
        self.stats["failovers"] += 1

    def write(self, p: SharePartition, epoch: int) -> bool:
        start, batches = p.snapshot()
        res = self.coord.run(self.coord.shard.write(KEY, p.state_epoch, epoch, start, batches,
                                                    p.delivery_complete_count(), self.now))
        if res["error_code"] in (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.FENCED_STATE_EPOCH):
            self.stats["fenced"] += 1
            return False
        if res["error_code"]:
            raise Violation(f"write failed: {res}")
        return True

    def fetch(self, c: Consumer) -> None:
        """One ShareFetch: acknowledgements of some held records, then new acquisitions."""
        p, r = self.leader, self.rng
        acks = []
        for off in sorted(c.held):
            if r.random() < 0.7:
                acks.append((off, r.choices([ACCEPT, RELEASE, REJECT], [6, 2, 1])[0]))
        answered_ok = []
        for off, t in acks:
            del c.held[off]
            code, _ = p.acknowledge(c.name, [(off, off, [t])], self.now)
            if code == ErrorCode.NONE and t == ACCEPT:
                answered_ok.append(off)
        n = r.randint(1, 10)
        got = p.acquire(c.name, [(o, o, False) for o in range(p.fetch_offset(), self.log_end)], n, self.now)
        if not self.write(p, self.leader_epoch):
            return  # not written: nothing answered (the shell drops the partition; a later load fixes it)
        for off in answered_ok:
            self.acked.add(off)
            self.stats["acked"] += 1
        for a in got:
            for off in range(a.first_offset, a.last_offset + 1):
                self.deliver(c, off, a.delivery_count)

    def deliver(self, c: Consumer, off: int, count: int) -> None:
        if off in self.acked:
            raise Violation(f"offset {off} was acknowledged and is delivered again (seed {self.seed})")
        for other in self.consumers:
            held = other.held.get(off)
            if other is not c and held is not None and held[0] == self.leader_epoch and held[1] > self.now:
                raise Violation(f"offset {off} delivered to {c.name} while {other.name} holds its lock until "
                                f"{held[1]} (now {self.now}, seed {self.seed})")
        self.deliveries[off] = self.deliveries.get(off, 0) + 1
        if self.deliveries[off] > self.limit:
            raise Violation(f"offset {off} delivered {self.deliveries[off]} times, limit {self.limit} "
                            f"(seed {self.seed})")
        if count != self.deliveries[off] and count < self.deliveries[off]:
            raise Violation(f"offset {off}: delivery count {count} below the {self.deliveries[off]} deliveries")
        c.held[off] = (self.leader_epoch, self.now + self.lock_ms)
        self.stats["deliveries"] += 1

    # --- the run --------------------------------------------------------------------------------
    def step(self, faults: bool) -> None:
        r = self.rng
        self.now += r.randint(1, 100)
        if self.leader.expire(self.now):
            self.stats["expired"] += 1
            self.write(self.leader, self.leader_epoch)
        x = r.random()
        if x < 0.15:
            self.log_end += r.randint(1, 10)
        elif faults and x < 0.18:
            self.failover_leader()
        elif faults and x < 0.21:
            self.coord.failover()
        elif faults and x < 0.24 and self.zombie is not None:
            # the old leader writes what it believes: it must be fenced
            if self.write(self.zombie, self.leader_epoch - 1):
                raise Violation(f"a write of leader epoch {self.leader_epoch - 1} was accepted (seed {self.seed})")
        elif faults and x < 0.28:
            c = r.choice(self.consumers)
            if c.alive:
                c.alive = False  # crashed holding its records: their locks expire
                self.stats["crashes"] += 1
            else:
                c.alive, c.held = True, {}  # back with a new session
        elif faults and x < 0.31:
            c = r.choice(self.consumers)  # its share session ends: its records go back
            c.held = {}
            if self.leader.release_member(c.name):
                self.write(self.leader, self.leader_epoch)
        else:
            alive = [c for c in self.consumers if c.alive]
            if alive:
                self.fetch(r.choice(alive))

    def check_log(self) -> None:
        rebuilt = ShareStateShard(0)
        for off, (k, v) in enumerate(self.coord.log):
            rebuilt.replay(k, v, off)
        if rebuilt.states != self.coord.shard.states:
            raise Violation(f"the share coordinator rebuilt from its log differs (seed {self.seed})")

    def run(self, steps: int = 400) -> dict:
        for i in range(steps):
            self.step(faults=True)
            if i % 50 == 49:
                self.check_log()
        for c in self.consumers:
            c.alive, c.held = True, {}
        for _ in range(2000):  # healing: everyone accepts what it gets until the start reaches the end
            self.now += self.lock_ms + 1
            if self.leader.expire(self.now):
                self.write(self.leader, self.leader_epoch)
            for c in self.consumers:
                p = self.leader
                for off in sorted(c.held):
                    code, _ = p.acknowledge(c.name, [(off, off, [ACCEPT])], self.now)
                    if code == ErrorCode.NONE:
                        self.acked.add(off)
                c.held = {}
                got = p.acquire(c.name, [(o, o, False) for o in range(p.fetch_offset(), self.log_end)], 50,
                                self.now)
                if self.write(p, self.leader_epoch):
                    for a in got:
                        for off in range(a.first_offset, a.last_offset + 1):
                            self.deliver(c, off, a.delivery_count)
            if self.leader.start == self.log_end and not self.leader.acquired:
                break
        if self.leader.start != self.log_end:
            raise Violation(f"did not converge: start {self.leader.start}, log end {self.log_end} (seed {self.seed})")
        self.check_log()
        return self.stats


def _batch(b):
    from broker.share.records import StateBatch
    return StateBatch(b["first_offset"], b["last_offset"], b["delivery_state"], b["delivery_count"])


def run_seed(seed: int) -> dict:
    return World(seed).run()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--start", type=int, default=0)
    args = ap.parse_args()
    total: dict[str, int] = {}
    failed = []
    for seed in range(args.start, args.start + args.seeds):
        try:
            for k, v in run_seed(seed).items():
                total[k] = total.get(k, 0) + v
        except Violation as e:
            failed.append(seed)
            print(f"seed {seed}: {e}")
    print(f"{args.seeds - len(failed)}/{args.seeds} seeds passed; {total}")
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
