"""``krafty chaos run``: start a cluster, run the workloads while the nemesis breaks things, heal,
check that the cluster recovers, read everything back, and judge the history.

Phases (TigerBeetle/Jepsen style): setup -> faults on (workloads + nemesis) -> heal -> recovery
(leaders back, a fresh acks=all write to every partition) -> final reads -> checker. The output
directory gets ``history.jsonl`` (every operation), ``verdict.json``, ``report.html`` and the nodes'
logs; the exit code is 0 when the checker found nothing, 1 on any anomaly, 2 when the run itself
could not be carried out.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shlex
import signal
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.log.batch import parse_batches
from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from chaos import checker, report
from chaos.cluster import FAKETIME_LIB, BaseCluster, make_cluster
from chaos.history import History
from chaos.nemesis import KINDS, Nemesis
from chaos.txn_workload import TXN_TOPIC, TxnProducerWorker, txn_reader
from chaos.txn_workload import final_read as txn_final_read
from chaos.workload import (
    CONSUMER_PROTOCOL_OVERRIDES,
    ConsumerWorker,
    Counter,
    GroupWorker,
    Probe,
    ProducerWorker,
    TopicChurnWorker,
    _NullLogger,
)

TOPIC = "chaos"


@dataclass
class Options:
    cluster: str = "local"
    nemesis: list[str] = field(default_factory=lambda: list(KINDS))
    time: float = 120.0
    seed: int = 1
    out: str = "chaos-out"
    partitions: int = 6
    producers: int = 2
    rate: float = 100.0  # records per second per producer
    consumers: int = 2
    groups: str = "auto"  # auto | on | off
    churn: bool = True
    hold: tuple[float, float] = (5.0, 12.0)
    quiet: tuple[float, float] = (2.0, 6.0)
    recovery_timeout: float = 90.0
    group_liveness: float | None = None  # seconds; None: the checker's default (from the session timeout)
    override: dict[str, str] = field(default_factory=dict)  # node config keys for every node
    workload: str = "plain"  # plain | txn (also transactional producers and read_committed readers)
    group_protocol: str = "classic"  # classic | consumer (KIP-848) for the group members
    argv: list[str] = field(default_factory=list)


class HarnessError(Exception):
    """The run could not be carried out (not a verdict about the cluster)."""


def log(msg: str) -> None:
    print(f"chaos: {msg}", file=sys.stderr, flush=True)


def clock_unavailable() -> str | None:
    """None when the clock nemesis can skew a node's wall clock, else why not."""
    if not os.path.exists(FAKETIME_LIB):
        return (f"libfaketime is not installed ({FAKETIME_LIB} is missing): "
                "apt-get install faketime (or: make system-deps)")
    return None


def supports_api(host: str, port: int, api_key: int, timeout: float = 5.0) -> bool:
    """Whether the broker advertises ``api_key`` in its ApiVersions v0 answer."""
    client = b"krafty-chaos"
    body = struct.pack(">hhih", 18, 0, 1, len(client)) + client
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed during ApiVersions")
            data += chunk
    _corr, err, n = struct.unpack(">ihi", data[4:14])
    keys = {struct.unpack(">h", data[14 + 6 * i:16 + 6 * i])[0] for i in range(max(n, 0))}
    return err == 0 and api_key in keys


def wait_for(fn, timeout: float, what: str, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            v = fn()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - retried until the deadline
            last = e
        time.sleep(interval)
    raise HarnessError(f"timed out after {timeout:.0f}s waiting for {what}" + (f" (last error: {last})" if last else ""))


def leaders_ok(admin: AdminClient, topic: str, partitions: int, brokers: set[int], full_isr: bool = False) -> bool:
    md = admin.list_topics(topic, timeout=5)
    t = md.topics.get(topic)
    if t is None or t.error is not None or len(t.partitions) != partitions:
        return False
    return all(p.leader in brokers and (not full_isr or len(p.isrs) == len(p.replicas))
               for p in t.partitions.values())


def setup_topic(c: BaseCluster, opts: Options, topic: str = TOPIC) -> None:
    admin = AdminClient({"bootstrap.servers": c.bootstrap, "logger": _NullLogger()})
    ids = {b.id for b in c.brokers}
    wait_for(lambda: {b.id for b in admin.list_topics(timeout=5).brokers.values()} >= ids, 120,
             "every broker to register")
    fut = admin.create_topics([NewTopic(topic, opts.partitions, 3, config={"min.insync.replicas": "2"})],
                              operation_timeout=30)[topic]
    fut.result(60)
    wait_for(lambda: leaders_ok(admin, topic, opts.partitions, ids, full_isr=True), 60,
             f"leaders and full ISRs for {topic}")


def final_produce(c: BaseCluster, hist: History, partitions: int, timeout: float) -> None:
    """A fresh acks=all write to every partition after the heal: the cluster makes progress again."""
    errors: list[str] = []
    done = []
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True,
                  "message.timeout.ms": int(timeout * 1000), "logger": _NullLogger()})

    def cb(err, msg):
        if err:
            errors.append(f"{msg.partition()}: {err}")
        else:
            done.append([f"{TOPIC}/{msg.partition()}", msg.offset(), int(msg.value())])
    t0 = hist.now()
    sent = []
    for pid in range(partitions):  # negative values: unique, and never confused with the workload's
        p.produce(TOPIC, value=str(-1 - pid).encode(), partition=pid, on_delivery=cb)
        sent.append([f"{TOPIC}/{pid}", -1 - pid])
    left = p.flush(timeout + 5)
    ok = not errors and left == 0 and len(done) == partitions
    # the acks are the last records of every partition: the final read must contain them
    hist.add("final-produce", type="ok" if ok else "fail", seconds=round(hist.now() - t0, 3), sent=sent, acks=done,
             error="; ".join(errors[:3]) or (f"{left} unanswered" if left else None))


def final_read(c: BaseCluster, hist: History, partitions: int, timeout: float) -> None:
    """Read every partition from its start to its high watermark with a fresh consumer."""
    cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "chaos-final", "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "logger": _NullLogger()})
    try:
        for pid in range(partitions):
            tp = f"{TOPIC}/{pid}"
            deadline = time.monotonic() + timeout
            lo = hi = None
            while time.monotonic() < deadline:
                try:
                    lo, hi = cons.get_watermark_offsets(TopicPartition(TOPIC, pid), timeout=5)
                    break
                except KafkaException:
                    time.sleep(1)
            if hi is None:
                hist.add("final-read", tp=tp, msgs=[], complete=False, error="no watermarks")
                continue
            msgs: list[list[int]] = []
            cons.assign([TopicPartition(TOPIC, pid, lo)])
            last = lo - 1
            while last < hi - 1 and time.monotonic() < deadline:
                for m in cons.consume(1000, 1.0):
                    if m.error() is None and m.offset() < hi:
                        msgs.append([m.offset(), int(m.value())])
                        last = max(last, m.offset())
            cons.unassign()
            hist.add("final-read", tp=tp, msgs=msgs, complete=last >= hi - 1 and lo == 0, low=lo, high=hi)
    finally:
        cons.close()


def final_batches(c: BaseCluster, hist: History, partitions: int, timeout: float) -> None:
    """The producer id, epoch and sequences of every record batch of the chaos topic, read with
    raw Fetch requests from each partition's leader (a Kafka consumer does not show them): the
    checker tells a value written twice within one producer epoch (the broker's idempotence
    failed) from one the client sent again under a new epoch, which Kafka does not deduplicate
    either (see checker.check_duplicates)."""
    admin = AdminClient({"bootstrap.servers": c.bootstrap, "logger": _NullLogger()})
    for pid in range(partitions):
        tp = f"{TOPIC}/{pid}"
        try:
            batches, complete = asyncio.run(_read_batches(admin, pid, timeout))
        except (KafkaException, ConnectionError, OSError, TimeoutError) as e:
            hist.add("final-batches", tp=tp, batches=[], complete=False, error=repr(e))
            continue
        hist.add("final-batches", tp=tp, batches=batches, complete=complete)


async def _read_batches(admin: AdminClient, partition: int, timeout: float) -> tuple[list[list[int]], bool]:
    """[[base offset, last offset, producer id, producer epoch, base sequence], ...] of one partition,
    from its log start to its high watermark; and whether the read got there."""
    deadline = time.monotonic() + timeout
    out: list[list[int]] = []
    offset, high, max_bytes = 0, None, 1 << 20
    conn = None
    try:
        while time.monotonic() < deadline and (high is None or offset < high):
            if conn is None:
                md = admin.list_topics(TOPIC, timeout=5).topics[TOPIC].partitions[partition]
                b = admin.list_topics(timeout=5).brokers.get(md.leader)
                if b is None:
                    await asyncio.sleep(1)
                    continue
                conn = KafkaConnection(b.host, b.port, client_id="chaos-final-batches")
            try:
                r = await conn.request(ApiKey.FETCH, 12, {
                    "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": max_bytes, "isolation_level": 0,
                    "session_id": 0, "session_epoch": -1, "topics": [{"topic": TOPIC, "partitions": [{
                        "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                        "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": max_bytes}]}],
                    "forgotten_topics_data": [], "rack_id": ""}, timeout=10)
            except (ConnectionError, TimeoutError):
                conn = None
                await asyncio.sleep(1)
                continue
            pd = r.responses[0].partitions[0]
            if int(pd.error_code) != 0:
                conn.close()
                conn = None
                await asyncio.sleep(1)
                continue
            high = int(pd.high_watermark) if high is None else high
            data = bytes(pd.records or b"")
            hs = [h for h in parse_batches(data) if h.next_offset > offset]
            if not hs:
                if offset < high:
                    max_bytes *= 2  # a batch larger than the fetch size
                continue
            out.extend([h.base_offset, h.last_offset, h.producer_id, h.producer_epoch, h.base_sequence] for h in hs)
            offset = hs[-1].next_offset
    finally:
        if conn is not None:
            conn.close()
    return out, high is not None and offset >= high


def final_topics(c: BaseCluster, hist: History) -> None:
    admin = AdminClient({"bootstrap.servers": c.bootstrap, "logger": _NullLogger()})
    try:
        md = admin.list_topics(timeout=10)
        hist.add("topics-final", topics=sorted(md.topics), complete=True)
    except KafkaException as e:
        hist.add("topics-final", topics=[], complete=False, error=str(e))


class Progress(threading.Thread):
    """One line every few seconds: elapsed, writes acknowledged/failed, reads, the current fault."""

    def __init__(self, hist: History, total: float, producers, consumers, groups, nemesis: Nemesis,
                 every: float = 5.0):
        super().__init__(name="progress", daemon=True)
        self.hist, self.total, self.every = hist, total, every
        self.producers, self.consumers, self.groups, self.nemesis = producers, consumers, groups, nemesis
        self.stopping = threading.Event()

    def run(self) -> None:
        tty = sys.stderr.isatty()
        while not self.stopping.wait(self.every):
            acked = sum(p.acked for p in self.producers)
            failed = sum(p.failed for p in self.producers)
            polled = sum(c.polled for c in self.consumers)
            commits = sum(g.commits for g in self.groups)
            fault = self.nemesis.current or "-"
            line = (f"[{self.hist.now():5.0f}s/{self.total:.0f}s] acked {acked} failed {failed} polled {polled} "
                    f"commits {commits} | fault: {fault}")
            print(("\r\x1b[K" if tty else "") + line, end="" if tty else "\n", file=sys.stderr, flush=True)
        if tty:
            print(file=sys.stderr)


def run(opts: Options) -> int:
    kinds = list(dict.fromkeys(opts.nemesis))
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        log(f"unknown nemesis {bad[0]!r} (choose from {', '.join(KINDS)})")
        return 2
    skipped = {}
    if "clock" in kinds:
        why = clock_unavailable() or ("clock skew is not supported in compose mode (no libfaketime in the image)"
                                      if opts.cluster == "compose" else None)
        if why:
            log(f"skipping the clock nemesis: {why}")
            skipped["clock"] = why
            kinds.remove("clock")
    if not kinds:
        log("no nemesis left to run")
        return 2
    os.makedirs(opts.out, exist_ok=True)
    out = os.path.abspath(opts.out)
    rng = random.Random(opts.seed)
    hist = History()
    meta = {"seed": opts.seed, "cluster": opts.cluster, "nemesis": kinds, "skipped": skipped, "time": opts.time,
            "command": "krafty chaos " + shlex.join(opts.argv) if opts.argv else None,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    log(f"seed {opts.seed}, cluster {opts.cluster}, nemesis {','.join(kinds)}, {opts.time:.0f}s, output in {out}")
    try:
        overrides = {**(CONSUMER_PROTOCOL_OVERRIDES if opts.group_protocol == "consumer" else {}), **opts.override}
        c = make_cluster(opts.cluster, os.path.join(out, "cluster"), network="partition" in kinds,
                         overrides=overrides, log=log)
    except (RuntimeError, OSError) as e:
        log(f"cannot start the {opts.cluster} cluster: {e}")
        return 2
    workers: list = []
    nemesis = None
    harness_error = None
    try:
        c.start_all()
        log(f"cluster starting: {len(c.controllers)} controllers, {len(c.brokers)} brokers at {c.bootstrap}")
        setup_topic(c, opts)
        groups = opts.groups == "on"
        if opts.groups == "auto":
            b = c.brokers[0]
            groups = supports_api(b.host, b.ports[0], 10)  # FindCoordinator
        meta["groups"] = groups
        meta["group_protocol"] = opts.group_protocol
        log(f"topic {TOPIC} ready ({opts.partitions} partitions, RF 3, min.insync.replicas 2); "
            f"consumer groups {'on' if groups else 'off (the brokers do not serve FindCoordinator)'}")
        counter = Counter()
        probe = Probe(c.bootstrap, TOPIC, c.controller_addresses(), hist)
        producers = [ProducerWorker(i, c.bootstrap, TOPIC, opts.partitions, hist, counter, opts.rate)
                     for i in range(opts.producers)]
        consumers = [ConsumerWorker(i, c.bootstrap, TOPIC, opts.partitions, hist, random.Random(rng.random()))
                     for i in range(opts.consumers)]
        members = [GroupWorker(i, c.bootstrap, TOPIC, "chaos-group", hist, opts.group_protocol)
                   for i in range(2)] if groups else []
        churn = [TopicChurnWorker(c.bootstrap, hist, random.Random(rng.random()))] if opts.churn else []
        txn_producers: list = []
        txn_readers: list = []
        if opts.workload == "txn":
            setup_topic(c, opts, TXN_TOPIC)
            log(f"topic {TXN_TOPIC} ready: {opts.producers} transactional producers, "
                f"{opts.consumers} read_committed readers")
            txn_producers = [TxnProducerWorker(i, c.bootstrap, TXN_TOPIC, opts.partitions, hist, counter,
                                               random.Random(rng.random()), opts.rate) for i in range(opts.producers)]
            txn_readers = [txn_reader(i, c.bootstrap, TXN_TOPIC, opts.partitions, hist,
                                       random.Random(rng.random())) for i in range(opts.consumers)]
        workers = [probe, *producers, *txn_producers, *consumers, *txn_readers, *members, *churn]
        for w in workers:
            w.start()
        nemesis = Nemesis(c, hist, kinds, random.Random(rng.random()), probe=probe, topic=TOPIC)
        progress = Progress(hist, hist.now() + opts.time, producers, consumers, members, nemesis)
        progress.start()
        stopping = threading.Event()
        try:
            nemesis.run(opts.time, stopping, hold=opts.hold, quiet=opts.quiet)
        except KeyboardInterrupt:
            log("interrupted: healing and checking what ran so far")
        finally:
            nemesis.heal_all()
            progress.stopping.set()
        t_heal = hist.add("heal")["t"]
        log("faults healed; waiting for the cluster to recover")
        admin = AdminClient({"bootstrap.servers": c.bootstrap, "logger": _NullLogger()})
        ids = {b.id for b in c.brokers}
        try:
            wait_for(lambda: leaders_ok(admin, TOPIC, opts.partitions, ids), opts.recovery_timeout,
                     "every partition to have a leader")
            hist.add("recovered", seconds=round(hist.now() - t_heal, 3))
        except HarnessError as e:
            hist.add("recovered", seconds=None, error=str(e))
        # the group members must get records again within the liveness bound: keep writing until they
        # all have (or the bound ran out; the checker judges), then a few more seconds on the healed cluster
        bound = opts.group_liveness if opts.group_liveness is not None else \
            checker.default_group_liveness_s(hist.snapshot())
        while members and hist.now() < t_heal + bound + 1 and not all(
                m.last_records_t is not None and m.last_records_t > t_heal for m in members):
            time.sleep(0.2)
        time.sleep(3)
        for w in [*producers, *txn_producers, *churn, *members]:
            w.stop()
        for w in [*producers, *txn_producers, *churn, *members]:
            w.join(120)
        final_produce(c, hist, opts.partitions, 60)
        time.sleep(3)  # consumers catch up to the end
        for w in [*consumers, *txn_readers, probe]:
            w.stop()
        for w in [*consumers, *txn_readers, probe]:
            w.join(60)
        log("final reads")
        final_read(c, hist, opts.partitions, 120)
        final_batches(c, hist, opts.partitions, 120)
        if opts.workload == "txn":
            txn_final_read(c.bootstrap, hist, TXN_TOPIC, opts.partitions, t_heal, opts.recovery_timeout)
        final_topics(c, hist)
        errors = {w.name: repr(w.error) for w in workers if w.error is not None}
        for w in workers:
            if w.is_alive():  # hung in a client call that has no timeout of its own: the checker reports it
                r = w.stuck_report()
                hist.add("stuck", **r)
                log(f"{w.name} did not stop: it is in {r['call'] or 'an unmarked call'} since t={r['since']}\n"
                    f"{r['stack']}")
        if errors:
            harness_error = f"workers failed: {errors}"
    except HarnessError as e:
        harness_error = str(e)
    except Exception as e:  # noqa: BLE001 - reported with the partial history
        harness_error = f"{type(e).__name__}: {e}"
    finally:
        for w in workers:
            w.stop()
        if nemesis is not None and harness_error:
            try:
                nemesis.heal_all()
            except Exception as e:  # noqa: BLE001 - the cluster is torn down next anyway
                log(f"healing after the error failed too: {e}")
        try:
            c.close()
        except Exception as e:  # noqa: BLE001 - report the run all the same
            log(f"cleaning up the cluster failed: {e}")
            harness_error = harness_error or f"cleanup failed: {e}"

    history = hist.snapshot()
    hist.dump(os.path.join(out, "history.jsonl"))
    verdict = checker.check(history, group_liveness_s=opts.group_liveness)
    verdict["meta"] = meta
    if harness_error:
        verdict["harness-error"] = harness_error
        for name in c.nodes:
            tail = c.log_tail(name, 10)
            if tail:
                log(f"---- {name} (last lines) ----\n{tail}")
    with open(os.path.join(out, "verdict.json"), "w") as f:
        json.dump(verdict, f, indent=2, sort_keys=True)
    with open(os.path.join(out, "report.html"), "w") as f:
        f.write(report.render(verdict, history))
    print_summary(verdict, out)
    if harness_error:
        log(f"the run could not be completed: {harness_error}")
        return 2
    return 0 if verdict["valid"] else 1


def _fmt(s: dict) -> str:
    if not s["count"]:
        return "none measured"
    return f"n={s['count']} median {s['median']:.2f}s p99 {s['p99']:.2f}s max {s['max']:.2f}s"


def print_summary(v: dict, out: str) -> None:
    c = v["counts"]
    e = v["elections"]
    verdict = "VALID" if v["valid"] else "ANOMALIES: " + ", ".join(v["anomaly-types"])
    if v.get("harness-error"):
        verdict = f"INCOMPLETE RUN (harness error; checks over a partial history: {verdict})"
    lines = [
        f"verdict: {verdict}",
        f"writes: {c['send-ok']} acknowledged, {c['send-fail']} failed/indeterminate, {c['lost']} lost, "
        f"{c['unseen']} not reached by any read; polled {c['polled']}, final read {c['final-read']}; "
        f"{c['commits']} group commits; {c['topic-ops']} topic ops; {c['faults']} faults",
        f"controller elections: {_fmt(e['controller'])}",
        f"partition-leader elections: {_fmt(e['partition'])}",
    ]
    if "txn-committed" in c:
        lines.append(f"transactions: {c['txn-committed']} committed, {c['txn-aborted']} aborted, {c['txn-unknown']} "
                     f"unknown outcome ({c['txn-records']} records); read_committed polled {c['txn-polled']}, "
                     f"final read {c['txn-final-read']}")
    stalls = v.get("group-stalls", {}).get("members", {})
    if stalls:
        proc, worst = max(stalls.items(), key=lambda kv: kv[1]["max_s"])
        lines.append(f"consumer groups: longest time a member went without records {worst['max_s']:.2f}s "
                     f"({proc}, {worst['from']}s-{worst['to']}s); after the heal each must get records "
                     f"within {v['group-liveness-bound-s']:.0f}s")
    gaps = sorted(v.get("outages", []), key=lambda o: o["max_ack_gap_s"])
    if gaps:
        worst = gaps[-1]
        lines.append(f"unavailability (longest gap between acknowledged writes to one partition, per fault): "
                     f"median {gaps[len(gaps) // 2]['max_ack_gap_s']:.2f}s, max {worst['max_ack_gap_s']:.2f}s "
                     f"during {worst['desc']}")
    if c.get("resent-after-epoch-bump"):
        lines.append(f"client re-sends: {c['resent-after-epoch-bump']} value(s) written once per producer epoch, the "
                     f"client having sent them again under a bumped epoch (librdkafka #4953; not a broker anomaly): "
                     f"{json.dumps(v['resent-after-epoch-bump'][:3])}")
    for k in v["anomaly-types"]:
        lines.append(f"  {k}: {json.dumps(v['anomalies'][k][:3])}")
    lines.append(f"report: {os.path.join(out, 'report.html')}  verdict: {os.path.join(out, 'verdict.json')}")
    print("\n".join(lines), flush=True)


def _key_value(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` for --override."""
    import argparse
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def _span(text: str) -> tuple[float, float]:
    """``MIN:MAX`` seconds (or one number for both) for --hold and --gap."""
    import argparse
    try:
        lo, _, hi = text.partition(":")
        span = (float(lo), float(hi or lo))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MIN:MAX seconds, got {text!r}") from None
    if not 0 <= span[0] <= span[1]:
        raise argparse.ArgumentTypeError(f"expected 0 <= MIN <= MAX, got {text!r}")
    return span


def main(argv: list[str]) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="krafty chaos", description="chaos testing of a krafty cluster")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a cluster under faults and check the history")
    r.add_argument("--cluster", choices=["local", "netns", "compose"], default="local",
                   help="local processes on loopback, processes in network namespaces, or docker compose")
    r.add_argument("--nemesis", default=",".join(KINDS), help=f"comma-separated, from {','.join(KINDS)}")
    r.add_argument("--time", type=float, default=120, help="seconds of faults")
    r.add_argument("--seed", type=int, default=None, help="seed of the fault schedule (default: random)")
    r.add_argument("--out", default=None, help="output directory (default: chaos-out/<seed>)")
    r.add_argument("--partitions", type=int, default=6)
    r.add_argument("--producers", type=int, default=2)
    r.add_argument("--rate", type=float, default=100, help="records per second per producer")
    r.add_argument("--consumers", type=int, default=2)
    r.add_argument("--groups", choices=["auto", "on", "off"], default="auto",
                   help="consumer-group members that commit (auto: when the brokers serve FindCoordinator)")
    r.add_argument("--no-churn", action="store_true", help="no topic create/delete during faults")
    r.add_argument("--hold", type=_span, default=(5.0, 12.0), metavar="MIN:MAX",
                   help="seconds each fault lasts, drawn uniformly (default 5:12)")
    r.add_argument("--gap", type=_span, default=(2.0, 6.0), metavar="MIN:MAX",
                   help="seconds of calm between faults (default 2:6)")
    r.add_argument("--override", action="append", default=[], type=_key_value, metavar="KEY=VALUE",
                   help="a node config key for every node (repeatable), e.g. krafty.log.writer.threads=2")
    liveness_help = ("seconds after the heal within which every consumer-group member must get records "
                     "(default: 3 session timeouts + the initial rebalance delay = 33 s)")
    r.add_argument("--group-liveness", type=float, default=None, metavar="S", help=liveness_help)
    r.add_argument("--group-protocol", choices=["classic", "consumer"], default="classic",
                   help="the group members' protocol (consumer: KIP-848, group.protocol=consumer)")
    r.add_argument("--workload", choices=["plain", "txn"], default="plain",
                   help="txn: also transactional producers (commit or abort at random) and read_committed readers "
                        "of their own topic, checked for aborted/uncommitted reads, lost, duplicate or partial "
                        "transactions and a last stable offset that stops advancing")
    c = sub.add_parser("check", help="judge a recorded history.jsonl again (and rewrite the report)")
    c.add_argument("history")
    c.add_argument("--out", default=None, help="where to write verdict.json and report.html")
    c.add_argument("--group-liveness", type=float, default=None, metavar="S", help=liveness_help)
    args = p.parse_args(argv)
    if args.cmd == "check":
        from chaos.history import load
        history = load(args.history)
        verdict = checker.check(history, group_liveness_s=args.group_liveness)
        out = args.out or os.path.dirname(os.path.abspath(args.history))
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "verdict.json"), "w") as f:
            json.dump(verdict, f, indent=2, sort_keys=True)
        with open(os.path.join(out, "report.html"), "w") as f:
            f.write(report.render(verdict, history))
        print_summary(verdict, out)
        return 0 if verdict["valid"] else 1
    if args.time <= 0 or args.partitions < 1 or args.producers < 1 or args.rate <= 0 or args.consumers < 0:
        p.error("--time, --partitions, --producers and --rate must be positive, --consumers not negative")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**6)
    opts = Options(cluster=args.cluster, nemesis=[k.strip() for k in args.nemesis.split(",") if k.strip()],
                   time=args.time, seed=seed, out=args.out or os.path.join("chaos-out", str(seed)),
                   partitions=args.partitions, producers=args.producers, rate=args.rate,
                   consumers=args.consumers, groups=args.groups, churn=not args.no_churn,
                   hold=args.hold, quiet=args.gap, override=dict(args.override), group_liveness=args.group_liveness,
                   workload=args.workload, group_protocol=args.group_protocol,
                   argv=["run", *argv[1:]] if args.seed is not None else ["run", *argv[1:], "--seed", str(seed)])
    signal.signal(signal.SIGTERM, _interrupt)  # a SIGTERM heals and stops the cluster as Ctrl-C does
    return run(opts)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
