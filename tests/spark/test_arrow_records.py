"""Record batches -> Arrow columns (pipeline/arrow_records.py): the compiled decoder
(broker/log/_records.pyx decode_columns) gives exactly what the Python one does, record for
record, on every shape a Fetch response carries; corrupt input is refused."""

from __future__ import annotations

import struct

import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from broker.log.batch import Record, build_batch, build_end_txn_marker
from pipeline import arrow_records
from pipeline.source import kafka_schema

pytestmark = pytest.mark.skipif(not arrow_records.COMPILED, reason="the compiled decoder is not built")
SCHEMA = {h: to_arrow_schema(kafka_schema(h), timezone="UTC") for h in (False, True)}
T0 = 1_700_000_000_000


def _records(base, n, seed=0):
    out = []
    for i in range(n):
        j = i + seed
        key = None if j % 5 == 0 else f"key-{j}".encode()
        value = None if j % 7 == 3 else (b"" if j % 11 == 0 else f"value-{j}".encode() * (j % 4 + 1))
        headers = [] if j % 3 == 0 else [("h", f"x{j}".encode()), ("null", None), ("", b"")][: j % 3 + 1]
        out.append(Record(base + i, T0 + 17 * j, key, value, headers))
    return out


def _at(batch: bytearray, base_offset: int) -> bytearray:
    batch[0:8] = struct.pack(">q", base_offset)  # (baseOffset is outside the CRC)
    return batch


def _decode(raw, start, end, include_headers, compiled, read_committed=False, aborted=None):
    saved = arrow_records.COMPILED
    arrow_records.COMPILED = compiled
    try:
        secs, nxt = arrow_records.sections(raw, start, aborted, read_committed, "t-0")
        return arrow_records.to_record_batch(secs, start, end, "t", 0, SCHEMA[include_headers], include_headers), nxt
    finally:
        arrow_records.COMPILED = saved


@pytest.mark.parametrize("include_headers", [False, True])
def test_compiled_and_python_decoders_agree_on_every_batch_shape(include_headers):
    raw = bytearray()
    raw += build_batch(_records(0, 40))
    for codec, base in ((1, 40), (2, 70), (3, 100), (4, 130)):  # gzip, snappy, lz4, zstd
        raw += build_batch(_records(base, 30, seed=base), compression=codec)
    raw += build_batch(_records(160, 10, seed=160), timestamp_type=1, max_timestamp=T0 + 999)  # LogAppendTime
    raw += _at(build_end_txn_marker(7, 0, True, 0, T0), 170)  # a control batch: never a row
    gap = _records(171, 20, seed=171)
    raw += build_batch([r for r in gap if r.offset % 4], base_offset=171, last_offset_delta=19)  # compacted
    raw += build_batch(_records(191, 5))[:-7]  # a partial batch at the end of the response
    for start, end in ((0, 1 << 40), (13, 150), (165, 190), (171, 172)):
        got, nxt = _decode(bytes(raw), start, end, include_headers, compiled=True)
        want, _ = _decode(bytes(raw), start, end, include_headers, compiled=False)
        got.validate(full=True)
        assert got.equals(want), (start, end)
        assert nxt == 191  # the partial batch is fetched again
    rows = _decode(bytes(raw), 0, 1 << 40, include_headers, compiled=True)[0].to_pylist()
    assert [r["offset"] for r in rows] == list(range(170)) + [o for o in range(171, 191) if o % 4]
    assert rows[3]["key"] == b"key-3" and rows[0]["key"] is None and rows[3]["value"] is None
    assert rows[11]["value"] == b"" and rows[12]["value"] == b"value-12"
    assert {r["timestampType"] for r in rows[160:170]} == {1} and rows[165]["timestamp"].timestamp() == (T0 + 999) / 1000
    if include_headers:
        assert rows[0]["headers"] is None and rows[2]["headers"] == [
            {"key": "h", "value": b"x2"}, {"key": "null", "value": None}, {"key": "", "value": b""}]


def test_read_committed_leaves_out_aborted_transactions():
    raw = bytearray()
    raw += build_batch(_records(0, 5), producer_id=1, producer_epoch=0, base_sequence=0, transactional=True)
    raw += build_batch(_records(5, 5), producer_id=2, producer_epoch=0, base_sequence=0, transactional=True)
    raw += _at(build_end_txn_marker(2, 0, False, 0, T0), 10)  # producer 2 aborts
    raw += _at(build_end_txn_marker(1, 0, True, 0, T0), 11)  # producer 1 commits
    committed, _ = _decode(bytes(raw), 0, 100, False, True, read_committed=True, aborted=[(5, 2)])
    assert committed.column("offset").to_pylist() == [0, 1, 2, 3, 4]
    everything, _ = _decode(bytes(raw), 0, 100, False, True, read_committed=False, aborted=[(5, 2)])
    assert everything.column("offset").to_pylist() == list(range(10))


def test_corrupt_batches_are_refused():
    good = build_batch(_records(0, 10))
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF
    with pytest.raises(arrow_records.CorruptRecordError, match="CRC"):
        _decode(bytes(bad_crc), 0, 100, False, True)
    # a record whose length runs past its batch (CRC recomputed so that only the walk can tell)
    import crc32c

    bad_len = bytearray(good)
    bad_len[61] = 0x7E  # first record's length varint: 63, far more than the record holds
    bad_len[17:21] = struct.pack(">I", crc32c.crc32c(bytes(bad_len[21:])))
    with pytest.raises(arrow_records.CorruptRecordError, match="malformed record 0"):
        _decode(bytes(bad_len), 0, 100, False, True)
