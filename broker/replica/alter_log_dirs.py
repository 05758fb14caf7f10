"""Moving a replica between the log dirs of this broker while it serves (AlterReplicaLogDirs;
Kafka's ReplicaAlterLogDirsManager and ReplicaAlterLogDirsThread).

A future log in the destination dir is filled from the current log, a chunk at a time, off the
event loop (reads and writes in the mover's thread). The future log follows the current one as a
follower follows its leader: appended batches keep their offsets and epochs, and when the current
log is truncated (a follower's reconciliation) the future one is truncated to the end of the
last epoch both have (KIP-101's rule). Once caught up, holding the current log's append turn (no
append is under way or starts), the last batches are copied and the future log replaces the
current one (``LogManager.replace_current_with_future``); the old directory is deleted. Appends
that were waiting go to the new log; reads already handed out keep their descriptors.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

from broker.log.batch import parse_batches
from broker.log.log import Log
from broker.log.segment import SegmentDeletedError
from broker.replica.throttle import UNLIMITED, ReplicationQuota
from common.clock import SYSTEM, Clock
from common.errors import KafkaError

log = logging.getLogger("krafty.replica.alter_log_dirs")

TopicPartition = tuple[str, int]
RETRY_S = 0.2  # after an error, or when the swap could not be made (the cleaner is busy)


def truncation_point(current: Log, future: Log) -> int | None:
    """Where the future log must be cut to follow the current one (None: nowhere): the end, in
    the current log, of the future log's last epoch (OffsetForLeaderEpoch's answer), or the
    current log end if that is lower."""
    leo = future.log_end_offset
    if leo == future.log_start_offset:
        return None
    latest = future.leader_epoch_cache.latest_epoch()
    epoch, end = current.leader_epoch_cache.end_offset_for(latest, current.log_end_offset)
    cut = min(leo, current.log_end_offset)
    if epoch == latest or epoch < 0:
        cut = min(cut, end) if end >= 0 else cut
    else:  # the current log never had that epoch: keep what precedes it
        cut = min(cut, end, future.leader_epoch_cache.end_offset_for(epoch, leo)[1])
    return cut if cut < leo else None


class ReplicaAlterLogDirsManager:
    def __init__(self, rm, *, chunk_bytes: int = 1 << 20, rate: int = UNLIMITED, window_num: int = 11,
                 window_s: float = 1.0, clock: Clock = SYSTEM):
        self.rm = rm  # the ReplicaManager: partitions, the log manager, log-end waiters
        self.chunk_bytes = chunk_bytes
        self.clock = clock
        # replica.alter.log.dirs.io.max.bytes.per.second, over every move of the broker (Kafka's
        # AlterLogDirsReplication quota); the last bytes copied while swapping are not held back
        self.quota = ReplicationQuota(rm.broker_id, "", rate, window_num, window_s)
        self._tasks: dict[TopicPartition, asyncio.Task] = {}
        self._io = ThreadPoolExecutor(1, thread_name_prefix="alter-log-dirs")
        self.bytes_copied = 0  # for figures and tests

    def moving(self, tp: TopicPartition) -> bool:
        t = self._tasks.get(tp)
        return t is not None and not t.done()

    def start(self, tp: TopicPartition, dest: str) -> None:
        """Move ``tp``'s log to ``dest`` (a live log dir other than its own); a move to another
        dir under way is cancelled first, one to the same dir goes on."""
        logs = self.rm.logs
        fut = logs.future(*tp)
        if fut is not None and logs.dir_of(fut) == dest and self.moving(tp):
            return
        self.cancel(tp)
        fut = logs.create_future(tp[0], tp[1], dest)
        log.info("%s-%d: moving from %s to %s (future log %s)", tp[0], tp[1], logs.dir_of(logs.get(*tp)), dest,
                 fut.path)
        self._tasks[tp] = asyncio.get_running_loop().create_task(self._run(tp, fut), name=f"alter-log-dir-{tp}")

    def cancel(self, tp: TopicPartition) -> None:
        t = self._tasks.pop(tp, None)
        if t is not None:
            t.cancel()
        self.rm.logs.remove_future(*tp)

    async def _run(self, tp: TopicPartition, fut: Log) -> None:
        t0 = self.clock.monotonic()
        try:
            while True:
                part = self.rm.partitions.get(tp)
                if part is None or fut.closed or self.rm.logs.future(*tp) is not fut:
                    return  # deleted, offline, cancelled: whoever did it removed the future log
                try:
                    if await self._step(tp, part, fut):
                        log.info("%s-%d: moved to %s in %.1f s", tp[0], tp[1], self.rm.logs.dir_of(part.log),
                                 self.clock.monotonic() - t0)
                        return
                except (OSError, KafkaError) as e:
                    if self.rm.logs.report_io_error(fut, e):
                        return  # the destination failed: the move ends with its dir
                    if isinstance(e, SegmentDeletedError) or fut.closed or part.log.closed:
                        continue  # retention or a truncation under a read: read again
                    log.warning("%s-%d: move step failed (%s); retrying", tp[0], tp[1], e)
                    await asyncio.sleep(RETRY_S)
        except Exception:
            log.exception("%s-%d: the move failed; the replica stays where it is", tp[0], tp[1])
            if self.rm.logs.future(*tp) is fut:
                self.rm.logs.remove_future(*tp)
        finally:
            if self._tasks.get(tp) is asyncio.current_task():
                del self._tasks[tp]

    async def _step(self, tp: TopicPartition, part, fut: Log) -> bool:
        """Copy one chunk, or wait for new data, or swap; True once the move is done."""
        cur = part.log
        self._follow(cur, fut)
        if fut.log_end_offset < cur.log_end_offset:
            if self.quota.is_exceeded(self.clock.monotonic()):
                await asyncio.sleep(0.05)
                return False
            await self._copy_chunk(cur, fut, in_thread=True)
            return False
        # caught up: make the bytes durable off the loop, then swap holding the append turn
        await asyncio.get_running_loop().run_in_executor(self._io, fut.flush)
        async with cur.append_turn():
            if part.log is not cur or self.rm.partitions.get(tp) is not part or cur.closed or fut.closed:
                return False
            self._follow(cur, fut)
            while fut.log_end_offset < cur.log_end_offset:  # what came since: little, copied right here
                await self._copy_chunk(cur, fut, in_thread=False)
            cleaner = self.rm.logs.cleaner_busy_lock()
            if not cleaner.acquire(blocking=False):  # a compaction pass is rewriting segments: later
                await asyncio.sleep(RETRY_S)
                return False
            try:
                part.log = self.rm.logs.replace_current_with_future(*tp, now_ms=self.clock.wall_ms())
            finally:
                cleaner.release()
        self.rm.log_replaced(part)
        return True

    @staticmethod
    def _follow(cur: Log, fut: Log) -> None:
        """Keep the future log a prefix of the current one: truncations, a moved log start."""
        if fut.log_end_offset < cur.log_start_offset:
            fut.truncate_fully_and_start_at(cur.log_start_offset)
            return
        cut = truncation_point(cur, fut)
        if cut is not None:
            fut.truncate_to(cut)
            fut.leader_epoch_cache.truncate_from_end(cut)

    async def _copy_chunk(self, cur: Log, fut: Log, *, in_thread: bool) -> None:
        sl = cur.read(fut.log_end_offset, self.chunk_bytes, cur.log_end_offset)
        if sl is None or sl.size == 0:
            await asyncio.sleep(RETRY_S)
            return
        loop = asyncio.get_running_loop()
        data = await loop.run_in_executor(self._io, cur.read_bytes, sl) if in_thread else cur.read_bytes(sl)
        headers = parse_batches(data)
        if not headers:
            return
        if in_thread:
            await fut.append_as_follower_async(data, headers, self.clock.wall_ms(), self._io, lambda: not fut.closed)
        else:
            fut.append_as_follower(data, headers, self.clock.wall_ms())
        self.bytes_copied += len(data)
        if self.quota.enabled:
            self.quota.record(len(data), self.clock.monotonic())

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for t in tasks:
            t.cancel()
        for t in tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        self._tasks.clear()
        self._io.shutdown(wait=False)
