"""Waiting for pysyncobj's answers to submitted entries (`RaftNode.submit`, `propose_many`):
its callbacks `(result, fail_reason)` arrive on the tick thread, and a committed entry's result
is the applier's `PendingApply`, answered once the entry is applied."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from pysyncobj.config import FAIL_REASON

from raftsched.eventlog import EventLogger
from raftsched.replica.raft.applier import PendingApply
from raftsched.state.outcome import Applied, Rejected

log = EventLogger("raftsched.replica.raft.node")


class Replies:
    """Collects pysyncobj callbacks `(result, fail_reason)` for a batch of submissions."""

    _NONE: Any = object()

    def __init__(self, count: int, observe: ProposalObserver | None = None) -> None:
        self.results: list[Any] = [None] * count
        self.reasons: list[Any] = [self._NONE] * count
        self._left = count
        self._lock = threading.Lock()
        self.done = threading.Event()
        self._observe = observe
        self._started = time.monotonic()
        if count == 0:
            self.done.set()

    def callback(self, position: int, result: Any, reason: Any) -> None:
        """pysyncobj's callback (tick thread). A committed entry's result is the applier's
        PendingApply: the position is answered once that entry is applied."""
        if isinstance(result, PendingApply):
            result.when_done(lambda outcome: self._record(position, outcome, reason))
            return
        self._record(position, result, reason)

    def _record(self, position: int, result: Any, reason: Any) -> None:
        with self._lock:
            if self.reasons[position] is not self._NONE:
                return
            self.results[position] = result
            self.reasons[position] = reason
            self._left -= 1
            if self._left == 0:
                self.done.set()
        if self._observe is not None:
            try:
                self._observe(_proposal_outcome(result, reason), time.monotonic() - self._started)
            except Exception:
                log.exception("raft_proposal_observer_failed")

    def replied(self, position: int) -> bool:
        return self.reasons[position] is not self._NONE


ProposalObserver = Callable[[str, float], None]
"""(outcome, seconds from append to answer), once per proposed entry: outcome is "applied",
"rejected" (committed; the state machine refused it), "not_leader" or "unknown"."""


def _proposal_outcome(result: Any, reason: Any) -> str:
    if reason == FAIL_REASON.SUCCESS:
        if isinstance(result, Applied):
            return "applied"
        return "rejected" if isinstance(result, Rejected) else "unknown"
    if reason in (FAIL_REASON.NOT_LEADER, FAIL_REASON.MISSING_LEADER):
        return "not_leader"
    return "unknown"
