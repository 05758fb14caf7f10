"""Partition leadership and ISR, as pure functions over a ``MetadataImage`` (KRaft's
ReplicationControlManager and the election rules of its PartitionChangeBuilder).

Every function returns the ``PartitionChangeRecord``s to append and never touches the
image. The rules (Kafka 3.x/4.0 without eligible leader replicas, KIP-966):

- a leader is *acceptable* when it is registered, unfenced and not in controlled shutdown;
- election keeps the current leader while it stays in the ISR and acceptable, else takes
  the first acceptable ISR member in replica order; an *unclean* election (a live replica
  outside the ISR, which becomes the sole ISR member) happens only when the topic's
  ``unclean.leader.election.enable`` (or the broker default) allows it; otherwise the
  partition is left without a leader (``NO_LEADER``);
- an ISR is never emptied: a broker that is the last ISR member stays in it, so the
  partition keeps a record of who has the data and that broker becomes leader again when
  it comes back;
- the leader epoch moves only with the leader (``PartitionRegistration.merge`` bumps it
  on replay); every change bumps the partition epoch.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from common.errors import ErrorCode, KafkaError
from controller.reassignment import partition_change
from metadata import records as r
from metadata.controller_api import PartitionResult as ElectionResult
from metadata.image import MetadataImage, PartitionRegistration, TopicImage

NO_LEADER = r.NO_LEADER
UNCLEAN_KEY = "unclean.leader.election.enable"
MAX_ELECTIONS_PER_REBALANCE = 1000  # KRaft's cap on preferred elections in one operation

IsAcceptable = Callable[[int], bool]


# --- acceptability and config -------------------------------------------------------------

def acceptable_leaders(image: MetadataImage, *, include: int | None = None,
                       exclude: int | None = None) -> IsAcceptable:
    """``broker -> bool``: may this broker lead (registered, unfenced, not shutting down)?

    ``include``/``exclude`` override one broker, for changes computed before the record
    that fences or unfences it is applied."""
    def ok(bid: int) -> bool:
        if bid == exclude:
            return False
        if bid == include:
            return True
        b = image.brokers.get(bid)
        return b is not None and not b.fenced and not b.in_controlled_shutdown
    return ok


def unclean_enabled(image: MetadataImage, topic: str, default: bool) -> bool:
    """The topic's ``unclean.leader.election.enable``, else the broker-level default."""
    v = image.topic_config(topic).get(UNCLEAN_KEY)
    if v is None:
        return default
    return v.strip().lower() == "true"


# --- election ------------------------------------------------------------------------

def elect_leader(reg: PartitionRegistration, is_acceptable: IsAcceptable, unclean_allowed: bool
                 ) -> tuple[int, tuple[int, ...]]:
    """The leader and ISR ``reg`` should have, given who may lead now.

    ``reg.isr`` is taken as the target ISR (callers remove brokers from it first). A replica
    in a failed log dir (``reg.offline``, KIP-858) never leads."""
    isr = reg.isr
    if reg.offline:
        is_acceptable = _online(reg, is_acceptable)
    if reg.leader in isr and is_acceptable(reg.leader):
        return reg.leader, isr  # no needless leadership churn
    for b in reg.replicas:
        if b in isr and is_acceptable(b):
            return b, isr
    if unclean_allowed:
        for b in reg.replicas:
            if is_acceptable(b):
                # The new leader's log is all there is now: it is the only in-sync replica.
                return b, (b,)
    return NO_LEADER, isr


def _online(reg: PartitionRegistration, is_acceptable: IsAcceptable) -> IsAcceptable:
    """``is_acceptable`` restricted to the replicas of ``reg`` whose log dir is online."""
    return lambda b: b not in reg.offline and is_acceptable(b)


def _without(isr: tuple[int, ...], broker: int) -> tuple[int, ...]:
    """``isr`` minus ``broker``, except that the last member stays (an ISR is never empty)."""
    rest = tuple(b for b in isr if b != broker)
    return rest if rest else isr


def _change_record(topic_id: uuid.UUID, pid: int, reg: PartitionRegistration, leader: int,
                   isr: tuple[int, ...]) -> r.PartitionChangeRecord | None:
    if leader == reg.leader and isr == reg.isr:
        return None
    return r.PartitionChangeRecord(topic_id, pid,
                                   isr=isr if isr != reg.isr else None,
                                   leader=leader if leader != reg.leader else None)


def _partitions(image: MetadataImage) -> Iterator[tuple[TopicImage, int, PartitionRegistration]]:
    # Deterministic order (topic name, partition) so the same image gives the same records.
    for name in sorted(image.topics_by_name):
        t = image.topics_by_name[name]
        for pid in sorted(t.partitions):
            yield t, pid, t.partitions[pid]


def _reelect(image: MetadataImage, parts: Iterable[tuple[TopicImage, int, PartitionRegistration]],
             remove: int | None, is_acceptable: IsAcceptable, unclean_default: bool,
             limit: int | None = None) -> list[Any]:
    recs: list[Any] = []
    for t, pid, reg in parts:
        target = _without(reg.isr, remove) if remove is not None else reg.isr
        leader, isr = elect_leader(dataclasses.replace(reg, isr=target), is_acceptable,
                                   unclean_enabled(image, t.name, unclean_default))
        rec = _change_record(t.topic_id, pid, reg, leader, isr)
        if rec is not None:
            recs.append(rec)
            if limit is not None and len(recs) >= limit:
                break
    return recs


# --- broker state changes ------------------------------------------------------------------

def handle_broker_fenced(image: MetadataImage, broker_id: int, unclean_default: bool = False,
                         limit: int | None = None) -> list[Any]:
    """Partition changes for fencing ``broker_id``: out of every ISR (but the last member
    stays), and a new leader wherever it led. The caller writes the registration change.
    ``limit``: the first that many changes only (a fence written in batches)."""
    parts = ((t, pid, p) for t, pid, p in _partitions(image) if broker_id in p.isr or p.leader == broker_id)
    return _reelect(image, parts, broker_id, acceptable_leaders(image, exclude=broker_id), unclean_default, limit)


def handle_replicas_offline(image: MetadataImage, broker_id: int, partitions: Iterable[tuple[uuid.UUID, int]],
                            unclean_default: bool = False) -> list[Any]:
    """Partition changes for replicas of ``broker_id`` in a log dir that failed (KIP-858, Kafka's
    ReplicationControlManager.handleDirectoriesOffline): each is marked offline, leaves the ISR
    (but the last member stays, as for fencing) and gives up leadership; the broker goes on
    serving its other partitions. Partitions already marked, unknown or not assigned to it are
    skipped, so a heartbeat may repeat the whole list."""
    recs: list[Any] = []
    for tid, pid in partitions:
        t = image.topics_by_id.get(tid)
        reg = t.partitions.get(pid) if t is not None else None
        if reg is None or broker_id not in reg.replicas or broker_id in reg.offline:
            continue
        marked = dataclasses.replace(reg, isr=_without(reg.isr, broker_id), offline=reg.offline + (broker_id,))
        leader, isr = elect_leader(marked, acceptable_leaders(image), unclean_enabled(image, t.name, unclean_default))
        recs.append(r.PartitionChangeRecord(tid, pid, isr=isr if isr != reg.isr else None,
                                            leader=leader if leader != reg.leader else None,
                                            offline_replicas=marked.offline))
    return recs


def handle_broker_restarted(image: MetadataImage, broker_id: int) -> list[Any]:
    """A new incarnation of ``broker_id`` registers: its replicas marked offline are online again
    (a dir still failing is reported by its next heartbeat; Kafka: the registration's log dirs)."""
    return [r.PartitionChangeRecord(t.topic_id, pid, offline_replicas=tuple(b for b in p.offline if b != broker_id))
            for t, pid, p in _partitions(image) if broker_id in p.offline]


def handle_broker_unfenced(image: MetadataImage, broker_id: int, unclean_default: bool = False) -> list[Any]:
    """Partition changes for unfencing ``broker_id``: a leader for leaderless partitions it
    can lead (from the ISR, or unclean where enabled). It rejoins other ISRs through the
    leader's AlterPartition once it has caught up."""
    parts = [(t, pid, p) for t, pid, p in _partitions(image) if p.leader == NO_LEADER and broker_id in p.replicas]
    return _reelect(image, parts, None, acceptable_leaders(image, include=broker_id), unclean_default)


def handle_controlled_shutdown(image: MetadataImage, broker_id: int, unclean_default: bool = False
                               ) -> list[Any]:
    """Partition changes for a controlled shutdown of ``broker_id``: leadership moves to
    another ISR member and the broker leaves every ISR (as KRaft does), so acks=all
    producers stop waiting for it. Where it is the last ISR member it stays there and the
    partition goes leaderless until it returns."""
    parts = [(t, pid, p) for t, pid, p in _partitions(image) if broker_id in p.isr or p.leader == broker_id]
    return _reelect(image, parts, broker_id, acceptable_leaders(image, exclude=broker_id), unclean_default)


def has_movable_responsibilities(image: MetadataImage, broker_id: int) -> bool:
    """Does ``broker_id`` still lead a partition, or sit in an ISR it could leave? False
    means a controlled shutdown has moved everything it can."""
    for _t, _pid, p in _partitions(image):
        if p.leader == broker_id:
            return True
        if broker_id in p.isr and len(p.isr) > 1:
            return True
    return False


def partitions_led_by(image: MetadataImage, broker_id: int) -> list[tuple[str, int]]:
    return [(t.name, pid) for t, pid, p in _partitions(image) if p.leader == broker_id]


# --- AlterPartition -------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, slots=True)
class AlterPartitionResult:
    """One partition of an AlterPartition response: the error, and on success (or a
    no-op) the partition state the leader must adopt."""

    error: ErrorCode
    leader: int = NO_LEADER
    isr: tuple[int, ...] = ()
    leader_epoch: int = -1
    partition_epoch: int = -1
    message: str | None = None


def _check_broker_epoch(image: MetadataImage, broker_id: int, broker_epoch: int) -> None:
    b = image.brokers.get(broker_id)
    if b is None:
        raise KafkaError(ErrorCode.STALE_BROKER_EPOCH, f"No broker registration found for broker {broker_id}")
    if broker_epoch != -1 and b.epoch != broker_epoch:
        raise KafkaError(ErrorCode.STALE_BROKER_EPOCH,
                         f"Expected broker epoch {b.epoch}, but got broker epoch {broker_epoch}")


def alter_partition(image: MetadataImage, broker_id: int, broker_epoch: int, topic_id: uuid.UUID, partition: int,
                    leader_epoch: int, partition_epoch: int, new_isr: Sequence[int], *,
                    isr_broker_epochs: Mapping[int, int] | None = None) -> tuple[list[Any], AlterPartitionResult]:
    """A partition leader asks to change its ISR. Raises KafkaError(STALE_BROKER_EPOCH)
    for the whole request; everything else is the partition's error code.

    A request from the future (epochs above the controller's) gets NOT_CONTROLLER, as in
    KRaft: this controller is behind, so the leader should look for the active one.
    ``isr_broker_epochs`` (AlterPartition v3+, KIP-903) gives the broker epoch the leader
    saw for each ISR member; a newcomer whose epoch is not current (it restarted, maybe
    with an empty disk) is INELIGIBLE_REPLICA. -1 or absent skips the check."""
    _check_broker_epoch(image, broker_id, broker_epoch)
    t = image.topics_by_id.get(topic_id)
    if t is None:
        return [], AlterPartitionResult(ErrorCode.UNKNOWN_TOPIC_ID)
    reg = t.partitions.get(partition)
    if reg is None:
        return [], AlterPartitionResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)

    def fail(code: ErrorCode, msg: str) -> tuple[list[Any], AlterPartitionResult]:
        return [], AlterPartitionResult(code, message=msg)

    if leader_epoch > reg.leader_epoch:
        return fail(ErrorCode.NOT_CONTROLLER, f"leader epoch {leader_epoch} is newer than {reg.leader_epoch}")
    if partition_epoch > reg.partition_epoch:
        return fail(ErrorCode.NOT_CONTROLLER,
                    f"partition epoch {partition_epoch} is newer than {reg.partition_epoch}")
    if leader_epoch < reg.leader_epoch:
        return fail(ErrorCode.FENCED_LEADER_EPOCH, f"leader epoch {leader_epoch} is older than {reg.leader_epoch}")
    if broker_id != reg.leader:
        # (Kafka answers INVALID_REQUEST here; NOT_LEADER_OR_FOLLOWER tells our broker why.)
        return fail(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {broker_id} is not the leader ({reg.leader})")
    if partition_epoch < reg.partition_epoch:
        return fail(ErrorCode.INVALID_UPDATE_VERSION,
                    f"partition epoch {partition_epoch} is older than {reg.partition_epoch}")
    isr = tuple(new_isr)
    if len(set(isr)) != len(isr):
        return fail(ErrorCode.INVALID_REQUEST, f"the new ISR {list(isr)} has duplicates")
    if reg.leader not in isr:
        return fail(ErrorCode.INVALID_REQUEST, f"the new ISR {list(isr)} does not include the leader {reg.leader}")
    strangers = [b for b in isr if b not in reg.replicas]
    if strangers:
        return fail(ErrorCode.INVALID_REQUEST, f"brokers {strangers} in the new ISR are not replicas")
    # Only newcomers are checked: shrinking must always be allowed, and a fenced member
    # cannot survive in the ISR anyway (fencing removes it and bumps the partition epoch).
    eligible = acceptable_leaders(image)
    epochs = isr_broker_epochs or {}
    ineligible = [b for b in isr if b not in reg.isr and (
        not eligible(b) or b in reg.offline or epochs.get(b, -1) not in (-1, image.brokers[b].epoch))]
    if ineligible:
        return fail(ErrorCode.INELIGIBLE_REPLICA,
                    f"brokers {ineligible} are fenced, shutting down, unregistered, restarted (broker epoch "
                    "mismatch) or have this replica in an offline log dir and cannot join the ISR")
    if set(isr) == set(reg.isr):
        return [], AlterPartitionResult(ErrorCode.NONE, reg.leader, reg.isr, reg.leader_epoch, reg.partition_epoch)
    # the change that brings the last target replica of a reassignment in sync also completes it
    rec = partition_change(topic_id, partition, reg, leader=reg.leader, isr=isr, is_acceptable=eligible)
    after = reg.merge(rec)
    return [rec], AlterPartitionResult(ErrorCode.NONE, after.leader, after.isr, after.leader_epoch,
                                       after.partition_epoch)


# --- preferred leaders -----------------------------------------------------------------------

def preferred_leader_elections(image: MetadataImage, is_acceptable: IsAcceptable | None = None,
                               max_elections: int = MAX_ELECTIONS_PER_REBALANCE) -> list[Any]:
    """``auto.leader.rebalance.enable``: move leadership back to the preferred replica
    (``replicas[0]``) wherever it is in the ISR and acceptable.

    Like KRaft (which does not use ``leader.imbalance.per.broker.percentage``), every
    imbalanced partition is rebalanced, at most ``max_elections`` per call."""
    ok = is_acceptable or acceptable_leaders(image)
    recs: list[Any] = []
    for t, pid, p in _partitions(image):
        if len(recs) >= max_elections:
            break
        preferred = p.replicas[0] if p.replicas else NO_LEADER
        if p.leader != preferred and preferred in p.isr and ok(preferred) and preferred not in p.offline:
            recs.append(r.PartitionChangeRecord(t.topic_id, pid, leader=preferred))
    return recs


def imbalanced_partitions(image: MetadataImage) -> list[tuple[str, int]]:
    """Partitions not led by their preferred replica (whether or not it can lead now)."""
    return [(t.name, pid) for t, pid, p in _partitions(image) if p.replicas and p.leader != p.replicas[0]]


# --- ElectLeaders ----------------------------------------------------------------------------

PREFERRED_ELECTION, UNCLEAN_ELECTION = 0, 1


def elect_leader_on_request(image: MetadataImage, topic: str, pid: int, election_type: int,
                            is_acceptable: IsAcceptable) -> tuple[r.PartitionChangeRecord | None, ElectionResult]:
    """Kafka's ReplicationControlManager.electLeader (ElectLeaders for one partition).

    PREFERRED: the first replica if it is in the ISR and may lead; else the current leader
    stays if it may lead, else the next ISR member that may (an offline partition gets a leader).
    UNCLEAN: only for a partition without a leader: an ISR member that may lead, else any live
    replica, which becomes the only ISR member (its log is all there is now)."""
    t = image.topics_by_name.get(topic)
    if t is None:
        return None, ElectionResult(topic, pid, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {topic}")
    reg = t.partitions.get(pid)
    if reg is None:
        return None, ElectionResult(topic, pid, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                    f"No such partition as {topic}-{pid}")
    preferred = reg.replicas[0] if reg.replicas else NO_LEADER
    if (election_type == PREFERRED_ELECTION and reg.leader == preferred) or (
            election_type == UNCLEAN_ELECTION and reg.leader != NO_LEADER):
        return None, ElectionResult(topic, pid, ErrorCode.ELECTION_NOT_NEEDED)

    if reg.offline:
        is_acceptable = _online(reg, is_acceptable)

    def valid(b: int) -> bool:
        return b in reg.isr and is_acceptable(b)

    isr = reg.isr
    if election_type == PREFERRED_ELECTION:
        leader = next((b for b in (preferred, reg.leader, *reg.replicas[1:]) if b != NO_LEADER and valid(b)),
                      NO_LEADER)
    else:
        leader = next((b for b in reg.replicas if valid(b)), NO_LEADER)
        if leader == NO_LEADER:
            leader = next((b for b in reg.replicas if is_acceptable(b)), NO_LEADER)
            if leader != NO_LEADER:
                isr = (leader,)
    rec = _change_record(t.topic_id, pid, reg, leader, isr) if leader != NO_LEADER else None
    if rec is None:
        code = (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE if election_type == PREFERRED_ELECTION
                else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)
        return None, ElectionResult(topic, pid, code)
    return rec, ElectionResult(topic, pid, ErrorCode.NONE)


def elect_leaders(image: MetadataImage, election_type: int,
                  topic_partitions: Sequence[tuple[str, Sequence[int]]] | None) -> tuple[list[Any], list[ElectionResult]]:
    """ElectLeaders: the records and one result per partition asked for. ``None`` asks for
    every partition, and then (as Kafka) partitions that need no election are left out."""
    if election_type not in (PREFERRED_ELECTION, UNCLEAN_ELECTION):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown election type {election_type}")
    ok = acceptable_leaders(image)
    records: list[Any] = []
    results: list[ElectionResult] = []
    if topic_partitions is None:
        asked = [(t.name, pid) for t, pid, _ in _partitions(image)]
    else:
        asked = list(dict.fromkeys((topic, pid) for topic, pids in topic_partitions for pid in pids))
    for topic, pid in asked:
        rec, res = elect_leader_on_request(image, topic, pid, election_type, ok)
        if rec is not None:
            records.append(rec)
        if topic_partitions is None and res.error == ErrorCode.ELECTION_NOT_NEEDED:
            continue
        results.append(res)
    return records, results
