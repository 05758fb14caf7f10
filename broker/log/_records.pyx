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
from libc.string cimport memcpy

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


# --- columns for readers (the Spark source: pipeline/arrow_records.py) ------------------------

cdef struct Rec:
    int64_t ts_delta
    int32_t off_delta
    Py_ssize_t key_pos
    int32_t key_len  # -1: null
    Py_ssize_t val_pos
    int32_t val_len  # -1: null
    int32_t nh
    Py_ssize_t hdr_pos
    Py_ssize_t end


cdef inline int read_record(const unsigned char* d, Py_ssize_t pos, Py_ssize_t end, Rec* r) noexcept nogil:
    """One record of a records section at ``pos``: 0, or a refusal kind (the checks of ``walk``)."""
    cdef int32_t length, n, k
    cdef Py_ssize_t p, rend, j
    cdef int e = field32(d, &pos, end, &length)
    if e:
        return PAST_END
    if length < 6 or length > end - pos:
        return LENGTH
    rend = pos + length
    r.end = rend
    p = pos + 1  # after the attributes
    if varint64(d, &p, rend, &r.ts_delta):
        return FIELD_PAST
    if field32(d, &p, rend, &r.off_delta):
        return FIELD_PAST
    if field32(d, &p, rend, &n):
        return FIELD_PAST
    if n >= 0 and n > rend - p:
        return FIELD_PAST
    r.key_pos = p
    r.key_len = n if n >= 0 else -1
    if n > 0:
        p += n
    if field32(d, &p, rend, &n):
        return FIELD_PAST
    if n >= 0 and n > rend - p:
        return FIELD_PAST
    r.val_pos = p
    r.val_len = n if n >= 0 else -1
    if n > 0:
        p += n
    if field32(d, &p, rend, &n):
        return FIELD_PAST
    if n < 0 or n > rend - p:
        return HEADERS
    r.nh = n
    r.hdr_pos = p
    for j in range(n):
        if field32(d, &p, rend, &k):
            return FIELD_PAST
        if k < 0:
            return HEADER_KEY
        if k > rend - p:
            return FIELD_PAST
        p += k
        if field32(d, &p, rend, &k):
            return FIELD_PAST
        if k > 0:
            if k > rend - p:
                return FIELD_PAST
            p += k
    if p != rend:
        return SIZE
    return 0


cdef inline void set_bit(unsigned char* bits, Py_ssize_t i) noexcept nogil:
    bits[i >> 3] |= <unsigned char>(1 << (i & 7))


def decode_columns(list sections, int64_t start, int64_t end, bint want_headers):
    """Arrow column buffers of the records in offsets [start, end) of record batches.

    ``sections``: ``(records section, record count, base offset, base timestamp, max timestamp,
    timestamp type)`` per batch, in offset order; a section is the (decompressed) bytes after the
    61-byte batch header. Returns ``(n, offsets, timestamps, timestamp types, key, value,
    headers)``: offsets int64 and timestamps int64 (microseconds, as Spark's TimestampType) and
    types int32 are buffers of n values; key and value are ``(validity bitmap, int32 offsets, data,
    null count)`` of Arrow binary arrays; headers (None unless ``want_headers``) is ``(list validity,
    list offsets, list null count, header count, key offsets, key data, value validity, value
    offsets, value data, value null count)`` for list<struct<key: string, value: binary>> (a
    record without headers is null, as in Spark's Kafka source). Raises ValueError on a malformed
    record. One pass sizes the buffers, one fills them."""
    cdef Py_ssize_t nsec = len(sections)
    cdef Py_ssize_t s, i, j, pos, slen, p
    cdef const unsigned char[::1] data
    cdef const unsigned char* d
    cdef Rec r
    cdef int rc
    cdef int32_t k
    cdef int64_t off, count, base, base_ts, max_ts, ts
    cdef int ttype
    cdef Py_ssize_t n = 0, kbytes = 0, vbytes = 0, nh = 0, hkbytes = 0, hvbytes = 0
    # pass 1: validate and size
    for s in range(nsec):
        sec = sections[s]
        data = sec[0]
        count = sec[1]
        base = sec[2]
        slen = data.shape[0]
        if slen == 0:
            continue
        d = &data[0]
        pos = 0
        for i in range(count):
            rc = read_record(d, pos, slen, &r)
            if rc:
                raise ValueError(f"malformed record {i} of the batch at offset {base} (refusal {rc})")
            pos = r.end
            off = base + r.off_delta
            if off < start or off >= end:
                continue
            n += 1
            if r.key_len > 0:
                kbytes += r.key_len
            if r.val_len > 0:
                vbytes += r.val_len
            if want_headers and r.nh:
                nh += r.nh
                p = r.hdr_pos
                for j in range(r.nh):
                    field32(d, &p, r.end, &k)
                    hkbytes += k
                    p += k
                    field32(d, &p, r.end, &k)
                    if k > 0:
                        hvbytes += k
                        p += k
        if pos != slen:
            raise ValueError(f"the batch at offset {base} has {slen - pos} bytes after its {count} records")
    offsets = bytearray(8 * n)
    stamps = bytearray(8 * n)
    types = bytearray(4 * n)
    kvalid = bytearray((n + 7) // 8)
    koffs = bytearray(4 * (n + 1))
    kdata = bytearray(kbytes)
    vvalid = bytearray((n + 7) // 8)
    voffs = bytearray(4 * (n + 1))
    vdata = bytearray(vbytes)
    cdef int64_t* o_off = <int64_t*><char*>offsets if n else NULL
    cdef int64_t* o_ts = <int64_t*><char*>stamps if n else NULL
    cdef int32_t* o_type = <int32_t*><char*>types if n else NULL
    cdef unsigned char* o_kvalid = <unsigned char*><char*>kvalid if n else NULL
    cdef int32_t* o_koffs = <int32_t*><char*>koffs
    cdef unsigned char* o_kdata = <unsigned char*><char*>kdata if kbytes else NULL
    cdef unsigned char* o_vvalid = <unsigned char*><char*>vvalid if n else NULL
    cdef int32_t* o_voffs = <int32_t*><char*>voffs
    cdef unsigned char* o_vdata = <unsigned char*><char*>vdata if vbytes else NULL
    hvalid = bytearray((n + 7) // 8 if want_headers else 0)
    hoffs = bytearray(4 * (n + 1) if want_headers else 0)
    hkoffs = bytearray(4 * (nh + 1) if want_headers else 0)
    hkdata = bytearray(hkbytes)
    hvvalid = bytearray((nh + 7) // 8)
    hvoffs = bytearray(4 * (nh + 1) if want_headers else 0)
    hvdata = bytearray(hvbytes)
    cdef unsigned char* o_hvalid = <unsigned char*><char*>hvalid if want_headers and n else NULL
    cdef int32_t* o_hoffs = <int32_t*><char*>hoffs if want_headers else NULL
    cdef int32_t* o_hkoffs = <int32_t*><char*>hkoffs if want_headers else NULL
    cdef unsigned char* o_hkdata = <unsigned char*><char*>hkdata if hkbytes else NULL
    cdef unsigned char* o_hvvalid = <unsigned char*><char*>hvvalid if nh else NULL
    cdef int32_t* o_hvoffs = <int32_t*><char*>hvoffs if want_headers else NULL
    cdef unsigned char* o_hvdata = <unsigned char*><char*>hvdata if hvbytes else NULL
    cdef Py_ssize_t row = 0, kpos = 0, vpos = 0, knull = 0, vnull = 0, hrow = 0, hkpos = 0, hvpos = 0
    cdef Py_ssize_t hnull = 0, hvnull = 0
    if n:
        o_koffs[0] = 0
        o_voffs[0] = 0
        if want_headers:
            o_hoffs[0] = 0
            o_hkoffs[0] = 0
            o_hvoffs[0] = 0
    # pass 2: fill (the records were checked by pass 1)
    for s in range(nsec):
        if row == n:
            break
        sec = sections[s]
        data = sec[0]
        count = sec[1]
        base = sec[2]
        base_ts = sec[3]
        max_ts = sec[4]
        ttype = sec[5]
        slen = data.shape[0]
        if slen == 0:
            continue
        d = &data[0]
        pos = 0
        with nogil:
            for i in range(count):
                read_record(d, pos, slen, &r)
                pos = r.end
                off = base + r.off_delta
                if off < start or off >= end:
                    continue
                o_off[row] = off
                ts = max_ts if ttype == 1 else base_ts + r.ts_delta
                o_ts[row] = ts * 1000
                o_type[row] = ttype
                if r.key_len >= 0:
                    set_bit(o_kvalid, row)
                    memcpy(o_kdata + kpos, d + r.key_pos, r.key_len)
                    kpos += r.key_len
                else:
                    knull += 1
                o_koffs[row + 1] = <int32_t>kpos
                if r.val_len >= 0:
                    set_bit(o_vvalid, row)
                    memcpy(o_vdata + vpos, d + r.val_pos, r.val_len)
                    vpos += r.val_len
                else:
                    vnull += 1
                o_voffs[row + 1] = <int32_t>vpos
                if want_headers:
                    if r.nh:
                        set_bit(o_hvalid, row)
                        p = r.hdr_pos
                        for j in range(r.nh):
                            field32(d, &p, r.end, &k)
                            memcpy(o_hkdata + hkpos, d + p, k)
                            hkpos += k
                            p += k
                            o_hkoffs[hrow + 1] = <int32_t>hkpos
                            field32(d, &p, r.end, &k)
                            if k >= 0:
                                set_bit(o_hvvalid, hrow)
                                memcpy(o_hvdata + hvpos, d + p, k)
                                hvpos += k
                                p += k
                            else:
                                hvnull += 1
                            o_hvoffs[hrow + 1] = <int32_t>hvpos
                            hrow += 1
                    else:
                        hnull += 1
                    o_hoffs[row + 1] = <int32_t>hrow
                row += 1
                if row == n:
                    break
    if kbytes > 0x7FFFFFFF or vbytes > 0x7FFFFFFF or hkbytes > 0x7FFFFFFF or hvbytes > 0x7FFFFFFF:
        raise ValueError("more than 2 GiB of keys, values or headers in one decode")
    key = (kvalid, koffs, kdata, knull)
    value = (vvalid, voffs, vdata, vnull)
    headers = (hvalid, hoffs, hnull, nh, hkoffs, hkdata, hvvalid, hvoffs, hvdata, hvnull) if want_headers else None
    return n, offsets, stamps, types, key, value, headers
