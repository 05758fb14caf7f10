"""krafty dump-log over files a real krafty log wrote (broker/log in-process): Kafka's
DumpLogSegments lines for segments, indexes, producer snapshots, transaction indexes, the
__consumer_offsets and __transaction_state decoders, and the metadata log in SQLite."""

from __future__ import annotations

import asyncio
import os
import re

from broker.group import records as group_records
from broker.log import Log, LogConfig, parse_batches, validate_produce_batches
from broker.log.batch import Record, build_batch, build_end_txn_marker
from broker.log.producer_state import COORDINATOR
from broker.txn import records as txn_records
from krafty.dump_log import main

MAX = 1 << 20
BATCH_RE = re.compile(r"baseOffset: \d+ lastOffset: \d+ count: \d+ baseSequence: -?\d+ lastSequence: -?\d+ "
                      r"producerId: -?\d+ producerEpoch: -?\d+ partitionLeaderEpoch: \d+ isTransactional: "
                      r"(true|false) isControl: (true|false) deleteHorizonMs: OptionalLong\.empty position: \d+ "
                      r"CreateTime: \d+ size: \d+ magic: 2 compresscodec: (none|gzip|zstd) crc: \d+ isvalid: true")


def append(log, records, now=1000, **kw):
    buf = build_batch(records, base_offset=0, **kw)
    return log.append_as_leader(buf, validate_produce_batches(buf, MAX), 0, now)


def dump(capsys, *args):
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def make_log(tmp_path, **cfg):
    config = LogConfig.from_topic_configs({"index.interval.bytes": "1", **cfg})
    return Log.open(str(tmp_path), "topic", 0, config, now_ms=0)


def test_segment_batches_records_and_payloads(tmp_path, capsys):
    log = make_log(tmp_path)
    append(log, [Record(0, 1000, b"k1", b"hello", [("h1", b"x")]), Record(1, 1001, None, b"world", [])],
           compression=4)
    append(log, [Record(0, 1002, b"k2", None, [])], producer_id=7, producer_epoch=0, base_sequence=0)
    log.flush()
    seg = os.path.join(log.path, f"{0:020d}.log")
    rc, out, err = dump(capsys, "--files", seg)
    lines = out.splitlines()
    assert rc == 0 and err == ""
    assert lines[:2] == [f"Dumping {seg}", "Log starting offset: 0"]
    assert len(lines) == 4 and all(BATCH_RE.fullmatch(line) for line in lines[2:]), lines
    assert "compresscodec: zstd" in lines[2] and "producerId: 7 producerEpoch: 0" in lines[3]

    rc, out, _ = dump(capsys, "--files", seg, "--print-data-log")
    rec_lines = [line for line in out.splitlines() if line.startswith("|")]
    assert rec_lines == [
        "| offset: 0 CreateTime: 1000 keySize: 2 valueSize: 5 sequence: -1 headerKeys: [h1] key: k1 payload: hello",
        "| offset: 1 CreateTime: 1001 keySize: -1 valueSize: 5 sequence: -1 headerKeys: [] payload: world",
        "| offset: 2 CreateTime: 1002 keySize: 2 valueSize: -1 sequence: 0 headerKeys: [] key: k2"]
    rc, out, _ = dump(capsys, "--files", seg, "--print-data-log", "--skip-record-metadata")
    assert [line for line in out.splitlines() if line.startswith("|")][0] == "| key: k1 payload: hello"

    with open(seg, "ab") as f:  # a torn append
        f.write(b"\x00" * 10)
    assert "Found 10 invalid bytes at the end of 00000000000000000000.log" in dump(capsys, "--files", seg)[1]


def test_indexes_are_checked_against_the_segment(tmp_path, capsys):
    log = make_log(tmp_path)
    for i in range(3):
        append(log, [Record(0, 1000 + 10 * i, None, b"v%d" % i, []), Record(1, 1005 + 10 * i, None, b"w", [])])
    log.roll(0)
    log.flush()
    base = os.path.join(log.path, f"{0:020d}")
    rc, out, err = dump(capsys, "--files", f"{base}.index,{base}.timeindex")
    lines = out.splitlines()
    assert rc == 0 and err == "", err
    idx = lines[1:lines.index(f"Dumping {base}.timeindex")]
    assert idx and {line.split(" position:")[0] for line in idx} <= {"offset: 0", "offset: 2", "offset: 4"}, idx
    assert all(re.fullmatch(r"timestamp: \d+ offset: \d+", line) for line in lines[len(idx) + 2:])
    assert dump(capsys, "--files", f"{base}.index", "--verify-index-only")[1].splitlines() == [f"Dumping {base}.index"]
    assert dump(capsys, "--files", f"{base}.index", "--index-sanity-check")[1].splitlines()[-1] == \
        f"{base}.index passed sanity check."

    with open(f"{base}.index", "r+b") as f:  # an entry pointing into the middle of a batch
        first = f.read(4)
        f.seek(4)
        f.write((7).to_bytes(4, "big"))
    rc, out, err = dump(capsys, "--files", f"{base}.index")
    offset = int.from_bytes(first, "big")
    assert err.startswith(f"Mismatches in :{os.path.abspath(base)}.index\n  Index offset: {offset}, log offset: -1"), err


def test_transactions_producer_snapshot_and_txn_index(tmp_path, capsys):
    log = make_log(tmp_path)
    append(log, [Record(0, 1000, None, b"t", [])], producer_id=9, producer_epoch=2, base_sequence=0,
           transactional=True)
    marker = build_end_txn_marker(9, 2, False, 5, 1001)
    log.append_as_leader(marker, parse_batches(marker), 0, 1001, origin=COORDINATOR)
    log.roll(0)
    log.flush()
    base = os.path.join(log.path, f"{0:020d}")
    out = dump(capsys, "--files", f"{base}.log", "--deep-iteration")[1]
    assert "| offset: 1 CreateTime: 1001 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] endTxnMarker: ABORT " \
           "coordinatorEpoch: 5" in out
    assert dump(capsys, "--files", f"{base}.txnindex")[1].splitlines()[1:] == [
        "version: 0 producerId: 9 firstOffset: 0 lastOffset: 1 lastStableOffset: 2"]
    snaps = sorted(f for f in os.listdir(log.path) if f.endswith(".snapshot"))
    out = dump(capsys, "--files", os.path.join(log.path, snaps[-1]))[1]
    assert out.splitlines()[1] == ("producerId: 9 producerEpoch: 2 coordinatorEpoch: 5 currentTxnFirstOffset: "
                                   "OptionalLong.empty lastTimestamp: 1001 firstSequence: 0 lastSequence: 0 "
                                   "lastOffset: 0 offsetDelta: 0 timestamp: 1001")  # (the marker's time)


def test_offsets_and_transaction_log_decoders(tmp_path, capsys):
    log = make_log(tmp_path)
    append(log, [
        Record(0, 1000, group_records.offset_commit_key("g", "t", 3),
               group_records.offset_commit_value(group_records.OffsetValue(42, 1, "meta", 999)), []),
        Record(1, 1000, group_records.offset_commit_key("g", "t", 4), None, [])])
    log.flush()
    out = dump(capsys, "--files", os.path.join(log.path, f"{0:020d}.log"), "--offsets-decoder")[1]
    recs = [line.split("headerKeys: [] ")[1] for line in out.splitlines() if line.startswith("|")]
    assert recs == [
        'key: {"type":"1","data":{"group":"g","topic":"t","partition":3}} payload: {"version":"3","data":'
        '{"offset":42,"leaderEpoch":1,"metadata":"meta","commitTimestamp":999}}',
        'key: {"type":"1","data":{"group":"g","topic":"t","partition":4}} payload: <DELETE>']

    txn_dir = tmp_path / "txn"
    log2 = make_log(txn_dir)
    value = txn_records.transaction_value(txn_records.TxnLogValue(5, 1, 60000, 1, (("t", 0), ("t", 1)), 2000, 1900),
                                          1, empty=False)
    append(log2, [Record(0, 1000, txn_records.transaction_key("tx-1"), value, [])])
    log2.flush()
    out = dump(capsys, "--files", os.path.join(log2.path, f"{0:020d}.log"), "--transaction-log-decoder")[1]
    assert out.splitlines()[-1].split("headerKeys: [] ")[1] == (
        'key: {"type":"0","data":{"transactionalId":"tx-1"}} payload: {"version":"1","data":{"producerId":5,'
        '"producerEpoch":1,"transactionTimeoutMs":60000,"transactionStatus":1,"transactionPartitions":'
        '[{"topic":"t","partitionIds":[0,1]}],"transactionLastUpdateTimestampMs":2000,'
        '"transactionStartTimestampMs":1900}}')


def test_the_metadata_log_in_sqlite(tmp_path, capsys):
    import uuid

    from metadata import records as r
    from raft.messages import Entry
    from raft.store import SqliteStore

    async def write():
        from raft.core import Append, QuorumState, SaveState
        store = SqliteStore(str(tmp_path))
        await store.open()
        await store.apply([SaveState(QuorumState(epoch=3, voted_for=1, leader_id=1)), Append(0, (
            Entry(3, 10, b"LeaderChange leader=1 epoch=3 voters=1", control=True),
            Entry(3, 11, r.encode(r.TopicRecord("t", uuid.UUID(int=1))))))])
        await store.close()
    asyncio.run(write())
    db = str(tmp_path / "raft.db")
    out = dump(capsys, "--files", db, "--cluster-metadata-decoder")[1].splitlines()
    assert out[1] == "Quorum state: epoch: 3 votedFor: 1 leaderId: 1"
    assert "| offset: 0 timestamp: 10 valueSize: 38 LeaderChange: leader=1 epoch=3 voters=1" in out
    assert out[-1].endswith('payload: {"type":"TOPIC_RECORD","data":{"name":"t","topicId":"AAAAAAAAAAAAAAAAAAAAAQ"}}')


def test_missing_files_and_unknown_suffixes(tmp_path, capsys):
    missing = str(tmp_path / "gone" / f"{0:020d}.log")
    rc, _, err = dump(capsys, "--files", missing)
    assert rc == 1 and err.strip() == f"{missing} (No such file or directory)"
    rc, _, err = dump(capsys, "--files", str(tmp_path / "nope.log"))
    assert rc == 1 and "not a segment" in err
    (tmp_path / "x.txt").write_text("x")
    rc, _, err = dump(capsys, "--files", str(tmp_path / "x.txt"))
    assert rc == 0 and err.strip() == f"Ignoring unknown file {tmp_path / 'x.txt'}"


def test_offsets_missing_after_compaction_are_reported(tmp_path, capsys):
    log = make_log(tmp_path)
    for offset in (0, 1, 5):  # as a follower copies a compacted leader's batches
        log.append_as_follower(build_batch([Record(offset, 1000, b"k", b"v", [])], partition_leader_epoch=0))
    log.flush()
    seg = os.path.join(log.path, f"{0:020d}.log")
    rc, out, err = dump(capsys, "--files", seg, "--deep-iteration")
    assert rc == 0 and err == f"Non-consecutive offsets in {os.path.abspath(seg)}\n  1 is followed by 5\n", err


def test_offsets_decoder_reads_consumer_group_records(tmp_path, capsys):
    import uuid

    from broker.group import consumer_records as cr

    tid = uuid.UUID(int=1)
    log = make_log(tmp_path)
    append(log, [
        Record(0, 1000, cr.key(cr.GROUP_EPOCH_KEY, "g"), cr.group_epoch_value(4), []),
        Record(1, 1000, cr.key(cr.TARGET_MEMBER_KEY, "g", "m1"), cr.target_member_value({tid: frozenset({0, 2})}), []),
        Record(2, 1000, cr.key(cr.CURRENT_ASSIGNMENT_KEY, "g", "m1"), cr.current_assignment_value(
            cr.CurrentAssignment(4, 3, 0, {tid: frozenset({0})}, {})), []),
        Record(3, 1000, cr.key(cr.MEMBER_METADATA_KEY, "g", "m1"), None, []),
        Record(4, 1000, cr.key(cr.REGEX_KEY, "g", "new-.*"), cr.regex_value(
            cr.ResolvedRegex(frozenset({"new-1", "new-2"}), 42, 1700000000000)), []),
        Record(5, 1000, cr.key(cr.MEMBER_METADATA_KEY, "g", "k1"), cr.member_metadata_value(cr.MemberMetadata(
            None, None, "c", "/h", ("t",), None, 30000, None, cr.ClassicMemberMetadata(10000, (("range", b"\x00"),)))),
            [])])
    log.flush()
    out = dump(capsys, "--files", os.path.join(log.path, f"{0:020d}.log"), "--offsets-decoder")[1]
    recs = [line.split("headerKeys: [] ")[1] for line in out.splitlines() if line.startswith("|")]
    assert recs == [
        'key: {"type":"3","data":{"groupId":"g"}} payload: {"version":"0","data":{"epoch":4}}',
        'key: {"type":"7","data":{"groupId":"g","memberId":"m1"}} payload: {"version":"0","data":{"topicPartitions":'
        '[{"topicId":"AAAAAAAAAAAAAAAAAAAAAQ","partitions":[0,2]}]}}',
        'key: {"type":"8","data":{"groupId":"g","memberId":"m1"}} payload: {"version":"0","data":{"memberEpoch":4,'
        '"previousMemberEpoch":3,"state":0,"assignedPartitions":[{"topicId":"AAAAAAAAAAAAAAAAAAAAAQ","partitions":'
        '[0]}],"partitionsPendingRevocation":[]}}',
        'key: {"type":"5","data":{"groupId":"g","memberId":"m1"}} payload: <DELETE>',
        'key: {"type":"16","data":{"groupId":"g","regularExpression":"new-.*"}} payload: {"version":"0","data":'
        '{"topics":["new-1","new-2"],"version":42,"timestamp":1700000000000}}',
        'key: {"type":"5","data":{"groupId":"g","memberId":"k1"}} payload: {"version":"0","data":{"instanceId":null,'
        '"rackId":null,"clientId":"c","clientHost":"/h","subscribedTopicNames":["t"],"subscribedTopicRegex":null,'
        '"rebalanceTimeoutMs":30000,"serverAssignor":null,"classicMemberMetadata":{"sessionTimeoutMs":10000,'
        '"supportedProtocols":[{"name":"range","metadata":"AA=="}]}}}']
