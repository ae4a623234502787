"""The one retry policy: follow the leader, retry what is safe to retry, with jittered backoff.

Used by the Python client (calls and watches) and by the agent's session, with parameters of their
own (`RetryPolicy`) but the same rules:
- a replica that is not the leader and names it (`leader_hint`) is left at once for the leader
  (each hint is followed at once only once per call, so two stale replicas pointing at each other
  cannot spin);
- any other retryable failure (not the leader without a hint, no connection, outcome unknown)
  moves to the next configured server and waits a jittered, capped, exponential backoff;
- a non-retryable failure (a refusal) ends the call at once;
- every call is bounded by `max_attempts` and by `budget_s`, and a `stop` event ends waits early.
Callers send only requests that are safe to resend as they are (reads, idempotent writes, writes
carrying their request id), so "outcome unknown" is simply sent again.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from raftsched import limits
from raftsched.errors import Code, CouldNotConnect, RaftschedError
from raftsched.rpc import retryable as default_retryable

T = TypeVar("T")



@dataclass(frozen=True, slots=True)
class Backoff:
    """The one jittered backoff: after the n-th consecutive failure, a wait drawn uniformly from
    [(1 - jitter) x ceiling, ceiling], ceiling = min(max_s, initial_s x 2^(n-1)). Deterministic
    for a given random source (tests inject a seeded `random.Random`)."""

    initial_s: float
    max_s: float
    jitter: float = limits.RETRY_JITTER

    def __post_init__(self) -> None:
        assert 0 < self.initial_s <= self.max_s and 0 <= self.jitter <= 1

    def delay_s(self, failures: int, rng: random.Random) -> float:
        """The wait after the `failures`-th consecutive failure (1-based)."""
        assert failures >= 1
        doublings = min(failures - 1, limits.RETRY_MAX_DOUBLINGS)
        ceiling = min(self.max_s, self.initial_s * 2.0 ** doublings)
        return float(ceiling * (1.0 - self.jitter * rng.random()))


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    budget_s: float
    """How long one call keeps retrying, waits included."""
    max_attempts: int
    """RPC attempts of one call, redirects included."""
    backoff_initial_s: float
    backoff_max_s: float
    jitter: float = limits.RETRY_JITTER
    """A wait is drawn uniformly from [(1 - jitter) x ceiling, ceiling] (`Backoff`)."""

    def __post_init__(self) -> None:
        assert self.budget_s >= 0 and self.max_attempts >= 1
        assert 0 < self.backoff_initial_s <= self.backoff_max_s and 0 <= self.jitter <= 1

    @property
    def backoff(self) -> Backoff:
        return Backoff(self.backoff_initial_s, self.backoff_max_s, self.jitter)

    def delay_s(self, failures: int, rng: random.Random) -> float:
        """The wait after the `failures`-th consecutive failure (1-based): `Backoff.delay_s`."""
        return self.backoff.delay_s(failures, rng)


class Stopped(RaftschedError):
    """The caller asked to stop while a call was retrying."""

    def __init__(self) -> None:
        super().__init__(Code.UNAVAILABLE, "stopped")


class Servers:
    """The configured addresses and the one to try first (the leader, as far as we know).
    Thread-safe: one client or session is shared by several threads."""

    def __init__(self, addresses: Sequence[str]) -> None:
        unique = list(dict.fromkeys(a.strip() for a in addresses if a.strip()))
        if not unique:
            raise RaftschedError(Code.INVALID_ARGUMENT, "no scheduler addresses given")
        if len(unique) > limits.MAX_SERVERS:
            raise RaftschedError(Code.INVALID_ARGUMENT, f"{len(unique)} scheduler addresses, "
                                                        f"over MAX_SERVERS={limits.MAX_SERVERS}")
        self.addresses = tuple(unique)
        self._lock = threading.Lock()
        self._target = unique[0]
        self._next = 1 % len(unique)

    @property
    def target(self) -> str:
        with self._lock:
            return self._target

    def redirect(self, address: str) -> None:
        with self._lock:
            self._target = address

    def failed(self, address: str) -> None:
        """`address` did not serve us: the next configured server gets the next try."""
        with self._lock:
            if self._target != address:
                return  # another thread moved on already
            self._target = self.addresses[self._next]
            self._next = (self._next + 1) % len(self.addresses)


class Attempts:
    """The retry state of one call: where to send the next try, and what to do after a failure.

    for address in attempts: try the call on `address`; on failure `attempts.failed(error)`
    (raises when the call should end), on success stop iterating. A watch that received something
    calls `progressed()` so that a later failure starts a fresh budget.
    """

    def __init__(self, servers: Servers, policy: RetryPolicy, *,
                 stop: threading.Event | None = None, rng: random.Random | None = None,
                 retryable: Callable[[RaftschedError], bool] = default_retryable,
                 on_retry: Callable[[RaftschedError, float], None] | None = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._servers = servers
        self._policy = policy
        self._stop = stop or threading.Event()
        self._rng = rng or random.Random()
        self._retryable = retryable
        self._on_retry = on_retry
        self._monotonic = monotonic
        self._progressed()

    def _progressed(self) -> None:
        self._started_s = self._monotonic()
        self._attempts = 0
        self._failures = 0
        self._followed: set[str] = set()
        self._answered = False
        self._last: RaftschedError | None = None

    def progressed(self) -> None:
        """The call made progress (a watch received a message): the budget starts over."""
        self._progressed()

    def __iter__(self) -> Attempts:
        return self

    def __next__(self) -> str:
        if self._stop.is_set():
            raise Stopped()
        if self._attempts >= self._policy.max_attempts:
            raise self._give_up()
        self._attempts += 1
        return self._servers.target

    def failed(self, error: RaftschedError, address: str) -> None:
        """Decide after a failed try on `address`: raises `error` (or a summary of the tries)
        when the call should end; otherwise redirects, or backs off and moves on."""
        self._last = error
        self._answered = self._answered or not isinstance(error, CouldNotConnect)
        if not self._retryable(error):
            raise error
        hint = error.leader_hint
        if hint and hint != address and hint not in self._followed:
            self._followed.add(hint)
            self._servers.redirect(hint)
            return  # a fresh redirect is followed at once
        self._servers.failed(address)
        self._failures += 1
        delay_s = self._policy.delay_s(self._failures, self._rng)
        elapsed_s = self._monotonic() - self._started_s
        if self._attempts >= self._policy.max_attempts or \
                elapsed_s + delay_s > self._policy.budget_s:
            raise self._give_up()
        if self._on_retry is not None:
            self._on_retry(error, delay_s)
        if self._stop.wait(delay_s):
            raise Stopped()

    def _give_up(self) -> RaftschedError:
        last = self._last or RaftschedError(Code.UNAVAILABLE, "no attempt made")
        tried = ", ".join(self._servers.addresses)
        spent_s = self._monotonic() - self._started_s
        if not self._answered:
            reason = last.detail if isinstance(last, CouldNotConnect) else last.message
            return RaftschedError(
                Code.UNAVAILABLE,
                f"could not connect to any of {tried} in {spent_s:.1f} s ({self._attempts} "
                f"tries; {reason}); nothing was sent")
        return RaftschedError(last.code, f"{last.message} (gave up after {self._attempts} tries "
                                         f"in {spent_s:.1f} s across {tried})",
                              leader_hint=last.leader_hint)


def call(servers: Servers, policy: RetryPolicy, invoke: Callable[[str], T], *,
         stop: threading.Event | None = None, rng: random.Random | None = None,
         retryable: Callable[[RaftschedError], bool] = default_retryable,
         on_retry: Callable[[RaftschedError, float], None] | None = None) -> T:
    """`invoke(address)` under the policy; `invoke` raises RaftschedError (see `rpc`)."""
    attempts = Attempts(servers, policy, stop=stop, rng=rng, retryable=retryable,
                        on_retry=on_retry)
    for address in attempts:
        try:
            return invoke(address)
        except RaftschedError as error:
            attempts.failed(error, address)
    raise AssertionError("Attempts ended without raising")
