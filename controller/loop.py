"""The active quorum controller: one asyncio event loop over the metadata log.

Each write is a pure manager call ``image -> (records, result)`` (controller/topics.py
and friends) on the latest image: the committed one with every write still in flight
replayed on top (the speculative image). The records are proposed to the metadata log at
once, and the caller is answered once they are committed and replayed into the committed
image, so no caller ever sees state that could still be lost. On resignation the
speculative image is dropped (that is the revert). Standby controllers replay the log."""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import Callable
from typing import Any

from common.clock import SYSTEM, Clock
from common.errors import ErrorCode, KafkaError
from common.metrics import Histogram
from controller import acls as acl_ops
from controller import cluster as cluster_ops
from controller import configs as config_ops
from controller import features as feature_ops
from controller import reassignment as reassignment_ops
from controller import replication as replication_ops
from controller import scram as scram_ops
from controller import topics as topic_ops
from metadata import records as r
from metadata.delta import MetadataDelta
from metadata.features import bootstrap_feature_records
from metadata.image import MetadataImage
from metadata.loader import MetadataLoader
from raft.api import NotLeaderError

log = logging.getLogger("krafty.controller")

PRODUCER_ID_BLOCK_SIZE = 1000



def _outcome_read(fut: asyncio.Future) -> None:
    if not fut.cancelled():
        fut.exception()

class QuorumController:
    def __init__(self, node_id: int, metadata_log, loader: MetadataLoader, *, cluster_id: str,
                 defaults: topic_ops.TopicDefaults, rng: random.Random | None = None,
                 session_timeout_ms: int = 9000, unclean_default: bool = False,
                 auto_leader_rebalance: bool = True, rebalance_interval_s: int = 300,
                 colocated_broker_id: int | None = None, bootstrap: list | None = None, clock: Clock = SYSTEM):
        self.node_id = node_id
        # Broker sessions are timed with clock.monotonic_ms (never the wall clock: an NTP step
        # must neither fence a live broker nor keep a dead one alive)
        self.clock = clock
        self.log = metadata_log
        self.loader = loader
        self.cluster_id = cluster_id
        self.defaults = defaults
        self.rng = rng or clock.rng
        self.session_timeout_ms = session_timeout_ms
        self._fence_changes = 0  # partition changes of the fence being written (for its log line)
        self._unclean_static = unclean_default  # unclean.leader.election.enable of server.properties
        self.auto_leader_rebalance = auto_leader_rebalance
        self.rebalance_interval_s = rebalance_interval_s
        self.colocated_broker_id = colocated_broker_id  # the broker of this process (combined mode), if any
        # what the first active controller of a new cluster writes (the metadata dir's bootstrap.checkpoint)
        self.bootstrap = bootstrap if bootstrap is not None else bootstrap_feature_records()
        self.cluster = cluster_ops.ClusterState()
        self._offline_dirs: dict[int, frozenset] = {}  # broker -> the failed log dirs it last reported
        self._applied = asyncio.Event()
        self._active_tasks: list[asyncio.Task] = []
        # The epoch in which the metadata log announced us leader: it does so only once our
        # image holds every entry of earlier epochs, so writes computed on it are safe.
        self._active_epoch: int | None = None
        # The image with every proposed but not yet committed write applied (None when
        # nothing is in flight): the state the next write must see. Dropped on resignation.
        self._spec: MetadataImage | None = None
        self._spec_commit: asyncio.Future | None = None  # completes when the speculative image's last write commits
        loader.add_publisher(self._on_publish, catch_up=False)
        loader.add_leader_listener(self._on_leader_change)
        self.processing_times = Histogram(now=self.clock.monotonic())  # EventQueueProcessingTimeMs (metrics)

    # --- state ---------------------------------------------------------------------------
    def _now_ms(self) -> int:
        """The time of broker sessions: monotonic."""
        return self.clock.monotonic_ms()

    @property
    def image(self) -> MetadataImage:
        return self.loader.image

    @property
    def unclean_default(self) -> bool:
        """unclean.leader.election.enable for topics without their own: the cluster-wide dynamic
        broker config if set (IncrementalAlterConfigs on BROKER ""), else server.properties."""
        v = self.loader.image.configs.get((r.RESOURCE_BROKER, ""), {}).get("unclean.leader.election.enable")
        return self._unclean_static if v is None else v.strip().lower() == "true"

    def is_active(self) -> bool:
        leader = self.log.leader()
        return leader.leader_id == self.node_id and self._active_epoch == leader.epoch

    def _on_publish(self, delta, image) -> None:
        self._applied.set()

    def _on_leader_change(self, leader) -> None:
        for t in self._active_tasks:
            t.cancel()
        self._active_tasks = []
        self._active_epoch = leader.epoch if leader.leader_id == self.node_id else None
        self._spec = None  # uncommitted state of the previous term is gone
        if leader.leader_id == self.node_id:
            log.info("became the active controller in epoch %d", leader.epoch)
            loop = asyncio.get_running_loop()
            self._active_tasks.append(loop.create_task(self._activate()))

    async def _activate(self) -> None:
        await self._bootstrap()
        # every broker gets a fresh session: a failover must not fence anybody by itself
        self.cluster.activate(self.loader.image, self._now_ms())
        loop = asyncio.get_running_loop()
        self._active_tasks.append(loop.create_task(self._fence_timer()))
        if self.auto_leader_rebalance:
            self._active_tasks.append(loop.create_task(self._rebalance_timer()))

    async def _fence_timer(self) -> None:
        """Fences brokers whose session (broker.session.timeout.ms) expired."""
        while True:
            nxt = self.cluster.next_session_expiry_ms(self.loader.image, self.session_timeout_ms)
            delay = 1.0 if nxt is None else min(1.0, max(0.05, (nxt - self._now_ms()) / 1000))
            await asyncio.sleep(delay)
            try:
                # a write per batch of FENCE_RECORDS_PER_BATCH records: heartbeats and other writes
                # are served between them, and each waits for the previous batch's commit
                for _ in range(1000):  # 1,000,000 records at most per check: a backstop, never reached
                    if await self.write(self._fence_stale):
                        break
            except KafkaError as e:
                log.debug("fencing check skipped: %s", e)

    def _fence_stale(self, image: MetadataImage) -> tuple[list[Any], bool]:
        recs, done = cluster_ops.fence_stale_brokers_batch(image, self.cluster, self._now_ms(),
                                                           self.session_timeout_ms, self.unclean_default,
                                                           cluster_ops.FENCE_RECORDS_PER_BATCH)
        changes = sum(isinstance(x, r.PartitionChangeRecord) for x in recs)
        self._fence_changes += changes
        fences = [x.broker_id for x in recs if isinstance(x, r.BrokerRegistrationChangeRecord) and x.fenced]
        for bid in fences:  # as Kafka's controller logs it: the first thing an operator looks for after a fence
            log.info("Fencing broker %d because its session has timed out (no heartbeat for %d ms)"
                     " (%d partition changes proposed with the fence(s))", bid, self.session_timeout_ms,
                     self._fence_changes)
        if not done:
            log.debug("fencing: a batch of %d partition changes written, more to come", changes)
        if done or fences:
            self._fence_changes = 0
        return recs, done

    async def _rebalance_timer(self) -> None:
        """auto.leader.rebalance.enable: move leadership back to preferred replicas."""
        while True:
            await asyncio.sleep(self.rebalance_interval_s)
            try:
                await self.write(lambda image: (replication_ops.preferred_leader_elections(image), None))
            except KafkaError as e:
                log.debug("preferred leader election skipped: %s", e)

    async def _bootstrap(self) -> None:
        """The first active controller writes the cluster id, metadata.version and the SCRAM decoy seed."""
        def op(image: MetadataImage):
            recs = []
            if image.cluster_id is None:
                recs.append(r.ClusterIdRecord(self.cluster_id))
            if not image.features:  # a new cluster: the features its storage was formatted with
                recs += [x for x in self.bootstrap if isinstance(x, r.FeatureLevelRecord)]
            core = getattr(self.log, "core", None)
            if getattr(core, "dynamic", False) and image.features.get("kraft.version", 0) < 1:
                recs.append(r.FeatureLevelRecord("kraft.version", 1))  # the quorum's voters live in its log
            if image.scram_decoy_seed is None:  # (also for a cluster made before the seed existed)
                recs.append(r.ScramDecoySeedRecord(self.clock.secret_bytes(32)))
            return recs, None
        try:
            await self.write(op)
        except KafkaError as e:
            log.info("controller bootstrap skipped: %s", e)

    async def _wait_applied(self, offset: int) -> None:
        while self.loader.image.offset < offset:
            self._applied.clear()
            await self._applied.wait()

    async def write(self, op: Callable[[MetadataImage], tuple[list[Any], Any]], *,
                    user_op: bool = False) -> Any:
        """Runs ``op`` on the latest image, committed or not, and proposes its records at once,
        so writes pipeline instead of each waiting for the previous commit (Kafka's
        QuorumController does the same). The caller is answered only when the records (or, for
        an op that writes nothing, everything proposed before it) are committed and applied.
        Computing and proposing never await, so ops see each other's records in order.

        A ``user_op`` (one a client asked for) may write at most MAX_RECORDS_PER_USER_OP records,
        else it fails whole with POLICY_VIOLATION, as in Kafka; the managers check their own
        sizes before doing the work, this is the backstop for every operation."""
        leader = self.log.leader()
        if leader.leader_id != self.node_id or self._active_epoch != leader.epoch:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "this node is not the active controller")
        t0 = self.clock.monotonic()
        committed = self.loader.image
        spec = self._spec if self._spec is not None and self._spec.offset > committed.offset else None
        records, result = op(spec or committed)
        if user_op:
            topic_ops.check_records_room(0, len(records))
        fut = None
        if records:
            try:
                last, fut = self.log.propose([r.encode(x) for x in records], leader.epoch)
            except NotLeaderError:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, "this node is not the active controller") from None
            d = MetadataDelta(spec or committed)
            for x in records:
                d.replay(x)
            self._spec = d.apply(last, leader.epoch)
            self._spec_commit = fut
            # its outcome is read below through a shield: a caller cancelled meanwhile (a request
            # timing out) leaves nobody to read a NotLeaderError, which asyncio then logs as an error
            fut.add_done_callback(_outcome_read)
            self.processing_times.record(self.clock.monotonic() - t0)
        elif spec is not None:
            last, fut = spec.offset, self._spec_commit  # answer only once what it saw is committed
        else:
            return result
        if fut is not None:
            try:
                await asyncio.shield(fut)
            except NotLeaderError:
                self._spec = None
                raise KafkaError(ErrorCode.NOT_CONTROLLER, "lost the leadership before the write committed") from None
        await self._wait_applied(last)
        return result

    # --- operations --------------------------------------------------------------------
    async def create_topics(self, new_topics: list[topic_ops.NewTopic], validate_only: bool = False
                            ) -> list[topic_ops.CreateTopicResult]:
        def op(image):
            recs, results = topic_ops.create_topics(image, new_topics, self.defaults, self.rng, self.clock.uuid4)
            return ([] if validate_only else recs), results
        return await self.write(op, user_op=True)

    async def delete_topics(self, names, ids):
        return await self.write(lambda image: topic_ops.delete_topics(image, names, ids), user_op=True)

    async def create_partitions(self, topic: str, count: int, assignments, validate_only: bool = False) -> None:
        def op(image):
            recs = topic_ops.create_partitions(image, topic, count, assignments, self.rng)
            return ([] if validate_only else recs), None
        return await self.write(op, user_op=True)

    async def alter_topic_configs(self, topic: str, ops, validate_only: bool = False) -> None:
        def op(image):
            recs = topic_ops.alter_topic_configs(image, topic, ops, self.defaults)
            return ([] if validate_only else recs), None
        return await self.write(op, user_op=True)

    async def elect_leaders(self, election_type: int, topic_partitions) -> list:
        """ElectLeaders (PREFERRED 0, UNCLEAN 1) of ``[(topic, [partition, ...])]`` or of every
        partition (None); returns [replication.ElectionResult], answered once committed."""
        return await self.write(lambda image: replication_ops.elect_leaders(image, election_type, topic_partitions),
                                user_op=True)

    async def alter_partition_reassignments(self, requests) -> list:
        """``[(topic, partition, target replicas | None to cancel)]``; returns
        [reassignment.ReassignmentResult], answered once the changes are committed."""
        return await self.write(lambda image: reassignment_ops.alter_partition_reassignments(
            image, requests, replication_ops.acceptable_leaders(image)), user_op=True)

    async def list_partition_reassignments(self, topics) -> list:
        """The ongoing reassignments (of ``[(topic, [partition, ...])]`` or all, None)."""
        return reassignment_ops.list_partition_reassignments(self.loader.image, topics)

    async def unregister_broker(self, broker_id: int) -> None:
        """UnregisterBroker (an operator removing a drained broker): BROKER_ID_NOT_REGISTERED if unknown."""
        return await self.write(lambda image: (cluster_ops.unregister_broker(
            image, self.cluster, broker_id, self.unclean_default), None), user_op=True)

    async def alter_broker_configs(self, name: str, ops, validate_only: bool = False) -> None:
        def op(image):
            recs = config_ops.alter_broker_configs(image, name, ops)
            return ([] if validate_only else recs), None
        return await self.write(op, user_op=True)

    async def alter_group_configs(self, name: str, ops, validate_only: bool = False) -> None:
        def op(image):
            recs = config_ops.alter_group_configs(image, name, ops)
            return ([] if validate_only else recs), None
        return await self.write(op, user_op=True)

    async def update_features(self, updates, validate_only: bool = False) -> None:
        """UpdateFeatures: (feature, level, upgrade type) each; all or nothing."""
        def op(image):
            recs = feature_ops.update_features(image, updates, self.node_id)
            return ([] if validate_only else recs), None
        return await self.write(op, user_op=True)

    async def register_broker(self, broker_id: int, incarnation_id: uuid.UUID, endpoints, rack: str | None
                              ) -> int:
        """Registers (or re-registers) a broker, fenced until it catches up; returns its epoch."""
        return await self.write(lambda image: cluster_ops.register_broker(
            image, self.cluster, broker_id, incarnation_id, tuple(endpoints), rack, self._now_ms(),
            self.session_timeout_ms, next_offset=self.log.next_offset(), unclean_default=self.unclean_default,
            colocated_broker_id=self.colocated_broker_id))

    async def heartbeat(self, broker_id: int, broker_epoch: int, metadata_offset: int, want_fence: bool,
                        want_shutdown: bool, timeout: float | None = None, offline_log_dirs=(), offline_partitions=()):
        received = self._now_ms()
        dirs = frozenset(offline_log_dirs)
        if dirs != self._offline_dirs.get(broker_id, frozenset()):  # said once per change, not every heartbeat
            self._offline_dirs[broker_id] = dirs
            if dirs:
                log.warning("broker %d reports failed log dirs %s (%d partitions): their replicas go offline",
                            broker_id, ", ".join(sorted(str(d) for d in dirs)), len(offline_partitions))

        def op(image: MetadataImage):
            self.cluster.touch(broker_id, max(received, self._now_ms()))
            return cluster_ops.heartbeat(image, self.cluster, broker_id, broker_epoch, self._now_ms(), metadata_offset,
                                         want_fence, want_shutdown, next_offset=self.log.next_offset(),
                                         unclean_default=self.unclean_default, offline_partitions=offline_partitions)
        return await self.write(op)

    async def alter_partition(self, broker_id: int, broker_epoch: int, items) -> list:
        """items: (topic_id, partition, leader_epoch, partition_epoch, new_isr); returns
        (topic_id, partition, error, (leader, leader_epoch, partition_epoch, isr) | None)."""
        def op(image: MetadataImage):
            records, out = [], []
            for tid, pid, leader_epoch, partition_epoch, isr in items:
                recs, res = replication_ops.alter_partition(image, broker_id, broker_epoch, tid, pid, leader_epoch,
                                                            partition_epoch, isr)
                records += recs
                out.append((tid, pid, res))
            return records, out
        results = await self.write(op)
        image = self.loader.image
        final = []
        for tid, pid, res in results:
            reg = None
            if res.error == 0:
                t = image.topics_by_id.get(tid)
                p = t.partitions.get(pid) if t else None
                if p is not None:
                    reg = p
            final.append((tid, pid, res.error, reg))
        return final

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> tuple[int, int]:
        def op(image: MetadataImage):
            start = image.next_producer_id
            return [r.ProducerIdsRecord(broker_id, broker_epoch, start + PRODUCER_ID_BLOCK_SIZE)], (
                start, PRODUCER_ID_BLOCK_SIZE)
        return await self.write(op)

    async def create_acls(self, bindings) -> list:
        return await self.write(lambda image: acl_ops.create_acls(image, bindings, self.clock.uuid4), user_op=True)

    async def delete_acls(self, filters) -> list:
        return await self.write(lambda image: acl_ops.delete_acls(image, filters), user_op=True)

    async def alter_client_quotas(self, alterations, validate_only: bool = False) -> list:
        def op(image):
            recs, results = acl_ops.alter_client_quotas(image, alterations)
            return ([] if validate_only else recs), results
        return await self.write(op, user_op=True)

    async def alter_user_scram_credentials(self, changes) -> list:
        """changes: [metadata.controller_api.ScramChange]; returns [(user, error code, message)]."""
        return await self.write(lambda image: scram_ops.alter_user_scram_credentials(image, changes), user_op=True)

