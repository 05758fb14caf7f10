"""The history checker: pure functions over a recorded chaos history (a list of dicts).

In the spirit of Jepsen's Kafka checker. The history is what the workload clients and the
nemesis wrote down (see ``chaos/history.py`` for the event shapes):

* ``{"f": "send", "type": "invoke"|"ok"|"fail"|"info", "t", "process", "tp", "value", "offset"}``
  — a producer instance (``process``) sends the unique integer ``value`` to ``tp``
  ("topic/partition"); ``ok`` carries the offset the broker acknowledged. ``fail``/``info``
  sends are indeterminate: they may or may not be in the log.
* ``{"f": "assign", "process", "session", "tp", "offset"}`` — a consumer session starts reading
  ``tp`` at ``offset``.
* ``{"f": "poll", "process", "session", "msgs": [[tp, offset, value], ...]}``.
* ``{"f": "commit", "type": "ok", "process", "group", "tp", "offset"}`` and
  ``{"f": "committed", "process", "group", "tp", "offset", "invoke_t"}`` (an OffsetFetch answer).
* ``{"f": "final-read", "tp", "msgs": [[offset, value], ...], "complete": bool}`` after the heal.
* ``{"f": "final-produce", "type": "ok"|"fail"}`` — a fresh write after the heal.
* ``{"f": "topic", "type": "ok"|"fail", "op": "create"|"delete", "topic"}``;
  ``{"f": "topics-final", "topics": [...], "complete": bool}``.
* ``{"f": "nemesis", "type": "start"|"stop", "id", "kind", "nodes": [node ids]}``.
* ``{"f": "probe", "t", "leaders": {tp: leader id}, "controller": id}``.

No I/O, no clock: the same history always gives the same verdict.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import median

MAX_EXAMPLES = 20


def _ex(lst: list, item) -> None:
    if len(lst) < MAX_EXAMPLES:
        lst.append(item)


def observations(history: list[dict]) -> list[tuple[str, int, int, str]]:
    """Every (tp, offset, value, source) the clients saw: acks, polls and final reads."""
    out = []
    for op in history:
        f = op.get("f")
        if f == "send" and op.get("type") == "ok" and op.get("offset") is not None and op["offset"] >= 0:
            out.append((op["tp"], op["offset"], op["value"], "ack"))
        elif f == "poll":
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


def check_duplicates(history: list[dict]) -> list[dict]:
    """A value (written once) found at more than one offset, or in more than one partition."""
    where: dict[int, set[tuple[str, int]]] = defaultdict(set)
    for tp, off, val, src in observations(history):
        if src != "ack":
            where[val].add((tp, off))
    out: list[dict] = []
    for val, places in sorted(where.items()):
        if len(places) > 1:
            _ex(out, {"value": val, "at": sorted([list(p) for p in places])})
    return out


def _read_state(history: list[dict]):
    seen_values: dict[str, set[int]] = defaultdict(set)
    seen_offsets: dict[str, set[int]] = defaultdict(set)
    complete: dict[str, bool] = {}
    for tp, off, val, src in observations(history):
        if src != "ack":
            seen_values[tp].add(val)
            seen_offsets[tp].add(off)
    for op in history:
        if op.get("f") == "final-read":
            complete[op["tp"]] = complete.get(op["tp"], False) or bool(op.get("complete"))
    return seen_values, seen_offsets, complete


def check_lost(history: list[dict]) -> tuple[list[dict], int]:
    """Acknowledged writes missing from the reads. A write counts as lost when the partition's final
    read was complete, or when some read went past the write's acknowledged offset. Returns
    (examples, count)."""
    seen_values, seen_offsets, complete = _read_state(history)
    max_off = {tp: max(offs) for tp, offs in seen_offsets.items() if offs}
    out: list[dict] = []
    n = 0
    for op in history:
        if op.get("f") != "send" or op.get("type") != "ok":
            continue
        tp, val, off = op["tp"], op["value"], op.get("offset")
        if val in seen_values[tp]:
            continue
        if complete.get(tp) or (off is not None and off >= 0 and max_off.get(tp, -1) > off):
            n += 1
            _ex(out, {"tp": tp, "value": val, "acked_offset": off, "t": op.get("t")})
    return out, n


def check_unseen(history: list[dict]) -> int:
    """Acknowledged writes that no read reached (the final read did not get that far)."""
    seen_values, _, _ = _read_state(history)
    return sum(1 for op in history if op.get("f") == "send" and op.get("type") == "ok"
               and op["value"] not in seen_values[op["tp"]])


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
    _, seen_offsets, _ = _read_state(history)
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
    order, and an OffsetFetch never answers less than a commit acknowledged before it was asked."""
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
    for op in history:
        if op.get("f") == "committed" and op.get("offset") is not None:
            before = [o for t, g, tp, o in acked
                      if g == op["group"] and tp == op["tp"] and t <= op.get("invoke_t", op.get("t", 0))]
            if before and op["offset"] >= 0 and op["offset"] < max(before):
                _ex(out, {"group": op["group"], "tp": op["tp"], "fetched": op["offset"],
                          "acked_before": max(before), "t": op.get("t")})
            elif before and op["offset"] < 0:
                _ex(out, {"group": op["group"], "tp": op["tp"], "fetched": op["offset"],
                          "acked_before": max(before), "t": op.get("t")})
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
    """Once the faults heal: every partition is fully readable and a fresh produce succeeds."""
    out: list[dict] = []
    finals = [op for op in history if op.get("f") == "final-read"]
    sent_tps = {op["tp"] for op in history if op.get("f") == "send"}
    done = {op["tp"] for op in finals if op.get("complete")}
    for tp in sorted(sent_tps - done):
        _ex(out, {"what": "final read incomplete", "tp": tp})
    fp = [op for op in history if op.get("f") == "final-produce"]
    if not fp or fp[-1].get("type") != "ok":
        _ex(out, {"what": "fresh produce after heal failed", "error": fp[-1].get("error") if fp else "not run"})
    return out


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


def check(history: list[dict]) -> dict:
    """The verdict: every anomaly class with examples, and the timing figures."""
    lost, n_lost = check_lost(history)
    anomalies = {
        "lost": lost,
        "duplicate": check_duplicates(history),
        "inconsistent-offsets": check_inconsistent_offsets(history),
        "reorder": check_reorder(history),
        "nonmonotonic-poll": check_nonmonotonic_polls(history),
        "skipped-poll": check_skipped_polls(history),
        "commit-backwards": check_commits(history),
        "topic-state": check_topics(history),
        "no-recovery": check_recovery(history),
    }
    sends = [op for op in history if op.get("f") == "send"]
    counts = {
        "send-invoke": sum(1 for op in sends if op["type"] == "invoke"),
        "send-ok": sum(1 for op in sends if op["type"] == "ok"),
        "send-fail": sum(1 for op in sends if op["type"] in ("fail", "info")),
        "polled": sum(len(op.get("msgs", ())) for op in history if op.get("f") == "poll"),
        "final-read": sum(len(op.get("msgs", ())) for op in history if op.get("f") == "final-read"),
        "lost": n_lost,
        "unseen": check_unseen(history),
        "faults": len(fault_windows(history)),
        "commits": sum(1 for op in history if op.get("f") == "commit" and op.get("type") == "ok"),
        "topic-ops": sum(1 for op in history if op.get("f") == "topic"),
    }
    found = sorted(k for k, v in anomalies.items() if v)
    return {"valid": not found, "anomaly-types": found, "anomalies": anomalies, "counts": counts,
            "elections": election_times(history), "outages": produce_outages(history)}
