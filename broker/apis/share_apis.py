"""Handlers of share groups (KIP-932): ShareGroupHeartbeat and ShareGroupDescribe (the group
coordinator), ShareFetch and ShareAcknowledge (partition leaders, broker/share/manager.py), the
share coordinator's inter-broker APIs (Initialize/Read/Write/Delete ShareGroupState,
ReadShareGroupStateSummary) and the admin APIs Describe/Alter/DeleteShareGroupOffsets; also
DeleteGroups of share groups. Share groups are served when the cluster's ``share.version``
feature is finalized at 1 or more (``krafty features upgrade --feature share.version=1``);
before that these APIs answer UNSUPPORTED_VERSION, as Kafka's do."""

from __future__ import annotations

import asyncio
import datetime
import logging
import uuid

from broker.group.state import Write
from broker.protocol.apis import ApiKey
from broker.share.coordinator import ShareCoordinator
from broker.share.group import ShareGroup, ShareHeartbeatError
from broker.share.manager import SharePartitionManager, parse_auto_offset_reset  # noqa: F401
from broker.share.persister import SharePersister
from broker.share.records import StateBatch, StateKey
from common.errors import ErrorCode, KafkaError
from metadata.acl import AclOperation as Op
from metadata.acl import ResourceType as RT

log = logging.getLogger("krafty.apis.share")

SHARE_VERSION = "share.version"
_NOT_ENABLED = "Share groups are not enabled: the cluster's share.version feature is 0 (krafty features upgrade " \
               "--feature share.version=1)."


def _ms(v) -> int:
    return int(v.total_seconds() * 1000) if isinstance(v, datetime.timedelta) else int(v)


class ShareApis:
    def __init__(self, apis, group_coordinator, coordinator: ShareCoordinator, persister: SharePersister,
                 manager: SharePartitionManager):
        self.apis = apis
        self.groups = group_coordinator
        self.coordinator = coordinator
        self.persister = persister
        self.manager = manager
        # share partitions whose InitializeShareGroupState is in flight -> resolved when it ends
        self._initializing: dict[tuple[str, uuid.UUID, int], asyncio.Future] = {}

    def handlers(self) -> dict:
        return {
            ApiKey.SHARE_GROUP_HEARTBEAT: self.heartbeat,
            ApiKey.SHARE_GROUP_DESCRIBE: self.describe,
            ApiKey.SHARE_FETCH: self.share_fetch,
            ApiKey.SHARE_ACKNOWLEDGE: self.share_acknowledge,
            ApiKey.INITIALIZE_SHARE_GROUP_STATE: self.initialize_state,
            ApiKey.READ_SHARE_GROUP_STATE: self.read_state,
            ApiKey.WRITE_SHARE_GROUP_STATE: self.write_state,
            ApiKey.DELETE_SHARE_GROUP_STATE: self.delete_state,
            ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: self.read_state_summary,
            ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: self.describe_offsets,
            ApiKey.ALTER_SHARE_GROUP_OFFSETS: self.alter_offsets,
            ApiKey.DELETE_SHARE_GROUP_OFFSETS: self.delete_offsets,
        }

    def enabled(self) -> bool:
        return self.apis.image.features.get(SHARE_VERSION, 0) >= 1

    def _topics(self):
        return self.groups.topics()

    # --- ShareGroupHeartbeat ---------------------------------------------------------------------
    @staticmethod
    def _hb_error(code: int, message: str | None = None) -> dict:
        return {"throttle_time": 0, "error_code": int(code), "error_message": message, "member_id": None,
                "member_epoch": -1, "heartbeat_interval": 0, "assignment": None}

    @staticmethod
    def _invalid(req) -> str | None:
        """Kafka's throwIfShareGroupHeartbeatRequestIsInvalid: the message, or None."""
        if not req.group_id:
            return "GroupId can't be empty."
        if not req.member_id:
            return "MemberId can't be empty."
        if req.rack_id == "":
            return "RackId can't be empty."
        if req.member_epoch == 0:
            if not req.subscribed_topic_names:
                return "SubscribedTopicNames must be set in first request."
        elif req.member_epoch < -1:
            return "MemberEpoch is invalid."
        return None

    def _shard_for_share(self, gid: str):
        """The group's shard, checking the id is not a classic or consumer group's."""
        shard = self.groups.shard_for(gid)
        t = shard.group_type(gid)
        if t in ("consumer",) or (t == "classic" and (shard.groups[gid].members or gid in shard.offsets)):
            raise ShareHeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a share group.")
        return shard

    async def _write(self, shard, records) -> int:
        if not records:
            return 0
        err = await self.groups.write(shard.partition, Write(list(records)))
        self.groups.run(shard, None)
        return err

    async def heartbeat(self, ctx, body, ver):
        req = self.apis.decode(ctx, body, ver)
        if not self.enabled():
            return self._hb_error(ErrorCode.UNSUPPORTED_VERSION, _NOT_ENABLED)
        if not self.apis.authorize(ctx, Op.READ, RT.GROUP, req.group_id):
            return self._hb_error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        names = sorted(set(req.subscribed_topic_names or ()))
        if names and not all(self.apis.authorize(ctx, Op.DESCRIBE, RT.TOPIC, t) for t in names):
            return self._hb_error(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        msg = self._invalid(req)
        if msg is not None:
            return self._hb_error(ErrorCode.INVALID_REQUEST, msg)
        c = self.groups
        gid = req.group_id
        try:
            shard = self._shard_for_share(gid)
        except KafkaError as e:
            return self._hb_error(e.code)
        except ShareHeartbeatError as e:
            return self._hb_error(e.code, e.message)
        g = shard.share_groups.get(gid) or ShareGroup(gid)
        subscribed = None if req.subscribed_topic_names is None else list(req.subscribed_topic_names)
        client_id, host = ctx.header.client_id or "", "/" + (ctx.client_host or "")
        topics = self._topics()
        try:
            resp, records = g.heartbeat(c.now(), req.member_id, req.member_epoch, req.rack_id, subscribed, client_id,
                                        host, topics, shard.share_config)
        except ShareHeartbeatError as e:
            return self._hb_error(e.code, e.message)
        if records and gid not in shard.share_groups:
            shard.share_groups[gid] = g
            shard.groups.pop(gid, None)  # an empty classic placeholder
        err = await self._write(shard, records)
        if err:
            return self._hb_error(err)
        if req.member_epoch != -1 and shard.share_groups.get(gid) is g and req.member_id in g.members:
            more = await self._initialize_new(shard, g, topics)
            if more:
                try:
                    again, records = g.heartbeat(c.now(), req.member_id, g.members[req.member_id].epoch, None, None,
                                                 client_id, host, self._topics(), shard.share_config)
                except ShareHeartbeatError as e:
                    return self._hb_error(e.code, e.message)
                err = await self._write(shard, records)
                if err:
                    return self._hb_error(err)
                resp["member_epoch"] = again["member_epoch"]
                if again["assignment"] is not None:
                    resp["assignment"] = again["assignment"]
        a = resp["assignment"]
        return {"throttle_time": 0, "error_code": 0, "error_message": None, "member_id": resp["member_id"],
                "member_epoch": resp["member_epoch"], "heartbeat_interval": resp["heartbeat_interval_ms"],
                "assignment": None if a is None else {"topic_partitions": [
                    {"topic_id": t, "partitions": sorted(ps)} for t, ps in sorted(a.items(), key=lambda kv: kv[0].bytes)
                    if ps]}}

    async def _initialize_new(self, shard, g: ShareGroup, topics) -> bool:
        """Initializes the share-group state of subscribed partitions that have none (Kafka 4.1's
        InitializeShareGroupState from the group coordinator), then records them initialized,
        which makes them assignable. Whether any was (here or by a request already doing it, which
        this one waits for, so that a member joining meanwhile gets its partitions at once)."""
        want = {}
        others = []
        for tid, (name, ps) in g.needs_initializing(topics).items():
            others += [self._initializing[(g.group_id, tid, p)] for p in ps if (g.group_id, tid, p) in self._initializing]
            todo = frozenset(p for p in ps if (g.group_id, tid, p) not in self._initializing)
            if todo:
                want[tid] = (name, todo)
        if not want:
            if others:
                await asyncio.wait(others, timeout=self.persister.timeout_s)
            return bool(others)
        records: list = []
        g.mark_initializing(records, want)
        keys = [(g.group_id, tid, p) for tid, (_, ps) in want.items() for p in sorted(ps)]
        mine = asyncio.get_running_loop().create_future()
        for k in keys:
            self._initializing[k] = mine
        try:
            if await self._write(shard, records):
                return False
            results = await asyncio.gather(*(self.persister.initialize(StateKey(gid, tid, p), 0, -1)
                                              for gid, tid, p in keys))
            done: dict[uuid.UUID, tuple[str, frozenset[int]]] = {}
            for (_, tid, p), res in zip(keys, results, strict=True):
                # FENCED_STATE_EPOCH: the state exists already (a retry after a coordinator failover)
                if res["error_code"] in (ErrorCode.NONE, ErrorCode.FENCED_STATE_EPOCH):
                    name = want[tid][0]
                    done[tid] = (name, done.get(tid, (name, frozenset()))[1] | {p})
                else:
                    log.info("initializing the share state of %s %s-%d failed: %s", g.group_id, want[tid][0], p,
                             ErrorCode(res["error_code"]).name)
            if not done or shard.share_groups.get(g.group_id) is not g:
                return False
            records = []
            g.mark_initialized(records, done, self._topics())
            return not await self._write(shard, records)
        finally:
            for k in keys:
                if self._initializing.get(k) is mine:
                    del self._initializing[k]
            mine.set_result(None)

    # --- ShareGroupDescribe ----------------------------------------------------------------------
    async def describe(self, ctx, body, ver):
        req = self.apis.decode(ctx, body, ver)
        names = {t.topic_id: name for name, t in self.apis.image.topics_by_name.items()}
        out = []
        for gid in req.group_ids:
            d = {"error_code": 0, "error_message": None, "group_id": gid, "group_state": "", "group_epoch": -1,
                 "assignment_epoch": -1, "assignor_name": "", "members": []}
            if not self.apis.authorize(ctx, Op.DESCRIBE, RT.GROUP, gid):
                d["error_code"] = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
            else:
                try:
                    shard = self.groups.shard_for(gid)
                    g = shard.share_groups.get(gid)
                    if g is None:
                        d.update(error_code=int(ErrorCode.GROUP_ID_NOT_FOUND), group_state="Dead",
                                 error_message=(f"Group {gid} is not a share group." if shard.group_type(gid)
                                                else f"Group {gid} not found."))
                    else:
                        d = g.describe(names)
                except KafkaError as e:
                    d["error_code"] = int(e.code)
            d["authorized_operations"] = (self.apis.authorized_operations(ctx, RT.GROUP, gid)
                                          if req.include_authorized_operations and not d["error_code"]
                                          else -2147483648)
            out.append(d)
        return {"throttle_time": 0, "groups": out}

    # --- ShareFetch / ShareAcknowledge -------------------------------------------------------------
    def _denied(self, ctx, topic_ids) -> frozenset[str]:
        if self.apis.authorizer is None:
            return frozenset()
        image = self.apis.image
        out = set()
        for tid in topic_ids:
            t = image.topics_by_id.get(tid)
            if t is not None and not self.apis.authorize(ctx, Op.READ, RT.TOPIC, t.name):
                out.add(t.name)
        return frozenset(out)

    @staticmethod
    def _acks(topics) -> dict:
        acks: dict = {}
        for t in topics:
            for p in t.partitions:
                batches = [(b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in p.acknowledgement_batches]
                if batches:
                    acks.setdefault((t.topic_id, p.partition_index), []).extend(batches)
        return acks

    def _endpoints(self, ctx, outs) -> list[dict]:
        image = self.apis.image
        out = {}
        for o in outs:
            b = image.brokers.get(o.leader[0]) if o.leader[0] >= 0 else None
            ep = b.endpoint(ctx.listener) if b is not None else None
            if ep is not None:
                out[b.id] = {"node_id": b.id, "host": ep.host, "port": ep.port, "rack": b.rack}
        return list(out.values())

    async def share_fetch(self, ctx, body, ver):
        req = self.apis.decode(ctx, body, ver)
        gid = req.group_id or ""

        def error(code, msg=None):
            return {"throttle_time": 0, "error_code": int(code), "error_message": msg, "acquisition_lock_timeout": 0,
                    "responses": [], "node_endpoints": []}
        if not self.enabled():
            return error(ErrorCode.UNSUPPORTED_VERSION, _NOT_ENABLED)
        if not self.apis.authorize(ctx, Op.READ, RT.GROUP, gid):
            return error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        if not gid or not req.member_id:
            return error(ErrorCode.INVALID_REQUEST, "GroupId and MemberId must be set.")
        requested = [(t.topic_id, p.partition_index) for t in req.topics for p in t.partitions]
        forgotten = [(t.topic_id, int(p)) for t in req.forgotten_topics_data for p in t.partitions]
        renew = ver >= 2 and bool(getattr(req, "is_renew_ack", False))
        err, msg, outs = await self.manager.share_fetch(
            gid, req.member_id, req.share_session_epoch, requested, forgotten, self._acks(req.topics),
            0 if renew else _ms(req.max_wait), req.min_bytes, max(req.max_bytes, 0),
            max(req.max_records, 1) if not renew else 0, renew, self._denied(ctx, {t for t, _ in requested}),
            park=ctx.park)
        if err:
            return error(err, msg)
        by_topic: dict = {}
        for o in outs:
            by_topic.setdefault(o.topic_id, []).append({
                "partition_index": o.partition, "error_code": int(o.error), "error_message": o.error_message,
                "acknowledge_error_code": int(o.ack_error), "acknowledge_error_message": o.ack_error_message,
                "current_leader": {"leader_id": o.leader[0], "leader_epoch": o.leader[1]},
                "records": o.records or b"",
                "acquired_records": [{"first_offset": a.first_offset, "last_offset": a.last_offset,
                                      "delivery_count": a.delivery_count} for a in o.acquired]})
        return {"throttle_time": 0, "error_code": 0, "error_message": None,
                "acquisition_lock_timeout": self.manager.lock_ms(gid),
                "responses": [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()],
                "node_endpoints": self._endpoints(ctx, outs)}

    async def share_acknowledge(self, ctx, body, ver):
        req = self.apis.decode(ctx, body, ver)
        gid = req.group_id or ""

        def error(code, msg=None):  # (acquisition_lock_timeout: v2, KIP-1222's RENEW)
            return {"throttle_time": 0, "error_code": int(code), "error_message": msg, "responses": [],
                    "node_endpoints": [], "acquisition_lock_timeout": 0}
        if not self.enabled():
            return error(ErrorCode.UNSUPPORTED_VERSION, _NOT_ENABLED)
        if not self.apis.authorize(ctx, Op.READ, RT.GROUP, gid):
            return error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        if not gid or not req.member_id:
            return error(ErrorCode.INVALID_REQUEST, "GroupId and MemberId must be set.")
        acks = self._acks(req.topics)
        renew = ver >= 2 and bool(getattr(req, "is_renew_ack", False))
        err, msg, outs = await self.manager.share_acknowledge(gid, req.member_id, req.share_session_epoch, acks, renew,
                                                              self._denied(ctx, {t for t, _ in acks}))
        if err:
            return error(err, msg)
        by_topic: dict = {}
        for o in outs:
            by_topic.setdefault(o.topic_id, []).append({
                "partition_index": o.partition, "error_code": int(o.error), "error_message": o.error_message,
                "current_leader": {"leader_id": o.leader[0], "leader_epoch": o.leader[1]}})
        return {"throttle_time": 0, "error_code": 0, "error_message": None,
                "responses": [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()],
                "node_endpoints": self._endpoints(ctx, outs), "acquisition_lock_timeout": self.manager.lock_ms(gid)}

    # --- the share coordinator's APIs (inter-broker) -------------------------------------------------
    async def _state_api(self, ctx, body, ver, each, extra_fields: dict):
        req = self.apis.decode(ctx, body, ver)
        allowed = self.apis.authorize_cluster(ctx, Op.CLUSTER_ACTION)

        async def one(t, p) -> dict:
            k = StateKey(req.group_id, t.topic_id, p.partition)
            if not allowed:
                r = {"error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), "error_message": None}
            else:
                try:
                    r = await each(k, p)
                except KafkaError as e:
                    r = {"error_code": int(e.code), "error_message": e.message}
            return {**extra_fields, **r, "partition": p.partition}
        # the partitions' records are appended together and wait for one replication round trip
        done = await asyncio.gather(*(one(t, p) for t in req.topics for p in t.partitions))
        results, i = [], 0
        for t in req.topics:
            results.append({"topic_id": t.topic_id, "partitions": done[i:i + len(t.partitions)]})
            i += len(t.partitions)
        return {"results": results}

    async def initialize_state(self, ctx, body, ver):
        return await self._state_api(ctx, body, ver, lambda k, p: self.coordinator.initialize(
            k, p.state_epoch, p.start_offset), {})

    async def read_state(self, ctx, body, ver):
        return await self._state_api(ctx, body, ver, lambda k, p: self.coordinator.read(k, p.leader_epoch),
                                     {"state_epoch": 0, "start_offset": -1, "state_batches": []})

    async def write_state(self, ctx, body, ver):
        async def each(k, p):
            return await self.coordinator.write(
                k, p.state_epoch, p.leader_epoch, p.start_offset,
                tuple(StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                      for b in p.state_batches), getattr(p, "delivery_complete_count", -1))
        return await self._state_api(ctx, body, ver, each, {})

    async def delete_state(self, ctx, body, ver):
        return await self._state_api(ctx, body, ver, lambda k, p: self.coordinator.delete(k), {})

    async def read_state_summary(self, ctx, body, ver):
        return await self._state_api(ctx, body, ver, lambda k, p: self.coordinator.summary(k),
                                     {"state_epoch": 0, "leader_epoch": -1, "start_offset": -1,
                                      "delivery_complete_count": -1})

    # --- Describe/Alter/DeleteShareGroupOffsets -------------------------------------------------------
    def _group(self, gid: str):
        """(shard, share group) of an existing share group; raises KafkaError."""
        shard = self.groups.shard_for(gid)
        g = shard.share_groups.get(gid)
        if g is None:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a share group." if shard.group_type(gid)
                             else f"Group {gid} not found.")
        return shard, g

    def _lag(self, topic: str, pid: int, start: int, dcc: int) -> int:
        part = self.apis.replicas.partitions.get((topic, pid))
        if part is None or start < 0:
            return -1
        return max(part.state.high_watermark - start - max(dcc, 0), 0)

    async def describe_offsets(self, ctx, body, ver):
        req = self.apis.decode(ctx, body, ver)
        image = self.apis.image
        out = []
        for rg in req.groups:
            gid = rg.group_id
            entry = {"group_id": gid, "topics": [], "error_code": 0, "error_message": None}
            out.append(entry)
            if not self.apis.authorize(ctx, Op.DESCRIBE, RT.GROUP, gid):
                entry["error_code"] = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
                continue
            try:
                _, g = self._group(gid)
            except KafkaError as e:
                entry.update(error_code=int(e.code), error_message=e.message)
                continue
            init = g.initialized()
            if rg.topics is None:
                wanted = [(name, sorted(ps)) for tid, (name, ps) in sorted(init.items(), key=lambda kv: kv[1][0])]
            else:
                wanted = [(t.topic_name, list(t.partitions)) for t in rg.topics]
            for name, parts in wanted:
                if not self.apis.authorize(ctx, Op.DESCRIBE, RT.TOPIC, name):
                    continue
                t = image.topics_by_name.get(name)
                tid = t.topic_id if t is not None else uuid.UUID(int=0)
                done = init.get(tid, ("", frozenset()))[1]
                tout = []
                calls = []
                for p in parts:
                    po = {"partition_index": p, "start_offset": -1, "leader_epoch": -1, "lag": -1, "error_code": 0,
                          "error_message": None}
                    tout.append(po)
                    if t is None or p not in t.partitions:
                        po["error_code"] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    elif p in done:
                        calls.append((po, self.persister.summary(StateKey(gid, tid, p))))
                for po, call in calls:
                    r = await call
                    if r["error_code"]:
                        po.update(error_code=int(r["error_code"]), error_message=r.get("error_message"))
                        continue
                    po.update(start_offset=r["start_offset"], leader_epoch=r["leader_epoch"],
                              lag=self._lag(name, po["partition_index"], r["start_offset"],
                                            r.get("delivery_complete_count", -1)))
                entry["topics"].append({"topic_name": name, "topic_id": tid, "partitions": tout})
        return {"throttle_time": 0, "groups": out}

    async def alter_offsets(self, ctx, body, ver):
        req = self.apis.decode(ctx, body, ver)
        gid = req.group_id

        def error(code, msg=None):
            return {"throttle_time": 0, "error_code": int(code), "error_message": msg, "responses": []}
        if not self.apis.authorize(ctx, Op.READ, RT.GROUP, gid):
            return error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        try:
            shard = self._shard_for_share(gid)
        except KafkaError as e:
            return error(e.code, e.message)
        except ShareHeartbeatError as e:
            return error(e.code, e.message)
        g = shard.share_groups.get(gid)
        if g is not None and g.members:
            return error(ErrorCode.NON_EMPTY_GROUP, f"The share group {gid} has active members: offsets can only be "
                                                    "altered in an empty group.")
        if g is None:
            g = ShareGroup(gid)
        image = self.apis.image
        responses = []
        done: dict[uuid.UUID, tuple[str, frozenset[int]]] = {}
        for t in req.topics:
            timg = image.topics_by_name.get(t.topic_name)
            tid = timg.topic_id if timg is not None else uuid.UUID(int=0)
            pouts = []
            responses.append({"topic_name": t.topic_name, "topic_id": tid, "partitions": pouts})
            for p in t.partitions:
                po = {"partition_index": p.partition_index, "error_code": 0, "error_message": None}
                pouts.append(po)
                if not self.apis.authorize(ctx, Op.READ, RT.TOPIC, t.topic_name):
                    po["error_code"] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                    continue
                if timg is None or p.partition_index not in timg.partitions:
                    po["error_code"] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    continue
                if p.start_offset < 0:
                    po.update(error_code=int(ErrorCode.INVALID_REQUEST),
                              error_message=f"Invalid start offset {p.start_offset}.")
                    continue
                k = StateKey(gid, tid, p.partition_index)
                s = await self.persister.summary(k)
                epoch = s["state_epoch"] if not s["error_code"] else 0
                r = await self.persister.initialize(k, epoch + 1, p.start_offset)
                if r["error_code"]:
                    po.update(error_code=int(r["error_code"]), error_message=r.get("error_message"))
                    continue
                done[tid] = (t.topic_name, done.get(tid, (t.topic_name, frozenset()))[1] | {p.partition_index})
        if done:
            records: list = []
            if gid not in shard.share_groups:
                shard.share_groups[gid] = g
                shard.groups.pop(gid, None)
            g.mark_initialized(records, done, self._topics())
            err = await self._write(shard, records)
            if err:
                return error(err)
        return {"throttle_time": 0, "error_code": 0, "error_message": None, "responses": responses}

    async def delete_offsets(self, ctx, body, ver):
        req = self.apis.decode(ctx, body, ver)
        gid = req.group_id

        def error(code, msg=None):
            return {"throttle_time": 0, "error_code": int(code), "error_message": msg, "responses": []}
        if not self.apis.authorize(ctx, Op.DELETE, RT.GROUP, gid):
            return error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        try:
            shard, g = self._group(gid)
        except KafkaError as e:
            return error(e.code, e.message)
        if g.members:
            return error(ErrorCode.NON_EMPTY_GROUP, f"The share group {gid} has active members: offsets can only be "
                                                    "deleted in an empty group.")
        image = self.apis.image
        responses = []
        gone = set()
        for t in req.topics:
            timg = image.topics_by_name.get(t.topic_name)
            tid = timg.topic_id if timg is not None else uuid.UUID(int=0)
            tout = {"topic_name": t.topic_name, "topic_id": tid, "error_code": 0, "error_message": None}
            responses.append(tout)
            if not self.apis.authorize(ctx, Op.READ, RT.TOPIC, t.topic_name):
                tout["error_code"] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                continue
            meta = g.state_meta
            parts = meta.initialized.get(tid, ("", frozenset()))[1] | meta.initializing.get(tid, ("", frozenset()))[1]
            if timg is None or not parts:
                tout.update(error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                            error_message=f"The group has no offsets of topic {t.topic_name}.")
                continue
            results = await asyncio.gather(*(self.persister.delete(StateKey(gid, tid, p)) for p in sorted(parts)))
            bad = next((r for r in results if r["error_code"]), None)
            if bad is not None:
                tout.update(error_code=int(bad["error_code"]), error_message=bad.get("error_message"))
                continue
            gone.add(tid)
        if gone:
            records: list = []
            g.mark_deleted(records, gone)
            err = await self._write(shard, records)
            if err:
                return error(err)
        return {"throttle_time": 0, "error_code": 0, "error_message": None, "responses": responses}

    # --- DeleteGroups of share groups -----------------------------------------------------------------
    async def delete_group(self, shard, gid: str) -> int:
        """An empty share group and its share-partition state; an error code."""
        g = shard.share_groups.get(gid)
        if g is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if g.members:
            return ErrorCode.NON_EMPTY_GROUP
        meta = g.state_meta
        keys = [StateKey(gid, tid, p) for src in (meta.initialized, meta.initializing)
                for tid, (_, ps) in src.items() for p in sorted(ps)]
        results = await asyncio.gather(*(self.persister.delete(k) for k in keys))
        bad = next((r for r in results if r["error_code"]), None)
        if bad is not None:
            return bad["error_code"]
        if shard.share_groups.get(gid) is not g or g.members:
            return ErrorCode.NON_EMPTY_GROUP
        records = g.tombstones()
        shard.share_groups.pop(gid, None)
        return await self._write(shard, records)


__all__ = ["ShareApis", "SHARE_VERSION"]
