"""A bounds check run before the native (kio) decoder sees a request body.

kio's native reader preallocates arrays from the length on the wire, so a hostile length
(e.g. 2^31 elements in a 20-byte body) makes it abort the whole process on allocation
failure. ``check_bounds`` walks the same schema in Python without building anything and
raises FramingError unless every length fits in the bytes that remain, and unless every array
the schema does not allow to be null is present: kio would hand handlers a None there, where
Kafka's generated readers fail the request ("non-nullable field ... was serialized as null";
the broker closes the connection, see KafkaApis.decode). Hot paths never come here (Produce is
parsed by hand); the requests that do are small."""

from __future__ import annotations

import dataclasses
import functools
import struct
import typing

from broker.protocol.codec import FramingError, _unwrap, read_uvarint

_FIXED = {"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "uint32": 4,
          "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8, "datetime_i64": 8, "timedelta_i64": 8,
          "uuid": 16}
_i16 = struct.Struct(">h")
_i32 = struct.Struct(">i")


@dataclasses.dataclass(frozen=True, slots=True)
class _F:
    name: str
    kafka_type: str | None
    array: bool
    nullable: bool
    entity: type | None
    tagged: bool


@functools.cache
def _schema(cls) -> tuple[tuple[_F, ...], bool]:
    """The fields of ``cls`` and whether it is flexible (also the fuzzer's map of a request)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        tp, nullable = _unwrap(hints[f.name])
        array = typing.get_origin(tp) is tuple
        inner = typing.get_args(tp)[0] if array else tp
        entity = inner if dataclasses.is_dataclass(inner) else None
        out.append(_F(f.name, f.metadata.get("kafka_type"), array, nullable, entity, "tag" in f.metadata))
    return tuple(out), bool(getattr(cls, "__flexible__", False))


# kinds of a field's value, as the walker reads them
_SKIP, _STRING, _BYTES, _ENTITY, _NULLABLE_ENTITY = range(5)


@functools.cache
def _plan(cls) -> tuple[tuple, bool]:
    """The untagged fields of ``cls`` as (name, kind, fixed size, is an array, nullable, entity),
    and whether the message is flexible: worked out once per class (this check runs before every
    request the generated decoder reads)."""
    fields, flexible = _schema(cls)
    out = []
    for f in fields:
        if f.tagged:
            continue
        name, kt, array, nullable, entity = f.name, f.kafka_type, f.array, f.nullable, f.entity
        if kt in _FIXED:
            kind, size = _SKIP, _FIXED[kt]
        elif kt == "string":
            kind, size = _STRING, 0
        elif kt in ("bytes", "records"):
            kind, size = _BYTES, 0
        elif entity is not None:
            # a nullable struct (e.g. DescribeTopicPartitions' cursor): int8 -1 null, 1 present; an
            # array is nullable, not its elements
            kind, size = (_NULLABLE_ENTITY if nullable and not array else _ENTITY), 0
        else:
            raise FramingError(f"unknown field type {kt}")
        out.append((name, kind, size, array, nullable, entity))
    return tuple(out), flexible


class _Walker:
    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf, pos: int):
        self.buf, self.pos, self.end = buf, pos, len(buf)

    def take(self, n: int) -> None:
        if n < 0 or self.pos + n > self.end:
            raise FramingError("request body ends before its fields do")
        self.pos += n

    def uvarint(self) -> int:
        v, self.pos = read_uvarint(self.buf, self.pos)
        return v

    def length(self, flexible: bool, wide: bool) -> int:
        if flexible:
            return self.uvarint() - 1
        self.take(4 if wide else 2)
        return (_i32 if wide else _i16).unpack_from(self.buf, self.pos - (4 if wide else 2))[0]

    def value(self, kind: int, size: int, entity, flexible: bool) -> None:
        if kind == _SKIP:
            self.take(size)
        elif kind == _STRING or kind == _BYTES:
            n = self.length(flexible, kind == _BYTES)
            if n > 0:
                self.take(n)
        else:
            if kind == _NULLABLE_ENTITY:
                self.take(1)
                if self.buf[self.pos - 1] == 0xFF:
                    return
            self.entity(entity)

    def entity(self, cls) -> None:
        fields, flexible = _plan(cls)
        for name, kind, size, array, nullable, entity in fields:
            if array:
                n = self.length(flexible, True)
                if n < 0 and not nullable:
                    raise FramingError(f"non-nullable field {name} was serialized as null")
                if n > self.end - self.pos:  # every element takes at least one byte
                    raise FramingError(f"array of {n} elements in {self.end - self.pos} bytes")
                if kind == _SKIP:
                    self.take(size * n if n > 0 else 0)
                else:
                    for _ in range(n):
                        self.value(kind, size, entity, flexible)
            elif kind == _SKIP:
                self.take(size)
            else:
                self.value(kind, size, entity, flexible)
        if flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self.take(self.uvarint())


def check_bounds(cls, buf, offset: int = 0) -> None:
    _Walker(buf, offset).entity(cls)
