"""`scripts/bench auth`: what checking a user's call costs on a replica (issue 24, item 2: "token
and identity checks cached per connection or per token"), to decide whether a cache earns its
keep. Times `identity.check_user` (parse the bearer token, read its record from the state under
a lock, hash the secret, compare in constant time, judge the role) and its parts, in process,
on one core. No timed assertion anywhere: it prints figures.
"""

from __future__ import annotations

import os
import sys
import threading
import timeit
from collections.abc import Callable
from typing import Any, TypeVar

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from raftsched import tokens
from raftsched.replica import identity
from raftsched.state.model import ALL_TENANTS, Role, State, TokenRecord

T = TypeVar("T")
CALLS = 50_000


class _Reader:
    """A replica's local read: the state under its lock, as the service reads it."""

    def __init__(self, state: State) -> None:
        self._state = state
        self._lock = threading.Lock()

    def read(self, fn: Callable[[State], T]) -> T:
        with self._lock:
            return fn(self._state)

    def current_read(self, context: Any, fn: Callable[[State], T]) -> T:
        return self.read(fn)

    def leads(self) -> bool:
        return True


def _per_call_us(fn: Callable[[], object]) -> float:
    return min(timeit.repeat(fn, number=CALLS, repeat=3)) / CALLS * 1e6


def main() -> int:
    state = State()
    made = tokens.new_token()
    state.tokens[made.token_id] = TokenRecord(made.token_id, made.digest, ALL_TENANTS,
                                              Role.ADMIN, 0, "bench")
    reader = _Reader(state)
    metadata = (("authorization", f"Bearer {made.token}"),)
    rule = identity.Rule.USER  # what every Scheduler call needs
    secret = tokens.parse_token(made.token)
    assert secret is not None
    rows = [
        ("check_user (the whole check of one call)",
         _per_call_us(lambda: identity.check_user(rule, "raftsched-user:bench", metadata,
                                                  reader, None))),
        ("  parse the bearer token", _per_call_us(lambda: tokens.parse_token(made.token))),
        ("  read its record under the state lock",
         _per_call_us(lambda: reader.read(lambda s: s.tokens.get(made.token_id)))),
        ("  sha256 of the secret", _per_call_us(lambda: tokens.secret_digest(secret[1]))),
    ]
    for what, us in rows:
        print(f"{what:44} {us:6.2f} us")
    print("\nA submit is acknowledged in ~5 ms here (docs/benchmarks.md): the check is about "
          f"{rows[0][1] / 5000:.3%} of it.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
