"""The jobs in submission order per tenant and per job state, and so counted: what ListJobs
pages through (oldest or newest first, from a page token) and counts by state, without a scan.

Derived from `State.jobs` (never in snapshots or digests: rebuilt when one is loaded, and
checked against a recount by `check_invariants`). The state machine keeps it on job creation,
on each job state change and when a finished job is forgotten. No imports from the model: keys
are plain (tenant, state number) pairs.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from operator import itemgetter

from raftsched import limits

Key = tuple[str | None, int | None]
"""(tenant, job state number); None: any tenant, any state."""

_HELD = itemgetter(1)
"""An entry's job id: None for a hole (ids are never empty), so `filter` drops the holes in C."""


@dataclass(slots=True)
class JobOrder:
    """Job ids in ascending seq (submission) order. A removed job leaves a hole (None) so a
    removal is O(log n); holes are compacted away when they outnumber the jobs."""

    seqs: list[int] = field(default_factory=list)
    ids: list[str | None] = field(default_factory=list)
    live: int = 0
    """Jobs held (the count of this key): len(seqs) minus the holes."""

    def add(self, seq: int, job_id: str) -> None:
        seqs = self.seqs
        if not seqs or seq > seqs[-1]:  # a new job: the newest (O(1))
            seqs.append(seq)
            self.ids.append(job_id)
        else:  # a job entering a state: its place among the others (a C memmove)
            at = bisect_left(seqs, seq)
            assert at == len(seqs) or seqs[at] != seq, f"job seq {seq} is already held"
            seqs.insert(at, seq)
            self.ids.insert(at, job_id)
        self.live += 1

    def remove(self, seq: int) -> None:
        at = bisect_left(self.seqs, seq)
        assert at < len(self.seqs) and self.seqs[at] == seq and self.ids[at] is not None, seq
        self.ids[at] = None
        self.live -= 1
        dead = len(self.seqs) - self.live
        if dead > self.live and dead >= limits.JOB_INDEX_COMPACT_MIN_HOLES:
            self._compact()

    def _compact(self) -> None:
        kept = [(s, i) for s, i in zip(self.seqs, self.ids, strict=True) if i is not None]
        self.seqs = [s for s, _ in kept]
        self.ids = [i for _, i in kept]

    def oldest_after(self, seq: int) -> Iterator[tuple[int, str]]:
        """(seq, job id) of the jobs with a seq above `seq`, oldest first."""
        seqs, ids = self.seqs, self.ids
        low = bisect_right(seqs, seq)
        while low < len(seqs):  # in slices: a scan runs in C but for the caller's loop
            high = low + limits.JOB_INDEX_SCAN_SLICE
            yield from filter(_HELD, zip(seqs[low:high], ids[low:high], strict=True))
            low = high

    def newest_before(self, seq: int | None) -> Iterator[tuple[int, str]]:
        """(seq, job id) of the jobs with a seq below `seq` (None: every job), newest first."""
        seqs, ids = self.seqs, self.ids
        high = len(seqs) if seq is None else bisect_left(seqs, seq)
        while high > 0:
            low = max(0, high - limits.JOB_INDEX_SCAN_SLICE)
            yield from filter(_HELD, zip(reversed(seqs[low:high]), reversed(ids[low:high]),
                                             strict=True))
            high = low

    def job_ids(self) -> list[str]:
        """Every job held, oldest first (O(n): for checks)."""
        return [i for i in self.ids if i is not None]


@dataclass(slots=True)
class JobIndex:
    """One JobOrder per (tenant, state), per tenant, per state and for all jobs, each job in
    four; an order with no job is dropped (tenants come and go). Counts are the orders' sizes."""

    orders: dict[Key, JobOrder] = field(default_factory=dict)

    def add(self, tenant: str, state: int, seq: int, job_id: str) -> None:
        for key in _keys(tenant, state):
            self._order_for(key).add(seq, job_id)

    def remove(self, tenant: str, state: int, seq: int) -> None:
        for key in _keys(tenant, state):
            order = self.orders[key]
            order.remove(seq)
            if not order.live:
                del self.orders[key]

    def move(self, tenant: str, old: int, new: int, seq: int, job_id: str) -> None:
        """The job `seq` of `tenant` went from state `old` to `new` (O(log n) + a memmove)."""
        for key in ((tenant, old), (None, old)):
            order = self.orders[key]
            order.remove(seq)
            if not order.live:
                del self.orders[key]
        for key in ((tenant, new), (None, new)):
            self._order_for(key).add(seq, job_id)

    def _order_for(self, key: Key) -> JobOrder:
        order = self.orders.get(key)
        if order is None:
            order = JobOrder()
            self.orders[key] = order
        return order

    def order(self, tenant: str | None, state: int | None) -> JobOrder:
        """The jobs of `tenant` in `state` (None: any); an empty order if there is none."""
        return self.orders.get((tenant, state)) or JobOrder()

    def count(self, tenant: str | None, state: int | None) -> int:
        order = self.orders.get((tenant, state))
        return 0 if order is None else order.live


def _keys(tenant: str, state: int) -> tuple[Key, Key, Key, Key]:
    return (tenant, state), (tenant, None), (None, state), (None, None)
