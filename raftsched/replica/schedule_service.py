"""The gRPC `Schedules` service (issue 25): create, list, show, pause/resume, trigger,
backfill and delete schedules. Tenant and role rules are the jobs' (`identity`): every method
needs a user token; one of a tenant sees and acts on that tenant's schedules only (another's
is NOT_FOUND, as for jobs), and creates only in it. The leader computes fire times (a trigger,
a backfill's range, `next`): apply never reads the rule."""

from __future__ import annotations

from typing import Any

import grpc

from raftsched import limits
from raftsched.api import raftsched_pb2 as pb
from raftsched.api import raftsched_pb2_grpc as pb_grpc
from raftsched.errors import Code, RaftschedError
from raftsched.replica import identity
from raftsched.replica.firing import due_times
from raftsched.replica.service import Context, refuse_unprintable
from raftsched.schedules.file import parse_schedule_text
from raftsched.spec.model import SpecError
from raftsched.spec.wire import to_wire
from raftsched.state import commands as c
from raftsched.state.model import ALL_TENANTS, Schedule, State
from raftsched.state.results import (
    ScheduleBackfilled,
    ScheduleCreated,
    ScheduleDeleted,
    ScheduleFired,
    ScheduleSetResult,
)

_FAR_FUTURE_MS = 1 << 62


class SchedulesService(pb_grpc.SchedulesServicer):  # type: ignore[misc]
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def CreateSchedule(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.ctx.require_leader(context)
        try:
            parsed = parse_schedule_text(request.spec, source="spec")
        except SpecError as error:
            issues = error.issues[:limits.MAX_REPORTED_SPEC_ISSUES]
            message = "; ".join(issue.render() for issue in issues)
            self.ctx.abort(context, RaftschedError(Code.INVALID_ARGUMENT, message),
                           [(issue.path, issue.message) for issue in issues])
        try:
            identity.require_tenant(parsed.spec.tenant)
        except identity.Refused as refused:
            context.abort(refused.code, refused.message)
        result = self.ctx.propose(context, c.ScheduleCreate(
            request.schedule_id, to_wire(parsed.spec), parsed.rule, parsed.every_ms,
            parsed.start_at_ms, parsed.end_at_ms, parsed.overlap, parsed.catchup_window_ms,
            parsed.pause_after_failures, self.ctx.clock.now_ms()))
        assert isinstance(result, ScheduleCreated), result
        return pb.CreateScheduleResponse(schedule_id=result.schedule_id, created=result.created)

    def ListSchedules(self, request: Any, context: grpc.ServicerContext) -> Any:
        who = identity.current_caller()
        tenant = request.tenant
        if who is not None and who.tenant != ALL_TENANTS:
            if tenant and tenant != who.tenant:
                context.abort(grpc.StatusCode.PERMISSION_DENIED,
                              f"this token lists tenant {who.tenant!r} only")
            tenant = who.tenant
        return self.ctx.current_read(context, lambda s: pb.ListSchedulesResponse(schedules=[
            schedule_info(s, x, 0, False) for x in s.schedules.values()
            if not tenant or x.tenant == tenant]))

    def GetSchedule(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._visible(request.schedule_id, context)
        now_ms = self.ctx.clock.now_ms()
        return self.ctx.current_read(context, lambda s: schedule_info(
            s, _found(s, request.schedule_id), now_ms, True))

    def SetSchedule(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._visible(request.schedule_id, context)
        refuse_unprintable(self.ctx, context, note=request.note)
        result = self.ctx.propose(context, c.ScheduleSet(
            request.schedule_id, request.paused, request.note[:limits.MAX_SCHEDULE_NOTE_CHARS],
            self.ctx.clock.now_ms()))
        assert isinstance(result, ScheduleSetResult), result
        return self.GetSchedule(pb.GetScheduleRequest(schedule_id=request.schedule_id), context)

    def TriggerSchedule(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._visible(request.schedule_id, context)
        now_ms = self.ctx.clock.now_ms()
        result = self.ctx.propose(context, c.ScheduleFire(request.schedule_id, (now_ms,), 0, 0,
                                                          now_ms, manual=True))
        assert isinstance(result, ScheduleFired), result
        return pb.ScheduleRunsResponse(job_ids=result.job_ids)

    def BackfillSchedule(self, request: Any, context: grpc.ServicerContext) -> Any:
        schedule = self._visible(request.schedule_id, context)
        now_ms = self.ctx.clock.now_ms()
        nominals = _backfill_times(schedule, request.from_ms, min(request.to_ms, now_ms))
        if isinstance(nominals, str):
            self.ctx.abort(context, RaftschedError(Code.INVALID_ARGUMENT, nominals))
        result = self.ctx.propose(context, c.ScheduleBackfill(
            request.schedule_id, tuple(nominals), request.max_concurrent or 1, now_ms))
        assert isinstance(result, ScheduleBackfilled), result
        return pb.ScheduleRunsResponse(job_ids=result.job_ids, queued=result.queued,
                                       skipped=result.skipped)

    def DeleteSchedule(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._visible(request.schedule_id, context)
        result = self.ctx.propose(context, c.ScheduleDelete(request.schedule_id,
                                                            self.ctx.clock.now_ms()))
        assert isinstance(result, ScheduleDeleted), result
        return pb.DeleteScheduleResponse()

    def _visible(self, schedule_id: str, context: grpc.ServicerContext) -> Schedule:
        """The schedule, current on the leader; NOT_FOUND when missing or another tenant's."""
        schedule = self.ctx.current_read(context, lambda s: s.schedules.get(schedule_id))
        who = identity.current_caller()
        if schedule is None or (who is not None and not who.may_act_for(schedule.tenant)):
            self.ctx.abort(context, RaftschedError(Code.NOT_FOUND,
                                                   f"schedule {schedule_id} not found"))
        return schedule


def _found(state: State, schedule_id: str) -> Schedule:
    schedule = state.schedules.get(schedule_id)
    if schedule is None:
        raise RaftschedError(Code.NOT_FOUND, f"schedule {schedule_id} not found")
    return schedule


def _backfill_times(schedule: Schedule, from_ms: int, to_ms: int) -> list[int] | str:
    """The rule's fire times in [from_ms, to_ms], or why not."""
    if to_ms < from_ms:
        return f"backfill: --to ({to_ms}) is before --from ({from_ms}) or in the future"
    if to_ms - from_ms > limits.MAX_BACKFILL_SPAN_MS:
        return f"backfill: the range is over MAX_BACKFILL_SPAN_MS={limits.MAX_BACKFILL_SPAN_MS}"
    times = due_times(schedule, from_ms - 1, to_ms, limits.MAX_BACKFILL_RUNS + 1)
    if len(times) > limits.MAX_BACKFILL_RUNS:
        return f"backfill: more than MAX_BACKFILL_RUNS={limits.MAX_BACKFILL_RUNS} fire times " \
               f"in the range; ask for a shorter one"
    return times


def schedule_info(state: State, s: Schedule, now_ms: int, detail: bool) -> Any:
    """The message of a schedule; `detail`: its next fire times and its runs, newest first."""
    info = pb.ScheduleInfo(
        schedule_id=s.id, tenant=s.tenant, paused=s.paused, note=s.note,
        rule=_rule_text(s), zone=_zone(s), overlap=s.overlap.value,
        catchup_window_ms=s.catchup_window_ms, pause_after_failures=s.pause_after_failures,
        last_nominal_ms=s.last_nominal_ms, fired=s.fired, skipped=s.skipped,
        consecutive_failures=s.consecutive_failures, backfill_waiting=len(s.backfill),
        created_ms=s.created_ms)
    if detail:
        after = max(s.last_nominal_ms, now_ms)
        info.next_ms.extend(due_times(s, after, _FAR_FUTURE_MS, limits.SCHEDULE_NEXT_SHOWN))
        for nominal, job_id in reversed(s.runs):
            job = state.jobs.get(job_id)
            info.runs.add(nominal_ms=nominal, job_id=job_id,
                          state=job.state.name if job is not None else "FORGOTTEN")
    return info


def _rule_text(s: Schedule) -> str:
    if s.rule and s.rule[0] == "every" and s.every_ms:
        return f"every {s.every_ms // 1000}s" if s.every_ms % 1000 == 0 else \
            f"every {s.every_ms}ms"
    if len(s.rule) == 3 and s.rule[0] == "cron":
        return f"cron {s.rule[1]}"
    return str(s.rule)


def _zone(s: Schedule) -> str:
    """A cron rule's IANA zone (its wall clock); an interval counts absolute time: UTC."""
    if len(s.rule) == 3 and s.rule[0] == "cron" and isinstance(s.rule[2], str):
        return s.rule[2]
    return "UTC"
