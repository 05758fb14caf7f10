"""Record the fuzzer's seed corpus from real-client traffic.

    .venv/bin/python -m bench.fuzz record [--out bench/fuzz/corpus.bin.gz]

Starts a krafty node (bench/fuzz/target.py) whose listeners are advertised at two recording
TCP proxies on 127.0.0.1, so every connection a client opens goes through them; runs the
sessions of bench/fuzz/sessions.py (confluent-kafka, kafka-python, aiokafka, kcat) and a raw
one (every ApiVersions version, SASL handshakes v0 and v1 with authenticate v0-v2); keeps
every distinct request frame, up to ``--per-api`` per API, version and client; then fills
every (API, version) krafty serves that no client sent by re-encoding a recorded request of
the same API at that version with kio (source "transcoded"), or, for APIs no client sends,
from a small hand-written request (source "synthetic").

The corpus depends on the clients' versions and on timing (member ids, timestamps), so two
recordings differ in detail; the fuzzer is deterministic for a given corpus file."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import socket
import struct
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from bench.fuzz import corpus, frames, sessions
from bench.fuzz.target import (
    ADMIN,
    CORPUS_TOPIC_IDS,
    TOPICS,
    USERS,
    TopicIdSwap,
    create_topics,
    free_port,
    make_node,
    topic_ids,
)
from broker.protocol import codec
from broker.protocol.apis import SUPPORTED, ApiKey

log = logging.getLogger("krafty.fuzz.record")
MAX_FRAME = 64 * 1024

_SHARE_TOPIC = CORPUS_TOPIC_IDS["fuzz-plain"]
_SHARE_IMPLICIT = sessions.SHARE_GROUP + "-implicit"

# Requests for the APIs none of the clients sends (kio field dicts, encoded at every version).
SYNTHETIC: dict[int, dict] = {
    ApiKey.OFFSET_FOR_LEADER_EPOCH: {"replica_id": -1, "topics": [
        {"topic": "fuzz-plain", "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]},
    ApiKey.DESCRIBE_CLIENT_QUOTAS: {"components": [{"entity_type": "client-id", "match_type": 1}], "strict": False},
    ApiKey.ALTER_CLIENT_QUOTAS: {"entries": [{
        "entity": [{"entity_type": "client-id", "entity_name": "fuzz-client"}],
        "ops": [{"key": "producer_byte_rate", "value": 1e9, "remove": False}]}], "validate_only": False},
    ApiKey.DESCRIBE_PRODUCERS: {"topics": [{"name": "fuzz-plain", "partition_indexes": [0, 1, 2]}]},
    ApiKey.OFFSET_DELETE: {"group_id": "fuzz-group-kafka-python", "topics": [
        {"name": "fuzz-plain", "partitions": [{"partition_index": 0}]}]},
    ApiKey.INIT_PRODUCER_ID: {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1,
                              "producer_epoch": -1},
    ApiKey.DELETE_RECORDS: {"topics": [{"name": "fuzz-plain", "partitions": [{"partition_index": 2, "offset": 0}]}],
                            "timeout": 5000},
    # what a transaction coordinator sends a partition leader (an unknown producer's abort)
    ApiKey.WRITE_TXN_MARKERS: {"markers": [{"producer_id": 999_999, "producer_epoch": 0, "transaction_result": False,
                                            "topics": [{"name": "fuzz-plain", "partition_indexes": [1]}],
                                            "coordinator_epoch": 0}]},
    ApiKey.DESCRIBE_TRANSACTIONS: {"transactional_ids": ["fuzz-txn-confluent", "fuzz-txn-unknown"]},
    ApiKey.LIST_TRANSACTIONS: {"state_filters": [], "producer_id_filters": [], "duration_filter": -1},
    # operator tools (kafka-log-dirs, kafka-leader-election, kafka-reassign-partitions, kafka-topics):
    # nothing that moves or unregisters the fuzz node's own partitions
    ApiKey.DESCRIBE_LOG_DIRS: {"topics": None},
    ApiKey.ELECT_LEADERS: {"election_type": 0, "topic_partitions": [{"topic": "fuzz-plain", "partitions": [0]}],
                           "timeout": 5000},
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: {"timeout": 5000, "topics": [
        {"name": "fuzz-plain", "partitions": [{"partition_index": 0, "replicas": None}]}]},
    ApiKey.LIST_PARTITION_REASSIGNMENTS: {"timeout": 5000, "topics": None},
    ApiKey.UNREGISTER_BROKER: {"broker_id": 99},
    # the quorum and features, answered without changing them: an unknown feature, a voter that
    # is not an observer of the metadata log (refused: not caught up), a voter not in the set
    ApiKey.DESCRIBE_QUORUM: {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]},
    ApiKey.UPDATE_FEATURES: {"timeout": 5000, "feature_updates": [
        {"feature": "fuzz.unknown", "max_version_level": 1, "upgrade_type": 1, "allow_downgrade": False}],
        "validate_only": True},
    ApiKey.ADD_RAFT_VOTER: {"cluster_id": None, "timeout": 5000, "voter_id": 99,
                            "voter_directory_id": uuid.UUID(int=99),
                            "listeners": [{"name": "CONTROLLER", "host": "127.0.0.1", "port": 9}]},
    ApiKey.REMOVE_RAFT_VOTER: {"cluster_id": None, "voter_id": 99, "voter_directory_id": uuid.UUID(int=99)},
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: {"topics": [{"name": "fuzz-plain"}, {"name": "fuzz-compact"}],
                                       "response_partition_limit": 2, "cursor": None},
    # a KIP-848 consumer joining (librdkafka sends these with group.protocol=consumer)
    ApiKey.CONSUMER_GROUP_HEARTBEAT: {"group_id": "fuzz-group-848", "member_id": "fuzz-member-848", "member_epoch": 0,
                                      "instance_id": None, "rack_id": None, "rebalance_timeout": 30000,
                                      "subscribed_topic_names": ["fuzz-plain"], "subscribed_topic_regex": None,
                                      "server_assignor": None, "topic_partitions": []},
    ApiKey.CONSUMER_GROUP_DESCRIBE: {"group_ids": ["fuzz-group-848"], "include_authorized_operations": True},
    # kafka-reassign-partitions' replica move to a dir the node does not have (LOG_DIR_NOT_FOUND)
    ApiKey.ALTER_REPLICA_LOG_DIRS: {"dirs": [{"path": "/nonexistent/fuzz-dir", "topics": [
        {"name": "fuzz-plain", "partitions": [0]}]}]},
    # KIP-932 admin (kafka-share-groups.sh; confluent-kafka 2.16's AdminClient has none of these) on
    # the share groups of sessions.confluent_share: its partitions of fuzz-plain, the offsets of
    # one partition of it and of fuzz-compact (the group is empty: the session closed its consumer)
    ApiKey.SHARE_GROUP_DESCRIBE: {"group_ids": [sessions.SHARE_GROUP, "fuzz-group-confluent"],
                                  "include_authorized_operations": True},
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: {"groups": [
        {"group_id": sessions.SHARE_GROUP, "topics": [{"topic_name": "fuzz-plain", "partitions": [0, 1, 2]}]},
        {"group_id": _SHARE_IMPLICIT, "topics": None}]},
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: {"group_id": sessions.SHARE_GROUP, "topics": [
        {"topic_name": "fuzz-plain", "partitions": [{"partition_index": 0, "start_offset": 0}]}]},
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: {"group_id": sessions.SHARE_GROUP, "topics": [{"topic_name": "fuzz-compact"}]},
    # what share-partition leaders send the share coordinator (the corpus' topic id of fuzz-plain,
    # which the fuzzer swaps for its node's): state of the session's group, whose consumers are
    # gone; delivery states 2 acknowledged, 4 archived
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: {"group_id": sessions.SHARE_GROUP, "topics": [
        {"topic_id": _SHARE_TOPIC, "partitions": [{"partition": 2, "state_epoch": 1, "start_offset": 0}]}]},
    ApiKey.READ_SHARE_GROUP_STATE: {"group_id": sessions.SHARE_GROUP, "topics": [
        {"topic_id": _SHARE_TOPIC, "partitions": [{"partition": 0, "leader_epoch": 0}]}]},
    ApiKey.WRITE_SHARE_GROUP_STATE: {"group_id": sessions.SHARE_GROUP, "topics": [{"topic_id": _SHARE_TOPIC, "partitions": [
        {"partition": 1, "state_epoch": 0, "leader_epoch": 0, "start_offset": 0, "delivery_complete_count": 2,
         "state_batches": [{"first_offset": 0, "last_offset": 0, "delivery_state": 2, "delivery_count": 1},
                           {"first_offset": 1, "last_offset": 1, "delivery_state": 4, "delivery_count": 5}]}]}]},
    ApiKey.DELETE_SHARE_GROUP_STATE: {"group_id": _SHARE_IMPLICIT, "topics": [
        {"topic_id": _SHARE_TOPIC, "partitions": [{"partition": 0}]}]},
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: {"group_id": sessions.SHARE_GROUP, "topics": [
        {"topic_id": _SHARE_TOPIC, "partitions": [{"partition": 0, "leader_epoch": 0}]}]},
}


class RecordingProxy:
    """Forwards 127.0.0.1:port to the node and keeps every client->node request frame."""

    def __init__(self, listener: str, upstream: int, sink: list, tag: list[str]):
        self.listener, self.upstream, self.sink, self.tag = listener, upstream, sink, tag
        self.port = free_port()
        self._next_conn = 0
        self.conn_base = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    async def _handle(self, reader, writer) -> None:
        self._next_conn += 1
        conn = self.conn_base + self._next_conn
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream)
        except OSError:
            writer.close()
            return

        async def client_to_node():
            buf, raw_tokens = bytearray(), 0
            while data := await reader.read(65536):
                up_w.write(data)
                buf += data
                while len(buf) >= 4:
                    (size,) = struct.unpack_from(">i", buf)
                    if size < 0 or len(buf) < 4 + size:
                        break
                    frame = bytes(buf[4:4 + size])
                    del buf[:4 + size]
                    if raw_tokens:  # bare SASL tokens after SaslHandshake v0
                        raw_tokens -= 1
                        key, ver = -1, 0
                    else:
                        key, ver = frames.api_of(frame)
                        if key == ApiKey.SASL_HANDSHAKE and ver == 0:
                            raw_tokens = 2 if b"SCRAM" in frame else 1
                    self.sink.append(corpus.Entry(self.tag[0], self.listener, conn, key, ver, frame))
            up_w.write_eof()

        async def node_to_client():
            while data := await up_r.read(65536):
                writer.write(data)
                await writer.drain()
            writer.close()

        try:
            await asyncio.gather(client_to_node(), node_to_client())
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
            up_w.close()


def _raw_session(plain_port: int, sasl_port: int) -> None:
    """ApiVersions of every version (and two unsupported ones), SASL logins the clients do not
    do (SaslHandshake v0 with a bare token; SaslAuthenticate v0-v2), sent through the proxies."""
    def exchange(port: int, reqs: list[bytes]) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            for i, r in enumerate(reqs):
                s.sendall(frames.sized(frames.with_cid(r, i + 1)))
                head = _recv(s, 4)
                _recv(s, struct.unpack(">i", head)[0])

    for v in range(0, SUPPORTED[ApiKey.API_VERSIONS][1] + 2):
        data = {"client_software_name": "krafty-fuzz", "client_software_version": "1.0"}
        body = codec.encode(codec.build(codec.request_type(ApiKey.API_VERSIONS, min(v, 4)), data))
        exchange(plain_port, [frames.header(ApiKey.API_VERSIONS, v, 1) + body])
    exchange(plain_port, [frames.header(ApiKey.API_VERSIONS, 127, 1)])
    plain = b"\x00alice\x00" + USERS["alice"].encode()
    # SaslHandshake v0, then the PLAIN token without a Kafka header
    hs0 = frames.request(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})
    with socket.create_connection(("127.0.0.1", sasl_port), timeout=10) as s:
        s.sendall(frames.sized(hs0))
        _recv(s, struct.unpack(">i", _recv(s, 4))[0])
        s.sendall(frames.sized(plain))
        _recv(s, struct.unpack(">i", _recv(s, 4))[0])
        md = frames.request(ApiKey.METADATA, 4, {"topics": None, "allow_auto_topic_creation": False}, 3)
        s.sendall(frames.sized(md))
        _recv(s, struct.unpack(">i", _recv(s, 4))[0])
    for av in range(3):
        admin_token = b"\x00" + ADMIN[0].encode() + b"\x00" + ADMIN[1].encode()
        exchange(sasl_port, [frames.request(ApiKey.API_VERSIONS, 0, {}),
                             frames.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}),
                             frames.request(ApiKey.SASL_AUTHENTICATE, av, {"auth_bytes": admin_token if av else plain}),
                             frames.request(ApiKey.METADATA, 9, {"topics": [{"name": "fuzz-plain"}],
                                                                 "allow_auto_topic_creation": False})])


def _recv(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def _transcode(entry: corpus.Entry, version: int) -> bytes | None:
    """``entry``'s request re-encoded at ``version`` (None when kio cannot carry it over)."""
    try:
        hdr = codec.parse_request_header(entry.frame)
        req = codec.decode_request(entry.api_key, entry.api_version, entry.frame, hdr.size)
        data = codec.to_dict(req)
        return frames.header(entry.api_key, version, 1) + codec.encode(
            codec.build(codec.request_type(entry.api_key, version), data))
    except Exception:  # noqa: BLE001 - a field kio cannot map back: try another entry
        return None


def _synthetic(api: int, version: int) -> bytes | None:
    try:
        return frames.request(api, version, SYNTHETIC[api])
    except Exception:  # noqa: BLE001
        return None


def select(entries: list[corpus.Entry], per_api: int) -> list[corpus.Entry]:
    """Distinct frames (correlation id ignored), at most ``per_api`` per (API, version, client),
    then one request for every (API, version) krafty serves that is still missing."""
    seen, count, out = set(), {}, []
    for e in entries:
        if len(e.frame) > MAX_FRAME:
            continue
        key = (e.listener, e.api_key, e.api_version, e.frame[:4] + e.frame[8:])
        slot = (e.listener, e.api_key, e.api_version, e.source)
        if key in seen or (e.listener == "plain" and count.get(slot, 0) >= per_api):
            continue
        seen.add(key)
        count[slot] = count.get(slot, 0) + 1
        out.append(e)
    have = {(e.api_key, e.api_version) for e in out}
    conn = max((e.conn for e in out), default=0) + 1
    for api, (lo, hi) in sorted(SUPPORTED.items()):
        recorded = sorted((e for e in out if e.api_key == api and e.source not in ("transcoded", "synthetic")),
                          key=lambda e: -len(e.frame))
        for v in range(lo, hi + 1):
            if (api, v) in have:
                continue
            frame, source = None, "transcoded"
            for e in sorted(recorded, key=lambda e: abs(e.api_version - v)):
                if (frame := _transcode(e, v)) is not None:
                    break
            if frame is None and api in SYNTHETIC:
                frame, source = _synthetic(api, v), "synthetic"
            if frame is None:
                log.warning("no request for %s v%d in the corpus", frames.api_name(api), v)
                continue
            out.append(corpus.Entry(source, "plain", conn, api, v, frame))
            conn += 1
    return out


def record(out_path: Path, per_api: int = 24, only: list[str] | None = None, add: bool = False
           ) -> list[corpus.Entry]:
    """Record the sessions (``only``: some of them) into ``out_path``; ``add``: keep the frames
    the file has (but its transcoded and synthetic ones, made again) and add the new ones."""
    kept = [e for e in corpus.load(out_path) if e.source not in ("transcoded", "synthetic")] if add else []
    captured: list[corpus.Entry] = []
    tag = ["setup"]
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True, name="fuzz-record-proxy").start()
    with tempfile.TemporaryDirectory(prefix="krafty-fuzz-record-") as tmp:
        plain_port = free_port()
        sasl_proxy_port = free_port()
        node, sasl_port = make_node(tmp, advertise={"PLAINTEXT": plain_port, "SASL_PLAINTEXT": sasl_proxy_port})
        proxies = [RecordingProxy("plain", node.port, captured, tag), RecordingProxy("sasl", sasl_port, captured, tag)]
        proxies[0].port, proxies[1].port = plain_port, sasl_proxy_port
        proxies[1].conn_base = 1_000_000
        for p in proxies:
            asyncio.run_coroutine_threadsafe(p.start(), loop).result(10)
        try:
            node.start()
            create_topics(node.bootstrap)
            ids = topic_ids(node.bootstrap)
            bootstrap, sasl_bootstrap = f"127.0.0.1:{plain_port}", f"127.0.0.1:{sasl_proxy_port}"
            for name, fn in sessions.SESSIONS.items():
                if only and name not in only:
                    continue
                tag[0] = name
                t0 = time.monotonic()
                n0 = len(captured)
                fn(bootstrap, sasl_bootstrap)
                time.sleep(0.5)
                log.warning("%s: %d frames in %.1f s", name, len(captured) - n0, time.monotonic() - t0)
            tag[0] = "raw"
            _raw_session(plain_port, sasl_proxy_port)
            time.sleep(0.3)
        finally:
            node.close()
            loop.call_soon_threadsafe(loop.stop)
    base = max((e.conn for e in kept), default=-1) + 1
    to_corpus = TopicIdSwap({ids[n]: CORPUS_TOPIC_IDS[n] for n in TOPICS})
    entries = select(kept + [dataclasses.replace(e, conn=e.conn + base, frame=to_corpus(e.frame)) for e in captured],
                     per_api)
    corpus.save(entries, out_path)
    return entries


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fuzz record", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=corpus.DEFAULT_PATH)
    ap.add_argument("--per-api", type=int, default=24, help="distinct frames kept per API, version and client")
    ap.add_argument("--only", action="append", help="run only this client session (repeatable)")
    ap.add_argument("--add", action="store_true", help="keep the corpus's recorded frames and add these")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    entries = record(args.out, args.per_api, args.only, args.add)
    print(summary(entries, args.out))
    return 0


def summary(entries: list[corpus.Entry], path: Path | None = None) -> str:
    by_src: dict[str, int] = {}
    for e in entries:
        by_src[e.source] = by_src.get(e.source, 0) + 1
    apis = {(e.api_key, e.api_version) for e in entries}
    missing = [f"{frames.api_name(k)} v{v}" for k, (lo, hi) in sorted(SUPPORTED.items())
               for v in range(lo, hi + 1) if (k, v) not in apis]
    size = f", {path.stat().st_size / 1024:.0f} KiB" if path else ""
    return (f"{len(entries)} frames{size}; by source: "
            + ", ".join(f"{s} {n}" for s, n in sorted(by_src.items()))
            + f"; {len(apis)} API versions" + (f"; missing: {', '.join(missing)}" if missing else "; none missing"))


if __name__ == "__main__":
    sys.exit(main())
