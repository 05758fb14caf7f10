"""Null arrays in requests, for every API and version served and every array of its request
(top level and one level down): where the schema does not allow null, the request does not
parse and the connection closes, as Kafka's generated readers make it ("non-nullable field
... was serialized as null"; SocketServer closes the connection on a request that fails to
parse); where it does allow null (Metadata topics, OffsetFetch topics, ...), the handler
answers with Kafka's meaning of null. Never a handler traceback."""

from __future__ import annotations

import dataclasses
import logging
import struct
import typing

import pytest

from broker.protocol import codec
from broker.protocol.apis import SUPPORTED, ApiKey
from broker.protocol.guard import check_bounds
from tests.protocol.conftest import RawClient

# answered by the SASL layer on SASL listeners only; on PLAINTEXT they are refused as in Kafka
_SKIP = {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}


def _arrays(cls) -> list[tuple[str, bool, type | None]]:
    """(field, nullable, element entity or None) of every array field of ``cls``."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if "tag" in f.metadata:
            continue
        tp, nullable = codec._unwrap(hints[f.name])
        if typing.get_origin(tp) is tuple:
            inner = typing.get_args(tp)[0]
            out.append((f.name, nullable, inner if dataclasses.is_dataclass(inner) else None))
    return out


def null_cases():
    """(id, api key, version, request with one array null, nullable?)"""
    for key, (lo, hi) in sorted(SUPPORTED.items()):
        if key in _SKIP:
            continue
        for ver in range(lo, hi + 1):
            cls = codec.request_type(key, ver)
            base = codec.build(cls, {})
            for name, nullable, entity in _arrays(cls):
                yield f"{ApiKey(key).name}-v{ver}-{name}", key, ver, dataclasses.replace(base, **{name: None}), nullable
                if entity is None:
                    continue
                one = codec.build(entity, {})
                for sub, sub_nullable, _ in _arrays(entity):
                    req = dataclasses.replace(base, **{name: (dataclasses.replace(one, **{sub: None}),)})
                    yield f"{ApiKey(key).name}-v{ver}-{name}[].{sub}", key, ver, req, sub_nullable


CASES = list(null_cases())


def test_every_non_nullable_null_array_fails_to_decode():
    """The decoding layer, for each case: the guard refuses exactly the non-nullable ones."""
    for _id, key, ver, req, nullable in CASES:
        body = codec.encode(req)
        if nullable:
            check_bounds(codec.request_type(key, ver), body)
            codec.decode_request(key, ver, body, 0)
        else:
            with pytest.raises(codec.FramingError, match="non-nullable field .* was serialized as null"):
                codec.decode_request(key, ver, body, 0)
    assert sum(1 for c in CASES if not c[4]) > 100 and sum(1 for c in CASES if c[4]) >= 10


async def test_null_arrays_over_the_wire(node, caplog):
    caplog.set_level(logging.INFO)
    for case_id, key, ver, req, nullable in CASES:
        c = await RawClient.connect(node.port)
        try:
            if nullable:
                raw = await c.request(key, ver, codec.encode(req))
                assert struct.unpack_from(">i", raw)[0] == c.cid, case_id
            else:
                c.cid += 1
                flex = codec.is_flexible(key, ver)
                hdr = struct.pack(">hhih", key, ver, c.cid, 4) + b"test" + (b"\x00" if flex else b"")
                body = codec.encode(req)
                await c.send_raw(struct.pack(">i", len(hdr) + len(body)) + hdr + body)
                assert await c.closed(timeout=5), case_id
        finally:
            c.close()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors][:5]
    probe = await RawClient.connect(node.port)
    raw = await probe.request(18, 0, b"")
    assert struct.unpack_from(">ih", raw) == (probe.cid, 0)
    probe.close()
