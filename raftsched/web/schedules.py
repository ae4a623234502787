"""The console's schedules (issue 25): the list of the session's schedules, and one schedule —
its rule and zone, the next fire times on the zone's wall clock, its last runs (each a job page)
and pause / resume (POST with the session's CSRF token; not on a read-only console).

Every call is the signed-in user's: a user sees only their tenant's schedules, and another
tenant's answers 404 exactly as an unknown one."""

from __future__ import annotations

import datetime as dt
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from raftsched import limits
from raftsched.schedules.cron import zone_or_utc
from raftsched.web.console import (
    PageError,
    call,
    checked_form,
    console_of,
    render,
    require_session,
    valid_id,
)


async def schedules(request: Request) -> Response:
    session = require_session(request)
    tenant = request.query_params.get("tenant", "")
    answer = await call(session.client.list_schedules, tenant)
    rows = sorted(answer.schedules, key=lambda s: s.schedule_id)
    return render(request, "schedules.html", schedules=rows, tenant=tenant)


async def schedule(request: Request) -> Response:
    session = require_session(request)
    schedule_id = valid_id(request.path_params["schedule_id"])
    info = await call(session.client.get_schedule, schedule_id)
    return render(request, "schedule.html", s=info,
                  next_times=wall_clock(info.next_ms, info.zone),
                  skipped=sorted(dict(info.skipped).items()),
                  note_limit=limits.MAX_SCHEDULE_NOTE_CHARS)


async def pause(request: Request) -> Response:
    return await _set(request, paused=True)


async def resume(request: Request) -> Response:
    return await _set(request, paused=False)


async def _set(request: Request, *, paused: bool) -> Response:
    session = require_session(request)
    schedule_id = valid_id(request.path_params["schedule_id"])
    form = await checked_form(request, session)
    if console_of(request).options.read_only:
        raise PageError(403, "this console is read-only")
    note = form.get("note", "")[:limits.MAX_SCHEDULE_NOTE_CHARS]
    if paused and not note:
        note = "paused from the web console"
    await call(session.client.set_schedule, schedule_id, paused, note)
    return RedirectResponse(f"/schedules/{schedule_id}", status_code=303)


def wall_clock(times_ms: Any, zone_name: str) -> list[tuple[str, str]]:
    """(the zone's wall-clock reading with its offset, the UTC time) of each fire time; UTC
    only when this console's tzdata lacks the zone."""
    zone = zone_or_utc(zone_name)
    shown = []
    for ms in times_ms:
        moment = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
        local = moment.astimezone(zone)
        shown.append((local.strftime("%a %Y-%m-%d %H:%M:%S ") + local.strftime("%Z (%z)"),
                      moment.strftime("%Y-%m-%d %H:%M:%S UTC")))
    return shown
