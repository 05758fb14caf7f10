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
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        tp, nullable = _unwrap(hints[f.name])
        array = typing.get_origin(tp) is tuple
        inner = typing.get_args(tp)[0] if array else tp
        entity = inner if dataclasses.is_dataclass(inner) else None
        out.append(_F(f.name, f.metadata.get("kafka_type"), array, nullable, entity, "tag" in f.metadata))
    return tuple(out), bool(getattr(cls, "__flexible__", False))


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

    def value(self, f: _F, flexible: bool) -> None:
        kt = f.kafka_type
        if kt in _FIXED:
            self.take(_FIXED[kt])
        elif kt == "string":
            n = self.length(flexible, False)
            if n > 0:
                self.take(n)
        elif kt in ("bytes", "records"):
            n = self.length(flexible, True)
            if n > 0:
                self.take(n)
        elif f.entity is not None:
            if f.nullable:  # a nullable struct (e.g. DescribeTopicPartitions' cursor): int8 -1 null, 1 present
                self.take(1)
                if self.buf[self.pos - 1] == 0xFF:
                    return
            self.entity(f.entity)
        else:
            raise FramingError(f"unknown field type {kt}")

    def entity(self, cls) -> None:
        fields, flexible = _schema(cls)
        for f in fields:
            if f.tagged:
                continue
            if f.array:
                n = self.length(flexible, True)
                if n < 0 and not f.nullable:
                    raise FramingError(f"non-nullable field {f.name} was serialized as null")
                if n > self.end - self.pos:  # every element takes at least one byte
                    raise FramingError(f"array of {n} elements in {self.end - self.pos} bytes")
                one = dataclasses.replace(f, array=False, nullable=False)  # the array is nullable, not its elements
                for _ in range(max(n, 0)):
                    self.value(one, flexible)
            else:
                self.value(f, flexible)
        if flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self.take(self.uvarint())


def check_bounds(cls, buf, offset: int = 0) -> None:
    _Walker(buf, offset).entity(cls)
