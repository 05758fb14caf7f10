"""Message types of the classic versions Kafka 4 removed (KIP-896) and kio therefore lacks:
Produce v0-2, Fetch v0-3, ListOffsets v0, OffsetCommit v0-1, OffsetFetch v0, CreateTopics v0-1,
DeleteTopics v0, OffsetForLeaderEpoch v0-1, WriteTxnMarkers v0, the ACL APIs v0,
DescribeConfigs v0, AlterReplicaLogDirs v0 and DescribeLogDirs v0 (Kafka 3.9 served them).

They are built from Kafka 3.9's message specs (``legacy_specs/*.json``, copied unchanged from
apache/kafka 3.9.0, Apache-2.0) as frozen dataclasses in kio's own form, so kio's reader and
writer, ``codec.build_response`` and the bounds check (``guard.py``) work on them unchanged, and a
handler reads the same attribute names in every version: a field the oldest kio version of the
message also has keeps kio's name, type and default (e.g. ``MaxWaitMs`` is kio's ``max_wait``, a
timedelta); a field only old versions have (``MaxNumOffsets``, ``OldStyleOffsets``,
``CommitTimestamp``) is named in snake case with a plain type.

Every version here is a classic (non-flexible) one: no tagged fields, int16/int32 lengths.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import typing
from pathlib import Path
from typing import Any, ClassVar

from kio.index import load_request_schema, load_response_schema
from kio.static.constants import EntityType
from kio.static.primitive import Records, f64, i8, i16, i32, i64, u16

SPEC_DIR = Path(__file__).with_name("legacy_specs")

# api key -> (spec name, the oldest version kio has: the template for names and types)
APIS: dict[int, tuple[str, int]] = {
    0: ("Produce", 3), 1: ("Fetch", 4), 2: ("ListOffsets", 1), 8: ("OffsetCommit", 2), 9: ("OffsetFetch", 1),
    19: ("CreateTopics", 2), 20: ("DeleteTopics", 1), 23: ("OffsetForLeaderEpoch", 2), 27: ("WriteTxnMarkers", 1),
    29: ("DescribeAcls", 1), 30: ("CreateAcls", 1), 31: ("DeleteAcls", 1), 32: ("DescribeConfigs", 1),
    34: ("AlterReplicaLogDirs", 1), 35: ("DescribeLogDirs", 1),
}

_KAFKA_TYPES = {"bool": "bool", "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
                "uint16": "uint16", "float64": "float64", "string": "string", "bytes": "bytes",
                "records": "records", "uuid": "uuid"}
_PY_TYPES: dict[str, Any] = {"bool": bool, "int8": i8, "int16": i16, "int32": i32, "int64": i64, "uint16": u16,
                             "float64": f64, "string": str, "bytes": bytes, "records": Records,
                             "uuid": __import__("uuid").UUID}


class UnknownLegacyVersion(LookupError):
    """No message of this API and version, neither in kio nor here."""


def has(api_key: int, version: int) -> bool:
    entry = APIS.get(api_key)
    return entry is not None and 0 <= version < entry[1] and version in _valid(entry[0])


@functools.cache
def _valid(name: str) -> range:
    lo, _, hi = _spec(name + "Request")["validVersions"].partition("-")
    return range(int(lo), int(hi or lo) + 1)


@functools.cache
def _spec(name: str) -> dict:
    text = (SPEC_DIR / f"{name}.json").read_text()
    return json.loads(re.sub(r"^\s*//.*$", "", text, flags=re.M))


def _in(versions: str | None, v: int) -> bool:
    if not versions or versions == "none":
        return False
    if versions.endswith("+"):
        return v >= int(versions[:-1])
    lo, _, hi = versions.partition("-")
    return int(lo) <= v <= int(hi or lo)


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def _unwrap(tp) -> tuple[Any, bool]:
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, __import__("types").UnionType) and type(None) in args:
        return next(a for a in args if a is not type(None)), True
    return tp, False


def _default(jf: dict, kafka_type: str | None) -> Any:
    d = jf.get("default")
    if d is None:
        return dataclasses.MISSING
    if d == "null":
        return None
    if kafka_type in ("int8", "int16", "int32", "int64", "uint16"):
        return int(d, 0)
    if kafka_type == "bool":
        return d == "true"
    if kafka_type == "string":
        return d
    return dataclasses.MISSING


@functools.cache
def legacy_type(api_key: int, version: int, response: bool):
    """The request (or response) dataclass of ``api_key`` at a classic ``version`` kio lacks."""
    if not has(api_key, version):
        raise UnknownLegacyVersion(f"no legacy schema for api {api_key} v{version}")
    name, kio_min = APIS[api_key]
    spec = _spec(name + ("Response" if response else "Request"))
    template = (load_response_schema if response else load_request_schema)(api_key, kio_min)
    ns = {"__type__": EntityType.response if response else EntityType.request, "__version__": version,
          "__flexible__": False, "__api_key__": api_key, "__header_schema__": template.__header_schema__}
    return _entity(spec["name"], spec["fields"], version, template, ns)


def _entity(name: str, fields: list[dict], version: int, template, ns: dict):
    t_fields = {f.name: f for f in dataclasses.fields(template)} if template is not None else {}
    hints = typing.get_type_hints(template) if template is not None else {}
    out = []
    for jf in fields:
        if not _in(jf.get("versions"), version) or _in(jf.get("taggedVersions"), version):
            continue
        snake = _snake(jf["name"])
        kio_name = next((n for n in (snake, snake.removesuffix("_ms")) if n in t_fields), None)
        jt = jf["type"]
        nullable = _in(jf.get("nullableVersions"), version)
        md: dict[str, Any] = {}
        default: Any = dataclasses.MISSING
        if jt.startswith("[]"):
            inner = jt[2:]
            if "fields" in jf:  # an array of structs
                sub_template = None
                if kio_name is not None:
                    sub_template = typing.get_args(_unwrap(hints[kio_name])[0])[0]
                sub = _entity(inner, jf["fields"], version, sub_template, {**ns, "__type__": EntityType.nested})
                tp = tuple[sub, ...]
            else:
                tp = tuple[_PY_TYPES[inner], ...]
                md["kafka_type"] = _KAFKA_TYPES[inner]
        elif "fields" in jf:  # a struct
            sub_template = _unwrap(hints[kio_name])[0] if kio_name is not None else None
            tp = _entity(jt, jf["fields"], version, sub_template, {**ns, "__type__": EntityType.nested})
        elif kio_name is not None:
            tf = t_fields[kio_name]
            tp = _unwrap(hints[kio_name])[0]
            md = dict(tf.metadata)
            if tf.default is not dataclasses.MISSING:
                default = tf.default
        else:
            tp = _PY_TYPES[jt]
            md["kafka_type"] = "error_code" if jt == "int16" and snake.endswith("error_code") else _KAFKA_TYPES[jt]
            default = _default(jf, md["kafka_type"])
        if nullable:
            tp = tp | None
        if default is dataclasses.MISSING and not nullable and kio_name is None:
            default = _default(jf, md.get("kafka_type"))
        kw: dict[str, Any] = {"metadata": md}
        if default is not dataclasses.MISSING:
            kw["default"] = default
        out.append((kio_name or snake, tp, dataclasses.field(**kw)))
    cls = dataclasses.make_dataclass(name, out, frozen=True, slots=True, kw_only=True, namespace=dict(ns))
    cls.__annotations__.update(dict.fromkeys(ns, ClassVar))
    return cls
