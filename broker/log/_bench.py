"""Micro-benchmark of the produce and fetch paths of the log.

    .venv/bin/python -m broker.log._bench [--dir /tmp] [--mib 256]

Produce: 1 MiB requests of 1 KiB records in batches of ``--batch-kib`` (16 KiB like the Java
client's batch.size, or 1 MiB like librdkafka's), timed from validate_produce_batches to the
write (append_as_leader). Fetch: ``Log.read`` of 1 MiB slices (no data copied), then sendfile
of those slices to /dev/null to show the zero-copy path.
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import tempfile
import time

from crc32c import crc32c

from .batch import validate_produce_batches
from .log import Log, LogConfig


def _varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if not z:
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


def make_batch(n_records: int, value_size: int, pid: int = -1, seq: int = -1) -> bytes:
    value = os.urandom(value_size)
    recs = bytearray()
    for i in range(n_records):
        body = b"\x00" + _varint(0) + _varint(i) + _varint(-1) + _varint(len(value)) + value + _varint(0)
        recs += _varint(len(body)) + body
    ts = int(time.time() * 1000)
    after = struct.pack(">hiqqqhii", 0, n_records - 1, ts, ts, pid, 0 if pid >= 0 else -1, seq, n_records) + recs
    return struct.pack(">qiibI", 0, 9 + len(after), -1, 2, crc32c(after)) + after


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None)
    ap.add_argument("--mib", type=int, default=256, help="MiB to produce per scenario")
    args = ap.parse_args()
    root = tempfile.mkdtemp(dir=args.dir)
    try:
        for batch_kib in (16, 1024):
            for idempotent in (False, True):
                _run(root, batch_kib, idempotent, args.mib)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _run(root: str, batch_kib: int, idempotent: bool, mib: int) -> None:
    records_per_batch = batch_kib  # 1 KiB records
    batches_per_request = max(1, 1024 // batch_kib)
    template = make_batch(records_per_batch, 1024 - 10)
    config = LogConfig.from_topic_configs({"segment.bytes": 256 * 1024 * 1024})
    name = f"bench{batch_kib}{'i' if idempotent else ''}"
    log = Log.open(root, name, 0, config, now_ms=0)
    requests = mib
    pid_seq = 0
    py_time = 0.0
    from . import segment as segment_mod
    real_write = segment_mod._write_all
    write_time = [0.0]

    def timed_write(fd, data, pos):
        t = time.perf_counter()
        real_write(fd, data, pos)
        write_time[0] += time.perf_counter() - t

    segment_mod._write_all = timed_write
    t_all = time.perf_counter()
    for _ in range(requests):
        parts = []
        for _b in range(batches_per_request):
            if idempotent:
                b = bytearray(template)
                # Rewrite producer fields + CRC (client work; not timed).
                struct.pack_into(">qhi", b, 43, 77, 0, pid_seq)
                struct.pack_into(">I", b, 17, crc32c(memoryview(b)[21:]))
                pid_seq += records_per_batch
                parts.append(b)
            else:
                parts.append(template)
        buf = bytearray(b"".join(parts))
        t0 = time.perf_counter()
        headers = validate_produce_batches(buf, 2 * 1024 * 1024)
        t1 = time.perf_counter()
        log.append_as_leader(buf, headers, 1, 0)
        t2 = time.perf_counter()
        py_time += t2 - t0
        del t1
    wall = time.perf_counter() - t_all
    segment_mod._write_all = real_write
    total = requests * len(buf)
    per_req_us = py_time / requests * 1e6
    print(f"produce batch={batch_kib:>4}KiB idempotent={idempotent!s:5}: {per_req_us:7.1f} us per 1 MiB request "
          f"(validate+append incl. write), {total / py_time / 1e6:7.0f} MB/s log path, "
          f"{total / wall / 1e6:6.0f} MB/s incl. building requests")
    print(f"    of which pwrite syscall {write_time[0] / requests * 1e6:6.1f} us -> Python (validate, offsets, "
          f"producer state, index) {(py_time - write_time[0]) / requests * 1e6:6.1f} us per 1 MiB request")
    # validate-only and write-only split for one request
    buf = bytearray(template * batches_per_request)
    n = 200
    t0 = time.perf_counter()
    for _ in range(n):
        validate_produce_batches(buf, 2 * 1024 * 1024)
    t_val = (time.perf_counter() - t0) / n * 1e6
    print(f"    validate_produce_batches alone: {t_val:6.1f} us per 1 MiB ({batches_per_request} batches)")
    # reads
    leo = log.log_end_offset
    t0 = time.perf_counter()
    reads = 0
    offset = 0
    slices = []
    while offset < leo:
        s = log.read(offset, 1024 * 1024, leo)
        if s is None:
            break
        slices.append(s)
        reads += 1
        # next offset: the batch after the slice
        offset = _next_offset(log, s)
    t_read = time.perf_counter() - t0
    print(f"    read: {t_read / reads * 1e6:6.1f} us per 1 MiB slice ({reads} slices)")
    # random reads (index lookups)
    import random
    rng = random.Random(1)
    t0 = time.perf_counter()
    for _ in range(2000):
        log.read(rng.randrange(leo), 1024 * 1024, leo)
    print(f"    random-offset read: {(time.perf_counter() - t0) / 2000 * 1e6:6.1f} us per 1 MiB slice")
    # sendfile to /dev/null
    devnull = os.open(os.devnull, os.O_WRONLY)
    t0 = time.perf_counter()
    sent = 0
    for s in slices:
        sent += os.sendfile(devnull, s.fd, s.position, s.size)
    t_send = time.perf_counter() - t0
    os.close(devnull)
    print(f"    sendfile to /dev/null: {sent / t_send / 1e6:7.0f} MB/s")
    t0 = time.perf_counter()
    log.flush()
    print(f"    flush (fsync {total / 1e6:.0f} MB): {time.perf_counter() - t0:.2f} s")
    t0 = time.perf_counter()
    log.close()
    slices.clear()
    t1 = time.perf_counter()
    Log.open(root, name, 0, config, now_ms=0, clean_shutdown=True).close()
    t2 = time.perf_counter()
    Log.open(root, name, 0, config, now_ms=0).close()
    t3 = time.perf_counter()
    print(f"    close {t1 - t0:.3f} s, clean reopen {t2 - t1:.3f} s, recovering reopen (CRC scan) {t3 - t2:.3f} s")


def _next_offset(log: Log, s) -> int:
    """Offset after the last batch of a slice (walks headers from the nearest index entry)."""
    seg = next(x for x in log.segments if x.base_offset == s.segment_base_offset)
    end = s.position + s.size
    last = None
    for h in seg.iter_headers(max(s.position, seg.index.floor_position(end - 1)), end):
        last = h
    assert last is not None
    return last.base_offset + last.last_offset_delta + 1


if __name__ == "__main__":
    main()
