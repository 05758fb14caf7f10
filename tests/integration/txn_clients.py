"""Transactional producers and read_committed consumers of the three client libraries behind one
small surface, for the transaction tests. Only the clients' public APIs are used.

    p = make_producer("aiokafka", bootstrap, "my-txn-id", timeout_ms=60000)
    p.init(); p.begin(); p.send(topic, partition, b"v"); p.commit()  # or p.abort()
    p.send_offsets({(topic, partition): next_offset}, group)           # inside a transaction
    read_committed(client, bootstrap, [(topic, partition), ...])       # values up to the end

A failed call raises ``TxnFailure`` whose ``kind`` is "fenced" (PRODUCER_FENCED,
INVALID_PRODUCER_EPOCH: another producer took over the transactional id, or the coordinator
aborted the transaction on its timeout and bumped the epoch), "abortable", or "other".
No pytest in here.
"""

from __future__ import annotations

import asyncio
import time

FENCED_CODES = {90, 47}  # PRODUCER_FENCED, INVALID_PRODUCER_EPOCH


class TxnFailure(Exception):
    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


# ---------------------------------------------------------------------------- confluent-kafka
class ConfluentTxn:
    def __init__(self, bootstrap: str, tid: str, timeout_ms: int):
        from confluent_kafka import Producer
        self.timeout_s = 30
        self.p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                           "transaction.timeout.ms": timeout_ms, "linger.ms": 5})

    def _do(self, fn, *args):
        from confluent_kafka import KafkaException
        try:
            return fn(*args)
        except KafkaException as e:
            err = e.args[0]
            name = err.name() if hasattr(err, "name") else str(err)
            if err.code() in FENCED_CODES or "FENCED" in name:
                raise TxnFailure("fenced", str(err)) from None
            if err.txn_requires_abort():
                raise TxnFailure("abortable", str(err)) from None
            raise TxnFailure("other", str(err)) from None

    def init(self):
        self._do(self.p.init_transactions, self.timeout_s)

    def begin(self):
        self._do(self.p.begin_transaction)

    def send(self, topic: str, partition: int, value: bytes):
        self._do(lambda: self.p.produce(topic, value=value, partition=partition))

    def commit(self):
        self._do(self.p.commit_transaction, self.timeout_s)

    def abort(self):
        self._do(self.p.abort_transaction, self.timeout_s)

    def send_offsets(self, offsets: dict, group: str, consumer=None):
        from confluent_kafka import TopicPartition
        tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        self._do(self.p.send_offsets_to_transaction, tps, consumer.consumer_group_metadata(), self.timeout_s)

    def close(self):
        self.p.flush(5)


# ------------------------------------------------------------------------------ kafka-python
class KafkaPythonTxn:
    def __init__(self, bootstrap: str, tid: str, timeout_ms: int):
        from kafka import KafkaProducer
        self.p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid, transaction_timeout_ms=timeout_ms,
                               linger_ms=5)

    def _do(self, fn, *args):
        from kafka import errors
        try:
            return fn(*args)
        except (errors.ProducerFencedError, errors.InvalidProducerEpochError) as e:
            raise TxnFailure("fenced", repr(e)) from None
        except errors.KafkaError as e:
            raise TxnFailure("abortable" if "abort" in repr(e).lower() else "other", repr(e)) from None

    def init(self):
        self._do(self.p.init_transactions)

    def begin(self):
        self._do(self.p.begin_transaction)

    def send(self, topic: str, partition: int, value: bytes):
        self._do(lambda: self.p.send(topic, value=value, partition=partition))

    def commit(self):
        self._do(self.p.commit_transaction)

    def abort(self):
        self._do(self.p.abort_transaction)

    def send_offsets(self, offsets: dict, group: str, consumer=None):
        from kafka import OffsetAndMetadata, TopicPartition
        self._do(self.p.send_offsets_to_transaction,
                 {TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()}, group)

    def close(self):
        self.p.close(timeout=5)


# ---------------------------------------------------------------------------------- aiokafka
class AiokafkaTxn:
    def __init__(self, bootstrap: str, tid: str, timeout_ms: int):
        from aiokafka import AIOKafkaProducer
        self.loop = asyncio.new_event_loop()

        async def make():
            return AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid,
                                    transaction_timeout_ms=timeout_ms, linger_ms=5)
        self.p = self.loop.run_until_complete(make())
        self.started = False

    def _do(self, coro):
        from aiokafka import errors
        try:
            return self.loop.run_until_complete(coro)
        except (errors.ProducerFenced, errors.InvalidProducerEpoch) as e:
            raise TxnFailure("fenced", repr(e)) from None
        except errors.KafkaError as e:
            raise TxnFailure("abortable" if "abort" in repr(e).lower() else "other", repr(e)) from None

    def init(self):
        if not self.started:  # start() runs InitProducerId
            self.started = True
            self._do(self.p.start())

    def begin(self):
        self._do(self.p.begin_transaction())

    def send(self, topic: str, partition: int, value: bytes):
        async def go():
            await (await self.p.send(topic, value=value, partition=partition))
        self._do(go())

    def commit(self):
        self._do(self.p.commit_transaction())

    def abort(self):
        self._do(self.p.abort_transaction())

    def send_offsets(self, offsets: dict, group: str, consumer=None):
        from aiokafka import TopicPartition
        self._do(self.p.send_offsets_to_transaction({TopicPartition(t, p): o for (t, p), o in offsets.items()},
                                                    group))

    def close(self):
        try:
            self.loop.run_until_complete(self.p.stop())
        except Exception:
            pass
        self.loop.close()


PRODUCERS = {"confluent-kafka": ConfluentTxn, "kafka-python": KafkaPythonTxn, "aiokafka": AiokafkaTxn}


def make_producer(client: str, bootstrap: str, tid: str, timeout_ms: int = 60_000):
    return PRODUCERS[client](bootstrap, tid, timeout_ms)


def read_committed(client: str, bootstrap: str, tps: list[tuple[str, int]], expect: int,
                   timeout: float = 30.0) -> list[bytes]:
    """Values read with isolation.level=read_committed from the start of ``tps`` until ``expect``
    records came or ``timeout`` passed (then a little longer, to catch extra records)."""
    deadline = time.monotonic() + timeout
    out: list[bytes] = []
    if client == "confluent-kafka":
        from confluent_kafka import Consumer, TopicPartition
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "rc-reader", "enable.auto.commit": False,
                      "isolation.level": "read_committed"})
        c.assign([TopicPartition(t, p, 0) for t, p in tps])
        try:
            settle = None
            while time.monotonic() < (settle or deadline):
                for m in c.consume(100, 0.2):
                    if m.error() is None:
                        out.append(m.value())
                if len(out) >= expect and settle is None:
                    settle = time.monotonic() + 1.0
        finally:
            c.close()
        return out
    if client == "kafka-python":
        from kafka import KafkaConsumer, TopicPartition
        c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False)
        c.assign([TopicPartition(t, p) for t, p in tps])
        c.seek_to_beginning()
        try:
            settle = None
            while time.monotonic() < (settle or deadline):
                for recs in c.poll(200).values():
                    out += [r.value for r in recs]
                if len(out) >= expect and settle is None:
                    settle = time.monotonic() + 1.0
        finally:
            c.close()
        return out

    async def go():
        from aiokafka import AIOKafkaConsumer, TopicPartition
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False)
        await c.start()
        try:
            c.assign([TopicPartition(t, p) for t, p in tps])
            await c.seek_to_beginning()
            settle = None
            while time.monotonic() < (settle or deadline):
                for recs in (await c.getmany(timeout_ms=200)).values():
                    out.extend(r.value for r in recs)
                if len(out) >= expect and settle is None:
                    settle = time.monotonic() + 1.0
        finally:
            await c.stop()
    asyncio.run(go())
    return out
