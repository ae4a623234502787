"""The event stream's memory on one replica: the changes of the last committed entries applied
here, each with its entry's Raft index, kept for resumes (`WatchEvents`).

The state machine collects what each entry changed (`State.changes`, O(changes)); the applier
thread hands that list here with the entry's index (`record`), in log order, so every replica
derives the same events from the same log and any of them can serve a resume. What is kept is
bounded (limits.EVENT_RETENTION, the newest); a resume from before what is kept, or from before
this replica started or installed a snapshot (its window starts there), is `TooOld`.

Events are ordered by (index, seq): seq is an event's position among its entry's events. A
stream's place is such a pair (`Cursor`); a resume from an index is (index, SEQ_END).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from raftsched import limits
from raftsched.state.model import ALL_TENANTS, Change

SEQ_END = 2 ** 32
"""Past every seq of an entry: the cursor (index, SEQ_END) is after all of that entry's events."""

Cursor = tuple[int, int]
"""(index, seq) of the last event a stream has passed."""

Kept = tuple[int, int, Change]
"""(index, seq, change): one event as kept."""


class TooOld(Exception):
    """A resume from before what this replica keeps."""

    def __init__(self, from_index: int, oldest: int) -> None:
        super().__init__(
            f"events after index {from_index} are no longer kept on this replica: the oldest "
            f"index it can resume from is {oldest} (it keeps the last {limits.EVENT_RETENTION} "
            "events by default, from when it started or last installed a snapshot); list again, "
            "then watch from the list's applied_index")
        self.oldest = oldest


@dataclass(frozen=True, slots=True)
class Batch:
    events: Sequence[Kept]
    """The next events after the cursor asked for, in order (at most the limit asked for)."""
    last_index: int
    """The index of the last entry applied here when the batch was taken."""


class EventLog:
    """The kept events, shared by the applier thread (writes) and the streams (reads)."""

    def __init__(self, retention: int = limits.EVENT_RETENTION) -> None:
        assert retention > 0
        self._retention = retention
        self._condition = threading.Condition()
        self._events: list[Kept] = []
        self._floor: Cursor = (0, SEQ_END)
        """Events at or before this were dropped (or never seen): a cursor before it is too old."""
        self._last_index = 0
        self._version = 0

    # -- the applier thread ------------------------------------------------------------------

    def record(self, index: int, changes: Sequence[Change] | None) -> None:
        """The changes of the entry at `index`, just applied; None: a snapshot was installed
        at `index`, so what came before it cannot be told apart (the window starts there)."""
        with self._condition:
            if changes is None:
                self._events.clear()
                self._floor = (index, SEQ_END)
            else:
                older = len(self._events)
                self._events.extend((index, seq, change) for seq, change in enumerate(changes))
                self._drop_oldest(older)
            self._last_index = index
            self._version += 1
            self._condition.notify_all()

    def _drop_oldest(self, older: int) -> None:
        """Keep `retention` events, dropping only from the `older` ones: the newest entry is
        kept whole, however many events it made (a submit or cancel of a job of many tasks),
        so a stream that had caught up before it is never too old because of it."""
        excess = len(self._events) - self._retention
        if excess <= 0 or older == 0:
            return
        # Drop an eighth more than needed, so the list's front is cut once per many entries.
        cut = min(older, excess + self._retention // 8)
        index, seq, _ = self._events[cut - 1]
        self._floor = (index, seq)
        del self._events[:cut]

    # -- the streams -------------------------------------------------------------------------

    def last_index(self) -> int:
        with self._condition:
            return self._last_index

    def version(self) -> int:
        with self._condition:
            return self._version

    def after(self, cursor: Cursor, limit: int) -> Batch:
        """Up to `limit` kept events after `cursor`; TooOld if some may have been dropped."""
        with self._condition:
            if cursor < self._floor:
                raise TooOld(cursor[0], self._floor[0])
            start = bisect.bisect_right(self._events, cursor, key=lambda kept: kept[:2])
            return Batch(self._events[start:start + limit], self._last_index)

    def wait(self, seen: int, timeout_s: float) -> int:
        """Block until an entry is recorded after version `seen` (or `timeout_s`); the version."""
        with self._condition:
            self._condition.wait_for(lambda: self._version != seen, timeout_s)
            return self._version


@dataclass(frozen=True, slots=True)
class EventFilter:
    """What one stream asked for, as the caller may see it (the servicer scopes a tenant
    token's filter to its tenant)."""

    job_id: str = ""
    tenant: str = ""
    clusters: bool = False

    def matches(self, change: Change) -> bool:
        kind, job_id, tenant = change[0], change[1], change[2]
        if kind == "cluster":
            return self.clusters
        if self.job_id and job_id != self.job_id:
            return False
        return not self.tenant or self.tenant == ALL_TENANTS or tenant == self.tenant
