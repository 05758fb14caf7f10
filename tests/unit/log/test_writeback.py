"""Early writeback (krafty.log.writeback.bytes): whole pages of the active segment go to the
kernel's writeback once enough have been appended, so dirty pages never pile up to the point
where the kernel throttles the event loop's pwrite."""

import os
import time

import pytest
from batch_builder import make_batch

from broker.log import LogManager, validate_produce_batches
from broker.log.segment import _PAGE, _sync_file_range

pytestmark = pytest.mark.skipif(_sync_file_range is None, reason="sync_file_range is Linux-only")

MAX = 8 << 20
CONFIG = {"segment.bytes": 1 << 30, "retention.ms": 7 * 86_400_000, "max.message.bytes": MAX}


def produce(log, values):
    buf = make_batch(values, base_timestamp=1000)
    return log.append_as_leader(buf, validate_produce_batches(buf, MAX), 0, 1000)


def test_hands_over_whole_pages_once_enough_are_appended(tmp_path):
    m = LogManager([str(tmp_path)], CONFIG, now_ms=0)
    lg = m.get_or_create("t", 0)
    seg = lg.segments[-1]
    produce(lg, [b"x" * 3000])
    assert m.writeback(64 * 1024) == 0  # below the threshold
    assert seg.writeback_pos == 0
    produce(lg, [b"y" * 100_000])
    n = m.writeback(64 * 1024)
    assert n == seg.size - seg.size % _PAGE and n % _PAGE == 0  # never the partial last page
    assert seg.writeback_pos == n
    assert m.writeback(1) == 0  # nothing new
    produce(lg, [b"z" * 10_000])
    assert m.writeback(1) == seg.size - seg.size % _PAGE - n  # only what came after
    lg.truncate_to(1)  # a follower truncating below what was handed over
    assert seg.writeback_pos <= seg.size
    produce(lg, [b"w" * 50_000])
    assert m.writeback(1) > 0
    m.close()


def _dirty_kib() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Dirty:"):
                return int(line.split()[1])
    raise AssertionError("no Dirty: in /proc/meminfo")


def test_dirty_pages_do_not_pile_up(tmp_path):
    """256 MB appended: without writeback they would stay dirty for dirty_expire_centisecs
    (30 s) or until the background threshold; with it the kernel starts writing at once."""
    m = LogManager([str(tmp_path)], CONFIG, now_ms=0)
    lg = m.get_or_create("t", 0)
    value = os.urandom(16 * 1024)
    before = _dirty_kib()
    for _ in range(256):
        produce(lg, [value] * 64)  # 1 MiB batches
    piled = _dirty_kib() - before
    if piled < 128 * 1024:
        pytest.skip(f"the kernel did not keep the appends dirty ({piled} KiB; tmpfs or a tiny dirty limit)")
    assert m.writeback(1024 * 1024) >= 255 * 1024 * 1024
    deadline = time.monotonic() + 20
    while _dirty_kib() - before > 64 * 1024 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _dirty_kib() - before <= 64 * 1024, f"still {_dirty_kib() - before} KiB dirty"
    lg.delete()
