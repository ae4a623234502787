"""The contention policy's rules and knobs (docs/architecture.md §9), pure: who goes first, when a
submit
is refused, when a cluster is degraded. The state machine applies them (`fsm`), the planner
orders by them (`placement`), the read side explains with them (`views`): one copy each.

- Tenants: a `TenantPolicy` per tenant set by admins, else the ALL_TENANTS record's values, else
  weight 1 and no limits of its own (`policy_of`).
- Fair share: a tenant's dominant share is the largest fraction of the READY clusters' total
  cpu, memory or gpu that its live attempts reserve, divided by its weight (`dominant_share`).
  Between tenants the planner serves the lowest share first.
- Backpressure: a submit is refused (RESOURCE_EXHAUSTED) when it would take the tenant past its
  `max_queued`, or all tenants past `limits.MAX_QUEUED_TASKS` (`submit_refusal`), or the state
  past one of its bounds (`admission_refusal`); the leader refuses it before proposing it too
  (`refusal_before_proposal`), so a refused submit writes nothing to the log.
- Degraded clusters: attempts of DEGRADE_FAILED_TASKS distinct tasks of DEGRADE_MIN_JOBS
  distinct jobs failed there within DEGRADE_WINDOW_MS, at least DEGRADE_FAILURE_RATIO of the
  attempts that ended there in it failed, and another cluster is open → no new work there for
  DEGRADE_COOLDOWN_MS. (When every cluster fails the tasks, the tasks are the likelier cause:
  the last open cluster is never degraded.)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from raftsched import limits
from raftsched.spec.model import JobSpec
from raftsched.state.commands import ClusterStatus
from raftsched.state.model import (
    ALL_TENANTS,
    AttemptState,
    Cluster,
    State,
    Task,
    TenantPolicy,
    TenantUsage,
)

DEFAULT_POLICY = TenantPolicy(name=ALL_TENANTS)
"""Weight 1, no limits of its own: a tenant no admin configured (and no `*` record)."""

BACKPRESSURE_RETRY_AFTER_MS = 5_000
"""The retry-after hint of a submit refused for a queue limit: queues drain as tasks start, so
a client waits about this long before it tries again (the CLI and the client print it)."""

DEGRADE_WINDOW_MS = 60_000
DEGRADE_FAILED_TASKS = 10
"""Failed attempts of this many distinct tasks within DEGRADE_WINDOW_MS ..."""
DEGRADE_MIN_JOBS = 3
"""... of at least this many distinct jobs (one job's bad command is that job's problem, and its
`retry_budget` bounds it; failures across jobs point at the cluster) ..."""
DEGRADE_FAILURE_RATIO = 0.8
"""... that are at least this share of the attempts that ended there within the window (a busy
cluster running flaky tasks is not broken) ..."""
DEGRADE_COOLDOWN_MS = 120_000
"""... mark the cluster degraded: it gets no new work for this long."""
DEGRADE_OUTCOME_MEMORY = 4 * DEGRADE_FAILED_TASKS
"""Attempt outcomes remembered per cluster (the newest)."""


MAX_PREEMPTIONS_PER_TASK = 3
"""A task preempted this often is preempted no more: nothing is preempted forever."""
MAX_WITHDRAWALS_PER_TASK = 4
"""A task whose queued attempts were taken back this often for tasks of a higher priority
(late binding) is taken back no more: nothing waits forever behind newer arrivals."""
PREEMPTION_WINDOW_MS = 60_000
MAX_PREEMPTIONS_PER_WINDOW = 20
"""The rate bound: at most this many preemptions applied within any PREEMPTION_WINDOW_MS."""


def preemption_budget(state: State, now_ms: int) -> int:
    """How many more preemptions the rate bound allows at `now_ms`."""
    recent = sum(1 for at_ms in state.preempted_ms if at_ms + PREEMPTION_WINDOW_MS > now_ms)
    return max(0, MAX_PREEMPTIONS_PER_WINDOW - recent)


def may_preempt(by: JobSpec, victim: JobSpec, victim_task: Task) -> bool:
    """Whether a task of job `by` may stop `victim_task` (of job `victim`) for room: the
    victim's job is preemptible, of a lower class, and the task was not preempted too often."""
    return (victim.preemptible and victim.priority_class.rank < by.priority_class.rank
            and victim_task.preemptions < MAX_PREEMPTIONS_PER_TASK)


def may_withdraw(by: JobSpec, victim: JobSpec, victim_task: Task) -> bool:
    """Whether a task of job `by` may take a queued, not yet started attempt of `victim_task`
    (of job `victim`) back from its agent's local queue (late binding) for its place: `by` is
    of a higher priority class, or of the same class and a higher priority, and the task was not
    taken back MAX_WITHDRAWALS_PER_TASK times already. Nothing runs, so nothing is lost but the
    place; the victim's task goes back to its ready queue."""
    return ((by.priority_class.rank, by.priority) > (victim.priority_class.rank, victim.priority)
            and withdrawals(victim_task) < MAX_WITHDRAWALS_PER_TASK)


def withdrawals(task: Task) -> int:
    """How often the task's queued attempts were taken back (its WITHDRAWN attempts)."""
    return sum(1 for attempt in task.attempts if attempt.state == AttemptState.WITHDRAWN)


def policy_of(state: State, tenant: str) -> TenantPolicy:
    policy = state.tenants.get(tenant)
    if policy is not None:
        return policy
    return state.tenants.get(ALL_TENANTS, DEFAULT_POLICY)


@dataclass(frozen=True, slots=True)
class Refusal:
    """A submit past a bound of the state (RESOURCE_EXHAUSTED): which limit, why, and when to
    try again."""

    limit: str
    """`max_queued` (the tenant's), or a name in `limits` (`MAX_QUEUED_TASKS`, ...)."""
    message: str
    retry_after_ms: int
    """Past a queue limit, which drains by itself: when to try again; 0 for none."""

    @property
    def reason(self) -> str:
        """The message as a refused JOB_SUBMIT carries it, with the retry-after hint."""
        if not self.retry_after_ms:
            return self.message
        return f"{self.message}; retry after {self.retry_after_ms} ms"


def admission_refusal(state: State, tenant: str, tasks: int) -> Refusal | None:
    """Why a new job of `tasks` tasks of `tenant` is refused now, or None: the state's bounds
    (`bounds_refusal`), then the queue limits (`submit_refusal`). The rule JOB_SUBMIT applies
    after the idempotency key, and the one the leader checks before it proposes."""
    return bounds_refusal(state, tenant, tasks) or submit_refusal(state, tenant, tasks)


def bounds_refusal(state: State, tenant: str, tasks: int) -> Refusal | None:
    """Why a new job of `tasks` tasks of `tenant` would pass a bound of the state: live jobs,
    tasks held, tenants, jobs retained (room is made by forgetting the oldest finished jobs, so
    only unfinished ones count). Reads a few counters only."""
    if state.live_jobs >= limits.MAX_LIVE_JOBS:
        return Refusal("MAX_LIVE_JOBS",
                       f"{state.live_jobs} jobs are live, the bound MAX_LIVE_JOBS", 0)
    if state.task_count + tasks > limits.MAX_TASKS_IN_STATE:
        return Refusal("MAX_TASKS_IN_STATE",
                       f"{state.task_count} tasks held; {tasks} more would pass "
                       f"MAX_TASKS_IN_STATE={limits.MAX_TASKS_IN_STATE}", 0)
    if tenant not in state.queues and len(state.queues) >= limits.MAX_TENANTS:
        return Refusal("MAX_TENANTS", f"MAX_TENANTS={limits.MAX_TENANTS} reached", 0)
    if len(state.jobs) - len(state.finished_jobs) >= limits.MAX_RETAINED_JOBS:
        return Refusal("MAX_RETAINED_JOBS", "MAX_RETAINED_JOBS reached", 0)
    return None


def refusal_before_proposal(state: State, spec: JobSpec) -> Refusal | None:
    """What the leader answers a submit of `spec` without proposing it: `admission_refusal`,
    unless the spec's idempotency key is known — then JOB_SUBMIT answers (the same job, or
    ALREADY_EXISTS for another spec) whatever the limits say."""
    key = spec.idempotency_key
    if key is not None and (spec.tenant, key) in state.idempotency:
        return None
    return admission_refusal(state, spec.tenant, len(spec.tasks))


def submit_refusal(state: State, tenant: str, tasks: int) -> Refusal | None:
    """Why `tasks` more queued tasks of `tenant` are refused now, or None."""
    usage = state.usage.get(tenant)
    queued = 0 if usage is None else usage.queued
    policy = policy_of(state, tenant)
    if policy.max_queued and queued + tasks > policy.max_queued:
        return Refusal("max_queued",
                       f"tenant {tenant} has {queued} task(s) queued; {tasks} more would pass "
                       f"its max_queued={policy.max_queued} (see `raftsched admin tenant list`)",
                       BACKPRESSURE_RETRY_AFTER_MS)
    if state.queued_total + tasks > limits.MAX_QUEUED_TASKS:
        return Refusal("MAX_QUEUED_TASKS",
                       f"{state.queued_total} task(s) are queued over all tenants; {tasks} more "
                       f"would pass MAX_QUEUED_TASKS={limits.MAX_QUEUED_TASKS}",
                       BACKPRESSURE_RETRY_AFTER_MS)
    return None


def at_running_limit(state: State, tenant: str, extra: int = 0) -> bool:
    """Whether `tenant` already runs its `max_running` tasks (plus `extra` placed by a plan)."""
    limit = policy_of(state, tenant).max_running
    if not limit:
        return False
    usage = state.usage.get(tenant)
    return (0 if usage is None else usage.running) + extra >= limit


Totals = tuple[int, int, int]
"""(cpu milli, memory MB, gpu) of the READY clusters: the denominators of fair share."""


def totals(clusters: Iterable[Cluster]) -> Totals:
    cpu = memory = gpu = 0
    for cluster in clusters:
        if cluster_open(cluster, None):
            cpu, memory, gpu = cpu + cluster.cpu_milli, memory + cluster.memory_mb, \
                gpu + cluster.gpu
    return cpu, memory, gpu


def dominant_share(usage: TenantUsage | None, weight: int, total: Totals,
                   extra: Totals = (0, 0, 0)) -> float:
    """The largest fraction of `total` the tenant holds (plus `extra`), over its weight."""
    held = (0, 0, 0) if usage is None else (usage.cpu_milli, usage.memory_mb, usage.gpu)
    share = 0.0
    for have, more, whole in zip(held, extra, total, strict=True):
        if whole > 0:
            share = max(share, (have + more) / whole)
    return share / weight


def cluster_open(cluster: Cluster, now_ms: int | None) -> bool:
    """READY, not draining, owing no unrecorded kill and (when `now_ms` is given) not
    degraded: may take new work (`feasibility.unfit`'s cluster rules)."""
    if cluster.status != ClusterStatus.READY or cluster.draining or cluster.kills_unrecorded:
        return False
    return now_ms is None or cluster.degraded_until_ms <= now_ms


def note_outcome(state: State, cluster: Cluster, job_id: str, index: int, failed: bool) -> bool:
    """Remember how an attempt on `cluster` ended; True when that makes the cluster degraded
    (O(DEGRADE_OUTCOME_MEMORY), only when an attempt fails)."""
    now_ms = state.now_ms
    outcomes = cluster.outcomes
    outcomes.append((now_ms, job_id, index, failed))
    while len(outcomes) > DEGRADE_OUTCOME_MEMORY or outcomes[0][0] + DEGRADE_WINDOW_MS <= now_ms:
        outcomes.popleft()
    if not failed or cluster.degraded_until_ms > now_ms:
        return False
    tasks = {(job, task) for _, job, task, bad in outcomes if bad}
    if len(tasks) < DEGRADE_FAILED_TASKS or len({job for job, _ in tasks}) < DEGRADE_MIN_JOBS:
        return False
    failures = sum(1 for outcome in outcomes if outcome[3])
    if failures < DEGRADE_FAILURE_RATIO * len(outcomes):
        return False
    if not any(other is not cluster and cluster_open(other, now_ms)
               for other in state.clusters.values()):
        return False
    cluster.degraded_until_ms = now_ms + DEGRADE_COOLDOWN_MS
    outcomes.clear()
    return True
