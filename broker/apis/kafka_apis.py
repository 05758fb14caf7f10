"""Request dispatch: api key -> handler. Handlers are written once for every version they
serve; generated (kio) types carry the version differences, except on the Produce and
Fetch hot paths (broker/apis/wire.py)."""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
from typing import Any

from broker.apis import wire
from broker.apis.group_apis import GroupApis
from broker.fetch_session import FetchContext, FetchSessionCache, PartitionData
from broker.group.coordinator import OFFSETS_TOPIC, GroupCoordinator
from broker.log.batch import validate_produce_batches
from broker.log.validator import RecordValidationError
from broker.protocol import codec
from broker.protocol.apis import SUPPORTED, ApiKey
from broker.replica.manager import ReplicaManager
from broker.replica.selector import candidates_for, make_selector
from broker.security.acl_apis import AclApis
from broker.security.authorizer import ANONYMOUS, make_authorizer
from broker.security.quotas import FETCH, PRODUCE, ClientQuotas, user_of
from broker.security.scram_apis import ScramApis
from broker.server import FileRegion, RequestContext
from common.config import KEYS, TOPIC_KEYS, Config, ConfigError, is_sensitive, topic_defaults
from common.errors import ErrorCode, KafkaError
from common.topic_names import INTERNAL_TOPICS, RESERVED_TOPICS, validate_topic_name
from metadata.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS
from metadata.acl import AclOperation as Op
from metadata.acl import ResourceType as RT
from metadata.controller_api import (
    MAX_PARTITIONS_PER_BATCH,
    MAX_RECORDS_PER_USER_OP,
    TOO_MANY_PARTITIONS,
    TOO_MANY_RECORDS,
    NewTopic,
    too_many_partitions,
)
from metadata.image import MetadataImage

log = logging.getLogger("krafty.apis")

_SOFTWARE_RE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5


class CloseConnection(Exception):
    """Close the connection without a response (acks=0 produce that failed, as Kafka does)."""


class ProducerIdAllocator:
    """Hands out producer ids from blocks the controller allocates in the metadata log."""

    def __init__(self, controller, broker_id: int):
        self.controller = controller
        self.broker_id = broker_id
        self.broker_epoch = -1
        self._next = 0
        self._end = 0
        self._lock = asyncio.Lock()

    async def next_id(self) -> int:
        async with self._lock:
            if self._next >= self._end:
                start, length = await self.controller.allocate_producer_ids(self.broker_id, self.broker_epoch)
                self._next, self._end = start, start + length
            pid = self._next
            self._next += 1
            return pid


class KafkaApis:
    def __init__(self, config: Config, broker_id: int, loader, replicas: ReplicaManager, controller):
        self.config = config
        self.broker_id = broker_id
        self.loader = loader
        self.replicas = replicas
        self.controller = controller
        self.producer_ids = ProducerIdAllocator(controller, broker_id)
        self.rng = random.Random()
        self._topic_defaults = topic_defaults(config)
        try:
            self.replica_selector = make_selector(config["replica.selector.class"])
        except ValueError as e:
            raise ConfigError(str(e)) from None
        self.fetch_sessions = FetchSessionCache(config["max.incremental.fetch.session.cache.slots"])
        self.handlers = {
            ApiKey.API_VERSIONS: self.api_versions,
            ApiKey.METADATA: self.metadata,
            ApiKey.PRODUCE: self.produce,
            ApiKey.FETCH: self.fetch,
            ApiKey.LIST_OFFSETS: self.list_offsets,
            ApiKey.CREATE_TOPICS: self.create_topics,
            ApiKey.DELETE_TOPICS: self.delete_topics,
            ApiKey.CREATE_PARTITIONS: self.create_partitions,
            ApiKey.DESCRIBE_CONFIGS: self.describe_configs,
            ApiKey.ALTER_CONFIGS: self.alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self.incremental_alter_configs,
            ApiKey.DESCRIBE_CLUSTER: self.describe_cluster,
            ApiKey.INIT_PRODUCER_ID: self.init_producer_id,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self.offset_for_leader_epoch,
        }
        # the group coordinator (broker/group) and its handlers (broker/apis/group_apis.py)
        self.group_coordinator = GroupCoordinator(config, broker_id, replicas, loader, controller)
        self.handlers.update(GroupApis(self, self.group_coordinator).handlers())
        # authorization (authorizer.class.name; None = every request allowed) and the ACL/quota APIs
        self.authorizer = make_authorizer(config)
        if self.authorizer is not None:
            loader.add_publisher(self.authorizer.on_metadata)
        self.handlers.update(AclApis(self).handlers())
        # client byte-rate quotas (AlterClientQuotas): connections over quota are muted until this time
        self.quotas = ClientQuotas(config["quota.window.num"], config["quota.window.size.seconds"])
        self._muted: dict[tuple[str, int], float] = {}
        # SCRAM credential APIs; SASL requests that get here (broker/security/scram_apis.py)
        self.handlers.update(ScramApis(self).handlers())

    @property
    def image(self) -> MetadataImage:
        return self.loader.image

    # --- authorization -------------------------------------------------------------------
    def authorize(self, ctx: RequestContext, op: Op, rtype: RT, name: str) -> bool:
        """Whether the request's principal may perform ``op`` on ``rtype:name``."""
        a = self.authorizer
        if a is None:
            return True
        return a.authorize(getattr(ctx, "principal", ANONYMOUS), ctx.client_host, op, rtype, name)

    async def _throttle(self, ctx: RequestContext, key: str, nbytes: int, kip219: bool) -> int:
        """Records bytes against the client's quota; returns the throttle time (ms). Clients that
        honour throttle_time_ms (KIP-219 versions) get the response at once and the connection
        is muted; older versions get the response late, as Kafka does."""
        q = self.quotas
        q.update(self.image.client_quotas)
        if not q.enabled:
            return 0
        now = time.monotonic()
        ms = q.record(key, user_of(getattr(ctx, "principal", ANONYMOUS)), ctx.header.client_id or "", nbytes, now)
        if ms > 0:
            if kip219:
                if len(self._muted) > 100_000:
                    self._muted = {k: t for k, t in self._muted.items() if t > now}
                self._muted[(ctx.listener, ctx.connection_id)] = now + ms / 1000
            else:
                await asyncio.sleep(ms / 1000)
        return ms

    def authorize_cluster(self, ctx: RequestContext, op: Op) -> bool:
        return self.authorize(ctx, op, RT.CLUSTER, CLUSTER_NAME)

    def authorized_operations(self, ctx: RequestContext, rtype: RT, name: str) -> int:
        a = self.authorizer
        if a is None:  # everything is allowed: every operation the resource type supports
            return sum(1 << int(op) for op in SUPPORTED_OPERATIONS.get(rtype, ()))
        return a.authorized_operations(getattr(ctx, "principal", ANONYMOUS), ctx.client_host, rtype, name)

    # --- dispatch ------------------------------------------------------------------------
    async def __call__(self, ctx: RequestContext, body: memoryview):
        if self._muted:  # a throttled connection's next request waits out the throttle (KIP-219)
            until = self._muted.pop((ctx.listener, ctx.connection_id), None)
            if until is not None and until > time.monotonic():
                await asyncio.sleep(until - time.monotonic())
        h = ctx.header
        key, ver = h.api_key, h.api_version
        rng = SUPPORTED.get(key)
        if key == ApiKey.API_VERSIONS and (rng is None or not rng[0] <= ver <= rng[1]):
            return self._frame(ctx, 0, self._api_versions_body(0, ErrorCode.UNSUPPORTED_VERSION))
        if rng is None or not rng[0] <= ver <= rng[1]:
            # as Kafka 4.x (SocketServer.parseRequestHeader): no response, the connection closes
            name = ApiKey(key).name if key in ApiKey._value2member_map_ else "unknown"
            raise codec.FramingError(f"received request for api with key {key} ({name}) and unsupported version {ver}")
        handler = self.handlers[key]
        try:
            result = await handler(ctx, body, ver)
        except CloseConnection:
            raise ConnectionResetError("closing connection after a failed acks=0 produce") from None
        except codec.FramingError:
            raise
        except (ValueError, IndexError, UnicodeDecodeError, OverflowError) as e:
            if isinstance(e, KafkaError):
                raise
            raise codec.FramingError(f"malformed {ApiKey(key).name} v{ver} request: {e}") from None
        except Exception:
            log.exception("error handling %s v%d", ApiKey(key).name, ver)
            return self._frame_obj(ctx, codec.error_response(key, ver, ErrorCode.UNKNOWN_SERVER_ERROR))
        if result is None:
            return None
        if isinstance(result, list):
            return [codec.response_header(key, ver, h.correlation_id), *result]
        return self._frame_obj(ctx, result if not isinstance(result, dict) else
                               codec.build_response(key, ver, result))

    def _frame_obj(self, ctx, obj) -> list:
        h = ctx.header
        return [codec.response_header(h.api_key, h.api_version, h.correlation_id), codec.encode(obj)]

    def _frame(self, ctx, version: int, obj) -> list:
        return [codec.response_header(ctx.header.api_key, version, ctx.header.correlation_id), codec.encode(obj)]

    def decode(self, ctx, body, ver):
        try:
            return codec.decode_request(ctx.header.api_key, ver, bytes(body), 0)
        except Exception as e:
            raise codec.FramingError(f"cannot decode {ApiKey(ctx.header.api_key).name} v{ver}: {e}") from None

    # --- ApiVersions ------------------------------------------------------------------------
    def _api_versions_body(self, ver: int, error: int = 0):
        metadata_version = self.image.features.get("metadata.version", 0)
        return codec.build_response(ApiKey.API_VERSIONS, ver, {
            "error_code": error,
            "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                         for k, (lo, hi) in sorted(SUPPORTED.items())],
            "throttle_time": 0,
            "supported_features": [{"name": "metadata.version", "min_version": 7, "max_version": 21}],
            "finalized_features_epoch": self.image.offset if metadata_version else -1,
            "finalized_features": [{"name": "metadata.version", "max_version_level": metadata_version,
                                    "min_version_level": metadata_version}] if metadata_version else [],
        })

    async def api_versions(self, ctx, body, ver):
        req = self.decode(ctx, body, ver)
        if ver >= 3 and not (_SOFTWARE_RE.fullmatch(req.client_software_name or "")
                             and _SOFTWARE_RE.fullmatch(req.client_software_version or "")):
            return self._api_versions_body(ver, ErrorCode.INVALID_REQUEST)
        return self._api_versions_body(ver)

    # --- Metadata -----------------------------------------------------------------------------
    def _alive_brokers(self, image: MetadataImage, listener: str) -> list[dict]:
        out = []
        for b in sorted(image.brokers.values(), key=lambda b: b.id):
            if b.fenced:
                continue
            ep = b.endpoint(listener)
            if ep is not None:
                out.append({"node_id": b.id, "broker_id": b.id, "host": ep.host, "port": ep.port, "rack": b.rack})
        return out

    def _controller_id(self, alive: list[dict]) -> int:
        ids = [b["node_id"] for b in alive]
        if self.broker_id in ids:
            return self.broker_id
        return self.rng.choice(ids) if ids else -1

    def _topic_metadata(self, image: MetadataImage, t) -> dict:
        parts = []
        for pid in sorted(t.partitions):
            p = t.partitions[pid]
            offline = [r for r in p.replicas if r not in image.brokers or image.brokers[r].fenced]
            leader_ok = p.leader >= 0 and p.leader in image.brokers and not image.brokers[p.leader].fenced
            parts.append({
                "error_code": ErrorCode.NONE if leader_ok else ErrorCode.LEADER_NOT_AVAILABLE,
                "partition_index": pid, "leader_id": p.leader if leader_ok else -1,
                "leader_epoch": p.leader_epoch, "replica_nodes": list(p.replicas), "isr_nodes": list(p.isr),
                "offline_replicas": offline,
            })
        return {"error_code": ErrorCode.NONE, "name": t.name, "topic_id": t.topic_id,
                "is_internal": t.name in INTERNAL_TOPICS, "partitions": parts}

    async def metadata(self, ctx, body, ver):
        req = self.decode(ctx, body, ver)
        image = self.image
        allow_auto = (req.allow_auto_topic_creation if ver >= 4 else True) and self.config["auto.create.topics.enable"]
        topics_out = []
        if req.topics is None or (ver == 0 and not req.topics):
            # topics the principal may not describe are left out, as if they did not exist
            topics_out = [self._topic_metadata(image, t) for t in sorted(image.topics_by_name.values(),
                                                                          key=lambda t: t.name)
                          if self.authorize(ctx, Op.DESCRIBE, RT.TOPIC, t.name)]
        else:
            to_create = []
            for rt in req.topics:
                name = getattr(rt, "name", None)
                tid = getattr(rt, "topic_id", None)
                if name is None and tid is not None and tid.int != 0:
                    t = image.topics_by_id.get(tid)
                    if t is not None and not self.authorize(ctx, Op.DESCRIBE, RT.TOPIC, t.name):
                        topics_out.append({"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": None,
                                           "topic_id": tid})
                        continue
                    topics_out.append(self._topic_metadata(image, t) if t else
                                      {"error_code": ErrorCode.UNKNOWN_TOPIC_ID, "name": None, "topic_id": tid})
                    continue
                if not self.authorize(ctx, Op.DESCRIBE, RT.TOPIC, name):
                    # not even whether it exists is disclosed
                    topics_out.append({"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": name})
                    continue
                t = image.topics_by_name.get(name)
                if t is not None:
                    topics_out.append(self._topic_metadata(image, t))
                    continue
                try:
                    validate_topic_name(name)
                except KafkaError:
                    topics_out.append({"error_code": ErrorCode.INVALID_TOPIC_EXCEPTION, "name": name})
                    continue
                if allow_auto:
                    if not (self.authorize_cluster(ctx, Op.CREATE) or self.authorize(ctx, Op.CREATE, RT.TOPIC, name)):
                        topics_out.append({"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": name})
                        continue
                    if name == OFFSETS_TOPIC:  # created with its own configs, as Kafka's AutoTopicCreationManager does
                        await self.group_coordinator.ensure_offsets_topic()
                    elif name not in RESERVED_TOPICS:  # other internal topics: only by their coordinators
                        to_create.append(name)
                topics_out.append({"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": name})
            if to_create:
                created = await self._auto_create(to_create)
                image = self.image
                for entry in topics_out:
                    if entry.get("name") in created:
                        code = created[entry["name"]]
                        t = image.topics_by_name.get(entry["name"])
                        if t is not None:
                            entry.update(self._topic_metadata(image, t))
                        else:
                            entry["error_code"] = code
        alive = self._alive_brokers(image, ctx.listener)
        out = {"throttle_time": 0, "brokers": alive, "cluster_id": image.cluster_id,
               "controller_id": self._controller_id(alive), "topics": topics_out}
        if ver >= 8 and req.include_topic_authorized_operations:
            for entry in topics_out:
                if entry.get("error_code") == ErrorCode.NONE and entry.get("name"):
                    entry["topic_authorized_operations"] = self.authorized_operations(ctx, RT.TOPIC, entry["name"])
        if 8 <= ver <= 10 and req.include_cluster_authorized_operations:
            out["cluster_authorized_operations"] = self.authorized_operations(ctx, RT.CLUSTER, CLUSTER_NAME)
        return out

    async def _auto_create(self, names: list[str]) -> dict[str, int]:
        new = [NewTopic(n) for n in names]
        try:
            results = await self.controller.create_topics(new)
        except KafkaError as e:
            return {n: e.code for n in names}
        out = {}
        for res in results:
            if res.error in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                out[res.name] = ErrorCode.LEADER_NOT_AVAILABLE
            else:
                out[res.name] = res.error
                log.info("auto-creating topic %s failed: %s", res.name, res.message)
        return out

    # --- Produce ------------------------------------------------------------------------------
    async def produce(self, ctx, body, ver):
        try:
            req = wire.parse_produce(body, ver)
        except codec.FramingError:
            raise
        image = self.image
        results: dict[str, list[dict]] = {}
        appended: list[tuple[tuple[str, int], int, dict]] = []
        any_error = False
        txn_denied = req.transactional_id is not None and not self.authorize(
            ctx, Op.WRITE, RT.TRANSACTIONAL_ID, req.transactional_id)
        for name, parts in req.topics:
            out = results.setdefault(name, [])
            auth_error = (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if txn_denied else
                          0 if self.authorize(ctx, Op.WRITE, RT.TOPIC, name) else ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            for p in parts:
                res = {"index": p.index, "error_code": 0, "base_offset": -1, "log_append_time": -1,
                       "log_start_offset": -1}
                out.append(res)
                try:
                    if auth_error:
                        raise KafkaError(auth_error)
                    if req.acks not in (-1, 0, 1):
                        raise KafkaError(ErrorCode.INVALID_REQUIRED_ACKS)
                    if name in INTERNAL_TOPICS:  # written by the coordinators only, as in Kafka
                        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"cannot append to internal topic {name}")
                    if name not in image.topics_by_name:
                        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    part = self.replicas.leader_partition((name, p.index))
                    if p.records is None:
                        raise KafkaError(ErrorCode.INVALID_RECORD, "null records")
                    headers = validate_produce_batches(p.records, part.log.config.max_message_bytes,
                                                       produce_version=ver)
                    min_isr = self.replicas.min_insync_replicas(image, name)
                    if req.acks == -1:
                        code = part.state.can_append_acks_all(min_isr)
                        if code != ErrorCode.NONE:
                            raise KafkaError(code)
                    info = await self.replicas.append_async(part, p.records, headers)
                    res["base_offset"] = info.first_offset
                    res["log_append_time"] = info.log_append_time_ms
                    res["log_start_offset"] = info.log_start_offset
                    if req.acks == -1:
                        appended.append(((name, p.index), info.last_offset, min_isr, res))
                except KafkaError as e:
                    any_error = True
                    res["error_code"] = e.code
                    res["error_message"] = e.message
                    if isinstance(e, RecordValidationError):  # KIP-467 (v8+)
                        res["record_errors"] = [{"batch_index": i, "batch_index_error_message": m}
                                                for i, m in e.record_errors]
                    if e.code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                        t = image.topics_by_name.get(name)
                        reg = t.partitions.get(p.index) if t else None
                        if reg is not None:
                            res["current_leader"] = {"leader_id": reg.leader, "leader_epoch": reg.leader_epoch}
        throttle = await self._throttle(ctx, PRODUCE, len(body), ver >= 6) if self.image.client_quotas else 0
        if req.acks == 0:
            if any_error:
                raise CloseConnection()
            return None
        if appended:
            await self._await_replication(ctx, appended, req.timeout_ms)
        return {"responses": [{"name": n, "partition_responses": ps} for n, ps in results.items()],
                "throttle_time": throttle}

    async def _await_replication(self, ctx, appended, timeout_ms: int) -> None:
        """The produce purgatory: acks=all completes when the HW passes each batch."""
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000
        for tp, last_offset, min_isr, res in appended:
            while True:
                part = self.replicas.partitions.get(tp)
                if part is None or not part.state.is_leader:
                    res["error_code"] = ErrorCode.NOT_LEADER_OR_FOLLOWER
                    break
                done = part.state.acks_all_result(last_offset, min_isr)
                if done is not None:
                    res["error_code"] = done
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    res["error_code"] = ErrorCode.REQUEST_TIMED_OUT
                    break
                await ctx.park(self.replicas.wait_for_data([tp], left))

    # --- Fetch ---------------------------------------------------------------------------------
    async def fetch(self, ctx, body, ver):
        req = self.decode(ctx, body, ver)
        image = self.image
        replica_id = req.replica_state.replica_id if ver >= 15 else req.replica_id
        max_wait = req.max_wait.total_seconds()
        deadline = time.monotonic() + max_wait
        # KIP-227: the request may name only what changed in a fetch session; the context
        # gives every partition to read (keyed by topic id from v13, by name before)
        requested = [((t.topic_id if ver >= 13 else t.topic, p.partition), PartitionData(
            p.partition, p.fetch_offset, p.partition_max_bytes, getattr(p, "current_leader_epoch", -1),
            getattr(p, "last_fetched_epoch", -1), getattr(p, "log_start_offset", -1)))
            for t in req.topics for p in t.partitions]
        if ver >= 7:
            forgotten = [(t.topic_id if ver >= 13 else t.topic, int(pid))
                         for t in req.forgotten_topics_data for pid in t.partitions]
            fctx = self.fetch_sessions.context(req.session_id, req.session_epoch, requested, forgotten,
                                               int(time.time() * 1000), replica_id >= 0)
            if fctx.error:
                return wire.encode_fetch_response(ver, [], error=fctx.error)
        else:
            fctx = FetchContext(parts=requested)
        by_topic: dict = {}
        for (tkey, _), pd in fctx.parts:
            by_topic.setdefault(tkey, []).append(pd)
        # resolve topics once
        wanted = []
        for tkey, parts in by_topic.items():
            if ver >= 13:
                timg = image.topics_by_id.get(tkey)
                name = timg.name if timg else None
                tid = tkey
            else:
                name = tkey
                timg = image.topics_by_name.get(name)
                tid = timg.topic_id if timg else None
            wanted.append((name, tid, timg, parts))
        # replicas need CLUSTER_ACTION on the cluster, consumers READ on each topic
        denied: frozenset[str | None] = frozenset()
        if self.authorizer is not None:
            if replica_id >= 0:
                if not self.authorize_cluster(ctx, Op.CLUSTER_ACTION):
                    denied = frozenset(w[0] for w in wanted)
            else:
                denied = frozenset(w[0] for w in wanted if w[0] is not None
                                   and not self.authorize(ctx, Op.READ, RT.TOPIC, w[0]))
        quota_cap = None  # a consumer with a fetch quota gets at most its quota over the window per response
        if replica_id < 0 and image.client_quotas:
            self.quotas.update(image.client_quotas)
            quota_cap = self.quotas.max_bytes_in_window(FETCH, user_of(getattr(ctx, "principal", ANONYMOUS)),
                                                        ctx.header.client_id or "")
        first_pass = True
        while True:
            topics_out, total, errors = self._fetch_once(ver, wanted, req, replica_id, first_pass, image, denied,
                                                         quota_cap)
            first_pass = False
            left = deadline - time.monotonic()
            if total >= req.min_bytes or errors or left <= 0 or not wanted:
                break
            if replica_id >= 0 and fctx.session is not None and any(
                    fctx.has_news(((tid if ver >= 13 else name), r.index), r.high_watermark, r.log_start_offset)
                    for name, tid, out in topics_out for r in out):
                break  # a follower learns a new high watermark now, not a long poll later
            await ctx.park(self.replicas.wait_for_data(
                [(name, p.partition) for name, _, _, ps in wanted if name for p in ps], left, log_end=replica_id >= 0))
        throttle = 0
        if replica_id < 0 and self.image.client_quotas:
            throttle = await self._throttle(ctx, FETCH, total, ver >= 8)
            if throttle:  # over quota: an empty response (Kafka's getThrottledResponse)
                self.quotas.unrecord(FETCH, user_of(getattr(ctx, "principal", ANONYMOUS)), ctx.header.client_id or "",
                                     total, time.monotonic())
                for _, _, parts in topics_out:
                    for pr in parts:
                        pr.records = None
        if fctx.session is not None:
            keyed = {((tid if ver >= 13 else name), r.index): r for name, tid, out in topics_out for r in out}
            chosen = fctx.select({k: (r.error, r.high_watermark, r.log_start_offset, r.records is not None,
                                      r.diverging_epoch is not None or r.preferred_read_replica >= 0
                                      or r.current_leader is not None) for k, r in keyed.items()})
            topics_out = [(name, tid, kept) for name, tid, out in topics_out
                          if (kept := [r for r in out if ((tid if ver >= 13 else name), r.index) in chosen])]
        return wire.encode_fetch_response(ver, topics_out, throttle_ms=throttle, session_id=fctx.session_id)

    def _fetch_once(self, ver, wanted, req, replica_id, first_pass, image, denied=frozenset(), max_bytes_cap=None):
        # KIP-392: consumers (Fetch v11+) may read from followers, up to their high watermark,
        # and the leader may point a consumer with a rack at an in-sync replica in that rack
        from_consumer = replica_id < 0
        follower_reads = from_consumer and ver >= 11
        client_rack = (req.rack_id or None) if follower_reads else None
        selector = self.replica_selector if client_rack else None
        remaining = req.max_bytes if req.max_bytes > 0 else 0x7FFFFFFF
        if max_bytes_cap is not None:
            remaining = min(remaining, max_bytes_cap)
        total = 0
        errors = False
        topics_out = []
        for name, tid, timg, parts in wanted:
            out = []
            for p in parts:
                r = wire.FetchPartitionResult(p.partition, 0, -1, -1, -1, None)
                out.append(r)
                try:
                    if name in denied:
                        raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                    if timg is None or p.partition not in timg.partitions:
                        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID if ver >= 13 else
                                         ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    part = self.replicas.partitions.get((name, p.partition))
                    if part is None or not (part.state.is_leader or (
                            follower_reads and part.state.leader >= 0 and self.broker_id in part.state.replicas)):
                        raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                    st, lg = part.state, part.log
                    if replica_id >= 0:
                        v = st.validate_follower_fetch(
                            p.current_leader_epoch if ver >= 9 else -1, p.fetch_offset,
                            p.last_fetched_epoch if ver >= 12 else -1, lg.leader_epoch_cache, lg.log_start_offset,
                            lg.log_end_offset)
                        if v.error != ErrorCode.NONE:
                            raise KafkaError(v.error)
                        if v.diverging_epoch is not None:
                            r.diverging_epoch = v.diverging_epoch
                            r.high_watermark = r.last_stable_offset = st.high_watermark
                            r.log_start_offset = lg.log_start_offset
                            errors = True  # answer at once
                            continue
                        if first_pass:
                            self.replicas.on_follower_fetch(part, replica_id, p.fetch_offset)
                        max_offset = lg.log_end_offset
                    else:
                        if ver >= 9:
                            bad = st.check_leader_epoch(p.current_leader_epoch)
                            if bad:
                                raise KafkaError(ErrorCode[bad])
                        max_offset = min(st.high_watermark, lg.log_end_offset)
                        if selector is not None and st.is_leader:
                            preferred = self._preferred_read_replica(selector, client_rack, st, lg, image,
                                                                     p.fetch_offset)
                            if preferred is not None:
                                r.preferred_read_replica = preferred
                                r.high_watermark = r.last_stable_offset = st.high_watermark
                                r.log_start_offset = lg.log_start_offset
                                errors = True  # answer at once, without records
                                continue
                    r.high_watermark = st.high_watermark
                    r.last_stable_offset = st.high_watermark
                    r.log_start_offset = lg.log_start_offset
                    if p.fetch_offset < lg.log_start_offset or p.fetch_offset > lg.log_end_offset:
                        raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE)
                    limit = min(p.partition_max_bytes, remaining)
                    sl = lg.read(p.fetch_offset, limit, max_offset, min_one_batch=(total == 0))
                    if sl is not None and sl.size > 0:
                        r.records = FileRegion(sl.fd, sl.position, sl.size, sl.file)
                        total += sl.size
                        remaining -= sl.size
                except KafkaError as e:
                    r.error = e.code
                    errors = True
                    if e.code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH) and timg:
                        reg = timg.partitions.get(p.partition)
                        if reg is not None:
                            r.current_leader = (reg.leader, reg.leader_epoch)
            topics_out.append((name or "", tid, out))
        return topics_out, total, errors

    def _preferred_read_replica(self, selector, client_rack, st, lg, image, fetch_offset) -> int | None:
        """The in-sync replica the selector prefers for this consumer, if it is not us."""
        racks = {b.id: b.rack for b in image.brokers.values() if not b.fenced}
        leader, cands = candidates_for(fetch_offset, st.isr, st.follower_end_offsets, racks, self.broker_id,
                                       lg.log_end_offset)
        chosen = selector.select(client_rack, leader, cands)
        if chosen == self.broker_id or chosen < 0:
            return None
        log.debug("%s-%d: consumer in rack %s at offset %d -> preferred read replica %d", st.topic, st.partition,
                  client_rack, fetch_offset, chosen)
        return chosen

    # --- ListOffsets / OffsetForLeaderEpoch ------------------------------------------------------
    async def list_offsets(self, ctx, body, ver):
        req = self.decode(ctx, body, ver)
        topics = []
        for t in req.topics:
            parts = []
            allowed = self.authorize(ctx, Op.DESCRIBE, RT.TOPIC, t.name)
            for p in t.partitions:
                res = {"partition_index": p.partition_index, "error_code": 0, "timestamp": -1, "offset": -1,
                       "leader_epoch": -1}
                parts.append(res)
                try:
                    if not allowed:
                        raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                    part = self.replicas.leader_partition((t.name, p.partition_index))
                    if ver >= 4:
                        bad = part.state.check_leader_epoch(p.current_leader_epoch)
                        if bad:
                            raise KafkaError(ErrorCode[bad])
                    await self._list_offset(part, p.timestamp, req.isolation_level if ver >= 2 else 0,
                                            req.replica_id, res)
                except KafkaError as e:
                    res["error_code"] = e.code
            topics.append({"name": t.name, "partitions": parts})
        return {"throttle_time": 0, "topics": topics}

    async def _list_offset(self, part, ts: int, isolation: int, replica_id: int, res: dict) -> None:
        lg, st = part.log, part.state
        hw = st.high_watermark if replica_id < 0 else lg.log_end_offset
        cache = lg.leader_epoch_cache
        if ts == LATEST:
            res["offset"] = hw
            res["leader_epoch"] = cache.latest_epoch() if cache.latest_epoch() is not None else -1
        elif ts in (EARLIEST, EARLIEST_LOCAL):
            res["offset"] = lg.log_start_offset
            e = cache.epoch_for_offset(lg.log_start_offset)
            res["leader_epoch"] = e if e is not None else -1
        elif ts == MAX_TIMESTAMP:
            mts, moff = await lg.max_timestamp_and_offset_async()  # decodes a batch in a thread
            if moff >= 0 and moff < hw:
                res["timestamp"], res["offset"] = mts, moff
                e = cache.epoch_for_offset(moff)
                res["leader_epoch"] = e if e is not None else -1
        elif ts == LATEST_TIERED:
            res["offset"] = -1
        elif ts < 0:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown special timestamp {ts}")
        else:
            found = await lg.offset_for_timestamp_async(ts)  # decodes a batch in a thread
            if found is not None and found[0] < hw:
                res["offset"], res["timestamp"] = found[0], found[1]
                e = cache.epoch_for_offset(found[0])
                res["leader_epoch"] = e if e is not None else -1

    async def offset_for_leader_epoch(self, ctx, body, ver):
        req = self.decode(ctx, body, ver)
        replica_id = req.replica_id if ver >= 3 else -1  # replica_id is v3+ (consumers send v2)
        topics = []
        cluster_denied = replica_id >= 0 and not self.authorize_cluster(ctx, Op.CLUSTER_ACTION)
        for t in req.topics:
            parts = []
            auth_error = (ErrorCode.CLUSTER_AUTHORIZATION_FAILED if cluster_denied else
                          0 if replica_id >= 0 or self.authorize(ctx, Op.DESCRIBE, RT.TOPIC, t.topic)
                          else ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            for p in t.partitions:
                res = {"partition": p.partition, "error_code": 0, "leader_epoch": -1, "end_offset": -1}
                parts.append(res)
                try:
                    if auth_error:
                        raise KafkaError(auth_error)
                    part = self.replicas.partitions.get((t.topic, p.partition))
                    if part is None:
                        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    if replica_id < 0 and not part.state.is_leader:
                        raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                    bad = part.state.check_leader_epoch(p.current_leader_epoch)
                    if bad:
                        raise KafkaError(ErrorCode[bad])
                    epoch, end = part.log.leader_epoch_cache.end_offset_for(p.leader_epoch, part.log.log_end_offset)
                    res["leader_epoch"], res["end_offset"] = epoch, end
                except KafkaError as e:
                    res["error_code"] = e.code
            topics.append({"topic": t.topic, "partitions": parts})
        return {"throttle_time": 0, "topics": topics}

    # --- InitProducerId ----------------------------------------------------------------------------
    async def init_producer_id(self, ctx, body, ver):
        req = self.decode(ctx, body, ver)
        if req.transactional_id is None and self.authorizer is not None and not (
                self.authorize_cluster(ctx, Op.IDEMPOTENT_WRITE) or self.authorizer.authorize_by_resource_type(
                    getattr(ctx, "principal", ANONYMOUS), ctx.client_host, Op.WRITE, RT.TOPIC)):
            return {"throttle_time": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "producer_id": -1,
                    "producer_epoch": -1}
        if req.transactional_id is not None and not self.authorize(ctx, Op.WRITE, RT.TRANSACTIONAL_ID,
                                                                   req.transactional_id):
            return {"throttle_time": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    "producer_id": -1, "producer_epoch": -1}
        if req.transactional_id is not None:
            return {"throttle_time": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    "producer_id": -1, "producer_epoch": -1}
        try:
            pid = await self.producer_ids.next_id()
        except KafkaError as e:
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE if e.code == ErrorCode.NOT_CONTROLLER else e.code
            return {"throttle_time": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}
        return {"throttle_time": 0, "error_code": 0, "producer_id": pid, "producer_epoch": 0}

    # --- admin -------------------------------------------------------------------------------------
    async def create_topics(self, ctx, body, ver):
        req = self.decode(ctx, body, ver)
        too_large = _too_large_create_topics(req.topics, self.config["num.partitions"])
        if too_large:  # refused whole before any work, as the controller would (metadata/controller_api.py)
            return {"throttle_time": 0, "topics": [{"name": t.name, "error_code": ErrorCode.POLICY_VIOLATION,
                                                    "error_message": too_large} for t in req.topics]}
        new = []
        out = []
        # CREATE on the cluster allows every topic; otherwise CREATE on each topic is needed
        cluster_create = self.authorize_cluster(ctx, Op.CREATE)
        for t in req.topics:
            if t.name in RESERVED_TOPICS:  # Kafka's answer for __cluster_metadata, for every internal topic
                out.append({"name": t.name, "error_code": ErrorCode.INVALID_REQUEST,
                            "error_message": f"Creation of internal topic {t.name} is prohibited."})
                continue
            if not cluster_create and not self.authorize(ctx, Op.CREATE, RT.TOPIC, t.name):
                out.append({"name": t.name, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                            "error_message": "Authorization failed."})
                continue
            assignments = {a.partition_index: list(a.broker_ids) for a in t.assignments} or None
            new.append(NewTopic(t.name, t.num_partitions, t.replication_factor, assignments,
                                {c.name: c.value for c in t.configs}))
        try:
            results = await self.controller.create_topics(new, req.validate_only if ver >= 1 else False) if new else []
        except KafkaError as e:
            return {"throttle_time": 0, "topics": out + [
                {"name": t.name, "error_code": e.code, "error_message": e.message} for t in new]}
        for res in results:
            entry: dict[str, Any] = {"name": res.name, "error_code": res.error, "error_message": res.message,
                                     "topic_id": res.topic_id, "num_partitions": res.num_partitions,
                                     "replication_factor": res.replication_factor}
            if res.error == ErrorCode.NONE and not self.authorize(ctx, Op.DESCRIBE_CONFIGS, RT.TOPIC, res.name):
                entry["topic_config_error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif res.error == ErrorCode.NONE:
                cfg = self._effective_topic_config(res.configs)
                entry["configs"] = [{"name": k, "value": v, "read_only": False,
                                     "config_source": 1 if k in res.configs else 5, "is_sensitive": False}
                                    for k, v in cfg]
            out.append(entry)
        return {"throttle_time": 0, "topics": out}

    async def delete_topics(self, ctx, body, ver):
        req = self.decode(ctx, body, ver)
        if ver >= 6:
            names = [t.name for t in req.topics]
            ids = [t.topic_id if t.name is None else None for t in req.topics]
        else:
            names = list(req.topic_names)
            ids = [None] * len(names)
        if len(names) > MAX_RECORDS_PER_USER_OP:  # one record per topic: more cannot be one operation
            return {"throttle_time": 0, "responses": [
                {"name": n, "topic_id": i, "error_code": ErrorCode.POLICY_VIOLATION, "error_message": TOO_MANY_RECORDS}
                for n, i in zip(names, ids, strict=True)]}
        if not self.config["delete.topic.enable"]:
            return {"throttle_time": 0, "responses": [
                {"name": n, "topic_id": i, "error_code": ErrorCode.TOPIC_DELETION_DISABLED} for n, i in zip(names, ids,
                                                                                                          strict=True)]}
        denied = []
        if self.authorizer is not None:
            image = self.image
            keep_names, keep_ids = [], []
            for n, i in zip(names, ids, strict=True):
                name = n
                if n is None and i is not None:
                    t = image.topics_by_id.get(i)
                    name = t.name if t else None
                    if name is not None and not self.authorize(ctx, Op.DESCRIBE, RT.TOPIC, name):
                        denied.append({"name": None, "topic_id": i, "error_code": ErrorCode.UNKNOWN_TOPIC_ID})
                        continue
                if name is not None and not self.authorize(ctx, Op.DELETE, RT.TOPIC, name):
                    denied.append({"name": n, "topic_id": i, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED})
                    continue
                keep_names.append(n)
                keep_ids.append(i)
            names, ids = keep_names, keep_ids
        keep_names, keep_ids = [], []
        for n, i in zip(names, ids, strict=True):
            t = self.image.topics_by_name.get(n) if n is not None else self.image.topics_by_id.get(i)
            if t is not None and t.name in INTERNAL_TOPICS:  # as Kafka's DeleteRecords on an internal topic
                denied.append({"name": t.name, "topic_id": i, "error_code": ErrorCode.INVALID_TOPIC_EXCEPTION,
                               "error_message": f"Cannot delete internal topic {t.name}"})
                continue
            keep_names.append(n)
            keep_ids.append(i)
        names, ids = keep_names, keep_ids
        try:
            recs_results = await self.controller.delete_topics(names, ids) if names else []
        except KafkaError as e:
            return {"throttle_time": 0, "responses": denied + [{"name": n, "topic_id": i, "error_code": e.code}
                                                               for n, i in zip(names, ids, strict=True)]}
        return {"throttle_time": 0, "responses": denied + [
            {"name": n, "topic_id": i, "error_code": code, "error_message": msg} for n, i, code, msg in recs_results]}

    async def create_partitions(self, ctx, body, ver):
        req = self.decode(ctx, body, ver)
        image = self.image
        added = sum(max(0, t.count - len(image.topics_by_name[t.name].partitions)) for t in req.topics
                    if t.name in image.topics_by_name)
        too_large = (TOO_MANY_PARTITIONS if added > MAX_PARTITIONS_PER_BATCH else  # as Kafka (KAFKA-19673)
                     TOO_MANY_RECORDS if len(req.topics) > MAX_RECORDS_PER_USER_OP else None)
        if too_large:  # the request as a whole
            return {"throttle_time": 0, "results": [
                {"name": t.name, "error_code": ErrorCode.POLICY_VIOLATION, "error_message": too_large}
                for t in req.topics]}
        results = []
        for t in req.topics:
            res = {"name": t.name, "error_code": 0, "error_message": None}
            results.append(res)
            try:
                if not self.authorize(ctx, Op.ALTER, RT.TOPIC, t.name):
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                if t.name in INTERNAL_TOPICS:  # e.g. __consumer_offsets: a group's partition is hash % count
                    raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                     f"Cannot change the number of partitions of internal topic {t.name}")
                assignments = [list(a.broker_ids) for a in t.assignments] if t.assignments else None
                await self.controller.create_partitions(t.name, t.count, assignments, req.validate_only)
            except KafkaError as e:
                res["error_code"], res["error_message"] = e.code, e.message
        return {"throttle_time": 0, "results": results}

    def _effective_topic_config(self, overrides: dict[str, str]) -> list[tuple[str, str | None]]:
        out = []
        for k in sorted(TOPIC_KEYS):
            if k in overrides:
                out.append((k, overrides[k]))
            else:
                out.append((k, _config_str(self._topic_defaults.get(k))))
        return out

    async def describe_configs(self, ctx, body, ver):
        req = self.decode(ctx, body, ver)
        image = self.image
        results = []
        for res in req.resources:
            entry: dict[str, Any] = {"error_code": 0, "error_message": None, "resource_type": res.resource_type,
                                     "resource_name": res.resource_name, "configs": []}
            results.append(entry)
            wanted = set(res.configuration_keys) if res.configuration_keys else None
            if res.resource_type == 2 and not self.authorize(ctx, Op.DESCRIBE_CONFIGS, RT.TOPIC, res.resource_name):
                entry["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if res.resource_type == 4 and not self.authorize_cluster(ctx, Op.DESCRIBE_CONFIGS):
                entry["error_code"] = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                continue
            if res.resource_type == 2:
                if res.resource_name not in image.topics_by_name:
                    entry["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    entry["error_message"] = f"Topic {res.resource_name} does not exist"
                    continue
                overrides = image.topic_config(res.resource_name)
                for k, v in self._effective_topic_config(overrides):
                    if wanted is not None and k not in wanted:
                        continue
                    broker_key = next((b.name for b in KEYS.values() if b.topic_key == k), None)
                    if k in overrides:
                        source = 1
                    elif broker_key and broker_key in self.config.explicit:
                        source = 4
                    else:
                        source = 5
                    synonyms = []
                    if req.include_synonyms:
                        if k in overrides:
                            synonyms.append({"name": k, "value": v, "source": 1})
                        if broker_key:
                            synonyms.append({"name": broker_key, "value": _config_str(self._topic_defaults.get(k)),
                                             "source": 4 if broker_key in self.config.explicit else 5})
                    entry["configs"].append({"name": k, "value": v, "read_only": False, "config_source": source,
                                             "is_sensitive": False, "synonyms": synonyms,
                                             "config_type": _config_type(TOPIC_KEYS[k])})
            elif res.resource_type == 4:
                if res.resource_name not in ("", str(self.broker_id)):
                    entry["error_code"] = ErrorCode.INVALID_REQUEST
                    entry["error_message"] = f"unexpected broker id {res.resource_name}, expected {self.broker_id}"
                    continue
                # every declared key, and the listener-prefixed ones that were set (as Kafka lists them)
                listener_keys = [k for k in self.config.explicit if k.startswith("listener.name.")
                                 and k not in KEYS and k not in self.config.unknown]
                for k in sorted([*KEYS, *listener_keys]):
                    if wanted is not None and k not in wanted:
                        continue
                    v = _config_str(self.config[k]) if k in KEYS else self.config.explicit[k]
                    entry["configs"].append(self._broker_config_entry(
                        k, v, _config_type(KEYS[k]) if k in KEYS else 2, req.include_synonyms))
            else:
                entry["error_code"] = ErrorCode.INVALID_REQUEST
                entry["error_message"] = f"unsupported resource type {res.resource_type}"
        return {"throttle_time": 0, "results": results}

    def _broker_config_entry(self, name: str, value: str | None, config_type: int, synonyms: bool) -> dict:
        """A DescribeConfigs entry of a static broker key. A secret (a PASSWORD-type key, or one
        named like it) has a null value, also in its synonyms, and is marked sensitive, as in Kafka."""
        source = 4 if name in self.config.explicit else 5
        sensitive = is_sensitive(name)
        if sensitive:
            value, config_type = None, 9  # ConfigType PASSWORD
        return {"name": name, "value": value, "read_only": True, "config_source": source, "is_sensitive": sensitive,
                "synonyms": [{"name": name, "value": value, "source": source}] if synonyms else [],
                "config_type": config_type}

    async def incremental_alter_configs(self, ctx, body, ver):
        req = self.decode(ctx, body, ver)
        return await self._alter_configs(req, lambda res: [(c.name, c.config_operation, c.value) for c in res.configs],
                                         ctx)

    async def alter_configs(self, ctx, body, ver):
        """The legacy, non-incremental AlterConfigs replaces a topic's whole set of overrides."""
        req = self.decode(ctx, body, ver)
        image = self.image

        def ops(res):
            new = {c.name: c.value for c in res.configs}
            return [(k, 1, None) for k in image.topic_config(res.resource_name) if k not in new] + [
                (k, 0, v) for k, v in new.items()]
        return await self._alter_configs(req, ops, ctx)

    async def _alter_configs(self, req, ops_of, ctx=None) -> dict:
        out = []
        too_many = len(req.resources) > MAX_RECORDS_PER_USER_OP  # one record per config at least
        for res in req.resources:
            entry = {"error_code": 0, "error_message": None, "resource_type": res.resource_type,
                     "resource_name": res.resource_name}
            out.append(entry)
            try:
                if too_many or len(res.configs) > MAX_RECORDS_PER_USER_OP:
                    raise KafkaError(ErrorCode.POLICY_VIOLATION, TOO_MANY_RECORDS)
                if ctx is not None and res.resource_type == 2 and not self.authorize(
                        ctx, Op.ALTER_CONFIGS, RT.TOPIC, res.resource_name):
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                if ctx is not None and res.resource_type == 4 and not self.authorize_cluster(ctx, Op.ALTER_CONFIGS):
                    raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                if res.resource_type != 2:
                    raise KafkaError(ErrorCode.INVALID_REQUEST,
                                     "only topic configs can be altered; dynamic broker configs are not supported")
                await self.controller.alter_topic_configs(res.resource_name, ops_of(res), req.validate_only)
            except KafkaError as e:
                entry["error_code"], entry["error_message"] = e.code, e.message
        return {"throttle_time": 0, "responses": out}

    async def describe_cluster(self, ctx, body, ver):
        req = self.decode(ctx, body, ver)
        image = self.image
        if ver >= 1 and req.endpoint_type not in (1,):
            return {"throttle_time": 0, "error_code": ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                    "error_message": "only broker endpoints (1) are served", "endpoint_type": req.endpoint_type,
                    "cluster_id": image.cluster_id or "", "controller_id": -1, "brokers": []}
        alive = self._alive_brokers(image, ctx.listener)
        return {"throttle_time": 0, "error_code": 0, "error_message": None, "endpoint_type": 1,
                "cluster_id": image.cluster_id or "", "controller_id": self._controller_id(alive),
                "brokers": alive, "cluster_authorized_operations": (
                    self.authorized_operations(ctx, RT.CLUSTER, CLUSTER_NAME) if req.include_cluster_authorized_operations
                    else -2147483648)}


def _too_large_create_topics(topics, default_partitions: int) -> str | None:
    """Kafka's message if a CreateTopics cannot be one controller operation: more than
    MAX_PARTITIONS_PER_BATCH partitions in all (Kafka's check), or more topics than records."""
    if too_many_partitions(topics, default_partitions):
        return TOO_MANY_PARTITIONS
    return TOO_MANY_RECORDS if len(topics) > MAX_RECORDS_PER_USER_OP else None


def _config_str(v) -> str | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return ",".join(str(x) if not hasattr(x, "port") else f"{x.name}://{x.host}:{x.port}" for x in v)
    if isinstance(v, dict):
        return ",".join(f"{k}:{x}" for k, x in v.items())
    return str(v)


def _config_type(key) -> int:
    name = getattr(key.parse, "__name__", "")
    return {"_bool": 1, "_int": 5, "_list": 7}.get(name, 2)


__all__ = ["KafkaApis", "ConfigError"]
