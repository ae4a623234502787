"""ProposalClock: a replica's wrong wall clock moves the replicated time only as fast as real
time passes (plus a bounded catch-up), never backwards, never to a stall."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftsched import clock as clock_module
from raftsched.clock import MAX_CATCH_UP_RATE, ManualClock, ProposalClock
from raftsched.environment import WALL_CLOCK_SKEW_ENV


def clocks(committed_offset_s: float | None) -> tuple[ManualClock, list[int], ProposalClock]:
    base = ManualClock()
    committed = [0 if committed_offset_s is None
                 else base.now_ms() + round(committed_offset_s * 1000)]
    return base, committed, ProposalClock(base, lambda: committed[0])


def test_a_fresh_cluster_starts_from_the_wall_clock() -> None:
    base, _, clock = clocks(None)
    assert clock.now_ms() == base.now_ms()
    base.advance(1.5)
    assert clock.now_ms() == base.now_ms()


def test_a_wall_clock_behind_the_replicated_time_neither_stalls_nor_goes_back() -> None:
    base, committed, clock = clocks(+60)  # the previous leader's clock was a minute ahead
    first = clock.now_ms()
    assert first == committed[0]
    base.advance(1.0)
    assert clock.now_ms() == first + 1000  # real time passes: so does the replicated time
    base.skew(-100)  # and the wall clock steps back further
    base.advance(0.5)
    assert clock.now_ms() == first + 1500


def test_a_wall_clock_ahead_is_caught_up_with_gradually_not_jumped_to() -> None:
    base, committed, clock = clocks(-120)  # this replica's clock is two minutes fast
    first = clock.now_ms()
    assert first == committed[0]
    base.advance(10)
    stamp = clock.now_ms()
    assert first + 10_000 <= stamp <= first + 10_000 * (1 + MAX_CATCH_UP_RATE)


def test_an_election_gap_is_caught_up_with_and_then_the_wall_clock_is_followed() -> None:
    base, _, clock = clocks(-2)  # two seconds without a leader
    clock.now_ms()
    for _ in range(40):
        base.advance(1)
        clock.now_ms()
    assert clock.now_ms() == base.now_ms()


def test_another_leaders_later_stamps_raise_the_floor() -> None:
    _, committed, clock = clocks(0)
    clock.now_ms()
    committed[0] += 30_000  # a leader with a faster clock committed later stamps meanwhile
    assert clock.now_ms() == committed[0]


@settings(max_examples=200, deadline=None)
@given(st.integers(-300, 300), st.lists(st.tuples(
    st.floats(0, 30), st.floats(-200, 200), st.integers(0, 50_000)), max_size=30))
def test_stamps_never_go_back_and_never_outrun_real_time_by_more_than_the_catch_up(
        offset_s: int, steps: list[tuple[float, float, int]]) -> None:
    base, committed, clock = clocks(offset_s)
    last = clock.now_ms()
    for advance_s, skew_s, committed_bump_ms in steps:
        floor = max(committed[0], last)
        base.advance(advance_s)
        base.skew(skew_s)
        committed[0] += committed_bump_ms
        floor = max(committed[0], floor + round(advance_s * 1000))
        stamp = clock.now_ms()
        # The monotonic clock is a float sum: an elapsed time may round 1 ms below this model's
        # sum of rounded steps. The committed time is a hard floor.
        assert max(committed[0], floor - 1) <= stamp
        assert stamp <= floor + advance_s * 1000 * MAX_CATCH_UP_RATE + 1
        last = stamp


def test_the_skew_failpoint_moves_only_the_wall_clock_and_refuses_nonsense() -> None:
    try:
        assert clock_module.configure_skew_from_env({WALL_CLOCK_SKEW_ENV: "-90.5"}) == -90.5
        skewed, true_ms = clock_module.wall_ms(), time.time_ns() // 1_000_000
        assert abs(skewed - (true_ms - 90_500)) < 1_000
        for bad in ("soon", "nan", "100000"):
            with pytest.raises(ValueError, match=WALL_CLOCK_SKEW_ENV):
                clock_module.configure_skew_from_env({WALL_CLOCK_SKEW_ENV: bad})
    finally:
        clock_module.configure_skew_from_env({})
    assert abs(clock_module.wall_ms() - time.time_ns() // 1_000_000) < 1_000
