"""Schedules (issue 25): create, pause/resume, delete, fire and backfill.

Exactly once per nominal time: a fire's nominal times must lie strictly after the schedule's
`last_nominal_ms`, and the entry that fires them advances it and creates each run's job, whose
id and idempotency key derive from (schedule, nominal time) (`schedule_times.run_job_id`). A
new leader, a retried proposal or a restored snapshot therefore cannot fire a time twice: the
repeat is refused and changes nothing. Apply never evaluates the rule (no tzdata): the leader
computes the times; apply checks them (after the last, not after now, inside start/end, on an
interval's grid). Overlap, the catch-up window and pause_after_failures are decided here, from
the state alone."""

from __future__ import annotations

import dataclasses

from raftsched import limits
from raftsched.errors import Code
from raftsched.protocol import id_problem
from raftsched.spec.model import SpecError
from raftsched.spec.wire import decode_trusted, validate_wire
from raftsched.state.commands import (
    JobCancel,
    ScheduleBackfill,
    ScheduleCreate,
    ScheduleDelete,
    ScheduleFire,
    ScheduleSet,
)
from raftsched.state.jobs import apply_job_cancel, submit_spec
from raftsched.state.model import JobState, Overlap, Schedule, State
from raftsched.state.outcome import Applied, Rejected
from raftsched.state.results import (
    ScheduleBackfilled,
    ScheduleCreated,
    ScheduleDeleted,
    ScheduleFired,
    ScheduleSetResult,
)
from raftsched.state.schedule_times import aligned, job_live, run_job_id, stamp
from raftsched.state.text import visible

_OVERLAPS = {o.value: o for o in Overlap}


def apply_schedule_create(state: State, cmd: ScheduleCreate) -> Applied[ScheduleCreated] | Rejected:
    refusal = _create_refusal(cmd)
    if refusal is not None:
        return refusal
    try:
        spec = validate_wire(cmd.spec)
    except SpecError as exc:
        return Rejected(Code.INVALID_ARGUMENT, "; ".join(i.render() for i in exc.issues))
    existing = state.schedules.get(cmd.schedule_id)
    if existing is not None:
        if existing.spec == cmd.spec and existing.rule == cmd.rule:
            return Applied(ScheduleCreated(existing.id, created=False))
        return Rejected(Code.ALREADY_EXISTS, f"schedule {cmd.schedule_id} already exists")
    refusal = _count_refusal(state, spec.tenant)
    if refusal is not None:
        return refusal
    state.schedules[cmd.schedule_id] = Schedule(
        id=cmd.schedule_id, tenant=spec.tenant, spec=cmd.spec, rule=cmd.rule,
        every_ms=cmd.every_ms, start_at_ms=cmd.start_at_ms, end_at_ms=cmd.end_at_ms,
        overlap=_OVERLAPS[cmd.overlap], catchup_window_ms=cmd.catchup_window_ms,
        pause_after_failures=cmd.pause_after_failures, created_ms=cmd.now_ms,
        last_nominal_ms=cmd.now_ms,
    )
    return Applied(ScheduleCreated(cmd.schedule_id, created=True))


def _create_refusal(cmd: ScheduleCreate) -> Rejected | None:
    problem = id_problem(cmd.schedule_id)
    if problem is not None:
        return Rejected(Code.INVALID_ARGUMENT, f"schedule_id: {problem}")
    if len(cmd.schedule_id) > limits.MAX_SCHEDULE_ID_CHARS:
        return Rejected(Code.INVALID_ARGUMENT,
                        f"schedule_id: must be at most {limits.MAX_SCHEDULE_ID_CHARS} characters "
                        f"(MAX_SCHEDULE_ID_CHARS: its runs' job ids add a time), got "
                        f"{len(cmd.schedule_id)}")
    if cmd.overlap not in _OVERLAPS:
        return Rejected(Code.INVALID_ARGUMENT, f"overlap: {cmd.overlap!r} is not one of "
                                               f"{', '.join(_OVERLAPS)}")
    if cmd.end_at_ms and cmd.end_at_ms <= cmd.start_at_ms:
        return Rejected(Code.INVALID_ARGUMENT, "end_at: must be after start_at")
    return None


def _count_refusal(state: State, tenant: str) -> Rejected | None:
    if len(state.schedules) >= limits.MAX_SCHEDULES:
        return Rejected(Code.RESOURCE_EXHAUSTED,
                        f"the cluster holds MAX_SCHEDULES={limits.MAX_SCHEDULES} schedules")
    mine = sum(1 for s in state.schedules.values() if s.tenant == tenant)
    if mine >= limits.MAX_SCHEDULES_PER_TENANT:
        return Rejected(Code.RESOURCE_EXHAUSTED,
                        f"tenant {tenant!r} holds MAX_SCHEDULES_PER_TENANT="
                        f"{limits.MAX_SCHEDULES_PER_TENANT} schedules")
    return None


def apply_schedule_set(state: State, cmd: ScheduleSet) -> Applied[ScheduleSetResult] | Rejected:
    schedule = state.schedules.get(cmd.schedule_id)
    if schedule is None:
        return Rejected(Code.NOT_FOUND, f"schedule {cmd.schedule_id} not found")
    changed = schedule.paused != cmd.paused
    if cmd.paused:
        schedule.note = visible(cmd.note)[:limits.MAX_SCHEDULE_NOTE_CHARS] or "paused by request"
    elif changed:
        # Nothing from the paused span fires (only a backfill runs it).
        schedule.last_nominal_ms = max(schedule.last_nominal_ms, cmd.now_ms)
        schedule.consecutive_failures = 0
        schedule.note = visible(cmd.note)[:limits.MAX_SCHEDULE_NOTE_CHARS]
    schedule.paused = cmd.paused
    return Applied(ScheduleSetResult(schedule.id, schedule.paused, changed))


def apply_schedule_delete(state: State, cmd: ScheduleDelete) -> Applied[ScheduleDeleted] | Rejected:
    if state.schedules.pop(cmd.schedule_id, None) is None:
        return Rejected(Code.NOT_FOUND, f"schedule {cmd.schedule_id} not found")
    return Applied(ScheduleDeleted(cmd.schedule_id))


# --- fire -----------------------------------------------------------------------------------------


def apply_schedule_fire(state: State, cmd: ScheduleFire) -> Applied[ScheduleFired] | Rejected:
    schedule = state.schedules.get(cmd.schedule_id)
    if schedule is None:
        return Rejected(Code.NOT_FOUND, f"schedule {cmd.schedule_id} not found")
    refusal = _manual_refusal(cmd) if cmd.manual else _fire_refusal(schedule, cmd)
    if refusal is not None:
        return refusal
    _judge_runs(state, schedule)
    started: list[str] = []
    if cmd.manual:
        skipped = _start_run(state, schedule, cmd.nominals[0], cmd.now_ms, started, manual=True)
        return Applied(ScheduleFired(schedule.id, tuple(started), skipped))
    skipped = 0
    if cmd.missed:
        _skip(schedule, "catchup_window", cmd.missed)
        skipped += cmd.missed
        schedule.last_nominal_ms = cmd.missed_newest_ms
    skipped += _release_buffered(state, schedule, cmd.now_ms, started)
    for nominal in cmd.nominals:
        schedule.last_nominal_ms = nominal
        skipped += _fire_one(state, schedule, nominal, cmd.now_ms, started)
    _release_backfill(state, schedule, cmd.now_ms, started)
    return Applied(ScheduleFired(schedule.id, tuple(started), skipped))


def _manual_refusal(cmd: ScheduleFire) -> Rejected | None:
    if cmd.nominals != (cmd.now_ms,) or cmd.missed:
        return Rejected(Code.INVALID_ARGUMENT,
                        "a manual fire carries one time, its now_ms, and no missed times")
    return None


def _fire_refusal(schedule: Schedule, cmd: ScheduleFire) -> Rejected | None:
    """Every time the fire names is checked before anything changes."""
    after = schedule.last_nominal_ms
    if cmd.missed:
        newest = cmd.missed_newest_ms
        if newest <= after or not aligned(schedule, newest):
            return Rejected(Code.FAILED_PRECONDITION,
                            f"missed_newest_ms {newest} is not a fire time after {after}")
        if newest >= cmd.now_ms - schedule.catchup_window_ms:
            return Rejected(Code.INVALID_ARGUMENT,
                            f"missed_newest_ms {newest} is inside the catch-up window")
        after = newest
    if cmd.nominals and schedule.paused:
        return Rejected(Code.FAILED_PRECONDITION, f"schedule {schedule.id} is paused")
    for nominal in cmd.nominals:
        if nominal <= after:
            return Rejected(Code.FAILED_PRECONDITION,
                            f"nominal time {nominal} is not after {after} (fired already)")
        if nominal > cmd.now_ms:
            return Rejected(Code.INVALID_ARGUMENT,
                            f"nominal time {nominal} is after now_ms {cmd.now_ms}")
        if not aligned(schedule, nominal):
            return Rejected(Code.INVALID_ARGUMENT,
                            f"nominal time {nominal} is not a fire time of schedule "
                            f"{schedule.id} (start/end or the interval's grid)")
        after = nominal
    return None


def _fire_one(state: State, schedule: Schedule, nominal: int, now_ms: int,
              started: list[str]) -> int:
    """One due nominal time under the schedule's state and overlap policy; 1 when it started
    no run (skipped or buffered), else 0."""
    if schedule.paused:  # pause_after_failures paused it in this very entry
        _skip(schedule, "paused", 1)
        return 1
    if nominal < now_ms - schedule.catchup_window_ms:
        _skip(schedule, "catchup_window", 1)
        return 1
    if job_live(state, schedule.last_job_id):
        match schedule.overlap:
            case Overlap.SKIP:
                _skip(schedule, "overlap", 1)
                return 1
            case Overlap.BUFFER_ONE:
                if schedule.pending_ms:
                    _skip(schedule, "buffer_replaced", 1)
                schedule.pending_ms = nominal
                return 1
            case Overlap.CANCEL_OTHER:
                apply_job_cancel(state, JobCancel(schedule.last_job_id, now_ms,
                                                  f"schedule {schedule.id}: a newer run starts"))
    return _start_run(state, schedule, nominal, now_ms, started)


def _release_buffered(state: State, schedule: Schedule, now_ms: int,
                      started: list[str]) -> int:
    if not schedule.pending_ms or schedule.paused or job_live(state, schedule.last_job_id):
        return 0
    nominal, schedule.pending_ms = schedule.pending_ms, 0
    return _start_run(state, schedule, nominal, now_ms, started)


def _start_run(state: State, schedule: Schedule, nominal: int, now_ms: int,
               started: list[str], *, manual: bool = False, backfill: bool = False) -> int:
    """Create the run's job through the submit path; 0 when it started, 1 when refused (a
    full queue, no cluster could take it: counted as a failed run)."""
    job_id = run_job_id(schedule.id, nominal, manual)
    # validated in full when the schedule was created: each run only decodes it (as JOB_SUBMIT)
    spec = dataclasses.replace(decode_trusted(schedule.spec), idempotency_key=job_id)
    outcome = submit_spec(state, job_id, spec, now_ms, (schedule.id, nominal))
    if isinstance(outcome, Rejected):
        _skip(schedule, "refused", 1)
        schedule.consecutive_failures += 1
        note = f"the run at {stamp(nominal)} was refused: {outcome.reason}"
        schedule.note = note[:limits.MAX_SCHEDULE_NOTE_CHARS]
        _pause_if_failing(schedule)
        return 1
    if not outcome.result.created:  # its job exists already (a job retention forgot keeps
        _skip(schedule, "exists", 1)  # its key): never a second run of one time
        return 1
    started.append(job_id)
    schedule.fired += 1
    schedule.runs.append((nominal, job_id))
    while len(schedule.runs) > limits.MAX_SCHEDULE_RUNS_KEPT:
        schedule.runs.popleft()
    if backfill:
        schedule.backfill_live.append(job_id)
    elif not manual:
        schedule.last_job_id = job_id
    return 0


def _skip(schedule: Schedule, reason: str, count: int) -> None:
    schedule.skipped[reason] = schedule.skipped.get(reason, 0) + count


def _judge_runs(state: State, schedule: Schedule) -> None:
    """Count the runs that ended since the last look, oldest first, stopping at a live one: a
    FAILED run adds a consecutive failure, a SUCCEEDED one clears them (a CANCELLED one or
    one retention forgot does neither). Enough of them pause the schedule."""
    for nominal, job_id in schedule.runs:
        if nominal <= schedule.judged_ms:
            continue
        job = state.jobs.get(job_id)
        if job is not None and job_live(state, job_id):
            break
        schedule.judged_ms = nominal
        if job is not None and job.state == JobState.FAILED:
            schedule.consecutive_failures += 1
        elif job is not None and job.state == JobState.SUCCEEDED:
            schedule.consecutive_failures = 0
    _pause_if_failing(schedule)


def _pause_if_failing(schedule: Schedule) -> None:
    limit = schedule.pause_after_failures
    if limit and not schedule.paused and schedule.consecutive_failures >= limit:
        schedule.paused = True
        schedule.note = (f"paused after {schedule.consecutive_failures} consecutive failed runs "
                         f"(pause_after_failures: {limit})")


# --- backfill -------------------------------------------------------------------------------------


def apply_schedule_backfill(state: State,
                            cmd: ScheduleBackfill) -> Applied[ScheduleBackfilled] | Rejected:
    schedule = state.schedules.get(cmd.schedule_id)
    if schedule is None:
        return Rejected(Code.NOT_FOUND, f"schedule {cmd.schedule_id} not found")
    refusal = _backfill_refusal(schedule, cmd)
    if refusal is not None:
        return refusal
    fresh = [n for n in cmd.nominals if run_job_id(schedule.id, n) not in state.jobs
             and n not in schedule.backfill]
    _skip(schedule, "backfill_exists", len(cmd.nominals) - len(fresh))
    schedule.backfill.extend(fresh)
    schedule.backfill_max = cmd.max_concurrent
    started: list[str] = []
    _release_backfill(state, schedule, cmd.now_ms, started)
    return Applied(ScheduleBackfilled(schedule.id, len(fresh),
                                      len(cmd.nominals) - len(fresh), tuple(started)))


def _backfill_refusal(schedule: Schedule, cmd: ScheduleBackfill) -> Rejected | None:
    if not 1 <= cmd.max_concurrent <= limits.MAX_BACKFILL_RUNS:
        return Rejected(Code.INVALID_ARGUMENT, f"max_concurrent: {cmd.max_concurrent} is "
                                               f"outside 1..{limits.MAX_BACKFILL_RUNS}")
    if len(schedule.backfill) + len(cmd.nominals) > limits.MAX_BACKFILL_RUNS:
        return Rejected(Code.RESOURCE_EXHAUSTED,
                        f"schedule {schedule.id} would hold more than MAX_BACKFILL_RUNS="
                        f"{limits.MAX_BACKFILL_RUNS} backfill times")
    previous = -1
    for nominal in cmd.nominals:
        if nominal <= previous or nominal > cmd.now_ms or not aligned(schedule, nominal):
            return Rejected(Code.INVALID_ARGUMENT,
                            f"backfill time {nominal} is not an ascending past fire time of "
                            f"schedule {schedule.id}")
        previous = nominal
    if cmd.nominals and cmd.nominals[-1] - cmd.nominals[0] > limits.MAX_BACKFILL_SPAN_MS:
        return Rejected(Code.INVALID_ARGUMENT,
                        f"backfill spans more than MAX_BACKFILL_SPAN_MS="
                        f"{limits.MAX_BACKFILL_SPAN_MS}")
    return None


def _release_backfill(state: State, schedule: Schedule, now_ms: int, started: list[str]) -> None:
    """Start backfill times, oldest first, while fewer than backfill_max of its runs live."""
    schedule.backfill_live = [j for j in schedule.backfill_live if job_live(state, j)]
    while (schedule.backfill and not schedule.paused
           and len(schedule.backfill_live) < schedule.backfill_max):
        nominal = schedule.backfill.popleft()
        if run_job_id(schedule.id, nominal) in state.jobs:
            _skip(schedule, "backfill_exists", 1)
            continue
        _start_run(state, schedule, nominal, now_ms, started, backfill=True)
