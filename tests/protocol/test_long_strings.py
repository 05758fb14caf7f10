"""Strings at the limit of a classic (non-flexible) version: a request may carry strings of
32,767 bytes, and an error message that echoes one with words around it does not fit a classic
response string (int16 length). The message is cut to fit; the answer comes and the connection
stays open. A response whose other strings cannot fit (an id stored through a flexible version,
listed through a classic one) is answered UNKNOWN_SERVER_ERROR, as Kafka answers a request whose
response it cannot write."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import typing

from broker.protocol import codec
from broker.protocol.apis import SUPPORTED, ApiKey
from common.errors import ErrorCode
from tests.protocol.conftest import RawClient, start_node

LONG = "q" * codec.LEGACY_STRING_MAX
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
# answered by the SASL layer (SASL listeners); Produce and Fetch strings are names, echoed as they came
_SKIP = {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, ApiKey.PRODUCE, ApiKey.FETCH}


def _strings(cls):
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if "tag" in f.metadata:
            continue
        tp, _ = codec._unwrap(hints[f.name])
        if tp is str:
            yield f.name, None
        elif typing.get_origin(tp) is tuple and dataclasses.is_dataclass(typing.get_args(tp)[0]):
            yield f.name, typing.get_args(tp)[0]


def long_string_cases():
    """(id, api key, version, request) with one string (top level or in a one-element array)
    of 32,767 bytes, for every classic request version served."""
    for key, (lo, hi) in sorted(SUPPORTED.items()):
        if key in _SKIP:
            continue
        for ver in range(lo, hi + 1):
            if codec.is_flexible(key, ver):
                continue
            cls = codec.request_type(key, ver)
            base = codec.build(cls, {})
            for name, entity in _strings(cls):
                if entity is None:
                    yield f"{ApiKey(key).name}-v{ver}-{name}", key, ver, dataclasses.replace(base, **{name: LONG})
                    continue
                one = codec.build(entity, {})
                for sub, sub_entity in _strings(entity):
                    if sub_entity is None:
                        req = dataclasses.replace(base, **{name: (dataclasses.replace(one, **{sub: LONG}),)})
                        yield f"{ApiKey(key).name}-v{ver}-{name}[].{sub}", key, ver, req


async def test_an_error_message_echoing_a_long_name_is_cut_to_fit_a_classic_string(node):
    """DescribeClientQuotas v0 with an unknown entity type of 32,767 bytes: the message that
    names it would be 32,795 bytes (fuzz: the connection closed after an encoder error)."""
    c = await RawClient.connect(node.port)
    try:
        req = codec.build(codec.request_type(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0),
                          {"components": [{"entity_type": LONG, "match_type": 0, "match": None}], "strict": False})
        r = await c.call(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, req)
        assert int(r.error_code) == ErrorCode.INVALID_REQUEST
        assert r.error_message.startswith("unknown quota entity type 'qqq") and r.error_message.endswith("...")
        assert len(r.error_message.encode()) == codec.LEGACY_STRING_MAX
        r = await c.call(ApiKey.API_VERSIONS, 0, codec.build(codec.request_type(ApiKey.API_VERSIONS, 0), {}))
        assert int(r.error_code) == 0  # the same connection goes on
    finally:
        c.w.close()


async def test_every_classic_request_with_a_32767_byte_string_is_answered_without_an_error(node, caplog):
    caplog.set_level(logging.INFO)
    cases = list(long_string_cases())
    assert len(cases) > 40
    for case_id, key, ver, req in cases:
        c = await RawClient.connect(node.port)
        try:
            raw = await c.request(key, ver, codec.encode(req))
            codec._reader(codec.response_type(key, ver))(raw, 4)  # a whole answer of that version
        except Exception as e:  # noqa: BLE001
            raise AssertionError(f"{case_id}: {e!r}") from e
        finally:
            c.w.close()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("krafty")
              and ("unexpected error" in r.getMessage() or "cannot write" in r.getMessage())]
    assert not errors, errors[:5]


async def test_an_acl_too_long_for_a_classic_describe_is_answered_an_error_there_and_listed_by_flexible_versions(
        tmp_path, caplog):
    """CreateAcls v3 (flexible) takes a resource name of 40,000 bytes; DescribeAcls v1 (classic)
    cannot carry it: UNKNOWN_SERVER_ERROR, and the connection goes on."""
    node = await start_node(tmp_path, **{"authorizer.class.name": AUTHORIZER, "super.users": "User:ANONYMOUS"})
    c = await RawClient.connect(node.port)
    try:
        name = "r" * 40_000
        acl = {"resource_type": 2, "resource_name": name, "resource_pattern_type": 3, "principal": "User:x",
               "host": "*", "operation": 3, "permission_type": 3}
        r = await c.call(ApiKey.CREATE_ACLS, 3, codec.build(codec.request_type(ApiKey.CREATE_ACLS, 3),
                                                            {"creations": [acl]}))
        assert [int(x.error_code) for x in r.results] == [0]
        flt = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
               "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}

        async def describe(ver):
            return await c.call(ApiKey.DESCRIBE_ACLS, ver, codec.build(codec.request_type(ApiKey.DESCRIBE_ACLS, ver),
                                                                       flt))
        for _ in range(100):  # the ACL reaches the authorizer through the metadata log
            r = await describe(2)
            if r.resources:
                break
            await asyncio.sleep(0.05)
        assert int(r.error_code) == 0 and [x.resource_name for x in r.resources] == [name]
        with caplog.at_level(logging.WARNING, "krafty.protocol"):
            r = await describe(1)
        assert int(r.error_code) == ErrorCode.UNKNOWN_SERVER_ERROR and r.resources == ()
        assert "cannot write a DESCRIBE_ACLS v1 response" in caplog.text
        r = await describe(2)  # the connection goes on
        assert int(r.error_code) == 0
    finally:
        c.w.close()
        await node.stop()
