"""Hand-built hostile record batches (the batch layout is written out in broker/log/batch.py).

Every family builds a batch whose CRC32C is valid (so it passes the CRC gate and reaches
whatever decodes records) unless the family is about the CRC itself:

    count lies       recordsCount 2^31-1 over a short body; a record length varint of -1, 0,
                     past the end, 10 bytes long; key/value/header lengths that lie
    bombs            per codec: gzip (concatenated members of zeros), snappy raw and xerial
                     (copy runs; a preamble that claims 4 GiB), lz4 (repeated 4 MiB blocks; a
                     frame content size that lies), zstd (RLE blocks: 30 GiB in < 1 MB; a
                     frame content size that lies); each as zeros and as one valid record
                     whose value is the whole expansion
    nested           magic 0/1 wrappers nesting compressed message sets three deep; a v2
                     batch whose records are another batch
    truncated        a batch cut inside its header, its records or its compressed stream
                     (CRC recomputed over what is left), a second batch cut short
    bits             control and transactional attributes, codecs 5-7, magic 0/1/3
    CRC              a bad CRC; a valid CRC over mutated content
    timestamps       years in the future, negative
    keys             keyless records for a compacted topic

``must_reject`` says whether a Kafka broker (LogValidator, which decodes every record of a
batch it appends, and the bounds issue 18 asks for) refuses the batch; the fuzzer counts an
acceptance of such a batch as a finding. ``record_level`` tells the families whose lie is
inside the records of a well-framed batch (count lies, a batch as records, a cut compressed
stream): only a broker that walks every record of every batch refuses them, as Kafka does;
their acceptance is a finding class of its own (``accepted-bad-records``)."""

from __future__ import annotations

import dataclasses
import functools
import random
import struct
import zlib
from collections.abc import Callable

from crc32c import crc32c

from broker.log.batch import _zigzag_varint as varint
from broker.log.batch import compress_records, encode_record
from broker.log.legacy import xxh32

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
CODECS = (0, GZIP, SNAPPY, LZ4, ZSTD)
CONTROL, TRANSACTIONAL = 0x20, 0x10
INT32_MAX = 2**31 - 1
YEAR_MS = 365 * 24 * 3600 * 1000
BOMB_MIN = 64 << 20  # an expansion no sane bound on one batch's records lets through


@dataclasses.dataclass(frozen=True, slots=True)
class Hostile:
    family: str
    data: bytes
    must_reject: bool
    topic: str | None = None  # the topic the family is meant for (None: any)


RECORD_LEVEL = ("count-lie/", "nested/v2-in-v2", "truncated/stream/")


def record_level(family: str) -> bool:
    """Whether a batch of ``family`` is refused only by walking its records (see the module doc)."""
    return family.startswith(RECORD_LEVEL)


def batch(records: bytes, *, count: int, last_offset_delta: int | None = None, attributes: int = 0,
          base_timestamp: int = 0, max_timestamp: int | None = None, producer_id: int = -1,
          producer_epoch: int = -1, base_sequence: int = -1, magic: int = 2, crc: int | None = None,
          batch_length: int | None = None, base_offset: int = 0, leader_epoch: int = -1) -> bytes:
    """A v2 batch with every header field given (nothing checked): the CRC is computed over
    attributes..end unless ``crc`` is given."""
    lod = count - 1 if last_offset_delta is None else last_offset_delta
    after_crc = struct.pack(">hiqqqhii", attributes, lod, base_timestamp,
                            base_timestamp if max_timestamp is None else max_timestamp,
                            producer_id, producer_epoch, base_sequence, count) + records
    length = 9 + len(after_crc) if batch_length is None else batch_length
    return struct.pack(">qiibI", base_offset, length, leader_epoch, magic,
                       crc32c(after_crc) if crc is None else crc) + after_crc


def recompute_crc(b: bytes | bytearray) -> bytes:
    b = bytearray(b)
    if len(b) >= 21:
        struct.pack_into(">I", b, 17, crc32c(bytes(b[21:])))
    return bytes(b)


def records(n: int, *, key: bool = True, size: int = 8, ts_step: int = 1) -> bytes:
    return b"".join(encode_record(i, i * ts_step, f"key-{i}".encode() if key else None, bytes([65 + i % 26]) * size)
                    for i in range(n))


def record_raw(body: bytes, length: int | None = None) -> bytes:
    """A record whose length varint is ``length`` (default: the body's own)."""
    return varint(len(body) if length is None else length) + body


def _value_prefix(value_len: int) -> tuple[bytes, bytes]:
    """(bytes before, bytes after) a record value of ``value_len`` bytes: a keyed record."""
    body_head = b"\x00" + varint(0) + varint(0) + varint(3) + b"key" + varint(value_len)
    tail = varint(0)
    return varint(len(body_head) + value_len + len(tail)) + body_head, tail


# --- bombs ----------------------------------------------------------------------------------

@functools.cache
def _gzip_zero_member(mib: int = 16) -> bytes:
    co = zlib.compressobj(9, zlib.DEFLATED, 31)
    return co.compress(bytes(mib << 20)) + co.flush()


def _gzip_member(data: bytes) -> bytes:
    co = zlib.compressobj(9, zlib.DEFLATED, 31)
    return co.compress(data) + co.flush()


def gzip_bomb(members: int, prefix: bytes = b"", suffix: bytes = b"") -> bytes:
    """Concatenated gzip members of 16 MiB of zeros each (every gzip reader, Java's included,
    reads them all), after ``prefix`` and before ``suffix``."""
    return ((_gzip_member(prefix) if prefix else b"") + _gzip_zero_member() * members
            + (_gzip_member(suffix) if suffix else b""))


def _snappy_literal(data: bytes) -> bytes:
    out = bytearray()
    for i in range(0, len(data), 60):
        chunk = data[i:i + 60]
        out += bytes([(len(chunk) - 1) << 2]) + chunk
    return bytes(out)


def snappy_raw_bomb(copies: int, prefix: bytes = b"", suffix: bytes = b"", claim: int | None = None) -> bytes:
    """Raw snappy: ``prefix`` and a zero as literals, then 64-byte copies at offset 1 (21x);
    ``claim`` makes the preamble (the uncompressed length readers allocate up front) lie."""
    total = len(prefix) + 1 + 64 * copies + len(suffix)
    return (varint_u(total if claim is None else claim) + _snappy_literal(prefix + b"\x00") + b"\xfe\x01\x00" * copies
            + (_snappy_literal(suffix) if suffix else b""))


def varint_u(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_XERIAL = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)


def snappy_xerial_bomb(budget: int, claim: int | None = None) -> tuple[bytes, int]:
    """Xerial framing (what Java clients write): chunks of [int32 length][raw snappy]."""
    chunk = snappy_raw_bomb(20_000, claim=claim)
    n = max(1, (budget - len(_XERIAL)) // (len(chunk) + 4))
    return _XERIAL + (struct.pack(">i", len(chunk)) + chunk) * n, (1 + 64 * 20_000) * n


@functools.cache
def _lz4_zero_block() -> bytes:
    import lz4.frame
    f = lz4.frame.compress(bytes(4 << 20), block_size=lz4.frame.BLOCKSIZE_MAX4MB, block_linked=False,
                           content_checksum=False, store_size=False)
    return f[7:-4]  # header is magic(4) FLG BD HC; the frame ends with a 0 end mark


def _lz4_header(content_size: int | None = None) -> bytes:
    flg = 0x60 | (0x08 if content_size is not None else 0)  # version 01, independent blocks
    desc = bytes([flg, 0x70]) + (struct.pack("<Q", content_size) if content_size is not None else b"")
    return struct.pack("<I", 0x184D2204) + desc + bytes([(xxh32(desc) >> 8) & 0xFF])


def _lz4_raw_block(data: bytes) -> bytes:
    return struct.pack("<I", len(data) | 0x80000000) + data if data else b""


def lz4_bomb(blocks: int, prefix: bytes = b"", suffix: bytes = b"", claim: int | None = None) -> bytes:
    """An LZ4 frame of 4 MiB zero blocks (~255x); ``claim`` adds a content size that lies."""
    return (_lz4_header(claim) + _lz4_raw_block(prefix) + _lz4_zero_block() * blocks + _lz4_raw_block(suffix)
            + b"\x00" * 4)


def zstd_bomb(target: int, prefix: bytes = b"", suffix: bytes = b"", claim: int | None = None) -> bytes:
    """One zstd frame of RLE blocks, 4 bytes per 128 KiB: ``target`` bytes of zeros (30 GiB fit
    in < 1 MB); ``claim`` sets a frame content size that lies."""
    if claim is None:
        head = struct.pack("<I", 0xFD2FB528) + bytes([0x00, 0x38])  # no content size; window 128 KiB
    else:
        head = struct.pack("<I", 0xFD2FB528) + bytes([0xC0, 0x38]) + struct.pack("<Q", claim)
    blocks = bytearray()
    if prefix:
        blocks += _zstd_block_header(0, len(prefix)) + prefix
    n, size = divmod(target, 128 * 1024)
    rle = _zstd_block_header(1, 128 * 1024) + b"\x00"
    blocks += rle * n
    if size:
        blocks += _zstd_block_header(1, size) + b"\x00"
    if suffix:
        blocks += _zstd_block_header(0, len(suffix)) + suffix
    last = len(blocks) - (3 + len(suffix) if suffix else 4)
    blocks[last] |= 1  # Last_Block
    return head + bytes(blocks)


def _zstd_block_header(block_type: int, size: int) -> bytes:
    return (size << 3 | block_type << 1).to_bytes(3, "little")


# --- families -------------------------------------------------------------------------------

@dataclasses.dataclass(slots=True)
class Context:
    now_ms: int
    max_batch: int = 1_000_000  # stays under message.max.bytes (1 MiB + 12) with the produce framing
    bomb_target: int = 30 << 30  # zstd's expansion; the other codecs get what fits in max_batch


def _compressed(codec: int, recs: bytes) -> bytes:
    return recs if codec == 0 else compress_records(codec, recs)


def count_lie(rng: random.Random, ctx: Context) -> Hostile:
    codec = rng.choice(CODECS)
    kind = rng.choice(["minus-one", "zero", "past-end", "long-varint", "short-body", "key-lie", "value-lie",
                       "headers-lie", "negative-key"])
    ok = encode_record(0, 0, b"k", b"v")
    body = {
        "minus-one": record_raw(b"", -1),
        "zero": record_raw(b"", 0) * 4,
        "past-end": record_raw(ok[1:], 1 << 28),
        "long-varint": b"\xff" * 10 + b"\x01",
        "short-body": ok,
        "key-lie": record_raw(b"\x00\x00\x00" + varint(1 << 30) + b"k" + varint(1) + b"v" + varint(0)),
        "value-lie": record_raw(b"\x00\x00\x00" + varint(1) + b"k" + varint(INT32_MAX) + b"v" + varint(0)),
        "headers-lie": record_raw(b"\x00\x00\x00" + varint(1) + b"k" + varint(1) + b"v" + varint(1 << 30)),
        "negative-key": record_raw(b"\x00\x00\x00" + varint(-7) + varint(1) + b"v" + varint(0)),
    }[kind]
    count = rng.choice([INT32_MAX, INT32_MAX, 1 << 20, 2, 1000]) if kind in ("minus-one", "short-body", "zero") else \
        rng.choice([1, INT32_MAX])
    data = batch(_compressed(codec, body), count=count, attributes=codec, base_timestamp=ctx.now_ms)
    if kind == "negative-key" and count == 1:
        # a negative key length is a null key for Kafka (DefaultRecord.readFrom): a valid record,
        # refused only where a key is required
        return Hostile(f"count-lie/{kind}/codec{codec}", data, True, topic="fuzz-compact")
    return Hostile(f"count-lie/{kind}/codec{codec}", data, True)


def bomb(rng: random.Random, ctx: Context) -> Hostile:
    codec = rng.choice((GZIP, SNAPPY, SNAPPY, LZ4, ZSTD))
    valid_record = rng.random() < 0.5
    lie = rng.random() < 0.3
    variant = ("record" if valid_record else "zeros") + ("+size-lie" if lie else "")
    return _bomb(codec, variant, ctx.max_batch, ctx.bomb_target, ctx.now_ms, rng.random() < 0.5)


@functools.lru_cache(maxsize=64)
def _bomb(codec: int, variant: str, budget: int, target: int, now_ms: int, xerial: bool) -> Hostile:
    """Zeros (records that cannot parse) or one keyed record whose value is all the zeros."""
    lie = variant.endswith("+size-lie")
    as_record = variant.startswith("record")
    budget -= 400  # the record's prefix and suffix, the lz4/zstd framing
    if codec == SNAPPY and xerial:
        payload, size = snappy_xerial_bomb(budget, claim=INT32_MAX if lie else None)
        data = batch(payload, count=INT32_MAX, attributes=codec, base_timestamp=now_ms)
        return Hostile(f"bomb/snappy-xerial/zeros{'+size-lie' if lie else ''}/{size >> 20}MiB", data, True)
    if codec == GZIP:
        n = budget // len(_gzip_zero_member())
        size = n * (16 << 20)
    elif codec == SNAPPY:
        n = budget // 3
        size = 1 + 64 * n
    elif codec == LZ4:
        n = budget // len(_lz4_zero_block())
        size = n * (4 << 20)
    else:
        n = size = min(target, INT32_MAX - 64) if as_record else target
    prefix, suffix = _value_prefix(size) if as_record else (b"", b"")
    if codec == GZIP:
        payload = gzip_bomb(n, prefix, suffix)
    elif codec == SNAPPY:
        # the value is the literal zero after the prefix and the copies of it
        payload = snappy_raw_bomb(n, prefix, suffix, claim=0xFFFFFFFF if lie else None)
    elif codec == LZ4:
        payload = lz4_bomb(n, prefix, suffix, claim=1 << 62 if lie else None)
    else:
        payload = zstd_bomb(n, prefix, suffix, claim=1 << 62 if lie else None)
    name = {GZIP: "gzip", SNAPPY: "snappy-raw", LZ4: "lz4", ZSTD: "zstd"}[codec]
    data = batch(payload, count=1 if as_record else INT32_MAX, attributes=codec, base_timestamp=now_ms)
    # zeros are no records and a size field that lies is a corrupt stream; an honest record is
    # refused only past what any max.message.bytes-derived bound allows (snappy's 21x gives 20 MiB)
    return Hostile(f"bomb/{name}/{variant}/{size >> 20}MiB", data, not as_record or lie or size >= BOMB_MIN)


def _legacy_message(magic: int, codec: int, value: bytes | None, key: bytes | None = None, ts: int = 0) -> bytes:
    body = struct.pack(">bb", magic, codec) + (struct.pack(">q", ts) if magic == 1 else b"")
    body += struct.pack(">i", -1) if key is None else struct.pack(">i", len(key)) + key
    body += struct.pack(">i", -1) if value is None else struct.pack(">i", len(value)) + value
    msg = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(msg)) + msg


def nested(rng: random.Random, ctx: Context) -> Hostile:
    kind = rng.choice(["legacy", "legacy", "v2-in-v2", "v2-in-v2-compressed"])
    if kind == "legacy":
        magic = rng.choice((0, 1))
        codec = rng.choice((GZIP, SNAPPY, LZ4))
        inner = _legacy_message(magic, 0, b"leaf", b"k")
        for _ in range(3):
            inner = _legacy_message(magic, codec, _legacy_compress(codec, inner * rng.randint(1, 3)), ts=ctx.now_ms)
        return Hostile(f"nested/legacy-magic{magic}/codec{codec}", inner, True)
    inner = batch(records(2), count=2, base_timestamp=ctx.now_ms)
    codec = rng.choice((GZIP, SNAPPY, LZ4, ZSTD)) if kind.endswith("compressed") else 0
    outer = batch(_compressed(codec, inner * 2), count=rng.choice((1, 2, 4)), attributes=codec,
                  base_timestamp=ctx.now_ms)
    return Hostile(f"nested/{kind}/codec{codec}", outer, True)


def _legacy_compress(codec: int, data: bytes) -> bytes:
    if codec == GZIP:
        return _gzip_member(data)
    return compress_records(codec, data)


def truncated(rng: random.Random, ctx: Context) -> Hostile:
    codec = rng.choice(CODECS)
    n = rng.randint(1, 20)
    good = batch(_compressed(codec, records(n)), count=n, attributes=codec, base_timestamp=ctx.now_ms)
    kind = rng.choice(["header", "records", "stream", "second-batch", "length-lie"])
    if kind == "header":
        return Hostile(f"truncated/header/codec{codec}", good[:rng.randint(1, 60)], True)
    if kind == "records":
        cut = rng.randint(62, len(good) - 1) if len(good) > 62 else 61
        return Hostile(f"truncated/records/codec{codec}", good[:cut], True)
    if kind == "stream":  # cut the records (or the compressed stream) but keep the batch self-consistent
        payload = _compressed(codec, records(n))
        cut = rng.randint(1, max(1, len(payload) - 1))
        return Hostile(f"truncated/stream/codec{codec}",
                       batch(payload[:cut], count=n, attributes=codec, base_timestamp=ctx.now_ms), True)
    if kind == "second-batch":
        return Hostile(f"truncated/second-batch/codec{codec}", good + good[:rng.randint(1, len(good) - 1)], True)
    lie = bytearray(good)
    struct.pack_into(">i", lie, 8, rng.choice([INT32_MAX, len(good), len(good) - 13, 48, 0, -1]))
    return Hostile(f"truncated/length-lie/codec{codec}", bytes(lie), True)


def bits(rng: random.Random, ctx: Context) -> Hostile:
    kind = rng.choice(["control", "control-with-pid", "transactional", "transactional-no-pid", "codec",
                       "magic", "lod-mismatch", "pid-no-seq"])
    n = rng.randint(1, 5)
    recs = records(n)
    if kind == "control":
        return Hostile("bits/control", batch(b"\x00" * 4 + recs, count=n, attributes=CONTROL), True)
    if kind == "control-with-pid":
        return Hostile("bits/control-with-pid", batch(recs, count=n, attributes=CONTROL | TRANSACTIONAL,
                                                      producer_id=1, producer_epoch=0, base_sequence=0), True)
    if kind == "transactional":
        return Hostile("bits/transactional", batch(recs, count=n, attributes=TRANSACTIONAL, producer_id=rng.randint(0, 99),
                                                   producer_epoch=0, base_sequence=0,
                                                   base_timestamp=ctx.now_ms), False)
    if kind == "transactional-no-pid":
        return Hostile("bits/transactional-no-pid", batch(recs, count=n, attributes=TRANSACTIONAL,
                                                          base_timestamp=ctx.now_ms), False)
    if kind == "codec":
        c = rng.randint(5, 7)
        return Hostile(f"bits/codec{c}", batch(recs, count=n, attributes=c, base_timestamp=ctx.now_ms), True)
    if kind == "magic":
        m = rng.choice((0, 1, 3, 127, -1))
        return Hostile(f"bits/magic{m}", batch(recs, count=n, magic=m, base_timestamp=ctx.now_ms), True)
    if kind == "lod-mismatch":
        return Hostile("bits/lod-mismatch", batch(recs, count=n, last_offset_delta=rng.choice((-1, n, n + 100, INT32_MAX)),
                                                  base_timestamp=ctx.now_ms), True)
    return Hostile("bits/pid-no-seq", batch(recs, count=n, producer_id=5, producer_epoch=0, base_sequence=-1,
                                            base_timestamp=ctx.now_ms), True)


def crc(rng: random.Random, ctx: Context) -> Hostile:
    codec = rng.choice(CODECS)
    n = rng.randint(1, 10)
    good = bytearray(batch(_compressed(codec, records(n)), count=n, attributes=codec, base_timestamp=ctx.now_ms))
    if rng.random() < 0.5:
        good[rng.randrange(21, len(good))] ^= 1 << rng.randrange(8)
        return Hostile(f"crc/bad/codec{codec}", bytes(good), True)
    # a valid CRC over content mutated past the header: whatever decodes the records sees garbage
    for _ in range(rng.randint(1, 4)):
        good[rng.randrange(61, len(good))] = rng.choice((0x00, 0xFF, 0x7F, 0x80, rng.randrange(256)))
    return Hostile(f"crc/valid-over-mutated/codec{codec}", recompute_crc(good), False)


def timestamps(rng: random.Random, ctx: Context) -> Hostile:
    kind = rng.choice(["future", "far-future", "negative", "max"])
    ts = {"future": ctx.now_ms + 10 * YEAR_MS, "far-future": 2**62, "negative": -rng.randint(2, 10**12),
          "max": 2**63 - 1}[kind]
    n = rng.randint(1, 5)
    codec = rng.choice(CODECS)
    data = batch(_compressed(codec, records(n)), count=n, attributes=codec, base_timestamp=ts,
                 max_timestamp=ts + n - 1 if kind != "max" else ts)
    # Kafka's default timestamp bounds (message.timestamp.before/after.max.ms) accept all of these
    return Hostile(f"timestamps/{kind}/codec{codec}", data, False)


def keyless(rng: random.Random, ctx: Context) -> Hostile:
    codec = rng.choice(CODECS)
    n = rng.randint(1, 5)
    data = batch(_compressed(codec, records(n, key=False)), count=n, attributes=codec, base_timestamp=ctx.now_ms)
    return Hostile(f"keyless-compacted/codec{codec}", data, True, topic="fuzz-compact")


def valid(rng: random.Random, ctx: Context) -> Hostile:
    """A well-formed batch (so hostile inputs are mixed with appends that must succeed)."""
    codec = rng.choice(CODECS)
    n = rng.randint(1, 50)
    return Hostile(f"valid/codec{codec}", batch(_compressed(codec, records(n)), count=n, attributes=codec,
                                                base_timestamp=ctx.now_ms), False)


FAMILIES: dict[str, tuple[float, Callable[[random.Random, Context], Hostile]]] = {
    "count-lie": (3, count_lie),
    "bomb": (1, bomb),
    "nested": (1, nested),
    "truncated": (2, truncated),
    "bits": (2, bits),
    "crc": (2, crc),
    "timestamps": (1, timestamps),
    "keyless": (1, keyless),
    "valid": (2, valid),
}


def make(rng: random.Random, ctx: Context, family: str | None = None) -> Hostile:
    if family is None:
        names = list(FAMILIES)
        family = rng.choices(names, weights=[FAMILIES[n][0] for n in names])[0]
    return FAMILIES[family][1](rng, ctx)
