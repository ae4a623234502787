"""Answering the leader's requests for task output (`task logs`): a LogRequest arrives with a
heartbeat answer; a thread of its own reads that piece of the attempt's `stdout` or `stderr`
(files the task wrapper writes in the attempt dir, kept after the attempt ends and across agent
restarts until old attempt dirs are pruned) and sends it back with SendLog. A slow send never
holds a heartbeat; at most MAX_QUEUED_LOG_REQUESTS wait, later ones are dropped (the leader
gives up on them and the client asks again)."""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path

from raftsched import limits
from raftsched.eventlog import EventLogger
from raftsched.protocol import LOG_STREAMS, LogChunk, LogRequest

log = EventLogger("agent.logs")

MAX_QUEUED_LOG_REQUESTS = 32
MAX_LOG_PIECE_BYTES = 64 * 1024
"""A piece is at most this big whatever the leader asks (its SendLog answer must pass)."""
IDLE_WAIT_S = 1.0


class LogServer:
    def __init__(self, attempt_dir: Callable[[int], str], send: Callable[[LogChunk], None],
                 stop: threading.Event) -> None:
        """`attempt_dir(fence)`: where the executor keeps an attempt's files ("" if it keeps
        none); `send`: SendLog to the leader (may raise; logged and dropped)."""
        self._attempt_dir = attempt_dir
        self._send = send
        self._stop = stop
        self._queue: deque[LogRequest] = deque()
        self._ready = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="agent-logs", daemon=True)
        self._thread.start()

    def submit(self, requests: Iterable[LogRequest]) -> None:
        with self._ready:
            for request in requests:
                if len(self._queue) >= MAX_QUEUED_LOG_REQUESTS:
                    log.warning("log_request_dropped", fence=request.fence,
                                queued=len(self._queue))
                    continue
                self._queue.append(request)
            self._ready.notify()

    def close(self) -> None:
        with self._ready:
            self._ready.notify()
        self._thread.join(timeout=IDLE_WAIT_S * 2)

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._ready:
                if not self._queue:
                    self._ready.wait(IDLE_WAIT_S)
                    continue
                request = self._queue.popleft()
            chunk = read_piece(self._attempt_dir(request.fence), request)
            try:
                self._send(chunk)
            except Exception as error:  # a session error: the leader's waiter times out
                log.warning("log_send_failed", fence=request.fence, error=repr(error))


def read_piece(attempt_dir: str, request: LogRequest) -> LogChunk:
    """The piece of `attempt_dir/stream` the request asks for, or why there is none."""
    def refused(error: str) -> LogChunk:
        return LogChunk(request.request_id, request.fence, 0, b"", 0, error)

    if request.stream not in LOG_STREAMS:
        return refused(f"no output stream {request.stream!r} (one of {', '.join(LOG_STREAMS)})")
    if not attempt_dir:
        return refused("this agent's executor keeps no task output (the mock executor)")
    directory = Path(attempt_dir)
    if not directory.is_dir():
        return refused(f"the output of fence {request.fence} is no longer on this agent (it "
                       f"keeps the newest {limits.MAX_RETAINED_ATTEMPT_DIRS} attempt dirs)")
    try:
        fd = os.open(directory / request.stream, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return LogChunk(request.request_id, request.fence, 0, b"", 0)  # not started yet
    except OSError as error:
        return refused(f"cannot read the {request.stream} of fence {request.fence}: "
                       f"{error.strerror}")
    with os.fdopen(fd, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        start = request.offset if request.offset >= 0 else max(0, size + request.offset)
        start = min(start, size)
        file.seek(start)
        data = file.read(max(0, min(request.max_bytes, MAX_LOG_PIECE_BYTES, size - start)))
    return LogChunk(request.request_id, request.fence, start, data, size)
