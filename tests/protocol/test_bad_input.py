"""Bad and hostile client bytes: each gets a Kafka error or closes only its own connection,
and nothing acknowledged is lost or altered."""

from __future__ import annotations

import struct
import time

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.protocol import codec
from broker.protocol.apis import SUPPORTED
from common.errors import ErrorCode
from tests.protocol.conftest import RawClient


def record_batch(values: list[bytes], *, producer_id: int = -1, base_sequence: int = -1, crc_ok: bool = True) -> bytes:
    """A v2 record batch (uncompressed) built by hand."""
    def varint(n: int) -> bytes:
        n = (n << 1) ^ (n >> 63)
        out = bytearray()
        while n > 0x7F:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)
        return bytes(out)
    recs = b""
    for i, v in enumerate(values):
        body = b"\x00" + varint(0) + varint(i) + varint(-1) + varint(len(v)) + v + varint(0)
        recs += varint(len(body)) + body
    ts = int(time.time() * 1000)
    after_crc = struct.pack(">hiqqqhii", 0, len(values) - 1, ts, ts, producer_id, 0 if producer_id >= 0 else -1,
                            base_sequence, len(values)) + recs
    crc = crc32c.crc32c(after_crc) ^ (0 if crc_ok else 1)
    after_len = struct.pack(">ibI", 0, 2, crc) + after_crc
    return struct.pack(">qi", 0, len(after_len)) + after_len


def produce_body(topic: str, partition: int, records: bytes, acks: int = -1) -> bytes:
    t = topic.encode()
    return (struct.pack(">h", -1) + struct.pack(">hi", acks, 5000) + struct.pack(">i", 1) + struct.pack(">h", len(t))
            + t + struct.pack(">i", 1) + struct.pack(">i", partition) + struct.pack(">i", len(records)) + records)


async def create_topic(node, name: str, partitions: int = 1) -> None:
    from metadata.controller_api import NewTopic
    [res] = await node.controller.create_topics([NewTopic(name, partitions, 1)])
    assert res.error == 0


def produce_error(raw: bytes) -> tuple[int, int]:
    resp, _ = codec._reader(codec.response_type(0, 8))(raw, 4)
    p = resp.responses[0].partition_responses[0]
    return int(p.error_code), p.base_offset


async def test_produce_with_bad_crc_gets_corrupt_message(node):
    await create_topic(node, "t")
    c = await RawClient.connect(node.port)
    err, _ = produce_error(await c.request(0, 8, produce_body("t", 0, record_batch([b"x"], crc_ok=False))))
    assert err == ErrorCode.CORRUPT_MESSAGE
    err, off = produce_error(await c.request(0, 8, produce_body("t", 0, record_batch([b"good"]))))
    assert (err, off) == (0, 0)
    c.close()


async def test_batch_over_max_message_bytes_gets_message_too_large(node):
    await create_topic(node, "t")
    c = await RawClient.connect(node.port)
    err, _ = produce_error(await c.request(0, 8, produce_body("t", 0, record_batch([b"x" * 200_000]))))
    assert err == ErrorCode.MESSAGE_TOO_LARGE
    c.close()


async def test_produce_to_unknown_topic_and_invalid_acks(node):
    c = await RawClient.connect(node.port)
    err, _ = produce_error(await c.request(0, 8, produce_body("nope", 0, record_batch([b"x"]))))
    assert err == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    await create_topic(node, "t")
    err, _ = produce_error(await c.request(0, 8, produce_body("t", 0, record_batch([b"x"]), acks=2)))
    assert err == ErrorCode.INVALID_REQUIRED_ACKS
    c.close()


async def test_produce_to_an_internal_topic_is_refused(node):
    """Only the group coordinator writes __consumer_offsets (Kafka: INVALID_TOPIC_EXCEPTION)."""
    c = await RawClient.connect(node.port)
    err, _ = produce_error(await c.request(0, 8, produce_body("__consumer_offsets", 0, record_batch([b"x"]))))
    assert err == ErrorCode.INVALID_TOPIC_EXCEPTION
    c.close()


async def test_duplicate_idempotent_batch_gets_original_offset_and_gap_is_out_of_order(node):
    await create_topic(node, "t")
    c = await RawClient.connect(node.port)
    b0 = record_batch([b"a", b"b"], producer_id=7, base_sequence=0)
    assert produce_error(await c.request(0, 8, produce_body("t", 0, b0))) == (0, 0)
    assert produce_error(await c.request(0, 8, produce_body("t", 0, record_batch([b"c"])))) == (0, 2)
    # retry of the first batch: same offsets, nothing appended
    assert produce_error(await c.request(0, 8, produce_body("t", 0, b0))) == (0, 0)
    gap = record_batch([b"z"], producer_id=7, base_sequence=5)
    err, _ = produce_error(await c.request(0, 8, produce_body("t", 0, gap)))
    assert err == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert node.broker.replicas.partitions[("t", 0)].log.log_end_offset == 3
    c.close()


async def test_invalid_topic_name_in_create_topics(node):
    from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
    c = await RawClient.connect(node.port)
    req = CreateTopicsRequest(topics=(CreatableTopic(name="bad/name", num_partitions=1, replication_factor=1,
                                                     assignments=(), configs=()),),
                              timeout=__import__("datetime").timedelta(seconds=5), validate_only=False)
    resp = await c.call(19, 7, req)
    assert int(resp.topics[0].error_code) == ErrorCode.INVALID_TOPIC_EXCEPTION
    c.close()


async def test_oversized_frame_is_refused_before_buffering_and_only_that_connection_closes(node):
    bad = await RawClient.connect(node.port)
    good = await RawClient.connect(node.port)
    await bad.send_raw(struct.pack(">i", 1024 * 1024 * 1024))  # 1 GiB announced, nothing sent
    assert await bad.closed()
    raw = await good.request(18, 0, b"")
    assert struct.unpack_from(">ih", raw) == (good.cid, 0)
    good.close()


async def test_unsupported_api_versions_version_gets_v0_response_with_the_ranges(node):
    c = await RawClient.connect(node.port)
    raw = await c.request(18, 99, b"")  # ApiVersions v99: v0 response with UNSUPPORTED_VERSION + ranges (KIP-511)
    resp, _ = codec._reader(codec.response_type(18, 0))(raw, 4)
    assert int(resp.error_code) == ErrorCode.UNSUPPORTED_VERSION
    assert {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys} == SUPPORTED
    raw = await c.request(18, 0, b"")  # and the connection is kept
    assert struct.unpack_from(">ih", raw) == (c.cid, 0)
    c.close()


@pytest.mark.parametrize("api_key,version", [(0, 1), (0, 2), (0, 13), (1, 3), (3, 14), (9999, 0)],
                         ids=["produce-v1", "produce-v2", "produce-v13", "fetch-v3", "metadata-v14", "unknown-api"])
async def test_unsupported_version_closes_the_connection_as_kafka_does(node, api_key, version):
    """Kafka 4.x answers nothing to a request version it does not serve (SocketServer's
    parseRequestHeader throws, the connection is closed): ApiVersions is the only exception."""
    c = await RawClient.connect(node.port)
    c.cid += 1
    hdr = struct.pack(">hhih", api_key, version, c.cid, 4) + b"test"
    body = b"\x00" * 16
    await c.send_raw(struct.pack(">i", len(hdr) + len(body)) + hdr + body)
    assert await c.closed(timeout=5)
    c.close()
    probe = await RawClient.connect(node.port)  # only that connection
    raw = await probe.request(18, 0, b"")
    assert struct.unpack_from(">ih", raw) == (probe.cid, 0)
    probe.close()


async def test_acks_zero_gets_no_response(node):
    await create_topic(node, "t")
    c = await RawClient.connect(node.port)
    c.cid += 1
    hdr = struct.pack(">hhih", 0, 8, c.cid, -1)
    body = produce_body("t", 0, record_batch([b"x"]), acks=0)
    await c.send_raw(struct.pack(">i", len(hdr) + len(body)) + hdr + body)
    raw = await c.request(18, 0, b"")  # the next response is the ApiVersions one
    assert struct.unpack_from(">i", raw)[0] == c.cid
    assert node.broker.replicas.partitions[("t", 0)].log.log_end_offset == 1
    c.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(api=st.sampled_from(sorted(SUPPORTED)), garbage=st.binary(max_size=300), data=st.data())
async def test_fuzzed_request_bodies_never_break_the_broker(node, api, garbage, data):
    lo, hi = SUPPORTED[api]
    version = data.draw(st.integers(lo, hi))
    c = await RawClient.connect(node.port)
    try:
        await c.request(api, version, garbage)
    except (ConnectionError, TimeoutError, __import__("asyncio").IncompleteReadError):
        pass  # a malformed body may close this connection
    c.close()
    probe = await RawClient.connect(node.port)
    raw = await probe.request(18, 0, b"")
    assert struct.unpack_from(">ih", raw) == (probe.cid, 0)
    probe.close()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frame=st.binary(min_size=0, max_size=64))
async def test_fuzzed_frames_close_only_their_connection(node, frame):
    c = await RawClient.connect(node.port)
    await c.send_raw(struct.pack(">i", len(frame)) + frame)
    try:
        await c.recv_frame(timeout=0.5)
    except Exception:
        pass
    c.close()
    probe = await RawClient.connect(node.port)
    raw = await probe.request(18, 0, b"")
    assert struct.unpack_from(">ih", raw) == (probe.cid, 0)
    probe.close()


@pytest.mark.parametrize("version", [4, 12, 13, 17])
async def test_fetch_returns_exactly_what_was_produced(node, version):
    await create_topic(node, "t")
    c = await RawClient.connect(node.port)
    batch = record_batch([b"hello", b"world"])
    assert produce_error(await c.request(0, 8, produce_body("t", 0, batch)))[0] == 0
    from broker.protocol.codec import build, request_type
    tid = node.loader.image.topics_by_name["t"].topic_id
    req = build(request_type(1, version), {
        "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": "t", "topic_id": tid, "partitions": [
            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20, "current_leader_epoch": -1,
             "log_start_offset": -1, "last_fetched_epoch": -1}]}],
        "forgotten_topics_data": [], "rack_id": ""})
    resp = await c.call(1, version, req)
    p = resp.responses[0].partitions[0]
    assert (int(p.error_code), p.high_watermark) == (0, 2)
    stored = bytes(p.records)
    assert stored[21:] == batch[21:]  # ...everything the CRC covers is byte-identical
    c.close()
