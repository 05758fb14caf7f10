"""Handlers of the group APIs (classic protocol): FindCoordinator, JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, OffsetCommit, TxnOffsetCommit, OffsetFetch, OffsetDelete, ListGroups,
DescribeGroups, DeleteGroups. They decode with the generated codec, ask the
``GroupCoordinator`` for the group's shard, and turn its answers into responses for the
requested version. Member metadata and assignments are relayed byte for byte."""

from __future__ import annotations

import asyncio
import datetime
import logging
import struct

from broker.group.coordinator import OFFSETS_TOPIC, GroupCoordinator, map_append_error
from broker.group.state import JoinRequest, join_error, sync_error
from broker.protocol.apis import ApiKey
from common.errors import ErrorCode, KafkaError
from metadata.acl import AclOperation as Op
from metadata.acl import ResourceType as RT

log = logging.getLogger("krafty.apis.group")

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
KEY_TYPE_SHARE = 2  # "group:topicId:partition" -> the share coordinator (KIP-932), for brokers


def _ms(v) -> int:
    if isinstance(v, datetime.timedelta):
        return int(v.total_seconds() * 1000)
    return int(v)


_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")
# the largest retention the generated codec decodes (it counts microseconds in an int64)
_MAX_RETENTION_MS = (2**63 - 1) // 1000


def _clamp_retention_time(body: bytes) -> tuple[bytes, int]:
    """OffsetCommit v2-v4: read ``retention_time_ms`` (int64 after group_id string,
    generation int32, member_id string) and clamp it in a copy of the body, so a legal
    int64 the codec cannot represent as a timedelta is not taken for a malformed request.
    Returns the body to decode and the retention (-1: the broker's offsets.retention)."""
    pos = 0
    for _ in range(2):  # group_id, then (after the generation) member_id
        if pos + 2 > len(body):
            return body, -1
        n = _I16.unpack_from(body, pos)[0]
        pos += 2 + max(n, 0)
        if _ == 0:
            pos += 4
    if pos + 8 > len(body):
        return body, -1
    retention = _I64.unpack_from(body, pos)[0]
    clamped = max(min(retention, _MAX_RETENTION_MS), -_MAX_RETENTION_MS)
    if clamped != retention:
        body = body[:pos] + _I64.pack(clamped) + body[pos + 8:]
    return body, retention


def _merge_topics(topics: list[dict]) -> list[dict]:
    """One entry per topic, however its partitions fared."""
    merged: dict[str, list] = {}
    for t in topics:
        merged.setdefault(t["name"], []).extend(t["partitions"])
    return [{"name": n, "partitions": ps} for n, ps in merged.items()]


class GroupApis:
    def __init__(self, apis, coordinator: GroupCoordinator):
        self.apis = apis  # KafkaApis: decode() and the metadata image
        self.coordinator = coordinator

    def handlers(self) -> dict:
        return {
            ApiKey.FIND_COORDINATOR: self.find_coordinator,
            ApiKey.JOIN_GROUP: self.join_group,
            ApiKey.SYNC_GROUP: self.sync_group,
            ApiKey.HEARTBEAT: self.heartbeat,
            ApiKey.LEAVE_GROUP: self.leave_group,
            ApiKey.OFFSET_COMMIT: self.offset_commit,
            ApiKey.TXN_OFFSET_COMMIT: self.txn_offset_commit,
            ApiKey.OFFSET_FETCH: self.offset_fetch,
            ApiKey.OFFSET_DELETE: self.offset_delete,
            ApiKey.LIST_GROUPS: self.list_groups,
            ApiKey.DESCRIBE_GROUPS: self.describe_groups,
            ApiKey.DELETE_GROUPS: self.delete_groups,
        }

    def _decode(self, ctx, body, ver):
        return self.apis.decode(ctx, body, ver)

    # --- FindCoordinator --------------------------------------------------------------------
    async def find_coordinator(self, ctx, body, ver):
        req = self._decode(ctx, body, ver)
        key_type = req.key_type if ver >= 1 else KEY_TYPE_GROUP
        keys = list(req.coordinator_keys) if ver >= 4 else [req.key]
        results = []
        for key in keys:
            results.append(await self._find_one(ctx, key, key_type))
        if ver >= 4:
            return {"throttle_time": 0, "coordinators": results}
        r = results[0]
        return {"throttle_time": 0, "error_code": r["error_code"], "error_message": r["error_message"],
                "node_id": r["node_id"], "host": r["host"], "port": r["port"]}

    async def _find_one(self, ctx, key: str, key_type: int) -> dict:
        res = {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": 0, "error_message": None}
        if key is not None and key_type in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION) and not self.apis.authorize(
                ctx, Op.DESCRIBE, RT.GROUP if key_type == KEY_TYPE_GROUP else RT.TRANSACTIONAL_ID, key):
            res["error_code"] = (ErrorCode.GROUP_AUTHORIZATION_FAILED if key_type == KEY_TYPE_GROUP
                                 else ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            return res
        if key_type == KEY_TYPE_SHARE and not self.apis.authorize_cluster(ctx, Op.CLUSTER_ACTION):
            res["error_code"] = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            return res
        if key_type not in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION, KEY_TYPE_SHARE):
            res["error_code"] = ErrorCode.INVALID_REQUEST
            res["error_message"] = f"unsupported coordinator key type {key_type}"
            return res
        if key is None:
            res["error_code"] = ErrorCode.INVALID_REQUEST
            return res
        # __consumer_offsets or __transaction_state: created on the first FindCoordinator
        runtime = {KEY_TYPE_GROUP: self.coordinator, KEY_TYPE_TRANSACTION: self.apis.txn_coordinator,
                   KEY_TYPE_SHARE: self.apis.share_coordinator}[key_type].runtime
        err = await runtime.ensure_topic()
        if err:
            res["error_code"] = err
            return res
        err, node, host, port = runtime.coordinator_endpoint(key, ctx.listener)
        if err:
            res["error_code"] = err
            return res
        res.update(node_id=node, host=host, port=port)
        return res

    # --- JoinGroup --------------------------------------------------------------------------
    async def join_group(self, ctx, body, ver):
        req = self._decode(ctx, body, ver)
        resp = await self._join(ctx, req, ver)
        resp["throttle_time"] = 0
        if ver < 7:
            resp.pop("protocol_type", None)
        return resp

    async def _join(self, ctx, req, ver) -> dict:
        instance_id = req.group_instance_id if ver >= 5 else None
        if not self.apis.authorize(ctx, Op.READ, RT.GROUP, req.group_id):
            return join_error(ErrorCode.GROUP_AUTHORIZATION_FAILED, req.member_id)
        try:
            shard = self.coordinator.shard_for(req.group_id)
        except KafkaError as e:
            return join_error(e.code, req.member_id)
        session = _ms(req.session_timeout)
        rebalance = _ms(req.rebalance_timeout) if ver >= 1 else session
        if rebalance <= 0:
            rebalance = session
        jr = JoinRequest(
            group_id=req.group_id, member_id=req.member_id, group_instance_id=instance_id,
            protocol_type=req.protocol_type, protocols=[(p.name, bytes(p.metadata)) for p in req.protocols],
            session_timeout_ms=session, rebalance_timeout_ms=rebalance, client_id=ctx.header.client_id or "",
            client_host="/" + (ctx.client_host or ""), require_known_member_id=ver >= 4,
            supports_skip_assignment=ver >= 9,
            new_member_id=self.coordinator.new_member_id(ctx.header.client_id or ""))
        waiter = asyncio.get_running_loop().create_future()
        c = self.coordinator
        c.run(shard, shard.join(c.now(), jr, waiter, wall=c.wall()))
        resp = await waiter
        if ver < 9 and resp.get("skip_assignment"):
            resp["skip_assignment"] = False
        return dict(resp)

    # --- SyncGroup --------------------------------------------------------------------------
    async def sync_group(self, ctx, body, ver):
        req = self._decode(ctx, body, ver)
        instance_id = req.group_instance_id if ver >= 3 else None
        if not self.apis.authorize(ctx, Op.READ, RT.GROUP, req.group_id):
            return dict(sync_error(ErrorCode.GROUP_AUTHORIZATION_FAILED), throttle_time=0)
        try:
            shard = self.coordinator.shard_for(req.group_id)
        except KafkaError as e:
            return dict(sync_error(e.code), throttle_time=0)
        assignments = {a.member_id: bytes(a.assignment) for a in req.assignments}
        waiter = asyncio.get_running_loop().create_future()
        c = self.coordinator
        fx = shard.sync(c.now(), req.group_id, req.member_id, instance_id, req.generation_id,
                        req.protocol_type if ver >= 5 else None, req.protocol_name if ver >= 5 else None,
                        assignments, waiter, wall=c.wall())
        self.coordinator.run(shard, fx)
        resp = dict(await waiter)
        resp["throttle_time"] = 0
        return resp

    # --- Heartbeat --------------------------------------------------------------------------
    async def heartbeat(self, ctx, body, ver):
        req = self._decode(ctx, body, ver)
        if not self.apis.authorize(ctx, Op.READ, RT.GROUP, req.group_id):
            return {"throttle_time": 0, "error_code": int(ErrorCode.GROUP_AUTHORIZATION_FAILED)}
        try:
            shard = self.coordinator.shard_for(req.group_id)
            code = shard.heartbeat(self.coordinator.now(), req.group_id, req.member_id,
                                   req.group_instance_id if ver >= 3 else None, req.generation_id)
        except KafkaError as e:
            code = e.code
        return {"throttle_time": 0, "error_code": int(code)}

    # --- LeaveGroup -------------------------------------------------------------------------
    async def leave_group(self, ctx, body, ver):
        req = self._decode(ctx, body, ver)
        if ver >= 3:
            identities = [(m.member_id, m.group_instance_id) for m in req.members]
        else:
            identities = [(req.member_id, None)]
        try:
            if not self.apis.authorize(ctx, Op.READ, RT.GROUP, req.group_id):
                raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
            shard = self.coordinator.shard_for(req.group_id)
            top, members, fx = shard.leave(self.coordinator.now(), req.group_id, identities,
                                           wall=self.coordinator.wall())
            # answered once the leave is written (Kafka's LeaveGroup waits for its records too)
            err = await self.coordinator.run_and_wait(shard, fx)
            if err and not top:
                top = err
        except KafkaError as e:
            top, members = e.code, []
        if ver < 3:
            if not top and members:
                top = members[0]["error_code"]
            return {"throttle_time": 0, "error_code": int(top)}
        return {"throttle_time": 0, "error_code": int(top), "members": members if not top else []}

    # --- OffsetCommit -----------------------------------------------------------------------
    async def offset_commit(self, ctx, body, ver):
        retention_ms = -1
        if 2 <= ver <= 4:
            body, retention_ms = _clamp_retention_time(bytes(body))
        req = self._decode(ctx, body, ver)
        topics = [(t.name, [(p.partition_index, p.committed_offset,
                             p.committed_leader_epoch if ver >= 6 else -1, p.committed_metadata)
                            for p in t.partitions]) for t in req.topics]
        if not self.apis.authorize(ctx, Op.READ, RT.GROUP, req.group_id):
            return self._commit_error(topics, ErrorCode.GROUP_AUTHORIZATION_FAILED)
        denied = [t for t in topics if not self.apis.authorize(ctx, Op.READ, RT.TOPIC, t[0])]
        topics = [t for t in topics if t not in denied]
        topics, unknown = self._split_unknown(topics)
        try:
            shard = self.coordinator.shard_for(req.group_id)
        except KafkaError as e:
            return self._commit_error(topics + denied + unknown, e.code)
        c = self.coordinator
        # v0 (no member, no generation: a simple consumer's commit; there is no ZooKeeper here, so
        # it is kept in __consumer_offsets as from v1) and v1 (a commit timestamp per partition)
        stamps = {(t.name, p.partition_index): p.commit_timestamp for t in req.topics for p in t.partitions
                  if p.commit_timestamp != -1} if ver == 1 else None
        out, w = shard.commit_offsets(c.now(), req.group_id, req.member_id if ver >= 1 else "",
                                      req.group_instance_id if ver >= 7 else None,
                                      req.generation_id_or_member_epoch if ver >= 1 else -1, ver, topics,
                                      retention_ms=retention_ms, wall=c.wall(), commit_timestamps=stamps)
        out += self._commit_error(denied, ErrorCode.TOPIC_AUTHORIZATION_FAILED)["topics"]
        out += self._commit_error(unknown, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)["topics"]
        out = _merge_topics(out)
        if w is not None:
            err = await self.coordinator.write(shard.partition, w, offsets=True)
            if err:
                for t in out:
                    for p in t["partitions"]:
                        if not p["error_code"]:
                            p["error_code"] = int(err)
        return {"throttle_time": 0, "topics": out}

    # --- TxnOffsetCommit ----------------------------------------------------------------------
    async def txn_offset_commit(self, ctx, body, ver):
        """Offsets committed inside a transaction (send_offsets_to_transaction): written to
        ``__consumer_offsets`` as a transactional batch of the producer, pending until the
        transaction's marker reaches the group's partition. The partition is verified with
        the transaction coordinator first (KIP-890; added to the transaction from v5)."""
        req = self._decode(ctx, body, ver)
        topics = [(t.name, [(p.partition_index, p.committed_offset, p.committed_leader_epoch if ver >= 2 else -1,
                             p.committed_metadata) for p in t.partitions]) for t in req.topics]
        if not self.apis.authorize(ctx, Op.WRITE, RT.TRANSACTIONAL_ID, req.transactional_id):
            return self._txn_commit_error(topics, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not self.apis.authorize(ctx, Op.READ, RT.GROUP, req.group_id):
            return self._txn_commit_error(topics, ErrorCode.GROUP_AUTHORIZATION_FAILED)
        denied = [t for t in topics if not self.apis.authorize(ctx, Op.READ, RT.TOPIC, t[0])]
        topics, unknown = self._split_unknown([t for t in topics if t not in denied])
        refused = (self._commit_error(denied, ErrorCode.TOPIC_AUTHORIZATION_FAILED)["topics"]
                   + self._commit_error(unknown, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)["topics"])
        if not topics:
            return {"throttle_time": 0, "topics": refused}
        replicas = self.apis.replicas
        try:
            shard = self.coordinator.shard_for(req.group_id)
            part = replicas.leader_partition((OFFSETS_TOPIC, shard.partition))
        except KafkaError as e:
            code = map_append_error(e.code, True) if e.code == ErrorCode.NOT_LEADER_OR_FOLLOWER else e.code
            return self._txn_commit_error(topics, code, refused)
        guards, errors = await replicas.verify_transaction(
            req.transactional_id, req.producer_id, req.producer_epoch, [part], [0], supports_epoch_bump=ver >= 5)
        if errors:
            code = next(iter(errors.values()))
            return self._txn_commit_error(topics, ErrorCode.COORDINATOR_NOT_AVAILABLE
                                          if code == ErrorCode.NETWORK_EXCEPTION else code, refused)
        try:
            shard = self.coordinator.shard_for(req.group_id)  # it may have moved meanwhile
        except KafkaError as e:
            return self._txn_commit_error(topics, e.code, refused)
        c = self.coordinator
        out, w = shard.commit_txn_offsets(c.now(), req.group_id, req.producer_id, req.producer_epoch,
                                          req.member_id if ver >= 3 else "",
                                          req.group_instance_id if ver >= 3 else None,
                                          req.generation_id if ver >= 3 else -1, topics, wall=c.wall())
        if w is not None:
            w.verification_guard = guards.get((OFFSETS_TOPIC, shard.partition))
            err = await self.coordinator.write(shard.partition, w, offsets=True)
            if err:
                for t in out:
                    for p in t["partitions"]:
                        if not p["error_code"]:
                            p["error_code"] = int(err)
        return {"throttle_time": 0, "topics": _merge_topics(out + refused)}

    def _txn_commit_error(self, topics, code: int, refused=()) -> dict:
        return {"throttle_time": 0, "topics": _merge_topics(self._commit_error(topics, code)["topics"] + list(refused))}

    def _split_unknown(self, topics):
        """(partitions that exist, those that do not): Kafka answers a commit for a topic or
        partition missing from its metadata with UNKNOWN_TOPIC_OR_PARTITION."""
        image = self.apis.image
        known, unknown = [], []
        for name, parts in topics:
            t = image.topics_by_name.get(name)
            ok = [p for p in parts if t is not None and p[0] in t.partitions]
            bad = [p for p in parts if t is None or p[0] not in t.partitions]
            if ok:
                known.append((name, ok))
            if bad:
                unknown.append((name, bad))
        return known, unknown

    @staticmethod
    def _commit_error(topics, code: int) -> dict:
        return {"throttle_time": 0, "topics": [
            {"name": name, "partitions": [{"partition_index": p[0], "error_code": int(code)} for p in parts]}
            for name, parts in topics]}

    # --- OffsetFetch ------------------------------------------------------------------------
    def _fetch_group(self, group_id: str, topics, ctx=None, require_stable: bool = False,
                     member: tuple[str | None, int] = (None, -1)) -> tuple[int, list[dict]]:
        wanted = None if topics is None else [(t.name, list(t.partition_indexes)) for t in topics]
        if ctx is not None and not self.apis.authorize(ctx, Op.DESCRIBE, RT.GROUP, group_id):
            return ErrorCode.GROUP_AUTHORIZATION_FAILED, []
        try:
            shard = self.coordinator.shard_for(group_id)
        except KafkaError as e:
            return e.code, []
        err = shard.validate_offset_fetch(group_id, *member)  # OffsetFetch v9: a consumer group member's epoch
        if err:
            return err, []
        return ErrorCode.NONE, self._describable_offsets(ctx, shard.fetch_offsets(group_id, wanted, require_stable),
                                                         wanted is None)

    def _describable_offsets(self, ctx, topics: list[dict], all_topics: bool) -> list[dict]:
        """Offsets of topics the principal may not describe: left out of an all-topics fetch,
        TOPIC_AUTHORIZATION_FAILED when asked for by name (as Kafka does)."""
        if ctx is None or self.apis.authorizer is None:
            return topics
        out = []
        for t in topics:
            if self.apis.authorize(ctx, Op.DESCRIBE, RT.TOPIC, t["name"]):
                out.append(t)
            elif not all_topics:
                out.append({**t, "partitions": [
                    {**p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
                     "error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)} for p in t["partitions"]]})
        return out

    async def offset_fetch(self, ctx, body, ver):
        req = self._decode(ctx, body, ver)
        if ver >= 8:
            groups = []
            for g in req.groups:
                code, topics = self._fetch_group(g.group_id, g.topics, ctx, req.require_stable,
                                                 (g.member_id, g.member_epoch) if ver >= 9 else (None, -1))
                groups.append({"group_id": g.group_id, "topics": topics, "error_code": int(code)})
            return {"throttle_time": 0, "groups": groups}
        topics_req = req.topics
        if ver < 2 and topics_req is None:
            topics_req = ()
        code, topics = self._fetch_group(req.group_id, topics_req, ctx, ver >= 7 and req.require_stable)
        if code and ver < 2:
            # v1 has no top-level error: every requested partition carries it
            topics = [{"name": t.name, "partitions": [
                {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": int(code)}
                for p in t.partition_indexes]} for t in topics_req]
        return {"throttle_time": 0, "topics": topics, "error_code": int(code)}

    # --- OffsetDelete -----------------------------------------------------------------------
    async def offset_delete(self, ctx, body, ver):
        req = self._decode(ctx, body, ver)
        wanted = [(t.name, [p.partition_index for p in t.partitions]) for t in req.topics]
        if not self.apis.authorize(ctx, Op.DELETE, RT.GROUP, req.group_id):
            return {"throttle_time": 0, "error_code": int(ErrorCode.GROUP_AUTHORIZATION_FAILED), "topics": []}
        denied = [t for t in wanted if not self.apis.authorize(ctx, Op.READ, RT.TOPIC, t[0])]
        wanted = [t for t in wanted if t not in denied]
        try:
            shard = self.coordinator.shard_for(req.group_id)
            code, out, w = shard.delete_offsets(self.coordinator.now(), req.group_id, wanted)
            out = out + [{"name": n, "partitions": [
                {"partition_index": p, "error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)} for p in ps]}
                for n, ps in denied]
        except KafkaError as e:
            return {"throttle_time": 0, "error_code": int(e.code), "topics": []}
        if code:
            return {"throttle_time": 0, "error_code": int(code), "topics": []}
        if w is not None:
            err = await self.coordinator.write(shard.partition, w, offsets=True)
            if err:
                return {"throttle_time": 0, "error_code": int(err), "topics": []}
        return {"throttle_time": 0, "error_code": 0, "topics": out}

    # --- ListGroups / DescribeGroups / DeleteGroups -----------------------------------------
    async def list_groups(self, ctx, body, ver):
        req = self._decode(ctx, body, ver)
        states = {s.lower() for s in req.states_filter} if ver >= 4 else None
        types = {s.lower() for s in req.types_filter} if ver >= 5 else None
        groups = []
        for shard in self.coordinator.loaded_shards():
            groups += shard.list_groups(states, types)
        if not self.apis.authorize_cluster(ctx, Op.DESCRIBE):
            groups = [g for g in groups if self.apis.authorize(ctx, Op.DESCRIBE, RT.GROUP, g["group_id"])]
        code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.coordinator.any_loading() else ErrorCode.NONE
        return {"throttle_time": 0, "error_code": int(code), "groups": groups}

    async def describe_groups(self, ctx, body, ver):
        req = self._decode(ctx, body, ver)
        out = []
        for gid in req.groups:
            entry = {"error_code": 0, "error_message": None, "group_id": gid, "group_state": "Dead",
                     "protocol_type": "", "protocol_data": "", "members": [],
                     "authorized_operations": -2147483648}
            if not self.apis.authorize(ctx, Op.DESCRIBE, RT.GROUP, gid):
                entry["error_code"] = ErrorCode.GROUP_AUTHORIZATION_FAILED
                out.append(entry)
                continue
            if ver >= 3 and req.include_authorized_operations:
                entry["authorized_operations"] = self.apis.authorized_operations(ctx, RT.GROUP, gid)
            try:
                shard = self.coordinator.shard_for(gid)
                d = shard.describe(gid)
                if d is not None:
                    entry.update(d)
                elif ver >= 6:
                    entry["error_code"] = ErrorCode.GROUP_ID_NOT_FOUND
                    entry["error_message"] = (f"Group {gid} is not a classic group." if shard.group_type(gid)
                                              else f"Group {gid} not found.")
            except KafkaError as e:
                entry["error_code"] = e.code
            out.append(entry)
        return {"throttle_time": 0, "groups": out}

    async def delete_groups(self, ctx, body, ver):
        req = self._decode(ctx, body, ver)
        codes: dict[str, int] = {}
        by_shard: dict[int, tuple] = {}
        for gid in req.groups_names:
            if not self.apis.authorize(ctx, Op.DELETE, RT.GROUP, gid):
                codes[gid] = ErrorCode.GROUP_AUTHORIZATION_FAILED
                continue
            try:
                shard = self.coordinator.shard_for(gid)
            except KafkaError as e:
                codes[gid] = e.code
                continue
            if gid in shard.share_groups:  # with its share-partition state (broker/apis/share_apis.py)
                codes[gid] = await self.apis.share_apis.delete_group(shard, gid)
                continue
            by_shard.setdefault(shard.partition, (shard, []))[1].append(gid)
        for shard, gids in by_shard.values():
            res, w, fx = shard.delete_groups(self.coordinator.now(), gids)
            codes.update(res)
            if w is not None:
                err = await self._write_then_run(shard, w, fx)
                if err:
                    for gid in gids:
                        if not codes.get(gid):
                            codes[gid] = err
        return {"throttle_time": 0, "results": [{"group_id": g, "error_code": int(codes[g])}
                                                for g in req.groups_names]}

    async def _write_then_run(self, shard, w, fx) -> int:
        fut = self.coordinator.write(shard.partition, w)
        self.coordinator.run(shard, fx)  # effects made by on_append (parked requests of deleted groups)
        return await fut


__all__ = ["GroupApis"]
