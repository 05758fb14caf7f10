"""The history checker: pure functions over a recorded chaos history (a list of dicts).

In the spirit of Jepsen's Kafka checker. The history is what the workload clients and the
nemesis wrote down (see ``chaos/history.py`` for the event shapes):

* ``{"f": "send", "type": "invoke"|"ok"|"fail"|"info", "t", "process", "tp", "value", "offset"}``
  — a producer instance (``process``) sends the unique integer ``value`` to ``tp``
  ("topic/partition"); ``ok`` carries the offset the broker acknowledged. ``fail``/``info``
  sends are indeterminate: they may or may not be in the log, except a ``fail`` with
  ``"definite": true`` (the client refused the record: it never left).
* ``{"f": "assign", "process", "session", "tp", "offset"}`` — a consumer session starts reading
  ``tp`` at ``offset``.
* ``{"f": "poll", "process", "session", "msgs": [[tp, offset, value], ...]}``.
* ``{"f": "commit", "type": "ok", "process", "group", "tp", "offset"}`` and
  ``{"f": "committed", "process", "group", "tp", "offset", "invoke_t"}`` (an OffsetFetch answer).
* ``{"f": "member", "type": "start"|"stop", "process", "group", "session_timeout_ms"}`` — a
  consumer-group member's lifetime; ``"type": "assigned", "tps": [...]`` — each assignment it got.
* ``{"f": "heal", "t"}`` — the harness healed every fault (the end of the faults).
* ``{"f": "final-read", "tp", "msgs": [[offset, value], ...], "complete": bool, "low", "high"}``
  after the heal: the partition read from ``low`` to the high watermark ``high``.
* ``{"f": "final-batches", "tp", "batches": [[base offset, last offset, producer id, producer epoch,
  base sequence], ...], "complete": bool}`` — the record batches of ``tp`` after the heal.
* ``{"f": "stuck", "worker", "process", "call", "since", "stack"}`` — a workload thread still
  running when the run ended (hung in a client call).
* ``{"f": "final-produce", "type": "ok"|"fail", "sent": [[tp, value]], "acks": [[tp, offset,
  value]]}`` — a fresh write to every partition after the heal (negative values).
* ``{"f": "topic", "type": "ok"|"fail", "op": "create"|"delete", "topic"}``;
  ``{"f": "topics-final", "topics": [...], "complete": bool}``.
* ``{"f": "nemesis", "type": "start"|"stop", "id", "kind", "nodes": [node ids]}``.
* ``{"f": "probe", "t", "leaders": {tp: leader id}, "controller": id}``.

No I/O, no clock: the same history always gives the same verdict.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from dataclasses import dataclass, field
from statistics import median

from chaos import txn_checker

MAX_EXAMPLES = 20


def _ex(lst: list, item) -> None:
    if len(lst) < MAX_EXAMPLES:
        lst.append(item)


def acknowledged(history: list[dict]) -> list[tuple[str, int, int | None, float | None, str]]:
    """Every acknowledged write as (tp, value, offset, t, process): the workload's and the fresh writes the
    harness makes after the heal (``final-produce`` events with ``acks``)."""
    out = []
    for op in history:
        f = op.get("f")
        if f == "send" and op.get("type") == "ok":
            out.append((op["tp"], op["value"], op.get("offset"), op.get("t"), op.get("process", "?")))
        elif f == "final-produce":
            for tp, off, val in op.get("acks", ()):
                out.append((tp, val, off, op.get("t"), "final-produce"))
    return out


def observations(history: list[dict]) -> list[tuple[str, int, int, str]]:
    """Every (tp, offset, value, source) the clients saw: acks, polls and final reads."""
    out = [(tp, off, val, "ack") for tp, val, off, _t, _p in acknowledged(history) if off is not None and off >= 0]
    for op in history:
        f = op.get("f")
        if f == "poll":
            for tp, off, val in op.get("msgs", ()):
                out.append((tp, off, val, "poll"))
        elif f == "final-read":
            for off, val in op.get("msgs", ()):
                out.append((op["tp"], off, val, "final-read"))
    return out


def check_inconsistent_offsets(history: list[dict]) -> list[dict]:
    """One offset of a partition seen with two different values."""
    by_off: dict[tuple[str, int], dict[int, str]] = defaultdict(dict)
    for tp, off, val, src in observations(history):
        by_off[(tp, off)].setdefault(val, src)
    out: list[dict] = []
    for (tp, off), vals in sorted(by_off.items()):
        if len(vals) > 1:
            _ex(out, {"tp": tp, "offset": off, "values": {str(v): s for v, s in sorted(vals.items())}})
    return out


def check_duplicates(history: list[dict]) -> tuple[list[dict], list[dict]]:
    """A value (written once) found at more than one offset, or in more than one partition:
    ``(duplicates, resent)`` (the latter in full: the verdict counts them).

    Kafka's idempotence holds within one producer epoch: a retried batch carries the producer id,
    epoch and sequences of its first send, and the leader writes it once. A client that bumps its
    epoch starts a new session whose batches nothing links to the old one's: librdkafka does so
    when a request after one that failed gets OUT_OF_ORDER_SEQUENCE_NUMBER (the ISR grew back to
    min.insync.replicas between a NOT_ENOUGH_REPLICAS answer and the next request, which Kafka's
    brokers answer the same way) and renumbers every queued batch, including those whose first
    send may have been written (the leader died mid-request): a copy under each epoch
    (librdkafka issue #4953). The final read's batch metadata (``final-batches``) tells them
    apart: copies in different epochs of one producer id are ``resent``; copies within one
    epoch, or that cannot be placed, are ``duplicates``, the broker's fault."""
    where: dict[int, set[tuple[str, int]]] = defaultdict(set)
    for tp, off, val, src in observations(history):
        if src != "ack":
            where[val].add((tp, off))
    batches = _final_batches(history)
    dups: list[dict] = []
    resent: list[dict] = []
    for val, places in sorted(where.items()):
        if len(places) > 1:
            at = sorted([list(p) for p in places])
            sessions = [_session_of(batches, tp, off) for tp, off in at]
            if all(s is not None for s in sessions) and len({s[0] for s in sessions}) == 1 \
                    and len({s[1] for s in sessions}) == len(sessions):
                resent.append({"value": val, "at": at, "producer": sessions[0][0],
                               "epochs": [s[1] for s in sessions]})
            else:
                _ex(dups, {"value": val, "at": at, "sessions": sessions})
    return dups, resent


def check_sequences(history: list[dict]) -> list[dict]:
    """The broker's side of idempotence, from the final read's batch metadata: within one partition
    and one producer epoch, no sequence number is in two batches (a retried batch was appended
    again)."""
    out: list[dict] = []
    for tp, (_bases, bs) in sorted(_final_batches(history).items()):
        seen: dict[tuple[int, int], list[tuple[int, int, int]]] = defaultdict(list)
        for base, last, pid, epoch, seq in bs:
            if pid >= 0 and seq >= 0:
                seen[(pid, epoch)].append((seq, seq + last - base, base))
        for (pid, epoch), ranges in sorted(seen.items()):
            ranges.sort()
            for (s1, e1, o1), (s2, _e2, o2) in itertools.pairwise(ranges):
                if s2 <= e1:
                    _ex(out, {"tp": tp, "producer": pid, "epoch": epoch, "sequences": [s1, e1],
                              "offsets": [o1, o2]})
    return out


def check_stuck(history: list[dict]) -> list[dict]:
    """Workers still running when the run ended: a client hung in a call without a timeout of its
    own (librdkafka's synchronous commit, close), with the call and since when."""
    return [{k: op.get(k) for k in ("worker", "process", "call", "since")} for op in history if op.get("f") == "stuck"]


def _final_batches(history: list[dict]) -> dict[str, tuple[list[int], list[list[int]]]]:
    """tp -> (base offsets, batches) of the final read's batch metadata, sorted by offset."""
    out: dict[str, tuple[list[int], list[list[int]]]] = {}
    for op in history:
        if op.get("f") == "final-batches":
            bs = sorted(op["batches"])
            out[op["tp"]] = ([b[0] for b in bs], bs)
    return out


def _session_of(batches, tp: str, off: int) -> tuple[int, int] | None:
    """(producer id, producer epoch) of the batch holding ``tp``/``off``, if the final read saw it."""
    got = batches.get(tp)
    if got is None:
        return None
    bases, bs = got
    i = bisect.bisect_right(bases, off) - 1
    if i < 0 or bs[i][1] < off:
        return None
    return bs[i][2], bs[i][3]


def _read_state(history: list[dict]):
    seen_values: dict[str, set[int]] = defaultdict(set)
    seen_offsets: dict[str, set[int]] = defaultdict(set)
    for tp, off, val, src in observations(history):
        if src != "ack":
            seen_values[tp].add(val)
            seen_offsets[tp].add(off)
    return seen_values, seen_offsets


@dataclass
class FinalRead:
    """What the read after the heal found in one partition. ``complete`` is recomputed from the read
    itself (it reached the high watermark it asked for), not taken from the runner's flag alone."""

    values: dict[int, int] = field(default_factory=dict)  # value -> offset
    offsets: set[int] = field(default_factory=set)
    low: int | None = None
    high: int | None = None
    flagged: bool = False

    @property
    def reached(self) -> int:
        """One past the last offset read (the read covers every offset below it)."""
        return max(self.offsets) + 1 if self.offsets else (self.low or 0)

    @property
    def complete(self) -> bool:
        return self.flagged and (self.high is None or self.reached >= self.high)

    def holes(self) -> list[int]:
        """Offsets in [low, high) the read did not return. The chaos topic is neither compacted nor
        transactional, so its offsets are dense: a hole is a record the log or the reader lost."""
        if self.low is None or self.high is None:
            return []
        return [o for o in range(self.low, min(self.high, self.reached)) if o not in self.offsets]

    def covers(self, offset: int | None) -> bool:
        """Whether a record at ``offset`` would have been returned by this read."""
        return self.complete or (offset is not None and 0 <= offset < self.reached)


def final_reads(history: list[dict]) -> dict[str, FinalRead]:
    out: dict[str, FinalRead] = {}
    for op in history:
        if op.get("f") != "final-read":
            continue
        fr = out.setdefault(op["tp"], FinalRead())
        for off, val in op.get("msgs", ()):
            fr.values[val] = off
            fr.offsets.add(off)
        fr.flagged = fr.flagged or bool(op.get("complete"))
        if op.get("high") is not None:
            fr.low, fr.high = op.get("low"), op["high"]
    return out


def check_lost(history: list[dict]) -> tuple[list[dict], int, int]:
    """Writes missing from the final read: every acknowledged write, and every write a consumer polled
    (a read means the cluster committed it), must be in the final read of its partition, whatever earlier
    polls saw. A missing write counts as lost when the final read covered its offset (it was complete, or
    went past the offset); otherwise it is 'unseen' (and the incomplete final read is a no-recovery
    anomaly). Without any final read of a partition, a write no read saw is lost when some read went
    past its offset. Returns (examples, lost count, unseen count)."""
    finals = final_reads(history)
    seen_values, seen_offsets = _read_state(history)
    max_off = {tp: max(offs) for tp, offs in seen_offsets.items() if offs}
    out: list[dict] = []
    n = unseen = 0
    acked: set[tuple[str, int]] = set()
    for tp, val, off, t, proc in acknowledged(history):
        acked.add((tp, val))
        fr = finals.get(tp)
        if fr is not None:
            if val in fr.values:
                continue
            is_lost = fr.covers(off)
        else:
            if val in seen_values[tp]:
                continue
            is_lost = off is not None and off >= 0 and max_off.get(tp, -1) > off
        if is_lost:
            n += 1
            _ex(out, {"tp": tp, "value": val, "acked_offset": off, "t": t, "acknowledged": True,
                      "process": proc})
        else:
            unseen += 1
    reported: set[tuple[str, int]] = set()
    for op in history:
        if op.get("f") != "poll":
            continue
        for tp, off, val in op.get("msgs", ()):
            fr = finals.get(tp)
            if (tp, val) in acked or (tp, val) in reported or fr is None or val in fr.values or not fr.covers(off):
                continue
            reported.add((tp, val))
            n += 1
            _ex(out, {"tp": tp, "value": val, "polled_offset": off, "t": op.get("t"), "acknowledged": False,
                      "polled_by": op.get("process")})
    return out, n, unseen


def _harness_value(history: list[dict]):
    """Values the harness itself writes after the heal (final-produce ``sent``; older histories: the
    negative values)."""
    sent = {(tp, v) for op in history if op.get("f") == "final-produce" for tp, v in op.get("sent", ())}
    if any(op.get("f") == "final-produce" and "sent" in op for op in history):
        return lambda tp, v: (tp, v) in sent
    return lambda tp, v: v < 0


def check_unexpected_reads(history: list[dict]) -> list[dict]:
    """Reads of values no client could have written there: never sent, sent to another partition, read
    before the send was invoked, or whose send failed before reaching the cluster (``definite`` fails)."""
    invoked: dict[int, tuple[str, float]] = {}
    definite: dict[int, str] = {}
    for op in history:
        if op.get("f") == "send":
            if op.get("type") == "invoke":
                invoked.setdefault(op["value"], (op["tp"], op.get("t", 0.0)))
            elif op.get("type") == "fail" and op.get("definite"):
                definite[op["value"]] = op.get("error", "")
    harness = _harness_value(history)
    out: list[dict] = []
    done: set[tuple[str, int]] = set()

    def judge(tp: str, off: int, val: int, t: float | None, where: str) -> None:
        why = None
        if harness(tp, val):
            return
        if val not in invoked:
            why = "never sent"
        elif val in definite:
            why = f"its send failed before reaching the cluster ({definite[val]})"
        elif invoked[val][0] != tp:
            why = f"sent to {invoked[val][0]}"
        elif t is not None and t < invoked[val][1]:
            why = f"read at {t} before it was sent at {invoked[val][1]}"
        if why and (tp, val) not in done:
            done.add((tp, val))
            _ex(out, {"tp": tp, "offset": off, "value": val, "read_by": where, "why": why})

    for op in history:
        if op.get("f") == "poll":
            for tp, off, val in op.get("msgs", ()):
                judge(tp, off, val, op.get("t"), op.get("process", "?"))
        elif op.get("f") == "final-read":
            for off, val in op.get("msgs", ()):
                judge(op["tp"], off, val, None, "final read")
    return out


def _log_offsets(history: list[dict]) -> dict[str, dict[int, int]]:
    """value -> offset per partition, from reads (falling back to acks)."""
    pos: dict[str, dict[int, int]] = defaultdict(dict)
    for tp, off, val, src in observations(history):
        if src == "ack":
            pos[tp].setdefault(val, off)
    for tp, off, val, src in observations(history):
        if src != "ack":
            pos[tp][val] = off
    return pos


def check_reorder(history: list[dict]) -> list[dict]:
    """Within one idempotent producer instance and partition, the log order must be the send order."""
    pos = _log_offsets(history)
    sends: dict[tuple[str, str], list[int]] = defaultdict(list)
    for op in history:
        if op.get("f") == "send" and op.get("type") == "invoke":
            sends[(op["process"], op["tp"])].append(op["value"])
    out: list[dict] = []
    for (proc, tp), values in sorted(sends.items()):
        prev_val, prev_off = None, -1
        for v in values:
            off = pos[tp].get(v)
            if off is None:
                continue
            if off <= prev_off:
                _ex(out, {"process": proc, "tp": tp, "sent_first": prev_val, "at": prev_off, "sent_later": v,
                          "at_offset": off})
            prev_val, prev_off = v, off
    return out


def _sessions(history: list[dict]):
    """(process, session, tp) -> (start offset or None, [offsets polled in order])."""
    start: dict[tuple, int] = {}
    polled: dict[tuple, list[int]] = defaultdict(list)
    for op in history:
        if op.get("f") == "assign":
            start[(op["process"], op["session"], op["tp"])] = op["offset"]
        elif op.get("f") == "poll":
            for tp, off, _val in op.get("msgs", ()):
                polled[(op["process"], op["session"], tp)].append(off)
    return start, polled


def check_nonmonotonic_polls(history: list[dict]) -> list[dict]:
    """Within one consumer session, each poll of a partition returns a strictly later offset."""
    _, polled = _sessions(history)
    out: list[dict] = []
    for key, offs in sorted(polled.items()):
        for a, b in zip(offs, offs[1:], strict=False):
            if b <= a:
                _ex(out, {"process": key[0], "session": key[1], "tp": key[2], "after": a, "got": b})
    return out


def check_skipped_polls(history: list[dict]) -> list[dict]:
    """Within one consumer session, no offset that exists in the log is jumped over (from the start
    offset of the session, and between consecutive polls)."""
    start, polled = _sessions(history)
    _, seen_offsets = _read_state(history)
    sorted_offsets = {tp: sorted(o) for tp, o in seen_offsets.items()}
    out: list[dict] = []

    def between(tp: str, a: int, b: int) -> list[int]:
        import bisect
        offs = sorted_offsets.get(tp, [])
        return offs[bisect.bisect_right(offs, a):bisect.bisect_left(offs, b)]

    for key, offs in sorted(polled.items()):
        tp = key[2]
        s = start.get(key)
        prev = (s - 1) if s is not None and s >= 0 else None
        for b in offs:
            if prev is not None and b > prev + 1:
                missed = between(tp, prev, b)
                if missed:
                    _ex(out, {"process": key[0], "session": key[1], "tp": tp, "after": prev, "got": b,
                              "skipped": missed[:10]})
            prev = b if prev is None else max(prev, b)
    return out


def check_commits(history: list[dict]) -> list[dict]:
    """Committed offsets never go backwards: acknowledged commits of a (group, tp) in completion
    order; an OffsetFetch never answers less than a commit acknowledged before it was asked, nor less
    than an earlier OffsetFetch answered (unless that lower offset was committed again in between)."""
    out: list[dict] = []
    last: dict[tuple[str, str], tuple[int, float]] = {}
    acked: list[tuple[float, str, str, int]] = []
    for op in history:
        if op.get("f") == "commit" and op.get("type") == "ok":
            key = (op["group"], op["tp"])
            if key in last and op["offset"] < last[key][0]:
                _ex(out, {"group": key[0], "tp": key[1], "committed": last[key][0], "then": op["offset"],
                          "t": op.get("t")})
            if key not in last or op["offset"] >= last[key][0]:
                last[key] = (op["offset"], op.get("t", 0))
            acked.append((op.get("t", 0), key[0], key[1], op["offset"]))
    fetched: list[tuple[float, str, str, int]] = []  # earlier OffsetFetch answers: (completed at, ...)
    for op in history:
        if op.get("f") == "committed" and op.get("offset") is not None:
            asked = op.get("invoke_t", op.get("t", 0))
            before = [o for t, g, tp, o in acked if g == op["group"] and tp == op["tp"] and t <= asked]
            if before and op["offset"] < max(before):
                _ex(out, {"group": op["group"], "tp": op["tp"], "fetched": op["offset"],
                          "acked_before": max(before), "t": op.get("t")})
                continue
            # a committed offset is a replicated record: once an OffsetFetch answered X, a later one (asked
            # after that answer) answers less only after a commit of the lower offset was acknowledged
            higher = [(t, o) for t, g, tp, o in fetched
                      if g == op["group"] and tp == op["tp"] and t <= asked and o > op["offset"]]
            if higher:
                t_high, o_high = max(higher, key=lambda x: x[1])
                rewritten = any(g == op["group"] and tp == op["tp"] and o == op["offset"] and t_high <= t <= asked
                                for t, g, tp, o in acked)
                if not rewritten:
                    _ex(out, {"group": op["group"], "tp": op["tp"], "fetched": op["offset"],
                              "fetched_before": o_high, "t": op.get("t")})
            fetched.append((op.get("t", 0), op["group"], op["tp"], op["offset"]))
    return out


def check_topics(history: list[dict]) -> list[dict]:
    """After the heal, a topic whose create was acknowledged (and delete was not attempted) exists,
    and one whose delete was acknowledged does not."""
    final = [op for op in history if op.get("f") == "topics-final" and op.get("complete")]
    if not final:
        return []
    present = set(final[-1]["topics"])
    state: dict[str, str] = {}
    for op in history:
        if op.get("f") != "topic":
            continue
        if op.get("type") == "ok":
            state[op["topic"]] = "created" if op["op"] == "create" else "deleted"
        elif op["op"] == "delete" or state.get(op["topic"]) != "deleted":
            state[op["topic"]] = "unknown"
    out: list[dict] = []
    for topic, st in sorted(state.items()):
        if st == "created" and topic not in present:
            _ex(out, {"topic": topic, "expected": "present", "found": "absent"})
        elif st == "deleted" and topic in present:
            _ex(out, {"topic": topic, "expected": "absent", "found": "present"})
    return out


def check_recovery(history: list[dict]) -> list[dict]:
    """Once the faults heal: every partition is fully readable (the final read reached the high
    watermark, with no offset missing on the way) and a fresh produce succeeds."""
    out: list[dict] = []
    finals = final_reads(history)
    sent_tps = {op["tp"] for op in history if op.get("f") == "send"} | {a[0] for a in acknowledged(history)}
    observed = {(tp, off) for tp, off, _v, _s in observations(history)}
    for tp in sorted(sent_tps | set(finals)):
        fr = finals.get(tp)
        if fr is None or not fr.complete:
            _ex(out, {"what": "final read incomplete", "tp": tp})
            continue
        # an offset some client saw is judged by check_lost (its value must be in the final read); one
        # nobody ever saw is a hole in the log
        holes = [o for o in fr.holes() if (tp, o) not in observed]
        if holes:
            _ex(out, {"what": "final read skipped offsets", "tp": tp, "offsets": holes[:10]})
    fp = [op for op in history if op.get("f") == "final-produce"]
    if not fp or fp[-1].get("type") != "ok":
        _ex(out, {"what": "fresh produce after heal failed", "error": fp[-1].get("error") if fp else "not run"})
    return out


# -- consumer-group liveness -------------------------------------------------------------------

# librdkafka's default; the workload's members use their own (recorded in their "member" events)
DEFAULT_SESSION_TIMEOUT_MS = 45000
INITIAL_REBALANCE_DELAY_S = 3.0  # group.initial.rebalance.delay.ms, Kafka's default and the nodes'


def default_group_liveness_s(history: list[dict]) -> float:
    """How long after a heal a group member may go without records: three session timeouts plus the
    initial rebalance delay. A member that lost its coordinator to a stopped broker notices only when its
    session times out (librdkafka keeps waiting on the heartbeat in flight); the coordinator that loads the
    group then waits up to a session timeout for the members whose ids the clients dropped; and when the
    coordinator moves back (preferred-leader election) before that rebalance completed, the new
    coordinator waits once more. A group that emptied also waits the initial rebalance delay."""
    sessions = [op.get("session_timeout_ms") for op in history if op.get("f") == "member"]
    session_ms = max((s for s in sessions if s), default=DEFAULT_SESSION_TIMEOUT_MS)
    return 3 * session_ms / 1000 + INITIAL_REBALANCE_DELAY_S


def _members(history: list[dict]) -> dict[str, dict]:
    """process -> {group, start, stop, polls: [t, ...], assigned: [(t, n partitions), ...]} for
    consumer-group members."""
    out: dict[str, dict] = {}
    for op in history:
        if op.get("f") == "member":
            m = out.setdefault(op["process"], {"group": op.get("group"), "start": None, "stop": None, "polls": [],
                                               "assigned": []})
            if op.get("type") == "assigned":
                m["assigned"].append((op.get("t"), len(op.get("tps", ()))))
            else:
                m[op.get("type")] = op.get("t")
    for op in history:
        if op.get("f") == "poll" and op.get("process") in out and op.get("msgs"):
            out[op["process"]]["polls"].append(op["t"])
    for m in out.values():
        m["polls"].sort()
    return out


def _calm_after(history: list[dict]) -> list[tuple[float, float]]:
    """(heal time, next fault start or inf) for every moment all faults had ended: the ends of the unions
    of the fault windows, and the harness's final heal (a window of no length)."""
    spans = [(w["start"], w["stop"] if w["stop"] is not None else float("inf")) for w in fault_windows(history)]
    spans += [(op["t"], op["t"]) for op in history if op.get("f") == "heal"]
    merged: list[list[float]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(b, merged[i + 1][0] if i + 1 < len(merged) else float("inf"))
            for i, (_a, b) in enumerate(merged) if b != float("inf")]


def check_group_liveness(history: list[dict], bound_s: float | None = None) -> list[dict]:
    """After a heal followed by at least ``bound_s`` seconds without faults (always the final heal), every
    consumer-group member that was running must receive records within ``bound_s``."""
    bound = default_group_liveness_s(history) if bound_s is None else bound_s
    members = _members(history)
    out: list[dict] = []
    for healed, next_fault in _calm_after(history):
        if next_fault - healed < bound:
            continue
        for proc, m in sorted(members.items()):
            if m["start"] is None or m["start"] > healed:
                continue
            first = next((t for t in m["polls"] if t > healed), None)
            if first is not None and first - healed <= bound:
                continue
            if m["stop"] is not None and m["stop"] < healed + bound and first is None:
                continue  # stopped before the bound ran out: not observed long enough to judge
            last = [n for t, n in m["assigned"] if t <= healed + bound]
            if first is None and last and last[-1] == 0:
                continue  # no partition to read (more members than partitions)
            _ex(out, {"process": proc, "group": m["group"], "healed_at": healed, "bound_s": bound,
                      "first_records_after_s": None if first is None else round(first - healed, 3)})
    return out


def _longest_gap(ts: list[float]) -> dict:
    best = {"max_s": 0.0, "from": None, "to": None}
    for a, b in zip(ts, ts[1:], strict=False):
        if b - a > best["max_s"]:
            best = {"max_s": round(b - a, 3), "from": a, "to": b}
    return best


def group_stalls(history: list[dict]) -> dict:
    """The longest time each member, and each group as a whole, went without records (between polls
    that returned some, from the first one on)."""
    members = _members(history)
    by_group: dict[str, list[float]] = defaultdict(list)
    for m in members.values():
        by_group[m["group"]] += m["polls"]
    return {"members": {p: _longest_gap(m["polls"]) for p, m in sorted(members.items())},
            "groups": {g: _longest_gap(sorted(ts)) for g, ts in sorted(by_group.items())}}


# -- timing ------------------------------------------------------------------------------------

def _pct(xs: list[float], p: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    k = min(len(s) - 1, max(0, int(round(p / 100 * (len(s) - 1)))))
    return s[k]


def summary(xs: list[float]) -> dict:
    return {"count": len(xs), "median": median(xs) if xs else None, "p99": _pct(xs, 99),
            "max": max(xs) if xs else None}


def fault_windows(history: list[dict]) -> list[dict]:
    """[{id, kind, desc, nodes, start, stop}] from nemesis start/stop events."""
    wins: dict = {}
    for op in history:
        if op.get("f") != "nemesis":
            continue
        if op["type"] == "start":
            wins[op["id"]] = {"id": op["id"], "kind": op["kind"], "desc": op.get("desc", op["kind"]),
                              "nodes": list(op.get("nodes", [])), "start": op["t"], "stop": None}
        elif op["type"] == "stop" and op["id"] in wins:
            wins[op["id"]]["stop"] = op["t"]
    return sorted(wins.values(), key=lambda w: w["start"])


def election_times(history: list[dict]) -> dict:
    """Leader elections caused by faults, from the probes: for each fault that took away the active
    controller or a partition leader (killed, paused, cut off), the time from the fault until the
    probes first show another live leader. Faults that healed before any new leader showed up are
    counted as 'healed_first', not as elections."""
    probes = [op for op in history if op.get("f") == "probe"]
    ctrl: list[float] = []
    parts: list[float] = []
    events: list[dict] = []
    healed_first = {"controller": 0, "partition": 0}
    for w in fault_windows(history):
        if w["kind"] not in ("kill", "pause", "partition") or not w["nodes"]:
            continue
        affected = set(w["nodes"])
        before = [p for p in probes if p["t"] <= w["start"]]
        if not before:
            continue
        last = before[-1]
        after = [p for p in probes if p["t"] > w["start"]]
        end = w["stop"] if w["stop"] is not None else float("inf")

        def first_new(get, old, after=after, affected=affected):
            for p in after:
                v = get(p)
                if v is not None and v >= 0 and v not in affected and v != old:
                    return p["t"]
            return None
        old_c = last.get("controller")
        if old_c is not None and old_c in affected:
            t = first_new(lambda p: p.get("controller"), old_c)
            if t is not None and t <= end + 0.001:
                ctrl.append(t - w["start"])
                events.append({"fault": w["id"], "what": "controller", "seconds": round(t - w["start"], 3)})
            else:
                healed_first["controller"] += 1
        for tp, old in sorted((last.get("leaders") or {}).items()):
            if old in affected:
                t = first_new(lambda p, tp=tp: (p.get("leaders") or {}).get(tp), old)
                if t is not None and t <= end + 0.001:
                    parts.append(t - w["start"])
                    events.append({"fault": w["id"], "what": tp, "seconds": round(t - w["start"], 3)})
                else:
                    healed_first["partition"] += 1
    return {"controller": summary(ctrl), "partition": summary(parts), "events": events,
            "healed_first": healed_first}


def produce_outages(history: list[dict]) -> list[dict]:
    """Per fault: the longest time any partition went without an acknowledged write (gap between
    consecutive acks, measured in ack time) among gaps that overlap the fault window."""
    acks: dict[str, list[float]] = defaultdict(list)
    for op in history:
        if op.get("f") == "send" and op.get("type") == "ok":
            acks[op["tp"]].append(op["t"])
    for v in acks.values():
        v.sort()
    out = []
    for w in fault_windows(history):
        end = w["stop"] if w["stop"] is not None else float("inf")
        worst = 0.0
        for ts in acks.values():
            prev = None
            for t in ts:
                if prev is not None and t >= w["start"] and prev <= end:
                    worst = max(worst, t - max(prev, w["start"]))
                prev = t
        out.append({"fault": w["id"], "desc": w["desc"], "max_ack_gap_s": round(worst, 3)})
    return out


def latencies(history: list[dict]) -> list[tuple[float, float]]:
    """(ack time, latency seconds) for every acknowledged send."""
    inv: dict[tuple[str, int], float] = {}
    out = []
    for op in history:
        if op.get("f") != "send":
            continue
        if op["type"] == "invoke":
            inv[(op["process"], op["value"])] = op["t"]
        elif op["type"] == "ok" and (op["process"], op["value"]) in inv:
            out.append((op["t"], op["t"] - inv[(op["process"], op["value"])]))
    return out


def check(history: list[dict], group_liveness_s: float | None = None) -> dict:
    """The verdict: every anomaly class with examples, and the timing figures. ``group_liveness_s``: how
    long after the heal a group member may go without records (default: from the members' session
    timeout, see ``default_group_liveness_s``)."""
    lost, n_lost, n_unseen = check_lost(history)
    dups, resent = check_duplicates(history)
    bound = default_group_liveness_s(history) if group_liveness_s is None else group_liveness_s
    anomalies = {
        "lost": lost,
        "duplicate": dups,
        "duplicate-sequence": check_sequences(history),
        "inconsistent-offsets": check_inconsistent_offsets(history),
        "unexpected-read": check_unexpected_reads(history),
        "reorder": check_reorder(history),
        "nonmonotonic-poll": check_nonmonotonic_polls(history),
        "skipped-poll": check_skipped_polls(history),
        "commit-backwards": check_commits(history),
        "topic-state": check_topics(history),
        "no-recovery": check_recovery(history),
        "group-liveness": check_group_liveness(history, bound),
        "stuck-client": check_stuck(history),
    }
    sends = [op for op in history if op.get("f") == "send"]
    counts = {
        "send-invoke": sum(1 for op in sends if op["type"] == "invoke"),
        "send-ok": sum(1 for op in sends if op["type"] == "ok"),
        "send-fail": sum(1 for op in sends if op["type"] in ("fail", "info")),
        "polled": sum(len(op.get("msgs", ())) for op in history if op.get("f") == "poll"),
        "final-read": sum(len(op.get("msgs", ())) for op in history if op.get("f") == "final-read"),
        "lost": n_lost,
        "unseen": n_unseen,
        "faults": len(fault_windows(history)),
        "commits": sum(1 for op in history if op.get("f") == "commit" and op.get("type") == "ok"),
        "topic-ops": sum(1 for op in history if op.get("f") == "topic"),
        "resent-after-epoch-bump": len(resent),
    }
    txn_anomalies, txn_counts = txn_checker.check(history)  # the transactional workload, when it ran
    anomalies.update(txn_anomalies)
    counts.update(txn_counts)
    found = sorted(k for k, v in anomalies.items() if v)
    return {"valid": not found, "anomaly-types": found, "anomalies": anomalies, "counts": counts,
            "resent-after-epoch-bump": resent[:MAX_EXAMPLES],
            "elections": election_times(history), "outages": produce_outages(history),
            "group-stalls": group_stalls(history), "group-liveness-bound-s": bound}
