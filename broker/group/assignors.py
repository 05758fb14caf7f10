"""The server-side assignors of consumer groups (KIP-848, ``group.consumer.assignors``): ``uniform``
(Kafka's UniformAssignor: balanced and sticky) and ``range`` (Kafka's server-side RangeAssignor:
co-partitioned ranges per topic, sticky within each member's quota). Pure functions of the
members' subscriptions (topic ids), the topics' partition counts and the current target
assignment; deterministic (members are taken in member-id order).

``assign(name, subscriptions, partitions, current)``:
    subscriptions  member id -> topic ids it subscribes to
    partitions     topic id -> number of partitions (topics that exist)
    current        member id -> topic id -> partitions (the previous target assignment)
returns member id -> topic id -> frozenset of partitions, every member present (possibly empty),
each partition of a subscribed topic assigned to exactly one member subscribed to it.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Set

UNIFORM = "uniform"
RANGE = "range"
ASSIGNORS = (UNIFORM, RANGE)

Subscriptions = Mapping[str, Set[uuid.UUID]]
TargetAssignment = dict[str, dict[uuid.UUID, frozenset[int]]]


def assign(name: str, subscriptions: Subscriptions, partitions: Mapping[uuid.UUID, int],
           current: Mapping[str, Mapping[uuid.UUID, Set[int]]]) -> TargetAssignment:
    if name == RANGE:
        return _range(subscriptions, partitions, current)
    if name == UNIFORM:
        return _uniform(subscriptions, partitions, current)
    raise ValueError(f"unknown assignor {name}")


def _freeze(owned: Mapping[str, Mapping[uuid.UUID, set[int]]], members) -> TargetAssignment:
    return {m: {t: frozenset(ps) for t, ps in owned.get(m, {}).items() if ps} for m in members}


def _uniform(subscriptions: Subscriptions, partitions: Mapping[uuid.UUID, int],
             current: Mapping[str, Mapping[uuid.UUID, Set[int]]]) -> TargetAssignment:
    """Keep what each member had (if it still subscribes to the topic), give every unassigned
    partition to the least loaded member subscribed to its topic, then move partitions from
    the most to the least loaded eligible member until no move makes the loads closer: for
    members with the same subscriptions, counts differ by at most one and only the partitions
    that must move do."""
    members = sorted(subscriptions)
    owner: dict[tuple[uuid.UUID, int], str] = {}
    load = {m: 0 for m in members}
    for m in members:
        for t, ps in current.get(m, {}).items():
            if t not in subscriptions[m] or t not in partitions:
                continue
            for p in sorted(ps):
                if p < partitions[t] and (t, p) not in owner:
                    owner[(t, p)] = m
                    load[m] += 1
    eligible: dict[uuid.UUID, list[str]] = {t: [m for m in members if t in subscriptions[m]] for t in partitions}
    for t in sorted(partitions, key=lambda x: x.bytes):
        for p in range(partitions[t]):
            if (t, p) in owner or not eligible[t]:
                continue
            m = min(eligible[t], key=lambda x: (load[x], x))
            owner[(t, p)] = m
            load[m] += 1
    # rebalance: a partition moves from a member to an eligible one with at least 2 fewer
    by_member: dict[str, list[tuple[uuid.UUID, int]]] = {m: [] for m in members}
    for tp, m in sorted(owner.items(), key=lambda kv: (kv[0][0].bytes, kv[0][1])):
        by_member[m].append(tp)
    moved = True
    while moved:
        moved = False
        for src in sorted(members, key=lambda x: (-load[x], x)):
            for tp in reversed(by_member[src]):
                dst = min(eligible[tp[0]], key=lambda x: (load[x], x))
                if load[dst] + 1 < load[src]:
                    by_member[src].remove(tp)
                    by_member[dst].append(tp)
                    load[src] -= 1
                    load[dst] += 1
                    moved = True
                    break
            if moved:
                break
    owned: dict[str, dict[uuid.UUID, set[int]]] = {}
    for m, tps in by_member.items():
        for t, p in tps:
            owned.setdefault(m, {}).setdefault(t, set()).add(p)
    return _freeze(owned, members)


def _range(subscriptions: Subscriptions, partitions: Mapping[uuid.UUID, int],
           current: Mapping[str, Mapping[uuid.UUID, Set[int]]]) -> TargetAssignment:
    """Per topic, its subscribers in member-id order get ranges: the first ``n % k`` members
    ``n // k + 1`` partitions, the others ``n // k``. A member keeps the partitions it had, up
    to its quota; the rest are handed out in order (Kafka's server-side RangeAssignor)."""
    members = sorted(subscriptions)
    owned: dict[str, dict[uuid.UUID, set[int]]] = {}
    for t in sorted(partitions, key=lambda x: x.bytes):
        subs = [m for m in members if t in subscriptions[m]]
        if not subs:
            continue
        n = partitions[t]
        base, extra = divmod(n, len(subs))
        quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(subs)}
        taken: set[int] = set()
        got: dict[str, set[int]] = {m: set() for m in subs}
        for m in subs:
            for p in sorted(current.get(m, {}).get(t, ())):
                if p < n and p not in taken and len(got[m]) < quota[m]:
                    got[m].add(p)
                    taken.add(p)
        free = iter(p for p in range(n) if p not in taken)
        for m in subs:
            while len(got[m]) < quota[m]:
                got[m].add(next(free))
        for m, ps in got.items():
            if ps:
                owned.setdefault(m, {})[t] = ps
    return _freeze(owned, members)
