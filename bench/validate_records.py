"""CPU cost of produce's record validation (broker/log/validator.py) per 1 MiB batch.

    .venv/bin/python bench/validate_records.py [--rounds 20]

For 100 B and 1 KiB records (random values, no keys, one 1 MiB batch as librdkafka sends at
batch.size=1 MiB) and every codec: the time of validate_produce_batches (header, CRC: what
produce did before record validation) and of validate_batches on a plain topic and on a
compacted one (keys set), which decompress (bounded) and walk every record with the compiled
walker; "python" is the plain topic with the Python walker (the fallback where the extension
is not built). "decompress" is the codec's share of it.
"""

from __future__ import annotations

import argparse
import os
import time

from broker.log import LogConfig, validator
from broker.log.batch import Record, build_batch, decompress_records, validate_produce_batches
from broker.log.record_walk import WALKER, scan_records_py
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
    print(f"{WALKER}\n{'record':>7} {'codec':>6} {'records':>7} {'batch':>9}  {'header+CRC':>10} {'plain':>8} "
          f"{'compacted':>9} {'python':>8} {'decompress':>10}   (ms per batch; MB/s of record bytes for plain)")
    compiled = validator.scan_records
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
            for which, cfg in (("plain", plain), ("compacted", compacted), ("python", plain)):
                b = batches["compacted" if which == "compacted" else "plain"]
                hs = validate_produce_batches(b, 64 << 20)
                validator.scan_records = scan_records_py if which == "python" else compiled
                try:
                    cost[which] = timed(lambda b=b, hs=hs, cfg=cfg: validate_batches(b, hs, cfg, now, "t-0"),
                                        max(1, args.rounds // (10 if which == "python" else 1)))
                finally:
                    validator.scan_records = compiled
            section = memoryview(batches["plain"])[61:]
            dec = timed(lambda s=section, c=codec: decompress_records(c, s), args.rounds) if codec else 0.0
            mbps = n * size / (cost["plain"] + hdr) / 1e3
            print(f"{size:>6}B {name:>6} {n:>7} {len(batches['plain']):>9}  {hdr:>10.3f} {cost['plain']:>8.3f} "
                  f"{cost['compacted']:>9.3f} {cost['python']:>8.3f} {dec:>10.3f}   {mbps:8.0f} MB/s")


if __name__ == "__main__":
    main()
