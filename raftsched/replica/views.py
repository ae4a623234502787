"""Read views: the replicated state rendered as API messages. Pure functions of the state; the
service calls them under the Raft node's apply lock, so each must be short (O(what it returns)).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice

from raftsched import limits
from raftsched.api import raftsched_pb2 as pb
from raftsched.errors import Code, RaftschedError
from raftsched.outputs import NO_OUTPUTS
from raftsched.spec.issue import show
from raftsched.state import feasibility, policy
from raftsched.state.model import (
    ALL_TENANTS,
    Attempt,
    AttemptState,
    Cluster,
    Job,
    JobState,
    State,
    Task,
    TaskState,
)
from raftsched.state.queries import reservation_holder, reserved_for_other
from raftsched.state.resolve import kept_outputs
from raftsched.state.text import text_problem

_PAGE_TOKEN = re.compile(f"(n?)([0-9]{{1,{limits.MAX_PAGE_TOKEN_CHARS}}})", re.ASCII)
"""A page token as `list_jobs` writes it: a job seq in ASCII decimal digits, after an `n` when
it continues a newest-first listing."""


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


def job_message(job: Job, applied_index: int = 0, *, params: bool = True) -> pb.Job:
    """A job's view; `params=False` leaves its params out (a ListJobs page: up to 1,000 jobs
    with up to 256 KiB of params each would pass the message bound; GetJob has them)."""
    counts = {TaskState(s).name: n for s, n in enumerate(job.counts) if n}
    return pb.Job(
        job_id=job.id, name=job.spec.name, tenant=job.spec.tenant, priority=job.spec.priority,
        state=job.state.name, tasks=counts, total_tasks=len(job.tasks),
        failure_policy=job.spec.failure_policy, submitted_ms=job.submitted_ms,
        started_ms=job.started_ms or 0, finished_ms=job.finished_ms or 0, reason=job.reason,
        applied_index=applied_index, for_each=[_group(job, index) for index in job.expanded],
        params=dict(job.spec.params) if params else {}, schedule_id=job.schedule_id,
    )


def _group(job: Job, index: int) -> pb.ForEachGroup:
    task = job.tasks[index]
    assert task.instances is not None
    states = Counter(job.tasks[i].state.name for i in task.instances)
    return pb.ForEachGroup(task_id=task.spec.id, instances=len(task.instances), tasks=states)


@dataclass(frozen=True, slots=True)
class JobPage:
    """What a ListJobs request asks for, checked (`page_of`)."""

    limit: int
    """At most this many jobs."""
    seq: int | None
    """Continue after this job seq (oldest first) or before it (newest first); None: the first
    page."""
    newest_first: bool
    state: JobState | None
    """Only jobs in this state; None: any."""
    query: str
    """Only jobs whose id or name contains this, casefolded; "": any."""


def page_of(request: pb.ListJobsRequest) -> JobPage:
    """The page a ListJobs request asks for. `limit` is 0 (the default page size) or more,
    capped at MAX_PAGE_SIZE (as AIP-158 asks: a larger page is not an error); `page_token` is
    empty (the first page) or a `next_page_token` of an earlier answer in the same order: the
    decimal seq of the last job it examined, after an `n` for newest first. A negative limit, a
    malformed token or one of the other order, an unknown state or a query too long or not
    printable raises RaftschedError(INVALID_ARGUMENT) naming the field and the value."""
    if request.limit < 0:
        raise RaftschedError(Code.INVALID_ARGUMENT,
                             f"limit must be 0 (the default, {limits.DEFAULT_PAGE_SIZE}) or more "
                             f"(at most {limits.MAX_PAGE_SIZE} are returned), got {request.limit}")
    return JobPage(min(request.limit or limits.DEFAULT_PAGE_SIZE, limits.MAX_PAGE_SIZE),
                   _token_seq(request.page_token, request.newest_first), request.newest_first,
                   _state_filter(request.state), _query_of(request.query))


def _token_seq(token: str, newest_first: bool) -> int | None:
    if not token:
        return None
    match = _PAGE_TOKEN.fullmatch(token)
    if match is None:
        raise RaftschedError(Code.INVALID_ARGUMENT,
                             f"page_token {show(token)} is malformed: pass the next_page_token "
                             "of an earlier ListJobs answer, or nothing for the first page")
    if bool(match.group(1)) != newest_first:
        order = "a newest-first" if match.group(1) else "an oldest-first"
        raise RaftschedError(Code.INVALID_ARGUMENT,
                             f"page_token {token!r} continues {order} listing: send it with "
                             f"newest_first={'true' if match.group(1) else 'false'}, as the "
                             "request that got it, or no token for the first page")
    return int(match.group(2))


def _state_filter(name: str) -> JobState | None:
    if not name:
        return None
    if name not in JobState.__members__:
        raise RaftschedError(Code.INVALID_ARGUMENT,
                             f"state {show(name)} is not a job state: one of "
                             f"{', '.join(JobState.__members__)}, or empty for every state")
    return JobState[name]


def _query_of(query: str) -> str:
    if len(query) > limits.MAX_LIST_QUERY_CHARS:
        raise RaftschedError(Code.INVALID_ARGUMENT,
                             f"query is {len(query)} characters long: at most "
                             f"{limits.MAX_LIST_QUERY_CHARS} (MAX_LIST_QUERY_CHARS)")
    problem = text_problem("query", query)
    if problem is not None:
        raise RaftschedError(Code.INVALID_ARGUMENT, problem)
    return query.casefold()


def list_jobs(state: State, request: pb.ListJobsRequest) -> pb.ListJobsResponse:
    """A page of jobs, oldest or newest first, filtered, with the counts by state of the
    request's tenant and query. Without a query it costs O(page + log jobs) (the job index keeps
    the jobs in order per tenant and state, counted); a query examines at most
    LIST_QUERY_MAX_SCAN_JOBS jobs for the page and as many for the counts. A malformed request
    raises RaftschedError(INVALID_ARGUMENT) (see `page_of`)."""
    page = page_of(request)
    tenant = request.tenant or None
    order = state.job_index.order(tenant, page.state)
    scan = (order.newest_before(page.seq) if page.newest_first
            else order.oldest_after(page.seq or 0))
    jobs, resume = _collect(state, scan, page)
    token = "" if resume is None else f"{'n' if page.newest_first else ''}{resume}"
    response = pb.ListJobsResponse(jobs=[job_message(j, params=False) for j in jobs],
                                   next_page_token=token)
    _count(state, tenant, page.query, response)
    return response


def _collect(state: State, scan: Iterator[tuple[int, str]],
             page: JobPage) -> tuple[list[Job], int | None]:
    """The page's jobs and the seq the next page continues from (None: there is none). A full
    page gets a token (the next may be empty); so does a query's page cut by its scan bound."""
    jobs: list[Job] = []
    examined = 0
    for seq, job_id in scan:
        job = state.jobs[job_id]
        if page.query:
            examined += 1
            if _matches(job, page.query):
                jobs.append(job)
            if len(jobs) == page.limit or examined == limits.LIST_QUERY_MAX_SCAN_JOBS:
                return jobs, seq
            continue
        jobs.append(job)
        if len(jobs) == page.limit:
            return jobs, seq
    return jobs, None


def _count(state: State, tenant: str | None, query: str, response: pb.ListJobsResponse) -> None:
    """`state_counts` (every job state): from the index without a query, O(states); with one,
    of the tenant's newest LIST_QUERY_MAX_SCAN_JOBS jobs (`state_counts_partial` if it has
    more)."""
    index = state.job_index
    if not query:
        for job_state in JobState:
            response.state_counts[job_state.name] = index.count(tenant, job_state)
        return
    counts = [0] * len(JobState)
    scan = index.order(tenant, None).newest_before(None)
    for _, job_id in islice(scan, limits.LIST_QUERY_MAX_SCAN_JOBS):
        job = state.jobs[job_id]
        if _matches(job, query):
            counts[job.state] += 1
    for job_state in JobState:
        response.state_counts[job_state.name] = counts[job_state]
    response.state_counts_partial = index.count(tenant, None) > limits.LIST_QUERY_MAX_SCAN_JOBS


def _matches(job: Job, query: str) -> bool:
    """Whether the job's id or name contains `query` (casefolded), ignoring case."""
    return query in job.id.casefold() or query in job.spec.name.casefold()


def task_summary(task: Task, why: str = "", with_spans: bool = False,
                 job: Job | None = None) -> pb.TaskSummary:
    """`why`: the one reason a task that is not running waits (`waiting_reason`); `with_spans`:
    its latest `limits.TASK_SUMMARY_MAX_SPANS` attempts' times (a timeline's bars); `job`: its
    job, to name the for_each task an instance belongs to."""
    attempt = task.current
    queued = attempt is not None and attempt.state == AttemptState.QUEUED
    shown = AttemptState.QUEUED.name if queued and task.state == TaskState.ASSIGNED \
        else task.state.name
    summary = pb.TaskSummary(task_id=task.spec.id, state=shown,
                             attempts=len(task.attempts), reason=why or task.reason,
                             depends_on=task.spec.depends_on)
    if task.instances is not None:
        summary.instances = len(task.instances)
    if task.instance_of >= 0 and job is not None:
        summary.instance_of = job.tasks[task.instance_of].spec.id
    if with_spans:
        summary.spans.extend(attempt_span(a)
                             for a in task.attempts[-limits.TASK_SUMMARY_MAX_SPANS:])
    if attempt is not None:
        summary.cluster = attempt.cluster_id
        summary.fence = attempt.fence
        if attempt.exit_code is not None:
            summary.exit_code = attempt.exit_code
    return summary


def attempt_span(attempt: Attempt) -> pb.AttemptSpan:
    return pb.AttemptSpan(fence=attempt.fence, number=attempt.number,
                          cluster=attempt.cluster_id, state=attempt.state.name,
                          assigned_ms=attempt.assigned_ms, started_ms=attempt.started_ms or 0,
                          finished_ms=attempt.finished_ms or 0)


def list_tasks(state: State, job_id: str, with_spans: bool = False) -> pb.ListTasksResponse:
    """Every task with, for those waiting, the one reason why (the same words as `task
    explain`'s summary). O(tasks) plus O(clusters) per distinct task shape that waits, plus
    O(tasks x TASK_SUMMARY_MAX_SPANS) `with_spans`."""
    job = job_of(state, job_id)
    cache: dict[object, str] = {}
    return pb.ListTasksResponse(job_id=job.id, tasks=[
        task_summary(t, waiting_reason(state, job, t, cache), with_spans, job)
        for t in display_order(job)])


def display_order(job: Job) -> list[Task]:
    """The job's tasks in spec order, each expanded for_each task followed by its instances."""
    ordered: list[Task] = []
    for task in job.tasks[:len(job.spec.tasks)]:
        ordered.append(task)
        if task.instances:
            ordered.extend(job.tasks[index] for index in task.instances)
    return ordered


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
        if a.outputs is not None:
            record.outputs = a.outputs
        attempts.append(record)
    notes = [pb.ReportNote(kind=n.kind, fence=n.fence, report=n.report, at_ms=n.at_ms,
                           detail=n.detail) for n in task.notes]
    history = pb.TaskHistory(
        job_id=job.id, task_id=task.spec.id, state=task.state.name, reason=task.reason,
        attempts=attempts, notes=notes, notes_dropped=task.notes_dropped,
        app_failures=task.app_failures, infra_failures=task.infra_failures,
    )
    kept = kept_outputs(job, task.spec.id)  # a for_each task's: its instances', as a list
    if kept is not None:
        history.outputs = kept or NO_OUTPUTS
    if task.instances is not None:
        history.instances.extend(job.tasks[index].spec.id for index in task.instances)
    if task.instance_of >= 0:
        history.instance_of = job.tasks[task.instance_of].spec.id
    return history


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
        queued = _queued_words(cluster, attempt)
        if queued:
            return queued
        return f"{task.state.name.lower()} on {cluster.id} (fence {attempt.fence}, cluster " \
               f"{cluster.status.name})"
    return f"{task.state.name}: {task.reason}" if task.reason else task.state.name


def _queued_words(cluster: Cluster, attempt: Attempt) -> str:
    """Where a queued attempt (late binding) stands, or "" for one that is not queued."""
    if attempt.fence in cluster.withdrawing:
        return (f"being withdrawn from {cluster.id}'s queue (fence {attempt.fence}) for a task "
                "of a higher priority: it goes back to the ready queue unless it started")
    if attempt.fence in cluster.queued:
        place = list(cluster.queued).index(attempt.fence) + 1
        held = "held in" if attempt.state == AttemptState.QUEUED else "sent to"
        return (f"queued on {cluster.id} (fence {attempt.fence}): {held} its agent's queue, "
                f"place {place} of {len(cluster.queued)}; it starts the moment a slot frees "
                "there")
    if attempt.state == AttemptState.QUEUED:
        return (f"queued on {cluster.id} (fence {attempt.fence}): its room is free; it starts "
                "when its agent's next slot frees")
    return ""


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
        queue_depth=cluster.queue_depth, queued=len(cluster.queued),
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
    if task.state == TaskState.PENDING and task.instances is not None:
        return (f"waiting for its instances: {task.remaining_deps} of {len(task.instances)} "
                "not yet succeeded")
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
        return _no_room_reason(state, task)
    free = [c.id for c in fits if reserved_for_other(state, c, job, task) is None]
    if not free:
        return (f"runnable; it fits {', '.join(c.id for c in fits)} only, and each is reserved "
                "for a larger task that waited for room")
    ahead = _tenants_ahead(state, tenant)
    if ahead:
        return (f"runnable; fits now on {', '.join(free)}; tenant {tenant} is over its fair "
                f"share ({ahead}): tenants below their share go first")
    return f"runnable; fits now on {', '.join(free)} — placement is imminent"


def _no_room_reason(state: State, task: Task) -> str:
    """A task no cluster has room for now: whether an agent's local queue (late binding) takes
    it, or is full, or neither applies."""
    spec, now_ms = task.spec, state.now_ms
    clusters = sorted(state.clusters.values(), key=lambda c: c.id)
    queueable = [c.id for c in clusters if feasibility.fits_queue(spec, c, now_ms)]
    if queueable:
        return (f"runnable; no room now, but the agent's queue of {', '.join(queueable)} has a "
                "place: placement is imminent, and it starts there the moment a slot frees")
    full = [c.id for c in clusters if c.queue_depth and not spec.custom and feasibility.unfit(
        spec, c, c.cpu_milli, c.memory_mb, c.gpu, now_ms, c.custom) is None]
    if full:
        return (f"runnable; no room now and the agents' queues of {', '.join(full)} are full: "
                "it goes to the first slot or queue place that frees")
    return "runnable; no cluster can take it now (see the reasons per cluster)"


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
