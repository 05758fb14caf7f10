"""The hand-written Fetch request and response codecs (broker/apis/wire.py) against the generated
codec (kio, from Kafka's message specs), every version the broker serves: what the generated
codec writes, the hand-written one reads the same; what the fetchers write is byte for byte
what the generated codec writes; and a body cut short anywhere is a FramingError."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.static.primitive import Records

from broker.apis import wire
from broker.protocol import codec
from broker.protocol.apis import SUPPORTED, ApiKey

st.register_type_strategy(Records, st.binary(max_size=40).map(Records))

LO, HI = SUPPORTED[ApiKey.FETCH]
VERSIONS = range(LO, HI + 1)
ZERO = uuid.UUID(int=0)


def _uid(u):
    return None if u is None or u == ZERO else u


def _expected_request(k, version: int) -> dict:
    """What parse_fetch must give for the generated codec's object ``k``."""
    ids = version >= 13
    rs = getattr(k, "replica_state", None)
    return {
        "replica_id": int(rs.replica_id) if version >= 15 else int(k.replica_id),
        "replica_epoch": int(rs.replica_epoch) if version >= 15 else -1,
        "max_wait_ms": round(k.max_wait.total_seconds() * 1000), "min_bytes": int(k.min_bytes),
        "max_bytes": int(getattr(k, "max_bytes", 0x7FFFFFFF)), "isolation_level": int(getattr(k, "isolation_level", 0)),
        "session_id": int(getattr(k, "session_id", 0)), "session_epoch": int(getattr(k, "session_epoch", -1)),
        "topics": [(_uid(t.topic_id) if ids else t.topic, [
            (int(p.partition), int(getattr(p, "current_leader_epoch", -1)), int(p.fetch_offset),
             int(getattr(p, "last_fetched_epoch", -1)), int(getattr(p, "log_start_offset", -1)),
             int(p.partition_max_bytes), getattr(p, "replica_directory_id", None)) for p in t.partitions])
            for t in k.topics],
        "forgotten": [(_uid(f.topic_id) if ids else f.topic, [int(x) for x in f.partitions])
                      for f in getattr(k, "forgotten_topics_data", ())],
        "rack_id": getattr(k, "rack_id", ""), "cluster_id": getattr(k, "cluster_id", None),
    }


def _got_request(r: wire.FetchRequest, version: int) -> dict:
    ids = version >= 13
    return {
        "replica_id": r.replica_id, "replica_epoch": r.replica_epoch, "max_wait_ms": r.max_wait_ms,
        "min_bytes": r.min_bytes, "max_bytes": r.max_bytes, "isolation_level": r.isolation_level,
        "session_id": r.session_id, "session_epoch": r.session_epoch,
        "topics": [(_uid(t.topic_id) if ids else t.topic, [
            (p.partition, p.current_leader_epoch, p.fetch_offset, p.last_fetched_epoch, p.log_start_offset,
             p.partition_max_bytes, p.replica_directory_id) for p in t.partitions]) for t in r.topics],
        "forgotten": [(_uid(f.topic_id) if ids else f.topic, f.partitions) for f in r.forgotten_topics_data],
        "rack_id": r.rack_id, "cluster_id": r.cluster_id,
    }


def _ours(k, version: int) -> wire.FetchRequest:
    """The generated codec's request as the fetchers build theirs."""
    e = _expected_request(k, version)
    ids = version >= 13
    req = wire.FetchRequest(e["max_wait_ms"], e["min_bytes"], [], e["replica_id"], e["replica_epoch"], e["max_bytes"],
                            e["isolation_level"], e["session_id"], e["session_epoch"], [], e["rack_id"], e["cluster_id"])
    for t in k.topics:
        req.topics.append(wire.FetchTopicRequest("" if ids else t.topic, t.topic_id if ids else None, [
            wire.FetchPartitionRequest(p.partition, p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch,
                                       p.last_fetched_epoch, p.log_start_offset,
                                       getattr(p, "replica_directory_id", None)) for p in t.partitions]))
    for f in k.forgotten_topics_data:
        req.forgotten_topics_data.append(wire.ForgottenTopic("" if ids else f.topic, f.topic_id if ids else None,
                                                             list(f.partitions)))
    return req


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_request_the_generated_codec_writes_parses_the_same(version, data):
    k = data.draw(st.from_type(codec.request_type(ApiKey.FETCH, version)))
    body = codec.encode(k)
    assert _got_request(wire.parse_fetch(body, version), version) == _expected_request(k, version)
    if version >= 12:  # what followers send: byte for byte the generated codec's
        assert wire.encode_fetch_request(version, _ours(k, version)) == body


def _expected_response(k, version: int):
    ids = version >= 13
    throttle = getattr(k, "throttle_time", None)
    out = (round(throttle.total_seconds() * 1000) if throttle is not None else 0, int(getattr(k, "error_code", 0)),
           int(getattr(k, "session_id", 0)), [])
    for t in k.responses:
        parts = []
        for p in t.partitions:
            div = getattr(p, "diverging_epoch", None)
            cur = getattr(p, "current_leader", None)
            parts.append((int(p.partition_index), int(p.error_code), int(p.high_watermark),
                          int(getattr(p, "last_stable_offset", -1)),
                          int(getattr(p, "log_start_offset", -1)),
                          None if getattr(p, "aborted_transactions", None) is None else
                          [(int(a.producer_id), int(a.first_offset)) for a in p.aborted_transactions],
                          int(getattr(p, "preferred_read_replica", -1)),
                          None if p.records is None else bytes(p.records),
                          None if div is None or (div.epoch, div.end_offset) == (-1, -1) else (div.epoch, div.end_offset),
                          None if cur is None or (cur.leader_id, cur.leader_epoch) == (-1, -1) else
                          (cur.leader_id, cur.leader_epoch)))
        out[3].append((_uid(t.topic_id) if ids else t.topic, parts))
    return out


def _got_response(r: wire.FetchResponse, version: int):
    ids = version >= 13
    return (r.throttle_ms, r.error, r.session_id, [
        (_uid(tid) if ids else name, [(p.index, p.error, p.high_watermark, p.last_stable_offset, p.log_start_offset,
                                       p.aborted, p.preferred_read_replica, p.records, p.diverging_epoch,
                                       p.current_leader) for p in parts])
        for name, tid, parts in r.topics])


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_response_the_generated_codec_writes_parses_the_same(version, data):
    k = data.draw(st.from_type(codec.response_type(ApiKey.FETCH, version)))
    assert _got_response(wire.parse_fetch_response(codec.encode(k), version), version) == _expected_response(k, version)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_broker_s_response_parses_back(version):
    tid = uuid.uuid4()
    parts = [wire.FetchPartitionResult(0, 0, 10, 9, 1, b"abc", aborted=[(7, 3)]),
             wire.FetchPartitionResult(1, 6, -1, -1, -1, None, current_leader=(3, 5), diverging_epoch=(4, 100))]
    body = b"".join(wire.encode_fetch_response(version, [("t", tid, parts)], session_id=77, throttle_ms=5))
    r = wire.parse_fetch_response(body, version)
    assert (r.throttle_ms if version >= 1 else 5, r.session_id if version >= 7 else 77) == (5, 77)
    name, got_tid, got = r.topics[0]
    assert (got_tid if version >= 13 else name) == (tid if version >= 13 else "t")
    assert [(p.index, p.error, p.high_watermark, p.records) for p in got] == [(0, 0, 10, b"abc"), (1, 6, -1, b"")]  # (no records: written empty)
    if version >= 12:
        assert (got[1].current_leader, got[1].diverging_epoch) == ((3, 5), (4, 100))


@pytest.mark.parametrize("version", VERSIONS)
def test_a_request_cut_short_anywhere_is_a_framing_error(version):
    ids = version >= 13
    req = wire.FetchRequest(500, 1, [wire.FetchTopicRequest("" if ids else "topic", uuid.uuid4() if ids else None,
                                                            [wire.FetchPartitionRequest(0, 5, 1000, 3, 2, 0)])],
                            replica_id=4, replica_epoch=9, session_id=3, session_epoch=1,
                            forgotten_topics_data=[wire.ForgottenTopic("" if ids else "old", uuid.uuid4() if ids else None,
                                                                       [1, 2])], rack_id="r1", cluster_id="c")
    k = codec.build_request(ApiKey.FETCH, version, {
        "replica_id": 4, "max_wait": 500, "min_bytes": 1, "max_bytes": 0x7FFFFFFF, "isolation_level": 0,
        "session_id": 3, "session_epoch": 1, "rack_id": "r1", "cluster_id": "c",
        "replica_state": {"replica_id": 4, "replica_epoch": 9},
        "topics": [{"topic": t.topic, "topic_id": t.topic_id, "partitions": [{
            "partition": 0, "current_leader_epoch": 3, "fetch_offset": 5, "last_fetched_epoch": 2,
            "log_start_offset": 0, "partition_max_bytes": 1000}]} for t in req.topics],
        "forgotten_topics_data": [{"topic": f.topic, "topic_id": f.topic_id, "partitions": [1, 2]}
                                  for f in req.forgotten_topics_data]})
    body = codec.encode(k)
    wire.parse_fetch(body, version)
    for cut in range(len(body)):
        with pytest.raises(codec.FramingError):
            wire.parse_fetch(body[:cut], version)


def test_hostile_array_lengths_are_framing_errors():
    for body in (b"\x00\x00\x00\x04" + b"\x00" * 13 + b"\x7f\xff\xff\xff",  # v4: 2^31-1 topics in 21 bytes
                 b"\x00\x00\x00\x04" + b"\x00" * 13 + b"\xff\xff\xff\xff"):  # null topics
        with pytest.raises(codec.FramingError):
            wire.parse_fetch(body, 4)
