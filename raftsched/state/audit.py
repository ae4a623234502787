"""A log auditor: the safety properties of a committed log, checked entry by entry.

`LogAuditor.observe(index, command, outcome, state_after)` is fed every applied entry in log
order, with the state right after the entry was applied (the caller replays the log through the
pure FSM; the seeded simulation feeds its oracle replica). It never asserts: each broken property
becomes a `Violation`, so the jepsen-style checker can report every one and a simulation can
assert there are none. Per-entry cost is O(entry size) (O(in-degree) per assigned task); the
O(state) `invariants.check_invariants` runs every `INVARIANTS_EVERY_ENTRIES` entries and at
`finish`.

The state *after* an entry is enough for every check here: an ASSIGN_BATCH changes only the
tasks it assigns (whose upstreams must already be terminal, so their states are what the apply
saw), and a REPORT_BATCH never creates an attempt, so a task's current attempt after the batch
is the one its accepted reports were about.

Checks (the names in `Violation.check` and `LogAuditor.checks`):
- fence_unique: a fence is committed at most once.
- fence_order: fences only grow, globally and per task.
- dag_order: a task is assigned only when each upstream is SUCCEEDED (any terminal state for a
  `trigger: all_done` task of a `failure_policy: continue` job).
- one_live_attempt: a task's previous attempt has ended when the next one is assigned.
- retry_bounds: a new attempt is assigned only while the task's budgets allow one: application
  failures (FAILED, TIMED_OUT) below `retry.max_attempts`, none with a non-retryable exit code,
  infrastructure failures (REJECTED, LOST, PREEMPTED) at most `limits.MAX_INFRA_RETRIES`, and
  never after a SUCCEEDED or CANCELLED attempt. So a task has at most
  `max_attempts + MAX_INFRA_RETRIES` attempts.
- report_fence_current: an accepted report names the task's latest committed fence, from the
  cluster that fence was assigned to.
- success_once: at most one accepted successful completion per task, of its current attempt.
- capacity: after an entry that adds reservations or changes capacity (ASSIGN_BATCH,
  CLUSTER_REGISTER), each cluster it touched holds no more than its capacity (a re-registration
  that shrank capacity may leave a cluster `overcommitted`; no assignment may then land on it).
- idempotency_key_unique: a (tenant, idempotency key) creates one job, unless the first job's key
  record can have gone (its TTL passed, the job was forgotten, or the key table was full).
- fsm_invariants: `invariants.check_invariants` holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from raftsched import limits
from raftsched.protocol import ReportVerdict
from raftsched.spec.job import JobSpec, runs_when_upstream_done
from raftsched.state import commands as c
from raftsched.state import fsm, invariants
from raftsched.state.model import (
    LIVE_ATTEMPT_STATES,
    TERMINAL_TASK_STATES,
    AttemptState,
    Cluster,
    Job,
    State,
    Task,
    TaskState,
)
from raftsched.state.results import AssignResult, JobSubmitted, ReportResult

INVARIANTS_EVERY_ENTRIES = 1_000
"""Entries between two O(state) `invariants.check_invariants` runs (and one at `finish`)."""
MAX_VIOLATIONS_PER_CHECK = 1_000
"""Violations kept per check; past it they are only counted (`LogAuditor.suppressed`)."""

TaskKey = tuple[str, str]
"""(job id, task id)."""

_APP_FAILURES = frozenset({AttemptState.FAILED, AttemptState.TIMED_OUT})
_INFRA_FAILURES = frozenset({AttemptState.REJECTED, AttemptState.LOST, AttemptState.PREEMPTED})


@dataclass(frozen=True)
class Violation:
    check: str
    message: str
    """Names what was seen: log indices, job/task ids, fences (and history ops, in the checker)."""
    log_indices: tuple[int, ...] = ()
    keys: tuple[str, ...] = ()
    """Identifiers involved, e.g. `job/task`, `fence=12`, `cluster=east`, `key=tenant/k`."""
    history_ops: tuple[int, ...] = ()
    """History line numbers ("i") involved; filled by checks outside the log."""


@dataclass(frozen=True)
class Assignment:
    job_id: str
    task_id: str
    cluster_id: str
    index: int
    """Log index of the ASSIGN_BATCH that committed it."""


@dataclass(frozen=True)
class CreatedJob:
    index: int
    """Log index of the JOB_SUBMIT that created it."""
    tenant: str
    key: str | None
    spec: JobSpec
    created_ms: int


@dataclass
class _Budget:
    attempts: int = 0
    app: int = 0
    infra: int = 0


@dataclass
class LogAuditor:
    """Feed it every applied entry in log order (`observe`), then `finish`; read `violations`.
    What it learns on the way (`assigned`, `created`, `key_jobs`) serves checks outside the log
    (the jepsen-style checker's ledger, agent-log and history checks)."""

    invariants_every: int = INVARIANTS_EVERY_ENTRIES
    """0: never between entries (the caller checks invariants itself)."""
    violations: list[Violation] = field(default_factory=list)
    checks: dict[str, int] = field(default_factory=dict)
    """Check name -> times it was evaluated."""
    suppressed: dict[str, int] = field(default_factory=dict)
    """Check name -> violations past MAX_VIOLATIONS_PER_CHECK (counted, not kept)."""
    entries: int = 0
    assigned: dict[int, Assignment] = field(default_factory=dict)
    """fence -> the committed assignment."""
    last_fence: dict[TaskKey, int] = field(default_factory=dict)
    """Task -> its latest committed fence (its current attempt's)."""
    successes: dict[TaskKey, tuple[int, int]] = field(default_factory=dict)
    """Task -> (fence, log index) of its accepted successful completion."""
    created: dict[str, CreatedJob] = field(default_factory=dict)
    """job id -> how it was created."""
    key_jobs: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    """(tenant, idempotency key) -> ids of the jobs it created, in log order."""
    max_fence: int = 0
    _kept: dict[str, int] = field(default_factory=dict)
    _budgets: dict[TaskKey, _Budget] = field(default_factory=dict)

    # -- feeding ----------------------------------------------------------------------------------

    def observe(self, index: int, command: c.Command, outcome: fsm.Outcome,
                state: State) -> None:
        """One applied entry, `state` as it is right after the apply."""
        self.entries += 1
        if isinstance(outcome, fsm.Applied):
            match command, outcome.result:
                case c.AssignBatch(), AssignResult() as result:
                    self._assign_batch(index, result, state)
                case c.ReportBatch(), ReportResult() as result:
                    self._report_batch(index, command, result, state)
                case c.JobSubmit(), JobSubmitted() as result:
                    self._job_submit(index, result, state)
                case c.ClusterRegister(), _:
                    self._capacity(index, state, (command.cluster_id,), assigning=False)
        if self.invariants_every and self.entries % self.invariants_every == 0:
            self.check_invariants(index, state)

    def finish(self, index: int, state: State) -> None:
        """After the last entry (`index`): the whole-state invariants once more."""
        self.check_invariants(index, state)

    def check_invariants(self, index: int, state: State) -> None:
        self._count("fsm_invariants")
        try:
            invariants.check_invariants(state)
        except AssertionError as error:
            detail = str(error) or repr(error)
            self._violate("fsm_invariants", f"after log index {index}: {detail}", (index,))

    # -- bookkeeping ------------------------------------------------------------------------------

    def _count(self, check: str) -> None:
        self.checks[check] = self.checks.get(check, 0) + 1

    def _violate(self, check: str, message: str, indices: Iterable[int] = (),
                 keys: Iterable[str] = ()) -> None:
        kept = self._kept.get(check, 0)
        if kept >= MAX_VIOLATIONS_PER_CHECK:
            self.suppressed[check] = self.suppressed.get(check, 0) + 1
            return
        self._kept[check] = kept + 1
        self.violations.append(Violation(check, message, tuple(indices), tuple(keys)))

    # -- assignments ------------------------------------------------------------------------------

    def _assign_batch(self, index: int, result: AssignResult, state: State) -> None:
        touched: dict[str, None] = {}
        for placement, fence in result.assigned:
            job_id, task_id, cluster_id = placement.job_id, placement.task_id, placement.cluster_id
            touched[cluster_id] = None
            self._fence(index, job_id, task_id, cluster_id, fence)
            job = state.jobs.get(job_id)
            task = None if job is None else _task(job, task_id)
            if job is None or task is None:
                self._count("dag_order")
                self._violate("dag_order", f"log index {index}: fence {fence} assigned to "
                                           f"{job_id}/{task_id}, which the state does not hold",
                              (index,), (f"{job_id}/{task_id}", f"fence={fence}"))
                continue
            self._upstream(index, job, task, fence)
            self._budget(index, job, task, fence)
        self._capacity(index, state, touched, assigning=True)

    def _fence(self, index: int, job_id: str, task_id: str, cluster_id: str,
               fence: int) -> None:
        keys = (f"{job_id}/{task_id}", f"fence={fence}")
        self._count("fence_unique")
        earlier = self.assigned.get(fence)
        if earlier is not None:
            self._violate("fence_unique",
                          f"fence {fence} committed twice: log index {earlier.index} "
                          f"({earlier.job_id}/{earlier.task_id} on {earlier.cluster_id}) and "
                          f"{index} ({job_id}/{task_id} on {cluster_id})",
                          (earlier.index, index), keys)
        else:
            self.assigned[fence] = Assignment(job_id, task_id, cluster_id, index)
        self._count("fence_order")
        task_key = (job_id, task_id)
        last = self.last_fence.get(task_key, 0)
        if fence <= last or fence <= self.max_fence:
            self._violate("fence_order",
                          f"log index {index}: fence {fence} for {job_id}/{task_id} after the "
                          f"task's fence {last} and the highest fence {self.max_fence}",
                          (index,), keys)
        self.last_fence[task_key] = max(last, fence)
        self.max_fence = max(self.max_fence, fence)

    def _upstream(self, index: int, job: Job, task: Task, fence: int) -> None:
        self._count("dag_order")
        all_done = runs_when_upstream_done(job.spec.failure_policy, task.spec.trigger)
        for dep_id in task.spec.depends_on:
            dep = job.tasks[job.index_of[dep_id]]
            done = dep.state in TERMINAL_TASK_STATES if all_done \
                else dep.state == TaskState.SUCCEEDED
            if not done:
                self._violate("dag_order",
                              f"log index {index}: {job.id}/{task.spec.id} assigned (fence "
                              f"{fence}) while upstream {dep_id} is {dep.state.name}",
                              (index,), (f"{job.id}/{task.spec.id}", f"fence={fence}"))

    def _budget(self, index: int, job: Job, task: Task, fence: int) -> None:
        """Classify the attempt before this one (its state is final now) and check that the
        budgets still allowed a new attempt."""
        name = f"{job.id}/{task.spec.id}"
        keys = (name, f"fence={fence}")
        budget = self._budgets.setdefault((job.id, task.spec.id), _Budget())
        budget.attempts += 1
        attempts = task.attempts
        self._count("fence_order")
        if not attempts or attempts[-1].fence != fence or len(attempts) != budget.attempts:
            current = attempts[-1].fence if attempts else None
            self._violate("fence_order",
                          f"log index {index}: {name} assigned fence {fence} (assignment "
                          f"{budget.attempts} seen in the log) but the state's current attempt "
                          f"has fence {current} of {len(attempts)} attempts", (index,), keys)
            return
        if len(attempts) < 2:
            return
        previous = attempts[-2]
        self._count("one_live_attempt")
        if previous.state in LIVE_ATTEMPT_STATES:
            self._violate("one_live_attempt",
                          f"log index {index}: {name} assigned fence {fence} while its attempt "
                          f"fence {previous.fence} is still {previous.state.name}",
                          (index,), keys)
            return
        self._count("retry_bounds")
        retry = task.spec.retry
        problem = None
        if previous.state in _APP_FAILURES:
            budget.app += 1
            if previous.exit_code is not None \
                    and previous.exit_code in retry.non_retryable_exit_codes:
                problem = f"exit code {previous.exit_code} is non-retryable"
            elif budget.app >= retry.max_attempts:
                problem = f"{budget.app} application failures reached max_attempts=" \
                          f"{retry.max_attempts}"
        elif previous.state in _INFRA_FAILURES:
            budget.infra += 1
            if budget.infra > limits.MAX_INFRA_RETRIES:
                problem = f"{budget.infra} infrastructure failures passed MAX_INFRA_RETRIES=" \
                          f"{limits.MAX_INFRA_RETRIES}"
        else:
            problem = f"attempt fence {previous.fence} ended {previous.state.name}"
        if problem is not None:
            self._violate("retry_bounds",
                          f"log index {index}: {name} got attempt {len(attempts)} (fence "
                          f"{fence}) after {previous.state.name} fence {previous.fence}: "
                          f"{problem}", (index,), keys)

    def _capacity(self, index: int, state: State, cluster_ids: Iterable[str], *,
                  assigning: bool) -> None:
        for cluster_id in cluster_ids:
            self._count("capacity")
            cluster = state.clusters.get(cluster_id)
            if cluster is None:
                if assigning:
                    self._violate("capacity", f"log index {index}: an attempt was assigned to "
                                              f"unregistered cluster {cluster_id}",
                                  (index,), (f"cluster={cluster_id}",))
                continue
            if not _within(cluster) and (assigning or not cluster.overcommitted):
                self._violate("capacity",
                              f"log index {index}: cluster {cluster_id} reserves "
                              f"{_usage(cluster)}"
                              + (" after an assignment" if assigning else ""),
                              (index,), (f"cluster={cluster_id}",))

    # -- reports ----------------------------------------------------------------------------------

    def _report_batch(self, index: int, command: c.ReportBatch, result: ReportResult,
                      state: State) -> None:
        for report, verdict in zip(command.items, result.verdicts, strict=True):
            if verdict != ReportVerdict.ACCEPTED:
                continue
            self._accepted(index, command.cluster_id, report, state)
            if report.kind == c.ReportKind.FINISHED and report.exit_code == 0 \
                    and not report.timed_out:
                self._success(index, report.job_id, report.task_id, report.fence, state)

    def _accepted(self, index: int, cluster_id: str, report: c.Report, state: State) -> None:
        self._count("report_fence_current")
        name = f"{report.job_id}/{report.task_id}"
        current = self.last_fence.get((report.job_id, report.task_id))
        assignment = self.assigned.get(report.fence)
        problem = None
        if current != report.fence:
            problem = f"the task's current fence is {current}"
        elif assignment is not None and assignment.cluster_id != cluster_id:
            problem = f"fence {report.fence} was assigned to {assignment.cluster_id}"
        if problem is not None:
            self._violate("report_fence_current",
                          f"log index {index}: accepted {report.kind.name} report of fence "
                          f"{report.fence} for {name} from {cluster_id}; {problem}",
                          (index,), (name, f"fence={report.fence}", f"cluster={cluster_id}"))

    def _success(self, index: int, job_id: str, task_id: str, fence: int,
                 state: State) -> None:
        self._count("success_once")
        name = f"{job_id}/{task_id}"
        keys = (name, f"fence={fence}")
        earlier = self.successes.get((job_id, task_id))
        if earlier is not None:
            self._violate("success_once",
                          f"log index {index}: a second accepted success for {name}: fence "
                          f"{fence}, after fence {earlier[0]} at log index {earlier[1]}",
                          (earlier[1], index), keys)
            return
        self.successes[(job_id, task_id)] = (fence, index)
        job = state.jobs.get(job_id)
        task = None if job is None else _task(job, task_id)
        current = None if task is None else task.current
        if current is None or current.fence != fence \
                or current.state != AttemptState.SUCCEEDED:
            seen = "none" if current is None else f"fence {current.fence} {current.state.name}"
            self._violate("success_once",
                          f"log index {index}: success of fence {fence} accepted for {name}, "
                          f"but its current attempt is {seen}", (index,), keys)

    # -- submissions ------------------------------------------------------------------------------

    def _job_submit(self, index: int, result: JobSubmitted, state: State) -> None:
        if not result.created:
            return
        job_id = result.job_id
        job = state.jobs.get(job_id)
        if job is None:
            return  # forgotten by the same entry: impossible for a job just created
        spec = job.spec
        self.created[job_id] = CreatedJob(index, spec.tenant, spec.idempotency_key, spec,
                                          state.now_ms)
        if spec.idempotency_key is None:
            return
        self._count("idempotency_key_unique")
        key = (spec.tenant, spec.idempotency_key)
        jobs = self.key_jobs.setdefault(key, [])
        if jobs and not self._key_may_be_reused(self.created[jobs[-1]], jobs[-1], state):
            first = self.created[jobs[-1]]
            self._violate("idempotency_key_unique",
                          f"log index {index}: idempotency key {spec.idempotency_key!r} of tenant "
                          f"{spec.tenant!r} created job {job_id}; it created job {jobs[-1]} at "
                          f"log index {first.index}",
                          (first.index, index),
                          (f"key={spec.tenant}/{spec.idempotency_key}", jobs[-1], job_id))
        jobs.append(job_id)

    @staticmethod
    def _key_may_be_reused(first: CreatedJob, first_id: str, state: State) -> bool:
        return (first_id not in state.jobs
                or state.now_ms >= first.created_ms + limits.IDEMPOTENCY_TTL_MS
                or len(state.idempotency) >= limits.MAX_IDEMPOTENCY_KEYS)


def _task(job: Job, task_id: str) -> Task | None:
    index = job.index_of.get(task_id)
    return None if index is None else job.tasks[index]


def _within(cluster: Cluster) -> bool:
    return (0 <= cluster.reserved_cpu_milli <= cluster.cpu_milli
            and 0 <= cluster.reserved_memory_mb <= cluster.memory_mb
            and 0 <= cluster.reserved_gpu <= cluster.gpu)


def _usage(cluster: Cluster) -> str:
    return (f"cpu_milli {cluster.reserved_cpu_milli}/{cluster.cpu_milli}, memory_mb "
            f"{cluster.reserved_memory_mb}/{cluster.memory_mb}, gpu "
            f"{cluster.reserved_gpu}/{cluster.gpu}")
