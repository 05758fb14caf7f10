"""Structured fuzzing: well-formed requests with arbitrary field values, for every API and
version we serve. The broker must answer each with a response of that version that
decodes, never with UNKNOWN_SERVER_ERROR (which would mean a handler crashed)."""

from __future__ import annotations

import asyncio
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.protocol import codec
from broker.protocol.apis import SUPPORTED, ApiKey
from common.errors import ErrorCode
from tests.protocol.conftest import RawClient

CASES = [(k, v) for k, (lo, hi) in sorted(SUPPORTED.items()) for v in sorted({lo, (lo + hi) // 2, hi})]


def _errors(obj):
    import dataclasses
    if dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if f.name == "error_code":
                yield int(v)
            else:
                yield from _errors(v)
    elif isinstance(obj, tuple):
        for x in obj:
            yield from _errors(x)


@pytest.mark.parametrize("api,version", CASES, ids=[f"{ApiKey(k).name}-v{v}" for k, v in CASES])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(data=st.data())
async def test_well_formed_requests_get_well_formed_answers(node, api, version, data):
    if api == ApiKey.PRODUCE:
        pytest.skip("produce bodies are covered by test_bad_input's batch tests (records are opaque here)")
    req = data.draw(st.from_type(codec.request_type(api, version)))
    c = await RawClient.connect(node.port)
    try:
        if api == ApiKey.FETCH:  # keep the broker from parking the request for max_wait
            import dataclasses
            import datetime
            req = dataclasses.replace(req, max_wait=datetime.timedelta(milliseconds=0))
        raw = await c.request(api, version, codec.encode(req))
        body = 5 if api != ApiKey.API_VERSIONS and codec.is_flexible(api, version) else 4
        assert struct.unpack_from(">i", raw)[0] == c.cid
        resp, size = codec._reader(codec.response_type(api, version))(raw, body)
        assert body + size == len(raw)
        assert ErrorCode.UNKNOWN_SERVER_ERROR not in set(_errors(resp)), resp
    finally:
        c.close()
        await asyncio.sleep(0)
