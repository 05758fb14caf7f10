"""The lifecycle the group and transaction coordinators share (broker/coordinator_runtime.py):
a partition is read to its log end when this broker becomes its leader, and its state serves
requests only once it is committed (the high watermark reached the loaded end), as Kafka 4.x's
coordinator runtime answers from its last committed offset."""

from __future__ import annotations

import asyncio
import types

import pytest

from broker.coordinator_runtime import CoordinatorRuntime, TopicSpec
from broker.log import Log, LogConfig
from broker.log.batch import Record, build_batch, parse_batches
from common.errors import ErrorCode, KafkaError

TOPIC = "__test_state"


class Hooks:
    def __init__(self):
        self.loaded: list[tuple[int, int, int]] = []  # (partition, epoch, records)
        self.replayed: list[bytes] = []

    def new_shard(self, partition, epoch):
        return []

    def replay(self, shard, key, value, offset=-1, producer_id=-1):
        shard.append(key)
        self.replayed.append(key)

    def replay_marker(self, shard, producer_id, commit):
        pass

    def on_loaded(self, partition, epoch, shard, records, bad, seconds):
        self.loaded.append((partition, epoch, records))

    def on_unloaded(self, partition, epoch, shard):
        pass


class Replicas:
    """The replica manager as the runtime sees it: partitions, and the listeners of high
    watermark or leadership moves (``wake`` plays the move)."""

    def __init__(self, log: Log):
        self.state = types.SimpleNamespace(is_leader=True, leader_epoch=7, high_watermark=0)
        self.partitions = {(TOPIC, 0): types.SimpleNamespace(state=self.state, log=log)}
        self.listeners: list = []

    def on_next_change(self, tp, fn):
        self.listeners.append(fn)

    def wake(self):
        fns, self.listeners = self.listeners, []
        for fn in fns:
            fn()


def _image(leader: int, epoch: int):
    part = types.SimpleNamespace(leader=leader, leader_epoch=epoch)
    return types.SimpleNamespace(topics_by_name={TOPIC: types.SimpleNamespace(partitions={0: part})})


@pytest.fixture
def log(tmp_path):
    lg = Log.open(str(tmp_path), TOPIC, 0, LogConfig.from_topic_configs({}), now_ms=0)
    for i in range(3):
        buf = build_batch([Record(0, 0, b"k%d" % i, b"v", [])], base_offset=0)
        lg.append_as_leader(buf, parse_batches(buf), 7, 0)
    yield lg
    lg.close()


async def _settle():
    for _ in range(20):
        await asyncio.sleep(0)


async def test_loaded_state_serves_only_once_the_high_watermark_reaches_the_loaded_end(log):
    """Two of the three records are above the high watermark (the previous leader's, never
    acknowledged): a new leader that answered from them could see them truncated away when the
    leadership moves on, its answers outliving them (seed 20337's hang, in either coordinator)."""
    replicas, hooks = Replicas(log), Hooks()
    replicas.state.high_watermark = 1
    loader = types.SimpleNamespace(image=_image(1, 7))
    rt = CoordinatorRuntime(TopicSpec(TOPIC, 1, 3, lambda rf: {}), hooks, broker_id=1, replicas=replicas,
                            loader=loader, controller=None, load_buffer=1 << 20)
    rt.start()
    await _settle()
    assert hooks.replayed == [b"k0", b"k1", b"k2"]  # read to the log end ...
    assert hooks.loaded == []  # ... but not serving
    with pytest.raises(KafkaError) as e:
        rt.slot_for("any")
    assert e.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    replicas.state.high_watermark = 2
    replicas.wake()
    await _settle()
    assert hooks.loaded == []
    replicas.state.high_watermark = 3
    replicas.wake()
    await _settle()
    assert hooks.loaded == [(0, 7, 3)]
    assert rt.slot_for("any")[1].shard == [b"k0", b"k1", b"k2"]
    rt.close()


async def test_a_leadership_lost_before_the_loaded_state_is_committed_never_serves_it(log):
    replicas, hooks = Replicas(log), Hooks()
    replicas.state.high_watermark = 1
    loader = types.SimpleNamespace(image=_image(1, 7))
    rt = CoordinatorRuntime(TopicSpec(TOPIC, 1, 3, lambda rf: {}), hooks, broker_id=1, replicas=replicas,
                            loader=loader, controller=None, load_buffer=1 << 20)
    rt.start()
    await _settle()
    replicas.state.is_leader = False  # another broker leads (its log may end at offset 1)
    replicas.state.high_watermark = 3
    replicas.wake()
    await _settle()
    assert hooks.loaded == []
    rt.close()


async def test_state_committed_already_serves_at_once(log):
    replicas, hooks = Replicas(log), Hooks()
    replicas.state.high_watermark = 3
    loader = types.SimpleNamespace(image=_image(1, 7))
    rt = CoordinatorRuntime(TopicSpec(TOPIC, 1, 3, lambda rf: {}), hooks, broker_id=1, replicas=replicas,
                            loader=loader, controller=None, load_buffer=1 << 20)
    rt.start()
    await _settle()
    assert hooks.loaded == [(0, 7, 3)] and replicas.listeners == []
    rt.close()
