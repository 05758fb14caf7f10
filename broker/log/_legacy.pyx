# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The per-record loop of the down-conversion for Fetch v0-3 (broker/log/legacy.py), compiled:
the records of one v2 records section (decompressed) written as magic 0/1 messages. The Python
``legacy._messages_py`` is the reference it must agree with (tests/unit/log/test_legacy.py)."""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from libc.string cimport memcpy

cdef unsigned int CRC_TABLE[8][256]  # slicing-by-8: [k][n] is the CRC of byte n followed by k zero bytes
cdef unsigned int ALL_ONES = 0xFFFFFFFFU
cdef unsigned int POLY = 0xEDB88320U


cdef void _init_table():
    cdef unsigned int c, n, k
    for n in range(256):
        c = n
        for k in range(8):
            if c & 1:
                c = POLY ^ (c >> 1)
            else:
                c = c >> 1
        CRC_TABLE[0][n] = c
    for n in range(256):
        for k in range(1, 8):
            CRC_TABLE[k][n] = (CRC_TABLE[k - 1][n] >> 8) ^ CRC_TABLE[0][CRC_TABLE[k - 1][n] & 0xFF]


_init_table()


cdef inline unsigned int _crc32(const unsigned char* p, Py_ssize_t n) noexcept nogil:
    """zlib's CRC-32, eight bytes a step (slicing-by-8), the tail a byte a step."""
    cdef unsigned int c = ALL_ONES
    cdef unsigned int one, two
    cdef Py_ssize_t i = 0
    while n - i >= 8:
        one = c ^ (<unsigned int>p[i] | (<unsigned int>p[i + 1] << 8) | (<unsigned int>p[i + 2] << 16)
                   | (<unsigned int>p[i + 3] << 24))
        two = (<unsigned int>p[i + 4] | (<unsigned int>p[i + 5] << 8) | (<unsigned int>p[i + 6] << 16)
               | (<unsigned int>p[i + 7] << 24))
        c = (CRC_TABLE[7][one & 0xFF] ^ CRC_TABLE[6][(one >> 8) & 0xFF] ^ CRC_TABLE[5][(one >> 16) & 0xFF]
             ^ CRC_TABLE[4][one >> 24] ^ CRC_TABLE[3][two & 0xFF] ^ CRC_TABLE[2][(two >> 8) & 0xFF]
             ^ CRC_TABLE[1][(two >> 16) & 0xFF] ^ CRC_TABLE[0][two >> 24])
        i += 8
    while i < n:
        c = CRC_TABLE[0][(c ^ p[i]) & 0xFF] ^ (c >> 8)
        i += 1
    return c ^ ALL_ONES


cdef inline Py_ssize_t _varlong(const unsigned char* b, Py_ssize_t pos, Py_ssize_t end, long long* out) except -2:
    cdef unsigned long long v = 0
    cdef int shift = 0
    cdef unsigned char c
    while True:
        if pos >= end or shift > 63:
            raise ValueError("a varint runs past its record")
        c = b[pos]
        pos += 1
        v |= (<unsigned long long>(c & 0x7F)) << shift
        if not (c & 0x80):
            break
        shift += 7
    out[0] = <long long>((v >> 1) ^ (<unsigned long long>0 - (v & 1)))
    return pos


cdef inline void _be64(unsigned char* p, long long v) noexcept nogil:
    cdef int i
    for i in range(8):
        p[7 - i] = <unsigned char>((<unsigned long long>v >> (8 * i)) & 0xFF)


cdef inline void _be32(unsigned char* p, long long v) noexcept nogil:
    p[0] = <unsigned char>((v >> 24) & 0xFF)
    p[1] = <unsigned char>((v >> 16) & 0xFF)
    p[2] = <unsigned char>((v >> 8) & 0xFF)
    p[3] = <unsigned char>(v & 0xFF)


def messages(const unsigned char[::1] data, int count, int magic, long long base_offset, long long base_ts,
             bint log_append_time, long long max_timestamp, long long min_offset, bint relative,
             long long budget):
    """(messages, written, last_offset, max_ts, complete) for the ``count`` records of the v2
    records section ``data``: each record at or after ``min_offset`` as a magic ``magic`` message
    (offset relative to the first record's when ``relative``), until the next would take the
    output past ``budget`` bytes (budget < 0: no bound; the first message is always written).
    Raises ValueError when a record does not parse."""
    cdef Py_ssize_t n = data.shape[0]
    cdef const unsigned char* b = &data[0] if n > 0 else NULL
    cdef Py_ssize_t cap = n + 34 * <Py_ssize_t>count + 16
    out = PyByteArray_FromStringAndSize(NULL, cap)
    cdef unsigned char* o = <unsigned char*>PyByteArray_AS_STRING(out)
    cdef Py_ssize_t pos = 0, w = 0, rstart, rend, kpos, vpos, bstart, entry
    cdef long long length, ts_delta, off_delta, klen, vlen, offset, ts, first = -1, last = -1
    cdef long long max_ts = -1
    cdef int i, written = 0
    cdef unsigned char attributes = 0x08 if (magic > 0 and log_append_time) else 0
    cdef bint complete = True
    for i in range(count):
        pos = _varlong(b, pos, n, &length)
        rstart = pos
        if length < 6 or length > n - pos:
            raise ValueError(f"record {i} of {count} has length {length} with {n - pos} bytes left")
        rend = pos + length
        pos += 1  # attributes
        pos = _varlong(b, pos, rend, &ts_delta)
        pos = _varlong(b, pos, rend, &off_delta)
        pos = _varlong(b, pos, rend, &klen)
        kpos = pos
        if klen > 0:
            if klen > rend - pos:
                raise ValueError(f"record {i}'s key runs past it")
            pos += klen
        pos = _varlong(b, pos, rend, &vlen)
        vpos = pos
        if vlen > 0:
            if vlen > rend - pos:
                raise ValueError(f"record {i}'s value runs past it")
            pos += vlen
        pos = rend  # (headers: dropped, as Kafka drops them)
        offset = base_offset + off_delta
        if first < 0:
            first = offset
        if offset < min_offset:
            continue
        ts = max_timestamp if log_append_time else base_ts + ts_delta
        entry = 12 + 4 + 2 + (8 if magic else 0) + 4 + (klen if klen > 0 else 0) + 4 + (vlen if vlen > 0 else 0)
        if budget >= 0 and written > 0 and w + entry > budget:
            complete = False
            break
        _be64(o + w, offset - first if relative else offset)
        _be32(o + w + 8, entry - 12)
        bstart = w + 16
        o[bstart] = magic
        o[bstart + 1] = attributes
        pos = bstart + 2
        if magic:
            _be64(o + pos, ts)
            pos += 8
        _be32(o + pos, klen if klen >= 0 else -1)
        pos += 4
        if klen > 0:
            memcpy(o + pos, b + kpos, klen)
            pos += klen
        _be32(o + pos, vlen if vlen >= 0 else -1)
        pos += 4
        if vlen > 0:
            memcpy(o + pos, b + vpos, vlen)
            pos += vlen
        _be32(o + w + 12, _crc32(o + bstart, pos - bstart))
        w = pos
        pos = rend
        last = offset
        if ts > max_ts:
            max_ts = ts
        written += 1
    if complete and pos != n:
        raise ValueError(f"{n - pos} bytes left after {count} records")
    del out[w:]
    return out, written, last, max_ts, complete
