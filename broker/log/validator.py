"""Record-level validation of client batches before they are appended (Kafka's LogValidator).

``validate_produce_batches`` (batch.py) has checked the framing, CRC and header of each batch.
Here, per batch and with the topic's config, what Kafka's LogValidator checks on append:

- every record of every batch, compressed or not, is framed as Kafka's DefaultRecord.readFrom
  requires (INVALID_RECORD otherwise): its length, each field inside it and together exactly
  it, key/value/header lengths, header count and header keys, and exactly ``recordsCount``
  records filling the section (record_walk.py; compiled, ~20 ns a record);
- a compressed batch decompresses within ``records_limit(max.message.bytes)`` bytes
  (CORRUPT_MESSAGE beyond, or when the codec data is bad);
- on a compacted topic every record has a key (INVALID_RECORD with one record error per
  keyless record, KIP-467);
- with CreateTime, each record's timestamp is within [now - message.timestamp.before.max.ms,
  now + message.timestamp.after.max.ms] (KIP-937), and no client claims LogAppendTime
  (INVALID_TIMESTAMP with record errors).

Then, as Kafka does, a batch is re-encoded when the topic's compression.type differs from its
codec, a compressed batch whose inner offsets are not 0..n-1 gets them renumbered, and a
CreateTime batch gets the maxTimestamp of its records.

Large batches are validated in a small thread pool off the event loop (zlib, zstd and lz4
release the GIL while they decompress, the compiled walker while it walks a large section),
small ones on the loop (``validate_async``).
"""

from __future__ import annotations

import asyncio
import functools
import struct
from concurrent.futures import ThreadPoolExecutor

from crc32c import crc32c

from common.errors import ErrorCode, KafkaError

from .batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CRC_OFFSET,
    HEADER_SIZE,
    MAX_TIMESTAMP_OFFSET,
    NO_TIMESTAMP,
    BatchHeader,
    assemble_batch,
    check_records_count,
    compress_records,
    decompress_records,
    encode_record,
    parse_batches,
    records_limit,
    scan_records,
    section_records,
    timestamp_deltas,
)
from .record_walk import WALKER_COMPILED

CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}  # compression.type; "producer": keep

# Validated on the event loop when every batch is this small, else in the pool (and every
# re-encoding). The compiled walker takes ~20 ns a record (a 1 MiB batch of 100 B records: ~0.2 ms,
# about what a hop to the pool and back costs, and less than the CRC32C of its bytes that produce
# computes on the loop anyway); the Python one ~1.3 us (512 records: ~0.7 ms).
INLINE_MAX_RECORDS = 16384 if WALKER_COMPILED else 512
INLINE_MAX_BATCH_BYTES = 1 << 62 if WALKER_COMPILED else 64 * 1024  # (the Python walker copies the section)
INLINE_MAX_COMPRESSED_BYTES = 64 * 1024  # a compressed batch, and at most this decompressed:
INLINE_MAX_RECORDS_BYTES = 256 * 1024
MAX_MESSAGES_IN_RECORD_ERRORS = 100  # the rest are listed by index only (bounds the response)

_POOL_THREADS = 2
_pool: ThreadPoolExecutor | None = None
_Q = struct.Struct(">q")
_CRC = struct.Struct(">I")


class RecordValidationError(KafkaError):
    """A batch rejected for some of its records (Kafka's RecordValidationException): the
    produce response carries ``record_errors`` as (batch_index, message or None)."""

    def __init__(self, code: ErrorCode, message: str, record_errors: list[tuple[int, str | None]]):
        super().__init__(code, message)
        self.record_errors = record_errors


class _TooMuchForTheLoop(Exception):
    """Raised by an inline validation that would exceed its budget: redo it in the pool."""


def validate_batches(buf, headers: list[BatchHeader], config, now_ms: int, partition_name: str, *,
                     inline: bool = False) -> tuple[bytearray | memoryview | bytes, list[BatchHeader]]:
    """Validate client batches for appending to a log with ``config`` (a LogConfig) at wall
    time ``now_ms``; returns the batches to append (``buf``/``headers`` unchanged unless a batch
    was re-encoded). Raises KafkaError or RecordValidationError. ``inline``: refuse to do more
    than a small amount of work (``_TooMuchForTheLoop``)."""
    v = _Validator(config, now_ms, partition_name, inline)
    out: list[bytes | bytearray | memoryview] = []
    changed = False
    mv = memoryview(buf)
    for h in headers:
        raw = mv[h.pos:h.pos + h.size]
        new = v.batch(h, raw)
        changed |= new is not None
        out.append(raw if new is None else new)
    if not changed:
        return buf, headers
    joined = bytearray().join(out)
    return joined, parse_batches(joined)


def validate_now(buf, headers: list[BatchHeader], config, now_ms: int, partition_name: str):
    """``validate_batches`` on the event loop when that is O(1) or the batches are small; None
    when it is more than that (then ``validate_async``)."""
    try:
        return validate_batches(buf, headers, config, now_ms, partition_name, inline=True)
    except _TooMuchForTheLoop:
        return None


async def validate_async(buf, headers: list[BatchHeader], config, now_ms: int, partition_name: str):
    """``validate_batches`` on the event loop when that is O(1) or the batches are small, else
    in the pool."""
    done = validate_now(buf, headers, config, now_ms, partition_name)
    if done is not None:
        return done
    return await in_pool(validate_batches, buf, headers, config, now_ms, partition_name)


async def in_pool(fn, *args):
    """``fn(*args)`` in the validation pool (record work too large for the event loop)."""
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(_POOL_THREADS, thread_name_prefix="krafty-validate")
    return await asyncio.get_running_loop().run_in_executor(_pool, functools.partial(fn, *args))


def recompress(buf, headers: list[BatchHeader], target: int, max_message_bytes: int
               ) -> tuple[bytearray, list[BatchHeader]]:
    """Re-encode every non-control batch whose codec is not ``target`` (bounded like the
    decoders), for appends that did not go through ``validate_batches``."""
    out = bytearray()
    mv = memoryview(buf)
    limit = records_limit(max_message_bytes)
    for h in headers:
        raw = mv[h.pos:h.pos + h.size]
        if h.compression == target or h.is_control:
            out += raw
            continue
        data = _section(h, raw, limit)
        scan = scan_records(data, h.records_count)
        out += _rebuild(h, data, target, h.max_timestamp, scan.offsets_in_order)
    new_headers = parse_batches(out)
    _check_size(new_headers, max_message_bytes)
    return out, new_headers


def _check_size(headers: list[BatchHeader], max_message_bytes: int) -> None:
    for h in headers:
        if h.size > max_message_bytes:
            raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE, f"record batch of {h.size} bytes after recompression "
                             f"exceeds max.message.bytes={max_message_bytes}")


def _section(h: BatchHeader, raw, limit: int) -> bytes:
    section = raw[HEADER_SIZE:h.size]
    if h.compression == 0:
        check_records_count(h.records_count, len(section))
        return bytes(section)
    check_records_count(h.records_count, limit)
    return decompress_records(h.compression, section, limit)


class _Validator:
    def __init__(self, config, now_ms: int, partition_name: str, inline: bool):
        self.config = config
        self.now = now_ms
        self.tp = partition_name
        self.inline = inline
        self.limit = records_limit(config.max_message_bytes)
        self.target = CODECS.get(config.compression_type)
        self.create_time = not config.log_append_time
        self.before = config.message_timestamp_before_max_ms
        self.after = config.message_timestamp_after_max_ms
        self.compact = config.compact_enabled

    def _out_of_range(self, ts: int) -> bool:
        return self.now - ts > self.before or ts - self.now > self.after

    def _timestamp_error(self, ts: int, offset_delta: int) -> str:
        return (f"Timestamp {ts} of message with offset {offset_delta} is out of range. The timestamp should "
                f"be within [{self.now - self.before}, {self.now + self.after}]")

    def batch(self, h: BatchHeader, raw) -> bytearray | None:
        """Validate one batch; the batch to append instead of ``raw``, or None to keep it."""
        if h.is_control:  # only the coordinators write these (clients' are refused earlier)
            return None
        codec = h.compression
        count = h.records_count
        check_records_count(count, h.size - HEADER_SIZE if codec == 0 else self.limit)
        convert = self.target is not None and self.target != codec
        if self.inline and (convert or count > INLINE_MAX_RECORDS or h.size > INLINE_MAX_BATCH_BYTES
                            or (codec and h.size > INLINE_MAX_COMPRESSED_BYTES)):
            raise _TooMuchForTheLoop
        section = raw[HEADER_SIZE:h.size]
        if codec == 0:
            data = section
        elif self.inline:
            try:
                data = decompress_records(codec, section, min(self.limit, INLINE_MAX_RECORDS_BYTES))
            except KafkaError:
                raise _TooMuchForTheLoop from None  # too large for the loop, or bad: the pool tells which
        else:
            data = decompress_records(codec, section, self.limit)
        scan = scan_records(data, count, keys=self.compact)  # the framing of every record, or INVALID_RECORD
        errors: list[tuple[int, str]] = []
        if scan.null_keys:
            msg = f"Compacted topic cannot accept message without key in topic partition {self.tp}."
            errors = [(i, msg) for i in scan.null_keys]
        keyless = set(scan.null_keys)  # Kafka checks the key first, then the timestamp
        bad_timestamp = False
        max_ts = h.max_timestamp
        if h.timestamp_type == 1:
            # Kafka: a record of a LogAppendTime batch has the batch's maxTimestamp; with CreateTime
            # it is range-checked, else the producer should not have set LogAppendTime.
            ts = h.max_timestamp
            lat_error = None
            if not self.create_time or ts == NO_TIMESTAMP:
                lat_error = "Invalid timestamp type in message. Producer should not set timestamp type to LogAppendTime."
            elif self._out_of_range(ts):
                lat_error = self._timestamp_error(ts, 0)
            if lat_error is not None:
                errors += [(i, lat_error) for i in range(count) if i not in keyless]
                bad_timestamp = len(errors) > len(keyless)
        elif self.create_time and count:
            base = h.base_timestamp
            lo, hi = base + scan.min_timestamp_delta, base + scan.max_timestamp_delta
            if self.now - lo > self.before or hi - self.now > self.after:
                for i, delta in enumerate(timestamp_deltas(data, count)):
                    ts = base + delta
                    if ts != NO_TIMESTAMP and i not in keyless and self._out_of_range(ts):
                        errors.append((i, self._timestamp_error(ts, i)))
                        bad_timestamp = True
            max_ts = max(hi, NO_TIMESTAMP)
        if errors:
            errors.sort()
            self._raise(errors, bad_timestamp)
        if convert or (codec and not scan.offsets_in_order):
            return _rebuild(h, data, self.target if convert else codec, max_ts, scan.offsets_in_order)
        if max_ts != h.max_timestamp:  # Kafka sets the batch's maxTimestamp to its records'
            return _with_max_timestamp(raw, max_ts)
        return None

    def _raise(self, errors: list[tuple[int, str]], bad_timestamp: bool):
        raise_record_errors(errors, bad_timestamp)


def raise_record_errors(errors: list[tuple[int, str]], bad_timestamp: bool):
    """Kafka's processRecordErrors: INVALID_TIMESTAMP if any record's timestamp was refused,
    else INVALID_RECORD, with the (record index, message) of each refused record."""
    listed = [(i, m if n < MAX_MESSAGES_IN_RECORD_ERRORS else None) for n, (i, m) in enumerate(errors)]
    if bad_timestamp:  # as Kafka's processRecordErrors
        raise RecordValidationError(ErrorCode.INVALID_TIMESTAMP,
                                    "One or more records have been rejected due to invalid timestamp", listed)
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    raise RecordValidationError(ErrorCode.INVALID_RECORD,
                                f"One or more records have been rejected due to {len(errors)} record errors in "
                                f"total, and only showing the first three errors at most: [{shown}]", listed)


def _with_max_timestamp(raw, max_ts: int) -> bytearray:
    out = bytearray(raw)
    _Q.pack_into(out, MAX_TIMESTAMP_OFFSET, max_ts)
    _CRC.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return out


def _rebuild(h: BatchHeader, data: bytes, codec: int, max_ts: int, offsets_in_order: bool) -> bytearray:
    """The batch ``h`` with records section ``data`` (decompressed) re-encoded with ``codec``;
    inner offsets renumbered 0..n-1 unless they already are (Kafka's rebuild of such batches)."""
    data = bytes(data)  # (no copy when it is bytes already)
    if not offsets_in_order:
        base = h.base_timestamp
        data = b"".join(encode_record(i, r.timestamp - base, r.key, r.value, r.headers)
                        for i, r in enumerate(section_records(h, data)))
    attributes = (h.attributes & ~COMPRESSION_MASK) | codec
    return assemble_batch(h.base_offset, h.partition_leader_epoch, attributes, h.last_offset_delta,
                          h.base_timestamp, max_ts, h.producer_id, h.producer_epoch, h.base_sequence,
                          h.records_count, compress_records(codec, data))
