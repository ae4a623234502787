"""What is learned about attempts: agents' reports (accepted only from the current attempt's fence;
late, duplicate and misdirected ones noted and refused) and an operator's confirmation that an
attempt is dead."""

from __future__ import annotations

from raftsched import limits
from raftsched.errors import Code
from raftsched.protocol import ReportVerdict
from raftsched.state.commands import AttemptMarkLost, Report, ReportBatch, ReportKind
from raftsched.state.lifecycle import (
    end_attempt,
    finish_attempt,
    finished_state,
    infra_failure,
    mark_started,
)
from raftsched.state.model import (
    A_QUEUED,
    A_RUNNING,
    LIVE_ATTEMPT_STATES,
    Attempt,
    AttemptState,
    Job,
    Note,
    State,
    Task,
)
from raftsched.state.outcome import Applied, Rejected
from raftsched.state.queries import find_attempt
from raftsched.state.queues import make_runnable, note_attempt
from raftsched.state.results import MarkedLost, ReportResult

_NOT_GONE = frozenset({ReportKind.STARTED, ReportKind.QUEUED})
"""Reports that say the attempt's process is not gone (so they confirm no kill directive)."""


def apply_report_batch(state: State, cmd: ReportBatch) -> Applied[ReportResult]:
    """Each item's verdict: accepted, duplicate, late, or refused (not found / wrong cluster).
    Every verdict is final: the agent may drop the report from its outbox once committed."""
    cluster_id, now_ms, entropy = cmd.cluster_id, cmd.now_ms, cmd.entropy
    verdicts = tuple([_report_one(state, cluster_id, report, now_ms, entropy + index)
                      for index, report in enumerate(cmd.items)])
    counted = state.stats.reports
    for verdict in verdicts:
        counted[verdict] = counted.get(verdict, 0) + 1
    return Applied(ReportResult(verdicts))


def _report_one(state: State, cluster_id: str, report: Report, now_ms: int, entropy: int,
                ) -> ReportVerdict:
    job = state.jobs.get(report.job_id)
    index = None if job is None else job.index_of.get(report.task_id)
    if job is None or index is None:
        if report.kind not in _NOT_GONE:
            _confirm_kill(state, cluster_id, report)
        return ReportVerdict.NOT_FOUND
    task = job.tasks[index]
    attempt = find_attempt(task, report.fence)
    if attempt is None:
        return ReportVerdict.NOT_FOUND
    if attempt.cluster_id != cluster_id:
        return ReportVerdict.WRONG_CLUSTER
    if report.kind not in _NOT_GONE:
        _confirm_kill(state, cluster_id, report)  # the process is gone either way
    current = task.attempts[-1]
    if attempt is not current or attempt.state not in LIVE_ATTEMPT_STATES:
        return _note_stale(task, attempt, report, now_ms)
    if report.kind == ReportKind.STARTED:
        if attempt.state == A_RUNNING:
            return _note(task, ReportVerdict.DUPLICATE, report, now_ms, "already RUNNING")
        mark_started(state, job, task, attempt)
        return ReportVerdict.ACCEPTED
    if report.kind == ReportKind.QUEUED:
        return _queued(state, job, task, attempt, report, now_ms)
    if report.kind == ReportKind.WITHDRAWN:
        return _withdrawn(state, job, task, attempt, report, now_ms)
    if report.kind == ReportKind.REJECTED:
        if attempt.state == A_RUNNING:
            return _note(task, ReportVerdict.LATE, report, now_ms, "rejection of a RUNNING attempt")
        end_attempt(state, job, task, attempt, AttemptState.REJECTED,
                    report.reason or "rejected by agent admission", kill=False)
        infra_failure(state, job, task, immediate=False, entropy=entropy)
        return ReportVerdict.ACCEPTED
    if report.kind == ReportKind.KILLED:
        end_attempt(state, job, task, attempt, AttemptState.PREEMPTED,
                    report.reason or "stopped by the agent", kill=False)
        infra_failure(state, job, task, immediate=True, entropy=entropy)
        return ReportVerdict.ACCEPTED
    finish_attempt(state, job, task, attempt, report, entropy)
    return ReportVerdict.ACCEPTED


def _queued(state: State, job: Job, task: Task, attempt: Attempt, report: Report,
            now_ms: int) -> ReportVerdict:
    """The agent holds the attempt in its local queue: QUEUED (the answer to the assignment:
    no ASSIGN_TIMEOUT from now on, and no redelivery). Late once it runs."""
    if attempt.state == A_QUEUED:
        return _note(task, ReportVerdict.DUPLICATE, report, now_ms, "already QUEUED")
    if attempt.state == A_RUNNING:
        return _note(task, ReportVerdict.LATE, report, now_ms, "QUEUED of a RUNNING attempt")
    attempt.state = A_QUEUED
    if state.changes is not None:
        note_attempt(state.changes, job, task, attempt, now_ms)
    return ReportVerdict.ACCEPTED


def _withdrawn(state: State, job: Job, task: Task, attempt: Attempt, report: Report,
               now_ms: int) -> ReportVerdict:
    """The agent dropped a queued attempt it was asked to withdraw: it ends, and its task goes
    back to its ready queue at no cost. Late for one that runs or was not being withdrawn."""
    cluster = state.clusters[attempt.cluster_id]
    if attempt.state == A_RUNNING:
        return _note(task, ReportVerdict.LATE, report, now_ms, "WITHDRAWN of a RUNNING attempt")
    if attempt.fence not in cluster.withdrawing:
        return _note(task, ReportVerdict.LATE, report, now_ms,
                     "WITHDRAWN of an attempt that was not being withdrawn")
    end_attempt(state, job, task, attempt, AttemptState.WITHDRAWN,
                report.reason or f"withdrawn from {cluster.id}'s queue for a task of a higher "
                                 "priority", kill=False)
    make_runnable(state, job, task)
    return ReportVerdict.ACCEPTED


def _note_stale(task: Task, attempt: Attempt, report: Report, now_ms: int) -> ReportVerdict:
    if attempt is task.attempts[-1] and _same_outcome(attempt, report):
        return _note(task, ReportVerdict.DUPLICATE, report, now_ms,
                     f"attempt already {attempt.state.name}")
    detail = f"attempt {attempt.number} is {attempt.state.name}"
    if attempt is not task.attempts[-1]:
        detail += f"; current fence is {task.attempts[-1].fence}"
    if report.outputs:
        detail += f"; its outputs ({len(report.outputs)} characters) refused"
    return _note(task, ReportVerdict.LATE, report, now_ms, detail)


def _same_outcome(attempt: Attempt, report: Report) -> bool:
    if report.kind == ReportKind.FINISHED:
        return attempt.state == finished_state(report) and attempt.exit_code == report.exit_code
    if report.kind == ReportKind.REJECTED:
        return attempt.state == AttemptState.REJECTED
    if report.kind == ReportKind.KILLED:
        return attempt.state == AttemptState.PREEMPTED
    if report.kind == ReportKind.WITHDRAWN:
        return attempt.state == AttemptState.WITHDRAWN
    return False


def _note(task: Task, kind: ReportVerdict, report: Report, now_ms: int,
          detail: str) -> ReportVerdict:
    if len(task.notes) < limits.MAX_NOTES_PER_TASK:
        task.notes.append(Note(kind.value, report.fence, report.kind.name, now_ms, detail))
    else:
        task.notes_dropped += 1
    return kind


def _confirm_kill(state: State, cluster_id: str, report: Report) -> None:
    cluster = state.clusters.get(cluster_id)
    if cluster is not None and cluster.kills.pop(report.fence, None) is not None:
        state.kill_count -= 1


def apply_attempt_mark_lost(state: State, cmd: AttemptMarkLost) -> Applied[MarkedLost] | Rejected:
    job = state.jobs.get(cmd.job_id)
    index = None if job is None else job.index_of.get(cmd.task_id)
    if job is None or index is None:
        return Rejected(Code.NOT_FOUND, f"task {cmd.job_id}/{cmd.task_id} not found")
    task = job.tasks[index]
    attempt = task.current
    if attempt is None or attempt.fence != cmd.fence:
        return Rejected(Code.FAILED_PRECONDITION,
                        f"fence {cmd.fence} is not the current attempt of {cmd.task_id}")
    if attempt.state not in LIVE_ATTEMPT_STATES:
        return Rejected(Code.FAILED_PRECONDITION, f"attempt is already {attempt.state.name}")
    end_attempt(state, job, task, attempt, AttemptState.LOST,
                cmd.reason or "confirmed dead by an operator", kill=True)
    infra_failure(state, job, task, immediate=True, entropy=0)
    return Applied(MarkedLost(job.id, task.spec.id, cmd.fence))
