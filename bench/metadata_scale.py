"""Metadata snapshot size and load time at scale, measured on the real metadata code.

For each N: build a MetadataImage with N partitions (B brokers, topics of P partitions, RF R)
through ``controller.topics.create_topics`` + ``metadata.delta.MetadataDelta``; encode the
snapshot (``metadata.records.encode`` over ``image.to_records()``); load it back (decode +
replay through ``MetadataLoader.handle_load_snapshot`` with a ``raft.api.Snapshot``).
Each N runs in its own child process so that peak RSS (``resource.getrusage``) is per size.

    .venv/bin/python bench/metadata_scale.py                       # 10,000 and 100,000
    .venv/bin/python bench/metadata_scale.py --partitions 1000,10000 --json /tmp/ms.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _cur_rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def measure(n: int, brokers: int, per_topic: int, rf: int) -> dict:
    from controller.topics import TopicDefaults, create_topics
    from metadata import records as r
    from metadata.controller_api import NewTopic
    from metadata.delta import MetadataDelta
    from metadata.image import EMPTY
    from metadata.loader import MetadataLoader
    from raft.api import Snapshot

    rss0 = _cur_rss_mib()
    rng = random.Random(42)
    t0 = time.perf_counter()
    # registered, unfenced brokers (racks a/b/c...)
    d = MetadataDelta(EMPTY)
    d.replay(r.ClusterIdRecord("bench-cluster"))
    for b in range(brokers):
        bid = b + 1
        d.replay(r.RegisterBrokerRecord(bid, uuid.UUID(int=bid), 1, (r.Endpoint("PLAINTEXT", "127.0.0.1", 9092 + b),),
                                        rack="abc"[b % 3], fenced=False))
    offset = brokers + 1
    image = d.apply(offset - 1, 1)
    n_topics = n // per_topic
    batch = 10  # topics per CreateTopics, like the controller would see them
    for start in range(0, n_topics, batch):
        req = [NewTopic(f"topic-{i:05d}", per_topic, rf) for i in range(start, min(n_topics, start + batch))]
        recs, results = create_topics(image, req, TopicDefaults(), rng)
        bad = [x for x in results if x.error]
        if bad:
            raise RuntimeError(f"create_topics failed: {bad[0]}")
        delta = MetadataDelta(image)
        for rec in recs:
            delta.replay(rec)
        offset += len(recs)
        image = delta.apply(offset - 1, 1)
    build_s = time.perf_counter() - t0
    n_parts = sum(len(t.partitions) for t in image.topics_by_id.values())
    assert n_parts == n, (n_parts, n)

    t0 = time.perf_counter()
    encoded = [r.encode(rec) for rec in image.to_records()]
    encode_s = time.perf_counter() - t0
    total = sum(len(x) for x in encoded)

    t0 = time.perf_counter()
    loader = MetadataLoader()
    loader.handle_load_snapshot(Snapshot(end_offset=offset, epoch=1, records=encoded))
    load_s = time.perf_counter() - t0
    loaded = loader.image
    assert sum(len(t.partitions) for t in loaded.topics_by_id.values()) == n
    assert loaded.topics_by_name.keys() == image.topics_by_name.keys()
    # every partition identical after the round trip
    for tid, t in image.topics_by_id.items():
        assert loaded.topics_by_id[tid].partitions == t.partitions
    return {
        "partitions": n, "topics": n_topics, "brokers": brokers, "rf": rf,
        "records": len(encoded), "snapshot_bytes": total, "bytes_per_partition": total / n,
        "build_s": build_s, "encode_s": encode_s, "load_s": load_s,
        "rss_start_mib": rss0, "peak_rss_mib": _rss_mib(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", default="10000,100000", help="comma-separated partition counts")
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--per-topic", type=int, default=100, help="partitions per topic")
    ap.add_argument("--rf", type=int, default=3)
    ap.add_argument("--json", help="also write the results as JSON here")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(measure(a.child, a.brokers, a.per_topic, a.rf)))
        return
    rows = []
    for n in [int(x) for x in a.partitions.split(",")]:
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", str(n), "--brokers", str(a.brokers),
                              "--per-topic", str(a.per_topic), "--rf", str(a.rf)], check=True, capture_output=True,
                             text=True, cwd=ROOT)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    hdr = f"{'partitions':>10} {'topics':>6} {'records':>8} {'snapshot':>11} {'B/part':>7} " \
          f"{'build s':>8} {'encode s':>8} {'load s':>7} {'peak RSS':>9}"
    print(f"brokers={a.brokers} rf={a.rf} partitions/topic={a.per_topic}  (JSON records, metadata/records.py)")
    print(hdr)
    for x in rows:
        print(f"{x['partitions']:>10,} {x['topics']:>6} {x['records']:>8,} {x['snapshot_bytes'] / 1e6:>8.2f} MB "
              f"{x['bytes_per_partition']:>7.0f} {x['build_s']:>8.2f} {x['encode_s']:>8.2f} {x['load_s']:>7.2f} "
              f"{x['peak_rss_mib']:>5.0f} MiB")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
