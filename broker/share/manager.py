"""Share partitions on their partition leader (Kafka's SharePartitionManager): the asyncio shell
around the pure ``SharePartition`` (broker/share/partition.py) and ``ShareSessionCache``
(broker/share/sessions.py) that ShareFetch and ShareAcknowledge run through.

A share partition is loaded on first use from the share coordinator (ReadShareGroupState with
the partition's leader epoch; a partition with no start offset yet starts where the group's
``share.auto.offset.reset`` says) and dropped when this broker stops leading the partition, when
a write is fenced, or when no member of the group has a share session here any more (so a later
AlterShareGroupOffsets is read afresh).

Durability: every change of a share partition is written to the share coordinator
(WriteShareGroupState with the whole in-flight window; one write in flight per partition, later
changes ride on the next one) before anything that depends on it is answered: acknowledgements
are answered, and acquired records delivered, once written. A lock that expires (checked by the
timer) and the records of a member whose share session ends are released and written too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import uuid

from broker.log.batch import parse_batches
from broker.replica.manager import _Waiters
from broker.share.partition import Acquired, SharePartition
from broker.share.persister import SharePersister
from broker.share.records import StateBatch, StateKey
from broker.share.sessions import FINAL_EPOCH, INITIAL_EPOCH, ShareSession, ShareSessionCache
from common.clock import SYSTEM, Clock
from common.errors import ErrorCode, KafkaError
from metadata import records as mrec

log = logging.getLogger("krafty.share")

PARTITION_READ_BYTES = 1024 * 1024  # read per partition and request (at least one batch)
_FENCED = {ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.FENCED_STATE_EPOCH}
_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


def parse_auto_offset_reset(value: str) -> tuple[str, int]:
    """``earliest``, ``latest`` or ``by_duration:<ISO-8601 duration>`` -> (kind, duration ms);
    raises ValueError naming what is wrong."""
    v = value.strip().lower()
    if v in ("earliest", "latest"):
        return v, 0
    if v.startswith("by_duration:"):
        m = _DURATION.match(value.strip()[len("by_duration:"):].upper())
        if not m or not any(m.groups()):
            raise ValueError(f"Invalid value {value} for share.auto.offset.reset: the duration must be ISO-8601 "
                             "(e.g. by_duration:PT1H)")
        d, h, mi, s = m.groups()
        ms = ((int(d or 0) * 24 + int(h or 0)) * 60 + int(mi or 0)) * 60_000 + int(float(s or 0) * 1000)
        return "by_duration", ms
    raise ValueError(f"Invalid value {value} for share.auto.offset.reset: must be earliest, latest or "
                     "by_duration:<duration>")


class _Shell:
    """One loaded share partition: its core and its writes."""
    __slots__ = ("core", "key", "tp", "leader_epoch", "ready", "durable", "writing", "waiters", "dropped")

    def __init__(self, core: SharePartition, key: StateKey, tp: tuple[str, int], leader_epoch: int):
        self.core = core
        self.key = key
        self.tp = tp
        self.leader_epoch = leader_epoch
        self.ready: asyncio.Task | None = None
        self.durable = 0  # the core version last written
        self.writing: asyncio.Task | None = None
        self.waiters: list[tuple[int, asyncio.Future]] = []
        self.dropped = False


@dataclasses.dataclass(slots=True)
class PartitionOut:
    """What a ShareFetch / ShareAcknowledge answers for one partition."""
    topic_id: uuid.UUID
    partition: int
    error: int = 0
    error_message: str | None = None
    ack_error: int = 0
    ack_error_message: str | None = None
    records: bytes | None = None
    acquired: list[Acquired] = dataclasses.field(default_factory=list)
    leader: tuple[int, int] = (-1, -1)
    has_acks: bool = False


def _count(acquired: list[Acquired]) -> int:
    return sum(a.last_offset - a.first_offset + 1 for a in acquired)


class SharePartitionManager:
    def __init__(self, config, broker_id: int, replicas, loader, persister: SharePersister, clock: Clock = SYSTEM):
        self.config = config
        self.broker_id = broker_id
        self.replicas = replicas
        self.loader = loader
        self.persister = persister
        self.clock = clock
        self.partitions: dict[tuple[str, str, int], _Shell] = {}
        self.sessions = ShareSessionCache(config["group.share.max.share.sessions"])
        self.available = _Waiters()  # long polls waiting for released records of a share partition
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._bg: set[asyncio.Task] = set()

    # --- configuration -----------------------------------------------------------------------------
    def group_config(self, group_id: str) -> dict[str, str]:
        return self.loader.image.configs.get((mrec.RESOURCE_GROUP, group_id), {})

    def lock_ms(self, group_id: str) -> int:
        return int(self.group_config(group_id).get("share.record.lock.duration.ms",
                                                   self.config["group.share.record.lock.duration.ms"]))

    def delivery_limit(self, group_id: str) -> int:
        return int(self.group_config(group_id).get("share.delivery.count.limit",
                                                   self.config["group.share.delivery.count.limit"]))

    def session_timeout_ms(self, group_id: str) -> int:
        return int(self.group_config(group_id).get("share.session.timeout.ms",
                                                   self.config["group.share.session.timeout.ms"]))

    # --- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        self._wake = asyncio.Event()
        self._started = True

    def _ensure_timer(self) -> None:
        """The timer task starts with the first share fetch: a broker without share groups runs none
        (nor adds events to the simulator's schedules)."""
        if self._task is None and getattr(self, "_started", False):
            self._task = asyncio.get_running_loop().create_task(self._timer_loop(), name="share-partitions")

    async def close(self) -> None:
        tasks = [t for t in (self._task, *self._bg) if t is not None]
        for sh in self.partitions.values():
            for t in (sh.ready, sh.writing):
                if t is not None:
                    tasks.append(t)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.partitions.clear()
        self.available.wake_all()

    def _spawn(self, coro) -> None:
        t = asyncio.get_running_loop().create_task(coro)
        self._bg.add(t)
        t.add_done_callback(self._bg.discard)

    def _kick(self) -> None:
        self._ensure_timer()
        if self._wake is not None:
            self._wake.set()

    # --- loading -----------------------------------------------------------------------------------
    def _drop(self, key: tuple[str, str, int]) -> None:
        sh = self.partitions.pop(key, None)
        if sh is not None:
            sh.dropped = True
            if sh.ready is not None and not sh.ready.done():
                sh.ready.cancel()
            for _, fut in sh.waiters:
                if not fut.done():
                    fut.set_result(int(ErrorCode.NOT_LEADER_OR_FOLLOWER))
            sh.waiters.clear()
            self.available.wake(key)

    async def partition(self, group_id: str, topic: str, topic_id: uuid.UUID, pid: int) -> _Shell:
        """The loaded share partition; raises KafkaError (NOT_LEADER_OR_FOLLOWER, a load error)."""
        part = self.replicas.partitions.get((topic, pid))
        if part is None or not part.state.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        key = (group_id, topic, pid)
        sh = self.partitions.get(key)
        if sh is not None and (sh.leader_epoch != part.state.leader_epoch or sh.key.topic_id != topic_id):
            self._drop(key)
            sh = None
        if sh is None:
            core = SharePartition(group_id, topic, pid, delivery_limit=self.delivery_limit(group_id),
                                  lock_ms=self.lock_ms(group_id),
                                  max_locks=self.config["group.share.partition.max.record.locks"])
            sh = self.partitions[key] = _Shell(core, StateKey(group_id, topic_id, pid), (topic, pid),
                                               part.state.leader_epoch)
            sh.ready = asyncio.get_running_loop().create_task(self._load(sh, part))
        try:
            await asyncio.shield(sh.ready)
        except asyncio.CancelledError:
            if sh.dropped:
                raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER) from None
            raise
        except KafkaError:
            if self.partitions.get(key) is sh:
                self._drop(key)  # the next request loads again
            raise
        if sh.dropped:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        sh.core.lock_ms = self.lock_ms(group_id)
        sh.core.delivery_limit = self.delivery_limit(group_id)
        return sh

    async def _load(self, sh: _Shell, part) -> None:
        res = await self.persister.read(sh.key, sh.leader_epoch)
        err = res["error_code"]
        if err:
            code = ErrorCode.NOT_LEADER_OR_FOLLOWER if err == ErrorCode.FENCED_LEADER_EPOCH else ErrorCode(err)
            raise KafkaError(code, res.get("error_message"))
        batches = [b if isinstance(b, StateBatch) else StateBatch(
            b["first_offset"] if isinstance(b, dict) else b.first_offset,
            b["last_offset"] if isinstance(b, dict) else b.last_offset,
            b["delivery_state"] if isinstance(b, dict) else b.delivery_state,
            b["delivery_count"] if isinstance(b, dict) else b.delivery_count) for b in res["state_batches"]]
        core = sh.core
        core.load(res["state_epoch"], res["start_offset"], batches)
        lg = part.log
        if not core.initialized:
            kind, ms = parse_auto_offset_reset(self.group_config(sh.key.group).get("share.auto.offset.reset",
                                                                                   "latest"))
            if kind == "earliest":
                start = lg.log_start_offset
            elif kind == "latest":
                start = part.state.high_watermark
            else:
                found = await lg.offset_for_timestamp_async(self.clock.wall_ms() - ms)
                start = part.state.high_watermark if found is None else found[0]
            core.initialize(start)
            log.info("share partition %s %s-%d starts at offset %d (share.auto.offset.reset %s)", sh.key.group,
                     sh.tp[0], sh.tp[1], start, kind)
        if core.start < lg.log_start_offset:
            core.move_start(lg.log_start_offset)
        if core.version > sh.durable:
            err = await self.persist(sh)
            if err:
                raise KafkaError(ErrorCode(err))

    # --- writes ------------------------------------------------------------------------------------
    def persist(self, sh: _Shell) -> asyncio.Future:
        """Resolves to an error code once the core's state as of now is written."""
        fut = asyncio.get_running_loop().create_future()
        v = sh.core.version
        if v <= sh.durable:
            fut.set_result(0)
            return fut
        if sh.dropped:
            fut.set_result(int(ErrorCode.NOT_LEADER_OR_FOLLOWER))
            return fut
        sh.waiters.append((v, fut))
        if sh.writing is None or sh.writing.done():
            sh.writing = asyncio.get_running_loop().create_task(self._writer(sh))
        return fut

    async def _writer(self, sh: _Shell) -> None:
        core = sh.core
        while sh.waiters and not sh.dropped:
            v = core.version
            start, batches = core.snapshot()
            res = await self.persister.write(sh.key, core.state_epoch, sh.leader_epoch, start, batches,
                                             core.delivery_complete_count())
            err = res["error_code"]
            if err:
                log.info("share partition %s %s-%d: writing its state failed: %s", sh.key.group, sh.tp[0], sh.tp[1],
                         ErrorCode(err).name)
                waiters, sh.waiters = sh.waiters, []
                for _, fut in waiters:
                    if not fut.done():
                        fut.set_result(int(err))
                if err in _FENCED:  # another leader or an altered state: load again next time
                    key = (sh.key.group, sh.tp[0], sh.tp[1])
                    if self.partitions.get(key) is sh:
                        self._drop(key)
                return
            sh.durable = max(sh.durable, v)
            left = []
            for wv, fut in sh.waiters:
                if wv <= v:
                    if not fut.done():
                        fut.set_result(0)
                else:
                    left.append((wv, fut))
            sh.waiters = left

    # --- ShareFetch / ShareAcknowledge ----------------------------------------------------------
    async def _acknowledge(self, sh: _Shell, member: str, batches, renew: bool, out: PartitionOut) -> asyncio.Future | None:
        err, msg = sh.core.acknowledge(member, batches, self.clock.monotonic_ms(), renew)
        out.has_acks = True
        if err:
            out.ack_error, out.ack_error_message = int(err), msg
            return None
        self.available.wake((sh.key.group, sh.tp[0], sh.tp[1]))  # released records may go to another member
        return self.persist(sh)

    def _acquire(self, sh: _Shell, member: str, max_records: int, max_bytes: int, out: PartitionOut) -> int:
        """Reads from the log and acquires; returns the bytes taken."""
        part = self.replicas.partitions.get(sh.tp)
        if part is None or not part.state.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        lg, hw = part.log, part.state.high_watermark
        # share.isolation.level read_committed: up to the last stable offset, aborted transactions' batches
        # are never delivered (archived, as transaction markers are)
        committed = self.group_config(sh.key.group).get("share.isolation.level") == "read_committed"
        if committed:
            hw = lg.last_stable_offset(hw)
        core = sh.core
        if core.start < lg.log_start_offset:
            core.move_start(lg.log_start_offset)
        if not core.can_acquire():
            return 0
        offset = core.fetch_offset()
        if offset >= hw:
            return 0
        sl = lg.read(offset, max(min(max_bytes, PARTITION_READ_BYTES), 1), hw, min_one_batch=True)
        if sl is None or sl.size == 0:
            return 0
        data = lg.read_bytes(sl)
        headers = parse_batches(data)
        aborted = (lg.aborted_transactions(offset, hw) if committed and headers and lg.has_aborted_transactions(offset)
                   else [])

        def skipped(h) -> bool:
            return h.is_control or (bool(aborted) and h.is_transactional and any(
                a.producer_id == h.producer_id and a.first_offset <= h.base_offset <= a.last_offset for a in aborted))
        skip = [skipped(h) for h in headers]
        got = core.acquire(member, [(h.base_offset, h.last_offset, sk) for h, sk in zip(headers, skip, strict=True)],
                           max_records, self.clock.monotonic_ms())
        if not got:
            return 0
        keep = [h for h, sk in zip(headers, skip, strict=True) if not sk and any(
            a.first_offset <= h.last_offset and h.base_offset <= a.last_offset for a in got)]
        self._kick()  # the timer learns of the new lock deadlines
        out.records = b"".join(data[h.pos:h.pos + h.size] for h in keep)
        out.acquired = got
        return len(out.records)

    def _resolve(self, topic_id: uuid.UUID, pid: int) -> tuple[str | None, int]:
        """(topic name, error) of a partition named by topic id."""
        t = self.loader.image.topics_by_id.get(topic_id)
        if t is None:
            return None, ErrorCode.UNKNOWN_TOPIC_ID
        if pid not in t.partitions:
            return t.name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return t.name, ErrorCode.NONE

    def _leader_of(self, topic: str | None, pid: int) -> tuple[int, int]:
        t = self.loader.image.topics_by_name.get(topic) if topic else None
        p = t.partitions.get(pid) if t is not None else None
        return (p.leader, p.leader_epoch) if p is not None else (-1, -1)

    async def share_fetch(self, group_id: str, member: str, epoch: int, requested: list[tuple[uuid.UUID, int]],
                          forgotten: list[tuple[uuid.UUID, int]], acks: dict[tuple[uuid.UUID, int], list],
                          max_wait_ms: int, min_bytes: int, max_bytes: int, max_records: int, renew: bool = False,
                          denied: frozenset[str] = frozenset(), park=None) -> tuple[int, str | None, list[PartitionOut]]:
        """(top-level error, message, per-partition answers)."""
        now = self.clock.monotonic_ms()
        if epoch == INITIAL_EPOCH and acks:
            return ErrorCode.INVALID_REQUEST, "Acknowledge data present on initial fetch.", []
        err, session, replaced = self.sessions.fetch(group_id, member, epoch, requested, forgotten, now)
        if err:
            return err, None, []
        self._kick()  # (idle sessions expire on the timer)
        if replaced is not None:
            await self._release_session(replaced)
        outs: dict[tuple[uuid.UUID, int], PartitionOut] = {}
        pending: list[tuple[PartitionOut, asyncio.Future]] = []
        shells: dict[tuple[uuid.UUID, int], _Shell] = {}

        async def shell_of(tp) -> _Shell | None:
            o = outs.setdefault(tp, PartitionOut(*tp))
            if tp in shells:
                return shells[tp]
            name, e = self._resolve(*tp)
            try:
                if e:
                    raise KafkaError(e)
                if name in denied:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                sh = shells[tp] = await self.partition(group_id, name, tp[0], tp[1])
                return sh
            except KafkaError as ke:
                o.error, o.error_message = int(ke.code), ke.message
                if ke.code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                    o.leader = self._leader_of(name, tp[1])
                return None

        for tp, batches in acks.items():
            sh = await shell_of(tp)
            o = outs[tp]
            if sh is None:
                o.has_acks = True
                o.ack_error = o.error
                continue
            fut = await self._acknowledge(sh, member, batches, renew, o)
            if fut is not None:
                pending.append((o, fut))
        if epoch == FINAL_EPOCH:
            await self._release_session(session)
        else:
            deadline = self.clock.monotonic() + max_wait_ms / 1000
            parts = list(session.partitions)
            # start where the last request of this session left off, so no partition starves
            if parts:
                k = session.epoch % len(parts)
                parts = parts[k:] + parts[:k]
            while True:
                total = records = 0
                failed = False
                for tp in parts:
                    if records >= max_records or total >= max_bytes:
                        break
                    sh = await shell_of(tp)
                    if sh is None:
                        failed = True
                        continue
                    o = outs[tp]
                    if o.acquired:
                        continue
                    try:
                        total += self._acquire(sh, member, max_records - records, max_bytes - total, o)
                    except KafkaError as ke:
                        o.error, o.error_message = int(ke.code), ke.message
                        failed = True
                        continue
                    except OSError as e:
                        o.error, o.error_message = int(ErrorCode.KAFKA_STORAGE_ERROR), str(e)
                        failed = True
                        continue
                    if o.acquired:
                        records += sum(a.last_offset - a.first_offset + 1 for a in o.acquired)
                        pending.append((o, self.persist(sh)))
                left = deadline - self.clock.monotonic()
                if total >= max(min_bytes, 1) or failed or left <= 0 or not parts:
                    break
                wait = self._wait_any([(self._resolve(*tp)[0], tp[1]) for tp in parts],
                                      [(group_id, self._resolve(*tp)[0], tp[1]) for tp in parts], left)
                await (park(wait) if park is not None else wait)
        for o, fut in pending:
            code = await fut
            if not code:
                if o.acquired:  # written; what lost its lock while the write took long is another's now
                    sh = shells[(o.topic_id, o.partition)]
                    held = sh.core.still_acquired(member, o.acquired, self.clock.monotonic_ms())
                    if held != o.acquired:
                        log.info("share partition %s %s-%d: acquisition locks of member %s expired while their "
                                 "acquisition was written: %d of %d records not delivered", group_id, *sh.tp, member,
                                 _count(o.acquired) - _count(held), _count(o.acquired))
                        o.acquired = held
                        if not held:
                            o.records = None
                continue
            if o.acquired:  # not written: not delivered; the records go back
                sh = shells.get((o.topic_id, o.partition))
                if sh is not None and not sh.dropped:
                    sh.core.release_member_offsets(member, [(a.first_offset, a.last_offset) for a in o.acquired])
                o.acquired, o.records = [], None
                o.error = code
            elif o.has_acks:
                o.ack_error = code
        result = [o for o in outs.values() if o.error or o.has_acks or o.acquired]
        return ErrorCode.NONE, None, result

    async def share_acknowledge(self, group_id: str, member: str, epoch: int,
                                acks: dict[tuple[uuid.UUID, int], list], renew: bool = False,
                                denied: frozenset[str] = frozenset()) -> tuple[int, str | None, list[PartitionOut]]:
        err, session = self.sessions.acknowledge(group_id, member, epoch, self.clock.monotonic_ms())
        if err:
            return err, None, []
        outs = []
        pending = []
        for tp, batches in acks.items():
            o = PartitionOut(*tp, has_acks=True)
            outs.append(o)
            name, e = self._resolve(*tp)
            try:
                if e:
                    raise KafkaError(e)
                if name in denied:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                sh = await self.partition(group_id, name, tp[0], tp[1])
            except KafkaError as ke:
                o.error, o.error_message = int(ke.code), ke.message
                if ke.code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                    o.leader = self._leader_of(name, tp[1])
                continue
            fut = await self._acknowledge(sh, member, batches, renew, o)
            if fut is not None:
                pending.append((o, fut))
            elif o.ack_error:
                o.error, o.error_message = o.ack_error, o.ack_error_message
        if epoch == FINAL_EPOCH:
            await self._release_session(session)
        for o, fut in pending:
            code = await fut
            if code:
                o.error = code
        return ErrorCode.NONE, None, outs

    async def _wait_any(self, tps, keys, timeout: float) -> None:
        a = asyncio.ensure_future(self.replicas.wait_for_data(tps, timeout))
        b = asyncio.ensure_future(self.available.wait(keys, timeout))
        try:
            await asyncio.wait({a, b}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (a, b):
                if not t.done():
                    t.cancel()

    async def _release_session(self, s: ShareSession) -> None:
        """The member's session here ended: the records it holds go back (written), and the
        group's share partitions are dropped once no member of it has a session here."""
        futs = []
        for tid, pid in s.partitions:
            name = self._resolve(tid, pid)[0]
            sh = self.partitions.get((s.group_id, name, pid)) if name else None
            if sh is not None and not sh.dropped and sh.core.release_member(s.member_id):
                self.available.wake((s.group_id, name, pid))
                futs.append(self.persist(sh))
        for f in futs:
            await f
        if not self.sessions.has_group(s.group_id):
            for key in [k for k, sh in self.partitions.items()
                        if k[0] == s.group_id and not sh.core.acquired and not sh.waiters]:
                self._drop(key)

    # --- timers ------------------------------------------------------------------------------------
    async def _timer_loop(self) -> None:
        while True:
            try:
                nearest = self.tick()
            except Exception:
                log.exception("share partition timer failed")
                nearest = None
            self._wake.clear()
            if nearest is None and not self.partitions and not self.sessions.sessions:
                await self._wake.wait()  # nothing to time: no timer events
                continue
            now = self.clock.monotonic_ms()
            wait = 1.0 if nearest is None else min(max((nearest - now) / 1000, 0.005), 1.0)
            try:
                await asyncio.wait_for(self._wake.wait(), wait)
            except TimeoutError:
                pass

    def tick(self) -> int | None:
        """Expired locks are released (and written); partitions we no longer lead are dropped;
        idle share sessions end. Returns the next lock deadline."""
        now = self.clock.monotonic_ms()
        nearest = None
        for key, sh in list(self.partitions.items()):
            if sh.ready is None or not sh.ready.done() or sh.dropped:
                continue
            part = self.replicas.partitions.get(sh.tp)
            if part is None or not part.state.is_leader or part.state.leader_epoch != sh.leader_epoch:
                self._drop(key)
                continue
            if sh.core.expire(now):
                self.available.wake(key)
                self.persist(sh)
            d = sh.core.next_deadline()
            if d is not None and (nearest is None or d < nearest):
                nearest = d
        for s in self.sessions.idle(now, self.session_timeout_ms):
            log.info("share session of member %s of group %s expired", s.member_id, s.group_id)
            self._spawn(self._release_session(s))
        return nearest


__all__ = ["SharePartitionManager", "PartitionOut", "parse_auto_offset_reset"]
