"""``__transaction_state`` records byte for byte as Kafka writes them (TransactionLogKey v0,
TransactionLogValue v0 and the flexible v1 with its tagged fields)."""

from __future__ import annotations

import pytest

from broker.txn import records as rec
from broker.txn.state import TxnShard, TxnState

ONGOING = rec.TxnLogValue(producer_id=7, producer_epoch=3, timeout_ms=60_000, status=1,
                          partitions=(("t", 0), ("t", 1)), last_update_ms=1000, start_ms=900)


def test_key():
    assert rec.transaction_key("tx") == bytes.fromhex("0000 0002 7478")
    assert rec.decode_key(bytes.fromhex("0000 0002 7478")) == "tx"
    with pytest.raises(rec.RecordFormatError):
        rec.decode_key(bytes.fromhex("0001 0002 7478"))


def test_value_v0_is_kafkas_layout():
    want = bytes.fromhex(
        "0000" "0000000000000007" "0003" "0000ea60" "01"  # version, producer id, epoch, timeout, Ongoing
        "00000001" "0001" "74" "00000002" "00000000" "00000001"  # [topic "t", [0, 1]]
        "00000000000003e8" "0000000000000384")  # last update, start
    assert rec.transaction_value(ONGOING, 0, empty=False) == want
    assert rec.decode_value(want) == ONGOING


def test_value_v1_is_flexible_with_tagged_fields():
    v = rec.TxnLogValue(**dict(
        producer_id=7, producer_epoch=3, timeout_ms=60_000, status=1, partitions=(("t", 0), ("t", 1)),
        last_update_ms=1000, start_ms=900, prev_producer_id=5, next_producer_id=9, client_tv=2))
    want = bytes.fromhex(
        "0001" "0000000000000007" "0003" "0000ea60" "01"
        "02" "02" "74" "03" "00000000" "00000001" "00"  # compact [topic, compact [partitions], no tags]
        "00000000000003e8" "0000000000000384"
        "03" "00" "08" "0000000000000005" "01" "08" "0000000000000009" "02" "02" "0002")  # tags 0, 1, 2
    assert rec.transaction_value(v, 1, empty=False) == want
    assert rec.decode_value(want) == v
    # defaults are not written; unknown tags (a later Kafka's) are skipped
    plain = rec.transaction_value(ONGOING, 1, empty=False)
    assert plain.endswith(bytes.fromhex("0000000000000384" "00"))
    assert rec.decode_value(plain[:-1] + bytes.fromhex("01" "07" "02" "abcd")) == ONGOING


def test_empty_state_has_null_partitions():
    empty = rec.TxnLogValue(7, 0, 60_000, 0, (), 1000, -1)
    assert rec.transaction_value(empty, 0, empty=True)[17:21] == bytes.fromhex("ffffffff")
    assert rec.transaction_value(empty, 1, empty=True)[17:18] == bytes.fromhex("00")
    assert rec.decode_value(rec.transaction_value(empty, 1, empty=True)) == empty


def test_unknown_value_version_and_truncation_are_refused():
    with pytest.raises(rec.RecordFormatError, match="version 2"):
        rec.decode_value(bytes.fromhex("0002") + rec.transaction_value(ONGOING, 0, empty=False)[2:])
    with pytest.raises(rec.RecordFormatError):
        rec.decode_value(rec.transaction_value(ONGOING, 0, empty=False)[:-3])


def test_a_shard_replays_records_and_tombstones():
    shard = TxnShard(0, 1)
    shard.replay(rec.transaction_key("a"), rec.transaction_value(ONGOING, 0, empty=False))
    md = shard.txns["a"]
    assert (md.state, md.partitions, md.producer_epoch, md.last_producer_epoch) == (TxnState.ONGOING,
                                                                                   {("t", 0), ("t", 1)}, 3, -1)
    shard.replay(rec.transaction_key("a"), None)
    assert shard.txns == {}
    with pytest.raises(rec.RecordFormatError):
        shard.replay(None, b"")


def test_records_print_as_kafkas_dump_does():
    assert rec.format_record(rec.transaction_key("tx"), rec.transaction_value(ONGOING, 0, empty=False)) == (
        "transaction_metadata::transactionalId=tx",
        "producerId:7,producerEpoch:3,state=Ongoing,partitions=[t-0,t-1],txnLastUpdateTimestamp=1000,"
        "txnTimeoutMs=60000")
    assert rec.format_record(rec.transaction_key("tx"), None)[1] == "<DELETE>"
