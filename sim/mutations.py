"""Known past bugs, re-introduced on demand into the real code, to show that the whole-cluster
simulation finds them (tests/sim_world/test_mutations.py; ``python -m sim.run_world
--mutation NAME``). Each is applied with a ``pytest.MonkeyPatch``-like object (``setattr``)
and undone with it.
"""

from __future__ import annotations


def wall_clock_sessions(mp) -> None:
    """controller/loop.py timed broker sessions with time.time() (a wall-clock step fenced
    every broker, or kept dead ones alive)."""
    from controller.loop import QuorumController
    mp.setattr(QuorumController, "_now_ms", lambda self: self.clock.wall_ms())


def vote_twice(mp) -> None:
    """A voter forgets its vote and grants a second candidate in the same epoch."""
    from raft.core import RaftCore
    orig = RaftCore._on_vote_request

    def forgetful(self, m, now_ms):
        self.voted_for = None
        orig(self, m, now_ms)
    mp.setattr(RaftCore, "_on_vote_request", forgetful)


def vote_for_stale_log(mp) -> None:
    """A voter grants its vote without comparing logs (Raft's election restriction)."""
    from raft.core import RaftCore
    mp.setattr(RaftCore, "_log_up_to_date", lambda self, last_epoch, log_end: True)


def no_leader_endpoints(mp) -> None:
    """KIP-853's leader endpoints left out (krafty before ab493ab): BeginQuorumEpoch and the
    answers naming a leader carry no endpoint, so a voter that has not fetched the voters record
    of another voter's move reaches that voter, once it leads, only at its old listener: it
    never catches up (or the quorum never commits again). Caught by the Raft-quorum seeds of
    sim/quorum.py with voters moving (``python -m sim.run --dynamic``)."""
    from raft.core import RaftCore
    mp.setattr(RaftCore, "known_leader_endpoint", lambda self: None)


def recovery_drops_a_torn_segment(mp) -> None:
    """Recovery falls back below the last complete valid batch: a segment whose tail is torn
    is cut back to its base offset (the fall-back issue 18 removed), not to the last valid
    batch. Caught by the world's recovery check against an independent scan of the files."""
    from broker.log import fileio
    from broker.log.segment import LogSegment
    orig = LogSegment.recover

    def recover(self, on_batch=None, truncate: bool = True) -> int:
        cut = orig(self, on_batch, truncate)
        if cut and truncate and self.size:
            cut += self.size
            fileio.ftruncate(self.fd, 0)
            self.size = 0
            self.next_offset = self.base_offset
            self.index.reset()
            self.time_index.reset()
        return cut
    mp.setattr(LogSegment, "recover", recover)


def aborted_index_skipped(mp) -> None:
    """read_committed Fetch skips the transaction index (the shortcut for logs that never saw an
    abort taken for every log): the aborted transactions are not listed, and a consumer keeps
    their records."""
    from broker.log.log import Log
    mp.setattr(Log, "has_aborted_transactions", lambda self, from_offset: False)


def sync_hands_out_the_leaders_assignment(mp) -> None:
    """SyncGroup answers every member with the assignment of the first member (the leader's own,
    as if the coordinator kept one assignment for the group): two members own the same partitions
    in one generation."""
    from broker.group import state
    orig = state.ClassicGroup._sync_response

    def first(self, m):
        return orig(self, next(iter(self.members.values())))
    mp.setattr(state.ClassicGroup, "_sync_response", first)


def hw_ignores_pending_isr_expansion(mp) -> None:
    """KIP-497 lost: the high watermark is computed over the committed ISR only, so a replica
    whose addition to the ISR is pending is not waited for, and joins the ISR behind it (the
    lost ISR expansion)."""
    from broker.replica.partition import PartitionState
    mp.setattr(PartitionState, "maximal_isr", property(lambda self: self.isr))


def metadata_crc_unchecked(mp) -> None:
    """raft/store.py before its entries carried CRCs: a bad block under a row of the metadata
    log (SQLite keeps no page checksums) is loaded as a record on restart and served."""
    import raft.store
    import sim.raftstore
    mp.setattr(raft.store, "check_entry", lambda path, offset, e, crc: None)
    mp.setattr(sim.raftstore, "check_entry", lambda path, offset, e, crc: None)


def in_flight_fetch_applied_after_becoming_leader(mp) -> None:
    """A follower's replica Fetch answer that arrives after the partition stopped following that
    leader (it became leader itself, or follows a newer one) is still applied: before commit
    2714e90 unfollowing only dropped the partition's fetch state, which kept its request in flight,
    and nothing checked the partition still followed when the answer came (stale records of the
    old epoch after the new leader's epoch start, a follower high watermark set on a leader)."""
    from broker.replica.fetcher import ReplicaFetcherManager
    from broker.replica.follower import FollowerFetchState
    mp.setattr(FollowerFetchState, "stop", lambda self: None)
    mp.setattr(ReplicaFetcherManager, "_current",
               lambda self, tp, part, fs, lg: self.rm.partitions.get(tp) is part and part.log is lg)


def revocation_not_awaited(mp) -> None:
    """KIP-848's reconciliation skips the revocation step: a member moves to its new epoch without
    waiting for the heartbeat that says it gave its revoked partitions up, so they go to another
    member while it still owns them."""
    from broker.group import consumer_group
    mp.setattr(consumer_group, "_owns_any", lambda owned, a: False)


def share_accept_releases(mp) -> None:
    """A share partition takes an ACCEPT for a RELEASE: acknowledged records are delivered again."""
    from broker.share.partition import ACCEPT, RELEASE, SharePartition
    orig = SharePartition.acknowledge

    def acknowledge(self, member, batches, now, renew=False):
        batches = [(f, la, [RELEASE if t == ACCEPT else t for t in types]) for f, la, types in batches]
        return orig(self, member, batches, now, renew)
    mp.setattr(SharePartition, "acknowledge", acknowledge)


def share_lock_too_short(mp) -> None:
    """Acquisition locks that last 200 ms, not group.share.record.lock.duration.ms (a default lost on
    the way to the share partition): records are acquired again by other consumers while their
    holders still hold them."""
    from broker.share.manager import SharePartitionManager
    mp.setattr(SharePartitionManager, "lock_ms", lambda self, group_id: 200)


def share_delivery_limit_ignored(mp) -> None:
    """The share partition never archives a record at group.share.delivery.count.limit."""
    from broker.share.manager import SharePartitionManager
    mp.setattr(SharePartitionManager, "delivery_limit", lambda self, group_id: 1000)


MUTATIONS = {f.__name__: f for f in (hw_ignores_pending_isr_expansion, wall_clock_sessions, vote_twice, vote_for_stale_log,
                                     recovery_drops_a_torn_segment, aborted_index_skipped,
                                     sync_hands_out_the_leaders_assignment, metadata_crc_unchecked,
                                     no_leader_endpoints, in_flight_fetch_applied_after_becoming_leader,
                                     revocation_not_awaited, share_accept_releases, share_lock_too_short,
                                     share_delivery_limit_ignored)}
