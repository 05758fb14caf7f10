"""The transactional workload's checker (chaos/txn_checker.py) on hand-written histories: a clean
one is valid, and each anomaly (aborted read, uncommitted read, lost, duplicate, partial
transaction, last stable offset stall) is found in a history that has it, and only that one."""

from __future__ import annotations

from chaos.checker import check

A, B = "chaos-txn/0", "chaos-txn/1"
PLAIN_ENDING = [{"f": "final-produce", "type": "ok", "t": 101.0}]  # the plain workload's part of a run


def txn(name, values, outcome, t0=1.0, proc="tp0.1"):
    """values: [(tp, value)]; outcome: commit, abort, none (never ended), unknown, failed (definite)."""
    h = [{"f": "txn", "type": "begin", "t": t0, "process": proc, "txn": name}]
    h += [{"f": "txn-send", "t": t0 + 0.1, "process": proc, "txn": name, "tp": tp, "value": v} for tp, v in values]
    if outcome == "abort":
        h += [{"f": "txn", "type": "abort-invoke", "t": t0 + 1, "process": proc, "txn": name},
              {"f": "txn", "type": "abort-ok", "t": t0 + 1.5, "process": proc, "txn": name}]
    elif outcome in ("commit", "unknown", "failed"):
        h.append({"f": "txn", "type": "commit-invoke", "t": t0 + 1, "process": proc, "txn": name})
        if outcome == "commit":
            h.append({"f": "txn", "type": "commit-ok", "t": t0 + 1.5, "process": proc, "txn": name})
        else:
            h.append({"f": "txn", "type": "commit-fail", "t": t0 + 1.5, "process": proc, "txn": name,
                      "error": "x", **({"definite": True} if outcome == "failed" else {})})
    return h


def final(tp, msgs, settled=1.0, complete=True):
    return {"f": "txn-final-read", "t": 100.0, "tp": tp, "msgs": [list(m) for m in msgs], "complete": complete,
            "lso": len(msgs), "high": len(msgs), "settled_s": settled}


def poll(t, msgs):
    return {"f": "txn-poll", "t": t, "process": "tc0", "session": 1, "msgs": [list(m) for m in msgs]}


def clean():
    h = txn("t1", [(A, 1), (B, 2)], "commit", t0=1)       # A@0, B@0; markers A@1, B@1
    h += txn("t2", [(A, 3)], "abort", t0=3)                # A@2 aborted, marker A@3
    h += txn("t3", [(A, 4), (B, 5)], "unknown", t0=5)      # committed after all: A@4, B@2
    h += txn("t4", [(B, 6)], "failed", t0=7)               # aborted after an abortable error
    h += txn("t5", [(B, 7)], "none", t0=9)                 # its producer died: aborted by timeout
    h.append(poll(3.0, [(A, 0, 1)]))
    h.append(poll(8.0, [(A, 0, 1), (B, 0, 2), (A, 4, 4)]))  # a session re-reads offset 0: not a duplicate
    h.append(final(A, [(0, 1), (4, 4)]))
    h.append(final(B, [(0, 2), (2, 5)]))
    return h + PLAIN_ENDING


def kinds(h):
    return check(h)["anomaly-types"]


def test_a_clean_history_is_valid():
    v = check(clean())
    assert v["valid"], v["anomalies"]
    assert {k: v["counts"][k] for k in ("txn-committed", "txn-aborted", "txn-unknown", "txn-records")} == {
        "txn-committed": 1, "txn-aborted": 3, "txn-unknown": 1, "txn-records": 7}


def test_no_transactional_workload_no_transactional_verdict():
    v = check(PLAIN_ENDING)
    assert v["valid"] and "txn-committed" not in v["counts"]


def test_aborted_read_g1a():
    h = clean()
    h.append(poll(9.0, [(A, 2, 3)]))  # t2 was aborted
    assert kinds(h) == ["txn-aborted-read"]
    assert check(h)["anomalies"]["txn-aborted-read"][0]["txn"] == "t2"


def test_a_read_of_a_transaction_whose_producer_died_is_an_aborted_read():
    h = clean()
    h[-2] = final(B, [(0, 2), (2, 5), (3, 7)])
    assert kinds(h) == ["txn-aborted-read"]


def test_uncommitted_read_g1b():
    h = clean()
    h.append(poll(5.5, [(A, 4, 4)]))  # t3 was read before its producer asked to commit (t=6)
    assert kinds(h) == ["txn-uncommitted-read"]


def test_lost_committed_write():
    h = clean()
    h[-3] = final(A, [(4, 4)])  # t1's record in A is gone (its B record is there: partial as well)
    assert kinds(h) == ["txn-lost", "txn-partial"]
    assert check(h)["anomalies"]["txn-lost"] == [{"tp": A, "value": 1, "txn": "t1"}]


def test_duplicate():
    h = clean()
    h[-3] = final(A, [(0, 1), (4, 4), (5, 4)])
    assert kinds(h) == ["txn-duplicate"]


def test_a_transaction_of_unknown_outcome_seen_in_part():
    h = clean()
    h[-2] = final(B, [(0, 2)])  # t3 (unknown) is in A but not in B: all or nothing
    v = check(h)
    assert kinds(h) == ["txn-partial"]
    assert v["anomalies"]["txn-partial"] == [{"txn": "t3", "outcome": "unknown", "seen": [4], "missing": [5]}]


def test_lso_that_stops_advancing_after_the_heal():
    h = clean()
    h[-2] = {"f": "txn-final-read", "t": 100.0, "tp": B, "msgs": [], "complete": False, "lso": 2, "high": 4,
             "settled_s": None}
    assert kinds(h) == ["txn-lso-stall"]
    # nothing is judged lost or partial on a partition that could not be read to its end
    assert check(h)["anomalies"]["txn-lso-stall"][0]["lso"] == 2
