"""The follower's fetch state machine (KIP-101/279 truncation, KIP-320 diverging epochs,
out-of-range resets). One behaviour per test, over real ``Log``s in a temporary directory."""

from __future__ import annotations

import pytest

from broker.log import Log, LogConfig
from broker.log.batch import Record, build_batch
from broker.replica.follower import (
    AppendRecords,
    FetchAnswer,
    FetchRequest,
    FollowerFetchState,
    IncrementLogStartOffset,
    OffsetsForLeaderEpochRequest,
    Phase,
    SetHighWatermark,
    Truncate,
    TruncateFullyAndStartAt,
)
from common.errors import ErrorCode

_where: dict = {}


@pytest.fixture(autouse=True)
def _log_dir(tmp_path):
    _where["dir"], _where["n"] = str(tmp_path), 0
    yield
    for log in _where.pop("logs", []):
        log.close()


def make_log(*epochs_and_counts: tuple[int, int], start: int = 0) -> Log:
    """A log holding ``count`` records for each ``epoch`` in order."""
    _where["n"] += 1
    log = Log.open(_where["dir"], "t", _where["n"], LogConfig(), now_ms=0)
    _where.setdefault("logs", []).append(log)
    if start:
        log.truncate_fully_and_start_at(start)
    value = 1000
    for epoch, count in epochs_and_counts:
        for _ in range(count):
            rec = Record(log.log_end_offset, 0, None, str(value).encode(), [])
            log.append_as_follower(build_batch([rec], partition_leader_epoch=epoch))
            value += 1
    return log


def apply(log: Log, effects, records=()) -> None:
    """What the shell does with the effects (the records are what the fetch returned)."""
    for e in effects:
        if isinstance(e, Truncate):
            log.truncate_to(e.offset)
        elif isinstance(e, TruncateFullyAndStartAt):
            log.truncate_fully_and_start_at(e.offset)
        elif isinstance(e, AppendRecords) and records:
            raise AssertionError("no test appends fetched records")


def follower(leader=1, epoch=7, hw=0, ofle=True) -> FollowerFetchState:
    fs = FollowerFetchState(2, use_offsets_for_leader_epoch=ofle)
    fs.become(leader, epoch, hw)
    return fs


def ask(fs, log, leader_epoch, end_offset, error=ErrorCode.NONE):
    req = fs.next_action(log)
    assert isinstance(req, OffsetsForLeaderEpochRequest)
    return req, fs.on_offsets_for_leader_epoch(req, log, error, leader_epoch, end_offset)


def truncations(effects) -> list[int]:
    return [e.offset for e in effects if isinstance(e, Truncate)]


def test_becoming_follower_starts_with_offsets_for_leader_epoch():
    log = make_log((3, 5), (4, 2))
    fs = follower(leader=1, epoch=7)
    req = fs.next_action(log)
    assert req == OffsetsForLeaderEpochRequest(1, 7, 4) or (req.leader_epoch, req.current_leader_epoch) == (4, 7)
    assert fs.next_action(log) is None  # one request in flight


def test_follower_truncates_to_leader_epoch_end_offset():
    log = make_log((3, 5), (4, 5))  # epoch 4 covers offsets 5..9
    fs = follower()
    _, effects = ask(fs, log, 4, 8)  # the leader's epoch 4 ends at 8
    assert truncations(effects) == [8]
    apply(log, effects)
    assert log.log_end_offset == 8 and fs.phase is Phase.FETCHING


def test_follower_never_truncates_to_hw_alone():
    # KIP-101 scenario 1: the follower has m0, m1 but only learned HW 1 before restarting.
    # Truncating to the HW would drop m1, which the leader committed; with a leader epoch
    # request the follower keeps it.
    log = make_log((0, 2))
    fs = follower(leader=1, epoch=0, hw=1)
    _, effects = ask(fs, log, 0, 2)
    apply(log, effects)
    assert log.log_end_offset == 2
    assert all(e.offset >= 2 for e in effects if isinstance(e, Truncate))
    assert not any(isinstance(e, SetHighWatermark) and e.high_watermark < 1 for e in effects)


def test_follower_truncates_divergent_tail_written_in_an_older_epoch():
    # KIP-101 scenario 2: we hold m1 at offset 1 from epoch 0, but the new leader (epoch 1)
    # wrote m2 at offset 1 after losing m1. Its epoch 0 ends at 1: we drop our offset 1.
    log = make_log((0, 2))
    fs = follower(leader=1, epoch=1, hw=1)
    _, effects = ask(fs, log, 0, 1)
    assert truncations(effects) == [1]
    apply(log, effects)
    req = fs.next_action(log)
    assert isinstance(req, FetchRequest) and (req.fetch_offset, req.last_fetched_epoch) == (1, 0)


def test_follower_truncation_repeats_when_leader_answers_an_epoch_we_lack():
    # KIP-279: ours 0@0 2@5 3@8 (LEO 10); leader 0@0 1@4 4@7. We ask for 3: the leader's
    # largest epoch <= 3 is 1, ending at 7. We have no epoch 1, so we truncate to where our
    # epoch 0 ends (5) and ask again for 0: it ends at 4 on the leader.
    log = make_log((0, 5), (2, 3), (3, 2))
    fs = follower(leader=1, epoch=4)
    _, effects = ask(fs, log, 1, 7)
    assert truncations(effects) == [5] and fs.phase is Phase.TRUNCATING
    apply(log, effects)
    req, effects = ask(fs, log, 0, 4)
    assert req.leader_epoch == 0
    assert truncations(effects) == [4] and fs.phase is Phase.FETCHING


def test_truncate_at_log_end_drops_an_epoch_entry_without_records():
    # We led epoch 5 at offset 10 and appended nothing; the new leader never had epoch 5.
    log = make_log((3, 10))
    log.leader_epoch_cache.assign(5, 10)
    fs = follower(leader=1, epoch=6)
    _, effects = ask(fs, log, 3, 10)
    assert truncations(effects) == [10]
    apply(log, effects)
    req = fs.next_action(log)
    assert req.last_fetched_epoch == 3


def test_fetch_carries_last_fetched_epoch_and_current_leader_epoch():
    log = make_log((2, 3))
    fs = follower(epoch=9, ofle=False)
    req = fs.next_action(log)
    assert (req.fetch_offset, req.last_fetched_epoch, req.current_leader_epoch) == (3, 2, 9)


def test_fetch_response_appends_and_sets_hw_to_min_of_leader_hw_and_leo():
    log = make_log((2, 3))
    fs = follower(ofle=False)
    req = fs.next_action(log)
    effects = fs.on_fetch_response(req, log, FetchAnswer(high_watermark=9, log_start_offset=0,
                                                         records_first_offset=3, records_next_offset=5))
    assert effects == [AppendRecords(3, 5), SetHighWatermark(5)]


def test_diverging_epoch_in_fetch_response_truncates():
    log = make_log((2, 3), (4, 3))  # epoch 4 at 3..5
    fs = follower(ofle=False)
    req = fs.next_action(log)
    # the leader's epoch 2 ends at 4, ours at 3 (then our epoch 4 starts): keep 0..2
    effects = fs.on_fetch_response(req, log, FetchAnswer(high_watermark=2, diverging_epoch=(2, 4)))
    assert truncations(effects) == [3]
    apply(log, effects)
    assert fs.next_action(log).last_fetched_epoch == 2


def test_offset_out_of_range_below_leader_log_start_restarts_log_there():
    log = make_log((1, 3))
    fs = follower(ofle=False)
    req = fs.next_action(log)
    effects = fs.on_fetch_response(req, log, FetchAnswer(ErrorCode.OFFSET_OUT_OF_RANGE, log_start_offset=50,
                                                         leader_log_end_offset=80))
    assert TruncateFullyAndStartAt(50) in effects
    apply(log, effects)
    assert fs.next_action(log).fetch_offset == 50


def test_offset_out_of_range_above_leader_log_end_truncates_to_it():
    log = make_log((1, 10))
    fs = follower(ofle=False)
    req = fs.next_action(log)
    effects = fs.on_fetch_response(req, log, FetchAnswer(ErrorCode.OFFSET_OUT_OF_RANGE, log_start_offset=0,
                                                         leader_log_end_offset=6))
    assert truncations(effects) == [6]


def test_fenced_leader_epoch_waits_for_metadata():
    log = make_log((1, 1))
    fs = follower()
    fs.phase = Phase.FETCHING
    req = fs.next_action(log)
    fs.on_fetch_response(req, log, FetchAnswer(ErrorCode.FENCED_LEADER_EPOCH))
    assert fs.phase is Phase.AWAITING_METADATA and fs.next_action(log, 10**9) is None
    fs.become(3, 8)
    assert isinstance(fs.next_action(log), OffsetsForLeaderEpochRequest)


def test_not_leader_backs_off_and_retries():
    log = make_log((1, 1))
    fs = follower(ofle=False)
    req = fs.next_action(log, now_ms=100)
    fs.on_fetch_response(req, log, FetchAnswer(ErrorCode.NOT_LEADER_OR_FOLLOWER), now_ms=100)
    assert fs.next_action(log, now_ms=200) is None
    assert isinstance(fs.next_action(log, now_ms=100 + fs.retry_backoff_ms), FetchRequest)


def test_new_leader_resets_to_truncation_and_ignores_old_responses():
    log = make_log((1, 4))
    fs = follower(leader=1, epoch=7)
    old = fs.next_action(log)
    fs.become(3, 8)
    assert fs.phase is Phase.TRUNCATING
    assert fs.on_offsets_for_leader_epoch(old, log, ErrorCode.NONE, 0, 0) == []  # would truncate to 0
    req = fs.next_action(log)
    assert isinstance(req, OffsetsForLeaderEpochRequest) and (req.leader, req.current_leader_epoch) == (3, 8)


def test_truncate_on_fetch_mode_checks_divergence_with_first_fetch():
    log = make_log((1, 4))
    fs = follower(leader=1, epoch=7, ofle=False)
    fs.become(3, 8)
    req = fs.next_action(log)
    assert isinstance(req, FetchRequest) and (req.last_fetched_epoch, req.current_leader_epoch) == (1, 8)


def test_request_failure_backs_off_then_retries_same_position():
    log = make_log((1, 4))
    fs = follower(ofle=False)
    req = fs.next_action(log, now_ms=0)
    fs.on_request_failed(req, now_ms=0)
    again = fs.next_action(log, now_ms=fs.retry_backoff_ms)
    assert again.fetch_offset == req.fetch_offset


def test_becoming_leader_stops_fetching():
    log = make_log((1, 4))
    fs = follower()
    fs.become(2, 8)  # we (broker 2) lead now
    assert fs.phase is Phase.IDLE and fs.next_action(log) is None


# --- issue 18: a follower whose own copy is damaged ---------------------------------------------

def test_damaged_copy_out_of_the_isr_is_truncated_and_fetched_again():
    log = make_log((3, 10))
    fs = follower(epoch=3, hw=10, ofle=False)
    effects = fs.on_local_damage(log, 4, in_isr=False)
    assert truncations(effects) == [4] and SetHighWatermark(4) in effects
    apply(log, effects)
    assert fs.next_action(log).fetch_offset == 4


def test_damaged_copy_in_the_isr_is_kept_and_the_leader_is_shown_where_it_ends():
    """Dropping committed records while the controller may still elect us would make the
    other replicas drop them too: keep the bytes, fetch at the damage (ignoring what comes
    back) so that the leader sees us lag and takes us out of the ISR."""
    log = make_log((3, 10))
    fs = follower(epoch=3, hw=10, ofle=False)
    assert fs.on_local_damage(log, 4, in_isr=True) == []
    probe = fs.next_action(log, 0)
    assert isinstance(probe, FetchRequest) and probe.probe and probe.fetch_offset == 4
    assert probe.last_fetched_epoch == -1  # no divergence check: our log does not end there
    answer = FetchAnswer(high_watermark=10, records_first_offset=4, records_next_offset=10)
    assert fs.on_fetch_response(probe, log, answer, 0) == []
    assert log.log_end_offset == 10 and fs.next_action(log, 0) is None  # backing off between probes
    effects = fs.on_local_damage(log, 4, in_isr=False)  # the leader shrank the ISR
    assert truncations(effects) == [4]
    apply(log, effects)
    assert not fs.next_action(log, 10**6).probe


def test_fetch_response_moves_log_start_to_leaders_but_not_past_our_hw():
    # DeleteRecords on the leader: followers learn its log start from Fetch responses
    log = make_log((7, 10))
    fs = follower(hw=10, ofle=False)
    req = fs.next_action(log)
    effects = fs.on_fetch_response(req, log, FetchAnswer(high_watermark=10, log_start_offset=6))
    assert IncrementLogStartOffset(6) in effects
    req = fs.next_action(log)
    effects = fs.on_fetch_response(req, log, FetchAnswer(high_watermark=4, log_start_offset=8))
    assert [e for e in effects if isinstance(e, IncrementLogStartOffset)] == [IncrementLogStartOffset(4)]


def test_fetch_response_without_a_newer_log_start_leaves_ours():
    log = make_log((7, 10), start=0)
    fs = follower(hw=10, ofle=False)
    req = fs.next_action(log)
    effects = fs.on_fetch_response(req, log, FetchAnswer(high_watermark=10, log_start_offset=0))
    assert not [e for e in effects if isinstance(e, IncrementLogStartOffset)]
