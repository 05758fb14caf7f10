"""The bound on open segment files (broker/log/segment.py OpenFiles, ``krafty.log.open.files.max``):
an idle partition holds no descriptor beyond the cache, evicted files are opened again on use,
a flush after an eviction still fsyncs the data, a read slice outlives eviction and deletion, and
running out of descriptors while making a log is a KAFKA_STORAGE_ERROR of that partition, not a
failed log dir."""

from __future__ import annotations

import errno
import os

import pytest
from log_helpers import all_values, open_log, produce

from broker.log import LogManager, fileio, segment
from broker.log.segment import OPEN_FILES
from common.errors import ErrorCode, KafkaError


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def small_cache():
    """A cache of 8 files."""
    before = OPEN_FILES.limit
    segment.reap_retired(force=True)
    OPEN_FILES.configure(8)
    yield OPEN_FILES
    OPEN_FILES.configure(before)


class _Recording(fileio.Files):
    """The real layer, remembering the inodes fsynced (and failing opens on demand)."""

    def __init__(self, below):
        self.below = below
        self.synced: set[int] = set()
        self.fail_open: set[str] = set()  # path substrings whose open raises EMFILE
        self.fail_once = 0  # segment log opens that raise EMFILE

    def fsync(self, fd):
        self.below.fsync(fd)
        self.synced.add(os.fstat(fd).st_ino)

    def open(self, path, flags, mode=0o777):
        if (self.fail_once and path.endswith(".log")) or any(s in path for s in self.fail_open):
            self.fail_once = max(0, self.fail_once - 1)
            raise OSError(errno.EMFILE, "Too many open files")
        return self.below.open(path, flags, mode)


@pytest.fixture
def recording():
    layer = _Recording(fileio.current())
    prev = fileio.install(layer)
    yield layer
    fileio.install(prev)


def test_idle_partitions_hold_no_descriptors_beyond_the_cache(tmp_path, small_cache):
    base = _open_fds()
    logs = [open_log(tmp_path / f"p{i}") for i in range(40)]
    for i, lg in enumerate(logs):
        produce(lg, [b"v%d" % i, b"w%d" % i])
    assert len(small_cache) <= 8
    assert _open_fds() - base <= 8
    # every log reads back what it was given, reopening its file: still within the bound
    for i, lg in enumerate(logs):
        assert all_values(lg) == [b"v%d" % i, b"w%d" % i]
        produce(lg, [b"x%d" % i])
    assert _open_fds() - base <= 8
    assert small_cache.evicted >= 32
    for lg in logs:
        lg.close()
    assert _open_fds() <= base


def test_a_used_file_gets_a_second_chance(tmp_path, small_cache):
    hot = open_log(tmp_path / "hot")
    produce(hot, [b"h"])
    for i in range(30):
        produce(hot, [b"h%d" % i])  # used between every other open: never the one evicted
        produce(open_log(tmp_path / f"c{i}"), [b"c"])
        assert hot.active_segment.is_open


def test_flush_after_eviction_fsyncs_what_was_written(tmp_path, small_cache, recording):
    lg = open_log(tmp_path / "a")
    produce(lg, [b"unsynced"])
    ino = os.stat(lg.active_segment.log_path).st_ino
    for i in range(20):
        produce(open_log(tmp_path / f"o{i}"), [b"o"])
    assert not lg.active_segment.is_open  # evicted with its write not yet fsynced
    recording.synced.clear()
    lg.flush()
    assert ino in recording.synced
    assert lg.recovery_point == lg.log_end_offset == 1


def test_a_read_slice_outlives_eviction_and_deletion(tmp_path, small_cache):
    lg = open_log(tmp_path / "a")
    produce(lg, [b"kept while read"])
    sl = lg.read(0, 1 << 20, lg.log_end_offset)
    for i in range(20):
        produce(open_log(tmp_path / f"o{i}"), [b"o"])
    assert not lg.active_segment.is_open
    lg.delete()
    assert not os.path.exists(lg.path)
    data = os.pread(sl.fd, sl.size, sl.position)  # the slice's descriptor is still the segment's
    assert b"kept while read" in data


def test_out_of_descriptors_on_open_closes_cached_files_and_retries(tmp_path, small_cache, recording):
    logs = [open_log(tmp_path / f"p{i}") for i in range(6)]
    for lg in logs:
        produce(lg, [b"a"])
    recording.fail_once = 1
    lg = open_log(tmp_path / "late")
    produce(lg, [b"made"])
    assert all_values(lg) == [b"made"]
    assert sum(x.active_segment.is_open for x in logs) <= 3  # half the cache was closed


def test_log_creation_out_of_descriptors_is_a_storage_error_of_that_partition(tmp_path, recording):
    mgr = LogManager([str(tmp_path / "d")], {}, now_ms=0)
    try:
        mgr.get_or_create("ok", 0)
        recording.fail_open.add("/bad-0")
        with pytest.raises(KafkaError) as ei:
            mgr.get_or_create("bad", 0)
        assert ei.value.code == ErrorCode.KAFKA_STORAGE_ERROR
        assert "out of file descriptors" in ei.value.message and "bad-0" in ei.value.message
        assert not mgr.failure_channel.offline_dirs  # the dir is healthy: only that partition failed
        assert mgr.get("bad", 0) is None
        mgr.get_or_create("ok", 1)  # the broker goes on making logs
        recording.fail_open.clear()
        assert mgr.get_or_create("bad", 0) is not None
    finally:
        mgr.close()


def test_log_creation_on_a_failing_disk_takes_the_dir_offline(tmp_path, monkeypatch):
    mgr = LogManager([str(tmp_path / "d")], {}, now_ms=0)
    below = fileio.current()

    class Eio(fileio.Files):
        @staticmethod
        def open(path, flags, mode=0o777):
            if "/bad-0" in path:
                raise OSError(errno.EIO, "Input/output error")
            return below.open(path, flags, mode)

    prev = fileio.install(Eio())
    try:
        with pytest.raises(KafkaError) as ei:
            mgr.get_or_create("bad", 0)
        assert ei.value.code == ErrorCode.KAFKA_STORAGE_ERROR
        assert list(mgr.failure_channel.offline_dirs) == [str(tmp_path / "d")]
    finally:
        fileio.install(prev)
        mgr.close()
