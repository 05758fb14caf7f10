"""Hostile record batches built by hand (count lies, decompression bombs in every codec, bad
framing), shared by the decoder, validator and crash tests. Each is CRC-valid, so only the
record-level bounds can stop it."""

from __future__ import annotations

import struct
import time
import zlib

from crc32c import crc32c

from broker.apis.wire import _uvarint as uvarint  # unsigned LEB128
from broker.log.batch import _zigzag_varint as varint  # noqa: F401 (used by the tests too)

ZSTD, LZ4, SNAPPY, GZIP = 4, 3, 2, 1
BLOCK = 128 * 1024  # zstd's largest block


def record(i: int, key: bytes | None, value: bytes | None, ts_delta: int = 0) -> bytes:
    def vb(b):
        return varint(-1) if b is None else varint(len(b)) + b
    body = b"\x00" + varint(ts_delta) + varint(i) + vb(key) + vb(value) + varint(0)
    return varint(len(body)) + body


def batch(section: bytes, count: int, *, codec: int = 0, base_timestamp: int | None = None,
          max_timestamp: int | None = None, last_offset_delta: int | None = None, attributes: int = 0) -> bytes:
    """A CRC-valid v2 batch around ``section`` (already compressed with ``codec``) claiming ``count``."""
    ts = int(time.time() * 1000) if base_timestamp is None else base_timestamp
    lod = count - 1 if last_offset_delta is None else last_offset_delta
    after_crc = struct.pack(">hiqqqhii", codec | attributes, lod, ts, ts if max_timestamp is None else max_timestamp,
                            -1, -1, -1, count) + section
    return struct.pack(">qiibI", 0, 9 + len(after_crc), -1, 2, crc32c(after_crc)) + after_crc


def count_lie(count: int = 2**31 - 1, **kw) -> bytes:
    """The 77-byte batch of issue 18: 2^31-1 records claimed, the first record's length is -1."""
    return batch(varint(-1) * 16, count, **kw)


def zstd_rle_bomb(total: int, *, content_size: int | None = None) -> bytes:
    """A zstd frame of RLE blocks: 4 bytes per 128 KiB of output (30 GiB in < 1 MB)."""
    if content_size is None:
        out = bytearray(struct.pack("<IBB", 0xFD2FB528, 0x00, 7 << 3))  # no content size, window 2^17
    else:
        out = bytearray(struct.pack("<IBBQ", 0xFD2FB528, 0xC0, 7 << 3, content_size))
    n = total // BLOCK
    for i in range(n):
        out += (int(i == n - 1) | (1 << 1) | (BLOCK << 3)).to_bytes(3, "little") + b"\x00"
    return bytes(out)


def gzip_bomb(total: int) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(1 << 20)
    out = [c.compress(chunk) for _ in range(total >> 20)]
    out.append(c.flush())
    return b"".join(out)


def lz4_bomb(total: int) -> bytes:
    import lz4.frame
    c = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX4MB)
    chunk = bytes(1 << 20)
    return c.begin() + b"".join(c.compress(chunk) for _ in range(total >> 20)) + c.flush()


def snappy_length_lie(claimed: int) -> bytes:
    """A raw snappy block whose uncompressed-length preamble claims ``claimed`` bytes."""
    return uvarint(claimed) + b"\x00" * 8


def xerial(*blocks: bytes) -> bytes:
    out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    for b in blocks:
        out += struct.pack(">i", len(b)) + b
    return bytes(out)


def snappy_bomb(total: int) -> bytes:
    """Real snappy data of zeros (~21:1, the format's best), xerial-framed in 32 KiB chunks."""
    import cramjam
    chunk = bytes(cramjam.snappy.compress_raw(bytes(32 * 1024)))
    return xerial(*[chunk] * (total // (32 * 1024)))
