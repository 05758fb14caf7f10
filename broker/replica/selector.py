"""KIP-392 replica selectors (``replica.selector.class``): which replica a consumer should
fetch from. Pure: the leader passes what it knows of its replicas and gets a broker id back.

Kafka's class names are accepted:
- ``org.apache.kafka.common.replica.LeaderSelector``: always the leader (the default);
- ``org.apache.kafka.common.replica.RackAwareReplicaSelector``: a replica in the client's rack
  (``client.rack`` -> Fetch ``rack_id``), the leader if it is in that rack, else the most
  caught-up one; the leader when the client has no rack or no candidate is in it.
"""

from __future__ import annotations

import dataclasses

LEADER_SELECTOR = "org.apache.kafka.common.replica.LeaderSelector"
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaView:
    broker_id: int
    rack: str | None
    log_end_offset: int
    is_leader: bool = False


class LeaderSelector:
    def select(self, client_rack: str | None, leader: ReplicaView, candidates: list[ReplicaView]) -> int:
        return leader.broker_id


class RackAwareReplicaSelector:
    def select(self, client_rack: str | None, leader: ReplicaView, candidates: list[ReplicaView]) -> int:
        if not client_rack:
            return leader.broker_id
        if leader.rack == client_rack:
            return leader.broker_id
        same = [c for c in candidates if c.rack == client_rack and not c.is_leader]
        if not same:
            return leader.broker_id
        # the most caught-up replica; ties go to the lowest broker id (deterministic)
        return max(same, key=lambda c: (c.log_end_offset, -c.broker_id)).broker_id


_SELECTORS = {
    LEADER_SELECTOR: LeaderSelector,
    "LeaderSelector": LeaderSelector,
    RACK_AWARE_SELECTOR: RackAwareReplicaSelector,
    "RackAwareReplicaSelector": RackAwareReplicaSelector,
}


def make_selector(class_name: str | None):
    """The selector for a ``replica.selector.class`` value; None when unset (leader only).
    Raises ValueError for a class krafty does not know."""
    if class_name is None or not class_name.strip():
        return None
    try:
        return _SELECTORS[class_name.strip()]()
    except KeyError:
        raise ValueError(f"replica.selector.class: unknown selector {class_name!r}; known: "
                         f"{LEADER_SELECTOR}, {RACK_AWARE_SELECTOR}") from None


def candidates_for(fetch_offset: int, isr, follower_end_offsets: dict[int, int], racks: dict[int, str | None],
                   leader: int, leader_end_offset: int) -> tuple[ReplicaView, list[ReplicaView]]:
    """The leader's view and the in-sync replicas that already hold ``fetch_offset``."""
    lv = ReplicaView(leader, racks.get(leader), leader_end_offset, True)
    out = []
    for r in isr:
        if r == leader:
            continue
        leo = follower_end_offsets.get(r, -1)
        if leo >= fetch_offset and r in racks:
            out.append(ReplicaView(r, racks.get(r), leo))
    return lv, out
