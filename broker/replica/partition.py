"""Per-partition replication state, as pure logic: leader epoch, partition epoch, ISR and
the high watermark (minimum log end offset over the ISR, never decreasing).

The replication issue extends this with follower progress and ISR changes; today a broker
knows its own log end offset and what followers have reported."""

from __future__ import annotations

import dataclasses
import uuid


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
    isr: tuple[int, ...] = ()
    high_watermark: int = 0
    follower_end_offsets: dict[int, int] = dataclasses.field(default_factory=dict)

    @property
    def is_leader(self) -> bool:
        return self.leader == self.local_broker

    def become(self, leader: int, leader_epoch: int, partition_epoch: int, replicas, isr) -> bool:
        """Applies a registration from the metadata image; returns True if leadership changed."""
        changed = leader != self.leader or leader_epoch != self.leader_epoch
        self.leader, self.leader_epoch, self.partition_epoch = leader, leader_epoch, partition_epoch
        self.replicas, self.isr = tuple(replicas), tuple(isr)
        if changed:
            self.follower_end_offsets = {}
        return changed

    def maybe_advance_hw(self, local_end_offset: int) -> bool:
        """HW = min LEO over the ISR; never goes backwards. Returns True if it moved."""
        if not self.is_leader:
            return False
        candidate = local_end_offset
        for r in self.isr:
            if r != self.local_broker:
                candidate = min(candidate, self.follower_end_offsets.get(r, 0))
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False

    def check_leader_epoch(self, requested: int) -> int | None:
        """KIP-320: a request's current leader epoch vs ours. Returns an error-code name or None."""
        if requested < 0 or requested == self.leader_epoch:
            return None
        return "FENCED_LEADER_EPOCH" if requested < self.leader_epoch else "UNKNOWN_LEADER_EPOCH"
