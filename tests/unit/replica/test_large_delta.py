"""A metadata delta with thousands of new local partitions makes their logs a slice at a
time, yielding to the event loop between slices; later deltas about partitions still
waiting for their log (new leader, deletion) are honoured when the log is made."""

import asyncio
import random
import uuid

from broker.log.manager import LogManager
from broker.replica.manager import CREATE_SLICE, ReplicaManager
from common.config import Config
from controller import topics as t
from metadata import records as r
from metadata.delta import MetadataDelta, image_from_records

N = 3 * CREATE_SLICE + 17


def _image():
    recs = [r.RegisterBrokerRecord(i, uuid.uuid4(), 1, (r.Endpoint("PLAINTEXT", "h", 9000 + i),), None,
                                   fenced=False) for i in (1,)]
    return image_from_records(recs, len(recs) - 1, 1)


def _apply(rm, img, recs, offset):
    d = MetadataDelta(img)
    for rec in recs:
        d.replay(rec)
    img = d.apply(offset, 1)
    rm.on_metadata(d, img)
    return img


async def test_large_delta_creates_logs_in_slices_and_keeps_the_latest_role(tmp_path):
    cfg = Config({"node.id": "1", "log.dirs": str(tmp_path)})
    rm = ReplicaManager(1, cfg, LogManager([str(tmp_path)], {}, now_ms=0))
    img = _image()
    recs, _ = t.create_topics(img, [t.NewTopic("big", N, 1)],
                              t.TopicDefaults(), random.Random(1))
    img = _apply(rm, img, recs, 10)
    assert len(rm.partitions) < N  # not all made inside the publisher call
    tid = img.topics_by_name["big"].topic_id
    # while logs are still being made, the last partition's leadership moves to broker 2
    loop_ran = asyncio.Event()
    asyncio.get_running_loop().call_soon(loop_ran.set)
    broker2 = r.RegisterBrokerRecord(2, uuid.uuid4(), 1, (r.Endpoint("PLAINTEXT", "h", 9002),), None, fenced=False)
    img = _apply(rm, img, [broker2, r.PartitionChangeRecord(tid, N - 1, replicas=(1, 2), isr=(1, 2), leader=2)], 11)
    await asyncio.wait_for(loop_ran.wait(), 5)  # the loop is not stalled by the creation
    for _ in range(200):
        if len(rm.partitions) == N:
            break
        await asyncio.sleep(0.01)
    assert len(rm.partitions) == N
    assert all(rm.partitions[("big", p)].state.is_leader for p in range(N - 1))
    last = rm.partitions[("big", N - 1)].state
    assert not last.is_leader and last.leader == 2
    await rm.close()


async def test_a_topic_deleted_before_its_logs_are_made_leaves_nothing(tmp_path):
    cfg = Config({"node.id": "1", "log.dirs": str(tmp_path)})
    lm = LogManager([str(tmp_path)], {}, now_ms=0)
    rm = ReplicaManager(1, cfg, lm)
    img = _image()
    recs, _ = t.create_topics(img, [t.NewTopic("big", N, 1)],
                              t.TopicDefaults(), random.Random(1))
    img = _apply(rm, img, recs, 10)
    made = len(rm.partitions)
    assert made < N
    img = _apply(rm, img, [r.RemoveTopicRecord(img.topics_by_name["big"].topic_id)], 11)
    await asyncio.sleep(0.2)
    assert rm.partitions == {} and lm.get("big", N - 1) is None
    await rm.close()
