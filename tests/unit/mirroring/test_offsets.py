"""The offset-sync logic against the cases of MM2's OffsetSyncStoreTest and OffsetSyncWriterTest."""

import random

from mirror.formats import Checkpoint, OffsetSync
from mirror.offsets import (
    SYNCS_PER_PARTITION,
    OffsetSyncStore,
    SyncEmitter,
    checkpoint_filter,
    group_offsets_to_sync,
)

T, P = "topic1", 2


def started(must_read_to_end=True, preload=()):
    s = OffsetSyncStore(must_read_to_end)
    for up, down in preload:
        s.handle(OffsetSync(T, P, up, down))
    s.read_to_end = True
    return s


def sync(store, up, down):
    store.handle(OffsetSync(T, P, up, down))


def tr(store, up):
    return store.translate_downstream(T, P, up)


def slot(store, i):
    return store._syncs[(T, P)][i]


def assert_invariants(store):
    syncs = store._syncs[(T, P)]
    for j in range(SYNCS_PER_PARTITION):
        for i in range(j):
            ju, iu = syncs[j].upstream_offset, syncs[i].upstream_offset
            if ju == iu:
                continue
            lower = ju + (1 << max(i - 2, 0))
            assert iu >= lower, (i, j)
            upper = ju + (1 << j) - (1 << i)
            if j < 63:
                assert iu <= upper, (i, j)


def assert_sparse(store, sync_offset, previous):
    assert tr(store, sync_offset - 1) == (-1 if previous == -1 else previous + 1)
    assert tr(store, sync_offset) == sync_offset
    assert tr(store, sync_offset + 1) == sync_offset + 1
    assert tr(store, sync_offset + 2) == sync_offset + 1


def test_offset_translation():
    s = started()
    sync(s, 100, 200)
    assert tr(s, 150) == 201  # one past the sync, never more
    sync(s, 150, 251)
    assert tr(s, 150) == 251
    assert tr(s, 5) == -1  # older than any sync
    sync(s, 200, 10)  # downstream reset
    assert tr(s, 200) == 10
    sync(s, 20, 20)  # upstream reset
    assert tr(s, 20) == 20


def test_no_translation_before_the_store_read_to_the_end():
    s = OffsetSyncStore()
    sync(s, 100, 200)
    assert tr(s, 0) is None and tr(s, 100) is None and tr(s, 200) is None
    s.read_to_end = True
    assert (tr(s, 0), tr(s, 100), tr(s, 200)) == (-1, 200, 201)
    assert started().translate_downstream(T, P, 0) is None  # no sync at all


def test_past_offset_translation():
    s = OffsetSyncStore(True)
    for off in range(0, 1001, 10):
        sync(s, off, off)
        assert_invariants(s)
    s.read_to_end = True
    assert_sparse(s, 1000, -1)
    for off in range(1010, 10001, 10):
        sync(s, off, off)
        if off % 130 == 0:
            assert_invariants(s)
    assert_sparse(s, 1000, -1)
    for a, b in [(4840, 1000), (6760, 4840), (8680, 6760), (9160, 8680), (9640, 9160), (9880, 9640),
                 (9940, 9880), (9970, 9940), (9990, 9970), (10000, 9990)]:
        assert_sparse(s, a, b)
    sync(s, 1500, 11000)  # an upstream rewind clears history
    assert (tr(s, 1499), tr(s, 1500), tr(s, 2000)) == (-1, 11000, 11001)


def test_past_offset_translation_without_initial_read_to_end():
    s = OffsetSyncStore(False)
    for off in range(0, 1001, 10):
        sync(s, off, off)
        assert_invariants(s)
    s.read_to_end = True
    assert_sparse(s, 480, 0)
    assert_sparse(s, 720, 480)
    assert_sparse(s, 1000, 990)
    for off in range(1000, 10001, 10):
        sync(s, off, off)
        if off % 130 == 0:
            assert_invariants(s)
    for a, b in [(3840, 0), (7680, 3840), (8640, 7680), (9120, 8640), (9600, 9120), (9840, 9600), (9900, 9840),
                 (9960, 9900), (9990, 9960), (10000, 9990)]:
        assert_sparse(s, a, b)


def _bounded_expirations(first, steps, maximum):
    s = started()
    sync(s, first, first)
    off, last = first, 1
    for step in steps:
        off += step
        sync(s, off, off)
        assert slot(s, 0).upstream_offset == off
        assert slot(s, 63).upstream_offset == first
        count = len(s.syncs(T, P))
        assert last - count + 1 <= maximum, off
        last = count


def test_consistently_spaced_syncs_expire_at_most_one():
    step = 1
    while step < (2 ** 63 - 1) // 100:
        for first in (0, 29):
            _bounded_expirations(first, [step] * 100, 1)
        step = step * 8 + 1


def test_randomly_spaced_syncs_expire_a_bounded_number():
    rng = random.Random(0)
    for n in range(1, 64 - 10, 5):
        _bounded_expirations(0, [rng.randrange(0, 1 << n) for _ in range(1 << 8)], n + 2)


def test_sync_emitter_as_offset_sync_writer_partition_state():
    e = SyncEmitter(100)
    assert e.update(1, 101)       # the first of a lifetime
    assert not e.update(2, 102)
    assert not e.update(3, 103)
    assert e.update(5, 105)       # an upstream offset skipped (compaction, markers)
    assert not e.update(6, 106)
    assert e.update(7, 6)         # downstream went back (target truncated)
    assert not e.update(8, 7)
    assert e.update(108, 107)     # skipped
    e2 = SyncEmitter(100)
    assert e2.update(0, 0)
    assert all(not e2.update(i, i) for i in range(1, 101))
    assert e2.update(101, 101)    # translation would lag offset.lag.max behind


def test_checkpoints_are_monotonic_downstream_but_follow_upstream_rewinds():
    last = {("A.t", 0): Checkpoint("g", "A.t", 0, 100, 90)}
    new = [Checkpoint("g", "A.t", 0, 100, 90), Checkpoint("g", "A.t", 1, 5, 5)]
    assert checkpoint_filter(new, last) == [new[1]]                      # repeated: skipped
    assert checkpoint_filter([Checkpoint("g", "A.t", 0, 120, 80)], last) == []    # would rewind downstream
    assert checkpoint_filter([Checkpoint("g", "A.t", 0, 50, 80)], last)           # upstream rewind: emitted
    assert checkpoint_filter([Checkpoint("g", "A.t", 0, 120, 95)], last)          # advance
    assert checkpoint_filter([Checkpoint("g", "A.t", 0, 120, -1)], None) == []    # untranslatable


def test_group_offsets_move_forward_only():
    conv = {("A.t", 0): (10, ""), ("A.t", 1): (20, "m")}
    assert group_offsets_to_sync(conv, None) == conv                       # new group on the target
    assert group_offsets_to_sync(conv, {("A.t", 0): 15, ("A.t", 1): 5}) == {("A.t", 1): (20, "m")}
    assert group_offsets_to_sync(conv, {("A.t", 0): 10}) == {("A.t", 1): (20, "m")}  # a new partition
