"""The message formats before v2 (magic 0 and 1): what Produce v0-2 may carry, converted to one
v2 batch on append, and what Fetch v0-3 gets, converted down from the v2 batches on disk (the log
only ever holds v2, as Kafka 3.x's with its message format 3.0). Nothing here runs for a v2
client: Produce v3+ and Fetch v4+ never come here.

A message set is a sequence of entries with no count in front (seed 004, "Message sets")::

    offset  int64      the producer may put anything; in a compressed v1 wrapper the offset of
                       its last inner message (the broker sets it when it writes)
    size    int32      bytes of the message that follows
    message:
      crc        uint32   CRC32 (IEEE, zlib's) of magic .. end of value
      magic      int8     0 or 1
      attributes int8     bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4), bit 3 (magic 1) the
                          timestamp type: 0 CreateTime, 1 LogAppendTime
      timestamp  int64    magic 1 only, ms since the epoch (-1: none)
      key        int32 length (-1: null) + bytes
      value      int32 length (-1: null) + bytes

A compressed message ("wrapper") has no key and holds in its value a whole message set,
compressed with its codec, of uncompressed messages of the same magic (KAFKA-1718: one wrapper
per set). Magic 0 inner messages carry absolute offsets; magic 1 inner offsets are relative
(0, 1, 2, ...) and the wrapper's offset is that of the last one, so inner offset i is
``wrapper offset - last relative offset + i``. A magic 1 wrapper with LogAppendTime gives its
timestamp to every inner message. Magic 0 lz4 wrappers use the framing of Kafka 0.8's
KafkaLZ4BlockOutputStream, whose frame header checksum is computed over the wrong bytes (the
4-byte frame magic too): Kafka ignores that checksum when it reads magic 0 and writes the same
wrong one when it writes magic 0, and so does this module.

Produce (Kafka 3.x's ByteBufferLogInputStream, UnifiedLog.analyzeAndValidateRecords and
LogValidator, with its error codes): an entry shorter than the minimum message (14 bytes) or of
another magic than 0-2 is CORRUPT_MESSAGE; a trailing entry that is cut off is dropped (the
whole ones before it are appended) and a set with no whole entry at all is INVALID_RECORD (Kafka
3.x would answer NONE with offset -1: nothing appended, but the producer told it worked); an
entry larger than max.message.bytes is MESSAGE_TOO_LARGE; a CRC mismatch, of an entry or of any
message inside a wrapper, is CORRUPT_MESSAGE; entries of different magics, a compressed wrapper
that is not alone, an empty or null wrapper, an inner message that is compressed itself or of
another magic, a v1 wrapper offset below its last inner offset (and not 0, as some librdkafka
versions send), and a producer claiming LogAppendTime where Kafka refuses it are INVALID_RECORD
or INVALID_TIMESTAMP. A wrapper decompresses to at most ``records_limit(max.message.bytes)``.
The v2 batch made of the messages is then validated like any other (timestamps, keys of
compacted topics, the topic's compression.type, max.message.bytes of the result).

Fetch (Kafka's RecordsUtil.downConvert / LazyDownConversionRecords): Fetch v0-1 gets magic 0,
v2-3 magic 1. An uncompressed v2 batch becomes one message per record, from the fetch offset on;
a compressed one a wrapper of the same codec with every record (the consumer skips those before
its offset). Headers are dropped, control batches (transaction markers) skipped; aborted
transactional records are kept, as a Fetch before v4 reads uncommitted. Zstd has no legacy form:
UNSUPPORTED_COMPRESSION_TYPE if it is the first batch to convert, else the response stops before
it (the consumer's next fetch gets the error). Memory is bounded: at most ``max_bytes`` of
converted messages, and at least the first converted batch (a wrapper) or message, as Kafka
sizes its response.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import NamedTuple

from common.errors import ErrorCode, KafkaError

from . import fileio as fio
from .batch import (
    COMPRESSION_MASK,
    HEADER_SIZE,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_BIT,
    assemble_batch,
    compress_records,
    decompress_records,
    encode_record,
    parse_batches,
    records_limit,
    section_records,
)
from .validator import CODECS, in_pool, raise_record_errors

LOG_OVERHEAD = 12  # offset + size
MAGIC_OFFSET = 16  # of the magic byte from the start of an entry (v0/v1 messages and v2 batches alike)
RECORD_OVERHEAD_V0 = 14  # crc, magic, attributes, key length, value length
RECORD_OVERHEAD_V1 = 22  # + timestamp
LEGACY_CODECS = (0, 1, 2, 3)

_ENTRY = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_Q = struct.Struct(">q")
_I = struct.Struct(">i")


def is_legacy(records) -> bool:
    """Whether a partition's produce data starts with a magic 0/1 message (one byte read)."""
    return len(records) > MAGIC_OFFSET and records[MAGIC_OFFSET] < 2


def _corrupt(msg: str) -> KafkaError:
    return KafkaError(ErrorCode.CORRUPT_MESSAGE, msg)


def _invalid(msg: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_RECORD, msg)


class Message(NamedTuple):
    """One magic 0/1 message; key and value are views into the set it came from."""

    offset: int
    magic: int
    attributes: int
    timestamp: int  # -1 for magic 0
    key: memoryview | None
    value: memoryview | None

    @property
    def codec(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def log_append_time(self) -> bool:
        return self.magic > 0 and bool(self.attributes & TIMESTAMP_TYPE_BIT)


def _message(mv: memoryview, pos: int, size: int, tp: str) -> Message:
    """The message of the entry at ``pos`` whose size field says ``size``; CRC checked."""
    end = pos + LOG_OVERHEAD + size
    offset, _size, crc, magic, attributes = _ENTRY.unpack_from(mv, pos)
    if zlib.crc32(mv[pos + LOG_OVERHEAD + 4:end]) != crc:
        raise _corrupt(f"Record is corrupt (stored crc = {crc}) in topic partition {tp}.")
    p = pos + LOG_OVERHEAD + 6
    timestamp = NO_TIMESTAMP
    if magic == 1:
        if size < RECORD_OVERHEAD_V1:
            raise _corrupt(f"magic 1 message of {size} bytes is shorter than its fields ({RECORD_OVERHEAD_V1})")
        (timestamp,) = _Q.unpack_from(mv, p)
        p += 8
    key, p = _sized(mv, p, end, "key")
    value, p = _sized(mv, p, end, "value")
    return Message(offset, magic, attributes, timestamp, key, value)


def _sized(mv: memoryview, p: int, end: int, what: str) -> tuple[memoryview | None, int]:
    if p + 4 > end:
        raise _corrupt(f"message {what} length runs past the end of the message")
    (n,) = _I.unpack_from(mv, p)
    p += 4
    if n < 0:
        return None, p
    if p + n > end:
        raise _corrupt(f"message {what} of {n} bytes runs past the end of the message")
    return mv[p:p + n], p + n


def _entries(mv: memoryview, tp: str, max_message_bytes: int | None) -> Iterator[Message]:
    """The whole entries of a message set one by one (a cut-off last one is dropped), each
    CRC-checked; nothing is kept, so a set of a million messages costs no more memory than one.
    ``max_message_bytes``: the shallow set of a produce, whose entries must all have one magic
    and be at most that large; None: the set inside a wrapper (Kafka reads it with no size bound:
    the decompression bound holds; each message's magic is checked against the wrapper's)."""
    n = len(mv)
    pos = 0
    first_magic = -1
    while n - pos >= LOG_OVERHEAD:
        (size,) = _I.unpack_from(mv, pos + 8)
        if size < RECORD_OVERHEAD_V0:
            raise _corrupt(f"Record size {size} is less than the minimum record overhead ({RECORD_OVERHEAD_V0})")
        if n - pos <= MAGIC_OFFSET:
            return
        magic = mv[pos + MAGIC_OFFSET]
        if magic > 2:  # (a signed byte: negative ones are > 127 here)
            raise _corrupt(f"Invalid magic found in record: {magic - 256 if magic > 127 else magic}")
        if n - pos < LOG_OVERHEAD + size:
            return  # cut off: Kafka trims it (UnifiedLog.trimInvalidBytes)
        if max_message_bytes is not None:
            if first_magic < 0:
                first_magic = magic
            elif magic != first_magic:
                raise _invalid(f"Batch magic {magic} is not the same as the first batch's magic byte {first_magic} "
                               f"in topic partition {tp}")
        if magic == 2:
            raise _invalid("a record batch of magic 2 in a set of magic 0/1 messages")
        if max_message_bytes is not None and size + LOG_OVERHEAD > max_message_bytes:
            raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE,
                             f"The record batch size in the append to {tp} is {size + LOG_OVERHEAD} bytes which "
                             f"exceeds the maximum configured value of {max_message_bytes}.")
        yield _message(mv, pos, size, tp)
        pos += LOG_OVERHEAD + size


# --- produce: magic 0/1 message sets to one v2 batch ---------------------------------------

INLINE_MAX_BYTES = 256 * 1024  # uncompressed sets up to this size are converted on the event loop


async def to_v2_async(records, config, tp: str) -> bytearray:
    """``to_v2`` on the event loop for a small uncompressed set, else in the validation pool (a
    compressed wrapper may hold ~32 x max.message.bytes of messages, a million small ones)."""
    if len(records) <= INLINE_MAX_BYTES and not (len(records) > MAGIC_OFFSET + 1
                                                  and records[MAGIC_OFFSET + 1] & COMPRESSION_MASK):
        return to_v2(records, config, tp)
    return await in_pool(to_v2, records, config, tp)


def to_v2(records, config, tp: str) -> bytearray:
    """The v2 batch (base offset 0, no producer id) holding the messages of the magic 0/1
    message set ``records``, compressed as the topic's compression.type says ("producer": the
    wrapper's codec). Raises KafkaError / RecordValidationError as Kafka's append would.
    Streams: each message is encoded as a v2 record as it is read; the records section is
    bounded (max.message.bytes uncompressed, ``records_limit`` before compression)."""
    mv = memoryview(records)
    log_append_time = config.log_append_time
    limit = records_limit(config.max_message_bytes)
    target = CODECS.get(config.compression_type)
    body = bytearray()
    stamps = _Stamps()
    count = 0
    entries = 0
    source_codec = 0
    for wrapper in _entries(mv, tp, config.max_message_bytes):
        if source_codec or (wrapper.codec and entries):
            raise _invalid("Compressed outer record has more than one batch")
        entries += 1
        if wrapper.codec == 0:
            inner: Iterator[Message] = iter((wrapper,))
        else:
            source_codec = wrapper.codec
            inner = _entries(memoryview(_wrapped_set(wrapper, limit)), tp, None)
        body_limit = (config.max_message_bytes - HEADER_SIZE if (source_codec if target is None else target) == 0
                      else limit)
        errors: list[tuple[int, str]] = []
        bad_timestamp = False
        i = -1
        last_offset = 0
        for i, m in enumerate(inner):  # noqa: B007 (i is the count after the loop)
            last_offset = m.offset
            if m.magic != wrapper.magic:
                errors.append((i, f"Record's magic {m.magic} does not match outer magic {wrapper.magic} in topic "
                                  f"partition {tp}"))
                continue
            if wrapper.codec and m.codec:
                errors.append((i, "Compressed outer record should not have an inner record with a compression "
                                  "attribute set"))
                continue
            ts = wrapper.timestamp if (wrapper.codec and wrapper.log_append_time) else m.timestamp
            # Kafka's validateTimestamp: a CreateTime topic range-checks a timestamp (the v2 batch
            # does, in validator.py); otherwise the producer must not claim LogAppendTime
            if wrapper.log_append_time and (log_append_time or ts == NO_TIMESTAMP):
                errors.append((i, "Invalid timestamp type in message. Producer should not set timestamp type to "
                                  "LogAppendTime."))
                bad_timestamp = True
                continue
            if not errors:
                body += encode_record(count, stamps.delta(ts), None if m.key is None else bytes(m.key),
                                      None if m.value is None else bytes(m.value))
                count += 1
                if len(body) > body_limit:
                    raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE, f"the messages make a record batch of more than "
                                     f"{body_limit} bytes (max.message.bytes={config.max_message_bytes})")
        if wrapper.codec:
            if i < 0:
                raise _invalid("Found invalid compressed record set with no inner records")
            if wrapper.magic == 1 and wrapper.offset != 0 and wrapper.offset < last_offset:
                raise _invalid(f"Found invalid wrapper offset in compressed v1 message set, wrapper offset "
                               f"'{wrapper.offset}' is less than the last inner message offset '{last_offset}' and "
                               "it is not zero.")
        if errors:
            raise_record_errors(errors, bad_timestamp)
    if not entries:
        raise _invalid("produce request must have at least one whole message per partition")
    if target is None or target == 4:  # "producer"; zstd: the validator re-encodes (v0-2 may not carry it)
        target = source_codec
    return assemble_batch(0, -1, target, count - 1, stamps.base, stamps.max, -1, -1, -1, count,
                          compress_records(target, bytes(body)))


class _Stamps:
    """The batch's base and max timestamps as records are added (the first record's is the base)."""

    __slots__ = ("base", "max")

    def __init__(self):
        self.base: int | None = None
        self.max = NO_TIMESTAMP

    def delta(self, ts: int) -> int:
        if self.base is None:
            self.base = ts
        if ts > self.max:
            self.max = ts
        return ts - self.base


def _wrapped_set(wrapper: Message, limit: int) -> bytes:
    """The message set a compressed wrapper holds, decompressed (at most ``limit`` bytes)."""
    codec = wrapper.codec
    if codec not in LEGACY_CODECS:
        if codec == 4:
            raise _invalid(f"Invalid wrapper compressionType found in legacy deep record iterator {wrapper.magic}")
        raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {codec}")
    if wrapper.value is None:
        raise _invalid(f"Found invalid compressed record set with null value (magic = {wrapper.magic})")
    data = wrapper.value
    if codec == 3 and wrapper.magic == 0:
        data = lz4_fix_header(data)
    return decompress_records(codec, data, limit)


# --- fetch: v2 batches down to magic 0/1 ----------------------------------------------------

def fetch_magic(fetch_version: int) -> int:
    """The message format a Fetch of this version reads (Kafka: v0-1 magic 0, v2-3 magic 1)."""
    return 0 if fetch_version <= 1 else 1


def down_convert_region(fd: int, position: int, size: int, to_magic: int, fetch_offset: int,
                        max_message_bytes: int | None = None) -> bytes:
    """``down_convert`` of the whole v2 batches in a log file region (what a Fetch of v4+ would
    send with sendfile), at most ``size`` bytes of messages unless the first batch's are more:
    Kafka's LazyDownConversionRecords sizes its response the same way."""
    data = bytearray()
    while len(data) < size:
        chunk = fio.pread(fd, size - len(data), position + len(data))
        if not chunk:
            break
        data += chunk
    return down_convert(data, to_magic, fetch_offset, size, max_message_bytes)


def down_convert(data, to_magic: int, fetch_offset: int, max_bytes: int,
                 max_message_bytes: int | None = None) -> bytes:
    """The magic ``to_magic`` message set for the whole v2 batches in ``data`` (as read from
    the log), at most ``max_bytes`` of it unless the first converted batch alone is larger.
    Raises KafkaError(UNSUPPORTED_COMPRESSION_TYPE) when the first batch to convert is zstd."""
    out = bytearray()
    mv = memoryview(data)
    limit = records_limit(max_message_bytes or 0)
    for h in parse_batches(mv):
        if h.is_control:
            continue  # transaction markers have no legacy form
        codec = h.compression
        if codec == 4:
            if not out:
                raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                                 "Down-conversion of zstandard-compressed batches is not supported")
            break
        if h.magic != 2 or h.records_count == 0:
            continue
        section = mv[h.pos + HEADER_SIZE:h.pos + h.size]
        if codec:
            section = decompress_records(codec, section, limit)
        lat = h.timestamp_type == 1
        try:
            if codec == 0:  # one message per record, from the fetch offset on, up to max_bytes
                msgs, _n, _last, _ts, complete = messages(section, h.records_count, to_magic, h.base_offset,
                                                          h.base_timestamp, lat, h.max_timestamp, fetch_offset, False,
                                                          max_bytes - len(out) if out else max_bytes)
                out += msgs
                if not complete:
                    break
                continue
            inner, n, last, max_ts, _c = messages(section, h.records_count, to_magic, h.base_offset, h.base_timestamp,
                                                  lat, h.max_timestamp, -1, to_magic > 0, -1)
        except ValueError as e:
            raise _corrupt(f"batch at offset {h.base_offset} does not decode: {e}") from None
        if not n:
            continue
        value = compress_records(codec, bytes(inner))
        if codec == 3 and to_magic == 0:
            value = lz4_break_header(value)
        msg = _legacy_message(to_magic, last, codec, lat, h.max_timestamp if lat else max_ts, None, value)
        if out and len(out) + len(msg) > max_bytes:
            break
        out += msg
    return bytes(out)


def _messages_py(data, count: int, magic: int, base_offset: int, base_ts: int, log_append_time: bool,
                 max_timestamp: int, min_offset: int, relative: bool, budget: int):
    """The Python reference of ``_legacy.messages`` (see there): the records of a v2 records
    section as magic 0/1 messages."""
    out = bytearray()
    written, last, max_ts, first = 0, -1, NO_TIMESTAMP, None
    h = _SectionHeader(base_offset, base_ts, log_append_time, max_timestamp, count)
    try:
        for r in section_records(h, bytes(data)):
            if first is None:
                first = r.offset
            if r.offset < min_offset:
                continue
            msg = _legacy_message(magic, r.offset - first if relative else r.offset, 0, log_append_time, r.timestamp,
                                  r.key, r.value)
            if budget >= 0 and written and len(out) + len(msg) > budget:
                return out, written, last, max_ts, False
            out += msg
            written += 1
            last = r.offset
            max_ts = max(max_ts, r.timestamp)
    except KafkaError as e:
        raise ValueError(e.message) from None
    return out, written, last, max_ts, True


class _SectionHeader(NamedTuple):
    """What ``section_records`` reads of a batch header."""

    base_offset: int
    base_timestamp: int
    log_append_time: bool
    max_timestamp: int
    records_count: int

    @property
    def timestamp_type(self) -> int:
        return 1 if self.log_append_time else 0


try:  # the compiled loop (setup.py builds it): ~50x the Python one
    from ._legacy import messages
    COMPILED = True
except ImportError:  # no C compiler at install time
    messages = _messages_py
    COMPILED = False


def _legacy_message(magic: int, offset: int, codec: int, log_append_time: bool, timestamp: int,
                    key: bytes | None, value: bytes | None) -> bytes:
    """One entry (offset, size, message) of magic 0 or 1."""
    if magic == 0:
        attributes = codec
        head = struct.pack(">bb", 0, attributes)
    else:
        attributes = codec | (TIMESTAMP_TYPE_BIT if log_append_time else 0)
        head = struct.pack(">bbq", 1, attributes, timestamp)
    body = (head + (b"\xff\xff\xff\xff" if key is None else _I.pack(len(key)) + key)
            + (b"\xff\xff\xff\xff" if value is None else _I.pack(len(value)) + value))
    return struct.pack(">qiI", offset, len(body) + 4, zlib.crc32(body)) + body


# --- lz4: the frame header checksum of Kafka 0.8's magic 0 framing -------------------------

_LZ4_MAGIC = b"\x04\x22\x4d\x18"


def _lz4_descriptor_end(frame) -> int:
    """Index of the header checksum byte of an lz4 frame (after FLG, BD and the optional
    content size); raises CORRUPT_MESSAGE when ``frame`` does not start like one."""
    if len(frame) < 7 or bytes(frame[:4]) != _LZ4_MAGIC:
        raise _corrupt("lz4 wrapper does not start with an lz4 frame")
    end = 6 + (8 if frame[4] & 0x08 else 0)
    if len(frame) <= end:
        raise _corrupt("lz4 frame header is cut off")
    return end


def lz4_fix_header(frame) -> bytes:
    """A magic 0 lz4 wrapper's frame with the header checksum the lz4 format wants (Kafka
    ignores the one such producers write)."""
    end = _lz4_descriptor_end(frame)
    out = bytearray(frame)
    out[end] = (xxh32(bytes(out[4:end])) >> 8) & 0xFF
    return bytes(out)


def lz4_break_header(frame: bytes) -> bytes:
    """An lz4 frame with the header checksum Kafka 0.8 wrote for magic 0 (over the frame
    magic too), which magic 0 consumers of that age check."""
    end = _lz4_descriptor_end(frame)
    out = bytearray(frame)
    out[end] = (xxh32(bytes(out[0:end])) >> 8) & 0xFF
    return bytes(out)


_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 (for lz4 frame header checksums: a few bytes)."""
    n = len(data)
    i = 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32]
        while i + 16 <= n:
            for j in range(4):
                lane = int.from_bytes(data[i + 4 * j:i + 4 * j + 4], "little")
                v[j] = (_rotl((v[j] + lane * _P2) & _M32, 13) * _P1) & _M32
            i += 16
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while i + 4 <= n:
        h = (_rotl((h + int.from_bytes(data[i:i + 4], "little") * _P3) & _M32, 17) * _P4) & _M32
        i += 4
    while i < n:
        h = (_rotl((h + data[i] * _P5) & _M32, 11) * _P1) & _M32
        i += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


# --- ListOffsets v0: offsets before a time, by segment (Kafka's legacyFetchOffsetsBefore) ------

def offsets_before(segments, log_start_offset: int, log_end_offset: int, timestamp: int, max_num_offsets: int,
                   now_ms: int, mtime_ms) -> list[int]:
    """ListOffsets v0 (seed 001's ``getOffsetsBefore``): at most ``max_num_offsets`` offsets, in
    descending order, of segment starts whose file was last modified at or before ``timestamp``
    (-1: the log end, -2: the log start), and the log end as one more "segment" modified now.
    ``mtime_ms(segment)`` is its file's modification time."""
    times = [(max(s.base_offset, log_start_offset), mtime_ms(s)) for s in segments]
    if segments and segments[-1].size > 0:
        times.append((log_end_offset, now_ms))
    if timestamp == -1:
        start = len(times) - 1
    elif timestamp == -2:
        start = 0
    else:
        start = len(times) - 1
        while start >= 0 and times[start][1] > timestamp:
            start -= 1
    n = max(0, min(max_num_offsets, start + 1))
    return sorted((times[start - j][0] for j in range(n)), reverse=True)
