"""Replica placement: the seed's worked examples (000_76703637d076966c.txt, section 3),
Kafka's error messages, manual-assignment validation and property tests."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import ErrorCode, KafkaError
from controller.placement import (
    BrokerPlacement,
    assign_replicas,
    rack_alternated_broker_list,
    replica_index,
    validate_manual_assignment,
)

# --------------------------------------------------------------------------- seed examples

# The seed's table, verbatim: column = broker, row = which replica.
SEED_TABLE = """
broker-0  broker-1  broker-2  broker-3  broker-4
p0        p1        p2        p3        p4       (1st replica)
p5        p6        p7        p8        p9       (1st replica)
p4        p0        p1        p2        p3       (2nd replica)
p8        p9        p5        p6        p7       (2nd replica)
p3        p4        p0        p1        p2       (3nd replica)
p7        p8        p9        p5        p6       (3nd replica)
"""


def _table_to_assignment(table: str) -> dict[int, list[int]]:
    lines = [line.split() for line in table.strip().splitlines()]
    brokers = [int(cell.removeprefix("broker-")) for cell in lines[0]]
    ordinal = {"(1st": 0, "(2nd": 1, "(3nd": 2}
    slots: dict[int, dict[int, int]] = {}
    for row in lines[1:]:
        position = ordinal[row[len(brokers)]]
        for broker, cell in zip(brokers, row[: len(brokers)], strict=True):
            slots.setdefault(int(cell.removeprefix("p")), {})[position] = broker
    return {p: [slots[p][i] for i in sorted(slots[p])] for p in sorted(slots)}


SEED_RACKS = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}


def _plain(*ids: int) -> list[BrokerPlacement]:
    return [BrokerPlacement(i) for i in ids]


def _racked(racks: dict[int, str]) -> list[BrokerPlacement]:
    return [BrokerPlacement(i, r) for i, r in racks.items()]


def test_seed_table_parses_to_the_expected_lists():
    # Guard on the parser itself: the table read by hand.
    assert _table_to_assignment(SEED_TABLE) == {
        0: [0, 1, 2],
        1: [1, 2, 3],
        2: [2, 3, 4],
        3: [3, 4, 0],
        4: [4, 0, 1],
        5: [0, 2, 3],
        6: [1, 3, 4],
        7: [2, 4, 0],
        8: [3, 0, 1],
        9: [4, 1, 2],
    }


def test_seed_rack_unaware_table():
    result = assign_replicas(_plain(0, 1, 2, 3, 4), 10, 3, rng=None, fixed_start_index=0)
    assert result == _table_to_assignment(SEED_TABLE)
    assert list(result) == list(range(10))


def test_rack_unaware_sorts_brokers_by_id():
    shuffled = _plain(3, 0, 4, 2, 1)
    assert assign_replicas(shuffled, 10, 3, rng=None, fixed_start_index=0) == _table_to_assignment(SEED_TABLE)


def test_rack_unaware_uses_ids_not_positions():
    ids = [10, 20, 30, 40, 50]
    expected = {p: [ids[b] for b in rs] for p, rs in _table_to_assignment(SEED_TABLE).items()}
    assert assign_replicas(_plain(*reversed(ids)), 10, 3, rng=None, fixed_start_index=0) == expected


def test_seed_rack_alternated_list():
    assert rack_alternated_broker_list(SEED_RACKS) == [0, 3, 1, 5, 4, 2]


def test_rack_alternated_list_kafka_doc_example():
    racks = {i: f"rack{i // 3 + 1}" for i in range(9)}  # rack1: 0,1,2  rack2: 3,4,5  rack3: 6,7,8
    assert rack_alternated_broker_list(racks) == [0, 3, 6, 1, 4, 7, 2, 5, 8]


def test_rack_alternated_list_uneven_racks():
    racks = {0: "b", 1: "a", 2: "a", 3: "a", 4: "c"}
    assert rack_alternated_broker_list(racks) == [1, 0, 4, 2, 3]


def test_seed_rack_aware_six_partitions():
    result = assign_replicas(_racked(SEED_RACKS), 6, 3, rng=None, fixed_start_index=0)
    assert result == {
        0: [0, 3, 1],
        1: [3, 1, 5],
        2: [1, 5, 4],
        3: [5, 4, 2],
        4: [4, 2, 0],
        5: [2, 0, 3],
    }


def test_seed_rack_aware_partition_six_shifts_followers():
    result = assign_replicas(_racked(SEED_RACKS), 7, 3, rng=None, fixed_start_index=0)
    assert result[6] == [0, 4, 2]
    assert result[6] != result[0]


def test_rack_aware_ignores_input_order():
    forward = assign_replicas(_racked(SEED_RACKS), 7, 3, rng=None, fixed_start_index=0)
    backward = [BrokerPlacement(i, SEED_RACKS[i]) for i in sorted(SEED_RACKS, reverse=True)]
    assert assign_replicas(backward, 7, 3, rng=None, fixed_start_index=0) == forward


def test_replica_index_formula():
    # 1 + (shift + k) mod (n - 1) places after the leader, wrapping.
    assert replica_index(0, 0, 0, 5) == 1
    assert replica_index(4, 0, 0, 5) == 0
    assert replica_index(0, 3, 0, 6) == 4
    assert replica_index(0, 3, 1, 6) == 5
    assert replica_index(0, 3, 2, 6) == 1  # wraps within the other n-1 brokers


def test_start_partition_id_continues_numbering():
    full = assign_replicas(_plain(0, 1, 2, 3, 4), 10, 3, rng=None, fixed_start_index=0)
    tail = assign_replicas(_plain(0, 1, 2, 3, 4), 7, 3, rng=None, fixed_start_index=0, start_partition_id=3)
    assert list(tail) == list(range(3, 10))
    assert tail == {p: full[p] for p in range(3, 10)}


def test_single_broker():
    assert assign_replicas(_plain(7), 3, 1, rng=random.Random(1)) == {0: [7], 1: [7], 2: [7]}
    assert assign_replicas([BrokerPlacement(7, "r")], 2, 1, rng=random.Random(1)) == {0: [7], 1: [7]}


# --------------------------------------------------------------------------- randomness


class _ScriptedRng:
    def __init__(self, *values: int):
        self.values = list(values)
        self.calls: list[int] = []

    def randrange(self, stop: int) -> int:
        self.calls.append(stop)
        return self.values.pop(0)


class _ExplodingRng:
    def randrange(self, stop: int) -> int:
        raise AssertionError("rng must not be used with a fixed start index")


def test_random_start_draws_start_then_shift():
    rng = _ScriptedRng(2, 2)
    got = assign_replicas(_plain(0, 1, 2, 3, 4), 10, 3, rng=rng)
    assert rng.calls == [5, 5]
    assert got == assign_replicas(_plain(0, 1, 2, 3, 4), 10, 3, rng=None, fixed_start_index=2)


def test_random_start_and_shift_are_independent():
    got = assign_replicas(_plain(0, 1, 2, 3, 4), 5, 3, rng=_ScriptedRng(1, 3))
    # leaders start at index 1; first follower is 1 + (3 mod 4) = 4 places after the leader.
    assert got[0] == [1, 0, 2]
    assert [got[p][0] for p in range(5)] == [1, 2, 3, 4, 0]


def test_rack_aware_random_draws_over_arranged_list():
    rng = _ScriptedRng(0, 0)
    got = assign_replicas(_racked(SEED_RACKS), 7, 3, rng=rng)
    assert rng.calls == [6, 6]
    assert got == assign_replicas(_racked(SEED_RACKS), 7, 3, rng=None, fixed_start_index=0)


def test_fixed_start_index_does_not_touch_rng():
    assign_replicas(_plain(0, 1, 2), 4, 2, rng=_ExplodingRng(), fixed_start_index=1)
    assign_replicas(_racked(SEED_RACKS), 4, 2, rng=_ExplodingRng(), fixed_start_index=0)


def test_missing_rng_with_random_start_is_a_programming_error():
    with pytest.raises(ValueError):
        assign_replicas(_plain(0, 1, 2), 3, 2, rng=None)


# --------------------------------------------------------------------------- errors


def _error(fn, *args, **kwargs) -> KafkaError:
    with pytest.raises(KafkaError) as info:
        fn(*args, **kwargs)
    return info.value


def test_replication_factor_larger_than_brokers():
    err = _error(assign_replicas, _plain(0, 1, 2), 3, 4, rng=random.Random(0))
    assert err.code is ErrorCode.INVALID_REPLICATION_FACTOR
    assert err.message == "Replication factor: 4 larger than available brokers: 3."


@pytest.mark.parametrize("rf", [0, -1])
def test_non_positive_replication_factor(rf):
    err = _error(assign_replicas, _plain(0, 1, 2), 3, rf, rng=random.Random(0))
    assert err.code is ErrorCode.INVALID_REPLICATION_FACTOR
    assert err.message == "Replication factor must be larger than 0."


@pytest.mark.parametrize("n", [0, -3])
def test_non_positive_partitions(n):
    err = _error(assign_replicas, _plain(0, 1, 2), n, 1, rng=random.Random(0))
    assert err.code is ErrorCode.INVALID_PARTITIONS
    assert err.message == "Number of partitions must be larger than 0."


def test_partitions_checked_before_replication_factor():
    assert _error(assign_replicas, _plain(0), 0, 5, rng=None).code is ErrorCode.INVALID_PARTITIONS


def test_no_brokers():
    err = _error(assign_replicas, [], 1, 1, rng=random.Random(0))
    assert err.code is ErrorCode.INVALID_REPLICATION_FACTOR
    assert err.message == "Replication factor: 1 larger than available brokers: 0."


def test_mixed_rack_information():
    brokers = [BrokerPlacement(0, "a"), BrokerPlacement(1), BrokerPlacement(2, "b")]
    err = _error(assign_replicas, brokers, 3, 2, rng=random.Random(0))
    assert err.code is ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert err.message == "Not all brokers have rack information for replica rack aware assignment."


def test_duplicate_broker_ids_rejected():
    with pytest.raises(ValueError):
        assign_replicas(_plain(0, 1, 1), 3, 2, rng=None, fixed_start_index=0)


# --------------------------------------------------------------------------- manual assignment


def test_manual_assignment_valid():
    validate_manual_assignment({0: [1, 2], 1: [2, 0], 2: [0, 1]}, [0, 1, 2])
    validate_manual_assignment({}, [0])
    validate_manual_assignment([(1, [0]), (0, [1])], {0, 1})


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ({0: [1, 2, 2]}, "The manual partition assignment includes the broker 2 more than once."),
        (
            {0: [1, 2, 3]},
            "The manual partition assignment includes broker 3, but no such broker is registered.",
        ),
        (
            {0: [9, 5, 1]},
            "The manual partition assignment includes broker 5, but no such broker is registered.",
        ),
        (
            {0: [0, -1]},
            "The manual partition assignment includes broker -1, but no such broker is registered.",
        ),
        ({0: []}, "The manual partition assignment includes an empty replica list."),
        (
            {0: [0, 1, 2], 1: [1, 2]},
            "The manual partition assignment includes a partition with 2 replica(s), but this is not "
            "consistent with previous partitions, which have 3 replica(s).",
        ),
        ({1: [0], 2: [1]}, "partitions should be a consecutive 0-based integer sequence"),
        ({0: [0], 2: [1]}, "partitions should be a consecutive 0-based integer sequence"),
        ({0: [0], -1: [1]}, "partitions should be a consecutive 0-based integer sequence"),
        ([(0, [0]), (0, [1])], "Found multiple manual partition assignments for partition 0"),
    ],
)
def test_manual_assignment_errors(assignment, message):
    err = _error(validate_manual_assignment, assignment, [0, 1, 2])
    assert err.code is ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert err.message == message


def test_manual_assignment_checks_each_partition_in_order():
    # Partition 0 fails first although partition 1 has a different problem too.
    err = _error(validate_manual_assignment, [(0, [7]), (1, [0, 0])], [0, 1])
    assert "broker 7" in err.message


def test_manual_assignment_fenced_brokers():
    validate_manual_assignment({0: [3, 1]}, live_broker_ids=[1], registered_broker_ids=[1, 3])
    err = _error(
        validate_manual_assignment, {0: [1, 0], 1: [3, 2]}, [0, 1], registered_broker_ids=[0, 1, 2, 3]
    )
    assert err.code is ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert err.message == (
        "All brokers specified in the manual partition assignment for partition 1 "
        "are fenced or in controlled shutdown."
    )


# --------------------------------------------------------------------------- properties


@st.composite
def _cluster(draw, *, racked: bool | None = None):
    n = draw(st.integers(1, 12))
    ids = draw(st.lists(st.integers(0, 1000), min_size=n, max_size=n, unique=True))
    use_racks = draw(st.booleans()) if racked is None else racked
    if use_racks:
        n_racks = draw(st.integers(1, n))
        racks = [f"r{draw(st.integers(0, n_racks - 1))}" for _ in ids]
        return [BrokerPlacement(i, r) for i, r in zip(ids, racks, strict=True)]
    return [BrokerPlacement(i) for i in ids]


@st.composite
def _request(draw, *, racked: bool | None = None):
    brokers = draw(_cluster(racked=racked))
    rf = draw(st.integers(1, len(brokers)))
    n_partitions = draw(st.integers(1, 40))
    start_partition_id = draw(st.integers(-1, 30))
    seed = draw(st.integers(0, 2**32))
    return brokers, n_partitions, rf, start_partition_id, seed


@settings(max_examples=300)
@given(_request())
def test_property_shape_and_no_duplicate_replicas(req):
    brokers, n_partitions, rf, start_pid, seed = req
    result = assign_replicas(brokers, n_partitions, rf, rng=random.Random(seed), start_partition_id=start_pid)
    first = max(0, start_pid)
    assert list(result) == list(range(first, first + n_partitions))
    known = {b.id for b in brokers}
    for replicas in result.values():
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert set(replicas) <= known


@settings(max_examples=200)
@given(_request(), st.integers(0, 20))
def test_property_deterministic_given_seed(req, fixed):
    brokers, n_partitions, rf, start_pid, seed = req
    a = assign_replicas(brokers, n_partitions, rf, rng=random.Random(seed), start_partition_id=start_pid)
    b = assign_replicas(brokers, n_partitions, rf, rng=random.Random(seed), start_partition_id=start_pid)
    assert a == b
    c = assign_replicas(brokers, n_partitions, rf, rng=random.Random(seed + 1), fixed_start_index=fixed)
    d = assign_replicas(brokers, n_partitions, rf, rng=random.Random(seed + 2), fixed_start_index=fixed)
    assert c == d


@settings(max_examples=300)
@given(_request(racked=False))
def test_property_rack_unaware_leaders_balanced_within_one(req):
    brokers, n_partitions, rf, start_pid, seed = req
    result = assign_replicas(brokers, n_partitions, rf, rng=random.Random(seed), start_partition_id=start_pid)
    leaders = Counter(replicas[0] for replicas in result.values())
    counts = [leaders.get(b.id, 0) for b in brokers]
    assert max(counts) - min(counts) <= 1


@settings(max_examples=200)
@given(_cluster(racked=False), st.integers(1, 5), st.data())
def test_property_rack_unaware_full_rounds_spread_all_replicas_evenly(brokers, rounds, data):
    n = len(brokers)
    rf = data.draw(st.integers(1, n))
    seed = data.draw(st.integers(0, 2**32))
    result = assign_replicas(brokers, rounds * n, rf, rng=random.Random(seed))
    per_broker = Counter(b for replicas in result.values() for b in replicas)
    assert {per_broker[b.id] for b in brokers} == {rounds * rf}


@settings(max_examples=300)
@given(_request(racked=True))
def test_property_rack_aware_rack_spread(req):
    brokers, n_partitions, rf, start_pid, seed = req
    racks = {b.id: b.rack for b in brokers}
    n_racks = len(set(racks.values()))
    result = assign_replicas(brokers, n_partitions, rf, rng=random.Random(seed), start_partition_id=start_pid)
    for replicas in result.values():
        per_rack = Counter(racks[b] for b in replicas)
        if rf >= n_racks:
            assert len(per_rack) == n_racks
        if rf <= n_racks:
            assert max(per_rack.values()) == 1


@st.composite
def _balanced_racks(draw):
    n_racks = draw(st.integers(1, 4))
    per_rack = draw(st.integers(1, 4))
    ids = draw(st.permutations(range(n_racks * per_rack)))
    racks = {broker: f"rack{i % n_racks}" for i, broker in enumerate(ids)}
    return racks, n_racks, per_rack


@settings(max_examples=200)
@given(_balanced_racks(), st.integers(1, 4), st.integers(0, 2**32))
def test_property_balanced_racks_even_distribution(balanced, rounds, seed):
    # Kafka's promise: with as many replicas as racks and equal racks, replicas and leaders
    # are even across brokers (over whole rounds of the broker list) and racks.
    racks, n_racks, per_rack = balanced
    n = n_racks * per_rack
    result = assign_replicas(_racked(racks), rounds * n, n_racks, rng=random.Random(seed))
    replicas_per_broker = Counter(b for replicas in result.values() for b in replicas)
    leaders_per_broker = Counter(replicas[0] for replicas in result.values())
    assert {replicas_per_broker[b] for b in racks} == {rounds * n_racks}
    assert {leaders_per_broker[b] for b in racks} == {rounds}
    for replicas in result.values():
        assert sorted(racks[b] for b in replicas) == sorted(set(racks.values()))
