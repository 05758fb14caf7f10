"""Leader epoch cache: OffsetForLeaderEpoch answers, truncation, the checkpoint file."""

import os

from broker.log.leader_epoch import CHECKPOINT_FILE, UNDEFINED_EPOCH, LeaderEpochCache


def cache(tmp_path, *entries):
    c = LeaderEpochCache(str(tmp_path))
    for e, o in entries:
        c.assign(e, o)
    return c


def pairs(c):
    return [(e.epoch, e.start_offset) for e in c.entries]


def test_end_offset_for_epochs(tmp_path):
    c = cache(tmp_path, (2, 0), (4, 10), (7, 25))
    leo = 40
    assert c.end_offset_for(7, leo) == (7, 40)
    assert c.end_offset_for(4, leo) == (4, 25)
    assert c.end_offset_for(5, leo) == (4, 25)  # unknown epoch between: the floor epoch's end
    assert c.end_offset_for(1, leo) == (1, 0)  # older than every epoch
    assert c.end_offset_for(8, leo) == (UNDEFINED_EPOCH, -1)
    assert c.end_offset_for(UNDEFINED_EPOCH, leo) == (UNDEFINED_EPOCH, -1)


def test_assign_ignores_same_epoch_and_drops_conflicting_entries(tmp_path):
    c = cache(tmp_path, (1, 0), (1, 5), (3, 10))
    assert pairs(c) == [(1, 0), (3, 10)]
    c.assign(4, 8)  # starts before epoch 3's start: epoch 3 is dropped
    assert pairs(c) == [(1, 0), (4, 8)]


def test_truncate_from_end_and_start(tmp_path):
    c = cache(tmp_path, (1, 0), (2, 10), (3, 20))
    c.truncate_from_end(20)
    assert pairs(c) == [(1, 0), (2, 10)]
    c.truncate_from_start(15)
    assert pairs(c) == [(2, 15)]
    assert c.epoch_for_offset(16) == 2 and c.epoch_for_offset(3) == UNDEFINED_EPOCH


def test_checkpoint_file_in_kafka_text_format_survives_reopen(tmp_path):
    cache(tmp_path, (0, 0), (5, 123)).sync()
    text = open(os.path.join(tmp_path, CHECKPOINT_FILE)).read()
    assert text == "0\n2\n0 0\n5 123\n"
    assert pairs(LeaderEpochCache(str(tmp_path))) == [(0, 0), (5, 123)]


def test_malformed_checkpoint_is_treated_as_empty(tmp_path):
    with open(os.path.join(tmp_path, CHECKPOINT_FILE), "w") as f:
        f.write("0\n3\n1 0\n")
    assert LeaderEpochCache(str(tmp_path)).entries == []


def test_assign_is_written_by_sync_truncation_at_once(tmp_path):
    """assign() stays in memory until sync() (the log's flush); truncations are written at once."""
    path = os.path.join(tmp_path, CHECKPOINT_FILE)
    c = cache(tmp_path, (1, 0), (2, 10))
    assert c.dirty and not os.path.exists(path)
    c.sync()
    assert not c.dirty and pairs(LeaderEpochCache(str(tmp_path))) == [(1, 0), (2, 10)]
    c.assign(3, 20)
    assert pairs(LeaderEpochCache(str(tmp_path))) == [(1, 0), (2, 10)]
    c.truncate_from_end(10)
    assert pairs(LeaderEpochCache(str(tmp_path))) == [(1, 0)]


def test_opening_a_log_writes_no_checkpoint_and_an_unchanged_one_is_never_rewritten(tmp_path, monkeypatch):
    """A restart dropped the entry a leadership started at the log end (Kafka's truncateFromEnd)
    and rewrote the file on every start of every log: 2 fsyncs each, 8 s of a 10,000-partition
    restart. Now the open truncates in memory, the next flush writes it, and a sync that would
    write what the file holds writes nothing."""
    from log_helpers import open_log, produce

    from broker.log import leader_epoch

    lg = open_log(tmp_path)
    produce(lg, [b"a", b"b"])
    lg.leader_epoch_cache.assign(3, lg.log_end_offset)  # a leadership that appended nothing yet
    lg.close()
    writes = []
    real = leader_epoch.write_checkpoint_file
    monkeypatch.setattr(leader_epoch, "write_checkpoint_file", lambda *a: (writes.append(a[0]), real(*a)))
    lg = open_log(tmp_path, clean_shutdown=True, recovery_point=2)
    assert writes == [] and pairs(lg.leader_epoch_cache) == [(0, 0)] and lg.needs_sync
    lg.flush()
    assert len(writes) == 1 and open(writes[0]).read() == "0\n1\n0 0\n"
    lg.close()
    lg = open_log(tmp_path, clean_shutdown=True, recovery_point=2)
    lg.leader_epoch_cache.assign(3, 2)
    lg.leader_epoch_cache.truncate_from_end(2)  # back to what the file holds
    lg.flush()
    lg.close()
    assert len(writes) == 1
