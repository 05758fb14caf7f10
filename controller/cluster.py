"""Broker lifecycle of the quorum controller, as pure functions (KRaft's
ClusterControlManager and BrokerHeartbeatManager): registration, heartbeats, fencing of
brokers whose session expired, controlled shutdown.

Registrations and fencing live in the metadata log (``RegisterBrokerRecord``,
``BrokerRegistrationChangeRecord``). Sessions do not: ``ClusterState`` holds the last
heartbeat of each broker in the active controller's memory only, like KRaft. A controller
that becomes active calls ``ClusterState.activate`` so every registered broker gets a
fresh session instead of being fenced for heartbeats it sent to the previous leader.

Broker epochs are the offset of the broker's ``RegisterBrokerRecord`` (as in KRaft), so
they are unique and increase across registrations; callers pass ``next_offset`` (the
offset the first record they append will get), defaulting to ``image.offset + 1``, which
is exact for the controller loop that appends one write at a time on a committed image.

How the controller loop drives this module: on becoming active, ``state.activate(image,
now)``; each BrokerRegistration / BrokerHeartbeat is one ``write`` op calling
``register_broker`` / ``heartbeat``; a timer at ``state.next_session_expiry_ms`` (or
every second) runs ``fence_stale_brokers`` as a write. A heartbeat that waited too long
in the queue should still ``state.touch`` the broker, so queueing never fences anybody.
"""

from __future__ import annotations

import dataclasses
import enum
import uuid
from collections.abc import Sequence
from typing import Any

from common.errors import ErrorCode, KafkaError
from controller import replication
from metadata import records as r
from metadata.controller_api import HeartbeatResult
from metadata.delta import MetadataDelta
from metadata.features import jbod_supported
from metadata.image import BrokerRegistration, MetadataImage

DEFAULT_SESSION_TIMEOUT_MS = 9000  # broker.session.timeout.ms
_NO_OFFSET = -1


@dataclasses.dataclass(slots=True)
class BrokerSession:
    last_contact_ms: int
    metadata_offset: int = _NO_OFFSET  # last metadata offset the broker said it has applied
    controlled_shutdown_offset: int = _NO_OFFSET  # offset of its in-controlled-shutdown record
    shut_down: bool = False  # finished a controlled shutdown: its session ended with it
    heard: bool = True  # False while the session is only the grace ``activate`` gave it


class ClusterState:
    """The active controller's in-memory view of broker sessions (never in the log)."""

    def __init__(self) -> None:
        self.sessions: dict[int, BrokerSession] = {}

    def activate(self, image: MetadataImage, now_ms: int) -> None:
        """On becoming the active controller: every registered broker starts a fresh
        session now (KRaft does the same), so failover fences nobody by itself. A broker
        already fenced has no live session (Kafka's BrokerHeartbeatManager registers it as
        fenced), so a new incarnation of it registers at once: e.g. a combined node restarted
        after its controlled shutdown."""
        self.sessions = {bid: BrokerSession(now_ms, shut_down=b.fenced, heard=False)
                         for bid, b in image.brokers.items()}

    def touch(self, broker_id: int, now_ms: int, metadata_offset: int | None = None) -> BrokerSession:
        s = self.sessions.get(broker_id)
        if s is None:
            s = self.sessions[broker_id] = BrokerSession(now_ms)
        s.last_contact_ms = max(s.last_contact_ms, now_ms)
        s.heard = True
        if metadata_offset is not None:
            s.metadata_offset = metadata_offset
        return s

    def remove(self, broker_id: int) -> None:
        self.sessions.pop(broker_id, None)

    def has_valid_session(self, broker_id: int, now_ms: int, session_timeout_ms: int) -> bool:
        s = self.sessions.get(broker_id)
        return s is not None and now_ms - s.last_contact_ms < session_timeout_ms

    def next_session_expiry_ms(self, image: MetadataImage, session_timeout_ms: int) -> int | None:
        """When the next unfenced broker's session runs out: when to call
        ``fence_stale_brokers`` next. None if no broker can expire."""
        times = [s.last_contact_ms + session_timeout_ms for bid, s in self.sessions.items()
                 if (b := image.brokers.get(bid)) is not None and not b.fenced]
        return min(times) if times else None

    def lowest_active_offset(self, image: MetadataImage) -> int | None:
        """The lowest metadata offset among unfenced brokers that are not shutting down;
        None if there are none. A broker in controlled shutdown may stop once this has
        passed its shutdown record, so the others have seen its leadership moves."""
        offsets = [s.metadata_offset for bid, s in self.sessions.items()
                   if (b := image.brokers.get(bid)) is not None and not b.fenced and not b.in_controlled_shutdown]
        return min(offsets) if offsets else None


def _advance(image: MetadataImage, records: Sequence[Any]) -> MetadataImage:
    """``image`` with ``records`` replayed (offsets not meaningful): for chaining changes
    that must each see the previous ones, e.g. fencing several brokers in one write."""
    if not records:
        return image
    d = MetadataDelta(image)
    for rec in records:
        d.replay(rec)
    return d.apply(image.offset, image.epoch)


def _next_offset(image: MetadataImage, next_offset: int | None) -> int:
    return image.offset + 1 if next_offset is None else next_offset


# --- registration ----------------------------------------------------------------------------

def register_broker(image: MetadataImage, state: ClusterState, broker_id: int, incarnation_id: uuid.UUID,
                    endpoints: Sequence[r.Endpoint], rack: str | None, now_ms: int,
                    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS, *, next_offset: int | None = None,
                    unclean_default: bool = False, colocated_broker_id: int | None = None) -> tuple[list[Any], int]:
    """BrokerRegistration: returns the records and the broker's epoch.

    Another incarnation whose session is still live is refused with
    DUPLICATE_BROKER_REGISTRATION. The same incarnation registering again (a retry whose
    reply was lost) keeps its epoch and writes nothing, unless its endpoints or rack
    changed. A new registration starts fenced; the broker unfences by heartbeating once it
    has caught up with the metadata log. If the old incarnation still led partitions or
    sat in ISRs, those move away first, as when it is fenced.

    ``colocated_broker_id`` is the broker of the controller's own process (combined mode). Its
    previous incarnation cannot be alive if it has not heartbeated since this controller became
    active (the process restarted, e.g. after kill -9): it may register again at once, instead of
    waiting out the session that ``activate`` granted it."""
    endpoints = tuple(endpoints)
    existing = image.brokers.get(broker_id)
    offset = _next_offset(image, next_offset)
    recs: list[Any] = []
    if existing is not None:
        if existing.incarnation_id == incarnation_id:
            if existing.endpoints == endpoints and existing.rack == rack:
                state.touch(broker_id, now_ms)
                return [], existing.epoch
        else:
            if broker_id not in state.sessions:
                state.touch(broker_id, now_ms)  # unknown to this controller: a fresh session, as activate gives
            session = state.sessions[broker_id]
            ended = (existing.fenced and session.shut_down) or (broker_id == colocated_broker_id and not session.heard)
            if not ended and state.has_valid_session(broker_id, now_ms, session_timeout_ms):
                raise KafkaError(ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                                 f"Another broker is registered with that broker id {broker_id}; retry after "
                                 f"its session expires ({session_timeout_ms} ms after its last heartbeat).")
            recs += replication.handle_broker_fenced(image, broker_id, unclean_default)
            recs += replication.handle_broker_restarted(image, broker_id)
    offset += len(recs)  # the registration record comes after the partition changes
    if existing is not None:
        offset = max(offset, existing.epoch + 1)  # epochs only go up, whatever the caller passed
    if existing is not None and existing.incarnation_id == incarnation_id:
        # Same process, new endpoints: the same broker, so its fencing state carries over.
        rec = r.RegisterBrokerRecord(broker_id, incarnation_id, offset, endpoints, rack, fenced=existing.fenced,
                                     in_controlled_shutdown=existing.in_controlled_shutdown)
        state.touch(broker_id, now_ms)
    else:
        rec = r.RegisterBrokerRecord(broker_id, incarnation_id, offset, endpoints, rack, fenced=True)
        state.sessions[broker_id] = BrokerSession(now_ms)
    recs.append(rec)
    return recs, rec.broker_epoch


def unregister_broker(image: MetadataImage, state: ClusterState, broker_id: int,
                      unclean_default: bool = False) -> list[Any]:
    """UnregisterBroker (admin): the registration goes, after moving its partitions' leadership
    and ISR membership away as fencing would."""
    b = image.brokers.get(broker_id)
    if b is None:
        raise KafkaError(ErrorCode.BROKER_ID_NOT_REGISTERED, f"Broker ID {broker_id} is not currently registered")
    recs = replication.handle_broker_fenced(image, broker_id, unclean_default)
    recs.append(r.UnregisterBrokerRecord(broker_id, b.epoch))
    state.remove(broker_id)
    return recs


# --- heartbeats ------------------------------------------------------------------------------

class _State(enum.Enum):
    FENCED = "fenced"
    UNFENCED = "unfenced"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"
    SHUTDOWN_NOW = "shutdown_now"


def _current_state(b: BrokerRegistration) -> _State:
    if b.fenced:
        return _State.FENCED
    if b.in_controlled_shutdown:
        return _State.CONTROLLED_SHUTDOWN
    return _State.UNFENCED


def check_broker_epoch(image: MetadataImage, broker_id: int, broker_epoch: int) -> BrokerRegistration:
    b = image.brokers.get(broker_id)
    if b is None:
        raise KafkaError(ErrorCode.STALE_BROKER_EPOCH, f"No broker registration found for broker {broker_id}")
    if b.epoch != broker_epoch:
        raise KafkaError(ErrorCode.STALE_BROKER_EPOCH,
                         f"Expected broker epoch {b.epoch}, but got broker epoch {broker_epoch}")
    return b


def heartbeat(image: MetadataImage, state: ClusterState, broker_id: int, broker_epoch: int, now_ms: int,
              current_metadata_offset: int, want_fence: bool, want_shutdown: bool, *,
              committed_offset: int | None = None, next_offset: int | None = None,
              unclean_default: bool = False, offline_partitions: Sequence[tuple[uuid.UUID, int]] = ()
              ) -> tuple[list[Any], HeartbeatResult]:
    """BrokerHeartbeat: renews the session and moves the broker through
    fenced -> unfenced -> controlled shutdown -> shut down (fenced).

    A fenced broker is unfenced once ``current_metadata_offset`` reaches
    ``committed_offset``: by default the offset of its own registration record (its broker
    epoch), as Kafka 4 does, so a busy metadata log cannot keep it fenced forever; pass the
    controller's last committed offset for the stricter rule of early KRaft.
    A shutdown request from an unfenced broker that still leads partitions (or sits in
    ISRs it can leave) starts a controlled shutdown that moves them away; the broker is
    told to shut down once nothing is left to move and every active broker has seen that
    move, and it is then fenced. A stale epoch is KafkaError(STALE_BROKER_EPOCH).
    ``offline_partitions``: the broker's partitions in failed log dirs (KIP-858): they leave
    the ISR and leadership at once (``replication.handle_replicas_offline``)."""
    b = check_broker_epoch(image, broker_id, broker_epoch)
    offline_recs = (replication.handle_replicas_offline(image, broker_id, offline_partitions, unclean_default)
                    if offline_partitions and jbod_supported(image.features) else [])
    if offline_recs:
        image = _advance(image, offline_recs)
    s = state.touch(broker_id, now_ms, current_metadata_offset)
    committed = b.epoch if committed_offset is None else committed_offset
    caught_up = current_metadata_offset >= committed
    cur = _current_state(b)
    nxt = cur
    if cur is _State.FENCED:
        if want_shutdown:
            nxt = _State.SHUTDOWN_NOW
        elif not want_fence and caught_up:
            nxt = _State.UNFENCED
    elif cur is _State.UNFENCED:
        if want_fence:
            nxt = _State.SHUTDOWN_NOW if want_shutdown else _State.FENCED
        elif want_shutdown:
            nxt = (_State.CONTROLLED_SHUTDOWN if replication.has_movable_responsibilities(image, broker_id)
                   else _State.SHUTDOWN_NOW)
    else:  # in controlled shutdown: it never goes back
        if not replication.has_movable_responsibilities(image, broker_id):
            if s.controlled_shutdown_offset == _NO_OFFSET:
                s.controlled_shutdown_offset = image.offset  # e.g. after a controller failover
            lowest = state.lowest_active_offset(image)
            if lowest is None or s.controlled_shutdown_offset <= lowest:
                nxt = _State.SHUTDOWN_NOW

    recs: list[Any] = []
    if nxt is _State.UNFENCED and cur is _State.FENCED:
        recs.append(r.BrokerRegistrationChangeRecord(broker_id, b.epoch, fenced=False,
                                                     in_controlled_shutdown=False if b.in_controlled_shutdown
                                                     else None))
        recs += replication.handle_broker_unfenced(image, broker_id, unclean_default)
    elif nxt is _State.CONTROLLED_SHUTDOWN and cur is _State.UNFENCED:
        s.controlled_shutdown_offset = _next_offset(image, next_offset) + len(offline_recs)
        recs.append(r.BrokerRegistrationChangeRecord(broker_id, b.epoch, in_controlled_shutdown=True))
        recs += replication.handle_controlled_shutdown(image, broker_id, unclean_default)
    elif nxt is _State.CONTROLLED_SHUTDOWN:
        # Still shutting down: move whatever became movable since (usually nothing).
        recs += replication.handle_controlled_shutdown(image, broker_id, unclean_default)
    elif nxt in (_State.FENCED, _State.SHUTDOWN_NOW) and cur is not _State.FENCED:
        recs += fence_broker(image, broker_id, unclean_default)
        s.controlled_shutdown_offset = _NO_OFFSET
    recs = offline_recs + recs
    fenced = nxt in (_State.FENCED, _State.SHUTDOWN_NOW)
    if nxt is _State.SHUTDOWN_NOW:
        state.sessions[broker_id].shut_down = True  # a clean restart may register at once
    return recs, HeartbeatResult(is_caught_up=caught_up, is_fenced=fenced,
                                 should_shut_down=nxt is _State.SHUTDOWN_NOW,
                                 in_controlled_shutdown=nxt is _State.CONTROLLED_SHUTDOWN)


# --- fencing ---------------------------------------------------------------------------------

def fence_broker(image: MetadataImage, broker_id: int, unclean_default: bool = False,
                 max_records: int | None = None) -> list[Any]:
    """The records fencing one registered broker: new leaders and ISRs for the partitions it
    was in, then its registration change (KRaft's order: it never leads while fenced). With
    ``max_records``, at most that many: the registration change only once every partition
    change fits before it (else the first ``max_records`` partition changes)."""
    b = image.brokers[broker_id]
    recs = replication.handle_broker_fenced(image, broker_id, unclean_default,
                                            None if max_records is None else max_records)
    if max_records is None or len(recs) < max_records:
        recs.append(r.BrokerRegistrationChangeRecord(broker_id, b.epoch, fenced=True))
    return recs


# Records one fencing write may hold: a broker of 100,000 partitions is fenced in slices of this
# many partition changes, one write each, so the controller's loop serves heartbeats and other
# writes between them instead of spending seconds on one (Kafka bounds its controller's batches
# likewise: QuorumController's max records per batch).
FENCE_RECORDS_PER_BATCH = 1000


def fence_stale_brokers(image: MetadataImage, state: ClusterState, now_ms: int,
                        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
                        unclean_default: bool = False) -> list[Any]:
    """Fence every unfenced broker whose session expired (no heartbeat for
    ``session_timeout_ms``), with the leadership and ISR changes that implies. Each
    fencing sees the previous ones, so two brokers of one ISR both going away leaves the
    ISR with its last member, not empty. A broker the state has never heard of (a new
    active controller) gets a fresh session instead of being fenced."""
    return fence_stale_brokers_batch(image, state, now_ms, session_timeout_ms, unclean_default)[0]


def fence_stale_brokers_batch(image: MetadataImage, state: ClusterState, now_ms: int,
                              session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS, unclean_default: bool = False,
                              max_records: int | None = None) -> tuple[list[Any], bool]:
    """``fence_stale_brokers`` writing at most ``max_records`` records; returns them and whether
    the fencing is complete. A broker whose partition changes do not fit gets the first of them
    now (KRaft's order: off its partitions first), its registration change once the last are
    written: the caller writes the batch and calls again until complete. Each call works from
    the image, so what a batch did is not done again, and a broker that heartbeats meanwhile is
    not fenced (it rejoins the ISRs it left through AlterPartition, as after a restart)."""
    recs: list[Any] = []
    work = image
    for bid in sorted(image.brokers):
        b = image.brokers[bid]
        if b.fenced:
            continue
        if bid not in state.sessions:
            state.touch(bid, now_ms)
            continue
        if state.has_valid_session(bid, now_ms, session_timeout_ms):
            continue
        room = None if max_records is None else max_records - len(recs)
        if room is not None and room <= 0:
            return recs, False
        step = fence_broker(work, bid, unclean_default, room)
        if not isinstance(step[-1], r.BrokerRegistrationChangeRecord):
            return recs + step, False  # the registration change comes with the last batch
        state.sessions[bid].controlled_shutdown_offset = _NO_OFFSET
        recs += step
        work = _advance(work, step)
    return recs, True
