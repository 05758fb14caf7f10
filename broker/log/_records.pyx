# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The record walker of record_walk.py in C: the same checks, the same result, the same refusals.

record_walk.py holds the contract and the Python reference (``scan_records_py``); this module
only runs it faster (produce walks every record of every batch: ~10,000 records per MiB). Bump
VERSION with any change of what ``scan`` takes or returns (record_walk.py checks it).

The walk reads only ``data``, through a read-only buffer held for the whole call, and every
read is bounded by the section's or the record's end, so it runs without the GIL for large
sections (produce validates those in a worker thread while the event loop goes on).
"""

from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc

VERSION = 1


class Refused(Exception):
    """args: (kind, record index, a, b), as record_walk.refusal takes them."""


# Refusal kinds: the numbers of record_walk.py.
cdef enum:
    PAST_END = 1
    LENGTH = 2
    VARINT = 3
    FIELD_PAST = 4
    SIZE = 5
    HEADERS = 6
    HEADER_KEY = 7
    REMAINING = 8

cdef enum:
    SHORT = 1  # a varint runs past its bound
    TOO_LONG = 2

cdef Py_ssize_t NOGIL_BYTES = 64 * 1024  # below this, releasing the GIL costs more than it frees


cdef struct Walk:
    int kind
    Py_ssize_t index
    int64_t a
    int64_t b
    int64_t tmin
    int64_t tmax
    bint in_order
    Py_ssize_t nnull


ctypedef fused uint_t:
    uint32_t
    uint64_t


cdef inline int uvarint(const unsigned char* d, Py_ssize_t* pos, Py_ssize_t limit, uint_t* out) noexcept nogil:
    """Kafka's ByteUtils.readUnsignedVarint (uint32_t: at most 5 bytes) or readUnsignedVarlong
    (uint64_t: at most 10), the bits of the last byte past the type's width dropped."""
    cdef int last = 28 if uint_t is uint32_t else 63
    cdef Py_ssize_t p = pos[0]
    cdef uint_t raw = 0
    cdef uint_t b
    cdef int shift = 0
    while True:
        if p >= limit:
            return SHORT
        b = d[p]
        p += 1
        if shift == last:
            if b & 0x80:
                return TOO_LONG
            raw |= b << last
            break
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
    pos[0] = p
    out[0] = raw
    return 0


cdef inline int varint32(const unsigned char* d, Py_ssize_t* pos, Py_ssize_t limit, int32_t* out) noexcept nogil:
    """Kafka's ByteUtils.readVarint: zig-zag of ``uvarint``."""
    cdef uint32_t raw = 0
    cdef int e = uvarint(d, pos, limit, &raw)
    out[0] = <int32_t>((raw >> 1) ^ (<uint32_t>0 - (raw & 1)))
    return e


cdef inline int varint64(const unsigned char* d, Py_ssize_t* pos, Py_ssize_t limit, int64_t* out) noexcept nogil:
    """Kafka's ByteUtils.readVarlong: zig-zag of ``uvarint``."""
    cdef uint64_t raw = 0
    cdef int e = uvarint(d, pos, limit, &raw)
    out[0] = <int64_t>((raw >> 1) ^ (<uint64_t>0 - (raw & 1)))
    return e


cdef inline int field32(const unsigned char* d, Py_ssize_t* pos, Py_ssize_t limit, int32_t* out) noexcept nogil:
    """``varint32`` with the one- and two-byte cases inline (most lengths and offset deltas)."""
    cdef Py_ssize_t p = pos[0]
    cdef uint32_t b, c
    if p + 1 < limit:
        b = d[p]
        if b < 0x80:
            pos[0] = p + 1
            out[0] = <int32_t>((b >> 1) ^ (<uint32_t>0 - (b & 1)))
            return 0
        c = d[p + 1]
        if c < 0x80:
            b = (b & 0x7F) | (c << 7)
            pos[0] = p + 2
            out[0] = <int32_t>((b >> 1) ^ (<uint32_t>0 - (b & 1)))
            return 0
    return varint32(d, pos, limit, out)


cdef inline int fail(Walk* w, int kind, int64_t a, int64_t b) noexcept nogil:
    w.kind = kind
    w.a = a
    w.b = b
    return kind


cdef inline int varint_fail(Walk* w, int e, int32_t length) noexcept nogil:
    """The refusal for varint error ``e`` inside a record of ``length``."""
    if e == TOO_LONG:
        return fail(w, VARINT, 5, 0)
    return fail(w, FIELD_PAST, length, 0)


cdef int walk(const unsigned char* d, Py_ssize_t end, Py_ssize_t count, int32_t* nulls, Walk* w) noexcept nogil:
    """The walk of record_walk.scan_records_py: 0, or the refusal kind with ``w`` filled in."""
    cdef Py_ssize_t pos = 0
    cdef Py_ssize_t p, rend, i, j
    cdef int32_t length, off, n, k
    cdef int64_t ts
    cdef int e
    w.kind = 0
    w.tmin = 0x7FFFFFFFFFFFFFFF
    w.tmax = -0x7FFFFFFFFFFFFFFF - 1
    w.in_order = True
    w.nnull = 0
    for i in range(count):
        w.index = i
        e = field32(d, &pos, end, &length)
        if e:
            return fail(w, VARINT, 5, 0) if e == TOO_LONG else fail(w, PAST_END, 0, 0)
        if length < 6 or length > end - pos:
            return fail(w, LENGTH, length, end - pos)
        rend = pos + length
        p = pos + 1  # after the attributes
        if d[p] < 0x80:  # a one-byte timestampDelta (p < rend: the record has at least 6 bytes)
            ts = <int64_t>((d[p] >> 1) ^ (0 - (d[p] & 1)))
            p += 1
            e = 0
        else:
            e = varint64(d, &p, rend, &ts)
        if e:
            return fail(w, VARINT, 10, 0) if e == TOO_LONG else fail(w, FIELD_PAST, length, 0)
        if ts < w.tmin:
            w.tmin = ts
        if ts > w.tmax:
            w.tmax = ts
        e = field32(d, &p, rend, &off)
        if e:
            return varint_fail(w, e, length)
        if off != i:
            w.in_order = False
        e = field32(d, &p, rend, &n)  # key
        if e:
            return varint_fail(w, e, length)
        if n < 0:
            if nulls != NULL:
                nulls[w.nnull] = <int32_t>i
                w.nnull += 1
        elif n > rend - p:
            return fail(w, FIELD_PAST, length, 0)
        else:
            p += n
        e = field32(d, &p, rend, &n)  # value
        if e:
            return varint_fail(w, e, length)
        if n >= 0:
            if n > rend - p:
                return fail(w, FIELD_PAST, length, 0)
            p += n
        e = field32(d, &p, rend, &n)  # header count
        if e:
            return varint_fail(w, e, length)
        if n:
            if n < 0 or n > rend - p:
                return fail(w, HEADERS, n, rend - p)
            for j in range(n):
                e = field32(d, &p, rend, &k)
                if e:
                    return varint_fail(w, e, length)
                if k < 0:
                    return fail(w, HEADER_KEY, k, 0)
                if k > rend - p:
                    return fail(w, FIELD_PAST, length, 0)
                p += k
                e = field32(d, &p, rend, &k)
                if e:
                    return varint_fail(w, e, length)
                if k >= 0:
                    if k > rend - p:
                        return fail(w, FIELD_PAST, length, 0)
                    p += k
        if p != rend:
            return fail(w, SIZE, length, p - pos)
        pos = rend
    if pos != end:
        w.index = count
        return fail(w, REMAINING, end - pos, 0)
    if count == 0:
        w.tmin = 0
        w.tmax = 0
    return 0


def scan(const unsigned char[::1] data, Py_ssize_t count, bint keys):
    """(min timestampDelta, max timestampDelta, offsets in order, keyless record indexes or [])
    of the records section ``data`` claiming ``count`` records; raises Refused. The caller has
    checked that ``count`` fits the section (record_walk.check_records_count)."""
    cdef Py_ssize_t end = data.shape[0]
    cdef const unsigned char* d = &data[0] if end else NULL
    cdef int32_t* nulls = NULL
    cdef Walk w
    cdef int rc
    cdef Py_ssize_t i
    if count < 0 or count > end:
        raise ValueError(f"count {count} does not fit a section of {end} bytes")
    if keys and count:
        nulls = <int32_t*>malloc(count * sizeof(int32_t))
        if nulls == NULL:
            raise MemoryError()
    try:
        if end >= NOGIL_BYTES:
            with nogil:
                rc = walk(d, end, count, nulls, &w)
        else:
            rc = walk(d, end, count, nulls, &w)
        if rc:
            raise Refused(w.kind, w.index, w.a, w.b)
        return w.tmin, w.tmax, bool(w.in_order), [nulls[i] for i in range(w.nnull)]
    finally:
        free(nulls)
