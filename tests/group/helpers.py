"""A test harness around the pure GroupShard: it plays the shell (answers parked
requests, "commits" writes at once or fails them) and records every reply."""

from __future__ import annotations

import itertools

from broker.group import records as rec
from broker.group.shard import GroupShard
from broker.group.state import Effects, GroupConfig, JoinRequest
from common.errors import ErrorCode

PROTO = [("range", b"\x00\x01range-meta")]


class Waiter:
    """Stands for a parked request's future; must be answered exactly once."""

    _ids = itertools.count()

    def __init__(self, kind: str):
        self.kind = kind
        self.id = next(self._ids)
        self.result = None
        self.answers = 0

    def done(self) -> bool:
        return self.answers > 0

    def __repr__(self) -> str:
        return f"<Waiter {self.kind}#{self.id} {self.result}>"


class Harness:
    def __init__(self, config: GroupConfig | None = None, now: int = 1_000_000, fail_writes: int = 0):
        self.config = config or GroupConfig(initial_rebalance_delay_ms=0)
        self.shard = GroupShard(0, self.config)
        self.now = now
        self.log: list[tuple[bytes, bytes | None]] = []
        self.fail_writes = fail_writes  # error code for every write, 0 = commit
        self.hold_writes = False  # appended writes wait for complete_held() (a slow acks=all write)
        self.held: list = []
        self._ids = itertools.count(1)
        self.all_waiters: list[Waiter] = []

    # the shell's job --------------------------------------------------------------------------
    def run(self, fx: Effects) -> None:
        for w, resp in fx.replies:
            self._answer(w, resp)
        for wr in fx.writes:
            if self.fail_writes:
                self._done(wr, self.fail_writes)
                continue
            wr.base_offset = len(self.log)  # the log offset of its first record, as the shell sets it
            self.log += wr.records
            if wr.on_append is not None:
                wr.on_append()
            if self.hold_writes:
                self.held.append(wr)  # appended, not committed yet (the high watermark is behind)
            else:
                self._done(wr, 0)

    def _done(self, wr, err: int) -> None:
        """A write is over (committed, or failed with ``err``): what the shell's write() does."""
        if err and wr.on_fail is not None:
            self.run(wr.on_fail(err, self.now))
        if wr.on_done is not None:
            self.run(wr.on_done(err, self.now) or Effects())
        for w, resp in wr.replies:
            self._answer(w, dict(resp, error_code=err) if err else resp)

    def complete_held(self, err: int = 0) -> None:
        """The writes held so far commit (``err`` 0) or fail with ``err``, oldest first."""
        held, self.held = self.held, []
        for wr in held:
            self._done(wr, err)

    def run_write(self, w) -> None:
        """Commit (or fail) one Write the shard returned directly."""
        assert w is not None, "the shard wrote nothing"
        self.run(Effects(writes=[w]))

    @staticmethod
    def _answer(w: Waiter, resp: dict) -> None:
        assert w.answers == 0, f"{w} answered twice"
        w.answers += 1
        w.result = resp

    def waiter(self, kind: str) -> Waiter:
        w = Waiter(kind)
        self.all_waiters.append(w)
        return w

    # requests -----------------------------------------------------------------------------------
    def join(self, group="g", member_id="", instance=None, protocols=None, session=10_000, rebalance=30_000,
             version=9, client="c") -> Waiter:
        w = self.waiter("join")
        req = JoinRequest(group, member_id, instance, "consumer", list(protocols or PROTO), session, rebalance,
                          client, "/127.0.0.1", version >= 4, version >= 9, f"{client}-{next(self._ids)}")
        self.run(self.shard.join(self.now, req, w))
        return w

    def join_new(self, group="g", **kw) -> Waiter:
        """The v4+ handshake: MEMBER_ID_REQUIRED then a join with the given id."""
        w = self.join(group, **kw)
        if kw.get("instance") is None and kw.get("version", 9) >= 4:
            assert w.result["error_code"] == ErrorCode.MEMBER_ID_REQUIRED, w
            kw.pop("member_id", None)
            return self.join(group, member_id=w.result["member_id"], **kw)
        return w

    def sync(self, member_id, generation, group="g", assignments=None, instance=None) -> Waiter:
        w = self.waiter("sync")
        self.run(self.shard.sync(self.now, group, member_id, instance, generation, None, None, assignments or {}, w))
        return w

    def heartbeat(self, member_id, generation, group="g", instance=None) -> int:
        return self.shard.heartbeat(self.now, group, member_id, instance, generation)

    def leave(self, *identities, group="g"):
        top, results, fx = self.shard.leave(self.now, group, list(identities))
        self.run(fx)
        return top, results

    def commit(self, group, generation=-1, member_id="", offsets=None, version=9, instance=None):
        topics = [(t, [(p, o, -1, "")]) for (t, p), o in (offsets or {}).items()]
        out, w = self.shard.commit_offsets(self.now, group, member_id, instance, generation, version, topics)
        if w is not None:
            from broker.group.state import Effects as Fx
            fx = Fx(writes=[w])
            self.run(fx)
        return {(t["name"], p["partition_index"]): p["error_code"] for t in out for p in t["partitions"]}

    def advance(self, ms: int) -> None:
        """Move time forward, firing every timer on the way (as the shell's timer loop does)."""
        end = self.now + ms
        while True:
            d = self.shard.next_deadline()
            if d is None or d > end:
                break
            self.now = max(self.now, d)
            self.run(self.shard.tick(self.now))
        self.now = end
        self.run(self.shard.tick(self.now))

    def group(self, gid="g"):
        return self.shard.groups.get(gid)

    def reload(self) -> GroupShard:
        """A new shard rebuilt from the records written so far (a coordinator failover)."""
        s = GroupShard(0, self.config)
        for k, v in self.log:
            s.replay(k, v, self.now)
        return s


def decoded_log(log):
    out = []
    for k, v in log:
        key = rec.decode_key(k)
        if v is None:
            out.append((key, None))
        elif isinstance(key, rec.OffsetKey):
            out.append((key, rec.decode_offset_value(v)))
        else:
            out.append((key, rec.decode_group_value(v)))
    return out
