"""Task output from agents to clients, through the leader (`Scheduler.TaskLogs`).

Agents dial the leader, never the reverse, so the leader cannot ask an agent for a file when a
client wants it. Instead a `LogRequest` rides on the agent's next heartbeat answer (the
broker wakes the agent's open long poll, so that is at once), the agent reads the piece of the
attempt's output file and sends it back with `AgentGateway.SendLog`, and the broker hands it
to the client's stream that waits for it. Soft state of the leader: requests and waiters are
lost with leadership, and a client then gets UNAVAILABLE and asks again (of the new leader).

Bounded: at most MAX_WAITING_LOG_REQUESTS waiting at once on a replica (RESOURCE_EXHAUSTED
past it), MAX_LOG_REQUESTS_PER_BEAT handed out per heartbeat answer, LOG_CHUNK_BYTES per piece,
and a piece not sent within LOG_REQUEST_TIMEOUT_S is given up (UNAVAILABLE: the agent is slow,
cut off or down).
"""

from __future__ import annotations

import threading
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from raftsched.errors import Code, RaftschedError
from raftsched.protocol import LogChunk, LogRequest

LOG_CHUNK_BYTES = 64 * 1024
"""The most one piece of output carries (one SendLog message)."""
LOG_REQUEST_TIMEOUT_S = 15.0
MAX_WAITING_LOG_REQUESTS = 64
MAX_LOG_REQUESTS_PER_BEAT = 8


@dataclass
class _Waiter:
    cluster_id: str
    fence: int
    done: threading.Event = field(default_factory=threading.Event)
    chunk: LogChunk | None = None


class LogBroker:
    def __init__(self, wake: Callable[[], None]) -> None:
        """`wake` makes waiting heartbeats look again (`ChangeFeed.notify`)."""
        self._wake = wake
        self._lock = threading.Lock()
        self._pending: dict[str, deque[LogRequest]] = {}
        self._waiting: dict[str, _Waiter] = {}

    def fetch(self, cluster_id: str, fence: int, stream: str, offset: int,
              timeout_s: float = LOG_REQUEST_TIMEOUT_S,
              max_bytes: int = LOG_CHUNK_BYTES) -> LogChunk:
        """One piece of attempt `fence`'s `stream`, from the agent of `cluster_id`."""
        request = LogRequest(uuid.uuid4().hex, fence, stream, offset, max_bytes)
        waiter = _Waiter(cluster_id, fence)
        with self._lock:
            if len(self._waiting) >= MAX_WAITING_LOG_REQUESTS:
                raise RaftschedError(Code.RESOURCE_EXHAUSTED,
                                     f"{len(self._waiting)} pieces of task output are being "
                                     "fetched on this replica, the most it does at once "
                                     "(MAX_WAITING_LOG_REQUESTS); retry later")
            self._waiting[request.request_id] = waiter
            self._pending.setdefault(cluster_id, deque()).append(request)
        self._wake()
        if not waiter.done.wait(timeout_s):
            with self._lock:
                self._waiting.pop(request.request_id, None)
                queue = self._pending.get(cluster_id)
                if queue is not None and request in queue:
                    queue.remove(request)
            raise RaftschedError(Code.UNAVAILABLE,
                                 f"the agent of cluster {cluster_id} did not send the output "
                                 f"within {timeout_s:g} s (it may be down, cut off or busy)")
        assert waiter.chunk is not None
        return waiter.chunk

    def take(self, cluster_id: str) -> tuple[LogRequest, ...]:
        """The requests to hand out with this agent's heartbeat answer (then forgotten here:
        a lost answer means a waiter times out)."""
        with self._lock:
            queue = self._pending.get(cluster_id)
            if not queue:
                return ()
            taken = tuple(queue.popleft() for _ in range(min(len(queue),
                                                             MAX_LOG_REQUESTS_PER_BEAT)))
            if not queue:
                del self._pending[cluster_id]
            return taken

    def deliver(self, cluster_id: str, chunk: LogChunk) -> bool:
        """An agent's answer; False (ignored) unless a waiter asked that cluster for that
        fence under that request id."""
        with self._lock:
            waiter = self._waiting.get(chunk.request_id)
            if waiter is None or (waiter.cluster_id, waiter.fence) != (cluster_id, chunk.fence):
                return False
            del self._waiting[chunk.request_id]
            waiter.chunk = chunk
        waiter.done.set()
        return True

    def waiting(self) -> int:
        with self._lock:
            return len(self._waiting)
