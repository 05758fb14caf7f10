"""The replica move's pure rule: a future log follows the current one like a follower its leader
(KIP-101): it is cut back to the end, in the current log, of its own last epoch."""

from batch_builder import make_batch

from broker.log import Log, LogConfig, parse_batches, validate_produce_batches
from broker.replica.alter_log_dirs import ReplicaAlterLogDirsManager, truncation_point


def _log(d, name):
    return Log.open(str(d), "t", 0, LogConfig.from_topic_configs({}), now_ms=0, name=name)


def _produce(lg, n, epoch):
    for i in range(n):
        buf = make_batch([b"v%d" % i])
        lg.append_as_leader(buf, validate_produce_batches(buf, 1 << 20), epoch, 0)


def _copy(cur, fut):
    while fut.log_end_offset < cur.log_end_offset:
        data = cur.read_bytes(cur.read(fut.log_end_offset, 1 << 20, cur.log_end_offset))
        fut.append_as_follower(data, parse_batches(data), 0)


def test_future_log_is_cut_back_where_the_current_log_diverged(tmp_path):
    cur, fut = _log(tmp_path, "t-0"), _log(tmp_path, "t-0.x-future")
    _produce(cur, 10, 0)
    _produce(cur, 5, 1)
    _copy(cur, fut)
    assert truncation_point(cur, fut) is None  # a prefix: nothing to cut
    # the current log is truncated (a follower reconciling) to 12 and goes on in epoch 2
    cur.truncate_to(12)
    cur.leader_epoch_cache.truncate_from_end(12)
    _produce(cur, 4, 2)
    assert truncation_point(cur, fut) == 12
    ReplicaAlterLogDirsManager._follow(cur, fut)
    assert fut.log_end_offset == 12
    _copy(cur, fut)
    assert fut.log_end_offset == cur.log_end_offset == 16
    assert [(e.epoch, e.start_offset) for e in fut.leader_epoch_cache.entries] == [(0, 0), (1, 10), (2, 12)]


def test_future_log_restarts_at_a_log_start_beyond_it(tmp_path):
    cur, fut = _log(tmp_path, "t-0"), _log(tmp_path, "t-0.y-future")
    _produce(cur, 10, 0)
    _copy(cur, fut)
    cur.truncate_fully_and_start_at(20)  # e.g. a follower whose leader's log start passed it
    _produce(cur, 3, 1)
    ReplicaAlterLogDirsManager._follow(cur, fut)
    assert fut.log_start_offset == fut.log_end_offset == 20
    _copy(cur, fut)
    assert fut.log_end_offset == cur.log_end_offset == 23
