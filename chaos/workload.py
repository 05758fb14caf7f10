"""Workloads with real clients (confluent-kafka), each a thread that writes what it does into the
history: idempotent acks=all producers of unique integers, assign-mode consumers in sessions,
optional consumer-group members that commit, topic create/delete churn, and a probe that samples
partition leaders and the active controller."""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import sys
import threading
import time
import traceback

# gRPC core logs every GOAWAY from a restarted controller to stderr; the probe handles them
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

import grpc  # noqa: E402
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from chaos.history import History
from proto import raft_pb2 as pb
from proto import raft_pb2_grpc as pb_grpc


class Counter:
    def __init__(self):
        self._it = itertools.count()
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            return next(self._it)


class Worker(threading.Thread):
    def __init__(self, name: str, hist: History):
        super().__init__(name=name, daemon=True)
        self.hist = hist
        self.stopping = threading.Event()
        self.error: BaseException | None = None
        # the client call this worker is in, if it is one that has no timeout of its own (librdkafka's
        # synchronous commit and close): (what, process, history time it started)
        self.in_call: tuple[str, str, float] | None = None

    def stop(self) -> None:
        self.stopping.set()

    @contextlib.contextmanager
    def calling(self, what: str, process: str):
        """Marks a client call that may block for as long as the client library likes: a worker
        that does not stop is reported with the call it is stuck in (see ``stuck_report``)."""
        self.in_call = (what, process, self.hist.now())
        try:
            yield
        finally:
            self.in_call = None

    def stuck_report(self) -> dict:
        """What this worker, still running after it was told to stop, is doing: the client call
        and since when, and its Python stack."""
        frame = sys._current_frames().get(self.ident)
        stack = "".join(traceback.format_stack(frame)[-6:]) if frame is not None else ""
        what, process, since = self.in_call or ("", "", None)
        return {"worker": self.name, "process": process, "call": what, "since": since, "stack": stack}

    def run(self) -> None:
        try:
            self.body()
        except BaseException as e:  # noqa: BLE001 - reported by the runner
            self.error = e


def quiet_log(*_a, **_k) -> None:
    pass


class ProducerWorker(Worker):
    """Sends unique integers round-robin over the partitions at ``rate`` per second; a producer
    instance that hits a fatal error is replaced (a new process id in the history)."""

    def __init__(self, idx: int, bootstrap: str, topic: str, partitions: int, hist: History, counter: Counter,
                 rate: float):
        super().__init__(f"producer-{idx}", hist)
        self.idx, self.bootstrap, self.topic, self.partitions = idx, bootstrap, topic, partitions
        self.counter, self.rate = counter, rate
        self.acked = 0
        self.failed = 0
        self.flush_timeout = 90.0

    def body(self) -> None:
        for gen in itertools.count(1):
            if self.stopping.is_set():
                return
            self._instance(f"p{self.idx}.{gen}")

    def _instance(self, proc: str) -> None:
        fatal = threading.Event()
        pending: dict[int, str] = {}

        def on_error(err: KafkaError) -> None:
            if err.fatal():
                self.hist.add("client-error", process=proc, error=str(err), fatal=True)
                fatal.set()

        def on_delivery(err, msg, proc=proc) -> None:
            v = int(msg.value())
            tp = pending.pop(v, f"{self.topic}/{msg.partition()}")
            if err is None:
                self.acked += 1
                self.hist.add("send", type="ok", process=proc, tp=tp, value=v, offset=msg.offset())
            else:
                self.failed += 1
                self.hist.add("send", type="fail", process=proc, tp=tp, value=v, error=err.name())

        p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 5, "message.timeout.ms": 60000, "request.timeout.ms": 10000,
                      "max.in.flight.requests.per.connection": 5, "topic.metadata.refresh.interval.ms": 2000,
                      "error_cb": on_error, "logger": _NullLogger(), **_debug_log("eos,msg", proc, self.hist)})
        part = itertools.cycle(range(self.partitions))
        interval = 1.0 / self.rate if self.rate > 0 else 0
        next_at = time.monotonic()
        while not self.stopping.is_set() and not fatal.is_set():
            if len(p) > 5000:  # don't build an unbounded queue while a partition is down
                p.poll(0.1)
                continue
            v = self.counter.next()
            pid = next(part)
            tp = f"{self.topic}/{pid}"
            pending[v] = tp
            self.hist.add("send", type="invoke", process=proc, tp=tp, value=v)
            try:
                p.produce(self.topic, value=str(v).encode(), partition=pid, on_delivery=on_delivery)
            except (BufferError, KafkaException) as e:  # refused by the client: never sent
                pending.pop(v, None)
                self.hist.add("send", type="fail", process=proc, tp=tp, value=v, error=repr(e), definite=True)
            p.poll(0)
            next_at += interval
            if next_at < time.monotonic() - 1.0:  # fell behind (a full queue): no burst to catch up
                next_at = time.monotonic()
            # poll() returns as soon as it has served a delivery report: wait out the interval
            while (delay := next_at - time.monotonic()) > 0 and not self.stopping.is_set():
                p.poll(delay)
        p.flush(self.flush_timeout if not fatal.is_set() else 10)
        for v, tp in list(pending.items()):  # never answered: indeterminate
            self.hist.add("send", type="info", process=proc, tp=tp, value=v, error="no answer before close")
        pending.clear()


class _TimeLogger:
    def __init__(self, path, hist):
        self.f = open(path, "a")
        self.hist = hist

    def log(self, level, msg, *args):
        self.f.write(f"{self.hist.now():9.3f} {msg % args if args else msg}\n")
        self.f.flush()


def _debug_log(contexts: str, proc: str, hist) -> dict:
    """With KRAFTY_CHAOS_CLIENT_DEBUG_DIR=DIR: the client settings that write librdkafka's debug log of
    ``contexts`` to DIR/<proc>.log (times on the history's clock); else none."""
    dbg = os.environ.get("KRAFTY_CHAOS_CLIENT_DEBUG_DIR")
    return {"debug": contexts, "logger": _TimeLogger(os.path.join(dbg, f"{proc}.log"), hist)} if dbg else {}


def _stderr_debug(contexts: str, proc: str) -> dict:
    """With KRAFTY_CHAOS_CLIENT_DEBUG_DIR set: a consumer's debug log of ``contexts`` through
    librdkafka's own printer to stderr, lines tagged ``<proc>#consumer-N``. A log callback is only
    served by poll(), so it would say nothing while the application hangs in a call (commit, close)."""
    if not os.environ.get("KRAFTY_CHAOS_CLIENT_DEBUG_DIR"):
        return {}
    return {"debug": contexts, "client.id": proc, "logger": None}


class _NullLogger:
    """librdkafka's logs would flood stderr during faults; errors reach the history instead."""

    def log(self, *_a, **_k) -> None:
        pass

    def __getattr__(self, _name):
        return quiet_log


class ConsumerWorker(Worker):
    """Reads every partition with manual assignment, in sessions of 10-30 s; each new session
    starts a little before where the last one got to. ``isolation`` and the event names serve the
    transactional workload's read_committed readers too (chaos/txn_workload.py)."""

    def __init__(self, idx: int, bootstrap: str, topic: str, partitions: int, hist: History, rng: random.Random,
                 isolation: str = "read_uncommitted", prefix: str = ""):
        super().__init__(f"{prefix}consumer-{idx}", hist)
        self.idx, self.bootstrap, self.topic, self.partitions, self.rng = idx, bootstrap, topic, partitions, rng
        self.isolation, self.prefix = isolation, prefix
        self.polled = 0

    def body(self) -> None:
        proc = f"{self.prefix}c{self.idx}"
        pos = dict.fromkeys(range(self.partitions), 0)
        for session in itertools.count(1):
            if self.stopping.is_set():
                return
            c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"chaos-{self.prefix}reader-{self.idx}",
                          "enable.auto.commit": False, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 200,
                          "isolation.level": self.isolation, "topic.metadata.refresh.interval.ms": 2000,
                          "logger": _NullLogger(), **_stderr_debug("cgrp,consumer,broker,protocol", proc)})
            tps = []
            for p in range(self.partitions):
                start = max(0, pos[p] - self.rng.randint(0, 50)) if session > 1 else 0
                self.hist.add(f"{self.prefix}assign", process=proc, session=session, tp=f"{self.topic}/{p}",
                              offset=start)
                tps.append(TopicPartition(self.topic, p, start))
            c.assign(tps)
            end = time.monotonic() + self.rng.uniform(10, 30)
            try:
                while not self.stopping.is_set() and time.monotonic() < end:
                    msgs = c.consume(500, 0.5)
                    got = [[f"{self.topic}/{m.partition()}", m.offset(), int(m.value())]
                           for m in msgs if m.error() is None]
                    if got:
                        self.hist.add(f"{self.prefix}poll", process=proc, session=session, msgs=got)
                        self.polled += len(got)
                        for tp, off, _v in got:
                            pos[int(tp.rsplit("/", 1)[1])] = off + 1
            finally:
                with self.calling("close", proc):
                    c.close()


# the group members' client settings (the checker's group-liveness bound derives from the session timeout)
GROUP_SESSION_TIMEOUT_MS = 10000
GROUP_HEARTBEAT_INTERVAL_MS = 1000
# the broker keys that give consumer-protocol (KIP-848) members the same session and heartbeat
CONSUMER_PROTOCOL_OVERRIDES = {
    "group.consumer.min.session.timeout.ms": str(GROUP_SESSION_TIMEOUT_MS),
    "group.consumer.session.timeout.ms": str(GROUP_SESSION_TIMEOUT_MS),
    "group.consumer.min.heartbeat.interval.ms": str(GROUP_HEARTBEAT_INTERVAL_MS),
    "group.consumer.heartbeat.interval.ms": str(GROUP_HEARTBEAT_INTERVAL_MS),
}


class GroupWorker(Worker):
    """A consumer-group member: subscribes, reads, commits synchronously after each batch. Every
    assignment is a new session that starts at the committed offset (read with OffsetFetch), or at
    offset 0 without one (``auto.offset.reset=earliest``; nothing is deleted from the chaos topic)."""

    def __init__(self, idx: int, bootstrap: str, topic: str, group: str, hist: History, protocol: str = "classic"):
        super().__init__(f"group-{idx}", hist)
        self.idx, self.bootstrap, self.topic, self.group = idx, bootstrap, topic, group
        self.protocol = protocol  # classic | consumer (KIP-848: the session and heartbeat are the broker's)
        self.commits = 0
        self.last_records_t: float | None = None  # history time of the last poll that returned records

    def body(self) -> None:
        proc = f"g{self.idx}"
        session = itertools.count(1)
        state = {"session": 0}
        self.hist.add("member", type="start", process=proc, group=self.group,
                      session_timeout_ms=GROUP_SESSION_TIMEOUT_MS)
        extra = _stderr_debug("cgrp,protocol,broker", proc)
        timing = ({"group.protocol": "consumer"} if self.protocol == "consumer" else
                  {"session.timeout.ms": GROUP_SESSION_TIMEOUT_MS, "heartbeat.interval.ms": GROUP_HEARTBEAT_INTERVAL_MS})
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group, "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "fetch.wait.max.ms": 200, "logger": _NullLogger(),
                      **timing, **extra})

        def on_assign(cons, parts):
            state["session"] = next(session)
            t0 = self.hist.now()
            self.hist.add("member", type="assigned", process=proc, group=self.group,
                          tps=[f"{tp.topic}/{tp.partition}" for tp in parts])
            try:
                committed = cons.committed(parts, timeout=10)
            except KafkaException as e:
                self.hist.add("client-error", process=proc, error=f"committed(): {e}")
                return
            for tp in committed:
                name = f"{tp.topic}/{tp.partition}"
                off = tp.offset if tp.offset >= 0 else -1
                self.hist.add("committed", process=proc, group=self.group, tp=name, offset=off, invoke_t=t0)
                if tp.error is None:
                    self.hist.add("assign", process=proc, session=state["session"], tp=name, offset=max(off, 0))

        c.subscribe([self.topic], on_assign=on_assign)
        try:
            while not self.stopping.is_set():
                msgs = c.consume(200, 0.5)
                got = [[f"{self.topic}/{m.partition()}", m.offset(), int(m.value())]
                       for m in msgs if m.error() is None]
                if not got:
                    continue
                self.last_records_t = self.hist.add("poll", process=proc, session=state["session"], msgs=got)["t"]
                last: dict[int, int] = {}
                for tp, off, _v in got:
                    last[int(tp.rsplit("/", 1)[1])] = off + 1
                offsets = [TopicPartition(self.topic, p, o) for p, o in last.items()]
                try:
                    with self.calling("commit", proc):
                        res = c.commit(offsets=offsets, asynchronous=False)
                    for tp in res:
                        if tp.error is None:
                            self.commits += 1
                            self.hist.add("commit", type="ok", process=proc, group=self.group,
                                          tp=f"{tp.topic}/{tp.partition}", offset=tp.offset)
                except KafkaException as e:
                    self.hist.add("commit", type="fail", process=proc, group=self.group, error=str(e))
        finally:
            self.hist.add("member", type="stop", process=proc, group=self.group)
            with self.calling("close", proc):
                c.close()


class TopicChurnWorker(Worker):
    """Creates a small RF=3 topic every few seconds and deletes an older one."""

    def __init__(self, bootstrap: str, hist: History, rng: random.Random):
        super().__init__("topic-churn", hist)
        self.bootstrap, self.rng = bootstrap, rng
        self.made: list[str] = []

    def body(self) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "logger": _NullLogger()})
        for n in itertools.count():
            if self.stopping.wait(self.rng.uniform(3, 6)):
                return
            name = f"chaos-churn-{n}"
            self._op(admin, "create", name,
                     lambda name=name: admin.create_topics([NewTopic(name, 2, 3)], operation_timeout=10)[name])
            if len(self.made) > 2:
                old = self.made.pop(0)
                self._op(admin, "delete", old,
                         lambda old=old: admin.delete_topics([old], operation_timeout=10)[old])

    def _op(self, admin, op: str, topic: str, call) -> None:
        self.hist.add("topic", type="invoke", op=op, topic=topic)
        try:
            call().result(15)
            self.hist.add("topic", type="ok", op=op, topic=topic)
            if op == "create":
                self.made.append(topic)
        except Exception as e:  # noqa: BLE001 - an indeterminate admin operation
            self.hist.add("topic", type="fail", op=op, topic=topic, error=str(e)[:200])
            if op == "create":
                self.made.append(topic)


class Probe(Worker):
    """Samples the partition leaders (Metadata) and the active controller (DescribeQuorum to every
    controller; the answer with the highest epoch wins) twice a second."""

    def __init__(self, bootstrap: str, topic: str, controllers: dict[int, str], hist: History,
                 interval: float = 0.5):
        super().__init__("probe", hist)
        self.bootstrap, self.topic, self.controllers, self.interval = bootstrap, topic, controllers, interval
        self.last: dict = {}

    def controller(self, stubs) -> int | None:
        best = None
        for stub in stubs.values():
            try:
                r = stub.DescribeQuorum(pb.DescribeQuorumRequest(), timeout=0.4)
            except grpc.RpcError:
                continue
            if r.leader_id >= 0 and (best is None or r.leader_epoch > best[0]):
                best = (r.leader_epoch, r.leader_id)
        return best[1] if best else None

    def body(self) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "logger": _NullLogger()})
        chans = {i: grpc.insecure_channel(a) for i, a in self.controllers.items()}
        stubs = {i: pb_grpc.RaftQuorumStub(ch) for i, ch in chans.items()}
        try:
            while not self.stopping.wait(self.interval):
                leaders = None
                try:
                    md = admin.list_topics(self.topic, timeout=1.5)
                    t = md.topics.get(self.topic)
                    if t is not None and t.error is None:
                        leaders = {f"{self.topic}/{p}": pm.leader for p, pm in t.partitions.items()}
                except KafkaException:
                    pass
                ctrl = self.controller(stubs)
                self.last = {"leaders": leaders, "controller": ctrl}
                self.hist.add("probe", leaders=leaders, controller=ctrl)
        finally:
            for ch in chans.values():
                ch.close()
