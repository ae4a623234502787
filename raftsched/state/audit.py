"""A log auditor: the safety properties of a committed log, checked entry by entry.

`LogAuditor.observe(index, command, outcome, state_after)` is fed every applied entry in log
order, with the state right after the entry was applied (the caller replays the log through the
pure FSM; the seeded simulation feeds its oracle replica). A caller that applies the entries
itself should also call `LogAuditor.before(index, command, state_before)` just before it applies
each one (the jepsen-style checker does). It never asserts: each broken property becomes a
`Violation`, so the jepsen-style checker can report every one and a simulation can assert there
are none. Per-entry cost is O(entry size) (O(in-degree) per assigned task); the O(state)
`invariants.check_invariants` runs every `INVARIANTS_EVERY_ENTRIES` entries and at `finish`.

The state *after* an entry is enough for every check but one: an ASSIGN_BATCH changes only the
tasks it assigns (whose upstreams must already be terminal, so their states are what the apply
saw), and a REPORT_BATCH never creates an attempt, so a task's current attempt after the batch
is the one its accepted reports were about. The contention checks judge each assigned item
against what held just before it applied, walking the result's `assigned` list in order:
- a cluster's status, drain and degradation: an ASSIGN_BATCH changes none of them, so they are
  read before the batch when `before` was called, else after it;
- a tenant's ASSIGNED+RUNNING count: the count after the batch less the batch's assignments of
  the tenant is the count just before its first item; each assignment then adds one;
- reservations need `before`: it records, in O(items) of the batch, the holders of the
  clusters the batch's items name and the reservations of the tasks it places (the batch's own
  reservations apply after its items and bind none of them); each placed task then releases
  its own.
  The state after the batch cannot tell: the reservations its placements released are gone.
  Without `before`, reservation_respected is not evaluated.

Checks (the names in `Violation.check` and `LogAuditor.checks`):
- fence_unique: a fence is committed at most once.
- fence_order: fences only grow, globally and per task.
- dag_order: a task is assigned only when each upstream is SUCCEEDED (any terminal state for a
  `trigger: all_done` task of a `failure_policy: continue` job).
- one_live_attempt: a task's previous attempt has ended when the next one is assigned.
- retry_bounds: a new attempt is assigned only while the task's budgets allow one: application
  failures (FAILED, TIMED_OUT) below `retry.max_attempts`, none with a non-retryable exit code,
  infrastructure failures (REJECTED, LOST, PREEMPTED by its agent) at most
  `limits.MAX_INFRA_RETRIES`, and never after a SUCCEEDED or CANCELLED attempt; an attempt the
  scheduler preempted (preemption_bounds) costs neither budget, nor does one taken back from its
  agent's queue unstarted (WITHDRAWN: an ASSIGN_BATCH asked for it). So a task has at most
  `max_attempts + MAX_INFRA_RETRIES + policy.MAX_PREEMPTIONS_PER_TASK +
  policy.MAX_WITHDRAWALS_PER_TASK` attempts.
- preemption_bounds: an attempt an ASSIGN_BATCH preempts was its task's live attempt, of a
  preemptible job of a lower priority class than the task it made room for; no task is
  preempted more than `policy.MAX_PREEMPTIONS_PER_TASK` times; no more than
  `policy.MAX_PREEMPTIONS_PER_WINDOW` preemptions apply within `policy.PREEMPTION_WINDOW_MS`
  (by the batches' `now_ms`).
- report_fence_current: an accepted report names the task's latest committed fence, from the
  cluster that fence was assigned to.
- success_once: at most one accepted successful completion per task, of its current attempt.
- capacity: after an entry that adds reservations or changes capacity (ASSIGN_BATCH,
  CLUSTER_REGISTER), each cluster it touched holds no more than its capacity (a re-registration
  that shrank capacity may leave a cluster `overcommitted`; no assignment may then land on it).
- idempotency_key_unique: a (tenant, idempotency key) creates one job, unless the first job's key
  record can have gone (its TTL passed, the job was forgotten, or the key table was full).
- placement_open: an attempt is created only on a cluster that, just before the ASSIGN_BATCH
  applied, was READY, not draining, owed no unrecorded kill and was not degraded at the
  batch's `now_ms` (`degraded_until_ms <= now_ms`).
- reservation_respected: an attempt is created on a cluster kept for a task
  (`Cluster.reserved_for` as it was just before the item applied; the batch's own reservations
  apply after its items) only for that task, unless the task could
  never fit that cluster (`queries.reservation_holder` is None: the reservation binds nothing).
  Needs `before`.
- tenant_running_limit: an assignment never takes a tenant past its `max_running`
  (`policy.policy_of`, 0: no limit): the tenant's ASSIGNED+RUNNING tasks just before the item
  (from `State.usage`, itself checked by fsm_invariants) are below it.
- retry_budget: a job with a `retry_budget` never gets more retries after application failures
  (attempts assigned after a FAILED or TIMED_OUT attempt, over all its tasks) than it allows.
- fsm_invariants: `invariants.check_invariants` holds.
- schedule_fire_once: a schedule's nominal time starts at most one run (issue 25), whether by
  the rule, a catch-up or a backfill; each fire's run is the job `schedule_times.run_job_id`
  names for it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from raftsched import limits
from raftsched.protocol import ReportVerdict
from raftsched.spec.model import JobSpec, runs_when_upstream_done
from raftsched.state import commands as c
from raftsched.state import invariants, policy
from raftsched.state.commands import ClusterStatus
from raftsched.state.feasibility import never_fits
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
from raftsched.state.outcome import Applied, Outcome
from raftsched.state.results import (
    AssignResult,
    JobsSubmitted,
    JobSubmitted,
    ReportResult,
    ScheduleBackfilled,
    ScheduleFired,
)
from raftsched.state.schedule_times import run_job_id

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
class _Contention:
    """What the items of one ASSIGN_BATCH saw when they began to apply, only for the clusters,
    tasks and tenants the batch names (`_contention`); `observe` advances it item by item."""

    index: int
    command: c.AssignBatch
    closed: dict[str, str] = field(default_factory=dict)
    """Cluster id -> why it could take no new work (absent: it could)."""
    holders: dict[str, TaskKey | None] | None = field(default_factory=dict)
    """Cluster id -> the task it was kept for (a reservation that binds); None: not known (no
    `before`), reservation_respected is not evaluated."""
    reserved_on: dict[TaskKey, str | None] = field(default_factory=dict)
    """Task -> the cluster its reservation was on."""
    tenant_of: dict[TaskKey, str] = field(default_factory=dict)
    running: dict[str, int] = field(default_factory=dict)
    """Tenant -> its ASSIGNED+RUNNING tasks."""
    max_running: dict[str, int] = field(default_factory=dict)

    def tenants(self, result: AssignResult, state: State) -> None:
        """The assigned tasks' tenants, with their ASSIGNED+RUNNING counts just before the batch's
        first item: after the batch (`state`), less one per assignment of the batch."""
        for placement, _ in result.assigned:
            job = state.jobs.get(placement.job_id)
            if job is None:
                continue
            tenant = job.spec.tenant
            self.tenant_of[(placement.job_id, placement.task_id)] = tenant
            if tenant not in self.running:
                usage = state.usage.get(tenant)
                self.running[tenant] = 0 if usage is None else usage.running
                self.max_running[tenant] = policy.policy_of(state, tenant).max_running
            self.running[tenant] -= 1


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
    _job_retries: dict[str, int] = field(default_factory=dict)
    """Job id -> attempts assigned after an application failure of one of its tasks."""
    _preempted: set[int] = field(default_factory=set)
    """Fences of the attempts ASSIGN_BATCHes preempted (bounded by the preemption rate)."""
    _withdrawing: set[int] = field(default_factory=set)
    """Fences an ASSIGN_BATCH asked agents to take back from their queues (late binding)."""
    _preempted_ms: list[int] = field(default_factory=list)
    """`now_ms` of each preemption applied within the last PREEMPTION_WINDOW_MS."""
    _before: _Contention | None = None
    """What `before` saw of the entry about to be applied."""
    schedule_runs: dict[tuple[str, int, int], int] = field(default_factory=dict)
    """(schedule id, its creation ms, nominal ms) -> the log index that started its run (a
    schedule deleted and created again is another schedule; manual triggers are no nominal
    times)."""

    # -- feeding ----------------------------------------------------------------------------------

    def before(self, index: int, command: c.Command, state: State) -> None:
        """Just before the entry at `index` is applied to `state` (then `observe` it): what the
        contention checks need of the state before an ASSIGN_BATCH, O(its size). Optional: without
        it reservation_respected is not evaluated."""
        self._before = None
        if isinstance(command, c.AssignBatch):
            self._before = _contention(index, command, state, before=True)

    def observe(self, index: int, command: c.Command, outcome: Outcome,
                state: State) -> None:
        """One applied entry, `state` as it is right after the apply."""
        self.entries += 1
        seen, self._before = self._before, None
        if isinstance(outcome, Applied):
            match command, outcome.result:
                case c.AssignBatch(), AssignResult() as result:
                    if seen is None or seen.index != index or seen.command != command:
                        seen = _contention(index, command, state, before=False)
                    seen.tenants(result, state)
                    self._preemptions(index, command, result, state)
                    self._assign_batch(index, result, state, seen)
                case c.ReportBatch(), ReportResult() as result:
                    self._report_batch(index, command, result, state)
                case c.JobSubmit(), JobSubmitted() as result:
                    self._job_submit(index, result, state)
                case c.JobSubmitBatch(), JobsSubmitted() as batch:
                    for answer in batch.answers:
                        if isinstance(answer, JobSubmitted):
                            self._job_submit(index, answer, state)
                case c.ClusterRegister(), _:
                    self._capacity(index, state, (command.cluster_id,), assigning=False)
                case c.ScheduleFire() | c.ScheduleBackfill(), ScheduleFired() | \
                        ScheduleBackfilled() as result:
                    if not (isinstance(command, c.ScheduleFire) and command.manual):
                        self._schedule_runs(index, command.schedule_id, result.job_ids, state)
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

    def _assign_batch(self, index: int, result: AssignResult, state: State,
                      seen: _Contention) -> None:
        self._withdrawing.update(result.withdrawing)
        touched: dict[str, None] = {}
        for placement, fence in result.assigned:
            job_id, task_id, cluster_id = placement.job_id, placement.task_id, placement.cluster_id
            touched[cluster_id] = None
            self._fence(index, job_id, task_id, cluster_id, fence)
            self._contended(index, placement, fence, seen)
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

    def _preemptions(self, index: int, command: c.AssignBatch, result: AssignResult,
                     state: State) -> None:
        """The batch's preemptions apply before its items: each judged on the state after the
        batch, where the victim's attempt has ended and its task counts the preemption."""
        applied = set(result.preempted)
        for preemption in command.preemptions:
            if preemption.fence not in applied:
                continue
            self._count("preemption_bounds")
            self._preempted.add(preemption.fence)
            name = f"{preemption.job_id}/{preemption.task_id}"
            keys = (name, f"fence={preemption.fence}")
            self._preempted_ms = [at for at in self._preempted_ms
                                  if at + policy.PREEMPTION_WINDOW_MS > state.now_ms]
            self._preempted_ms.append(state.now_ms)
            job, by_job = state.jobs.get(preemption.job_id), state.jobs.get(preemption.by_job_id)
            task = None if job is None else _task(job, preemption.task_id)
            attempt = None if task is None else next(
                (a for a in task.attempts if a.fence == preemption.fence), None)
            problem = None
            if job is None or by_job is None or task is None or attempt is None:
                problem = "names a task or attempt the state does not hold"
            elif attempt.state != AttemptState.PREEMPTED:
                problem = f"its attempt is {attempt.state.name}"
            elif not job.spec.preemptible:
                problem = f"job {job.id} is not preemptible"
            elif job.spec.priority_class.rank >= by_job.spec.priority_class.rank:
                problem = f"class {job.spec.priority_class.value} preempted for class " \
                          f"{by_job.spec.priority_class.value}"
            elif task.preemptions > policy.MAX_PREEMPTIONS_PER_TASK:
                problem = f"preempted {task.preemptions} times, past MAX_PREEMPTIONS_PER_TASK=" \
                          f"{policy.MAX_PREEMPTIONS_PER_TASK}"
            elif len(self._preempted_ms) > policy.MAX_PREEMPTIONS_PER_WINDOW:
                problem = f"{len(self._preempted_ms)} preemptions within " \
                          f"{policy.PREEMPTION_WINDOW_MS} ms, past MAX_PREEMPTIONS_PER_WINDOW=" \
                          f"{policy.MAX_PREEMPTIONS_PER_WINDOW}"
            if problem is not None:
                self._violate("preemption_bounds",
                              f"log index {index}: preempted {name} fence {preemption.fence} "
                              f"for {preemption.by_job_id}/{preemption.by_task_id}: {problem}",
                              (index,), keys)

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

    def _contended(self, index: int, placement: c.Placement, fence: int,
                   seen: _Contention) -> None:
        """The contention checks of one assigned item, against what held just before it; then
        advance `seen` past it (its task leaves the queue: its reservation goes, and it runs)."""
        job_id, task_id, cluster_id = placement.job_id, placement.task_id, placement.cluster_id
        key = (job_id, task_id)
        name = f"{job_id}/{task_id}"
        keys = (name, f"fence={fence}", f"cluster={cluster_id}")
        self._count("placement_open")
        closed = seen.closed.get(cluster_id)
        if closed is not None:
            self._violate("placement_open",
                          f"log index {index}: {name} assigned fence {fence} on cluster "
                          f"{cluster_id}, which {closed}", (index,), keys)
        holders = seen.holders
        if holders is not None:
            self._count("reservation_respected")
            holder = holders.get(cluster_id)
            if holder is not None and holder != key:
                self._violate("reservation_respected",
                              f"log index {index}: {name} assigned fence {fence} on cluster "
                              f"{cluster_id}, which was reserved for task "
                              f"{holder[0]}/{holder[1]}", (index,), keys)
            held = seen.reserved_on.get(key)
            if held is not None and holders.get(held) == key:
                holders[held] = None
            seen.reserved_on[key] = None
        tenant = seen.tenant_of.get(key)
        if tenant is None:
            return  # a job the state did not hold: dag_order reports it
        self._count("tenant_running_limit")
        running = seen.running.get(tenant, 0)
        limit = seen.max_running.get(tenant, 0)
        if limit and running >= limit:
            self._violate("tenant_running_limit",
                          f"log index {index}: {name} assigned fence {fence} while tenant "
                          f"{tenant} already had {running} task(s) ASSIGNED or RUNNING, its "
                          f"max_running={limit}", (index,), (*keys, f"tenant={tenant}"))
        seen.running[tenant] = running + 1

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
            self._job_retry(index, job, name, fence, keys)
            budget.app += 1
            if previous.exit_code is not None \
                    and previous.exit_code in retry.non_retryable_exit_codes:
                problem = f"exit code {previous.exit_code} is non-retryable"
            elif budget.app >= retry.max_attempts:
                problem = f"{budget.app} application failures reached max_attempts=" \
                          f"{retry.max_attempts}"
        elif previous.fence in self._preempted:
            pass  # preemption_bounds judged it; it costs neither budget
        elif previous.state == AttemptState.WITHDRAWN:  # late binding: costs neither budget
            if previous.fence not in self._withdrawing:
                problem = "no ASSIGN_BATCH asked to withdraw it"
            elif previous.started_ms is not None:
                problem = "it was withdrawn after it started"
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

    def _job_retry(self, index: int, job: Job, name: str, fence: int,
                   keys: tuple[str, ...]) -> None:
        """A retry after an application failure: within the job's retry_budget?"""
        self._count("retry_budget")
        used = self._job_retries.get(job.id, 0) + 1
        self._job_retries[job.id] = used
        allowed = job.spec.retry_budget
        if allowed is not None and used > allowed:
            self._violate("retry_budget",
                          f"log index {index}: {name} got a retry (fence {fence}) after an "
                          f"application failure, retry {used} of job {job.id}, past its "
                          f"retry_budget={allowed}", (index,), keys)

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

    def _schedule_runs(self, index: int, schedule_id: str, job_ids: tuple[str, ...],
                       state: State) -> None:
        """The runs a fire or backfill started: each one's nominal time from the schedule's run
        list (appended in start order), and no nominal time run twice."""
        self._count("schedule_fire_once")
        schedule = state.schedules.get(schedule_id)
        if schedule is None or not job_ids:
            return
        nominal_of = {job_id: nominal for nominal, job_id in
                      list(schedule.runs)[-len(job_ids):]}
        for job_id in job_ids:
            nominal = nominal_of.get(job_id)
            if nominal is None or run_job_id(schedule_id, nominal) != job_id:
                self._violate("schedule_fire_once", f"log index {index}: run {job_id} of "
                              f"schedule {schedule_id} is not named for its nominal time",
                              (index,), (job_id,))
                continue
            key = (schedule_id, schedule.created_ms, nominal)
            if key in self.schedule_runs:
                self._violate("schedule_fire_once", f"log index {index}: schedule "
                              f"{schedule_id} ran nominal time {nominal} twice (log index "
                              f"{self.schedule_runs[key]} first)", (index,), (job_id,))
            self.schedule_runs.setdefault(key, index)

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
        self._job_retries.pop(job_id, None)  # an id a forgotten job had: a new job
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


def _contention(index: int, command: c.AssignBatch, state: State, *,
                before: bool) -> _Contention:
    """The clusters the batch's items name, as `state` holds them `before` the batch (then with
    the reservations held before it) or after it (then the reservations are not known); the
    tenants come from the state after it (`tenants`)."""
    seen = _Contention(index, command, holders={} if before else None)
    now_ms = command.now_ms
    for placement in command.items:
        cluster_id = placement.cluster_id
        if cluster_id not in seen.closed:
            closed = _closed(state.clusters.get(cluster_id), now_ms)
            if closed is not None:
                seen.closed[cluster_id] = closed
    if before:
        _reservations(seen, command, state)
    return seen


def _closed(cluster: Cluster | None, now_ms: int) -> str | None:
    """Why `cluster` takes no new work at `now_ms` (`policy.cluster_open`), or None."""
    if cluster is None:
        return "was not registered"
    if cluster.status != ClusterStatus.READY:
        return f"was {cluster.status.name}"
    if cluster.draining:
        return "was draining"
    if cluster.kills_unrecorded:
        return f"owed {cluster.kills_unrecorded} kill directive(s) it could not record"
    if cluster.degraded_until_ms > now_ms:
        return f"was degraded until {cluster.degraded_until_ms} ms (the batch's now_ms is " \
               f"{now_ms})"
    return None


def _reservations(seen: _Contention, command: c.AssignBatch, state: State) -> None:
    """Load the reservations the batch's items may meet: those held before the batch (its own
    apply after its items, `assign.apply_assign_batch`, so they bind none of them)."""
    holders = seen.holders
    assert holders is not None
    for placement in command.items:
        _load_cluster(seen, holders, state, placement.cluster_id)
        _load_task(seen, holders, state, placement.job_id, placement.task_id)


def _load_cluster(seen: _Contention, holders: dict[str, TaskKey | None], state: State,
                  cluster_id: str) -> None:
    """The task `cluster_id` is kept for before the batch, unless that reservation binds nothing
    (`queries.reservation_holder`: the task could never fit there)."""
    if cluster_id in holders:
        return
    holder: TaskKey | None = None
    cluster = state.clusters.get(cluster_id)
    if cluster is not None and cluster.reserved_for is not None:
        job_id, task_index = cluster.reserved_for
        job = state.jobs.get(job_id)
        if job is not None and 0 <= task_index < len(job.tasks):
            task = job.tasks[task_index]
            if not never_fits(task.spec, cluster):
                holder = (job_id, task.spec.id)
    holders[cluster_id] = holder
    if holder is not None:
        seen.reserved_on.setdefault(holder, cluster_id)


def _load_task(seen: _Contention, holders: dict[str, TaskKey | None], state: State,
               job_id: str, task_id: str) -> Task | None:
    """The task, with the reservation it holds before the batch (and that cluster's holder)."""
    job = state.jobs.get(job_id)
    task = None if job is None else _task(job, task_id)
    key = (job_id, task_id)
    if task is not None and key not in seen.reserved_on:
        seen.reserved_on[key] = task.reserved_on
        if task.reserved_on is not None:
            _load_cluster(seen, holders, state, task.reserved_on)
    return task


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
