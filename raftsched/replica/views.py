"""Read views: the replicated state rendered as API messages. Pure functions of the state; the
service calls them under the Raft node's apply lock, so each must be short (O(what it returns)).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from raftsched import limits
from raftsched.api import raftsched_pb2 as pb
from raftsched.errors import Code, RaftschedError
from raftsched.spec.issue import show
from raftsched.state import feasibility, policy
from raftsched.state.fsm import reservation_holder, reserved_for_other
from raftsched.state.model import (
    ALL_TENANTS,
    AttemptState,
    Cluster,
    Job,
    State,
    Task,
    TaskState,
)

_PAGE_TOKEN = re.compile(f"[0-9]{{1,{limits.MAX_PAGE_TOKEN_CHARS}}}", re.ASCII)
"""A page token as `list_jobs` writes it: a job seq in ASCII decimal digits."""


def job_of(state: State, job_id: str) -> Job:
    job = state.jobs.get(job_id)
    if job is None:
        raise RaftschedError(Code.NOT_FOUND, job_not_found_message(job_id))
    return job


def job_not_found_message(job_id: str) -> str:
    """The one answer for a job that does not exist, or that the caller's tenant may not see.
    The id is shown truncated: a status message echoing a 256 KiB id in full was more than a
    gRPC client accepts in its trailers (it saw RESOURCE_EXHAUSTED, not NOT_FOUND)."""
    return f"job {show(job_id)} not found"


def task_of(state: State, job_id: str, task_id: str) -> tuple[Job, Task]:
    job = job_of(state, job_id)
    index = job.index_of.get(task_id)
    if index is None:
        raise RaftschedError(Code.NOT_FOUND, f"task {show(task_id)} not found in job {job.id}")
    return job, job.tasks[index]


def job_message(job: Job, applied_index: int = 0) -> pb.Job:
    counts = {TaskState(s).name: n for s, n in enumerate(job.counts) if n}
    return pb.Job(
        job_id=job.id, name=job.spec.name, tenant=job.spec.tenant, priority=job.spec.priority,
        state=job.state.name, tasks=counts, total_tasks=len(job.tasks),
        failure_policy=job.spec.failure_policy, submitted_ms=job.submitted_ms,
        started_ms=job.started_ms or 0, finished_ms=job.finished_ms or 0, reason=job.reason,
        applied_index=applied_index,
    )


def page_of(request: pb.ListJobsRequest) -> tuple[int, int]:
    """The page a ListJobs request asks for: (at most this many jobs, after this job seq).

    `limit` is 0 (the default page size) or more, capped at MAX_PAGE_SIZE (as AIP-158 asks: a
    larger page is not an error); `page_token` is empty (the first page) or a `next_page_token`
    of an earlier answer: the decimal seq of the last job it held. A negative limit or a
    malformed token raises RaftschedError(INVALID_ARGUMENT) naming the field."""
    if request.limit < 0:
        raise RaftschedError(Code.INVALID_ARGUMENT,
                             f"limit must be 0 (the default, {limits.DEFAULT_PAGE_SIZE}) or more "
                             f"(at most {limits.MAX_PAGE_SIZE} are returned), got {request.limit}")
    token = request.page_token
    if token and _PAGE_TOKEN.fullmatch(token) is None:
        raise RaftschedError(Code.INVALID_ARGUMENT,
                             f"page_token {show(token)} is malformed: pass the next_page_token "
                             "of an earlier ListJobs answer, or nothing for the first page")
    return min(request.limit or limits.DEFAULT_PAGE_SIZE, limits.MAX_PAGE_SIZE), \
        int(token) if token else 0


def list_jobs(state: State, request: pb.ListJobsRequest) -> pb.ListJobsResponse:
    """Jobs in submission order, filtered; `page_token` is the last job seq returned. A
    malformed page request raises RaftschedError(INVALID_ARGUMENT) (see `page_of`)."""
    limit, after = page_of(request)
    jobs = []
    # Dicts keep insertion order, which is submission order: a page is a forward scan from the
    # token, bounded by what it returns plus what the filters skip.
    for job in state.jobs.values():
        if job.seq <= after:
            continue
        if request.tenant and job.spec.tenant != request.tenant:
            continue
        if request.state and job.state.name != request.state:
            continue
        jobs.append(job)
        if len(jobs) == limit:
            break
    token = str(jobs[-1].seq) if len(jobs) == limit else ""
    return pb.ListJobsResponse(jobs=[job_message(j) for j in jobs], next_page_token=token)


def task_summary(task: Task, why: str = "") -> pb.TaskSummary:
    """`why`: the one reason a task that is not running waits (`waiting_reason`)."""
    attempt = task.current
    summary = pb.TaskSummary(task_id=task.spec.id, state=task.state.name,
                             attempts=len(task.attempts), reason=why or task.reason,
                             depends_on=task.spec.depends_on)
    if attempt is not None:
        summary.cluster = attempt.cluster_id
        summary.fence = attempt.fence
        if attempt.exit_code is not None:
            summary.exit_code = attempt.exit_code
    return summary


def list_tasks(state: State, job_id: str) -> pb.ListTasksResponse:
    """Every task with, for those waiting, the one reason why (the same words as `task
    explain`'s summary). O(tasks) plus O(clusters) per distinct task shape that waits."""
    job = job_of(state, job_id)
    cache: dict[object, str] = {}
    return pb.ListTasksResponse(job_id=job.id, tasks=[
        task_summary(t, waiting_reason(state, job, t, cache)) for t in job.tasks])


def task_history(state: State, job_id: str, task_id: str) -> pb.TaskHistory:
    job, task = task_of(state, job_id, task_id)
    attempts = []
    for a in task.attempts:
        record = pb.AttemptRecord(
            fence=a.fence, number=a.number, cluster=a.cluster_id, state=a.state.name,
            assigned_ms=a.assigned_ms, started_ms=a.started_ms or 0,
            finished_ms=a.finished_ms or 0, reason=a.reason,
        )
        if a.exit_code is not None:
            record.exit_code = a.exit_code
        attempts.append(record)
    notes = [pb.ReportNote(kind=n.kind, fence=n.fence, report=n.report, at_ms=n.at_ms,
                           detail=n.detail) for n in task.notes]
    return pb.TaskHistory(
        job_id=job.id, task_id=task.spec.id, state=task.state.name, reason=task.reason,
        attempts=attempts, notes=notes, notes_dropped=task.notes_dropped,
        app_failures=task.app_failures, infra_failures=task.infra_failures,
    )


@dataclass(frozen=True, slots=True)
class LogSource:
    """The attempt whose output `task logs` reads."""

    number: int
    fence: int
    cluster_id: str
    state: str


def log_source(state: State, job_id: str, task_id: str, number: int) -> LogSource:
    """Attempt `number` (1-based; 0: the latest) of the task; NOT_FOUND naming what is missing,
    FAILED_PRECONDITION for a task that has not had an attempt yet."""
    job, task = task_of(state, job_id, task_id)
    if not task.attempts:
        raise RaftschedError(Code.FAILED_PRECONDITION,
                             f"task {task.spec.id} of job {job.id} has not run yet (it is "
                             f"{task.state.name}): there is no output")
    if number > len(task.attempts):
        raise RaftschedError(Code.NOT_FOUND,
                             f"task {task.spec.id} of job {job.id} has {len(task.attempts)} "
                             f"attempt(s), not {number}")
    attempt = task.attempts[number - 1 if number else -1]
    return LogSource(attempt.number, attempt.fence, attempt.cluster_id, attempt.state.name)


def attempt_live(state: State, job_id: str, task_id: str, fence: int) -> bool:
    """Whether the attempt with `fence` may still write output (ASSIGNED or RUNNING)."""
    job = state.jobs.get(job_id)
    index = None if job is None else job.index_of.get(task_id)
    if job is None or index is None:
        return False
    return any(a.fence == fence and a.live for a in job.tasks[index].attempts)


def explain_task(state: State, job_id: str, task_id: str) -> pb.ExplainTaskResponse:
    """Why a task is where it is; for a RUNNABLE one, what each cluster lacks right now."""
    job, task = task_of(state, job_id, task_id)
    verdicts = []
    for cluster in sorted(state.clusters.values(), key=lambda c: c.id):
        infeasible = feasibility.explain_committed(task.spec, cluster, state.now_ms)
        verdicts.append(pb.ClusterVerdict(cluster=cluster.id, eligible=infeasible is None,
                                          reason="" if infeasible is None else infeasible.detail))
    return pb.ExplainTaskResponse(state=task.state.name, summary=_summary(state, job, task),
                                  clusters=verdicts)


def _summary(state: State, job: Job, task: Task) -> str:
    why = waiting_reason(state, job, task, {})
    if why:
        return why
    attempt = task.current
    if task.state in (TaskState.ASSIGNED, TaskState.RUNNING) and attempt is not None:
        cluster = state.clusters[attempt.cluster_id]
        return f"{task.state.name.lower()} on {cluster.id} (fence {attempt.fence}, cluster " \
               f"{cluster.status.name})"
    return f"{task.state.name}: {task.reason}" if task.reason else task.state.name


def _resources(cpu_milli: int, memory_mb: int, gpu: int) -> pb.Resources:
    return pb.Resources(cpu_milli=cpu_milli, memory_mb=memory_mb, gpu=gpu)


def compute_cluster(state: State, cluster: Cluster, heartbeat_age_ms: int,
                    reported_free: tuple[int, int, int] | None = None) -> pb.ComputeCluster:
    """`reported_free` (cpu_milli, memory_mb, gpu): what its agent last reported to this
    replica as leader; None (left unset) on a follower or before the agent's first heartbeat."""
    return pb.ComputeCluster(
        cluster_id=cluster.id, status=cluster.status.name,
        capacity=_resources(cluster.cpu_milli, cluster.memory_mb, cluster.gpu),
        reserved=_resources(cluster.reserved_cpu_milli, cluster.reserved_memory_mb,
                            cluster.reserved_gpu),
        capabilities=sorted(cluster.capabilities), incarnation=cluster.incarnation,
        live_attempts=len(cluster.live), pending_kills=len(cluster.kills),
        heartbeat_age_ms=heartbeat_age_ms, draining=cluster.draining,
        drain_reason=cluster.drain_reason, degraded_until_ms=cluster.degraded_until_ms,
        reserved_for=_holder_name(state, cluster), custom=cluster.custom,
        custom_reserved=cluster.reserved_custom, kills_unrecorded=cluster.kills_unrecorded,
        reported_free=None if reported_free is None else _resources(*reported_free),
    )


def _holder_name(state: State, cluster: Cluster) -> str:
    holder = reservation_holder(state, cluster)
    return "" if holder is None else f"{holder[0].id}/{holder[1].spec.id}"


# --- why a task waits ---------------------------------------------------------------------------


def waiting_reason(state: State, job: Job, task: Task, cache: dict[object, str]) -> str:
    """The one reason a PENDING, RUNNABLE or RETRY_WAIT task is not running, from the rules the
    planner and apply use ("" for a task in another state). `cache` keeps the answer per task
    shape and tenant for a RUNNABLE task that holds no reservation: a job's tasks of one shape
    wait for the same reason."""
    if task.state == TaskState.PENDING:
        waiting = [d for d in task.spec.depends_on
                   if job.tasks[job.index_of[d]].state != TaskState.SUCCEEDED]
        shown = ", ".join(waiting[:10]) + (" ..." if len(waiting) > 10 else "")
        return f"waiting for {task.remaining_deps} upstream task(s): {shown}"
    if task.state == TaskState.RETRY_WAIT:
        return (f"backing off until {task.retry_at_ms} ms (attempts failed: "
                f"{task.app_failures} app, {task.infra_failures} infra)")
    if task.state != TaskState.RUNNABLE:
        return ""
    if task.reserved_on is not None:
        found = (f"runnable; cluster {task.reserved_on} is reserved for it (it waited for room, "
                 "or lower-class work there is being preempted for it); it goes there as soon "
                 "as the work running there makes room")
    else:
        key = (task.spec.cpu_milli, task.spec.memory_mb, task.spec.gpu, task.spec.requires,
               task.spec.cluster, job.spec.tenant)
        cached = cache.get(key)
        if cached is None:
            cached = cache[key] = _runnable_reason(state, job, task)
        found = cached
    last = task.current
    if last is not None and last.state == AttemptState.PREEMPTED and task.preemptions:
        return f"preempted ({task.preemptions} of at most " \
               f"{policy.MAX_PREEMPTIONS_PER_TASK} times: {last.reason}); {found}"
    return found


def _runnable_reason(state: State, job: Job, task: Task) -> str:
    tenant = job.spec.tenant
    if not state.clusters:
        return "runnable; no cluster is registered"
    never = feasibility.unschedulable(task.spec, state.clusters.values())
    if never is not None:
        return f"runnable; it {never} — it waits for such a cluster to register"
    if policy.at_running_limit(state, tenant):
        limit = policy.policy_of(state, tenant).max_running
        return (f"runnable; tenant {tenant} already runs its max_running={limit} tasks: it "
                "waits for one of them to end")
    fits = [c for c in sorted(state.clusters.values(), key=lambda c: c.id)
            if feasibility.unfit_committed(task.spec, c, state.now_ms) is None]
    if not fits:
        return "runnable; no cluster can take it now (see the reasons per cluster)"
    free = [c.id for c in fits if reserved_for_other(state, c, job, task) is None]
    if not free:
        return (f"runnable; it fits {', '.join(c.id for c in fits)} only, and each is reserved "
                "for a larger task that waited for room")
    ahead = _tenants_ahead(state, tenant)
    if ahead:
        return (f"runnable; fits now on {', '.join(free)}; tenant {tenant} is over its fair "
                f"share ({ahead}): tenants below their share go first")
    return f"runnable; fits now on {', '.join(free)} — placement is imminent"


def _tenants_ahead(state: State, tenant: str) -> str:
    """Words naming the tenants with queued work whose weighted dominant share is below
    `tenant`'s ("" when none): they go first. O(tenants)."""
    total = policy.totals(state.clusters.values())
    mine = policy.dominant_share(state.usage.get(tenant), policy.policy_of(state, tenant).weight,
                                 total)
    lower = sorted((share, name) for name, queue in state.queues.items()
                   if name != tenant and queue.live > 0
                   and (share := policy.dominant_share(state.usage.get(name),
                                                       policy.policy_of(state, name).weight,
                                                       total)) < mine)
    if not lower:
        return ""
    shown = ", ".join(f"{name} {share:.2f}" for share, name in lower[:3])
    more = f" and {len(lower) - 3} more" if len(lower) > 3 else ""
    return f"its weighted dominant share {mine:.2f}; {shown}{more}"


# --- tenants ------------------------------------------------------------------------------------


def tenant_info(state: State, tenant: str) -> pb.TenantInfo:
    """A tenant's policy (its own, or the defaults) and what it holds now."""
    chosen = policy.policy_of(state, tenant)
    usage = state.usage.get(tenant)
    info = pb.TenantInfo(tenant=tenant, weight=chosen.weight, max_queued=chosen.max_queued,
                         max_running=chosen.max_running, configured=tenant in state.tenants,
                         dominant_share=policy.dominant_share(
                             usage, chosen.weight, policy.totals(state.clusters.values())))
    if usage is not None:
        info.queued, info.running = usage.queued, usage.running
        info.reserved.CopyFrom(_resources(usage.cpu_milli, usage.memory_mb, usage.gpu))
    return info


def list_tenants(state: State) -> pb.ListTenantsResponse:
    """Every tenant with a policy or with work ("*", the defaults, first when set), by name.
    O(tenants): at most MAX_TENANTS."""
    names = sorted(set(state.tenants) | set(state.usage) - {ALL_TENANTS})
    tenants = [tenant_info(state, name) for name in names]
    if ALL_TENANTS in state.tenants:
        tenants.insert(0, tenant_info(state, ALL_TENANTS))
    return pb.ListTenantsResponse(tenants=tenants, queued_total=state.queued_total,
                                  max_queued_tasks=limits.MAX_QUEUED_TASKS)
