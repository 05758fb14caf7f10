"""A log owns its files' lifetime: background work (flush, compaction) racing a deletion, a
close or a segment replacement writes nothing of a dead log, raises nothing, and readers that
lose a segment under them read the segment list again; a closed or deleted log refuses work
with NOT_LEADER_OR_FOLLOWER; the broker's shutdown stops a running compaction promptly."""

from __future__ import annotations

import os
import threading
import time
import uuid

import pytest
from log_helpers import all_values, produce
from test_cleaner import contents, fill, put
from test_cleaner import open_log as open_compacted

from broker.log import Log, LogManager, leader_epoch
from broker.log import cleaner as cleaner_mod
from broker.log.index import OffsetIndex, TimeIndex
from broker.log.log import LogClosedError
from common.errors import ErrorCode

MAX = 1 << 20


class Pause:
    """Wraps ``obj.name`` so that its first call (in whatever thread) waits until released."""

    def __init__(self, monkeypatch, obj, name):
        self.entered, self.released = threading.Event(), threading.Event()
        real = getattr(obj, name)
        first = [True]

        def wrapper(*args, **kwargs):
            if first[0]:
                first[0] = False
                self.entered.set()
                assert self.released.wait(10)
            return real(*args, **kwargs)

        monkeypatch.setattr(obj, name, wrapper)


def _in_thread(fn, *args):
    out: dict = {}

    def run():
        try:
            out["result"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    return t, out


@pytest.mark.parametrize("what", ["partition.metadata", "leader-epoch-checkpoint"])
def test_a_flush_racing_the_deletion_of_its_log_writes_nothing_and_raises_nothing(tmp_path, monkeypatch, what):
    """flush_check in its thread is about to write partition.metadata (a new log) or the
    leader-epoch checkpoint (a new epoch) when DeleteTopics deletes the log (fuzz finding #15:
    FileNotFoundError in flush_check)."""
    mgr = LogManager([str(tmp_path)], {}, now_ms=0)
    lg = mgr.get_or_create("t", 0, uuid.uuid4())  # partition.metadata is left to the flush thread
    if what == "partition.metadata":
        pause = Pause(monkeypatch, Log, "_write_partition_metadata")
    else:
        lg.flush()
        lg.leader_epoch_cache.assign(3, 0)
        pause = Pause(monkeypatch, leader_epoch, "write_checkpoint_file")
    flusher, out = _in_thread(mgr.flush_check, 10_000)
    assert pause.entered.wait(10)
    deleter, deleted = _in_thread(mgr.delete, "t", 0)
    time.sleep(0.2)  # the deletion waits for the write in hand, or (before the fix) removes the dir under it
    pause.released.set()
    flusher.join(10)
    deleter.join(10)
    assert "error" not in out and "error" not in deleted, (out, deleted)
    mgr.removals_done()
    assert os.listdir(tmp_path) == [n for n in os.listdir(tmp_path) if not n.startswith("t-0")]
    mgr.close()


def test_a_deleted_log_refuses_appends_reads_and_searches_and_its_flush_does_nothing(tmp_path):
    mgr = LogManager([str(tmp_path)], {}, now_ms=0)
    lg = mgr.get_or_create("t", 0, uuid.uuid4())
    produce(lg, [b"a", b"b"])
    path = lg.path
    mgr.delete("t", 0)
    mgr.removals_done()
    assert not os.path.exists(path) and not [n for n in os.listdir(tmp_path) if n.startswith("t-0")]
    for op in (lambda: produce(lg, [b"c"]), lambda: lg.read(0, MAX, lg.log_end_offset),
               lambda: lg.offset_for_timestamp(0), lg.max_timestamp_and_offset):
        with pytest.raises(LogClosedError) as e:
            op()
        assert e.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER and "t-0 was deleted" in e.value.message
    lg.leader_epoch_cache.assign(4, 2)
    lg.flush()  # nothing to do, nothing raised, nothing recreated
    assert not os.path.exists(path)
    mgr.close()


def test_a_deletion_interrupted_by_a_stop_is_finished_at_the_next_start(tmp_path):
    mgr = LogManager([str(tmp_path)], {}, now_ms=0)
    produce(mgr.get_or_create("t", 0, uuid.uuid4()), [b"a"])
    mgr.close()
    os.rename(tmp_path / "t-0", tmp_path / f"t-0.{uuid.uuid4().hex}-delete")  # renamed, not yet removed
    mgr = LogManager([str(tmp_path)], {}, now_ms=0)
    assert mgr.all_logs() == [] and not [n for n in os.listdir(tmp_path) if n.startswith("t-0")]
    mgr.close()


def test_a_deleted_log_is_removed_off_the_callers_thread(tmp_path, monkeypatch):
    """LogManager.delete runs on the event loop (a DeleteTopics reaching the metadata): it
    renames the directory, and a thread of the manager removes it (the fuzzer saw the loop held
    1.2 s by a deleted log's fsync and unlinks)."""
    from broker.log import log as log_module

    mgr = LogManager([str(tmp_path)], {}, now_ms=0)
    produce(mgr.get_or_create("t", 0, uuid.uuid4()), [b"a"])
    slow = threading.Event()
    real = log_module.shutil.rmtree
    monkeypatch.setattr(log_module.shutil, "rmtree", lambda *a, **k: (slow.wait(10), real(*a, **k)))
    t0 = time.monotonic()
    mgr.delete("t", 0)
    took = time.monotonic() - t0
    slow.set()
    assert took < 1, f"delete waited {took:.1f}s for the removal of the files"
    assert not os.path.exists(tmp_path / "t-0")
    mgr.removals_done()
    assert not [n for n in os.listdir(tmp_path) if n.startswith("t-0")]
    mgr.close()


def _compactable(tmp_path):
    lg = open_compacted(tmp_path, segment_bytes=400)
    fill(lg)
    put(lg, [(b"z", b"last")], ts=5000)
    return lg


def _compact_in_a_thread(lg):
    t, out = _in_thread(lambda: cleaner_mod.compact(lg, now_ms=0, force=True))
    t.join(10)
    assert "error" not in out, out
    return out["result"]


def test_a_timestamp_search_survives_the_cleaner_replacing_the_segment_it_is_in(tmp_path, monkeypatch):
    """ListOffsets by timestamp on the loop took the segment list, then the cleaner thread
    replaced the segment it was about to read (fuzz: FileNotFoundError from
    offset_for_timestamp_async)."""
    lg = _compactable(tmp_path)
    real = TimeIndex.lookup_before
    calls = []

    def lookup_before(self, ts):
        calls.append(1)
        if len(calls) == 1:
            assert _compact_in_a_thread(lg).segments > 0
        return real(self, ts)

    monkeypatch.setattr(TimeIndex, "lookup_before", lookup_before)
    found = lg.offset_for_timestamp(1003)
    monkeypatch.undo()
    assert found == lg.offset_for_timestamp(1003) == (15, 1005)  # a-3 was compacted away: a-5


async def test_an_async_timestamp_search_survives_the_cleaner_between_two_batches(tmp_path, monkeypatch):
    lg = _compactable(tmp_path)
    real = Log._first_at_or_after
    calls = []

    def first_at_or_after(self, seg, h, data, ts_ms, start):
        calls.append(1)
        if len(calls) == 1:  # in the decoding thread, between the loop's reads of two candidates
            assert _compact_in_a_thread(lg).segments > 0
            return None
        return real(self, seg, h, data, ts_ms, start)

    monkeypatch.setattr(Log, "_first_at_or_after", first_at_or_after)
    found = await lg.offset_for_timestamp_async(1003)
    monkeypatch.undo()
    assert len(calls) > 1 and found == lg.offset_for_timestamp(1003) == (15, 1005)


def test_a_read_survives_the_cleaner_replacing_the_segment_it_is_in(tmp_path, monkeypatch):
    lg = _compactable(tmp_path)
    real = OffsetIndex.lookup_entry
    calls = []

    def lookup_entry(self, offset):
        calls.append(1)
        if len(calls) == 1:
            assert _compact_in_a_thread(lg).segments > 0
        return real(self, offset)

    monkeypatch.setattr(OffsetIndex, "lookup_entry", lookup_entry)
    s = lg.read(0, MAX, lg.log_end_offset)  # fetch from the start while the cleaner swaps segment 0
    assert s is not None and s.first_batch_offset >= 0
    monkeypatch.setattr(OffsetIndex, "lookup_entry", real)
    assert [v for _, _, v in contents(lg)][-4:] == [b"a-5" + b"." * 60, b"b-5" + b"." * 60, b"c-5" + b"." * 60,
                                                    b"last"]


def test_compaction_of_a_log_closed_and_moved_aside_never_touches_the_new_log_at_its_path(tmp_path, monkeypatch):
    """A log set aside as stray (closed, renamed) while the cleaner compacts it, and a new log
    created at the same path with a segment of the same base offset: the cleaner's copy must
    not replace the new log's segment."""
    lg = _compactable(tmp_path)
    path = lg.path
    new: list = []
    real = cleaner_mod._build_offset_map

    def build_then_move_aside(segs, decoder, txns):
        latest = real(segs, decoder, txns)
        lg.close()
        os.rename(path, path + ".old-stray")
        n = open_compacted(tmp_path, segment_bytes=400)
        put(n, [(b"new", b"value-of-the-new-log")])
        new.append(n)
        return latest

    monkeypatch.setattr(cleaner_mod, "_build_offset_map", build_then_move_aside)
    _compact_in_a_thread(lg)
    [n] = new
    n.close()
    assert [v for _, _, v in contents(open_compacted(tmp_path, segment_bytes=400))] == [b"value-of-the-new-log"]
    assert not [f for f in os.listdir(path) if f.endswith(".cleaned")]


def test_closing_the_log_manager_stops_a_running_compaction_promptly(tmp_path, monkeypatch):
    """Broker.stop closes the logs while the cleaner thread may be in a long pass: the pass ends
    at its next batch and close() waits for it, so no swap happens after the logs are closed."""
    mgr = LogManager([str(tmp_path)], {"cleanup.policy": "compact", "segment.bytes": 400}, now_ms=0)
    lg = mgr.get_or_create("c", 0)
    fill(lg, rounds=40)
    real = cleaner_mod.iter_records
    decoding = threading.Event()
    decoded = [0]

    def slow_records(data, limit):
        decoding.set()
        decoded[0] += 1
        time.sleep(0.02)  # ~120 batches, two passes: several seconds without a stop
        return real(data, limit)

    monkeypatch.setattr(cleaner_mod, "iter_records", slow_records)
    cleaner, out = _in_thread(mgr.cleaner_check, 10_000, None)
    assert decoding.wait(10)
    before = decoded[0]
    mgr.close()
    assert not cleaner.is_alive(), "close() returned while the cleaner was still running"
    # promptly = within a batch or two of the stop, whatever the machine's load (a whole pass is ~120)
    assert decoded[0] - before <= 2, f"the cleaner decoded {decoded[0] - before} more batches after close()"
    assert "error" not in out, out
    cleaner.join(10)
    reopened = LogManager([str(tmp_path)], {"cleanup.policy": "compact", "segment.bytes": 400}, now_ms=0)
    assert all_values(reopened.get("c", 0))[-3:] == [b"a-39" + b"." * 60, b"b-39" + b"." * 60, b"c-39" + b"." * 60]
    reopened.close()
