"""Handlers of ApiVersions, Metadata and DescribeCluster: what a client learns about the
cluster before anything else (brokers, controller, topics and their leaders, versions)."""

from __future__ import annotations

import logging
import re

from broker.apis.quorum_apis import supported_features
from broker.group.coordinator import OFFSETS_TOPIC
from broker.protocol import codec
from broker.protocol.apis import SUPPORTED, ApiKey
from broker.txn.coordinator import TXN_TOPIC
from common.errors import ErrorCode, KafkaError
from common.topic_names import INTERNAL_TOPICS, RESERVED_TOPICS, validate_topic_name
from metadata.acl import CLUSTER_NAME
from metadata.acl import AclOperation as Op
from metadata.acl import ResourceType as RT
from metadata.controller_api import (
    NewTopic,
)
from metadata.image import MetadataImage

log = logging.getLogger("krafty.apis")

# the Metadata answers kept (MetadataApis.metadata): requests of at most this many bytes,
# answers of at most this many, this many answers per metadata image
_CACHED_REQUEST_MAX = 4096
_CACHED_ANSWER_MAX = 256 * 1024
_CACHED_ANSWERS = 256


class MetadataAnswers:
    """Encoded Metadata answers of one metadata image (see MetadataApis.metadata)."""

    __slots__ = ("image", "answers")

    def __init__(self) -> None:
        self.image = None
        self.answers: dict[tuple, tuple[bytes, object]] = {}


_SOFTWARE_RE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


class MetadataApis:
    """Mixin of KafkaApis (broker/apis/kafka_apis.py): uses its image, config, controller, authorizer."""

    # --- ApiVersions ------------------------------------------------------------------------
    def _api_versions_body(self, ver: int, error: int = 0):
        image = self.image
        finalized = sorted((n, lv) for n, lv in image.features.items() if lv > 0)
        return codec.build_response(ApiKey.API_VERSIONS, ver, {
            "error_code": error,
            "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                         for k, (lo, hi) in sorted(SUPPORTED.items())],
            "throttle_time": 0,
            "supported_features": supported_features(),
            # the metadata offset the finalized levels were read at (Kafka: its image's)
            "finalized_features_epoch": image.offset if finalized else -1,
            "finalized_features": [{"name": n, "max_version_level": lv, "min_version_level": lv}
                                   for n, lv in finalized],
        })

    async def api_versions(self, ctx, body, ver):
        req = self.decode(ctx, body, ver)
        if ver >= 3 and not (_SOFTWARE_RE.fullmatch(req.client_software_name or "")
                             and _SOFTWARE_RE.fullmatch(req.client_software_version or "")):
            return self._api_versions_body(ver, ErrorCode.INVALID_REQUEST)
        return self._api_versions_body(ver)

    # --- Metadata -----------------------------------------------------------------------------
    def _alive_brokers(self, image: MetadataImage, listener: str, id_key: str = "node_id") -> list[dict]:
        """Unfenced brokers with an endpoint on ``listener``; the id under ``id_key`` (Metadata
        calls it node_id, DescribeCluster broker_id)."""
        out = []
        for b in sorted(image.brokers.values(), key=lambda b: b.id):
            if b.fenced:
                continue
            ep = b.endpoint(listener)
            if ep is not None:
                out.append({id_key: b.id, "host": ep.host, "port": ep.port, "rack": b.rack})
        return out

    def _controller_id(self, alive: list[dict], id_key: str = "node_id") -> int:
        ids = [b[id_key] for b in alive]
        if self.broker_id in ids:
            return self.broker_id
        return self.rng.choice(ids) if ids else -1

    def _topic_metadata(self, image: MetadataImage, t) -> dict:
        parts = []
        for pid in sorted(t.partitions):
            p = t.partitions[pid]
            offline = [r for r in p.replicas if r not in image.brokers or image.brokers[r].fenced or r in p.offline]
            leader_ok = p.leader >= 0 and p.leader in image.brokers and not image.brokers[p.leader].fenced
            parts.append({
                "error_code": ErrorCode.NONE if leader_ok else ErrorCode.LEADER_NOT_AVAILABLE,
                "partition_index": pid, "leader_id": p.leader if leader_ok else -1,
                "leader_epoch": p.leader_epoch, "replica_nodes": list(p.replicas), "isr_nodes": list(p.isr),
                "offline_replicas": offline,
            })
        return {"error_code": ErrorCode.NONE, "name": t.name, "topic_id": t.topic_id,
                "is_internal": t.name in INTERNAL_TOPICS, "partitions": parts}

    @staticmethod
    def _topic_error(code: int, name: str | None, topic_id=None) -> dict:
        """A topic entry that failed: no partitions (Kafka's MetadataResponse.prepareResponse)."""
        entry = {"error_code": code, "name": name, "is_internal": name in INTERNAL_TOPICS, "partitions": []}
        if topic_id is not None:
            entry["topic_id"] = topic_id
        return entry

    async def metadata(self, ctx, body, ver):
        """Metadata. Clients ask the same question again and again (librdkafka every
        topic.metadata.refresh.interval.ms and on every leader change, per topic): an answer
        that changed nothing (no topic auto-created) is kept for the same request bytes, version,
        listener and (with an authorizer) principal and host until the metadata image changes,
        and sent again without decoding the request or building the answer."""
        image = self.image
        key = (ver, bytes(body), ctx.listener, *((ctx.principal, ctx.client_host) if self.authorizer else ())) \
            if len(body) <= _CACHED_REQUEST_MAX else None
        cache = self._metadata_cache
        if cache.image is not image:
            cache.image = image
            cache.answers.clear()
        if key is not None and (hit := cache.answers.get(key)) is not None:
            if self.metrics is not None:
                self.metrics.count_errors(ApiKey.METADATA, hit[1])
            return [hit[0]]
        data, cacheable = await self._metadata(ctx, body, ver)
        obj = codec.build_response(ApiKey.METADATA, ver, data)
        encoded = codec.encode_response(ApiKey.METADATA, ver, obj)
        if self.metrics is not None:
            self.metrics.count_errors(ApiKey.METADATA, obj)
        if key is not None and cacheable and cache.image is self.image and len(encoded) <= _CACHED_ANSWER_MAX:
            if len(cache.answers) >= _CACHED_ANSWERS:
                cache.answers.clear()
            cache.answers[key] = (encoded, obj)
        return [encoded]

    async def _metadata(self, ctx, body, ver) -> tuple[dict, bool]:
        """The Metadata answer, and whether it may be kept (nothing was created for it)."""
        req = self.decode(ctx, body, ver)
        image = self.image
        cacheable = True
        allow_auto = (req.allow_auto_topic_creation if ver >= 4 else True) and self.config["auto.create.topics.enable"]
        topics_out = []
        if req.topics is None or (ver == 0 and not req.topics):
            # topics the principal may not describe are left out, as if they did not exist
            topics_out = [self._topic_metadata(image, t) for t in sorted(image.topics_by_name.values(),
                                                                          key=lambda t: t.name)
                          if self.authorize(ctx, Op.DESCRIBE, RT.TOPIC, t.name)]
        else:
            to_create = []
            seen: set = set()
            for rt in req.topics:
                name = getattr(rt, "name", None)
                tid = getattr(rt, "topic_id", None)
                # each topic once, as Kafka answers (a set of the names): a request naming one
                # topic 100,000 times in 1 MB would otherwise build its partitions 100,000 times
                key = name if name is not None else tid
                if key in seen:
                    continue
                seen.add(key)
                if name is None and tid is not None and tid.int != 0:
                    t = image.topics_by_id.get(tid)
                    if t is not None and not self.authorize(ctx, Op.DESCRIBE, RT.TOPIC, t.name):
                        topics_out.append(self._topic_error(ErrorCode.TOPIC_AUTHORIZATION_FAILED, None, tid))
                        continue
                    topics_out.append(self._topic_metadata(image, t) if t else
                                      self._topic_error(ErrorCode.UNKNOWN_TOPIC_ID, None, tid))
                    continue
                if not self.authorize(ctx, Op.DESCRIBE, RT.TOPIC, name):
                    # not even whether it exists is disclosed
                    topics_out.append(self._topic_error(ErrorCode.TOPIC_AUTHORIZATION_FAILED, name))
                    continue
                t = image.topics_by_name.get(name)
                if t is not None:
                    topics_out.append(self._topic_metadata(image, t))
                    continue
                try:
                    validate_topic_name(name)
                except KafkaError:
                    topics_out.append(self._topic_error(ErrorCode.INVALID_TOPIC_EXCEPTION, name))
                    continue
                if allow_auto:
                    if not (self.authorize_cluster(ctx, Op.CREATE) or self.authorize(ctx, Op.CREATE, RT.TOPIC, name)):
                        topics_out.append(self._topic_error(ErrorCode.TOPIC_AUTHORIZATION_FAILED, name))
                        continue
                    cacheable = False
                    # the coordinators' topics with their own configs, as Kafka's AutoTopicCreationManager does
                    if name == OFFSETS_TOPIC:
                        await self.group_coordinator.ensure_offsets_topic()
                    elif name == TXN_TOPIC:
                        await self.txn_coordinator.ensure_topic()
                    elif name not in RESERVED_TOPICS:  # other internal topics: only by their coordinators
                        to_create.append(name)
                topics_out.append(self._topic_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name))
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
               "controller_id": self._controller_id(alive), "topics": topics_out, "error_code": 0}
        if ver >= 8 and req.include_topic_authorized_operations:
            for entry in topics_out:
                if entry.get("error_code") == ErrorCode.NONE and entry.get("name"):
                    entry["topic_authorized_operations"] = self.authorized_operations(ctx, RT.TOPIC, entry["name"])
        if 8 <= ver <= 10 and req.include_cluster_authorized_operations:
            out["cluster_authorized_operations"] = self.authorized_operations(ctx, RT.CLUSTER, CLUSTER_NAME)
        return out, cacheable

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


    async def describe_cluster(self, ctx, body, ver):
        req = self.decode(ctx, body, ver)
        image = self.image
        if ver >= 1 and req.endpoint_type not in (1,):
            return {"throttle_time": 0, "error_code": ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                    "error_message": "only broker endpoints (1) are served", "endpoint_type": req.endpoint_type,
                    "cluster_id": image.cluster_id or "", "controller_id": -1, "brokers": []}
        alive = self._alive_brokers(image, ctx.listener, "broker_id")
        return {"throttle_time": 0, "error_code": 0, "error_message": None, "endpoint_type": 1,
                "cluster_id": image.cluster_id or "", "controller_id": self._controller_id(alive, "broker_id"),
                "brokers": alive, "cluster_authorized_operations": (
                    self.authorized_operations(ctx, RT.CLUSTER, CLUSTER_NAME) if req.include_cluster_authorized_operations
                    else -2147483648)}
