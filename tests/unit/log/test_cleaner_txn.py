"""The log cleaner and transactions (Kafka's cleaner rules): aborted data goes, committed data
is compacted like any other, markers stay while their transaction's data may still be read,
then get a delete horizon and go after delete.retention.ms; the last batch of each producer
stays (emptied); nothing at or after the first offset of an undecided transaction is cleaned."""

from batch_builder import make_batch

from broker.log import Log, LogConfig, parse_batches, validate_produce_batches
from broker.log.batch import DELETE_HORIZON_BIT, build_end_txn_marker, decode_records
from broker.log.cleaner import compact
from broker.log.producer_state import COORDINATOR

MAX = 1 << 20
A, B, P = 11, 12, 13
DAY = 86_400_000


def open_log(d, **cfg):
    cfg.setdefault("cleanup_policy", "compact")
    cfg.setdefault("segment_bytes", 400)
    config = LogConfig.from_topic_configs({k.replace("_", "."): v for k, v in cfg.items()})
    return Log.open(str(d), "t", 0, config, now_ms=0)


def put(log, pairs, pid=-1, seq=-1, transactional=False):
    buf = make_batch([v for _, v in pairs], keys=[k for k, _ in pairs], producer_id=pid, producer_epoch=0 if pid >= 0
                     else -1, base_sequence=seq, transactional=transactional)
    guard = log.producer_state.maybe_start_verification(pid, seq, 0, 0) if transactional else None
    return log.append_as_leader(buf, validate_produce_batches(buf, MAX), 0, 0, verification_guard=guard,
                                require_verification=True)


def end(log, pid, commit, ts=1000):
    buf = build_end_txn_marker(pid, 0, commit, 0, ts)
    return log.append_as_leader(buf, parse_batches(buf), 0, 0, origin=COORDINATOR)


def batches(log):
    out = []
    off = log.log_start_offset
    while (s := log.read(off, MAX, log.log_end_offset)) is not None:
        data = log.read_bytes(s)
        for h in parse_batches(data):
            out.append((h, [(r.offset, r.key, r.value) for r in decode_records(data[h.pos:h.pos + h.size])]))
            off = h.last_offset + 1
    return out


def values(log):
    return [(k, v) for h, rs in batches(log) if not h.is_control for _o, k, v in rs]


def pad(log, n=4):
    for i in range(n):
        put(log, [(b"pad%d" % i, b"." * 150)])


def test_aborted_data_goes_committed_stays_markers_wait_for_their_horizon(tmp_path):
    log = open_log(tmp_path)
    put(log, [(b"k", b"old")])                               # 0
    put(log, [(b"k", b"aborted")], pid=A, seq=0, transactional=True)  # 1
    put(log, [(b"j", b"committed")], pid=B, seq=0, transactional=True)  # 2
    end(log, A, commit=False)                                # 3
    end(log, B, commit=True)                                 # 4
    pad(log)
    pad(log)
    assert len(log.segments) > 2
    assert [t.producer_id for t in log.aborted_transactions(0, log.log_end_offset)] == [A]
    stats = compact(log, now_ms=1000, force=True)
    assert stats.records_removed >= 1
    # the aborted value no longer shadows the committed older one; both markers kept this pass
    assert (b"k", b"old") in values(log) and (b"k", b"aborted") not in values(log)
    assert (b"j", b"committed") in values(log)
    assert sorted(h.base_offset for h, _ in batches(log) if h.is_control) == [3, 4]
    # A's batch was the last of a live producer: it stays, emptied, and so does its marker
    assert [(h.records_count, rs) for h, rs in batches(log) if h.base_offset == 1] == [(0, [])]
    log.producer_state.producers.clear()  # producer.id.expiration.ms passed: no last batch to keep
    compact(log, now_ms=1000, force=True)
    assert 1 not in [h.base_offset for h, _ in batches(log)]
    # next pass: no batch of A's transaction is left, so its marker gets a delete horizon; the
    # commit marker stays as long as a batch of its transaction does
    compact(log, now_ms=2000, force=True)
    markers = {h.base_offset: h for h, _ in batches(log) if h.is_control}
    assert sorted(markers) == [3, 4]
    assert markers[3].attributes & DELETE_HORIZON_BIT and markers[3].base_timestamp == 2000 + DAY
    assert not markers[4].attributes & DELETE_HORIZON_BIT
    assert log.aborted_transactions(0, log.log_end_offset) == []  # the index forgot A with its data
    # before the horizon nothing changes; after it the marker goes
    compact(log, now_ms=2000 + DAY - 1, force=True)
    assert sorted(h.base_offset for h, _ in batches(log) if h.is_control) == [3, 4]
    compact(log, now_ms=2000 + DAY + 1, force=True)
    assert [h.base_offset for h, _ in batches(log) if h.is_control] == [4]
    # the committed record is replaced: its commit marker follows the same path
    put(log, [(b"j", b"newer")])
    pad(log)
    for now in (3 * DAY, 3 * DAY + 1, 3 * DAY + 2, 5 * DAY):
        compact(log, now_ms=now, force=True)
    assert [h for h, _ in batches(log) if h.is_control] == []
    assert (b"k", b"old") in values(log) and (b"j", b"newer") in values(log)
    assert (b"j", b"committed") not in values(log)


def test_last_batch_of_a_producer_stays_as_an_empty_batch(tmp_path):
    log = open_log(tmp_path)
    put(log, [(b"k", b"a1")], pid=A, seq=0, transactional=True)   # 0: A's only (aborted) batch
    end(log, A, commit=False)                                     # 1
    put(log, [(b"k", b"v")], pid=P, seq=0)                        # 2: an idempotent producer...
    put(log, [(b"k", b"v2")], pid=P, seq=1)                       # 3: ...whose last batch is kept
    pad(log)
    pad(log)
    compact(log, now_ms=1000, force=True)
    hs = {h.base_offset: (h, rs) for h, rs in batches(log)}
    h0, rs0 = hs[0]
    assert rs0 == [] and h0.producer_id == A and h0.records_count == 0  # emptied, header kept
    assert hs[3][1] == [(3, b"k", b"v2")] and 2 not in hs
    reopened = open_log(tmp_path)  # the producer state still knows A after a restart from the log
    reopened.producer_state.reset()
    reopened._replay_producer_state(0)
    assert reopened.producer_state.producers[A].last_seq == 0


def test_nothing_at_or_after_an_undecided_transaction_is_cleaned(tmp_path):
    log = open_log(tmp_path)
    put(log, [(b"k", b"v0")])
    put(log, [(b"k", b"open")], pid=A, seq=0, transactional=True)  # 1: stays open
    pad(log, 8)
    assert len(log.segments) > 3
    put(log, [(b"k", b"v9")])
    before = values(log)
    compact(log, now_ms=1000, force=True)
    assert values(log) == before  # the segment holding offset 1 and everything after it is out of range
    end(log, A, commit=True)
    pad(log, 4)
    compact(log, now_ms=1000, force=True)
    assert (b"k", b"v0") not in values(log) and (b"k", b"open") not in values(log)
    assert (b"k", b"v9") in values(log)
