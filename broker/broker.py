"""The broker: logs, replica manager, request handlers and listeners, wired together.

Start order follows Kafka's: open (and recover) the logs, follow the metadata log, register
with the controller, then open the listeners."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import uuid

from broker.apis.kafka_apis import KafkaApis
from broker.log.manager import LogManager
from broker.replica.manager import ReplicaManager
from broker.server import KafkaServer
from common.config import Config, topic_defaults
from metadata import records as r
from metadata.loader import MetadataLoader

log = logging.getLogger("krafty.broker")


class Broker:
    def __init__(self, config: Config, loader: MetadataLoader, controller):
        self.config = config
        self.node_id: int = config["node.id"]
        self.loader = loader
        self.controller = controller
        self.incarnation_id = uuid.uuid4()
        self.logs: LogManager | None = None
        self.replicas: ReplicaManager | None = None
        self.apis: KafkaApis | None = None
        self.servers: list[KafkaServer] = []
        self._tasks: list[asyncio.Task] = []

    def open_logs(self) -> None:
        """Loads and recovers every partition log; must run before the metadata log replays."""
        t0 = time.monotonic()
        self.logs = LogManager(self.config["log.dirs"], topic_defaults(self.config), now_ms=int(time.time() * 1000))
        self.replicas = ReplicaManager(self.node_id, self.config, self.logs)
        self.loader.add_publisher(self.replicas.on_metadata)
        self.apis = KafkaApis(self.config, self.node_id, self.loader, self.replicas, self.controller)
        log.info("loaded %d logs in %.2fs", len(list(self.logs.all_logs())), time.monotonic() - t0)

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
        assert self.apis is not None
        ctrl = set(self.config["controller.listener.names"])
        for lst in self.config["listeners"]:
            if lst.name in ctrl:
                continue
            s = KafkaServer(lst.name, lst.host, lst.port, self.apis,
                            max_request_size=self.config["socket.request.max.bytes"])
            await s.start()
            self.servers.append(s)
        epoch = await self.controller.register_broker(self.node_id, self.incarnation_id, self.endpoints(),
                                                      self.config["broker.rack"])
        self.apis.producer_ids.broker_epoch = epoch
        log.info("broker %d registered with epoch %d", self.node_id, epoch)
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._periodic(self.config["log.retention.check.interval.ms"],
                                                           self._retention_check)))
        # flush_check fsyncs rolled segments and logs past flush.ms, and checkpoints recovery points
        # (Kafka does these asynchronously too); it blocks on fsync, so it runs off the event loop.
        flush_ms = min(self.config["log.flush.scheduler.interval.ms"], 1000)
        self._tasks.append(loop.create_task(self._periodic(flush_ms, self.logs.flush_check, in_thread=True)))

    def _retention_check(self, now_ms: int) -> None:
        # never delete above the high watermark (a follower may still need it, and it is not committed)
        hws = {tp: p.state.high_watermark for tp, p in self.replicas.partitions.items()}
        self.logs.retention_check(now_ms, hws)

    async def _periodic(self, interval_ms: int, fn, in_thread: bool = False) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                if in_thread:
                    await loop.run_in_executor(None, fn, int(time.time() * 1000))
                else:
                    fn(int(time.time() * 1000))
            except Exception:
                log.exception("periodic task %s failed", getattr(fn, "__name__", fn))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for s in self.servers:
            await s.close()
        if self.replicas:
            self.replicas.close()
        if self.logs:
            self.logs.close()
