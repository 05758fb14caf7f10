"""Async appends (Log.append_as_*_async): the write syscall runs in a writer thread while the
log's state stays on the event loop. Nothing may see a batch before its write is done, one
log's appends are serialised, and a write in flight that a truncation, leadership change
or close overtakes is dropped from the file, never left to land over newer data."""

import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from batch_builder import make_batch

import broker.log.appends as log_module
from broker.log import Log, LogConfig, parse_batches, validate_produce_batches
from broker.log.batch import decode_records
from broker.log.log import AppendAborted
from common.errors import ErrorCode

MAX = 1 << 20


@pytest.fixture
def writer():
    ex = ThreadPoolExecutor(2, thread_name_prefix="test-writer")
    yield ex
    ex.shutdown(wait=True)


class Gate:
    """Holds every write at the door until opened; ``entered`` is set once one is waiting."""

    def __init__(self, monkeypatch):
        self.open = threading.Event()
        self.entered = threading.Event()
        real = log_module.write_at

        def gated(file, data, pos):
            self.entered.set()
            assert self.open.wait(10), "gate never opened"
            real(file, data, pos)

        monkeypatch.setattr(log_module, "write_at", gated)

    async def wait_entered(self):
        assert await asyncio.to_thread(self.entered.wait, 5)


def open_log(path, **cfg):
    config = LogConfig.from_topic_configs({k.replace("_", "."): v for k, v in cfg.items()})
    return Log.open(str(path), "topic", 0, config, now_ms=0)


def batch(values, **kw):
    buf = make_batch(values, **kw)
    return buf, validate_produce_batches(buf, MAX)


def leader_append(lg, values, writer, epoch=0, **kw):
    buf, headers = batch(values, **kw)
    return lg.append_as_leader_async(buf, headers, lambda: epoch, 0, writer)


def values_on_disk(path):
    """Every record value in the partition, read back by opening the log afresh (recovery)."""
    lg = open_log(path)
    try:
        out = []
        offset = lg.log_start_offset
        while True:
            s = lg.read(offset, 1 << 20, lg.log_end_offset)
            if s is None:
                return out
            data = lg.read_bytes(s)
            for h in parse_batches(data):
                out += [(r.offset, r.value) for r in decode_records(data[h.pos:h.pos + h.size])]
            offset = out[-1][0] + 1
    finally:
        lg.close()


async def test_batch_is_invisible_until_its_write_is_done(tmp_path, writer, monkeypatch):
    lg = open_log(tmp_path)
    await leader_append(lg, [b"a"], writer)
    gate = Gate(monkeypatch)
    task = asyncio.create_task(leader_append(lg, [b"b", b"c"], writer))
    await gate.wait_entered()
    size = lg.active_segment.size
    assert lg.log_end_offset == 1 and lg.read(1, 4096, 10) is None  # not readable, not counted
    gate.open.set()
    info = await task
    assert (info.first_offset, info.last_offset) == (1, 2)
    assert lg.log_end_offset == 3 and lg.active_segment.size > size
    lg.close()
    assert values_on_disk(tmp_path) == [(0, b"a"), (1, b"b"), (2, b"c")]


@pytest.mark.parametrize("threads", [True, False], ids=["writer-threads", "on-the-loop"])
async def test_appends_to_one_log_are_serialised_and_contiguous(tmp_path, writer, threads):
    """krafty.log.writer.threads > 0 or 0 (executor None: the write runs on the loop)."""
    writer = writer if threads else None
    lg = open_log(tmp_path, segment_bytes=4096)  # rolls along the way, between writes
    infos = await asyncio.gather(*(leader_append(lg, [b"%d" % i * 300], writer) for i in range(40)))
    assert [i.first_offset for i in infos] == list(range(40))
    assert len(lg.segments) > 1
    lg.close()
    assert [v for _, v in values_on_disk(tmp_path)] == [b"%d" % i * 300 for i in range(40)]


async def test_truncation_overtaking_a_write_drops_it_from_the_file(tmp_path, writer, monkeypatch):
    lg = open_log(tmp_path)
    await leader_append(lg, [b"a"], writer)
    await leader_append(lg, [b"b"], writer)
    gate = Gate(monkeypatch)
    task = asyncio.create_task(leader_append(lg, [b"late"], writer))
    await gate.wait_entered()  # the write syscall is under way in the writer thread
    threading.Timer(0.2, gate.open.set).start()  # it finishes while truncate_to waits for it
    lg.truncate_to(1)
    with pytest.raises(AppendAborted) as e:
        await task
    assert e.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert lg.log_end_offset == 1
    assert os.path.getsize(lg.active_segment.log_path) == lg.active_segment.size  # no stray bytes
    buf, headers = batch([b"new"])
    lg.append_as_follower(*_as_follower(buf, headers, base_offset=1, epoch=1))
    lg.close()
    assert values_on_disk(tmp_path) == [(0, b"a"), (1, b"new")]


async def test_leadership_change_overtaking_a_write_leaves_no_stray_bytes(tmp_path, writer, monkeypatch):
    """abort_append without a truncation (the replica manager's role change): the write that
    already ran is cut off the file, so neither the next append nor a restart finds it."""
    lg = open_log(tmp_path)
    await leader_append(lg, [b"a"], writer)
    gate = Gate(monkeypatch)
    task = asyncio.create_task(leader_append(lg, [b"a much longer record than the next one"], writer))
    await gate.wait_entered()
    threading.Timer(0.2, gate.open.set).start()
    lg.abort_append()
    with pytest.raises(AppendAborted):
        await task
    assert os.path.getsize(lg.active_segment.log_path) == lg.active_segment.size
    assert (await leader_append(lg, [b"b"], writer, epoch=1)).first_offset == 1
    lg.close()
    assert values_on_disk(tmp_path) == [(0, b"a"), (1, b"b")]
    assert os.path.getsize(lg.active_segment.log_path) == lg.active_segment.size


def _as_follower(buf, headers, base_offset, epoch):
    """Stamp a client batch as the leader would, for a follower append."""
    from broker.log.batch import assign_offsets
    assign_offsets(buf, headers, base_offset, epoch, None)
    return buf, parse_batches(buf)


async def test_abort_before_the_write_started_writes_nothing(tmp_path, monkeypatch):
    busy = threading.Event()
    one = ThreadPoolExecutor(1)
    one.submit(busy.wait, 10)  # the only writer thread is busy elsewhere: our write queues
    try:
        lg = open_log(tmp_path)
        wrote = []
        real = log_module.write_at
        monkeypatch.setattr(log_module, "write_at", lambda *a: (wrote.append(1), real(*a)))
        task = asyncio.create_task(leader_append(lg, [b"queued"], one))
        await asyncio.sleep(0.05)
        lg.abort_append()  # returns at once: nothing to wait for
        busy.set()
        with pytest.raises(AppendAborted):
            await task
        assert wrote == [] and lg.log_end_offset == 0
        assert (await leader_append(lg, [b"next"], one)).first_offset == 0
        lg.close()
        assert values_on_disk(tmp_path) == [(0, b"next")]
    finally:
        busy.set()
        one.shutdown()


async def test_caller_cancelled_mid_write_still_completes_the_append(tmp_path, writer, monkeypatch):
    """A produce whose connection went away: its bytes are on their way under offsets the log
    handed out, so the append completes (and the log stays consistent) before the cancel."""
    lg = open_log(tmp_path)
    gate = Gate(monkeypatch)
    task = asyncio.create_task(leader_append(lg, [b"x"], writer))
    await gate.wait_entered()
    task.cancel()
    await asyncio.sleep(0.05)
    assert not task.done()  # still waiting for its write
    gate.open.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert lg.log_end_offset == 1
    assert (await leader_append(lg, [b"y"], writer)).first_offset == 1
    lg.close()
    assert values_on_disk(tmp_path) == [(0, b"x"), (1, b"y")]


async def test_turn_rechecks_leadership(tmp_path, writer, monkeypatch):
    """An append queued behind another is refused if leadership moved while it waited."""
    lg = open_log(tmp_path)
    gate = Gate(monkeypatch)
    leading = [True]

    def epoch():
        if not leading[0]:
            raise AppendAborted("not leader")
        return 0

    buf, headers = batch([b"first"])
    first = asyncio.create_task(lg.append_as_leader_async(buf, headers, epoch, 0, writer))
    await gate.wait_entered()
    buf2, headers2 = batch([b"second"])
    second = asyncio.create_task(lg.append_as_leader_async(buf2, headers2, epoch, 0, writer))
    await asyncio.sleep(0.05)
    leading[0] = False
    gate.open.set()
    assert (await first).first_offset == 0
    with pytest.raises(AppendAborted):
        await second
    assert lg.log_end_offset == 1
    lg.close()


async def test_retention_keeps_the_active_segment_while_a_write_is_in_flight(tmp_path, writer, monkeypatch):
    lg = open_log(tmp_path, retention_ms=1, segment_ms=1)
    await leader_append(lg, [b"old"], writer)
    gate = Gate(monkeypatch)
    task = asyncio.create_task(leader_append(lg, [b"new"], writer))
    await gate.wait_entered()
    active = lg.active_segment
    assert lg.apply_retention(now_ms=10**12) == 0  # everything is due, but the active one is being written
    assert lg.active_segment is active
    gate.open.set()
    assert (await task).first_offset == 1
    assert lg.apply_retention(now_ms=10**12) == 1  # next pass: rolls, then deletes
    assert lg.log_start_offset == 2 == lg.log_end_offset
    lg.close()


async def test_duplicate_retry_waits_for_the_original_write(tmp_path, writer, monkeypatch):
    """An idempotent producer's retry that arrives while the original is being written is
    answered with the original's offsets once it is committed, and written once."""
    lg = open_log(tmp_path)
    gate = Gate(monkeypatch)
    kw = dict(producer_id=7, producer_epoch=0, base_sequence=0)
    first = asyncio.create_task(leader_append(lg, [b"p"], writer, **kw))
    await gate.wait_entered()
    retry = asyncio.create_task(leader_append(lg, [b"p"], writer, **kw))
    await asyncio.sleep(0.05)
    gate.open.set()
    a, b = await first, await retry
    assert (a.first_offset, a.duplicate, b.first_offset, b.duplicate) == (0, False, 0, True)
    assert lg.log_end_offset == 1
    lg.close()
