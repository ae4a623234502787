"""Time for the I/O shell. The state machine and the planner never read a clock: the leader
stamps `now_ms` into each command from a `Clock`, and tests pass a `ManualClock` so that timeout
behaviour is checked without waiting."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock milliseconds (stamped into commands)."""
        ...

    def monotonic_s(self) -> float:
        """Seconds for measuring intervals (heartbeat ages); never goes backwards."""
        ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_s(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told to."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._lock = threading.Lock()
        self._now_ms = start_ms
        self._monotonic_s = 1000.0

    def now_ms(self) -> int:
        with self._lock:
            return self._now_ms

    def monotonic_s(self) -> float:
        with self._lock:
            return self._monotonic_s

    def advance(self, seconds: float) -> None:
        assert seconds >= 0
        with self._lock:
            self._now_ms += round(seconds * 1000)
            self._monotonic_s += seconds
