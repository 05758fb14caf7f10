"""Log dir failures (KIP-858): the failure channel and the LogManager taking one dir offline."""

import errno
import os
import uuid

import pytest
from batch_builder import make_batch
from disk_faults import failing_dir

from broker.log import LogManager, validate_produce_batches
from broker.log.dir_failure import LogDirFailureChannel, storage_cause
from broker.log.manager import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT, AllLogDirsFailed
from common.errors import ErrorCode, KafkaError

MAX = 1 << 20
DEFAULTS = {"segment.bytes": 1 << 20, "retention.ms": 7 * 86_400_000}


def produce(log, values):
    buf = make_batch(values, base_timestamp=1000)
    return log.append_as_leader(buf, validate_produce_batches(buf, MAX), 0, 1000)


def two_dirs(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    m = LogManager(dirs, DEFAULTS, now_ms=0)
    tid = uuid.uuid4()
    logs = [m.get_or_create("t", p, tid, {}) for p in range(4)]
    by_dir = {d: [lg for lg in logs if os.path.dirname(lg.path) == d] for d in dirs}
    assert all(by_dir.values())
    return m, dirs, tid, by_dir


def test_storage_cause_takes_disk_errnos_and_not_races_with_deletion():
    assert storage_cause(OSError(errno.EIO, "x")) is not None
    assert storage_cause(OSError(errno.ENOSPC, "x")) is not None
    wrapped = KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, "write failed")
    wrapped.__cause__ = OSError(errno.EIO, "x")
    assert storage_cause(wrapped) is not None
    assert storage_cause(OSError(errno.ENOENT, "x")) is None  # a segment deleted under a read
    assert storage_cause(OSError(errno.EBADF, "x")) is None
    assert storage_cause(KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, "no cause")) is None
    assert storage_cause(KafkaError(ErrorCode.CORRUPT_MESSAGE, "bad batch")) is None


def test_failure_channel_reports_each_dir_once_to_every_handler():
    ch = LogDirFailureChannel()
    seen = []
    ch.add_handler(lambda d: seen.append(("first", d)))
    ch.add_handler(lambda d: seen.append(("second", d)))
    assert ch.maybe_add_offline_dir("/a", "EIO")
    assert not ch.maybe_add_offline_dir("/a", "EIO again")
    assert ch.maybe_add_offline_dir("/b", "ENOSPC")
    assert seen == [("first", "/a"), ("second", "/a"), ("first", "/b"), ("second", "/b")]
    assert ch.is_offline("/a") and set(ch.offline_dirs) == {"/a", "/b"}


async def test_failure_channel_runs_handlers_on_the_loop_not_in_the_failing_thread():
    import asyncio
    import threading
    ch = LogDirFailureChannel()
    ch.bind(asyncio.get_running_loop())
    threads = []
    done = asyncio.Event()
    ch.add_handler(lambda d: (threads.append(threading.current_thread()), done.set()))
    t = threading.Thread(target=ch.maybe_add_offline_dir, args=("/a", "EIO"))
    t.start()
    t.join()
    await asyncio.wait_for(done.wait(), 5)
    assert threads == [threading.main_thread()]


def test_write_error_takes_only_its_dir_offline(tmp_path, monkeypatch):
    m, (a, b), tid, by_dir = two_dirs(tmp_path)
    bad, good = by_dir[a][0], by_dir[b][0]
    produce(good, [b"kept"])
    with failing_dir(monkeypatch, a), pytest.raises(KafkaError) as e:
        produce(bad, [b"lost"])
    assert e.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert m.report_io_error(bad, e.value)
    assert m.offline_log_dirs == [a] and m.live_log_dirs == [b]
    # the dir's logs are gone from the map and closed; the other dir's are served
    assert all(m.get(lg.topic, lg.partition) is None and lg.closed for lg in by_dir[a])
    assert all(m.offline_dir_of(lg.topic, lg.partition) == a for lg in by_dir[a])
    assert m.get(good.topic, good.partition) is good
    produce(good, [b"more"])
    # a log of the failed dir is not made again elsewhere; a brand-new partition goes to the live dir
    with pytest.raises(KafkaError) as e:
        m.get_or_create(bad.topic, bad.partition, tid, {})
    assert e.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    new = m.get_or_create("fresh", 0, uuid.uuid4(), {})
    assert os.path.dirname(new.path) == b
    # a partition missing while a dir is offline is made only if it was just assigned (is_new)
    with pytest.raises(KafkaError):
        m.get_or_create("old", 0, uuid.uuid4(), {}, is_new=False)
    assert m.logs_by_dir().keys() == {b}


def test_flush_check_error_takes_the_dir_offline_and_flushes_the_others(tmp_path, monkeypatch):
    m, (a, b), _tid, by_dir = two_dirs(tmp_path)
    for lg in by_dir[a] + by_dir[b]:
        produce(lg, [b"x"])
        lg.config = lg.config.__class__.from_topic_configs({**DEFAULTS, "flush.ms": 0})
    with failing_dir(monkeypatch, a, errno.ENOSPC):
        assert m.flush_check(2**62) == len(by_dir[b])
    assert m.offline_log_dirs == [a]
    assert os.path.exists(os.path.join(b, RECOVERY_POINT_CHECKPOINT))


def test_close_writes_the_clean_shutdown_marker_only_in_live_dirs(tmp_path, monkeypatch):
    m, (a, b), _tid, by_dir = two_dirs(tmp_path)
    m.failure_channel.maybe_add_offline_dir(a, "EIO")
    m.close()
    assert os.path.exists(os.path.join(b, CLEAN_SHUTDOWN_FILE))
    assert not os.path.exists(os.path.join(a, CLEAN_SHUTDOWN_FILE))  # recovery there at the next start


def test_restart_with_the_dir_healthy_brings_its_partitions_back(tmp_path, monkeypatch):
    m, (a, b), tid, by_dir = two_dirs(tmp_path)
    lg = by_dir[a][0]
    produce(lg, [b"one", b"two"])
    lg.flush()
    m.failure_channel.maybe_add_offline_dir(a, "EIO")
    m.close()
    m2 = LogManager([a, b], DEFAULTS, now_ms=0)
    back = m2.get(lg.topic, lg.partition)
    assert back is not None and back.log_end_offset == 2 and m2.offline_log_dirs == []
    m2.close()


def test_a_dir_failing_at_startup_is_offline_and_the_other_loads(tmp_path, monkeypatch):
    m, (a, b), _tid, by_dir = two_dirs(tmp_path)
    m.close()
    from broker.log import manager as manager_mod
    load = manager_mod.LogManager._load_dir

    def failing_load(self, d, now_ms):
        if d == a:
            raise OSError(errno.EIO, "Input/output error")
        return load(self, d, now_ms)
    monkeypatch.setattr(manager_mod.LogManager, "_load_dir", failing_load)
    m2 = LogManager([a, b], DEFAULTS, now_ms=0)
    assert m2.offline_log_dirs == [a]
    assert {lg.partition for lg in m2.all_logs()} == {lg.partition for lg in by_dir[b]}
    m2.close()
    with pytest.raises(AllLogDirsFailed):
        LogManager([a], DEFAULTS, now_ms=0)
