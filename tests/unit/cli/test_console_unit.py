"""The console tools' pure parts: Kafka's murmur2, LineMessageReader, DefaultMessageFormatter,
the range assignor, and read_committed's filtering of aborted transactions."""

from __future__ import annotations

import pytest

from broker.log.batch import Record, build_batch, build_end_txn_marker
from krafty.admin_tool import ToolError, UsageError
from krafty.console_consumer import Formatter, deserialize, range_assign, records_of
from krafty.console_producer import LineReader, murmur2, partition_for_key


@pytest.mark.parametrize("key, h", [  # Kafka's UtilsTest.testMurmur2
    ("21", -973932308), ("foobar", -790332482), ("a-little-bit-long-string", -985981536),
    ("a-little-bit-longer-string", -1486304829), ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    ("abc", 479470107)])
def test_murmur2_is_kafkas(key, h):
    assert murmur2(key.encode()) == h
    assert partition_for_key(key.encode(), 7) == (h & 0x7FFFFFFF) % 7


def test_line_reader_keys_headers_and_null_marker():
    r = LineReader({"parse.key": "true", "parse.headers": "true", "null.marker": "<null>"})
    assert r.read("a:1,b:<null>\tk\tv") == (b"k", b"v", [("a", b"1"), ("b", None)])
    assert r.read("<null>\t<null>\tv\tw") == (None, b"v\tw", [])
    with pytest.raises(ToolError, match="No header key separator found in pair 'x' on line number 3"):
        r.read("x\tk\tv")
    with pytest.raises(ToolError, match="No key separator found on line number 1: 'novalue'"):
        LineReader({"parse.key": "true"}).read("novalue")
    assert LineReader({"parse.key": "true", "ignore.error": "true"}).read("novalue") == (None, b"novalue", [])
    assert LineReader({}).read("a\tb") == (None, b"a\tb", [])
    with pytest.raises(UsageError):
        LineReader({"parse.headers": "true", "headers.delimiter": ",", "headers.separator": ","})


def test_default_formatter_columns_in_kafkas_order():
    rec = Record(7, 1000, b"k", b"v", [("h1", b"x"), ("h2", None)])
    f = Formatter("default", {"print.timestamp": "true", "print.key": "true", "print.offset": "true",
                              "print.partition": "true", "print.headers": "true"})
    assert f.format("t", 3, rec, 0) == b"CreateTime:1000\tPartition:3\tOffset:7\th1:x,h2:null\tk\tv\n"
    assert f.format("t", 3, rec, 1).startswith(b"LogAppendTime:1000\t")
    assert Formatter("default", {}).format("t", 0, Record(0, 1, None, None, []), 0) == b"null\n"
    assert Formatter("default", {"print.value": "false", "print.key": "true"}).format("t", 0, rec, 0) == b"k\n"
    assert Formatter("noop", {}).format("t", 0, rec, 0) == b""


def test_deserializers():
    assert deserialize("org.apache.kafka.common.serialization.LongDeserializer", (42).to_bytes(8, "big")) == b"42"
    assert deserialize("IntegerDeserializer", (-1).to_bytes(4, "big", signed=True)) == b"-1"
    with pytest.raises(ValueError):
        deserialize("LongDeserializer", b"abc")


def test_range_assignor_is_kafkas():
    got = range_assign({"c1": ["t1", "t2"], "c0": ["t1", "t2"]}, {"t1": 3, "t2": 3})
    assert got == {"c0": [("t1", 0), ("t1", 1), ("t2", 0), ("t2", 1)], "c1": [("t1", 2), ("t2", 2)]}
    assert range_assign({"a": ["t"], "b": ["u"]}, {"t": 2, "u": 1}) == {"a": [("t", 0), ("t", 1)], "b": [("u", 0)]}


def test_read_committed_skips_aborted_batches_and_markers():
    def batch(offset, pid, value, txn=True):
        return bytes(build_batch([Record(offset, 1, None, value, [])], producer_id=pid, producer_epoch=0,
                                 base_sequence=0, transactional=txn))

    def marker(offset, pid, commit):
        m = bytearray(build_end_txn_marker(pid, 0, commit, 0, 1))
        m[0:8] = offset.to_bytes(8, "big")
        return bytes(m)
    raw = (batch(0, 5, b"aborted") + batch(1, 6, b"committed") + marker(2, 5, False) + marker(3, 6, True)
           + batch(4, 5, b"later", txn=False))
    committed = [r.value for r, _ in records_of(raw, [(0, 5)], read_committed=True)]
    assert committed == [b"committed", b"later"]
    assert [r.value for r, _ in records_of(raw, [(0, 5)], read_committed=False)] == [b"aborted", b"committed",
                                                                                    b"later"]
