"""A seeded, virtual-time simulation of one partition replicated on RF brokers.

Nodes: brokers ``1..rf`` (each a ``PartitionState`` + ``FollowerFetchState`` over a
``SimLog``), the controller (node 0, ``ControllerModel``) and one producer (node 99) that
sends acks=all writes with unique values to the leader. Everything travels through a
network with delay, loss and cuts; every handler runs as one event of one scheduler.

Faults (safety phase): broker kill -9 (page cache survives), broker power loss (unflushed
tail lost: Kafka never fsyncs by default), broker pause (SIGSTOP: no timers run, messages
queue up and are handled on resume), network cuts between any two nodes, message loss,
duplication and reordering, controller failover. With ``disk_faults`` (issue 18) also: a
clean stop followed by a power cut that tears the tail of the last write (the drive lost
what it had acknowledged), and bad blocks in closed segments of a stopped broker (an
overwritten batch length or a flipped bit), found when the log is opened or read; brokers
read their own logs now and then as consumers would, and a follower that finds its copy
damaged truncates to it and fetches it again. Then everything heals and the partition must
converge (liveness phase).

Disk invariants: recovery never leaves a log end below the last complete valid batch of its
last segment (checked against an independent scan of the file), and a replica's records lost
to its disk (torn or damaged) count as lost by that replica, like a power loss's.

When may an acknowledged write be lost? Kafka promises a committed record survives as long
as one member of the ISR keeps it. A record ``(offset, value)`` becomes *excused* at the
first moment when every member of the controller's ISR has lost it through a power loss (it
was in that broker's log and the crash dropped it) and none holds it again. Only excused
records may disappear or be overwritten; anything else is a violation. (A record can be
excused before any HW passes it: a leader paused while its followers replicated the record
learns of that replication from stale fetch requests after every ISR member lost it, and
its HW passes a record that is already gone; Kafka acknowledges such a write too.)

``strict_durability`` checks a stronger promise for acknowledged writes: one is lost only if
every member of the ISR the leader counted when it acknowledged (its maximal ISR) has since
lost it in a power loss. Kafka without Eligible Leader Replicas (KIP-966 part 2) breaks it:
a member that still holds the write can be fenced out of the ISR while the controller
elects a member that crashed with data loss but whose session has not expired yet.
"""

from __future__ import annotations

import dataclasses
import heapq
import random
import uuid
from collections.abc import Callable

from broker.replica.follower import (
    AppendRecords,
    FetchAnswer,
    FetchRequest,
    FollowerFetchState,
    OffsetsForLeaderEpochRequest,
    SetHighWatermark,
    Truncate,
    TruncateFullyAndStartAt,
)
from broker.replica.partition import PartitionState
from common.errors import ErrorCode
from sim.replication.controller import ControllerModel
from sim.replication.simlog import SimCorruptBatch, SimLog

CONTROLLER = 0
PRODUCER = 99
TOPIC_ID = uuid.UUID(int=7)


class InvariantViolation(AssertionError):
    pass


@dataclasses.dataclass(slots=True)
class Config:
    rf: int = 3
    min_isr: int = 2
    safety_ms: int = 12_000
    liveness_ms: int = 20_000
    replica_lag_time_max_ms: int = 1_000
    session_timeout_ms: int = 1_500
    heartbeat_ms: int = 150
    max_delay_ms: int = 8
    drop_rate: float = 0.01
    dup_rate: float = 0.0
    fault_every_ms: int = 700
    produce_every_ms: int = 15
    fetch_wait_ms: int = 20
    request_timeout_ms: int = 400
    use_offsets_for_leader_epoch: bool = True
    # toggles that reproduce known Kafka bugs when switched off
    unclean_shutdown_detection: bool = True  # KIP-966 part 1
    check_broker_epochs: bool = True  # KIP-903
    hw_over_maximal_isr: bool = True  # KIP-497 maximal ISR
    # stricter durability than Kafka promises: see the module docstring
    strict_durability: bool = False
    # torn tails after a clean stop and bad blocks (issue 18); also fsyncs rolled segments as
    # krafty's flush_check does. Off: the earlier disk model, whose schedules the seed lists
    # of the KIP-966/KIP-497 regression tests were found with
    disk_faults: bool = True

    @classmethod
    def swarm(cls, rng: random.Random, rf: int | None = None) -> Config:
        rf = rf or rng.choice((3, 3, 5))
        return cls(
            rf=rf,
            min_isr=rng.choice((1, 2, 2)) if rf == 3 else rng.choice((1, 2, 3)),
            replica_lag_time_max_ms=rng.choice((500, 1000, 2000)),
            session_timeout_ms=rng.choice((800, 1500, 3000)),
            max_delay_ms=rng.choice((2, 8, 30)),
            drop_rate=rng.choice((0.0, 0.01, 0.05)),
            dup_rate=rng.choice((0.0, 0.0, 0.02)),
            fault_every_ms=rng.choice((300, 700, 1500)),
            use_offsets_for_leader_epoch=rng.random() < 0.5,
        )


@dataclasses.dataclass(slots=True)
class Result:
    seed: int
    acked: int
    excused: int
    faults: int
    events: int
    sim_ms: int
    final_leo: int
    lost_everywhere: int = 0  # 1: liveness waived, a bad block took the last copy of a record


class Checker:
    """Safety invariants, updated incrementally by the brokers as they act."""

    def __init__(self, world: World):
        self.w = world
        self.committed: dict[int, int] = {}  # offset -> value, the union of leaders' HW prefixes
        self.excused: set[tuple[int, int]] = set()
        self.crash_lost: dict[int, set[tuple[int, int]]] = {}
        self.leader_of_epoch: dict[int, int] = {}
        self.leader_hw: dict[tuple[int, int, int], int] = {}  # (broker, incarnation, epoch) -> hw
        self.acked: dict[int, int] = {}  # value -> offset
        self.ack_isr: dict[tuple[int, int], tuple[int, ...]] = {}  # (offset, value) -> leader's ISR
        self.ever_lost: dict[int, set[tuple[int, int]]] = {}  # power-loss victims, never forgotten
        self.damaged: dict[tuple[int, int], int] = {}  # (broker, offset) -> the value a bad block took there

    def fail(self, msg: str) -> None:
        raise InvariantViolation(f"seed {self.w.seed} at t={self.w.now}ms: {msg}")

    def on_leader(self, broker: int, epoch: int) -> None:
        prev = self.leader_of_epoch.setdefault(epoch, broker)
        if prev != broker:
            self.fail(f"two leaders in epoch {epoch}: {prev} and {broker}")

    def on_hw(self, b: Broker, old: int, new: int, leader: bool) -> None:
        if leader:
            key = (b.id, b.incarnation, b.state.leader_epoch)
            if new < self.leader_hw.get(key, 0):
                self.fail(f"leader {b.id} HW went back from {self.leader_hw[key]} to {new} in one epoch")
            self.leader_hw[key] = new
        for o in range(max(old, b.log.log_start_offset), new):
            v = b.log.value_at(o)
            if v is None:
                if o >= b.log.log_end_offset:
                    self.fail(f"broker {b.id} HW {new} beyond its log end {b.log.log_end_offset}")
                v = self.damaged.get((b.id, o))  # a bad block took it: what it held
                if v is None:
                    continue
            c = self.committed.get(o)
            if c is None:
                if not leader:
                    self.fail(f"follower {b.id} HW {new} passes offset {o} no leader committed")
                self.committed[o] = v
            elif c != v:
                if (o, c) not in self.excused and (o, v) in self.excused:
                    continue  # a late HW (a paused leader's stale view) over a record already lost
                if (o, c) not in self.excused:
                    self.fail(f"broker {b.id} has value {v} at committed offset {o} (committed {c}); "
                              f"ISR {self.w.controller.reg.isr}")
                self.check_strict(o, c, f"overwritten by {v} on broker {b.id}")
                if leader:
                    self.committed[o] = v

    def on_truncate(self, b: Broker, offset: int) -> None:
        lost = self.crash_lost.get(b.id, ())
        for o in range(offset, b.log.log_end_offset):
            v = b.log.value_at(o)
            if v is None or (o, v) in lost:
                continue  # this replica's disk already took it (a follower dropping its damaged copy)
            if self.committed.get(o) == v:
                if (o, v) not in self.excused:
                    self.fail(f"broker {b.id} truncates committed offset {o} (value {v}) to {offset}")
                self.check_strict(o, v, f"truncated on broker {b.id}")

    def on_append(self, b: Broker, first: int, records: list[tuple[int, int]]) -> None:
        lost = self.crash_lost.get(b.id)
        if lost:
            for i, (_e, v) in enumerate(records):
                lost.discard((first + i, v))

    def on_power_loss(self, b: Broker, lost: list[tuple[int, int]]) -> None:
        self.crash_lost.setdefault(b.id, set()).update(lost)
        self.ever_lost.setdefault(b.id, set()).update(lost)
        self.check_excusals()

    def check_excusals(self) -> None:
        isr = self.w.controller.reg.isr
        first = self.crash_lost.get(isr[0])
        if not first:
            return
        for o, v in list(first):
            if (o, v) in self.excused:
                continue
            if all((o, v) in self.crash_lost.get(b, ()) and self.w.brokers[b].log.value_at(o) != v for b in isr):
                self.excused.add((o, v))

    def on_ack(self, value: int, offset: int) -> None:
        self.acked[value] = offset

    def on_ack_sent(self, b: Broker, value: int, offset: int) -> None:
        if self.committed.get(offset) != value and (offset, value) not in self.excused:
            self.fail(f"leader {b.id} acks value {value} at offset {offset} not in the committed prefix")
        self.ack_isr.setdefault((offset, value), b.state.maximal_isr)

    def check_strict(self, o: int, v: int, what: str) -> None:
        """Under ``strict_durability``: a lost acknowledged write must have been lost by every
        member of the ISR that acknowledged it."""
        isr = self.ack_isr.get((o, v))
        if not self.w.cfg.strict_durability or isr is None or self.acked.get(v) != o:
            return
        kept = [b for b in isr if (o, v) not in self.ever_lost.get(b, ())]
        if kept:
            self.fail(f"acknowledged value {v} at offset {o} {what}, though ack-time ISR {isr} "
                      f"members {kept} never lost it (permitted by Kafka's ISR guarantee, not strictly)")


class Broker:
    def __init__(self, world: World, broker_id: int):
        self.w = world
        self.id = broker_id
        self.log = SimLog(krafty_fsyncs=world.cfg.disk_faults)
        self.up = True
        self.disk_touched = False  # the disk changed while it was down: open the log again at start
        self.consumer_pos = 0  # where consumer_read goes on
        self.consumer_passes = 0  # times consumer_read went from the log start to the high watermark
        self.consumer_whole = False
        self.incarnation = 0
        self.hw_checkpoint = 0
        self.paused_until = 0  # SIGSTOP: nothing runs until then
        self._fresh_volatile_state()

    def _fresh_volatile_state(self) -> None:
        cfg = self.w.cfg
        self.state = self.w.state_cls("t", 0, TOPIC_ID, self.id, replica_lag_time_max_ms=cfg.replica_lag_time_max_ms)
        self.state.high_watermark = min(self.hw_checkpoint, self.log.log_end_offset)
        self.fs = FollowerFetchState(self.id, use_offsets_for_leader_epoch=cfg.use_offsets_for_leader_epoch,
                                     retry_backoff_ms=100)
        self.broker_epoch = -1
        self.waiters: list[tuple[int, int, int]] = []  # (offset, value, produce request id)
        self.alter_sent_at = 0
        self.pump_scheduled = False

    def _timer(self, delay_ms: int, fn, *args) -> None:
        self.w.after(delay_ms, self._fire, fn, args)

    def _fire(self, fn, args) -> None:
        if self.w.now < self.paused_until:  # a stopped process runs no timers
            self.w.after(self.paused_until - self.w.now, self._fire, fn, args)
            return
        fn(*args)

    # --- lifecycle ------------------------------------------------------------------------
    def crash(self, power_loss: bool, clean: bool = False, torn_bytes: int = 0) -> None:
        """kill -9, or a power loss (the page cache gone); ``clean``: a clean stop first (all
        fsynced, marker written), ``torn_bytes``: the drive also loses that much of the last
        write, acknowledged or not."""
        w = self.w
        self.up = False
        self.incarnation += 1
        if clean:
            self.log.close()
        if power_loss:
            self.log.disk.power_cut(torn_bytes)
            lost = self._reopen()
            w.trace(f"broker {self.id} power loss{' after a clean stop' if clean else ''}"
                    f"{f' tearing {torn_bytes} bytes' if torn_bytes else ''}: LEO {self.log.log_end_offset}, "
                    f"lost {len(lost)}")
        else:
            w.trace(f"broker {self.id} killed at LEO {self.log.log_end_offset}")

    def _reopen(self) -> list[tuple[int, int]]:
        """Open the log again from the disk, check the recovery invariant, and count what it
        no longer holds as lost by this replica."""
        valid_end = self.log.valid_end()
        lost = self.log.reopen()
        if self.log.log_end_offset < valid_end:
            self.w.checker.fail(f"broker {self.id} recovered to log end {self.log.log_end_offset}, below the end "
                                f"{valid_end} of its last complete valid batch")
        self.w.checker.on_power_loss(self, lost)
        return lost

    def start(self) -> None:
        if self.disk_touched:
            self.disk_touched = False
            lost = self._reopen()
            self.w.trace(f"broker {self.id} opens its damaged disk: LEO {self.log.log_end_offset}, lost {len(lost)}, "
                         f"damage at {self.log.damaged_offset}")
        self.up = True
        self.paused_until = 0
        self._fresh_volatile_state()
        self.w.trace(f"broker {self.id} starts, LEO {self.log.log_end_offset}")
        self._register()
        self._timer(self.w.cfg.heartbeat_ms, self._tick, self.incarnation)
        if self.w.cfg.disk_faults:
            self._timer(self.w.rng_disk.randint(100, 600), self.consumer_read, self.incarnation)

    def _register(self) -> None:
        inc = self.incarnation
        self.w.send(self.id, CONTROLLER, self.w.ctl_register, self.id, inc)
        self._timer(500, self._register_retry, inc)

    def _register_retry(self, inc: int) -> None:
        if self.up and inc == self.incarnation and self.broker_epoch < 0:
            self._register()

    def on_registered(self, inc: int, broker_epoch: int) -> None:
        if inc == self.incarnation and self.broker_epoch < 0:
            self.broker_epoch = broker_epoch

    def on_stale_broker_epoch(self, inc: int, broker_epoch: int) -> None:
        """The controller no longer knows this registration (e.g. it was replaced): register
        again rather than heartbeat a dead session forever."""
        if self.up and inc == self.incarnation and self.broker_epoch == broker_epoch:
            self.broker_epoch = -1
            self._register()

    def _tick(self, inc: int) -> None:
        if not self.up or inc != self.incarnation:
            return
        w = self.w
        if self.broker_epoch >= 0:
            w.send(self.id, CONTROLLER, w.ctl_heartbeat, self.id, self.broker_epoch, inc)
        st = self.state
        if st.is_leader:
            st.maybe_shrink_isr(self.log.log_end_offset, w.now)
            if st.alter_in_flight and w.now - self.alter_sent_at > 1000:
                st.on_alter_partition_error(ErrorCode.REQUEST_TIMED_OUT, st.pending_alter)
            self._send_alter()
        self.pump()
        self._timer(w.cfg.heartbeat_ms, self._tick, inc)

    def writeback(self) -> None:
        if self.up:
            self.log.writeback()
            self.hw_checkpoint = self.state.high_watermark

    # --- metadata -------------------------------------------------------------------------
    def on_registration(self, inc: int, reg, eligible: dict[int, int]) -> None:
        if not self.up or inc != self.incarnation or self.broker_epoch < 0:
            return
        st, w = self.state, self.w
        if not st.is_stale(reg):
            st.set_eligible_brokers(eligible)
        if reg.leader == self.id:
            was_leader = st.is_leader
            if st.is_stale(reg):
                return
            old_hw = st.high_watermark
            if st.make_leader(reg, self.log.log_end_offset, w.now):
                self.log.leader_epoch_cache.assign(reg.leader_epoch, self.log.log_end_offset)
                w.checker.on_leader(self.id, reg.leader_epoch)
                w.trace(f"broker {self.id} leads epoch {reg.leader_epoch} at LEO {self.log.log_end_offset}, "
                        f"HW {st.high_watermark}, ISR {reg.isr}")
                self.fs.stop()
                if not was_leader:
                    self._fail_waiters()
            self._hw_moved(old_hw)
        elif self.id in reg.replicas:
            was_leader = st.is_leader
            if st.make_follower(reg):
                self.fs.become(reg.leader, reg.leader_epoch, st.high_watermark)
                if was_leader:
                    self._fail_waiters()
                self.pump()

    def _fail_waiters(self) -> None:
        for _o, _v, rid in self.waiters:
            self.w.send(self.id, PRODUCER, self.w.producer_reply, rid, ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)
        self.waiters = []

    def _send_alter(self) -> None:
        req = self.state.take_alter_partition()
        if req is not None:
            self.alter_sent_at = self.w.now
            self.w.send(self.id, CONTROLLER, self.w.ctl_alter, self.id, self.incarnation, req)

    def on_alter_response(self, inc: int, req, error: ErrorCode, reg) -> None:
        if not self.up or inc != self.incarnation:
            return
        st = self.state
        old_hw = st.high_watermark
        if error == ErrorCode.NONE:
            st.on_isr_committed(reg, self.log.log_end_offset, req)
        else:
            st.on_alter_partition_error(error, req)
        self._hw_moved(old_hw)
        self._send_alter()

    # --- leader side ----------------------------------------------------------------------
    def _hw_moved(self, old_hw: int) -> None:
        st = self.state
        if st.high_watermark == old_hw:
            return
        if st.high_watermark < old_hw and st.is_leader:
            self.w.checker.fail(f"leader {self.id} HW went back {old_hw} -> {st.high_watermark}")
        self.w.checker.on_hw(self, old_hw, st.high_watermark, st.is_leader)
        if not st.is_leader:
            return
        keep = []
        for o, v, rid in self.waiters:
            res = st.acks_all_result(o, self.w.cfg.min_isr)
            if res is None:
                keep.append((o, v, rid))
                continue
            if res == ErrorCode.NONE:
                self.w.checker.on_ack_sent(self, v, o)
            self.w.send(self.id, PRODUCER, self.w.producer_reply, rid, res, o)
        self.waiters = keep

    def on_produce(self, rid: int, value: int) -> None:
        if not self.up:
            return
        w, st = self.w, self.state
        if not st.is_leader:
            w.send(self.id, PRODUCER, w.producer_reply, rid, ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)
            return
        err = st.can_append_acks_all(w.cfg.min_isr)
        if err != ErrorCode.NONE:
            w.send(self.id, PRODUCER, w.producer_reply, rid, err, -1)
            return
        offset = self.log.append_as_leader(st.leader_epoch, value)
        self.waiters.append((offset, value, rid))
        old = st.high_watermark
        st.maybe_advance_hw(self.log.log_end_offset)
        self._hw_moved(old)

    def on_fetch(self, follower: int, f_inc: int, f_epoch: int, req: FetchRequest) -> None:
        if not self.up:
            return
        w, st, lg = self.w, self.state, self.log
        v = st.validate_follower_fetch(req.current_leader_epoch, req.fetch_offset, req.last_fetched_epoch,
                                       lg.leader_epoch_cache, lg.log_start_offset, lg.log_end_offset)
        if v.error != ErrorCode.NONE or v.diverging_epoch is not None:
            ans = FetchAnswer(v.error, st.high_watermark, lg.log_start_offset, v.diverging_epoch,
                              leader_log_end_offset=lg.log_end_offset)
            w.send(self.id, follower, w.fetch_reply, follower, f_inc, req, ans, [])
            return
        try:
            records = lg.read(req.fetch_offset, 20)
        except SimCorruptBatch:  # Log.read: CORRUPT_MESSAGE; the follower backs off and retries
            ans = FetchAnswer(ErrorCode.CORRUPT_MESSAGE, st.high_watermark, lg.log_start_offset, None,
                              leader_log_end_offset=lg.log_end_offset)
            w.send(self.id, follower, w.fetch_reply, follower, f_inc, req, ans, [])
            return
        old = st.high_watermark
        st.on_follower_fetch(follower, req.fetch_offset, lg.log_end_offset, w.now, f_epoch)
        self._hw_moved(old)
        self._send_alter()
        ans = FetchAnswer(ErrorCode.NONE, st.high_watermark, lg.log_start_offset, None,
                          req.fetch_offset if records else None,
                          req.fetch_offset + len(records) if records else None, lg.log_end_offset)
        w.send(self.id, follower, w.fetch_reply, follower, f_inc, req, ans, records)

    def on_offsets_for_leader_epoch(self, follower: int, f_inc: int, req: OffsetsForLeaderEpochRequest) -> None:
        if not self.up:
            return
        st, lg, w = self.state, self.log, self.w
        if not st.is_leader:
            err, epoch, end = ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1
        else:
            bad = st.check_leader_epoch(req.current_leader_epoch)
            if bad is not None:
                err, epoch, end = ErrorCode[bad], -1, -1
            else:
                err = ErrorCode.NONE
                epoch, end = lg.leader_epoch_cache.end_offset_for(req.leader_epoch, lg.log_end_offset)
        w.send(self.id, follower, w.ofle_reply, follower, f_inc, req, err, epoch, end)

    # --- follower side --------------------------------------------------------------------
    def pump(self) -> None:
        if not self.up or self.state.is_leader:
            return
        w = self.w
        self._heal()
        act = self.fs.next_action(self.log, w.now)
        if act is None:
            if self.fs.in_flight is None and self.fs.backoff_until_ms > w.now and not self.pump_scheduled:
                self.pump_scheduled = True
                self._timer(self.fs.backoff_until_ms - w.now, self._scheduled_pump, self.incarnation)
            return
        inc = self.incarnation
        if act.leader not in w.brokers:
            self.fs.on_request_failed(act, w.now)
            return
        if isinstance(act, FetchRequest):
            w.send(self.id, act.leader, w.brokers[act.leader].on_fetch, self.id, inc, self.broker_epoch, act)
        else:
            w.send(self.id, act.leader, w.brokers[act.leader].on_offsets_for_leader_epoch, self.id, inc, act)
        self._timer(w.cfg.request_timeout_ms, self._timeout, inc, act)

    def _heal(self) -> None:
        """Our copy does not parse from some offset on: drop it and what follows (those records
        count as lost by this replica) and fetch them again (the fetcher's on_local_damage)."""
        d = self.log.damaged_offset
        if d is None:
            return
        effects = self.fs.on_local_damage(self.log, d, self.id in self.state.isr)
        if not effects:
            return
        lg = self.log
        dropped = [(o, lg.value_at(o)) for o in range(d, lg.log_end_offset) if lg.value_at(o) is not None]
        self.w.trace(f"broker {self.id} truncates its damaged copy to {d} (drops {len(dropped)}) to fetch it again")
        self.w.checker.on_power_loss(self, dropped)
        self.apply_effects(effects, [])

    def consumer_read(self, inc: int) -> None:
        """A consumer reads this replica (the leader, or a follower as with KIP-392) from its
        start to the high watermark, over and over, checking CRCs as the Java client does: a
        batch that fails is fetched again, which makes the broker check it. What finds a
        damaged batch that replication never reads again."""
        if not self.up or inc != self.incarnation:
            return
        lg = self.log
        hw = min(self.state.high_watermark, lg.log_end_offset)
        pos = self.consumer_pos
        if not lg.log_start_offset <= pos < hw:
            pos = lg.log_start_offset
        if pos < hw:
            if pos == lg.log_start_offset:
                self.consumer_whole = True  # a pass that starts at the log start
            try:
                got = lg.read(pos, 50)
                bad = next((k for k, (_e, v) in enumerate(got) if v is None), None)
                if bad is not None:
                    got = lg.read(pos + bad, 50)  # raises: that batch fails at the fetch position
                self.consumer_pos = pos + len(got)
                if self.consumer_pos >= hw and self.consumer_whole:
                    self.consumer_passes += 1
            except SimCorruptBatch:
                self.consumer_pos = pos  # CORRUPT_MESSAGE to the consumer; the log remembers the damage
            self.pump()
        self._timer(self.w.rng_disk.randint(100, 600), self.consumer_read, inc)

    def _scheduled_pump(self, inc: int) -> None:
        if inc == self.incarnation:
            self.pump_scheduled = False
            self.pump()

    def _timeout(self, inc: int, act) -> None:
        if inc == self.incarnation and self.up and self.fs.in_flight is act:
            self.fs.on_request_failed(act, self.w.now)
            self.pump()

    def apply_effects(self, effects, records: list[tuple[int, int]]) -> None:
        st, lg, ck = self.state, self.log, self.w.checker
        for e in effects:
            if isinstance(e, Truncate):
                ck.on_truncate(self, e.offset)
                lg.truncate_to(e.offset)
            elif isinstance(e, TruncateFullyAndStartAt):
                ck.on_truncate(self, lg.log_start_offset)
                lg.truncate_fully_and_start_at(e.offset)
            elif isinstance(e, AppendRecords):
                new = records[lg.log_end_offset - e.first_offset:] if e.first_offset <= lg.log_end_offset else None
                if new is not None and any(v is None for _e, v in new):
                    new = None  # a batch that fails its CRC: append_as_follower refuses it (CORRUPT_MESSAGE)
                if new is None:
                    self.fs.on_append_failed()
                    return
                first = lg.log_end_offset
                lg.append_as_follower(first, new)
                ck.on_append(self, first, new)
            elif isinstance(e, SetHighWatermark):
                old = st.high_watermark
                st.set_follower_high_watermark(e.high_watermark)
                if e.high_watermark > old:
                    ck.on_hw(self, old, e.high_watermark, False)

    def on_fetch_reply(self, inc: int, req: FetchRequest, ans: FetchAnswer, records) -> None:
        if not self.up or inc != self.incarnation:
            return
        effects = self.fs.on_fetch_response(req, self.log, ans, self.w.now)
        self.apply_effects(effects, records)
        if self.fs.in_flight is None and not records and ans.error == ErrorCode.NONE and ans.diverging_epoch is None:
            if not self.pump_scheduled:  # nothing new: poll again a little later
                self.pump_scheduled = True
                self._timer(self.w.cfg.fetch_wait_ms, self._scheduled_pump, inc)
            return
        self.pump()

    def on_ofle_reply(self, inc: int, req, err: ErrorCode, epoch: int, end: int) -> None:
        if not self.up or inc != self.incarnation:
            return
        effects = self.fs.on_offsets_for_leader_epoch(req, self.log, err, epoch, end, self.w.now)
        self.apply_effects(effects, [])
        self.pump()


class World:
    def __init__(self, seed: int, cfg: Config | None = None, trace: Callable[[str], None] | None = None):
        self.seed = seed
        self.rng = random.Random(seed)
        self.rng_disk = random.Random(seed * 104729 + 3)  # disk faults and consumer reads: their own stream
        self.cfg = cfg or Config.swarm(random.Random(seed * 7919 + 1))
        self._trace = trace
        self.now = 0
        self._q: list = []
        self._seq = 0
        self.events = 0
        self.cuts: set[frozenset[int]] = set()
        self.drop_rate = self.cfg.drop_rate
        self.dup_rate = self.cfg.dup_rate
        replicas = tuple(range(1, self.cfg.rf + 1))
        self.controller = ControllerModel(replicas, self.cfg.session_timeout_ms,
                                          unclean_shutdown_detection=self.cfg.unclean_shutdown_detection,
                                          check_broker_epochs=self.cfg.check_broker_epochs)
        self.controller_up = True
        self.state_cls = PartitionState if self.cfg.hw_over_maximal_isr else _CommittedIsrHw
        self.brokers = {b: Broker(self, b) for b in replicas}
        self.checker = Checker(self)
        self.faults = 0
        self.bad_blocks = 0
        self.operator_busy: set[int] = set()
        self.next_value = 1
        self.next_rid = 1
        self.in_flight_produce: dict[int, int] = {}  # rid -> value
        self.producing = True
        self.last_reg_pushed = None
        for b in self.brokers.values():
            b.start()
        self.after(100, self._controller_tick)
        self.after(self.cfg.produce_every_ms, self._produce_tick)

    # --- scheduler ------------------------------------------------------------------------
    def trace(self, msg: str) -> None:
        if self._trace is not None:
            self._trace(f"{self.now:7d} {msg}")

    def after(self, delay_ms: int, fn, *args) -> None:
        self._seq += 1
        heapq.heappush(self._q, (self.now + max(delay_ms, 0), self._seq, fn, args))

    def run_until(self, t_ms: int, stop: Callable[[], bool] | None = None) -> None:
        while self._q and self._q[0][0] <= t_ms:
            t, _s, fn, args = heapq.heappop(self._q)
            self.now = t
            self.events += 1
            fn(*args)
            if stop is not None and self.events % 64 == 0 and stop():
                return
        self.now = max(self.now, t_ms)

    # --- network --------------------------------------------------------------------------
    def _node_up(self, n: int) -> bool:
        if n == CONTROLLER:
            return self.controller_up
        if n == PRODUCER:
            return True
        return self.brokers[n].up

    def send(self, src: int, dst: int, fn, *args) -> None:
        if frozenset((src, dst)) in self.cuts or (self.drop_rate and self.rng.random() < self.drop_rate):
            return
        self.after(self.rng.randint(1, self.cfg.max_delay_ms), self._deliver, src, dst, fn, args)
        if self.dup_rate and self.rng.random() < self.dup_rate:
            self.after(self.rng.randint(1, 4 * self.cfg.max_delay_ms), self._deliver, src, dst, fn, args)

    def _deliver(self, src: int, dst: int, fn, args) -> None:
        if frozenset((src, dst)) in self.cuts or not self._node_up(dst):
            return
        b = self.brokers.get(dst)
        if b is not None and self.now < b.paused_until:  # queued in the socket until it resumes
            self.after(b.paused_until - self.now, self._deliver, src, dst, fn, args)
            return
        fn(*args)

    # --- controller node ------------------------------------------------------------------
    def _controller_tick(self) -> None:
        if self.controller_up:
            self.controller.check_sessions(self.now)
            self._after_controller_change()
        self.after(100, self._controller_tick)

    def _after_controller_change(self) -> None:
        reg = self.controller.reg
        if reg is not self.last_reg_pushed:
            self.last_reg_pushed = reg
            self.trace(f"controller: leader {reg.leader} epoch {reg.leader_epoch} ISR {reg.isr} "
                       f"pe {reg.partition_epoch}")
            self.checker.check_excusals()
            eligible = self.controller.eligible_broker_epochs()
            for b in self.brokers.values():
                self.send(CONTROLLER, b.id, b.on_registration, b.incarnation, reg, eligible)

    def ctl_register(self, broker: int, inc: int) -> None:
        if not self.controller_up:
            return
        epoch = self.controller.register(broker, inc, self.now)
        self._after_controller_change()
        b = self.brokers[broker]
        self.send(CONTROLLER, broker, b.on_registered, inc, epoch)

    def ctl_heartbeat(self, broker: int, broker_epoch: int, inc: int) -> None:
        if not self.controller_up:
            return
        err = self.controller.heartbeat(broker, broker_epoch, self.now)
        self._after_controller_change()
        b = self.brokers[broker]
        if err != ErrorCode.NONE:
            self.send(CONTROLLER, broker, b.on_stale_broker_epoch, inc, broker_epoch)
            return
        self.send(CONTROLLER, broker, b.on_registration, inc, self.controller.reg,
                  self.controller.eligible_broker_epochs())

    def ctl_alter(self, broker: int, inc: int, req) -> None:
        if not self.controller_up:
            return
        err, reg = self.controller.alter_partition(req)
        self._after_controller_change()
        b = self.brokers[broker]
        self.send(CONTROLLER, broker, b.on_alter_response, inc, req, err, reg)

    # --- producer -------------------------------------------------------------------------
    def _produce_tick(self) -> None:
        if self.producing:
            leader = self.controller.reg.leader  # the client's metadata
            if leader > 0:
                rid, value = self.next_rid, self.next_value
                self.next_rid += 1
                self.next_value += 1
                self.in_flight_produce[rid] = value
                self.send(PRODUCER, leader, self.brokers[leader].on_produce, rid, value)
        self.after(self.cfg.produce_every_ms, self._produce_tick)

    def producer_reply(self, rid: int, err: ErrorCode, offset: int) -> None:
        value = self.in_flight_produce.pop(rid, None)
        if value is not None and err == ErrorCode.NONE:
            self.checker.on_ack(value, offset)

    def fetch_reply(self, follower: int, inc: int, req, ans, records) -> None:
        self.brokers[follower].on_fetch_reply(inc, req, ans, records)

    def ofle_reply(self, follower: int, inc: int, req, err, epoch, end) -> None:
        self.brokers[follower].on_ofle_reply(inc, req, err, epoch, end)

    # --- faults ---------------------------------------------------------------------------
    def _fault(self) -> None:
        rng, cfg = self.rng, self.cfg
        self.faults += 1
        kind = rng.random()
        dur = rng.randint(100, 3000)
        if kind < 0.35:
            b = self.brokers[rng.randint(1, cfg.rf)]
            if b.up:
                b.crash(power_loss=rng.random() < 0.5)
                self.after(dur, self._restart, b.id, b.incarnation)
        elif kind < 0.45:
            b = self.brokers[rng.randint(1, cfg.rf)]
            if b.up and b.paused_until <= self.now:
                b.paused_until = self.now + dur
                self.trace(f"broker {b.id} paused for {dur}ms")
        elif kind < 0.78:
            nodes = [CONTROLLER, *self.brokers]
            a = rng.choice(nodes)
            if rng.random() < 0.5:  # isolate a from everyone
                pairs = {frozenset((a, x)) for x in nodes if x != a}
            else:
                pairs = {frozenset((a, rng.choice([x for x in nodes if x != a])))}
            pairs -= self.cuts
            self.cuts |= pairs
            self.trace(f"cut {sorted(tuple(sorted(p)) for p in pairs)}")
            self.after(dur, self._heal_cut, pairs)
        elif kind < 0.88:
            if self.controller_up:
                self.controller_up = False
                self.trace("controller down")
                self.after(dur, self._controller_back)
        else:
            self.rng.choice(list(self.brokers.values())).writeback()

    def _disk_fault(self) -> None:
        """Issue 18's disk faults, from their own random stream: a clean stop followed by a power
        cut that tears the last write; or (once per run: a single bad block, so that a majority
        of the replicas stays intact) a bad block in a closed segment of a stopped broker."""
        rng = self.rng_disk
        b = self.brokers[rng.randint(1, self.cfg.rf)]
        if self.bad_blocks or rng.random() < 0.7:
            if b.up:
                self.faults += 1
                b.crash(power_loss=True, clean=True, torn_bytes=rng.randint(1, 120))
                self.after(rng.randint(100, 2000), self._restart, b.id, b.incarnation)
            return
        if b.up:
            b.crash(power_loss=False)
            self.after(rng.randint(100, 2000), self._restart, b.id, b.incarnation)
        hit = b.log.corrupt_closed_batch(rng)
        if hit is not None:
            self.faults += 1
            self.bad_blocks += 1
            b.disk_touched = True
            self.trace(f"broker {b.id}: bad block under offset {hit[0]} (value {hit[1]})")
            self.checker.damaged[(b.id, hit[0])] = hit[1]
            self.checker.on_power_loss(b, [hit])

    def _disk_fault_tick(self, until: int) -> None:
        if self.now >= until:
            return
        self._disk_fault()
        self.after(self.rng_disk.randint(self.cfg.fault_every_ms, self.cfg.fault_every_ms * 4), self._disk_fault_tick,
                   until)

    def _operator_tick(self) -> None:
        """The operator reads the ERROR a leader logs for a batch of its own that does not parse
        and restarts that broker: controlled shutdown moves leadership to another in-sync
        replica, and the restarted replica, a follower now, truncates its damaged copy and
        fetches it again (what the log message tells an operator to do)."""
        for b in self.brokers.values():
            if (b.up and b.state.is_leader and b.log.damaged_offset is not None and b.id not in self.operator_busy
                    and len(self.controller.reg.isr) > 1):  # else no in-sync replica could take over
                self.operator_busy.add(b.id)
                self.trace(f"operator: broker {b.id} reports a corrupt batch at {b.log.damaged_offset}; restarting it")
                b.crash(power_loss=False, clean=True)
                b.disk_touched = True  # the damage found by the read is found again at open, or by reads
                self.after(self.rng_disk.randint(300, 1500), self._operator_restart, b.id, b.incarnation)
        self.after(1000, self._operator_tick)

    def _operator_restart(self, broker: int, inc: int) -> None:
        self.operator_busy.discard(broker)
        self._restart(broker, inc)

    def _restart(self, broker: int, inc: int) -> None:
        b = self.brokers[broker]
        if not b.up and b.incarnation == inc:
            b.start()

    def _heal_cut(self, pairs) -> None:
        self.cuts -= pairs

    def _controller_back(self) -> None:
        if not self.controller_up:
            self.controller_up = True
            self.controller.on_failover(self.now)
            self.trace("controller failover: back with committed state")

    def _writeback_tick(self) -> None:
        # the OS writes dirty pages back now and then; which broker, and when, is random
        self.rng.choice(list(self.brokers.values())).writeback()
        self.after(self.rng.randint(50, 1500), self._writeback_tick)

    def _fault_tick(self, until: int) -> None:
        if self.now >= until:
            return
        self._fault()
        self.after(self.rng.randint(self.cfg.fault_every_ms // 2, self.cfg.fault_every_ms * 3 // 2),
                   self._fault_tick, until)

    def heal(self) -> None:
        self.cuts.clear()
        self.drop_rate = 0.0
        self.dup_rate = 0.0
        if not self.controller_up:
            self._controller_back()
        for b in self.brokers.values():
            b.paused_until = min(b.paused_until, self.now)
            if not b.up:
                b.start()

    # --- run ------------------------------------------------------------------------------
    def converged(self) -> bool:
        reg = self.controller.reg
        if reg.leader < 0 or set(reg.isr) != set(reg.replicas):
            return False
        lead = self.brokers[reg.leader]
        leo = lead.log.log_end_offset
        if not lead.state.is_leader or lead.state.high_watermark != leo or self.post_heal_acks == 0:
            return False
        if self.cfg.disk_faults and any(b.log.damaged_offset is not None or b.consumer_passes < 1
                                        for b in self.brokers.values()):
            return False  # every replica read end to end by a consumer since the heal, no damage left
        return all(b.log.log_end_offset == leo and b.state.high_watermark == leo for b in self.brokers.values())

    def run(self) -> Result:
        cfg = self.cfg
        self.after(self.rng.randint(50, 500), self._writeback_tick)
        self.after(self.rng.randint(100, cfg.fault_every_ms), self._fault_tick, cfg.safety_ms)
        if cfg.disk_faults:
            self.after(self.rng_disk.randint(100, cfg.fault_every_ms * 2), self._disk_fault_tick, cfg.safety_ms)
            self.after(1000, self._operator_tick)
        self.run_until(cfg.safety_ms)
        self.heal()
        self.trace("heal")
        for b in self.brokers.values():
            b.consumer_passes, b.consumer_whole = 0, False
        acked_before = len(self.checker.acked)
        self.post_heal_acks = 0

        def stop() -> bool:
            self.post_heal_acks = len(self.checker.acked) - acked_before
            if self.post_heal_acks >= 10:
                self.producing = False  # quiesce so that every replica can catch up
            return self.converged()

        self.run_until(cfg.safety_ms + cfg.liveness_ms, stop)
        stop()
        lost_everywhere = None if self.converged() else self._lost_everywhere()
        if lost_everywhere is not None:
            self.trace(f"no convergence: record {lost_everywhere} is lost on every replica (a bad block took the "
                       f"last copy): the partition needs an operator's choice of data loss to move past it")
        elif not self.converged():
            reg = self.controller.reg
            state = {b.id: (b.log.log_end_offset, b.state.high_watermark, b.state.leader, b.fs.phase.value)
                     for b in self.brokers.values()}
            self.checker.fail(f"no convergence {cfg.liveness_ms}ms after healing: controller {reg}, "
                              f"brokers (LEO, HW, leader, phase) {state}, acks after heal {self.post_heal_acks}")
        self._final_check(replicas_equal=lost_everywhere is None)
        return Result(self.seed, len(self.checker.acked), len(self.checker.excused), self.faults, self.events,
                      self.now, self.brokers[self.controller.reg.leader].log.log_end_offset,
                      int(lost_everywhere is not None))

    def _lost_everywhere(self) -> tuple[int, int] | None:
        """(offset, value) of a record a bad block took from the leader when no other replica
        holds it either and every follower needs it (its log ends there): a double fault
        (power losses, then a bad block on the last copy) that Kafka does not promise to get
        past without an operator choosing data loss (unclean election, DeleteRecords)."""
        lead = self.brokers.get(self.controller.reg.leader)
        d = lead.log.damaged_offset if lead is not None else None
        v = self.checker.damaged.get((lead.id, d)) if d is not None else None
        if v is None or (d, v) not in self.checker.excused:
            return None
        others = [b for b in self.brokers.values() if b is not lead]
        if any(b.log.value_at(d) == v or b.log.log_end_offset > d for b in others):
            return None
        return d, v

    def _final_check(self, replicas_equal: bool = True) -> None:
        ck = self.checker
        lead = self.brokers[self.controller.reg.leader].log
        for o, v in ck.committed.items():
            if (o, v) not in ck.excused and lead.value_at(o) != v:
                ck.fail(f"committed value {v} at offset {o} lost (leader has {lead.value_at(o)})")
        for v, o in ck.acked.items():
            if (o, v) not in ck.excused and lead.value_at(o) != v:
                ck.fail(f"acknowledged value {v} at offset {o} lost (leader has {lead.value_at(o)})")
        ref = [b.log.records for b in self.brokers.values()]
        if replicas_equal and any(r != ref[0] for r in ref):
            ck.fail("replicas differ after convergence")


class _CommittedIsrHw(PartitionState):
    """A deliberately wrong HW rule (committed ISR only, ignoring a pending expansion) to
    show what KIP-497's maximal ISR protects against."""

    __slots__ = ()

    def maybe_advance_hw(self, local_end_offset: int) -> bool:
        if not self.is_leader:
            return False
        candidate = local_end_offset
        for r in self.isr:
            if r != self.local_broker:
                candidate = min(candidate, self.follower_end_offsets.get(r, -1))
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False


def run_seed(seed: int, cfg: Config | None = None, verbose: bool = False) -> Result:
    return World(seed, cfg, trace=print if verbose else None).run()
