"""CPU cost of produce's record validation (broker/log/validator.py) per 1 MiB batch.

    .venv/bin/python bench/validate_records.py [--rounds 20]

For 100 B and 1 KiB records (random values, no keys, one 1 MiB batch as librdkafka sends at
batch.size=1 MiB) and every codec: the time of validate_produce_batches (header, CRC: what
produce did before record validation) and of validate_batches on a plain topic and on a
compacted one (keys set). Uncompressed batches of a plain topic are checked in O(1); the
others are decompressed (bounded) and their records walked.
"""

from __future__ import annotations

import argparse
import os
import time

from broker.log import LogConfig
from broker.log.batch import Record, build_batch, validate_produce_batches
from broker.log.validator import validate_batches

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def timed(fn, rounds: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(rounds):
        fn()
    return (time.perf_counter() - t0) / rounds * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    now = int(time.time() * 1000)
    plain, compacted = LogConfig(), LogConfig(cleanup_policy="compact")
    print(f"{'record':>7} {'codec':>6} {'records':>7} {'batch':>9}  {'header+CRC':>10} {'plain':>8} "
          f"{'compacted':>9}   (ms per batch; MB/s of record bytes for plain)")
    for size in (100, 1024):
        n = (1 << 20) // (size + 10)
        value = os.urandom(size)
        for name, codec in CODECS.items():
            key = None
            batches = {}
            for which in ("plain", "compacted"):
                recs = [Record(i, now, key if which == "plain" else b"k%d" % i, value, []) for i in range(n)]
                batches[which] = build_batch(recs, compression=codec)
            hdr = timed(lambda b=batches["plain"]: validate_produce_batches(b, 64 << 20), args.rounds)
            cost = {}
            for which, cfg in (("plain", plain), ("compacted", compacted)):
                b = batches[which]
                hs = validate_produce_batches(b, 64 << 20)
                cost[which] = timed(lambda b=b, hs=hs, cfg=cfg: validate_batches(b, hs, cfg, now, "t-0"), args.rounds)
            mbps = n * size / (cost["plain"] + hdr) / 1e3
            print(f"{size:>6}B {name:>6} {n:>7} {len(batches['plain']):>9}  {hdr:>10.3f} {cost['plain']:>8.3f} "
                  f"{cost['compacted']:>9.3f}   {mbps:8.0f} MB/s")


if __name__ == "__main__":
    main()
