"""LogManager: loading log dirs, checkpoints, clean shutdown, periodic retention and flush."""

import os
import uuid

import pytest
from batch_builder import make_batch

from broker.log import LogManager, validate_produce_batches
from broker.log.manager import CLEAN_SHUTDOWN_FILE, LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT
from common.errors import ErrorCode, KafkaError

MAX = 1 << 20
DEFAULTS = {"segment.bytes": 1 << 20, "retention.ms": 7 * 86_400_000}


def produce(log, values, ts=1000):
    buf = make_batch(values, base_timestamp=ts)
    return log.append_as_leader(buf, validate_produce_batches(buf, MAX), 0, ts)


def test_get_or_create_places_partition_dirs_and_metadata(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    m = LogManager(dirs, DEFAULTS, now_ms=0)
    tid = uuid.uuid4()
    logs = [m.get_or_create("orders", p, tid, {}) for p in range(4)]
    assert m.get("orders", 2) is logs[2]
    assert m.get("orders", 9) is None
    placed = {os.path.dirname(lg.path) for lg in logs}
    assert placed == set(dirs)  # spread over both dirs
    meta_path = os.path.join(logs[0].path, "partition.metadata")
    assert not os.path.exists(meta_path)  # written by the flush thread, not on the event loop
    logs[0].flush()
    meta = open(meta_path).read()
    assert meta.startswith("version: 0\ntopic_id: ")
    assert os.path.basename(logs[0].path) == "orders-0"


def test_log_of_older_topic_with_same_name_is_moved_aside_as_stray(tmp_path):
    m = LogManager([str(tmp_path)], DEFAULTS, now_ms=0)
    old_id, new_id = uuid.uuid4(), uuid.uuid4()
    produce(m.get_or_create("t", 0, old_id, {}), [b"old"])
    m.close()
    m = LogManager([str(tmp_path)], DEFAULTS, now_ms=0)
    lg = m.get_or_create("t", 0, new_id, {})
    assert lg.topic_id == new_id and lg.log_end_offset == 0
    assert os.path.isdir(tmp_path / f"t-0.{old_id.hex}-stray")
    m.close()
    assert LogManager([str(tmp_path)], DEFAULTS, now_ms=0).get("t", 0).topic_id == new_id


def test_set_topic_id_mismatch_is_inconsistent_topic_id(tmp_path):
    m = LogManager([str(tmp_path)], DEFAULTS, now_ms=0)
    lg = m.get_or_create("t", 0, uuid.uuid4(), {})
    with pytest.raises(KafkaError) as e:
        lg.set_topic_id(uuid.uuid4())
    assert e.value.code == ErrorCode.INCONSISTENT_TOPIC_ID


def test_restart_after_clean_shutdown_keeps_everything(tmp_path):
    m = LogManager([str(tmp_path)], DEFAULTS, now_ms=0)
    tid = uuid.uuid4()
    lg = m.get_or_create("t", 0, tid, {})
    produce(lg, [b"a", b"b"])
    m.close()
    assert os.path.exists(tmp_path / CLEAN_SHUTDOWN_FILE)
    assert "t 0 2" in open(tmp_path / RECOVERY_POINT_CHECKPOINT).read()
    m2 = LogManager([str(tmp_path)], DEFAULTS, now_ms=0)
    assert not os.path.exists(tmp_path / CLEAN_SHUTDOWN_FILE)  # a crash from now on means recovery
    lg2 = m2.get("t", 0)
    assert lg2.log_end_offset == 2 and lg2.topic_id == tid and lg2.recovery_point == 2
    assert [x.topic for x in m2.all_logs()] == ["t"]


def test_restart_after_crash_recovers_torn_tail(tmp_path):
    m = LogManager([str(tmp_path)], DEFAULTS, now_ms=0)
    lg = m.get_or_create("t", 0, None, {})
    produce(lg, [b"a"])
    produce(lg, [b"b"])
    path = lg.active_segment.log_path
    os.truncate(path, os.path.getsize(path) - 3)  # crash: no close, torn last write
    m2 = LogManager([str(tmp_path)], DEFAULTS, now_ms=0)
    assert m2.get("t", 0).log_end_offset == 1


def test_log_start_offset_checkpoint_survives_restart(tmp_path):
    m = LogManager([str(tmp_path)], DEFAULTS, now_ms=0)
    lg = m.get_or_create("t", 0, None, {})
    for i in range(5):
        produce(lg, [b"%d" % i])
    lg.delete_records_before(3)
    m.close()
    assert "t 0 3" in open(tmp_path / LOG_START_OFFSET_CHECKPOINT).read()
    assert LogManager([str(tmp_path)], DEFAULTS, now_ms=0).get("t", 0).log_start_offset == 3


def test_retention_check_applies_topic_config(tmp_path):
    m = LogManager([str(tmp_path)], DEFAULTS, now_ms=0)
    lg = m.get_or_create("t", 0, None, {"segment.bytes": "200", "retention.ms": "1000"})
    keep = m.get_or_create("u", 0, None, {"segment.bytes": "200"})
    for i in range(5):
        produce(lg, [b"x" * 150], ts=1000 + i)
        produce(keep, [b"x" * 150], ts=1000 + i)
    assert m.retention_check(now_ms=100_000) == 5
    assert lg.log_start_offset == 5 and keep.log_start_offset == 0


def test_update_config_changes_existing_logs(tmp_path):
    m = LogManager([str(tmp_path)], DEFAULTS, now_ms=0)
    lg = m.get_or_create("t", 0, None, {})
    m.update_config("t", {"retention.ms": "5"})
    assert lg.config.retention_ms == 5 and lg.config.segment_bytes == 1 << 20


def test_flush_check_flushes_rolled_segments_and_checkpoints(tmp_path):
    m = LogManager([str(tmp_path)], DEFAULTS, now_ms=0)
    lg = m.get_or_create("t", 0, None, {"segment.bytes": "200"})
    for _ in range(3):
        produce(lg, [b"x" * 150])
    assert lg.recovery_point == 0
    assert m.flush_check(now_ms=1) == 1
    assert lg.recovery_point == lg.active_segment.base_offset == 2
    assert "t 0 2" in open(tmp_path / RECOVERY_POINT_CHECKPOINT).read()


def test_flush_check_honours_flush_ms(tmp_path):
    m = LogManager([str(tmp_path)], DEFAULTS, now_ms=0)
    lg = m.get_or_create("t", 0, None, {"flush.ms": "100"}, now_ms=0)
    produce(lg, [b"a"])
    assert m.flush_check(now_ms=50) == 0
    assert m.flush_check(now_ms=100) == 1
    assert lg.recovery_point == 1


def test_delete_removes_partition_dir(tmp_path):
    m = LogManager([str(tmp_path)], DEFAULTS, now_ms=0)
    lg = m.get_or_create("t", 0, None, {})
    produce(lg, [b"a"])
    m.delete("t", 0)
    assert m.get("t", 0) is None and not os.path.exists(lg.path)


def test_topic_names_with_dashes_and_dots_round_trip(tmp_path):
    m = LogManager([str(tmp_path)], DEFAULTS, now_ms=0)
    produce(m.get_or_create("my-topic.v2-x", 11, None, {}), [b"a"])
    m.close()
    m2 = LogManager([str(tmp_path)], DEFAULTS, now_ms=0)
    assert m2.get("my-topic.v2-x", 11).log_end_offset == 1


def test_logs_in_several_dirs_reload_from_their_dirs(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    m = LogManager(dirs, DEFAULTS, now_ms=0)
    for p in range(4):
        produce(m.get_or_create("t", p, None, {}), [b"%d" % p] * (p + 1))
    paths = {p: m.get("t", p).path for p in range(4)}
    m.close()
    m2 = LogManager(dirs, DEFAULTS, now_ms=lambda: 0)
    assert {p: m2.get("t", p).path for p in range(4)} == paths
    assert [m2.get("t", p).log_end_offset for p in range(4)] == [1, 2, 3, 4]


def test_high_watermark_checkpoint_round_trips(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    m = LogManager(dirs, DEFAULTS, now_ms=0)
    for p in range(3):
        m.get_or_create("t", p, None, {})
    m.checkpoint_high_watermarks({("t", 0): 5, ("t", 1): 7, ("t", 2): 0})
    assert m.read_high_watermarks() == {("t", 0): 5, ("t", 1): 7, ("t", 2): 0}
