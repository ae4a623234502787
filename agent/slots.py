"""Slot turnaround: how long capacity freed by an ending attempt stays empty while work waits.

The figure that decides utilisation under contention (docs/architecture.md §8): from an attempt's
end being
noticed here (its completion collected) to the next attempt started here. Freed slots queue in
order; each start takes the oldest. A freed slot left unused for IDLE_AFTER_S is counted as idle
(no work was waiting for it) and dropped, so the histogram describes a busy cluster, not a quiet
one. Attempts count as slots whatever their size: a measure of the loop, not of packing.
"""

from __future__ import annotations

from collections import deque

from raftsched import limits

IDLE_AFTER_S = 30.0
"""A freed slot unused this long was idle, not waiting on the scheduler."""


class SlotTurnaround:
    """Not thread-safe: the agent calls it under its lock."""

    def __init__(self, idle_after_s: float = IDLE_AFTER_S) -> None:
        self._idle_after_s = idle_after_s
        self._freed: deque[float] = deque()
        self.idle = 0
        """Freed slots dropped as idle (or past the bound), over the agent's life."""

    def freed(self, count: int, now_s: float) -> None:
        for _ in range(count):
            if len(self._freed) >= limits.MAX_TRACKED_FREED_SLOTS:
                self._freed.popleft()
                self.idle += 1
            self._freed.append(now_s)

    def started(self, count: int, now_s: float) -> list[float]:
        """The turnaround of each start that filled a freed slot, in seconds."""
        while self._freed and now_s - self._freed[0] > self._idle_after_s:
            self._freed.popleft()
            self.idle += 1
        samples = []
        for _ in range(min(count, len(self._freed))):
            samples.append(now_s - self._freed.popleft())
        return samples
