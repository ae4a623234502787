"""The tests' one wait (`tests.support.waiting.wait_until`): returns the first truthy value,
treats `retry_on` errors as "not yet", and fails at the deadline naming what it waited for."""

from __future__ import annotations

import itertools

import pytest

from raftsched.errors import Code, RaftschedError
from tests.support.waiting import NotYet, wait_until


def test_returns_the_first_truthy_value() -> None:
    values = iter([None, 0, "", "ready"])
    assert wait_until(lambda: next(values), "the value", 5.0) == "ready"


def test_errors_meaning_not_yet_are_retried_and_others_end_the_wait() -> None:
    calls = itertools.count(1)

    def flaky() -> str:
        n = next(calls)
        if n == 1:
            raise RaftschedError(Code.UNAVAILABLE, "restarting")
        if n == 2:
            raise NotYet("not up")
        return "up"

    assert wait_until(flaky, "the replica", 5.0) == "up"
    with pytest.raises(ZeroDivisionError):
        wait_until(lambda: 1 // 0, "a bug", 5.0)
    with pytest.raises(RaftschedError):
        wait_until(lambda: (_ for _ in ()).throw(RaftschedError(Code.UNAVAILABLE, "x")),
                   "a refusal", 5.0, retry_on=())


def test_the_deadline_names_what_and_the_last_error_and_makes_a_callable_message_late() -> None:
    def never() -> None:
        raise OSError("connection refused")

    with pytest.raises(AssertionError) as caught:
        wait_until(never, "a leader", 0.05)
    assert str(caught.value) == ("timed out after 0.05 s waiting for a leader "
                                 "(last error: connection refused)")
    looks: list[int] = []
    made_after: list[int] = []

    def look() -> None:
        looks.append(1)

    def what() -> str:
        made_after.append(len(looks))
        return "the log tail"

    with pytest.raises(AssertionError, match="waiting for the log tail"):
        wait_until(look, what, 0.05)
    assert len(looks) >= 2 and made_after == [len(looks)]  # made once, at the deadline
