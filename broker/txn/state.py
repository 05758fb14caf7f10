"""The transaction coordinator's state machine and logic, sans-IO (Kafka 4.x's TransactionMetadata
and TransactionCoordinator, with KIP-360 and KIP-890).

One ``TxnMetadata`` per transactional id; its states and their legal predecessors:

    Empty -> Ongoing -> PrepareCommit -> CompleteCommit
                     \\-> PrepareAbort  -> CompleteAbort
    Ongoing -> PrepareEpochFence -> PrepareAbort      (a new producer fences an open transaction,
                                                        or the coordinator aborts a timed-out one)
    Empty/CompleteCommit/CompleteAbort -> PrepareAbort (transaction version 2: an abort "to be sure")
    Empty/Complete* -> Dead                            (transactional.id.expiration.ms)

Every change is *prepared* (the metadata gets a pending state, which fences concurrent changes
with CONCURRENT_TRANSACTIONS), written to ``__transaction_state`` as a ``TxnTransit`` (the log
value), and *completed* only once that write is committed. PrepareCommit/PrepareAbort being
committed is the decision: the coordinator then writes the markers (WriteTxnMarkers to each
partition's leader) and, once every partition has its marker, CompleteCommit/CompleteAbort.
After a failover the new coordinator reloads the log and finishes any Prepare* it finds.

``TxnCoordinatorCore`` holds the loaded ``__transaction_state`` partitions of one broker and turns
requests, append results and marker results into ``Effects``: replies (to opaque waiters),
appends to make, and whether markers are waiting to be sent. The shell (coordinator.py) does
the I/O; the simulator (sim/txn) drives the same core with simulated appends and markers.

Time: ``Now.wall`` (ms since the epoch) for the timestamps written to the log and shown to
users; ``Now.mono`` (a monotonic clock, ms) for the transaction timeout, so a wall-clock step
never aborts a transaction.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable
from typing import Any, NamedTuple

from broker.group.records import partition_for
from broker.txn import records as rec
from common.errors import ErrorCode

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
SHORT_MAX = 32767

TopicPartition = tuple[str, int]


class TxnState(enum.IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        return _NAMES[self]

    @classmethod
    def from_name(cls, name: str) -> TxnState | None:
        return _BY_NAME.get(name)


_NAMES = {TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing", TxnState.PREPARE_COMMIT: "PrepareCommit",
          TxnState.PREPARE_ABORT: "PrepareAbort", TxnState.COMPLETE_COMMIT: "CompleteCommit",
          TxnState.COMPLETE_ABORT: "CompleteAbort", TxnState.DEAD: "Dead",
          TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence"}
_BY_NAME = {v: k for k, v in _NAMES.items()}

S = TxnState
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
EXPIRATION_ALLOWED = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})

TV_0, TV_1, TV_2 = 0, 1, 2  # transaction.version (a feature level); TV_2 bumps the epoch on every EndTxn


def supports_epoch_bump(tv: int) -> bool:
    return tv >= TV_2


def log_value_version(tv_level: int) -> int:
    """The TransactionLogValue version the cluster's transaction.version writes."""
    return 1 if tv_level >= TV_1 else 0


def is_epoch_exhausted(epoch: int) -> bool:
    return epoch >= SHORT_MAX - 1


class IllegalTransition(AssertionError):
    """A transition Kafka's coordinator calls illegal (IllegalStateException): a bug, never input."""


class Now(NamedTuple):
    wall: int  # ms since the epoch: timestamps in the log and in answers
    mono: int  # ms on a monotonic clock: timeouts


@dataclasses.dataclass(frozen=True, slots=True)
class TxnTransit:
    """The target of a prepared transition (Kafka's TxnTransitMetadata): what is written to the
    log, and what the metadata becomes once that write is committed."""
    producer_id: int
    prev_producer_id: int
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    start_ms: int
    last_update_ms: int
    client_tv: int

    def log_value(self, tv_level: int) -> bytes:
        return rec.transaction_value(rec.TxnLogValue(
            self.producer_id, self.producer_epoch, self.timeout_ms, int(self.state), tuple(sorted(self.partitions)),
            self.last_update_ms, self.start_ms, self.prev_producer_id, self.next_producer_id, self.client_tv),
            log_value_version(tv_level), empty=self.state == TxnState.EMPTY)


@dataclasses.dataclass(slots=True)
class PendingComplete:
    """A transaction whose Prepare* is committed and whose markers are being written."""
    coordinator_epoch: int
    commit: bool
    producer_id: int  # what the markers carry
    producer_epoch: int
    complete: TxnTransit  # CompleteCommit/CompleteAbort, written once every partition has its marker
    cancelled: bool = False  # a partition leader said a newer coordinator or producer took over
    appending: bool = False  # the Complete* write is in flight
    retry: bool = False  # the Complete* write failed with COORDINATOR_NOT_AVAILABLE: try again


@dataclasses.dataclass(slots=True)
class ParkedAdd:
    """An AddPartitionsToTxn/AddOffsetsToTxn of the current producer that came while the markers
    of its previous transaction were being written: it goes on the moment that transaction
    completes (``TxnCoordinatorCore.add_partitions`` with ``park``)."""
    waiter: Any
    producer_id: int
    epoch: int
    partitions: frozenset[TopicPartition]
    client_tv: int


@dataclasses.dataclass(slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    prev_producer_id: int
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: set[TopicPartition]
    start_ms: int
    last_update_ms: int
    client_tv: int = TV_0
    pending: TxnState | None = None
    failed_fence: bool = False  # a fencing epoch bump was not written: do not bump again
    deadline_mono: int | None = None  # Ongoing: when the transaction times out (monotonic ms)
    markers: PendingComplete | None = None
    parked: list[ParkedAdd] | None = None  # requests waiting for the markers to complete
    # the producer began its next transaction while this one's markers were written: an
    # AddPartitionsToTxn/AddOffsetsToTxn of its epoch came after the decision and was refused
    # (CONCURRENT_TRANSACTIONS), so that transaction has nothing in it (see TxnCoordinatorCore._end)
    next_empty: bool = False

    # --- prepared transitions -----------------------------------------------------------------
    def _transit(self, state: TxnState, **changes) -> TxnTransit:
        data = dict(producer_id=self.producer_id, next_producer_id=self.next_producer_id,
                    producer_epoch=self.producer_epoch, last_producer_epoch=self.last_producer_epoch,
                    timeout_ms=self.timeout_ms, partitions=frozenset(self.partitions), start_ms=self.start_ms,
                    last_update_ms=self.last_update_ms, client_tv=self.client_tv)
        data.update(changes)
        if self.pending is not None:
            raise IllegalTransition(f"{self.transactional_id}: preparing a transition to {state.kafka_name} while "
                                    f"{self.pending.kafka_name} is pending")
        if data["producer_id"] < 0:
            raise IllegalTransition(f"{self.transactional_id}: illegal new producer id {data['producer_id']}")
        if state != TxnState.DEAD and data["producer_epoch"] < 0:
            raise IllegalTransition(f"{self.transactional_id}: illegal new producer epoch {data['producer_epoch']}")
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransition(f"{self.transactional_id}: {self.state.kafka_name} -> {state.kafka_name}")
        self.pending = state
        return TxnTransit(prev_producer_id=self.producer_id, state=state, **data)

    def prepare_fence_producer_epoch(self) -> TxnTransit:
        # a fence whose write failed already bumped the epoch (never shown to a client): not again
        bumped = self.producer_epoch if self.failed_fence or self.producer_epoch == SHORT_MAX else self.producer_epoch + 1
        return self._transit(TxnState.PREPARE_EPOCH_FENCE, producer_epoch=bumped)

    def prepare_increment_producer_epoch(self, timeout_ms: int, expected_epoch: int | None, now: Now) -> TxnTransit:
        """InitProducerId on an existing id: raises ``TxnError(PRODUCER_FENCED)`` for a fenced
        producer (KIP-360: a producer may resume with its current epoch)."""
        if is_epoch_exhausted(self.producer_epoch):
            raise IllegalTransition(f"cannot allocate more producer epochs for producer id {self.producer_id}")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch  # resuming after an error: nobody else initialized
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch  # a retry of a bump that succeeded
        else:
            raise TxnError(ErrorCode.PRODUCER_FENCED)
        return self._transit(TxnState.EMPTY, producer_epoch=epoch, last_producer_epoch=last, timeout_ms=timeout_ms,
                             partitions=frozenset(), start_ms=-1, last_update_ms=now.wall)

    def prepare_producer_id_rotation(self, new_pid: int, timeout_ms: int, now: Now, record_last_epoch: bool) -> TxnTransit:
        if self.state in (TxnState.ONGOING, TxnState.PREPARE_ABORT, TxnState.PREPARE_COMMIT):
            raise IllegalTransition("cannot rotate producer ids while a transaction is still pending")
        return self._transit(TxnState.EMPTY, producer_id=new_pid, producer_epoch=0,
                             last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
                             timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1, last_update_ms=now.wall)

    def prepare_add_partitions(self, added: Iterable[TopicPartition], now: Now, client_tv: int) -> TxnTransit:
        starting = self.state in (TxnState.EMPTY, TxnState.COMPLETE_ABORT, TxnState.COMPLETE_COMMIT)
        return self._transit(TxnState.ONGOING, partitions=frozenset(self.partitions) | frozenset(added),
                             start_ms=now.wall if starting else self.start_ms, last_update_ms=now.wall,
                             client_tv=client_tv)

    def prepare_abort_or_commit(self, state: TxnState, client_tv: int, next_pid: int, now: Now,
                                no_partition_added: bool) -> TxnTransit:
        if supports_epoch_bump(client_tv):
            if self.producer_epoch == SHORT_MAX and state == TxnState.PREPARE_ABORT:
                epoch = self.producer_epoch  # broken already: let the abort through without overflowing
            else:
                epoch = self.producer_epoch + 1
            last = self.producer_epoch
        else:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        # TV2 may abort with no partition added: the start time is the time of the abort
        return self._transit(state, producer_epoch=epoch, last_producer_epoch=last,
                             start_ms=now.wall if no_partition_added else self.start_ms, next_producer_id=next_pid,
                             last_update_ms=now.wall, client_tv=client_tv)

    def prepare_complete(self, now: Now) -> TxnTransit:
        self.failed_fence = False  # the Prepare* was written
        state = TxnState.COMPLETE_COMMIT if self.state == TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
        if supports_epoch_bump(self.client_tv) and self.next_producer_id != NO_PRODUCER_ID:
            pid, epoch = self.next_producer_id, 0  # the epoch overflowed: the next producer id takes over
        else:
            pid, epoch = self.producer_id, self.producer_epoch
        return self._transit(state, producer_id=pid, producer_epoch=epoch, next_producer_id=NO_PRODUCER_ID,
                             partitions=frozenset(), last_update_ms=now.wall)

    def prepare_dead(self) -> TxnTransit:
        return self._transit(TxnState.DEAD, partitions=frozenset())

    # --- completion (after the write is committed) --------------------------------------------
    def _valid_epoch(self, t: TxnTransit) -> bool:
        v2 = supports_epoch_bump(t.client_tv)
        if v2 and t.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT) and t.producer_epoch == 0:
            return t.last_producer_epoch == self.last_producer_epoch and t.prev_producer_id == self.producer_id
        if v2 and t.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return t.last_producer_epoch == self.producer_epoch and t.producer_id == self.producer_id
        return t.producer_epoch == self.producer_epoch and t.producer_id == self.producer_id

    def complete_transition(self, t: TxnTransit, now: Now) -> None:
        to = self.pending
        if to is None or to != t.state:
            raise IllegalTransition(f"{self.transactional_id}: completing {t.state.kafka_name} while pending is {to}")
        ok = True
        if to == TxnState.EMPTY:
            bump = (t.producer_epoch == self.producer_epoch + 1
                    or (t.producer_epoch == 0 and t.producer_id != self.producer_id))
            ok = (self.producer_epoch == t.producer_epoch or bump) and not t.partitions and t.start_ms == -1
        elif to == TxnState.ONGOING:
            ok = self._valid_epoch(t) and t.partitions >= self.partitions and self.timeout_ms == t.timeout_ms
        elif to in (TxnState.PREPARE_ABORT, TxnState.PREPARE_COMMIT):
            empty_abort = (to == TxnState.PREPARE_ABORT and supports_epoch_bump(t.client_tv)
                           and self.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT))
            ok = (self._valid_epoch(t) and frozenset(self.partitions) == t.partitions
                  and self.timeout_ms == t.timeout_ms and (self.start_ms == t.start_ms or empty_abort))
        elif to in (TxnState.COMPLETE_ABORT, TxnState.COMPLETE_COMMIT):
            ok = self._valid_epoch(t) and self.timeout_ms == t.timeout_ms and t.start_ms != -1
        else:  # PrepareEpochFence is never completed (it turns into PrepareAbort); Dead is removed
            ok = False
        if not ok:
            raise IllegalTransition(f"{self.transactional_id}: {self.state.kafka_name} -> {t}: unexpected metadata")
        was = self.state
        self.producer_id, self.prev_producer_id, self.next_producer_id = t.producer_id, t.prev_producer_id, \
            t.next_producer_id
        self.producer_epoch, self.last_producer_epoch, self.timeout_ms = t.producer_epoch, t.last_producer_epoch, \
            t.timeout_ms
        self.partitions = set(t.partitions)
        self.start_ms, self.last_update_ms, self.client_tv = t.start_ms, t.last_update_ms, t.client_tv
        self.pending = None
        self.state = to
        if to not in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            self.next_empty = False
        if to == TxnState.ONGOING:
            if was != TxnState.ONGOING or self.deadline_mono is None:
                self.set_deadline(now)
        else:
            self.deadline_mono = None

    def set_deadline(self, now: Now) -> None:
        elapsed = min(max(now.wall - self.start_ms, 0), self.timeout_ms)
        self.deadline_mono = now.mono + self.timeout_ms - elapsed

    @classmethod
    def from_log(cls, tid: str, v: rec.TxnLogValue) -> TxnMetadata:
        state = TxnState(v.status)
        return cls(tid, v.producer_id, v.prev_producer_id, v.next_producer_id, v.producer_epoch, NO_PRODUCER_EPOCH,
                   v.timeout_ms, state, set() if state == TxnState.EMPTY else set(v.partitions), v.start_ms,
                   v.last_update_ms, v.client_tv)


class TxnError(Exception):
    def __init__(self, code: int):
        super().__init__(ErrorCode(code).name)
        self.code = code


class TxnShard:
    """The transactions of one ``__transaction_state`` partition, as loaded from its log."""

    def __init__(self, partition: int, coordinator_epoch: int):
        self.partition = partition
        self.coordinator_epoch = coordinator_epoch
        self.txns: dict[str, TxnMetadata] = {}

    def replay(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            raise rec.RecordFormatError("record without a key")
        tid = rec.decode_key(key)
        if value is None:
            self.txns.pop(tid, None)
            return
        v = rec.decode_value(value)
        if not 0 <= v.status <= 7:
            raise rec.RecordFormatError(f"unknown transaction state {v.status}")
        self.txns[tid] = TxnMetadata.from_log(tid, v)


# --- effects --------------------------------------------------------------------------------------

class Op(enum.Enum):
    INIT = "init"  # InitProducerId: reply (error, producer id, epoch)
    ADD = "add"  # AddPartitionsToTxn / AddOffsetsToTxn: reply error
    END = "end"  # EndTxn (or a coordinator abort): Prepare*, then markers
    COMPLETE = "complete"  # Complete* after the markers
    EXPIRE = "expire"  # the tombstone of an expired transactional id


class Reply(enum.Enum):
    CLIENT = "client"  # EndTxn: (error, producer id, epoch)
    INIT_FENCE = "init-fence"  # InitProducerId fencing an open transaction: CONCURRENT_TRANSACTIONS on success
    NONE = "none"  # the coordinator's own abort of a timed-out transaction


@dataclasses.dataclass(slots=True)
class Append:
    """Write one record (``transit``; a tombstone for EXPIRE) to ``__transaction_state``
    partition ``partition`` in coordinator epoch ``coordinator_epoch``, acks=all; then call
    ``TxnCoordinatorCore.on_append_done`` with it and the result."""
    partition: int
    coordinator_epoch: int
    transactional_id: str
    transit: TxnTransit
    op: Op
    waiter: Any = None
    reply: Reply = Reply.CLIENT
    producer_id: int = NO_PRODUCER_ID  # END: as requested
    producer_epoch: int = NO_PRODUCER_EPOCH
    commit: bool = False
    fence: bool = False
    timeout_ms: int = 0
    applied: bool = False  # COMPLETE: taken as done once in the log (on_appended), before it is committed

    def record(self, tv_level: int) -> tuple[bytes, bytes | None]:
        return (rec.transaction_key(self.transactional_id),
                None if self.op == Op.EXPIRE else self.transit.log_value(tv_level))


@dataclasses.dataclass(slots=True)
class Effects:
    replies: list[tuple[Any, Any]] = dataclasses.field(default_factory=list)
    appends: list[Append] = dataclasses.field(default_factory=list)
    markers: bool = False  # markers are waiting to be sent (see TxnCoordinatorCore.outstanding_markers)
    need_producer_id: bool = False  # call again with a new producer id
    log: list[str] = dataclasses.field(default_factory=list)  # what the shell logs at INFO
    parked: bool = False  # the request waits for the previous transaction's markers (see ParkedAdd)

    def add(self, other: Effects) -> Effects:
        self.replies += other.replies
        self.appends += other.appends
        self.markers |= other.markers
        self.need_producer_id |= other.need_producer_id
        self.log += other.log
        self.parked |= other.parked
        return self

    def reply(self, waiter: Any, resp: Any) -> Effects:
        if waiter is not None:
            self.replies.append((waiter, resp))
        return self


@dataclasses.dataclass(frozen=True, slots=True)
class MarkerJob:
    """Markers to write: ``result`` for ``producer_id``/``producer_epoch`` on ``partitions``, from
    the coordinator of ``transactional_id`` in ``coordinator_epoch``; ``transaction_version``: the
    transaction's (with 2 the leaders refuse a marker whose epoch is not newer than the producer's:
    a stale copy cannot end the next transaction, which runs at the bumped epoch)."""
    transactional_id: str
    coordinator_epoch: int
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: frozenset[TopicPartition]
    transaction_version: int = TV_0


MARKER_RETRIABLE = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                              ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                              ErrorCode.REQUEST_TIMED_OUT, ErrorCode.KAFKA_STORAGE_ERROR})
MARKER_CANCEL = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED})
MARKER_DONE = frozenset({ErrorCode.NONE, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, ErrorCode.UNSUPPORTED_VERSION})
PARTITION_DELETED = -1  # on_marker_result: the partition has no leader because it no longer exists


@dataclasses.dataclass(slots=True)
class TxnConfig:
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    num_partitions: int = 50  # of __transaction_state
    tv_level: int = TV_0  # the cluster's finalized transaction.version


class TxnCoordinatorCore:
    def __init__(self, config: TxnConfig):
        self.config = config
        self.shards: dict[int, TxnShard] = {}
        self.loading: dict[int, int] = {}  # partition -> coordinator epoch being loaded

    # --- which transactional ids we coordinate -------------------------------------------------
    def partition_for(self, tid: str) -> int:
        return partition_for(tid, self.config.num_partitions)

    def lookup(self, tid: str) -> tuple[int, TxnShard | None, TxnMetadata | None]:
        """(error, shard, metadata or None); NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS."""
        pid = self.partition_for(tid)
        if pid in self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, None, None
        shard = self.shards.get(pid)
        if shard is None:
            return ErrorCode.NOT_COORDINATOR, None, None
        return ErrorCode.NONE, shard, shard.txns.get(tid)

    def begin_load(self, partition: int, epoch: int) -> Effects:
        fx = self._drop_parked(self.shards.pop(partition, None))
        self.loading[partition] = epoch
        return fx

    def complete_load(self, partition: int, epoch: int, shard: TxnShard, now: Now) -> Effects:
        """A loaded partition takes over; transactions it left in PrepareCommit/PrepareAbort get
        their markers written (the decision was made and committed by an earlier coordinator)."""
        fx = Effects()
        if self.loading.get(partition) != epoch:
            return fx
        del self.loading[partition]
        self.shards[partition] = shard
        for md in shard.txns.values():
            if md.state == TxnState.ONGOING:
                md.set_deadline(now)
            elif md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                commit = md.state == TxnState.PREPARE_COMMIT
                complete = md.prepare_complete(now)
                fx.add(self._start_markers(md, epoch, commit, complete))
                fx.log.append(f"writing the {'COMMIT' if commit else 'ABORT'} markers of {md.transactional_id} "
                              f"found in {md.state.kafka_name} after loading partition {partition}")
        return fx

    def unload(self, partition: int) -> Effects:
        """The partition is no longer ours; requests parked on its transactions get NOT_COORDINATOR."""
        self.loading.pop(partition, None)
        return self._drop_parked(self.shards.pop(partition, None))

    @staticmethod
    def _drop_parked(shard: TxnShard | None) -> Effects:
        fx = Effects()
        for md in shard.txns.values() if shard is not None else ():
            parked, md.parked = md.parked, None
            for p in parked or ():
                fx.reply(p.waiter, ErrorCode.NOT_COORDINATOR)
        return fx

    def any_loading(self) -> bool:
        return bool(self.loading)

    # --- InitProducerId -----------------------------------------------------------------------
    def init_producer_id(self, waiter: Any, tid: str, timeout_ms: int, expected: tuple[int, int] | None, now: Now,
                         new_pid: int | None = None) -> Effects:
        """``expected``: (producer id, epoch) the producer has (KIP-360), or None. Replies
        (error, producer id, epoch). May ask for a new producer id (``need_producer_id``)."""
        fx = Effects()

        def fail(code: int) -> Effects:
            return fx.reply(waiter, (code, NO_PRODUCER_ID, NO_PRODUCER_EPOCH))
        if tid == "":
            return fail(ErrorCode.INVALID_REQUEST)
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return fail(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        err, shard, md = self.lookup(tid)
        if err:
            return fail(err)
        if md is None:
            if new_pid is None:
                fx.need_producer_id = True
                return fx
            md = shard.txns[tid] = TxnMetadata(tid, new_pid, NO_PRODUCER_ID, NO_PRODUCER_ID, NO_PRODUCER_EPOCH,
                                               NO_PRODUCER_EPOCH, timeout_ms, TxnState.EMPTY, set(), -1, now.wall)
            new_pid = None  # used
        if md.pending is not None:
            return fail(ErrorCode.CONCURRENT_TRANSACTIONS)
        if expected is not None and not (md.producer_epoch == NO_PRODUCER_EPOCH or expected[0] == md.producer_id or (
                expected[0] == md.prev_producer_id and is_epoch_exhausted(expected[1]))):
            return fail(ErrorCode.PRODUCER_FENCED)
        if md.state in (TxnState.PREPARE_ABORT, TxnState.PREPARE_COMMIT):
            return fail(ErrorCode.CONCURRENT_TRANSACTIONS)
        if md.state == TxnState.ONGOING:
            # abort the open transaction with a bumped epoch (never shown to a client), and let the
            # producer retry: the retry bumps the epoch again, or rotates the producer id
            fence = md.prepare_fence_producer_epoch()
            return fx.add(self._end(waiter, tid, fence.producer_id, fence.producer_epoch, False, False,
                                    self.config.tv_level, now, None, Reply.INIT_FENCE))
        if md.state not in (TxnState.EMPTY, TxnState.COMPLETE_ABORT, TxnState.COMPLETE_COMMIT):
            raise IllegalTransition(f"found transactional id {tid} in state {md.state.kafka_name}")
        try:
            if is_epoch_exhausted(md.producer_epoch) and (expected is None or expected[1] == md.producer_epoch):
                if new_pid is None:
                    fx.need_producer_id = True
                    return fx
                transit = md.prepare_producer_id_rotation(new_pid, timeout_ms, now, expected is not None)
            else:
                transit = md.prepare_increment_producer_epoch(timeout_ms, None if expected is None else expected[1], now)
        except TxnError as e:
            return fail(e.code)
        fx.appends.append(Append(shard.partition, shard.coordinator_epoch, tid, transit, Op.INIT, waiter,
                                 timeout_ms=transit.timeout_ms))
        return fx

    # --- AddPartitionsToTxn / AddOffsetsToTxn / verification ----------------------------------
    def add_partitions(self, waiter: Any, tid: str, producer_id: int, epoch: int,
                       partitions: Iterable[TopicPartition], now: Now, client_tv: int = TV_0,
                       park: bool = False) -> Effects:
        """Replies an error code (NONE once the partitions are in the transaction). With ``park``,
        a request that comes while this coordinator writes the markers of the producer's previous
        transaction (which Kafka answers CONCURRENT_TRANSACTIONS, and the client retries after its
        backoff) waits for them instead (``Effects.parked``): the moment the transaction completes
        it goes on, its Ongoing appended right behind the CompleteCommit/CompleteAbort. The shell
        bounds the wait (``unpark``)."""
        fx = Effects()
        parts = frozenset(partitions)
        if not tid:
            return fx.reply(waiter, ErrorCode.INVALID_REQUEST)
        err, shard, md = self.lookup(tid)
        if err:
            return fx.reply(waiter, err)
        if md is None or md.producer_id != producer_id:
            return fx.reply(waiter, ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if md.producer_epoch != epoch:
            return fx.reply(waiter, ErrorCode.PRODUCER_FENCED)
        if md.pending is not None or md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            if park and md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT) and md.markers is not None \
                    and not md.markers.cancelled and md.pending in (None, TxnState.COMPLETE_COMMIT,
                                                                    TxnState.COMPLETE_ABORT):
                md.parked = (md.parked or []) + [ParkedAdd(waiter, producer_id, epoch, parts, client_tv)]
                fx.parked = True
                return fx
            if md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                md.next_empty = True
            return fx.reply(waiter, ErrorCode.CONCURRENT_TRANSACTIONS)
        if md.state == TxnState.ONGOING and parts <= md.partitions:
            return fx.reply(waiter, ErrorCode.NONE)  # already there
        transit = md.prepare_add_partitions(parts, now, client_tv)
        fx.appends.append(Append(shard.partition, shard.coordinator_epoch, tid, transit, Op.ADD, waiter,
                                 timeout_ms=transit.timeout_ms))
        return fx

    def unpark(self, tid: str, waiter: Any) -> bool:
        """Take a parked request back (its wait is over: the shell answers it CONCURRENT_TRANSACTIONS);
        False if it went on already (or was answered)."""
        _err, _shard, md = self.lookup(tid)
        if md is None or not md.parked:
            return False
        kept = [p for p in md.parked if p.waiter is not waiter]
        if len(kept) == len(md.parked):
            return False
        md.parked = kept or None
        md.next_empty = True
        return True

    def _resume_parked(self, md: TxnMetadata, now: Now | None, err: int = ErrorCode.NONE) -> Effects:
        """The markers of ``md``'s transaction are done (``err`` NONE: the requests parked on it go
        on, in order) or will not be done by this coordinator soon (they get ``err``)."""
        fx = Effects()
        parked, md.parked = md.parked, None
        for p in parked or ():
            if err:
                md.next_empty = True
                fx.reply(p.waiter, err)
            else:
                fx.add(self.add_partitions(p.waiter, md.transactional_id, p.producer_id, p.epoch, p.partitions, now,
                                           p.client_tv))
        return fx

    def verify_partitions(self, tid: str, producer_id: int, epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """AddPartitionsToTxn verifyOnly (KIP-890 part 1, asked by partition leaders before they
        take a transaction's first batch): NONE per partition in the transaction, else
        TRANSACTION_ABORTABLE; a producer that is not the current one gets its error everywhere."""
        parts = list(partitions)
        if not tid:
            return dict.fromkeys(parts, ErrorCode.INVALID_REQUEST)
        err, _, md = self.lookup(tid)
        if not err:
            if md is None or md.producer_id != producer_id:
                err = ErrorCode.INVALID_PRODUCER_ID_MAPPING
            elif md.producer_epoch != epoch:
                err = ErrorCode.PRODUCER_FENCED
            elif md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                err = ErrorCode.CONCURRENT_TRANSACTIONS
        if err:
            return dict.fromkeys(parts, err)
        return {tp: ErrorCode.NONE if tp in md.partitions else ErrorCode.TRANSACTION_ABORTABLE for tp in parts}

    # --- EndTxn ---------------------------------------------------------------------------------
    def end_txn(self, waiter: Any, tid: str, producer_id: int, epoch: int, commit: bool, now: Now,
                client_tv: int = TV_0, new_pid: int | None = None) -> Effects:
        """EndTxn from a client: replies (error, producer id, epoch); the producer id and epoch
        are the new ones with transaction version 2, else -1."""
        return self._end(waiter, tid, producer_id, epoch, commit, True, client_tv, now, new_pid, Reply.CLIENT)

    def _end(self, waiter: Any, tid: str, producer_id: int, epoch: int, commit: bool, from_client: bool,
             client_tv: int, now: Now, new_pid: int | None, reply: Reply) -> Effects:
        fx = Effects()
        v2 = supports_epoch_bump(client_tv)

        def answer(code: int, pid: int = NO_PRODUCER_ID, ep: int = NO_PRODUCER_EPOCH) -> Effects:
            if reply == Reply.CLIENT:
                fx.reply(waiter, (code, pid, ep))
            elif reply == Reply.INIT_FENCE:
                fx.reply(waiter, (code or ErrorCode.CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_PRODUCER_EPOCH))
            else:
                fx.log.append(f"the abort of timed-out transaction {tid} was not written: {ErrorCode(code).name}")
            return fx
        if not tid:
            return answer(ErrorCode.INVALID_REQUEST)
        err, shard, md = self.lookup(tid)
        if err:
            return answer(err)
        if md is None:
            return answer(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        fence = md.pending == TxnState.PREPARE_EPOCH_FENCE
        state = md.state
        current_pid, current_epoch = md.producer_id, md.producer_epoch

        def invalid_state() -> Effects:
            return answer(ErrorCode.INVALID_TXN_STATE)

        def unfence_on_error(code: int) -> Effects:
            if fence:
                md.pending = None
            return answer(code)

        def prepare(next_state: TxnState, no_partition_added: bool) -> Effects:
            next_pid = NO_PRODUCER_ID
            if v2 and not fence and is_epoch_exhausted(md.producer_epoch):
                if new_pid is None:
                    fx.need_producer_id = True
                    return fx
                next_pid = new_pid
            if next_state == TxnState.PREPARE_ABORT and fence:
                md.pending = None  # the fence turns into the abort, with the fencing epoch
                md.producer_epoch = epoch
                md.last_producer_epoch = NO_PRODUCER_EPOCH
            transit = md.prepare_abort_or_commit(next_state, client_tv, next_pid, now, no_partition_added)
            fx.appends.append(Append(shard.partition, shard.coordinator_epoch, tid, transit, Op.END, waiter, reply,
                                     producer_id, epoch, commit, fence, transit.timeout_ms))
            return fx

        prepare_state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if not v2:
            if md.producer_id != producer_id:
                return unfence_on_error(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
            if (from_client and epoch != md.producer_epoch) or epoch < md.producer_epoch:
                return unfence_on_error(ErrorCode.PRODUCER_FENCED)
            if md.pending is not None and not fence:
                return answer(ErrorCode.CONCURRENT_TRANSACTIONS)
            if state == TxnState.ONGOING:
                return prepare(prepare_state, False)
            if state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT) and md.next_empty:
                # the end of the transaction begun after this one, which added nothing (Kafka answers
                # INVALID_TXN_STATE to one of the two outcomes: librdkafka, whose AddPartitionsToTxn
                # was refused while it already sent this EndTxn, fails fatally; librdkafka issue 4849)
                return answer(ErrorCode.NONE)
            if state == TxnState.COMPLETE_COMMIT:
                return answer(ErrorCode.NONE) if commit else invalid_state()
            if state == TxnState.COMPLETE_ABORT:
                return answer(ErrorCode.NONE) if not commit else invalid_state()
            if state == TxnState.PREPARE_COMMIT:
                return answer(ErrorCode.CONCURRENT_TRANSACTIONS) if commit else invalid_state()
            if state == TxnState.PREPARE_ABORT:
                return answer(ErrorCode.CONCURRENT_TRANSACTIONS) if not commit else invalid_state()
            if state == TxnState.EMPTY:
                return unfence_on_error(ErrorCode.INVALID_TXN_STATE)
            raise IllegalTransition(f"found transactional id {tid} in state {state.kafka_name}")

        # transaction version 2: every EndTxn bumps the epoch, so a retry carries the old epoch
        retry_on_overflow = (not fence and md.prev_producer_id == producer_id and epoch == SHORT_MAX - 1
                             and md.producer_epoch == 0)
        retry_on_bump = not fence and md.producer_epoch == epoch + 1
        if fence:
            valid_epoch = (not from_client or epoch == md.producer_epoch) and epoch >= md.producer_epoch
        elif state in (TxnState.ONGOING, TxnState.EMPTY, TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE):
            valid_epoch = epoch == md.producer_epoch
        elif state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            valid_epoch = retry_on_bump
        else:
            valid_epoch = retry_on_bump or retry_on_overflow or epoch == md.producer_epoch
        retry = retry_on_bump or retry_on_overflow
        if md.producer_id != producer_id and not retry_on_overflow:
            return unfence_on_error(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if md.pending is not None and not fence:
            return answer(ErrorCode.CONCURRENT_TRANSACTIONS)
        if not valid_epoch:
            return unfence_on_error(ErrorCode.PRODUCER_FENCED)
        if state == TxnState.ONGOING:
            return prepare(prepare_state, False)
        if state == TxnState.COMPLETE_COMMIT:
            if commit:
                return answer(ErrorCode.NONE, current_pid, current_epoch) if retry else invalid_state()
            return invalid_state() if retry else prepare(TxnState.PREPARE_ABORT, True)
        if state == TxnState.COMPLETE_ABORT:
            if not commit:
                return answer(ErrorCode.NONE, current_pid, current_epoch) if retry else prepare(
                    TxnState.PREPARE_ABORT, True)
            return invalid_state()
        if state == TxnState.PREPARE_COMMIT:
            return answer(ErrorCode.CONCURRENT_TRANSACTIONS) if commit else invalid_state()
        if state == TxnState.PREPARE_ABORT:
            return answer(ErrorCode.CONCURRENT_TRANSACTIONS) if not commit else invalid_state()
        if state == TxnState.EMPTY:
            return prepare(TxnState.PREPARE_ABORT, True) if not commit else invalid_state()
        raise IllegalTransition(f"found transactional id {tid} in state {state.kafka_name}")

    # --- the result of a write ------------------------------------------------------------------
    def on_appended(self, a: Append, now: Now) -> Effects:
        """``a`` is in the partition's log (not committed yet: ``on_appended`` is optional and
        comes before ``on_append_done``). A CompleteCommit/CompleteAbort is then taken as done:
        the transaction's markers are all written and its decision committed, and whatever the
        coordinator writes next goes after it in the same log, so it is committed with or before
        that (or both are lost with the leadership, and the partition is loaded again). The next
        transaction's AddPartitionsToTxn so waits for one replicated write less (Kafka waits for
        the CompleteCommit to be committed)."""
        fx = Effects()
        if a.op != Op.COMPLETE:
            return fx
        lerr, shard, md = self.lookup(a.transactional_id)
        if (lerr or md is None or shard.coordinator_epoch != a.coordinator_epoch or md.pending != a.transit.state
                or md.markers is None or md.markers.complete is not a.transit):
            return fx
        md.complete_transition(a.transit, now)
        md.markers = None
        a.applied = True
        return fx.add(self._resume_parked(md, now))

    def on_append_done(self, a: Append, err: int, now: Now) -> Effects:
        """``a`` was committed (``err`` NONE) or failed (``err`` mapped as for clients)."""
        fx = Effects()
        if a.applied:
            # done already (on_appended); in the log, it is committed later or lost with the leadership
            if err:
                fx.log.append(f"{a.transit.state.kafka_name} of {a.transactional_id} not acknowledged "
                              f"({ErrorCode(err).name}); it is in the log before anything written after it")
            return fx
        lerr, shard, md = self.lookup(a.transactional_id)
        same = not lerr and shard.coordinator_epoch == a.coordinator_epoch and md is not None
        if err == ErrorCode.NONE:
            if lerr:
                err = lerr
            elif not same:
                err = ErrorCode.NOT_COORDINATOR  # the partition moved away and back meanwhile
            elif a.op == Op.EXPIRE:
                if md.pending == TxnState.DEAD and md.producer_epoch == a.transit.producer_epoch:
                    del shard.txns[a.transactional_id]
                else:
                    md.pending = None
                return fx
            else:
                md.complete_transition(a.transit, now)
        elif same:
            if a.op == Op.COMPLETE and err == ErrorCode.COORDINATOR_NOT_AVAILABLE:
                pass  # keeps its pending state; written again (retry_complete)
            else:
                md.pending = None
        getattr(self, f"_after_{a.op.value}")(fx, a, err, md if same else None, now)
        return fx

    def _after_init(self, fx: Effects, a: Append, err: int, md, now: Now) -> None:
        if err:
            fx.reply(a.waiter, (err, NO_PRODUCER_ID, NO_PRODUCER_EPOCH))
        else:
            fx.reply(a.waiter, (ErrorCode.NONE, a.transit.producer_id, a.transit.producer_epoch))

    def _after_add(self, fx: Effects, a: Append, err: int, md, now: Now) -> None:
        fx.reply(a.waiter, err)

    def _after_end(self, fx: Effects, a: Append, err: int, md: TxnMetadata | None, now: Now) -> None:
        v2 = supports_epoch_bump(a.transit.client_tv)

        def answer(code: int, pid: int = NO_PRODUCER_ID, ep: int = NO_PRODUCER_EPOCH) -> None:
            if a.reply == Reply.CLIENT:
                fx.reply(a.waiter, (code, pid, ep))
            elif a.reply == Reply.INIT_FENCE:
                fx.reply(a.waiter, (code or ErrorCode.CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_PRODUCER_EPOCH))
            elif code:
                fx.log.append(f"the abort of timed-out transaction {a.transactional_id} failed: {ErrorCode(code).name}")
        if err:
            if a.fence and md is not None:
                md.failed_fence = True  # the bumped epoch was not written: the next fence does not bump again
            answer(err)
            return
        # the decision is committed: check nothing changed meanwhile, then write the markers
        if md is None:
            answer(ErrorCode.NOT_COORDINATOR)
            return
        if md.producer_id != a.producer_id:
            answer(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        elif md.producer_epoch != a.producer_epoch and not (v2 and md.producer_epoch == a.producer_epoch + 1):
            answer(ErrorCode.PRODUCER_FENCED)
        elif md.pending is not None:
            answer(ErrorCode.CONCURRENT_TRANSACTIONS)
        elif md.state != (TxnState.PREPARE_COMMIT if a.commit else TxnState.PREPARE_ABORT):
            answer(ErrorCode.INVALID_TXN_STATE)
        else:
            complete = md.prepare_complete(now)
            if v2:
                answer(ErrorCode.NONE, md.producer_id, md.producer_epoch)
            else:
                answer(ErrorCode.NONE)
            fx.add(self._start_markers(md, a.coordinator_epoch, a.commit, complete))

    def _after_complete(self, fx: Effects, a: Append, err: int, md: TxnMetadata | None, now: Now) -> None:
        if md is None or md.markers is None:
            return
        md.markers.appending = False
        if err == ErrorCode.NONE:
            md.markers = None
            fx.add(self._resume_parked(md, now))
        elif err == ErrorCode.COORDINATOR_NOT_AVAILABLE:
            md.markers.retry = True
        else:
            fx.log.append(f"writing {a.transit.state.kafka_name} of {a.transactional_id} failed: "
                          f"{ErrorCode(err).name}; a coordinator that loads the partition finishes it")
            fx.add(self._resume_parked(md, now, ErrorCode.CONCURRENT_TRANSACTIONS))

    def _after_expire(self, fx: Effects, a: Append, err: int, md, now: Now) -> None:
        if err:
            fx.log.append(f"the tombstone of expired transactional id {a.transactional_id} was not written: "
                          f"{ErrorCode(err).name}")

    # --- markers ----------------------------------------------------------------------------------
    def _start_markers(self, md: TxnMetadata, coordinator_epoch: int, commit: bool, complete: TxnTransit) -> Effects:
        md.markers = PendingComplete(coordinator_epoch, commit, md.producer_id, md.producer_epoch, complete)
        return self._maybe_complete(md)

    def _maybe_complete(self, md: TxnMetadata) -> Effects:
        fx = Effects()
        pc = md.markers
        if pc is None or pc.cancelled or pc.appending:
            return fx
        if md.partitions:
            fx.markers = True
            return fx
        shard = self.shards[self.partition_for(md.transactional_id)]
        pc.appending, pc.retry = True, False
        fx.appends.append(Append(shard.partition, pc.coordinator_epoch, md.transactional_id, pc.complete, Op.COMPLETE,
                                 timeout_ms=pc.complete.timeout_ms))
        return fx

    def outstanding_markers(self) -> list[MarkerJob]:
        """Markers still to write, in the current coordinator epochs."""
        out = []
        for shard in self.shards.values():
            for md in shard.txns.values():
                pc = md.markers
                if pc is not None and not pc.cancelled and not pc.appending and md.partitions:
                    out.append(MarkerJob(md.transactional_id, pc.coordinator_epoch, pc.producer_id, pc.producer_epoch,
                                         pc.commit, frozenset(md.partitions), pc.complete.client_tv))
        return out

    def marker_wanted(self, tid: str, coordinator_epoch: int, tp: TopicPartition) -> bool:
        err, shard, md = self.lookup(tid)
        return (not err and md is not None and shard.coordinator_epoch == coordinator_epoch and md.markers is not None
                and not md.markers.cancelled and tp in md.partitions)

    def on_marker_result(self, tid: str, coordinator_epoch: int, tp: TopicPartition, err: int) -> Effects:
        """A partition leader answered WriteTxnMarkers for ``tp`` (``PARTITION_DELETED``: the
        partition no longer exists). Retriable errors need nothing: the marker stays outstanding."""
        fx = Effects()
        lerr, shard, md = self.lookup(tid)
        if lerr or md is None or shard.coordinator_epoch != coordinator_epoch or md.markers is None:
            return fx  # no longer ours: a later coordinator writes the markers
        pc = md.markers
        if pc.cancelled or tp not in md.partitions:
            return fx  # a duplicate answer
        if err in MARKER_DONE or err == PARTITION_DELETED:
            md.partitions.discard(tp)
            return self._maybe_complete(md)
        if err in MARKER_RETRIABLE:
            return fx
        # a newer producer epoch or coordinator epoch is on the partition (MARKER_CANCEL), or an
        # error Kafka treats as fatal: stop; the coordinator that reloads the partition goes on
        pc.cancelled = True
        fx.log.append(f"stopped writing the markers of {tid} after {tp[0]}-{tp[1]} answered {ErrorCode(err).name}")
        return fx.add(self._resume_parked(md, None, ErrorCode.CONCURRENT_TRANSACTIONS))

    def retry_complete(self) -> Effects:
        fx = Effects()
        for shard in self.shards.values():
            for md in shard.txns.values():
                if md.markers is not None and md.markers.retry:
                    md.markers.retry = False
                    fx.add(self._maybe_complete(md))
        return fx

    # --- timers -----------------------------------------------------------------------------------
    def abort_timed_out(self, now: Now) -> Effects:
        """Abort (with a fencing epoch bump, as Kafka does) every Ongoing transaction older than
        its timeout (transaction.abort.timed.out.transaction.cleanup.interval.ms)."""
        fx = Effects()
        for shard in list(self.shards.values()):
            for md in list(shard.txns.values()):
                if (md.state == TxnState.ONGOING and md.pending is None and md.deadline_mono is not None
                        and now.mono > md.deadline_mono):
                    fence = md.prepare_fence_producer_epoch()
                    fx.log.append(f"aborting transaction {md.transactional_id} (producer id {md.producer_id}): "
                                  f"open longer than its timeout of {md.timeout_ms} ms")
                    fx.add(self._end(None, md.transactional_id, fence.producer_id, fence.producer_epoch, False, False,
                                     self.config.tv_level, now, None, Reply.NONE))
        return fx

    def expire_transactional_ids(self, now: Now) -> Effects:
        """Tombstones for ids idle longer than transactional.id.expiration.ms."""
        fx = Effects()
        for shard in self.shards.values():
            for md in shard.txns.values():
                if (md.pending is None and md.state in EXPIRATION_ALLOWED
                        and md.last_update_ms <= now.wall - self.config.id_expiration_ms):
                    fx.appends.append(Append(shard.partition, shard.coordinator_epoch, md.transactional_id,
                                             md.prepare_dead(), Op.EXPIRE, timeout_ms=30_000))
        return fx

    # --- Describe / List --------------------------------------------------------------------------
    def describe(self, tid: str) -> dict:
        """One DescribeTransactions entry."""
        out = {"transactional_id": tid, "error_code": 0, "transaction_state": "", "transaction_timeout_ms": 0,
               "transaction_start_time_ms": -1, "producer_id": -1, "producer_epoch": -1, "topics": []}
        if not tid:
            out["error_code"] = ErrorCode.INVALID_REQUEST
            return out
        err, _, md = self.lookup(tid)
        if err:
            out["error_code"] = err
        elif md is None or md.state == TxnState.DEAD:
            out["error_code"] = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        else:
            by_topic: dict[str, list[int]] = {}
            for t, p in sorted(md.partitions):
                by_topic.setdefault(t, []).append(p)
            out.update(transaction_state=md.state.kafka_name, transaction_timeout_ms=md.timeout_ms,
                       transaction_start_time_ms=md.start_ms, producer_id=md.producer_id,
                       producer_epoch=md.producer_epoch,
                       topics=[{"topic": t, "partitions": ps} for t, ps in by_topic.items()])
        return out

    def list_transactions(self, states: Iterable[str], producer_ids: Iterable[int], duration_ms: int,
                          now: Now) -> tuple[int, list[str], list[dict]]:
        """(error, unknown state filters, transactions) for ListTransactions."""
        if self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, [], []
        names = list(states)
        wanted = {s for n in names if (s := TxnState.from_name(n)) is not None}
        unknown = [n for n in names if TxnState.from_name(n) is None]
        pids = set(producer_ids)
        out = []
        for shard in self.shards.values():
            for md in shard.txns.values():
                if md.state == TxnState.DEAD or (pids and md.producer_id not in pids):
                    continue
                if names and md.state not in wanted:
                    continue
                if duration_ms >= 0 and now.wall - md.start_ms <= duration_ms:
                    continue
                out.append({"transactional_id": md.transactional_id, "producer_id": md.producer_id,
                            "transaction_state": md.state.kafka_name})
        return ErrorCode.NONE, unknown, out


__all__ = ["TxnState", "TxnMetadata", "TxnTransit", "TxnShard", "TxnCoordinatorCore", "TxnConfig", "Now", "Effects",
           "Append", "Op", "Reply", "MarkerJob", "ParkedAdd", "IllegalTransition", "PARTITION_DELETED", "TV_0", "TV_1", "TV_2"]
