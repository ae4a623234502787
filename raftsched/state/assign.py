"""Committing the leader's placements: each re-validated against the committed state (Nomad's plan
applier) and given a fresh fence, with the preemptions and reservations of the same plan."""

from __future__ import annotations

from raftsched import limits
from raftsched.state import feasibility, policy
from raftsched.state.commands import AssignBatch, Placement, Preemption, Reservation, Withdrawal
from raftsched.state.feasibility import Unfit, unfit_committed
from raftsched.state.lifecycle import end_attempt, hold_room
from raftsched.state.model import (
    A_ASSIGNED,
    A_QUEUED,
    T_ASSIGNED,
    T_RUNNABLE,
    Attempt,
    AttemptState,
    Job,
    State,
    Task,
    TimerKind,
)
from raftsched.state.outcome import Applied
from raftsched.state.queries import reservation_holder, reserved_for_other
from raftsched.state.queues import (
    make_runnable,
    note_attempt,
    observe_wait,
    push_timer,
    release_reservation,
    set_state,
)
from raftsched.state.results import Assigned, AssignResult, Dropped, DropReason


def apply_assign_batch(state: State, cmd: AssignBatch) -> Applied[AssignResult]:
    """Re-validate every placement against the committed state (Nomad's plan applier): parts
    that no longer hold are dropped with a reason, the rest get fresh fences."""
    assigned: list[Assigned] = []
    dropped: list[Dropped] = []
    preempted = tuple(p.fence for p in cmd.preemptions if _preempt(state, p))
    withdrawing = tuple(w.fence for w in cmd.withdrawals if _withdraw(state, w))
    for placement in cmd.items:
        outcome = _assign_one(state, placement, cmd.now_ms)
        if type(outcome) is int:
            assigned.append((placement, outcome))
        else:
            assert isinstance(outcome, Dropped)
            dropped.append(outcome)
    for reservation in cmd.reservations:  # after the items: one may free a cluster's holder
        _reserve(state, reservation, cmd.now_ms)
    stats = state.stats
    stats.placements += len(assigned)
    stats.preemptions += len(preempted)
    for drop in dropped:
        name = drop.reason.name.lower()
        stats.dropped[name] = stats.dropped.get(name, 0) + 1
    return Applied(AssignResult(tuple(assigned), tuple(dropped), preempted, withdrawing))


def _preempt(state: State, preemption: Preemption) -> bool:
    """Stop a running attempt to make room for a RUNNABLE task of a higher priority class.
    Refused, changing nothing, unless the attempt is its task's current live one, its job is
    preemptible and of a lower class than the task it makes room for, the victim was preempted
    fewer than MAX_PREEMPTIONS_PER_TASK times, and the rate bound allows one more. The victim's
    task goes back to the queue at once, at no cost to either retry budget; the agent gets a
    kill directive (SIGTERM, the task's grace, SIGKILL)."""
    found = _task_and_taker(state, preemption.job_id, preemption.task_id, preemption.by_job_id,
                            preemption.by_task_id)
    if found is None:
        return False
    job, task, by_job, by_task = found
    attempt = task.current
    if attempt is None or attempt.fence != preemption.fence or not attempt.live \
            or by_task.state != T_RUNNABLE or not policy.may_preempt(by_job.spec, job.spec, task) \
            or policy.preemption_budget(state, state.now_ms) <= 0:
        return False
    end_attempt(state, job, task, attempt, AttemptState.PREEMPTED,
                f"preempted to make room for {by_job.id}/{by_task.spec.id} (priority class "
                f"{by_job.spec.priority_class.value})", kill=True)
    task.preemptions += 1
    make_runnable(state, job, task)
    state.preempted_ms.append(state.now_ms)
    while len(state.preempted_ms) > policy.MAX_PREEMPTIONS_PER_WINDOW:
        state.preempted_ms.popleft()
    return True


def _task_and_taker(state: State, job_id: str, task_id: str, by_job_id: str,
                    by_task_id: str) -> tuple[Job, Task, Job, Task] | None:
    """The task a preemption or withdrawal takes from and the task it is for, or None when
    either is not in the state."""
    job, by_job = state.jobs.get(job_id), state.jobs.get(by_job_id)
    index = None if job is None else job.index_of.get(task_id)
    by_index = None if by_job is None else by_job.index_of.get(by_task_id)
    if job is None or by_job is None or index is None or by_index is None:
        return None
    return job, job.tasks[index], by_job, by_job.tasks[by_index]


def _withdraw(state: State, withdrawal: Withdrawal) -> bool:
    """Ask a cluster's agent to take back a queued attempt (late binding) for a RUNNABLE task of
    a higher priority (`policy.may_withdraw`). Refused, changing nothing, unless the attempt is
    its task's current one, committed beyond its cluster's room and not started, and not
    already being withdrawn. Its queue place is free to this batch's items at once; the attempt
    ends when the agent answers WITHDRAWN, or stays if the agent answers STARTED."""
    found = _task_and_taker(state, withdrawal.job_id, withdrawal.task_id, withdrawal.by_job_id,
                            withdrawal.by_task_id)
    if found is None:
        return False
    job, task, by_job, by_task = found
    attempt = task.current
    if attempt is None or attempt.fence != withdrawal.fence \
            or attempt.state not in (A_ASSIGNED, A_QUEUED) \
            or by_task.state != T_RUNNABLE or not policy.may_withdraw(by_job.spec, job.spec, task):
        return False
    cluster = state.clusters[attempt.cluster_id]
    if attempt.fence not in cluster.queued or attempt.fence in cluster.withdrawing:
        return False
    cluster.withdrawing[attempt.fence] = (job.id, task.spec.id)
    return True


def _reserve(state: State, reservation: Reservation, now_ms: int) -> bool:
    """Keep a cluster for a RUNNABLE task (moving the task's reservation, if it held one).
    Refused, changing nothing, when either is gone, the task is not RUNNABLE, could never fit
    that cluster, or the cluster is kept for another task."""
    job = state.jobs.get(reservation.job_id)
    index = None if job is None else job.index_of.get(reservation.task_id)
    cluster = state.clusters.get(reservation.cluster_id)
    if job is None or index is None or cluster is None:
        return False
    task = job.tasks[index]
    if task.state != T_RUNNABLE or reservation_holder(state, cluster) is not None \
            or feasibility.never_fits(task.spec, cluster):
        return False
    if cluster.reserved_for is not None:  # a holder that no longer fits here: void
        holder_job, holder_index = cluster.reserved_for
        release_reservation(state, state.jobs[holder_job].tasks[holder_index])
    release_reservation(state, task)
    cluster.reserved_for = (job.id, index)
    cluster.reserved_since_ms = now_ms
    task.reserved_on = cluster.id
    return True


def _assign_one(state: State, placement: Placement, now_ms: int) -> int | Dropped:
    """The new fence, or why the placement was dropped."""
    job = state.jobs.get(placement.job_id)
    if job is None:
        return _dropped(placement, DropReason.JOB_NOT_FOUND, "job not found")
    index = job.index_of.get(placement.task_id)
    if index is None:
        return _dropped(placement, DropReason.TASK_NOT_FOUND, "task not found")
    task = job.tasks[index]
    if task.state != T_RUNNABLE:
        return _dropped(placement, DropReason.TASK_NOT_RUNNABLE,
                        f"task is {task.state.name}, not RUNNABLE")
    cluster = state.clusters.get(placement.cluster_id)
    if cluster is None:
        return _dropped(placement, DropReason.CLUSTER_NOT_REGISTERED, "cluster not registered")
    spec = task.spec
    if placement.queued:  # the planner's choice: the queue, whatever the committed room
        queued = True
        if not feasibility.fits_queue(spec, cluster, now_ms):
            why = feasibility.explain_queue(spec, cluster, now_ms)
            return _dropped(placement, why.reason, why.detail)
    else:
        unfit = unfit_committed(spec, cluster, now_ms)
        queued = unfit is Unfit.NO_ROOM and feasibility.fits_queue(spec, cluster, now_ms)
        if unfit is not None and not queued:
            infeasible = feasibility.explain_committed(spec, cluster, now_ms)
            assert infeasible is not None
            return _dropped(placement, infeasible.reason, infeasible.detail)
    reserved = reserved_for_other(state, cluster, job, task)
    if reserved is not None:
        return _dropped(placement, DropReason.CLUSTER_RESERVED, reserved)
    if policy.at_running_limit(state, job.spec.tenant):
        return _dropped(placement, DropReason.TENANT_AT_LIMIT,
                        f"tenant {job.spec.tenant} runs its max_running="
                        f"{policy.policy_of(state, job.spec.tenant).max_running} tasks")
    state.fence += 1
    fence = state.fence
    observe_wait(state.stats, now_ms - task.ready_ms)
    state.aged_assigned.young.append((now_ms, job.id, index, fence))
    attempt = Attempt(fence=fence, number=len(task.attempts) + 1, cluster_id=cluster.id,
                      state=A_ASSIGNED, assigned_ms=now_ms)
    task.attempts.append(attempt)
    if state.changes is not None:
        note_attempt(state.changes, job, task, attempt, now_ms)
    cluster.live[fence] = (job.id, index)
    if job.spec.preemptible:
        cluster.preemptible[fence] = (job.id, index)
    if queued:  # late binding: its agent holds it until a slot frees; it holds no room yet
        cluster.queued[fence] = (job.id, index)
    else:
        hold_room(cluster, spec)
    usage = state.usage[job.spec.tenant]
    usage.cpu_milli += spec.cpu_milli
    usage.memory_mb += spec.memory_mb
    usage.gpu += spec.gpu
    set_state(state, job, task, T_ASSIGNED)
    push_timer(state, now_ms + limits.ASSIGN_TIMEOUT_MS, fence, TimerKind.ASSIGN_TIMEOUT,
               job.id, index)
    if job.started_ms is None:
        job.started_ms = now_ms
    return fence


def _dropped(placement: Placement, reason: DropReason | Unfit, detail: str) -> Dropped:
    return Dropped(placement, reason, detail)
