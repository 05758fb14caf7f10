"""What counts as a finding, from one response or from the node's log.

Responses (each is matched to its request by correlation id):
  - an error code UNKNOWN_SERVER_ERROR anywhere in it (Kafka answers a proper code);
  - an answer that does not decode as the response of the request's API and version (for an
    unsupported version or an unknown API Kafka closes the connection, except ApiVersions,
    answered as v0);
  - a Produce of a batch that must be rejected (bench/fuzz/hostile.py) answered with error 0:
    ``accepted-bad-records`` when the lie is inside the records of a well-framed batch (refused
    only by a broker that walks every record, as Kafka's LogValidator does), else
    ``accepted-hostile``;
  - DeleteTopics/CreateTopics of an internal topic answered with error 0;
  - a password of the node's JAAS config in any answer;
  - a correlation id that matches no request on the connection.
Log: a traceback, "unexpected error", MemoryError, an event-loop stall.
A crash is the node process dying or the canary client failing (bench/fuzz/harness.py)."""

from __future__ import annotations

import dataclasses
import re
import struct

from bench.fuzz.frames import api_name
from bench.fuzz.hostile import record_level
from bench.fuzz.target import ADMIN, USERS
from broker.protocol import codec
from broker.protocol.apis import SUPPORTED, ApiKey
from broker.protocol.guard import check_bounds
from common.errors import ErrorCode
from common.topic_names import INTERNAL_TOPICS

SECRETS = [p.encode() for p in (ADMIN[1], *USERS.values())]


@dataclasses.dataclass(slots=True)
class Finding:
    kind: str  # crash | unknown-server-error | bad-response | accepted-hostile | accepted-bad-records |
    #            internal-topic | secret |
    #            bad-correlation-id | traceback | stall | memory-error
    signature: str  # what dedups findings: same signature = same bug
    detail: str
    input_ids: list[int] = dataclasses.field(default_factory=list)


def _errors(obj, path=""):
    """(path, code) of every error_code field in a kio response object."""
    for f in codec._fields(type(obj)):
        v = getattr(obj, f.name)
        if f.name == "error_code":
            yield path, int(v)
        elif v is None:
            continue
        elif f.kind == "entity":
            yield from _errors(v, f"{path}.{f.name}" if path else f.name)
        elif f.kind == "entities":
            sub = f"{path}.{f.name}" if path else f.name
            for x in v:
                yield from _errors(x, sub)


# Answers the broker writes by hand (broker/apis/wire.py) get the bounds walk before kio's
# native reader, which allocates arrays from their lengths; the others come from kio's writer.
_HAND_WRITTEN = {ApiKey.PRODUCE, ApiKey.FETCH}


def decode_response(key: int, ver: int, raw: bytes):
    """The response object, or raises ValueError saying why it does not decode."""
    body = 5 if key != ApiKey.API_VERSIONS and codec.is_flexible(key, ver) else 4
    try:
        cls = codec.response_type(key, ver)
    except Exception:  # noqa: BLE001
        raise ValueError(f"no {api_name(key)} v{ver} response schema exists") from None
    try:
        if key in _HAND_WRITTEN:
            check_bounds(cls, raw, body)
        obj, size = codec._reader(cls)(raw, body)
    except Exception as e:  # noqa: BLE001
        raise ValueError(f"{len(raw) - 4}-byte body is not a {api_name(key)} v{ver} response ({e})") from None
    if body + size != len(raw):
        raise ValueError(f"{len(raw) - body - size} bytes after a {api_name(key)} v{ver} response")
    return obj


def check_response(frame: bytes, raw: bytes, expect_reject: tuple[str, int, str] | None) -> list[Finding]:
    """Findings in the answer ``raw`` (correlation id first) to request ``frame``."""
    out = []
    for s in SECRETS:
        if s in raw:
            key, ver = struct.unpack_from(">hh", frame) if len(frame) >= 4 else (-1, -1)
            out.append(Finding("secret", f"secret:{api_name(key)}", f"a JAAS password in a {api_name(key)} v{ver} answer"))
            break
    if len(frame) < 10:
        return out
    key, ver = struct.unpack_from(">hh", frame)
    try:
        codec.parse_request_header(frame)
    except Exception:  # noqa: BLE001 - a header the node cannot parse has no version to check against
        return out
    rng = SUPPORTED.get(key)
    if key == ApiKey.API_VERSIONS and (rng is None or not rng[0] <= ver <= rng[1]):
        ver = 0  # KIP-511: an unsupported ApiVersions is answered as v0
    supported = rng is not None and rng[0] <= ver <= rng[1]
    if not supported and key != ApiKey.API_VERSIONS:
        try:
            decode_response(key, ver, raw)
        except ValueError as e:
            out.append(Finding("bad-response", "unsupported-version-answer" if rng else "unknown-api-key-answer",
                               f"{api_name(key)} v{ver} is not served, and its answer is not a v{ver} response "
                               f"(Kafka closes the connection): {e}"))
        return out
    try:
        obj = decode_response(key, ver, raw)
    except ValueError as e:
        out.append(Finding("bad-response", f"undecodable:{api_name(key)}v{ver}", str(e)))
        return out
    errs = list(_errors(obj))
    for path, code in errs:
        if code == ErrorCode.UNKNOWN_SERVER_ERROR:
            out.append(Finding("unknown-server-error", f"use:{api_name(key)}:{path}",
                               f"{api_name(key)} v{ver} answered UNKNOWN_SERVER_ERROR at {path or 'top level'}"))
            break
    if expect_reject is not None and key == ApiKey.PRODUCE:
        topic, part, family = expect_reject
        for t in obj.responses:
            for p in t.partition_responses:
                if t.name == topic and p.index == part and int(p.error_code) == 0:
                    fam = "/".join(family.split("/")[:2])
                    packing = "uncompressed" if family.endswith("codec0") else "compressed"
                    kind = "accepted-bad-records" if record_level(family) else "accepted-hostile"
                    out.append(Finding(kind, f"accepted:{fam}:{packing}",
                                       f"Produce v{ver} of a {family} batch to {topic}/{part} was appended "
                                       f"at offset {p.base_offset}"))
    if key in (ApiKey.DELETE_TOPICS, ApiKey.CREATE_TOPICS):
        for t in (obj.responses if key == ApiKey.DELETE_TOPICS else obj.topics):
            if t.name in INTERNAL_TOPICS and int(t.error_code) == 0:
                out.append(Finding("internal-topic", f"internal-topic:{api_name(key)}:{t.name}",
                                   f"{api_name(key)} v{ver} of internal topic {t.name} succeeded"))
    return out


# --- the node's log ----------------------------------------------------------------------------

_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (\w+) ([\w.]+): (.*)$")
_FILE_LINE = re.compile(r'^\s*File "([^"]+)", line (\d+),? in (\S+)')  # traceback and faulthandler formats


class LogScanner:
    """Reads the node's log as it grows and turns tracebacks, "unexpected error" lines,
    MemoryErrors and event-loop stalls into findings."""

    def __init__(self, path):
        self.path = path
        self.pos = 0
        self._partial = ""

    def skip_to_end(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(0, 2)
                self.pos = f.tell()
        except OSError:
            self.pos = 0
        self._partial = ""

    def scan(self) -> list[Finding]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read()
        except OSError:
            return []
        if not data:
            return []
        text = self._partial + data.decode("utf-8", "replace")
        cut = text.rfind("\n")
        if cut < 0:
            self._partial, self.pos = text, self.pos + len(data)
            return []
        self._partial = text[cut + 1:]
        self.pos += len(data)
        return parse_log(text[:cut + 1])


def _block(lines: list[str], i: int) -> tuple[list[str], int]:
    """The lines after ``lines[i]`` up to the next log line, traceback or fatal error."""
    j, block = i + 1, []
    while j < len(lines) and not _LOG_LINE.match(lines[j]) and not lines[j].startswith(
            ("Traceback (most recent call last)", "Fatal Python error")):
        block.append(lines[j])
        j += 1
    return block, j


def parse_log(text: str) -> list[Finding]:
    out: list[Finding] = []
    lines = text.splitlines()
    i = 0
    context = ""
    while i < len(lines):
        line = lines[i]
        m = _LOG_LINE.match(line)
        if m:
            context = line
            msg = m.group(3)
            if "event loop stalled" in msg:
                stack, j = _block(lines, i)
                where = [_FILE_LINE.match(s) for s in stack]
                ours = [w for w in where if w and "/site-packages/" not in w.group(1) and "asyncio" not in w.group(1)]
                sig = f"{_short(ours[-1].group(1))}:{ours[-1].group(3)}" if ours else "unknown"
                out.append(Finding("stall", f"stall:{sig}", msg.split(";")[0] + f" (at {sig})\n" + "\n".join(stack[-12:])))
                i = j
                continue
            if "unexpected error" in msg and (i + 1 >= len(lines) or not lines[i + 1].startswith("Traceback")):
                out.append(Finding("traceback", f"unexpected-error:{msg[:80]}", line))
        if line.startswith("Fatal Python error"):  # faulthandler: a native crash, most recent call first
            tb, j = _block(lines, i)
            cur = next((n for n, t in enumerate(tb) if t.startswith("Current thread")), 0)
            files = [w for w in (_FILE_LINE.match(t) for t in tb[cur:]) if w]
            where = f"{_short(files[0].group(1))}:{files[0].group(2)}:{files[0].group(3)}" if files else "?"
            out.append(Finding("fatal", f"fatal:{line.split(':', 1)[-1].strip()}@{where}",
                               "\n".join([line, *tb[cur:cur + 25]])))
            i = j
            continue
        if line.startswith("Traceback (most recent call last)"):
            tb, j = _block(lines, i)
            tb = [line, *tb]
            # a chained exception ("The above exception was the direct cause ...") is one error:
            # one finding, named by the last exception raised
            while j < len(lines) and lines[j].startswith("Traceback") and _chained(tb):
                k = j
                more, j = _block(lines, k)
                tb += [lines[k], *more]
            exc = next((t for t in reversed(tb) if t and not t.startswith((" ", "The above exception", "During handling"))),
                       "?")
            files = [w for w in (_FILE_LINE.match(t) for t in tb) if w]
            ours = [w for w in files if "/site-packages/" not in w.group(1)] or files
            where = f"{_short(ours[-1].group(1))}:{ours[-1].group(2)}:{ours[-1].group(3)}" if ours else "?"
            kind = "memory-error" if exc.startswith("MemoryError") else "traceback"
            out.append(Finding(kind, f"{kind}:{exc.split(':')[0]}@{where}", context + "\n" + "\n".join(tb[-20:])))
            i = j
            continue
        i += 1
    return out


def _chained(tb: list[str]) -> bool:
    last = next((t for t in reversed(tb) if t.strip()), "")
    return last.startswith(("The above exception", "During handling of the above exception"))


def _short(path: str) -> str:
    for root in ("/broker/", "/common/", "/controller/", "/metadata/", "/raft/", "/krafty/"):
        k = path.rfind(root)
        if k >= 0:
            return path[k + 1:]
    return path.rsplit("/", 1)[-1]
