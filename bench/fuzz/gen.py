"""Inputs: input ``i`` of seed ``s`` is a pure function of (corpus, s, i, now_ms), so every
finding names an id that regenerates the same bytes (``run --ids``).

Families (weights in ``WEIGHTS``):

    corpus     a recorded frame as it was
    struct     a structure-aware edit (bench/fuzz/mutate.py), sometimes with havoc on top
    header     API version or key changes, kio re-encoding at another version
    havoc      byte-level edits, splices with another frame of the same API
    hostile    a Produce of a hand-built hostile batch (bench/fuzz/hostile.py) to a fuzz topic,
               followed on the same connection by ListOffsets by timestamp (which decodes
               records) and a Fetch of that partition
    framing    bytes on the wire that are not a frame stream (size prefix lies, garbage);
               sent on a connection of their own
    sasl       a recorded SASL login (PLAIN or SCRAM) on the SASL listener with one frame edited,
               or a login followed by an edited request as the authenticated user

Lanes: ``fast`` (pipelined windows), ``slow`` (requests a broker may park: Fetch, JoinGroup,
SyncGroup, InitProducerId), ``ctrl`` (controller writes), ``solo`` (framing) and ``sasl``."""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import random
import struct
import zlib

from bench.fuzz import corpus, frames, hostile, mutate
from bench.fuzz.target import TOPICS
from broker.protocol.apis import ApiKey

DEFAULT_NOW_MS = 1_780_000_000_000  # a fixed "now" (2026-05-28), so the same seed gives the same bytes
WEIGHTS = {"corpus": 3, "struct": 40, "header": 10, "havoc": 20, "hostile": 14, "framing": 4, "sasl": 6}
SLOW_APIS = {ApiKey.FETCH, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.INIT_PRODUCER_ID}
# writes through the controller: one metadata-log commit each (~30 ms here), so they get a lane
# of their own and a fifth of the picks their number in the corpus would give them
CONTROLLER_APIS = {ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS, ApiKey.ALTER_CONFIGS,
                   ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS,
                   ApiKey.ALTER_USER_SCRAM_CREDENTIALS, ApiKey.ALTER_CLIENT_QUOTAS}
CONTROLLER_PICK_WEIGHT = 0.2
# hostile batches go to these partitions; "far future" timestamps only to fuzz-plain/2, because a
# batch stamped in 2^62 answers every later ListOffsets by timestamp of its partition first
HOSTILE_TARGETS = [("fuzz-plain", 0), ("fuzz-plain", 1), ("fuzz-compact", 0), ("fuzz-gzip", 0), ("fuzz-lat", 0)]
TIMESTAMP_TARGET = ("fuzz-plain", 2)


@dataclasses.dataclass(slots=True)
class Input:
    id: int
    kind: str
    lane: str
    frames: list[bytes]  # requests without their size prefix, correlation ids set
    wire: bytes | None = None  # solo lane: the exact bytes to send
    detail: str = ""
    # frame index -> (topic, partition, family) of a Produce whose batch must be rejected
    expect_reject: dict[int, tuple[str, int, str]] = dataclasses.field(default_factory=dict)
    tries: int = 0

    def to_json(self) -> dict:
        return {"id": self.id, "kind": self.kind, "lane": self.lane, "detail": self.detail,
                "frames": [f.hex() for f in self.frames], "wire": self.wire.hex() if self.wire is not None else None,
                "expect_reject": {str(k): list(v) for k, v in self.expect_reject.items()}}

    @classmethod
    def from_json(cls, d: dict) -> Input:
        return cls(d["id"], d["kind"], d["lane"], [bytes.fromhex(f) for f in d["frames"]],
                   bytes.fromhex(d["wire"]) if d.get("wire") is not None else None, d.get("detail", ""),
                   {int(k): tuple(v) for k, v in d.get("expect_reject", {}).items()})

    @property
    def size(self) -> int:
        return sum(len(f) for f in self.frames) + (len(self.wire) if self.wire else 0)


def _short_wait(e: corpus.Entry) -> corpus.Entry:
    """Recorded Fetches wait up to 500 ms for data (fetch.wait.max.ms); the fuzzer keeps one
    in 32 so, and makes the others wait at most 10 ms, or a slow lane would hold most of a
    run's time. Edits still reach max_wait (it is an int field like any other)."""
    if e.api_key != ApiKey.FETCH or zlib.crc32(e.frame) % 32 == 0:
        return e
    fmap = mutate.field_map(e.frame)
    f = next((f for f in fmap or () if f.what == "timedelta_i32"), None)
    if f is None:
        return e
    return dataclasses.replace(e, frame=mutate.splice(e.frame, f.pos, f.pos + 4, struct.pack(">i", 10)))


def cid_of(input_id: int, k: int) -> int:
    """Correlation id of frame ``k`` of input ``input_id`` (unique for 2^27 inputs of 16 frames)."""
    return ((input_id << 4) | (k & 0xF)) & 0x7FFFFFFF


class Generator:
    def __init__(self, entries: list[corpus.Entry], seed: int, now_ms: int = DEFAULT_NOW_MS,
                 weights: dict[str, float] | None = None, bomb_target: int = 30 << 30):
        self.seed, self.now_ms = seed, now_ms
        self.plain = [e for e in entries if e.listener == "plain" and e.api_key >= 0]
        self.plain = [_short_wait(e) for e in self.plain]
        self.maps = [mutate.field_map(e.frame) for e in self.plain]
        self.mappable = [i for i, m in enumerate(self.maps) if m]
        w = [CONTROLLER_PICK_WEIGHT if e.api_key in CONTROLLER_APIS else 1.0 for e in self.plain]
        self._cum = list(itertools.accumulate(w))
        self._cum_mapped = list(itertools.accumulate(w[i] for i in self.mappable))
        self.by_api: dict[int, list[int]] = {}
        for i, e in enumerate(self.plain):
            self.by_api.setdefault(e.api_key, []).append(i)
        self.logins = [[e.frame for e in c] for c in corpus.sasl_logins(entries) if len(c) >= 2]
        self.login_maps = [[mutate.field_map(f) for f in c] for c in self.logins]
        w = {**WEIGHTS, **(weights or {})}
        if not self.logins:
            w["sasl"] = 0
        self.kinds = [k for k in w if w[k] > 0]
        self.kind_weights = [w[k] for k in self.kinds]
        self.bomb_target = bomb_target
        self.produce_idx = self.by_api.get(ApiKey.PRODUCE, [])

    def rng(self, i: int) -> random.Random:
        return random.Random((self.seed << 40) ^ i)

    def make(self, i: int, kind: str | None = None) -> Input:
        if i < 0:  # the catalogue's inputs
            return dataclasses.replace(self.catalogue()[-i - 1])
        rng = self.rng(i)
        kind = kind or rng.choices(self.kinds, self.kind_weights)[0]
        inp = getattr(self, "_" + kind)(i, rng)
        inp.frames = [frames.with_cid(f, cid_of(i, k)) for k, f in enumerate(inp.frames)]
        if inp.lane == "":
            key, _ = frames.api_of(inp.frames[0]) if inp.frames else (-1, -1)
            inp.lane = "ctrl" if key in CONTROLLER_APIS else "slow" if key in SLOW_APIS else "fast"
        return inp

    # --- families ---------------------------------------------------------------------------
    def _pick(self, rng: random.Random, mapped: bool = False) -> int:
        if mapped:
            return self.mappable[bisect.bisect(self._cum_mapped, rng.random() * self._cum_mapped[-1])]
        return bisect.bisect(self._cum, rng.random() * self._cum[-1])

    def _corpus(self, i: int, rng: random.Random) -> Input:
        j = self._pick(rng)
        return Input(i, "corpus", "", [self.plain[j].frame], detail=f"entry {j}")

    def _struct(self, i: int, rng: random.Random) -> Input:
        # a fifth of the edits go to Produce frames, whose records field takes hostile batches
        j = rng.choice(self.produce_idx) if self.produce_idx and rng.random() < 0.2 else self._pick(rng, True)
        frame, what = mutate.structural(self.plain[j].frame, self.maps[j], rng,
                                        lambda: self._hostile_batch(i, rng).data, edits=rng.choice([1, 1, 1, 2, 3]))
        if rng.random() < 0.2:
            frame, w = mutate.havoc(frame, rng)
            what += "; " + w
        api = frames.api_name(self.plain[j].api_key)
        return Input(i, "struct", "", [frame], detail=f"entry {j} {api} v{self.plain[j].api_version}: {what}")

    def _header(self, i: int, rng: random.Random) -> Input:
        j = self._pick(rng)
        frame, what = mutate.header_edit(self.plain[j].frame, rng)
        return Input(i, "header", "", [frame], detail=f"entry {j} {frames.api_name(self.plain[j].api_key)} "
                                                      f"v{self.plain[j].api_version}: {what}")

    def _havoc(self, i: int, rng: random.Random) -> Input:
        j = self._pick(rng)
        e = self.plain[j]
        other = self.plain[rng.choice(self.by_api[e.api_key])].frame
        frame, what = mutate.havoc(e.frame, rng, other)
        return Input(i, "havoc", "", [frame], detail=f"entry {j} {frames.api_name(e.api_key)} v{e.api_version}: {what}")

    def _framing(self, i: int, rng: random.Random) -> Input:
        j = self._pick(rng)
        wire, what = mutate.framing(frames.with_cid(self.plain[j].frame, cid_of(i, 0)), rng)
        return Input(i, "framing", "solo", [], wire=wire, detail=f"entry {j}: {what}")

    def _sasl(self, i: int, rng: random.Random) -> Input:
        n = rng.randrange(len(self.logins))
        login, maps = list(self.logins[n]), list(self.login_maps[n])
        k = rng.randrange(len(login))
        if rng.random() < 0.3 and self.mappable:  # logged in: an edited request as that user
            j = self._pick(rng, True)
            login.append(self.plain[j].frame)
            maps.append(self.maps[j])
            k = len(login) - 1
            what = f"after login: {frames.api_name(self.plain[j].api_key)}"
        else:
            what = f"login frame {k}"
        fmap = maps[k]
        if fmap and rng.random() < 0.7:
            login[k], w = mutate.structural(login[k], fmap, rng)
        else:
            login[k], w = mutate.havoc(login[k], rng)
        return Input(i, "sasl", "sasl", login, detail=f"{what}: {w}")

    def _hostile_batch(self, i: int, rng: random.Random, family: str | None = None) -> hostile.Hostile:
        ctx = hostile.Context(self.now_ms + i, bomb_target=self.bomb_target)
        return hostile.make(rng, ctx, family)

    @functools.cache  # noqa: B019 - one generator per run
    def catalogue(self) -> list[Input]:
        """One Produce of every hostile batch variant (every bomb to every target that decodes
        records: ListOffsets, the recompression of fuzz-gzip, the cleaner of fuzz-compact),
        with input ids -1, -2, ...: a run starts with these, so even a short one covers them."""
        out: list[Input] = []
        seen: set[str] = set()
        for family in hostile.FAMILIES:
            if family == "bomb":
                continue
            for n in range(200):
                rng = random.Random(f"catalogue:{family}:{n}")
                h = self._hostile_batch(-1, rng, family)
                name = "/".join(h.family.split("/")[:2])
                if name not in seen:
                    seen.add(name)
                    out.append(self._hostile(-1 - len(out), rng, batch=h))
        ctx = hostile.Context(self.now_ms, bomb_target=self.bomb_target)
        for codec, xerial in [(1, False), (2, False), (2, True), (3, False), (4, False)]:
            for variant in ("zeros", "record", "zeros+size-lie", "record+size-lie"):
                h = hostile._bomb(codec, variant, ctx.max_batch, ctx.bomb_target, ctx.now_ms, xerial)
                if h.family in seen:  # xerial bombs are zeros only
                    continue
                seen.add(h.family)
                for target in (("fuzz-plain", 0), ("fuzz-gzip", 0), ("fuzz-compact", 0)):
                    rng = random.Random(f"catalogue:{h.family}:{target}")
                    out.append(self._hostile(-1 - len(out), rng, batch=h, target=target))
        for inp in out:
            inp.frames = [frames.with_cid(f, cid_of(inp.id, k)) for k, f in enumerate(inp.frames)]
        return out

    def _hostile(self, i: int, rng: random.Random, family: str | None = None, batch: hostile.Hostile | None = None,
                 target: tuple[str, int] | None = None) -> Input:
        h = batch or self._hostile_batch(i, rng, family)
        topic, part = target or rng.choice(HOSTILE_TARGETS)
        if target is None and h.topic is not None:
            topic, part = h.topic, 0
        elif target is None and h.family.startswith("timestamps"):
            topic, part = TIMESTAMP_TARGET
        version = rng.randint(3, 12) if not h.family.endswith("codec4") else rng.randint(7, 12)
        acks = rng.choice([-1, -1, 1])
        ts = self.now_ms + i
        follow = [_list_offsets(rng.randint(1, 10), topic, part, rng.choice([ts, ts - 1, 0, -3])),
                  _fetch(rng.randint(4, 12), topic, part, rng.choice([0, 0, 10**6]))]
        must = {0: (topic, part, h.family)} if h.must_reject and topic in TOPICS else {}
        return Input(i, "hostile" if i >= 0 else "catalogue", "fast",
                     [produce_frame(version, topic, part, h.data, acks), *follow],
                     detail=f"{h.family} -> {topic}/{part} produce v{version} acks={acks}", expect_reject=must)


# Requests built once per version and target with kio, then patched: encoding a 1 MB Produce
# with kio for every input would cost more than sending it.
_MARK = 0x7EADBEEF7EADBEEF


@functools.lru_cache(maxsize=1024)
def _produce_template(version: int, topic: str, partition: int, acks: int) -> tuple[bytes, mutate.Field]:
    frame = frames.request(ApiKey.PRODUCE, version, {
        "transactional_id": None, "acks": acks, "timeout": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": b""}]}]})
    return frame, next(f for f in mutate.field_map(frame) if f.what == "records")


def produce_frame(version: int, topic: str, partition: int, records: bytes, acks: int = -1) -> bytes:
    frame, field = _produce_template(version, topic, partition, acks)
    return mutate.edit_records(frame, field, None, records)


@functools.lru_cache(maxsize=1024)
def _list_offsets_template(version: int, topic: str, partition: int) -> bytes:
    return frames.request(ApiKey.LIST_OFFSETS, version, {"replica_id": -1, "topics": [
        {"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                        "timestamp": _MARK}]}]})


def _list_offsets(version: int, topic: str, partition: int, timestamp: int) -> bytes:
    return _list_offsets_template(version, topic, partition).replace(struct.pack(">q", _MARK),
                                                                     struct.pack(">q", timestamp))


@functools.lru_cache(maxsize=1024)
def _fetch_template(version: int, topic: str, partition: int) -> bytes:
    return frames.request(ApiKey.FETCH, version, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 4 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
            {"partition": partition, "current_leader_epoch": -1, "fetch_offset": _MARK, "log_start_offset": -1,
             "partition_max_bytes": 1 << 20}]}]})


def _fetch(version: int, topic: str, partition: int, offset: int) -> bytes:
    return _fetch_template(version, topic, partition).replace(struct.pack(">q", _MARK), struct.pack(">q", offset))


def sentinel(cid: int) -> bytes:
    """Metadata v1 for no topics: a cheap request whose answer means every earlier request on
    the connection has been answered (Kafka answers in order)."""
    return struct.pack(">hhih", ApiKey.METADATA, 1, cid, 8) + b"sentinel" + struct.pack(">i", 0)
