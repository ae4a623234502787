"""The console's pages: sign-in, jobs, a job (header, DAG graph, task table), a task (attempts,
why not running, output), cancel (confirm, then POST), replicas (clusters, tenants and the
drain actions: `operators`).

Every handler acts with the session's own client (the user's token): a user sees only their
tenant's jobs, and a job of another tenant answers 404 exactly as an unknown one."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import quote, urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse

from raftsched import clock, limits
from raftsched.client.groups import job_group
from raftsched.errors import Code, RaftschedError
from raftsched.states import (
    CANCELLABLE_JOB_STATE_NAMES,
    JOB_STATE_NAMES,
    TERMINAL_TASK_STATE_NAMES,
    TaskStateName,
)
from raftsched.web import layout, live, output, timeline
from raftsched.web.console import (
    COOKIE,
    ConsoleClient,
    PageError,
    call,
    checked_form,
    console_of,
    form_of,
    group_client,
    group_param,
    group_summaries,
    groups_of,
    render,
    require_session,
    session_of,
    valid_id,
)
from raftsched.web.output import STREAMS

JOB_STATES = JOB_STATE_NAMES
TASK_TERMINAL = TERMINAL_TASK_STATE_NAMES
DEFAULT_TAIL_BYTES = 64 * 1024


# --- sign-in ------------------------------------------------------------------------------------


async def login_page(request: Request) -> Response:
    return render(request, "login.html", error="")


async def login(request: Request) -> Response:
    form = await form_of(request)
    token = form.get("token", "").strip()
    console = console_of(request)
    client = console.options.make_client(token)
    try:
        role = await run_in_threadpool(_role_of, client)
    except RaftschedError as error:
        client.close()
        message = ("this token is not valid (unknown, revoked or mistyped)"
                   if error.code in (Code.UNAUTHENTICATED, Code.INVALID_ARGUMENT)
                   else f"the scheduler did not answer: {error.code.value}")
        return render(request, "login.html", http_status=401, error=message)
    session = console.sessions.open(client, role)
    response = RedirectResponse("/jobs", status_code=303)
    response.set_cookie(COOKIE, session.session_id, httponly=True, samesite="strict",
                        secure=console.options.secure_cookie, path="/")
    return response


def _role_of(client: ConsoleClient) -> str:
    """The token works (any call would do); it may, or may not, read tenants (operator+) and
    list tokens (admin only: "admin")."""
    client.list_jobs(limit=1)
    for probe, below in ((client.list_tenants, "user"), (client.list_tokens, "operator")):
        try:
            probe()
        except RaftschedError as error:
            if error.code == Code.PERMISSION_DENIED:
                return below
            raise
    return "admin"


async def logout(request: Request) -> Response:
    session = require_session(request)
    await checked_form(request, session)
    console_of(request).sessions.close(session.session_id)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response


# --- jobs ---------------------------------------------------------------------------------------


async def jobs(request: Request) -> Response:
    """Newest first, filtered by tenant, state and a text the id or name contains (`q`), a
    page at a time; state tabs with the counts of the tenant and query. Filters live in the
    URL; the replicas check them (one copy of each rule: a bad one is their 400)."""
    session = require_session(request)
    params = request.query_params
    tenant, state, query = params.get("tenant", ""), params.get("state", ""), params.get("q", "")
    page = params.get("page", "")
    if state and state not in JOB_STATES:
        raise PageError(400, f"state {state!r} is not one of {', '.join(JOB_STATES)}")
    answer, missing = await call(_listed, session.client, tenant, state, page, query)
    exact = await _exact_job(session.client, query) if query and not page else None
    counts = {s: int(answer.state_counts.get(s, 0)) for s in JOB_STATES}
    tabs = [("All", "", sum(counts.values()))] + [(s, s, counts[s]) for s in JOB_STATES]
    return render(request, "jobs.html", jobs=answer.jobs, tenant=tenant, state=state,
                  query=query, tabs=[(label, value, count, _jobs_url(tenant, value, query))
                                     for label, value, count in tabs],
                  partial=answer.state_counts_partial, paged=bool(page),
                  first_url=_jobs_url(tenant, state, query),
                  next_url=(_jobs_url(tenant, state, query, answer.next_page_token)
                            if answer.next_page_token else ""),
                  scan_bound=limits.LIST_QUERY_MAX_SCAN_JOBS, missing=missing,
                  exact=exact if exact and all(j.job_id != exact.job_id for j in answer.jobs)
                  else None)


def _listed(client: ConsoleClient, tenant: str, state: str, page: str,
            query: str) -> tuple[Any, list[str]]:
    """A page of jobs, newest first, and why each scheduler group that did not answer is
    missing from it (several groups: the others are listed)."""
    answer = client.list_jobs(tenant=tenant, state=state, limit=limits.WEB_JOBS_PAGE,
                              page_token=page, query=query, newest_first=True)
    return answer, [error.message for error in getattr(client, "unanswered", [])]


async def _exact_job(client: ConsoleClient, query: str) -> Any:
    """The job whose id is exactly the search text, if the user may see it (a search examines
    only the newest LIST_QUERY_MAX_SCAN_JOBS: a pasted id of an older job is found here)."""
    try:
        return await call(client.get_job, valid_id(query.strip()))
    except PageError:
        return None


def _jobs_url(tenant: str, state: str, query: str, page: str = "") -> str:
    """/jobs with these filters (the empty ones left out)."""
    fields = {k: v for k, v in (("tenant", tenant), ("state", state), ("q", query),
                                ("page", page)) if v}
    return "/jobs?" + urlencode(fields) if fields else "/jobs"


async def job(request: Request) -> Response:
    session = require_session(request)
    job_id = valid_id(request.path_params["job_id"])
    found = await call(session.client.get_job, job_id)
    listed = await call(session.client.list_tasks, job_id, with_spans=True)
    tasks = listed.tasks
    # a for_each task's instances are rows of the table, not nodes: the task's node stands for
    # them all (its state is theirs together)
    drawing = layout.draw([layout.TaskNode(t.task_id, t.state, tuple(t.depends_on))
                           for t in tasks if not t.instance_of])
    done = sum(count for state, count in found.tasks.items() if state in TASK_TERMINAL)
    rows = limits.WEB_TASK_TABLE_MAX_ROWS
    return render(request, "job.html", job=found, tasks=tasks[:rows],
                  hidden_rows=max(0, len(tasks) - rows),
                  failures=[t for t in tasks if t.state == TaskStateName.FAILED][:rows],
                  drawing=drawing, node_w=layout.NODE_W, node_h=layout.NODE_H,
                  shares_y=layout.SHARES_Y, shares_h=layout.SHARES_H,
                  counts_y=layout.COUNTS_Y, line_h=layout.LINE_H,
                  min_share_w=layout.MIN_SHARE_W,
                  attempts_version=live.attempts_version(tasks),
                  done=done, can_cancel=_can_cancel(request, found),
                  group=job_group(session.client, job_id)
                  if groups_of(session.client) > 1 else None,
                  **_timeline_values(job_id, tasks))


async def job_timeline(request: Request) -> Response:
    """The job page's timeline alone (an HTML fragment): the page fetches it while the job runs."""
    session = require_session(request)
    job_id = valid_id(request.path_params["job_id"])
    tasks = (await call(session.client.list_tasks, job_id, with_spans=True)).tasks
    return render(request, "_timeline.html", **_timeline_values(job_id, tasks))


def _timeline_values(job_id: str, tasks: Sequence[Any]) -> dict[str, Any]:
    spans = [timeline.Span(t.task_id, s.number, s.fence, s.cluster, s.state, s.assigned_ms,
                           s.started_ms, s.finished_ms) for t in tasks for s in t.spans]
    older = sum(t.attempts - len(t.spans) for t in tasks)
    drawn = timeline.draw(spans, now_ms=clock.wall_ms(), left_out=older)
    return {"timeline": drawn, "job_id": job_id, "bar_h": timeline.BAR_H,
            "axis_h": timeline.AXIS_H,
            "timeline_refresh_ms": int(limits.WEB_TIMELINE_REFRESH_S * 1000)}


def _can_cancel(request: Request, found: Any) -> bool:
    return not console_of(request).options.read_only and found.state in CANCELLABLE_JOB_STATE_NAMES


async def cancel_page(request: Request) -> Response:
    session = require_session(request)
    job_id = valid_id(request.path_params["job_id"])
    found = await call(session.client.get_job, job_id)
    if not _can_cancel(request, found):
        raise PageError(409 if not console_of(request).options.read_only else 403,
                        "this job cannot be cancelled here")
    affected = sum(count for state, count in found.tasks.items() if state not in TASK_TERMINAL)
    return render(request, "cancel.html", job=found, affected=affected)


async def cancel(request: Request) -> Response:
    session = require_session(request)
    job_id = valid_id(request.path_params["job_id"])
    form = await checked_form(request, session)
    if console_of(request).options.read_only:
        raise PageError(403, "this console is read-only")
    reason = form.get("reason", "")[:200] or "cancelled from the web console"
    await call(session.client.cancel, job_id, reason)
    return RedirectResponse(f"/jobs/{job_id}", status_code=303)


# --- a task -------------------------------------------------------------------------------------


async def task(request: Request) -> Response:
    """Attempts, "why not running" (only while the task is not finished) and the output's tail;
    task.js follows a live attempt's output (`output.live`), or else, while the task is not
    finished, the job's events, and reloads the page when the attempt ends or the task moves."""
    session = require_session(request)
    job_id = valid_id(request.path_params["job_id"])
    task_id = valid_id(request.path_params["task_id"])
    stream, tail_bytes = _output_choice(request)
    history = await call(session.client.task_history, job_id, task_id)
    finished = history.state in TASK_TERMINAL
    explained = None if finished else await call(session.client.explain, job_id, task_id)
    tail = await call(output.tail, session.client, job_id, task_id, stream, tail_bytes)
    path = f"/jobs/{quote(job_id, safe='')}/tasks/{quote(task_id, safe='')}"
    live_url = (f"{path}/output/live?" + urlencode({"stream": stream, "attempt": tail.attempt,
                                                    "offset": tail.next_offset})
                if tail.attempt and tail.attempt_state in output.LIVE_ATTEMPT_STATES else "")
    watch_url = "" if finished or live_url else f"/jobs/{quote(job_id, safe='')}/events"
    outputs = _pretty(history.outputs) if history.HasField("outputs") else None
    instances = await _instances(session.client, job_id, history)
    return render(request, "task.html", job_id=job_id, history=history, explained=explained,
                  outputs=outputs, instances=instances,
                  tail=tail, stream=stream, tail_bytes=tail_bytes, streams=STREAMS,
                  live_url=live_url, watch_url=watch_url,
                  keep_chars=limits.WEB_LIVE_OUTPUT_KEEP_CHARS,
                  reconnects=limits.WEB_LIVE_RECONNECTS)


def _pretty(text: str) -> str:
    """A task's outputs (canonical JSON text) indented for reading."""
    return json.dumps(json.loads(text), indent=2, sort_keys=True, ensure_ascii=False)


async def _instances(client: ConsoleClient, job_id: str, history: Any) -> list[Any]:
    """A for_each task's instances as the job's task list has them (state, attempts, cluster),
    at most WEB_TASK_TABLE_MAX_ROWS; none for any other task."""
    if not history.instances:
        return []
    wanted = set(history.instances)
    listed = (await call(client.list_tasks, job_id)).tasks
    return [t for t in listed if t.task_id in wanted][:limits.WEB_TASK_TABLE_MAX_ROWS]


def _output_choice(request: Request) -> tuple[str, int]:
    stream = request.query_params.get("stream", "stdout")
    if stream not in STREAMS:
        raise PageError(400, f"stream {stream!r} is not one of {', '.join(STREAMS)}")
    text = request.query_params.get("tail", str(DEFAULT_TAIL_BYTES))
    if not text.isdigit() or not 0 < int(text) <= limits.WEB_LOG_TAIL_MAX_BYTES:
        raise PageError(400, f"tail {text[:20]!r} is not a byte count from 1 to "
                             f"{limits.WEB_LOG_TAIL_MAX_BYTES}")
    return stream, int(text)


async def download(request: Request) -> Response:
    session = require_session(request)
    job_id = valid_id(request.path_params["job_id"])
    task_id = valid_id(request.path_params["task_id"])
    stream, _ = _output_choice(request)
    await call(session.client.task_history, job_id, task_id)  # 404 before any byte is sent
    name = f"{job_id}-{task_id}.{stream}.txt".replace('"', "")
    return StreamingResponse(_chunks(session.client, job_id, task_id, stream),
                             media_type="text/plain; charset=utf-8",
                             headers={"content-disposition": f'attachment; filename="{name}"'})


def _chunks(client: ConsoleClient, job_id: str, task_id: str, stream: str) -> Iterator[bytes]:
    try:
        for chunk in client.task_logs(job_id, task_id, stream=stream):
            yield chunk.data
    except RaftschedError as error:
        yield f"\n[output ended: {error}]\n".encode()


# --- operators: replicas (clusters, tenants: operators.py) ----------------------------------------


async def replicas(request: Request) -> Response:
    """One scheduler group's replicas (`?group=N`, default 0), and with several groups a line
    per group."""
    session = require_session(request)
    if session.role not in ("operator", "admin"):
        raise PageError(403, "this page is for operators and admins: your token's role is user")
    group = group_param(request, session.client)
    summaries = await call(group_summaries, session.client) \
        if groups_of(session.client) > 1 else []
    status = await call(group_client(session.client, group).cluster_status)
    return render(request, "replicas.html", status=status, group=group, groups=summaries,
                  page="/replicas")


async def home(request: Request) -> Response:
    return RedirectResponse("/jobs" if session_of(request) else "/login", status_code=303)
