"""Kafka v2 record batches (as a Fetch response carries them) -> ``pyarrow.RecordBatch`` in the
schema of Spark's Kafka source, without a Python object per record.

The batch headers are read in Python (one ``struct`` unpack per batch: control batches, aborted
transactions and the CRC are decided per batch), the records themselves by the compiled
``broker.log._records.decode_columns``, which fills Arrow's buffers (validity bitmaps, int32
offsets, data) directly; the arrays are then assembled from those buffers with
``pa.Array.from_buffers``, no copy. Without the compiled module (no C compiler at install time)
the records are decoded by ``broker.log.batch.section_records``, a Python object per record.
"""

from __future__ import annotations

import crc32c
import pyarrow as pa

from broker.log.batch import (
    DEFAULT_RECORDS_LIMIT,
    HEADER_SIZE,
    decompress_records,
    parse_batches,
    section_records,
)
from broker.log.record_walk import check_records_count

try:
    from broker.log._records import decode_columns as _decode_columns
except ImportError:  # not built: the Python decoder below
    _decode_columns = None

COMPILED = _decode_columns is not None
_CRC_FROM = 21  # the CRC covers attributes .. the end of the batch


class CorruptRecordError(RuntimeError):
    """A fetched batch failed its CRC or does not parse (Kafka's CorruptRecordException)."""


def sections(raw, start: int, aborted: list[tuple[int, int]] | None, read_committed: bool,
             where: str, check_crcs: bool = True) -> tuple[list, int]:
    """The records sections to decode from a Fetch response's records bytes, and the offset after
    the last whole batch (where the next fetch starts; ``start`` when there is none).

    Leaves out control batches, batches wholly before ``start`` (a fetch answers from the batch
    holding the fetch offset) and, with read_committed, the batches of aborted transactions
    (Kafka's Fetcher: a producer's batches from an aborted transaction's first offset until its
    abort marker). A trailing partial batch (a response cut at max bytes) is left for the next
    fetch."""
    out = []
    nxt = start
    view = memoryview(raw)
    aborted_from = sorted(aborted or ()) if read_committed else []
    skipping: set[int] = set()
    for h in parse_batches(raw):
        nxt = max(nxt, h.next_offset)
        while aborted_from and aborted_from[0][0] <= h.last_offset:
            skipping.add(aborted_from.pop(0)[1])
        if h.is_control:
            if h.producer_id in skipping:
                skipping.discard(h.producer_id)  # the abort marker ends the aborted transaction
            continue
        if h.last_offset < start or (read_committed and h.is_transactional and h.producer_id in skipping):
            continue
        if h.magic != 2:
            raise CorruptRecordError(f"{where}: record batch at offset {h.base_offset} has magic {h.magic}, "
                                     "only v2 batches are read")
        batch = view[h.pos:h.pos + h.size]
        if check_crcs and crc32c.crc32c(batch[_CRC_FROM:]) != h.crc:
            raise CorruptRecordError(f"{where}: record batch at offset {h.base_offset} fails its CRC check")
        data = batch[HEADER_SIZE:]
        try:
            if h.compression:
                check_records_count(h.records_count, DEFAULT_RECORDS_LIMIT)
                data = decompress_records(h.compression, data, DEFAULT_RECORDS_LIMIT)
            check_records_count(h.records_count, len(data))
        except Exception as e:  # KafkaError (CORRUPT_MESSAGE / INVALID_RECORD) with its reason
            raise CorruptRecordError(f"{where}: record batch at offset {h.base_offset}: {e}") from None
        out.append((data, h.records_count, h.base_offset, h.base_timestamp, h.max_timestamp, h.timestamp_type, h))
    return out, nxt


def _binary(buffers, n: int, typ) -> pa.Array:
    valid, offs, data, nulls = buffers
    return pa.Array.from_buffers(typ, n, [pa.py_buffer(valid) if nulls else None, pa.py_buffer(offs),
                                          pa.py_buffer(data)], null_count=nulls)


def to_record_batch(secs: list, start: int, end: int, topic: str, partition: int, schema: pa.Schema,
                    include_headers: bool) -> pa.RecordBatch:
    """The records with offsets in [start, end) of ``secs`` (from ``sections``) as one RecordBatch
    of ``schema`` (Spark's Kafka columns: key, value, topic, partition, offset, timestamp,
    timestampType[, headers])."""
    if not COMPILED:
        return _to_record_batch_py(secs, start, end, topic, partition, schema, include_headers)
    try:
        n, offsets, stamps, types, key, value, headers = _decode_columns(
            [s[:6] for s in secs], start, end, include_headers)
    except ValueError as e:
        raise CorruptRecordError(f"{topic}-{partition}: {e}") from None
    arrays = [
        _binary(key, n, pa.binary()),
        _binary(value, n, pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(offsets)]),
        pa.Array.from_buffers(schema.field("timestamp").type, n, [None, pa.py_buffer(stamps)]),
        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(types)]),
    ]
    if include_headers:
        hvalid, hoffs, hnull, nh, hkoffs, hkdata, hvvalid, hvoffs, hvdata, hvnull = headers
        list_type = schema.field("headers").type
        struct_type = list_type.value_type
        entries = pa.StructArray.from_arrays(
            [pa.Array.from_buffers(pa.string(), nh, [None, pa.py_buffer(hkoffs), pa.py_buffer(hkdata)]),
             _binary((hvvalid, hvoffs, hvdata, hvnull), nh, pa.binary())],
            fields=list(struct_type))
        arrays.append(pa.Array.from_buffers(list_type, n, [pa.py_buffer(hvalid) if hnull else None,
                                                           pa.py_buffer(hoffs)],
                                            null_count=hnull, children=[entries]))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _to_record_batch_py(secs, start, end, topic, partition, schema, include_headers) -> pa.RecordBatch:
    keys, values, offsets, stamps, types, headers = [], [], [], [], [], []
    for data, _count, _base, _bts, _mts, ttype, h in secs:
        for rec in section_records(h, bytes(data)):
            if start <= rec.offset < end:
                keys.append(rec.key)
                values.append(rec.value)
                offsets.append(rec.offset)
                stamps.append(rec.timestamp * 1000)
                types.append(ttype)
                if include_headers:
                    headers.append([{"key": k, "value": v} for k, v in rec.headers] if rec.headers else None)
    n = len(offsets)
    arrays = [pa.array(keys, pa.binary()), pa.array(values, pa.binary()), pa.repeat(pa.scalar(topic), n),
              pa.repeat(pa.scalar(partition, pa.int32()), n), pa.array(offsets, pa.int64()),
              pa.array(stamps, pa.int64()).cast(schema.field("timestamp").type), pa.array(types, pa.int32())]
    if include_headers:
        arrays.append(pa.array(headers, schema.field("headers").type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
