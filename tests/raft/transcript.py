"""A small text DSL to drive RaftCore nodes by hand, in the style of etcd raft's
datadriven tests. A transcript is a sequence of cases separated by blank lines:

    command args...
    ----
    expected output

Commands:
  cluster voters=1,2,3 [observers=4] [max_records=N] [linger=MS] [dynamic=1]   create the nodes (time 0);
                        dynamic=1: a KIP-853 quorum whose initial voters are ``voters``
  add-voter L N / remove-voter L N   AddRaftVoter / RemoveRaftVoter of node N on leader L
  update-voter L N host=H port=P     UpdateRaftVoter: node N's new listener, on leader L
  voters [N...]         each node's voter set (and whether a change is uncommitted)
  campaign N            node N stands for election (pre-vote first)
  tick MS               advance the clock and fire every due timer
  run MS                tick 50 ms + stabilize, repeatedly (prints nothing)
  sync [N...]           nodes persist their Ready (ops durable, messages queued)
  deliver [from=N] [to=N] [drop]   deliver (or drop) the queued messages, once
  stabilize             sync and deliver until nothing is left
  propose N REC...      node N proposes records (linger 0 by default: appended at once)
  status [N...]         role, epoch, leader, vote, log end, high watermark
  log N                 node N's log
  crash N / restart N   lose everything not synced / restart from the disk
  isolate N / heal      drop every message to or from N / stop doing so
  resign N              graceful resignation (EndQuorumEpoch)
  snapshot N            node N snapshots its state machine at its applied offset
  applied N             what node N's state machine has applied

Run with REWRITE_TRANSCRIPTS=1 to rewrite the expected output (then review the diff).
"""

from __future__ import annotations

import dataclasses
import random

from raft.api import Snapshot
from raft.core import (
    VOTERS_PREFIX,
    Append,
    Committed,
    LoadSnapshot,
    QuorumState,
    RaftCore,
    SaveSnapshot,
    SaveState,
    Timeouts,
    Truncate,
    Voter,
    VoterChangeError,
    parse_voters_record,
)
from raft.messages import Entry, Message


# The transcripts drive the sans-IO core by hand: a node's disk and state machine are these.
class KV:
    """The test state machine: records are ``key=value``; a snapshot is the sorted items."""

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}
        self.applied_end = 0  # every record below this offset is applied

    def load(self, snap: Snapshot) -> None:
        self.data = dict(r.split(b"=", 1) for r in snap.records)
        self.applied_end = snap.end_offset

    def apply(self, base: int, entries) -> None:
        for i, e in enumerate(entries):
            if base + i < self.applied_end:
                continue
            assert base + i == self.applied_end, f"gap in commits: {base + i} != {self.applied_end}"
            if not e.control:
                k, _, v = e.data.partition(b"=")
                self.data[k] = v
            self.applied_end = base + i + 1

    def snapshot_records(self) -> list[bytes]:
        return [k + b"=" + v for k, v in sorted(self.data.items())]


class SimDisk:
    """What a node has durably synced: quorum state, snapshot, log entries."""

    def __init__(self) -> None:
        self.state = QuorumState()
        self.snapshot: Snapshot | None = None
        self.log_start = 0
        self.entries: list[Entry] = []

    def apply(self, ops) -> list[tuple[int, int]]:
        """Apply ops atomically; returns the (start, end) offset ranges that were removed."""
        removed = []
        for op in ops:
            if isinstance(op, Truncate):
                end = self.log_start + len(self.entries)
                if op.offset < end:
                    removed.append((max(op.offset, self.log_start), end))
                    del self.entries[max(0, op.offset - self.log_start):]
            elif isinstance(op, Append):
                assert op.base_offset == self.log_start + len(self.entries), "append leaves a gap on disk"
                self.entries.extend(op.entries)
            elif isinstance(op, SaveState):
                self.state = op.state
            elif isinstance(op, SaveSnapshot):
                s = op.snapshot
                drop = s.end_offset - self.log_start
                if drop > 0:
                    del self.entries[:drop]
                else:
                    self.entries = []
                self.log_start = s.end_offset
                self.snapshot = s
        return removed

    def has(self, offset: int, entry: tuple[int, bytes]) -> bool:
        if offset < self.log_start:
            return True  # covered by the snapshot
        i = offset - self.log_start
        return i < len(self.entries) and (self.entries[i].epoch, self.entries[i].data) == entry


def render(m: Message) -> str:
    b = m.body
    name = type(b).__name__
    parts = []
    for f in dataclasses.fields(b):
        v = getattr(b, f.name)
        if f.name == "entries":
            v = "[" + ",".join(_entry(e) for e in v) + "]"
            if v == "[]":
                continue
        elif f.name == "records":
            v = "[" + ",".join(r.decode() for r in v) + "]"
        if f.name in ("error",) and v == 0:
            continue
        if f.name == "leader_endpoint":
            if v is None:
                continue
            v = f"{v[0]}:{v[1]}"
        if f.name in ("diverging_epoch", "diverging_end_offset", "snapshot_end_offset", "snapshot_epoch") and v == -1:
            continue
        parts.append(f"{f.name}={v}")
    return f"{m.src}->{m.dst} {name} " + " ".join(parts)


def _entry(e: Entry) -> str:
    if e.control and e.data.startswith(VOTERS_PREFIX):
        return f"e{e.epoch}:V{[v.id for v in parse_voters_record(e.data)]}".replace(" ", "")
    return f"e{e.epoch}:LC" if e.control else f"e{e.epoch}:{e.data.decode()}"


class Node:
    def __init__(self, h: Harness, nid: int):
        self.h, self.id = h, nid
        self.disk = SimDisk()
        self.kv = KV()
        self.alive = True
        self.start()

    def start(self) -> None:
        d = self.disk
        self.kv = KV()
        initial = [Voter(v) for v in self.h.voters] if self.h.dynamic else None
        self.core = RaftCore(self.id, self.h.voters, random.Random(self.id), self.h.timeouts, state=d.state,
                             snapshot=d.snapshot, entries=list(d.entries), now_ms=self.h.now, initial_voters=initial)
        self.alive = True


class Harness:
    def __init__(self) -> None:
        self.now = 0
        self.nodes: dict[int, Node] = {}
        self.voters: list[int] = []
        self.queue: list[Message] = []
        self.isolated: set[int] = set()
        self.timeouts = Timeouts()
        self.dynamic = False

    def run(self, cmd: str) -> str:
        words = cmd.split()
        name, args = words[0].replace("-", "_"), words[1:]
        kw = dict(a.split("=", 1) for a in args if "=" in a)
        pos = [a for a in args if "=" not in a]
        if name == "propose":
            pos, kw = args, {}
        if name == "update_voter":
            pos = [a for a in args if "=" not in a]
        out: list[str] = []
        getattr(self, "cmd_" + name)(pos, kw, out)
        return "\n".join(out) if out else "ok"

    def _ids(self, pos) -> list[int]:
        return [int(p) for p in pos] if pos else sorted(self.nodes)

    # ------------------------------------------------------------------ commands
    def cmd_cluster(self, pos, kw, out) -> None:
        self.voters = [int(x) for x in kw["voters"].split(",")]
        self.dynamic = kw.get("dynamic") == "1"
        observers = [int(x) for x in kw.get("observers", "").split(",") if x]
        self.timeouts = Timeouts(fetch_max_records=int(kw.get("max_records", 2000)),
                                 append_linger_ms=int(kw.get("linger", 0)))
        for nid in self.voters + observers:
            self.nodes[nid] = Node(self, nid)
        for nid in self.nodes:
            self._sync(nid, [])

    def cmd_campaign(self, pos, kw, out) -> None:
        self.nodes[int(pos[0])].core.campaign(self.now)

    def cmd_tick(self, pos, kw, out) -> None:
        self.now += int(pos[0])
        for n in self.nodes.values():
            if n.alive:
                n.core.poll(self.now)

    def cmd_add_voter(self, pos, kw, out) -> None:
        self._voter_change(out, lambda c: c.add_voter(Voter(int(pos[1])), self.now), int(pos[0]))

    def cmd_update_voter(self, pos, kw, out) -> None:
        self._voter_change(out, lambda c: c.update_voter(Voter(int(pos[1]), "", kw.get("host", ""),
                                                               int(kw.get("port", 0))), self.now), int(pos[0]))

    def cmd_remove_voter(self, pos, kw, out) -> None:
        self._voter_change(out, lambda c: c.remove_voter(int(pos[1]), "", self.now), int(pos[0]))

    def _voter_change(self, out, fn, leader: int) -> None:
        try:
            out.append(f"voters record at offset {fn(self.nodes[leader].core)}")
        except VoterChangeError as e:
            out.append(f"error {e.code}: {e.message}")
        except Exception as e:  # NotLeaderError
            out.append(f"error: {type(e).__name__}")

    def cmd_voters(self, pos, kw, out) -> None:
        for nid in self._ids(pos):
            c = self.nodes[nid].core
            where = " ".join(f"{v.id}@{v.host}:{v.port}" for v in c.voter_info.values() if v.host)
            out.append(f"{nid}: voters={list(c.voters)} is_voter={c.is_voter} pending={c.voter_change_pending()}"
                       + (f" at {where}" if where else ""))

    def cmd_resign(self, pos, kw, out) -> None:
        self.nodes[int(pos[0])].core.resign(self.now)

    def _sync(self, nid: int, out) -> None:
        n = self.nodes[nid]
        while n.alive and (r := n.core.take_ready()) is not None:
            n.disk.apply(r.ops)
            self.queue.extend(r.messages)
            for note in r.notifications:
                if isinstance(note, LoadSnapshot):
                    n.kv.load(note.snapshot)
                elif isinstance(note, Committed):
                    n.kv.apply(note.base_offset, note.entries)
            n.core.advance(r, self.now)

    def cmd_sync(self, pos, kw, out) -> None:
        for nid in self._ids(pos):
            self._sync(nid, out)

    def cmd_deliver(self, pos, kw, out) -> None:
        src = int(kw["from"]) if "from" in kw else None
        dst = int(kw["to"]) if "to" in kw else None
        drop = "drop" in pos
        batch = [m for m in self.queue if (src is None or m.src == src) and (dst is None or m.dst == dst)]
        self.queue = [m for m in self.queue if m not in batch]
        for m in batch:
            self._deliver(m, out, drop)

    def _deliver(self, m: Message, out, drop: bool = False) -> None:
        n = self.nodes.get(m.dst)
        lost = drop or m.src in self.isolated or m.dst in self.isolated or n is None or not n.alive
        out.append(("DROP " if lost else "") + render(m))
        if not lost:
            n.core.step(m, self.now)

    def cmd_stabilize(self, pos, kw, out) -> None:
        for _ in range(200):
            for nid in sorted(self.nodes):
                self._sync(nid, out)
            if not self.queue:
                return
            batch, self.queue = self.queue, []
            for m in batch:
                self._deliver(m, out)
        raise AssertionError("did not stabilize")

    def cmd_run(self, pos, kw, out) -> None:
        """Let MS of time pass in 50 ms steps, stabilizing after each (output suppressed)."""
        end = self.now + int(pos[0])
        while self.now < end:
            self.cmd_tick([str(min(50, end - self.now))], {}, [])
            self.cmd_stabilize([], {}, [])

    def cmd_propose(self, pos, kw, out) -> None:
        n = self.nodes[int(pos[0])]
        try:
            epoch, last = n.core.propose([p.encode() for p in pos[1:]], self.now)
            out.append(f"epoch={epoch} last_offset={last}")
        except Exception as e:  # NotLeaderError
            out.append(f"error: {e}")

    def cmd_status(self, pos, kw, out) -> None:
        for nid in self._ids(pos):
            n = self.nodes[nid]
            if not n.alive:
                out.append(f"{nid}: down")
                continue
            c = n.core
            voted = "-" if c.voted_for is None else c.voted_for
            leader = "-" if c.leader().leader_id is None else c.leader().leader_id
            out.append(f"{nid}: {c.role.value} epoch={c.epoch} leader={leader} voted={voted} "
                       f"log=[{c.log_start},{c.log_end}) hw={c.hw}")

    def cmd_log(self, pos, kw, out) -> None:
        c = self.nodes[int(pos[0])].core
        snap = f"snapshot(end={c.snapshot.end_offset},epoch={c.snapshot.epoch}) " if c.snapshot else ""
        out.append(snap + " ".join(f"{c.log_start + i}:{_entry(e)}" for i, e in enumerate(c.log)))

    def cmd_applied(self, pos, kw, out) -> None:
        kv = self.nodes[int(pos[0])].kv
        items = ",".join(f"{k.decode()}={v.decode()}" for k, v in sorted(kv.data.items()))
        out.append(f"applied_end={kv.applied_end} {{{items}}}")

    def cmd_crash(self, pos, kw, out) -> None:
        n = self.nodes[int(pos[0])]
        n.alive = False  # whatever it did since its last sync is lost; what it sent is in flight

    def cmd_restart(self, pos, kw, out) -> None:
        n = self.nodes[int(pos[0])]
        n.start()
        self._sync(n.id, out)

    def cmd_isolate(self, pos, kw, out) -> None:
        self.isolated |= {int(p) for p in pos}

    def cmd_heal(self, pos, kw, out) -> None:
        self.isolated.clear()

    def cmd_snapshot(self, pos, kw, out) -> None:
        n = self.nodes[int(pos[0])]
        s = n.core.take_snapshot(n.kv.applied_end, n.kv.snapshot_records())
        out.append(f"snapshot end={s.end_offset} epoch={s.epoch} records={len(s.records)}")
        self._sync(n.id, out)


def run_transcript(text: str) -> str:
    """Run every case and return the transcript with the actual outputs."""
    h = Harness()
    cases = [c for c in text.strip("\n").split("\n\n") if c.strip()]
    result = []
    for case in cases:
        lines = case.split("\n")
        comments = [ln for ln in lines if ln.startswith("#")]
        body = [ln for ln in lines if not ln.startswith("#")]
        cmd = body[0]
        actual = h.run(cmd)
        result.append("\n".join(comments + [cmd, "----", actual]))
    return "\n\n".join(result) + "\n"
