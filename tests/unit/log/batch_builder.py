"""A small v2 record batch encoder for the log tests (what a client would send)."""

from __future__ import annotations

import gzip
import struct

from crc32c import crc32c


def _varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _bytes(b: bytes | None) -> bytes:
    if b is None:
        return _varint(-1)
    return _varint(len(b)) + b


def encode_record(offset_delta: int, ts_delta: int, key: bytes | None, value: bytes | None,
                  headers: list[tuple[str, bytes]] = ()) -> bytes:
    body = bytes([0]) + _varint(ts_delta) + _varint(offset_delta) + _bytes(key) + _bytes(value)
    body += _varint(len(headers))
    for k, v in headers:
        body += _bytes(k.encode()) + _bytes(v)
    return _varint(len(body)) + body


def make_batch(values: list[bytes | None], *, base_offset: int = 0, timestamps: list[int] | None = None,
               base_timestamp: int = 1_000, producer_id: int = -1, producer_epoch: int = -1,
               base_sequence: int = -1, compression: int = 0, transactional: bool = False,
               control: bool = False, leader_epoch: int = -1, keys: list[bytes | None] | None = None,
               magic: int = 2) -> bytearray:
    if timestamps is None:
        timestamps = [base_timestamp + i for i in range(len(values))]
    first_ts = timestamps[0] if timestamps else base_timestamp
    recs = b"".join(encode_record(i, ts - first_ts, keys[i] if keys else None, v)
                    for i, (v, ts) in enumerate(zip(values, timestamps, strict=True)))
    if compression == 1:
        recs = gzip.compress(recs)
    elif compression == 3:
        import lz4.frame
        recs = lz4.frame.compress(recs)
    elif compression == 4:
        import zstandard
        recs = zstandard.ZstdCompressor().compress(recs)
    elif compression == 2:
        import cramjam
        recs = bytes(cramjam.snappy.compress_raw(recs))
    attributes = compression | (0x10 if transactional else 0) | (0x20 if control else 0)
    after_crc = struct.pack(">hiqqqhii", attributes, len(values) - 1, first_ts, max(timestamps, default=first_ts),
                            producer_id, producer_epoch, base_sequence, len(values)) + recs
    crc = crc32c(after_crc)
    batch_length = 4 + 1 + 4 + len(after_crc)
    return bytearray(struct.pack(">qiibI", base_offset, batch_length, leader_epoch, magic, crc) + after_crc)


def concat(*batches: bytes) -> bytearray:
    out = bytearray()
    for b in batches:
        out += b
    return out
