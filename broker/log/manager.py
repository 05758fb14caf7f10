"""All partition logs of a broker, over its ``log.dirs``.

Per log dir, as in Kafka:
  ``recovery-point-offset-checkpoint``  topic partition offset: data below is fsynced
  ``log-start-offset-checkpoint``       topic partition offset
  ``replication-offset-checkpoint``     topic partition high-watermark (written for the
                                        replica manager: checkpoint_high_watermarks)
  ``.kafka_cleanshutdown``              written last by ``close()``, after every log, index,
                                        checkpoint and snapshot is fsynced; when present at
                                        start only the tail of each last segment is CRC-checked
                                        (a power cut can still tear what the disk had not
                                        written). Removed once loaded, so a crash afterwards
                                        means recovery on the next start.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from common.clock import SYSTEM, Clock
from common.errors import ErrorCode, KafkaError
from common.metrics import Histogram
from common.topic_names import CLUSTER_METADATA_TOPIC

from .cleaner import CleanerStopped, compact
from .dir_failure import LogDirFailureChannel, storage_cause
from .leader_epoch import fsync_dir, read_checkpoint_file, write_checkpoint_file
from .log import DELETE_DIR_SUFFIX, Log, LogConfig, parse_partition_dir_name, remove_deleted_dir
from .segment import EMFILE_ERRNOS, CorruptBatchError, reap_retired

log = logging.getLogger("krafty.log")

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
PRODUCER_ID_EXPIRATION_MS = 86_400_000
FUTURE_DIR_SUFFIX = "-future"  # a replica being moved here from another log dir (AlterReplicaLogDirs)


class LogManager:
    def __init__(self, log_dirs: list[str], default_topic_config: Mapping[str, Any], *,
                 now_ms: int | Callable[[], int] | None = None,
                 producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS, writer_threads: int = 0,
                 clock: Clock = SYSTEM):
        """``now_ms``: the wall-clock time to open the logs at (an int), or the wall clock (a
        callable); default ``clock.wall_ms`` (segments and retention go by wall-clock time)."""
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self.default_topic_config = dict(default_topic_config)
        self._clock: Callable[[], int] = now_ms if callable(now_ms) else clock.wall_ms
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._logs: dict[tuple[str, int], Log] = {}
        self._topic_configs: dict[str, dict[str, Any]] = {}
        self._configs: dict[tuple, LogConfig] = {}  # config_for: shared LogConfigs by their items
        # krafty.log.writer.threads: where async appends (Log.append_as_*_async) make their write
        # syscalls; None: on the event loop. One log's appends are serialised either way.
        self.writer = ThreadPoolExecutor(writer_threads, thread_name_prefix="log-writer") if writer_threads else None
        # flush_check runs in a worker thread: close() waits for it (and writes the checkpoints
        # after it), so the clean-shutdown marker never precedes a flush or a checkpoint
        self._flush_lock = threading.Lock()
        # a log start moved (DeleteRecords): the flush check writes log-start-offset-checkpoint
        self._log_starts_dirty = False
        # cleaner_check runs in a worker thread too: stop_cleaner() ends a pass between two
        # batches, and close() waits for it before closing the logs
        self._cleaner_stop = threading.Event()
        self._cleaner_lock = threading.Lock()
        # deleted logs' directories are removed by this thread: LogManager.delete is called on
        # the event loop, and unlinking a log's files can wait on the disk (seen: 1.2 s)
        self._removals = ThreadPoolExecutor(1, thread_name_prefix="log-delete")
        self.clock = clock
        self.flush_times = Histogram(now=self.clock.monotonic())  # fsyncs of logs (LogFlushStats)
        # KIP-858: a dir with an I/O error goes offline with its partitions; the others go on
        self.failure_channel = LogDirFailureChannel()
        self.failure_channel.add_handler(self._on_dir_offline)
        self._offline_logs: dict[tuple[str, int], str] = {}  # partitions whose log was in a failed dir -> dir
        # AlterReplicaLogDirs: future replicas being filled in another dir (``<dir>.<id>-future``), the
        # dir each partition should be made in or moved to, and moves a restart interrupted (to start again)
        self._future_logs: dict[tuple[str, int], Log] = {}
        self.preferred_dirs: dict[tuple[str, int], str] = {}
        self.interrupted_moves: dict[tuple[str, int], str] = {}
        start_ms = self._clock() if now_ms is None or callable(now_ms) else now_ms
        for d in self.log_dirs:
            try:
                os.makedirs(d, exist_ok=True)
                self._load_dir(d, start_ms)
            except (OSError, KafkaError) as e:
                if storage_cause(e) is None:
                    raise
                self.failure_channel.maybe_add_offline_dir(d, f"loading its logs failed: {e}")
        if not self.live_log_dirs:
            self._removals.shutdown(wait=False)
            raise AllLogDirsFailed(f"none of the log dirs {', '.join(self.log_dirs)} can be used "
                                   f"({'; '.join(self.failure_channel.offline_dirs.values())})")

    # --- loading --------------------------------------------------------------------------
    def _load_dir(self, d: str, now_ms: int) -> None:
        marker = os.path.join(d, CLEAN_SHUTDOWN_FILE)
        clean = os.path.exists(marker)
        recovery = _read_offsets(os.path.join(d, RECOVERY_POINT_CHECKPOINT))
        starts = _read_offsets(os.path.join(d, LOG_START_OFFSET_CHECKPOINT))
        config = LogConfig.from_topic_configs(self.default_topic_config)
        for name in sorted(os.listdir(d)):
            full = os.path.join(d, name)
            if os.path.isdir(full) and name.endswith(DELETE_DIR_SUFFIX):  # a deletion a stop interrupted
                shutil.rmtree(full, ignore_errors=True)
                continue
            if os.path.isdir(full) and name.endswith(FUTURE_DIR_SUFFIX):  # a move a stop interrupted: again
                tp = parse_partition_dir_name(name.rsplit(".", 1)[0])
                shutil.rmtree(full, ignore_errors=True)
                if tp is not None:
                    log.info("%s-%d: a move to %s was interrupted; it starts again", tp[0], tp[1], d)
                    self.preferred_dirs[tp] = self.interrupted_moves[tp] = d
                continue
            if not os.path.isdir(full) or name.endswith(("-future", "-stray")):
                continue
            tp = parse_partition_dir_name(name)
            if tp is None or tp[0] == CLUSTER_METADATA_TOPIC:  # the metadata log's own directory (raft/store.py)
                continue
            if tp in self._logs:
                log.error("partition %s-%d found in two log dirs; keeping %s", tp[0], tp[1], self._logs[tp].path)
                continue
            # No checkpoint entry means the checkpoint predates the log: it must be scanned.
            rp = recovery.get(tp, 0)
            lg = Log.open(d, tp[0], tp[1], config, now_ms=now_ms, recovery_point=rp,
                          log_start_offset=starts.get(tp, 0), clean_shutdown=clean and tp in recovery)
            self._logs[tp] = lg
        if clean:
            os.unlink(marker)
            fsync_dir(d)

    # --- log dir failures (KIP-858) ----------------------------------------------------------
    @property
    def live_log_dirs(self) -> list[str]:
        return [d for d in self.log_dirs if not self.failure_channel.is_offline(d)]

    @property
    def offline_log_dirs(self) -> list[str]:
        return [d for d in self.log_dirs if self.failure_channel.is_offline(d)]

    def report_io_error(self, where: Log | str, exc: BaseException) -> bool:
        """An operation on a log (or in a log dir) raised ``exc``: if it is a storage failure
        (storage_cause), its dir goes offline (once). True if it is one: the caller answers
        KAFKA_STORAGE_ERROR. Thread-safe."""
        if storage_cause(exc) is None:
            return False
        d = where if isinstance(where, str) else os.path.dirname(where.path)
        self.failure_channel.maybe_add_offline_dir(d, f"{exc}")
        return True

    def offline_dir_of(self, topic: str, partition: int) -> str | None:
        """The failed log dir that held this partition's log, if it did."""
        return self._offline_logs.get((topic, partition))

    def _on_dir_offline(self, d: str) -> None:
        """Kafka's LogManager.handleLogDirFailure: the dir's logs leave the map and their files
        are released without flushing (a write there can fail or hang); reads already handed
        out keep their descriptors."""
        n = 0
        for tp, lg in list(self._logs.items()):
            if os.path.dirname(lg.path) != d:
                continue
            del self._logs[tp]
            self._offline_logs[tp] = d
            _release_files(lg)
            n += 1
        for tp, fut in list(self._future_logs.items()):  # moves to or from the failed dir end
            if self.dir_of(fut) == d or tp in self._offline_logs:
                self.remove_future(*tp)
        log.error("log dir %s is offline: %d partitions in it stopped (KAFKA_STORAGE_ERROR to clients)", d, n)

    # --- lookup and lifecycle -------------------------------------------------------------
    def get(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> list[Log]:
        return list(self._logs.values())

    def config_for(self, topic: str, topic_config: Mapping[str, Any] | None = None) -> LogConfig:
        merged = dict(self.default_topic_config)
        merged.update(self._topic_configs.get(topic, {}))
        if topic_config:
            merged.update(topic_config)
        # one LogConfig per distinct config, shared by the logs that have it (never mutated: a
        # change replaces a log's config): not one per partition
        try:
            key = tuple(sorted(merged.items()))
            cfg = self._configs.get(key)
        except TypeError:  # an unhashable value
            return LogConfig.from_topic_configs(merged)
        if cfg is None:
            if len(self._configs) >= 1024:
                self._configs.clear()
            cfg = self._configs[key] = LogConfig.from_topic_configs(merged)
        return cfg

    def get_or_create(self, topic: str, partition: int, topic_id: uuid.UUID | None = None,
                      topic_config: Mapping[str, Any] | None = None, *, now_ms: int | None = None,
                      is_new: bool = True) -> Log:
        """The log of a partition, created in the least loaded log dir if new. An existing log
        takes the given topic config. An existing log with a different topic id is a
        leftover of a deleted topic: it is renamed ``...-stray`` and a new log created.

        KAFKA_STORAGE_ERROR for a partition whose log was in a failed dir, and (Kafka's
        getOrCreateLog) for one that is missing while a dir is offline, unless ``is_new`` (the
        replica was just assigned): its log may be in the failed dir, and an empty log made
        elsewhere could be elected leader over the data it holds."""
        if topic_config is not None:
            self._topic_configs[topic] = dict(topic_config)
        lg = self._logs.get((topic, partition))
        if lg is not None and topic_id is not None and lg.topic_id is not None and lg.topic_id != topic_id:
            self._make_stray(lg, topic_id)
            lg = None
        if lg is not None:
            if topic_id is not None:
                lg.set_topic_id(topic_id)
            if topic_config is not None:
                lg.config = self.config_for(topic)
            return lg
        failed = self._offline_logs.get((topic, partition))
        if failed is not None or (not is_new and self.failure_channel.offline_dirs):
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"Can not create log for {topic}-{partition} because log directory "
                             f"{failed or ', '.join(self.offline_log_dirs)} is offline")
        live = self.live_log_dirs
        if not live:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, "every log dir is offline")
        if self.preferred_dirs.get((topic, partition)) in live:  # AlterReplicaLogDirs named it first
            d = self.preferred_dirs.pop((topic, partition))
        elif len(live) == 1:  # the usual case: no O(n) scan per new partition
            d = live[0]
        else:
            d = min(live, key=lambda x: sum(1 for lg in self._logs.values() if lg.path.startswith(x + os.sep)))
        now = self._clock() if now_ms is None else now_ms
        # made durable by the flush thread: a CreateTopics of thousands of partitions must not
        # stall the event loop on three fsyncs per log
        try:
            lg = Log.open(d, topic, partition, self.config_for(topic), topic_id=topic_id, now_ms=now, defer_sync=True)
        except OSError as e:
            raise self._creation_failed(topic, partition, d, e) from e
        self._logs[(topic, partition)] = lg
        return lg

    def _creation_failed(self, topic: str, partition: int, d: str, e: OSError) -> KafkaError:
        """Kafka's getOrCreateLog on an IOException: KAFKA_STORAGE_ERROR, the partition goes
        offline (the replica manager's _become). A failing disk takes its dir offline too; the
        process being out of file descriptors (EMFILE/ENFILE) does not: the dir is healthy,
        only this partition could not be made."""
        if e.errno in EMFILE_ERRNOS:
            return KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                              f"Can not create log for {topic}-{partition} in {d}: out of file descriptors ({e}); "
                              f"raise the open-files limit (ulimit -n) or lower krafty.log.open.files.max, "
                              f"then restart the broker")
        self.report_io_error(d, e)
        return KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"Can not create log for {topic}-{partition} in {d}: {e}")

    def _make_stray(self, lg: Log, topic_id: uuid.UUID) -> None:
        """The partition on disk belongs to an older topic of the same name (deleted and
        recreated while we were away): set it aside as ``<dir>.<old id>-stray``, like Kafka."""
        log.warning("log %s has topic id %s but the metadata says %s: moving it aside as stray",
                    lg.path, lg.topic_id, topic_id)
        lg.close()
        del self._logs[(lg.topic, lg.partition)]
        assert lg.topic_id is not None
        os.rename(lg.path, f"{lg.path}.{lg.topic_id.hex}-stray")
        fsync_dir(os.path.dirname(lg.path))

    def delete(self, topic: str, partition: int) -> None:
        self._offline_logs.pop((topic, partition), None)  # in a failed dir: removed when it is back (stray)
        self.preferred_dirs.pop((topic, partition), None)
        self.remove_future(topic, partition)
        lg = self._logs.pop((topic, partition), None)
        if lg is not None:
            self._delete_later(lg)

    def _delete_later(self, lg: Log) -> None:
        """Delete a log: renamed ``-delete`` here, its files removed by the removal thread."""
        doomed = lg.delete(remove=False, unique=self.clock.uuid4())
        if doomed is None:
            return
        try:
            self._removals.submit(remove_deleted_dir, doomed)
        except RuntimeError:  # closed: the thread is gone
            remove_deleted_dir(doomed)

    # --- future replicas (AlterReplicaLogDirs) ---------------------------------------------------
    def dir_of(self, lg: Log) -> str:
        return os.path.dirname(lg.path)

    def future(self, topic: str, partition: int) -> Log | None:
        return self._future_logs.get((topic, partition))

    def future_logs(self) -> list[Log]:
        return list(self._future_logs.values())

    def create_future(self, topic: str, partition: int, dest: str, *, now_ms: int | None = None) -> Log:
        """A future replica of the partition's log in ``dest`` (Kafka's ``<topic>-<partition>.<id>-future``
        directory), empty from the current log's start offset on; a copier fills it."""
        tp = (topic, partition)
        cur = self._logs[tp]
        now = self._clock() if now_ms is None else now_ms
        fut = Log.open(dest, topic, partition, self.config_for(topic), topic_id=cur.topic_id, now_ms=now,
                       name=f"{topic}-{partition}.{self.clock.uuid4().hex}{FUTURE_DIR_SUFFIX}")
        if cur.log_start_offset > 0:
            fut.truncate_fully_and_start_at(cur.log_start_offset)
        self._future_logs[tp] = fut
        return fut

    def remove_future(self, topic: str, partition: int) -> None:
        """Cancel a move: the future replica goes (its directory removed off the event loop)."""
        fut = self._future_logs.pop((topic, partition), None)
        if fut is None:
            return
        if self.failure_channel.is_offline(self.dir_of(fut)):
            _release_files(fut)
            return
        self._delete_later(fut)

    def replace_current_with_future(self, topic: str, partition: int, *, now_ms: int | None = None) -> Log:
        """Kafka's replaceCurrentWithFutureLog, once the future replica has every offset of the
        current one: it takes the current's epochs it lacks (an epoch with no batch yet) and log
        start, is closed (fsynced), renamed to the partition's directory in its dir and opened
        again as the partition's log; the current log is deleted (reads under way keep their
        descriptors). The caller holds the current log's append turn: nothing is appended meanwhile."""
        tp = (topic, partition)
        cur, fut = self._logs[tp], self._future_logs[tp]
        if fut.log_end_offset != cur.log_end_offset:
            raise RuntimeError(f"{fut} has not caught up with {cur}")
        latest = fut.leader_epoch_cache.latest_epoch()
        for e in cur.leader_epoch_cache.entries:
            if e.epoch > latest:
                fut.leader_epoch_cache.assign(e.epoch, e.start_offset)
        if cur.log_start_offset > fut.log_start_offset:
            fut.delete_records_before(cur.log_start_offset)
        end, start = fut.log_end_offset, fut.log_start_offset
        fut.close()
        dest = self.dir_of(fut)
        final = os.path.join(dest, os.path.basename(cur.path))
        os.rename(fut.path, final)
        fsync_dir(dest)
        del self._future_logs[tp]
        now = self._clock() if now_ms is None else now_ms
        new = Log.open(dest, topic, partition, self.config_for(topic), topic_id=cur.topic_id, now_ms=now,
                       recovery_point=end, log_start_offset=start, clean_shutdown=True)
        self._logs[tp] = new
        self._delete_later(cur)
        self.preferred_dirs.pop(tp, None)
        return new

    def removals_done(self) -> None:
        """Wait until the directories of the logs deleted so far are removed."""
        self._removals.submit(lambda: None).result()

    def update_config(self, topic: str, topic_config: Mapping[str, Any]) -> None:
        self._topic_configs[topic] = dict(topic_config)
        cfg = self.config_for(topic)
        for (t, _p), lg in self._logs.items():
            if t == topic:
                lg.config = cfg

    # --- periodic work -----------------------------------------------------------------------
    def retention_check(self, now_ms: int, high_watermarks: Mapping[tuple[str, int], int] | None = None) -> int:
        """Apply retention to every log (bounded by its high watermark when given) and expire
        idle producer ids; returns the number of segments deleted."""
        reap_retired()
        deleted = 0
        for tp, lg in list(self._logs.items()):
            hw = high_watermarks.get(tp) if high_watermarks else None
            try:
                deleted += lg.apply_retention(now_ms, hw)
                lg.remove_expired_producers(now_ms, self.producer_id_expiration_ms)
            except (OSError, KafkaError) as e:
                if not self.report_io_error(lg, e):
                    raise
        if deleted:
            self.checkpoint_log_start_offsets()
        return deleted

    def cleaner_check(self, now_ms: int, high_watermarks: Mapping[tuple[str, int], int] | None = None,
                      *, force: bool = False) -> int:
        """Compact the logs of compacted topics that are dirty enough (log.cleaner.backoff.ms
        in Kafka: 15 s). CPU-heavy (decodes records): run it in a worker thread. Returns
        the number of segments rewritten; stops early (between two batches) after
        ``stop_cleaner()``."""
        n = 0
        with self._cleaner_lock:
            for tp, lg in list(self._logs.items()):
                if self._cleaner_stop.is_set():
                    break
                if lg.closed or not lg.config.compact_enabled:
                    continue
                hw = high_watermarks.get(tp) if high_watermarks else None
                try:
                    n += compact(lg, now_ms, high_watermark=hw, force=force, stop=self._cleaner_stop).segments
                except CleanerStopped:
                    break
                except CorruptBatchError as e:  # not cleaned (a rewrite would drop what follows it); others go on
                    log.error("%s-%d: not compacted: %s", tp[0], tp[1], e)
                except Exception as e:  # anything else: that log is left as it is, every other log is still compacted
                    if self.report_io_error(lg, e) or lg.closed:  # deleted or closed meanwhile: nothing to compact any more
                        continue
                    log.exception("%s-%d: compaction failed; the log is left uncompacted this time", tp[0], tp[1])
        return n

    def cleaner_busy_lock(self) -> threading.Lock:
        """Held by a compaction pass: a replica move swaps logs only while it can take it."""
        return self._cleaner_lock

    def stop_cleaner(self) -> None:
        """End the running compaction pass soon (between two batches) and start no other."""
        self._cleaner_stop.set()

    def flush_check(self, now_ms: int) -> int:
        """fsync logs whose flush.ms elapsed or that rolled a segment since their last flush, and
        new logs and epoch entries not yet durable; then checkpoint recovery points. Returns the number of logs flushed. Blocking: run it
        in a worker thread."""
        with self._flush_lock:
            return self._flush_check(now_ms)

    def _flush_check(self, now_ms: int) -> int:
        flushed = 0
        lowered = False
        for lg in list(self._logs.values()):
            try:
                n, low = self._flush_one(lg, now_ms)
            except (OSError, KafkaError) as e:
                if not self.report_io_error(lg, e):
                    raise
                continue
            flushed += n
            lowered |= low
        if flushed or lowered:
            self.checkpoint_recovery_points()
        if self._log_starts_dirty:
            self._log_starts_dirty = False
            self.checkpoint_log_start_offsets()
        return flushed

    def _flush_one(self, lg: Log, now_ms: int) -> tuple[int, bool]:
        """flush_check for one log: (1 if flushed, whether its recovery point was lowered)."""
        flushed = 0
        lowered = False
        if lg.recovery_point_lowered:
            # a truncation cut below the checkpointed recovery point: the checkpoint must stop
            # vouching for those bytes before new ones are written there (Kafka's truncateTo)
            lg.recovery_point_lowered = False
            lowered = True
        if lg.closed:
            return flushed, lowered
        due = now_ms - lg.last_flush_ms >= lg.config.flush_ms and lg.unflushed_messages > 0
        rolled = lg.segments[-1].base_offset > lg.recovery_point
        t0 = self.clock.monotonic()
        if due:
            lg.flush(now_ms=now_ms)
            flushed += 1
        elif rolled:
            lg.flush(up_to=lg.segments[-1].base_offset)
            flushed += 1
        if due or rolled:
            self.flush_times.record(self.clock.monotonic() - t0)  # LogFlushRateAndTimeMs
        elif lg.needs_sync:
            lg.flush(up_to=lg.recovery_point)  # just the new directory / epoch entries
        return flushed, lowered

    def log_start_moved(self) -> None:
        """A log start offset moved (DeleteRecords): the next flush check checkpoints it, off the
        event loop (Kafka checkpoints log starts periodically too)."""
        self._log_starts_dirty = True

    def writeback(self, min_bytes: int) -> int:
        """Start writeback of the active segments that have ``min_bytes`` of whole pages
        appended since their last writeback (``LogSegment.start_writeback``). Blocking: run
        it in a worker thread. Returns the bytes handed to the kernel."""
        n = 0
        for lg in list(self._logs.values()):
            seg = lg.segments[-1]
            if seg.size - seg.writeback_pos >= min_bytes and not lg.closed:  # cheap test first: 10k logs
                try:
                    n += seg.start_writeback(min_bytes)
                except OSError as e:
                    if not self.report_io_error(lg, e):
                        raise
        return n

    # --- checkpoints ---------------------------------------------------------------------------
    def logs_by_dir(self) -> dict[str, list[Log]]:
        """Every log dir (``log.dirs``, absolute) and the logs it holds (DescribeLogDirs)."""
        return self._by_dir()

    def _by_dir(self) -> dict[str, list[Log]]:
        out: dict[str, list[Log]] = {d: [] for d in self.live_log_dirs}
        for lg in self._logs.values():
            out.setdefault(os.path.dirname(lg.path), []).append(lg)
        return out

    def _write_checkpoint(self, d: str, name: str, rows: list[tuple[str, int, int]]) -> None:
        """A checkpoint file of a live dir; an I/O error takes the dir offline (Kafka's
        OffsetCheckpointFile reports to the LogDirFailureChannel)."""
        try:
            _write_offsets(os.path.join(d, name), rows)
        except OSError as e:
            if not self.report_io_error(d, e):
                raise

    def checkpoint_recovery_points(self) -> None:
        for d, logs in self._by_dir().items():
            self._write_checkpoint(d, RECOVERY_POINT_CHECKPOINT,
                                   [(lg.topic, lg.partition, lg.recovery_point) for lg in logs])

    def checkpoint_log_start_offsets(self) -> None:
        for d, logs in self._by_dir().items():
            self._write_checkpoint(d, LOG_START_OFFSET_CHECKPOINT,
                                   [(lg.topic, lg.partition, lg.log_start_offset) for lg in logs])

    def checkpoint_high_watermarks(self, high_watermarks: Mapping[tuple[str, int], int]) -> None:
        """Write Kafka's ``replication-offset-checkpoint`` (high watermark per partition) in
        each log dir, for the partitions that dir holds."""
        for d, logs in self._by_dir().items():
            rows = [(lg.topic, lg.partition, high_watermarks[(lg.topic, lg.partition)]) for lg in logs
                    if (lg.topic, lg.partition) in high_watermarks]
            self._write_checkpoint(d, REPLICATION_OFFSET_CHECKPOINT, rows)

    def read_high_watermarks(self) -> dict[tuple[str, int], int]:
        """The checkpointed high watermarks (to restore after a restart, capped by the log end)."""
        out: dict[tuple[str, int], int] = {}
        for d in self.live_log_dirs:
            out.update(_read_offsets(os.path.join(d, REPLICATION_OFFSET_CHECKPOINT)))
        return out

    def close(self) -> None:
        """Stop the log cleaner, flush and close every log, write the checkpoints, then the
        clean-shutdown markers. The marker comes strictly after: a start that finds it trusts
        the data it covers."""
        self.stop_cleaner()
        with self._cleaner_lock, self._flush_lock:
            self._close()

    def _close(self) -> None:
        # removals not started yet are left to the next start (it removes every "-delete" dir)
        self._removals.shutdown(wait=False, cancel_futures=True)
        for fut in self._future_logs.values():  # a move under way starts again after the restart
            _release_files(fut)
        for lg in list(self._logs.values()):
            try:
                lg.close()
            except (OSError, KafkaError) as e:  # its dir gets no clean-shutdown marker: recovery at the next start
                if not self.report_io_error(lg, e):
                    raise
        if self.writer is not None:
            self.writer.shutdown(wait=True)
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        for d in self.live_log_dirs:
            try:
                with open(os.path.join(d, CLEAN_SHUTDOWN_FILE), "w") as f:
                    f.flush()
                    os.fsync(f.fileno())
                fsync_dir(d)
            except OSError as e:
                if not self.report_io_error(d, e):
                    raise


class AllLogDirsFailed(RuntimeError):
    """Every log dir failed: the broker cannot go on (Kafka halts it)."""


def _release_files(lg: Log) -> None:
    """Close a log of a failed dir without writing anything (Kafka's closeHandlers): the
    appends and reads that follow see it closed; descriptors held by reads stay valid."""
    lg.abort_append()
    with lg.lock:
        for s in lg.segments:
            s.detach()
        lg.closed = True


def _read_offsets(path: str) -> dict[tuple[str, int], int]:
    rows = read_checkpoint_file(path, 3)
    if rows is None:
        return {}
    out = {}
    for topic, p, off in rows:
        try:
            out[(topic, int(p))] = int(off)
        except ValueError:
            continue
    return out


def _write_offsets(path: str, rows: list[tuple[str, int, int]]) -> None:
    write_checkpoint_file(path, 0, [f"{t} {p} {o}" for t, p, o in rows])
