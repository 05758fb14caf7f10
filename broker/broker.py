"""The broker: logs, replica manager, request handlers and listeners, wired together.

Start order follows Kafka's: open (and recover) the logs, follow the metadata log, register
with the controller, then open the listeners."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from concurrent.futures import ThreadPoolExecutor

from broker.apis.kafka_apis import KafkaApis
from broker.dynamic_config import DynamicBrokerConfig
from broker.log.manager import AllLogDirsFailed, LogManager
from broker.log.segment import OPEN_FILES
from broker.memory_pool import RequestMemoryPool
from broker.replica.manager import ReplicaManager
from broker.security import scram
from broker.security.limits import ConnectionLimits, parse_ip_overrides
from broker.security.sasl import inter_broker_security, listener_security
from broker.security.scram import ScramCredential
from broker.server import KafkaServer
from common import dynamic_config as dyn
from common.clock import SYSTEM, Clock, wait_event
from common.config import Config, topic_defaults
from common.errors import ErrorCode, KafkaError
from common.net import REAL, Net
from metadata import records as r
from metadata.features import jbod_supported, metadata_version_name
from metadata.loader import MetadataLoader

log = logging.getLogger("krafty.broker")
WRITEBACK_INTERVAL_MS = 100  # how often krafty.log.writeback.bytes is checked


class Broker:
    def __init__(self, config: Config, loader: MetadataLoader, controller, clock: Clock = SYSTEM, net: Net = REAL):
        self.config = config
        self.node_id: int = config["node.id"]
        self.loader = loader
        self.controller = controller
        self.clock = clock  # timestamps and retention: wall; everything else through the loop or monotonic
        self.net = net  # the listeners' sockets (the OS's, or sim/'s network)
        if hasattr(controller, "wait_for_offset"):  # the ControllerChannel: admin answers wait for our image
            controller.wait_for_offset = self.wait_for_metadata_offset
        self.incarnation_id = clock.uuid4()
        self.logs: LogManager | None = None
        self.log_dir_ids: dict[str, uuid.UUID] = {}  # log dir (absolute) -> its directory.id (meta.properties)
        self._storage_failure: BaseException | None = None  # every log dir, or the metadata log's, failed
        self.replicas: ReplicaManager | None = None
        self.apis: KafkaApis | None = None
        self.servers: list[KafkaServer] = []
        self.limits = ConnectionLimits.from_config(config)  # max.connections(.per.ip), connections.max.idle.ms
        self.memory_pool = RequestMemoryPool.from_config(config)  # queued.max.request.bytes, all listeners
        self._tasks: list[asyncio.Task] = []
        self.broker_epoch = -1
        self.fenced = True
        self._unfenced = asyncio.Event()
        self._want_shutdown = False
        self._shutdown_ok = asyncio.Event()
        self._wake_heartbeat = asyncio.Event()
        self._last_heartbeat_ok = clock.monotonic()  # when a controller last answered a heartbeat
        # the SCRAM credentials the decoy profiles were computed from, and the profile of each mechanism
        self._decoy_profiles: tuple[dict, dict[str, scram.DecoyProfile]] = ({}, {})
        # TLS/SASL of each listener and of the connections to other brokers, checked now so that a bad
        # security config stops startup (ConfigError) before anything runs (broker/security)
        ctrl = set(config["controller.listener.names"])
        self.listener_security = {lst.name: listener_security(config, lst.name)
                                  for lst in config["listeners"] if lst.name not in ctrl}
        self.inter_broker_security = inter_broker_security(config)
        # dynamic broker configs (IncrementalAlterConfigs on BROKER): applied from the metadata log
        self.dynamic_config = DynamicBrokerConfig(config, self.node_id)
        self._background = ThreadPoolExecutor(config["background.threads"], thread_name_prefix="background")
        # metrics (broker/metrics.py), counted only when served (krafty.metrics.port)
        self.metrics = None
        self.lag_monitor = None
        if config["krafty.metrics.port"] >= 0:
            from broker.metrics import BrokerMetrics
            self.metrics = BrokerMetrics(self.node_id, clock=self.clock)
            self.metrics.broker = self

    def open_logs(self) -> None:
        """Loads and recovers every partition log; must run before the metadata log replays."""
        t0 = self.clock.monotonic()
        OPEN_FILES.configure(self.config["krafty.log.open.files.max"])  # process-wide, like the fd limit
        self.logs = LogManager(self.config["log.dirs"], topic_defaults(self.config),
                               writer_threads=self.config["krafty.log.writer.threads"],
                               producer_id_expiration_ms=self.config["producer.id.expiration.ms"], clock=self.clock)
        # first: the other publishers of a delta see the dynamic configs it carries
        self.loader.add_publisher(self.dynamic_config.on_metadata)
        self.replicas = ReplicaManager(self.node_id, self.config, self.logs, channel=self.controller,
                                       broker_epoch=lambda: self.broker_epoch, endpoint_of=self._endpoint_of,
                                       clock=self.clock)
        self.loader.add_publisher(self.replicas.on_metadata)
        self.replicas.on_partitions_offline = self._wake_heartbeat.set  # tell the controller at once
        self.logs.failure_channel.add_handler(self._on_log_dir_offline)
        self.apis = KafkaApis(self.config, self.node_id, self.loader, self.replicas, self.controller, clock=self.clock)
        self.apis.metrics = self.metrics
        self.replicas.fetchers.security = self.inter_broker_security  # TLS/SASL to other brokers
        # after the replica manager's publisher: a partition we now lead has its log when we load it
        self.loader.add_publisher(self.apis.group_coordinator.on_metadata, catch_up=False)
        self.loader.add_publisher(self.apis.txn_coordinator.on_metadata, catch_up=False)
        self.loader.add_publisher(self.apis.share_coordinator.on_metadata, catch_up=False)
        self._add_reconfigurables()
        log.info("loaded %d logs in %.2fs", len(list(self.logs.all_logs())), self.clock.monotonic() - t0)

    def _on_log_dir_offline(self, d: str) -> None:
        """KIP-858: the broker goes on with its other log dirs; with none left, or when the
        failed dir holds the metadata log, it stops (Kafka halts it)."""
        metadata_dir = os.path.abspath(self.config["metadata.log.dir"])
        if d == metadata_dir:
            self._storage_failure = AllLogDirsFailed(f"the metadata log dir {d} failed; shutting down")
        elif not jbod_supported(self.loader.image.features):
            self._storage_failure = AllLogDirsFailed(
                f"log dir {d} failed and metadata.version {metadata_version_name(self.loader.image.features.get('metadata.version'))} "
                f"predates per-dir failure handling (3.7-IV2, KIP-858); shutting down")
        elif not self.logs.live_log_dirs:
            self._storage_failure = AllLogDirsFailed(
                f"all log dirs ({', '.join(self.logs.log_dirs)}) have failed; shutting down")
        if self._storage_failure is not None:
            log.error("%s", self._storage_failure)

    def _offline_report(self) -> dict:
        """What BrokerHeartbeat says of failed log dirs: their directory ids and partitions."""
        if not self.replicas.offline_partitions:
            return {}
        dirs = [self.log_dir_ids[d] for d in self.logs.offline_log_dirs if d in self.log_dir_ids]
        return {"offline_log_dirs": dirs,
                "offline_partitions": [(tid, tp[1]) for tp, tid in self.replicas.offline_partitions.items()]}

    def _add_reconfigurables(self) -> None:
        """What takes a dynamic broker config without a restart, besides the code that reads the
        Config each time (Kafka's reconfigurables)."""
        d, cfg = self.dynamic_config, self.config
        d.add_reconfigurable(dyn.LOG_RECONFIGURABLE, lambda _: self._set_topic_defaults(), "log defaults")
        d.add_reconfigurable({"producer.id.expiration.ms"}, lambda _: setattr(
            self.logs, "producer_id_expiration_ms", cfg["producer.id.expiration.ms"]), "producer id expiration")
        d.add_reconfigurable({"max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides"},
                             lambda _: self.limits.reconfigure(cfg["max.connections"], cfg["max.connections.per.ip"],
                                                               parse_ip_overrides(cfg["max.connections.per.ip.overrides"])),
                             "connection limits")
        d.add_reconfigurable(lambda k: k.startswith(("listener.name.", "ssl.", "sasl.")), self._reload_security,
                             "listener security")
        d.add_reconfigurable({"background.threads"}, lambda _: self._resize_background(), "background threads")
        d.add_reconfigurable({"num.replica.fetchers"}, lambda _: self._resize_fetchers(), "replica fetchers")
        d.add_reconfigurable({"leader.replication.throttled.rate", "follower.replication.throttled.rate",
                              "replica.alter.log.dirs.io.max.bytes.per.second"},
                             lambda _: self._set_replication_rates(), "replication throttles")

    def _resize_fetchers(self) -> None:
        task = asyncio.get_running_loop().create_task(self.replicas.fetchers.resize(), name="resize-fetchers")
        self._tasks.append(task)
        task.add_done_callback(lambda t: t in self._tasks and self._tasks.remove(t))

    def _set_replication_rates(self) -> None:
        """leader/follower.replication.throttled.rate set or removed (kafka-reassign-partitions
        --throttle sets them on every broker): the quotas take the new rates at once."""
        self.replicas.leader_quota.rate = self.config["leader.replication.throttled.rate"]
        self.replicas.follower_quota.rate = self.config["follower.replication.throttled.rate"]
        self.replicas.alter_log_dirs.quota.rate = self.config["replica.alter.log.dirs.io.max.bytes.per.second"]

    def _set_topic_defaults(self) -> None:
        """log.* defaults changed: every topic without its own value takes the new default."""
        defaults = topic_defaults(self.config)
        self.logs.default_topic_config = dict(defaults)
        self.apis._topic_defaults = defaults
        self.replicas.set_topic_defaults(defaults)

    def _reload_security(self, _changed) -> None:
        """Listener TLS/SASL settings changed (a keystore location set again reloads the file):
        new connections use the new settings, open ones keep theirs (as in Kafka)."""
        for s in self.servers:
            s.security = self.listener_security[s.listener_name] = listener_security(self.config, s.listener_name)
        for name in self.listener_security:
            if all(s.listener_name != name for s in self.servers):
                self.listener_security[name] = listener_security(self.config, name)
        self.inter_broker_security = self.replicas.fetchers.security = inter_broker_security(self.config)
        log.info("listener security settings reloaded")

    def _resize_background(self) -> None:
        old, self._background = self._background, ThreadPoolExecutor(self.config["background.threads"],
                                                                     thread_name_prefix="background")
        old.shutdown(wait=False)

    def _endpoint_of(self, broker_id: int) -> tuple[str, int] | None:
        """Where to reach another broker: its inter-broker listener."""
        b = self.loader.image.brokers.get(broker_id)
        ep = b.endpoint(self.config["inter.broker.listener.name"]) if b else None
        return (ep.host, ep.port) if ep else None

    def _scram_credential(self, user: str, mechanism: str):
        """The user's SCRAM credential, or for an unknown user a decoy that looks like most real
        ones (broker/security/scram.py); None only before the controller wrote the decoy seed.
        The decoy is derived for real users too, so that both answers take the same time."""
        image = self.loader.image
        rec = image.scram_credentials.get((user, mechanism))
        real = None if rec is None else ScramCredential(rec.salt, rec.stored_key, rec.server_key, rec.iterations)
        if image.scram_decoy_seed is None:
            return real
        creds, profiles = self._decoy_profiles
        if creds is not image.scram_credentials:  # computed again only when the credentials change
            creds, profiles = image.scram_credentials, {}
            self._decoy_profiles = (creds, profiles)
        if mechanism not in profiles:
            profiles[mechanism] = scram.decoy_profile((c.salt, c.iterations) for (_, m), c in creds.items()
                                                      if m == mechanism)
        decoy = scram.decoy_credential(mechanism, user, image.scram_decoy_seed, profiles[mechanism])
        return decoy if real is None else real

    def endpoints(self) -> list[r.Endpoint]:
        proto = self.config["listener.security.protocol.map"]
        out = []
        bound = {s.listener_name: s.port for s in self.servers}
        for lst in self.config["advertised.listeners"]:
            port = lst.port or bound.get(lst.name, lst.port)
            host = lst.host or socket.gethostname()
            out.append(r.Endpoint(lst.name, host, port, proto.get(lst.name, "PLAINTEXT")))
        return out

    async def start(self) -> None:
        """Kafka's BrokerServer order: the client listeners' ports are taken first (a port in use
        stops start-up at once, and registration needs them), but connections are accepted only
        once the controller has unfenced us (we have caught up with the metadata log) and our own
        image shows us registered and unfenced: before that a Metadata answer would list no
        brokers and no leaders, and librdkafka clients that bootstrap then stall for ~20 s."""
        assert self.apis is not None
        self.logs.failure_channel.bind(asyncio.get_running_loop())
        ctrl = set(self.config["controller.listener.names"])
        for lst in self.config["listeners"]:
            if lst.name in ctrl:
                continue
            s = KafkaServer(lst.name, lst.host, lst.port, self.apis,
                            max_request_size=self.config["socket.request.max.bytes"],
                            security=self.listener_security[lst.name], scram_lookup=self._scram_credential,
                            limits=self.limits, memory_pool=self.memory_pool, clock=self.clock,
                            net=self.net)
            s.metrics = self.metrics
            s.bind()
            self.servers.append(s)
        await self.replicas.start()
        await self.apis.group_coordinator.start()
        if self.metrics is not None:  # consumer lag of the groups we coordinate
            from broker.group.lag_monitor import ConsumerLagMonitor
            self.lag_monitor = ConsumerLagMonitor(self, self.config["krafty.metrics.consumer.lag.interval.ms"] / 1000,
                                                 clock=self.clock)
            self.lag_monitor.start()
        await self.apis.txn_coordinator.start()
        await self.apis.share_coordinator.start()
        self.apis.share_partitions.start()
        await self._register()
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._heartbeat_loop()))
        await self._unfenced.wait()
        await self._wait_until_image_shows_us_unfenced()
        for s in self.servers:
            await s.start()
        log.info("broker %d is unfenced", self.node_id)
        self._tasks.append(loop.create_task(self._periodic(self.config["log.retention.check.interval.ms"],
                                                           self._retention_check)))
        # flush_check fsyncs rolled segments and logs past flush.ms, and checkpoints recovery points
        # (Kafka does these asynchronously too); it blocks on fsync, so it runs off the event loop.
        flush_ms = min(self.config["log.flush.scheduler.interval.ms"], 1000)
        self._tasks.append(loop.create_task(self._periodic(flush_ms, self.logs.flush_check, in_thread=True)))
        if self.config["krafty.log.writeback.bytes"] > 0:  # keep dirty pages below the kernel's throttling point
            wb = self.config["krafty.log.writeback.bytes"]
            self._tasks.append(loop.create_task(self._periodic(WRITEBACK_INTERVAL_MS, lambda _now: self.logs.writeback(wb),
                                                               in_thread=True)))
        self._tasks.append(loop.create_task(self._periodic(lambda: self.config["log.cleaner.backoff.ms"],
                                                           self._cleaner_check, in_thread=True)))

    async def wait_for_metadata_offset(self, offset: int, timeout_s: float) -> None:
        """Read your writes: until this node's metadata image has applied ``offset`` (the
        controller committed an admin operation there), at most ``timeout_s``. The client's
        next request to this broker then sees the change (Metadata, DescribeConfigs, ...)."""
        if self.loader.image.offset >= offset:
            return
        reached = asyncio.Event()

        def on_metadata(_delta, image) -> None:
            if image.offset >= offset:
                reached.set()
        self.loader.add_publisher(on_metadata, catch_up=False)
        try:
            await asyncio.wait_for(reached.wait(), timeout_s)
        except TimeoutError:
            log.warning("metadata offset %d not applied within %.1fs (at %d): answering anyway", offset, timeout_s,
                        self.loader.image.offset)
        finally:
            self.loader.remove_publisher(on_metadata)

    def failed(self) -> BaseException | None:
        """The error that stopped a client listener accepting connections, if any: the broker
        cannot go on (the node exits non-zero rather than serve no new client)."""
        for s in self.servers:
            e = s.failure()
            if e is not None:
                return e
        return self._storage_failure

    def _unfenced_in_image(self) -> bool:
        b = self.loader.image.brokers.get(self.node_id)
        return b is not None and b.epoch == self.broker_epoch and not b.fenced

    async def _wait_until_image_shows_us_unfenced(self) -> None:
        """The controller has committed our unfencing; wait until our metadata image has it too
        (the records reach this node's loader a fetch later)."""
        if self._unfenced_in_image():
            return
        seen = asyncio.Event()

        def on_metadata(_delta, _image) -> None:
            if self._unfenced_in_image():
                seen.set()
        self.loader.add_publisher(on_metadata, catch_up=False)
        try:
            await seen.wait()
        finally:
            self.loader.remove_publisher(on_metadata)

    async def _register(self) -> None:
        while True:
            try:
                self.broker_epoch = await self.controller.register_broker(
                    self.node_id, self.incarnation_id, self.endpoints(), self.config["broker.rack"])
                break
            except KafkaError as e:
                if e.code == ErrorCode.INCONSISTENT_CLUSTER_ID:  # never better on a retry: the node stops
                    raise
                log.warning("broker registration failed (%s); retrying", e)
                await asyncio.sleep(1)
        self.apis.producer_ids.broker_epoch = self.broker_epoch
        log.info("broker %d registered with epoch %d", self.node_id, self.broker_epoch)

    async def _heartbeat_loop(self) -> None:
        """BrokerHeartbeat: keeps the session alive, reports the metadata offset applied
        (the controller unfences us once caught up), and drives controlled shutdown."""
        interval = self.config["broker.heartbeat.interval.ms"] / 1000
        while True:
            try:
                res = await self.controller.heartbeat(self.node_id, self.broker_epoch, self.loader.image.offset,
                                                      False, self._want_shutdown,
                                                      timeout=max(interval, 1.0), **self._offline_report())
                if res.is_fenced != self.fenced:
                    log.info("broker %d is now %s", self.node_id, "fenced" if res.is_fenced else "unfenced")
                self.fenced = res.is_fenced
                if not res.is_fenced:
                    self._unfenced.set()
                self._last_heartbeat_ok = self.clock.monotonic()
                if self._want_shutdown and res.should_shut_down:
                    self._shutdown_ok.set()
            except KafkaError as e:
                if e.code == ErrorCode.STALE_BROKER_EPOCH:
                    log.warning("broker epoch %d is stale; registering again", self.broker_epoch)
                    await self._register()
                    continue
                log.debug("heartbeat failed: %s", e)
            fast = (self.fenced and not self._unfenced.is_set()) or self._want_shutdown
            self._wake_heartbeat.clear()
            await wait_event(self._wake_heartbeat, 0.05 if fast else interval)

    async def controlled_shutdown(self, timeout_s: float = 30.0) -> None:
        """Asks the controller to move leadership away, and waits until it says we may stop, at
        most ``timeout_s``, and no longer than the broker's session once no controller answers
        heartbeats: by then the active controller (if any) has fenced this broker and moved its
        leaderships, so waiting cannot help (a stop during a controller outage took 30 s)."""
        if self.broker_epoch < 0:
            return
        self._want_shutdown = True
        self._wake_heartbeat.set()
        session_s = self.config["broker.session.timeout.ms"] / 1000
        deadline = self.clock.monotonic() + timeout_s
        while not self._shutdown_ok.is_set():
            now = self.clock.monotonic()
            if now >= deadline:
                log.warning("controlled shutdown did not complete in %.0fs; stopping anyway", timeout_s)
                return
            if now - self._last_heartbeat_ok >= session_s:
                log.warning("no controller answered a heartbeat for %.1fs (broker.session.timeout.ms): the controller "
                            "fences this broker without it; stopping without a controlled shutdown",
                            now - self._last_heartbeat_ok)
                return
            try:
                await asyncio.wait_for(self._shutdown_ok.wait(), min(deadline, self._last_heartbeat_ok + session_s) - now)
            except TimeoutError:
                pass
        log.info("controlled shutdown of broker %d complete", self.node_id)

    def _retention_check(self, now_ms: int) -> None:
        # never delete above the high watermark (a follower may still need it, and it is not committed)
        hws = {tp: p.state.high_watermark for tp, p in self.replicas.partitions.items()}
        self.logs.retention_check(now_ms, hws)

    def _cleaner_check(self, now_ms: int) -> None:
        # compaction never cleans above the high watermark (Kafka's cleaner is bounded by it too)
        hws = {tp: p.state.high_watermark for tp, p in list(self.replicas.partitions.items())}
        self.logs.cleaner_check(now_ms, hws)

    async def _periodic(self, interval_ms, fn, in_thread: bool = False) -> None:
        """``fn(now_ms)`` every ``interval_ms`` (or ``interval_ms()``, read again each time: a
        dynamic config), on the loop or on a background thread (background.threads)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep((interval_ms() if callable(interval_ms) else interval_ms) / 1000)
            try:
                if in_thread:
                    await loop.run_in_executor(self._background, fn, self.clock.wall_ms())
                else:
                    fn(self.clock.wall_ms())
            except Exception:
                log.exception("periodic task %s failed", getattr(fn, "__name__", fn))

    async def stop(self) -> None:
        if self.logs:  # a compaction pass in its thread ends at its next batch; logs.close() waits for it
            self.logs.stop_cleaner()
        if self._unfenced.is_set():
            await self.controlled_shutdown()
        for t in self._tasks:
            t.cancel()
        for s in self.servers:
            await s.close()
        self.limits.close()
        if self.lag_monitor is not None:
            await self.lag_monitor.close()
        if self.apis:
            await self.apis.group_coordinator.close()
            await self.apis.txn_coordinator.close()
            await self.apis.share_partitions.close()
            await self.apis.share_coordinator.close()
            self.apis.share_persister.close()
        if self.replicas:
            await self.replicas.close()
        if self.logs:
            self.logs.close()
        self._background.shutdown(wait=False)
