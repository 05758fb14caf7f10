"""A follower whose own copy of a closed segment went bad (issue 18, item 7) truncates to the
last valid batch before the damage and fetches the rest again from the leader. Real
processes: one controller, two brokers, RF=2."""

from __future__ import annotations

import struct
from pathlib import Path

from confluent_kafka import Producer

from broker.log import parse_batches
from broker.log.batch import batch_crc_ok
from tests.cluster.conftest import FAST, running_cluster, wait_until
from tests.cluster.test_replication import _consume_all, _create, _partition, _port


def _segments(c, broker_id: int, topic: str) -> list[Path]:
    return sorted(Path(c.dir, c.broker_name(broker_id), f"{topic}-0").glob("*.log"))


def test_follower_with_a_corrupt_closed_segment_truncates_and_fetches_it_again(tmp_path, request):
    with running_cluster(tmp_path, request, controllers=1, brokers=2, overrides=FAST) as c:
        _create(c, "dmg", rf=2, config={"segment.bytes": "16384", "min.insync.replicas": "2"})
        part = _partition(c, "dmg")
        leader = part.leader
        follower = next(b for b in part.replicas if b != leader)
        values = [b"#%04d " % i + b"x" * 400 for i in range(300)]
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "batch.num.messages": 5, "linger.ms": 2})
        for v in values:
            p.produce("dmg", value=v, partition=0)
            p.poll(0)
        assert p.flush(60) == 0

        c.stop(c.broker_name(follower))  # clean stop: the damage below is found at open
        segs = _segments(c, follower, "dmg")
        assert len(segs) >= 4
        victim_seg = segs[1]
        victim = parse_batches(victim_seg.read_bytes())[-1]  # after the last index entry: checked at open
        with open(victim_seg, "r+b") as f:
            f.seek(victim.pos + 8)
            f.write(struct.pack(">i", 7))
        c.start(c.broker_name(follower))

        log = lambda: c.log_text(c.broker_name(follower))  # noqa: E731
        wait_until(lambda: "our copy does not parse" in log(), 60, "the follower to truncate to the damage")
        assert f"{victim_seg}" in log() and f"byte {victim.pos}" in log()
        assert f"truncating from 300 to {victim.base_offset}" in log()
        wait_until(lambda: follower in _partition(c, "dmg").isrs, 60, "the follower back in the ISR")
        again = {h.pos: h for h in parse_batches(victim_seg.read_bytes())}.get(victim.pos)
        assert again is not None and again.base_offset == victim.base_offset  # the leader's copy, in place
        assert batch_crc_ok(victim_seg.read_bytes(), again)
        # the repaired copy serves every record: make it the leader and read it all from there
        c.stop(c.broker_name(leader))
        wait_until(lambda: _partition(c, "dmg").leader == follower, 60, "the follower to lead")
        assert _consume_all(f"127.0.0.1:{_port(c, follower)}", "dmg", 300) == values
