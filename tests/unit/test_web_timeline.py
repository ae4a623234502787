"""The console's timeline of attempts (raftsched/web/timeline.py): a lane per cluster, a bar per
attempt (retries apart), overlapping bars stacked, running bars reaching "now", the bar bound,
the axis' ticks."""

from __future__ import annotations

from raftsched.web import timeline
from raftsched.web.timeline import Span


def _s(task_id: str, number: int, cluster: str, start: int, end: int = 0,
       state: str = "SUCCEEDED", started: bool = True) -> Span:
    fence = hash((task_id, number)) & 0xFFFF
    return Span(task_id, number, fence, cluster, state, start - 5,
                start if started else 0, end)


def test_a_lane_per_cluster_and_a_bar_per_attempt_retries_apart() -> None:
    spans = [_s("a", 1, "west", 0, 1_000, "FAILED"), _s("a", 2, "east", 2_000, 3_000),
             _s("b", 1, "east", 0, 500, "LOST")]
    drawn = timeline.draw(spans, now_ms=10_000)
    assert [lane.cluster for lane in drawn.lanes] == ["east", "west"]
    assert sorted((b.span.task_id, b.span.number, b.span.state) for b in drawn.bars) == [
        ("a", 1, "FAILED"), ("a", 2, "SUCCEEDED"), ("b", 1, "LOST")]
    assert (drawn.shown, drawn.left_out) == (3, 0)
    by_task = {(b.span.task_id, b.span.number): b for b in drawn.bars}
    east, west = drawn.lanes
    assert east.y <= by_task["a", 2].y < east.y + east.height
    assert west.y <= by_task["a", 1].y < west.y + west.height
    assert "a attempt 1" in by_task["a", 1].title and "FAILED" in by_task["a", 1].title


def test_time_runs_left_to_right_from_the_first_start_over_the_plot() -> None:
    drawn = timeline.draw([_s("a", 1, "c", 1_000, 2_000), _s("b", 1, "c", 2_000, 11_000)],
                          now_ms=99_999)
    a, b = sorted(drawn.bars, key=lambda bar: bar.x)
    assert a.x == timeline.LABEL_W  # the first start
    assert b.x + b.width + 1 == timeline.LABEL_W + timeline.PLOT_W  # the last end (a 1 px gap)
    assert a.y == b.y and a.x + a.width < b.x  # a then b: one row, apart


def test_overlapping_attempts_in_one_cluster_stack_in_rows_and_reuse_freed_rows() -> None:
    spans = [_s("a", 1, "c", 0, 10_000), _s("b", 1, "c", 1_000, 4_000),
             _s("d", 1, "c", 2_000, 3_000), _s("e", 1, "c", 5_000, 6_000)]
    drawn = timeline.draw(spans, now_ms=20_000)
    rows = {b.span.task_id: (b.y - drawn.lanes[0].y) // timeline.ROW_H for b in drawn.bars}
    assert rows == {"a": 0, "b": 1, "d": 2, "e": 1}  # e takes b's row, freed, the lowest free
    assert drawn.lanes[0].rows == 3
    for one in drawn.bars:  # no bar hides another
        for other in drawn.bars:
            if one is not other and one.y == other.y:
                assert one.x + one.width < other.x or other.x + other.width < one.x


def test_a_running_attempt_reaches_now_and_one_never_started_counts_from_assignment() -> None:
    running = Span("r", 1, 7, "c", "RUNNING", assigned_ms=1_000, started_ms=2_000)
    waiting = Span("w", 1, 8, "c", "ASSIGNED", assigned_ms=1_000)
    drawn = timeline.draw([running, waiting], now_ms=5_000)
    bars = {b.span.task_id: b for b in drawn.bars}
    assert bars["r"].running and bars["w"].running
    assert bars["w"].x == timeline.LABEL_W  # from its assignment, the first start
    assert bars["r"].x + bars["r"].width + 1 == timeline.LABEL_W + timeline.PLOT_W  # up to now
    assert "so far" in bars["r"].title
    assert drawn.now_x == timeline.LABEL_W + timeline.PLOT_W  # the "now" line
    assert timeline.draw([_s("a", 1, "c", 0, 10)], now_ms=99).now_x == 0  # nothing runs


def test_a_short_attempt_in_a_long_job_is_still_visible() -> None:
    drawn = timeline.draw([_s("long", 1, "c", 0, 3_600_000), _s("blip", 1, "c", 60_000, 60_001)],
                          now_ms=0)
    assert min(b.width for b in drawn.bars) >= timeline.MIN_BAR_W


def test_past_the_bound_the_latest_starting_attempts_are_drawn_and_the_rest_counted() -> None:
    spans = [_s(f"t{i}", 1, "c", i * 1_000, i * 1_000 + 500) for i in range(10)]
    drawn = timeline.draw(spans, now_ms=0, max_bars=4, left_out=3)
    assert sorted(b.span.task_id for b in drawn.bars) == ["t6", "t7", "t8", "t9"]
    assert (drawn.shown, drawn.left_out) == (4, 6 + 3)


def test_no_attempt_draws_nothing() -> None:
    drawn = timeline.draw([], now_ms=1)
    assert (drawn.bars, drawn.lanes, drawn.shown) == ((), (), 0)


def test_ticks_are_round_offsets_from_the_first_start() -> None:
    labels = [t.label for t in timeline.ticks(60_000, timeline.PLOT_W / 60_000)]
    assert labels == ["0 s", "10 s", "20 s", "30 s", "40 s", "50 s", "1 m"]
    assert 3 <= len(timeline.ticks(7 * 3_600_000, 1e-5)) <= timeline.TICKS + 1
    assert [timeline.offset_text(ms) for ms in (0, 250, 1_500, 45_000, 150_000, 3_900_000)] == [
        "0 s", "250 ms", "1.5 s", "45 s", "2 m 30 s", "1 h 5 m"]


def test_a_bar_wide_enough_shows_its_task_and_attempt() -> None:
    drawn = timeline.draw([_s("long-task", 1, "c", 0, 10_000), _s("long-task", 2, "c", 10_000,
                                                                   20_000),
                           _s("tiny", 1, "c", 0, 1)], now_ms=0)
    labels = {(b.span.task_id, b.span.number): b.label for b in drawn.bars}
    assert labels == {("long-task", 1): "long-task", ("long-task", 2): "long-task #2",
                      ("tiny", 1): ""}
