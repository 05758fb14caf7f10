"""One ``__consumer_offsets`` partition's worth of coordinator state: its groups and their
committed offsets (Kafka's CoordinatorShard for the classic protocol). Pure: loading
replays records, requests return responses and ``Write``s (see ``state.py``).

``now`` is monotonic ms (deadlines); the optional ``wall`` is the wall clock at the same
instant, for the timestamps records carry (commit and state timestamps; None: equal to
``now``), see state.py.

Offsets are applied to memory once their records are committed (the shell calls
``Write.on_done``), and only then served by OffsetFetch, as Kafka keeps its pending commits
apart; answers go out then too. Records above
the high watermark only exist while this broker stays leader, and a leadership change
unloads the shard and the next leader rebuilds it from the log.

Transactional offset commits (TxnOffsetCommit, in transactional batches of the producer)
stay pending per producer until the transaction's marker is written to this partition: a
COMMIT makes them the committed offsets (unless a plain commit written after them is
newer), an ABORT drops them. OffsetFetch with ``require_stable`` (KIP-447) answers
UNSTABLE_OFFSET_COMMIT for a partition with a pending one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from broker.group import consumer_records as cr
from broker.group import migration
from broker.group import records as rec
from broker.group.consumer_group import (
    GROUP_TYPE_CONSUMER,
    ConsumerGroup,
    ConsumerGroupConfig,
    HeartbeatError,
    HeartbeatRequest,
    Topics,
)
from broker.group.state import (
    COMPLETING_REBALANCE,
    CONSUMER_PROTOCOL_TYPE,
    DEAD,
    EMPTY,
    STATES,
    ClassicGroup,
    Effects,
    GroupConfig,
    JoinRequest,
    Write,
    join_error,
    sync_error,
)
from broker.share import records as sr
from broker.share.group import GROUP_TYPE_SHARE, SHARE_PROTOCOL_TYPE, ShareGroup, ShareGroupConfig
from common.errors import ErrorCode

log = logging.getLogger("krafty.group")

OFFSET_METADATA_MAX_BYTES = 4096  # Kafka's offset.metadata.max.bytes
GROUP_TYPE_CLASSIC = "classic"


class GroupShard:
    def __init__(self, partition: int, config: GroupConfig, *, metadata_max_bytes: int = OFFSET_METADATA_MAX_BYTES,
                 consumer_config: ConsumerGroupConfig | None = None, topics: Callable[[], Topics] = dict,
                 image_version: Callable[[], int] = lambda: -1):
        self.partition = partition
        self.config = config
        self.metadata_max_bytes = metadata_max_bytes
        self.groups: dict[str, ClassicGroup] = {}
        # consumer groups (KIP-848); a group id is either a classic or a consumer group
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        self.consumer_config = consumer_config or ConsumerGroupConfig()
        self.topics = topics  # the topics of the metadata image: name -> (topic id, partitions)
        self.image_version = image_version  # the metadata image's offset (regex resolutions record it)
        # share groups (KIP-932, broker/share/group.py); a group id is of one type only
        self.share_groups: dict[str, ShareGroup] = {}
        self.share_config = ShareGroupConfig()
        self.offsets: dict[str, dict[tuple[str, int], rec.OffsetValue]] = {}
        # the log offset of the record of each committed offset: a transaction's offsets only
        # replace offsets committed before them (Kafka's OffsetAndMetadata.recordOffset)
        self.positions: dict[str, dict[tuple[str, int], int]] = {}
        # producer id -> group -> (topic, partition) -> (offset, log offset of its record)
        self.pending_txn: dict[int, dict[str, dict[tuple[str, int], tuple[rec.OffsetValue, int]]]] = {}
        # group -> (topic, partition) -> plain offset commits being written (not committed yet)
        self.pending_commits: dict[str, dict[tuple[str, int], int]] = {}

    # --- loading ------------------------------------------------------------------------------
    def _at(self, g: ClassicGroup, now: int, wall: int | None) -> ClassicGroup:
        """``g`` with the wall clock of this call (see state.py)."""
        g.wall_offset_ms = 0 if wall is None else wall - now
        return g

    def replay(self, key: bytes | None, value: bytes | None, now: int, offset: int = -1,
               producer_id: int = -1, wall: int | None = None) -> None:
        """Apply one record read from the partition (raises RecordFormatError if undecodable);
        ``offset`` is its log offset, ``producer_id`` that of its transactional batch (-1: none)."""
        if key is None:
            raise rec.RecordFormatError("record without a key")
        k = rec.decode_key(key)
        if isinstance(k, cr.ConsumerKey):
            self._replay_consumer(k, value)
            return
        if isinstance(k, sr.ShareKey):
            self._replay_share(k, value)
            return
        if isinstance(k, rec.OffsetKey):
            tp = (k.topic, k.partition)
            if value is None:
                offs = self.offsets.get(k.group)
                if offs is not None:
                    offs.pop(tp, None)
                    if not offs:
                        del self.offsets[k.group]
                return
            v = rec.decode_offset_value(value)
            if producer_id >= 0:
                self.pending_txn.setdefault(producer_id, {}).setdefault(k.group, {})[tp] = (v, offset)
                return
            self._set_offset(k.group, tp, v, offset, now, wall)
            return
        if value is None:
            self.groups.pop(k.group, None)
            return
        self.groups[k.group] = ClassicGroup.from_value(k.group, rec.decode_group_value(value), now, self.config,
                                                       wall)

    def _set_offset(self, group_id: str, tp: tuple[str, int], v: rec.OffsetValue, position: int, now: int,
                    wall: int | None = None) -> None:
        self.offsets.setdefault(group_id, {})[tp] = v
        self.positions.setdefault(group_id, {})[tp] = position
        if group_id not in self.groups and group_id not in self.consumer_groups:
            self.groups[group_id] = ClassicGroup(group_id, now, self.config, wall)

    def _replay_consumer(self, k: cr.ConsumerKey, value: bytes | None) -> None:
        g = self.consumer_groups.get(k.group)
        if g is None:
            if value is None:
                return
            g = self.consumer_groups[k.group] = ConsumerGroup(k.group)
            classic = self.groups.get(k.group)
            if classic is not None and classic.state == EMPTY and not classic.members:
                del self.groups[k.group]  # the placeholder of its offsets, or an empty classic group it replaced
        g.replay(k, value)
        if g.dead:
            del self.consumer_groups[k.group]

    def _replay_share(self, k: sr.ShareKey, value: bytes | None) -> None:
        g = self.share_groups.get(k.group)
        if g is None:
            if value is None:
                return
            g = self.share_groups[k.group] = ShareGroup(k.group)
        g.replay(k, value)
        if g.dead:
            del self.share_groups[k.group]

    def group_type(self, group_id: str) -> str | None:
        """classic, consumer, share, or None for a group id not in use."""
        if group_id in self.share_groups:
            return GROUP_TYPE_SHARE
        if group_id in self.consumer_groups:
            return GROUP_TYPE_CONSUMER
        return GROUP_TYPE_CLASSIC if group_id in self.groups else None

    def _consumer_write(self, g: ConsumerGroup, records) -> Write | None:
        """The records a consumer group's change emitted (already applied to it), to append."""
        if g.dead:
            self.consumer_groups.pop(g.group_id, None)
        return Write(list(records)) if records else None

    def _maybe_downgraded(self, g: ConsumerGroup, records, now: int, wall: int | None) -> Effects:
        """When the change made the consumer group a classic group (its last consumer-protocol
        member left): the classic group takes its place, its record after the consumer group's
        tombstones, and it rebalances when a member left (Kafka's convertToClassicGroup)."""
        fx = Effects()
        d = g.downgraded
        if d is None:
            return fx
        gid = g.group_id
        self.consumer_groups.pop(gid, None)
        classic = migration.to_classic_group(gid, d, now, self.config, wall)
        records.append(classic.metadata_record(now))
        self.groups[gid] = classic
        if d.rebalance:
            fx.add(classic.prepare_rebalance(now, f"Downgrade group {gid} from consumer to classic for member "
                                                  "leaving."))
        return fx

    def replay_end_txn(self, producer_id: int, commit: bool, now: int, wall: int | None = None) -> None:
        """The marker of ``producer_id``'s transaction is in the partition (Kafka's
        replayEndTransactionMarker): its pending offsets become committed or are dropped."""
        pending = self.pending_txn.pop(producer_id, None)
        if not pending or not commit:
            return
        for group_id, offs in pending.items():
            for tp, (v, position) in offs.items():
                committed = self.offsets.get(group_id, {})
                # the most recent of a transactional and a plain commit wins
                if tp not in committed or position > self.positions.get(group_id, {}).get(tp, -1):
                    self._set_offset(group_id, tp, v, position, now, wall)

    def has_pending_txn_offset(self, group_id: str, tp: tuple[str, int]) -> bool:
        return any(tp in groups.get(group_id, ()) for groups in self.pending_txn.values())

    def has_pending_offset(self, group_id: str, tp: tuple[str, int]) -> bool:
        """A commit of the partition is in flight: a plain one being written, or a transaction's."""
        return tp in self.pending_commits.get(group_id, ()) or self.has_pending_txn_offset(group_id, tp)

    def unload(self, now: int) -> Effects:
        fx = Effects()
        for g in self.groups.values():
            fx.add(g.make_dead(now, ErrorCode.NOT_COORDINATOR))
        self.groups.clear()
        for cg in self.consumer_groups.values():
            cg.dead = True
        self.consumer_groups.clear()
        for sg in self.share_groups.values():
            sg.dead = True
        self.share_groups.clear()
        self.offsets.clear()
        self.positions.clear()
        self.pending_txn.clear()
        self.pending_commits.clear()
        return fx

    # --- timers -------------------------------------------------------------------------------
    def next_deadline(self) -> int | None:
        ds = [d for g in (*self.groups.values(), *self.consumer_groups.values(), *self.share_groups.values())
              if (d := g.next_deadline()) is not None]
        return min(ds) if ds else None

    def tick(self, now: int, wall: int | None = None) -> Effects:
        fx = Effects()
        for g in list(self.groups.values()):
            d = g.next_deadline()
            if d is not None and now >= d:
                fx.add(self._at(g, now, wall).tick(now))
        for cg in list(self.consumer_groups.values()):
            d = cg.next_deadline()
            if d is not None and now >= d:
                cg.image_version, cg.wall_offset_ms = self.image_version(), 0 if wall is None else wall - now
                records = cg.tick(now, self.topics(), self.consumer_config)
                more = self._maybe_downgraded(cg, records, now, wall)
                w = self._consumer_write(cg, records)
                if w is not None:
                    fx.writes.append(w)
                fx.add(more)
        for sg in list(self.share_groups.values()):
            d = sg.next_deadline()
            if d is not None and now >= d:
                records = sg.tick(now)
                if records:
                    records += sg.refresh(now, self.topics())
                    fx.writes.append(Write(records))
        return fx

    # --- ConsumerGroupHeartbeat / ConsumerGroupDescribe (KIP-848) --------------------------------
    def consumer_heartbeat(self, now: int, req: HeartbeatRequest, new_member_id: str,
                           wall: int | None = None) -> tuple[dict, Write | None, Effects]:
        """A ConsumerGroupHeartbeat: (response fields, the records to write before answering,
        answers to other requests); raises HeartbeatError. The first consumer-protocol member of
        a classic group with members makes it a consumer group (KIP-848's online upgrade)."""
        gid = req.group_id
        g = self.consumer_groups.get(gid)
        records: list[tuple[bytes, bytes | None]] = []
        upgraded = None
        cfg = self.consumer_config
        if g is None:
            if gid in self.share_groups:
                raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a consumer group.")
            classic = self.groups.get(gid)
            if req.member_epoch != 0:
                raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND,
                                     f"Group {gid} is not a consumer group." if classic is not None
                                     and (classic.members or classic.state != EMPTY) else
                                     f"Consumer group {gid} not found.")
            if classic is not None and (classic.members or classic.state != EMPTY):
                g, records = migration.to_consumer_group(classic, self.topics(), cfg)
                upgraded = classic
            else:
                g = ConsumerGroup(gid)
                if classic is not None and classic.generation > 0:
                    records.append((rec.group_metadata_key(gid), None))  # the empty classic group it replaces
        resp, more = g.heartbeat(now, req, self.topics(), cfg, new_member_id)
        records += more
        fx = Effects()
        if gid not in self.consumer_groups and more:
            self.consumer_groups[gid] = g
            self.groups.pop(gid, None)
            if upgraded is not None:
                # parked JoinGroup/SyncGroup requests of the classic group: join again
                fx.add(upgraded.make_dead(now, ErrorCode.REBALANCE_IN_PROGRESS))
                for m in g.members.values():
                    if m.session_deadline is None:
                        m.session_deadline = now + m.session_ms(cfg, gid)
        fx.add(self._maybe_downgraded(g, records, now, wall))
        return resp, self._consumer_write(g, records), fx

    def consumer_metadata_changed(self, now: int) -> list[Write]:
        """The metadata image changed: groups whose subscribed topics changed get a new epoch."""
        topics = self.topics()
        out = []
        for g in list(self.consumer_groups.values()):
            w = self._consumer_write(g, g.on_metadata(topics, now))
            if w is not None:
                out.append(w)
        for sg in list(self.share_groups.values()):
            records = sg.refresh(now, topics)
            if records:
                out.append(Write(records))
        return out

    def consumer_describe(self, group_id: str, names, default_assignor: str) -> dict:
        g = self.consumer_groups.get(group_id)
        if g is None:
            code = ErrorCode.GROUP_ID_NOT_FOUND
            msg = f"Group {group_id} is not a consumer group." if group_id in self.groups else \
                f"Group {group_id} not found."
            return {"error_code": int(code), "error_message": msg, "group_id": group_id, "group_state": "Dead",
                    "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": []}
        return g.describe(names, default_assignor)

    # --- JoinGroup / SyncGroup / Heartbeat / LeaveGroup -----------------------------------------
    def join(self, now: int, req: JoinRequest, waiter: Any, wall: int | None = None) -> Effects:
        fx = Effects()
        if not req.group_id:
            fx.reply(waiter, join_error(ErrorCode.INVALID_GROUP_ID, req.member_id))
            return fx
        if not (self.config.min_session_timeout_ms <= req.session_timeout_ms <= self.config.max_session_timeout_ms):
            fx.reply(waiter, join_error(ErrorCode.INVALID_SESSION_TIMEOUT, req.member_id))
            return fx
        if req.group_id in self.share_groups:
            fx.reply(waiter, join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, req.member_id))
            return fx
        cg = self.consumer_groups.get(req.group_id)
        if cg is not None:
            if cg.members:
                return self._classic_join_to_consumer_group(now, cg, req, waiter, wall)
            # an empty consumer group becomes a classic group (its offsets stay), as in Kafka
            fx.writes.append(Write(cg.tombstones()))
            del self.consumer_groups[req.group_id]
        g = self.groups.get(req.group_id)
        if g is None:
            if req.member_id != "":
                fx.reply(waiter, join_error(ErrorCode.UNKNOWN_MEMBER_ID, req.member_id))
                return fx
            g = self.groups[req.group_id] = ClassicGroup(req.group_id, now, self.config, wall)
        fx.add(self._at(g, now, wall).join(now, req, waiter))
        self._forget_if_unused(g)
        return fx

    def _classic_join_to_consumer_group(self, now: int, cg: ConsumerGroup, req: JoinRequest, waiter: Any,
                                        wall: int | None) -> Effects:
        """A JoinGroup to a consumer group with members: the member joins it as a classic member,
        answered once its records are written (or the group becomes a classic group, when a
        classic static member replaces the last consumer-protocol one)."""
        fx = Effects()
        try:
            resp, records = cg.classic_join(now, req, self.topics(), self.consumer_config)
        except HeartbeatError as e:
            log.info("JoinGroup of member %r to consumer group %s refused: %s", req.member_id, cg.group_id, e)
            fx.reply(waiter, join_error(e.code, req.member_id))
            return fx
        more = self._maybe_downgraded(cg, records, now, wall)
        w = self._consumer_write(cg, records)
        if w is None:
            fx.reply(waiter, resp)
        else:
            w.replies.append((waiter, resp))
            fx.writes.append(w)
        return fx.add(more)

    def sync(self, now: int, group_id: str, member_id: str, instance_id: str | None, generation: int,
             protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes],
             waiter: Any, wall: int | None = None) -> Effects:
        fx = Effects()
        if not group_id:
            fx.reply(waiter, sync_error(ErrorCode.INVALID_GROUP_ID))
            return fx
        cg = self.consumer_groups.get(group_id)
        if cg is not None:  # a classic member of a consumer group
            try:
                fx.reply(waiter, cg.classic_sync(now, member_id, instance_id, generation, protocol_type,
                                                 protocol_name, self.topics(), self.consumer_config))
            except HeartbeatError as e:
                fx.reply(waiter, sync_error(e.code))
            return fx
        g = self.groups.get(group_id)
        if g is None:
            fx.reply(waiter, sync_error(ErrorCode.UNKNOWN_MEMBER_ID))
            return fx
        return self._at(g, now, wall).sync(now, member_id, instance_id, generation, protocol_type, protocol_name,
                                           assignments, waiter)

    def heartbeat(self, now: int, group_id: str, member_id: str, instance_id: str | None, generation: int) -> int:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        cg = self.consumer_groups.get(group_id)
        if cg is not None:  # a classic member of a consumer group
            try:
                return cg.classic_heartbeat(now, member_id, instance_id, generation, self.consumer_config)
            except HeartbeatError as e:
                return e.code
        g = self.groups.get(group_id)
        if g is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return g.heartbeat(now, member_id, instance_id, generation)

    def leave(self, now: int, group_id: str, identities: list[tuple[str, str | None]], wall: int | None = None
              ) -> tuple[int, list[dict], Effects]:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, [], Effects()
        cg = self.consumer_groups.get(group_id)
        if cg is not None:  # classic members leaving a consumer group
            results, records = cg.classic_leave(identities, self.topics(), self.consumer_config)
            fx = self._maybe_downgraded(cg, records, now, wall)
            w = self._consumer_write(cg, records)
            if w is not None:
                fx.writes.insert(0, w)
            return ErrorCode.NONE, results, fx
        g = self.groups.get(group_id)
        if g is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, [], Effects()
        if g.state == DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, [], Effects()
        results, fx = self._at(g, now, wall).leave(now, identities)
        return ErrorCode.NONE, results, fx

    def _forget_if_unused(self, g: ClassicGroup) -> None:
        """A group made by a request that failed (nothing joined, nothing committed) is not kept."""
        if (g.state == EMPTY and g.generation == 0 and not g.members and not g.pending_members
                and g.group_id not in self.offsets and self.groups.get(g.group_id) is g and g.protocol_type is None):
            del self.groups[g.group_id]

    # --- offsets ------------------------------------------------------------------------------
    def validate_offset_commit(self, now: int, group_id: str, member_id: str, instance_id: str | None,
                               generation: int, api_version: int, transactional: bool = False) -> int:
        if group_id in self.share_groups:
            return ErrorCode.GROUP_ID_NOT_FOUND  # a share group's offsets are its share-partition state
        cg = self.consumer_groups.get(group_id)
        if cg is not None:
            return cg.validate_offset_commit(member_id, generation, api_version, transactional)
        g = self.groups.get(group_id)
        if g is None:
            if generation < 0:
                return ErrorCode.NONE  # a simple (manual-assignment) consumer: the group is made on commit
            if transactional:
                return ErrorCode.ILLEGAL_GENERATION
            return ErrorCode.GROUP_ID_NOT_FOUND if api_version >= 9 else ErrorCode.ILLEGAL_GENERATION
        # the order of Kafka's ClassicGroup.validateOffsetCommit
        if g.state == DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and g.state == EMPTY:
            return ErrorCode.NONE
        if generation >= 0 or member_id or instance_id is not None:
            err = g.validate_member(member_id, instance_id)
            if err:
                return err
            if generation != g.generation:
                return ErrorCode.ILLEGAL_GENERATION
        elif transactional:
            return ErrorCode.NONE  # TxnOffsetCommit below v3, or a producer that sends no group metadata
        else:
            # no member and no generation (an admin's alterConsumerGroupOffsets, a simple
            # consumer): only into an empty group
            return ErrorCode.UNKNOWN_MEMBER_ID
        if g.state == COMPLETING_REBALANCE and not transactional:
            return ErrorCode.REBALANCE_IN_PROGRESS
        g.touch(now, member_id)
        return ErrorCode.NONE

    def commit_offsets(self, now: int, group_id: str, member_id: str, instance_id: str | None, generation: int,
                       api_version: int, topics: list[tuple[str, list[tuple[int, int, int, str | None]]]],
                       retention_ms: int = -1, wall: int | None = None,
                       commit_timestamps: dict[tuple[str, int], int] | None = None
                       ) -> tuple[list[dict], Write | None]:
        """``topics``: [(name, [(partition, offset, leader_epoch, metadata)])]. Returns the
        response topics (error codes filled in for refused partitions) and the Write.
        ``retention_ms`` (OffsetCommit v2-v4) other than -1 gives the offsets an expire
        timestamp of their own, as Kafka does. Commit and expire timestamps are wall-clock;
        ``commit_timestamps`` (OffsetCommit v1) are the client's own for some partitions, from
        which offsets.retention counts (seed 004)."""
        stamp = now if wall is None else wall
        expire = -1 if retention_ms == -1 else min(stamp + retention_ms, 2**63 - 1)
        out = []
        if not group_id:
            err = ErrorCode.INVALID_GROUP_ID
        else:
            err = self.validate_offset_commit(now, group_id, member_id, instance_id, generation, api_version)
        records, applied = self._offset_records(group_id, topics, err, stamp, expire, out, commit_timestamps)
        if not records:
            return out, None
        w = Write(records)
        pending = self.pending_commits.setdefault(group_id, {})
        for tp, _ in applied:
            pending[tp] = pending.get(tp, 0) + 1

        def on_done(code: int, now2: int) -> None:
            # the offsets are served once committed (the high watermark passed them), not
            # before: a failed write never showed them (Kafka's pendingOffsetCommits)
            left = self.pending_commits.get(group_id, {})
            for tp, _ in applied:
                if left.get(tp, 0) > 1:
                    left[tp] -= 1
                else:
                    left.pop(tp, None)
            if not left:
                self.pending_commits.pop(group_id, None)
            if code:
                return
            if group_id not in self.groups and group_id not in self.consumer_groups:
                self.groups[group_id] = ClassicGroup(group_id, now2, self.config, wall)
            positions = self.positions.get(group_id, {})
            for tp, v in applied:
                if w.base_offset > positions.get(tp, -1):  # a later commit may have completed first
                    self._set_offset(group_id, tp, v, w.base_offset, now2, wall)

        w.on_done = on_done
        return out, w

    def _offset_records(self, group_id: str, topics, err: int, stamp: int, expire: int, out: list[dict],
                        stamps: dict[tuple[str, int], int] | None = None):
        """The records of an offset commit (OffsetCommit, TxnOffsetCommit) and what they set,
        ((topic, partition), OffsetValue); ``out`` gets each partition's error code (``err`` for
        all, or OFFSET_METADATA_TOO_LARGE)."""
        records: list[tuple[bytes, bytes | None]] = []
        applied: list[tuple[tuple[str, int], rec.OffsetValue]] = []
        for name, parts in topics:
            pout = []
            out.append({"name": name, "partitions": pout})
            for p, offset, epoch, metadata in parts:
                code = err
                if not code and metadata is not None and len(metadata.encode("utf-8")) > self.metadata_max_bytes:
                    code = ErrorCode.OFFSET_METADATA_TOO_LARGE
                pout.append({"partition_index": p, "error_code": int(code)})
                if code:
                    continue
                v = rec.OffsetValue(offset, epoch, metadata or "", stamps.get((name, p), stamp) if stamps else stamp,
                                    expire)
                records.append((rec.offset_commit_key(group_id, name, p), rec.offset_commit_value(v)))
                applied.append(((name, p), v))
        return records, applied

    def commit_txn_offsets(self, now: int, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
                           instance_id: str | None, generation: int,
                           topics: list[tuple[str, list[tuple[int, int, int, str | None]]]],
                           wall: int | None = None) -> tuple[list[dict], Write | None]:
        """TxnOffsetCommit: like ``commit_offsets``, but the records go in a transactional batch
        of the producer and the offsets stay pending until the transaction's marker (KIP-447
        fencing: a member of a later generation or another member makes it fail)."""
        out = []
        if not group_id:
            err = ErrorCode.INVALID_GROUP_ID
        else:
            err = self.validate_offset_commit(now, group_id, member_id, instance_id, generation, 5, transactional=True)
        records, applied = self._offset_records(group_id, topics, err, now if wall is None else wall, -1, out)
        if not records:
            return out, None
        w = Write(records, producer_id=producer_id, producer_epoch=producer_epoch)

        def on_append() -> None:
            if group_id not in self.groups and group_id not in self.consumer_groups:
                self.groups[group_id] = ClassicGroup(group_id, now, self.config, wall)
            offs = self.pending_txn.setdefault(producer_id, {}).setdefault(group_id, {})
            for tp, v in applied:
                offs[tp] = (v, w.base_offset)

        w.on_append = on_append
        return out, w

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> int:
        """OffsetFetch v9+ from a member of a consumer group: its member epoch must be current."""
        cg = self.consumer_groups.get(group_id)
        if cg is None or (member_id is None and member_epoch < 0):
            return ErrorCode.NONE
        return cg.validate_offset_fetch(member_id, member_epoch)

    def fetch_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None,
                      require_stable: bool = False) -> list[dict]:
        offs = self.offsets.get(group_id, {})

        def entry(t: str, p: int, v: rec.OffsetValue | None) -> dict:
            if require_stable and self.has_pending_offset(group_id, (t, p)):
                return {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
                        "error_code": int(ErrorCode.UNSTABLE_OFFSET_COMMIT)}
            return _offset_entry(p, v)

        if topics is None:
            by_topic: dict[str, list[dict]] = {}
            for (t, p), v in sorted(offs.items()):
                by_topic.setdefault(t, []).append(entry(t, p, v))
            return [{"name": t, "partitions": ps} for t, ps in by_topic.items()]
        return [{"name": t, "partitions": [entry(t, p, offs.get((t, p))) for p in ps]} for t, ps in topics]

    def delete_offsets(self, now: int, group_id: str, topics: list[tuple[str, list[int]]]
                       ) -> tuple[int, list[dict], Write | None]:
        g = self.groups.get(group_id) or self.consumer_groups.get(group_id)
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, [], None
        if g is None or (isinstance(g, ClassicGroup) and g.state == DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND, [], None
        if isinstance(g, ConsumerGroup):
            subscribed = g.subscribed_topic_names()  # a consumer group: only its unsubscribed topics
        elif g.protocol_type is not None and g.protocol_type != CONSUMER_PROTOCOL_TYPE and g.members:
            return ErrorCode.NON_EMPTY_GROUP, [], None
        else:
            subscribed = g.subscribed_topics()
        offs = self.offsets.get(group_id, {})
        out = []
        records = []
        gone = []
        for t, ps in topics:
            pout = []
            out.append({"name": t, "partitions": pout})
            busy = subscribed is None or t in subscribed
            for p in ps:
                if busy and g.members:
                    pout.append({"partition_index": p, "error_code": int(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)})
                    continue
                pout.append({"partition_index": p, "error_code": 0})
                if (t, p) in offs:
                    records.append((rec.offset_commit_key(group_id, t, p), None))
                    gone.append((t, p))
        if not records:
            return ErrorCode.NONE, out, None

        def on_append() -> None:
            o = self.offsets.get(group_id, {})
            for tp in gone:
                o.pop(tp, None)
            if not o:
                self.offsets.pop(group_id, None)

        return ErrorCode.NONE, out, Write(records, on_append=on_append)

    def delete_groups(self, now: int, group_ids: list[str]) -> tuple[dict[str, int], Write | None, Effects]:
        codes: dict[str, int] = {}
        records: list[tuple[bytes, bytes | None]] = []
        doomed = []
        for gid in group_ids:
            cg = self.consumer_groups.get(gid)
            if cg is not None:
                if cg.members:
                    codes[gid] = ErrorCode.NON_EMPTY_GROUP
                    continue
                codes[gid] = ErrorCode.NONE
                records += [(rec.offset_commit_key(gid, t, p), None) for (t, p) in self.offsets.get(gid, {})]
                records += cg.tombstones()  # applied now: the group is dead
                self.consumer_groups.pop(gid, None)
                doomed.append(gid)
                continue
            g = self.groups.get(gid)
            if g is None or g.state == DEAD:
                codes[gid] = ErrorCode.GROUP_ID_NOT_FOUND
                continue
            if g.members or g.state != EMPTY:
                codes[gid] = ErrorCode.NON_EMPTY_GROUP
                continue
            codes[gid] = ErrorCode.NONE
            records += [(rec.offset_commit_key(gid, t, p), None) for (t, p) in self.offsets.get(gid, {})]
            records.append((rec.group_metadata_key(gid), None))
            doomed.append(gid)
        fx = Effects()
        if not records:
            return codes, None, fx

        def on_append() -> None:
            for gid in doomed:
                g = self.groups.pop(gid, None)
                if g is not None:
                    fx.add(g.make_dead(now, ErrorCode.COORDINATOR_NOT_AVAILABLE))
                self.offsets.pop(gid, None)

        return codes, Write(records, on_append=on_append), fx

    def expire_offsets(self, now: int, retention_ms: int) -> Write | None:
        """``now`` is the wall clock here: expiry compares it with the records' timestamps.
        Offsets of empty groups expire ``retention_ms`` after the group became empty
        (after their commit for groups that never had members); those of topics a consumer
        group no longer subscribes to after their commit (KIP-211/496). An empty group left
        without offsets is deleted."""
        records: list[tuple[bytes, bytes | None]] = []
        gone: list[tuple[str, tuple[str, int]]] = []
        dead: list[str] = []
        for gid, g in list(self.groups.items()):
            offs = self.offsets.get(gid, {})
            expired = []
            if g.state == EMPTY:
                for tp, v in offs.items():
                    base = g.state_timestamp if g.protocol_type else v.commit_timestamp
                    if v.expire_timestamp >= 0:
                        if now >= v.expire_timestamp:
                            expired.append(tp)
                    elif now - base >= retention_ms:
                        expired.append(tp)
            elif g.protocol_type == CONSUMER_PROTOCOL_TYPE:
                subscribed = g.subscribed_topics()
                if subscribed is not None:
                    expired = [tp for tp, v in offs.items()
                               if tp[0] not in subscribed and now - v.commit_timestamp >= retention_ms]
            expired = [tp for tp in expired if not self.has_pending_offset(gid, tp)]
            for tp in expired:
                records.append((rec.offset_commit_key(gid, tp[0], tp[1]), None))
                gone.append((gid, tp))
            if (g.state == EMPTY and not g.members and not g.pending_members
                    and len(expired) == len(offs)):
                records.append((rec.group_metadata_key(gid), None))
                dead.append(gid)
        for gid, cg in list(self.consumer_groups.items()):
            # a consumer group's offsets: those of an empty group, or of topics it no longer
            # subscribes to, retention_ms after their commit; an empty group left without is deleted
            offs = self.offsets.get(gid, {})
            subscribed = cg.subscribed_topic_names()
            expired = [tp for tp, v in offs.items() if tp[0] not in subscribed and not self.has_pending_offset(gid, tp)
                       and (now >= v.expire_timestamp if v.expire_timestamp >= 0
                            else now - v.commit_timestamp >= retention_ms)]
            for tp in expired:
                records.append((rec.offset_commit_key(gid, tp[0], tp[1]), None))
                gone.append((gid, tp))
            if not cg.members and len(expired) == len(offs):
                records += cg.tombstones()
                self.consumer_groups.pop(gid, None)
        if not records:
            return None

        def on_append() -> None:
            for gid, tp in gone:
                o = self.offsets.get(gid)
                if o is not None:
                    o.pop(tp, None)
                    if not o:
                        del self.offsets[gid]
            for gid in dead:
                g = self.groups.get(gid)
                if g is not None and g.state == EMPTY and not g.members and gid not in self.offsets:
                    del self.groups[gid]

        return Write(records, on_append=on_append)

    # --- ListGroups / DescribeGroups ------------------------------------------------------------
    def list_groups(self, states: set[str] | None, types: set[str] | None) -> list[dict]:
        out = []
        if not types or GROUP_TYPE_SHARE in types:
            for gid, sg in self.share_groups.items():
                state = sg.state()
                if not states or state.lower() in states:
                    out.append({"group_id": gid, "protocol_type": SHARE_PROTOCOL_TYPE, "group_state": state,
                                "group_type": GROUP_TYPE_SHARE})
        if not types or GROUP_TYPE_CONSUMER in types:
            for gid, cg in self.consumer_groups.items():
                state = cg.state()
                if not states or state.lower() in states:
                    out.append({"group_id": gid, "protocol_type": CONSUMER_PROTOCOL_TYPE, "group_state": state,
                                "group_type": GROUP_TYPE_CONSUMER})
        if types and GROUP_TYPE_CLASSIC not in types:
            return out
        for gid, g in self.groups.items():
            if g.state == DEAD:
                continue
            if states and g.state.lower() not in states:
                continue
            out.append({"group_id": gid, "protocol_type": g.protocol_type or "", "group_state": g.state,
                        "group_type": GROUP_TYPE_CLASSIC})
        return out

    def describe(self, group_id: str) -> dict | None:
        g = self.groups.get(group_id)
        if g is None or g.state == DEAD:
            return None
        stable = g.state == "Stable"
        members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_metadata": m.metadata(g.protocol_name) if stable else b"",
                    "member_assignment": m.assignment if stable else b""} for m in g.members.values()]
        return {"error_code": 0, "group_id": group_id, "group_state": g.state,
                "protocol_type": g.protocol_type or "", "protocol_data": (g.protocol_name or "") if stable else "",
                "members": members}


def _offset_entry(p: int, v: rec.OffsetValue | None) -> dict:
    if v is None:
        return {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
                "error_code": 0}
    return {"partition_index": p, "committed_offset": v.offset, "committed_leader_epoch": v.leader_epoch,
            "metadata": v.metadata, "error_code": 0}


__all__ = ["GroupShard", "STATES"]
