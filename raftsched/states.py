"""The names of job, task and attempt states as the API, the CLI's JSON and the console show
them — the one vocabulary of every reader of those names (the client, the CLI's rendering, the
console, the jepsen-style harness), defined once.

A shared leaf (it imports nothing), because the console may not import the state machine: the
state machine's own enums (`raftsched.state.model.JobState`, `TaskState`, `AttemptState`) carry
the numbers the log encodes, and `tests/unit/test_one_home.py` checks that their names are
exactly these, and their terminal and live sets these sets. A member is a `str` (StrEnum), so it
equals the plain name a protobuf answer or a JSON document carries.
"""

from __future__ import annotations

from enum import StrEnum


class JobStateName(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class TaskStateName(StrEnum):
    PENDING = "PENDING"
    RUNNABLE = "RUNNABLE"
    ASSIGNED = "ASSIGNED"
    RUNNING = "RUNNING"
    RETRY_WAIT = "RETRY_WAIT"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    SKIPPED = "SKIPPED"
    CANCELLED = "CANCELLED"


class AttemptStateName(StrEnum):
    ASSIGNED = "ASSIGNED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    REJECTED = "REJECTED"
    LOST = "LOST"
    TIMED_OUT = "TIMED_OUT"
    PREEMPTED = "PREEMPTED"
    CANCELLED = "CANCELLED"
    QUEUED = "QUEUED"
    WITHDRAWN = "WITHDRAWN"


JOB_STATE_NAMES: tuple[str, ...] = tuple(JobStateName)
"""Every job state, in the API's order (the CLI's `--state` choices, the console's tabs)."""

TERMINAL_JOB_STATE_NAMES = frozenset(
    {JobStateName.SUCCEEDED, JobStateName.FAILED, JobStateName.CANCELLED})
TERMINAL_TASK_STATE_NAMES = frozenset(
    {TaskStateName.SUCCEEDED, TaskStateName.FAILED, TaskStateName.SKIPPED,
     TaskStateName.CANCELLED})
LIVE_ATTEMPT_STATE_NAMES = frozenset({AttemptStateName.ASSIGNED, AttemptStateName.RUNNING,
                                      AttemptStateName.QUEUED})
TASK_QUEUED_AT_AGENT = AttemptStateName.QUEUED
"""What a task list shows for an ASSIGNED task whose attempt its agent holds in its local queue
(late binding): not a state of the state machine's tasks, a finer word for ASSIGNED."""
PLACED_TASK_STATE_NAMES = frozenset({TaskStateName.ASSIGNED, TaskStateName.RUNNING})
"""A task in one of these holds an attempt on a cluster ("where it runs")."""
CANCELLABLE_JOB_STATE_NAMES = frozenset({JobStateName.PENDING, JobStateName.RUNNING})
"""A job in one of these may still be cancelled (every non-terminal state)."""
