"""A task's output, read for its page and followed live while its attempt runs.

`tail`: the end of an attempt's output for the task page (`Tail`: the text, the attempt, its
state, and the byte offset the text ends at, where a live stream resumes).

`live`, `/jobs/{job_id}/tasks/{task_id}/output/live?stream=&attempt=&offset=`: server-sent events
of one attempt's output from a byte offset on. A thread follows it (`Client.task_logs(follow=
True)`: the leader sends what the attempt writes while it is live, then the rest) and hands each
piece to the response through a bounded queue (`limits.WEB_LIVE_OUTPUT_QUEUE`; the thread waits
while it is full). The response sends
- `event: output` `{"text", "next"}`: the piece's text (UTF-8; a character cut by the piece's
  end waits for the next piece) and the byte offset to resume from after it;
- `event: ended` `{}` once the attempt has ended and all its output was sent;
- `event: failed` `"why"` when the stream broke (the page reconnects from `next`, with backoff).
A page that closes cancels the gRPC call (a silent attempt does not keep a replica's stream
slot). At most `limits.WEB_LIVE_MAX_STREAMS` such streams at once (503 above)."""

from __future__ import annotations

import asyncio
import codecs
import json
import queue
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from raftsched import limits
from raftsched.errors import Code, RaftschedError
from raftsched.states import LIVE_ATTEMPT_STATE_NAMES
from raftsched.web.console import ConsoleClient, PageError, call, require_session, valid_id

STREAMS = ("stdout", "stderr")
LIVE_ATTEMPT_STATES = LIVE_ATTEMPT_STATE_NAMES
"""An attempt in one of these states may still write output: its page follows it."""
KEEPALIVE_S = 15.0
"""A comment line this often keeps proxies from closing a quiet stream."""
PUT_WAIT_S = 1.0
"""The following thread re-checks, this often, whether its page closed while the queue is full."""
MAX_OFFSET = 1 << 62
_open_streams = threading.BoundedSemaphore(limits.WEB_LIVE_MAX_STREAMS)


class Cancellable(Protocol):
    def cancel(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Tail:
    text: str
    attempt: int
    """0: the task never ran (no attempt, no output)."""
    attempt_state: str
    next_offset: int
    """The byte offset just past `text` (a live stream resumes there)."""
    error: str = ""
    """Why the output could not be read (the attempt is known, its output is not)."""


def tail(client: ConsoleClient, job_id: str, task_id: str, stream: str, tail_bytes: int) -> Tail:
    """The end of the latest attempt's output, at most `tail_bytes` of it (blocking)."""
    data, head, end = b"", None, 0
    try:
        for chunk in client.task_logs(job_id, task_id, stream=stream, tail_bytes=tail_bytes):
            if head is None:
                head = chunk
                continue
            data = (data + chunk.data)[-tail_bytes:]
            end = chunk.offset + len(chunk.data)
    except RaftschedError as error:
        if error.code not in (Code.NOT_FOUND, Code.FAILED_PRECONDITION):
            raise
        if head is None:
            return Tail("", 0, "", 0)
        return Tail("", head.attempt, head.attempt_state, 0, error=str(error))
    if head is None:
        return Tail("", 0, "", 0)
    text, pending = _decoded(codecs.getincrementaldecoder("utf-8")("replace"), data)
    return Tail(text, head.attempt, head.attempt_state, end - pending)


def _decoded(decoder: codecs.IncrementalDecoder, data: bytes) -> tuple[str, int]:
    """`data` as text, and how many of its last bytes start a character not yet complete."""
    text = decoder.decode(data)
    return text, len(decoder.getstate()[0])


# --- following an attempt live ------------------------------------------------------------------


class _End:
    """Put on the queue when the attempt's output is all sent (`failed` set if it broke)."""

    def __init__(self, failed: str = "") -> None:
        self.failed = failed


class _Follower:
    """The thread side: follows the attempt and fills the queue; stopped by the response."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.ready = asyncio.Event()
        self.pieces: queue.Queue[tuple[int, bytes] | _End] = queue.Queue(
            limits.WEB_LIVE_OUTPUT_QUEUE)
        self.stopped = threading.Event()
        self._lock = threading.Lock()
        self._call: Cancellable | None = None

    def on_stream(self, opened: Cancellable) -> None:
        with self._lock:
            self._call = opened
        if self.stopped.is_set():
            opened.cancel()

    def stop(self) -> None:
        self.stopped.set()
        with self._lock:
            opened = self._call
        if opened is not None:
            opened.cancel()

    def run(self, client: ConsoleClient, job_id: str, task_id: str, stream: str, attempt: int,
            offset: int) -> None:
        try:
            chunks = client.task_logs(job_id, task_id, attempt=attempt, stream=stream,
                                      follow=True, offset=offset, on_stream=self.on_stream)
            for number, chunk in enumerate(chunks):
                if self.stopped.is_set():
                    return
                if number and chunk.data:  # the first message names the attempt only
                    self._put((chunk.offset, chunk.data))
            self._put(_End())
        except RaftschedError as error:
            if not self.stopped.is_set():
                self._put(_End(failed=str(error)))
        finally:
            _open_streams.release()

    def _put(self, item: tuple[int, bytes] | _End) -> None:
        while not self.stopped.is_set():
            try:
                self.pieces.put(item, timeout=PUT_WAIT_S)
            except queue.Full:
                continue
            try:
                self.loop.call_soon_threadsafe(self.ready.set)
            except RuntimeError:  # the console is stopping: its loop is closed
                self.stopped.set()
            return


async def live(request: Request) -> Response:
    session = require_session(request)
    job_id = valid_id(request.path_params["job_id"])
    task_id = valid_id(request.path_params["task_id"])
    stream = request.query_params.get("stream", STREAMS[0])
    if stream not in STREAMS:
        raise PageError(400, f"stream {stream[:20]!r} is not one of {', '.join(STREAMS)}")
    attempt = _number(request, "attempt", 1)
    offset = _number(request, "offset", 0)
    await call(session.client.task_history, job_id, task_id)  # 404: unknown or another tenant's
    if not _open_streams.acquire(blocking=False):
        raise PageError(503, "too many live pages are open: reload later")
    follower = _Follower(asyncio.get_running_loop())
    threading.Thread(target=follower.run, daemon=True, name=f"web-output-{job_id}",
                     args=(session.client, job_id, task_id, stream, attempt, offset)).start()
    return StreamingResponse(_events(follower), media_type="text/event-stream",
                             headers={"cache-control": "no-store", "x-accel-buffering": "no"})


def _number(request: Request, name: str, minimum: int) -> int:
    text = request.query_params.get(name, "")
    if not text.isdigit() or not minimum <= int(text) < MAX_OFFSET:
        raise PageError(400, f"{name} {text[:20]!r} is not a whole number from {minimum}")
    return int(text)


async def _events(follower: _Follower) -> AsyncIterator[str]:
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    try:
        while True:
            try:
                await asyncio.wait_for(follower.ready.wait(), KEEPALIVE_S)
            except TimeoutError:
                yield ": keepalive\n\n"
                continue
            follower.ready.clear()
            for item in _drain(follower.pieces):
                if isinstance(item, _End):
                    yield _ended(item)
                    return
                start, data = item
                text, pending = _decoded(decoder, data)
                if text:  # else a character cut in two waits for its rest
                    document = {"text": text, "next": start + len(data) - pending}
                    yield f"event: output\ndata: {json.dumps(document)}\n\n"
    finally:
        follower.stop()


def _drain(pieces: queue.Queue[tuple[int, bytes] | _End]) -> list[tuple[int, bytes] | _End]:
    taken: list[tuple[int, bytes] | _End] = []
    while True:
        try:
            taken.append(pieces.get_nowait())
        except queue.Empty:
            return taken


def _ended(end: _End) -> str:
    if end.failed:
        return f"event: failed\ndata: {json.dumps(end.failed)}\n\n"
    return "event: ended\ndata: {}\n\n"
