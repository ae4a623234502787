"""The one wait of the tests: poll a condition until it holds, with a deadline and a message.

Every test and test helper waits through `wait_until` (never sleep-and-hope): it returns the
condition's first truthy value, treats the errors of `retry_on` as "not yet" (a replica that is
restarting refuses a connection, a harness replica not yet up raises `NotYet`), and at the
deadline fails with what it waited for and the last such error. It polls fast at first and
backs off to `POLL_MAX_S`, so a quick condition is seen at once and a long wait costs the busy
machine little.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from raftsched.errors import RaftschedError

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 10.0
"""A wait that names no timeout: long enough for a busy machine, short enough to fail a test."""

POLL_FIRST_S = 0.005
POLL_MAX_S = 0.05
"""The pause between two looks starts at POLL_FIRST_S and doubles up to this."""


class NotYet(AssertionError):
    """Raised by a condition (or a helper it calls) to say "not yet"; `wait_until` looks again,
    and reports the last one at the deadline. Outside a wait it fails the test."""


RETRY_ON: tuple[type[Exception], ...] = (RaftschedError, OSError, NotYet)
"""Errors a condition may raise meaning "not yet" unless the caller says otherwise."""


def wait_until(condition: Callable[[], T | None], what: str | Callable[[], str],
               timeout_s: float = DEFAULT_TIMEOUT_S, *,
               retry_on: tuple[type[Exception], ...] = RETRY_ON) -> T:
    """Poll `condition` until it returns something truthy and return that; errors of
    `retry_on` count as "not yet". After `timeout_s` AssertionError naming `what` (a callable
    is called only then, so it may show fresh state such as a log tail) and the last error."""
    deadline_s = time.monotonic() + timeout_s
    pause_s = POLL_FIRST_S
    last_error: Exception | None = None
    while True:
        try:
            value = condition()
            if value:
                return value
        except retry_on as error:
            last_error = error
        if time.monotonic() > deadline_s:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {said}"
                                 + (f" (last error: {last_error})" if last_error else ""))
        time.sleep(pause_s)
        pause_s = min(POLL_MAX_S, pause_s * 2)
