"""Live job pages: `/jobs/{job_id}/events`, server-sent events of the job's task states.

A page holds no replica stream of its own: it subscribes to its job on the console's
`EventHub` (raftsched/web/hub.py: one `WatchEvents` stream shared by every page of the console,
or of the session when the console has no watch token), which marks it when it subscribes (so
that whatever changed since the page was drawn is fetched) and at every change of the job, and
says when the job ended. The response loop then fetches the task list
once (at most one refresh in flight per open page, at most one every
`limits.WEB_LIVE_MIN_REFRESH_S`: changes in between coalesce) and sends
`{"job_state", "index", "attempts_version", "job": {state, reason, started, finished, done, total},
"tasks": {task_id: state}, "rows": {task_id: [attempts, cluster, reason]}, "counts": {state: n},
"groups": [[state, [[state, n], ...]], ...]}` (`groups`: per layer of a collapsed graph only;
`tasks`/`rows`: the tasks the page lists). When the job is terminal it sends `end`.
At most `limits.WEB_LIVE_MAX_STREAMS` streams are served at once (503 above)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from raftsched import limits
from raftsched.states import TERMINAL_JOB_STATE_NAMES, TERMINAL_TASK_STATE_NAMES
from raftsched.web import layout
from raftsched.web.console import (
    ConsoleClient,
    PageError,
    call,
    console_of,
    require_session,
    valid_id,
    when,
)
from raftsched.web.hub import EventHub

KEEPALIVE_S = 15.0
"""A comment line this often keeps proxies from closing a quiet stream."""
TERMINAL = TERMINAL_JOB_STATE_NAMES
TASK_TERMINAL = TERMINAL_TASK_STATE_NAMES
async def events(request: Request) -> Response:
    session = require_session(request)
    job_id = valid_id(request.path_params["job_id"])
    await call(session.client.get_job, job_id)  # 404 for an unknown or foreign job
    if _open_streams.full():
        raise PageError(503, "too many live pages are open: reload later")
    hub = console_of(request).hub_for(session, job_id)
    return StreamingResponse(_stream(session.client, hub, job_id),
                             media_type="text/event-stream",
                             headers={"cache-control": "no-store", "x-accel-buffering": "no"})


class _Slots:
    """The live streams served at once: taken and given back by the stream itself (a response
    that never starts holds nothing)."""

    def __init__(self, bound: int) -> None:
        self._lock = threading.Lock()
        self._bound = bound
        self._taken = 0

    def take(self) -> bool:
        with self._lock:
            if self._taken >= self._bound:
                return False
            self._taken += 1
            return True

    def give(self) -> None:
        with self._lock:
            self._taken -= 1

    def full(self) -> bool:
        with self._lock:
            return self._taken >= self._bound


_open_streams = _Slots(limits.WEB_LIVE_MAX_STREAMS)


async def _stream(client: ConsoleClient, hub: EventHub, job_id: str) -> AsyncIterator[str]:
    if not _open_streams.take():
        yield f"event: failed\ndata: {json.dumps('too many live pages are open')}\n\n"
        return
    page = hub.subscribe(job_id, asyncio.get_running_loop())
    layers: list[list[str]] = []  # a collapsed graph's layers: the DAG does not change
    try:
        while True:
            try:
                await asyncio.wait_for(page.changed.wait(), KEEPALIVE_S)
            except TimeoutError:
                yield ": keepalive\n\n"
                continue
            page.changed.clear()
            # Whether the job's end had been seen, read BEFORE the snapshot: it may end while the
            # snapshot is taken, and that snapshot may predate the job's end (a last page
            # showing RUNNING). One taken after it ended shows the end (reads are current).
            ended_before = page.ended
            try:
                document = await _snapshot(client, job_id, layers)
            except PageError as error:  # the page reconnects with backoff
                yield f"event: failed\ndata: {json.dumps(str(error))}\n\n"
                return
            yield f"event: tasks\ndata: {json.dumps(document)}\n\n"
            if document["job_state"] in TERMINAL or ended_before:
                yield "event: end\ndata: {}\n\n"
                return
            if int(str(document["index"])) < page.since:
                page.changed.set()  # a lagging replica answered: fetch again
            await asyncio.sleep(limits.WEB_LIVE_MIN_REFRESH_S)
    finally:
        hub.unsubscribe(page)
        _open_streams.give()


async def _snapshot(client: ConsoleClient, job_id: str,
                    layers: list[list[str]]) -> dict[str, object]:
    job = await call(client.get_job, job_id)
    listed = await call(client.list_tasks, job_id)
    return document_of(job, listed, layers)


def attempts_version(tasks: Sequence[Any]) -> str:
    """Changes whenever an attempt is made, starts or ends (each moves its task's state or its
    attempt count): the page fetches its timeline again only then, not at every event."""
    states = Counter(t.state for t in tasks)
    return f"{sum(t.attempts for t in tasks)}:" + ",".join(
        f"{state}={count}" for state, count in sorted(states.items()))


def document_of(job: Any, listed: Any, layers: list[list[str]]) -> dict[str, object]:
    """What a job page updates in place: the header, the listed tasks (the page's table holds
    at most `limits.WEB_TASK_TABLE_MAX_ROWS`: the document too), the counts, a collapsed graph's
    groups (`layers` is filled at the first call and reused), and its attempts' version (the
    page fetches its timeline again when it changed)."""
    tasks = listed.tasks
    shown = tasks[:limits.WEB_TASK_TABLE_MAX_ROWS]
    done = sum(n for state, n in job.tasks.items() if state in TASK_TERMINAL)
    document: dict[str, object] = {
        "job_state": job.state, "index": listed.applied_index,
        "attempts_version": attempts_version(tasks),
        "job": {"state": job.state, "reason": job.reason, "started": when(job.started_ms),
                "finished": when(job.finished_ms), "done": done, "total": job.total_tasks},
        "tasks": {t.task_id: t.state for t in shown},
        "rows": {t.task_id: [t.attempts, t.cluster, t.reason] for t in shown},
        "counts": dict(job.tasks)}
    if len(tasks) > limits.WEB_GRAPH_MAX_NODES:
        if not layers:
            layers.extend(layout.layers_of([layout.TaskNode(t.task_id, t.state,
                                                            tuple(t.depends_on))
                                            for t in tasks if not t.instance_of]))
        states = {t.task_id: t.state for t in tasks}
        document["groups"] = [[worst, [list(c) for c in counts]]
                              for worst, counts in layout.group_counts(layers, states)]
    return document
