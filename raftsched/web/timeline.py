"""The timeline (Gantt) of a job's attempts, laid out in Python and drawn as inline SVG.

Pure: attempt spans and "now" in, a drawing out. One swim lane per cluster (by name); a bar per
attempt from its start (or its assignment, if it never started) to its end (or `now_ms` while it
runs), so the retries of a task are separate bars. Bars that would touch in one lane are stacked
in rows by greedy interval packing (the lowest free row, in pixels, so no bar hides another).
Time runs left to right over a fixed width from the first start; a few ticks are labelled with
the offset from it. At most `limits.WEB_TIMELINE_MAX_BARS` bars are drawn: the latest-starting
ones (the drawing says how many were left out)."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from raftsched import limits

LABEL_W = 130
"""The lane labels' column (cluster names), left of the plot."""
PLOT_W = 1_000
"""The time axis' width in pixels, whatever the job's duration."""
RIGHT_PAD = 30
"""Right of the plot: room for the last tick's label (centred on its tick)."""
ROW_H = 18
BAR_H = 14
CHAR_W = 6
"""About the width of a character of a bar's label (10 px sans-serif): a bar shows its task id
inside only if it fits."""
LANE_GAP = 8
AXIS_H = 24
MIN_BAR_W = 2
"""A bar shorter than this (an attempt of a few ms in a long job) is drawn this wide."""
TICKS = 6
"""About this many labelled ticks on the axis."""
_STEPS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500,
             *(step * unit for unit in (1_000, 60_000) for step in (1, 2, 5, 10, 15, 30)),
             *(step * 3_600_000 for step in (1, 2, 3, 6, 12, 24, 48)))


@dataclass(frozen=True, slots=True)
class Span:
    """One attempt, as ListTasks' AttemptSpan gives it (0: not started / not finished)."""
    task_id: str
    number: int
    fence: int
    cluster: str
    state: str
    assigned_ms: int
    started_ms: int = 0
    finished_ms: int = 0

    @property
    def start_ms(self) -> int:
        return self.started_ms or self.assigned_ms


@dataclass(frozen=True, slots=True)
class Bar:
    x: int
    y: int
    width: int
    span: Span
    running: bool
    title: str

    @property
    def label(self) -> str:
        """The task id (and attempt number after the first) if it fits in the bar, else ""."""
        text = self.span.task_id if self.span.number == 1 else \
            f"{self.span.task_id} #{self.span.number}"
        return text if (len(text) + 1) * CHAR_W <= self.width else ""


@dataclass(frozen=True, slots=True)
class Lane:
    cluster: str
    y: int
    height: int
    rows: int


@dataclass(frozen=True, slots=True)
class Tick:
    x: int
    label: str


@dataclass(frozen=True, slots=True)
class Timeline:
    width: int
    height: int
    lanes: tuple[Lane, ...]
    bars: tuple[Bar, ...]
    ticks: tuple[Tick, ...]
    shown: int
    """Bars drawn."""
    left_out: int
    """Attempts not drawn (past the bar bound)."""
    now_x: int = 0
    """Where "now" is, if an attempt is still running (its bar ends there), else 0."""


def draw(spans: Sequence[Span], now_ms: int, max_bars: int = limits.WEB_TIMELINE_MAX_BARS,
         left_out: int = 0) -> Timeline:
    """`left_out`: attempts the caller already knows are missing from `spans` (older attempts
    of much-retried tasks); added to those this drawing leaves out."""
    kept = sorted(spans, key=lambda s: (s.start_ms, s.fence))[-max_bars:] if max_bars else []
    left_out += len(spans) - len(kept)
    if not kept:
        return Timeline(LABEL_W + PLOT_W + RIGHT_PAD, 0, (), (), (), 0, left_out)
    origin_ms = min(s.start_ms for s in kept)
    end_ms = max(max(_end_ms(s, now_ms) for s in kept), origin_ms + 1)
    scale = PLOT_W / (end_ms - origin_ms)
    lanes, bars, y = [], [], AXIS_H
    for cluster, group in itertools.groupby(sorted(kept, key=lambda s: s.cluster),
                                            key=lambda s: s.cluster):
        placed = _packed(_extents(group, origin_ms, scale, now_ms))
        rows = 1 + max(row for _, _, row, _ in placed)
        bars += [Bar(x1, y + row * ROW_H + (ROW_H - BAR_H) // 2, _drawn_width(x1, x2), span,
                     not span.finished_ms, _title(span, origin_ms, now_ms))
                 for x1, x2, row, span in placed]
        lanes.append(Lane(cluster or "(none)", y, rows * ROW_H, rows))
        y += rows * ROW_H + LANE_GAP
    running = any(not s.finished_ms for s in kept)
    now_x = LABEL_W + round((max(now_ms, origin_ms) - origin_ms) * scale) if running else 0
    return Timeline(LABEL_W + PLOT_W + RIGHT_PAD, y, tuple(lanes), tuple(bars),
                    ticks(end_ms - origin_ms, scale), len(kept), left_out, now_x)


def _drawn_width(x1: int, x2: int) -> int:
    """One pixel short of the next bar's start, so back-to-back attempts in a row stay apart."""
    return x2 - x1 - 1 if x2 - x1 > MIN_BAR_W else x2 - x1


def _end_ms(span: Span, now_ms: int) -> int:
    return span.finished_ms or max(now_ms, span.start_ms)


def _extents(spans: Iterable[Span], origin_ms: int, scale: float,
             now_ms: int) -> list[tuple[int, int, Span]]:
    extents = []
    for span in spans:
        x1 = LABEL_W + round((span.start_ms - origin_ms) * scale)
        x2 = max(LABEL_W + round((_end_ms(span, now_ms) - origin_ms) * scale), x1 + MIN_BAR_W)
        extents.append((x1, x2, span))
    return sorted(extents, key=lambda e: (e[0], e[1], e[2].fence))


def _packed(extents: list[tuple[int, int, Span]]) -> list[tuple[int, int, int, Span]]:
    """Greedy interval packing in pixels: each bar (by start) takes the lowest row whose last
    bar ended by the time it starts, else a new row. O(n log n)."""
    busy: list[tuple[int, int]] = []  # (x2 of the row's last bar, row)
    free: list[int] = []
    placed = []
    for x1, x2, span in extents:
        while busy and busy[0][0] <= x1:
            heapq.heappush(free, heapq.heappop(busy)[1])
        row = heapq.heappop(free) if free else len(busy) + len(free)
        heapq.heappush(busy, (x2, row))
        placed.append((x1, x2, row, span))
    return placed


def ticks(duration_ms: int, scale: float) -> tuple[Tick, ...]:
    """Labelled ticks at a round step (about TICKS of them) from the first start."""
    step = next((s for s in _STEPS_MS if s * TICKS >= duration_ms), _STEPS_MS[-1])
    return tuple(Tick(LABEL_W + round(at * scale), offset_text(at))
                 for at in range(0, duration_ms + 1, step))


def offset_text(ms: int) -> str:
    """A duration as a short label: 0 s, 250 ms, 1.5 s, 45 s, 2 m 30 s, 1 h 5 m, 2 d 3 h."""
    if ms < 1_000:
        return f"{ms} ms" if ms else "0 s"
    if ms < 10_000 and ms % 1_000:
        return f"{ms // 100 / 10:.1f} s"
    seconds = ms // 1_000
    units = (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1), ("", 1))
    for (unit, size), (small, small_size) in itertools.pairwise(units):
        if seconds >= size:
            rest = seconds % size // small_size if small else 0
            return f"{seconds // size} {unit}" + (f" {rest} {small}" if rest else "")
    raise AssertionError(ms)


def _title(span: Span, origin_ms: int, now_ms: int) -> str:
    start = offset_text(span.start_ms - origin_ms)
    if span.finished_ms:
        how = f"{offset_text(span.finished_ms - span.start_ms)} (from +{start})"
    else:
        how = f"since +{start}, {offset_text(_end_ms(span, now_ms) - span.start_ms)} so far"
    return f"{span.task_id} attempt {span.number} (fence {span.fence}) on {span.cluster}: " \
           f"{span.state}, {how}"
