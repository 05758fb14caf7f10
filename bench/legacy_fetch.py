"""Down-converted Fetch (v0-3: magic 0/1 messages made from the log's v2 batches) against a v2
Fetch of the same data.

    .venv/bin/python bench/legacy_fetch.py                       # 100,000 records of 100 B and of 1 KiB
    .venv/bin/python bench/legacy_fetch.py --records 100000 --rounds 3 --codecs none,lz4

Starts a krafty node (its own process), writes --records records per value size and codec into a
fresh one-partition topic with confluent-kafka (linger.ms=5, batch.size=1 MiB), then reads the
whole partition from offset 0 to its end over one raw connection, fetch after fetch
(partition_max_bytes 1 MiB, as kafka-python's and librdkafka's defaults), with Fetch v4 (v2
batches, sent with sendfile), v2 (magic 1) and v0 (magic 0), alternating the versions round by
round so the machine's load falls on all of them alike. The client only walks the entries'
framing to find the next offset (the same work for every version: one step per v2 batch, one
per message for an uncompressed legacy set, one per wrapper for a compressed one). Prints
records/s and MB/s (10^6 bytes of record values) per version, the ratio to v4, and the node's
CPU seconds per run; --json writes them.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(REPO))

from krafty_node import KraftyNode  # noqa: E402

from bench.produce_consume import process_cpu_s  # noqa: E402

VERSIONS = (4, 2, 0)


def produce(bootstrap: str, topic: str, n: int, size: int, codec: str) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    a = AdminClient({"bootstrap.servers": bootstrap})
    a.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20, "compression.type": codec,
                  "queue.buffering.max.messages": 1_000_000})
    values = [os.urandom(size // 2 + 1).hex().encode()[:size] for _ in range(1000)]  # hex: compresses ~2x
    for i in range(n):
        while True:
            try:
                p.produce(topic, value=values[i % 1000], key=b"%08d" % i, partition=0)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0


class Conn:
    def __init__(self, port: int):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.cid = 0

    def fetch(self, version: int, topic: str, offset: int, max_bytes: int) -> bytes:
        self.cid += 1
        t = topic.encode()
        body = struct.pack(">iii", -1, 500, 1)
        if version >= 3:
            body += struct.pack(">i", 50 << 20)
        if version >= 4:
            body += b"\x00"  # isolation level
        body += struct.pack(">ih", 1, len(t)) + t + struct.pack(">iiqi", 1, 0, offset, max_bytes)
        hdr = struct.pack(">hhih", 1, version, self.cid, 5) + b"bench"
        self.s.sendall(struct.pack(">i", len(hdr) + len(body)) + hdr + body)
        size = struct.unpack(">i", self._read(4))[0]
        return self._read(size)

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.s.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return bytes(buf)


def records_of(version: int, resp: bytes) -> tuple[bytes, int]:
    """The records bytes of the one partition in a Fetch response, and its high watermark."""
    pos = 4 + (4 if version >= 1 else 0)  # correlation id, throttle
    pos += 4  # topics
    (tlen,) = struct.unpack_from(">h", resp, pos)
    pos += 2 + tlen + 4  # name, partitions
    _idx, err, hw = struct.unpack_from(">ihq", resp, pos)
    assert err == 0, err
    pos += 14
    if version >= 4:
        pos += 8  # last stable offset
        (n,) = struct.unpack_from(">i", resp, pos)
        pos += 4 + max(n, 0) * 16
    (size,) = struct.unpack_from(">i", resp, pos)
    pos += 4
    return resp[pos:pos + size], hw


def next_offset(version: int, data: bytes) -> int | None:
    """Offset after the last whole entry (a v2 batch, or a magic 0/1 message or wrapper)."""
    pos, last = 0, None
    n = len(data)
    while pos + 12 <= n:
        offset, size = struct.unpack_from(">qi", data, pos)
        if pos + 12 + size > n:
            break
        if version >= 4:
            (lod,) = struct.unpack_from(">i", data, pos + 23)
            last = offset + lod
        else:
            last = offset  # a wrapper's offset is its last inner message's
        pos += 12 + size
    return None if last is None else last + 1


def read_all(conn: Conn, version: int, topic: str, end: int, max_bytes: int) -> tuple[float, int, int]:
    t0 = time.monotonic()
    offset, fetches, nbytes = 0, 0, 0
    while offset < end:
        data, _hw = records_of(version, conn.fetch(version, topic, offset, max_bytes))
        nxt = next_offset(version, data)
        if nxt is None:
            raise AssertionError(f"no whole entry at offset {offset} (v{version})")
        offset = nxt
        fetches += 1
        nbytes += len(data)
    return time.monotonic() - t0, fetches, nbytes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--codecs", default="none,lz4")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-bytes", type=int, default=1 << 20)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="krafty-bench-legacy-") as tmp:
        node = KraftyNode(Path(tmp)).start()
        try:
            load = os.getloadavg()[0]
            for size in map(int, args.sizes.split(",")):
                for codec in args.codecs.split(","):
                    topic = f"legacy-{size}-{codec}"
                    produce(node.bootstrap, topic, args.records, size, codec)
                    conn = Conn(node.port)
                    times: dict[int, list[float]] = {v: [] for v in VERSIONS}
                    cpu: dict[int, list[float]] = {v: [] for v in VERSIONS}
                    wire: dict[int, int] = {}
                    for _r in range(args.rounds):
                        for v in VERSIONS:
                            c0 = process_cpu_s(node.proc.pid)
                            s, fetches, nbytes = read_all(conn, v, topic, args.records, args.max_bytes)
                            cpu[v].append(process_cpu_s(node.proc.pid) - c0)
                            times[v].append(s)
                            wire[v] = nbytes
                    base = statistics.median(times[4])
                    for v in VERSIONS:
                        med = statistics.median(times[v])
                        row = {"value_bytes": size, "codec": codec, "fetch_version": v, "records": args.records,
                               "median_s": round(med, 3), "records_per_s": round(args.records / med),
                               "value_mb_per_s": round(args.records * size / med / 1e6, 1),
                               "vs_v4": round(base / med, 3), "node_cpu_s": round(statistics.median(cpu[v]), 3),
                               "response_mb": round(wire[v] / 1e6, 1), "runs_s": [round(t, 3) for t in times[v]]}
                        results.append(row)
                        print(f"{size:>5} B {codec:>5} Fetch v{v}: {row['records_per_s']:>9,} records/s "
                              f"{row['value_mb_per_s']:>7.1f} MB/s  x{row['vs_v4']:.3f} of v4  node CPU "
                              f"{row['node_cpu_s']:.2f} s  responses {row['response_mb']} MB  runs {row['runs_s']}",
                              flush=True)
            print(f"load average at start {load:.1f}, at end {os.getloadavg()[0]:.1f}")
        finally:
            node.close()
    if args.json:
        args.json.write_text(json.dumps({"results": results, "load_start": load,
                                         "load_end": os.getloadavg()[0]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
