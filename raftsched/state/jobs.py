"""Jobs entering and leaving by request: submit (idempotency, bounds, schedulability, the job's
tasks and ready queue) and cancel."""

from __future__ import annotations

from raftsched import limits, topology
from raftsched.errors import Code
from raftsched.spec.model import JobSpec, SpecError
from raftsched.spec.wire import decode_trusted
from raftsched.state import feasibility, policy
from raftsched.state.commands import JobCancel, JobSubmit, JobSubmitBatch
from raftsched.state.lifecycle import cancel_open_tasks, upstream_done
from raftsched.state.model import (
    T_PENDING,
    TERMINAL_JOB_STATES,
    Job,
    JobState,
    ReadyQueue,
    State,
    Task,
    TaskShape,
    TaskState,
    TenantUsage,
    shape_of,
)
from raftsched.state.outcome import Applied, Rejected
from raftsched.state.queues import count_new_tasks, note_job
from raftsched.state.results import JobCancelled, JobRefused, JobsSubmitted, JobSubmitted
from raftsched.state.retention import FORGOTTEN_FOR_ROOM, forget_job, remember_key
from raftsched.state.shards import shard_problem
from raftsched.state.text import visible


def apply_job_submit(state: State, cmd: JobSubmit) -> Applied[JobSubmitted] | Rejected:
    # The leader validated the spec before proposing it (only replicas write the log, through
    # its proposal path): apply decodes it without proving the user-facing rules again, yet
    # refuses any shape that could crash it or break an invariant (`decode_trusted`).
    try:
        spec = decode_trusted(cmd.spec)
    except SpecError as exc:
        return Rejected(Code.INVALID_ARGUMENT, "; ".join(i.render() for i in exc.issues))
    return submit_spec(state, cmd.job_id, spec, cmd.now_ms)


def submit_spec(state: State, job_id: str, spec: JobSpec, now_ms: int,
                schedule: tuple[str, int] | None = None) -> Applied[JobSubmitted] | Rejected:
    """A validated spec's submit (a JOB_SUBMIT's, a schedule's run's: `schedule` is its
    (schedule id, nominal ms)): idempotency, bounds, schedulability, then the job."""
    shard = topology.shard_of_job_id(job_id) if schedule is None else None
    if shard is not None and (refused := shard_problem(state, shard)) is not None:
        return refused  # another group's shard, or one moving: never two groups' job
    # The digest only serves idempotency; hashing a 100,000-task spec is not free.
    digest = spec.digest() if spec.idempotency_key is not None else b""
    if spec.idempotency_key is not None:
        record = state.idempotency.get((spec.tenant, spec.idempotency_key))
        if record is not None:
            if record.digest != digest:
                return Rejected(
                    Code.ALREADY_EXISTS,
                    f"idempotency key {spec.idempotency_key!r} of tenant {spec.tenant!r} was used "
                    f"for job {record.job_id} with a different spec",
                )
            return Applied(JobSubmitted(record.job_id, created=False))
    refusal = _check_submit_bounds(state, job_id, spec) or _check_unschedulable(state, spec)
    if refusal is not None:
        return refusal
    job = _create_job(state, job_id, spec, digest, now_ms, schedule)
    if spec.idempotency_key is not None:
        remember_key(state, spec.tenant, spec.idempotency_key, job.id, digest)
    return Applied(JobSubmitted(job.id, created=True))


def apply_job_submit_batch(state: State, cmd: JobSubmitBatch) -> Applied[JobsSubmitted]:
    """Each job exactly as its own JOB_SUBMIT, in order, each with its answer: a refused job
    leaves nothing behind and refuses no other (a later job with an earlier one's key and spec
    is that job, `created=False`)."""
    answers: list[JobSubmitted | JobRefused] = []
    for job_id, spec in cmd.items:
        outcome = apply_job_submit(state, JobSubmit(job_id, spec, cmd.now_ms))
        if isinstance(outcome, Rejected):
            answers.append(JobRefused(outcome.code, outcome.reason, outcome.retry_after_ms))
        else:
            answers.append(outcome.result)
    return Applied(JobsSubmitted(tuple(answers)))


def _check_submit_bounds(state: State, job_id: str, spec: JobSpec) -> Rejected | None:
    """The job id, then `policy.admission_refusal` (the rule the leader also checks before
    proposing): the state's bounds — room is made by forgetting the oldest finished jobs —
    then the queue limits (RESOURCE_EXHAUSTED, with a retry-after hint)."""
    if not job_id:
        return Rejected(Code.INVALID_ARGUMENT, "job_id: must not be empty")
    if job_id in state.jobs:
        return Rejected(Code.ALREADY_EXISTS, f"job {job_id} already exists")
    refusal = policy.bounds_refusal(state, spec.tenant, len(spec.tasks))
    if refusal is None:
        while len(state.jobs) >= limits.MAX_RETAINED_JOBS:
            assert state.finished_jobs, "bounds_refusal leaves finished jobs to forget"
            forget_job(state, state.finished_jobs[0][1], FORGOTTEN_FOR_ROOM)
        refusal = policy.submit_refusal(state, spec.tenant, len(spec.tasks))
    if refusal is None:
        return None
    return Rejected(Code.RESOURCE_EXHAUSTED, refusal.reason, refusal.retry_after_ms)


def _check_unschedulable(state: State, spec: JobSpec) -> Rejected | None:
    """Unless the job allows it, a task no registered cluster could ever take
    (FAILED_PRECONDITION)."""
    if spec.allow_unschedulable:
        return None
    return _unschedulable(state, spec)


def _unschedulable(state: State, spec: JobSpec) -> Rejected | None:
    """The first task no registered cluster could take even empty. Tasks of one shape share
    the answer, so a job costs O(shapes x clusters), and stops at the first refusal."""
    seen: set[TaskShape] = set()
    clusters = sorted(state.clusters.values(), key=lambda c: (-c.cpu_milli, c.id))
    for task in spec.tasks:
        shape = shape_of(task)
        if shape in seen:
            continue
        seen.add(shape)
        problem = feasibility.unschedulable(task, clusters)
        if problem is not None:
            return Rejected(Code.FAILED_PRECONDITION,
                            f"task {task.id} {problem} (set allow_unschedulable: true to queue "
                            f"the job anyway: it waits until such a cluster registers)")
    return None


def _create_job(state: State, job_id: str, spec: JobSpec, digest: bytes, now_ms: int,
                schedule: tuple[str, int] | None) -> Job:
    index_of = {t.id: i for i, t in enumerate(spec.tasks)}
    tasks = [
        Task(spec=t, index=i, state=T_PENDING, remaining_deps=len(t.depends_on), dependents=[])
        for i, t in enumerate(spec.tasks)
    ]
    for task in tasks:
        for dep in task.spec.depends_on:
            tasks[index_of[dep]].dependents.append(task.index)
    job = Job(id=job_id, seq=state.next_job_seq, spec=spec, digest=digest, tasks=tasks,
              index_of=index_of, counts=[0] * len(TaskState), state=JobState.PENDING,
              submitted_ms=now_ms)
    state.next_job_seq += 1
    state.jobs[job_id] = job
    state.job_index.add(spec.tenant, JobState.PENDING, job.seq, job_id)
    if state.changes is not None:
        note_job(state.changes, job, now_ms)
    state.live_jobs += 1
    state.queues.setdefault(spec.tenant, ReadyQueue())
    state.usage.setdefault(spec.tenant, TenantUsage())
    count_new_tasks(state, job, len(tasks))
    if schedule is not None:
        job.schedule_id, job.nominal_ms = schedule
    for task in tasks:
        if task.remaining_deps == 0 and task.state == T_PENDING:  # not failed by fail_fast
            upstream_done(state, job, task)
    return job


def apply_job_cancel(state: State, cmd: JobCancel) -> Applied[JobCancelled] | Rejected:
    job = state.jobs.get(cmd.job_id)
    if job is None:
        return Rejected(Code.NOT_FOUND, f"job {cmd.job_id} not found")
    if job.state in TERMINAL_JOB_STATES:
        if job.state == JobState.CANCELLED:
            return Applied(JobCancelled(job.id, cancelled=0, changed=False))
        return Rejected(Code.FAILED_PRECONDITION, f"job {job.id} is already {job.state.name}")
    job.cancel_requested = True
    job.reason = visible(cmd.reason)[:limits.MAX_REASON_CHARS] or "cancelled by request"
    cancelled = cancel_open_tasks(state, job, f"job cancelled: {job.reason}")
    return Applied(JobCancelled(job.id, cancelled=cancelled, changed=True))
