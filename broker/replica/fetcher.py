"""Replica fetchers: the follower side of replication, ``num.replica.fetchers`` tasks per leader
broker (a partition goes to one of them by Kafka's fetcher id), each with its own connection and
fetch session.

Each task drives the ``FollowerFetchState`` of every partition it follows from that leader
(broker/replica/follower.py holds the rules) and does the I/O: OffsetForLeaderEpoch to
reconcile diverged logs (KIP-101/279), Fetch with our replica id (served by the leader's
ordinary Fetch path, sendfile included), ListOffsets for the leader's log end when out of
range, and applies the resulting truncations, appends and high watermarks to the logs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from broker.apis import wire
from broker.fetch_session import FetchSessionHandler, PartitionData
from broker.group.records import java_string_hashcode
from broker.log.batch import parse_batches
from broker.log.log import AppendAborted
from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from broker.replica.follower import (
    AppendRecords,
    FetchAnswer,
    FetchRequest,
    FollowerFetchState,
    IncrementLogStartOffset,
    OffsetsForLeaderEpochRequest,
    SetHighWatermark,
    Truncate,
    TruncateFullyAndStartAt,
)
from common.clock import SYSTEM, Clock, wait_event
from common.errors import ErrorCode, KafkaError

log = logging.getLogger("krafty.replica.fetcher")

TopicPartition = tuple[str, int]
FETCH_VERSION = 12  # flexible, topic names, diverging epochs (KIP-320)
OFLE_VERSION = 4
LIST_OFFSETS_VERSION = 4
# how often a fetcher looks at its parked partitions' logs (a batch found corrupt, a log start
# moved by retention): the only time a round walks them
PARKED_SWEEP_MS = 1000


def fetcher_id(tp: TopicPartition, num_fetchers: int) -> int:
    """Kafka's AbstractFetcherManager.getFetcherId: Utils.abs(31 * topic.hashCode() + partition)
    % num.replica.fetchers, in Java's 32-bit int arithmetic."""
    h = (31 * java_string_hashcode(tp[0]) + tp[1]) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if h == -(1 << 31) else abs(h)) % num_fetchers


class FetcherThread:
    def __init__(self, manager: ReplicaFetcherManager, leader_id: int, fetcher_id: int = 0):
        self.m = manager
        self.leader_id = leader_id
        self.fetcher_id = fetcher_id
        self.states: dict[TopicPartition, FollowerFetchState] = {}  # every partition it follows
        # A round walks only the active partitions. A partition whose incremental answer was
        # "nothing new" is parked with its request, which stays in flight in the leader's fetch
        # session (KIP-227) until an answer names it: idle partitions cost nothing per round.
        self.active: dict[TopicPartition, FollowerFetchState] = {}
        self.parked: dict[TopicPartition, FetchRequest] = {}
        self.dropped: set[TopicPartition] = set()  # no longer followed: to forget from the session
        self._sweep_at = 0
        self.wake = asyncio.Event()
        self.conn: KafkaConnection | None = None
        self.session = FetchSessionHandler()  # one fetch session per leader broker (KIP-227)
        self.failing = False  # the last round's request failed: say so once per outage, not every round
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"fetcher-{fetcher_id}-{leader_id}")

    def add(self, tp: TopicPartition, fs: FollowerFetchState) -> None:
        self.remove(tp)
        self.states[tp] = self.active[tp] = fs
        self.dropped.discard(tp)

    def remove(self, tp: TopicPartition) -> FollowerFetchState | None:
        self.active.pop(tp, None)
        self.parked.pop(tp, None)
        fs = self.states.pop(tp, None)
        if fs is not None:
            self.dropped.add(tp)
        return fs

    def _unpark(self, tp: TopicPartition) -> tuple[FollowerFetchState, FetchRequest] | None:
        act = self.parked.pop(tp, None)
        fs = self.states.get(tp)
        if act is None or fs is None:
            return None
        self.active[tp] = fs
        return fs, act

    def _unpark_all(self) -> None:
        """The session ended (an error, a lost connection): no request is held any more."""
        for tp in list(self.parked):
            got = self._unpark(tp)
            if got is not None:
                got[0].withdraw(got[1])

    def _sweep(self, now: int) -> None:
        """Parked partitions whose log changed under their request (a corrupt batch found by a
        read, a log start moved by retention, another log after a move between dirs) or that
        a follower throttle now covers go back to the round."""
        self._sweep_at = now + PARKED_SWEEP_MS
        quota_on = self.m.rm.follower_quota.enabled
        for tp, act in list(self.parked.items()):
            part = self.m.rm.partitions.get(tp)
            lg = part.log if part is not None else None
            if (lg is None or quota_on or lg.damaged_offset is not None or lg.log_end_offset != act.fetch_offset
                    or lg.log_start_offset != act.log_start_offset):
                got = self._unpark(tp)
                if got is not None:
                    got[0].withdraw(got[1])
                else:
                    self.parked.pop(tp, None)

    def _connection(self) -> KafkaConnection | None:
        ep = self.m.endpoint_of(self.leader_id)
        if ep is None:
            return None
        if self.conn is None or (self.conn.host, self.conn.port) != ep:
            if self.conn is not None:
                self.conn.close()
            self.conn = KafkaConnection(ep[0], ep[1], client_id=f"broker-{self.m.broker_id}-fetcher",
                                        security=self.m.security, clock=self.m.clock)
        return self.conn

    async def _run(self) -> None:
        while True:
            try:
                await self._round()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("fetcher for leader %d failed a round", self.leader_id)
                await asyncio.sleep(1)

    async def _round(self) -> None:
        now = self.m.clock.monotonic_ms()
        if self.parked and now >= self._sweep_at:
            self._sweep(now)
        ofle, fetches, idle = [], [], []
        for tp, fs in list(self.active.items()):
            part = self.m.rm.partitions.get(tp)
            if part is None:
                continue
            damaged = part.log.damaged_offset
            if damaged is not None:
                holding = fs.holding
                effects = fs.on_local_damage(part.log, damaged, self.m.broker_id in part.state.isr)
                if fs.holding is not None and holding is None:
                    log.warning("%s-%d: our copy does not parse from offset %d on: once the leader takes us out of "
                                "the ISR (we fetch from there, so it sees us lag), we truncate to it and fetch it "
                                "again", *tp, damaged)
                if effects:
                    await self.m.apply(tp, part, fs, effects, None, f"our copy does not parse from offset {damaged} on")
            quota = self.m.rm.follower_quota
            if quota.enabled and self._follower_throttled(tp, part) and quota.is_exceeded(self.m.clock.monotonic()):
                idle.append(tp)
                continue  # out of sync and throttled (follower.replication.throttled.*): not this round
            act = fs.next_action(part.log, now)
            if isinstance(act, OffsetsForLeaderEpochRequest):
                ofle.append((tp, fs, act))
                idle.append(tp)
            elif isinstance(act, FetchRequest):
                fetches.append((tp, fs, act))
            else:
                idle.append(tp)
        if not ofle and not fetches and not self.parked:
            self.wake.clear()
            await wait_event(self.wake, 0.1)
            return
        # parked partitions wait in the session for news; a round with only them is a long poll
        # for it, but not right after an OffsetForLeaderEpoch (its partitions fetch next round)
        fetch = bool(fetches) or (bool(self.parked) and not ofle)
        if fetch and self.session.full_next and self.parked:
            # a new session names every partition: the parked ones with their requests
            for tp in list(self.parked):
                got = self._unpark(tp)
                if got is not None:
                    fetches.append((tp, *got))
        conn = self._connection()
        try:
            if conn is None:
                raise ConnectionError(f"no endpoint for leader {self.leader_id}")
            if ofle:
                await self._offsets_for_leader_epoch(conn, ofle)
            if fetch:
                # active partitions without a fetch this round, and dropped ones, leave the session
                forget = idle + list(self.dropped)
                self.dropped.clear()
                await self._fetch(conn, fetches, forget)
            if self.failing:
                self.failing = False
                log.info("fetching from leader %d again", self.leader_id)
        except ConnectionError as e:
            (log.debug if self.failing else log.warning)("fetch from leader %d failed: %s", self.leader_id, e)
            self.failing = True
            self.session.reset()
            self._unpark_all()
            now = self.m.clock.monotonic_ms()
            for _, fs, act in ofle + fetches:
                fs.on_request_failed(act, now)
            await asyncio.sleep(self.m.backoff_s)

    def _follower_throttled(self, tp: TopicPartition, part) -> bool:
        """Kafka's shouldFollowerThrottle (but the quota test): not caught up with the leader's
        high watermark, and the topic lists this partition on this broker."""
        hw = self.m.leader_hw.get(tp)
        return self.m.rm.throttled(self.m.rm.follower_quota, tp, hw is not None and part.log.log_end_offset >= hw)

    async def _offsets_for_leader_epoch(self, conn: KafkaConnection, items) -> None:
        by_topic: dict[str, list] = {}
        for (topic, pid), _, act in items:
            by_topic.setdefault(topic, []).append({"partition": pid, "current_leader_epoch": act.current_leader_epoch,
                                                   "leader_epoch": act.leader_epoch})
        resp = await conn.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, OFLE_VERSION, {
            "replica_id": self.m.broker_id, "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]})
        answers = {(t.topic, p.partition): p for t in resp.topics for p in t.partitions}
        now = self.m.clock.monotonic_ms()
        todo = []
        for tp, fs, act in items:
            part = self.m.rm.partitions.get(tp)
            a = answers.get(tp)
            if part is None:
                continue
            if a is None:
                fs.on_request_failed(act, now)
                continue
            effects = fs.on_offsets_for_leader_epoch(act, part.log, ErrorCode(int(a.error_code)), a.leader_epoch,
                                                     a.end_offset, now)
            todo.append((tp, part, fs, effects, None,
                         f"OffsetForLeaderEpoch({act.leader_epoch}) -> epoch {a.leader_epoch} ends at {a.end_offset}"))
        await self.m.apply_all(todo)

    async def _fetch(self, conn: KafkaConnection, items, forget: list[TopicPartition]) -> None:
        cfg = self.m.config
        max_bytes = cfg["replica.fetch.max.bytes"]  # once per round, not per partition
        wanted = {tp: PartitionData(tp[1], act.fetch_offset, max_bytes, act.current_leader_epoch,
                                    act.last_fetched_epoch, act.log_start_offset) for tp, _, act in items}
        session_id, epoch, send, forget = self.session.build(wanted, forget)
        by_topic: dict[str, wire.FetchTopicRequest] = {}
        for (topic, _), d in send.items():
            t = by_topic.get(topic)
            if t is None:
                t = by_topic[topic] = wire.FetchTopicRequest(topic, None, [])
            t.partitions.append(d)
        forgotten: dict[str, wire.ForgottenTopic] = {}
        for topic, pid in forget:
            forgotten.setdefault(topic, wire.ForgottenTopic(topic, None, [])).partitions.append(pid)
        wait_ms = cfg["replica.fetch.wait.max.ms"]
        body = wire.encode_fetch_request(FETCH_VERSION, wire.FetchRequest(
            wait_ms, cfg["replica.fetch.min.bytes"], list(by_topic.values()), replica_id=self.m.broker_id,
            max_bytes=cfg["replica.fetch.response.max.bytes"], session_id=session_id, session_epoch=epoch,
            forgotten_topics_data=list(forgotten.values())))
        resp = wire.parse_fetch_response(await conn.request_body(ApiKey.FETCH, FETCH_VERSION, body,
                                                                 timeout=wait_ms / 1000 + 30), FETCH_VERSION)
        answers = {(t, p.index): p for t, _, parts in resp.topics for p in parts}
        unchanged = self.session.on_response(resp.error, resp.session_id,
                                             {tp: (p.high_watermark, p.log_start_offset) for tp, p in answers.items()})
        if unchanged is None:
            log.info("fetch session with leader %d failed (%s): starting a new one", self.leader_id,
                     ErrorCode(resp.error).name)
            self._unpark_all()
        elif self.parked:
            for tp in answers:  # news of parked partitions: answered to their requests
                got = self._unpark(tp) if tp in self.parked else None
                if got is not None:
                    items.append((tp, *got))
        now = self.m.clock.monotonic_ms()
        quota_on = self.m.rm.follower_quota.enabled
        todo = []
        for tp, fs, act in items:
            part = self.m.rm.partitions.get(tp)
            p = answers.get(tp)
            if part is None:
                continue
            if p is None:
                if unchanged is not None and tp in unchanged:  # left out of an incremental response: no news
                    hw, log_start = unchanged[tp]
                    if (not quota_on and part.state.high_watermark == fs.high_watermark
                            and fs.keep_waiting(act, part.log, hw, log_start)):
                        # the usual idle round for most partitions: nothing to apply, and the
                        # leader's session holds the request until it has news
                        self.parked[tp] = act
                        self.active.pop(tp, None)
                        continue
                    effects = fs.on_fetch_response(act, part.log, FetchAnswer(high_watermark=hw,
                                                                             log_start_offset=log_start), now)
                    if (len(effects) == 1 and type(effects[0]) is SetHighWatermark
                            and effects[0].high_watermark == part.state.high_watermark):
                        # the usual idle round for most partitions: the HW stays, nothing to apply
                        # (the apply step costs more than the rest of the round per partition)
                        continue
                    todo.append((tp, part, fs, effects, (b"", []), "nothing new"))
                else:
                    fs.on_request_failed(act, now)
                continue
            err = ErrorCode(p.error)
            records = p.records or b""
            self.m.leader_hw[tp] = p.high_watermark  # for MaxLag and ReplicationBytesIn (broker metrics)
            self.m.bytes_in += len(records)
            if records and self.m.rm.follower_quota.enabled and self._follower_throttled(tp, part):
                self.m.rm.follower_quota.record(len(records), self.m.clock.monotonic())
            headers = parse_batches(records) if records else []
            div = p.diverging_epoch
            answer = FetchAnswer(
                error=err, high_watermark=p.high_watermark, log_start_offset=p.log_start_offset,
                diverging_epoch=div if div is not None and (div[0] >= 0 or div[1] >= 0) else None,
                records_first_offset=headers[0].base_offset if headers else None,
                records_next_offset=headers[-1].last_offset + 1 if headers else None,
                leader_log_end_offset=await self._leader_end(conn, tp, act) if err == ErrorCode.OFFSET_OUT_OF_RANGE
                else -1)
            effects = fs.on_fetch_response(act, part.log, answer, now)
            todo.append((tp, part, fs, effects, (records, headers), _Why(act, answer)))
        await self.m.apply_all(todo)

    async def _leader_end(self, conn: KafkaConnection, tp: TopicPartition, act) -> int:
        resp = await conn.request(ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, {
            "replica_id": self.m.broker_id, "isolation_level": 0, "topics": [{"name": tp[0], "partitions": [
                {"partition_index": tp[1], "current_leader_epoch": act.current_leader_epoch, "timestamp": -1}]}]})
        p = resp.topics[0].partitions[0]
        return p.offset if int(p.error_code) == 0 else -1

    async def close(self) -> None:
        self.task.cancel()
        try:
            await self.task
        except (asyncio.CancelledError, Exception):
            pass
        if self.conn:
            self.conn.close()


class _Why:
    """Why a fetch answer's effects were applied, written out only if a truncation logs it (the
    answer's repr costs more than the rest of a fetch round)."""

    __slots__ = ("act", "answer")

    def __init__(self, act, answer) -> None:
        self.act, self.answer = act, answer

    def __str__(self) -> str:
        return f"fetch({self.act.fetch_offset}, last epoch {self.act.last_fetched_epoch}) -> {self.answer}"


def _epochs(cache) -> list[tuple[int, int]]:
    entries = cache.entries() if callable(cache.entries) else cache.entries
    return [(e.epoch, e.start_offset) for e in entries][-3:]


class ReplicaFetcherManager:
    def __init__(self, rm, broker_id: int, config, endpoint_of: Callable[[int], tuple[str, int] | None],
                 clock: Clock = SYSTEM):
        self.rm = rm
        self.clock = clock  # backoffs on monotonic time; appended batches keep their timestamps
        self.broker_id = broker_id
        self.config = config
        self.endpoint_of = endpoint_of
        self.security = None  # broker.security.sasl.ClientSecurity of the inter-broker listener (set by Broker)
        self.backoff_s = max(config["controller.quorum.retry.backoff.ms"], 100) / 1000
        # (leader, fetcher id) -> its task; a partition -> the key of the task that fetches it
        self.threads: dict[tuple[int, int], FetcherThread] = {}
        self.following: dict[TopicPartition, tuple[int, int]] = {}
        self.leader_hw: dict[TopicPartition, int] = {}  # the leader's high watermark in its last answer
        self.bytes_in = 0  # bytes of records received from leaders

    def follow(self, tp: TopicPartition, leader: int, leader_epoch: int, high_watermark: int) -> None:
        self.unfollow(tp)
        if leader < 0 or leader == self.broker_id:
            return
        key = (leader, fetcher_id(tp, self.config["num.replica.fetchers"]))
        th = self.threads.get(key)
        if th is None:
            th = self.threads[key] = FetcherThread(self, *key)
        fs = FollowerFetchState(self.broker_id, retry_backoff_ms=int(self.backoff_s * 1000))
        fs.become(leader, leader_epoch, high_watermark)
        th.add(tp, fs)
        self.following[tp] = key
        th.wake.set()

    def unfollow(self, tp: TopicPartition) -> None:
        self.leader_hw.pop(tp, None)
        key = self.following.pop(tp, None)
        if key is not None and key in self.threads:
            fs = self.threads[key].remove(tp)
            if fs is not None:
                fs.stop()  # an answer still in flight is for a leadership that ended: ignore it

    async def resize(self) -> None:
        """``num.replica.fetchers`` changed (a dynamic broker config): every followed partition
        starts again on the task its fetcher id now names, from its log (Kafka's
        resizeThreadPool), and the tasks left without partitions stop."""
        moves = []
        for tp, (leader, fid) in list(self.following.items()):
            fs = self.threads[(leader, fid)].states.get(tp)
            if fs is not None and fid != fetcher_id(tp, self.config["num.replica.fetchers"]):
                moves.append((tp, leader, fs.leader_epoch, self.rm.partitions[tp].state.high_watermark))
        for tp, leader, epoch, hw in moves:
            self.follow(tp, leader, epoch, hw)
        for key in [k for k, th in self.threads.items() if not th.states]:
            await self.threads.pop(key).close()

    async def apply_all(self, items) -> None:
        """Apply the effects of one response for each partition, each partition's in order.
        With writer threads the partitions go concurrently (their writes overlap); without,
        every write runs on the loop anyway, so one after the other, with no task per partition."""
        if self.rm.logs.writer is None:
            for item in items:
                await self.apply(*item)
            return
        results = await asyncio.gather(*(self.apply(*item) for item in items), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r

    async def apply(self, tp: TopicPartition, part, fs: FollowerFetchState, effects, fetched, why=None) -> None:
        """Applies a follower state machine's effects to the local log, in order. An I/O error
        takes the log's dir offline (the partition stops following)."""
        try:
            await self._apply(tp, part, fs, effects, fetched, why)
        except (OSError, KafkaError) as e:
            if not self.rm.logs.report_io_error(part.log, e):
                raise
            log.error("%s-%d: stopped following: %s", tp[0], tp[1], e)

    def _current(self, tp: TopicPartition, part, fs: FollowerFetchState, lg) -> bool:
        """Whether an answer fetched for ``fs`` may still touch ``lg``: the partition still follows
        with that state (it did not become leader or follow another leader meanwhile: an answer in
        flight across a leadership change is for a leadership that ended) and its log was not moved
        to another dir."""
        th = self.threads.get(self.following.get(tp, -1))
        return (th is not None and th.states.get(tp) is fs and not part.state.is_leader
                and self.rm.partitions.get(tp) is part and part.log is lg)

    async def _apply(self, tp: TopicPartition, part, fs: FollowerFetchState, effects, fetched, why) -> None:
        lg = part.log

        def current() -> bool:
            return self._current(tp, part, fs, lg)

        for e in effects:
            if not current():
                return  # the partition changed hands while the request (or a write) was out: hands off the log
            if isinstance(e, Truncate):
                if e.offset < lg.log_end_offset:
                    log.info("%s-%d: truncating from %d to %d (%s; epochs %s)", tp[0], tp[1], lg.log_end_offset,
                             e.offset, why, _epochs(lg.leader_epoch_cache))
                lg.truncate_to(e.offset)
                lg.leader_epoch_cache.truncate_from_end(e.offset)
            elif isinstance(e, TruncateFullyAndStartAt):
                log.info("%s-%d: restarting the log at %d", tp[0], tp[1], e.offset)
                lg.truncate_fully_and_start_at(e.offset)
            elif isinstance(e, AppendRecords):
                records, headers = fetched
                try:
                    await lg.append_as_follower_async(records, headers, self.clock.wall_ms(), self.rm.logs.writer, current)
                except AppendAborted:
                    return
                except KafkaError as err:
                    if self.rm.logs.report_io_error(lg, err):
                        raise
                    log.warning("%s-%d: replicated batches rejected (%s); reconciling again", tp[0], tp[1], err)
                    fs.on_append_failed()
                    return
            elif isinstance(e, SetHighWatermark):
                part.state.set_follower_high_watermark(e.high_watermark)
                self.rm.wake_hw(tp)
            elif isinstance(e, IncrementLogStartOffset):
                self.rm.advance_log_start(part, e.offset)

    async def close(self) -> None:
        for th in self.threads.values():
            await th.close()
        self.threads.clear()
