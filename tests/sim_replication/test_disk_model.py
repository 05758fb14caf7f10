"""The simulator's disk (sim/disk.py) and the log model on it (issue 18): torn tails after a
clean shutdown, bad blocks, reads that report them."""

from __future__ import annotations

import random

import pytest

from sim.disk import SimDisk
from sim.replication.simlog import SEGMENT_RECORDS, SimCorruptBatch, SimLog


def filled(n: int) -> SimLog:
    log = SimLog()
    for i in range(n):
        log.append_as_leader(1 + i // 10, 100 + i)
    return log


def test_power_cut_keeps_what_was_fsynced_and_can_tear_the_last_write_anyway():
    d = SimDisk()
    d.write("a", b"x" * 100, 0)
    d.open("a").fsync()
    d.write("a", b"y" * 50, 100)
    d.power_cut()
    assert d.open("a").data == b"x" * 100
    d.write("a", b"z" * 10, 100)
    d.open("a").fsync()
    d.power_cut(torn_bytes=25)  # the drive lost what it had acknowledged
    assert d.open("a").data == b"x" * 85


def test_tail_torn_after_a_clean_close_costs_only_the_torn_batch():
    log = filled(2 * SEGMENT_RECORDS + 5)
    end = log.log_end_offset
    log.close()
    log.disk.power_cut(torn_bytes=30)
    assert log.valid_end() == end - 1
    lost = log.reopen()
    assert log.log_end_offset == end - 1 and lost == [(end - 1, 100 + end - 1)]
    assert log.append_as_leader(9, 7) == end - 1
    assert [v for _e, v in log.read(0, 100)] == [100 + i for i in range(end - 1)] + [7]


def test_bad_block_in_a_closed_segment_is_reported_by_reads_from_it_and_stops_reads_before_it():
    log = filled(3 * SEGMENT_RECORDS)
    hit = log.corrupt_closed_batch(random.Random(4))
    assert hit is not None
    o, _v = hit
    with pytest.raises(SimCorruptBatch):
        log.read(o, 5)
    assert log.damaged_offset == o
    assert [v for _e, v in log.read(0, 100)] == [100 + i for i in range(o)]
    log.truncate_to(o)  # what a follower does before fetching it again
    assert log.damaged_offset is None and log.log_end_offset == o
