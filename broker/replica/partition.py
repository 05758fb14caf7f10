"""Per-partition replication state, as pure logic: leader epoch, partition epoch, ISR and
the high watermark (minimum log end offset over the ISR, never decreasing).

Leader side (Kafka's ``Partition``): per-follower progress from follower fetches, the high
watermark over the *maximal* ISR (KIP-497), ISR shrink after ``replica.lag.time.max.ms``
without catching up, ISR expansion once a follower reaches the HW inside the current leader
epoch, and acks=all / ``min.insync.replicas`` checks.

ISR changes go through the controller. The partition proposes one ``AlterPartitionRequest``
at a time; the shell sends what ``take_alter_partition()`` hands out and reports back with
``on_isr_committed(registration, leo)`` or ``on_alter_partition_error(code)``. Until then
the committed ISR is the one used for election-sensitive decisions; the HW uses the union of
the committed and the proposed ISR, so neither a pending shrink nor a pending expansion can
let the HW pass a replica the controller might elect.

Nothing here reads a clock or a log: the caller passes ``now_ms`` and log end offsets.

Driving it as leader (the shell; ``st`` is this state, ``log`` the partition's ``Log``)::

    metadata delta, we lead:  if st.make_leader(reg, log.log_end_offset, now_ms):
                                  log.leader_epoch_cache.assign(reg.leader_epoch, log.log_end_offset)
                              (stop fetching; wake acks=all waiters if st.high_watermark moved)
    produce acks=all:         err = st.can_append_acks_all(min_isr)  -> NOT_ENOUGH_REPLICAS
                              log.append_as_leader(..., st.leader_epoch, now); st.maybe_advance_hw(leo)
                              wait until st.acks_all_result(last_offset, min_isr) is not None
    follower fetch:           v = st.validate_follower_fetch(cur_epoch, fetch_offset, last_fetched_epoch,
                                                             log.leader_epoch_cache, log_start, leo)
                              v.error -> answer it; v.diverging_epoch -> answer it with the HW, no records
                              else read, st.on_follower_fetch(replica, fetch_offset, leo, now_ms,
                                                              broker_epoch), answer with st.high_watermark
    every lag.time.max / 2:   st.maybe_shrink_isr(leo, now_ms)
    after any of the above:   req = st.take_alter_partition(); if req: send AlterPartition
    AlterPartition answer:    st.on_isr_committed(PartitionRegistration(...), leo, req)
                              or st.on_alter_partition_error(code, req); then take_alter_partition()
    metadata delta, we follow: if st.make_follower(reg): fetcher.become(reg.leader, reg.leader_epoch,
                                                                         st.high_watermark)
"""

from __future__ import annotations

import dataclasses
import uuid

from common.errors import ErrorCode

DEFAULT_REPLICA_LAG_TIME_MAX_MS = 30_000
UNKNOWN_OFFSET = -1
UNDEFINED_EPOCH = -1

# AlterPartition errors after which the proposal is dropped and the committed ISR stands
# (Kafka's handleAlterPartitionError): the leader may propose again later.
_ALTER_REVERT = frozenset({ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.INELIGIBLE_REPLICA})
# Errors that say our view is stale: keep the proposal parked (no new one, no resend) until
# newer metadata arrives through ``make_leader``/``make_follower``/``become``.
_ALTER_AWAIT_METADATA = frozenset({ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.INVALID_UPDATE_VERSION,
                                   ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID,
                                   ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.INVALID_REQUEST})


@dataclasses.dataclass(slots=True)
class ReplicaProgress:
    """What the leader knows of one follower (Kafka's ``ReplicaState``)."""

    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_time_ms: int = 0
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_time_ms: int = 0
    broker_epoch: int = -1  # the follower's broker epoch from its last fetch (KIP-903)
    log_start_offset: int = UNKNOWN_OFFSET  # the follower's log start, from its fetches (DeleteRecords)

    def is_caught_up(self, leader_end_offset: int, now_ms: int, max_lag_ms: int) -> bool:
        return (self.log_end_offset == leader_end_offset
                or now_ms - self.last_caught_up_time_ms <= max_lag_ms)


@dataclasses.dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    """One partition's entry of an AlterPartition request (leader -> controller)."""

    topic_id: uuid.UUID
    partition: int
    leader_id: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]
    # broker epoch of each new_isr member as its fetches told us (-1: unknown); the
    # controller refuses members whose broker epoch is stale (KIP-903: restarted since)
    new_isr_broker_epochs: tuple[int, ...]
    seq: int  # distinguishes proposals of the same partition; not sent on the wire


@dataclasses.dataclass(frozen=True, slots=True)
class FetchValidation:
    """The leader's verdict on a follower (or consumer) fetch position, before reading.

    ``error`` is NONE or the code to answer with; ``diverging_epoch`` is set (as
    ``(epoch, end_offset)``) when the fetcher's last fetched epoch does not match our log
    (Fetch v12+, KIP-320): answer with it and no records, and do not update follower state."""

    error: ErrorCode = ErrorCode.NONE
    diverging_epoch: tuple[int, int] | None = None


@dataclasses.dataclass(slots=True)
class PartitionState:
    topic: str
    partition: int
    topic_id: uuid.UUID
    local_broker: int
    leader: int = -1
    leader_epoch: int = -1
    partition_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()  # as committed by the controller
    high_watermark: int = 0
    follower_end_offsets: dict[int, int] = dataclasses.field(default_factory=dict)
    replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS
    # offset at which our leadership of ``leader_epoch`` started (the LEO when we became leader)
    leader_epoch_start_offset: int = UNKNOWN_OFFSET
    progress: dict[int, ReplicaProgress] = dataclasses.field(default_factory=dict)
    # the proposed ISR change, if any; ``alter_in_flight`` once handed to the shell
    pending_alter: AlterPartitionRequest | None = None
    alter_in_flight: bool = False
    alter_parked: bool = False  # an error said "wait for metadata"
    _alter_seq: int = 0
    # unfenced brokers (not in controlled shutdown) and their broker epochs, from the metadata
    # image; None: unknown, every replica may join the ISR (the controller still checks)
    eligible_broker_epochs: dict[int, int] | None = None

    # =====================================================================================
    # metadata
    # =====================================================================================
    @property
    def is_leader(self) -> bool:
        return self.leader == self.local_broker

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """Committed ISR plus any replica a pending proposal adds (KIP-497). During a pending
        shrink this is the committed (larger) ISR; during a pending expansion it already
        includes the new member, so the HW waits for it."""
        if self.pending_alter is None:
            return self.isr
        extra = tuple(r for r in self.pending_alter.new_isr if r not in self.isr)
        return self.isr + extra

    def become(self, leader: int, leader_epoch: int, partition_epoch: int, replicas, isr) -> bool:
        """Applies a registration from the metadata image; returns True if leadership changed.
        Kept for callers that do not track follower progress; prefer ``make_leader`` and
        ``make_follower``."""
        changed = leader != self.leader or leader_epoch != self.leader_epoch
        duplicate = not changed and partition_epoch == self.partition_epoch
        self.leader, self.leader_epoch, self.partition_epoch = leader, leader_epoch, partition_epoch
        self.replicas, self.isr = tuple(replicas), tuple(isr)
        if not duplicate:
            self._clear_alter()
        if changed:
            self.follower_end_offsets = {}
            self.progress = {}
        return changed

    def is_stale(self, registration) -> bool:
        """A registration older than what we already applied (metadata and AlterPartition
        responses race): lower leader epoch, or same leader epoch and lower partition epoch."""
        return (registration.leader_epoch < self.leader_epoch
                or (registration.leader_epoch == self.leader_epoch
                    and registration.partition_epoch < self.partition_epoch))

    def is_current(self, registration) -> bool:
        """The registration we already applied (a duplicate delivery). It must not drop a
        pending ISR proposal: the controller may still commit it, and the HW must keep
        counting its new member until we know (KIP-497)."""
        return (registration.leader_epoch == self.leader_epoch
                and registration.partition_epoch == self.partition_epoch
                and registration.leader == self.leader)

    def make_leader(self, registration, local_end_offset: int, now_ms: int) -> bool:
        """We lead per ``registration`` (a ``PartitionRegistration``). Returns True if this
        starts a new leader epoch: the caller must then record
        ``log.leader_epoch_cache.assign(leader_epoch, local_end_offset)``.

        A stale or already applied registration is ignored (returns False). A newer one drops
        any ISR proposal: it carries a newer partition epoch, so the controller will refuse
        the proposal (INVALID_UPDATE_VERSION), and the registration is the committed truth.
        So does the registration of our own AlterPartition's partition epoch when its replicas
        differ: that answer carries no replicas, and when it completed a reassignment the
        removed replicas must go (else their last fetches get them proposed back, refused)."""
        if self.is_stale(registration) or (self.is_leader and self.is_current(registration)
                                           and tuple(registration.replicas) == self.replicas):
            return False
        assert registration.leader == self.local_broker, "make_leader for a registration we do not lead"
        new_epoch = registration.leader_epoch != self.leader_epoch or not self.is_leader
        self.leader = registration.leader
        self.leader_epoch = registration.leader_epoch
        self.partition_epoch = registration.partition_epoch
        self.replicas = tuple(registration.replicas)
        self.isr = tuple(registration.isr)
        self._clear_alter()
        if new_epoch:
            self.leader_epoch_start_offset = local_end_offset
            self.follower_end_offsets = {}
            # Kafka resets remote replica state on a new leader: ISR members get a full lag
            # window from now, others must catch up from scratch.
            self.progress = {
                r: ReplicaProgress(last_caught_up_time_ms=now_ms if r in self.isr else 0)
                for r in self.replicas if r != self.local_broker}
        else:
            for r in self.replicas:
                if r != self.local_broker and r not in self.progress:
                    self.progress[r] = ReplicaProgress()
            for r in list(self.progress):
                if r not in self.replicas:
                    del self.progress[r]
                    self.follower_end_offsets.pop(r, None)
        self.maybe_advance_hw(local_end_offset)
        return new_epoch

    def make_follower(self, registration) -> bool:
        """We follow per ``registration``. Returns True if the leader or leader epoch changed:
        the caller must then reset its follower fetch state (``FollowerFetchState.become``).
        Stale registrations are ignored (False)."""
        if self.is_stale(registration) or self.is_current(registration):
            return False
        changed = (registration.leader != self.leader or registration.leader_epoch != self.leader_epoch)
        self.leader = registration.leader
        self.leader_epoch = registration.leader_epoch
        self.partition_epoch = registration.partition_epoch
        self.replicas = tuple(registration.replicas)
        self.isr = tuple(registration.isr)
        self._clear_alter()
        self.progress = {}
        self.follower_end_offsets = {}
        self.leader_epoch_start_offset = UNKNOWN_OFFSET
        return changed

    def check_leader_epoch(self, requested: int) -> str | None:
        """KIP-320: a request's current leader epoch vs ours. Returns an error-code name or None."""
        if requested < 0 or requested == self.leader_epoch:
            return None
        return "FENCED_LEADER_EPOCH" if requested < self.leader_epoch else "UNKNOWN_LEADER_EPOCH"

    # =====================================================================================
    # high watermark
    # =====================================================================================
    def maybe_advance_hw(self, local_end_offset: int) -> bool:
        """HW = min LEO over the maximal ISR; never goes backwards. Returns True if it moved."""
        if not self.is_leader:
            return False
        candidate = local_end_offset
        for r in self.maximal_isr:
            if r != self.local_broker:
                candidate = min(candidate, self.follower_end_offsets.get(r, UNKNOWN_OFFSET))
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False

    def set_follower_high_watermark(self, hw: int) -> None:
        """As a follower: the HW is what the leader told us, capped by our log end
        (``FollowerFetchState`` computes it); it may go down after a truncation."""
        self.high_watermark = hw

    # =====================================================================================
    # follower fetches (leader side)
    # =====================================================================================
    def validate_follower_fetch(self, current_leader_epoch: int, fetch_offset: int, last_fetched_epoch: int,
                                epoch_cache, log_start_offset: int, log_end_offset: int) -> FetchValidation:
        """Check a replica fetch before reading the log: leadership, the fetcher's leader
        epoch (KIP-320), divergence of its last fetched epoch (Fetch v12+), and range."""
        if not self.is_leader:
            return FetchValidation(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        bad = self.check_leader_epoch(current_leader_epoch)
        if bad is not None:
            return FetchValidation(ErrorCode[bad])
        if last_fetched_epoch >= 0:
            div = diverging_epoch(epoch_cache, log_end_offset, fetch_offset, last_fetched_epoch)
            if div is not None:
                return FetchValidation(diverging_epoch=div)
        if fetch_offset < log_start_offset or fetch_offset > log_end_offset:
            return FetchValidation(ErrorCode.OFFSET_OUT_OF_RANGE)
        return FetchValidation()

    def on_follower_fetch(self, replica_id: int, fetch_offset: int, leader_leo: int, now_ms: int,
                          broker_epoch: int = -1, log_start_offset: int = UNKNOWN_OFFSET) -> bool:
        """A valid fetch from follower ``replica_id`` at ``fetch_offset`` (its log end), served
        while our log end was ``leader_leo``. Updates its progress, may propose an ISR
        expansion, and returns True if the HW moved (complete acks=all waiters)."""
        if not self.is_leader or replica_id == self.local_broker:
            return False
        p = self.progress.get(replica_id)
        if p is None:
            if replica_id not in self.replicas:
                return False
            p = self.progress[replica_id] = ReplicaProgress()
        # Kafka's updateFetchState: caught up if at our LEO now, or at least at our LEO as of
        # its previous fetch (then it was caught up at the time of that fetch).
        if fetch_offset >= leader_leo:
            p.last_caught_up_time_ms = max(p.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= p.last_fetch_leader_log_end_offset >= 0:
            p.last_caught_up_time_ms = max(p.last_caught_up_time_ms, p.last_fetch_time_ms)
        p.log_end_offset = fetch_offset
        p.last_fetch_leader_log_end_offset = leader_leo
        p.last_fetch_time_ms = now_ms
        p.broker_epoch = broker_epoch
        p.log_start_offset = log_start_offset
        self.follower_end_offsets[replica_id] = fetch_offset
        self._maybe_expand_isr(replica_id)
        return self.maybe_advance_hw(leader_leo)

    def idle_follower_fetched(self, replica_id: int, fetch_time_ms: int) -> None:
        """Follower ``replica_id`` fetched at ``fetch_time_ms`` with this partition idle in its
        fetch session (at our log end as of its last read, nothing new since, so not read
        again): what ``on_follower_fetch`` would have recorded had the fetch read it. Called
        when our log end is about to leave it behind, so that it is not taken for lagging since
        the last fetch that read the partition."""
        p = self.progress.get(replica_id)
        if p is None or not self.is_leader or not p.log_end_offset >= p.last_fetch_leader_log_end_offset >= 0:
            return
        p.last_caught_up_time_ms = max(p.last_caught_up_time_ms, fetch_time_ms)
        p.last_fetch_time_ms = max(p.last_fetch_time_ms, fetch_time_ms)

    def low_watermark(self, local_log_start: int, alive_brokers) -> int:
        """Kafka's ``lowWatermarkIfLeader``: the smallest log start offset over this leader and
        every follower on a live broker (as their fetches reported it). A DeleteRecords is
        complete once this reaches its offset: every live replica has moved its log start."""
        low = local_log_start
        for r, p in self.progress.items():
            if r in alive_brokers and p.log_start_offset < low:
                low = p.log_start_offset
        return low

    def set_eligible_brokers(self, broker_epochs: dict[int, int] | None) -> None:
        """From the metadata image: brokers that may join an ISR (registered, unfenced, not
        shutting down) with their broker epochs. Proposing others only earns an
        INELIGIBLE_REPLICA from the controller (KIP-841, KIP-903)."""
        self.eligible_broker_epochs = broker_epochs

    def is_replica_isr_eligible(self, replica_id: int) -> bool:
        if self.eligible_broker_epochs is None:
            return True
        epoch = self.eligible_broker_epochs.get(replica_id)
        if epoch is None:
            return False
        p = self.progress.get(replica_id)
        return p is None or p.broker_epoch < 0 or p.broker_epoch == epoch

    def _maybe_expand_isr(self, replica_id: int) -> None:
        if self.pending_alter is not None or replica_id in self.isr:
            return
        if not self.is_replica_isr_eligible(replica_id):
            return
        leo = self.follower_end_offsets.get(replica_id, UNKNOWN_OFFSET)
        # in sync: reached the HW, and fetched inside our epoch (so its log matches ours)
        if leo >= self.high_watermark and 0 <= self.leader_epoch_start_offset <= leo:
            self._propose(tuple(sorted(self.isr + (replica_id,))))

    def out_of_sync_replicas(self, leader_leo: int, now_ms: int) -> list[int]:
        return [r for r in self.isr if r != self.local_broker
                and not self.progress.get(r, ReplicaProgress()).is_caught_up(
                    leader_leo, now_ms, self.replica_lag_time_max_ms)]

    def maybe_shrink_isr(self, leader_leo: int, now_ms: int) -> bool:
        """Periodic check (Kafka runs it every lag.time.max/2): propose removing followers that
        have not caught up within ``replica_lag_time_max_ms``. Returns True if it proposed."""
        if not self.is_leader or self.pending_alter is not None:
            return False
        out = self.out_of_sync_replicas(leader_leo, now_ms)
        if not out:
            return False
        self._propose(tuple(r for r in self.isr if r not in out))
        return True

    # =====================================================================================
    # AlterPartition
    # =====================================================================================
    def _propose(self, new_isr: tuple[int, ...]) -> None:
        self._alter_seq += 1
        epochs = tuple(self.progress[r].broker_epoch if r in self.progress else -1 for r in new_isr)
        self.pending_alter = AlterPartitionRequest(self.topic_id, self.partition, self.local_broker,
                                                   self.leader_epoch, self.partition_epoch, new_isr,
                                                   epochs, self._alter_seq)
        self.alter_in_flight = False
        self.alter_parked = False

    def _clear_alter(self) -> None:
        self.pending_alter = None
        self.alter_in_flight = False
        self.alter_parked = False

    def take_alter_partition(self) -> AlterPartitionRequest | None:
        """The proposal to send now, if any and not already in flight (at most one per
        partition). The shell sends it and reports back with ``on_isr_committed`` or
        ``on_alter_partition_error``, passing the request back."""
        if self.pending_alter is None or self.alter_in_flight or self.alter_parked:
            return None
        self.alter_in_flight = True
        return self.pending_alter

    def on_isr_committed(self, registration, local_end_offset: int,
                         request: AlterPartitionRequest | None = None) -> bool:
        """The controller's answer (leader, leader epoch, ISR, partition epoch) to our
        AlterPartition. A response to a proposal we already dropped, or older than our
        state, is ignored. Returns True if the HW moved."""
        if request is not None and request is not self.pending_alter:
            return False
        if not self.is_leader or self.is_stale(registration):
            return False
        if registration.leader != self.local_broker or registration.leader_epoch != self.leader_epoch:
            return False  # metadata will make us a follower
        self.partition_epoch = registration.partition_epoch
        self.isr = tuple(registration.isr)
        if registration.replicas:
            self.replicas = tuple(registration.replicas)
        self._clear_alter()
        return self.maybe_advance_hw(local_end_offset)

    def on_alter_partition_error(self, code: ErrorCode, request: AlterPartitionRequest | None = None) -> bool:
        """A failed AlterPartition. Either drop the proposal (the committed ISR stands and a
        new one may be proposed), park it until new metadata, or mark it for resending.

        Returns True when the shell must send it again (after a backoff): nothing else will
        prompt it, since no new proposal is made while this one is pending, and a pending
        expansion keeps its member in the maximal ISR (the HW waits for it)."""
        if self.pending_alter is None or (request is not None and request is not self.pending_alter):
            return False
        if code in _ALTER_REVERT:
            self._clear_alter()
            return False
        if code in _ALTER_AWAIT_METADATA:
            self.alter_in_flight = False
            self.alter_parked = True
            return False
        self.alter_in_flight = False  # timeouts, NOT_CONTROLLER, network errors: send again
        return True

    # =====================================================================================
    # acks=all
    # =====================================================================================
    def can_append_acks_all(self, min_isr: int) -> ErrorCode:
        """Before appending an acks=all produce: enough committed in-sync replicas?"""
        if not self.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.NONE if len(self.isr) >= min_isr else ErrorCode.NOT_ENOUGH_REPLICAS

    def is_acked(self, offset: int) -> bool:
        """Has the record at ``offset`` reached every ISR member (HW passed it)?"""
        return self.high_watermark > offset

    def acks_all_result(self, last_offset: int, min_isr: int) -> ErrorCode | None:
        """For an acks=all produce waiting in purgatory whose last record is ``last_offset``:
        None while waiting; NONE when done; NOT_ENOUGH_REPLICAS_AFTER_APPEND when the HW passed
        it but the ISR shrank below min ISR meanwhile (Kafka checks the maximal ISR)."""
        if not self.is_acked(last_offset):
            return None
        if len(self.maximal_isr) < min_isr:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return ErrorCode.NONE


def diverging_epoch(epoch_cache, log_end_offset: int, fetch_offset: int,
                    last_fetched_epoch: int) -> tuple[int, int] | None:
    """Fetch v12+: ``(epoch, end_offset)`` to send back when the fetcher's log diverges from
    ours at ``fetch_offset`` given the epoch of its last fetched batch, else None."""
    epoch, end = epoch_cache.end_offset_for(last_fetched_epoch, log_end_offset)
    if end < fetch_offset or epoch < last_fetched_epoch:
        return epoch, end
    return None
