"""The transaction marker sender (Kafka's TransactionMarkerChannelManager): writes the COMMIT
or ABORT markers the core asks for (``TxnCoordinatorCore.outstanding_markers``) with
WriteTxnMarkers v2 to each partition's leader over the inter-broker listener, using the
replica fetchers' endpoints and security (broker/protocol/client.py connections), and hands
each partition's answer back to the core.

One request in flight per leader; markers for the same leader are batched into it. A retriable
answer (not the leader, not enough replicas, ...) or a lost connection sends that partition's
marker again after a short backoff, to whichever broker leads it then. A partition that no
longer exists is reported as deleted. The core decides everything else: once this broker stops
coordinating a transaction (its ``__transaction_state`` partition moved, or the coordinator
epoch changed) its markers disappear from ``outstanding_markers`` and late answers are ignored,
so a coordinator that lost its leadership stops sending.
"""

from __future__ import annotations

import asyncio
import logging

from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from broker.txn.state import MARKER_RETRIABLE, PARTITION_DELETED, MarkerJob, TxnCoordinatorCore
from common.clock import SYSTEM, Clock

log = logging.getLogger("krafty.txn.markers")

WRITE_TXN_MARKERS_VERSION = 2  # v2 (KIP-890) carries each transaction's transaction version
BACKOFF_S = 0.1  # before a marker is sent again after a retriable answer
MAX_BACKOFF_S = 1.0  # a leader that keeps failing (down, unreachable) is tried ever less often, up to this

Key = tuple[str, tuple[str, int]]  # (transactional id, partition)


class TxnMarkerSender:
    def __init__(self, core: TxnCoordinatorCore, loader, fetchers, broker_id: int, run_effects, *,
                 request_timeout_ms: int = 30_000, clock: Clock = SYSTEM):
        self.core = core
        self.loader = loader
        self.fetchers = fetchers  # ReplicaFetcherManager: endpoint_of(broker) and the inter-broker security
        self.broker_id = broker_id
        self.run_effects = run_effects
        self.request_timeout_s = request_timeout_ms / 1000
        self.clock = clock
        self.inflight: set[Key] = set()
        self.retry_at: dict[Key, float] = {}
        self.conns: dict[int, KafkaConnection] = {}
        self.sending: dict[int, asyncio.Task] = {}
        self.failing: dict[int, float] = {}  # leaders whose last request failed -> their backoff (s)
        self.sent = 0  # requests sent (for tests)
        self.local = None  # markers for this broker's own partitions, written in process (broker/apis/loopback.py)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._soon = False  # a round is scheduled with call_soon
        self._timer: asyncio.TimerHandle | None = None  # the next round at the latest (retries)

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.wake()

    async def close(self) -> None:
        self._loop = None
        if self._timer is not None:
            self._timer.cancel()
        tasks = list(self.sending.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for c in self.conns.values():
            c.close()
        self.conns.clear()

    def wake(self) -> None:
        """Run a round in the next step of the loop (markers to send, answers to act on): a
        callback, not a task woken through an event, so that markers start as soon as the decision
        is committed."""
        if self._loop is not None and not self._soon:
            self._soon = True
            self._loop.call_soon(self._tick)

    def _tick(self) -> None:
        self._soon = False
        if self._loop is None:
            return
        if self._timer is not None:
            self._timer.cancel()
        try:
            delay = self.round()
        except Exception:
            log.exception("transaction marker round failed")
            delay = 1.0
        if self._loop is not None:
            self._timer = self._loop.call_later(delay, self._tick)

    def round(self) -> float:
        """Send what can be sent; returns how long to wait at most before the next round."""
        self.run_effects(self.core.retry_complete())
        now = self.clock.monotonic()
        jobs = self.core.outstanding_markers()
        wanted: set[Key] = set()
        batches: dict[int, dict[MarkerJob, list[tuple[str, int]]]] = {}
        next_retry = None
        image = self.loader.image
        for job in jobs:
            for tp in sorted(job.partitions):
                key = (job.transactional_id, tp)
                wanted.add(key)
                if key in self.inflight:
                    continue
                at = self.retry_at.get(key)
                if at is not None and at > now:
                    next_retry = at if next_retry is None else min(next_retry, at)
                    continue
                t = image.topics_by_name.get(tp[0])
                p = t.partitions.get(tp[1]) if t is not None else None
                if p is None:
                    log.info("%s-%d no longer exists: no %s marker to write for %s", tp[0], tp[1],
                             "COMMIT" if job.commit else "ABORT", job.transactional_id)
                    self.run_effects(self.core.on_marker_result(job.transactional_id, job.coordinator_epoch, tp,
                                                                PARTITION_DELETED))
                    continue
                if p.leader < 0 or self.fetchers.endpoint_of(p.leader) is None:
                    self.retry_at[key] = now + BACKOFF_S
                    next_retry = now + BACKOFF_S if next_retry is None else min(next_retry, now + BACKOFF_S)
                    continue
                batches.setdefault(p.leader, {}).setdefault(job, []).append(tp)
        for key in [k for k in self.retry_at if k not in wanted]:
            del self.retry_at[key]
        for leader, batch in batches.items():
            t = self.sending.get(leader)
            if t is not None and not t.done():
                continue  # one request at a time per leader; the next round takes these
            for job, tps in batch.items():
                self.inflight.update((job.transactional_id, tp) for tp in tps)
            self.sending[leader] = asyncio.get_running_loop().create_task(self._send(leader, batch))
        if next_retry is None:
            return 1.0
        return min(max(next_retry - now, 0.005), 1.0)

    def _conn(self, leader: int) -> KafkaConnection | None:
        if leader == self.broker_id and self.local is not None:
            return self.local
        ep = self.fetchers.endpoint_of(leader)
        if ep is None:
            return None
        c = self.conns.get(leader)
        if c is None or (c.host, c.port) != ep:
            if c is not None:
                c.close()
            c = self.conns[leader] = KafkaConnection(ep[0], ep[1], client_id=f"broker-{self.broker_id}-txn-markers",
                                                     security=self.fetchers.security)
        return c

    async def _send(self, leader: int, batch: dict[MarkerJob, list[tuple[str, int]]]) -> None:
        markers = []
        for job, tps in batch.items():
            by_topic: dict[str, list[int]] = {}
            for t, p in tps:
                by_topic.setdefault(t, []).append(p)
            markers.append({"producer_id": job.producer_id, "producer_epoch": job.producer_epoch,
                            "transaction_result": job.commit, "coordinator_epoch": job.coordinator_epoch,
                            "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()],
                            "transaction_version": job.transaction_version})
        answers: dict[tuple[int, str, int], int] = {}
        try:
            conn = self._conn(leader)
            if conn is None:
                raise ConnectionError(f"no endpoint for broker {leader}")
            self.sent += 1
            resp = await conn.request(ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, {"markers": markers},
                                      timeout=self.request_timeout_s)
            for m in resp.markers:
                for t in m.topics:
                    for p in t.partitions:
                        answers[(int(m.producer_id), t.name, int(p.partition_index))] = int(p.error_code)
            if self.failing.pop(leader, None) is not None:
                log.info("writing transaction markers to broker %d again", leader)
        except (ConnectionError, OSError, TimeoutError) as e:
            (log.debug if leader in self.failing else log.warning)(
                "WriteTxnMarkers to broker %d failed (%s); retrying", leader, e)
            self.failing[leader] = min(self.failing.get(leader, BACKOFF_S / 2) * 2, MAX_BACKOFF_S)
        finally:
            retry = self.clock.monotonic() + self.failing.get(leader, BACKOFF_S)
            for job, tps in batch.items():
                for tp in tps:
                    key = (job.transactional_id, tp)
                    self.inflight.discard(key)
                    err = answers.get((job.producer_id, *tp))
                    if err is None or err in MARKER_RETRIABLE:
                        self.retry_at[key] = retry
                    if err is not None:
                        self.run_effects(self.core.on_marker_result(job.transactional_id, job.coordinator_epoch,
                                                                    tp, err))
            self.wake()


__all__ = ["TxnMarkerSender", "WRITE_TXN_MARKERS_VERSION"]
