"""A krafty node: the metadata log, the controller and/or the broker of one process."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import signal

from common.clock import SYSTEM, Clock
from common.config import Config, ConfigError
from common.errors import ErrorCode, KafkaError
from common.net import REAL, Net
from controller.loop import QuorumController
from controller.topics import TopicDefaults
from krafty import storage
from metadata import records as r
from metadata.loader import MetadataLoader

log = logging.getLogger("krafty.node")


class StartupError(RuntimeError):
    """A node cannot start (a port taken, a data directory in use, a broken metadata log...)
    or cannot go on (its metadata log or a client listener died): the process exits non-zero
    at once, so a supervisor can restart or report it."""


LOCK_FILE = ".lock"


def lock_data_dirs(cfg: Config) -> list[int]:
    """Locks the metadata log dir and, on a broker, every log dir (``<dir>/.lock``), as Kafka's
    LogManager and RaftManager do, so two nodes never share a directory (a controller-only node
    leaves the default log.dirs alone). Returns the lock files' descriptors (held until closed)."""
    fds: list[int] = []
    log_dirs = cfg["log.dirs"] if "broker" in cfg["process.roles"] else []
    for d in dict.fromkeys([*log_dirs, cfg["metadata.log.dir"]]):
        path = os.path.join(d, LOCK_FILE)
        try:
            os.makedirs(d, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            unlock_data_dirs(fds)
            raise StartupError(f"cannot use log directory {d}: {e.strerror}") from None
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            unlock_data_dirs(fds)
            raise StartupError(f"Failed to acquire lock on file {LOCK_FILE} in {d}. A Kafka instance in another "
                               "process or thread is using this directory.") from None
        fds.append(fd)
    return fds


def unlock_data_dirs(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    fds.clear()


def make_metadata_log(cfg: Config, loader: MetadataLoader, clock: Clock = SYSTEM, net: Net = REAL, store=None):
    if not cfg["controller.quorum.voters"] and not cfg["controller.quorum.bootstrap.servers"]:
        raise ConfigError("configuration keys 'controller.quorum.voters' and 'controller.quorum.bootstrap.servers' "
                          "are empty: list the controllers as id@host:port,... or (a dynamic quorum) host:port,...")
    from raft.driver import RaftMetadataLog

    def snapshot(end_offset: int):
        image = loader.image
        if image.offset >= end_offset:
            raise RuntimeError(f"metadata image at {image.offset} is past the snapshot end {end_offset}")
        return [r.encode(x) for x in image.to_records()]
    return RaftMetadataLog.from_config(cfg, snapshot_provider=snapshot, clock=clock, net=net, store=store)


class Node:
    """``clock``: the node's time and randomness (common/clock.py); ``net``: where its gRPC
    goes (common/net.py); ``raft_store``: its metadata log's store (default SQLite in
    metadata.log.dir). sim/ passes virtual ones of each."""

    def __init__(self, cfg: Config, clock: Clock = SYSTEM, net: Net = REAL, raft_store=None):
        self.cfg = cfg
        self.clock = clock
        self._net = net
        self._raft_store = raft_store
        self.roles = cfg["process.roles"]
        self._locks = lock_data_dirs(cfg)
        try:
            self._assemble(cfg)
            # the directories last: a configuration error is reported first, as Kafka does
            self.cluster_id = storage.check_directories(cfg, self.clock)
            bootstrap = storage.read_bootstrap(cfg["metadata.log.dir"])
        except storage.StorageError as e:
            unlock_data_dirs(self._locks)
            raise StartupError(str(e)) from None
        except BaseException:
            unlock_data_dirs(self._locks)
            raise
        if hasattr(self.metadata_log, "cluster_id"):
            self.metadata_log.cluster_id = self.cluster_id
        if self.controller is not None:
            self.controller.cluster_id, self.controller.bootstrap = self.cluster_id, bootstrap
        if self.channel is not None:
            self.channel.cluster_id = self.cluster_id
        if self.broker is not None:  # BrokerHeartbeat names failed log dirs by these ids (KIP-858)
            self.broker.log_dir_ids = storage.directory_ids(cfg["log.dirs"])

    def _assemble(self, cfg: Config) -> None:
        self.cluster_id = ""  # known once the directories are checked
        self.loader = MetadataLoader()
        self.metadata_log = make_metadata_log(cfg, self.loader, self.clock, self._net, self._raft_store)
        from broker.security.ssl import controller_grpc_credentials

        server_creds, channel_creds = controller_grpc_credentials(cfg)  # controller listener TLS (SSL), or None
        self.metadata_log.server_credentials = server_creds
        self.metadata_log.channel_credentials = channel_creds
        self.metadata_log.register(self.loader)
        self.controller = None
        self.broker = None
        self.channel = None
        self.stallwatch = None
        self.metrics_server = None
        if "controller" in self.roles:
            self.controller = QuorumController(
                cfg["node.id"], self.metadata_log, self.loader, cluster_id=self.cluster_id,
                defaults=TopicDefaults(cfg["num.partitions"], cfg["default.replication.factor"]),
                session_timeout_ms=cfg["broker.session.timeout.ms"],
                unclean_default=cfg["unclean.leader.election.enable"],
                auto_leader_rebalance=cfg["auto.leader.rebalance.enable"],
                rebalance_interval_s=cfg["leader.imbalance.check.interval.seconds"],
                colocated_broker_id=cfg["node.id"] if "broker" in self.roles else None, clock=self.clock)
            from controller.service import add_to_server
            self.metadata_log.servicers.append(lambda server: add_to_server(server, self.controller))
        if "broker" in self.roles:
            from broker.broker import Broker
            from broker.controller_channel import ControllerChannel
            self.channel = ControllerChannel(
                cfg["controller.quorum.voters"] or self.metadata_log.voter_endpoints,
                lambda: self.metadata_log.leader().leader_id,
                request_timeout_ms=cfg["request.timeout.ms"],
                retry_backoff_ms=max(cfg["controller.quorum.retry.backoff.ms"], 20), credentials=channel_creds,
                clock=self.clock, net=self._net)
            self.broker = Broker(cfg, self.loader, self.channel, self.clock, self._net)

    async def start(self) -> None:
        if self.cfg["krafty.metrics.port"] >= 0:  # first: /health and /ready answer during start-up
            from krafty.metrics_server import MetricsServer
            self.metrics_server = MetricsServer(self, self.cfg["krafty.metrics.host"], self.cfg["krafty.metrics.port"])
            await self.metrics_server.start()
        if self.cfg["krafty.loop.stall.warn.ms"] > 0:
            from common.stallwatch import StallWatch
            self.stallwatch = StallWatch(asyncio.get_running_loop(), self.cfg["krafty.loop.stall.warn.ms"])
            self.stallwatch.start()
        if self.broker:
            from broker.log import legacy
            from broker.log.record_walk import WALKER
            log.info("produce validation walks every record with the %s", WALKER)
            if not legacy.COMPILED:
                log.info("Fetch v0-3 (old clients) converts records with the Python loop: broker/log/_legacy.pyx is "
                         "not built (a C compiler and Python's headers at install time build it)")
            self.broker.open_logs()
        await self.metadata_log.start()
        if self.broker:
            await self.broker.start()
        log.info("node %d started (%s), cluster id %s", self.cfg["node.id"], ",".join(self.roles), self.cluster_id)

    async def stop(self) -> None:
        """Stops whatever has started (also after a failed or interrupted start)."""
        log.info("node %d shutting down", self.cfg["node.id"])
        try:
            if self.broker:
                await self.broker.stop()
            if self.channel:
                await self.channel.close()
            await self.metadata_log.close()
            if self.stallwatch:
                self.stallwatch.stop()
            if self.metrics_server:
                await self.metrics_server.close()
        finally:
            unlock_data_dirs(self._locks)

    def failed(self) -> BaseException | None:
        """The error that ended a part the node cannot run without (its metadata log, a client
        listener), if any."""
        e = self.metadata_log.failure() if hasattr(self.metadata_log, "failure") else None
        return e if e is not None or self.broker is None else self.broker.failed()


STOP_TIMEOUT_S = 60.0  # a stop that has not finished by then is abandoned (the process exits anyway)


async def run_node(cfg: Config) -> int:
    """Runs a node until SIGINT/SIGTERM (exit code 0). A start that fails, or the loss of the
    metadata log or of a client listener later, stops what was started and raises StartupError (or the ConfigError),
    so that the process exits non-zero at once instead of lingering without listeners."""
    node = Node(cfg)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    starting = loop.create_task(node.start(), name="node-start")
    stopping = loop.create_task(stop.wait(), name="node-stop-signal")
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():  # SIGTERM during start-up (e.g. while no controller answers): stop now
            log.info("stop requested during start-up")
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await starting
        elif starting.exception() is not None:
            raise _fatal(starting.exception())
        else:
            while not stop.is_set():
                failure = node.failed()
                if failure is not None:
                    raise _fatal(failure)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(stopping), 1.0)
    except BaseException:
        await _stop_within(node, 10.0)
        raise
    finally:
        stopping.cancel()
    await _stop_within(node, STOP_TIMEOUT_S)
    return 0


def _fatal(e: BaseException) -> BaseException:
    if isinstance(e, ConfigError | StartupError):
        return e
    if isinstance(e, OSError):  # the environment (a port in use, a directory not writable): no traceback
        return StartupError(e.strerror or str(e))
    if isinstance(e, KafkaError) and e.code == ErrorCode.INCONSISTENT_CLUSTER_ID:  # pointed at another cluster
        return StartupError(f"this node belongs to another cluster than its controllers: {e.message}")
    log.error("fatal error in node start-up", exc_info=e)
    return StartupError(f"{type(e).__name__}: {e}")


async def _stop_within(node: Node, timeout_s: float) -> None:
    try:
        await asyncio.wait_for(node.stop(), timeout_s)
    except Exception as e:  # noqa: BLE001 - a broken half-started part must not keep the process alive
        log.warning("node stop incomplete: %r", e)
