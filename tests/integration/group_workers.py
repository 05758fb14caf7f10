"""Consumer-group members driven by real clients (confluent-kafka, kafka-python, aiokafka),
each in its own thread, with one surface for the group tests, the cluster tests and bench/groups.py.

    w = make_worker("kafka-python", bootstrap, group, [topic], client_id="C0")
    w.start()
    w.assignment            # set of (topic, partition) the client currently owns
    w.events                # [("assign"|"revoke", frozenset), ...] from the rebalance callbacks
    w.records               # [(topic, partition, offset), ...] in consumption order
    w.commit_batches = False  # stop committing (sync commit after each polled batch by default)
    w.stop()                # close the consumer (a dynamic member leaves the group)

No pytest in here. Only the clients' public APIs are used.
"""

from __future__ import annotations

import asyncio
import threading
import time
import traceback

SESSION_MS = 10000
HEARTBEAT_MS = 500


class Worker(threading.Thread):
    client = "?"

    def __init__(self, bootstrap: str, group: str, topics: list[str], client_id: str = "member",
                 instance_id: str | None = None, assignor: str = "range", commit_batches: bool = True,
                 session_ms: int = SESSION_MS, max_batch: int = 500):
        super().__init__(daemon=True, name=f"{self.client}-{client_id}")
        self.bootstrap, self.group, self.topics = bootstrap, group, list(topics)
        self.client_id, self.instance_id, self.assignor = client_id, instance_id, assignor
        self.commit_batches = commit_batches
        self.session_ms = session_ms
        self.max_batch = max_batch
        self.assignment: frozenset = frozenset()
        self.events: list[tuple[str, frozenset]] = []
        self.records: list[tuple[str, int, int]] = []
        self.commits = 0
        self.error: BaseException | None = None
        self.error_tb = ""
        self._stop_evt = threading.Event()
        self.closed = threading.Event()
        self.lock = threading.Lock()
        self.commit_now = threading.Event()  # ask for one sync commit of the current positions
        self.committed_once = threading.Event()

    # ---- callbacks shared by the adapters
    def _on_assign(self, tps) -> None:
        self.events.append(("assign", frozenset((t, p) for t, p in tps)))

    def _on_revoke(self, tps) -> None:
        self.events.append(("revoke", frozenset((t, p) for t, p in tps)))

    def _got(self, items) -> None:
        with self.lock:
            self.records.extend(items)

    def run(self) -> None:
        try:
            self.body()
        except BaseException as e:  # noqa: BLE001 - reported to the test through .error
            self.error = e
            self.error_tb = traceback.format_exc()
        finally:
            self.closed.set()

    def stop(self, timeout: float = 30) -> None:
        self._stop_evt.set()
        self.join(timeout)
        if self.is_alive():
            raise AssertionError(f"{self.name} did not close within {timeout}s")
        self.check()

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"{self.name} failed: {self.error!r}\n{self.error_tb}")

    def consumed(self) -> list[tuple[str, int, int]]:
        with self.lock:
            return list(self.records)

    def body(self) -> None:  # pragma: no cover - per client
        raise NotImplementedError


class ConfluentWorker(Worker):
    client = "confluent-kafka"

    def body(self) -> None:
        from confluent_kafka import Consumer, KafkaException

        conf = {
            "bootstrap.servers": self.bootstrap, "group.id": self.group, "client.id": self.client_id,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": self.session_ms, "heartbeat.interval.ms": HEARTBEAT_MS,
            "partition.assignment.strategy": self.assignor, "topic.metadata.refresh.interval.ms": 2000,
        }
        if self.instance_id:
            conf["group.instance.id"] = self.instance_id
        c = Consumer(conf)
        self.consumer = c
        c.subscribe(self.topics,
                    on_assign=lambda _c, ps: self._on_assign([(p.topic, p.partition) for p in ps]),
                    on_revoke=lambda _c, ps: self._on_revoke([(p.topic, p.partition) for p in ps]),
                    on_lost=lambda _c, ps: self._on_revoke([(p.topic, p.partition) for p in ps]))
        try:
            while not self._stop_evt.is_set():
                msgs = c.consume(num_messages=self.max_batch, timeout=0.1)
                got = [(m.topic(), m.partition(), m.offset()) for m in msgs if m.error() is None]
                self._got(got)
                if (got and self.commit_batches) or self.commit_now.is_set():
                    try:
                        c.commit(asynchronous=False)
                        self.commits += 1
                    except KafkaException as e:
                        if "NO_OFFSET" not in str(e):
                            raise
                    if self.commit_now.is_set():
                        self.commit_now.clear()
                        self.committed_once.set()
                self.assignment = frozenset((p.topic, p.partition) for p in c.assignment())
        finally:
            c.close()
            self.assignment = frozenset()


class KafkaPythonWorker(Worker):
    client = "kafka-python"

    def body(self) -> None:
        from kafka import ConsumerRebalanceListener, KafkaConsumer
        from kafka.coordinator.assignors.range import RangePartitionAssignor
        from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
        from kafka.structs import TopicPartition  # noqa: F401

        assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
        w = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                w._on_revoke([(tp.topic, tp.partition) for tp in revoked])

            def on_partitions_assigned(self, assigned):
                w._on_assign([(tp.topic, tp.partition) for tp in assigned])

        c = KafkaConsumer(
            bootstrap_servers=self.bootstrap.split(","), group_id=self.group, client_id=self.client_id,
            group_instance_id=self.instance_id, enable_auto_commit=False, auto_offset_reset="earliest",
            session_timeout_ms=self.session_ms, heartbeat_interval_ms=HEARTBEAT_MS,
            partition_assignment_strategy=(assignors[self.assignor],), metadata_max_age_ms=2000,
        )
        self.consumer = c
        c.subscribe(self.topics, listener=Listener())
        try:
            while not self._stop_evt.is_set():
                batch = c.poll(timeout_ms=100, max_records=self.max_batch)
                got = [(tp.topic, tp.partition, r.offset) for tp, rs in batch.items() for r in rs]
                self._got(got)
                if (got and self.commit_batches) or self.commit_now.is_set():
                    c.commit()
                    self.commits += 1
                    if self.commit_now.is_set():
                        self.commit_now.clear()
                        self.committed_once.set()
                self.assignment = frozenset((tp.topic, tp.partition) for tp in c.assignment())
        finally:
            c.close(autocommit=False)
            self.assignment = frozenset()


class AioKafkaWorker(Worker):
    client = "aiokafka"

    def body(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
        from aiokafka.coordinator.assignors.range import RangePartitionAssignor
        from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

        assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
        w = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                w._on_revoke([(tp.topic, tp.partition) for tp in revoked])

            def on_partitions_assigned(self, assigned):
                w._on_assign([(tp.topic, tp.partition) for tp in assigned])

        c = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=self.group, client_id=self.client_id,
            group_instance_id=self.instance_id, enable_auto_commit=False, auto_offset_reset="earliest",
            session_timeout_ms=self.session_ms, heartbeat_interval_ms=HEARTBEAT_MS,
            partition_assignment_strategy=(assignors[self.assignor],), metadata_max_age_ms=2000,
        )
        self.consumer = c
        await c.start()
        c.subscribe(self.topics, listener=Listener())
        try:
            while not self._stop_evt.is_set():
                batch = await c.getmany(timeout_ms=100, max_records=self.max_batch)
                got = [(tp.topic, tp.partition, r.offset) for tp, rs in batch.items() for r in rs]
                self._got(got)
                if (got and self.commit_batches) or self.commit_now.is_set():
                    await c.commit()
                    self.commits += 1
                    if self.commit_now.is_set():
                        self.commit_now.clear()
                        self.committed_once.set()
                self.assignment = frozenset((tp.topic, tp.partition) for tp in c.assignment())
        finally:
            await c.stop()
            self.assignment = frozenset()


WORKERS = {"confluent-kafka": ConfluentWorker, "kafka-python": KafkaPythonWorker, "aiokafka": AioKafkaWorker}


def make_worker(client: str, *args, **kw) -> Worker:
    return WORKERS[client](*args, **kw)


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int, acks: str = "all") -> None:
    """per_partition records into each partition (values name their partition and sequence)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "enable.idempotence": True})
    errors = []

    def cb(err, _msg):
        if err is not None:
            errors.append(err)

    for part in range(partitions):
        for i in range(per_partition):
            while True:
                try:
                    p.produce(topic, value=f"{part}:{i}".encode(), partition=part, on_delivery=cb)
                    break
                except BufferError:
                    p.poll(0.05)
        p.poll(0)
    left = p.flush(60)
    if left or errors:
        raise AssertionError(f"produce to {topic}: {left} undelivered, errors {errors[:3]}")


def wait_for(pred, timeout: float, what: str, workers=(), interval: float = 0.1):
    """Poll pred() until truthy; fail early with the traceback of a worker that died."""
    deadline = time.monotonic() + timeout
    while True:
        for w in workers:
            w.check()
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            state = "; ".join(f"{w.name}: {sorted(w.assignment)}" for w in workers)
            raise AssertionError(f"timed out after {timeout}s waiting for {what} ({state})")
        time.sleep(interval)


def split_ok(workers, all_tps) -> bool:
    """Every worker owns something, no partition is owned twice, together they own all."""
    sets = [w.assignment for w in workers]
    if any(not s for s in sets):
        return False
    union = frozenset().union(*sets)
    return union == frozenset(all_tps) and sum(len(s) for s in sets) == len(union)


def _admin_call(bootstrap: str, fn):
    from krafty.consumer_groups import GroupAdmin, parse_bootstrap

    async def go():
        admin = GroupAdmin(parse_bootstrap(bootstrap), timeout=10)
        try:
            await admin.start()
            return await fn(admin)
        finally:
            admin.close()

    return asyncio.run(go())


def committed_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets, read with OffsetFetch from its coordinator."""
    return _admin_call(bootstrap, lambda a: a.committed_offsets(group))


def describe_group(bootstrap: str, group: str):
    return _admin_call(bootstrap, lambda a: a.describe_group(group))


def find_coordinator(bootstrap: str, group: str) -> tuple[int, str, int]:
    return _admin_call(bootstrap, lambda a: a.find_coordinator(group))
