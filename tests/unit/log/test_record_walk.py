"""The record walker (broker/log/record_walk.py): Kafka's DefaultRecord.readFrom checks on every
record, compiled (_records.pyx) and in Python (the reference). Both must give the same scan or
the same refusal for every input, valid or mutated; each refusal has its own test."""

from __future__ import annotations

import sys
import threading
import time

import pytest
from hostile import varint
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.log import record_walk
from broker.log.record_walk import (
    RecordScan,
    scan_records,
    scan_records_compiled,
    scan_records_py,
    timestamp_deltas,
)
from common.errors import ErrorCode, KafkaError

WALKERS = {"python": scan_records_py, "compiled": scan_records_compiled}


def test_the_compiled_walker_is_built_and_used():
    assert record_walk.WALKER_COMPILED, (
        f"produce would use the {record_walk.WALKER}: `pip install -e .` (make) builds broker/log/_records.pyx "
        "with Cython and a C compiler")
    assert scan_records is scan_records_compiled


def test_without_the_extension_the_python_walker_is_used_and_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "broker.log._records", None)  # as if it were not built
    compiled, why = record_walk._load_compiled()
    assert compiled is None and why.startswith("not built") and "pip install -e ." in why


def test_a_stale_extension_is_not_used(monkeypatch):
    from broker.log import _records
    monkeypatch.setattr(_records, "VERSION", _records.VERSION + 1)
    compiled, why = record_walk._load_compiled()
    assert compiled is None and "rebuild it" in why


def outcome(walker, data, count, keys):
    try:
        return walker(data, count, keys=keys)
    except KafkaError as e:
        return e.code, e.message


# --- building records ----------------------------------------------------------------------

def uvarint_padded(raw: int, pad: int) -> bytes:
    """Unsigned LEB128 of ``raw`` with ``pad`` redundant 0x80 continuation groups (Kafka accepts them)."""
    out = bytearray()
    while True:
        b = raw & 0x7F
        raw >>= 7
        if raw or pad:
            out.append(b | 0x80)
            if not raw:
                pad -= 1
        else:
            out.append(b)
            return bytes(out)


def zz(n: int, bits: int) -> int:
    return ((n << 1) ^ (n >> (bits - 1))) & ((1 << bits) - 1)


def enc32(n: int, pad: int = 0) -> bytes:
    raw = zz(n, 32)
    pad = min(pad, 5 - len(uvarint_padded(raw, 0)))  # an int32 varint has at most 5 bytes
    return uvarint_padded(raw, pad)


def enc64(n: int, pad: int = 0) -> bytes:
    raw = zz(n, 64)
    pad = min(pad, 10 - len(uvarint_padded(raw, 0)))
    return uvarint_padded(raw, pad)


def blob(b: bytes | None) -> bytes:
    return enc32(-1) if b is None else enc32(len(b)) + b


def encode(r: dict, pad: int = 0) -> bytes:
    body = bytes([r["attributes"]]) + enc64(r["ts"], pad) + enc32(r["offset"], pad) + blob(r["key"]) \
        + blob(r["value"]) + enc32(len(r["headers"]), pad)
    for k, v in r["headers"]:
        body += blob(k) + blob(v)
    return enc32(len(body), pad) + body


maybe_bytes = st.one_of(st.none(), st.binary(max_size=40))
records = st.fixed_dictionaries({
    "attributes": st.integers(0, 255),
    "ts": st.one_of(st.integers(-1000, 1000), st.integers(-(2**63), 2**63 - 1)),
    "offset": st.one_of(st.integers(0, 20), st.integers(-(2**31), 2**31 - 1)),
    "key": maybe_bytes,
    "value": st.one_of(maybe_bytes, st.binary(min_size=100, max_size=300)),  # two-byte lengths too
    "headers": st.lists(st.tuples(st.binary(max_size=8), maybe_bytes), max_size=3),
})


@st.composite
def sections(draw):
    rs = draw(st.lists(records, max_size=12))
    pad = draw(st.sampled_from([0, 0, 0, 1, 4]))
    return rs, b"".join(encode(r, pad) for r in rs)


@st.composite
def mutated(draw):
    rs, data = draw(sections())
    data = bytearray(data)
    count = len(rs)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["set", "set", "insert", "delete", "truncate", "count", "varint"]))
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "set" and data:
            data[pos] = draw(st.integers(0, 255))
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=6))
        elif op == "delete" and data:
            del data[pos:pos + draw(st.integers(1, 6))]
        elif op == "truncate":
            del data[pos:]
        elif op == "count":
            count = max(0, count + draw(st.integers(-2, 2)))
        elif op == "varint":  # long varints: the 5- and 10-byte bounds
            data[pos:pos] = b"\xff" * draw(st.integers(3, 11)) + bytes([draw(st.integers(0, 255))])
    return bytes(data), count


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sections(), st.booleans())
def test_walkers_accept_valid_sections_and_report_what_they_hold(sec, keys):
    rs, data = sec
    expected = RecordScan(
        min((r["ts"] for r in rs), default=0), max((r["ts"] for r in rs), default=0),
        all(r["offset"] == i for i, r in enumerate(rs)),
        [i for i, r in enumerate(rs) if r["key"] is None] if keys else [])
    for walker in WALKERS.values():
        assert walker(data, len(rs), keys=keys) == expected
        assert walker(memoryview(bytearray(data)), len(rs), keys=keys) == expected
    assert timestamp_deltas(data, len(rs)) == [r["ts"] for r in rs]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated(), st.booleans())
def test_compiled_and_python_walkers_agree_on_mutated_sections(case, keys):
    data, count = case
    assert outcome(scan_records_compiled, data, count, keys) == outcome(scan_records_py, data, count, keys)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64), st.integers(0, 10), st.booleans())
def test_compiled_and_python_walkers_agree_on_random_bytes(data, count, keys):
    assert outcome(scan_records_compiled, data, count, keys) == outcome(scan_records_py, data, count, keys)


# --- one test per refusal (each on both walkers) ------------------------------------------------

def rec(body: bytes) -> bytes:
    return varint(len(body)) + body


FINE = rec(b"\x00" + varint(0) + varint(0) + varint(-1) + varint(1) + b"v" + varint(0))  # 8 bytes, no key
BIG = rec(b"\x00" + varint(0) + varint(0) + varint(-1) + varint(10) + b"v" * 10 + varint(0))  # 17 bytes


def tail(*fields: bytes) -> bytes:
    """A record 1 whose body is attributes, timestamp 0, offset 1 and then ``fields``."""
    return rec(b"\x00" + varint(0) + varint(1) + b"".join(fields))


REFUSALS = {
    "record length past the section": (
        FINE + varint(100) + b"\x00" * 10, 2, "record 1 of 2 has length 100 with 10 bytes left"),
    "record length -1": (FINE + varint(-1) + b"\x00" * 10, 2, "record 1 of 2 has length -1 with 10 bytes left"),
    "record length below the minimum": (
        FINE + varint(5) + b"\x00" * 5 + FINE, 3, "record 1 of 3 has length 5 with 13 bytes left"),
    "length varint runs past the section": (
        BIG + b"\x80\x80\x80", 2, "record 1 of 2 runs past the end of the records section"),
    "six-byte length varint": (
        FINE + b"\x80" * 5 + b"\x00" + b"\x00" * 8, 2,
        "Found invalid record structure in record 1 of 2: a varint longer than 5 bytes"),
    "eleven-byte timestamp varlong": (
        FINE + rec(b"\x00" + b"\x80" * 10 + b"\x00" + varint(1) + varint(-1) * 2 + varint(0)), 2,
        "Found invalid record structure in record 1 of 2: a varint longer than 10 bytes"),
    "six-byte offset delta": (
        FINE + rec(b"\x00" + varint(0) + b"\x81\x80\x80\x80\x80\x00" + varint(-1) * 2 + varint(0)), 2,
        "Found invalid record structure in record 1 of 2: a varint longer than 5 bytes"),
    "key past the record": (
        FINE + tail(varint(20), b"k", varint(-1), varint(0)), 2,
        "Found invalid record structure in record 1 of 2: its fields run past its length 7"),
    "value past the record": (
        FINE + tail(varint(-1), varint(20), b"v", varint(0)), 2,
        "Found invalid record structure in record 1 of 2: its fields run past its length 7"),
    "header count missing": (
        FINE + rec(b"\x00" + varint(0) + varint(1) + varint(-1) + varint(2) + b"vv"), 2,
        "Found invalid record structure in record 1 of 2: its fields run past its length 7"),
    "negative header count": (
        FINE + tail(varint(-1), varint(-1), varint(-3)), 2,
        "Found invalid number of record headers -3 in record 1 of 2 (0 bytes left in it)"),
    "header count past the record": (
        FINE + tail(varint(-1), varint(-1), varint(5), varint(0), varint(-1)), 2,
        "Found invalid number of record headers 5 in record 1 of 2 (2 bytes left in it)"),
    "negative header key length": (
        FINE + tail(varint(-1), varint(-1), varint(1), varint(-1), varint(-1)), 2,
        "Invalid negative header key size -1 in record 1 of 2"),
    "header key past the record": (
        FINE + tail(varint(-1), varint(-1), varint(1), varint(9), b"h"), 2,
        "Found invalid record structure in record 1 of 2: its fields run past its length 8"),
    "header value past the record": (
        FINE + tail(varint(-1), varint(-1), varint(1), varint(1), b"h", varint(9)), 2,
        "Found invalid record structure in record 1 of 2: its fields run past its length 9"),
    "fields shorter than the record": (
        FINE + tail(varint(-1), varint(-1), varint(0), b"\x00\x00"), 2,
        "Invalid record size: expected to read 8 bytes in record 1 of 2, but instead read 6"),
    "records left after the count": (
        FINE + FINE + FINE, 2, "Incorrect declared batch size, records still remaining after 2 records (8 bytes left)"),
    "fewer records than the count": (
        BIG + BIG, 3, "record 2 of 3 runs past the end of the records section"),
}


@pytest.mark.parametrize("walker", list(WALKERS))
@pytest.mark.parametrize("name", list(REFUSALS))
def test_each_refusal_is_invalid_record_with_its_message(name, walker):
    data, count, message = REFUSALS[name]
    assert outcome(WALKERS[walker], data, count, False) == (ErrorCode.INVALID_RECORD, message)


@pytest.mark.parametrize("walker", list(WALKERS))
def test_count_beyond_what_the_bytes_can_hold_is_refused_before_any_walk(walker):
    code, message = outcome(WALKERS[walker], FINE * 2, 3, False)
    assert code == ErrorCode.INVALID_RECORD and message.startswith("record batch claims 3 records in a records")


@pytest.mark.parametrize("walker", list(WALKERS))
def test_varints_read_as_kafka_reads_them(walker):
    """5-byte varints keep the low 32 bits (Kafka's ByteUtils drops the rest), 10-byte varlongs
    the low 64; redundant continuation bytes are fine; negative key, value and header value
    lengths other than -1 are null too."""
    offset_one = b"\x82\x80\x80\x80\x70"  # raw 0x7_0000_0002: its low 32 bits are zig-zag 1
    ts = b"\x80" * 9 + b"\x7f"  # raw bit 63 only: zig-zag 2^62
    body = b"\x00" + ts + offset_one + varint(-5) + varint(-9) + varint(1) + varint(0) + varint(-7)
    section = FINE + rec(body)
    s = WALKERS[walker](section, 2, keys=True)
    assert s == RecordScan(0, 2**62, True, [0, 1])


def test_the_compiled_walker_lets_other_threads_run_on_large_sections():
    """A large section (over 64 KiB) is walked without the GIL: produce validates large batches in
    a worker thread while the event loop goes on. With a switch interval longer than the test,
    no thread takes the GIL from another: the main thread can only run during the walk if the
    walk released it."""
    n = 4_000_000
    section = rec(b"\x00" + varint(0) + varint(0) + varint(-1) + varint(-1) + varint(0)) * n  # 28 MB
    inside = [False]

    def walk():
        inside[0] = True
        scan_records_compiled(section, n)
        inside[0] = False

    t = threading.Thread(target=walk)
    during = 0
    interval = sys.getswitchinterval()
    sys.setswitchinterval(100)
    try:
        t.start()
        while t.is_alive():
            during += inside[0]
            time.sleep(0)  # hands the GIL over, to the walker at its start
    finally:
        sys.setswitchinterval(interval)
        t.join()
    assert during > 0, "the main thread never ran while the walker walked"
