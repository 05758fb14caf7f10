"""The checker of the transactional workload (``krafty chaos run --workload txn``): pure functions
over the history, Jepsen-style. Event shapes (``chaos/txn_workload.py`` writes them):

* ``{"f": "txn", "type": "begin", "t", "process", "txn"}`` — a transactional producer instance
  (``process``) starts transaction ``txn`` (a unique name);
* ``{"f": "txn-send", "t", "process", "txn", "tp", "value"}`` — it produced the unique integer
  ``value`` to ``tp`` inside ``txn``;
* ``{"f": "txn", "type": "commit-invoke"|"commit-ok"|"commit-fail"|"abort-invoke"|"abort-ok"|
  "abort-fail", "t", "process", "txn", "error", "definite"}`` — ``commit-fail`` with
  ``"definite": true`` means the transaction was aborted instead (an abortable error, then an
  abort); without it the outcome is unknown;
* ``{"f": "txn-poll", "t", "process", "session", "msgs": [[tp, offset, value], ...]}`` — what a
  read_committed consumer got;
* ``{"f": "txn-final-read", "t", "tp", "msgs": [[offset, value], ...], "complete", "lso", "high",
  "settled_s"}`` after the heal: the partition read with read_committed from its start to its
  last stable offset, once that reached the high watermark (``settled_s`` seconds after the
  heal; ``None`` when it never did).

A transaction is *committed* when its commit was acknowledged, *aborted* when it never asked to
commit or its commit definitely failed, *unknown* otherwise (its commit may or may not have
happened: both outcomes are valid, but all or nothing).

Anomalies:
* ``txn-aborted-read`` (G1a): a read returned a record of an aborted transaction;
* ``txn-uncommitted-read`` (G1b): a read returned a record of a transaction before its producer
  even asked to commit it (an intermediate, uncommitted state);
* ``txn-lost``: a committed record missing from the complete final read of its partition;
* ``txn-duplicate``: a record read at two offsets, or twice in one final read;
* ``txn-partial``: a transaction only part of whose records are in the complete final reads
  (committed, or unknown: all or nothing);
* ``txn-lso-stall``: after the heal the last stable offset of a partition never caught up with
  its high watermark (a transaction left hanging), or the final read could not finish.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

MAX_EXAMPLES = 20


def _ex(lst: list, item) -> None:
    if len(lst) < MAX_EXAMPLES:
        lst.append(item)


@dataclass
class Txn:
    name: str
    process: str = "?"
    values: dict[int, str] = field(default_factory=dict)  # value -> tp
    commit_invoke_t: float | None = None
    committed: bool = False
    definitely_aborted: bool = False

    @property
    def outcome(self) -> str:
        if self.committed:
            return "committed"
        if self.commit_invoke_t is None or self.definitely_aborted:
            return "aborted"
        return "unknown"


def transactions(history: list[dict]) -> tuple[dict[str, Txn], dict[int, Txn]]:
    """Every transaction by name, and the transaction of every value."""
    txns: dict[str, Txn] = {}
    of_value: dict[int, Txn] = {}
    for op in history:
        f = op.get("f")
        if f not in ("txn", "txn-send"):
            continue
        t = txns.setdefault(op["txn"], Txn(op["txn"], op.get("process", "?")))
        if f == "txn-send":
            t.values[op["value"]] = op["tp"]
            of_value[op["value"]] = t
        elif op["type"] == "commit-invoke":
            if t.commit_invoke_t is None:
                t.commit_invoke_t = op["t"]
        elif op["type"] == "commit-ok":
            t.committed = True
        elif op["type"] == "commit-fail" and op.get("definite"):
            t.definitely_aborted = True
    return txns, of_value


def _reads(history: list[dict]):
    """(t, tp, offset, value, source) of every record read."""
    for op in history:
        if op.get("f") == "txn-poll":
            for tp, off, val in op.get("msgs", ()):
                yield op["t"], tp, off, val, f"poll {op.get('process')}"
        elif op.get("f") == "txn-final-read":
            for off, val in op.get("msgs", ()):
                yield op["t"], op["tp"], off, val, "final-read"


def _final(history: list[dict]) -> dict[str, dict]:
    return {op["tp"]: op for op in history if op.get("f") == "txn-final-read"}


def check_aborted_reads(history: list[dict]) -> list[dict]:
    _, of_value = transactions(history)
    out: list[dict] = []
    for t, tp, off, val, src in _reads(history):
        txn = of_value.get(val)
        if txn is not None and txn.outcome == "aborted":
            _ex(out, {"tp": tp, "offset": off, "value": val, "txn": txn.name, "t": t, "read-by": src})
    return out


def check_uncommitted_reads(history: list[dict]) -> list[dict]:
    _, of_value = transactions(history)
    out: list[dict] = []
    for t, tp, off, val, src in _reads(history):
        txn = of_value.get(val)
        if txn is not None and txn.outcome != "aborted" and txn.commit_invoke_t is not None \
                and t < txn.commit_invoke_t:
            _ex(out, {"tp": tp, "offset": off, "value": val, "txn": txn.name, "t": t,
                      "commit-invoked-t": txn.commit_invoke_t, "read-by": src})
    return out


def check_duplicates(history: list[dict]) -> list[dict]:
    where: dict[int, set[tuple[str, int]]] = defaultdict(set)
    out: list[dict] = []
    for op in history:
        if op.get("f") == "txn-final-read":
            seen: set[int] = set()
            for _off, val in op.get("msgs", ()):
                if val in seen:
                    _ex(out, {"value": val, "tp": op["tp"], "twice-in-final-read": True})
                seen.add(val)
    for _t, tp, off, val, _src in _reads(history):
        where[val].add((tp, off))
    for val, places in sorted(where.items()):
        if len(places) > 1:
            _ex(out, {"value": val, "at": sorted([list(p) for p in places])})
    return out


def _final_values(history: list[dict]) -> tuple[dict[str, set[int]], set[str]]:
    """Values of each partition's final read, and the partitions whose final read is complete."""
    vals: dict[str, set[int]] = {}
    complete: set[str] = set()
    for tp, op in _final(history).items():
        vals[tp] = {v for _o, v in op.get("msgs", ())}
        if op.get("complete") and op.get("settled_s") is not None:
            complete.add(tp)
    return vals, complete


def check_lost(history: list[dict]) -> list[dict]:
    txns, _ = transactions(history)
    vals, complete = _final_values(history)
    out: list[dict] = []
    for txn in txns.values():
        if not txn.committed:
            continue
        for v, tp in sorted(txn.values.items()):
            if tp in complete and v not in vals[tp]:
                _ex(out, {"tp": tp, "value": v, "txn": txn.name})
    return out


def check_partial(history: list[dict]) -> list[dict]:
    txns, _ = transactions(history)
    vals, complete = _final_values(history)
    out: list[dict] = []
    for txn in txns.values():
        judged = {v: tp for v, tp in txn.values.items() if tp in complete}
        if not judged:
            continue
        seen = sorted(v for v, tp in judged.items() if v in vals[tp])
        if seen and len(seen) < len(judged):
            _ex(out, {"txn": txn.name, "outcome": txn.outcome, "seen": seen,
                      "missing": sorted(v for v in judged if v not in seen)})
    return out


def check_lso(history: list[dict]) -> list[dict]:
    out: list[dict] = []
    parts = {op["tp"] for op in history if op.get("f") == "txn-send"}
    final = _final(history)
    for tp in sorted(parts | set(final)):
        op = final.get(tp)
        if op is None:
            _ex(out, {"tp": tp, "error": "no final read"})
        elif op.get("settled_s") is None:
            _ex(out, {"tp": tp, "lso": op.get("lso"), "high": op.get("high"),
                      "error": op.get("error") or "the last stable offset never reached the high watermark"})
        elif not op.get("complete"):
            _ex(out, {"tp": tp, "lso": op.get("lso"), "high": op.get("high"), "error": "final read incomplete"})
    return out


def check(history: list[dict]) -> tuple[dict[str, list], dict[str, int]]:
    """The anomalies of the transactional workload (empty lists when it did not run) and its counts."""
    if not any(op.get("f") in ("txn", "txn-send") for op in history):
        return {}, {}
    anomalies = {
        "txn-aborted-read": check_aborted_reads(history),
        "txn-uncommitted-read": check_uncommitted_reads(history),
        "txn-lost": check_lost(history),
        "txn-duplicate": check_duplicates(history),
        "txn-partial": check_partial(history),
        "txn-lso-stall": check_lso(history),
    }
    txns, _ = transactions(history)
    outcomes = [t.outcome for t in txns.values()]
    counts = {
        "txn-committed": outcomes.count("committed"), "txn-aborted": outcomes.count("aborted"),
        "txn-unknown": outcomes.count("unknown"),
        "txn-records": sum(len(t.values) for t in txns.values()),
        "txn-polled": sum(len(op.get("msgs", ())) for op in history if op.get("f") == "txn-poll"),
        "txn-final-read": sum(len(op.get("msgs", ())) for op in history if op.get("f") == "txn-final-read"),
    }
    return anomalies, counts


__all__ = ["check", "transactions"]
