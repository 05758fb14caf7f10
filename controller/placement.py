"""Replica placement for new topics and partitions (sans-IO).

Two jobs live here:

* :func:`assign_replicas` chooses the brokers of each new partition, with the algorithm of
  Kafka's ``AdminUtils.assignReplicasToBrokers`` (the one seed ``000_76703637d076966c.txt``
  section 3 describes, worked examples included).
* :func:`validate_manual_assignment` checks a replica assignment a client supplied in
  CreateTopics, with the checks, order and messages of Kafka's KRaft controller
  (``ReplicationControlManager.createTopic`` / ``validateManualPartitionAssignment``).

Which Kafka algorithm, and why
------------------------------
Kafka 4.x runs only in KRaft mode, where the controller places replicas with
``StripedReplicaPlacer``, not with ``AdminUtils``. The two differ:

* Striped groups brokers by rack (a broker without ``broker.rack`` falls into one extra
  "no rack" group, so a mix of racked and unracked brokers is *accepted*), sorts racks
  and brokers, draws random rack and in-rack offsets, then stripes one replica per rack
  round-robin, advancing one rack per partition and reshuffling after every
  ``#unfenced brokers`` partitions. It prefers unfenced brokers, never makes a fenced one
  leader, and continues from the leader of the topic's last partition when partitions
  are added. Its messages differ too ("The target replication factor of 4 cannot be
  reached because only 3 broker(s) are registered.", "Invalid replication factor 0: the
  replication factor must be positive.").
* ``AdminUtils`` (ZooKeeper-era CreateTopics, and still in ``server-common`` for tools)
  uses a random start index and an increasing follower shift over the broker list sorted
  by id (rack-unaware) or over the rack-alternated list (rack-aware); it refuses a mix of
  racked and unracked brokers.

krafty follows ``AdminUtils``: the design makes the seed the requirement, and its worked
examples (the 5-broker table, the 6-broker/3-rack list ``0,3,1,5,4,2`` and partition 6 ->
``[0,4,2]``) are exact outputs that only this algorithm produces. Both algorithms give the
same guarantees that matter to users: no broker twice in a partition, leaders and
replicas spread evenly, and replicas on distinct racks where possible. We keep Kafka's
``AdminUtils`` messages. ``AdminOperationException`` (mixed rack information) has no
wire code in Kafka; we answer it with ``INVALID_REPLICA_ASSIGNMENT``. Fencing is the
caller's business: pass the brokers that may hold replicas (Kafka's ``AdminUtils`` caller
passes the alive brokers). To get ZooKeeper-era ``RackAwareMode.Safe``/``Disabled``,
strip the racks before calling.

Randomness comes from the injected ``rng`` (anything with ``randrange(n)``, such as
``random.Random``): when ``fixed_start_index`` is negative we draw the start index and
then the initial follower shift, each as ``rng.randrange(len(brokers))``, in that order,
as Kafka draws ``nextInt(n)`` twice. With ``fixed_start_index >= 0`` the rng is not used.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from common.errors import ErrorCode, KafkaError

__all__ = [
    "BrokerPlacement",
    "RandomLike",
    "assign_replicas",
    "rack_alternated_broker_list",
    "replica_index",
    "validate_manual_assignment",
]


@dataclass(frozen=True, slots=True)
class BrokerPlacement:
    """A broker that may receive replicas: its id and its ``broker.rack`` (or None)."""

    id: int
    rack: str | None = None


class RandomLike(Protocol):
    def randrange(self, stop: int, /) -> int: ...


def replica_index(first_replica_index: int, second_replica_shift: int, k: int, n_brokers: int) -> int:
    """Index in the broker list of a follower (Kafka's ``AdminUtils.replicaIndex``).

    The follower sits ``1 + (shift + k) mod (n - 1)`` places after the leader, so it is
    never the leader itself and successive ``k`` visit every other broker once per
    ``n - 1`` steps. Only meaningful for ``n_brokers >= 2``.
    """
    shift = 1 + (second_replica_shift + k) % (n_brokers - 1)
    return (first_replica_index + shift) % n_brokers


def rack_alternated_broker_list(broker_racks: Mapping[int, str]) -> list[int]:
    """Brokers interleaved by rack (Kafka's ``getRackAlternatedBrokerList``).

    Racks are taken in sorted name order, the brokers of each rack in ascending id
    order; the list takes the next broker of each rack in turn, skipping racks that have
    run out. ``{0: rack1, 1: rack3, 2: rack3, 3: rack2, 4: rack2, 5: rack1}`` gives
    ``[0, 3, 1, 5, 4, 2]``.
    """
    by_rack: dict[str, list[int]] = {}
    for broker_id, rack in broker_racks.items():
        by_rack.setdefault(rack, []).append(broker_id)
    queues = [sorted(by_rack[rack]) for rack in sorted(by_rack)]
    result: list[int] = []
    depth = 0
    while len(result) < len(broker_racks):
        for queue in queues:
            if depth < len(queue):
                result.append(queue[depth])
        depth += 1
    return result


def _start_and_shift(n_brokers: int, fixed_start_index: int, rng: RandomLike | None) -> tuple[int, int]:
    if fixed_start_index >= 0:
        return fixed_start_index, fixed_start_index
    if rng is None:
        raise ValueError("an rng is required when fixed_start_index is negative")
    start_index = rng.randrange(n_brokers)
    shift = rng.randrange(n_brokers)
    return start_index, shift


def assign_replicas(
    brokers: Sequence[BrokerPlacement],
    n_partitions: int,
    replication_factor: int,
    *,
    rng: RandomLike | None,
    fixed_start_index: int = -1,
    start_partition_id: int = -1,
) -> dict[int, list[int]]:
    """Place ``n_partitions`` partitions of ``replication_factor`` replicas on ``brokers``.

    Returns ``{partition_id: [leader, follower, ...]}`` for partition ids
    ``max(0, start_partition_id) ..`` in ascending order. Rack-unaware when no broker has
    a rack, rack-aware when all do; a mix is refused, as Kafka's ``AdminUtils`` does.
    The broker order given does not matter: the rack-unaware list is sorted by id (Kafka's
    callers sort with ``sortBy(_.id)``) and the rack-aware list is built from sorted racks.

    ``start_partition_id`` is for adding partitions to an existing topic; the follower
    shift then only grows at partition ids that are multiples of the broker count from
    that id on, exactly as in Kafka.

    Raises ``KafkaError`` with INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR or
    INVALID_REPLICA_ASSIGNMENT (mixed rack information), with Kafka's messages.
    """
    if n_partitions <= 0:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}.",
        )
    ids = [b.id for b in brokers]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate broker ids in placement input: {sorted(ids)}")
    if all(b.rack is None for b in brokers):
        return _assign_rack_unaware(
            n_partitions, replication_factor, sorted(ids), fixed_start_index, start_partition_id, rng
        )
    if any(b.rack is None for b in brokers):
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "Not all brokers have rack information for replica rack aware assignment.",
        )
    broker_racks = {b.id: b.rack for b in brokers if b.rack is not None}
    return _assign_rack_aware(
        n_partitions, replication_factor, broker_racks, fixed_start_index, start_partition_id, rng
    )


def _assign_rack_unaware(
    n_partitions: int,
    replication_factor: int,
    broker_list: list[int],
    fixed_start_index: int,
    start_partition_id: int,
    rng: RandomLike | None,
) -> dict[int, list[int]]:
    n = len(broker_list)
    start_index, shift = _start_and_shift(n, fixed_start_index, rng)
    result: dict[int, list[int]] = {}
    first_pid = max(0, start_partition_id)
    for pid in range(first_pid, first_pid + n_partitions):
        if pid > 0 and pid % n == 0:
            shift += 1
        first = (pid + start_index) % n
        replicas = [broker_list[first]]
        replicas.extend(broker_list[replica_index(first, shift, j, n)] for j in range(replication_factor - 1))
        result[pid] = replicas
    return result


def _assign_rack_aware(
    n_partitions: int,
    replication_factor: int,
    broker_racks: dict[int, str],
    fixed_start_index: int,
    start_partition_id: int,
    rng: RandomLike | None,
) -> dict[int, list[int]]:
    n_racks = len(set(broker_racks.values()))
    arranged = rack_alternated_broker_list(broker_racks)
    n = len(arranged)
    start_index, shift = _start_and_shift(n, fixed_start_index, rng)
    result: dict[int, list[int]] = {}
    first_pid = max(0, start_partition_id)
    for pid in range(first_pid, first_pid + n_partitions):
        if pid > 0 and pid % n == 0:
            shift += 1
        first = (pid + start_index) % n
        leader = arranged[first]
        replicas = [leader]
        racks_used = {broker_racks[leader]}
        brokers_used = {leader}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                candidate = arranged[replica_index(first, shift * n_racks, k, n)]
                k += 1
                rack = broker_racks[candidate]
                # Take the candidate only if its rack is new (or every rack already has a
                # replica) and it is a new broker (or every broker already has one).
                rack_ok = rack not in racks_used or len(racks_used) == n_racks
                broker_ok = candidate not in brokers_used or len(brokers_used) == n
                if rack_ok and broker_ok:
                    replicas.append(candidate)
                    racks_used.add(rack)
                    brokers_used.add(candidate)
                    break
        result[pid] = replicas
    return result


def validate_manual_assignment(
    assignment: Mapping[int, Sequence[int]] | Iterable[tuple[int, Sequence[int]]],
    live_broker_ids: Iterable[int],
    *,
    registered_broker_ids: Iterable[int] | None = None,
) -> None:
    """Check a client-supplied assignment as Kafka's KRaft CreateTopics does.

    ``assignment`` is ``{partition: [broker, ...]}`` or, to keep the request's order and
    catch a partition given twice, an iterable of ``(partition, brokers)`` pairs. Brokers
    must be registered (``registered_broker_ids``, defaulting to ``live_broker_ids``);
    each partition needs at least one live broker. Checks, in Kafka's order, for each
    partition in turn: not assigned twice; replica list not empty; every broker
    registered and named once (in ascending id order, so the message names the smallest
    offender); same replica count as the partitions before it; some replica live. Then:
    partition ids are exactly ``0..n-1``. An empty assignment passes.

    Raises ``KafkaError(INVALID_REPLICA_ASSIGNMENT, <Kafka's message>)``.
    """
    pairs = list(assignment.items()) if isinstance(assignment, Mapping) else list(assignment)
    live = set(live_broker_ids)
    registered = live if registered_broker_ids is None else set(registered_broker_ids)

    def refuse(message: str) -> KafkaError:
        return KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, message)

    seen: set[int] = set()
    replication_factor: int | None = None
    for partition, replicas in pairs:
        if partition in seen:
            raise refuse(f"Found multiple manual partition assignments for partition {partition}")
        if len(replicas) == 0:
            raise refuse("The manual partition assignment includes an empty replica list.")
        previous: int | None = None
        for broker_id in sorted(replicas):
            if broker_id not in registered:
                raise refuse(
                    f"The manual partition assignment includes broker {broker_id}, "
                    "but no such broker is registered."
                )
            if broker_id == previous:
                raise refuse(
                    f"The manual partition assignment includes the broker {broker_id} more than once."
                )
            previous = broker_id
        if replication_factor is not None and len(replicas) != replication_factor:
            raise refuse(
                f"The manual partition assignment includes a partition with {len(replicas)} replica(s), "
                f"but this is not consistent with previous partitions, which have "
                f"{replication_factor} replica(s)."
            )
        replication_factor = len(replicas)
        if not any(broker_id in live for broker_id in replicas):
            raise refuse(
                f"All brokers specified in the manual partition assignment for partition {partition} "
                "are fenced or in controlled shutdown."
            )
        seen.add(partition)
    if seen != set(range(len(seen))):
        raise refuse("partitions should be a consecutive 0-based integer sequence")
