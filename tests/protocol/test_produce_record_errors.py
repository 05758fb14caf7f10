"""ProduceResponse record errors (KIP-467): from v8 a rejected batch names its bad records
(batch_index and message); older versions get the error code and nothing else."""

from __future__ import annotations

import time

import pytest

from broker.log.batch import Record, build_batch
from broker.protocol import codec
from common.errors import ErrorCode
from tests.protocol.conftest import RawClient


def batch(keys: list[bytes | None], ts: int) -> bytes:
    return bytes(build_batch([Record(i, ts, k, b"v", []) for i, k in enumerate(keys)]))


async def create_topic(node, name: str, configs: dict[str, str]) -> None:
    from metadata.controller_api import NewTopic
    [res] = await node.controller.create_topics([NewTopic(name, 1, 1, configs=configs)])
    assert res.error == 0, res


async def produce(node, version: int, topic: str, records: bytes):
    c = await RawClient.connect(node.port)
    try:
        resp = await c.call(0, version, codec.build(codec.request_type(0, version), {
            "transactional_id": None, "acks": 1, "timeout": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]}))
    finally:
        c.w.close()
    return resp.responses[0].partition_responses[0]


@pytest.mark.parametrize("version", [3, 7, 8, 9, 12])
async def test_keyless_records_on_a_compacted_topic(node, version):
    await create_topic(node, "c", {"cleanup.policy": "compact"})
    now = int(time.time() * 1000)
    r = await produce(node, version, "c", batch([b"a", None, b"b", None], now))
    assert r.error_code == ErrorCode.INVALID_RECORD
    if version >= 8:
        assert [(e.batch_index, e.batch_index_error_message) for e in r.record_errors] == [
            (i, "Compacted topic cannot accept message without key in topic partition c-0.") for i in (1, 3)]
        assert r.error_message.startswith("One or more records have been rejected due to 2 record errors")
    r = await produce(node, version, "c", batch([b"a", b"b"], now))
    assert (r.error_code, r.base_offset) == (0, 0)


async def test_future_timestamp_names_the_record(node):
    await create_topic(node, "t", {})
    now = int(time.time() * 1000)
    r = await produce(node, 9, "t", batch([None], now + 2 * 3_600_000))
    assert r.error_code == ErrorCode.INVALID_TIMESTAMP
    assert [e.batch_index for e in r.record_errors] == [0]
    assert r.error_message == "One or more records have been rejected due to invalid timestamp"


def _section_with_a_lying_record(lie: str) -> bytes:
    from broker.log.batch import _zigzag_varint as v
    good = b"\x00" + v(0) + v(0) + v(-1) + v(2) + b"ok" + v(0)  # offset 0, null key, value b"ok", no headers
    fields = {  # record 1: after attributes, timestampDelta 0 and offsetDelta 1
        "key-length": v(40) + b"k" + v(-1) + v(0),
        "header-count": v(-1) + v(-1) + v(9),
        "record-length": v(-1) + v(-1) + v(0) + b"\x00\x00",
    }[lie]
    body = b"\x00\x00\x02" + fields
    return v(len(good)) + good + v(len(body)) + body


@pytest.mark.parametrize("compression", [0, 3])
@pytest.mark.parametrize("lie", ["key-length", "header-count", "record-length"])
async def test_batch_whose_record_does_not_parse_is_refused_on_a_plain_topic(node, lie, compression):
    """Kafka's LogValidator walks every record of every batch (DefaultRecord.readFrom): a batch
    with one malformed record fails whole with INVALID_RECORD and nothing of it is stored."""
    from broker.log.batch import assemble_batch, compress_records
    await create_topic(node, "p", {})
    now = int(time.time() * 1000)
    bad = bytes(assemble_batch(0, -1, compression, 1, now, now, -1, -1, -1, 2,
                               compress_records(compression, _section_with_a_lying_record(lie))))
    r = await produce(node, 9, "p", bad)
    assert r.error_code == ErrorCode.INVALID_RECORD and "record 1 of 2" in r.error_message, r
    assert list(r.record_errors) == []
    r = await produce(node, 9, "p", batch([None, None], now))
    assert (r.error_code, r.base_offset) == (0, 0)  # nothing of the refused batch was appended
