"""The fuzzer of bench/fuzz keeps working: its corpus covers every API version, inputs are a
function of (seed, id), hostile batches are what they claim to be, the oracles see what they
must, a short run against a memory-limited node crashes nothing, and a crash is caught and
its inputs saved for replay."""

from __future__ import annotations

import gzip
import json
import os
import signal
import struct
import uuid
import zlib
from pathlib import Path

import crc32c
import lz4.frame
import pytest
import zstandard

from bench.fuzz import corpus, gen, hostile, mutate, oracle
from bench.fuzz.harness import Fuzzer, Options, load_replay
from bench.fuzz.target import CORPUS_TOPIC_IDS, TopicIdSwap
from broker.log.batch import HEADER_SIZE, read_varint, unpack_header
from broker.protocol import codec
from broker.protocol.apis import SUPPORTED, ApiKey
from common.errors import ErrorCode

ENTRIES = corpus.load()
CTX = hostile.Context(now_ms=gen.DEFAULT_NOW_MS)


def test_corpus_is_small_and_has_a_request_for_every_api_version_krafty_serves():
    assert corpus.DEFAULT_PATH.stat().st_size < 2 * 1024 * 1024
    have = {(e.api_key, e.api_version) for e in ENTRIES}
    missing = [(k, v) for k, (lo, hi) in SUPPORTED.items() for v in range(lo, hi + 1) if (k, v) not in have]
    assert missing == []
    sources = {e.source for e in ENTRIES}
    assert {"confluent-kafka", "kafka-python", "aiokafka", "kcat"} <= sources
    recorded = {e.api_key for e in ENTRIES if e.source in ("confluent-kafka", "kafka-python", "aiokafka", "kcat")}
    assert {ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT,
            ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.LEAVE_GROUP, ApiKey.LIST_OFFSETS,
            ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, ApiKey.CREATE_ACLS,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS} <= recorded
    assert corpus.sasl_logins(ENTRIES), "no SASL login was recorded"
    # a share consumer's traffic (KIP-932), its topic ids the corpus' own (the harness swaps in
    # its node's), and the share-state APIs no client sends as synthetic requests naming them
    share = [e for e in ENTRIES if e.source == "confluent-kafka-share"]
    assert {ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE} <= {e.api_key for e in share}
    ids = {t.bytes for t in CORPUS_TOPIC_IDS.values()}
    for api in (ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE, ApiKey.READ_SHARE_GROUP_STATE,
                ApiKey.WRITE_SHARE_GROUP_STATE):
        assert any(i in e.frame for e in ENTRIES if e.api_key == api for i in ids), api.name


def test_topic_id_swap_rewrites_every_occurrence_and_nothing_else():
    a, b, c = (CORPUS_TOPIC_IDS[t] for t in ("fuzz-plain", "fuzz-compact", "fuzz-gzip"))
    x, y = uuid.UUID(int=1), uuid.UUID(int=2)
    frame = b"head" + a.bytes + b"mid" + b.bytes + a.bytes + c.bytes
    assert TopicIdSwap({a: x, b: y})(frame) == b"head" + x.bytes + b"mid" + y.bytes + x.bytes + c.bytes
    assert TopicIdSwap({})(frame) == frame


def test_inputs_are_a_function_of_seed_and_id():
    a, b = gen.Generator(ENTRIES, seed=7), gen.Generator(ENTRIES, seed=7)
    for i in [*range(300), 10**6 + 3]:
        x, y = a.make(i), b.make(i)
        assert (x.kind, x.frames, x.wire, x.detail) == (y.kind, y.frames, y.wire, y.detail)
    other = gen.Generator(ENTRIES, seed=8)
    assert [a.make(i).frames for i in range(50)] != [other.make(i).frames for i in range(50)]
    kinds = {a.make(i).kind for i in range(2000)}
    assert kinds == set(gen.WEIGHTS)


def test_field_map_walks_every_recorded_request_to_its_end():
    mapped = 0
    for e in ENTRIES:
        if e.listener != "plain" or e.api_key < 0 or e.api_key not in SUPPORTED:
            continue
        fmap = mutate.field_map(e.frame)
        if fmap is None:
            continue
        mapped += 1
        for f in fmap:
            assert 0 <= f.pos < len(e.frame) and f.pos + f.size <= len(e.frame)
            if f.kind == "len" and f.what != "client_id":
                assert f.start <= f.end <= len(e.frame)
    assert mapped >= 0.95 * sum(1 for e in ENTRIES if e.listener == "plain" and e.api_key in SUPPORTED)


def test_a_null_array_edit_writes_length_minus_one_and_drops_the_elements():
    frame = next(e.frame for e in ENTRIES if e.api_key == ApiKey.METADATA and e.api_version == 4
                 and mutate.field_map(e.frame) and any(f.what == "array" and f.elems for f in mutate.field_map(e.frame)))
    f = next(f for f in mutate.field_map(frame) if f.what == "array" and f.elems)
    out = mutate.edit_null(frame, f, None)
    assert out[f.pos:f.pos + 4] == struct.pack(">i", -1) and len(out) == len(frame) - (f.end - f.pos) + 4


def test_hostile_batches_pass_the_crc_gate_and_carry_the_codec_they_name():
    import random
    import re
    for n in range(600):
        h = hostile.make(random.Random(n), CTX)
        if h.family.startswith(("crc/bad", "truncated", "nested/legacy", "bits/magic")) or len(h.data) < HEADER_SIZE:
            continue
        hdr = unpack_header(h.data, 0)
        assert crc32c.crc32c(h.data[21:hdr.size]) == hdr.crc, h.family
        m = re.search(r"/codec(\d)$", h.family)
        if m:
            assert hdr.compression == int(m.group(1)), h.family


@pytest.mark.parametrize("codec,xerial", [(1, False), (2, False), (2, True), (3, False), (4, False)])
def test_bombs_fit_in_a_batch_and_expand_far_beyond_it(codec, xerial):
    for variant in ("zeros", "record", "zeros+size-lie", "record+size-lie"):
        h = hostile._bomb(codec, variant, CTX.max_batch, CTX.bomb_target, CTX.now_ms, xerial)
        assert len(h.data) <= 1024 * 1024
        # only snappy's honest 20 MiB record is within what a bound may allow
        assert h.must_reject == ("/zeros" in h.family or "size-lie" in variant or codec != 2), h.family
        payload = h.data[HEADER_SIZE:]
        cap = 24 << 20
        out = _expand(codec, payload, cap)
        assert len(out) >= (16 << 20 if codec != 2 else 5 << 20), (h.family, len(out))
        if "/record" in h.family:  # one keyed record whose value is the whole expansion
            length, pos = read_varint(out, 0)
            assert length > 10 << 20
        if variant.endswith("size-lie") and codec == 2 and not xerial:
            assert payload.startswith(b"\xff\xff\xff\xff\x0f")  # the preamble claims 4 GiB


def _expand(codec: int, data: bytes, cap: int) -> bytes:
    if codec == 1:  # concatenated members
        out = bytearray()
        while data and len(out) < cap:
            d = zlib.decompressobj(31)
            out += d.decompress(data, cap - len(out))
            data = d.unused_data if d.eof else b""
        return bytes(out)
    if codec == 2:
        import cramjam
        if data.startswith(b"\x82SNAPPY\x00"):
            out, pos = bytearray(), 16
            while pos < len(data) and len(out) < cap:
                (n,) = struct.unpack_from(">i", data, pos)
                chunk = data[pos + 4:pos + 4 + n]
                out += bytes(cramjam.snappy.decompress_raw(_with_true_length(chunk)))
                pos += 4 + n
            return bytes(out)
        return bytes(cramjam.snappy.decompress_raw(_with_true_length(data)))
    if codec == 3:
        return lz4.frame.LZ4FrameDecompressor().decompress(data, max_length=cap)
    return zstandard.ZstdDecompressor().stream_reader(data).read(cap)


def _with_true_length(raw: bytes) -> bytes:
    """A raw snappy block whose preamble may lie, with the preamble it should have (the test
    must not allocate what the lie claims)."""
    _, pos = codec.read_uvarint(raw, 0)
    total, p = 0, pos
    while p < len(raw):
        tag = raw[p]
        if tag & 3 == 0:
            n = (tag >> 2) + 1
            total, p = total + n, p + 1 + n
        else:
            total, p = total + (tag >> 2) + 1, p + 3
    return mutate._uvarint(total) + raw[pos:]


def test_xxh32_gives_the_lz4_frame_header_checksum():
    f = lz4.frame.compress(b"abc" * 100, store_size=True)
    assert (hostile.xxh32(f[4:14]) >> 8) & 0xFF == f[14]


def test_log_scanner_finds_tracebacks_native_crashes_and_stalls(tmp_path):
    log = tmp_path / "node.log"
    log.write_text(
        "2026-11-24 20:08:26,992 ERROR krafty.apis: error handling JOIN_GROUP v7\n"
        "Traceback (most recent call last):\n"
        '  File "/x/broker/apis/group_apis.py", line 157, in _join\n'
        "    for p in req.protocols:\n"
        "TypeError: 'NoneType' object is not iterable\n"
        "2026-11-24 20:08:27,000 INFO krafty.network: fine\n")
    sc = oracle.LogScanner(log)
    [f] = sc.scan()
    assert f.kind == "traceback" and f.signature == "traceback:TypeError@broker/apis/group_apis.py:157:_join"
    with open(log, "a") as fh:
        fh.write("2026-11-24 20:09:00,000 WARNING krafty.stall: event loop stalled for 4361 ms; 1000 ms in, "
                 "the loop thread was at:\n"
                 '  File "/x/controller/placement.py", line 190, in _assign_rack_unaware\n'
                 "Fatal Python error: Aborted\n\nCurrent thread 0x01 (most recent call first):\n"
                 '  File "/x/broker/log/batch.py", line 304 in _snappy_decompress\n')
    kinds = {(f.kind, f.signature) for f in sc.scan()}
    assert kinds == {("stall", "stall:controller/placement.py:_assign_rack_unaware"),
                     ("fatal", "fatal:Aborted@broker/log/batch.py:304:_snappy_decompress")}
    assert sc.scan() == []
    with open(log, "a") as fh:  # a chained exception is one error: one finding, named by the last one
        fh.write("2026-11-24 22:00:31,484 ERROR krafty.network: closing connection 5932 after an unexpected error\n"
                 "Traceback (most recent call last):\n"
                 '  File "/x/site-packages/kio/static/_phantom.py", line 85, in parse\n'
                 "TypeError: Could not parse i16 from 32795\n\n"
                 "The above exception was the direct cause of the following exception:\n\n"
                 "Traceback (most recent call last):\n"
                 '  File "/x/broker/protocol/codec.py", line 130, in encode\n'
                 '  File "/x/site-packages/kio/serial/writers.py", line 152, in write_nullable_legacy_string\n'
                 "kio.serial.errors.OutOfBoundValue: String is too long for legacy string format (32795 > 32767)\n")
    [f] = sc.scan()
    assert f.signature == "traceback:kio.serial.errors.OutOfBoundValue@broker/protocol/codec.py:130:encode"


def _response(key: int, ver: int, data: dict, cid: int = 5) -> bytes:
    return codec.response_header(key, ver, cid) + codec.encode(codec.build_response(key, ver, data))


def test_oracles_flag_unknown_server_error_accepted_hostile_batches_and_leaked_passwords():
    fc = gen.frames.request(ApiKey.FIND_COORDINATOR, 2, {"key": "g", "key_type": 0})

    def coordinator(code):
        return _response(ApiKey.FIND_COORDINATOR, 2, {"throttle_time": 0, "error_code": code, "error_message": None,
                                                      "node_id": 1, "host": "127.0.0.1", "port": 9092})
    assert oracle.check_response(fc, coordinator(0), None) == []
    [f] = oracle.check_response(fc, coordinator(-1), None)
    assert f.kind == "unknown-server-error"
    [f] = oracle.check_response(fc, coordinator(0)[:-3], None)
    assert f.kind == "bad-response"
    produce = gen.produce_frame(8, "fuzz-plain", 0, b"x")

    def produced(code):
        return _response(ApiKey.PRODUCE, 8, {"throttle_time": 0, "responses": [{"name": "fuzz-plain", "partition_responses": [
            {"index": 0, "error_code": code, "base_offset": 0, "log_append_time": -1, "log_start_offset": 0,
             "record_errors": [], "error_message": None}]}]})
    must = ("fuzz-plain", 0, "bomb/zstd/zeros/30720MiB")
    assert [x.kind for x in oracle.check_response(produce, produced(0), must)] == ["accepted-hostile"]
    assert oracle.check_response(produce, produced(ErrorCode.CORRUPT_MESSAGE), must) == []
    # a lie inside the records of a well-framed batch: refused only by walking every record
    lie = ("fuzz-plain", 0, "count-lie/key-lie/codec0")
    assert [x.kind for x in oracle.check_response(produce, produced(0), lie)] == ["accepted-bad-records"]
    dc = gen.frames.request(ApiKey.DESCRIBE_CONFIGS, 1, {"resources": [{"resource_type": 4, "resource_name": "1"}]})
    leak = _response(ApiKey.DESCRIBE_CONFIGS, 1, {"throttle_time": 0, "results": [{
        "error_code": 0, "error_message": None, "resource_type": 4, "resource_name": "1", "configs": [
            {"name": "sasl.jaas.config", "value": 'user_admin="admin-secret";', "read_only": True, "config_source": 4,
             "is_sensitive": False, "synonyms": []}]}]})
    assert [x.kind for x in oracle.check_response(dc, leak, None)] == ["secret"]
    unsupported = gen.frames.header(ApiKey.PRODUCE, SUPPORTED[ApiKey.PRODUCE][1] + 1, 5) + b"\x00"
    [f] = oracle.check_response(unsupported, struct.pack(">ih", 5, 35), None)
    assert f.signature == "unsupported-version-answer"


# --- against a node ------------------------------------------------------------------------------

def test_fuzzer_smoke_crashes_nothing(tmp_path):
    """A few thousand inputs (after the catalogue of every hostile batch variant) against a
    node under RLIMIT_AS with the canary running: no crash."""
    opts = Options(inputs=3000, seed=1, out=tmp_path / "out", workdir=tmp_path / "nodes", max_crashes=1,
                   progress=3600, janitor=0)
    res = _run(opts)
    assert res["crashes"] == 0, _crash_report(opts)
    # every input was sent, or found no connection twice within the fuzzer's 3 s connect timeout
    # (a few on a machine loaded by other runs; the node was up: no crash)
    total, refused = 3000 + len(gen.Generator(ENTRIES, 1).catalogue()), res["outcomes"].get("refused", 0)
    assert res["inputs"] + refused == total and refused <= total // 50, (res["inputs"], refused, total)
    assert res["outcomes"].get("answered", 0) > 1000 and res["canary_produces"] >= 1


def test_fuzzer_catches_a_crash_and_saves_the_inputs_sent_before_it(tmp_path):
    """The smoke's assertion can fail: here the node is SIGKILLed mid-run (an injected
    crash), and the run reports it and saves a replayable window."""
    def kill_at(fz, n):
        if n == 400 and fz.node.running:
            os.killpg(fz.node.proc.pid, signal.SIGKILL)

    opts = Options(inputs=3000, seed=2, out=tmp_path / "out", workdir=tmp_path / "nodes", max_crashes=1,
                   progress=3600, janitor=0, catalogue=False, canary=False, on_input=kill_at)
    res = _run(opts)
    assert res["crashes"] == 1 and res["inputs"] < 3000
    [report] = [json.loads(p.read_text()) for p in (tmp_path / "out" / "findings").glob("*-crash.json")]
    assert "exited with code -9" in report["detail"] and len(report["window"]) >= 50
    replay = load_replay(Path(report["replay"].split()[-1]))
    assert {i.id for i in replay} >= set(report["window"])
    regenerated = gen.Generator(ENTRIES, 2).make(replay[-1].id)
    assert regenerated.frames == replay[-1].frames


def _run(opts: Options) -> dict:
    import asyncio
    fz = Fuzzer(opts)
    try:
        return asyncio.run(asyncio.wait_for(fz.run(), 120))
    finally:
        fz.stop_node()


def _crash_report(opts: Options) -> str:
    found = [json.loads(p.read_text()) for p in sorted((opts.out / "findings").glob("*.json"))]
    found.sort(key=lambda d: d["kind"] not in ("crash", "fatal", "memory-error"))  # the crash first
    out = [f"{d['kind']}: {d['signature']}: {d['detail'][:400]}" for d in found[:12]]
    for p in sorted((opts.out / "findings").glob("*crash.replay.gz"))[:1]:
        with gzip.open(p, "rt") as fh:
            out.append("first saved input: " + fh.readline()[:300])
    return "\n".join(out)
