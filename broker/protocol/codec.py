"""Framing, request/response headers, and the generated (kio) codec for every API that is
not on a hot path.

Request header (v1 classic, v2 flexible):
    api_key int16 | api_version int16 | correlation_id int32 | client_id nullable string (int16 len)
    [v2: tagged fields (uvarint count, then uvarint tag, uvarint size, bytes)]
Response header: v0 = correlation_id int32; v1 = v0 + tagged fields (empty: one 0x00 byte).

Handlers are written once for all versions: they return nested ``dict``s, and
``build_response`` fills the kio dataclass of the requested version from them. It is strict,
so that a misspelt or forgotten field is an error (UNKNOWN_SERVER_ERROR and a logged
traceback) rather than a zero-filled success: a key no version of the message has is
rejected (``eror_code``), and so is a field of this version that the dict lacks unless the
message spec gives it a default or it is nullable (absent = null). Keys of other versions of
the same message are dropped: that is how one handler serves every version.
``build_request`` is the same for requests (krafty's own clients).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import logging
import struct
import typing
import uuid
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import OutOfBoundValue

from broker.protocol import legacy_schema
from broker.protocol.apis import ApiKey, is_flexible  # noqa: F401 (re-exported)
from common.errors import ErrorCode

log = logging.getLogger("krafty.protocol")

_HDR = struct.Struct(">hhih")
_I32 = struct.Struct(">i")


class FramingError(Exception):
    """The byte stream cannot be parsed as Kafka requests: the connection must close."""


@dataclasses.dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    size: int  # bytes of the header, the body starts here


def read_uvarint(buf, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise FramingError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 35:
            raise FramingError("varint too long")


def parse_request_header(buf) -> RequestHeader:
    if len(buf) < 10:
        raise FramingError(f"request of {len(buf)} bytes is shorter than a request header")
    api_key, api_version, correlation_id, clen = _HDR.unpack_from(buf, 0)
    pos = 10
    client_id = None
    if clen >= 0:
        if pos + clen > len(buf):
            raise FramingError("client_id runs past the end of the request")
        client_id = bytes(buf[pos:pos + clen]).decode("utf-8", "replace")
        pos += clen
    elif clen != -1:
        raise FramingError("negative client_id length")
    if is_flexible(api_key, api_version):
        n, pos = read_uvarint(buf, pos)
        for _ in range(n):
            _tag, pos = read_uvarint(buf, pos)
            size, pos = read_uvarint(buf, pos)
            pos += size
        if pos > len(buf):
            raise FramingError("header tagged fields run past the end of the request")
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def response_header(api_key: int, api_version: int, correlation_id: int) -> bytes:
    if api_key != ApiKey.API_VERSIONS and is_flexible(api_key, api_version):
        return _I32.pack(correlation_id) + b"\x00"
    return _I32.pack(correlation_id)


def frame(header: bytes, body: bytes) -> bytes:
    return _I32.pack(len(header) + len(body)) + header + body


# --- generated codec -----------------------------------------------------------------

@functools.cache
def request_type(api_key: int, version: int):
    if legacy_schema.has(api_key, version):  # a classic version Kafka 4 removed (KIP-896)
        return _plain_timestamps(legacy_schema.legacy_type(api_key, version, False))
    return _plain_timestamps(load_request_schema(api_key, version))


@functools.cache
def response_type(api_key: int, version: int):
    if legacy_schema.has(api_key, version):
        return _plain_timestamps(legacy_schema.legacy_type(api_key, version, True))
    return _plain_timestamps(load_response_schema(api_key, version))


_CLASS_VARS = ("__type__", "__version__", "__flexible__", "__api_key__", "__header_schema__")


@functools.cache
def _plain_timestamps(cls):
    """``cls``, or a copy whose non-nullable timestamps (kio's datetime_i64) are plain int64
    milliseconds: kio refuses to read a negative one, and Kafka sends -1 for "none" (e.g.
    DescribeTransactions' TransactionStartTimeMs of a transactional id with no transaction)."""
    hints = typing.get_type_hints(cls)
    out, changed = [], False
    for f in dataclasses.fields(cls):
        tp, md = hints[f.name], dict(f.metadata)
        if md.get("kafka_type") == "datetime_i64" and _unwrap(tp)[1] is False:
            tp, md["kafka_type"], changed = int, "int64", True
        elif typing.get_origin(tp) is tuple and dataclasses.is_dataclass(inner := typing.get_args(tp)[0]):
            if (plain := _plain_timestamps(inner)) is not inner:
                tp, changed = tuple[plain, ...], True
        elif dataclasses.is_dataclass(tp) and (plain := _plain_timestamps(tp)) is not tp:
            tp, changed = plain, True
        kw: dict[str, Any] = {"metadata": md}
        if f.default is not dataclasses.MISSING:
            kw["default"] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            kw["default_factory"] = f.default_factory
        out.append((f.name, tp, dataclasses.field(**kw)))
    if not changed:
        return cls
    ns = {k: getattr(cls, k) for k in _CLASS_VARS if hasattr(cls, k)}
    new = dataclasses.make_dataclass(cls.__name__, out, frozen=True, slots=True, kw_only=True, namespace=ns)
    new.__annotations__.update(dict.fromkeys(ns, typing.ClassVar))
    return new


@functools.cache
def _reader(cls):
    return entity_reader(cls)


@functools.cache
def _writer(cls):
    return entity_writer(cls)


def decode_request(api_key: int, version: int, buf, offset: int):
    from broker.protocol.guard import check_bounds

    cls = request_type(api_key, version)
    check_bounds(cls, buf, offset)
    obj, size = _reader(cls)(buf, offset)
    return obj


def encode(obj) -> bytes:
    out = io.BytesIO()
    _writer(type(obj))(out, obj)
    return out.getvalue()


LEGACY_STRING_MAX = 32767  # a classic (non-flexible) version's strings have an int16 length


def encode_response(api_key: int, version: int, obj) -> bytes:
    """``encode`` a response, which must not cost the client its connection. A classic
    version's strings have an int16 length, and an error message that echoes client input (a
    name of 32,767 bytes with words around it) would not fit: Kafka's messages are short, and
    its generated writers refuse a longer string ("field is too long to be serialized"), after
    which the request gets its error response. Here an error message is cut to fit (it is for
    people; it ends in "..."); a response whose other strings do not fit (an id stored through a
    flexible version and listed through a classic one) is answered as Kafka answers a request
    whose response it cannot write: UNKNOWN_SERVER_ERROR, with a warning naming the API."""
    try:
        return encode(obj)
    except OutOfBoundValue:
        if is_flexible(api_key, version):
            raise
    try:
        return encode(_fit_messages(obj))
    except OutOfBoundValue as e:
        name = ApiKey(api_key).name if api_key in ApiKey._value2member_map_ else str(api_key)
        log.warning("cannot write a %s v%d response: %s; answering UNKNOWN_SERVER_ERROR (a client of a flexible "
                    "version of this API gets the whole answer)", name, version, e)
        return encode(error_response(api_key, version, ErrorCode.UNKNOWN_SERVER_ERROR))


def _fit_messages(obj):
    """``obj`` with every error message longer than a classic string can be cut to fit."""
    changes = {}
    for f in _fields(type(obj)):
        v = getattr(obj, f.name)
        if v is None:
            continue
        if f.kind == "entity":
            new = _fit_messages(v)
        elif f.kind == "entities":
            new = tuple(_fit_messages(x) for x in v)
        elif f.name.endswith("error_message") and isinstance(v, str) and len(v) > LEGACY_STRING_MAX // 4:
            b = v.encode()
            new = v if len(b) <= LEGACY_STRING_MAX else b[:LEGACY_STRING_MAX - 3].decode("utf-8", "ignore") + "..."
        else:
            continue
        if new != v:
            changes[f.name] = new
    return dataclasses.replace(obj, **changes) if changes else obj


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    name: str
    kind: str  # scalar | entity | entities
    sub: Any  # nested entity class for entity/entities
    kafka_type: str | None
    nullable: bool
    default: Any  # dataclasses.MISSING when required


def _unwrap(tp) -> tuple[Any, bool]:
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, __import__("types").UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0], True
    return tp, False


@functools.cache
def _fields(cls) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        tp, nullable = _unwrap(hints[f.name])
        kind, sub = "scalar", None
        if typing.get_origin(tp) is tuple:
            inner = typing.get_args(tp)[0]
            if dataclasses.is_dataclass(inner):
                kind, sub = "entities", inner
        elif dataclasses.is_dataclass(tp):
            kind, sub = "entity", tp
        default = f.default
        if default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        out.append(_Field(f.name, kind, sub, f.metadata.get("kafka_type"), nullable, default))
    return tuple(out)


_ZERO = {
    "bool": False, "int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint16": 0, "float64": 0.0,
    "string": "", "bytes": b"", "records": b"", "uuid": uuid.UUID(int=0),
    "timedelta_i32": datetime.timedelta(0), "timedelta_i64": datetime.timedelta(0),
    "error_code": KioErrorCode.none,
}


def _convert(f: _Field, v: Any) -> Any:
    kt = f.kafka_type
    if v is None:
        return None
    if kt == "error_code":
        return KioErrorCode(int(v))
    if kt in ("timedelta_i32", "timedelta_i64") and not isinstance(v, datetime.timedelta):
        return datetime.timedelta(milliseconds=v)
    if kt == "datetime_i64" and not isinstance(v, datetime.datetime):
        return datetime.datetime.fromtimestamp(v / 1000, tz=datetime.UTC) if v >= 0 else None
    return v


class MessageBuildError(ValueError):
    """A handler's dict does not fit the message: an unknown or a missing field (a bug)."""


class Known(dict):
    """Field names of every version of a message, by nesting: name -> the same for its
    entities; ``nullable``: the names that are nullable in some version."""

    def __init__(self) -> None:
        super().__init__()
        self.nullable: set[str] = set()


def _known_of(cls, into: Known) -> None:
    for f in _fields(cls):
        sub = into.get(f.name)
        if sub is None:
            sub = into[f.name] = Known()
        if f.nullable:
            into.nullable.add(f.name)
        if f.sub is not None:
            _known_of(f.sub, sub)


@functools.cache
def _known(api_key: int, response: bool) -> Known:
    """The union over every version kio knows of the message's field names."""
    out = Known()
    load = response_type if response else request_type
    for v in range(0, 64):
        try:
            cls = load(api_key, v)
        except Exception:  # noqa: BLE001 - a version neither kio nor legacy_schema has
            continue
        _known_of(cls, out)
    return out


_CONVERTED = {"error_code", "timedelta_i32", "timedelta_i64", "datetime_i64"}  # what _convert changes


def build(cls, data: dict, known: Known | None = None, path: str = "") -> Any:
    """Instantiate kio dataclass ``cls`` from a dict; see the module docstring. Lenient without
    ``known`` (absent fields zero-filled, unknown keys dropped: for tests that build odd
    messages on purpose); strict with ``known``, the field names of every version."""
    if known is not None:
        for k in data:
            if k not in known:
                unknown = [k for k in data if k not in known]
                raise MessageBuildError(f"{cls.__qualname__}: no version has field(s) {unknown} (at {path or 'top'})")
    kwargs = {}
    for f in _fields(cls):
        name = f.name
        if name in data:
            v = data[name]
            kind = f.kind
            if kind == "scalar":
                if v is not None and f.kafka_type in _CONVERTED:
                    v = _convert(f, v)
            elif v is not None:
                sub_known = known.get(name) if known is not None else None
                where = f"{path}.{name}" if path else name
                if kind == "entities":
                    sub = f.sub
                    v = tuple(x if isinstance(x, sub) else build(sub, x, sub_known, where) for x in v)
                elif not isinstance(v, f.sub):
                    v = build(f.sub, v, sub_known, where)
            if v is None and not f.nullable:
                # null in a version where the field is not nullable: its default, if the field
                # is nullable in another version (e.g. JoinGroup's protocol_name is "" before v7)
                if known is not None and f.default is dataclasses.MISSING and name not in known.nullable:
                    raise MessageBuildError(f"{cls.__qualname__}: field {f'{path}.{name}' if path else name} "
                                            f"is not nullable")
                v = f.default if f.default is not dataclasses.MISSING else _ZERO.get(f.kafka_type)
            kwargs[name] = v
        elif f.default is not dataclasses.MISSING:
            continue
        elif f.nullable:
            kwargs[name] = None
        elif known is not None:
            raise MessageBuildError(f"{cls.__qualname__}: field {f'{path}.{name}' if path else name} is missing")
        elif f.kind == "entities":
            kwargs[name] = ()
        elif f.kind == "entity":
            kwargs[name] = build(f.sub, {})
        else:
            kwargs[name] = _ZERO[f.kafka_type]
    return cls(**kwargs)


def build_response(api_key: int, version: int, data: dict) -> Any:
    """The response of ``version`` from a handler's dict, strictly (see the module docstring)."""
    return build(response_type(api_key, version), data, _known(api_key, True))


def build_request(api_key: int, version: int, data: dict) -> Any:
    """The request of ``version`` from a dict, strictly (see the module docstring)."""
    return build(request_type(api_key, version), data, _known(api_key, False))


def to_dict(obj) -> Any:
    """A kio entity as nested dicts/lists (the inverse of ``build``)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple):
        return [to_dict(x) for x in obj]
    if isinstance(obj, datetime.timedelta):
        return int(obj.total_seconds() * 1000)
    return obj


def error_response(api_key: int, version: int, code: int) -> Any:
    """A response for a request we cannot serve, with ``code`` in the top-level error field
    where the response has one; every other field zero (deliberately lenient, as Kafka's
    getErrorResponse)."""
    cls = response_type(api_key, version)
    data: dict[str, Any] = {}
    if any(f.name == "error_code" for f in _fields(cls)):
        data["error_code"] = code
    return build(cls, data)
