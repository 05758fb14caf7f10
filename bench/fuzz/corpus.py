"""The fuzzer's seed corpus: request frames recorded from real clients (bench/fuzz/record.py).

File layout (gzip-compressed), all integers big-endian::

    b"KFZCORP1"
    entry*:  source_len u8 | source utf-8 | listener u8 (0 plain, 1 sasl) | conn u32 |
             api_key i16 | api_version i16 | frame_len u32 | frame

``frame`` is one request as it went over the wire, without its 4-byte size prefix (request
header + body); ``api_key`` -1 marks a bare SASL token (after SaslHandshake v0). ``conn``
numbers the recorded connection, so the frames of one connection (e.g. a SASL login) can be
replayed in their order.
"""

from __future__ import annotations

import dataclasses
import gzip
import struct
from collections import defaultdict
from pathlib import Path

MAGIC = b"KFZCORP1"
DEFAULT_PATH = Path(__file__).with_name("corpus.bin.gz")
LISTENERS = ("plain", "sasl")
_ENTRY = struct.Struct(">BIhhI")


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    source: str  # confluent-kafka | kafka-python | aiokafka | kcat | raw | transcoded
    listener: str  # plain | sasl
    conn: int
    api_key: int
    api_version: int
    frame: bytes


def save(entries: list[Entry], path: Path = DEFAULT_PATH) -> None:
    out = bytearray(MAGIC)
    for e in entries:
        src = e.source.encode()
        out += struct.pack(">B", len(src)) + src
        out += _ENTRY.pack(LISTENERS.index(e.listener), e.conn, e.api_key, e.api_version, len(e.frame))
        out += e.frame
    # mtime=0: the same entries always give the same file
    Path(path).write_bytes(gzip.compress(bytes(out), compresslevel=9, mtime=0))


def load(path: Path = DEFAULT_PATH) -> list[Entry]:
    data = gzip.decompress(Path(path).read_bytes())
    if not data.startswith(MAGIC):
        raise ValueError(f"{path} is not a fuzzer corpus (bad magic)")
    pos, out = len(MAGIC), []
    while pos < len(data):
        n = data[pos]
        source = data[pos + 1:pos + 1 + n].decode()
        pos += 1 + n
        listener, conn, key, ver, size = _ENTRY.unpack_from(data, pos)
        pos += _ENTRY.size
        out.append(Entry(source, LISTENERS[listener], conn, key, ver, bytes(data[pos:pos + size])))
        pos += size
    return out


def by_api(entries: list[Entry]) -> dict[tuple[int, int], list[Entry]]:
    out: dict[tuple[int, int], list[Entry]] = defaultdict(list)
    for e in entries:
        out[(e.api_key, e.api_version)].append(e)
    return dict(out)


def sasl_logins(entries: list[Entry]) -> list[list[Entry]]:
    """The recorded SASL-listener connections, each as its frames in order (a login, then
    whatever the client sent once authenticated)."""
    conns: dict[int, list[Entry]] = defaultdict(list)
    for e in entries:
        if e.listener == "sasl":
            conns[e.conn].append(e)
    return [conns[c] for c in sorted(conns)]
