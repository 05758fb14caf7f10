"""``krafty mirror``: MirrorMaker 2 in one process (``connect-mirror-maker.sh``'s dedicated mode).

    krafty mirror mm2.properties [--clusters B ...] [--instance-id ID] [--progress-interval S]
                  [--progress-format text|json]

Runs every enabled flow of the config whose target is among ``--clusters`` (all by default):
the replicator (``mirror.replicator``), the topic housekeeping (``mirror.topics``), checkpoints
and group-offset sync (``mirror.checkpoints``) and heartbeats. Start the same command on several
machines to share the partitions: instances of a flow meet in its consumer group on the target.
Prints progress every ``--progress-interval`` seconds: records/s, MB/s and each partition's lag.

Exit codes: 0 after SIGTERM/SIGINT (offsets committed), 1 when a cluster refuses something the
mirror cannot do without (one line saying what), 2 for a bad config (one line naming the key).
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import signal
import sys
import threading
import time

from common.clock import SYSTEM, Clock
from mirror.checkpoints import CheckpointTask
from mirror.clients import Admin, MirrorError, producer, validate  # (confluent-kafka: the 'mirror' extra)
from mirror.config import MirrorConfig, MirrorConfigError, load
from mirror.formats import Heartbeat
from mirror.replicator import Replicator
from mirror.topics import TopicSync

log = logging.getLogger("krafty.mirror")
STOP_S = 30.0  # how long a stop waits for the flows to commit


class Periodic:
    """A task of the scheduler thread: runs every ``interval`` seconds (never when <= 0)."""

    def __init__(self, name: str, interval: float, fn, first_delay: float | None = None, now: float = 0.0):
        self.name, self.interval, self.fn = name, interval, fn
        self.due = now + (interval if first_delay is None else first_delay)


class Mirror:
    def __init__(self, cfg: MirrorConfig, targets: set[str] | None, instance_id: str, progress_interval: float,
                 progress_format: str = "text", out=None, clock: Clock = SYSTEM):
        self.cfg = cfg
        self.clock = clock
        self.flows = [f for f in cfg.flows if targets is None or f.target in targets]
        self.heartbeat_pairs = [h for h in cfg.heartbeat_pairs if targets is None or h[1] in targets]
        self.instance_id = instance_id
        self.progress_interval = progress_interval
        self.progress_format = progress_format
        self.out = out or sys.stdout
        self.stop = threading.Event()
        self.error: str | None = None
        self.replicators = []
        self.tasks: list[Periodic] = []
        self._last: dict[str, tuple[float, int, int]] = {}

    # ----------------------------------------------------------------- start-up
    def _start(self) -> None:
        used = {f.source for f in self.flows} | {f.target for f in self.flows} | {h[1] for h in self.heartbeat_pairs}
        timeout = max(f["admin.timeout.ms"] for f in self.cfg.flows) / 1000
        for alias in sorted(used):
            validate(self.cfg.clusters[alias])
        self.admins = {a: Admin(self.cfg.clusters[a], timeout) for a in sorted(used)}
        for alias, admin in self.admins.items():
            try:
                admin.topics()
            except MirrorError:
                raise MirrorError(f"cannot connect to cluster {alias} "
                                  f"({self.cfg.clusters[alias].common['bootstrap.servers']}) within {timeout:.0f} s") from None
        now = self.clock.monotonic()
        # heartbeats: one producer per target cluster
        self.hb_producers = {}
        for source, target, interval, rf in self.heartbeat_pairs:
            if target not in self.hb_producers:
                self.admins[target].ensure_compacted_topic("heartbeats", rf, "heartbeats.topic.replication.factor")
                self.hb_producers[target] = producer(self.cfg.clusters[target],
                                                     **{"client.id": f"krafty-mirror-{target}-heartbeats"})
            self.tasks.append(Periodic(f"heartbeat {source}->{target}", interval,
                                       lambda s=source, t=target: self._heartbeat(s, t), first_delay=0, now=now))
        for flow in self.flows:
            src, tgt = self.admins[flow.source], self.admins[flow.target]
            rep = Replicator(flow, self.cfg.clusters[flow.source], self.cfg.clusters[flow.target], self.instance_id,
                             self.clock)
            sync = TopicSync(flow, src, tgt, rep.set_topics)
            sync.create_offset_syncs_topic()
            sync.refresh()
            self.replicators.append((rep, sync))
            if flow["refresh.topics.enabled"]:
                self.tasks.append(Periodic(f"{flow.name} refresh topics", flow["refresh.topics.interval.seconds"],
                                           sync.refresh, now=now))
            if flow["sync.topic.configs.enabled"]:
                self.tasks.append(Periodic(f"{flow.name} sync topic configs", flow["sync.topic.configs.interval.seconds"],
                                           sync.sync_configs, first_delay=0, now=now))
            if flow["sync.topic.acls.enabled"]:
                self.tasks.append(Periodic(f"{flow.name} sync topic ACLs", flow["sync.topic.acls.interval.seconds"],
                                           sync.sync_acls, first_delay=0, now=now))
            if flow["emit.checkpoints.enabled"] and flow["emit.offset-syncs.enabled"]:
                cp = CheckpointTask(flow, self.cfg.clusters[flow.source], self.cfg.clusters[flow.target], src, tgt,
                                    self.clock)
                cp.create_topic()
                self._start_checkpoints(cp)
                if flow["refresh.groups.enabled"]:
                    self.tasks.append(Periodic(f"{flow.name} refresh groups", flow["refresh.groups.interval.seconds"],
                                               lambda cp=cp: cp.refresh_groups() if cp.started else None, now=now))
                self.tasks.append(Periodic(f"{flow.name} emit checkpoints", flow["emit.checkpoints.interval.seconds"],
                                           lambda cp=cp, rep=rep: self._emit_checkpoints(cp, rep), now=now))
                if flow["sync.group.offsets.enabled"]:
                    self.tasks.append(Periodic(f"{flow.name} sync group offsets",
                                               flow["sync.group.offsets.interval.seconds"],
                                               lambda cp=cp, rep=rep: cp.sync_group_offsets() if rep.is_leader() else {},
                                               now=now))
        if self.progress_interval > 0:
            self.tasks.append(Periodic("progress", self.progress_interval, self._report, now=now))

    def _start_checkpoints(self, cp) -> None:
        """Loads the checkpoints and offset syncs; an internal topic that is unavailable now (its
        leader down) is tried again at the next emission, while the records keep flowing."""
        try:
            cp.start()
            cp.refresh_groups()
        except MirrorError as e:
            log.error("%s; checkpoints start later", e)

    def _emit_checkpoints(self, cp, rep) -> int:
        if not cp.started:
            self._start_checkpoints(cp)
        return cp.emit_checkpoints() if cp.started and rep.is_leader() else 0

    def _heartbeat(self, source: str, target: str) -> None:
        hb = Heartbeat(source, target, self.clock.wall_ms())
        p = self.hb_producers[target]
        p.produce("heartbeats", key=hb.key(), value=hb.value(), partition=0, timestamp=hb.timestamp)
        p.poll(0)

    # ----------------------------------------------------------------- progress
    def _report(self) -> None:
        now = self.clock.monotonic()
        for rep, _ in self.replicators:
            pr = rep.progress
            with pr.lock:
                records, nbytes, lag = pr.records, pr.bytes, dict(pr.lag)
                lats, pr.latencies_ms = pr.latencies_ms, []
                txns, aborted, state = pr.transactions, pr.aborted, pr.state
            t0, r0, b0 = self._last.get(rep.flow.name, (now, records, nbytes))
            self._last[rep.flow.name] = (now, records, nbytes)
            dt = max(now - t0, 1e-9)
            rate, mbs = (records - r0) / dt, (nbytes - b0) / dt / 1e6
            p99 = sorted(lats)[int(len(lats) * 0.99)] if lats else None
            if self.progress_format == "json":
                print(json.dumps({"flow": rep.flow.name, "state": state, "records": records, "records_per_s": round(rate, 1),
                                  "mb_per_s": round(mbs, 3), "partitions": len(lag), "lag": lag,
                                  "latency_p99_ms": p99, "transactions": txns, "aborted": aborted}), file=self.out,
                      flush=True)
                continue
            total = sum(lag.values())
            worst = sorted(((v, k) for k, v in lag.items() if v), reverse=True)
            shown = ", ".join(f"{k}: {v:,}" for v, k in worst[:10]) + (f", ... {len(worst) - 10} more" if len(worst) > 10 else "")
            line = (f"{time.strftime('%H:%M:%S', time.localtime(self.clock.wall_ms() / 1000))} {rep.flow.name} [{state}] {rate:,.0f} records/s, {mbs:,.2f} MB/s, "
                    f"{records:,} copied, {len(lag)} partitions, lag {total:,}" + (f" ({shown})" if shown else ""))
            if p99 is not None:
                line += f", latency p99 {p99} ms"
            if rep.eos:
                line += f", {txns:,} transactions ({aborted} aborted)"
            print(line, file=self.out, flush=True)

    # ----------------------------------------------------------------- running
    def _scheduler(self) -> None:
        while not self.stop.is_set():
            now = self.clock.monotonic()
            for t in self.tasks:
                if t.interval > 0 and now >= t.due:
                    t.due = now + t.interval
                    try:
                        t.fn()
                    except MirrorError as e:
                        log.error("%s: %s", t.name, e)
                    except Exception:  # noqa: BLE001 - a housekeeping task must not stop the data path
                        log.exception("%s failed", t.name)
            self.stop.wait(0.2)

    def _replicate(self, rep) -> None:
        try:
            rep.run()
        except MirrorError as e:
            self.error = self.error or str(e)
            self.stop.set()
        except Exception as e:  # noqa: BLE001 - reported as the mirror's one line
            log.exception("flow %s failed", rep.flow.name)
            self.error = self.error or f"flow {rep.flow.name}: {type(e).__name__}: {e}"
            self.stop.set()

    def run(self) -> int:
        try:
            self._start()
        except MirrorConfigError as e:
            print(f"krafty mirror: {e}", file=sys.stderr)
            return 2
        except MirrorError as e:
            print(f"krafty mirror: {e}", file=sys.stderr)
            return 1
        threads = [threading.Thread(target=self._replicate, args=(rep,), name=f"mirror {rep.flow.name}", daemon=True)
                   for rep, _ in self.replicators]
        threads.append(threading.Thread(target=self._scheduler, name="mirror scheduler", daemon=True))
        for t in threads:
            t.start()
        try:
            while not self.stop.is_set():
                self.stop.wait(0.5)
        finally:
            self.stop.set()
            for rep, _ in self.replicators:
                rep.stopping.set()
            # a stop that hangs (a client waiting on a dead broker) shows where, in the log
            faulthandler.dump_traceback_later(STOP_S / 2, exit=False)
            deadline = self.clock.monotonic() + STOP_S
            for t in threads[:-1]:  # the flows commit what they copied
                t.join(max(0.1, deadline - self.clock.monotonic()))
            threads[-1].join(2)     # housekeeping may be inside an admin call: not worth waiting for
            faulthandler.cancel_dump_traceback_later()
            self.stuck = [t.name for t in threads if t.is_alive()]
            if self.stuck:
                log.warning("still busy at exit: %s", ", ".join(self.stuck))
            for p in getattr(self, "hb_producers", {}).values():
                p.flush(2)
            if self.progress_interval > 0:
                self._report()
        if self.error:
            print(f"krafty mirror: {self.error}", file=sys.stderr)
            return 1
        return 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="krafty mirror", description="replicate topics between clusters "
                                "(MirrorMaker 2's configuration and formats)")
    p.add_argument("config", help="a MirrorMaker 2 properties file (clusters = A, B; A.bootstrap.servers = ...; "
                                  "A->B.enabled = true; ...)")
    p.add_argument("--clusters", nargs="+", metavar="ALIAS", help="run only the flows into these target clusters")
    p.add_argument("--instance-id", default=None, help="this instance's name in transactional ids "
                   "(default: a random one per start)")
    p.add_argument("--progress-interval", type=float, default=10.0, metavar="S",
                   help="print progress every S seconds (0: never; default 10)")
    p.add_argument("--progress-format", choices=("text", "json"), default="text")
    args = p.parse_args(argv)
    if logging.getLogger().level > logging.INFO and not logging.getLogger("krafty.mirror").level:
        logging.getLogger("krafty.mirror").setLevel(logging.WARNING)
    try:
        cfg = load(args.config)
    except MirrorConfigError as e:
        print(f"krafty mirror: {e}", file=sys.stderr)
        return 2
    for w in cfg.warnings:
        print(f"WARN krafty mirror: {w}", file=sys.stderr)
    if args.clusters:
        unknown = [c for c in args.clusters if c not in cfg.clusters]
        if unknown:
            print(f"krafty mirror: --clusters {unknown[0]}: not in the config's clusters "
                  f"({', '.join(cfg.clusters)})", file=sys.stderr)
            return 2
    mirror = Mirror(cfg, set(args.clusters) if args.clusters else None,
                    args.instance_id or SYSTEM.uuid4().hex[:12], args.progress_interval, args.progress_format)
    if not mirror.flows:
        print(f"krafty mirror: no enabled flow into {', '.join(args.clusters)}", file=sys.stderr)
        return 2

    def on_signal(signum, frame):
        mirror.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    code = mirror.run()
    # what had to be committed is; clients still waiting on an unreachable broker must not keep the
    # process (or its interpreter shutdown) alive
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
