"""Random operation sequences checked against a list model of the log (seeded by hypothesis)."""

import random

from batch_builder import make_batch
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.log import Log, LogConfig, parse_batches, validate_produce_batches
from broker.log.batch import decode_records

MAX = 1 << 20


class Model:
    def __init__(self):
        self.records: list[tuple[int, bytes, int]] = []  # (offset, value, timestamp)
        self.batch_starts: list[int] = []
        self.start = 0

    @property
    def end(self) -> int:
        return self.records[-1][0] + 1 if self.records else self.start


def check(log: Log, m: Model, rng: random.Random) -> None:
    assert log.log_end_offset == m.end
    assert log.log_start_offset == m.start
    got = []
    off = m.start
    while (s := log.read(off, rng.choice([1, 300, 5000]), m.end)) is not None:
        data = log.read_bytes(s)
        hs = parse_batches(data)
        assert sum(h.size for h in hs) == s.size
        for h in hs:
            got += [(r.offset, r.value, r.timestamp) for r in decode_records(data[h.pos:h.pos + h.size])
                    if r.offset >= off]
            off = h.last_offset + 1
    expected = [r for r in m.records if r[0] >= m.start]
    assert got == expected
    for _ in range(3):
        if expected:
            o, _v, ts = rng.choice(expected)
            s = log.read(o, 1, m.end)
            h = parse_batches(log.read_bytes(s))[0]
            assert h.base_offset <= o <= h.last_offset
            # timestamps grow with offsets in this test, so the lookup is exact
            assert log.offset_for_timestamp(ts) == (o, ts)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32))
def test_random_operations_match_model(tmp_path_factory, seed):
    rng = random.Random(seed)
    d = str(tmp_path_factory.mktemp("model"))
    config = LogConfig.from_topic_configs({
        "segment.bytes": rng.choice([300, 1000, 5000]),
        "index.interval.bytes": rng.choice([0, 100, 4096]),
        "retention.bytes": rng.choice([-1, 2000]),
        "retention.ms": -1,
    })
    log = Log.open(d, "t", 0, config, now_ms=0)
    m = Model()
    ts = 1000
    pid = 1
    for _step in range(60):
        op = rng.random()
        if op < 0.55:
            n = rng.randint(1, 4)
            values = [rng.randbytes(rng.randint(0, 120)) for _ in range(n)]
            stamps = list(range(ts, ts + n))
            ts += n
            idempotent = rng.random() < 0.3
            kw = dict(producer_id=pid, producer_epoch=0, base_sequence=0) if idempotent else {}
            buf = make_batch(values, timestamps=stamps, compression=rng.choice([0, 0, 1, 4]), **kw)
            info = log.append_as_leader(bytearray(buf), validate_produce_batches(buf, MAX), 0, 0)
            assert info.first_offset == m.end
            m.batch_starts.append(m.end)
            m.records += [(m.end + i, v, t) for i, (v, t) in enumerate(zip(values, stamps, strict=True))]
            if idempotent:
                retry = log.append_as_leader(bytearray(buf), validate_produce_batches(buf, MAX), 0, 0)
                assert retry.duplicate and (retry.first_offset, retry.last_offset) == (info.first_offset,
                                                                                       info.last_offset)
                pid += 1
        elif op < 0.62 and m.batch_starts:
            cut = rng.choice([b for b in m.batch_starts if b >= m.start] or [m.end])
            log.truncate_to(cut)
            m.records = [r for r in m.records if r[0] < cut]
            m.batch_starts = [b for b in m.batch_starts if b < cut]
            if cut < m.start:
                m.start = cut
        elif op < 0.68:
            k = rng.randint(m.start, m.end)
            log.delete_records_before(k)
            m.start = max(m.start, k)
        elif op < 0.76:
            log.apply_retention(now_ms=0)
            m.start = log.log_start_offset  # checked against the model's invariants below
            assert m.start <= m.end
            assert log.segments[0].base_offset == m.start or log.log_start_offset > log.segments[0].base_offset
        elif op < 0.84:  # crash: nothing is lost from the page cache, indexes not written out
            rp, start = log.recovery_point, log.log_start_offset
            for s in log.segments:
                s.release()
            log = Log.open(d, "t", 0, config, now_ms=0, recovery_point=rp, log_start_offset=start)
        elif op < 0.92:
            start = log.log_start_offset
            log.close()
            log = Log.open(d, "t", 0, config, now_ms=0, recovery_point=log.log_end_offset,
                           log_start_offset=start, clean_shutdown=True)
        else:
            log.flush()
        check(log, m, rng)
