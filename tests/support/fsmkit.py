"""A small driver for the state machine in tests: builds commands, applies them through the real
encode/decode path, and checks every invariant after each apply."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from raftsched.protocol import ReportVerdict
from raftsched.spec.wire import doc_to_wire
from raftsched.state import commands as c
from raftsched.state import fsm, invariants
from raftsched.state.model import Attempt, Job, ReadyEntry, State, Task, TaskShape
from raftsched.state.outcome import Applied, Outcome
from raftsched.state.queries import ready_entry_live
from raftsched.state.results import AssignResult, ReportResult, Result, TickResult

R = TypeVar("R")


def ready_queues(state: State) -> dict[str, tuple[int, list[ReadyEntry], dict[TaskShape, int]]]:
    """The ready queues as they mean: per tenant, the live count, the live entries in order, and
    the live count per shape (not the stale entries or heap layout a replica happens to hold)."""
    return {tenant: (queue.live,
                     sorted(e for q in queue.shapes.values() for e in q.heap
                            if ready_entry_live(state, e)),
                     {shape: q.live for shape, q in queue.shapes.items()})
            for tenant, queue in state.queues.items()}


def assert_same_state(a: State, b: State) -> None:
    """`a == b` field by field, with the ready queues compared by what they hold (a replica
    restored from a snapshot holds no stale entries; one that applied the log may)."""
    assert ready_queues(a) == ready_queues(b)
    assert dataclasses.replace(a, queues={}) == dataclasses.replace(b, queues={})


def task_doc(task_id: str, deps: list[str] | None = None, **fields: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"id": task_id, "command": ["true"], "depends_on": deps or []}
    doc.update(fields)
    return doc


def job_doc(tasks: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    """A job document; `allow_unschedulable` defaults to true here, so tests may submit before
    they register the clusters that fit (the submit-time refusal has tests of its own)."""
    doc: dict[str, Any] = {"name": "test-job", "allow_unschedulable": True, "tasks": tasks}
    doc.update(fields)
    return doc


class Harness:
    def __init__(self, state: State | None = None, *, check_every: int = 1) -> None:
        """`check_every`: run the O(state) invariant check after every n-th apply (big DAGs)."""
        self.state = state if state is not None else State()
        self.check_every = check_every
        self.now_ms = 1_000
        self.entropy = 0
        self.log: list[bytes] = []

    # -- plumbing --------------------------------------------------------------------------------
    def run(self, cmd: c.Command) -> Outcome:
        entry = c.encode(cmd)
        self.log.append(entry)
        outcome = fsm.apply(self.state, entry)
        if len(self.log) % self.check_every == 0:
            invariants.check_invariants(self.state)
        return outcome

    def ok(self, cmd: c.Command) -> Result:
        outcome = self.run(cmd)
        assert isinstance(outcome, Applied), outcome
        return outcome.result

    def expect(self, cmd: c.Command, kind: type[R]) -> R:
        """Apply `cmd`; it must be applied with a result of type `kind`."""
        result = self.ok(cmd)
        assert isinstance(result, kind), result
        return result

    def _entropy(self) -> int:
        self.entropy += 1
        return (self.entropy * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF

    # -- commands --------------------------------------------------------------------------------
    def submit(self, job_id: str, doc: dict[str, Any]) -> Outcome:
        return self.run(c.JobSubmit(job_id, doc_to_wire(doc), self.now_ms))

    def register(self, cluster_id: str, caps: tuple[str, ...] = ("linux",), cpu: float = 8,
                 memory_mb: int = 16_384, gpu: int = 0, incarnation: int = 1,
                 known: tuple[c.KnownAttempt, ...] = (), queue_depth: int = 0) -> Outcome:
        return self.run(c.ClusterRegister(cluster_id, incarnation, caps, int(cpu * 1000),
                                          memory_mb, gpu, self.now_ms, known,
                                          queue_depth=queue_depth))

    def status(self, cluster_id: str, status: c.ClusterStatus) -> Outcome:
        return self.run(c.ClusterStatusChange(cluster_id, status, self.now_ms, "test"))

    def assign(self, *items: tuple[str, str, str]) -> AssignResult:
        placements = tuple(c.Placement(*item) for item in items)
        return self.expect(c.AssignBatch(self.now_ms, placements), AssignResult)

    def assign_one(self, job_id: str, task_id: str, cluster_id: str) -> int:
        result = self.assign((job_id, task_id, cluster_id))
        [(_, fence)] = result.assigned
        return fence

    def report(self, cluster_id: str, *reports: c.Report) -> list[ReportVerdict]:
        result = self.expect(c.ReportBatch(cluster_id, self.now_ms, self._entropy(), reports),
                             ReportResult)
        return list(result.verdicts)

    def started(self, cluster_id: str, job_id: str, task_id: str, fence: int) -> ReportVerdict:
        return self.report(cluster_id, c.Report(c.ReportKind.STARTED, job_id, task_id, fence))[0]

    def finished(self, cluster_id: str, job_id: str, task_id: str, fence: int,
                 exit_code: int = 0, timed_out: bool = False) -> ReportVerdict:
        report = c.Report(c.ReportKind.FINISHED, job_id, task_id, fence, exit_code, timed_out)
        return self.report(cluster_id, report)[0]

    def rejected(self, cluster_id: str, job_id: str, task_id: str,
                 fence: int) -> ReportVerdict:
        report = c.Report(c.ReportKind.REJECTED, job_id, task_id, fence, reason="no room")
        return self.report(cluster_id, report)[0]

    def queued(self, cluster_id: str, job_id: str, task_id: str, fence: int) -> ReportVerdict:
        return self.report(cluster_id, c.Report(c.ReportKind.QUEUED, job_id, task_id, fence))[0]

    def tick(self, advance_ms: int = 0) -> TickResult:
        self.now_ms += advance_ms
        return self.expect(c.Tick(self.now_ms, self._entropy()), TickResult)

    def cancel(self, job_id: str) -> Outcome:
        return self.run(c.JobCancel(job_id, self.now_ms, "test"))

    def run_task(self, cluster_id: str, job_id: str, task_id: str, exit_code: int = 0) -> int:
        fence = self.assign_one(job_id, task_id, cluster_id)
        assert self.started(cluster_id, job_id, task_id, fence) == ReportVerdict.ACCEPTED
        assert self.finished(cluster_id, job_id, task_id, fence, exit_code) \
            == ReportVerdict.ACCEPTED
        return fence

    # -- reads -----------------------------------------------------------------------------------
    def job(self, job_id: str) -> Job:
        return self.state.jobs[job_id]

    def task(self, job_id: str, task_id: str) -> Task:
        job = self.job(job_id)
        return job.tasks[job.index_of[task_id]]

    def states(self, job_id: str) -> dict[str, str]:
        return {t.spec.id: t.state.name for t in self.job(job_id).tasks}

    def current(self, job_id: str, task_id: str) -> Attempt:
        attempt = self.task(job_id, task_id).current
        assert attempt is not None
        return attempt
