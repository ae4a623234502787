"""Applying committed entries on a thread of their own, so Raft never waits for the state machine.

pysyncobj calls its replicated method on its one tick thread, which also sends heartbeats,
answers votes and moves the log. A large entry (a job of many thousands of tasks) takes a second
or more to apply; done there, it silences the replica for longer than an election timeout, and
the cluster elects a new leader for nothing. So the replicated method only hands the entry to an
`Applier` (in log order) and returns a `PendingApply`; the applier thread applies entries one by
one, in that order, and completes each pending outcome, which is what proposers wait for.

The tick thread still owns everything pysyncobj relies on being "applied" for:
- a snapshot is written only while the applier is idle (`idle()`): the state then reflects
  exactly the entries pysyncobj has handed over; otherwise the dump waits for a later tick;
- installing a snapshot first discards what is queued (it is superseded: pysyncobj hands the
  entries after the snapshot over again) and waits for the entry being applied, if any;
- the backlog is bounded (limits.MAX_APPLY_BACKLOG): past it the tick thread waits, bounded by
  APPLY_BACKPRESSURE_WAIT_S per round, for the applier to catch up.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from raftsched import limits

APPLY_BACKPRESSURE_WAIT_S = 0.05
"""How long the tick thread waits, at a time, for room in a full backlog."""
STOP_TIMEOUT_S = 10.0

Apply = Callable[[bytes, int], Any]
"""(entry bytes, log index) -> the state machine's outcome; raising stops the replica."""


class PendingApply:
    """The outcome of one entry, once the applier has applied it (None if it never will be:
    superseded by a snapshot, or the replica stopped)."""

    __slots__ = ("_callbacks", "_done", "_lock", "outcome")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = False
        self._callbacks: list[Callable[[Any], None]] = []
        self.outcome: Any = None

    def when_done(self, callback: Callable[[Any], None]) -> None:
        """Call `callback(outcome)` once it is known (at once if it is)."""
        with self._lock:
            if not self._done:
                self._callbacks.append(callback)
                return
        callback(self.outcome)

    def complete(self, outcome: Any) -> None:
        with self._lock:
            if self._done:
                return
            self._done, self.outcome = True, outcome
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(outcome)


class Applier:
    def __init__(self, apply: Apply, name: str,
                 max_backlog: int = limits.MAX_APPLY_BACKLOG) -> None:
        self._apply = apply
        self._max_backlog = max_backlog
        self._condition = threading.Condition()
        self._queue: deque[tuple[int, bytes, PendingApply]] = deque()
        self._busy = False
        self._stopped = False
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # -- the tick thread ---------------------------------------------------------------------

    def submit(self, index: int, data: bytes) -> PendingApply:
        """Queue a committed entry (called in log order); its outcome comes later."""
        pending = PendingApply()
        with self._condition:
            while len(self._queue) >= self._max_backlog and not self._stopped:
                self._condition.wait(APPLY_BACKPRESSURE_WAIT_S)
            if self._stopped:
                pending.complete(None)
                return pending
            self._queue.append((index, data, pending))
            self._condition.notify_all()
        return pending

    def idle(self) -> bool:
        """Nothing queued and nothing being applied: the state reflects every entry handed
        over so far."""
        with self._condition:
            return not self._queue and not self._busy

    def discard(self) -> None:
        """Drop what is queued (superseded by a snapshot) and wait for the entry being applied,
        if any. Their proposers learn nothing (an unknown outcome): the snapshot decides."""
        with self._condition:
            dropped = list(self._queue)
            self._queue.clear()
            while self._busy:
                self._condition.wait()
        for _, _, pending in dropped:
            pending.complete(None)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        with self._condition:
            self._stopped = True
            self._condition.notify_all()
        self._thread.join(timeout_s)
        self.discard()

    @property
    def backlog(self) -> int:
        with self._condition:
            return len(self._queue)

    # -- the applier thread ------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._queue and not self._stopped:
                    self._condition.wait()
                if self._stopped:
                    return
                index, data, pending = self._queue.popleft()
                self._busy = True
                self._condition.notify_all()
            outcome: Any = None
            try:
                outcome = self._apply(data, index)
            except BaseException as error:  # the replica stops (the apply function said so)
                self._failure = error
                with self._condition:
                    self._stopped = True
            finally:
                with self._condition:
                    self._busy = False
                    self._condition.notify_all()
                pending.complete(outcome)
