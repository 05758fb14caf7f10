"""The metrics endpoint of a node (``krafty.metrics.port``): a small HTTP/1.1 server on the
node's event loop.

    GET /metrics   Prometheus text format (prometheus_client's exposition), every metric of
                   the node's roles: broker (broker/metrics.py), controller
                   (controller/metrics.py), metadata log (raft/metrics.py), event loop, process
    GET /health    200 while the node runs (the loop answers and the metadata log has not failed)
    GET /ready     200 when the node is ready to serve: a broker registered, unfenced (caught up
                   with the metadata log) and accepting clients; a controller in the quorum (a
                   leader or a follower of a known leader); 503 with the reason otherwise

The metrics are read on the event loop (they look at the loop's data structures) into finished
metric families; rendering them as text, the costly part with thousands of partitions, runs
in a thread so that the loop keeps serving requests meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from broker.metrics import summary
from common.clock import SYSTEM, Clock
from common.metrics import Histogram, expand

log = logging.getLogger("krafty.metrics")

LOOP_PROBE_S = 0.25  # how often the event loop's lag is measured
STALL_S = 0.1  # a lag at least this long counts as a stall
_MAX_HEADER = 8192


class LoopProbe:
    """The event loop's own health: how late a timer set LOOP_PROBE_S ahead fires (the time
    every ready callback, request included, waits for the loop), and how often that is a stall
    (at least STALL_S, or krafty.loop.stall.warn.ms when set)."""

    def __init__(self, clock: Clock = SYSTEM, stall_s: float = STALL_S):
        self.clock = clock
        self.stall_s = stall_s
        self.lag = Histogram(now=clock.monotonic())
        self.last_lag_s = 0.0
        self.max_lag_s = 0.0
        self.stalls = 0
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="loop-probe")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            t0 = self.clock.monotonic()
            await asyncio.sleep(LOOP_PROBE_S)
            late = max(0.0, self.clock.monotonic() - t0 - LOOP_PROBE_S)
            self.observe(late)

    def observe(self, late: float) -> None:
        self.lag.record(late)
        self.last_lag_s = late
        self.max_lag_s = max(self.max_lag_s, late)
        if late >= self.stall_s:
            self.stalls += 1

    def collect(self, out: list[Metric], now: float, controller: bool) -> None:
        out.append(summary("krafty_eventloop_lag_ms", "How late the event loop runs a timer, in ms",
                           [({}, self.lag)], now))
        out.append(GaugeMetricFamily("krafty_eventloop_lag_seconds", "The last measured event loop lag",
                                     value=self.last_lag_s))
        out.append(GaugeMetricFamily("krafty_eventloop_lag_max_seconds", "The largest event loop lag seen",
                                     value=self.max_lag_s))
        out.append(CounterMetricFamily("krafty_eventloop_stalls", f"Event loop lags of {self.stall_s * 1000:.0f} ms "
                                       "or more", value=self.stalls))
        if controller:  # the controller's events wait in the event loop only: its queue time is the loop's lag
            out.append(summary("kafka_controller_controllereventmanager_eventqueuetimems",
                               "Time a controller event waits for the event loop, in ms", [({}, self.lag)], now))


class _Families:
    """What generate_latest needs of a registry: the families, those left to build (per-partition
    samples) built here, in the render thread."""

    def __init__(self, families: list[Metric]):
        self._families = families

    def collect(self):
        return expand(self._families)


class MetricsServer:
    def __init__(self, node, host: str, port: int, *, clock: Clock = SYSTEM):
        self.node = node
        self.host = host
        self.port = port
        self.clock = clock
        stall_ms = node.cfg["krafty.loop.stall.warn.ms"]
        self.probe = LoopProbe(clock, stall_ms / 1000 if stall_ms > 0 else STALL_S)
        # process_* (CPU, memory, open fds), python_gc_*, python_info: prometheus_client's own
        self._process = CollectorRegistry(auto_describe=False)
        for collector in (ProcessCollector, GCCollector, PlatformCollector):
            collector(registry=self._process)
        self._server: asyncio.base_events.Server | None = None
        self.scrapes = 0
        self.last_collect_s = self.last_render_s = 0.0  # the previous scrape's cost (on the loop / in a thread)

    async def start(self) -> None:
        try:
            self._server = await asyncio.start_server(self._client, self.host or "0.0.0.0", self.port,
                                                      reuse_address=True, limit=_MAX_HEADER)
        except OSError as e:
            raise OSError(e.errno, f"cannot bind the metrics endpoint (krafty.metrics.port) to "
                                   f"{self.host}:{self.port}: {e.strerror}") from None
        self.port = self._server.sockets[0].getsockname()[1]
        self.probe.start()
        log.info("serving metrics on http://%s:%d/metrics", self.host, self.port)

    async def close(self) -> None:
        await self.probe.close()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    # --- what is served --------------------------------------------------------------------------
    def collect(self) -> list[Metric]:
        node = self.node
        out: list[Metric] = []
        now = self.clock.monotonic()
        info = GaugeMetricFamily("krafty_node_info", "This node's id and roles", labels=["node_id", "roles"])
        info.add_metric([str(node.cfg["node.id"]), ",".join(node.roles)], 1)
        out.append(info)
        if node.broker is not None and node.broker.metrics is not None:
            out += node.broker.metrics.collect()
        if node.controller is not None:
            from controller.metrics import collect as controller_collect
            controller_collect(node.controller, out, now)
        if hasattr(node.metadata_log, "stats"):
            from raft.metrics import collect as raft_collect
            raft_collect(node.metadata_log, out)
        self.probe.collect(out, now, node.controller is not None)
        out.append(GaugeMetricFamily("krafty_metrics_collect_seconds", "Time the previous scrape held the event loop "
                                     "(reading the metrics)", value=self.last_collect_s))
        out.append(GaugeMetricFamily("krafty_metrics_render_seconds", "Time the previous scrape took to render the "
                                     "text format (in a thread)", value=self.last_render_s))
        out += self._process.collect()
        return out

    async def render(self) -> bytes:
        t0 = self.clock.monotonic()
        families = self.collect()
        t1 = self.clock.monotonic()
        self.scrapes += 1
        text = await asyncio.get_running_loop().run_in_executor(None, generate_latest, _Families(families))
        self.last_collect_s, self.last_render_s = t1 - t0, self.clock.monotonic() - t1
        return text

    def health(self) -> tuple[bool, str]:
        failure = self.node.failed()
        if failure is not None:
            return False, f"the metadata log failed: {failure!r}"
        return True, "running"

    def readiness(self) -> tuple[bool, dict]:
        node = self.node
        why: dict = {}
        ok = True
        b = node.broker
        if b is not None:
            started = bool(b.servers) and all(s._accept_task is not None for s in b.servers)
            state = "running" if not b.fenced and started else ("fenced" if b.broker_epoch >= 0 else "starting")
            why["broker"] = {"state": state, "broker_epoch": b.broker_epoch}
            ok &= state == "running"
        if node.controller is not None:
            ml = node.metadata_log
            core = getattr(ml, "core", None)
            role = core.role.name.lower() if core is not None else "starting"
            leader = ml.leader().leader_id
            in_quorum = core is not None and role in ("leader", "follower") and leader is not None
            why["controller"] = {"role": role, "leader": leader, "active": node.controller.is_active()}
            ok &= in_quorum
        failure = node.failed()
        if failure is not None:
            ok = False
            why["failure"] = repr(failure)
        return ok, why

    # --- HTTP ------------------------------------------------------------------------------------
    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                parts = lines[0].split()
                if len(parts) != 3:
                    await self._send(writer, 400, b"bad request\n", "text/plain", close=True)
                    return
                method, target, version = parts
                headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                close = version == "HTTP/1.0" or headers.get("connection", "").lower() == "close"
                if headers.get("content-length", "0") not in ("", "0"):
                    await self._send(writer, 400, b"no request body expected\n", "text/plain", close=True)
                    return
                status, body, ctype = await self._route(method, target.split("?", 1)[0])
                await self._send(writer, status, body if method != "HEAD" else b"", ctype, close=close,
                                 length=len(body))
                if close:
                    return
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def _route(self, method: str, path: str) -> tuple[int, bytes, str]:
        if method not in ("GET", "HEAD"):
            return 405, b"method not allowed\n", "text/plain"
        if path == "/metrics":
            return 200, await self.render(), CONTENT_TYPE_LATEST
        if path == "/health":
            ok, why = self.health()
            return (200 if ok else 503), json.dumps({"status": "UP" if ok else "DOWN", "reason": why}).encode() + \
                b"\n", "application/json"
        if path == "/ready":
            ok, why = self.readiness()
            return (200 if ok else 503), json.dumps({"status": "READY" if ok else "NOT_READY", **why}).encode() + \
                b"\n", "application/json"
        return 404, b"not found: try /metrics, /health or /ready\n", "text/plain"

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, status: int, body: bytes, ctype: str, *, close: bool,
                    length: int | None = None) -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
                  503: "Service Unavailable"}[status]
        head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body) if length is None else length}\r\n"
                f"Connection: {'close' if close else 'keep-alive'}\r\n\r\n")
        writer.write(head.encode() + body)
        await writer.drain()
