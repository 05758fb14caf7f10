"""Share sessions (KIP-932; Kafka's ShareSessionCache), pure: per (group, member) the partitions a
share consumer fetches from this broker and the epoch its next request must carry.

ShareFetch epoch 0 opens a session (replacing the member's previous one) with the partitions it
names; a later request must carry the session's epoch (else INVALID_SHARE_SESSION_EPOCH; no
session: SHARE_SESSION_NOT_FOUND), adds the partitions it names and drops the forgotten ones;
epoch -1 ends the session after its acknowledgements. ShareAcknowledge never opens one (epoch 0 is
INVALID_SHARE_SESSION_EPOCH). At most ``max_sessions`` (group.share.max.share.sessions) sessions:
a new one beyond gets SHARE_SESSION_LIMIT_REACHED.
"""

from __future__ import annotations

import dataclasses
import uuid

from common.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
TP = tuple[uuid.UUID, int]


@dataclasses.dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    epoch: int  # the epoch the next request must carry
    partitions: dict[TP, None]  # insertion-ordered set
    last_used: int  # monotonic ms


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= 2**31 - 1 else epoch + 1


class ShareSessionCache:
    def __init__(self, max_sessions: int = 2000):
        self.max_sessions = max_sessions
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def fetch(self, group_id: str, member_id: str, epoch: int, requested: list[TP], forgotten: list[TP],
              now: int) -> tuple[int, ShareSession | None, ShareSession | None]:
        """A ShareFetch's session: (error, session, replaced session whose member's records go back)."""
        key = (group_id, member_id)
        s = self.sessions.get(key)
        if epoch == INITIAL_EPOCH:
            if s is None and len(self.sessions) >= self.max_sessions:
                return ErrorCode.SHARE_SESSION_LIMIT_REACHED, None, None
            new = self.sessions[key] = ShareSession(group_id, member_id, 1, dict.fromkeys(requested), now)
            return ErrorCode.NONE, new, s
        if s is None:
            return ErrorCode.SHARE_SESSION_NOT_FOUND, None, None
        if epoch == FINAL_EPOCH:
            del self.sessions[key]
            s.last_used = now
            return ErrorCode.NONE, s, None
        if epoch != s.epoch:
            return ErrorCode.INVALID_SHARE_SESSION_EPOCH, None, None
        s.epoch = next_epoch(s.epoch)
        s.last_used = now
        for tp in forgotten:
            s.partitions.pop(tp, None)
        for tp in requested:
            s.partitions.setdefault(tp, None)
        return ErrorCode.NONE, s, None

    def acknowledge(self, group_id: str, member_id: str, epoch: int, now: int) -> tuple[int, ShareSession | None]:
        """A ShareAcknowledge's session (-1: ended by it)."""
        key = (group_id, member_id)
        if epoch == INITIAL_EPOCH:
            return ErrorCode.INVALID_SHARE_SESSION_EPOCH, None
        s = self.sessions.get(key)
        if s is None:
            return ErrorCode.SHARE_SESSION_NOT_FOUND, None
        if epoch == FINAL_EPOCH:
            del self.sessions[key]
            return ErrorCode.NONE, s
        if epoch != s.epoch:
            return ErrorCode.INVALID_SHARE_SESSION_EPOCH, None
        s.epoch = next_epoch(s.epoch)
        s.last_used = now
        return ErrorCode.NONE, s

    def idle(self, now: int, timeout_ms) -> list[ShareSession]:
        """Sessions unused for longer than ``timeout_ms(group_id)`` are removed and returned."""
        gone = [s for s in self.sessions.values() if now - s.last_used > timeout_ms(s.group_id)]
        for s in gone:
            del self.sessions[(s.group_id, s.member_id)]
        return gone

    def has_group(self, group_id: str) -> bool:
        return any(g == group_id for g, _ in self.sessions)


__all__ = ["ShareSessionCache", "ShareSession", "INITIAL_EPOCH", "FINAL_EPOCH"]
