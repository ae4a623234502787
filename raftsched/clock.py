"""Time for the I/O shell. The state machine and the planner never read a clock: the leader
stamps `now_ms` into each command from a `Clock`, and tests pass a `ManualClock` so that timeout
behaviour is checked without waiting."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from raftsched.environment import WALL_CLOCK_SKEW_ENV

MAX_CATCH_UP_RATE = 0.1
"""How much faster than real (monotonic) time proposal stamps may run while they catch up with a
wall clock that is ahead of the replicated time: 0.1 = 10 % fast, at most."""


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock milliseconds (stamped into commands)."""
        ...

    def monotonic_s(self) -> float:
        """Seconds for measuring intervals (heartbeat ages); never goes backwards."""
        ...


MAX_WALL_CLOCK_SKEW_S = 86_400.0
_skew_ms = 0


def configure_skew_from_env(environ: Mapping[str, str] = os.environ) -> float:
    """Read WALL_CLOCK_SKEW_ENV once at process start; returns the skew in seconds.
    Raises ValueError naming the variable when it is not a number within the bound."""
    global _skew_ms
    text = environ.get(WALL_CLOCK_SKEW_ENV, "").strip()
    if not text:
        _skew_ms = 0
        return 0.0
    try:
        seconds = float(text)
    except ValueError:
        raise ValueError(f"{WALL_CLOCK_SKEW_ENV}={text!r} is not a number of seconds") from None
    if not -MAX_WALL_CLOCK_SKEW_S <= seconds <= MAX_WALL_CLOCK_SKEW_S:  # also refuses NaN
        raise ValueError(f"{WALL_CLOCK_SKEW_ENV}={text}: at most {MAX_WALL_CLOCK_SKEW_S:g} s "
                         "either way")
    _skew_ms = round(seconds * 1000)
    return seconds


def wall_ms() -> int:
    """This process's wall clock in milliseconds (with the injected skew, if any)."""
    return time.time_ns() // 1_000_000 + _skew_ms


class SystemClock:
    def now_ms(self) -> int:
        return wall_ms()

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

    def skew(self, seconds: float) -> None:
        """Move the wall clock alone, either way (an NTP step, a wrong clock)."""
        with self._lock:
            self._now_ms += round(seconds * 1000)


class ProposalClock:
    """The time a replica stamps into the commands it proposes, so that one replica's wrong wall
    clock cannot move the replicated time (`State.now_ms`, which drives retry backoff, timeouts
    and expiry) by more than real time passing.

    A stamp is the wall clock clamped between a floor and a ceiling:
    - floor: the latest of the committed state time and this process's last stamp plus the
      monotonic time since; so stamps never go backwards and never stall, however far behind
      this wall clock is;
    - ceiling: the floor plus MAX_CATCH_UP_RATE of that monotonic time; so a wall clock ahead of
      the replicated time is caught up with gradually, never jumped to.
    A fresh cluster (state time 0) starts from the wall clock. `monotonic_s` is the base's.
    """

    def __init__(self, base: Clock, state_time_ms: Callable[[], int]) -> None:
        self._base = base
        self._state_time_ms = state_time_ms
        self._lock = threading.Lock()
        self._last_ms: int | None = None
        self._last_mono_s = 0.0

    def now_ms(self) -> int:
        with self._lock:
            wall = self._base.now_ms()
            mono = self._base.monotonic_s()
            committed = self._state_time_ms()
            if self._last_ms is None:
                floor = committed if committed else wall
                elapsed_ms = 0
            else:
                elapsed_ms = max(0, round((mono - self._last_mono_s) * 1000))
                floor = max(committed, self._last_ms + elapsed_ms)
            ceiling = floor + int(elapsed_ms * MAX_CATCH_UP_RATE)
            stamp = min(max(wall, floor), ceiling)
            self._last_ms, self._last_mono_s = stamp, mono
            return stamp

    def monotonic_s(self) -> float:
        return self._base.monotonic_s()
