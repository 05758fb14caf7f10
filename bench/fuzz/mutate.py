"""Mutators: byte-level havoc and structure-aware edits of recorded request frames.

Structure-aware edits use a *field map* of a frame: its request header and a walk of the
body over the kio schema of its API and version (the same walk broker/protocol/guard.py does
before kio decodes, here recording where each field sits). With the map the mutator can
overwrite an int field, make a string/bytes/array length lie (-1, 0, off by one, 2^31-1,
over-long varints), turn an array or a string null, duplicate or drop array elements (fixing
the count), swap a string for an interesting one, append unknown or lying tagged fields,
replace a records field with a hostile batch, change the API version (keeping the body, or
re-encoding it with kio at that version), or the API key.

All edits work on bytes; the frame's size prefix is written by the sender, except by the
framing mutators, whose inputs go on a connection of their own."""

from __future__ import annotations

import dataclasses
import random
import struct

from broker.protocol import codec
from broker.protocol.apis import SUPPORTED
from broker.protocol.codec import read_uvarint
from broker.protocol.guard import _FIXED, _schema

INTERESTING = {
    1: [0, 1, -1, 0x7F, -128, 2],
    2: [0, 1, -1, 0x7FFF, -0x8000, 0x7FFE, 255, 256, 1000],
    4: [0, 1, -1, 2**31 - 1, -2**31, 2**31 - 2, 0x10000, 1_000_000, 10_000, 100_001, 2**24],
    8: [0, 1, -1, 2**63 - 1, -2**63, 2**62, 2**31, -2, 10**13, 86_400_000 * 365 * 100],
}
_PACK = {1: ">b", 2: ">h", 4: ">i", 8: ">q"}
STRINGS = [
    "", "fuzz-plain", "fuzz-compact", "fuzz-gzip", "fuzz-lat", "__consumer_offsets", "__transaction_state",
    "__cluster_metadata", "..", ".", "a" * 249, "a" * 250, "x" * 32767, "\x00", "ü" * 100, "*", "User:ANONYMOUS",
    "sasl.jaas.config", "ssl.key.password", "cleanup.policy", "compact", "segment.bytes", "-1", "9" * 30,
    "retention.ms", "max.message.bytes", "compression.type", "message.timestamp.type", "LogAppendTime",
    "PLAIN", "SCRAM-SHA-256", "GSSAPI", "fuzz-group-confluent", "consumer", "range", "cooperative-sticky",
]
BAD_UTF8 = [b"\xff\xfe", b"\xc3", b"\xed\xa0\x80", b"\x80" * 8]
UNKNOWN_API_KEYS = [4, 5, 6, 7, 24, 25, 26, 27, 28, 34, 35, 43, 56, 57, 65, 66, 67, 68, 69, 74, 80, 1000, 0x7FFF, -1,
                    -32768]


@dataclasses.dataclass(slots=True)
class Field:
    pos: int  # first byte of the encoded value (of the length prefix, for lengths)
    size: int  # bytes of the value (of the prefix)
    kind: str  # int | len (string/bytes/array length) | tags
    width: int = 0  # int: 1/2/4/8/16; len: 2 (int16), 4 (int32) or 0 (compact uvarint, length + 1)
    what: str = ""  # kafka type, or string | bytes | records | array | tags
    start: int = 0  # content (after the prefix)
    end: int = 0
    elems: tuple[tuple[int, int], ...] = ()


class _MapWalker:
    def __init__(self, buf: bytes, pos: int):
        self.buf, self.pos, self.out = buf, pos, []

    def need(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.buf):
            raise ValueError("truncated")

    def uvarint(self) -> int:
        v, self.pos = read_uvarint(self.buf, self.pos)
        return v

    def length(self, flexible: bool, wide: bool) -> tuple[int, int, int]:
        start = self.pos
        if flexible:
            return self.uvarint() - 1, start, 0
        w = 4 if wide else 2
        self.need(w)
        self.pos += w
        return struct.unpack_from(">i" if wide else ">h", self.buf, start)[0], start, w

    def value(self, kt, entity, flexible: bool) -> None:
        if kt in _FIXED:
            n = _FIXED[kt]
            self.need(n)
            self.out.append(Field(self.pos, n, "int", n, kt))
            self.pos += n
        elif kt in ("string", "bytes", "records"):
            n, start, w = self.length(flexible, kt != "string")
            hdr = self.pos - start
            if n > 0:
                self.need(n)
                self.pos += n
            self.out.append(Field(start, hdr, "len", w, kt, start + hdr, self.pos))
        elif entity is not None:
            self.entity(entity)
        else:
            raise ValueError(f"unknown field type {kt}")

    def entity(self, cls) -> None:
        fields, flexible = _schema(cls)
        for f in fields:
            if f.tagged:
                continue
            if f.array:
                n, start, w = self.length(flexible, True)
                if n > len(self.buf) - self.pos:
                    raise ValueError("array too long")
                field = Field(start, self.pos - start, "len", w, "array", self.pos)
                self.out.append(field)
                elems = []
                for _ in range(max(n, 0)):
                    s = self.pos
                    self.value(f.kafka_type, f.entity, flexible)
                    elems.append((s, self.pos))
                field.end, field.elems = self.pos, tuple(elems)
            else:
                self.value(f.kafka_type, f.entity, flexible)
        if flexible:
            start = self.pos
            for _ in range(self.uvarint()):
                self.uvarint()
                n = self.uvarint()
                self.need(n)
                self.pos += n
            self.out.append(Field(start, 1, "tags", 0, "tags", start, self.pos))


def field_map(frame: bytes) -> list[Field] | None:
    """Every field of a well-formed request frame, header included; None when the frame does
    not parse with the schema its header names."""
    try:
        hdr = codec.parse_request_header(frame)
        fields = [Field(0, 2, "int", 2, "api_key"), Field(2, 2, "int", 2, "api_version"),
                  Field(8, 2, "len", 2, "client_id", 10, 10 + max(0, struct.unpack_from(">h", frame, 8)[0]))]
        w = _MapWalker(frame, hdr.size)
        w.entity(codec.request_type(hdr.api_key, hdr.api_version))
        if w.pos != len(frame):
            return None
        return fields + w.out
    except Exception:  # noqa: BLE001 - unknown API/version, or bytes that are not a request
        return None


def _uvarint(n: int) -> bytes:
    out = bytearray()
    n &= 0xFFFFFFFFFFFFFFFF
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_length(f: Field, n: int) -> bytes:
    if f.width == 2:
        return struct.pack(">h", max(-0x8000, min(0x7FFF, n)))
    if f.width == 4:
        return struct.pack(">i", max(-2**31, min(2**31 - 1, n)))
    return _uvarint(max(n + 1, 0))


def splice(frame: bytes, start: int, end: int, repl: bytes) -> bytes:
    return frame[:start] + repl + frame[end:]


# --- structure-aware edits: (frame, field, rng, ctx) -> frame ----------------------------------

def _lie_length(rng: random.Random, f: Field) -> int:
    n = f.end - f.start if f.what != "array" else len(f.elems)
    return rng.choice([-1, -2, 0, n + 1, n - 1, n * 2 + 7, 2**31 - 1, 2**15 - 1, 2**31 - 2, 0x7FFFFFFE,
                       rng.randint(-2**31, 2**31 - 1)])


def edit_int(frame: bytes, f: Field, rng: random.Random) -> bytes:
    if f.width not in _PACK:
        return splice(frame, f.pos, f.pos + f.size, bytes(rng.choice([0, 255]) for _ in range(f.size)))
    v = rng.choice(INTERESTING[f.width]) if rng.random() < 0.85 else rng.randint(
        -(1 << (8 * f.width - 1)), (1 << (8 * f.width - 1)) - 1)
    return splice(frame, f.pos, f.pos + f.size, struct.pack(_PACK[f.width], v))


def edit_length(frame: bytes, f: Field, rng: random.Random) -> bytes:
    if f.width == 0 and rng.random() < 0.25:  # varints no decoder should accept
        raw = rng.choice([b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\xff\xff\x01", b"\x80" * 10 + b"\x00",
                          b"\x80"])
        return splice(frame, f.pos, f.pos + f.size, raw)
    return splice(frame, f.pos, f.pos + f.size, encode_length(f, _lie_length(rng, f)))


def edit_null(frame: bytes, f: Field, rng: random.Random) -> bytes:
    """A proper null (length -1, content gone): null arrays and strings where none is allowed."""
    return splice(frame, f.pos, f.end, encode_length(f, -1))


def edit_array(frame: bytes, f: Field, rng: random.Random) -> bytes:
    elems = list(f.elems)
    op = rng.choice(["dup", "dup", "drop", "empty", "many", "shuffle"])
    body = [frame[s:e] for s, e in elems]
    if op == "dup" and body:
        i = rng.randrange(len(body))
        body[i:i] = [body[i]] * rng.randint(1, 3)
    elif op == "drop" and body:
        body.pop(rng.randrange(len(body)))
    elif op == "empty":
        body = []
    elif op == "many" and body:
        one = rng.choice(body)
        body = body + [one] * max(1, min(rng.choice([100, 1000, 10_000]), 200_000 // max(1, len(one))))
    elif op == "shuffle":
        rng.shuffle(body)
    return splice(frame, f.pos, f.end, encode_length(f, len(body)) + b"".join(body))


def edit_string(frame: bytes, f: Field, rng: random.Random) -> bytes:
    if rng.random() < 0.15:
        s = rng.choice(BAD_UTF8)
    else:
        s = rng.choice(STRINGS).encode()
    if f.width == 2 and len(s) > 0x7FFF:
        s = s[:0x7FFF]
    return splice(frame, f.pos, f.end, encode_length(f, len(s)) + s)


def edit_tags(frame: bytes, f: Field, rng: random.Random) -> bytes:
    """Tagged fields: unknown tags, a size that runs past the end, huge tag numbers, duplicates."""
    op = rng.choice(["unknown", "size-lie", "count-lie", "huge-tag", "dup"])
    if op == "count-lie":
        return splice(frame, f.start, f.end, _uvarint(rng.choice([1, 200, 2**31])) + frame[f.start + 1:f.end])
    data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 8)))
    tag = {"unknown": rng.randint(0, 40), "huge-tag": 2**31 + rng.randint(0, 9), "size-lie": 1,
           "dup": 0}[op] if op != "huge-tag" else 2**31 + 1
    size = len(data) if op != "size-lie" else rng.choice([1 << 20, 2**31, len(data) + 5])
    one = _uvarint(tag) + _uvarint(size) + data
    n = 2 if op == "dup" else 1
    return splice(frame, f.start, f.end, _uvarint(n) + one * n)


def edit_records(frame: bytes, f: Field, rng: random.Random, hostile_batch: bytes) -> bytes:
    return splice(frame, f.pos, f.end, encode_length(f, len(hostile_batch)) + hostile_batch)


def span(f: Field) -> tuple[int, int]:
    """The bytes an edit of ``f`` may rewrite."""
    return (f.pos, f.end) if f.kind in ("len", "tags") and f.end else (f.pos, f.pos + f.size)


def structural(frame: bytes, fmap: list[Field], rng: random.Random, hostile_batch=None, edits: int = 1) -> tuple[bytes, str]:
    """``edits`` structure-aware edits of fields whose spans do not overlap, applied from the
    end of the frame backwards so each edit leaves the positions of the next one valid;
    returns (frame, what was done)."""
    chosen: list[Field] = []
    for _ in range(edits * 4):
        f = rng.choice(fmap)
        s, e = span(f)
        if all(e <= span(c)[0] or s >= span(c)[1] for c in chosen):
            chosen.append(f)
        if len(chosen) == edits:
            break
    done = []
    for f in sorted(chosen, key=lambda f: -f.pos):
        frame, what = _edit(frame, f, rng, hostile_batch)
        done.append(what)
    return frame, "; ".join(reversed(done))


def _edit(frame: bytes, f: Field, rng: random.Random, hostile_batch) -> tuple[bytes, str]:
    if f.kind == "int":
        return edit_int(frame, f, rng), f"int:{f.what}@{f.pos}"
    if f.kind == "tags":
        return edit_tags(frame, f, rng), f"tags@{f.pos}"
    r = rng.random()
    if f.what == "records" and hostile_batch is not None and r < 0.7:
        return edit_records(frame, f, rng, hostile_batch()), f"records@{f.pos}"
    if r < 0.35:
        return edit_length(frame, f, rng), f"len:{f.what}@{f.pos}"
    if r < 0.5:
        return edit_null(frame, f, rng), f"null:{f.what}@{f.pos}"
    if f.what == "array":
        return edit_array(frame, f, rng), f"array@{f.pos}"
    if f.what in ("string", "client_id"):
        return edit_string(frame, f, rng), f"string@{f.pos}"
    return edit_length(frame, f, rng), f"len:{f.what}@{f.pos}"


# --- header edits -----------------------------------------------------------------------------

def set_version(frame: bytes, version: int) -> bytes:
    return frame[:2] + struct.pack(">h", version) + frame[4:]


def header_edit(frame: bytes, rng: random.Random) -> tuple[bytes, str]:
    key, ver = struct.unpack_from(">hh", frame)
    lo, hi = SUPPORTED.get(key, (0, 0))
    op = rng.choice(["other-version", "unsupported-version", "unknown-key", "other-key", "transcode", "transcode",
                     "client-id"])
    if op == "other-version":
        v = rng.randint(lo, hi)
        return set_version(frame, v), f"version->{v}"
    if op == "unsupported-version":
        v = rng.choice([lo - 1, hi + 1, hi + 2, 0x7FFF, -1, 0]) if lo > 0 else rng.choice([hi + 1, 0x7FFF, -1])
        return set_version(frame, v), f"unsupported-version->{v}"
    if op == "unknown-key":
        k = rng.choice(UNKNOWN_API_KEYS)
        return struct.pack(">h", k) + frame[2:], f"api-key->{k}"
    if op == "other-key":
        k = rng.choice(sorted(SUPPORTED))
        v = rng.randint(*SUPPORTED[k])
        return struct.pack(">hh", k, v) + frame[4:], f"api-key->{k}v{v}"
    if op == "client-id":
        n = rng.choice([-2, -1, 0x7FFF, len(frame)])
        return frame[:8] + struct.pack(">h", n) + frame[10:], f"client-id-len->{n}"
    v = rng.randint(lo, hi)
    out = transcode(frame, v)
    return (out, f"transcode->{v}") if out is not None else (set_version(frame, v), f"version->{v}")


def transcode(frame: bytes, version: int) -> bytes | None:
    """The request re-encoded by kio at another version (a valid request of that version)."""
    from bench.fuzz.frames import header
    try:
        hdr = codec.parse_request_header(frame)
        req = codec.decode_request(hdr.api_key, hdr.api_version, frame, hdr.size)
        body = codec.encode(codec.build(codec.request_type(hdr.api_key, version), codec.to_dict(req)))
        return header(hdr.api_key, version, hdr.correlation_id, hdr.client_id) + body
    except Exception:  # noqa: BLE001
        return None


# --- byte-level havoc --------------------------------------------------------------------------

def havoc(frame: bytes, rng: random.Random, other: bytes | None = None, keep_header: int = 8) -> tuple[bytes, str]:
    """1-4 random byte edits, mostly after the first ``keep_header`` bytes."""
    b = bytearray(frame)
    done = []
    for _ in range(rng.choice([1, 1, 2, 3, 4])):
        lo = keep_header if len(b) > keep_header and rng.random() < 0.9 else 0
        if len(b) <= lo:
            b += bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
            continue
        p = rng.randrange(lo, len(b))
        op = rng.choice(["flip", "byte", "int16", "int32", "insert", "delete", "dup", "splice", "truncate"])
        if op == "flip":
            b[p] ^= 1 << rng.randrange(8)
        elif op == "byte":
            b[p] = rng.choice([0, 0xFF, 0x7F, 0x80, 1, rng.randrange(256)])
        elif op in ("int16", "int32"):
            w = 2 if op == "int16" else 4
            v = struct.pack(_PACK[w], rng.choice(INTERESTING[w]))
            b[p:p + w] = v
        elif op == "insert":
            b[p:p] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif op == "delete":
            del b[p:p + rng.randint(1, 16)]
        elif op == "dup":
            e = min(len(b), p + rng.randint(1, 64))
            b[p:p] = b[p:e]
        elif op == "splice" and other:
            q = rng.randrange(len(other))
            b[p:] = other[q:]
        elif op == "truncate":
            del b[p:]
        done.append(op)
    return bytes(b), "havoc:" + ",".join(done)


# --- framing (the bytes on the wire, size prefix included) -------------------------------------

def framing(frame: bytes, rng: random.Random) -> tuple[bytes, str]:
    op = rng.choice(["size-huge", "size-big", "size-short", "size-negative", "size-zero", "tiny-frames",
                     "garbage", "split-header", "no-prefix"])
    if op == "size-huge":
        n = rng.choice([100 * 1024 * 1024, 2**31 - 1, 512 * 1024 + 1, 100 * 1024 * 1024 - 1])
        return struct.pack(">i", n) + frame[:rng.randint(0, len(frame))], f"framing:size={n}"
    if op == "size-big":
        n = len(frame) + rng.randint(1, 4096)
        return struct.pack(">i", n) + frame, f"framing:size=+{n - len(frame)}"
    if op == "size-short":
        n = rng.randint(0, max(0, len(frame) - 1))
        return struct.pack(">i", n) + frame, f"framing:size={n}<{len(frame)}"
    if op == "size-negative":
        return struct.pack(">i", rng.choice([-1, -2**31, -4])) + frame, "framing:negative"
    if op == "size-zero":
        return struct.pack(">i", 0) * rng.randint(1, 5) + struct.pack(">i", len(frame)) + frame, "framing:zero"
    if op == "tiny-frames":
        return b"".join(struct.pack(">i", n) + frame[:n] for n in range(0, 11)), "framing:tiny"
    if op == "garbage":
        return bytes(rng.randrange(256) for _ in range(rng.randint(1, 64))), "framing:garbage"
    if op == "split-header":
        return struct.pack(">i", len(frame))[:rng.randint(1, 3)], "framing:partial-prefix"
    return frame, "framing:no-prefix"
