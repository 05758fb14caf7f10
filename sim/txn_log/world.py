"""A seeded simulation of one partition's transactional data plane on RF replicas, run on the
product's own code: each replica is a real ``broker.log.Log`` (real files in a temporary
directory, its ``ProducerStateManager``, ``.txnindex`` and snapshots), the leader's high
watermark is a real ``PartitionState``. The world plays the rest: transactional producers and
their coordinator (which decides commit or abort and writes the markers until they are
acknowledged), plain producers, follower fetches, and faults: ``kill -9`` of a follower (its log
dropped without close, its snapshots and transaction indexes of unflushed segments lost),
clean restarts, leader failover with truncation of the followers to the new leader's log,
and (on compacted seeds) the log cleaner.

Invariants, checked after every event:

- the leader's last stable offset is never above its high watermark, and never moves back
  while the same replica leads;
- a read_committed consumer (the records below the LSO, less the aborted transactions the
  leader lists, as Kafka clients filter them) sees exactly the committed data: the plain
  records and the records of transactions whose COMMIT marker is in the log, never one of an
  aborted or undecided transaction (with compaction: never one of those, and the newest
  committed value of every key);
- a batch that arrives for a transaction that was already ended (a late retry, no fresh
  verification) is refused with INVALID_TXN_STATE, and so is one whose verification raced
  with the marker (KIP-890: no hanging transaction);
- a replica reopened after kill -9 holds the same open transactions and aborted-transaction
  index entries as before.

After the faults stop, every transaction is ended and every replica catches up: the LSO
reaches the log end, and all replicas hold the same aborted transactions and producer state.
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import uuid
from collections.abc import Callable

from broker.log import Log, LogConfig, parse_batches
from broker.log.batch import Record, build_batch, build_end_txn_marker, decode_records
from broker.log.cleaner import compact
from broker.log.producer_state import COORDINATOR
from broker.log.segment import LOG_SUFFIX
from broker.log.txn_index import TXNINDEX_SUFFIX
from broker.replica.partition import PartitionState
from common.errors import ErrorCode, KafkaError
from metadata.image import PartitionRegistration
from sim.disk import scratch_dir

TOPIC_ID = uuid.UUID(int=19)
MAX = 1 << 20


class InvariantViolation(AssertionError):
    pass


@dataclasses.dataclass(slots=True)
class Config:
    rf: int = 3
    producers: int = 3
    steps: int = 160
    segment_bytes: int = 700
    compacted: bool = False
    p_fault: float = 0.08

    @classmethod
    def swarm(cls, rng: random.Random) -> Config:
        return cls(rf=rng.choice((2, 3)), producers=rng.randint(1, 4), steps=rng.randint(80, 200),
                   segment_bytes=rng.choice((500, 900, 4000)), compacted=rng.random() < 0.3,
                   p_fault=rng.choice((0.03, 0.08, 0.15)))


@dataclasses.dataclass(slots=True)
class Txn:
    pid: int
    epoch: int
    number: int
    # (base sequence, offset, keys, values) of each batch written
    batches: list[tuple[int, int, list[bytes], list[bytes]]] = dataclasses.field(default_factory=list)
    outcome: bool | None = None  # True commit, False abort, None open
    marker_epoch: int = -1  # the producer epoch the coordinator ends it with (bumped after an abort)
    marker_offset: int | None = None  # where its marker was last written


@dataclasses.dataclass(slots=True)
class Producer:
    pid: int
    epoch: int = 0
    seq: int = 0
    txn: Txn | None = None
    ended: Txn | None = None  # the last ended transaction (a late batch may come for it)


class World:
    def __init__(self, seed: int, config: Config | None = None, trace: Callable[[str], None] | None = None):
        self.seed = seed
        self.rng = random.Random(seed)
        self.cfg = config or Config.swarm(random.Random(seed * 31 + 7))
        self.trace = trace or (lambda _s: None)
        self.dir = scratch_dir(f"txnsim-{seed}-")
        self.decoded: dict[bytes, list] = {}  # batch bytes -> its records (_decode)
        self.now = 1_000
        cfg = {"segment.bytes": self.cfg.segment_bytes, "cleanup.policy": "compact" if self.cfg.compacted else "delete"}
        self.log_config = LogConfig.from_topic_configs(cfg)
        self.ids = list(range(1, self.cfg.rf + 1))
        self.logs: dict[int, Log | None] = {i: self._open(i) for i in self.ids}
        self.follower_hw: dict[int, int] = dict.fromkeys(self.ids, 0)
        self.leader = 1
        self.leader_epoch = 0
        self.partition_epoch = 0
        self.isr = tuple(self.ids)
        self.state = self._lead(1, 0)
        self.last_lso = 0
        self.producers = [Producer(100 + i) for i in range(self.cfg.producers)]
        self.txns: dict[tuple[int, int, int], Txn] = {}  # (pid, epoch, base sequence) -> its transaction
        self.pending_markers: list[Txn] = []  # decided, marker not yet acknowledged (HW)
        self.coordinator_epoch = 0
        self.plain = 0
        self.cleaned: set[int] = set()  # replicas whose log the cleaner rewrote (while they led)
        self.stats = {"committed": 0, "aborted": 0, "late_refused": 0, "kills": 0, "failovers": 0, "cleanings": 0}

    # --- replicas ------------------------------------------------------------------------
    def _open(self, i: int, clean: bool = False) -> Log:
        return Log.open(os.path.join(self.dir, str(i)), "t", 0, self.log_config, now_ms=self.now,
                        clean_shutdown=clean)

    def _lead(self, leader: int, hw: int) -> PartitionState:
        st = PartitionState("t", 0, TOPIC_ID, leader)
        st.high_watermark = hw
        reg = PartitionRegistration(tuple(self.ids), self.isr, leader, self.leader_epoch, self.partition_epoch)
        lg = self.logs[leader]
        if st.make_leader(reg, lg.log_end_offset, self.now):
            lg.leader_epoch_cache.assign(self.leader_epoch, lg.log_end_offset)
        return st

    @property
    def lead_log(self) -> Log:
        return self.logs[self.leader]

    def _set_isr(self, isr: tuple[int, ...]) -> None:
        self.isr = tuple(sorted(isr))
        self.partition_epoch += 1
        reg = PartitionRegistration(tuple(self.ids), self.isr, self.leader, self.leader_epoch, self.partition_epoch)
        self.state.make_leader(reg, self.lead_log.log_end_offset, self.now)

    # --- appends -------------------------------------------------------------------------
    def _batch(self, values: list[bytes], keys: list[bytes], pid: int = -1, epoch: int = -1, seq: int = -1,
               transactional: bool = False) -> tuple[bytearray, list]:
        buf = build_batch([Record(i, self.now, k, v, []) for i, (k, v) in enumerate(zip(keys, values, strict=True))],
                          base_offset=0, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                          transactional=transactional)
        return buf, parse_batches(buf)

    def _key(self) -> bytes:
        return b"k%d" % self.rng.randrange(6)

    def plain_write(self) -> None:
        self.plain += 1
        buf, hs = self._batch([b"plain-%d" % self.plain], [self._key()])
        self.lead_log.append_as_leader(buf, hs, self.leader_epoch, self.now)
        self.trace(f"plain write {self.plain}")

    def txn_write(self, p: Producer) -> None:
        if p.txn is None:
            p.txn = Txn(p.pid, p.epoch, len(self.txns))
        t = p.txn
        lost = [i for i, (seq, off, _k, _v) in enumerate(t.batches) if self._batch_gone(t, seq, off)]
        if lost:  # a batch the replicas never acknowledged went with a failover: the producer resends it
            i = lost[0]
            seq, _off, keys, values = t.batches[i]
        else:
            i, seq = len(t.batches), p.seq
            values = [b"txn-%d-%d-%d" % (p.pid, t.number, p.seq + j) for j in range(self.rng.randint(1, 3))]
            keys = [self._key() for _ in values]
        buf, hs = self._batch(values, keys, p.pid, p.epoch, seq, True)
        ps = self.lead_log.producer_state
        guard = ps.maybe_start_verification(p.pid, seq, p.epoch, self.now)  # the coordinator confirms it
        try:
            info = self.lead_log.append_as_leader(buf, hs, self.leader_epoch, self.now, verification_guard=guard,
                                                  require_verification=True)
        except KafkaError as e:
            raise InvariantViolation(f"transactional write of {p.pid} refused: {e}") from None
        if lost:
            t.batches[i] = (seq, info.first_offset, keys, values)
        else:
            t.batches.append((seq, info.first_offset, keys, values))
            p.seq += len(values)
        self.txns[(p.pid, p.epoch, seq)] = t
        self.trace(f"producer {p.pid} {'resends' if lost else 'writes'} {len(values)} in txn {t.number} "
                   f"at {info.first_offset}")

    def end_txn(self, p: Producer) -> None:
        t = p.txn
        hw = self.state.high_watermark
        # the producer commits only once its batches are acknowledged (acks=all): one lost to a
        # failover (truncated) makes it abort
        lost = any(self._batch_gone(t, seq, off) for seq, off, _k, _v in t.batches)
        acked = all(off < hw for _s, off, _k, _v in t.batches)
        if not acked and not lost:
            return  # still waiting for the replicas
        t.outcome = (not lost) and self.rng.random() < 0.6
        if not t.outcome or self.rng.random() < 0.3:
            # an abort (always, when a batch was lost: its sequence is gone), or transaction version 2:
            # the coordinator bumps the epoch and the producer starts its sequences again
            p.epoch += 1
            p.seq = 0
        t.marker_epoch = p.epoch
        p.txn, p.ended = None, t
        self.pending_markers.append(t)
        self.trace(f"coordinator decides {'COMMIT' if t.outcome else 'ABORT'} of txn {t.number} ({p.pid})")
        self.write_markers()

    def _batch_gone(self, t: Txn, seq: int, offset: int) -> bool:
        lg = self.lead_log
        if offset >= lg.log_end_offset:
            return True
        sl = lg.read(offset, 1, lg.log_end_offset)
        if sl is None:
            return True
        h = parse_batches(lg.read_bytes(sl))[0]
        return (h.producer_id, h.base_sequence, h.base_offset) != (t.pid, seq, offset)

    def write_markers(self) -> None:
        """The coordinator (re)sends the markers not yet acknowledged, as WriteTxnMarkers does."""
        hw = self.state.high_watermark
        for t in list(self.pending_markers):
            at = t.marker_offset
            if at is not None and at < hw and not self._marker_gone(t, at):
                self.pending_markers.remove(t)
                self.stats["committed" if t.outcome else "aborted"] += 1
                continue
            if at is not None and not self._marker_gone(t, at):
                continue  # written, waiting for the replicas
            buf = build_end_txn_marker(t.pid, t.marker_epoch, t.outcome, self.coordinator_epoch, self.now)
            try:
                info = self.lead_log.append_as_leader(buf, parse_batches(buf), self.leader_epoch, self.now,
                                                      origin=COORDINATOR)
            except KafkaError as e:
                raise InvariantViolation(f"marker of txn {t.number} refused: {e}") from None
            t.marker_offset = info.first_offset
            self.trace(f"marker of txn {t.number} at {info.first_offset}")

    def _marker_gone(self, t: Txn, offset: int) -> bool:
        lg = self.lead_log
        if offset >= lg.log_end_offset:
            return True
        sl = lg.read(offset, 1, lg.log_end_offset)
        if sl is None:
            return True
        h = parse_batches(lg.read_bytes(sl))[0]
        return not (h.is_control and h.producer_id == t.pid and h.producer_epoch == t.marker_epoch
                    and h.base_offset == offset)

    def late_batch(self, p: Producer) -> None:
        """A retry of a batch of an ended transaction, arriving after its marker: without a new
        verification, or with one that raced with a marker, it must be refused."""
        t = p.ended
        lg = self.lead_log
        buf, hs = self._batch([b"late"], [b"late"], p.pid, p.epoch, p.seq, True)
        if self.rng.random() < 0.5:
            guard = None
        else:  # verification starts, then the coordinator ends another transaction of it: a marker lands
            guard = lg.producer_state.maybe_start_verification(p.pid, p.seq, p.epoch, self.now)
            m = build_end_txn_marker(p.pid, p.epoch, False, self.coordinator_epoch, self.now)
            lg.append_as_leader(m, parse_batches(m), self.leader_epoch, self.now, origin=COORDINATOR)
        before = lg.log_end_offset
        try:
            lg.append_as_leader(buf, hs, self.leader_epoch, self.now, verification_guard=guard,
                                require_verification=True)
        except KafkaError as e:
            if e.code != ErrorCode.INVALID_TXN_STATE:
                raise InvariantViolation(f"late batch of txn {t.number} refused with {e}") from None
            self.stats["late_refused"] += 1
            self.trace(f"late batch of {p.pid} refused")
            return
        raise InvariantViolation(f"late batch of {p.pid} (txn {t.number} ended) appended at {before}: a hanging "
                                 "transaction")

    # --- replication ---------------------------------------------------------------------
    def fetch(self, f: int) -> None:
        lg, leader = self.logs[f], self.lead_log
        if lg is None or f == self.leader:
            return
        leo = lg.log_end_offset
        if leo < leader.log_end_offset:
            sl = leader.read(leo, self.rng.choice((200, 2000, MAX)), leader.log_end_offset)
            if sl is not None:
                lg.append_as_follower(bytearray(leader.read_bytes(sl)), now_ms=self.now)
        self.state.on_follower_fetch(f, lg.log_end_offset, leader.log_end_offset, self.now)
        self.state.maybe_advance_hw(leader.log_end_offset)
        # a follower's high watermark only moves up (Kafka's maybeUpdateHighWatermark), except by truncation
        self.follower_hw[f] = max(self.follower_hw[f], min(self.state.high_watermark, lg.log_end_offset))
        if f not in self.isr and lg.log_end_offset >= self.state.high_watermark:
            self._set_isr(self.isr + (f,))
            self.trace(f"replica {f} back in the ISR")

    def kill(self, f: int) -> None:
        """kill -9 of a follower: no close. What the OS had not written back may be lost: the
        snapshots and transaction indexes of segments past the recovery point."""
        lg = self.logs[f]
        lso = lg.last_stable_offset(self.follower_hw[f])
        before = self._recoverable_state(f, lg, lso)
        for s in lg.segments:
            s.release()
        for name in os.listdir(lg.path):
            if name.endswith((".snapshot", TXNINDEX_SUFFIX)) and self.rng.random() < 0.5:
                base = int(name[:20])
                if base >= lg.recovery_point or name.endswith(".snapshot"):
                    os.unlink(os.path.join(lg.path, name))
        reopened = self._open(f)
        after = self._recoverable_state(f, reopened, lso)
        if after != before:
            raise InvariantViolation(f"replica {f} reopened after kill -9 with {after}, had {before}")
        # the restarted replica forgot how far its high watermark had passed markers: its LSO can
        # only be as far as before or more careful, never beyond
        if reopened.last_stable_offset(self.follower_hw[f]) > lso:
            raise InvariantViolation(f"replica {f}'s LSO went from {lso} to "
                                     f"{reopened.last_stable_offset(self.follower_hw[f])} over a restart")
        self.logs[f] = reopened
        self.stats["kills"] += 1
        self.trace(f"replica {f} killed and restarted")

    def _recoverable_state(self, f: int, lg: Log, lso: int) -> tuple:
        """What a restart must give back: the open transactions, what a read_committed consumer
        reads below ``lso``, and the aborted-transaction index (a compacted copy may rebuild
        fewer entries: those of transactions the cleaner already emptied, which hide nothing)."""
        index = None if f in self.cleaned else self._aborted(lg)
        return self._ongoing(lg), read_committed(lg, lso), index

    def restart_clean(self, f: int) -> None:
        self.logs[f].close()
        self.logs[f] = self._open(f, clean=True)
        self.trace(f"replica {f} restarted cleanly")

    def failover(self) -> None:
        """The leader dies; an ISR member takes over in a new epoch, the others (the old leader
        on its return too) truncate to where their logs diverge from the new leader's."""
        candidates = [i for i in self.isr if i != self.leader and self.logs[i] is not None]
        if not candidates:
            return
        new = self.rng.choice(candidates)
        old = self.leader
        self.follower_hw[old] = max(self.follower_hw[old], self.state.high_watermark)  # what it knew as leader
        self.leader_epoch += 1
        self.leader = new
        self.isr = tuple(sorted(set(self.isr) - {old}))
        self.partition_epoch += 1
        self.state = self._lead(new, self.follower_hw[new])
        self.last_lso = -1
        lead = self.lead_log
        for i in self.ids:
            if i != new:
                self._truncate_to_leader(self.logs[i], lead)
                self.follower_hw[i] = min(self.follower_hw[i], self.logs[i].log_end_offset)
        self.stats["failovers"] += 1
        self.trace(f"failover: {new} leads in epoch {self.leader_epoch}")
        self.write_markers()  # the coordinator resends the markers the old leader never acknowledged

    @staticmethod
    def _truncate_to_leader(lg: Log, lead: Log) -> None:
        """Kafka's truncation by leader epoch (KIP-101/279), as the follower fetcher does it:
        ask the leader for the end of our latest epoch, cut there (a compacted copy with other
        batch bytes at the same offsets is not a divergence)."""
        for _ in range(100):
            mine = lg.leader_epoch_cache.latest_epoch()
            if mine < 0:
                lg.truncate_to(min(lg.log_end_offset, lead.log_end_offset))
                return
            epoch, end = lead.leader_epoch_cache.end_offset_for(mine, lead.log_end_offset)
            if epoch < 0:
                lg.truncate_fully_and_start_at(lead.log_start_offset)
                return
            if epoch != mine:
                _e, my_end = lg.leader_epoch_cache.end_offset_for(epoch, lg.log_end_offset)
                end = min(end, my_end)
            if end >= lg.log_end_offset:
                return
            lg.truncate_to(end)

    def clean(self) -> None:
        if self.cfg.compacted:
            st = compact(self.lead_log, self.now, high_watermark=self.state.high_watermark, force=True)
            if st.segments:
                self.cleaned.add(self.leader)
                self.stats["cleanings"] += 1
                self.trace(f"cleaner rewrote {st.segments} segments")

    # --- invariants ----------------------------------------------------------------------
    @staticmethod
    def _ongoing(lg: Log) -> dict[int, int]:
        return {pid: e.current_txn_first_offset for pid, e in lg.producer_state.producers.items()
                if e.current_txn_first_offset >= 0}

    @staticmethod
    def _aborted(lg: Log) -> list:
        return sorted((t.producer_id, t.first_offset, t.last_offset) for s in lg.segments for t in s.txn_index.entries)

    def check(self) -> None:
        lg, hw = self.lead_log, self.state.high_watermark
        lso = lg.last_stable_offset(hw)
        if lso > hw:
            raise InvariantViolation(f"LSO {lso} above the high watermark {hw}")
        if lso < self.last_lso:
            raise InvariantViolation(f"LSO went back from {self.last_lso} to {lso} under the same leader")
        self.last_lso = lso
        # a transaction is readable only once its marker is replicated: its outcome can no longer
        # be lost with a failover (Kafka's unreplicated transactions keep the LSO before it)
        waiting: dict[int, list[int]] = {}
        for h in _headers(lg):
            if h.is_control:
                for o in waiting.pop(h.producer_id, ()):
                    if h.base_offset >= hw:
                        raise InvariantViolation(f"LSO {lso} exposes the transaction at {o}, whose marker at "
                                                 f"{h.base_offset} is not below the high watermark {hw}")
            elif h.is_transactional and h.records_count and h.base_offset < lso:
                waiting.setdefault(h.producer_id, []).append(h.base_offset)
        if waiting:
            raise InvariantViolation(f"LSO {lso} exposes transactions without a marker: {waiting}")
        seen = read_committed(lg, lso, self.decoded)
        expected = self._committed_below(lg, lso)
        if self.cfg.compacted:
            bad = [v for v in seen if v not in set(expected) and not v.startswith(b"plain")]
            newest: dict[bytes, bytes] = {}
            for k, v in self._committed_below(lg, lso, keyed=True):
                newest[k] = v
            missing = [v for v in newest.values() if v not in seen]
            if bad or missing:
                raise InvariantViolation(f"read_committed below LSO {lso}: unexpected {bad[:3]}, missing {missing[:3]}")
        elif seen != expected:
            extra = [v for v in seen if v not in expected][:3]
            gone = [v for v in expected if v not in seen][:3]
            raise InvariantViolation(f"read_committed below LSO {lso} saw {len(seen)} records, expected "
                                     f"{len(expected)}: unexpected {extra}, missing {gone}")

    def _committed_below(self, lg: Log, lso: int, keyed: bool = False) -> list:
        """What a read_committed consumer must see below ``lso``, from the log's own batches and
        the coordinator's decisions: plain records, and those of committed transactions."""
        out = []
        markers = {h.producer_id: h for h in _headers(lg) if h.is_control}
        for h, recs in _batches(lg, lso, self.decoded):
            if h.is_control:
                continue
            if h.is_transactional:
                t = self.txns.get((h.producer_id, h.producer_epoch, h.base_sequence))
                if t is None or t.outcome is None:
                    raise InvariantViolation(f"a batch of an undecided transaction below the LSO {lso} at {h.base_offset}")
                if not t.outcome:
                    continue
                if h.producer_id not in markers:
                    raise InvariantViolation(f"txn {t.number} below the LSO without its marker")
            out += [(r.key, r.value) if keyed else r.value for r in recs]
        return out

    # --- running -------------------------------------------------------------------------
    def step(self) -> None:
        self.now += self.rng.randint(1, 50)
        r = self.rng.random()
        live = [i for i in self.ids if i != self.leader and self.logs[i] is not None]
        if r < self.cfg.p_fault:
            kind = self.rng.random()
            if kind < 0.4 and live:
                self.kill(self.rng.choice(live))
            elif kind < 0.6 and live:
                self.restart_clean(self.rng.choice(live))
            elif kind < 0.85:
                self.failover()
            else:
                self.clean()
        elif r < 0.45:
            p = self.rng.choice(self.producers)
            if p.txn is not None and self.rng.random() < 0.35:
                self.end_txn(p)
            elif p.ended is not None and p.txn is None and self.rng.random() < 0.1:
                self.late_batch(p)
            else:
                self.txn_write(p)
        elif r < 0.55:
            self.plain_write()
        else:
            for f in live:
                self.fetch(f)
            self.write_markers()
        self.check()

    def heal(self) -> None:
        """Faults stop: every producer ends its transaction, the coordinator's markers land,
        every replica catches up."""
        for _ in range(200):
            for f in self.ids:
                self.fetch(f)
            for p in self.producers:
                if p.txn is not None:
                    self.end_txn(p)
            self.write_markers()
            self.check()
            if all(p.txn is None for p in self.producers) and not self.pending_markers and all(
                    self.logs[i].log_end_offset == self.lead_log.log_end_offset for i in self.ids):
                break
        lg, hw = self.lead_log, self.state.high_watermark
        if lg.last_stable_offset(hw) != lg.log_end_offset or hw != lg.log_end_offset:
            raise InvariantViolation(f"not converged: LSO {lg.last_stable_offset(hw)}, HW {hw}, LEO {lg.log_end_offset}")
        want = self._aborted(lg)
        for i in self.ids if not self.cleaned else ():  # the cleaner rewrites the leader's index
            if self._aborted(self.logs[i]) != want or self._ongoing(self.logs[i]):
                raise InvariantViolation(f"replica {i} holds aborted transactions {self._aborted(self.logs[i])} "
                                         f"(leader: {want}), open {self._ongoing(self.logs[i])}")

    def run(self) -> dict:
        try:
            for _ in range(self.cfg.steps):
                self.step()
            self.heal()
            return dict(self.stats, leo=self.lead_log.log_end_offset)
        finally:
            for lg in self.logs.values():
                if lg is not None:
                    for s in lg.segments:
                        s.release()
            shutil.rmtree(self.dir, ignore_errors=True)


def _headers(lg: Log):
    for s in list(lg.segments):
        if s.size:
            yield from s.iter_headers(0)


def _decode(data: bytes, h, cache: dict | None) -> list:
    """The records of the batch at ``h`` in ``data``; with ``cache``, decoded once per distinct
    batch bytes (the checks after every event read the whole log again: its batches rarely change)."""
    raw = data[h.pos:h.pos + h.size]
    if cache is None:
        return decode_records(raw)
    recs = cache.get(raw)
    if recs is None:
        recs = cache[raw] = decode_records(raw)
    return recs


def _batches(lg: Log, upto: int, cache: dict | None = None):
    off = lg.log_start_offset
    while off < upto and (sl := lg.read(off, MAX, upto)) is not None:
        data = lg.read_bytes(sl)
        for h in parse_batches(data):
            yield h, _decode(data, h, cache)
            off = h.last_offset + 1


def read_committed(lg: Log, lso: int, cache: dict | None = None) -> list[bytes]:
    """A read_committed consumer from the log start: records below the LSO, the aborted
    transactions listed with each fetch dropped as Kafka clients drop them (``cache``: see
    ``_decode``)."""
    out: list[bytes] = []
    off = lg.log_start_offset
    while off < lso and (sl := lg.read(off, 600, lso, min_one_batch=True)) is not None:
        data = lg.read_bytes(sl)
        aborted = sorted((t.first_offset, t.producer_id) for t in lg.aborted_transactions(off, lg.fetch_upper_bound(sl)))
        skipping: set[int] = set()
        for h in parse_batches(data):
            while aborted and aborted[0][0] <= h.last_offset:
                skipping.add(aborted.pop(0)[1])
            if h.is_control:
                skipping.discard(h.producer_id)
            elif not (h.is_transactional and h.producer_id in skipping):
                out += [r.value for r in _decode(data, h, cache)]
            off = h.last_offset + 1
    return out


def run_seed(seed: int, config: Config | None = None) -> dict:
    w = World(seed, config)
    try:
        return w.run()
    except InvariantViolation as e:
        raise InvariantViolation(f"seed {seed}: {e}\n  replay: python -m sim.txn_log.run --seeds 1 --start {seed} "
                                 "--verbose") from None


__all__ = ["Config", "InvariantViolation", "World", "run_seed", "read_committed", "LOG_SUFFIX"]
