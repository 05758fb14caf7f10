"""Run the fuzzer against a krafty node, or replay saved inputs.

    .venv/bin/python -m bench.fuzz run --inputs 100000 --seed 1 --out fuzz-out
    .venv/bin/python -m bench.fuzz run --seed 1 --ids 4711,4712        # regenerate and send given inputs
    .venv/bin/python -m bench.fuzz replay fuzz-out/findings/003-crash.replay.gz [--bootstrap 127.0.0.1:9092]

The node is a separate process (bench/fuzz/target.py) under RLIMIT_AS (``--memory-mb``,
1536). Inputs (bench/fuzz/gen.py) go over many concurrent raw connections: pipelined windows
with a sentinel request at the end (Kafka answers in order, so the sentinel's answer means
everything before it was answered), short timeouts, one connection per framing input, and the
SASL listener for logins. Meanwhile the node's RSS and open fds are sampled, its log is scanned
(bench/fuzz/oracle.py), and a canary confluent-kafka client produces to and consumes from a
topic of its own every second: a produce not acknowledged within ``--canary-bound`` seconds
or a record not consumed within twice that fails it.

A crash is the node dying or the canary failing; then the inputs sent before it (the last
``--window``) are saved for ``replay``, the node is restarted on a fresh data dir and the run
goes on (at most ``--max-crashes`` times). Other findings (UNKNOWN_SERVER_ERROR, a traceback,
an undecodable answer, an accepted hostile batch, ...) save their input and the window too,
once per signature. Exit status 1 when there was a crash (``--strict``: any finding)."""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import gzip
import itertools
import json
import logging
import os
import re
import shutil
import signal
import socket
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.fuzz import corpus, frames
from bench.fuzz.gen import DEFAULT_NOW_MS, Generator, Input, cid_of, sentinel
from bench.fuzz.oracle import Finding, LogScanner, check_response
from bench.fuzz.target import (
    CANARY_TOPIC,
    TOPICS,
    TopicIdSwap,
    api_versions_ok,
    create_scram_users,
    create_topics,
    make_node,
    to_node_ids,
)
from broker.protocol import codec
from broker.protocol.apis import SUPPORTED, ApiKey
from krafty.healthcheck import _recv_exact

log = logging.getLogger("krafty.fuzz")


@dataclasses.dataclass
class Options:
    inputs: int = 100_000
    seed: int = 1
    out: Path = Path("fuzz-out")
    corpus_path: Path = corpus.DEFAULT_PATH
    memory_mb: int = 1536
    fast_conns: int = 48
    slow_conns: int = 64
    ctrl_conns: int = 32
    solo_conns: int = 96  # a framing input that leaves the node waiting for bytes holds its connection
    sasl_conns: int = 32  # for the whole timeout
    window: int = 16  # pipelined inputs per send on a fast connection
    fast_timeout: float = 5.0
    slow_timeout: float = 3.0
    solo_timeout: float = 0.25
    sasl_timeout: float = 1.5
    canary: bool = True
    canary_bound: float = 5.0
    max_crashes: int = 3
    keep_window: int = 300
    now_ms: int = DEFAULT_NOW_MS
    ids: list[int] | None = None
    weights: dict[str, float] | None = None
    progress: float = 10.0
    linger: float = 1.5  # seconds the node is still watched after the last input
    node_overrides: dict[str, str] | None = None
    on_input: object = None  # test hook: called with (fuzzer, inputs sent so far) as each input is sent
    bomb_target: int = 30 << 30
    catalogue: bool = True  # start with one input of every hostile batch variant (gen.Generator.catalogue)
    warm: bool = True  # one recorded request of every API version before the run is watched (warm_node)
    probe_failures: int = 3  # new-connection ApiVersions probes (every 2 s) that may fail in a row
    janitor: float = 30.0  # seconds between deletions of topics the inputs created (0: never)
    workdir: Path | None = None
    krafty_root: Path | None = None  # fuzz the node of another checkout (e.g. a merge candidate)


@dataclasses.dataclass
class Stats:
    sent: int = 0
    requeued: int = 0
    outcomes: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    hangs: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # timeouts by API
    by_kind: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    peak_rss_mb: float = 0.0
    peak_fds: int = 0
    crashes: int = 0
    canary_ok: int = 0
    canary_max_s: float = 0.0
    restarts: int = 0


class Conn:
    def __init__(self, reader, writer):
        self.r, self.w = reader, writer

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.w.transport.abort()


SUSPECT_KINDS = {"struct", "header", "havoc"}


class Lane:
    """Inputs waiting for a connection. Kafka closes a connection on a request it cannot
    parse, and everything pipelined behind that request is lost, so a window takes the
    well-formed inputs first and at most one suspect (an edited frame), last."""

    def __init__(self):
        self.ok: collections.deque[Input] = collections.deque()
        self.suspect: collections.deque[Input] = collections.deque()
        self._ready = asyncio.Event()
        self._idle = asyncio.Event()
        self.pending = 0

    def __len__(self) -> int:
        return len(self.ok) + len(self.suspect)

    def put(self, inp: Input, front: bool = False) -> None:
        q = self.suspect if inp.kind in SUSPECT_KINDS else self.ok
        q.appendleft(inp) if front else q.append(inp)
        self.pending += 1
        self._ready.set()

    async def take(self, n: int) -> list[Input]:
        while not self.ok and not self.suspect:
            self._ready.clear()
            await self._ready.wait()
        batch = []
        while self.ok and len(batch) < n - (1 if self.suspect else 0):
            batch.append(self.ok.popleft())
        if self.suspect and len(batch) < n:
            batch.append(self.suspect.popleft())
        return batch

    def done(self, n: int) -> None:
        self.pending -= n
        if self.pending <= 0:
            self._idle.set()

    def clear(self) -> None:
        n = len(self)
        self.ok.clear()
        self.suspect.clear()
        self.done(n)

    async def join(self) -> None:
        while self.pending > 0:
            self._idle.clear()
            await self._idle.wait()


class Canary(threading.Thread):
    """confluent-kafka producing one record a second to the canary topic (acks=all) and a
    consumer reading them back; records the worst latencies and the first failure."""

    def __init__(self, bootstrap: str, bound: float):
        super().__init__(daemon=True, name="fuzz-canary")
        self.bootstrap, self.bound = bootstrap, bound
        self.stop_ev = threading.Event()
        self.failure: str | None = None
        self.ok = 0
        self.max_produce = 0.0
        self.max_e2e = 0.0

    def run(self) -> None:
        from confluent_kafka import Consumer, Producer, TopicPartition
        p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 0,
                      "message.timeout.ms": int(self.bound * 4000), "enable.idempotence": True})
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "krafty-fuzz-canary-unused",
                      "enable.auto.commit": False, "auto.offset.reset": "latest", "fetch.wait.max.ms": 100})
        # from the current end (an explicit offset: "latest" would be resolved at the first
        # fetch, possibly after the first record), no group
        _, end = c.get_watermark_offsets(TopicPartition(CANARY_TOPIC, 0), timeout=10)
        c.assign([TopicPartition(CANARY_TOPIC, 0, end)])
        sent: dict[int, float] = {}
        seq = 0
        try:
            while not self.stop_ev.is_set() and self.failure is None:
                seq += 1
                t0 = time.monotonic()
                acked: list = []
                p.produce(CANARY_TOPIC, str(seq).encode(), partition=0,
                          on_delivery=lambda err, msg, t0=t0, acked=acked: acked.append((err, time.monotonic() - t0)))
                sent[seq] = t0
                while not acked and time.monotonic() - t0 < self.bound:
                    p.poll(0.02)
                    self._consume(c, sent)
                if not acked:
                    self.failure = f"produce #{seq} not acknowledged within {self.bound:.0f} s"
                    break
                err, dt = acked[0]
                if err is not None:
                    self.failure = f"produce #{seq} failed: {err}"
                    break
                self.max_produce = max(self.max_produce, dt)
                self.ok += 1
                end = t0 + 1.0
                while time.monotonic() < end:
                    self._consume(c, sent)
                late = [s for s, t in sent.items() if time.monotonic() - t > 2 * self.bound]
                if late:
                    self.failure = f"record #{late[0]} acknowledged but not consumed within {2 * self.bound:.0f} s"
        except Exception as e:  # noqa: BLE001 - a client error is a canary failure too
            self.failure = f"canary client error: {e}"
        finally:
            with contextlib.suppress(Exception):
                c.close()
            with contextlib.suppress(Exception):
                p.flush(1)

    def _consume(self, c, sent: dict[int, float]) -> None:
        m = c.poll(0.01)
        if m is None or m.error() is not None:
            return
        with contextlib.suppress(ValueError):
            t = sent.pop(int(m.value()), None)
            if t is not None:
                self.max_e2e = max(self.max_e2e, time.monotonic() - t)


class Fuzzer:
    def __init__(self, opts: Options):
        self.o = opts
        self.entries = corpus.load(opts.corpus_path)
        self.gen = Generator(self.entries, opts.seed, opts.now_ms, opts.weights, opts.bomb_target)
        self.stats = Stats()
        self.findings: dict[str, tuple[Finding, int]] = {}  # signature -> (first finding, count)
        self.recent: collections.deque[Input] = collections.deque(maxlen=opts.keep_window)
        self.inflight: dict[int, Input] = {}
        self.node = None
        self.sasl_port = 0
        self.ids = TopicIdSwap({})  # the corpus' topic ids -> the node's
        self.node_up = asyncio.Event()
        self.stopping = False
        self.canary: Canary | None = None
        self._canary_done = 0  # acknowledged produces of the canaries of earlier nodes
        self.nfind = 0
        self.t0 = 0.0
        self.elapsed = 0.0
        self._sentinel = 0
        self.out = Path(opts.out)
        (self.out / "findings").mkdir(parents=True, exist_ok=True)
        self._tmp = Path(opts.workdir) if opts.workdir else Path(tempfile.mkdtemp(prefix="krafty-fuzz-"))
        self.lanes: dict[str, Lane] = {}
        self.queue_limit = max(64, opts.window * opts.fast_conns * 2)

    # --- node ---------------------------------------------------------------------------
    def start_node(self) -> None:
        self.stats.restarts += 1
        wd = self._tmp / f"node-{self.stats.restarts}"
        overrides = {"krafty.loop.stall.warn.ms": "1000", **(self.o.node_overrides or {})}
        self.node, self.sasl_port = make_node(wd, memory_limit_mb=self.o.memory_mb, overrides=overrides,
                                              root=self.o.krafty_root)
        self.node.start()
        create_topics(self.node.bootstrap)
        self.ids = to_node_ids(self.node.bootstrap)
        create_scram_users(self.node.bootstrap)
        self.scanner = LogScanner(self.node.log_path)
        self.scanner.skip_to_end()
        if self.o.warm:
            for frame, f in warm_node(self.node.port, self.entries, self.ids):
                self.report(f, [Input(-1_000_000, "warm", "fast", [frame], detail="warm-up: a recorded request")])
        if self.o.canary:
            self.canary = Canary(self.node.bootstrap, self.o.canary_bound)
            self.canary.start()

    def stop_node(self) -> None:
        if self.canary is not None:
            self.canary.stop_ev.set()
            self.canary.join(10)
            self._canary_done += self.canary.ok
            self.canary = None
        if self.node is not None:
            self.node.close()

    # --- findings -------------------------------------------------------------------------
    def report(self, f: Finding, inputs: list[Input], crash: bool = False) -> None:
        if f.signature in self.findings:
            first, n = self.findings[f.signature]
            self.findings[f.signature] = (first, n + 1)
            if not crash:
                return
        else:
            self.findings[f.signature] = (f, 1)
        self.nfind += 1
        f.input_ids = [i.id for i in inputs]
        base = self.out / "findings" / f"{self.nfind:03d}-{f.kind}"
        window = list(self.recent)
        ids = {i.id for i in inputs}
        replay = inputs + [i for i in window if i.id not in ids]
        with gzip.open(f"{base}.replay.gz", "wt") as fh:
            for i in replay:
                fh.write(json.dumps(i.to_json()) + "\n")
        Path(f"{base}.json").write_text(json.dumps({
            "kind": f.kind, "signature": f.signature, "detail": f.detail, "inputs": f.input_ids,
            "input_details": [f"{i.id} {i.kind} {i.detail}" for i in inputs],
            "window": [i.id for i in window], "seed": self.o.seed, "now_ms": self.o.now_ms,
            "replay": f"python -m bench.fuzz replay {base}.replay.gz",
        }, indent=1))
        lead = f"{inputs[0].id} ({inputs[0].kind}: {inputs[0].detail[:120]})" if inputs else "-"
        print(f"FINDING {f.kind}: {f.signature}\n    {f.detail.splitlines()[0][:300]}\n    input {lead}; "
              f"saved {base}.replay.gz", flush=True)

    # --- dispatch ---------------------------------------------------------------------------
    async def dispatch(self) -> None:
        ids = self.o.ids if self.o.ids is not None else range(self.o.inputs)
        first = [dataclasses.replace(i) for i in self.gen.catalogue()] if self.o.catalogue and self.o.ids is None else []
        for i in itertools.chain(first, ids):
            while not self.node_up.is_set() and not self.stopping:
                await asyncio.sleep(0.05)
            if self.stopping:
                break
            inp = i if isinstance(i, Input) else self.gen.make(i)
            self.stats.by_kind[inp.kind] += 1
            lane = self.lanes[inp.lane]
            while len(lane) >= self.queue_limit and not self.stopping:
                await asyncio.sleep(0.002)
            lane.put(inp)
        for lane in self.lanes.values():
            await lane.join()

    def _sent(self, inp: Input) -> None:
        if inp.tries == 0:
            self.recent.append(inp)
            self.stats.sent += 1
            if self.o.on_input is not None:
                self.o.on_input(self, self.stats.sent)
        self.inflight[inp.id] = inp

    def _outcome(self, inp: Input, what: str) -> None:
        self.inflight.pop(inp.id, None)
        self.stats.outcomes[what] += 1

    async def _connect(self, port: int) -> Conn | None:
        try:
            r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, limit=1 << 20), 3)
            return Conn(r, w)
        except (OSError, TimeoutError):
            return None

    async def pipelined_worker(self, name: str, window: int, timeout: float) -> None:
        lane = self.lanes[name]
        conn = None
        while True:
            batch = await lane.take(window)
            try:
                await self.node_up.wait()
                if conn is None:
                    conn = await self._connect(self.node.port)
                if conn is None:
                    self._retry(lane, batch, "refused")
                    continue
                if not await self._exchange(conn, batch, timeout, lane):
                    conn.close()
                    conn = None
            finally:
                lane.done(len(batch))

    def _retry(self, lane: Lane, inputs: list[Input], why: str) -> None:
        """Inputs the node never looked at (sent behind one that closed the connection or
        parked): once more, then they count as ``why``."""
        for inp in inputs:
            if inp.tries < 1 and not self.stopping:
                inp.tries += 1
                self.inflight.pop(inp.id, None)
                self.stats.requeued += 1
                lane.put(inp, front=True)
            else:
                self._outcome(inp, why)

    async def _exchange(self, conn: Conn, batch: list[Input], timeout: float, lane: Lane) -> bool:
        """Sends ``batch`` pipelined plus a sentinel; returns whether the connection is usable."""
        self._sentinel = (self._sentinel + 1) % (1 << 30)
        s_cid = -1 - self._sentinel
        expect: dict[int, tuple[Input, int]] = {}
        order: list[tuple[Input, int]] = []
        out = bytearray()
        for inp in batch:
            self._sent(inp)
            for k, f in enumerate(inp.frames):
                expect[cid_of(inp.id, k)] = (inp, k)
                order.append((inp, k))
                out += frames.sized(self.ids(f))
        out += frames.sized(sentinel(s_cid))
        pos_of = {(inp.id, k): n for n, (inp, k) in enumerate(order)}
        last = -1  # position of the last answered frame
        state = "ok"
        try:
            conn.w.write(out)
            async with asyncio.timeout(timeout):
                while True:
                    (size,) = struct.unpack(">i", await conn.r.readexactly(4))
                    if size < 4 or size > 64 << 20:
                        self.report(Finding("bad-response", "bad-response-size", f"answer with size prefix {size}"),
                                    batch)
                        state = "closed"
                        break
                    raw = await conn.r.readexactly(size)
                    (cid,) = struct.unpack_from(">i", raw)
                    if cid == s_cid:
                        break
                    hit = expect.get(cid)
                    if hit is None:
                        self.report(Finding("bad-correlation-id", "bad-correlation-id",
                                            f"answer with correlation id {cid} matches no request in flight"), batch)
                        state = "closed"
                        break
                    inp, k = hit
                    last = max(last, pos_of[(inp.id, k)])
                    for f in check_response(inp.frames[k], raw, inp.expect_reject.get(k)):
                        self.report(f, [inp])
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            state = "closed"
        except TimeoutError:
            state = "timeout"
        if state == "ok":
            for inp in batch:
                self._outcome(inp, "answered")
            return True
        # the node processes a connection's requests in order: it was on the first unanswered
        # one when it closed the connection (or parked it); it never looked at those after it
        first = last + 1
        culprit = order[first][0] if first < len(order) else None
        later = []
        for inp in batch:
            if culprit is None or pos_of[(inp.id, 0)] < pos_of[(culprit.id, 0)]:
                self._outcome(inp, "answered")
            elif inp is culprit:
                self._outcome(inp, state)
                if state == "timeout":
                    k = order[first][1]
                    self.stats.hangs[f"{frames.api_name(frames.api_of(inp.frames[k])[0])} ({inp.kind})"] += 1
            else:
                later.append(inp)
        self._retry(lane, later, "dropped")
        return False

    async def solo_worker(self) -> None:
        lane = self.lanes["solo"]
        while True:
            [inp] = await lane.take(1)
            try:
                await self.node_up.wait()
                conn = await self._connect(self.node.port)
                if conn is None:
                    self._outcome(inp, "refused")
                    continue
                self._sent(inp)
                what = "left-waiting"  # the node still waits for the rest of a frame: fine
                try:
                    conn.w.write(self.ids(inp.wire))
                    async with asyncio.timeout(self.o.solo_timeout):
                        while await conn.r.read(65536):
                            pass
                    what = "closed"
                except TimeoutError:
                    pass
                except (ConnectionError, OSError):
                    what = "closed"
                finally:
                    conn.close()
                    self._outcome(inp, what)
            finally:
                lane.done(1)

    async def sasl_worker(self) -> None:
        lane = self.lanes["sasl"]
        while True:
            [inp] = await lane.take(1)
            try:
                await self.node_up.wait()
                conn = await self._connect(self.sasl_port)
                if conn is None:
                    self._outcome(inp, "refused")
                    continue
                self._sent(inp)
                what = "answered"
                try:
                    for k, f in enumerate(inp.frames):  # one at a time: a login is a dialogue
                        conn.w.write(frames.sized(self.ids(f)))
                        async with asyncio.timeout(self.o.sasl_timeout):
                            (size,) = struct.unpack(">i", await conn.r.readexactly(4))
                            raw = await conn.r.readexactly(max(0, min(size, 64 << 20)))
                        if len(raw) >= 4 and struct.unpack_from(">i", raw)[0] == cid_of(inp.id, k):
                            for fnd in check_response(f, raw, None):
                                self.report(fnd, [inp])
                except TimeoutError:
                    what = "timeout"
                except (asyncio.IncompleteReadError, ConnectionError, OSError):
                    what = "closed"
                finally:
                    conn.close()
                    self._outcome(inp, what)
            finally:
                lane.done(1)

    # --- watching the node ---------------------------------------------------------------------
    async def monitor(self) -> None:
        last_progress = time.monotonic()
        while not self.stopping:
            await asyncio.sleep(0.25)
            if not self.node_up.is_set():
                continue
            node = self.node
            for f in self.scanner.scan():
                self.report(f, self._suspects(f))
            if not node.running:
                code = node.proc.returncode
                await self.crash(f"node process exited with code {code}", node.log_tail(30))
                continue
            rss = node.rss_mb()
            self.stats.peak_rss_mb = max(self.stats.peak_rss_mb, rss)
            with contextlib.suppress(OSError):
                self.stats.peak_fds = max(self.stats.peak_fds, len(os.listdir(f"/proc/{node.proc.pid}/fd")))
            c = self.canary
            if c is not None:
                self.stats.canary_ok = self._canary_done + c.ok  # every canary's, across node restarts
                self.stats.canary_max_s = max(self.stats.canary_max_s, c.max_produce, c.max_e2e)
                if c.failure:
                    await self.crash(f"canary failed: {c.failure}", node.log_tail(30))
                    continue
            if time.monotonic() - last_progress >= self.o.progress:
                last_progress = time.monotonic()
                print(self.progress_line(), flush=True)

    def _suspects(self, f: Finding) -> list[Input]:
        """Inputs in flight when the log line appeared; first the latest sent ones of the API
        the line names ("error handling FETCH v11"), which may have been answered already."""
        inflight = list(self.inflight.values())
        api = f.detail.split("error handling ", 1)[1].split(" ", 1)[0] if "error handling " in f.detail else None
        if not api:
            return inflight
        named = [i for i in reversed(self.recent) if any(frames.api_name(frames.api_of(fr)[0]) == api
                                                         for fr in i.frames)][:5]
        return named + [i for i in inflight if i not in named]

    async def crash(self, why: str, tail: str) -> None:
        self.stats.crashes += 1
        self.node_up.clear()
        suspects = list(self.inflight.values())
        print(f"CRASH #{self.stats.crashes}: {why}", flush=True)
        node = self.node
        aborted = node is not None and node.running
        if aborted:
            # the node is alive but not serving: SIGABRT makes faulthandler write every thread's
            # stack to its log, so a finding says where the event loop was stuck
            with contextlib.suppress(ProcessLookupError):
                os.kill(node.proc.pid, signal.SIGABRT)
            with contextlib.suppress(Exception):
                await asyncio.to_thread(node.proc.wait, 5)
            tail = node.log_tail(60)
        with contextlib.suppress(Exception):
            for f in self.scanner.scan():
                if aborted and f.kind == "fatal":  # our SIGABRT: where it was, not why it died
                    f.kind, f.signature = "stuck", f.signature.replace("fatal:Aborted@", "stuck:")
                self.report(f, suspects)
        self.report(Finding("crash", "crash:" + re.sub(r"#\d+ ", "", why)[:70], f"{why}\n--- node log tail ---\n{tail}"),
                    suspects, crash=True)
        await asyncio.to_thread(self.stop_node)
        if self.stats.crashes >= self.o.max_crashes:
            print(f"stopping after {self.stats.crashes} crashes (--max-crashes)", flush=True)
            self.stopping = True
            for lane in self.lanes.values():  # let dispatch's join() return
                lane.clear()
            self.node_up.set()
            return
        await asyncio.to_thread(self.start_node)
        self.node_up.set()

    async def probe(self) -> None:
        """A new connection must get an ApiVersions answer on each listener: the canary holds
        its connections, so a listener that stopped accepting would go unnoticed otherwise."""
        failed: dict[str, int] = {}
        while not self.stopping:
            await asyncio.sleep(2)
            node = self.node
            if not self.node_up.is_set() or node is None or not node.running:
                failed.clear()
                continue
            for name, port in (("PLAINTEXT", node.port), ("SASL_PLAINTEXT", self.sasl_port)):
                ok = await asyncio.to_thread(api_versions_ok, "127.0.0.1", port, 3.0)
                failed[name] = 0 if ok else failed.get(name, 0) + 1
                if failed[name] >= self.o.probe_failures and self.node_up.is_set() and node is self.node:
                    failed.clear()
                    await self.crash(f"the {name} listener answered no new connection for "
                                     f"{self.o.probe_failures} probes in a row", node.log_tail(30))
                    break

    async def janitor(self) -> None:
        """Deletes topics the inputs created (CreateTopics, auto-creation), so a long run keeps
        the node's size steady."""
        if self.o.janitor <= 0:
            return
        keep = set(TOPICS) | {CANARY_TOPIC}
        while not self.stopping:
            await asyncio.sleep(self.o.janitor)
            if self.node_up.is_set():
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(_delete_extra_topics, self.node.bootstrap, keep)
                    # a fuzz topic it recreated has a new id
                    self.ids = await asyncio.to_thread(to_node_ids, self.node.bootstrap)

    def progress_line(self) -> str:
        el = time.monotonic() - self.t0
        s = self.stats
        return (f"[{el:6.0f}s] {s.sent:,} inputs ({s.sent / max(el, 1e-9):,.0f}/s), {len(self.findings)} findings, "
                f"{s.crashes} crashes, RSS {self.node.rss_mb() if self.node else 0:.0f} MB "
                f"(peak {s.peak_rss_mb:.0f}), fds peak {s.peak_fds}, canary ok {s.canary_ok} "
                f"(worst {s.canary_max_s:.2f}s); " + ", ".join(f"{k} {v}" for k, v in sorted(s.outcomes.items()))
                + "; queued " + " ".join(f"{n} {len(q)}" for n, q in self.lanes.items()))

    async def run(self) -> dict:
        self.lanes = {n: Lane() for n in ("fast", "slow", "ctrl", "solo", "sasl")}
        await asyncio.to_thread(self.start_node)
        self.node_up.set()
        self.t0 = time.monotonic()
        tasks = [asyncio.create_task(self.pipelined_worker("fast", self.o.window, self.o.fast_timeout))
                 for _ in range(self.o.fast_conns)]
        tasks += [asyncio.create_task(self.pipelined_worker("slow", 4, self.o.slow_timeout))
                  for _ in range(self.o.slow_conns)]
        tasks += [asyncio.create_task(self.pipelined_worker("ctrl", 1, self.o.slow_timeout))
                  for _ in range(self.o.ctrl_conns)]
        tasks += [asyncio.create_task(self.solo_worker()) for _ in range(self.o.solo_conns)]
        tasks += [asyncio.create_task(self.sasl_worker()) for _ in range(self.o.sasl_conns)]
        mon = asyncio.create_task(self.monitor())
        jan = asyncio.create_task(self.janitor())
        prb = asyncio.create_task(self.probe())
        try:
            await self.dispatch()
            await asyncio.sleep(self.o.linger)  # let the log and the canary catch up with the last inputs
            for f in self.scanner.scan():
                self.report(f, list(self.recent)[-50:])
        finally:
            self.stopping = True
            self.elapsed = elapsed = time.monotonic() - self.t0
            for t in [*tasks, mon, jan, prb]:
                t.cancel()
            await asyncio.gather(*tasks, mon, jan, prb, return_exceptions=True)
            if self.node is not None and self.node.running and self.canary is not None and self.canary.failure:
                self.stats.crashes += 1
                self.report(Finding("crash", "crash:canary", f"canary failed: {self.canary.failure}"), [])
            if self.node is not None:
                self.stats.peak_rss_mb = max(self.stats.peak_rss_mb, self.node.rss_mb())
            await asyncio.to_thread(self.stop_node)
        return self.summary(elapsed)

    def summary(self, elapsed: float) -> dict:
        s = self.stats
        res = {
            "inputs": s.sent, "seconds": round(elapsed, 1), "inputs_per_s": round(s.sent / max(elapsed, 1e-9)),
            "crashes": s.crashes, "findings": len(self.findings), "peak_rss_mb": round(s.peak_rss_mb),
            "peak_fds": s.peak_fds, "outcomes": dict(s.outcomes), "timeouts_by_api": dict(s.hangs.most_common(20)),
            "requeued": s.requeued, "by_kind": dict(s.by_kind), "canary_produces": s.canary_ok,
            "canary_worst_s": round(s.canary_max_s, 3), "seed": self.o.seed, "node_starts": s.restarts,
            "findings_by_class": dict(collections.Counter(f.kind for f, _ in self.findings.values()).most_common()),
            "finding_list": [{"kind": f.kind, "signature": sig, "count": n, "first_inputs": f.input_ids[:5],
                              "detail": f.detail.splitlines()[0][:300]}
                             for sig, (f, n) in sorted(self.findings.items())],
        }
        (self.out / "summary.json").write_text(json.dumps(res, indent=1))
        return res


# the SASL exchange (not on this listener); JoinGroup/SyncGroup, which wait for a rebalance
_NOT_WARMED = (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP)


_MAX_WARM_ANSWER = 100 << 20


def warm_node(port: int, entries: list[corpus.Entry], swap, timeout: float = 5.0, budget: float = 120.0
              ) -> list[tuple[bytes, Finding]]:
    """Sends the node one recorded request of every (API, version) of the corpus, one at a time,
    before the canary and the inputs start; returns what the oracle finds in the answers. The
    node imports the kio schema modules of an API version on its first use, on its event loop
    (855 modules for the 278 versions krafty serves: 8-10 s of a loaded machine), which is its
    start-up and not what an input did to it: during the run those imports stalled the loop for
    seconds and failed the canary of the smoke test on a machine at load ~25."""
    first: dict[tuple[int, int], bytes] = {}
    for e in entries:
        lo_hi = SUPPORTED.get(e.api_key)
        if (e.listener != "plain" or lo_hi is None or not lo_hi[0] <= e.api_version <= lo_hi[1]
                or (e.api_key, e.api_version) in first or e.api_key in _NOT_WARMED):
            continue
        if e.api_key == ApiKey.PRODUCE and _acks(e) == 0:  # no answer to wait for
            continue
        first[(e.api_key, e.api_version)] = e.frame
    found: list[tuple[bytes, Finding]] = []
    sock = None
    deadline = time.monotonic() + budget
    for n, (_, frame) in enumerate(sorted(first.items())):
        if time.monotonic() > deadline:
            break
        frame = frames.with_cid(frame, n + 1)  # (findings keep the corpus' topic ids, as inputs do)
        try:
            if sock is None:
                sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
            sock.sendall(frames.sized(swap(frame)))
            (size,) = struct.unpack(">i", _recv_exact(sock, 4))
            if not 0 <= size <= _MAX_WARM_ANSWER:  # (a broken answer is not read into memory)
                raise ConnectionError(f"answer size {size}")
            raw = _recv_exact(sock, size)
            found += [(frame, f) for f in check_response(frame, raw, None)]
        except (OSError, ConnectionError, struct.error):
            if sock is not None:
                sock.close()
            sock = None
    if sock is not None:
        sock.close()
    return found


def _acks(e: corpus.Entry) -> int | None:
    try:
        return codec.decode_request(e.api_key, e.api_version, e.frame, codec.parse_request_header(e.frame).size).acks
    except Exception:  # noqa: BLE001 - undecodable: not sent
        return 0


def _delete_extra_topics(bootstrap: str, keep: set[str]) -> None:
    """Deletes the topics inputs created, and recreates a fuzz topic that inputs gave more
    partitions (CreatePartitions), so that a long run keeps the node's size steady."""
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap})
    md = admin.list_topics(timeout=10).topics
    grown = [t for t, (n, _) in TOPICS.items() if t in md and len(md[t].partitions) > n]
    names = [t for t in md if t not in keep and not t.startswith("__")] + grown
    if names:
        for f in admin.delete_topics(names[:500], operation_timeout=10).values():
            with contextlib.suppress(Exception):
                f.result(15)
    if grown:
        time.sleep(1)
        create_topics(bootstrap, {t: TOPICS[t] for t in grown})


def print_summary(res: dict) -> None:
    print(f"\n{res['inputs']:,} inputs in {res['seconds']} s: {res['inputs_per_s']:,} inputs/s; "
          f"crashes: {res['crashes']}; findings: {res['findings']}; peak RSS {res['peak_rss_mb']} MB; "
          f"peak fds {res['peak_fds']}; canary produces {res['canary_produces']} (worst {res['canary_worst_s']} s)")
    if res["findings_by_class"]:
        print("findings by class (distinct signatures): "
              + ", ".join(f"{k} {v}" for k, v in res["findings_by_class"].items()))
    if res["timeouts_by_api"]:
        print("no answer within the timeout, by request: "
              + ", ".join(f"{k} {v:,}" for k, v in res["timeouts_by_api"].items()))
    print("outcomes: " + ", ".join(f"{k} {v:,}" for k, v in sorted(res["outcomes"].items()))
          + "; by kind: " + ", ".join(f"{k} {v:,}" for k, v in sorted(res["by_kind"].items())))
    for f in res["finding_list"]:
        print(f"  [{f['kind']}] x{f['count']} {f['signature']}: {f['detail'][:200]} (inputs {f['first_inputs']})")


# --- replay ------------------------------------------------------------------------------------

def load_replay(path: Path) -> list[Input]:
    with gzip.open(path, "rt") as fh:
        return [Input.from_json(json.loads(line)) for line in fh if line.strip()]


async def replay(path: Path, bootstrap: str | None, sasl_port: int | None, memory_mb: int, timeout: float,
                 root: Path | None = None, only: set[int] | None = None) -> int:
    """Sends each saved input on a connection of its own, in the file's order (the triggering
    input first, then the window, oldest first), and after each checks the node and its log."""
    inputs = [i for i in load_replay(path) if only is None or i.id in only]
    node = None
    scanner = None
    if bootstrap is None:
        tmp = tempfile.mkdtemp(prefix="krafty-fuzz-replay-")
        node, sasl_port = make_node(tmp, memory_limit_mb=memory_mb, root=root)
        await asyncio.to_thread(node.start)
        await asyncio.to_thread(create_topics, node.bootstrap)
        ids = await asyncio.to_thread(to_node_ids, node.bootstrap)
        await asyncio.to_thread(create_scram_users, node.bootstrap)
        host, port = "127.0.0.1", node.port
        scanner = LogScanner(node.log_path)
        scanner.skip_to_end()
    else:
        host, port = bootstrap.rsplit(":", 1)
        port = int(port)
        ids = await asyncio.to_thread(to_node_ids, bootstrap)
    found = 0
    try:
        for inp in inputs:
            results: list[str] = []
            target = sasl_port if inp.lane == "sasl" else port
            try:
                r, w = await asyncio.wait_for(asyncio.open_connection(host, target), 3)
            except (OSError, TimeoutError) as e:
                print(f"input {inp.id}: cannot connect: {e}")
                found += 1
                break
            try:
                if inp.wire is not None:
                    w.write(ids(inp.wire))
                for k, f in enumerate(inp.frames):
                    w.write(frames.sized(ids(f)))
                    async with asyncio.timeout(timeout):
                        (size,) = struct.unpack(">i", await r.readexactly(4))
                        raw = await r.readexactly(size)
                    fs = check_response(f, raw, inp.expect_reject.get(k))
                    results.append(f"frame {k}: answered ({size} bytes)" + "".join(f"; FINDING {x.kind}: {x.detail[:200]}"
                                                                                    for x in fs))
                    found += len(fs)
                if inp.wire is not None:
                    async with asyncio.timeout(timeout):
                        data = await r.read(65536)
                    results.append(f"wire: {'closed' if not data else f'{len(data)} bytes back'}")
            except TimeoutError:
                results.append("no answer within the timeout")
            except (asyncio.IncompleteReadError, ConnectionError, OSError):
                results.append("connection closed by the node")
            finally:
                w.transport.abort()
            await asyncio.sleep(0.3)
            if scanner is not None:
                for x in scanner.scan():
                    results.append(f"LOG FINDING {x.kind}: {x.signature}")
                    found += 1
            if node is not None and not node.running:
                results.append(f"NODE DIED (exit code {node.proc.returncode})")
                found += 1
            print(f"input {inp.id} [{inp.kind}] {inp.detail[:150]}\n    " + "\n    ".join(results), flush=True)
            if node is not None and not node.running:
                print("--- node log tail ---\n" + node.log_tail(30))
                break
    finally:
        if node is not None:
            await asyncio.to_thread(node.close)
            shutil.rmtree(node.workdir, ignore_errors=True)
    print(f"replayed {len(inputs)} inputs: {found} findings")
    return 1 if found else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__doc__.split("\n\n")[0])
    ap.add_argument("--inputs", "-n", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("fuzz-out"))
    ap.add_argument("--corpus", type=Path, default=corpus.DEFAULT_PATH)
    ap.add_argument("--memory-mb", type=int, default=1536, help="RLIMIT_AS of the node")
    ap.add_argument("--conns", type=int, default=48, help="pipelined connections (fast lane)")
    ap.add_argument("--window", type=int, default=16, help="inputs per pipelined send")
    ap.add_argument("--no-canary", action="store_true")
    ap.add_argument("--no-catalogue", action="store_true", help="do not start with every hostile batch variant")
    ap.add_argument("--no-warm", action="store_true",
                    help="do not send one recorded request of every API version before the run is watched")
    ap.add_argument("--canary-bound", type=float, default=5.0)
    ap.add_argument("--max-crashes", type=int, default=3)
    ap.add_argument("--now-ms", type=int, default=DEFAULT_NOW_MS, help="the 'now' of generated timestamps")
    ap.add_argument("--ids", help="only these input ids (comma-separated; with --replay: of the file)")
    ap.add_argument("--linger", type=float, default=1.5, help="seconds to keep watching after the last input")
    ap.add_argument("--strict", action="store_true", help="exit 1 on any finding, not only on crashes")
    ap.add_argument("--progress", type=float, default=10.0, help="seconds between progress lines")
    ap.add_argument("--weights", help="input family weights, e.g. hostile=0,struct=10 (see bench/fuzz/gen.py)")
    ap.add_argument("--override", action="append", default=[], help="node config key=value (repeatable)")
    ap.add_argument("--krafty-root", type=Path, help="run the node of this checkout (default: this one)")
    ap.add_argument("--replay", type=Path, help="replay a saved .replay.gz file instead of fuzzing")
    ap.add_argument("--bootstrap", help="replay against this running node instead of starting one")
    ap.add_argument("--sasl-port", type=int, help="its SASL_PLAINTEXT port (replay)")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    if a.replay:
        only = {int(x) for x in a.ids.split(",")} if a.ids else None
        return asyncio.run(replay(a.replay, a.bootstrap, a.sasl_port, a.memory_mb, 5.0, a.krafty_root, only))
    if not a.corpus.exists():
        print(f"{a.corpus} is missing: recording it (python -m bench.fuzz record)", flush=True)
        from bench.fuzz.record import record
        record(a.corpus)
    opts = Options(inputs=a.inputs, seed=a.seed, out=a.out, corpus_path=a.corpus, memory_mb=a.memory_mb,
                   fast_conns=a.conns, window=a.window, canary=not a.no_canary, catalogue=not a.no_catalogue,
                   warm=not a.no_warm, canary_bound=a.canary_bound, max_crashes=a.max_crashes, now_ms=a.now_ms, progress=a.progress, linger=a.linger,
                   ids=[int(x) for x in a.ids.split(",")] if a.ids else None,
                   node_overrides=dict(kv.split("=", 1) for kv in a.override), krafty_root=a.krafty_root,
                   weights={k: float(v) for k, v in (kv.split("=") for kv in a.weights.split(","))} if a.weights else None)
    fz = Fuzzer(opts)
    # SIGTERM (timeout, a CI runner) unwinds like Ctrl-C, so the node is stopped, not orphaned
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        res = asyncio.run(fz.run())
    except KeyboardInterrupt:
        fz.stop_node()
        print("interrupted", flush=True)
        res = fz.summary(fz.elapsed or time.monotonic() - fz.t0)
    finally:
        if opts.workdir is None:
            shutil.rmtree(fz._tmp, ignore_errors=True)
    print_summary(res)
    return 1 if res["crashes"] or (a.strict and res["findings"]) else 0


if __name__ == "__main__":
    sys.exit(main())
