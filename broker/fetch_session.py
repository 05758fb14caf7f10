"""Incremental fetch sessions (KIP-227), both sides, as pure logic.

A fetcher with many partitions need not list them all in every Fetch: the broker keeps a
*session* (the partitions and what the fetcher last asked for each), and each request names
only what changed (``topics``) or left (``forgotten_topics_data``); each response carries only
the partitions with something new (records, a high watermark or log start offset the fetcher
has not seen, an error, ...). Sessions are numbered by id and epoch; a request with the wrong
epoch gets INVALID_FETCH_SESSION_EPOCH, an unknown id FETCH_SESSION_ID_NOT_FOUND, and the
fetcher starts over with a full request.

``FetchSessionCache`` is the broker side (Kafka's FetchManager/FetchSessionCache),
``FetchSessionHandler`` the fetcher side (Kafka's client FetchSessionHandler), used by our
replica fetchers. Request epochs: 0 opens a new session (closing the named one), -1 is a
sessionless full fetch (closing the named one), n > 0 continues session ``id`` at epoch n.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import Protocol

from common.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INVALID_SESSION_ID = 0

Key = tuple[Hashable, int]  # (topic name or topic id, partition)


@dataclasses.dataclass(slots=True)
class PartitionData:
    """What a fetcher asks of one partition (the request's per-partition fields)."""

    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1
    replica_directory_id: uuid.UUID | None = None  # Fetch v17 (KIP-853)


@dataclasses.dataclass(slots=True)
class _Cached:
    data: PartitionData
    high_watermark: int = -1  # as last sent to the fetcher; -1: never (or after an error)
    log_start_offset: int = -1


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= 0x7FFFFFFF else epoch + 1


@dataclasses.dataclass(eq=False)
class FetchSession:
    id: int
    epoch: int  # the epoch the next request must carry
    is_follower: bool
    parts: OrderedDict[Key, _Cached]
    last_used_ms: int
    # Partitions with news (``FetchSessionCache.touch``): what an incremental request reads
    # besides the partitions it names, when the broker tracks the session's partitions
    # (``watch``); the others have nothing the fetcher has not seen. A dict: insertion order.
    dirty: dict[Key, None] = dataclasses.field(default_factory=dict)
    watched: dict[Key, Hashable] = dataclasses.field(default_factory=dict)  # key -> the broker's partition
    on_news: Callable[[], None] | None = None  # set while a long poll of the session waits
    # set while a follower's long poll waits: told of a high watermark that only advanced, which
    # ends the poll a little later (FOLLOWER_HW_DELAY_S) unless records come first
    on_hw_news: Callable[[], None] | None = None
    hw_due: bool = False  # that delay ended the poll: the new high watermark is news now
    replica_id: int = -1


@dataclasses.dataclass
class FetchContext:
    """How to serve one Fetch request: which partitions to read (``parts``, in order), and
    ``select`` to choose which results go in the response."""

    error: int = ErrorCode.NONE
    session_id: int = INVALID_SESSION_ID
    parts: list[tuple[Key, PartitionData]] = dataclasses.field(default_factory=list)
    incremental: bool = False
    session: FetchSession | None = None
    tracked: bool = False  # ``parts`` are only the requested partitions and those with news

    def take_news(self) -> list[tuple[Key, PartitionData]]:
        """The session's partitions that had news since the last call (``touch``), to read."""
        s = self.session
        if s is None or not s.dirty:
            return []
        keys, s.dirty = s.dirty, {}
        return [(k, c.data) for k in keys if (c := s.parts.get(k)) is not None]

    def keep(self, keys: Iterable[Key]) -> None:
        """Partitions to read again at the next request although nothing is touched (an error,
        records sent or left for lack of room: the fetcher may not have what they hold)."""
        if self.session is not None:
            d = self.session.dirty
            for k in keys:
                d[k] = None

    def has_news(self, key: Key, high_watermark: int | None, log_start_offset: int) -> bool:
        """Would this partition's log start (or, unless None, high watermark) be news to the
        fetcher? A follower's long poll ends on it (DeleteRecords waits for the followers' log
        starts; with a replica selector consumers read followers up to their watermark)."""
        c = self.session.parts.get(key) if self.session is not None else None
        return c is not None and (c.log_start_offset != log_start_offset
                                  or (high_watermark is not None and c.high_watermark != high_watermark))

    def select(self, results: dict[Key, tuple[int, int, int, bool, bool]]) -> set[Key]:
        """``results[key] = (error, high_watermark, log_start_offset, has_records, must_send)``
        for every partition read; returns the keys the response carries and remembers what
        the fetcher has now seen. A full context sends everything; an incremental one sends
        partitions with records, errors, ``must_send`` (diverging epoch, preferred replica,
        ...) or a high watermark / log start offset the fetcher has not seen. Partitions that
        returned records move to the end of the session, so each gets its turn at
        ``max_bytes`` (Kafka does the same)."""
        s = self.session
        if s is None:
            return set(results)
        out: set[Key] = set()
        moved = []
        for key, (error, hw, log_start, has_records, must_send) in results.items():
            c = s.parts.get(key)
            if c is None:
                continue
            send = has_records or must_send or error != ErrorCode.NONE
            if error != ErrorCode.NONE:
                c.high_watermark = -1  # resend it once the error clears
            else:
                if c.high_watermark != hw:
                    c.high_watermark = hw
                    send = True
                if c.log_start_offset != log_start:
                    c.log_start_offset = log_start
                    send = True
            if send or not self.incremental:
                out.add(key)
            if has_records:
                moved.append(key)
        for key in moved:
            s.parts.move_to_end(key)
        return out


class RandomInt(Protocol):
    def randint(self, a: int, b: int, /) -> int: ...


class FetchSessionCache:
    """The broker's sessions (``max.incremental.fetch.session.cache.slots``). When full, a new
    session takes the slot of the least recently used one if that one has been idle for
    ``min.incremental.fetch.session.eviction.ms``, or, for a follower, of the least recently
    used consumer session; otherwise the fetcher gets no session (id 0) and fetches in full,
    as Kafka's cache does."""

    def __init__(self, rng: RandomInt, max_slots: int = 1000, eviction_ms: int = 120_000):
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self.sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recently used first
        self._rng = rng  # session ids (the broker's clock.rng)
        # the broker's partition -> the sessions watching it (KIP-227 without a walk of every
        # session partition per request): session -> its key for it
        self._watchers: dict[Hashable, dict[FetchSession, Key]] = {}

    # --- news of partitions (the broker side tells the cache what moved) --------------------------
    def watch(self, session: FetchSession, key: Key, tp: Hashable | None) -> None:
        """``key`` of ``session`` is the broker's partition ``tp``: a ``touch(tp)`` marks it.
        None: no partition of ours (an unknown topic id); the caller keeps it read (``keep``)."""
        if (key in session.watched and session.watched[key] == tp) or self.sessions.get(session.id) is not session \
                or key not in session.parts:
            return
        self._unwatch(session, key)
        session.watched[key] = tp
        if tp is not None:
            self._watchers.setdefault(tp, {})[session] = key

    def _unwatch(self, session: FetchSession, key: Key) -> None:
        tp = session.watched.pop(key, None)  # (None too: not indexed)
        if tp is not None:
            w = self._watchers.get(tp)
            if w is not None and w.pop(session, None) is not None and not w:
                del self._watchers[tp]

    def _drop(self, session_id: int) -> None:
        s = self.sessions.pop(session_id, None)
        if s is not None:
            for key in list(s.watched):
                self._unwatch(s, key)
            if s.on_news is not None:
                s.on_news()  # a long poll of a session that ended looks again (and finds it gone)

    def touch(self, tp: Hashable, wake_followers: bool = True) -> list[FetchSession]:
        """The partition's data, watermarks or leadership moved: every session watching it
        reads it at its next request (a waiting long poll is told through ``on_news``, a
        follower's only if ``wake_followers``). Returns the sessions for which it was idle
        until now (no news pending)."""
        w = self._watchers.get(tp)
        if not w:
            return []
        fresh = []
        for s, key in w.items():
            if key not in s.dirty:
                s.dirty[key] = None
                fresh.append(s)
            if s.on_news is not None:
                if wake_followers or s.replica_id < 0:
                    s.on_news()
                elif s.on_hw_news is not None:
                    s.on_hw_news()
        return fresh

    def context(self, session_id: int, epoch: int, requested: Iterable[tuple[Key, PartitionData]],
                forgotten: Iterable[Key], now_ms: int, is_follower: bool, tracked: bool = False) -> FetchContext:
        """How to serve a request. ``tracked``: the caller ``watch``es the partitions it reads
        and ``touch``es them when they move, so an incremental request reads only the
        partitions it names and those with news (``FetchContext.tracked``), not all of them."""
        requested = list(requested)
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self._drop(session_id)
            if epoch == FINAL_EPOCH:
                return FetchContext(parts=requested)
            parts = OrderedDict((k, _Cached(d)) for k, d in requested)
            session = self._create(parts, now_ms, is_follower)
            return FetchContext(session_id=session.id if session else INVALID_SESSION_ID, parts=requested,
                                session=session)
        session = self.sessions.get(session_id)
        if session is None:
            return FetchContext(error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return FetchContext(error=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        for k in forgotten:
            if session.parts.pop(k, None) is not None:
                self._unwatch(session, k)
                session.dirty.pop(k, None)
        for k, d in requested:
            c = session.parts.get(k)
            if c is None:
                session.parts[k] = _Cached(d)
            else:
                c.data = d
        if not session.parts:  # nothing left: the session ends (Kafka does the same)
            self._drop(session_id)
            return FetchContext()
        session.epoch = next_epoch(session.epoch)
        session.last_used_ms = now_ms
        self.sessions.move_to_end(session_id)
        if tracked:
            ctx = FetchContext(session_id=session_id, parts=requested, incremental=True, session=session,
                               tracked=True)
            named = {k for k, _ in requested}
            unwatched = len(session.parts) - len(session.watched) - sum(1 for k in named if k not in session.watched)
            if unwatched > 0:  # read untracked before (or its watch lapsed): read it all once
                ctx.take_news()
                ctx.parts = [(k, c.data) for k, c in session.parts.items()]
            else:
                ctx.parts = requested + [kd for kd in ctx.take_news() if kd[0] not in named]
            return ctx
        return FetchContext(session_id=session_id, parts=[(k, c.data) for k, c in session.parts.items()],
                            incremental=True, session=session)

    def _create(self, parts: OrderedDict, now_ms: int, is_follower: bool) -> FetchSession | None:
        if self.max_slots <= 0:
            return None
        if len(self.sessions) >= self.max_slots and not self._evict_one(now_ms, is_follower):
            return None
        sid = 0
        while sid == INVALID_SESSION_ID or sid in self.sessions:
            sid = self._rng.randint(1, 0x7FFFFFFF)
        s = FetchSession(sid, 1, is_follower, parts, now_ms)
        self.sessions[sid] = s
        return s

    def _evict_one(self, now_ms: int, for_follower: bool) -> bool:
        oldest_id, oldest = next(iter(self.sessions.items()))
        if now_ms - oldest.last_used_ms >= self.eviction_ms:
            self._drop(oldest_id)
            return True
        if for_follower:
            for sid, s in self.sessions.items():
                if not s.is_follower:
                    self._drop(sid)
                    return True
        return False


class FetchSessionHandler:
    """The fetcher side of a session with one broker: builds each request from the partitions
    wanted now, and reconstructs full answers from incremental responses.

    ``build(wanted)`` takes the full set each time (partitions left out are forgotten).
    ``build(wanted, forget)`` takes only what may have changed: partitions the session holds
    that are in neither stay in it as they were sent (a fetcher with many idle partitions then
    builds its request without walking them); but a full request (``full_next``) must name
    them all."""

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.sent: dict[Key, PartitionData] = {}  # the session as the broker knows it
        self.seen: dict[Key, tuple[int, int]] = {}  # (high watermark, log start offset) last answered
        self._pending: tuple[dict[Key, PartitionData], list[Key] | None, bool] | None = None

    @property
    def full_next(self) -> bool:
        """The next request is a full one (a new session, or none)."""
        return self.session_id == INVALID_SESSION_ID or self.epoch == INITIAL_EPOCH

    def build(self, wanted: dict[Key, PartitionData], forget: list[Key] | None = None,
              ) -> tuple[int, int, dict[Key, PartitionData], list[Key]]:
        """(session id, epoch, partitions to send, partitions to forget) for this request."""
        if self.full_next:
            self._pending = (dict(wanted), None, True)
            return self.session_id, INITIAL_EPOCH, dict(wanted), []
        send = {k: d for k, d in wanted.items() if self.sent.get(k) != d}
        if forget is None:
            forget = [k for k in self.sent if k not in wanted]
            self._pending = (dict(wanted), None, False)
        else:
            forget = [k for k in forget if k in self.sent and k not in wanted]
            self._pending = (dict(wanted), forget, False)
        return self.session_id, self.epoch, send, forget

    def on_response(self, error: int, session_id: int,
                    answered: dict[Key, tuple[int, int]]) -> dict[Key, tuple[int, int]] | None:
        """Takes the response's top-level error and session id and ``answered[key] =
        (high_watermark, log_start_offset)`` of the partitions it carried. Returns the
        (high watermark, log start offset) of every partition the request wanted that the
        response left out because nothing changed, or None if the session failed (the next
        request starts a new one) and the request's partitions are to be retried."""
        wanted, forgot, full = self._pending or ({}, None, True)
        self._pending = None
        if error != ErrorCode.NONE:
            self.reset(close=error != ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
            return None
        if full:
            self.seen = {}
            if session_id == INVALID_SESSION_ID:
                self.session_id, self.epoch, self.sent = INVALID_SESSION_ID, INITIAL_EPOCH, {}
            else:
                self.session_id, self.epoch, self.sent = session_id, 1, wanted
        else:
            self.epoch = next_epoch(self.epoch)
            if forgot is None:
                self.sent = wanted
                for k in list(self.seen):
                    if k not in wanted:
                        del self.seen[k]
            else:
                self.sent.update(wanted)
                for k in forgot:
                    self.sent.pop(k, None)
                    self.seen.pop(k, None)
        self.seen.update(answered)
        missing = {}
        for k in wanted:
            if k not in answered:
                if k not in self.seen:  # the broker must have sent it once: start over
                    self.reset(close=True)
                    return None
                missing[k] = self.seen[k]
        return missing

    def reset(self, close: bool = True) -> None:
        """After a failed request or session error: the next request is a full one, closing
        the old session (if it may still exist on the broker)."""
        if not close:
            self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.sent = {}
        self.seen = {}
        self._pending = None
