"""KIP-848's online migration between the classic and the consumer group protocols, as Kafka 4's
GroupMetadataManager does it (``group.consumer.migration.policy``):

* upgrade: the first ConsumerGroupHeartbeat of a consumer-protocol member to a classic group that
  has members makes it a consumer group (``to_consumer_group``). Every classic member becomes a
  member of the consumer group that uses the classic protocol, at the group's generation as its
  epoch, Stable, with its last assignment as its current and target assignment (Kafka's
  ConsumerGroup.fromClassicGroup); the classic group's record is tombstoned and the consumer
  group's records written. The joining member's heartbeat then bumps the epoch, and the classic
  members learn from REBALANCE_IN_PROGRESS on their heartbeats that they must join again.
* downgrade: when the last consumer-protocol member leaves (or is fenced) and only classic
  members remain, the consumer group becomes a classic group of them (``to_classic_group``,
  Kafka's ClassicGroup.fromConsumerGroup): Stable at the group epoch as its generation, the
  partitions each member may still own as its assignment (Kafka: its target; see
  ConsumerGroup._downgrade); it then rebalances, as a member left.

Pure: no I/O.
"""

from __future__ import annotations

import logging

from broker.group import consumer_protocol as cp
from broker.group import consumer_records as cr
from broker.group.consumer_group import (
    CONSUMER_PROTOCOL_TYPE,
    MEMBER_STABLE,
    ConsumerGroup,
    ConsumerGroupConfig,
    Downgrade,
    HeartbeatError,
    Member,
    Records,
    Topics,
)
from broker.group.records import RecordFormatError, group_metadata_key
from broker.group.state import STABLE, ClassicGroup, GroupConfig
from broker.group.state import Member as ClassicMember
from common.errors import ErrorCode

log = logging.getLogger("krafty.group")


def check_upgrade(classic: ClassicGroup, cfg: ConsumerGroupConfig) -> None:
    """Kafka's validateOnlineUpgrade; raises HeartbeatError GROUP_ID_NOT_FOUND with why not."""
    gid = classic.group_id
    if not cfg.upgrade_enabled:
        why = "online upgrade is disabled"
    elif classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
        why = "the group does not use the consumer embedded protocol"
    elif len(classic.members) > cfg.max_size:
        why = "the group size exceeds the consumer group maximum size"
    else:
        return
    log.info("Cannot upgrade classic group %s to consumer group because %s.", gid, why)
    raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Cannot upgrade classic group {gid} to consumer group "
                                                       f"because {why}.")


def to_consumer_group(classic: ClassicGroup, topics: Topics, cfg: ConsumerGroupConfig) -> tuple[ConsumerGroup, Records]:
    """The consumer group a classic group becomes, and the records that say so (the classic
    group's tombstone first); raises HeartbeatError when it cannot be (the classic group is
    left as it was)."""
    check_upgrade(classic, cfg)
    gid = classic.group_id
    ids = {name: tid for name, (tid, _) in topics.items()}
    members = []
    for m in classic.members.values():
        try:
            # an assignment can be empty: a member that joined and never synced
            assigned: dict = {}
            if m.assignment:
                parts, user = cp.decode_assignment(m.assignment)
                if user:
                    raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Cannot upgrade classic group {gid} to "
                                         "consumer group because an unsupported custom assignor is in use. Please "
                                         "switch to a default assignor before re-attempting the upgrade.")
                assigned = {ids[t]: frozenset(ps) for t, ps in parts.items() if t in ids and ps}
            # (every protocol of a member carries its subscription; a group in its first
            # rebalance has chosen none yet)
            sub = cp.decode_subscription(m.metadata(classic.protocol_name) if classic.protocol_name
                                         else m.protocols[0][1])
        except RecordFormatError as e:
            log.warning("Cannot upgrade classic group %s to consumer group because the embedded consumer protocol "
                        "is malformed: %s.", gid, e)
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Cannot upgrade classic group {gid} to consumer "
                                 "group because the embedded consumer protocol is malformed.") from None
        members.append(Member(
            m.member_id, instance_id=m.group_instance_id, rack_id=sub.rack_id or None, client_id=m.client_id,
            client_host=m.client_host, topics=tuple(sub.topics), rebalance_timeout_ms=m.rebalance_timeout_ms,
            epoch=classic.generation, previous_epoch=classic.generation, state=MEMBER_STABLE, assigned=assigned,
            classic=cr.ClassicMemberMetadata(m.session_timeout_ms, tuple((n, bytes(md)) for n, md in m.protocols))))
    records: Records = [(group_metadata_key(gid), None)]
    g = ConsumerGroup(gid)
    emit = g._emit
    # Kafka's createConsumerGroupRecords: subscriptions, epoch, targets, target epoch, assignments
    for m in members:
        emit(records, cr.MEMBER_METADATA_KEY, m.member_id, cr.member_metadata_value(m.metadata()))
    emit(records, cr.GROUP_EPOCH_KEY, None, cr.group_epoch_value(classic.generation))
    for m in members:
        emit(records, cr.TARGET_MEMBER_KEY, m.member_id, cr.target_member_value(m.assigned))
    emit(records, cr.TARGET_METADATA_KEY, None, cr.target_metadata_value(classic.generation))
    for m in members:
        emit(records, cr.CURRENT_ASSIGNMENT_KEY, m.member_id, cr.current_assignment_value(m.current()))
    log.info("[GroupId %s] Converted the classic group to a consumer group.", gid)
    return g, records


def to_classic_group(group_id: str, d: Downgrade, now: int, config: GroupConfig, wall: int | None = None
                     ) -> ClassicGroup:
    """The classic group a downgraded consumer group becomes: Stable, its generation the group
    epoch, the first member its leader, each member's target assignment in the consumer
    protocol's format at the version of its subscription."""
    g = ClassicGroup(group_id, now, config, wall)
    g.generation = d.epoch
    g.protocol_type = CONSUMER_PROTOCOL_TYPE
    for s in d.members:
        m = ClassicMember(s.member_id, s.instance_id, s.client_id, s.client_host, s.rebalance_timeout_ms,
                          s.session_timeout_ms, CONSUMER_PROTOCOL_TYPE, [(n, md) for n, md in s.protocols])
        g.members[m.member_id] = m
        if m.group_instance_id is not None:
            g.static_members[m.group_instance_id] = m.member_id
        if g.leader_id is None:
            g.leader_id = m.member_id
        m.heartbeat_deadline = now + m.session_timeout_ms
    g.protocol_name = g.select_protocol()
    for s in d.members:
        m = g.members[s.member_id]
        try:
            version = cp.decode_version(m.metadata(g.protocol_name))
        except RecordFormatError:
            version = 0
        m.assignment = cp.encode_assignment(s.assignment, version)
    g.state = STABLE
    return g
