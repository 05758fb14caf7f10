"""``krafty dump-log`` -- Kafka's kafka-dump-log.sh (DumpLogSegments) over krafty's files.

    dump-log --files F1[,F2...] [--print-data-log] [--deep-iteration] [--skip-record-metadata]
             [--offsets-decoder | --transaction-log-decoder | --cluster-metadata-decoder]
             [--key-decoder-class C] [--value-decoder-class C] [--max-bytes N]
             [--verify-index-only] [--index-sanity-check]

What each file is goes by its name, as in Kafka's tool:

- ``<base>.log`` (a partition's segment): one line per batch (``baseOffset: ... crc: ... isvalid:
  true``), with --deep-iteration one ``| offset: ...`` line per record, with --print-data-log its
  key and payload (decoded by the chosen decoder). Records of control batches show the marker.
- ``<base>.index``: ``offset: O position: P`` (krafty's entries point at a batch's base offset);
  ``<base>.timeindex``: ``timestamp: T offset: O``; both checked against the segment (mismatches on
  stderr at the end, as Kafka's tool).
- ``<offset>.snapshot``: the producer state snapshot, one ``producerId: ...`` line per producer.
- ``<base>.txnindex``: the aborted transactions, ``version: 0 producerId: ... lastStableOffset: ...``.
- ``raft.db`` (krafty keeps the metadata log in SQLite, raft/store.py) and
  ``bootstrap.checkpoint``: the quorum state, the snapshot and each entry; with
  --cluster-metadata-decoder the records as Kafka's tool prints metadata records
  (``{"type":"TOPIC_RECORD","data":{...}}``, Kafka's field names).

--offsets-decoder decodes __consumer_offsets records (Kafka's OffsetCommit and GroupMetadata
key/value formats) and --transaction-log-decoder __transaction_state records, as Kafka 4's
tool prints them: ``key: {"type":"1","data":{...}} payload: {"version":"3","data":{...}}``.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import sqlite3
import struct
import sys
import uuid

from broker.group import records as group_records
from broker.log.batch import (
    DEFAULT_RECORDS_LIMIT,
    HEADER_SIZE,
    MIN_BATCH_LENGTH,
    BatchHeader,
    batch_crc_ok,
    iter_records,
    unpack_header,
)
from broker.log.producer_state import parse_snapshot
from broker.log.txn_index import _ENTRY as TXN_ENTRY
from krafty.admin_tool import Parser, UsageError
from krafty.topics import kafka_uuid

CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
CONTROL_TYPES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER",
                 5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}
DECODERS = {"StringDecoder", "DefaultDecoder", "IntegerDecoder", "LongDecoder"}
_OFFSET_INDEX = struct.Struct(">ii")
_TIME_INDEX = struct.Struct(">qi")
_json = json.JSONEncoder(separators=(",", ":")).encode


class Errors:
    """What Kafka's tool reports on stderr once every file was dumped."""

    def __init__(self):
        self.index_mismatches: dict[str, list[tuple[int, int]]] = {}
        self.time_mismatches: dict[str, list[tuple[int, int]]] = {}
        self.out_of_order: dict[str, list[tuple[int, int]]] = {}
        self.not_found: dict[str, list[tuple[int, int]]] = {}
        self.non_consecutive: dict[str, list[tuple[int, int]]] = {}

    def print(self, err) -> None:
        for found, title, line in (
                (self.index_mismatches, "Mismatches in :{}", "  Index offset: {}, log offset: {}"),
                (self.time_mismatches, "Found timestamp mismatch in :{}", "  Index timestamp: {}, log timestamp: {}"),
                (self.out_of_order, "Found out of order timestamp in :{}",
                 "  Index timestamp: {}, Previously indexed timestamp: {}"),
                (self.not_found, "The following indexed offsets are not found in the log.",
                 "Indexed offset: {}, found log offset: {}"),
                (self.non_consecutive, "Non-consecutive offsets in {}", "  {} is followed by {}")):
            for name, pairs in found.items():
                print(title.format(name), file=err)
                for a, b in sorted(pairs, reverse=True) if found is self.index_mismatches else pairs:
                    print(line.format(a, b), file=err)


# ------------------------------------------------------------------------------ segments
def read_batches(path: str, max_bytes: int = 2**31 - 1) -> tuple[list[tuple[BatchHeader, bytes]], int, int]:
    """The whole batches of a segment file (up to ``max_bytes``), the bytes they take and the file's
    size (a batch at a time: a segment may be large)."""
    out = []
    pos = 0
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        limit = min(size, max_bytes)
        while pos + HEADER_SIZE <= limit:
            f.seek(pos)
            head = f.read(HEADER_SIZE)
            h = unpack_header(head, 0)
            if h.batch_length < MIN_BATCH_LENGTH or pos + h.size > limit:
                break
            data = head + f.read(h.size - HEADER_SIZE)
            h.pos = pos
            out.append((h, data))
            pos += h.size
    return out, pos, size


def batch_line(h: BatchHeader, data: bytes) -> str:
    horizon = f"OptionalLong[{h.base_timestamp}]" if h.attributes & 0x40 else "OptionalLong.empty"
    ts_type = "LogAppendTime" if h.timestamp_type else "CreateTime"
    return (f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
            f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} producerId: {h.producer_id} "
            f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
            f"isTransactional: {str(h.is_transactional).lower()} isControl: {str(h.is_control).lower()} "
            f"deleteHorizonMs: {horizon} position: {h.pos} {ts_type}: {h.max_timestamp} size: {h.size} "
            f"magic: {h.magic} compresscodec: {CODEC_NAMES.get(h.compression, h.compression)} crc: {h.crc} "
            f"isvalid: {str(batch_crc_ok(data, unpack_header(data, 0))).lower()}")


def control_text(key: bytes | None, value: bytes | None) -> str:
    if key is None or len(key) < 4:
        return " controlType: UNKNOWN(-1)"
    kind = struct.unpack_from(">h", key, 2)[0]
    if kind in (0, 1) and value is not None and len(value) >= 6:
        return f" endTxnMarker: {CONTROL_TYPES[kind]} coordinatorEpoch: {struct.unpack_from('>i', value, 2)[0]}"
    return f" controlType: {CONTROL_TYPES.get(kind, 'UNKNOWN')}({kind})"


def decode_plain(name: str, data: bytes) -> str:
    simple = name.rsplit(".", 1)[-1]
    if simple == "LongDecoder" and len(data) == 8:
        return str(struct.unpack(">q", data)[0])
    if simple == "IntegerDecoder" and len(data) == 4:
        return str(struct.unpack(">i", data)[0])
    return data.decode("utf-8", "replace")


# --- __consumer_offsets and __transaction_state, as Kafka 4's CoordinatorRecordMessageParser
def _b64(b: bytes | None):
    return None if b is None else base64.b64encode(b).decode()


def _subscription_json(data: bytes):
    try:
        r = group_records.RecordReader(bytes(data))
        version = r.i16()
        topics = [r.string() for _ in range(r.array_len())]
        user = r.bytes_() if r.pos < len(r.buf) else None
        return {"topics": topics, "userData": _b64(user or None)} if version >= 0 else _b64(data)
    except (group_records.RecordFormatError, struct.error, ValueError, AttributeError):
        return _b64(data)


def _assignment_json(data: bytes):
    try:
        from krafty.consumer_groups import decode_assignment

        parts: dict[str, list[int]] = {}
        for t, p in decode_assignment(bytes(data)):
            parts.setdefault(t, []).append(p)
        return {"assignedPartitions": [{"topic": t, "partitions": ps} for t, ps in parts.items()]}
    except (struct.error, ValueError):
        return _b64(data)


def offsets_record(key: bytes | None, value: bytes | None, offset: int) -> tuple[str, str | None]:
    """(key, payload) of a __consumer_offsets record."""
    if key is None:
        raise ValueError(f"Failed to decode message at offset {offset} using the specified decoder "
                         "(message had a missing key)")
    try:
        kind = struct.unpack_from(">h", key, 0)[0]
        k = group_records.decode_key(key)
    except (group_records.RecordFormatError, struct.error) as e:
        return f"Unknown record type {struct.unpack_from('>h', key, 0)[0] if len(key) >= 2 else -1} at offset " \
               f"{offset}, skipping." if isinstance(e, group_records.RecordFormatError) else \
               f"Error at offset {offset}, skipping. {e}", None
    if isinstance(k, group_records.OffsetKey):
        key_json = {"type": str(kind), "data": {"group": k.group, "topic": k.topic, "partition": k.partition}}
    elif isinstance(k, group_records.GroupKey):
        key_json = {"type": str(kind), "data": {"group": k.group}}
    else:  # a consumer group's (KIP-848) record
        second = "regularExpression" if kind == 16 else "memberId"  # ConsumerGroupRegularExpressionKey
        key_json = {"type": str(kind), "data": {"groupId": k.group, **({} if k.member is None else
                                                                      {second: k.member})}}
    if value is None:
        return _json(key_json), "<DELETE>"
    try:
        version = struct.unpack_from(">h", value, 0)[0]
        if not isinstance(k, (group_records.OffsetKey, group_records.GroupKey)):
            data = consumer_group_value(kind, value)
        elif isinstance(k, group_records.OffsetKey):
            v = group_records.decode_offset_value(value)
            data = {"offset": v.offset}
            if version >= 3:
                data["leaderEpoch"] = v.leader_epoch
            data.update(metadata=v.metadata, commitTimestamp=v.commit_timestamp)
            if version == 1:
                data["expireTimestamp"] = v.expire_timestamp
        else:
            g = group_records.decode_group_value(value)
            data = {"protocolType": g.protocol_type, "generation": g.generation, "protocol": g.protocol,
                    "leader": g.leader}
            if version >= 2:
                data["currentStateTimestamp"] = g.current_state_timestamp
            members = []
            for m in g.members:
                md = {"memberId": m.member_id}
                if version >= 3:
                    md["groupInstanceId"] = m.group_instance_id
                md.update(clientId=m.client_id, clientHost=m.client_host)
                if version >= 1:
                    md["rebalanceTimeout"] = m.rebalance_timeout
                md["sessionTimeout"] = m.session_timeout
                consumer = g.protocol_type == "consumer"
                md["subscription"] = _subscription_json(m.subscription) if consumer else _b64(m.subscription)
                md["assignment"] = _assignment_json(m.assignment) if consumer else _b64(m.assignment)
                members.append(md)
            data["members"] = members
    except (group_records.RecordFormatError, struct.error) as e:
        return f"Error at offset {offset}, skipping. {e}", None
    return _json(key_json), _json({"version": str(version), "data": data})


def _topic_partitions_json(a) -> list:
    return [{"topicId": kafka_uuid(tid), "partitions": sorted(ps)} for tid, ps in sorted(a.items(), key=lambda x: x[0].bytes)]


def consumer_group_value(kind: int, value: bytes) -> dict:
    """The value of a consumer group's (KIP-848) record, with Kafka's JSON field names."""
    from broker.group import consumer_records as cr

    if kind == cr.GROUP_EPOCH_KEY:
        return {"epoch": cr.decode_int_value(value)}
    if kind == cr.TARGET_METADATA_KEY:
        return {"assignmentEpoch": cr.decode_int_value(value)}
    if kind == cr.PARTITION_METADATA_KEY:
        return {"topics": [{"topicId": kafka_uuid(tid), "topicName": name, "numPartitions": n}
                           for name, (tid, n) in cr.decode_partition_metadata(value).items()]}
    if kind == cr.MEMBER_METADATA_KEY:
        m = cr.decode_member_metadata(value)
        out = {"instanceId": m.instance_id, "rackId": m.rack_id, "clientId": m.client_id,
               "clientHost": m.client_host, "subscribedTopicNames": list(m.subscribed_topic_names),
               "subscribedTopicRegex": m.subscribed_topic_regex, "rebalanceTimeoutMs": m.rebalance_timeout_ms,
               "serverAssignor": m.server_assignor}
        if m.classic is not None:
            out["classicMemberMetadata"] = {
                "sessionTimeoutMs": m.classic.session_timeout_ms,
                "supportedProtocols": [{"name": n, "metadata": _b64(md)} for n, md in m.classic.protocols]}
        return out
    if kind == cr.REGEX_KEY:
        r = cr.decode_regex(value)
        return {"topics": sorted(r.topics), "version": r.version, "timestamp": r.timestamp}
    if kind == cr.TARGET_MEMBER_KEY:
        return {"topicPartitions": _topic_partitions_json(cr.decode_target_member(value))}
    c = cr.decode_current_assignment(value)
    return {"memberEpoch": c.member_epoch, "previousMemberEpoch": c.previous_member_epoch, "state": c.state,
            "assignedPartitions": _topic_partitions_json(c.assigned),
            "partitionsPendingRevocation": _topic_partitions_json(c.pending_revocation)}


def transaction_record(key: bytes | None, value: bytes | None, offset: int) -> tuple[str, str | None]:
    """(key, payload) of a __transaction_state record (Kafka's TransactionLogKey/Value JSON)."""
    from broker.txn import records as txn_records

    if key is None:
        raise ValueError(f"Failed to decode message at offset {offset} using the specified decoder "
                         "(message had a missing key)")
    try:
        tid = txn_records.decode_key(key)
    except (group_records.RecordFormatError, struct.error):
        return (f"Unknown record type {struct.unpack_from('>h', key, 0)[0] if len(key) >= 2 else -1} at offset "
                f"{offset}, skipping."), None
    key_json = _json({"type": "0", "data": {"transactionalId": tid}})
    if value is None:
        return key_json, "<DELETE>"
    try:
        version = struct.unpack_from(">h", value, 0)[0]
        v = txn_records.decode_value(value)
    except (group_records.RecordFormatError, struct.error) as e:
        return key_json, f"Error at offset {offset}, skipping. {e}"
    parts: dict[str, list[int]] = {}
    for t, p in v.partitions:
        parts.setdefault(t, []).append(p)
    data = {"producerId": v.producer_id, "producerEpoch": v.producer_epoch, "transactionTimeoutMs": v.timeout_ms,
            "transactionStatus": v.status,
            "transactionPartitions": [{"topic": t, "partitionIds": ps} for t, ps in parts.items()] if parts else None,
            "transactionLastUpdateTimestampMs": v.last_update_ms, "transactionStartTimestampMs": v.start_ms}
    if version >= 1:  # tagged fields, when not at their defaults
        if v.prev_producer_id != -1:
            data["previousProducerId"] = v.prev_producer_id
        if v.next_producer_id != -1:
            data["nextProducerId"] = v.next_producer_id
        if v.client_tv != 0:
            data["clientTransactionVersion"] = v.client_tv
    return key_json, _json({"version": str(version), "data": data})


# --- the metadata log: krafty's records as Kafka's tool prints metadata records
def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def metadata_json(data: bytes) -> str:
    """A krafty metadata record (metadata/records.py's JSON) as ``{"type":"TOPIC_RECORD","data":{...}}``."""
    try:
        d = json.loads(data)
        kind = d.pop("t")
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        return f"Error at record, skipping. {e}"
    out = {}
    for k, v in d.items():
        if k.endswith("_id") and isinstance(v, str) and re.fullmatch(r"[0-9a-f]{32}", v):
            v = kafka_uuid(uuid.UUID(hex=v))
        out[_camel(k)] = v
    name = re.sub(r"(?<!^)(?=[A-Z])", "_", kind).upper() + "_RECORD"
    return _json({"type": name, "data": out})


def base_offset_of(path: str) -> int:
    """A segment file's base offset, from its name (``00000000000000000042.log``)."""
    stem = os.path.basename(path).split(".")[0]
    if not stem.isdigit():
        raise UsageError(f"{path} is not a segment file: its name must be its base offset (20 digits)")
    return int(stem)


class Dumper:
    def __init__(self, args, out, err):
        self.args, self.out, self.err = args, out, err
        self.errors = Errors()
        self.print_data = bool(args.print_data_log or args.offsets_decoder or args.transaction_log_decoder
                               or args.cluster_metadata_decoder or args.key_decoder_class or args.value_decoder_class)
        self.deep = bool(args.deep_iteration or self.print_data)

    def w(self, line: str = "") -> None:
        self.out.write(line + "\n")

    def dump(self, path: str) -> None:
        self.w(f"Dumping {path}")
        name = os.path.basename(path)
        if name == "raft.db":
            return self.dump_raft_db(path)
        if name == "bootstrap.checkpoint":
            return self.dump_bootstrap(path)
        suffix = name[name.rfind("."):] if "." in name else ""
        handler = {".log": self.dump_log, ".index": self.dump_index, ".timeindex": self.dump_time_index,
                   ".snapshot": self.dump_producer_snapshot, ".txnindex": self.dump_txn_index}.get(suffix)
        if handler is None:
            print(f"Ignoring unknown file {path}", file=self.err)
            return
        handler(path)

    # ---- data segments
    def _parse_record(self, rec) -> tuple[str | None, str | None]:
        a = self.args
        if a.offsets_decoder:
            return offsets_record(rec.key, rec.value, rec.offset)
        if a.transaction_log_decoder:
            return transaction_record(rec.key, rec.value, rec.offset)
        if a.cluster_metadata_decoder:
            return None, metadata_json(rec.value) if rec.value is not None else None
        return (None if rec.key is None else decode_plain(a.key_decoder_class or "StringDecoder", rec.key),
                None if rec.value is None else decode_plain(a.value_decoder_class or "StringDecoder", rec.value))

    def dump_log(self, path: str) -> None:
        self.w(f"Log starting offset: {base_offset_of(path)}")
        batches, valid, size = read_batches(path, self.args.max_bytes)
        last = -1
        for h, data in batches:
            self.w(batch_line(h, data))
            if not self.deep:
                continue
            ts_type = "LogAppendTime" if h.timestamp_type else "CreateTime"
            for rec in iter_records(data, DEFAULT_RECORDS_LIMIT):
                if rec.offset != last + 1:
                    self.errors.non_consecutive.setdefault(os.path.abspath(path), []).append((last, rec.offset))
                last = rec.offset
                line = ""
                if not self.args.skip_record_metadata:
                    seq = -1 if h.base_sequence < 0 else (h.base_sequence + rec.offset - h.base_offset) & 0x7FFFFFFF
                    line = (f"| offset: {rec.offset} {ts_type}: {rec.timestamp} "
                            f"keySize: {-1 if rec.key is None else len(rec.key)} "
                            f"valueSize: {-1 if rec.value is None else len(rec.value)} sequence: {seq} "
                            f"headerKeys: [{','.join(k for k, _ in rec.headers)}]")
                    if h.is_control:
                        line += control_text(rec.key, rec.value)
                if self.print_data and not h.is_control:
                    prefix = "| " if self.args.skip_record_metadata else " "
                    key, payload = self._parse_record(rec)
                    if key is not None:
                        line += f"{prefix}key: {key}"
                        prefix = " "
                    if payload is not None:
                        line += f"{prefix}payload: {payload}"
                self.w(line)
        if size > valid and self.args.max_bytes >= 2**31 - 1:
            self.w(f"Found {size - valid} invalid bytes at the end of {os.path.basename(path)}")

    def _segment(self, path: str, suffix: str) -> tuple[int, str]:
        name = os.path.basename(path)
        return base_offset_of(path), os.path.join(os.path.dirname(os.path.abspath(path)), name.split(".")[0] + suffix)

    @staticmethod
    def _entries(path: str, st: struct.Struct) -> tuple[list[tuple[int, int]], int]:
        with open(path, "rb") as f:
            data = f.read()
        return [st.unpack_from(data, i) for i in range(0, len(data) - len(data) % st.size, st.size)], \
            len(data) % st.size

    def dump_index(self, path: str) -> None:
        base, log_path = self._segment(path, ".log")
        entries, partial = self._entries(path, _OFFSET_INDEX)
        if not entries:
            self.w(f"{path} is empty.")
            return
        if self.args.index_sanity_check:
            last_rel = [rel for rel, _ in entries]
            if partial or any(b <= a for a, b in zip(last_rel, last_rel[1:], strict=False) if b != 0):
                raise UsageError(f"Corrupt index found, index file ({path}) has non-zero size but the last offset "
                                 "is not increasing or the size is not a multiple of the entry size")
            self.w(f"{path} passed sanity check.")
            return
        by_pos = {h.pos: h for h, _ in read_batches(log_path)[0]} if os.path.exists(log_path) else {}
        for i, (rel, position) in enumerate(entries):
            offset = base + rel
            if offset == base and i > 0:
                return
            h = by_pos.get(position)
            found = h.base_offset if h is not None else -1  # krafty indexes a batch's base offset
            if found != offset:
                self.errors.index_mismatches.setdefault(os.path.abspath(path), []).append((offset, found))
            if not self.args.verify_index_only:
                self.w(f"offset: {offset} position: {position}")

    def dump_time_index(self, path: str) -> None:
        base, log_path = self._segment(path, ".log")
        entries, partial = self._entries(path, _TIME_INDEX)
        if self.args.index_sanity_check:
            if partial:
                raise UsageError(f"Corrupt time index found, time index file ({path}) has non-zero size but the "
                                 "size is not a multiple of the entry size")
            self.w(f"{path} passed sanity check.")
            return
        by_base = {h.base_offset: (h, d) for h, d in read_batches(log_path)[0]} if os.path.exists(log_path) else {}
        prev = -1
        for i, (ts, rel) in enumerate(entries):
            offset = base + rel
            if offset == base and i > 0:
                return
            hit = by_base.get(offset)
            where = os.path.abspath(path)
            if hit is None:
                self.errors.not_found.setdefault(where, []).append((offset, -1))
            else:
                h, _ = hit
                if h.max_timestamp != ts:
                    self.errors.time_mismatches.setdefault(where, []).append((ts, h.max_timestamp))
                if prev >= ts:
                    self.errors.out_of_order.setdefault(where, []).append((ts, prev))
            if not self.args.verify_index_only:
                self.w(f"timestamp: {ts} offset: {offset}")
            prev = ts

    def dump_producer_snapshot(self, path: str) -> None:
        with open(path, "rb") as f:
            producers = parse_snapshot(f.read())
        if producers is None:
            print(f"Snapshot {path} is corrupt: not a version-1 producer state snapshot with a valid CRC",
                  file=self.err)
            return
        for e in producers.values():
            txn = "OptionalLong.empty" if e.current_txn_first_offset < 0 else f"OptionalLong[{e.current_txn_first_offset}]"
            line = (f"producerId: {e.producer_id} producerEpoch: {e.epoch} coordinatorEpoch: {e.coordinator_epoch} "
                    f"currentTxnFirstOffset: {txn} lastTimestamp: {e.last_timestamp}")
            if e.batches:
                b = e.batches[-1]
                line += (f" firstSequence: {b.first_seq} lastSequence: {b.last_seq} lastOffset: {b.last_offset} "
                         f"offsetDelta: {b.last_offset - b.first_offset} timestamp: {b.timestamp}")
            self.w(line)

    def dump_txn_index(self, path: str) -> None:
        entries, partial = self._entries(path, TXN_ENTRY)
        for version, pid, first, last, lso in entries:
            self.w(f"version: {version} producerId: {pid} firstOffset: {first} lastOffset: {last} "
                   f"lastStableOffset: {lso}")
        if partial:
            print(f"Found {partial} invalid bytes at the end of {os.path.basename(path)}", file=self.err)

    # ---- the metadata log
    def _payload(self, data: bytes) -> str:
        return metadata_json(data) if self.args.cluster_metadata_decoder else data.decode("utf-8", "replace")

    def dump_bootstrap(self, path: str) -> None:
        self.w("KRaft bootstrap snapshot")
        with open(path, "rb") as f:
            lines = [line for line in f.read().splitlines() if line.strip()]
        for i, line in enumerate(lines):
            self.w(f"| record: {i} valueSize: {len(line)}" + (f" payload: {self._payload(line)}"
                                                               if self.print_data else ""))

    def dump_raft_db(self, path: str) -> None:
        from raft.store import decode_records

        try:
            db = sqlite3.connect(f"file:{os.path.abspath(path)}?mode=ro", uri=True)
            state = db.execute("SELECT epoch, voted_for, leader_id FROM quorum_state WHERE k = 0").fetchone()
            snap = db.execute("SELECT end_offset, epoch, records FROM snapshot WHERE k = 0").fetchone()
            entries = db.execute("SELECT offset, epoch, timestamp_ms, control, data FROM entries ORDER BY offset")
        except sqlite3.Error as e:
            raise UsageError(f"{path} is not a krafty metadata log (raft.db): {e}") from None
        if state is not None:
            self.w(f"Quorum state: epoch: {state[0]} votedFor: {-1 if state[1] is None else state[1]} "
                   f"leaderId: {-1 if state[2] is None else state[2]}")
        if snap is not None:
            records = decode_records(snap[2])
            self.w(f"Snapshot end offset: {snap[0]}, epoch: {snap[1]} records: {len(records)}")
            if self.deep:
                for i, r in enumerate(records):
                    self.w(f"| record: {i} valueSize: {len(r)}" + (f" payload: {self._payload(r)}"
                                                                    if self.print_data else ""))
        first = True
        for offset, epoch, ts, control, data in entries:
            if first:
                self.w(f"Log starting offset: {offset}")
                first = False
            self.w(f"baseOffset: {offset} lastOffset: {offset} count: 1 partitionLeaderEpoch: {epoch} "
                   f"isControl: {str(bool(control)).lower()} timestamp: {ts} size: {len(data)}")
            if not self.deep:
                continue
            line = f"| offset: {offset} timestamp: {ts} valueSize: {len(data)}"
            if control:
                kind, _, rest = bytes(data).decode("utf-8", "replace").partition(" ")
                line += f" {kind}: {rest}"
            elif self.print_data:
                line += f" payload: {self._payload(bytes(data))}"
            self.w(line)
        db.close()


def build_parser() -> Parser:
    p = Parser(prog="krafty dump-log", description="Print log segments, indexes, producer snapshots, transaction "
               "indexes and the metadata log (like Kafka's kafka-dump-log.sh).")
    p.add_argument("--files", required=True, help="comma-separated files: .log, .index, .timeindex, .snapshot, "
                   ".txnindex, raft.db, bootstrap.checkpoint")
    p.add_argument("--print-data-log", action="store_true", help="print the records' keys and values")
    p.add_argument("--deep-iteration", action="store_true", help="one line per record, not only per batch")
    p.add_argument("--skip-record-metadata", action="store_true", help="records without their metadata")
    p.add_argument("--verify-index-only", action="store_true", help="check the index, print no entries")
    p.add_argument("--index-sanity-check", action="store_true", help="only the check a broker makes at start")
    p.add_argument("--max-message-size", type=int, default=5 * 1024 * 1024, help="(accepted, as Kafka's tool)")
    p.add_argument("--max-bytes", type=int, default=2**31 - 1, help="read at most this many bytes of a .log")
    p.add_argument("--key-decoder-class", help="StringDecoder (default), LongDecoder, IntegerDecoder")
    p.add_argument("--value-decoder-class", help="StringDecoder (default), LongDecoder, IntegerDecoder")
    dec = p.add_mutually_exclusive_group()
    dec.add_argument("--offsets-decoder", action="store_true", help="records of __consumer_offsets")
    dec.add_argument("--transaction-log-decoder", action="store_true", help="records of __transaction_state")
    dec.add_argument("--cluster-metadata-decoder", action="store_true", help="metadata log records")
    dec.add_argument("--share-group-state-decoder", action="store_true", help=argparse.SUPPRESS)
    dec.add_argument("--remote-log-metadata-decoder", action="store_true", help=argparse.SUPPRESS)
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.share_group_state_decoder or args.remote_log_metadata_decoder:
            raise UsageError("krafty has no share groups nor tiered storage: --share-group-state-decoder and "
                             "--remote-log-metadata-decoder have nothing to decode")
        for d in (args.key_decoder_class, args.value_decoder_class):
            if d is not None and d.rsplit(".", 1)[-1] not in DECODERS:
                raise UsageError(f"decoder {d}: krafty has {', '.join(sorted(DECODERS))}")
        dumper = Dumper(args, sys.stdout, sys.stderr)
        for path in args.files.split(","):
            try:
                dumper.dump(path.strip())
            except FileNotFoundError as e:
                print(f"{e.filename} (No such file or directory)", file=sys.stderr)
                return 1
            except IsADirectoryError as e:
                print(f"{e.filename} (Is a directory)", file=sys.stderr)
                return 1
        dumper.errors.print(sys.stderr)
        return 0
    except UsageError as e:
        print(str(e), file=sys.stderr)
        return 1
    except BrokenPipeError:  # | head
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
