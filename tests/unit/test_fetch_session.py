"""KIP-227 fetch sessions: the broker's cache and the fetcher's handler, alone and together."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    FetchSessionCache,
    FetchSessionHandler,
    PartitionData,
)
from common.errors import ErrorCode


def pd(p: int, off: int = 0) -> PartitionData:
    return PartitionData(p, off, 1 << 20)


def req(*parts):
    return [(("t", p), pd(p, off)) for p, off in parts]


def test_full_then_incremental_then_errors():
    cache = FetchSessionCache(random.Random(1))
    full = cache.context(0, INITIAL_EPOCH, req((0, 0), (1, 0)), [], 0, False)
    sid = full.session_id
    assert sid > 0 and not full.incremental and [k for k, _ in full.parts] == [("t", 0), ("t", 1)]
    assert full.select({("t", 0): (0, 5, 0, True, False), ("t", 1): (0, 0, 0, False, False)}) == {("t", 0), ("t", 1)}
    # epoch 1: only partition 0 moved on; partition 1 unchanged and quiet -> left out
    inc = cache.context(sid, 1, req((0, 5)), [], 1, False)
    assert inc.incremental and dict(inc.parts)[("t", 0)].fetch_offset == 5 and dict(inc.parts)[("t", 1)].fetch_offset == 0
    assert inc.select({("t", 0): (0, 5, 0, False, False), ("t", 1): (0, 0, 0, False, False)}) == set()
    # a new high watermark or log start is news; so are errors and records
    inc = cache.context(sid, 2, [], [], 2, False)
    assert inc.select({("t", 0): (0, 7, 0, False, False), ("t", 1): (0, 0, 3, False, False)}) == {("t", 0), ("t", 1)}
    inc = cache.context(sid, 3, [], [], 3, False)
    assert inc.select({("t", 0): (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1, False, False),
                       ("t", 1): (0, 0, 3, False, True)}) == {("t", 0), ("t", 1)}
    # after an error the partition is sent again even if its watermark is back where it was
    inc = cache.context(sid, 4, [], [], 4, False)
    assert ("t", 0) in inc.select({("t", 0): (0, 7, 0, False, False), ("t", 1): (0, 0, 3, False, False)})
    # wrong epoch, unknown id
    assert cache.context(sid, 4, [], [], 5, False).error == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert cache.context(sid + 1, 1, [], [], 5, False).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    # forgetting everything ends the session; FINAL_EPOCH closes and fetches sessionless
    assert cache.context(sid, 5, [], [("t", 0), ("t", 1)], 6, False).session is None
    assert sid not in cache.sessions
    s2 = cache.context(0, INITIAL_EPOCH, req((0, 0)), [], 7, False).session_id
    fin = cache.context(s2, FINAL_EPOCH, req((0, 9)), [], 8, False)
    assert fin.session is None and fin.session_id == 0 and s2 not in cache.sessions


def test_partitions_with_records_rotate_to_the_end():
    cache = FetchSessionCache(random.Random(2))
    ctx = cache.context(0, INITIAL_EPOCH, req((0, 0), (1, 0), (2, 0)), [], 0, False)
    ctx.select({("t", 0): (0, 1, 0, True, False), ("t", 1): (0, 0, 0, False, False), ("t", 2): (0, 0, 0, False, False)})
    inc = cache.context(ctx.session_id, 1, [], [], 1, False)
    assert [k[1] for k, _ in inc.parts] == [1, 2, 0]


def test_cache_eviction_rules():
    cache = FetchSessionCache(random.Random(3), max_slots=2, eviction_ms=1000)
    a = cache.context(0, 0, req((0, 0)), [], 0, False).session_id
    b = cache.context(0, 0, req((0, 0)), [], 10, True).session_id
    assert a and b
    # full, nothing idle long enough: a consumer gets no session; a follower evicts a consumer's
    assert cache.context(0, 0, req((0, 0)), [], 500, False).session_id == 0
    c = cache.context(0, 0, req((0, 0)), [], 600, True).session_id
    assert c and a not in cache.sessions and b in cache.sessions
    # an idle session makes room for anyone
    d = cache.context(0, 0, req((0, 0)), [], 2000, False).session_id
    assert d and b not in cache.sessions
    assert FetchSessionCache(random.Random(0), max_slots=0).context(0, 0, req((0, 0)), [], 0, False).session_id == 0


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_handler_and_cache_together_equal_full_fetches(data):
    """Whatever the fetcher wants from round to round and however the partitions change, the
    fetcher's view built from incremental responses equals what a full fetch would say, and
    every partition with records is answered."""
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    cache = FetchSessionCache(rng, max_slots=data.draw(st.integers(0, 2)))
    h = FetchSessionHandler()
    state = {p: (0, 0) for p in range(6)}  # partition -> (high watermark, log start offset)
    offsets = {p: 0 for p in range(6)}
    for rnd in range(data.draw(st.integers(1, 25))):
        for p in range(6):  # the partitions move on
            hw, ls = state[p]
            if rng.random() < 0.3:
                hw += rng.randint(1, 3)
            if rng.random() < 0.1:
                ls = min(hw, ls + 1)
            state[p] = (hw, ls)
        wanted = {("t", p): pd(p, offsets[p]) for p in sorted(rng.sample(range(6), rng.randint(1, 6)))}
        sid, epoch, send, forget = h.build(wanted)
        if rng.random() < 0.05:  # the broker restarted: sessions gone
            cache = FetchSessionCache(rng)
        ctx = cache.context(sid, epoch, list(send.items()), forget, rnd, True)
        if ctx.error:
            assert h.on_response(ctx.error, 0, {}) is None
            continue
        assert {k for k, _ in ctx.parts} == set(wanted)
        assert all(d == wanted[k] for k, d in ctx.parts)  # the broker reads what the fetcher wants
        results = {}
        for k, d in ctx.parts:
            hw, ls = state[k[1]]
            # records only sometimes (max_bytes ran out): watermark-only news must still come
            results[k] = (0, hw, ls, d.fetch_offset < hw and rng.random() < 0.5, False)
        chosen = ctx.select(results)
        assert {k for k, r in results.items() if r[3]} <= chosen
        answered = {k: (results[k][1], results[k][2]) for k in chosen}
        missing = h.on_response(0, ctx.session_id, answered)
        if missing is None:
            continue
        view = {**answered, **missing}
        assert view == {k: state[k[1]] for k in wanted}
        for k in chosen:
            if results[k][3]:
                offsets[k[1]] = state[k[1]][0]


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_a_tracked_session_reads_only_what_moved_and_misses_nothing(data):
    """Issue 24: the broker watches a session's partitions and is told what moves (``touch``);
    an incremental request then reads only the partitions it names and those with news, not
    every one. Whatever moves from round to round, the fetcher's view still equals a full
    fetch's, and every partition with something to read is read."""
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    cache = FetchSessionCache(rng, max_slots=data.draw(st.integers(0, 2)))
    h = FetchSessionHandler()
    n = 6
    state = {p: (0, 0) for p in range(n)}
    offsets = {p: 0 for p in range(n)}
    read_counts = []
    for rnd in range(data.draw(st.integers(1, 25))):
        for p in range(n):
            hw, ls = state[p]
            if rng.random() < 0.2:
                hw += rng.randint(1, 3)
            if rng.random() < 0.05:
                ls = min(hw, ls + 1)
            if (hw, ls) != state[p]:
                state[p] = (hw, ls)
                cache.touch(("t", p))  # the replica manager's news
        wanted = {("t", p): pd(p, offsets[p]) for p in sorted(rng.sample(range(n), rng.randint(1, n)))}
        sid, epoch, send, forget = h.build(wanted)
        ctx = cache.context(sid, epoch, list(send.items()), forget, rnd, True, tracked=True)
        if ctx.error:
            assert h.on_response(ctx.error, 0, {}) is None
            continue
        read = {k for k, _ in ctx.parts}
        # nothing available is left unread, nothing read is outside the session
        assert {k for k in wanted if offsets[k[1]] < state[k[1]][0]} <= read <= set(wanted)
        if ctx.tracked:
            read_counts.append(len(read))
        results = {}
        for k, d in ctx.parts:
            hw, ls = state[k[1]]
            results[k] = (0, hw, ls, d.fetch_offset < hw and rng.random() < 0.5, False)
        chosen = ctx.select(results)
        assert {k for k, r in results.items() if r[3]} <= chosen
        if ctx.session is not None:
            # the broker reads again what still holds something for the fetcher, watches the rest
            ctx.keep([k for k, d in ctx.parts if d.fetch_offset < state[k[1]][0]])
            for k, _ in ctx.parts:
                cache.watch(ctx.session, k, k)
        answered = {k: (results[k][1], results[k][2]) for k in chosen}
        missing = h.on_response(0, ctx.session_id, answered)
        if missing is None:
            continue
        view = {**answered, **missing}
        assert view == {k: state[k[1]] for k in wanted}
        for k in chosen:
            if results[k][3]:
                offsets[k[1]] = state[k[1]][0]


def test_a_tracked_session_with_nothing_moving_reads_nothing():
    cache = FetchSessionCache(random.Random(1))
    h = FetchSessionHandler()
    wanted = {("t", p): pd(p, 5) for p in range(100)}

    def fetch(wanted, now):
        sid, epoch, send, forget = h.build(wanted)
        ctx = cache.context(sid, epoch, list(send.items()), forget, now, True, tracked=True)
        assert not ctx.error
        chosen = ctx.select({k: (0, 5, 0, False, False) for k, _ in ctx.parts})
        for k, _ in ctx.parts:
            cache.watch(ctx.session, k, k)
        assert h.on_response(0, ctx.session_id, {k: (5, 0) for k in chosen}) is not None
        return ctx

    ctx = fetch(wanted, 0)
    assert len(ctx.parts) == 100 and not ctx.tracked  # the first request reads them all
    ctx = fetch(wanted, 1)
    assert ctx.tracked and ctx.parts == []
    assert cache.touch(("t", 7)) == [ctx.session] and cache.touch(("t", 7)) == []  # idle until now; then pending
    ctx = fetch(wanted, 2)
    assert [k for k, _ in ctx.parts] == [("t", 7)]
    assert fetch(wanted, 3).parts == []
    # a forgotten partition is no longer watched; an ended session watches nothing
    fetch({k: d for k, d in wanted.items() if k != ("t", 3)}, 4)
    assert cache.touch(("t", 3)) == [] and len(cache.touch(("t", 4))) == 1
    cache.context(h.session_id, -1, [], [], 5, True)
    assert cache.touch(("t", 8)) == [] and not cache._watchers


def test_a_high_watermark_that_only_advanced_ends_consumers_long_polls_not_followers():
    """A consumer's long poll ends when the high watermark moves; a follower's is told to end a
    little later (FetchApis._wait_for_news: records coming first carry the watermark, one fetch
    round per append of a busy partition instead of two, issue 19). Both read the partition at
    their next request."""
    cache = FetchSessionCache(random.Random(1))
    woken = {}
    sessions = {}
    for who, replica_id in (("follower", 2), ("consumer", -1)):
        h = FetchSessionHandler()
        sid, epoch, send, forget = h.build({("t", 0): pd(0, 5)})
        ctx = cache.context(sid, epoch, list(send.items()), forget, 0, replica_id >= 0, tracked=True)
        ctx.session.replica_id = replica_id
        ctx.select({k: (0, 5, 0, False, False) for k, _ in ctx.parts})
        cache.watch(ctx.session, ("t", 0), ("t", 0))
        ctx.session.on_news = lambda who=who: woken.__setitem__(who, woken.get(who, 0) + 1)
        ctx.session.on_hw_news = lambda who=who: woken.__setitem__(who + " later", 1)
        sessions[who] = ctx.session
    cache.touch(("t", 0), wake_followers=False)  # the high watermark advanced
    assert woken == {"consumer": 1, "follower later": 1}  # the follower's poll ends after a delay
    assert all(("t", 0) in s.dirty for s in sessions.values())  # both read it at their next request
    cache.touch(("t", 0))  # records appended (or leadership, log start moved): the follower's poll ends too
    assert woken == {"consumer": 2, "follower": 1, "follower later": 1}
