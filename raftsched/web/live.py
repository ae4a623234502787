"""Live job pages: `/jobs/{job_id}/events`, server-sent events of the job's task states.

A thread follows the job's events (`Scheduler.WatchEvents` through `Client.watch_events(job_id=
...)`: committed changes from any replica, resumed by the client across leader changes) and only
marks the page dirty — at the stream's first event (its "progress" start, so that whatever changed
since the page was drawn is fetched) and at every change of the job; the later "progress" events
(every few seconds while other work commits) only let the thread see that its page has closed.
It returns once the job has ended. The response loop then fetches the task list
once (at most one refresh in flight per open page, at most one every
`limits.WEB_LIVE_MIN_REFRESH_S`: changes in between coalesce) and sends
`{"job_state", "tasks": {task_id: state}, "rows": {task_id: [attempts, cluster, reason]},
"counts": {state: n}}`. When the job is terminal it sends `end`.
At most `limits.WEB_LIVE_MAX_STREAMS` streams are served at once (503 above)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from raftsched import limits
from raftsched.errors import RaftschedError
from raftsched.web.console import ConsoleClient, PageError, call, require_session, valid_id

KEEPALIVE_S = 15.0
"""A comment line this often keeps proxies from closing a quiet stream."""
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
_open_streams = threading.BoundedSemaphore(limits.WEB_LIVE_MAX_STREAMS)


PROGRESS = "progress"


def changes(client: ConsoleClient, job_id: str) -> Iterator[tuple[bool, bool]]:
    """(mark, ended) for each event of the job's stream (the source of a live page): mark the page
    at the first event and at every change; ended once the job's own event says it ended."""
    first = True
    for event in client.watch_events(job_id=job_id):
        yield first or event.kind != PROGRESS, event.kind == "job" and event.state in TERMINAL
        first = False


class _Dirty:
    """Set from the watching thread, awaited by the response loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.event = asyncio.Event()
        self.stopped = threading.Event()
        self.ended = False

    def mark(self) -> None:
        self._loop.call_soon_threadsafe(self.event.set)

    def follow(self, client: ConsoleClient, job_id: str) -> None:
        try:
            for mark, ended in changes(client, job_id):
                if self.stopped.is_set():
                    return
                if mark:
                    self.mark()
                if ended:
                    return
        except RaftschedError:
            pass  # the page reconnects with backoff and lists again
        finally:
            self.ended = True
            self.mark()
            _open_streams.release()


async def events(request: Request) -> Response:
    session = require_session(request)
    job_id = valid_id(request.path_params["job_id"])
    await call(session.client.get_job, job_id)  # 404 for an unknown or foreign job
    if not _open_streams.acquire(blocking=False):
        raise PageError(503, "too many live pages are open: reload later")
    dirty = _Dirty(asyncio.get_running_loop())
    threading.Thread(target=dirty.follow, args=(session.client, job_id), daemon=True,
                     name=f"web-live-{job_id}").start()
    return StreamingResponse(_stream(session.client, job_id, dirty),
                             media_type="text/event-stream",
                             headers={"cache-control": "no-store", "x-accel-buffering": "no"})


async def _stream(client: ConsoleClient, job_id: str, dirty: _Dirty) -> AsyncIterator[str]:
    try:
        while True:
            try:
                await asyncio.wait_for(dirty.event.wait(), KEEPALIVE_S)
            except TimeoutError:
                yield ": keepalive\n\n"
                continue
            dirty.event.clear()
            # Whether the follower had ended, read BEFORE the snapshot: it may end while the
            # snapshot is taken, and that snapshot may predate the job's end (a last page
            # showing RUNNING). One taken after it ended shows the end (reads are current).
            follower_ended = dirty.ended
            try:
                document = await _snapshot(client, job_id)
            except PageError as error:  # the page reconnects with backoff
                yield f"event: failed\ndata: {json.dumps(str(error))}\n\n"
                return
            yield f"event: tasks\ndata: {json.dumps(document)}\n\n"
            if document["job_state"] in TERMINAL or follower_ended:
                yield "event: end\ndata: {}\n\n"
                return
            await asyncio.sleep(limits.WEB_LIVE_MIN_REFRESH_S)
    finally:
        dirty.stopped.set()


async def _snapshot(client: ConsoleClient, job_id: str) -> dict[str, object]:
    job = await call(client.get_job, job_id)
    tasks = await call(client.list_tasks, job_id)
    return {"job_state": job.state, "tasks": {t.task_id: t.state for t in tasks.tasks},
            "rows": {t.task_id: [t.attempts, t.cluster, t.reason] for t in tasks.tasks},
            "counts": dict(job.tasks)}
