"""The values the agent's parts hand each other: the session's messages (`raftsched.protocol`,
shared with the replicas) and the agent's own attempt records and completions.

Transport-free on purpose: `raftsched.rpc` maps the protocol to and from protobuf, the fake session
in the tests builds these values directly, and `agent.outbox` stores them as JSON.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Any

# The protocol's values are the agent's vocabulary too (one copy, shared with the replicas).
from raftsched.protocol import (
    TERMINAL_REPORT_KINDS,
    Assignment,
    Beat,
    Directives,
    KillDirective,
    KnownAttempt,
    Registered,
    Registration,
    Report,
    Reported,
    ReportKey,
    ReportKind,
    ReportVerdict,
    Resources,
    Verdict,
    task_key,
)

__all__ = [
    "TERMINAL_REPORT_KINDS",
    "Assignment",
    "AttemptRecord",
    "AttemptState",
    "Beat",
    "Completion",
    "Directives",
    "KillDirective",
    "KnownAttempt",
    "Registered",
    "Registration",
    "Report",
    "ReportKey",
    "ReportKind",
    "ReportVerdict",
    "Reported",
    "Resources",
    "Verdict",
    "task_key",
]


# --- attempts -----------------------------------------------------------------------------------


class AttemptState(enum.StrEnum):
    RUNNING = "RUNNING"
    QUEUED = "QUEUED"
    """Admitted into the local queue (late binding), not started: its process does not exist.
    A restarted agent rejects it (`agent.core`): the queue itself is not kept across a restart."""
    FINISHED = "FINISHED"
    """Its process is gone; the FINISHED or KILLED report waits in the outbox until acked."""


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """What a restarted agent needs to find an attempt it was running."""

    fence: int
    job_id: str
    task_id: str
    attempt: int
    state: AttemptState
    resources: Resources
    attempt_dir: str
    created_ms: int
    """Wall clock (it must mean something after a restart)."""
    wrapper_pid: int | None = None
    wrapper_start_ticks: int | None = None
    """The wrapper's start time from /proc/<pid>/stat: a pid alone may be reused."""

    def finished(self) -> AttemptRecord:
        return replace(self, state=AttemptState.FINISHED)

    def launched(self, pid: int | None, start_ticks: int | None) -> AttemptRecord:
        return replace(self, wrapper_pid=pid, wrapper_start_ticks=start_ticks)

    def known(self) -> KnownAttempt:
        return KnownAttempt(self.job_id, self.task_id, self.fence,
                            self.state == AttemptState.RUNNING)

    def to_dict(self) -> dict[str, Any]:
        return {"fence": self.fence, "job_id": self.job_id, "task_id": self.task_id,
                "attempt": self.attempt, "state": self.state.value,
                "resources": self.resources.to_dict(), "attempt_dir": self.attempt_dir,
                "created_ms": self.created_ms, "wrapper_pid": self.wrapper_pid,
                "wrapper_start_ticks": self.wrapper_start_ticks}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> AttemptRecord:
        pid = data["wrapper_pid"]
        ticks = data["wrapper_start_ticks"]
        return AttemptRecord(
            int(data["fence"]), str(data["job_id"]), str(data["task_id"]), int(data["attempt"]),
            AttemptState(data["state"]), Resources.from_dict(data["resources"]),
            str(data["attempt_dir"]), int(data["created_ms"]),
            None if pid is None else int(pid), None if ticks is None else int(ticks))


@dataclass(frozen=True, slots=True)
class Completion:
    """An attempt's process is gone. exit_code is None when it has none (timed out, killed)."""

    fence: int
    exit_code: int | None
    timed_out: bool = False
    killed: bool = False
    reason: str = ""
    outputs: str = ""
    """Exit code 0: the canonical JSON text of the outputs the task left ("": none)."""
    outputs_refused: bool = False
    """Exit code 0, but what the task left at $RAFTSCHED_OUTPUT is refused (`reason` says why):
    the attempt fails."""
