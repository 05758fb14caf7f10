"""__consumer_offsets record formats, checked against byte layouts written out by hand
from Kafka's specs (group-coordinator/src/main/resources/common/message/*.json), and the
group -> partition mapping against Java's String.hashCode."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.group import records as rec


def s16(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def b32(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


def cstr(s: str | None) -> bytes:  # compact (flexible) string: uvarint(len + 1)
    if s is None:
        return b"\x00"
    b = s.encode()
    assert len(b) + 1 < 128
    return bytes([len(b) + 1]) + b


@pytest.mark.parametrize("s,h", [("", 0), ("a", 97), ("hello", 99162322), ("polygenelubricants", -(2**31)),
                                 ("\U0001F600", 31 * 0xD83D + 0xDE00), ("console-consumer-12345", None)])
def test_java_string_hashcode(s, h):
    # reference: h = s[0]*31^(n-1) + ... over UTF-16 code units, wrapped to int32
    units = s.encode("utf-16-be")
    ref = 0
    for i in range(0, len(units), 2):
        ref = (ref * 31 + int.from_bytes(units[i:i + 2], "big")) % 2**32
    ref = ref - 2**32 if ref >= 2**31 else ref
    assert rec.java_string_hashcode(s) == ref
    if h is not None:
        assert ref == h


def test_partition_for_matches_kafka_utils_abs():
    # Utils.abs(Integer.MIN_VALUE) == 0 in Kafka, so this famous string maps to partition 0
    assert rec.partition_for("polygenelubricants", 50) == 0
    assert rec.partition_for("hello", 50) == 99162322 % 50
    assert rec.partition_for("my-group", 50) == abs(rec.java_string_hashcode("my-group")) % 50


def test_offset_commit_key_is_version_1_group_topic_partition():
    assert rec.offset_commit_key("g", "t", 3) == struct.pack(">h", 1) + s16("g") + s16("t") + struct.pack(">i", 3)
    assert rec.decode_key(struct.pack(">h", 0) + s16("g") + s16("t") + struct.pack(">i", 3)) == rec.OffsetKey(
        "g", "t", 3)


def test_group_metadata_key_is_version_2_group():
    assert rec.group_metadata_key("grp") == b"\x00\x02" + s16("grp")
    assert rec.decode_key(b"\x00\x02" + s16("grp")) == rec.GroupKey("grp")


def test_offset_commit_value_v3_layout_and_v1_with_expire_timestamp():
    v = rec.OffsetValue(42, 7, "meta", 1_700_000_000_000)
    raw = rec.offset_commit_value(v)
    assert raw == (struct.pack(">hqi", 3, 42, 7) + s16("meta") + struct.pack(">q", 1_700_000_000_000))
    assert rec.decode_offset_value(raw) == v
    v1 = rec.OffsetValue(5, -1, "", 10, 99)
    raw1 = rec.offset_commit_value(v1)
    assert raw1 == struct.pack(">hq", 1, 5) + s16("") + struct.pack(">qq", 10, 99)
    assert rec.decode_offset_value(raw1) == v1


def test_offset_commit_value_v0_and_flexible_v4_decode():
    v0 = struct.pack(">hq", 0, 9) + s16("m") + struct.pack(">q", 77)
    assert rec.decode_offset_value(v0) == rec.OffsetValue(9, -1, "m", 77)
    v4 = struct.pack(">hqi", 4, 9, 2) + cstr("m") + struct.pack(">q", 77) + b"\x01\x05\x02xy"  # one tagged field
    assert rec.decode_offset_value(v4) == rec.OffsetValue(9, 2, "m", 77)


def _member_v3(mid, inst, cid, host, rebalance, session, sub, asg):
    return (s16(mid) + s16(inst) + s16(cid) + s16(host) + struct.pack(">ii", rebalance, session) + b32(sub)
            + b32(asg))


def test_group_metadata_value_v3_layout():
    m = rec.MemberValue("m-1", "inst", "client", "/127.0.0.1", 300000, 45000, b"\x00\x01sub", b"asg")
    v = rec.GroupValue("consumer", 5, "range", "m-1", 1234, (m,))
    raw = rec.group_metadata_value(v)
    expected = (struct.pack(">h", 3) + s16("consumer") + struct.pack(">i", 5) + s16("range") + s16("m-1")
                + struct.pack(">qi", 1234, 1)
                + _member_v3("m-1", "inst", "client", "/127.0.0.1", 300000, 45000, b"\x00\x01sub", b"asg"))
    assert raw == expected
    assert rec.decode_group_value(raw) == v


def test_empty_group_value_has_null_protocol_and_leader():
    v = rec.GroupValue("consumer", 3, None, None, 55, ())
    raw = rec.group_metadata_value(v)
    assert raw == struct.pack(">h", 3) + s16("consumer") + struct.pack(">i", 3) + s16(None) + s16(None) + struct.pack(
        ">qi", 55, 0)
    assert rec.decode_group_value(raw) == v


def test_group_metadata_value_v0_v1_v2_decode():
    m0 = s16("m") + s16("c") + s16("h") + struct.pack(">i", 10000) + b32(b"s") + b32(b"a")
    v0 = struct.pack(">h", 0) + s16("consumer") + struct.pack(">i", 1) + s16("range") + s16("m") + struct.pack(
        ">i", 1) + m0
    g0 = rec.decode_group_value(v0)
    assert g0.members[0] == rec.MemberValue("m", None, "c", "h", 10000, 10000, b"s", b"a")
    assert g0.current_state_timestamp == -1
    m1 = s16("m") + s16("c") + s16("h") + struct.pack(">ii", 20000, 10000) + b32(b"s") + b32(b"a")
    v2 = struct.pack(">h", 2) + s16("consumer") + struct.pack(">i", 1) + s16("range") + s16("m") + struct.pack(
        ">qi", 99, 1) + m1
    g2 = rec.decode_group_value(v2)
    assert g2.members[0] == rec.MemberValue("m", None, "c", "h", 20000, 10000, b"s", b"a")
    assert g2.current_state_timestamp == 99


def test_group_metadata_value_flexible_v4_decode():
    member = (cstr("m") + cstr(None) + cstr("c") + cstr("h") + struct.pack(">ii", 20000, 10000) + bytes([2]) + b"s"
              + bytes([2]) + b"a" + b"\x00")
    raw = (struct.pack(">h", 4) + cstr("consumer") + struct.pack(">i", 4) + cstr("range") + cstr("m")
           + struct.pack(">q", 5) + bytes([2]) + member + b"\x00")
    g = rec.decode_group_value(raw)
    assert g == rec.GroupValue("consumer", 4, "range", "m", 5,
                               (rec.MemberValue("m", None, "c", "h", 20000, 10000, b"s", b"a"),))


@pytest.mark.parametrize("raw", [b"", b"\x00", b"\x00\x09abc", b"\x00\x01\x00\x05ab"])
def test_garbage_keys_raise_record_format_error(raw):
    with pytest.raises(rec.RecordFormatError):
        rec.decode_key(raw)


text = st.text(max_size=20)


@given(group=text, topic=text, partition=st.integers(-2**31, 2**31 - 1), offset=st.integers(-2**63, 2**63 - 1),
       epoch=st.integers(-2**31, 2**31 - 1), meta=text, ts=st.integers(0, 2**62))
def test_offset_records_round_trip(group, topic, partition, offset, epoch, meta, ts):
    assert rec.decode_key(rec.offset_commit_key(group, topic, partition)) == rec.OffsetKey(group, topic, partition)
    v = rec.OffsetValue(offset, epoch, meta, ts)
    assert rec.decode_offset_value(rec.offset_commit_value(v)) == v


@given(st.builds(rec.GroupValue, text, st.integers(0, 2**31 - 1), st.none() | text, st.none() | text,
                 st.integers(-1, 2**62),
                 st.lists(st.builds(rec.MemberValue, text, st.none() | text, text, text, st.integers(0, 2**31 - 1),
                                    st.integers(0, 2**31 - 1), st.binary(max_size=30), st.binary(max_size=30)),
                          max_size=4).map(tuple)))
def test_group_records_round_trip(v):
    assert rec.decode_group_value(rec.group_metadata_value(v)) == v


def test_subscribed_topics_of_consumer_protocol_subscription():
    sub = struct.pack(">hi", 1, 2) + s16("a") + s16("b") + b32(b"userdata")
    assert rec.subscribed_topics(sub) == {"a", "b"}
    assert rec.subscribed_topics(b"\x00") is None
