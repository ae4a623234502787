"""The job spec's model: the validated, canonical `JobSpec` and `TaskSpec`, their policies
(enums) and `SpecError`. `raftsched.spec.validation` builds them from a document,
`raftsched.spec.text` reads the document from YAML or JSON text."""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import msgpack

from raftsched.environment import PREFIX
from raftsched.spec.issue import SpecIssue
from raftsched.spec.packing import list_in_pieces

RESERVED_ENV_PREFIX: Final = PREFIX
"""`raftsched.environment.PREFIX`: a spec's env may not set our variables."""

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


# --- the validated spec ---------------------------------------------------------------------------


class FailurePolicy(enum.StrEnum):
    """What a job does when one of its tasks fails for good (docs/architecture.md §2)."""

    FAIL_FAST = "fail_fast"
    """Cancel every open task of the job."""
    SKIP_DOWNSTREAM = "skip_downstream"
    """Dependents become SKIPPED; independent branches go on (the default)."""
    CONTINUE = "continue"
    """Like skip_downstream, except that `trigger: all_done` tasks run anyway."""


class Scoring(enum.StrEnum):
    """Which of the clusters a task fits the planner picks (docs/architecture.md §9)."""

    BINPACK = "binpack"
    """The fullest that fits: keeps whole clusters free for large tasks (the default)."""
    SPREAD = "spread"
    """The emptiest: spreads a job's tasks (and the damage of one cluster's loss)."""


class PriorityClass(enum.StrEnum):
    """Who may take a cluster's room from whom: a pending task of a higher class may preempt
    running tasks of a lower class whose jobs are `preemptible` (docs/architecture.md §9)."""

    LOW = "low"
    NORMAL = "normal"
    HIGH = "high"

    @property
    def rank(self) -> int:
        return _CLASS_RANK[self]


_CLASS_RANK: Final = {PriorityClass.LOW: 0, PriorityClass.NORMAL: 1, PriorityClass.HIGH: 2}


class OnLost(enum.StrEnum):
    """What happens to a task's attempt when its cluster is lost."""

    REPLACE = "replace"
    """The attempt becomes LOST and the task gets a new attempt (a new fence) elsewhere."""
    WAIT = "wait"
    """Never run twice: wait for the cluster to come back or an operator to mark it lost."""


class Trigger(enum.StrEnum):
    """When a task's upstream tasks let it run."""

    ALL_SUCCESS = "all_success"
    ALL_DONE = "all_done"
    """Every upstream task is terminal, whatever its outcome (under `failure_policy: continue`)."""


def runs_when_upstream_done(policy: FailurePolicy, trigger: Trigger) -> bool:
    """Whether a task becomes runnable once its upstream tasks are terminal, whatever their
    outcome (`trigger: all_done` in a `failure_policy: continue` job), rather than only once
    they all succeeded."""
    return trigger == Trigger.ALL_DONE and policy == FailurePolicy.CONTINUE


# The spec holds enum members; every serialized form (the document, the wire form, snapshots,
# the digest) holds their plain string values, so those bytes do not depend on the enums.


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How an application failure of a task is retried; durations in milliseconds."""

    max_attempts: int
    backoff_ms: int
    multiplier: float
    backoff_max_ms: int
    jitter: float
    non_retryable_exit_codes: tuple[int, ...]

    def to_doc(self) -> dict[str, Any]:
        return {
            "max_attempts": self.max_attempts,
            "backoff_s": self.backoff_ms / 1000,
            "multiplier": self.multiplier,
            "backoff_max_s": self.backoff_max_ms / 1000,
            "jitter": self.jitter,
            "non_retryable_exit_codes": list(self.non_retryable_exit_codes),
        }


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """One validated task; see docs/architecture.md §5 for what each field means."""

    id: str
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    cwd: str | None
    cpu_milli: int
    memory_mb: int
    gpu: int
    requires: tuple[str, ...]
    cluster: str | None
    depends_on: tuple[str, ...]
    retry: RetryPolicy
    timeout_ms: int | None
    on_lost: OnLost
    trigger: Trigger
    checkpoint: bool = False
    """The agent gives the task a directory that persists across its attempts on that cluster
    ($RAFTSCHED_CHECKPOINT_DIR), e.g. to resume after a preemption."""
    grace_ms: int | None = None
    """SIGTERM to SIGKILL when the task is stopped (preempted, cancelled, timed out); None: the
    agent's default."""
    custom: tuple[tuple[str, int], ...] = ()
    """Named custom resources (`resources.custom`: licenses, FPGAs, ...) as (name, count),
    sorted by name: a cluster must advertise at least that many of each (agent --resource),
    and the scheduler counts what its live attempts hold, as for cpu."""
    for_each: str | None = None
    """`{{ tasks.X.outputs.KEY }}` naming a list in an upstream task's outputs: once its
    upstream tasks are done the task expands into one instance per item (`id[0]`, `id[1]`, ...,
    each with `{{ item }}` and `{{ index }}`), and its dependents wait for every instance."""

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "id": self.id,
            "command": list(self.command),
            "env": dict(self.env),
            "cwd": self.cwd,
            "resources": {
                "cpu": self.cpu_milli / 1000,
                "memory_mb": self.memory_mb,
                "gpu": self.gpu,
                **({"custom": dict(self.custom)} if self.custom else {}),
            },
            "requires": list(self.requires),
            "cluster": self.cluster,
            "depends_on": list(self.depends_on),
            "retry": self.retry.to_doc(),
        }
        if self.timeout_ms is not None:
            doc["timeout_s"] = self.timeout_ms / 1000
        doc["on_lost"] = self.on_lost.value
        doc["trigger"] = self.trigger.value
        if self.checkpoint:
            doc["checkpoint"] = True
        if self.grace_ms is not None:
            doc["grace_s"] = self.grace_ms / 1000
        if self.for_each is not None:
            doc["for_each"] = self.for_each
        return doc


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A validated job: every default filled in, sets sorted, durations in milliseconds."""

    name: str
    tenant: str
    priority: int
    failure_policy: FailurePolicy
    idempotency_key: str | None
    tasks: tuple[TaskSpec, ...]
    allow_unschedulable: bool = False
    """Accept the job even when some task fits no registered cluster's totals; it waits."""
    scoring: Scoring = Scoring.BINPACK
    retry_budget: int | None = None
    """At most this many retries after application failures across all the job's tasks (None:
    only each task's `retry.max_attempts` bounds them)."""
    priority_class: PriorityClass = PriorityClass.NORMAL
    preemptible: bool = False
    """Its running tasks may be stopped to make room for a higher class's (and run again later,
    at no cost to their retry budgets)."""
    params: tuple[tuple[str, str], ...] = ()
    """The job's parameters (`raftsched.spec.params`): (name, effective value), sorted by name;
    defaults overridden by what was given at submit. Part of the job's identity."""

    def edge_count(self) -> int:
        return sum(len(task.depends_on) for task in self.tasks)

    def to_doc(self) -> dict[str, Any]:
        """The canonical user-form document; `validate_job_doc(s.to_doc()) == s`. The placement
        fields appear only when they differ from their defaults, so the digest of a spec that
        does not use them is what it was before they existed."""
        doc: dict[str, Any] = {
            "name": self.name,
            "tenant": self.tenant,
            "priority": self.priority,
            "failure_policy": self.failure_policy.value,
            "idempotency_key": self.idempotency_key,
        }
        if self.allow_unschedulable:
            doc["allow_unschedulable"] = True
        if self.scoring != Scoring.BINPACK:
            doc["scoring"] = self.scoring.value
        if self.retry_budget is not None:
            doc["retry_budget"] = self.retry_budget
        if self.priority_class != PriorityClass.NORMAL:
            doc["priority_class"] = self.priority_class.value
        if self.preemptible:
            doc["preemptible"] = True
        if self.params:
            doc["params"] = dict(self.params)
        doc["tasks"] = [task.to_doc() for task in self.tasks]
        return doc

    def digest(self) -> bytes:
        """sha256 of the msgpack encoding of `to_doc()` (its key order is fixed). Every replica
        computes it at apply, so the tasks are packed and hashed in pieces (`packing`)."""
        doc = self.to_doc()
        packer = msgpack.Packer(use_bin_type=True)
        hasher = hashlib.sha256(packer.pack_map_header(len(doc)))
        for key, value in doc.items():
            hasher.update(packer.pack(key))
            if key == "tasks":
                for piece in list_in_pieces(packer, value):
                    hasher.update(piece)
            else:
                hasher.update(packer.pack(value))
        tasks = doc["tasks"]
        while tasks:  # freed one at a time: whole, 100,000 task documents are one long C call
            tasks.pop()
        return hasher.digest()


class SpecError(Exception):
    """A job spec was refused; `issues` holds every problem found, in document order."""

    def __init__(self, issues: Iterable[SpecIssue]) -> None:
        self.issues: tuple[SpecIssue, ...] = tuple(issues)
        assert self.issues, "a SpecError names at least one issue"
        more = len(self.issues) - 1
        summary = self.issues[0].render() + (f" (and {more} more)" if more else "")
        super().__init__(summary)
