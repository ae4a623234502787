"""SpecIssue, the one validation finding that spec.py and dag.py both produce.

It lives in this leaf module so that `spec` (which calls `dag`) and `dag` (which reports issues)
do not import each other. The public name is `raftsched.spec.SpecIssue`.
"""

from __future__ import annotations

import re
import reprlib
from dataclasses import dataclass

_TASK_PREFIX = re.compile(r"tasks\[\d+\]")

_REPR = reprlib.Repr()
_REPR.maxstring = 60
_REPR.maxother = 60
_REPR.maxlong = 40
_REPR.maxlist = 6
_REPR.maxtuple = 6
_REPR.maxdict = 4
_REPR.maxset = 6
_REPR.maxlevel = 2


def show(value: object) -> str:
    """A short repr of a user-supplied value for an error message (long values are truncated)."""
    try:
        return _REPR.repr(value)
    except ValueError:  # an int past sys.get_int_max_str_digits()
        return f"<{type(value).__name__} too large to show>"


@dataclass(frozen=True, slots=True)
class SpecIssue:
    """One problem in a job spec.

    `path` locates it: "failure_policy", "tasks[2].resources.cpu", "tasks[0].depends_on[1]", or
    "" for the file as a whole. `task` is the task's id when the issue sits inside a task whose
    id is known (valid).
    """

    path: str
    message: str
    task: str | None = None

    def render(self) -> str:
        """`tasks[2] (load).resources.cpu: must be a number > 0, got -1`."""
        where = self.path
        match = _TASK_PREFIX.match(where)
        if self.task is not None and match is not None:
            where = f"{match.group(0)} ({self.task}){where[match.end():]}"
        return f"{where}: {self.message}" if where else self.message
