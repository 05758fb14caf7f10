"""The chaos history checker on hand-written histories: a clean one passes, and each anomaly class
is found in a history that contains it (and only that one)."""

from __future__ import annotations

from chaos.checker import check, check_group_liveness, election_times, produce_outages

TP = "t/0"


def send(v, off, proc="p1", tp=TP, t=None, ok=True):
    t = float(v) if t is None else t
    ops = [{"f": "send", "type": "invoke", "t": t, "process": proc, "tp": tp, "value": v}]
    if ok:
        ops.append({"f": "send", "type": "ok", "t": t + 0.01, "process": proc, "tp": tp, "value": v, "offset": off})
    else:
        ops.append({"f": "send", "type": "fail", "t": t + 0.01, "process": proc, "tp": tp, "value": v,
                    "error": "timed out"})
    return ops


def final(msgs, tp=TP, complete=True):
    return {"f": "final-read", "t": 100.0, "tp": tp, "msgs": [list(m) for m in msgs], "complete": complete}


def ending():
    return [{"f": "final-produce", "type": "ok", "t": 101.0}]


def clean():
    h = []
    for v in range(5):
        h += send(v, v)
    h.append({"f": "assign", "t": 0.0, "process": "c1", "session": 1, "tp": TP, "offset": 0})
    h.append({"f": "poll", "t": 2.0, "process": "c1", "session": 1, "msgs": [[TP, 0, 0], [TP, 1, 1]]})
    h.append({"f": "poll", "t": 3.0, "process": "c1", "session": 1, "msgs": [[TP, 2, 2]]})
    h.append(final([(i, i) for i in range(5)]))
    return h + ending()


def kinds(h):
    return check(h)["anomaly-types"]


def test_a_clean_history_is_valid():
    v = check(clean())
    assert v["valid"], v["anomalies"]
    assert v["counts"]["send-ok"] == 5 and v["counts"]["polled"] == 3 and v["counts"]["lost"] == 0


def test_lost_acknowledged_write():
    h = clean()
    h[-2] = final([(0, 0), (1, 1), (2, 2), (4, 4)])  # value 3, acked at offset 3, is gone
    v = check(h)
    assert kinds(h) == ["lost"]
    assert v["anomalies"]["lost"][0]["value"] == 3 and v["counts"]["lost"] == 1


def test_a_failed_send_that_is_missing_is_not_lost():
    h = []
    for v in range(3):
        h += send(v, v)
    h += send(3, None, ok=False)
    h.append(final([(0, 0), (1, 1), (2, 2)]))
    assert check(h + ending())["valid"]


def test_lost_without_a_complete_final_read_needs_a_later_offset_read():
    h = []
    for v in range(3):
        h += send(v, v)
    h.append({"f": "poll", "t": 5.0, "process": "c1", "session": 1, "msgs": [[TP, 0, 0], [TP, 2, 2]]})
    v = check(h + ending())
    assert v["anomalies"]["lost"] == [{"tp": TP, "value": 1, "acked_offset": 1, "t": 1.01, "acknowledged": True,
                                       "process": "p1"}]
    assert "no-recovery" in v["anomaly-types"]  # the final read did not happen


def test_duplicate_value():
    h = clean()
    h[-2] = final([(0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (5, 4)])
    assert kinds(h) == ["duplicate"]


def batches(*bs, tp=TP):
    """final-batches: (base offset, last offset, producer id, producer epoch, base sequence)."""
    return {"f": "final-batches", "t": 100.5, "tp": tp, "batches": [list(b) for b in bs], "complete": True}


def test_a_value_written_again_under_a_new_producer_epoch_is_a_client_resend_not_a_duplicate():
    # librdkafka #4953: the batch of values 3-4 ended possibly persisted (it is at 3-4, epoch 0), the
    # client bumped its epoch and sent it again as sequences 0-1 of epoch 1 (offsets 5-6)
    h = clean()
    h[-2] = final([(0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (5, 3), (6, 4)])
    h.insert(-1, batches((0, 2, 7, 0, 0), (3, 4, 7, 0, 3), (5, 6, 7, 1, 0)))
    v = check(h)
    assert v["valid"], v["anomalies"]
    assert v["counts"]["resent-after-epoch-bump"] == 2
    assert v["resent-after-epoch-bump"][0] == {"value": 3, "at": [[TP, 3], [TP, 5]], "producer": 7, "epochs": [0, 1]}


def test_a_value_written_twice_in_one_producer_epoch_is_a_duplicate():
    h = clean()
    h[-2] = final([(0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (5, 3), (6, 4)])
    # the retry of sequences 3-4 was appended again instead of being answered as a duplicate
    h.insert(-1, batches((0, 2, 7, 0, 0), (3, 4, 7, 0, 3), (5, 6, 7, 0, 3)))
    v = check(h)
    assert v["anomaly-types"] == ["duplicate", "duplicate-sequence"]
    assert v["anomalies"]["duplicate"][0]["sessions"] == [(7, 0), (7, 0)]
    assert v["anomalies"]["duplicate-sequence"] == [{"tp": TP, "producer": 7, "epoch": 0, "sequences": [3, 4],
                                                     "offsets": [3, 5]}]
    assert v["counts"]["resent-after-epoch-bump"] == 0


def test_a_duplicate_the_final_batches_cannot_place_stays_a_duplicate():
    h = clean()
    h[-2] = final([(0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (5, 4)])
    h.insert(-1, batches((0, 4, 7, 0, 0)))  # offset 5 is in no batch the read saw
    assert kinds(h) == ["duplicate"]


def test_two_producers_copies_are_a_duplicate_whatever_their_epochs():
    h = clean()
    h[-2] = final([(0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (5, 4)])
    h.insert(-1, batches((0, 4, 7, 0, 0), (5, 5, 8, 1, 0)))
    assert kinds(h) == ["duplicate"]


def test_inconsistent_offsets():
    h = clean()
    # a poll saw value 9 at offset 1, the final read sees value 1 there (and 9 nowhere else)
    h.insert(-2, {"f": "poll", "t": 4.0, "process": "c2", "session": 1, "msgs": [[TP, 1, 9]]})
    v = check(h)
    assert "inconsistent-offsets" in v["anomaly-types"]
    assert v["anomalies"]["inconsistent-offsets"][0]["offset"] == 1


def test_ack_offset_disagreeing_with_the_log_is_inconsistent():
    h = clean()
    h[-2] = final([(0, 0), (1, 1), (2, 2), (3, 4), (4, 3)])
    v = check(h)
    assert "inconsistent-offsets" in v["anomaly-types"]
    assert "reorder" in v["anomaly-types"]  # and the log order contradicts the send order


def test_reorder_within_one_producer():
    h = []
    for v in (0, 1, 2):
        h += [
            {"f": "send", "type": "invoke", "t": float(v), "process": "p1", "tp": TP, "value": v},
            {"f": "send", "type": "info", "t": float(v) + 0.5, "process": "p1", "tp": TP, "value": v}]
    h.append(final([(0, 0), (1, 2), (2, 1)]))
    v = check(h + ending())
    assert v["anomaly-types"] == ["reorder"]
    assert v["anomalies"]["reorder"][0]["sent_later"] == 2


def test_two_producers_may_interleave():
    h = send(0, 1, proc="p1") + send(1, 0, proc="p2")
    h.append(final([(0, 1), (1, 0)]))
    assert check(h + ending())["valid"]


def test_nonmonotonic_poll():
    h = clean()
    h.insert(-2, {"f": "poll", "t": 3.5, "process": "c1", "session": 1, "msgs": [[TP, 1, 1]]})
    assert kinds(h) == ["nonmonotonic-poll"]


def test_a_new_session_may_start_over():
    h = clean()
    h.insert(-2, {"f": "assign", "t": 3.2, "process": "c1", "session": 2, "tp": TP, "offset": 0})
    h.insert(-2, {"f": "poll", "t": 3.5, "process": "c1", "session": 2, "msgs": [[TP, 0, 0], [TP, 1, 1]]})
    assert check(h)["valid"]


def test_skipped_offset_in_a_session():
    h = clean()
    h.insert(-2, {"f": "poll", "t": 4.5, "process": "c1", "session": 1, "msgs": [[TP, 4, 4]]})
    v = check(h)
    assert v["anomaly-types"] == ["skipped-poll"]
    assert v["anomalies"]["skipped-poll"][0]["skipped"] == [3]


def test_skip_from_the_session_start():
    h = clean()
    h.insert(-2, {"f": "assign", "t": 3.2, "process": "c3", "session": 7, "tp": TP, "offset": 0})
    h.insert(-2, {"f": "poll", "t": 3.5, "process": "c3", "session": 7, "msgs": [[TP, 2, 2]]})
    assert kinds(h) == ["skipped-poll"]


def test_a_gap_that_is_not_in_the_log_is_not_a_skip():
    h = []
    for v, off in ((0, 0), (1, 5)):
        h += send(v, off)
    h.append({"f": "poll", "t": 3.0, "process": "c1", "session": 1, "msgs": [[TP, 0, 0], [TP, 5, 1]]})
    h.append(final([(0, 0), (5, 1)]))
    assert check(h + ending())["valid"]


def test_commit_going_backwards():
    h = clean()
    h.insert(-2, {"f": "commit", "type": "ok", "t": 5.0, "process": "c1", "group": "g", "tp": TP, "offset": 3})
    h.insert(-2, {"f": "commit", "type": "ok", "t": 6.0, "process": "c2", "group": "g", "tp": TP, "offset": 2})
    assert kinds(h) == ["commit-backwards"]


def test_offset_fetch_behind_an_acknowledged_commit():
    h = clean()
    h.insert(-2, {"f": "commit", "type": "ok", "t": 5.0, "process": "c1", "group": "g", "tp": TP, "offset": 3})
    h.insert(-2, {"f": "committed", "t": 7.0, "invoke_t": 6.5, "process": "c2", "group": "g", "tp": TP,
                  "offset": 1})
    assert kinds(h) == ["commit-backwards"]
    ok = clean()
    ok.insert(-2, {"f": "commit", "type": "ok", "t": 5.0, "process": "c1", "group": "g", "tp": TP, "offset": 3})
    ok.insert(-2, {"f": "committed", "t": 7.0, "invoke_t": 6.5, "process": "c2", "group": "g", "tp": TP,
                   "offset": 4})
    assert check(ok)["valid"]


def test_topic_state_after_heal():
    h = clean()
    h.insert(-2, {"f": "topic", "type": "ok", "op": "create", "topic": "a", "t": 1.0})
    h.insert(-2, {"f": "topic", "type": "ok", "op": "create", "topic": "b", "t": 1.0})
    h.insert(-2, {"f": "topic", "type": "ok", "op": "delete", "topic": "b", "t": 2.0})
    h.insert(-2, {"f": "topic", "type": "fail", "op": "create", "topic": "c", "t": 2.0})
    good = h + [{"f": "topics-final", "topics": ["a", "t"], "complete": True}]
    assert check(good)["valid"]
    bad = h + [{"f": "topics-final", "topics": ["b", "t"], "complete": True}]
    v = check(bad)
    assert v["anomaly-types"] == ["topic-state"] and len(v["anomalies"]["topic-state"]) == 2


def test_no_recovery_when_the_fresh_produce_fails():
    h = clean()[:-1] + [{"f": "final-produce", "type": "fail", "t": 101.0, "error": "timed out"}]
    assert kinds(h) == ["no-recovery"]
    h2 = clean()[:-2] + [final([(i, i) for i in range(5)], complete=False)] + ending()
    assert kinds(h2) == ["no-recovery"]


def test_election_times_from_probes():
    h = [
        {"f": "probe", "t": 0.5, "controller": 1, "leaders": {"t/0": 4, "t/1": 5}},
        {"f": "nemesis", "type": "start", "t": 1.0, "id": 1, "kind": "kill", "nodes": [1, 4]},
        {"f": "probe", "t": 1.5, "controller": 1, "leaders": {"t/0": 4, "t/1": 5}},
        {"f": "probe", "t": 2.0, "controller": 2, "leaders": {"t/0": -1, "t/1": 5}},
        {"f": "probe", "t": 4.5, "controller": 2, "leaders": {"t/0": 6, "t/1": 5}},
        {"f": "nemesis", "type": "stop", "t": 10.0, "id": 1, "kind": "kill", "nodes": [1, 4]},
        # a pause of broker 5 that ends before anyone takes over
        {"f": "nemesis", "type": "start", "t": 11.0, "id": 2, "kind": "pause", "nodes": [5]},
        {"f": "probe", "t": 11.5, "controller": 2, "leaders": {"t/0": 6, "t/1": 5}},
        {"f": "nemesis", "type": "stop", "t": 12.0, "id": 2, "kind": "pause", "nodes": [5]},
        {"f": "probe", "t": 12.5, "controller": 2, "leaders": {"t/0": 6, "t/1": 5}},
    ]
    e = election_times(h)
    assert e["controller"]["count"] == 1 and e["controller"]["median"] == 1.0
    assert e["partition"]["count"] == 1 and e["partition"]["median"] == 3.5
    assert e["healed_first"] == {"controller": 0, "partition": 1}


def test_produce_outage_per_fault():
    h = []
    for i, t in enumerate([0.0, 1.0, 2.0, 7.0, 8.0]):
        h += send(i, i, t=t)
    h.append({"f": "nemesis", "type": "start", "t": 1.5, "id": 1, "kind": "kill", "nodes": [4]})
    h.append({"f": "nemesis", "type": "stop", "t": 6.0, "id": 1, "kind": "kill", "nodes": [4]})
    assert produce_outages(h) == [{"fault": 1, "desc": "kill", "max_ack_gap_s": 5.0}]


def test_chaos_check_cli_exits_non_zero_on_a_lost_write(tmp_path):
    """`krafty chaos check` re-judges a recorded history: exit 0 and VALID for a clean one, exit 1
    naming the lost write when an acknowledged value is missing from the reads."""
    import json
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def judge(history, name):
        path = tmp_path / name / "history.jsonl"
        path.parent.mkdir()
        path.write_text("".join(json.dumps(op) + "\n" for op in history))
        r = subprocess.run([sys.executable, "-m", "krafty", "chaos", "check", str(path)], cwd=root,
                           capture_output=True, text=True, timeout=60)
        with open(path.parent / "verdict.json") as f:
            return r, json.load(f)
    r, v = judge(clean(), "clean")
    assert r.returncode == 0 and "verdict: VALID" in r.stdout and v["valid"], r.stdout + r.stderr
    lossy = clean()
    lossy[-2] = final([(0, 0), (1, 1), (2, 2), (4, 4)])
    r, v = judge(lossy, "lossy")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "ANOMALIES: lost" in r.stdout and "1 lost" in r.stdout and '"value": 3' in r.stdout
    assert v["anomalies"]["lost"][0]["value"] == 3
    assert "ANOMALIES: lost" in (tmp_path / "lossy" / "report.html").read_text()


# -- what the checker used to miss (issue 18, item 14) ------------------------------------------

def test_an_acknowledged_write_polled_once_but_missing_from_the_final_read_is_lost():
    """Every acknowledged write must be in the final read, whatever earlier polls saw."""
    h = clean()
    h[-2] = final([(0, 0), (1, 1), (3, 3), (4, 4)])  # value 2 (acked at 2, polled by c1) is gone
    v = check(h)
    assert v["anomaly-types"] == ["lost"]
    assert v["anomalies"]["lost"][0]["value"] == 2 and v["counts"]["lost"] == 1


def test_a_final_read_that_lacks_the_last_records_is_lost():
    """The log ends (high watermark 3) before two acknowledged writes that a consumer polled."""
    h = clean()
    h.insert(-2, {"f": "poll", "t": 6.0, "process": "c1", "session": 1, "msgs": [[TP, 3, 3], [TP, 4, 4]]})
    h[-2] = dict(final([(0, 0), (1, 1), (2, 2)]), low=0, high=3)
    v = check(h)
    assert v["anomaly-types"] == ["lost"]
    assert sorted(x["value"] for x in v["anomalies"]["lost"]) == [3, 4] and v["counts"]["lost"] == 2


def test_a_final_read_said_complete_that_stopped_before_the_high_watermark_is_incomplete():
    """The checker recomputes 'complete' from the read itself: stopping at offset 2 of 0..4 is not complete,
    and the acknowledged writes it did not reach are not counted as safe."""
    h = clean()
    h[-2] = dict(final([(0, 0), (1, 1), (2, 2)]), low=0, high=5)
    v = check(h)
    assert v["anomaly-types"] == ["no-recovery"]
    assert v["anomalies"]["no-recovery"][0]["what"] == "final read incomplete"
    assert v["counts"]["unseen"] == 2 and v["counts"]["lost"] == 0


def test_a_final_read_with_a_hole_is_caught():
    """Offsets of the chaos topic are dense: a final read that returns offsets 0-2 and 4 of [0, 5) skipped
    one that nobody else saw (the write there, if any, was not acknowledged)."""
    h = send(0, 0) + send(1, 1) + send(2, 2) + send(3, None, ok=False) + send(4, 4)
    h += [dict(final([(0, 0), (1, 1), (2, 2), (4, 4)]), low=0, high=5)] + ending()
    v = check(h)
    assert v["anomaly-types"] == ["no-recovery"]
    assert v["anomalies"]["no-recovery"] == [{"what": "final read skipped offsets", "tp": TP, "offsets": [3]}]
    h[-2] = dict(final([(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)]), low=0, high=5)
    assert check(h)["valid"]


def test_the_fresh_writes_after_the_heal_must_be_in_the_final_read():
    """The final produce's acknowledged records are the last ones of each partition: a final read without
    them did not reach the end."""
    h = clean()[:-1] + [{"f": "final-produce", "type": "ok", "t": 99.0, "sent": [[TP, -1]],
                         "acks": [[TP, 5, -1]]}]
    v = check(h)
    assert v["anomaly-types"] == ["lost"], v["anomalies"]
    assert v["anomalies"]["lost"][0]["value"] == -1
    ok = clean()
    ok[-2] = final([(i, i) for i in range(5)] + [(5, -1)])
    ok[-1] = h[-1]
    assert check(ok)["valid"], check(ok)["anomalies"]


def test_a_read_write_whose_send_was_not_acknowledged_must_survive():
    """A consumer read the value, so the cluster committed it: the final read must have it too, even though
    the producer never got an answer."""
    h = clean()
    h[10:10] = [{"f": "send", "type": "invoke", "t": 4.5, "process": "p1", "tp": TP, "value": 9},
              {"f": "send", "type": "info", "t": 4.6, "process": "p1", "tp": TP, "value": 9}]
    h.insert(-2, {"f": "poll", "t": 6.0, "process": "c2", "session": 1, "msgs": [[TP, 5, 9]]})
    v = check(h)
    assert v["anomaly-types"] == ["lost"]
    assert v["anomalies"]["lost"][0]["value"] == 9 and not v["anomalies"]["lost"][0]["acknowledged"]
    h[-2] = final([(i, i) for i in range(5)] + [(5, 9)])
    assert check(h)["valid"]


def test_reads_of_values_never_sent_or_sent_elsewhere_or_failed_for_sure():
    h = clean()
    h[10:10] = [{"f": "send", "type": "invoke", "t": 4.5, "process": "p1", "tp": TP, "value": 7},
              {"f": "send", "type": "fail", "t": 4.5, "process": "p1", "tp": TP, "value": 7, "definite": True,
               "error": "BufferError()"},
              {"f": "send", "type": "invoke", "t": 4.7, "process": "p2", "tp": "t/1", "value": 8},
              {"f": "send", "type": "info", "t": 4.8, "process": "p2", "tp": "t/1", "value": 8}]
    h[-2] = final([(i, i) for i in range(5)] + [(5, 7), (6, 8), (7, 123)])
    h.insert(-1, final([], tp="t/1"))
    v = check(h)
    assert v["anomaly-types"] == ["unexpected-read"]
    whys = {x["value"]: x["why"] for x in v["anomalies"]["unexpected-read"]}
    assert set(whys) == {7, 8, 123}
    assert "failed" in whys[7] and "t/1" in whys[8] and "never sent" in whys[123]


def test_a_poll_before_the_send_is_unexpected():
    h = clean()
    h.insert(-2, {"f": "poll", "t": 2.5, "process": "c2", "session": 1, "msgs": [[TP, 3, 3]]})
    v = check(h)
    assert v["anomaly-types"] == ["unexpected-read"] and "before" in v["anomalies"]["unexpected-read"][0]["why"]


def test_an_offset_polled_twice_in_one_session_is_nonmonotonic():
    h = clean()
    h.insert(-2, {"f": "poll", "t": 3.5, "process": "c1", "session": 1, "msgs": [[TP, 2, 2]]})
    assert kinds(h) == ["nonmonotonic-poll"]


def group_history(first_after_heal: float | None, heal: float = 50.0, stop: float = 100.0):
    """Two members of group g polling until a fault, a heal at ``heal``; g1 gets records again
    ``first_after_heal`` seconds after it (None: never), g0 at once."""
    h = clean()
    ev = [{"f": "member", "type": "start", "t": 0.5, "process": p, "group": "g", "session_timeout_ms": 10000}
          for p in ("g0", "g1")]
    for t in (1.0, 2.0, 3.0):
        ev += [{"f": "poll", "t": t, "process": p, "session": 1, "msgs": [[TP, int(t) - 1, int(t) - 1]]}
               for p in ("g0", "g1")]
    ev += [{"f": "assign", "t": 0.9, "process": p, "session": 1, "tp": TP, "offset": 0} for p in ("g0", "g1")]
    ev.append({"f": "nemesis", "type": "start", "t": 10.0, "id": 1, "kind": "pause", "nodes": [4]})
    ev.append({"f": "nemesis", "type": "stop", "t": heal, "id": 1, "kind": "pause", "nodes": [4]})
    ev.append({"f": "heal", "t": heal})
    ev.append({"f": "assign", "t": heal + 0.5, "process": "g0", "session": 2, "tp": TP, "offset": 3})
    ev.append({"f": "poll", "t": heal + 1, "process": "g0", "session": 2, "msgs": [[TP, 3, 3]]})
    if first_after_heal is not None:
        ev.append({"f": "assign", "t": heal + first_after_heal - 0.5, "process": "g1", "session": 2, "tp": TP,
                   "offset": 4})
        ev.append({"f": "poll", "t": heal + first_after_heal, "process": "g1", "session": 2, "msgs": [[TP, 4, 4]]})
    ev += [{"f": "member", "type": "stop", "t": stop, "process": p, "group": "g"} for p in ("g0", "g1")]
    return h[:-2] + ev + h[-2:]


def test_group_liveness_after_the_heal():
    """After the heal every group member must receive records within the bound (by default three session
    timeouts plus the initial rebalance delay: 33 s here)."""
    assert check(group_history(5.0))["valid"]
    v = check(group_history(44.0))
    assert v["anomaly-types"] == ["group-liveness"]
    a = v["anomalies"]["group-liveness"][0]
    assert a["process"] == "g1" and a["first_records_after_s"] == 44.0 and a["bound_s"] == 33.0
    assert check(group_history(None))["anomaly-types"] == ["group-liveness"]
    assert check(group_history(44.0), group_liveness_s=60)["valid"]
    # the longest time a member and the whole group went without records are measured
    s = check(group_history(44.0))["group-stalls"]
    assert s["members"]["g1"]["max_s"] == 91.0 and s["groups"]["g"]["max_s"] == 48.0


def test_group_liveness_is_judged_after_every_long_enough_calm():
    """A heal followed by at least the bound without faults is judged like the final one; a shorter calm
    (the next fault may be what keeps the group down) is not."""
    def run(next_fault_at):
        h = [{"f": "member", "type": "start", "t": 0.0, "process": "g0", "group": "g", "session_timeout_ms": 10000},
             {"f": "poll", "t": 5.0, "process": "g0", "session": 1, "msgs": [[TP, 0, 0]]},
             {"f": "nemesis", "type": "start", "t": 10.0, "id": 1, "kind": "pause", "nodes": [4]},
             {"f": "nemesis", "type": "stop", "t": 20.0, "id": 1, "kind": "pause", "nodes": [4]},
             {"f": "nemesis", "type": "start", "t": next_fault_at, "id": 2, "kind": "kill", "nodes": [5]},
             {"f": "nemesis", "type": "stop", "t": next_fault_at + 5, "id": 2, "kind": "kill", "nodes": [5]},
             {"f": "poll", "t": 60.0, "process": "g0", "session": 2, "msgs": [[TP, 1, 1]]},
             {"f": "heal", "t": 100.0},
             {"f": "poll", "t": 101.0, "process": "g0", "session": 2, "msgs": [[TP, 2, 2]]},
             {"f": "member", "type": "stop", "t": 140.0, "process": "g0", "group": "g"}]
        return check_group_liveness(sorted(h, key=lambda o: o["t"]))
    assert [a["healed_at"] for a in run(next_fault_at=70.0)] == [20.0]
    assert run(next_fault_at=40.0) == []


def test_offset_fetch_answers_going_back_without_a_commit():
    """An OffsetFetch answered 5 (a commit nobody saw acknowledged, e.g. served before it was
    replicated); a later one answers 3: the committed offset went back."""
    h = clean()
    h.insert(-2, {"f": "commit", "type": "ok", "t": 5.0, "process": "g0", "group": "g", "tp": TP, "offset": 3})
    h.insert(-2, {"f": "committed", "t": 6.0, "invoke_t": 5.9, "process": "g1", "group": "g", "tp": TP, "offset": 5})
    h.insert(-2, {"f": "committed", "t": 8.0, "invoke_t": 7.9, "process": "g0", "group": "g", "tp": TP, "offset": 3})
    v = check(h)
    assert v["anomaly-types"] == ["commit-backwards"]
    assert v["anomalies"]["commit-backwards"][0]["fetched_before"] == 5
    # the same with 3 committed again (acknowledged) between the two answers is legal
    h.insert(-4, {"f": "commit", "type": "ok", "t": 7.0, "process": "g0", "group": "g", "tp": TP, "offset": 3})
    assert check(sorted(h, key=lambda o: o["t"]))["valid"]


def test_a_member_without_partitions_is_not_expected_to_get_records():
    h = group_history(None)
    h.insert(-3, {"f": "member", "type": "assigned", "t": 55.0, "process": "g1", "group": "g", "tps": []})
    assert check(h)["valid"], check(h)["anomalies"]
    h.insert(-3, {"f": "member", "type": "assigned", "t": 60.0, "process": "g1", "group": "g", "tps": [TP]})
    assert check(h)["anomaly-types"] == ["group-liveness"]


def test_a_worker_hung_in_a_client_call_is_reported_with_the_call():
    h = clean()
    h.append({"f": "stuck", "t": 102.0, "worker": "group-0", "process": "g0", "call": "commit", "since": 29.7,
              "stack": "  File ...\n"})
    v = check(h)
    assert v["anomaly-types"] == ["stuck-client"]
    assert v["anomalies"]["stuck-client"] == [{"worker": "group-0", "process": "g0", "call": "commit", "since": 29.7}]
