"""The controller model for one partition: broker registrations and sessions, leader
election from the ISR, and AlterPartition with partition epochs (Kafka's
ClusterControlManager + ReplicationControlManager, reduced to what replication needs).

Its state is "committed" the moment it changes (a one-node metadata quorum): a failover
loses only the in-memory broker sessions, which the new controller restarts from now.
"""

from __future__ import annotations

import dataclasses

from common.errors import ErrorCode
from metadata.image import PartitionRegistration


@dataclasses.dataclass(slots=True)
class BrokerSession:
    epoch: int
    incarnation: int = 0
    fenced: bool = True
    last_heartbeat_ms: int = 0


class ControllerModel:
    def __init__(self, replicas: tuple[int, ...], session_timeout_ms: int, *,
                 unclean_shutdown_detection: bool = True, check_broker_epochs: bool = True):
        self.reg = PartitionRegistration(replicas=replicas, isr=replicas, leader=replicas[0], leader_epoch=0,
                                         partition_epoch=0)
        self.brokers: dict[int, BrokerSession] = {}
        self.session_timeout_ms = session_timeout_ms
        self.next_broker_epoch = 100
        self.unclean_shutdown_detection = unclean_shutdown_detection  # KIP-966 part 1 (Kafka 3.7+)
        self.check_broker_epochs = check_broker_epochs  # KIP-903
        self.history: list[PartitionRegistration] = [self.reg]

    # --- registration changes -------------------------------------------------------------
    def _set(self, *, isr: tuple[int, ...] | None = None, leader: int | None = None) -> None:
        r = self.reg
        new_isr = r.isr if isr is None else isr
        new_leader = r.leader if leader is None else leader
        if new_isr == r.isr and new_leader == r.leader:
            return
        self.reg = PartitionRegistration(
            replicas=r.replicas, isr=new_isr, leader=new_leader,
            leader_epoch=r.leader_epoch + 1 if new_leader != r.leader else r.leader_epoch,
            partition_epoch=r.partition_epoch + 1)
        self.history.append(self.reg)

    def _usable(self, b: int) -> bool:
        s = self.brokers.get(b)
        return s is not None and not s.fenced

    def _remove_and_elect(self, broker: int) -> None:
        """Kafka's handleBrokerFenced / handleBrokerUncleanShutdown: out of the ISR (never
        emptying it) and, if it led, a new leader from the ISR or none."""
        r = self.reg
        isr = tuple(x for x in r.isr if x != broker) or r.isr
        leader = r.leader
        if leader == broker or leader not in isr:
            leader = self._pick_leader(isr, exclude=broker)
        self._set(isr=isr, leader=leader)

    def _pick_leader(self, isr: tuple[int, ...], exclude: int = -1) -> int:
        for b in self.reg.replicas:  # preferred order
            if b in isr and b != exclude and self._usable(b):
                return b
        return -1

    def _maybe_elect(self) -> None:
        if self.reg.leader == -1:
            leader = self._pick_leader(self.reg.isr)
            if leader != -1:
                self._set(leader=leader)

    def eligible_broker_epochs(self) -> dict[int, int]:
        """What a broker's metadata image says about who may join an ISR."""
        return {b: s.epoch for b, s in self.brokers.items() if not s.fenced}

    # --- RPCs ---------------------------------------------------------------------------
    def register(self, broker: int, incarnation: int, now_ms: int) -> int:
        """A (re)started broker registers; returns its new broker epoch. It starts fenced.
        A retried registration of the same incarnation gets the same epoch back."""
        old = self.brokers.get(broker)
        if old is not None and old.incarnation == incarnation:
            return old.epoch
        had = old is not None
        self.next_broker_epoch += 1
        self.brokers[broker] = BrokerSession(self.next_broker_epoch, incarnation, fenced=True,
                                             last_heartbeat_ms=now_ms)
        if had and self.unclean_shutdown_detection:
            self._remove_and_elect(broker)
        elif had and self.reg.leader == broker:
            self._remove_and_elect(broker)  # fenced leaders always lose leadership
        return self.next_broker_epoch

    def heartbeat(self, broker: int, broker_epoch: int, now_ms: int) -> ErrorCode:
        s = self.brokers.get(broker)
        if s is None or s.epoch != broker_epoch:
            return ErrorCode.STALE_BROKER_EPOCH
        s.last_heartbeat_ms = now_ms
        if s.fenced:
            s.fenced = False
            self._maybe_elect()
        return ErrorCode.NONE

    def check_sessions(self, now_ms: int) -> None:
        for b, s in sorted(self.brokers.items()):
            if not s.fenced and now_ms - s.last_heartbeat_ms > self.session_timeout_ms:
                s.fenced = True
                self._remove_and_elect(b)

    def on_failover(self, now_ms: int) -> None:
        """A new active controller: committed state survives, sessions restart from now."""
        for s in self.brokers.values():
            s.last_heartbeat_ms = now_ms

    def alter_partition(self, req) -> tuple[ErrorCode, PartitionRegistration | None]:
        r = self.reg
        if req.leader_id != r.leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, None
        if req.leader_epoch != r.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH, None
        if req.partition_epoch != r.partition_epoch:
            return ErrorCode.INVALID_UPDATE_VERSION, None
        if req.leader_id not in req.new_isr or any(b not in r.replicas for b in req.new_isr):
            return ErrorCode.INVALID_REQUEST, None
        for b, epoch in zip(req.new_isr, req.new_isr_broker_epochs, strict=True):
            if b == req.leader_id or b in r.isr:
                continue
            s = self.brokers.get(b)
            if s is None or s.fenced:
                return ErrorCode.INELIGIBLE_REPLICA, None
            if self.check_broker_epochs and epoch != -1 and epoch != s.epoch:
                return ErrorCode.INELIGIBLE_REPLICA, None
        self._set(isr=tuple(req.new_isr))
        return ErrorCode.NONE, self.reg
