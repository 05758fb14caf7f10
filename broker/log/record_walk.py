"""Kafka's record checks (DefaultRecord.readFrom) over the records section of one v2 batch,
without building any record: produce walks every record of every batch with ``scan_records``.

    record := length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
              keyLength varint, key, valueLength varint, value, headerCount varint,
              headerCount x (headerKeyLength varint, headerKey, headerValueLength varint, headerValue)

All varints are zig-zag. As Kafka's ByteUtils reads them, a varint is an int32 of at most 5
bytes (bits past the 32nd in the 5th byte are dropped) and the varlong an int64 of at most 10.
A negative key, value or header value length means null; a negative header key length or
header count is refused. Every field lies inside its record, the fields fill it exactly, and
``count`` records fill the section exactly. Record attributes are not checked (v2 has none;
Kafka reads and ignores the byte). A refusal is INVALID_RECORD, as Kafka's InvalidRecordException.

Two walkers keep one contract: the compiled one (``_records.pyx``, Cython, built by
``pip install``) and the Python reference below, used where the extension is not built (no C
compiler). Both return the same scan or raise the same error (same message) for every input:
tests/unit/log/test_record_walk.py checks that with hypothesis.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from common.errors import ErrorCode, KafkaError

MIN_RECORD_BODY = 6  # attributes, timestampDelta, offsetDelta, keyLength, valueLength, headerCount
MIN_RECORD_SIZE = 1 + MIN_RECORD_BODY  # with its length varint

_INT64_MAX = (1 << 63) - 1
_INT64_MIN = -(1 << 63)

# Refusals, as (kind, record index, a, b); ``refusal`` makes the error. _records.pyx uses the same numbers.
PAST_END = 1  # the length varint runs past the end of the section
LENGTH = 2  # a: the record's length, b: the bytes left in the section
VARINT = 3  # a: the longest the varint may be (5 or 10 bytes)
FIELD_PAST = 4  # a field runs past its record; a: the record's length
SIZE = 5  # the fields end before the record does; a: its length, b: the bytes they took
HEADERS = 6  # a: the header count, b: the bytes left in the record
HEADER_KEY = 7  # a: the negative header key length
REMAINING = 8  # bytes left after ``count`` records; a: how many


def refusal(kind: int, i: int, count: int, a: int, b: int) -> KafkaError:
    where = f"record {i} of {count}"
    if kind == PAST_END:
        msg = f"{where} runs past the end of the records section"
    elif kind == LENGTH:
        msg = f"{where} has length {a} with {b} bytes left"
    elif kind == VARINT:
        msg = f"Found invalid record structure in {where}: a varint longer than {a} bytes"
    elif kind == FIELD_PAST:
        msg = f"Found invalid record structure in {where}: its fields run past its length {a}"
    elif kind == SIZE:
        msg = f"Invalid record size: expected to read {a} bytes in {where}, but instead read {b}"
    elif kind == HEADERS:
        msg = f"Found invalid number of record headers {a} in {where} ({b} bytes left in it)"
    elif kind == HEADER_KEY:
        msg = f"Invalid negative header key size {a} in {where}"
    elif kind == REMAINING:
        msg = f"Incorrect declared batch size, records still remaining after {count} records ({a} bytes left)"
    else:
        raise ValueError(f"unknown record refusal {kind}")
    return KafkaError(ErrorCode.INVALID_RECORD, msg)


def check_records_count(count: int, section_bytes: int) -> None:
    """O(1): a batch cannot hold more records than its records section has room for."""
    if count < 0 or count * MIN_RECORD_SIZE > section_bytes:
        raise KafkaError(ErrorCode.INVALID_RECORD,
                         f"record batch claims {count} records in a records section of {section_bytes} bytes "
                         f"(a record takes at least {MIN_RECORD_SIZE})")


@dataclass(slots=True)
class RecordScan:
    """What the produce path needs to know about the records of one batch."""

    min_timestamp_delta: int
    max_timestamp_delta: int
    offsets_in_order: bool  # offsetDelta of record i is i (else Kafka re-assigns them)
    null_keys: list[int]  # indexes of records without a key (when asked for)


# --- varints as Kafka's ByteUtils reads them -------------------------------------------------

class _Short(Exception):
    """A varint or field runs past its bound."""


class _TooLong(Exception):
    """A varint longer than Kafka reads (args: the most bytes allowed)."""


def _zigzag(buf, pos: int, limit: int, bits: int) -> tuple[int, int]:
    """The zig-zag varint of ``bits`` (32 or 64) at ``pos``, all of it before ``limit``: at most
    (bits + 6) // 7 bytes, the bits of its last byte past ``bits`` dropped -> (value, next pos)."""
    last = bits // 7 * 7  # the shift of the last byte allowed: 28 or 63
    raw = 0
    shift = 0
    while True:
        if pos >= limit:
            raise _Short
        b = buf[pos]
        pos += 1
        if shift == last:
            if b & 0x80:
                raise _TooLong(last // 7 + 1)
            raw = (raw | (b << last)) & ((1 << bits) - 1)
            break
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
    return (raw >> 1) ^ -(raw & 1), pos


def varint(buf, pos: int, limit: int) -> tuple[int, int]:
    """The int32 varint at ``pos`` (at most 5 bytes, all before ``limit``) -> (value, next pos)."""
    if pos < limit:
        b = buf[pos]
        if b < 0x80:  # the common one-byte case first
            return (b >> 1) ^ -(b & 1), pos + 1
    return _zigzag(buf, pos, limit, 32)


def varlong(buf, pos: int, limit: int) -> tuple[int, int]:
    """The int64 varlong at ``pos`` (at most 10 bytes, all before ``limit``) -> (value, next pos)."""
    return _zigzag(buf, pos, limit, 64)


def read_varint(buf, pos: int, bits: int = 32) -> tuple[int, int]:
    """``varint`` (``varlong`` with ``bits=64``) bounded by the end of ``buf``: IndexError past it,
    INVALID_RECORD when too long."""
    try:
        return _zigzag(buf, pos, len(buf), bits)
    except _Short:
        raise IndexError(pos) from None
    except _TooLong as e:
        raise KafkaError(ErrorCode.INVALID_RECORD, f"varint longer than {e.args[0]} bytes in a record") from None


def read_varlong(buf, pos: int) -> tuple[int, int]:
    return read_varint(buf, pos, 64)


# --- the Python reference walker ---------------------------------------------------------------

class _Refused(Exception):
    """args: (kind, a, b) for the record being read."""


def scan_records_py(data, count: int, *, keys: bool = False) -> RecordScan:
    """Walk the records section ``data`` of a batch claiming ``count`` records (see the module
    docstring); with ``keys`` list the records whose key is null. The reference for
    ``_records.scan``; returns its result or raises its error."""
    check_records_count(count, len(data))
    if not isinstance(data, bytes):
        data = bytes(data)  # indexing bytes is faster than a memoryview
    end = len(data)
    pos = 0
    tmin = _INT64_MAX
    tmax = _INT64_MIN
    in_order = True
    null_keys: list[int] = []
    i = 0
    length = -1  # the record's length once its varint is read
    try:
        for i in range(count):
            length = -1
            length, pos = varint(data, pos, end)
            if length < MIN_RECORD_BODY or length > end - pos:
                raise _Refused(LENGTH, length, end - pos)
            rend = pos + length
            ts, p = varlong(data, pos + 1, rend)  # after the attributes
            if ts < tmin:
                tmin = ts
            if ts > tmax:
                tmax = ts
            off, p = varint(data, p, rend)
            if off != i:
                in_order = False
            n, p = varint(data, p, rend)  # key
            if n < 0:
                if keys:
                    null_keys.append(i)
            elif n > rend - p:
                raise _Short
            else:
                p += n
            n, p = varint(data, p, rend)  # value
            if n >= 0:
                if n > rend - p:
                    raise _Short
                p += n
            n, p = varint(data, p, rend)  # header count
            if n:
                p = _headers(data, p, rend, n)
            if p != rend:
                raise _Refused(SIZE, length, p - pos)
            pos = rend
    except _Short:
        raise refusal(PAST_END if length < 0 else FIELD_PAST, i, count, length, 0) from None
    except _TooLong as e:
        raise refusal(VARINT, i, count, e.args[0], 0) from None
    except _Refused as e:
        raise refusal(e.args[0], i, count, e.args[1], e.args[2]) from None
    if pos != end:
        raise refusal(REMAINING, count, count, end - pos, 0)
    if not count:
        tmin = tmax = 0
    return RecordScan(tmin, tmax, in_order, null_keys)


def _headers(data: bytes, p: int, rend: int, n: int) -> int:
    """Past the ``n`` headers of a record from ``p``."""
    if n < 0 or n > rend - p:
        raise _Refused(HEADERS, n, rend - p)
    for _ in range(n):
        k, p = varint(data, p, rend)
        if k < 0:
            raise _Refused(HEADER_KEY, k, 0)
        if k > rend - p:
            raise _Short
        p += k
        v, p = varint(data, p, rend)
        if v >= 0:
            if v > rend - p:
                raise _Short
            p += v
    return p


# --- the compiled walker -----------------------------------------------------------------------

_COMPILED_VERSION = 1  # the _records.VERSION this module's contract matches


def _load_compiled():
    """The compiled module, or None with the reason it is not used."""
    name = f"{__package__}._records"
    try:
        _records = importlib.import_module(name)
    except ImportError as e:
        if isinstance(e, ModuleNotFoundError) and e.name == name:
            return None, "not built (`pip install -e .` builds it where a C compiler and Python's headers are)"
        return None, f"not loadable ({e}): rebuild it with `pip install -e .`"
    if getattr(_records, "VERSION", None) != _COMPILED_VERSION:
        return None, (f"{_records.__file__} is version {getattr(_records, 'VERSION', None)}, not "
                      f"{_COMPILED_VERSION}: rebuild it with `pip install -e .`")
    return _records, None


_compiled, _why_not = _load_compiled()


def scan_records_compiled(data, count: int, *, keys: bool = False) -> RecordScan:
    """``scan_records_py`` in C (``_records.scan``)."""
    check_records_count(count, len(data))
    try:
        tmin, tmax, in_order, null_keys = _compiled.scan(data, count, keys)
    except _compiled.Refused as e:
        kind, i, a, b = e.args
        raise refusal(kind, i, count, a, b) from None
    return RecordScan(tmin, tmax, in_order, null_keys)


WALKER_COMPILED = _compiled is not None
if WALKER_COMPILED:
    scan_records = scan_records_compiled
    WALKER = f"compiled walker ({_compiled.__file__})"
else:
    scan_records = scan_records_py
    WALKER = f"Python walker (the compiled one is {_why_not})"


def timestamp_deltas(data, count: int) -> list[int]:
    """timestampDelta of each record of a section ``scan_records`` accepted (for per-record errors)."""
    out = []
    pos = 0
    end = len(data)
    for _ in range(count):
        length, pos = varint(data, pos, end)
        out.append(varlong(data, pos + 1, pos + length)[0])
        pos += length
    return out
