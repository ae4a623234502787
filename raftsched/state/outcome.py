"""Every command's outcome: `Applied` (with the command's own result) or `Rejected` (a code and the
words). Apply handlers return one; they raise only for bugs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from raftsched.errors import Code
from raftsched.state.results import Result

R = TypeVar("R", covariant=True)


@dataclass(frozen=True, slots=True)
class Applied(Generic[R]):
    """The command took effect (possibly as a no-op, e.g. a repeated cancel); `result` is the
    command's own result type (`state/results.py`)."""

    result: R


@dataclass(frozen=True, slots=True)
class Rejected:
    code: Code
    reason: str
    retry_after_ms: int = 0
    """Past a limit that drains by itself (a queue limit): when to try again; 0 for none."""


Outcome = Applied[Result] | Rejected
