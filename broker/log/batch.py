"""Kafka v2 record batches: header parsing, produce validation and in-place offset assignment.

The v2 RecordBatch (magic 2), all integers big-endian::

    offset  size  field
    0       8     baseOffset             first offset of the batch (assigned by the leader)
    8       4     batchLength            bytes after this field (batch size = batchLength + 12)
    12      4     partitionLeaderEpoch   set by the leader
    16      1     magic                  2
    17      4     crc                    CRC32C (Castagnoli) of bytes [21, end): attributes..records
    21      2     attributes             bits 0-2 compression (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)
                                         bit 3 timestamp type (0 CreateTime, 1 LogAppendTime)
                                         bit 4 transactional, bit 5 control, bit 6 delete horizon
    23      4     lastOffsetDelta        lastOffset - baseOffset
    27      8     baseTimestamp
    35      8     maxTimestamp
    43      8     producerId             -1 when none
    51      2     producerEpoch
    53      4     baseSequence           -1 when none
    57      4     recordsCount
    61      ...   records                (compressed as a whole when the codec is not 0)

    record (inside the records section, after decompression):
        length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
        keyLength varint, key, valueLength varint, value, headerCount varint, headers

The CRC does not cover baseOffset, batchLength, partitionLeaderEpoch and magic, which is
what lets the leader assign offsets by patching bytes without touching the CRC.
Varints are zig-zag encoded (protobuf style).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from crc32c import crc32c

from common.errors import ErrorCode, KafkaError

from .record_walk import (  # noqa: F401 (MIN_RECORD_*, RecordScan, scan_records, timestamp_deltas: re-exported)
    MIN_RECORD_BODY,
    MIN_RECORD_SIZE,
    RecordScan,
    check_records_count,
    read_varint,
    read_varlong,
    scan_records,
    timestamp_deltas,
)

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # batchLength of a batch with no records
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qiib")  # baseOffset, batchLength, partitionLeaderEpoch, magic
_Q = struct.Struct(">q")
_I = struct.Struct(">i")
_H = struct.Struct(">h")
_CRC = struct.Struct(">I")
assert _HEADER.size == HEADER_SIZE


@dataclass(slots=True)
class BatchHeader:
    """The fixed 61-byte header of one batch that starts at ``pos`` in some buffer or file."""

    pos: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """0 CreateTime, 1 LogAppendTime."""
        return (self.attributes & TIMESTAMP_TYPE_BIT) >> 3

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record, wrapping at int32 like Kafka."""
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def unpack_header(buf, pos: int) -> BatchHeader:
    """Parse the header at ``pos``; the caller guarantees ``HEADER_SIZE`` bytes are there."""
    return BatchHeader(pos, *_HEADER.unpack_from(buf, pos))


def parse_batches(buf, base: int = 0) -> list[BatchHeader]:
    """Headers of the whole batches in ``buf`` (framing only, no CRC check).

    A trailing partial batch (as in a fetch response cut at max_bytes) is ignored.
    ``base`` is added to each ``pos`` (for buffers read from a file position).
    """
    out: list[BatchHeader] = []
    n = len(buf)
    pos = 0
    unpack = _HEADER.unpack_from
    while pos + HEADER_SIZE <= n:
        fields = unpack(buf, pos)
        size = fields[1] + LOG_OVERHEAD
        if fields[1] < MIN_BATCH_LENGTH or pos + size > n:
            break
        out.append(BatchHeader(pos + base, *fields))
        pos += size
    return out


def validate_produce_batches(buf, max_message_bytes: int, *, allow_control: bool = False,
                             produce_version: int | None = None) -> list[BatchHeader]:
    """Validate the record batches of one partition in a produce request, without decoding records.

    Checks framing, magic, CRC32C, offset range vs record count, sizes, codec and (unless
    ``allow_control``, for the transaction coordinator's markers) that no batch is a
    control batch. With ``produce_version`` also Kafka's ProduceRequest rules: exactly one
    batch per partition, zstd only from v7. Returns the headers; raises ``KafkaError``
    with the code a Kafka broker sends (InvalidRecordException -> INVALID_RECORD,
    CorruptRecordException -> CORRUPT_MESSAGE).
    """
    mv = memoryview(buf)
    n = len(mv)
    out: list[BatchHeader] = []
    pos = 0
    unpack = _HEADER.unpack_from
    while pos < n or not out:
        if pos + LOG_OVERHEAD > n:
            raise _truncated(pos, n, out)
        (batch_length,) = _I.unpack_from(mv, pos + 8)
        if pos + MAGIC_OFFSET < n and mv[pos + MAGIC_OFFSET] != 2:
            magic = mv[pos + MAGIC_OFFSET]
            if magic > 2:  # Kafka's batch iterator: CorruptRecordException; v0/v1: InvalidRecordException
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"invalid record batch magic {magic}")
            raise KafkaError(ErrorCode.INVALID_RECORD,
                             f"record batch magic {magic} is not supported: produce requests may "
                             "only contain record batches with magic version 2")
        if batch_length < MIN_BATCH_LENGTH:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"record batch length {batch_length} is below the minimum")
        size = batch_length + LOG_OVERHEAD
        end = pos + size
        if end > n:
            raise _truncated(pos, n, out)
        if out and produce_version is not None:
            raise KafkaError(ErrorCode.INVALID_RECORD, f"produce requests with version {produce_version} are only "
                             "allowed to contain exactly one record batch per partition")
        fields = unpack(mv, pos)
        if size > max_message_bytes:
            raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE,
                             f"record batch of {size} bytes exceeds max.message.bytes={max_message_bytes}")
        if crc32c(mv[pos + ATTRIBUTES_OFFSET:end]) != fields[4]:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"record batch at byte {pos} fails its CRC32C check")
        attributes = fields[5]
        codec = attributes & COMPRESSION_MASK
        if codec > 4 or (codec == 4 and produce_version is not None and produce_version < 7):
            raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                             f"compression codec {codec} is not supported"
                             + (f" by produce version {produce_version}" if codec == 4 else ""))
        last_offset_delta = fields[6]
        count = fields[12]
        # Kafka (LogValidator.validateBatch) answers these with InvalidRecordException.
        if last_offset_delta < 0 or count <= 0 or count != last_offset_delta + 1:
            raise KafkaError(ErrorCode.INVALID_RECORD,
                             f"record batch has {count} records but lastOffsetDelta {last_offset_delta}")
        if attributes & CONTROL_BIT and not allow_control:
            raise KafkaError(ErrorCode.INVALID_RECORD, "clients are not allowed to write control records")
        if fields[9] >= 0 and fields[11] < 0:
            raise KafkaError(ErrorCode.INVALID_RECORD,
                             f"batch with producer id {fields[9]} has invalid sequence {fields[11]}")
        out.append(BatchHeader(pos, *fields))
        pos = end
    return out


def _truncated(pos: int, n: int, out: list[BatchHeader]) -> KafkaError:
    if not out:  # Kafka's batch iterator sees no whole batch at all
        return KafkaError(ErrorCode.INVALID_RECORD, "produce request must have at least one whole record batch "
                          "per partition")
    return KafkaError(ErrorCode.CORRUPT_MESSAGE, f"truncated record batch at byte {pos} of {n}")


def assign_offsets(buf: bytearray, headers: list[BatchHeader], first_offset: int, leader_epoch: int,
                   log_append_time_ms: int | None) -> None:
    """Give the batches consecutive offsets from ``first_offset`` by patching their headers.

    baseOffset and partitionLeaderEpoch are outside the CRC. With LogAppendTime the
    timestamp-type bit and maxTimestamp are set too, which does change the CRC, so it is
    recomputed (one CRC32C pass over the batch: the only per-byte work besides the write).
    """
    offset = first_offset
    pack_i = _I.pack_into
    for h in headers:
        pos = h.pos
        _Q.pack_into(buf, pos, offset)
        pack_i(buf, pos + 12, leader_epoch)
        h.base_offset = offset
        h.partition_leader_epoch = leader_epoch
        if log_append_time_ms is not None:
            h.attributes |= TIMESTAMP_TYPE_BIT
            h.max_timestamp = log_append_time_ms
            _H.pack_into(buf, pos + ATTRIBUTES_OFFSET, h.attributes)
            _Q.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, log_append_time_ms)
            h.crc = crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET:pos + h.size])
            _CRC.pack_into(buf, pos + CRC_OFFSET, h.crc)
        offset += h.last_offset_delta + 1


def batch_crc_ok(buf, h: BatchHeader, base: int = 0) -> bool:
    """CRC32C check of a batch whose header was parsed from ``buf`` (``h.pos - base`` is its index)."""
    start = h.pos - base
    return crc32c(memoryview(buf)[start + ATTRIBUTES_OFFSET:start + h.size]) == h.crc


# --- record-level decoding ------------------------------------------------------------------
#
# Everything below works on bytes a client or the disk supplied, so every loop and allocation is
# bounded by the batch's own sizes: a records section decompresses to at most ``limit`` bytes
# (streaming, stopping at the bound), a batch claims at most one record per MIN_RECORD_SIZE bytes
# of it, each record's length is at least its minimum and stays inside the section, each field
# inside its record. A batch that breaks a bound raises KafkaError: CORRUPT_MESSAGE when the
# compressed data is bad or too large, INVALID_RECORD when the record framing is (Kafka's
# DefaultRecord.readFrom raises InvalidRecordException for those). The work is still linear in
# the section's size: callers on the event loop run it in a thread (see validator.py).

# A records section may decompress to at most DECOMPRESSION_FACTOR x max.message.bytes (or x its
# default when set lower, so batches written before it was lowered still decode). librdkafka caps a
# batch at ~1 MB uncompressed (batch.size); Java producers close a batch at batch.size of estimated
# compressed bytes, so their batches exceed the compressed size by the compression ratio. 32 x 1 MiB
# keeps every realistic batch and bounds what one produce request can make a broker hold.
DECOMPRESSION_FACTOR = 32
DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024 + 12
_MAX_ZSTD_WINDOW = 1 << 25  # zstd window memory bound (producers use <= 8 MiB windows)


def records_limit(max_message_bytes: int) -> int:
    """Most bytes the records section of one batch may decompress to, for a log whose
    max.message.bytes is ``max_message_bytes``."""
    return DECOMPRESSION_FACTOR * max(max_message_bytes, DEFAULT_MAX_MESSAGE_BYTES)


DEFAULT_RECORDS_LIMIT = records_limit(DEFAULT_MAX_MESSAGE_BYTES)


def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_RECORD, message)


def _corrupt(message: str) -> KafkaError:
    return KafkaError(ErrorCode.CORRUPT_MESSAGE, message)


def decompress_records(codec: int, data, limit: int = DEFAULT_RECORDS_LIMIT) -> bytes:
    """The records section of a batch decompressed (codec as in the attributes), at most
    ``limit`` bytes: decompression stops at the bound and raises CORRUPT_MESSAGE."""
    if codec == 0:
        if len(data) > limit:
            raise _corrupt(f"records section of {len(data)} bytes exceeds the limit of {limit}")
        return bytes(data)
    try:
        if codec == 1:
            return _gunzip(data, limit)
        if codec == 2:
            return _snappy_decompress(bytes(data), limit)
        if codec == 3:
            return _lz4_decompress(data, limit)
        if codec == 4:
            return _zstd_decompress(bytes(data), limit)
    except KafkaError:
        raise
    except Exception as e:  # each codec library has its own error types
        raise _corrupt(f"cannot decompress the records ({_CODEC_NAMES[codec]}): {e}") from e
    raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {codec}")


_CODEC_NAMES = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def _too_large(codec: int, limit: int) -> KafkaError:
    return _corrupt(f"records decompress ({_CODEC_NAMES[codec]}) to more than {limit} bytes")


def _gunzip(data, limit: int) -> bytes:
    import zlib
    out: list[bytes] = []
    total = 0
    pending = bytes(data)
    while True:  # concatenated gzip members are one stream (as java.util.zip.GZIPInputStream reads them)
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        while True:
            chunk = d.decompress(pending, limit - total + 1)
            total += len(chunk)
            out.append(chunk)
            if total > limit:
                raise _too_large(1, limit)
            pending = d.unconsumed_tail
            if d.eof or not pending:
                break
        if not d.eof:
            raise _corrupt("truncated gzip stream")
        pending = d.unused_data
        if not pending:
            return b"".join(out)


_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def _snappy_block(block, limit: int) -> bytes:
    import cramjam
    n = cramjam.snappy.decompress_raw_len(block)  # the block's own uncompressed-length preamble
    if n > limit:
        raise _too_large(2, limit)
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(data: bytes, limit: int) -> bytes:
    # Java clients use snappy-java's xerial framing: magic(8) version(4) compat(4), then
    # chunks of [length int32][raw snappy block]. librdkafka writes either form.
    if not data.startswith(_XERIAL_MAGIC):
        return _snappy_block(data, limit)
    out = bytearray()
    pos = 16
    n = len(data)
    while pos < n:
        if pos + 4 > n:
            raise _corrupt("truncated xerial snappy chunk header")
        (size,) = _I.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > n:
            raise _corrupt(f"xerial snappy chunk of {size} bytes at byte {pos - 4} runs past the end ({n})")
        out += _snappy_block(data[pos:pos + size], limit - len(out))
        pos += size
    return bytes(out)


def _lz4_decompress(data, limit: int) -> bytes:
    import lz4.frame
    out: list[bytes] = []
    total = 0
    pending = bytes(data)
    while pending:  # one frame from every client; concatenated frames are read on, as lz4 streams are
        d = lz4.frame.LZ4FrameDecompressor()
        chunk = d.decompress(pending, max_length=limit - total + 1)
        while True:
            total += len(chunk)
            out.append(chunk)
            if total > limit:
                raise _too_large(3, limit)
            if d.eof or d.needs_input:
                break
            chunk = d.decompress(b"", max_length=limit - total + 1)
        if not d.eof:
            raise _corrupt("truncated lz4 frame")
        pending = d.unused_data
    return b"".join(out)


def _zstd_decompress(data: bytes, limit: int) -> bytes:
    import zstandard
    size = zstandard.get_frame_parameters(data).content_size
    if size != zstandard.CONTENTSIZE_UNKNOWN and size > limit:  # the library would allocate it at once
        raise _too_large(4, limit)
    dctx = zstandard.ZstdDecompressor(max_window_size=_MAX_ZSTD_WINDOW)
    try:
        # One shot, into a buffer of at most ``limit`` bytes: decoding stops at the bound.
        return dctx.decompress(data, max_output_size=limit)
    except zstandard.ZstdError as e:
        # Too large, truncated or corrupt: tell which, reading at most limit + 1 bytes again.
        reader = dctx.stream_reader(data)
        total = 0
        while total <= limit:
            chunk = reader.read(min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            total += len(chunk)
        if total > limit:
            raise _too_large(4, limit) from None
        raise _corrupt(f"cannot decompress the records (zstd): {e}") from None


def records_section(batch, limit: int = DEFAULT_RECORDS_LIMIT) -> tuple[BatchHeader, bytes]:
    """Header and (decompressed, at most ``limit`` bytes) records section of one whole batch
    that starts at offset 0 of ``batch``, after the O(1) bound on its record count."""
    if len(batch) < HEADER_SIZE:
        raise _corrupt(f"record batch of {len(batch)} bytes is shorter than its header")
    h = unpack_header(batch, 0)
    if h.size > len(batch) or h.batch_length < MIN_BATCH_LENGTH:
        raise _corrupt(f"record batch length {h.batch_length} does not match the {len(batch)} bytes read")
    raw = memoryview(batch)[HEADER_SIZE:h.size]
    if h.compression == 0:
        check_records_count(h.records_count, len(raw))
        return h, bytes(raw)
    check_records_count(h.records_count, limit)
    data = decompress_records(h.compression, raw, limit)
    check_records_count(h.records_count, len(data))
    return h, data


@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def _records_end(pos: int, end: int, read: int, count: int) -> None:
    if pos != end:
        raise _invalid(f"Incorrect declared batch size, records still remaining after {read} of {count} "
                       f"records ({end - pos} bytes left)")


def iter_records(batch, limit: int = DEFAULT_RECORDS_LIMIT) -> Iterator[Record]:
    """Decode the records of one whole batch (``batch`` starts at its baseOffset), one at a
    time; raises KafkaError (INVALID_RECORD / CORRUPT_MESSAGE) where a bound is broken."""
    h, data = records_section(batch, limit)
    return section_records(h, data)


def section_records(h: BatchHeader, data: bytes) -> Iterator[Record]:
    """The records of the (decompressed) records section ``data`` of the batch ``h``."""
    log_append = h.timestamp_type == 1
    count = h.records_count
    end = len(data)
    pos = 0
    for i in range(count):
        try:
            length, pos = read_varint(data, pos)
            rend = pos + length
            if length < MIN_RECORD_BODY or rend > end:
                raise _invalid(f"record {i} of {count} has length {length} with {end - pos} bytes left")
            p = pos + 1  # attributes (unused in v2)
            ts_delta, p = read_varlong(data, p)
            off_delta, p = read_varint(data, p)
            klen, p = read_varint(data, p)
            key = None if klen < 0 else bytes(data[p:p + klen])
            p += max(klen, 0)
            vlen, p = read_varint(data, p)
            value = None if vlen < 0 else bytes(data[p:p + vlen])
            p += max(vlen, 0)
            nh, p = read_varint(data, p)
            if nh < 0 or nh > rend - p:
                raise _invalid(f"record {i} has an invalid number of headers {nh}")
            headers = []
            for _j in range(nh):
                hk, p = read_varint(data, p)
                if hk < 0:
                    raise _invalid(f"record {i} has a negative header key size {hk}")
                name = bytes(data[p:p + hk]).decode("utf-8", "replace")
                p += hk
                hv, p = read_varint(data, p)
                hval = None if hv < 0 else bytes(data[p:p + hv])
                p += max(hv, 0)
                headers.append((name, hval))
        except IndexError:
            raise _invalid(f"record {i} of {count} runs past the end of the records section") from None
        if p != rend:
            raise _invalid(f"Invalid record size: expected to read {length} bytes in record {i}, "
                           f"but instead read {p - pos}")
        ts = h.max_timestamp if log_append else h.base_timestamp + ts_delta
        yield Record(h.base_offset + off_delta, ts, key, value, headers)
        pos = rend
    _records_end(pos, end, count, count)


def decode_records(batch, limit: int = DEFAULT_RECORDS_LIMIT) -> list[Record]:
    """Every record of one whole batch (bounded as ``iter_records``)."""
    return list(iter_records(batch, limit))


def iter_record_timestamps(batch, limit: int = DEFAULT_RECORDS_LIMIT) -> Iterator[tuple[int, int]]:
    """(offset, timestamp) of each record of one whole batch, skipping keys and values."""
    if len(batch) >= HEADER_SIZE and unpack_header(batch, 0).timestamp_type == 1:
        h = unpack_header(batch, 0)  # LogAppendTime: every record has the batch's time
        check_records_count(h.records_count, h.size - HEADER_SIZE if h.compression == 0 else limit)
        for i in range(h.records_count):
            yield h.base_offset + i, h.max_timestamp
        return
    h, data = records_section(batch, limit)
    for off_delta, ts_delta in _scan_offsets_and_timestamps(data, h.records_count):
        yield h.base_offset + off_delta, h.base_timestamp + ts_delta


def record_timestamps(batch, limit: int = DEFAULT_RECORDS_LIMIT) -> list[tuple[int, int]]:
    return list(iter_record_timestamps(batch, limit))


def _scan_offsets_and_timestamps(data: bytes, count: int) -> Iterator[tuple[int, int]]:
    """(offsetDelta, timestampDelta) of each record, checking only the record framing."""
    end = len(data)
    pos = 0
    for i in range(count):
        try:
            length, pos = read_varint(data, pos)
            rend = pos + length
            if length < MIN_RECORD_BODY or rend > end:
                raise _invalid(f"record {i} of {count} has length {length} with {end - pos} bytes left")
            ts_delta, p = read_varlong(data, pos + 1)
            off_delta, p = read_varint(data, p)
        except IndexError:
            raise _invalid(f"record {i} of {count} runs past the end of the records section") from None
        if p > rend:
            raise _invalid(f"record {i} of {count} is shorter than its fields")
        yield off_delta, ts_delta
        pos = rend
    _records_end(pos, end, count, count)


# --- encoding (log cleaner, internal topics, tests; not the produce path) ----------------

def _zigzag_varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if not z:
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


def _varbytes(b: bytes | None) -> bytes:
    return _zigzag_varint(-1) if b is None else _zigzag_varint(len(b)) + b


def encode_record(offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
                  headers: list[tuple[str, bytes | None]] | tuple = ()) -> bytes:
    body = bytearray(b"\x00")
    body += _zigzag_varint(timestamp_delta)
    body += _zigzag_varint(offset_delta)
    body += _varbytes(key)
    body += _varbytes(value)
    body += _zigzag_varint(len(headers))
    for name, hv in headers:
        body += _varbytes(name.encode("utf-8"))
        body += _varbytes(hv)
    return _zigzag_varint(len(body)) + bytes(body)


def compress_records(codec: int, data: bytes) -> bytes:
    """Compress a records section the way the Java client does (so every client can read it)."""
    if codec == 0:
        return data
    if codec == 1:
        import gzip
        return gzip.compress(data)
    if codec == 2:
        import cramjam
        out = bytearray(_XERIAL_MAGIC + struct.pack(">ii", 1, 1))
        for i in range(0, len(data), 32 * 1024):
            block = bytes(cramjam.snappy.compress_raw(data[i:i + 32 * 1024]))
            out += struct.pack(">i", len(block)) + block
        return bytes(out)
    if codec == 3:
        import lz4.frame
        # Kafka's LZ4 stream: independent 64 KiB blocks, no content size, no content checksum.
        return lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
                                  content_checksum=False, store_size=False)
    if codec == 4:
        import zstandard
        return zstandard.ZstdCompressor().compress(data)
    raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {codec}")


def build_batch(records: list[Record], *, base_offset: int | None = None, last_offset_delta: int | None = None,
                compression: int = 0, timestamp_type: int = 0, producer_id: int = NO_PRODUCER_ID,
                producer_epoch: int = -1, base_sequence: int = NO_SEQUENCE, transactional: bool = False,
                control: bool = False, partition_leader_epoch: int = -1, base_timestamp: int | None = None,
                max_timestamp: int | None = None, delete_horizon: bool = False) -> bytearray:
    """Encode a v2 batch. Record offsets are absolute (gaps allowed, as after compaction);
    ``base_offset`` defaults to the first record's. With LogAppendTime pass the append
    time as ``max_timestamp``. ``delete_horizon`` (KIP-534): ``base_timestamp`` is the time
    after which the log cleaner may remove the batch's tombstones or marker."""
    if not records and (base_offset is None or last_offset_delta is None):
        raise ValueError("an empty batch needs base_offset and last_offset_delta")
    base = records[0].offset if base_offset is None else base_offset
    base_ts = (records[0].timestamp if records else NO_TIMESTAMP) if base_timestamp is None else base_timestamp
    body = b"".join(encode_record(r.offset - base, r.timestamp - base_ts, r.key, r.value, r.headers)
                    for r in records)
    body = compress_records(compression, body)
    lod = (records[-1].offset - base) if last_offset_delta is None else last_offset_delta
    max_ts = max((r.timestamp for r in records), default=base_ts) if max_timestamp is None else max_timestamp
    attributes = (compression | (TIMESTAMP_TYPE_BIT if timestamp_type else 0)
                  | (TRANSACTIONAL_BIT if transactional else 0) | (CONTROL_BIT if control else 0)
                  | (DELETE_HORIZON_BIT if delete_horizon else 0))
    return assemble_batch(base, partition_leader_epoch, attributes, lod, base_ts, max_ts, producer_id,
                          producer_epoch, base_sequence, len(records), body)


def assemble_batch(base_offset: int, partition_leader_epoch: int, attributes: int, last_offset_delta: int,
                   base_timestamp: int, max_timestamp: int, producer_id: int, producer_epoch: int,
                   base_sequence: int, records_count: int, records: bytes) -> bytearray:
    """A v2 batch from its header fields and its (already compressed) records section."""
    after_crc = struct.pack(">hiqqqhii", attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id,
                            producer_epoch, base_sequence, records_count) + records
    batch_length = 4 + 1 + 4 + len(after_crc)
    out = bytearray(struct.pack(">qiibI", base_offset, batch_length, partition_leader_epoch, 2, crc32c(after_crc)))
    out += after_crc
    return out


# --- control batches: transaction markers ------------------------------------------------
#
# A COMMIT or ABORT marker is a control batch (transactional and control bits set, base
# sequence -1, never compressed by Kafka) of the producer, holding one record:
#
#     key    version int16 (0) | type int16 (0 ABORT, 1 COMMIT)      (Kafka's ControlRecordType)
#     value  version int16 (0) | coordinatorEpoch int32             (Kafka's EndTransactionMarker)

CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_MARKER_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")


@dataclass(frozen=True, slots=True)
class EndTxnMarker:
    commit: bool
    coordinator_epoch: int
    timestamp: int = NO_TIMESTAMP


def build_end_txn_marker(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                         timestamp: int) -> bytearray:
    """The control batch of a COMMIT/ABORT marker (Kafka's MemoryRecords.withEndTransactionMarker)."""
    key = _MARKER_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _MARKER_VALUE.pack(0, coordinator_epoch)
    return build_batch([Record(0, timestamp, key, value, [])], base_offset=0, producer_id=producer_id,
                       producer_epoch=producer_epoch, base_sequence=NO_SEQUENCE, transactional=True, control=True)


def read_end_txn_marker(batch, limit: int = DEFAULT_RECORDS_LIMIT) -> EndTxnMarker | None:
    """The marker of a control batch (``batch``: the whole batch), or None for an empty control
    batch (the cleaner emptied it) or a control record that is not a transaction marker (KRaft's
    control types). Raises KafkaError when the batch does not decode or the marker is malformed."""
    for r in iter_records(batch, limit):
        if r.key is None or len(r.key) < _MARKER_KEY.size:
            raise _invalid("control record without a valid key")
        version, kind = _MARKER_KEY.unpack_from(r.key, 0)
        if version < 0:
            raise _invalid(f"control record key version {version}")
        if kind not in (CONTROL_ABORT, CONTROL_COMMIT):
            return None
        if r.value is None or len(r.value) < _MARKER_VALUE.size:
            raise _invalid("end transaction marker without a valid value")
        _v, coordinator_epoch = _MARKER_VALUE.unpack_from(r.value, 0)
        return EndTxnMarker(kind == CONTROL_COMMIT, coordinator_epoch, r.timestamp)
    return None
