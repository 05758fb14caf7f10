"""Request framing for the fuzzer: build request frames, rewrite their correlation ids, and
tell what a response looks like. The request header layout is in broker/protocol/codec.py."""

from __future__ import annotations

import struct

from broker.protocol import codec
from broker.protocol.apis import ApiKey

_HDR = struct.Struct(">hhi")
I32 = struct.Struct(">i")


def header(api_key: int, version: int, correlation_id: int, client_id: str | None = "krafty-fuzz") -> bytes:
    cid = b"\xff\xff" if client_id is None else struct.pack(">h", len(client_id)) + client_id.encode()
    tags = b"\x00" if codec.is_flexible(api_key, version) else b""
    return _HDR.pack(api_key, version, correlation_id) + cid + tags


def request(api_key: int, version: int, data: dict, correlation_id: int = 1) -> bytes:
    """A well-formed request frame (no size prefix) from a dict of the kio fields."""
    body = codec.encode(codec.build(codec.request_type(api_key, version), data))
    return header(api_key, version, correlation_id) + body


def with_cid(frame: bytes | bytearray, correlation_id: int) -> bytes:
    """``frame`` with its correlation id replaced (frames shorter than a header are left alone)."""
    if len(frame) < 8:
        return bytes(frame)
    return bytes(frame[:4]) + I32.pack(correlation_id) + bytes(frame[8:])


def sized(frame: bytes) -> bytes:
    return I32.pack(len(frame)) + frame


def api_of(frame: bytes) -> tuple[int, int]:
    """(api_key, api_version) a frame claims; (-1, -1) when it is too short to say."""
    if len(frame) < 4:
        return -1, -1
    k, v = struct.unpack_from(">hh", frame)
    return k, v


def api_name(key: int) -> str:
    try:
        return ApiKey(key).name
    except ValueError:
        return f"api{key}"
