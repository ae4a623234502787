"""The vocabulary agents and replicas share: what an agent reports about an attempt, what the
state machine answers, the attempts an agent holds, resources, and the gRPC metadata keys.

A shared leaf: it imports nothing of raftsched but the limits, so the pure state machine
(`raftsched.state`), the replica and the agent all use these very types instead of copies. The
numbering of `ReportKind` is the proto's `AgentReport.Kind` (append-only, like the log's tags).
The one rule for ids (`id_problem`) lives here too: job specs, the state machine, the replicas
and the agent's command line all check cluster ids, capabilities, task ids and tenant names
with it.
"""

from __future__ import annotations

import enum
import re
import reprlib
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from raftsched import limits

LEADER_METADATA_KEY = "raftsched-leader"
"""Trailing metadata of an UNAVAILABLE answer from a follower: the leader's gRPC address."""

ID_RULE = "letters, digits, '_', '.' and '-', starting with a letter or digit"
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")

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
    """A short repr of a user-supplied value for an error message (long values are truncated;
    control characters are escaped, as repr does)."""
    try:
        return _REPR.repr(value)
    except ValueError:  # an int past sys.get_int_max_str_digits()
        return f"<{type(value).__name__} too large to show>"


def id_problem(value: object) -> str | None:
    """Why `value` is not an id (a job, task, cluster or capability id, a tenant name), or None:
    1..MAX_ID_CHARS of ID_RULE."""
    if not isinstance(value, str):
        return f"must be a string, got {show(value)}"
    if len(value) > limits.MAX_ID_CHARS:
        return f"must be at most {limits.MAX_ID_CHARS} characters, got {len(value)}"
    if not _ID.fullmatch(value):
        return f"must use only {ID_RULE}, got {show(value)}"
    return None


class ReportKind(enum.IntEnum):
    """What an agent says about one attempt. Numbered exactly like `AgentReport.Kind`."""

    STARTED = 1
    REJECTED = 2
    """Admission said no (stale fence, no capacity): infrastructure, not the task's fault."""
    FINISHED = 3
    KILLED = 4
    """The agent stopped the attempt (kill directive honoured, or preempted on its own)."""
    QUEUED = 5
    """Admitted into the agent's local queue (late binding): its fence is stored and it starts
    the moment a slot frees there, reported STARTED then. Counts as the answer to the
    assignment (no ASSIGN_TIMEOUT while queued); a cluster LOST with it queued replaces it by
    `on_lost`, as a running one."""
    WITHDRAWN = 6
    """Dropped from the agent's local queue before it started, as a withdraw directive asked
    (a task of a higher priority took its place): the fence is stored, it never starts there.
    The task goes back to its queue at no cost."""


TERMINAL_REPORT_KINDS = frozenset({ReportKind.FINISHED, ReportKind.KILLED})
"""A committed report of one of these kinds ends the attempt and clears its kill directive."""


class ReportVerdict(enum.StrEnum):
    """The state machine's answer to one report. Every verdict is final: once it is committed
    the agent may drop the report from its outbox."""

    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    """The same report was already applied (an identical repeat)."""
    LATE = "late"
    """About an attempt that is no longer current (an older fence, or already ended)."""
    NOT_FOUND = "not_found"
    """No such job, task or fence (forgotten, or never assigned)."""
    WRONG_CLUSTER = "wrong_cluster"
    """The fence belongs to an attempt on another cluster."""


def task_key(job_id: str, task_id: str) -> str:
    """A task's key in the agent's fence store: `job_id/task_id` (task ids cannot contain '/')."""
    return f"{job_id}/{task_id}"


@dataclass(frozen=True, slots=True)
class Resources:
    cpu_milli: int = 0
    memory_mb: int = 0
    gpu: int = 0

    def fits_in(self, free: Resources) -> bool:
        return (self.cpu_milli <= free.cpu_milli and self.memory_mb <= free.memory_mb
                and self.gpu <= free.gpu)

    def plus(self, other: Resources) -> Resources:
        return Resources(self.cpu_milli + other.cpu_milli, self.memory_mb + other.memory_mb,
                         self.gpu + other.gpu)

    def minus(self, other: Resources) -> Resources:
        return Resources(self.cpu_milli - other.cpu_milli, self.memory_mb - other.memory_mb,
                         self.gpu - other.gpu)

    def capped(self, other: Resources) -> Resources:
        """Each dimension at most `other`'s (what is free here and there too)."""
        return Resources(min(self.cpu_milli, other.cpu_milli), min(self.memory_mb, other.memory_mb),
                         min(self.gpu, other.gpu))

    def as_tuple(self) -> tuple[int, int, int]:
        return self.cpu_milli, self.memory_mb, self.gpu

    def to_dict(self) -> dict[str, int]:
        return {"cpu_milli": self.cpu_milli, "memory_mb": self.memory_mb, "gpu": self.gpu}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Resources:
        return Resources(int(data["cpu_milli"]), int(data["memory_mb"]), int(data["gpu"]))


class ReportKey(NamedTuple):
    """An agent stores a report at most once per (fence, kind)."""

    fence: int
    kind: ReportKind


@dataclass(frozen=True, slots=True)
class Report:
    """One agent report about one attempt (an item of the log's REPORT_BATCH)."""

    kind: ReportKind
    job_id: str
    task_id: str
    fence: int
    exit_code: int | None = None
    timed_out: bool = False
    reason: str = ""
    outputs: str = ""
    """FINISHED with exit code 0: the task's outputs, the canonical JSON text of the one object
    it left at $RAFTSCHED_OUTPUT (at most MAX_TASK_RESULT_OUTPUTS_BYTES); "" when it left none.
    The state machine keeps them only from the current attempt's fence."""
    outputs_refused: bool = False
    """FINISHED with exit code 0, but what the task left at $RAFTSCHED_OUTPUT is no valid
    outputs (`reason` says why): the attempt failed."""

    @property
    def key(self) -> ReportKey:
        return ReportKey(self.fence, self.kind)

    def to_dict(self) -> dict[str, Any]:
        data = {"kind": int(self.kind), "job_id": self.job_id, "task_id": self.task_id,
                "fence": self.fence, "exit_code": self.exit_code, "timed_out": self.timed_out,
                "reason": self.reason}
        if self.outputs or self.outputs_refused:
            data.update(outputs=self.outputs, outputs_refused=self.outputs_refused)
        return data

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Report:
        exit_code = data["exit_code"]
        return Report(ReportKind(int(data["kind"])), str(data["job_id"]), str(data["task_id"]),
                      int(data["fence"]), None if exit_code is None else int(exit_code),
                      bool(data["timed_out"]), str(data["reason"]),
                      str(data.get("outputs", "")), bool(data.get("outputs_refused", False)))


@dataclass(frozen=True, slots=True)
class KnownAttempt:
    """An attempt an agent holds when it (re-)registers."""

    job_id: str
    task_id: str
    fence: int
    running: bool
    """False: finished, its result still in the agent's outbox."""


@dataclass(frozen=True, slots=True)
class Assignment:
    """A committed, fenced attempt the leader asks this cluster to run."""

    job_id: str
    task_id: str
    fence: int
    attempt: int
    command: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = ""
    resources: Resources = field(default_factory=Resources)
    timeout_ms: int = 0
    """0: no timeout."""
    idempotency_key: str = ""
    kill_grace_ms: int = 0
    """SIGTERM to SIGKILL when the attempt is killed or times out; 0: the agent's default."""
    checkpoint: bool = False
    """The task keeps a checkpoint directory on this cluster across its attempts."""
    tenant: str = ""
    """The job's tenant: an agent may run each tenant's tasks as an account of its own."""
    inputs: str = ""
    """The task's inputs, the JSON text the agent leaves at $RAFTSCHED_INPUTS: an object mapping
    each upstream task id to its outputs; "" for a task without upstream tasks ("{}")."""
    task_fence: int = 0
    """The agent's own: the fence the task is told ($RAFTSCHED_FENCE) when `fence` is the key
    its executor knows the attempt by (an agent serving several groups: `agent.groups`); 0:
    `fence`. Never sent over the wire."""

    @property
    def task_key(self) -> str:
        return task_key(self.job_id, self.task_id)


@dataclass(frozen=True, slots=True)
class KillDirective:
    job_id: str
    task_id: str
    fence: int
    withdraw: bool = False
    """Only if it has not started: drop it from the local queue (report WITHDRAWN); an attempt
    that runs or ran is left alone (its STARTED/FINISHED report answers)."""

    @property
    def task_key(self) -> str:
        return task_key(self.job_id, self.task_id)


# --- the agent session's messages ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Registration:
    cluster_id: str
    incarnation: int
    capabilities: tuple[str, ...]
    capacity: Resources
    known: tuple[KnownAttempt, ...]
    custom: tuple[tuple[str, int], ...] = ()
    """Named custom resources the cluster offers, (name, count) sorted by name."""
    queue_depth: int = 0
    """Attempts beyond its free capacity the agent holds in its local queue (late binding),
    at most limits.MAX_AGENT_QUEUE_DEPTH; 0: none (the leader assigns only what fits)."""


@dataclass(frozen=True, slots=True)
class Registered:
    term: int
    leader: str
    lost: int
    kills: int
    stop: tuple[KillDirective, ...] = ()
    """Running attempts the agent listed that the scheduler does not know as this cluster's
    (unknown job, task or fence, or another cluster's): not ours, stop them. Nothing is
    recorded about them; their reports are answered not_found (or wrong_cluster)."""


@dataclass(frozen=True, slots=True)
class Beat:
    """One heartbeat: what the agent can still admit and what it runs."""

    cluster_id: str
    incarnation: int
    seq: int
    free: Resources | None
    """None: no capacity observation in this beat (the leader keeps its last one)."""
    running: tuple[int, ...]
    wait_ms: int


LOG_STREAMS = ("stdout", "stderr")
"""The output files of an attempt a LogRequest may name."""


@dataclass(frozen=True, slots=True)
class LogRequest:
    """The leader asks for a piece of one attempt's output (a client's `task logs`)."""

    request_id: str
    fence: int
    stream: str
    """One of LOG_STREAMS."""
    offset: int
    """Where to read from; negative: that many bytes before the end."""
    max_bytes: int


@dataclass(frozen=True, slots=True)
class LogChunk:
    """The agent's answer to a LogRequest (`error` set and no data when it has nothing)."""

    request_id: str
    fence: int
    offset: int
    data: bytes
    size: int
    """The file's size when it was read."""
    error: str = ""


@dataclass(frozen=True, slots=True)
class Directives:
    """A heartbeat's answer, all from committed state, stamped with the leader's term.
    `reregister`: the leader does not know this cluster incarnation (register again).
    `log_requests` are soft state of the leader, not committed: pieces of output a client
    waits for."""

    term: int
    assignments: tuple[Assignment, ...] = ()
    kills: tuple[KillDirective, ...] = ()
    reregister: bool = False
    log_requests: tuple[LogRequest, ...] = ()


@dataclass(frozen=True, slots=True)
class Observation:
    """An agent's free capacity as it saw it at one moment. Heartbeats and reports carry one;
    `seq` (one counter per agent incarnation, shared by both) orders them, so the leader keeps
    the newest."""

    seq: int
    free: Resources


@dataclass(frozen=True, slots=True)
class Verdict:
    fence: int
    verdict: ReportVerdict
    """Every verdict is final: the report may leave the outbox."""
    kind: ReportKind | None = None
    """Of the report this answers (None from a replica that does not say)."""


@dataclass(frozen=True, slots=True)
class Reported:
    term: int
    verdicts: tuple[Verdict, ...]
