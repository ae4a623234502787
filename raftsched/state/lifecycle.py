"""An attempt's end and what follows for its task: capacity released, kill directives, retries
with their budgets and jittered backoff, failure policies down the DAG, success unblocking
dependents, and cancelling a job's open tasks."""

from __future__ import annotations

import bisect

from raftsched import limits
from raftsched.outputs import OutputsRefused, judge
from raftsched.spec.model import FailurePolicy, TaskSpec, Trigger
from raftsched.state import feasibility, policy
from raftsched.state.commands import ClusterStatus, Report
from raftsched.state.mapping import plan_expansion
from raftsched.state.model import (
    A_RUNNING,
    LIVE_ATTEMPT_STATES,
    T_CANCELLED,
    T_FAILED,
    T_PENDING,
    T_RETRY_WAIT,
    T_RUNNING,
    T_SKIPPED,
    T_SUCCEEDED,
    TERMINAL_TASK_STATES,
    Attempt,
    AttemptState,
    Cluster,
    Job,
    State,
    Task,
    TimerKind,
)
from raftsched.state.queries import several_groups
from raftsched.state.queues import (
    count_new_tasks,
    make_runnable,
    note_attempt,
    push_timer,
    set_state,
)
from raftsched.state.resolve import has_templates, resolve_task

_CLUSTER_FAILURES = frozenset({AttemptState.FAILED, AttemptState.TIMED_OUT, AttemptState.REJECTED})
"""Attempt outcomes that count against the cluster they ended on (`policy.note_failure`)."""


def end_attempt(state: State, job: Job, task: Task, attempt: Attempt, outcome: AttemptState,
                reason: str, *, kill: bool) -> None:
    """Close a live attempt: release its reservation and, when the agent may still be running
    it, record a kill directive for that cluster."""
    assert attempt.state in LIVE_ATTEMPT_STATES and attempt is task.attempts[-1]
    attempt.state = outcome
    attempt.finished_ms = state.now_ms
    attempt.reason = reason
    if state.changes is not None:
        note_attempt(state.changes, job, task, attempt, state.now_ms)
    cluster = state.clusters[attempt.cluster_id]
    del cluster.live[attempt.fence]
    cluster.preemptible.pop(attempt.fence, None)
    spec = task.spec
    cluster.withdrawing.pop(attempt.fence, None)
    if cluster.queued.pop(attempt.fence, None) is None:  # a queued attempt held no room
        release_room(cluster, spec)
        if cluster.queued and promotes_on_free(state):
            promote_queued(state, cluster)
    usage = state.usage[job.spec.tenant]
    usage.cpu_milli -= spec.cpu_milli
    usage.memory_mb -= spec.memory_mb
    usage.gpu -= spec.gpu
    if outcome in _CLUSTER_FAILURES or outcome == AttemptState.SUCCEEDED:
        policy.note_outcome(state, cluster, job.id, task.index, outcome != AttemptState.SUCCEEDED)
    if cluster.overcommitted:
        refresh_overcommit(cluster)
    if kill:
        add_kill(state, cluster, attempt.fence, job.id, spec.id)


def hold_room(cluster: Cluster, spec: TaskSpec) -> None:
    """The attempt of `spec` holds its room on `cluster` (`Cluster.reserved_*`)."""
    cluster.reserved_cpu_milli += spec.cpu_milli
    cluster.reserved_memory_mb += spec.memory_mb
    cluster.reserved_gpu += spec.gpu
    for name, count in spec.custom:
        cluster.reserved_custom[name] = cluster.reserved_custom.get(name, 0) + count


def release_room(cluster: Cluster, spec: TaskSpec) -> None:
    cluster.reserved_cpu_milli -= spec.cpu_milli
    cluster.reserved_memory_mb -= spec.memory_mb
    cluster.reserved_gpu -= spec.gpu
    for name, count in spec.custom:
        held = cluster.reserved_custom[name] - count
        if held:
            cluster.reserved_custom[name] = held
        else:
            del cluster.reserved_custom[name]


def promotes_on_free(state: State) -> bool:
    """Whether room freed on a cluster goes to its queued attempts in the committed state (one
    scheduler group: the agent starts its queue's head the moment a slot frees, so the state
    takes that in ahead of the STARTED report). With several groups the slot may go to another
    group's work (the agent starts one group's queue at a time, the group whose turn it is:
    `agent.groups`), so a queued attempt holds room only once its agent reports it STARTED
    (`promote_started`)."""
    return not several_groups(state)


def promote_queued(state: State, cluster: Cluster) -> None:
    """Room freed on `cluster`: its queued attempts take it in fence order, while the head fits
    the committed room (the order the agent starts them in as its real slots free; a head that
    does not fit stops the walk, as it stops the agent's). O(promoted + withdrawing + 1)."""
    promoted = []
    for fence, (job_id, index) in cluster.queued.items():
        if fence in cluster.withdrawing:
            continue  # its agent is asked to drop it: the next one is what starts there
        spec = state.jobs[job_id].tasks[index].spec
        if not feasibility.fits_room(spec, cluster):
            break
        hold_room(cluster, spec)
        promoted.append(fence)
    for fence in promoted:
        del cluster.queued[fence]


def promote_started(cluster: Cluster, attempt: Attempt, spec: TaskSpec) -> None:
    """The agent started a queued attempt the committed room had not yet taken in (its real
    slots freed before the reports that say so committed): it holds its room now. Past the
    committed capacity, the cluster is marked overcommitted (no new work) until reports of the
    attempts that made way commit."""
    cluster.withdrawing.pop(attempt.fence, None)  # it started: the withdrawal is void
    if cluster.queued.pop(attempt.fence, None) is not None:
        hold_room(cluster, spec)
        if not feasibility.within_capacity(cluster):
            cluster.overcommitted = True


def add_kill(state: State, cluster: Cluster, fence: int, job_id: str, task_id: str) -> int:
    """Record that the cluster's agent must stop `fence`: 1 when recorded, else 0. Not on a
    LOST cluster (its agent's next registration re-derives it); past the cluster's bound it is
    counted in `kills_unrecorded`, which closes the cluster to new work until that
    registration: never dropped unseen."""
    if fence in cluster.kills or cluster.status == ClusterStatus.LOST:
        return 0
    if len(cluster.kills) >= limits.MAX_KILL_DIRECTIVES_PER_CLUSTER:
        cluster.kills_unrecorded += 1
        return 0
    cluster.kills[fence] = (job_id, task_id)
    state.kill_count += 1
    return 1


def refresh_overcommit(cluster: Cluster) -> None:
    cluster.overcommitted = not feasibility.within_capacity(cluster)


def mark_started(state: State, job: Job, task: Task, attempt: Attempt) -> None:
    promote_started(state.clusters[attempt.cluster_id], attempt, task.spec)
    attempt.state = A_RUNNING
    attempt.started_ms = state.now_ms
    if state.changes is not None:
        note_attempt(state.changes, job, task, attempt, state.now_ms)
    set_state(state, job, task, T_RUNNING)
    if task.spec.timeout_ms is not None:
        deadline = state.now_ms + task.spec.timeout_ms + limits.RUN_TIMEOUT_GRACE_MS
        push_timer(state, deadline, attempt.fence, TimerKind.RUN_TIMEOUT, job.id, task.index)


def finished_state(report: Report) -> AttemptState:
    if report.timed_out:
        return AttemptState.TIMED_OUT
    if report.exit_code == 0 and not report.outputs_refused:
        return AttemptState.SUCCEEDED
    return AttemptState.FAILED


def finish_attempt(state: State, job: Job, task: Task, attempt: Attempt, report: Report,
                    entropy: int) -> None:
    if attempt.state != A_RUNNING:  # ASSIGNED or QUEUED: its STARTED report was not seen
        mark_started(state, job, task, attempt)
    outcome = finished_state(report)
    attempt.exit_code = report.exit_code
    reason = report.reason
    if outcome == AttemptState.SUCCEEDED and report.outputs:
        problem = keep_outputs(state, job, attempt, report.outputs)
        if problem:
            outcome, reason = AttemptState.FAILED, problem
    end_attempt(state, job, task, attempt, outcome, reason, kill=False)
    if outcome == AttemptState.SUCCEEDED:
        set_state(state, job, task, T_SUCCEEDED)
        _on_success(state, job, task)
    else:
        app_failure(state, job, task, report.exit_code, entropy)


def keep_outputs(state: State, job: Job, attempt: Attempt, text: str) -> str:
    """Keeps a succeeding attempt's outputs, judged by the one rule the agents apply too (an
    agent is not trusted to have applied it) and within the job's MAX_JOB_OUTPUTS_BYTES; else
    the reason its attempt fails instead ("" when kept)."""
    judged = judge(text)
    if isinstance(judged, OutputsRefused):
        return judged.reason
    size = len(judged.text.encode("utf-8", "surrogatepass"))
    if job.outputs_bytes + size > limits.MAX_JOB_OUTPUTS_BYTES:
        return (f"its outputs ({size} bytes) would pass the job's bound of "
                f"{limits.MAX_JOB_OUTPUTS_BYTES} bytes of outputs (MAX_JOB_OUTPUTS_BYTES)")
    if state.outputs_bytes + size > limits.MAX_OUTPUTS_BYTES_IN_STATE:
        return (f"its outputs ({size} bytes) would pass the {limits.MAX_OUTPUTS_BYTES_IN_STATE} "
                "bytes of outputs all jobs may keep (MAX_OUTPUTS_BYTES_IN_STATE); finished jobs "
                "free theirs when retention forgets them")
    attempt.outputs = judged.text
    job.outputs_bytes += size
    state.outputs_bytes += size
    return ""


def app_failure(state: State, job: Job, task: Task, exit_code: int | None,
                entropy: int) -> None:
    task.app_failures += 1
    retry = task.spec.retry
    if exit_code is not None and exit_code in retry.non_retryable_exit_codes:
        _fail_task(state, job, task, f"exit code {exit_code} is non-retryable")
    elif task.app_failures >= retry.max_attempts:
        _fail_task(state, job, task, f"failed {task.app_failures} of max_attempts="
                                     f"{retry.max_attempts}")
    elif job.spec.retry_budget is not None and job.retries_used >= job.spec.retry_budget:
        _fail_task(state, job, task, f"the job's retry_budget={job.spec.retry_budget} is spent "
                                     f"(retries across its tasks)")
    else:
        job.retries_used += 1
        _count_retry(state, "application")
        exponent = task.app_failures - 1
        delay = min(retry.backoff_ms * retry.multiplier ** exponent, retry.backoff_max_ms)
        _wait_retry(state, job, task, _jittered(delay, retry.jitter, entropy))


def infra_failure(state: State, job: Job, task: Task, *, immediate: bool, entropy: int) -> None:
    """Rejected, lost or preempted: not the task's fault, so a separate bounded budget."""
    task.infra_failures += 1
    if task.infra_failures > limits.MAX_INFRA_RETRIES:
        _fail_task(state, job, task, f"infrastructure retry budget exhausted "
                                     f"(MAX_INFRA_RETRIES={limits.MAX_INFRA_RETRIES})")
    elif immediate:
        _count_retry(state, "infra")
        make_runnable(state, job, task)
    else:
        _count_retry(state, "infra")
        delay = min(limits.INFRA_BACKOFF_MS * 2 ** (task.infra_failures - 1),
                    limits.INFRA_BACKOFF_MAX_MS)
        _wait_retry(state, job, task, _jittered(delay, 0.2, entropy))


def _count_retry(state: State, kind: str) -> None:
    retries = state.stats.retries
    retries[kind] = retries.get(kind, 0) + 1


def _wait_retry(state: State, job: Job, task: Task, delay_ms: int) -> None:
    task.retry_at_ms = state.now_ms + delay_ms
    set_state(state, job, task, T_RETRY_WAIT)
    push_timer(state, task.retry_at_ms, 0, TimerKind.RETRY, job.id, task.index)


def _jittered(delay_ms: float, jitter: float, seed: int) -> int:
    """delay * (1 +- jitter), the sign and size drawn from the proposer's entropy. `seed` is the
    command's entropy plus the item's position; it is mixed here, on the rare retry path only."""
    unit = (_mix(seed) >> 11) / float(1 << 53)
    return max(0, round(delay_ms * (1.0 + jitter * (2.0 * unit - 1.0))))


def _mix(seed: int) -> int:
    """splitmix64: neighbouring seeds give unrelated, well-spread 64-bit values."""
    z = (seed + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return z ^ (z >> 31)


def _fail_task(state: State, job: Job, task: Task, reason: str) -> None:
    task.reason = reason
    set_state(state, job, task, T_FAILED)
    policy = job.spec.failure_policy
    if policy == FailurePolicy.FAIL_FAST:
        cancel_open_tasks(state, job, f"fail_fast: task {task.spec.id} failed")
    else:
        _propagate_failure(state, job, task, continue_policy=policy == FailurePolicy.CONTINUE)


def upstream_done(state: State, job: Job, task: Task) -> None:
    """A PENDING task's upstream tasks let it run: its templates are resolved (once, from
    replicated state) and it becomes RUNNABLE; a template that cannot be resolved fails it. A
    `for_each` task expands instead; once expanded, this is its instances all succeeding."""
    if task.instances is not None:
        set_state(state, job, task, T_SUCCEEDED)
        _on_success(state, job, task)
        return
    if task.spec.for_each is not None:
        _expand(state, job, task)
        return
    if task.resolved is None and has_templates(task.spec):
        resolved = resolve_task(job, task)
        if isinstance(resolved, str):
            _fail_task(state, job, task, f"templates: {resolved}")
            return
        task.resolved = resolved
    make_runnable(state, job, task)


def _expand(state: State, job: Job, task: Task) -> None:
    """A `for_each` task's instances join the job after its tasks, RUNNABLE; the task waits on
    them. An empty list succeeds at once; a refusal fails the task and adds nothing."""
    planned = plan_expansion(state, job, task)
    if isinstance(planned, str):
        _fail_task(state, job, task, planned)
        return
    for instance in planned:
        instance.index = len(job.tasks)
        job.index_of[instance.spec.id] = instance.index
        job.tasks.append(instance)
    count_new_tasks(state, job, len(planned))
    job.instance_count += len(planned)
    bisect.insort(job.expanded, task.index)
    task.instances = [instance.index for instance in planned]
    task.remaining_deps = len(planned)
    if not planned:
        upstream_done(state, job, task)
        return
    for instance in planned:
        make_runnable(state, job, instance)


def _on_success(state: State, job: Job, task: Task) -> None:
    tasks = job.tasks
    for index in task.dependents:
        dependent = tasks[index]
        if dependent.state != T_PENDING:
            continue  # cancelled meanwhile
        dependent.remaining_deps -= 1
        if dependent.remaining_deps == 0:
            upstream_done(state, job, dependent)


def _propagate_failure(state: State, job: Job, failed: Task, *, continue_policy: bool) -> None:
    """Walk downstream of a FAILED task. skip_downstream: every PENDING descendant is SKIPPED.
    continue: `all_done` dependents count the failure as done; `all_success` ones are SKIPPED,
    which in turn counts as done for their own dependents. Each task is visited once per
    upstream edge: O(edges reached)."""
    stack = [failed]
    tasks = job.tasks
    while stack:
        upstream = stack.pop()
        for index in upstream.dependents:
            dependent = tasks[index]
            if dependent.state != T_PENDING:
                continue
            if dependent.instances is not None:  # one of its instances failed for good
                _fail_task(state, job, dependent,
                           f"instance {upstream.spec.id} {upstream.state.name}")
                continue
            if continue_policy and dependent.spec.trigger == Trigger.ALL_DONE:
                dependent.remaining_deps -= 1
                if dependent.remaining_deps == 0:
                    upstream_done(state, job, dependent)
                continue
            dependent.reason = f"upstream task {upstream.spec.id} {upstream.state.name}"
            set_state(state, job, dependent, T_SKIPPED)
            stack.append(dependent)


def cancel_open_tasks(state: State, job: Job, reason: str) -> int:
    cancelled = 0
    for task in job.tasks:
        if task.state in TERMINAL_TASK_STATES:
            continue
        attempt = task.current
        if attempt is not None and attempt.state in LIVE_ATTEMPT_STATES:
            end_attempt(state, job, task, attempt, AttemptState.CANCELLED, reason, kill=True)
        task.reason = reason
        set_state(state, job, task, T_CANCELLED)
        cancelled += 1
    return cancelled
