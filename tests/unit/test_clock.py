import pytest

from common.clock import SYSTEM, ManualClock


def test_a_wall_step_does_not_move_monotonic_time():
    c = ManualClock(start=10.0, wall_ms=1_000_000)
    c.step_wall(-60_000)
    assert c.monotonic() == 10.0 and c.wall_ms() == 940_000
    c.advance(1.5)
    assert c.monotonic_ms() == 11_500 and c.wall_ms() == 941_500


def test_monotonic_time_never_goes_back():
    with pytest.raises(ValueError):
        ManualClock().advance(-1)


def test_manual_clock_randomness_replays_from_its_seed():
    a, b = ManualClock(seed=7), ManualClock(seed=7)
    assert [a.uuid4() for _ in range(3)] == [b.uuid4() for _ in range(3)]
    assert a.rng.random() == b.rng.random()
    assert a.uuid4().version == 4


def test_system_clock_reads_the_machine():
    t0 = SYSTEM.monotonic()
    assert SYSTEM.monotonic() >= t0 and SYSTEM.wall_ms() > 1_600_000_000_000
