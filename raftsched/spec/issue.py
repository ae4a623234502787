"""SpecIssue, the one validation finding that spec.py and dag.py both produce.

It lives in this leaf module so that `spec` (which calls `dag`) and `dag` (which reports issues)
do not import each other. The public name is `raftsched.spec.SpecIssue`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from raftsched.protocol import show as show  # one rendering of a value in an error message

_TASK_PREFIX = re.compile(r"tasks\[\d+\]")


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
