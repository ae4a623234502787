"""The one retry policy (raftsched.client.retry): redirects, rotation, bounds, jitter, stop."""

from __future__ import annotations

import random
import threading

import pytest

from raftsched.client import retry
from raftsched.client.retry import Attempts, RetryPolicy, Servers, Stopped
from raftsched.errors import Code, CouldNotConnect, RaftschedError

FAST = RetryPolicy(budget_s=5.0, max_attempts=6, backoff_initial_s=0.001, backoff_max_s=0.002)


def not_leader(hint: str | None = None) -> RaftschedError:
    return RaftschedError(Code.UNAVAILABLE, "not the leader", leader_hint=hint)


class Script:
    """invoke(address): pops the next outcome for that address (an error raises)."""

    def __init__(self, outcomes: dict[str, list[object]]) -> None:
        self.outcomes = outcomes
        self.calls: list[str] = []

    def __call__(self, address: str) -> object:
        self.calls.append(address)
        outcome = self.outcomes[address].pop(0)
        if isinstance(outcome, RaftschedError):
            raise outcome
        return outcome


def test_a_redirect_is_followed_at_once_and_the_leader_is_kept() -> None:
    servers = Servers(["a", "b", "c"])
    script = Script({"a": [not_leader("c")], "c": ["ok", "again"]})
    waits: list[float] = []
    assert retry.call(servers, FAST, script, on_retry=lambda _e, d: waits.append(d)) == "ok"
    assert script.calls == ["a", "c"] and waits == []  # no backoff before a fresh redirect
    assert servers.target == "c"
    assert retry.call(servers, FAST, script) == "again"
    assert script.calls == ["a", "c", "c"]


def test_two_replicas_pointing_at_each_other_cannot_spin() -> None:
    servers = Servers(["a", "b"])
    script = Script({"a": [not_leader("b")] * 10, "b": [not_leader("a")] * 10})
    with pytest.raises(RaftschedError) as caught:
        retry.call(servers, FAST, script)
    assert caught.value.code == Code.UNAVAILABLE
    assert "gave up after 6 tries" in caught.value.message
    assert len(script.calls) == FAST.max_attempts


def test_a_refusal_ends_the_call_at_once() -> None:
    script = Script({"a": [RaftschedError(Code.INVALID_ARGUMENT, "bad spec")]})
    with pytest.raises(RaftschedError, match="bad spec") as caught:
        retry.call(Servers(["a", "b"]), FAST, script)
    assert caught.value.code == Code.INVALID_ARGUMENT and script.calls == ["a"]


def test_unknown_outcomes_are_sent_again_on_the_next_server() -> None:
    unknown = RaftschedError(Code.DEADLINE_EXCEEDED, "no answer in time")
    script = Script({"a": [unknown], "b": ["done"]})
    assert retry.call(Servers(["a", "b"]), FAST, script) == "done"
    assert script.calls == ["a", "b"]


def test_nothing_but_connection_failures_says_nothing_was_sent() -> None:
    refused = [CouldNotConnect("a", "connection refused")] * 10
    script = Script({"a": list(refused), "b": list(refused)})
    retried: list[RaftschedError] = []
    with pytest.raises(RaftschedError) as caught:
        retry.call(Servers(["a", "b"]), FAST, script,
                   on_retry=lambda error, _delay: retried.append(error))
    assert caught.value.code == Code.UNAVAILABLE
    assert "could not connect to any of a, b" in caught.value.message
    assert "nothing was sent" in caught.value.message
    assert script.calls == ["a", "b"] * 3
    assert len(retried) == FAST.max_attempts - 1  # told of every retry, not of the last failure


def test_once_a_replica_answered_the_summary_keeps_the_last_code() -> None:
    unknown = RaftschedError(Code.DEADLINE_EXCEEDED, "no answer")
    script = Script({"a": [CouldNotConnect("a", "refused")] + [unknown] * 9})
    with pytest.raises(RaftschedError) as caught:
        retry.call(Servers(["a"]), FAST, script)
    assert caught.value.code == Code.DEADLINE_EXCEEDED
    assert "could not connect" not in caught.value.message


def test_the_budget_bounds_the_call_before_max_attempts() -> None:
    now = [0.0]
    policy = RetryPolicy(budget_s=1.0, max_attempts=100, backoff_initial_s=0.001,
                         backoff_max_s=0.001)
    attempts = Attempts(Servers(["a"]), policy, monotonic=lambda: now[0])
    tries = 0
    with pytest.raises(RaftschedError, match="gave up after 3 tries"):
        for address in attempts:
            tries += 1
            now[0] += 0.4
            attempts.failed(not_leader(), address)
    assert tries == 3


def test_progress_restarts_the_budget() -> None:
    now = [0.0]
    policy = RetryPolicy(budget_s=1.0, max_attempts=3, backoff_initial_s=0.001,
                         backoff_max_s=0.001)
    attempts = Attempts(Servers(["a"]), policy, monotonic=lambda: now[0])
    seen = 0
    for address in attempts:
        seen += 1
        if seen == 6:
            break
        attempts.progressed()  # e.g. a watch received a message before its stream broke
        now[0] += 0.6
        attempts.failed(not_leader(), address)
    assert seen == 6  # past both max_attempts=3 and the 1 s budget, yet never given up


def test_stop_ends_a_backoff_wait() -> None:
    stop = threading.Event()
    slow = RetryPolicy(budget_s=60.0, max_attempts=10, backoff_initial_s=30.0,
                       backoff_max_s=30.0, jitter=0.0)
    script = Script({"a": [not_leader()] * 2})
    timer = threading.Timer(0.05, stop.set)
    timer.start()
    try:
        with pytest.raises(Stopped):
            retry.call(Servers(["a"]), slow, script, stop=stop)
    finally:
        timer.cancel()
    assert script.calls == ["a"]


@pytest.mark.parametrize("seed", range(20))
def test_backoff_is_jittered_capped_and_exponential(seed: int) -> None:
    rng = random.Random(seed)
    policy = RetryPolicy(budget_s=10.0, max_attempts=10, backoff_initial_s=0.1,
                         backoff_max_s=0.8, jitter=0.5)
    for failures, ceiling in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (9, 0.8), (60, 0.8)]:
        delay = policy.delay_s(failures, rng)
        assert ceiling * 0.5 <= delay <= ceiling, (seed, failures, delay)


def test_servers_rotate_after_failures_and_ignore_a_stale_report() -> None:
    servers = Servers(["a", "b", "a", " ", "c"])
    assert servers.addresses == ("a", "b", "c")
    servers.failed("a")
    assert servers.target == "b"
    servers.failed("a")  # another thread's old news: b is still the target
    assert servers.target == "b"
    servers.failed("b")
    assert servers.target == "c"
    servers.failed("c")
    assert servers.target == "a"
    with pytest.raises(RaftschedError, match="no scheduler addresses"):
        Servers([" "])
