"""The read side of the state: what placement, views, identity, snapshots and invariants ask,
without changing anything (the planner imports this, never the apply modules)."""

from __future__ import annotations

import heapq
from collections.abc import Container, Iterator

from raftsched.state import feasibility
from raftsched.state.model import (
    ALL_TENANTS,
    T_ASSIGNED,
    T_CANCELLED,
    T_FAILED,
    T_PENDING,
    T_RETRY_WAIT,
    T_RUNNABLE,
    T_RUNNING,
    T_SKIPPED,
    T_SUCCEEDED,
    TERMINAL_JOB_STATES,
    Attempt,
    Cluster,
    Job,
    JobState,
    Role,
    State,
    Task,
    TaskShape,
    TenantUsage,
    TokenRecord,
)


def ready_entry_live(state: State, entry: tuple[int, int, int, int, str]) -> bool:
    """Whether a ready-queue entry stands for a task still RUNNABLE in that very generation."""
    job = state.jobs.get(entry[4])
    if job is None:
        return False
    task = job.tasks[entry[2]]
    return task.state == T_RUNNABLE and task.ready_gen == entry[3]


def iter_ready(state: State, tenant: str,
               skip: Container[TaskShape] = ()) -> Iterator[tuple[Job, Task]]:
    """A tenant's RUNNABLE tasks in queue order (priority, then submission order), lazily, in
    O(k log k) for the first k: a best-first walk of the implicit trees of the tenant's heaps
    (one per shape) at once, which never pops or copies a heap, so placement cost grows with
    what it looks at, not what is stored. A shape in `skip` is passed over whole, also when the
    caller adds it during the walk (the planner does, once a task of that shape fit nowhere)."""
    queue = state.queues.get(tenant)
    if queue is None:
        return
    heaps = [(shape, shape_queue.heap) for shape, shape_queue in queue.shapes.items()]
    frontier = [(heap[0], which, 0) for which, (shape, heap) in enumerate(heaps)
                if heap and shape not in skip]
    heapq.heapify(frontier)  # entries are unique: `which` never decides an order
    while frontier:
        entry, which, position = heapq.heappop(frontier)
        shape, heap = heaps[which]
        if shape in skip:
            continue
        for child in (2 * position + 1, 2 * position + 2):
            if child < len(heap):
                heapq.heappush(frontier, (heap[child], which, child))
        if ready_entry_live(state, entry):
            job = state.jobs[entry[4]]
            yield job, job.tasks[entry[2]]


def reservation_holder(state: State, cluster: Cluster) -> tuple[Job, Task] | None:
    """The task `cluster` is kept for, unless it could no longer fit there even empty (the
    cluster re-registered smaller): such a reservation binds nothing."""
    if cluster.reserved_for is None:
        return None
    job_id, index = cluster.reserved_for
    job = state.jobs[job_id]
    task = job.tasks[index]
    if feasibility.never_fits(task.spec, cluster):
        return None
    return job, task


def reserved_for_other(state: State, cluster: Cluster, job: Job, task: Task) -> str | None:
    """Why `cluster` is not for `task`: kept for another task (the words), or None."""
    holder = reservation_holder(state, cluster)
    if holder is None or holder[1] is task:
        return None
    return (f"cluster {cluster.id} is reserved for task {holder[0].id}/{holder[1].spec.id}, "
            f"which has waited for room there since {cluster.reserved_since_ms} ms")


def find_attempt(task: Task, fence: int) -> Attempt | None:
    """Attempts are in fence order; the current one is asked about almost always."""
    for attempt in reversed(task.attempts):
        if attempt.fence == fence:
            return attempt
        if attempt.fence < fence:
            return None
    return None


def attempt_of_cluster(state: State, cluster_id: str, job_id: str, task_id: str,
                       fence: int) -> Attempt | None:
    """The attempt of that task with that fence, if the state placed it on `cluster_id`; None
    for an unknown job, task or fence, or another cluster's attempt. O(the task's attempts)."""
    job = state.jobs.get(job_id)
    index = None if job is None else job.index_of.get(task_id)
    if job is None or index is None:
        return None
    attempt = find_attempt(job.tasks[index], fence)
    return attempt if attempt is not None and attempt.cluster_id == cluster_id else None


def derive_job_state(job: Job) -> JobState:
    """A job's state as a function of its task counts (and whether a cancel was asked)."""
    counts = job.counts
    total = len(job.tasks)
    done = counts[T_SUCCEEDED] + counts[T_FAILED] + counts[T_SKIPPED] + counts[T_CANCELLED]
    if done == total:
        if job.cancel_requested:
            return JobState.CANCELLED
        return JobState.SUCCEEDED if counts[T_SUCCEEDED] == total else JobState.FAILED
    if job.started_ms is None:
        return JobState.PENDING
    return JobState.RUNNING


def derive_usage(state: State) -> tuple[dict[str, TenantUsage], int]:
    """Every tenant's usage and the queued total, counted from the jobs and the clusters' live
    attempts: O(state). What a snapshot load sets and the invariants compare with."""
    usage = {tenant: TenantUsage() for tenant in state.queues}
    queued_total = 0
    for job in state.jobs.values():
        if job.state in TERMINAL_JOB_STATES:
            continue
        held = usage.setdefault(job.spec.tenant, TenantUsage())
        counts = job.counts
        queued = counts[T_PENDING] + counts[T_RUNNABLE] + counts[T_RETRY_WAIT]
        held.queued += queued
        held.queued_by_class[job.spec.priority_class.rank] += queued
        queued_total += queued
        held.running += counts[T_ASSIGNED] + counts[T_RUNNING]
    for cluster in state.clusters.values():
        for job_id, index in cluster.live.values():
            job = state.jobs[job_id]
            spec = job.tasks[index].spec
            held = usage.setdefault(job.spec.tenant, TenantUsage())
            held.cpu_milli += spec.cpu_milli
            held.memory_mb += spec.memory_mb
            held.gpu += spec.gpu
    return usage, queued_total


def several_groups(state: State) -> bool:
    """This log is one of a deployment's several scheduler groups (GROUP_SET with more than
    one): its clusters' agents serve other groups too (docs/scale-out.md §2)."""
    return state.group is not None and state.group.groups > 1


def cert_revoked(state: State, fingerprint: str) -> bool:
    return fingerprint in state.revoked_certs


def token_of(state: State, token_id: str) -> TokenRecord | None:
    """The token of that id, or None. The caller compares digests (in constant time)."""
    return state.tokens.get(token_id)


def honoured_role(token: TokenRecord) -> Role:
    """The role a token acts with: its own when it is of every tenant; `user` otherwise. An
    operator or admin token of one tenant cannot be made any more (`token_put_problem`), but
    an older version made them and a snapshot may hold one: its tenant could not be kept by the
    Admin RPCs, so it is honoured as a user of its tenant only."""
    return token.role if token.tenant == ALL_TENANTS else Role.USER
