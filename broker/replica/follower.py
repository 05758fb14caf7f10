"""The follower side of one partition's replication, as a pure state machine (Kafka's
``AbstractFetcherThread`` per-partition logic, KIP-101/279 truncation, KIP-320 Fetch v12+
diverging epochs).

The shell (the fetcher) drives it::

    fs.become(leader, leader_epoch, state.high_watermark)   # when state.make_follower(reg) is True
    while running:
        act = fs.next_action(log, now_ms)            # None: wait (in flight, backoff, metadata)
        OffsetsForLeaderEpochRequest -> send; answer -> fs.on_offsets_for_leader_epoch(act, log, ...)
        FetchRequest                 -> send (replica_id, replica epoch = our broker epoch);
                                        answer -> fs.on_fetch_response(act, log, FetchAnswer(...), now_ms)
        network failure              -> fs.on_request_failed(act, now_ms)
        each returned effect, in order: Truncate -> log.truncate_to(offset) and
                                                    log.leader_epoch_cache.truncate_from_end(offset)
                                         TruncateFullyAndStartAt -> log.truncate_fully_and_start_at(offset)
                                         AppendRecords -> log.append_as_follower(records)
                                         SetHighWatermark -> partition_state.set_follower_high_watermark(hw)
                                         IncrementLogStartOffset -> log.delete_records_before(offset)
        an append that fails -> fs.on_append_failed()

``log`` is anything with ``log_start_offset``, ``log_end_offset`` and ``leader_epoch_cache``
(``latest_epoch()``, ``end_offset_for(epoch, leo)``): the real ``Log`` or the simulator's.

Truncation never uses the high watermark alone: after a leader change the follower asks
the leader for the end offset of its latest epoch and truncates to the smaller of the two
logs' end offsets for the largest epoch both know, repeating while the epochs differ.
"""

from __future__ import annotations

import dataclasses
import enum

from common.errors import ErrorCode

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1
DEFAULT_RETRY_BACKOFF_MS = 1000


class Phase(enum.Enum):
    IDLE = "idle"  # not following anyone (we lead, or no leader)
    TRUNCATING = "truncating"  # must reconcile our log with the leader before fetching
    FETCHING = "fetching"
    AWAITING_METADATA = "awaiting_metadata"  # fenced / not leader: only become() gets us out


# --- requests the shell sends to the leader -------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class OffsetsForLeaderEpochRequest:
    leader: int
    current_leader_epoch: int
    leader_epoch: int  # our latest epoch: "where does this epoch end in your log?"


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class FetchRequest:
    leader: int
    fetch_offset: int
    last_fetched_epoch: int  # -1: no divergence check
    current_leader_epoch: int
    log_start_offset: int
    # holding a damaged copy: tells the leader where our readable copy ends; the answer is ignored
    probe: bool = False


# --- effects the shell applies to the local log, in order ------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class Truncate:
    offset: int


@dataclasses.dataclass(frozen=True, slots=True)
class TruncateFullyAndStartAt:
    offset: int


@dataclasses.dataclass(frozen=True, slots=True)
class AppendRecords:
    first_offset: int
    next_offset: int  # LEO after the append


@dataclasses.dataclass(frozen=True, slots=True)
class SetHighWatermark:
    high_watermark: int


@dataclasses.dataclass(frozen=True, slots=True)
class IncrementLogStartOffset:
    """The leader's log start moved past ours (DeleteRecords, retention): move ours, never past
    our high watermark (Kafka's ``maybeIncrementLogStartOffset`` on the follower)."""

    offset: int


Effect = Truncate | TruncateFullyAndStartAt | AppendRecords | SetHighWatermark | IncrementLogStartOffset


@dataclasses.dataclass(frozen=True, slots=True)
class FetchAnswer:
    """The leader's partition response to a FetchRequest, as the machine needs it.

    ``records_first_offset``/``records_next_offset``: base offset of the first returned batch
    and last offset + 1 of the last one (None when no records). For OFFSET_OUT_OF_RANGE the
    shell also supplies the leader's log end offset (from ListOffsets latest, as Kafka's
    fetcher does); ``log_start_offset`` is in every Fetch response."""

    error: ErrorCode = ErrorCode.NONE
    high_watermark: int = UNDEFINED_OFFSET
    log_start_offset: int = UNDEFINED_OFFSET
    diverging_epoch: tuple[int, int] | None = None
    records_first_offset: int | None = None
    records_next_offset: int | None = None
    leader_log_end_offset: int = UNDEFINED_OFFSET


def latest_epoch(cache) -> int:
    """The cache's newest epoch; accepts ``latest_epoch`` as a method or a property (the log
    layer has had both)."""
    e = cache.latest_epoch
    return e() if callable(e) else e


@dataclasses.dataclass(slots=True)
class FollowerFetchState:
    local_broker: int
    use_offsets_for_leader_epoch: bool = True  # False: truncate only via Fetch diverging epochs
    retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS
    leader: int = -1
    leader_epoch: int = UNDEFINED_EPOCH
    phase: Phase = Phase.IDLE
    high_watermark: int = 0
    in_flight: object | None = None
    backoff_until_ms: int = 0
    # after a truncation in an epoch we did not share with the leader, ask again
    _truncation_rounds: int = 0
    # the leader could not place our epoch: fetch without a divergence check
    _skip_epoch_check: bool = False
    # our copy is damaged from this offset and we are still in the ISR (on_local_damage)
    holding: int | None = None

    # =====================================================================================
    # leadership
    # =====================================================================================
    def become(self, leader: int, leader_epoch: int, high_watermark: int | None = None) -> None:
        """Follow ``leader`` in ``leader_epoch``: our log must be reconciled again (any
        in-flight answer is for the old leader and will be ignored). ``high_watermark`` is
        the partition's current HW (from ``PartitionState``/the HW checkpoint)."""
        self.leader, self.leader_epoch = leader, leader_epoch
        if high_watermark is not None:
            self.high_watermark = high_watermark
        self.in_flight = None
        self.backoff_until_ms = 0
        self._truncation_rounds = 0
        self._skip_epoch_check = False
        self.holding = None
        if leader < 0 or leader == self.local_broker:
            self.phase = Phase.IDLE
        elif self.use_offsets_for_leader_epoch:
            self.phase = Phase.TRUNCATING
        else:
            self.phase = Phase.FETCHING  # divergence is caught by last_fetched_epoch (KIP-320)

    def stop(self) -> None:
        self.become(-1, self.leader_epoch)

    # =====================================================================================
    # driving
    # =====================================================================================
    def next_action(self, log, now_ms: int = 0) -> OffsetsForLeaderEpochRequest | FetchRequest | None:
        """The request to send now, or None (one in flight, backing off, idle, fenced)."""
        if self.in_flight is not None or now_ms < self.backoff_until_ms:
            return None
        if self.holding is not None and self.phase in (Phase.TRUNCATING, Phase.FETCHING):
            self.in_flight = FetchRequest(self.leader, self.holding, UNDEFINED_EPOCH, self.leader_epoch,
                                          log.log_start_offset, probe=True)
            return self.in_flight
        if self.phase is Phase.TRUNCATING:
            epoch = latest_epoch(log.leader_epoch_cache)
            if epoch == UNDEFINED_EPOCH:
                # nothing to reconcile: an empty log or one without epochs; the fetch's range
                # check (OFFSET_OUT_OF_RANGE) handles a log that is ahead of the leader
                self.phase = Phase.FETCHING
            else:
                self.in_flight = OffsetsForLeaderEpochRequest(self.leader, self.leader_epoch, epoch)
                return self.in_flight
        if self.phase is Phase.FETCHING:
            last = UNDEFINED_EPOCH if self._skip_epoch_check else latest_epoch(log.leader_epoch_cache)
            self.in_flight = FetchRequest(self.leader, log.log_end_offset, last, self.leader_epoch,
                                          log.log_start_offset)
            return self.in_flight
        return None

    def on_request_failed(self, request, now_ms: int) -> None:
        """Timeout or connection error: try again after the backoff."""
        if request is self.in_flight:
            self.in_flight = None
            self.backoff_until_ms = now_ms + self.retry_backoff_ms

    def on_local_damage(self, log, offset: int, in_isr: bool) -> list[Effect]:
        """Our own copy does not parse from ``offset`` on (a corrupt batch found at open or by
        a read): drop it and everything after it, and fetch it all again from the leader.
        Nothing readable is lost: a log cannot be read past a batch that does not parse.

        But not while we are in the ISR: the controller may elect us, and a leader that
        dropped committed records makes the others drop them too. Until the leader takes us
        out we keep our bytes and only fetch at ``offset`` (ignoring the answers): the leader
        sees us lagging there and shrinks the ISR after replica.lag.time.max.ms. A restarted
        broker is out of the ISR at once (its new registration)."""
        if self.phase is Phase.IDLE or self.in_flight is not None:
            return []
        self.holding = offset if in_isr else None
        return [] if in_isr else self._truncate(log, offset)

    def on_append_failed(self) -> None:
        """The log refused the records (they do not continue it): reconcile again."""
        self.in_flight = None
        self.phase = Phase.TRUNCATING if self.use_offsets_for_leader_epoch else Phase.FETCHING

    # =====================================================================================
    # OffsetsForLeaderEpoch (KIP-101/279)
    # =====================================================================================
    def on_offsets_for_leader_epoch(self, request, log, error: ErrorCode, leader_epoch: int,
                                    end_offset: int, now_ms: int = 0) -> list[Effect]:
        """The leader says our epoch ``request.leader_epoch`` maps to ``(leader_epoch,
        end_offset)`` in its log: the largest epoch <= ours it knows and where it ends."""
        if request is not self.in_flight:
            return []
        self.in_flight = None
        if error != ErrorCode.NONE:
            return self._on_error(error, now_ms)
        target, complete = self._truncation_offset(log, leader_epoch, end_offset)
        effects: list[Effect] = []
        if target is None:
            self._skip_epoch_check = True  # the leader cannot place our epoch
            self.phase = Phase.FETCHING
            return effects
        effects.extend(self._truncate(log, target))
        self._truncation_rounds += 1
        if complete or self._truncation_rounds > 64:
            self.phase = Phase.FETCHING
        return effects

    def _truncation_offset(self, log, leader_epoch: int, leader_end: int) -> tuple[int | None, bool]:
        """KIP-279: (offset to truncate to, done?). Not done when the leader answered with an
        epoch we do not have: we truncated to a safe bound, and must ask again with our new
        latest epoch."""
        leo = log.log_end_offset
        if leader_end == UNDEFINED_OFFSET or leader_epoch == UNDEFINED_EPOCH:
            # The leader has no epoch <= ours (its log is empty or newer than anything we
            # have). Its end offset, if any, still bounds us.
            if leader_end != UNDEFINED_OFFSET:
                return min(leader_end, leo), True
            return None, True
        local_epoch, local_end = log.leader_epoch_cache.end_offset_for(leader_epoch, leo)
        if local_epoch == leader_epoch:
            return min(leader_end, local_end, leo), True
        if local_epoch == UNDEFINED_EPOCH:
            # every epoch we have is newer than the leader's answer: keep what it has
            return min(leader_end, leo), True
        return min(leader_end, local_end, leo), False

    # =====================================================================================
    # Fetch
    # =====================================================================================
    def on_fetch_response(self, request, log, answer: FetchAnswer, now_ms: int = 0) -> list[Effect]:
        if request is not self.in_flight:
            return []
        self.in_flight = None
        if request.probe:
            self.backoff_until_ms = now_ms + self.retry_backoff_ms
            return self._on_error(answer.error, now_ms) if answer.error != ErrorCode.NONE else []
        if answer.error == ErrorCode.OFFSET_OUT_OF_RANGE:
            return self._on_out_of_range(log, answer)
        if answer.error != ErrorCode.NONE:
            return self._on_error(answer.error, now_ms)
        if answer.diverging_epoch is not None:
            epoch, end = answer.diverging_epoch
            target, complete = self._truncation_offset(log, epoch, end)
            if target is None:
                self._skip_epoch_check = True
                return []
            effects = self._truncate(log, target)
            if not complete and self.use_offsets_for_leader_epoch:
                self.phase = Phase.TRUNCATING
            return effects
        self._skip_epoch_check = False
        effects = []
        leo = log.log_end_offset
        if answer.records_next_offset is not None and answer.records_next_offset > leo:
            first = answer.records_first_offset if answer.records_first_offset is not None else leo
            effects.append(AppendRecords(first, answer.records_next_offset))
            leo = answer.records_next_offset
        if answer.high_watermark >= 0:
            effects.append(SetHighWatermark(self._set_hw(answer.high_watermark, leo)))
        start = min(answer.log_start_offset, self.high_watermark)
        if start > log.log_start_offset:
            effects.append(IncrementLogStartOffset(start))
        return effects

    def keep_waiting(self, request, log, high_watermark: int, log_start_offset: int) -> bool:
        """An incremental Fetch response left this partition out (nothing new), and its last
        known watermarks are ``high_watermark``/``log_start_offset``. True if that answer would
        change nothing here (no records, our HW and log start stay): then ``request`` stays in
        flight, as the leader's fetch session (KIP-227) keeps it, and the partition needs no
        work until an answer names it (``on_fetch_response`` with this request) or the shell
        ``withdraw``s it. False: answer it with ``on_fetch_response`` as usual."""
        return (request is self.in_flight and type(request) is FetchRequest and not request.probe
                and not self._skip_epoch_check and request.fetch_offset == log.log_end_offset
                and self.high_watermark == min(high_watermark, log.log_end_offset)
                and min(log_start_offset, self.high_watermark) <= log.log_start_offset)

    def withdraw(self, request) -> None:
        """The shell no longer waits for an answer to ``request`` (our log changed under it, or
        the fetch session starts over): the next ``next_action`` makes a new one, at once."""
        if request is self.in_flight:
            self.in_flight = None

    def _on_out_of_range(self, log, answer: FetchAnswer) -> list[Effect]:
        leo = log.log_end_offset
        if answer.leader_log_end_offset >= 0 and leo > answer.leader_log_end_offset:
            # we are ahead of the leader (it lost data or was elected uncleanly): drop our tail
            return self._truncate(log, answer.leader_log_end_offset)
        if answer.log_start_offset >= 0 and leo < answer.log_start_offset:
            # the leader deleted what we need next: restart our log at its log start
            start = answer.log_start_offset
            self.high_watermark = start
            return [TruncateFullyAndStartAt(start), SetHighWatermark(start)]
        return []  # transient (e.g. the leader's log moved meanwhile): fetch again

    def _on_error(self, error: ErrorCode, now_ms: int) -> list[Effect]:
        if error == ErrorCode.FENCED_LEADER_EPOCH:
            # the leader is in a newer epoch than ours: metadata will bring it (become())
            self.phase = Phase.AWAITING_METADATA
        else:
            # NOT_LEADER_OR_FOLLOWER / UNKNOWN_LEADER_EPOCH: the leader has not applied its
            # election yet (or lost it and metadata is on its way); as Kafka's fetcher does,
            # back off and retry rather than wait, as our own metadata may already be current
            self.backoff_until_ms = now_ms + self.retry_backoff_ms
        return []

    def _truncate(self, log, target: int) -> list[Effect]:
        """Truncate even when ``target`` is our log end: the epoch cache may hold an entry at
        the end with no records (we led an epoch and appended nothing), which would make the
        leader report divergence forever. Kafka's truncateTo trims the cache in that case."""
        effects: list[Effect] = [Truncate(target)]
        if target < self.high_watermark or target < log.log_end_offset:
            effects.append(SetHighWatermark(self._set_hw(self.high_watermark, target)))
        return effects

    def _set_hw(self, leader_hw: int, local_leo: int) -> int:
        """Follower HW = min(leader's HW, our log end); follows the leader down too."""
        self.high_watermark = min(leader_hw, local_leo)
        return self.high_watermark
