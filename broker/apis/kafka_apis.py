"""Request dispatch: api key -> handler. Handlers are written once for every version they
serve; generated (kio) types carry the version differences, except on the Produce and
Fetch hot paths (broker/apis/wire.py)."""

from __future__ import annotations

import asyncio
import logging

from broker.apis.admin_apis import AdminApis
from broker.apis.broker_config_apis import BrokerConfigApis
from broker.apis.consumer_group_apis import ConsumerGroupApis
from broker.apis.fetch_apis import FetchApis
from broker.apis.group_apis import GroupApis
from broker.apis.group_config_apis import GroupConfigApis
from broker.apis.loopback import LoopbackConnection
from broker.apis.metadata_apis import MetadataAnswers, MetadataApis
from broker.apis.offset_apis import OffsetApis
from broker.apis.ops_apis import PartitionOpsApis
from broker.apis.produce_apis import CloseConnection, ProduceApis
from broker.apis.producer_apis import ProducerApis, ProducerIdAllocator
from broker.apis.quorum_apis import QuorumApis
from broker.apis.share_apis import ShareApis
from broker.apis.txn_apis import TxnApis
from broker.apis.txn_data_apis import TxnDataApis
from broker.fetch_session import FetchSessionCache
from broker.group.coordinator import GroupCoordinator
from broker.protocol import codec
from broker.protocol.apis import SUPPORTED, ApiKey
from broker.replica.manager import ReplicaManager
from broker.replica.selector import make_selector
from broker.security.acl_apis import AclApis
from broker.security.authorizer import ANONYMOUS, make_authorizer
from broker.security.quotas import ClientQuotas, user_of
from broker.security.scram_apis import ScramApis
from broker.server import RequestContext
from broker.share.coordinator import ShareCoordinator
from broker.share.manager import SharePartitionManager
from broker.share.persister import SharePersister
from broker.txn.coordinator import TransactionCoordinator
from common.clock import SYSTEM, Clock
from common.config import Config, ConfigError, topic_defaults
from common.errors import ErrorCode, KafkaError
from metadata.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS
from metadata.acl import AclOperation as Op
from metadata.acl import ResourceType as RT
from metadata.image import MetadataImage

log = logging.getLogger("krafty.apis")


class KafkaApis(MetadataApis, ProduceApis, FetchApis, OffsetApis, ProducerApis, AdminApis, BrokerConfigApis,
                GroupConfigApis):
    """Every API of the broker: the families live in their own modules (mixins); this class
    holds the shared state (config, image, replica manager, authorizer, quotas), the
    authorization helpers and the dispatch."""

    def __init__(self, config: Config, broker_id: int, loader, replicas: ReplicaManager, controller,
                 clock: Clock = SYSTEM):
        self.config = config
        # deadlines and quotas on clock.monotonic; fetch sessions idle by monotonic ms too
        self.clock = clock
        self.broker_id = broker_id
        self.loader = loader
        self.replicas = replicas
        self.controller = controller
        self.producer_ids = ProducerIdAllocator(controller, broker_id)
        self.rng = clock.rng
        self._topic_defaults = topic_defaults(config)
        try:
            self.replica_selector = make_selector(config["replica.selector.class"])
        except ValueError as e:
            raise ConfigError(str(e)) from None
        self._metadata_cache = MetadataAnswers()  # Metadata answers of the current image (metadata_apis.py)
        self.fetch_sessions = FetchSessionCache(self.rng, config["max.incremental.fetch.session.cache.slots"])
        replicas.news = self._partition_news  # what moved, for the sessions' incremental reads (fetch_apis.py)
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
        self.group_coordinator = GroupCoordinator(config, broker_id, replicas, loader, controller, clock)
        self.handlers.update(GroupApis(self, self.group_coordinator).handlers())
        self.handlers.update(ConsumerGroupApis(self, self.group_coordinator).handlers())  # KIP-848
        # share groups (KIP-932, broker/share): the share coordinator on __share_group_state, the
        # share partitions this broker leads, and their handlers (broker/apis/share_apis.py)
        self.share_coordinator = ShareCoordinator(config, broker_id, replicas, loader, controller, clock)
        self.share_persister = SharePersister(self.share_coordinator, loader, replicas.fetchers, broker_id, clock=clock)
        self.share_partitions = SharePartitionManager(config, broker_id, replicas, loader, self.share_persister, clock)
        self.share_apis = ShareApis(self, self.group_coordinator, self.share_coordinator, self.share_persister,
                                    self.share_partitions)
        self.handlers.update(self.share_apis.handlers())
        self.txn_data_apis = TxnDataApis(self, clock)
        self.handlers.update(self.txn_data_apis.handlers())  # WriteTxnMarkers, DescribeProducers
        # the transaction coordinator (broker/txn) and its handlers (broker/apis/txn_apis.py)
        self.txn_coordinator = TransactionCoordinator(config, broker_id, replicas, loader, controller, self.producer_ids,
                                                      clock)
        self.txn_apis = TxnApis(self, self.txn_coordinator)
        self.handlers.update(self.txn_apis.handlers())
        # WriteTxnMarkers / AddPartitionsToTxn v4+ that this broker sends to itself: in process
        loopback = LoopbackConnection(self, broker_id)
        self.txn_coordinator.markers.local = replicas.txn_verifier.local = loopback
        replicas.txn_verifier.local_broker_id = broker_id
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
        self.handlers.update(PartitionOpsApis(self).handlers())  # DeleteRecords (broker/apis/ops_apis.py)
        self.handlers.update(QuorumApis(self).handlers())  # UpdateFeatures (broker/apis/quorum_apis.py)
        self.metrics = None  # broker.metrics.BrokerMetrics when metrics are served (krafty.metrics.port)

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
        now = self.clock.monotonic()
        ms = q.record(key, user_of(getattr(ctx, "principal", ANONYMOUS)), ctx.header.client_id or "", nbytes, now)
        if ms > 0:
            ctx.throttle_ms = ms  # ThrottleTimeMs of the request metrics
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
            if until is not None and until > self.clock.monotonic():
                await asyncio.sleep(until - self.clock.monotonic())
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
        if self.metrics is not None and key != ApiKey.PRODUCE and not isinstance(result, list):
            self.metrics.count_errors(key, result)  # (Produce and Fetch count theirs as they go)
        if isinstance(result, list):
            return [codec.response_header(key, ver, h.correlation_id), *result]
        if isinstance(result, dict):
            try:
                result = codec.build_response(key, ver, result)
            except codec.MessageBuildError:  # a handler bug: say so, and answer as for any other bug
                log.exception("error building the %s v%d response", ApiKey(key).name, ver)
                result = codec.error_response(key, ver, ErrorCode.UNKNOWN_SERVER_ERROR)
        return self._frame_obj(ctx, result)

    def _frame_obj(self, ctx, obj) -> list:
        h = ctx.header
        return [codec.response_header(h.api_key, h.api_version, h.correlation_id),
                codec.encode_response(h.api_key, h.api_version, obj)]

    def _frame(self, ctx, version: int, obj) -> list:
        return [codec.response_header(ctx.header.api_key, version, ctx.header.correlation_id), codec.encode(obj)]

    def decode(self, ctx, body, ver):
        try:
            return codec.decode_request(ctx.header.api_key, ver, bytes(body), 0)
        except Exception as e:
            raise codec.FramingError(f"cannot decode {ApiKey(ctx.header.api_key).name} v{ver}: {e}") from None


__all__ = ["KafkaApis", "ConfigError"]
