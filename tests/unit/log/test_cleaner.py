"""Log compaction: the newest record per key survives, offsets and batches stay readable."""

import os

import pytest
from batch_builder import make_batch

from broker.log import Log, LogConfig, parse_batches, validate_produce_batches
from broker.log.batch import decode_records
from broker.log.cleaner import compact, dirty_ratio

MAX = 1 << 20


def open_log(d, **cfg):
    cfg.setdefault("cleanup_policy", "compact")
    config = LogConfig.from_topic_configs({k.replace("_", "."): v for k, v in cfg.items()})
    return Log.open(str(d), "t", 0, config, now_ms=0)


def put(log, pairs, ts=1000, compression=0):
    keys = [k for k, _ in pairs]
    buf = make_batch([v for _, v in pairs], keys=keys, base_timestamp=ts, compression=compression)
    return log.append_as_leader(buf, validate_produce_batches(buf, MAX), 0, ts)


def contents(log):
    out = []
    off = log.log_start_offset
    while (s := log.read(off, MAX, log.log_end_offset)) is not None:
        data = log.read_bytes(s)
        for h in parse_batches(data):
            out += [(r.offset, r.key, r.value) for r in decode_records(data[h.pos:h.pos + h.size])]
            off = h.last_offset + 1
    return out


def fill(log, rounds=6, keys=(b"a", b"b", b"c")):
    for i in range(rounds):
        for k in keys:
            put(log, [(k, b"%s-%d" % (k, i) + b"." * 60)], ts=1000 + i)


def test_compaction_keeps_newest_record_per_key(tmp_path):
    log = open_log(tmp_path, segment_bytes=400)
    fill(log)
    before = contents(log)
    assert len(log.segments) > 3
    stats = compact(log, now_ms=2000, force=True)
    assert stats.segments > 0 and stats.records_removed > 0
    after = contents(log)
    active_base = log.active_segment.base_offset
    # below the active segment only the newest record of each key (within that range) remains
    newest = {}
    for off, k, _v in before:
        if off < active_base:
            newest[k] = off
    cleaned = [(o, k, v) for o, k, v in after if o < active_base]
    assert sorted(cleaned) == sorted((o, k, v) for o, k, v in before if newest.get(k) == o)
    # the active segment is untouched and offsets never change
    assert [r for r in after if r[0] >= active_base] == [r for r in before if r[0] >= active_base]
    assert log.log_end_offset == before[-1][0] + 1


def test_compacted_log_reopens_and_appends_continue(tmp_path):
    log = open_log(tmp_path, segment_bytes=400)
    fill(log)
    compact(log, now_ms=2000, force=True)
    after = contents(log)
    end = log.log_end_offset
    log.close()
    log = Log.open(str(tmp_path), "t", 0, log.config, now_ms=0)  # unclean path: CRC-scan everything
    assert contents(log) == after
    assert put(log, [(b"a", b"new")]).first_offset == end


def test_partially_kept_batch_is_reencoded_with_same_offsets_and_codec(tmp_path):
    log = open_log(tmp_path)
    put(log, [(b"x", b"1"), (b"y", b"1"), (b"z", b"1")], compression=4)
    put(log, [(b"y", b"2")])
    log.roll(now_ms=0)
    compact(log, now_ms=2000, force=True)
    data = log.read_bytes(log.read(0, MAX, 4))
    hs = parse_batches(data)
    assert [(h.base_offset, h.last_offset, h.records_count, h.compression) for h in hs] == [
        (0, 2, 2, 4), (3, 3, 1, 0)]
    assert [(r.offset, r.key) for r in decode_records(data[:hs[0].size])] == [(0, b"x"), (2, b"z")]


def test_tombstones_removed_only_after_delete_retention(tmp_path):
    log = open_log(tmp_path, delete_retention_ms=1000)
    put(log, [(b"k", b"v")], ts=100)
    put(log, [(b"k", None)], ts=200)
    put(log, [(b"other", b"v")], ts=300)
    log.roll(now_ms=0)
    compact(log, now_ms=1100, force=True)  # tombstone is 900 ms old: kept
    assert [(o, k) for o, k, _ in contents(log)] == [(1, b"k"), (2, b"other")]
    compact(log, now_ms=1300, force=True)
    assert [(o, k) for o, k, _ in contents(log)] == [(2, b"other")]


def test_records_without_key_are_kept(tmp_path):
    log = open_log(tmp_path)
    put(log, [(None, b"1")])
    put(log, [(None, b"2")])
    log.roll(now_ms=0)
    assert compact(log, now_ms=0, force=True).segments == 0
    assert len(contents(log)) == 2


def test_active_segment_and_records_above_high_watermark_are_not_cleaned(tmp_path):
    log = open_log(tmp_path, segment_bytes=400)
    fill(log)
    first_end = log.segments[1].base_offset
    compact(log, now_ms=2000, high_watermark=first_end, force=True)
    assert contents(log)[-1][0] == log.log_end_offset - 1
    # segments past the high watermark kept every record
    assert [o for o, _, _ in contents(log) if o >= first_end] == list(range(first_end, log.log_end_offset))


def test_delete_policy_topics_are_not_compacted(tmp_path):
    log = open_log(tmp_path, segment_bytes=400, cleanup_policy="delete")
    fill(log)
    assert compact(log, now_ms=2000, force=True).segments == 0


def test_clean_log_is_not_recleaned_until_dirty(tmp_path):
    log = open_log(tmp_path, segment_bytes=400)
    fill(log)
    assert compact(log, now_ms=2000).segments > 0
    assert compact(log, now_ms=2000).segments == 0


def test_min_cleanable_dirty_ratio_is_the_topics(tmp_path):
    """A little new data after a cleaning: below the default ratio (0.5) nothing is cleaned, a
    topic with min.cleanable.dirty.ratio=0.01 (librdkafka's 0077 creates one) is cleaned."""
    for ratio, cleaned in ((None, False), ("0.01", True)):
        d = tmp_path / str(ratio)
        log = open_log(d, segment_bytes=400, **({"min_cleanable_dirty_ratio": ratio} if ratio else {}))
        fill(log, rounds=2, keys=[b"k%d" % i for i in range(60)])
        assert compact(log, now_ms=2000).segments > 0
        fill(log, rounds=3)
        assert 0 < dirty_ratio(log) < 0.5
        assert (compact(log, now_ms=2000).segments > 0) is cleaned


def test_a_log_is_cleaned_once_its_dirty_ratio_exceeds_the_minimum(tmp_path):
    """Kafka's cleanableRatio > minCleanableRatio: a log never cleaned is all dirty (ratio 1),
    cleaned with any ratio below 1 and never by the ratio with min.cleanable.dirty.ratio=1 (only
    max.compaction.lag.ms, or a forced pass, cleans it then)."""
    for ratio, cleaned in (("0.99", True), ("1", False)):
        log = open_log(tmp_path / ratio, segment_bytes=400, min_cleanable_dirty_ratio=ratio)
        fill(log)
        assert dirty_ratio(log) == 1.0
        assert (compact(log, now_ms=2000).segments > 0) is cleaned, ratio


def test_min_cleanable_dirty_ratio_is_checked():
    from common.config import TOPIC_KEYS, ConfigError
    assert TOPIC_KEYS["min.cleanable.dirty.ratio"].convert("0.25") == 0.25
    for bad in ("1.5", "-0.1", "nan", "x"):
        with pytest.raises(ConfigError, match="min.cleanable.dirty.ratio"):
            TOPIC_KEYS["min.cleanable.dirty.ratio"].convert(bad)


def test_leftover_cleaned_file_from_a_crash_is_removed(tmp_path):
    log = open_log(tmp_path, segment_bytes=400)
    fill(log)
    base = log.segments[0].base_offset
    junk = os.path.join(log.path, f"{base:020d}.log.cleaned")
    with open(junk, "wb") as f:
        f.write(b"partial")
    expected = contents(log)
    for s in log.segments:
        s.release()
    log = Log.open(str(tmp_path), "t", 0, log.config, now_ms=0)
    assert not os.path.exists(junk)
    assert contents(log) == expected


def test_emptied_first_segment_keeps_log_start_offset_across_restart(tmp_path):
    log = open_log(tmp_path)
    put(log, [(b"k", b"old")])
    log.roll(now_ms=0)
    put(log, [(b"k", b"new")])
    log.roll(now_ms=0)
    compact(log, now_ms=0, force=True)
    assert log.segments[0].size == 0 and log.log_start_offset == 0
    assert [(o, v) for o, _, v in contents(log)] == [(1, b"new")]
    log.close()
    log = Log.open(str(tmp_path), "t", 0, log.config, now_ms=0, clean_shutdown=True)
    assert log.log_start_offset == 0
    assert [(o, v) for o, _, v in contents(log)] == [(1, b"new")]


def test_compaction_and_flush_in_threads_while_appending(tmp_path):
    import threading

    log = open_log(tmp_path, segment_bytes=600)
    fill(log, rounds=5)
    stop = threading.Event()
    errors = []

    def background():
        try:
            while not stop.is_set():
                compact(log, now_ms=0, force=True)
                log.flush()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    t = threading.Thread(target=background)
    t.start()
    try:
        for i in range(200):
            put(log, [(b"k%d" % (i % 7), b"v%d" % i + b"." * 50)])
    finally:
        stop.set()
        t.join()
    assert not errors
    compact(log, now_ms=0, force=True)
    got = contents(log)
    newest = {}
    for o, k, v in got:
        newest[k] = (o, v)
    assert newest[b"k6"][1].startswith(b"v195")
    assert [o for o, _, _ in got] == sorted(o for o, _, _ in got)
    assert log.log_end_offset == 15 + 200


def test_undecodable_batch_is_kept_and_logged_and_every_other_log_is_compacted(tmp_path, caplog):
    """A batch on disk the cleaner cannot decode (written behind produce's validation): an
    error names the log, file and position; that batch stays as it is, the rest of its log and
    every other log (whatever order they come in) are compacted."""
    from hostile import ZSTD, batch, count_lie, zstd_rle_bomb

    from broker.log.manager import LogManager

    mgr = LogManager([str(tmp_path)], {"cleanup.policy": "compact", "segment.bytes": 400}, now_ms=0)
    logs = [mgr.get_or_create(t, 0) for t in ("a-bad", "b-good", "c-bad")]
    for lg in logs:
        fill(lg)
        if lg.topic.endswith("bad"):
            for bad in (count_lie(), batch(zstd_rle_bomb(30 << 30), 10, codec=ZSTD)):
                buf = bytearray(bad)
                lg.append_as_leader(buf, parse_batches(buf), 0, 0)
            fill(lg, rounds=2)
    hostile_counts = (2**31 - 1, 10)
    bad_positions = {lg.topic: [(s.log_path, h.pos) for s in lg.segments for h in s.iter_headers(0)
                                if h.records_count in hostile_counts] for lg in logs}

    def good_records(lg):
        return [(r.offset, r.key) for s in lg.segments for h in s.iter_headers(0)
                if h.records_count not in hostile_counts
                for r in decode_records(s.read_batch(h.pos, h.size))]

    before = {lg.topic: good_records(lg) for lg in logs}
    assert mgr.cleaner_check(2000, force=True) > 0
    for lg in logs:
        after = good_records(lg)
        assert len(after) < len(before[lg.topic]) / 2, f"{lg.topic} compacted"
        assert set(after) <= set(before[lg.topic])
    for topic in ("a-bad", "c-bad"):
        for path, pos in bad_positions[topic]:
            assert f"{topic}-0: the log cleaner cannot decode the record batch at position {pos} of {path}" \
                in caplog.text
        lg = mgr.get(topic, 0)
        kept = [h.records_count for s in lg.segments for h in s.iter_headers(0)]
        assert all(c in kept for c in hostile_counts), "the undecodable batches are kept"
    mgr.close()


def test_max_compaction_lag_cleans_a_log_below_its_dirty_ratio(tmp_path):
    """max.compaction.lag.ms (librdkafka's 0077 creates its topic with 100 ms): once the first
    batch of a dirty segment is older than it, the log is compacted whatever its dirty ratio;
    before that, or without it, the ratio decides (here: too little new data)."""
    for lag, now, cleaned in ((None, 2000, False), ("100", 1050, False), ("100", 2000, True)):
        d = tmp_path / f"{lag}-{now}"
        log = open_log(d, segment_bytes=400, **({"max_compaction_lag_ms": lag} if lag else {}))
        fill(log, rounds=2, keys=[b"k%d" % i for i in range(60)])
        assert compact(log, now_ms=2000).segments > 0
        fill(log, rounds=3)  # stamped 1000..1002
        assert 0 < dirty_ratio(log) < 0.5
        assert (compact(log, now_ms=now).segments > 0) is cleaned, (lag, now)


def test_min_compaction_lag_leaves_young_segments_dirty(tmp_path):
    """min.compaction.lag.ms: the cleaner stops at the first dirty segment holding a record
    younger than the lag; what is before it is cleaned, it and what follows are not."""
    log = open_log(tmp_path, segment_bytes=400, min_compaction_lag_ms="500")
    for i in range(8):
        for k in (b"a", b"b", b"c"):
            put(log, [(k, b"%s-%d" % (k, i) + b"." * 60)], ts=1000 + 100 * i)
    young_from = next(s.base_offset for s in log.segments if s.max_timestamp > 1700 - 500)
    before = contents(log)
    assert compact(log, now_ms=1000).segments == 0  # everything younger than 500 ms
    assert compact(log, now_ms=1700).segments > 0
    after = contents(log)
    assert [r for r in after if r[0] >= young_from] == [r for r in before if r[0] >= young_from]
    assert len([r for r in after if r[0] < young_from]) < len([r for r in before if r[0] < young_from])


def test_a_compacted_log_rolls_its_segment_by_max_compaction_lag(tmp_path):
    """Kafka's LogConfig.maxSegmentMs: the cleaner never touches the active segment, so a
    compacted topic's segment rolls once its records span max.compaction.lag.ms (segment.ms
    is 7 days here); a delete-policy topic ignores the key."""
    for policy, rolled in (("compact", True), ("delete", False)):
        log = open_log(tmp_path / policy, cleanup_policy=policy, max_compaction_lag_ms="100")
        put(log, [(b"a", b"1")], ts=1000)
        put(log, [(b"a", b"2")], ts=1090)
        assert len(log.segments) == 1
        put(log, [(b"a", b"3")], ts=1200)
        assert (len(log.segments) == 2) is rolled


def test_segment_jitter_rolls_each_segment_a_little_early(tmp_path):
    """segment.jitter.ms: each segment rolls up to that much before segment.ms, by a share of its
    own (spread over partitions, the same on every run)."""
    log = open_log(tmp_path, cleanup_policy="delete", segment_ms="1000", segment_jitter_ms="800")
    jitter = log.config.roll_jitter_ms("t", 0, 0)
    assert 0 <= jitter < 800
    assert len({log.config.roll_jitter_ms("t", p, 0) for p in range(20)}) > 10
    put(log, [(b"a", b"1")], ts=1000)
    put(log, [(b"a", b"2")], ts=1000 + 1000 - jitter)  # not past the jittered limit yet
    assert len(log.segments) == 1
    put(log, [(b"a", b"3")], ts=1000 + 1000 - jitter + 1)
    assert len(log.segments) == 2


def _fds_on_deleted_files(path) -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        n += target.startswith(str(path)) and target.endswith(" (deleted)")
    return n


@pytest.mark.parametrize("how", ["retention", "truncate_fully"])
def test_file_delete_delay_is_how_long_a_deleted_segment_stays_on_disk(tmp_path, how):
    """file.delete.delay.ms: a segment deleted by retention or a full truncation keeps its data
    on disk (its descriptors held, also those released earlier) for the topic's delay, 60 s by
    default; 0 frees it at once."""
    for delay, held in ((None, True), ("0", False)):
        d = tmp_path / str(delay)
        log = open_log(d, cleanup_policy="delete", segment_bytes=400, retention_bytes="400",
                       **({"file_delete_delay_ms": delay} if delay else {}))
        fill(log)
        for s in log.segments:
            s.fd  # noqa: B018 - every segment's file open, as after reads
        if how == "retention":
            assert log.apply_retention(2000) > 0
        else:
            log.truncate_fully_and_start_at(log.log_end_offset + 10)
        assert (_fds_on_deleted_files(d) > 0) is held, delay
        log.close()
