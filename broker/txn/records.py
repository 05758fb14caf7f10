"""The records of ``__transaction_state``: Kafka's TransactionLogKey and TransactionLogValue,
byte for byte (transaction-coordinator/src/main/resources/common/message/*.json).

    key: version int16 (0) | TransactionalId string

    TransactionLogValue v0 (transaction.version 0), v1 (flexible, transaction.version >= 1)
        ProducerId int64 | ProducerEpoch int16 | TransactionTimeoutMs int32
        | TransactionStatus int8 | TransactionPartitions nullable [Topic string, PartitionIds [int32]]
        | TransactionLastUpdateTimestampMs int64 | TransactionStartTimestampMs int64
        | [v1: tagged fields: 0 PreviousProducerId int64 (default -1), 1 NextProducerId int64
           (default -1), 2 ClientTransactionVersion int16 (default 0)]

v1 uses compact strings and arrays (uvarint length + 1, 0 for null) and ends every struct
with its tagged fields. A null value is a tombstone: the transactional id expired.
The partitions are null in the Empty state (Kafka writes them so and ignores them there).
"""

from __future__ import annotations

import dataclasses
import struct

from broker.group.records import RecordFormatError, RecordReader, encode_string, java_string_hashcode  # noqa: F401

KEY_VERSION = 0
_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_VALUE_HEAD = struct.Struct(">qhib")  # producer id, epoch, timeout, status

TAG_PREVIOUS_PRODUCER_ID = 0
TAG_NEXT_PRODUCER_ID = 1
TAG_CLIENT_TRANSACTION_VERSION = 2


@dataclasses.dataclass(frozen=True, slots=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int  # TxnState's id
    partitions: tuple[tuple[str, int], ...]
    last_update_ms: int
    start_ms: int
    prev_producer_id: int = -1
    next_producer_id: int = -1
    client_tv: int = 0


def transaction_key(transactional_id: str) -> bytes:
    return _H.pack(KEY_VERSION) + encode_string(transactional_id)


def decode_key(key: bytes) -> str:
    r = RecordReader(bytes(key))
    version = r.i16()
    if version != KEY_VERSION:
        raise RecordFormatError(f"unknown __transaction_state key version {version}")
    return r.string()


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _compact_string(s: str) -> bytes:
    b = s.encode("utf-8")
    return _uvarint(len(b) + 1) + b


def _grouped(partitions) -> list[tuple[str, list[int]]]:
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(partitions):
        by_topic.setdefault(t, []).append(p)
    return list(by_topic.items())


def transaction_value(v: TxnLogValue, version: int, *, empty: bool) -> bytes:
    """The value in ``version`` (0 or 1); ``empty``: the state is Empty (null partitions)."""
    out = bytearray(_H.pack(version))
    out += _VALUE_HEAD.pack(v.producer_id, v.producer_epoch, v.timeout_ms, v.status)
    groups = None if empty else _grouped(v.partitions)
    if version == 0:
        if groups is None:
            out += _I.pack(-1)
        else:
            out += _I.pack(len(groups))
            for topic, ps in groups:
                out += encode_string(topic) + _I.pack(len(ps)) + b"".join(_I.pack(p) for p in ps)
        out += _Q.pack(v.last_update_ms) + _Q.pack(v.start_ms)
        return bytes(out)
    if version != 1:
        raise ValueError(f"TransactionLogValue has no version {version}")
    if groups is None:
        out += _uvarint(0)
    else:
        out += _uvarint(len(groups) + 1)
        for topic, ps in groups:
            out += _compact_string(topic) + _uvarint(len(ps) + 1) + b"".join(_I.pack(p) for p in ps) + b"\x00"
    out += _Q.pack(v.last_update_ms) + _Q.pack(v.start_ms)
    tags = []
    if v.prev_producer_id != -1:
        tags.append((TAG_PREVIOUS_PRODUCER_ID, _Q.pack(v.prev_producer_id)))
    if v.next_producer_id != -1:
        tags.append((TAG_NEXT_PRODUCER_ID, _Q.pack(v.next_producer_id)))
    if v.client_tv != 0:
        tags.append((TAG_CLIENT_TRANSACTION_VERSION, _H.pack(v.client_tv)))
    out += _uvarint(len(tags))
    for tag, data in tags:
        out += _uvarint(tag) + _uvarint(len(data)) + data
    return bytes(out)


def decode_value(value: bytes) -> TxnLogValue:
    r = RecordReader(bytes(value))
    version = r.i16()
    if version not in (0, 1):
        raise RecordFormatError(f"unknown TransactionLogValue version {version}")
    r.flexible = version >= 1
    pid, epoch, timeout, status = r.i64(), r.i16(), r.i32(), struct.unpack(">b", r._take(1))[0]
    partitions = []
    for _ in range(r.array_len()):
        topic = r.string()
        for _ in range(r.array_len()):
            partitions.append((topic, r.i32()))
        r.tagged_fields()
    last_update, start = r.i64(), r.i64()
    prev_pid = next_pid = -1
    tv = 0
    if r.flexible:
        for _ in range(r.uvarint()):
            tag, size = r.uvarint(), r.uvarint()
            data = r._take(size)
            if tag == TAG_PREVIOUS_PRODUCER_ID and size == 8:
                prev_pid = _Q.unpack(data)[0]
            elif tag == TAG_NEXT_PRODUCER_ID and size == 8:
                next_pid = _Q.unpack(data)[0]
            elif tag == TAG_CLIENT_TRANSACTION_VERSION and size == 2:
                tv = _H.unpack(data)[0]
    return TxnLogValue(pid, epoch, timeout, status, tuple(partitions), last_update, start, prev_pid, next_pid, tv)


def format_record(key: bytes, value: bytes | None) -> tuple[str, str]:
    """Kafka's TransactionLog.formatRecordKeyAndValue (what kafka-dump-log prints)."""
    from broker.txn.state import TxnState

    try:
        tid = decode_key(key)
    except RecordFormatError:
        return f"unknown::version={_H.unpack_from(key)[0] if len(key) >= 2 else -1}", ""
    if value is None:
        return f"transaction_metadata::transactionalId={tid}", "<DELETE>"
    v = decode_value(value)
    state = TxnState(v.status)
    parts = "[]" if state == TxnState.EMPTY else "[" + ",".join(f"{t}-{p}" for t, p in v.partitions) + "]"
    return (f"transaction_metadata::transactionalId={tid}",
            f"producerId:{v.producer_id},producerEpoch:{v.producer_epoch},state={state.kafka_name},"
            f"partitions={parts},txnLastUpdateTimestamp={v.last_update_ms},txnTimeoutMs={v.timeout_ms}")
