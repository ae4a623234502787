"""The agent's local queue (late binding, issue 24 item 1): admission into it, starting the next
attempt the moment a slot frees, kills and cancels of queued attempts, redelivery, and a restart
with a queue, over the in-memory stores and the lmdb ones (durability)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from agent import main
from agent.core import (
    QUEUE_WITHDRAWN_REASON,
    QUEUED_AT_RESTART_REASON,
    SUPERSEDED_REASON,
    WITHDRAWN_REASON,
    AgentCore,
    CoreConfig,
    Decision,
    FenceStore,
    Outbox,
)
from agent.fence import FenceStore as LmdbFenceStore
from agent.fence import MemoryFenceStore
from agent.metrics import AgentMetrics
from agent.model import (
    AttemptRecord,
    AttemptState,
    Completion,
    Directives,
    KillDirective,
    Registered,
    Reported,
    ReportKind,
    Resources,
    Verdict,
)
from agent.outbox import MemoryOutbox
from agent.outbox import Outbox as LmdbOutbox
from raftsched.clock import ManualClock
from raftsched.protocol import ReportVerdict
from tests.support.agent import assignment
from tests.unit.agent.test_core import FakeExecutor

CAPACITY = Resources(1000, 1000, 0)
SLOT = Resources(1000, 10, 0)
"""One task takes the whole cluster's cpu: a one-slot agent."""

Stores = tuple[FenceStore, Outbox]


class Disk:
    """The durable stores of one agent: in memory, or lmdb in a temp dir (reopened on restart)."""

    def __init__(self, kind: str, root: Path) -> None:
        self.kind, self.root = kind, root
        self.memory: Stores = (MemoryFenceStore(), MemoryOutbox())
        self.open: list[LmdbFenceStore | LmdbOutbox] = []

    def stores(self) -> Stores:
        if self.kind == "memory":
            return self.memory
        self.close()
        fences, outbox = LmdbFenceStore(self.root / "fence"), LmdbOutbox(self.root / "outbox")
        self.open = [fences, outbox]
        return fences, outbox

    def close(self) -> None:
        for store in self.open:
            store.close()
        self.open = []


@pytest.fixture(params=["memory", "lmdb"])
def disk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Disk]:
    subject = Disk(str(request.param), tmp_path)
    try:
        yield subject
    finally:
        subject.close()


class Agent:
    """One core over a disk, with a fake executor and a manual clock."""

    def __init__(self, disk: Disk, *, queue_depth: int = 1, max_running: int = 10,
                 executor: FakeExecutor | None = None, clock: ManualClock | None = None) -> None:
        self.fences, self.outbox = disk.stores()
        self.executor = executor or FakeExecutor()
        self.clock = clock or ManualClock()
        self.metrics = AgentMetrics()
        self.core = AgentCore(CoreConfig("east", CAPACITY, max_running_attempts=max_running,
                                         queue_depth=queue_depth),
                              self.clock, self.fences, self.outbox, self.executor, self.metrics)
        self.start_decisions = self.core.start()
        self.core.registered(Registered(2, "leader", 0, 0, ()))

    def answer(self, *assignments: object, kills: Sequence[KillDirective] = ()) -> list[Decision]:
        """The decisions, sorted (the core lists refusals before what it starts)."""
        decisions = self.core.handle(Directives(2, tuple(assignments), tuple(kills)))  # type: ignore[arg-type]
        return sorted(decisions, key=lambda d: d.value)

    def finish(self, *fences: int) -> list[Decision]:
        self.executor.completions += [Completion(f, 0) for f in fences]
        assert self.core.collect() == len(fences)
        return self.core.start_queued()

    def reports(self, fence: int) -> list[ReportKind]:
        return [r.kind for r in self.outbox.pending(1000) if r.fence == fence]

    def reason(self, fence: int, kind: ReportKind) -> str:
        return next(r.reason for r in self.outbox.pending(1000)
                    if r.fence == fence and r.kind == kind)

    def record(self, fence: int) -> AttemptRecord | None:
        return self.outbox.attempt(fence)

    def queued_gauge(self) -> float:
        value = self.metrics.registry.get_sample_value("raftsched_agent_attempts_queued")
        assert value is not None
        return value


def _task(fence: int, resources: Resources = SLOT, **kwargs: object) -> object:
    return assignment(fence, task_id=f"t{fence}", resources=resources, **kwargs)  # type: ignore[arg-type]


def _sorted(*decisions: Decision) -> list[Decision]:
    return sorted(decisions, key=lambda d: d.value)


# -- config ---------------------------------------------------------------------------------------

def test_the_registration_declares_the_queue_depth(disk: Disk) -> None:
    assert Agent(disk, queue_depth=3).core.registration().queue_depth == 3


def test_without_a_queue_no_room_is_refused_as_before(disk: Disk) -> None:
    agent = Agent(disk, queue_depth=0)
    assert agent.answer(_task(1), _task(2)) == _sorted(Decision.STARTED, Decision.NO_CAPACITY)
    assert agent.reports(2) == [ReportKind.REJECTED] and agent.record(2) is None


# -- admission ------------------------------------------------------------------------------------

def test_what_finds_no_room_is_queued_durably_with_its_report(disk: Disk) -> None:
    agent = Agent(disk, queue_depth=1)
    assert agent.answer(_task(1), _task(2), _task(3)) == _sorted(
        Decision.STARTED, Decision.QUEUED, Decision.NO_CAPACITY)  # the queue holds one
    record = agent.record(2)
    assert record is not None and record.state == AttemptState.QUEUED
    assert agent.reports(2) == [ReportKind.QUEUED]
    assert agent.reports(3) == [ReportKind.REJECTED]
    assert agent.executor.started == [1] and agent.core.queued() == [2]
    assert agent.core.running() == [1] and agent.core.next_beat().running == (1,)
    assert agent.core.free() == Resources(0, 990, 0)  # a queued attempt holds nothing
    assert agent.queued_gauge() == 1
    known = {k.fence: k.running for k in agent.core.registration().known}
    assert known == {1: True, 2: False}


def test_the_running_bound_queues_too(disk: Disk) -> None:
    agent = Agent(disk, queue_depth=1, max_running=1)
    small = Resources(100, 1, 0)
    assert agent.answer(_task(1, small), _task(2, small)) == _sorted(Decision.STARTED,
                                                                     Decision.QUEUED)


@pytest.mark.parametrize(("directive", "decision"), [
    (_task(2, Resources(2000, 1, 0)), Decision.NO_CAPACITY),  # more than the whole cluster
    (_task(2, command=()), Decision.EMPTY_COMMAND),
])
def test_what_could_never_start_is_refused_not_queued(disk: Disk, directive: object,
                                                      decision: Decision) -> None:
    agent = Agent(disk, queue_depth=4)
    assert agent.answer(_task(1)) == [Decision.STARTED]
    assert agent.answer(directive) == [decision]
    assert agent.core.queued() == [] and agent.record(2) is None


def test_a_stale_fence_is_refused_before_the_queue(disk: Disk) -> None:
    agent = Agent(disk, queue_depth=4)
    agent.answer(_task(1), assignment(5, task_id="x", resources=SLOT))
    assert agent.answer(assignment(4, task_id="x", resources=SLOT)) == [Decision.STALE_FENCE]
    assert agent.core.queued() == [5]


# -- starting from the queue ----------------------------------------------------------------------

def test_a_queued_attempt_superseded_by_a_later_fence_of_its_task_never_starts(disk: Disk) -> None:
    """The leader ended fence 2 while it waited here (its QUEUED answer lost, its assignment
    timed out) and handed the task fence 5, queued too: when the slot frees, fence 2 leaves
    the queue REJECTED and only fence 5 runs (found by the simulation with several groups)."""
    agent = Agent(disk, queue_depth=2)
    agent.answer(_task(1), assignment(2, task_id="x", resources=SLOT))
    assert agent.answer(assignment(5, task_id="x", resources=SLOT)) == [Decision.QUEUED]
    assert agent.core.queued() == [2, 5]
    assert agent.finish(1) == [Decision.QUEUE_STARTED]
    assert agent.executor.started == [1, 5] and agent.core.queued() == []
    assert sorted(agent.reports(2)) == [ReportKind.REJECTED, ReportKind.QUEUED]
    assert agent.reason(2, ReportKind.REJECTED) == SUPERSEDED_REASON
    assert agent.record(2) is None


def test_a_freed_slot_starts_the_queued_attempt_after_the_finished_report(disk: Disk) -> None:
    agent = Agent(disk, queue_depth=1)
    agent.answer(_task(1), _task(2))
    agent.clock.advance(0.005)
    assert agent.finish(1) == [Decision.QUEUE_STARTED]
    assert agent.executor.started == [1, 2] and agent.core.queued() == []
    record = agent.record(2)
    assert record is not None and record.state == AttemptState.RUNNING
    assert record.wrapper_pid == 1002
    assert agent.reports(1) == [ReportKind.STARTED, ReportKind.FINISHED]
    assert agent.reports(2) == [ReportKind.STARTED, ReportKind.QUEUED]
    assert agent.core.running() == [2] and agent.queued_gauge() == 0
    turnaround = agent.metrics.registry.get_sample_value(
        "raftsched_agent_slot_turnaround_seconds_sum")
    print(f"slot turnaround from the queue: {turnaround} s (manual clock)")
    assert turnaround == 0  # started in the same call that freed the slot


def test_queued_attempts_start_in_fence_order_stopping_at_the_first_that_does_not_fit(
        disk: Disk) -> None:
    agent = Agent(disk, queue_depth=2)
    assert agent.answer(_task(1, Resources(600, 1, 0)), _task(2, Resources(300, 1, 0)),
                        _task(3, Resources(700, 1, 0)), _task(4, Resources(200, 1, 0))) == _sorted(
        Decision.STARTED, Decision.STARTED, Decision.QUEUED, Decision.QUEUED)
    assert agent.finish(2) == []  # 400 free: 3 does not fit, and 4 does not jump it
    assert agent.core.queued() == [3, 4]
    assert agent.finish(1) == [Decision.QUEUE_STARTED, Decision.QUEUE_STARTED]
    assert agent.executor.started == [1, 2, 3, 4]


def test_the_next_answer_starts_the_queue_before_its_own_work(disk: Disk) -> None:
    agent = Agent(disk, queue_depth=1)
    agent.answer(_task(1), _task(2))
    agent.executor.completions.append(Completion(1, 0))
    agent.core.collect()  # a caller that did not start the queue: the next answer does
    assert agent.answer(_task(3)) == _sorted(Decision.QUEUE_STARTED, Decision.QUEUED)
    assert agent.executor.started == [1, 2]


def test_a_queued_attempt_that_fails_to_start_is_rejected(disk: Disk) -> None:
    agent = Agent(disk, queue_depth=1)
    agent.answer(_task(1), _task(2))
    agent.executor.fail.add(2)
    assert agent.finish(1) == [Decision.START_FAILED]
    assert agent.record(2) is None and ReportKind.REJECTED in agent.reports(2)


# -- kills and cancels ----------------------------------------------------------------------------

def test_a_kill_withdraws_a_queued_attempt_and_it_never_starts(disk: Disk) -> None:
    agent = Agent(disk, queue_depth=1)
    agent.answer(_task(1), _task(2))
    assert agent.answer(kills=[KillDirective("job", "t2", 2)]) == [Decision.KILL_QUEUED]
    assert agent.core.queued() == [] and agent.record(2) is None
    assert agent.reason(2, ReportKind.KILLED) == QUEUE_WITHDRAWN_REASON
    assert agent.fences.fence("job/t2") == 2
    assert agent.finish(1) == []
    assert agent.answer(_task(2)) == [Decision.SEEN_BEFORE]
    assert agent.executor.started == [1] and agent.executor.killed == []
    assert agent.queued_gauge() == 0


def test_the_registration_stop_list_withdraws_a_queued_attempt(disk: Disk) -> None:
    agent = Agent(disk, queue_depth=1)
    agent.answer(_task(1), _task(2))
    agent.core.registered(Registered(2, "leader", 0, 0, (KillDirective("job", "t2", 2),)))
    assert agent.core.queued() == [] and agent.record(2) is None
    assert agent.reason(2, ReportKind.KILLED) == QUEUE_WITHDRAWN_REASON
    agent.finish(1)
    assert agent.executor.started == [1]


def withdraw(fence: int) -> KillDirective:
    return KillDirective("job", f"t{fence}", fence, withdraw=True)


def test_a_withdraw_directive_drops_a_queued_attempt_answered_withdrawn(disk: Disk) -> None:
    agent = Agent(disk, queue_depth=1)
    agent.answer(_task(1), _task(2))
    assert agent.answer(kills=[withdraw(2)]) == [Decision.WITHDRAWN]
    assert agent.core.queued() == [] and agent.record(2) is None
    assert agent.reports(2) == [ReportKind.QUEUED, ReportKind.WITHDRAWN]
    assert agent.reason(2, ReportKind.WITHDRAWN) == WITHDRAWN_REASON
    assert agent.fences.fence("job/t2") == 2  # it never starts here later
    assert agent.finish(1) == []
    assert agent.answer(_task(2)) == [Decision.SEEN_BEFORE]
    assert agent.executor.started == [1] and agent.executor.killed == []


def test_a_withdraw_directive_leaves_what_runs_alone(disk: Disk) -> None:
    """Started before the directive arrived: it runs on (the leader hears STARTED and the
    withdrawal is void); nothing is killed and no WITHDRAWN is reported."""
    agent = Agent(disk, queue_depth=1)
    agent.answer(_task(1), _task(2))
    agent.finish(1)  # the slot freed: the queued attempt started
    assert agent.answer(kills=[withdraw(2)]) == [Decision.WITHDRAW_TOO_LATE]
    assert agent.executor.started == [1, 2] and agent.executor.killed == []
    assert ReportKind.WITHDRAWN not in agent.reports(2)


def test_a_withdraw_directive_for_a_fence_never_seen_stores_it(disk: Disk) -> None:
    """The directive overtook its assignment: answered WITHDRAWN, and the assignment, when it
    comes, is a redelivery that never starts."""
    agent = Agent(disk, queue_depth=1)
    assert agent.answer(kills=[withdraw(5)]) == [Decision.WITHDRAWN]
    assert agent.reports(5) == [ReportKind.WITHDRAWN]
    assert agent.answer(_task(5)) == [Decision.SEEN_BEFORE]
    assert agent.executor.started == []


# -- redelivery -----------------------------------------------------------------------------------

def test_a_redelivered_queued_fence_is_answered_queued_again_never_queued_twice(
        disk: Disk) -> None:
    agent = Agent(disk, queue_depth=2)
    agent.answer(_task(1), _task(2))
    assert agent.answer(_task(2)) == [Decision.REDELIVERY_ANSWERED]
    assert agent.core.queued() == [2] and agent.reports(2) == [ReportKind.QUEUED]
    batch = agent.core.pending(100)
    agent.core.reported(batch, Reported(2, tuple(Verdict(r.fence, ReportVerdict.ACCEPTED)
                                                  for r in batch)))
    assert agent.answer(_task(2)) == [Decision.REDELIVERY_CROSSED]  # crossed the ack
    agent.clock.advance(60)
    assert agent.answer(_task(2)) == [Decision.REDELIVERY_ANSWERED]  # past the window
    assert agent.reports(2) == [ReportKind.QUEUED]
    assert agent.finish(1) == [Decision.QUEUE_STARTED]
    assert agent.answer(_task(2)) == [Decision.REDELIVERY_ANSWERED]  # now STARTED
    assert agent.finish(2) == []
    assert agent.executor.started == [1, 2]


# -- restart --------------------------------------------------------------------------------------

def test_a_restarted_agent_rejects_its_queue_and_never_starts_it(disk: Disk) -> None:
    first = Agent(disk, queue_depth=2)
    first.answer(_task(1), _task(2), _task(3))
    assert first.core.queued() == [2, 3]
    executor = first.executor  # the running attempt's process outlives the agent
    restarted = Agent(disk, queue_depth=2, executor=executor, clock=first.clock)
    assert restarted.start_decisions == [Decision.QUEUED_AT_RESTART] * 2
    assert restarted.core.queued() == [] and restarted.core.running() == [1]
    for fence in (2, 3):
        assert restarted.record(fence) is None
        assert restarted.reason(fence, ReportKind.REJECTED) == QUEUED_AT_RESTART_REASON
    assert [(k.fence, k.running) for k in restarted.core.registration().known] == [(1, True)]
    assert restarted.finish(1) == []
    assert restarted.answer(_task(2)) == [Decision.SEEN_BEFORE]
    assert executor.started == [1]


class CrashingOutbox:
    """Fails the write that would queue an attempt (the agent dies there: nothing of it is
    written, the transaction is one)."""

    def __init__(self, inner: Outbox) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Callable[..., object]:
        return getattr(self.inner, name)  # type: ignore[no-any-return]

    def write(self, **kwargs: object) -> int:
        records = kwargs.get("records", ())
        if any(r.state == AttemptState.QUEUED for r in records):  # type: ignore[attr-defined]
            raise OSError("crashed while writing the queue")
        return self.inner.write(**kwargs)  # type: ignore[arg-type]


def test_a_crash_while_queueing_leaves_neither_record_nor_report_and_it_never_runs(
        disk: Disk) -> None:
    fences, outbox = disk.stores()
    executor, clock = FakeExecutor(), ManualClock()
    core = AgentCore(CoreConfig("east", CAPACITY, queue_depth=1), clock, fences,
                     CrashingOutbox(outbox), executor)  # type: ignore[arg-type]
    core.start()
    core.registered(Registered(2, "leader", 0, 0, ()))
    with pytest.raises(OSError):
        core.handle(Directives(2, (_task(1), _task(2)), ()))  # type: ignore[arg-type]
    assert outbox.attempt(2) is None and not any(r.fence == 2 for r in outbox.pending(100))
    restarted = Agent(disk, queue_depth=1, executor=executor, clock=clock)
    # The fences were stored first; the records of the one answer (to start, to queue) are one
    # write, so neither attempt started: both are refused when delivered again.
    assert restarted.answer(_task(1), _task(2)) == [Decision.SEEN_BEFORE] * 2
    assert executor.started == [] and restarted.core.queued() == []


def test_a_crash_after_queueing_is_reported_rejected_after_the_restart(disk: Disk) -> None:
    first = Agent(disk, queue_depth=1)
    first.answer(_task(1), _task(2))  # queued and its QUEUED report written, never sent
    restarted = Agent(disk, queue_depth=1, executor=first.executor, clock=first.clock)
    assert restarted.reports(2) == [ReportKind.REJECTED, ReportKind.QUEUED]
    assert restarted.record(2) is None and restarted.finish(1) == []
    assert first.executor.started == [1]


# -- one synced write on a freed slot's path (issue 24 item 4) -----------------------------------

Write = tuple[int, list[tuple[int, AttemptState]], list[tuple[int, ReportKind]]]
"""(attempts started before it, its records' (fence, state), its reports' (fence, kind))."""


class CountingOutbox:
    """Records each write's records and reports, and how many attempts had started by then."""

    def __init__(self, inner: Outbox, executor: FakeExecutor) -> None:
        self.inner, self.executor = inner, executor
        self.writes: list[Write] = []

    def __getattr__(self, name: str) -> Callable[..., object]:
        return getattr(self.inner, name)  # type: ignore[no-any-return]

    def write(self, **kwargs: object) -> int:
        records = [(r.fence, r.state) for r in kwargs.get("records", ())]  # type: ignore[attr-defined]
        reports = [(r.fence, r.kind) for r in kwargs.get("reports", ())]  # type: ignore[attr-defined]
        if records or reports or kwargs.get("delete_records"):
            self.writes.append((len(self.executor.started), records, reports))
        return self.inner.write(**kwargs)  # type: ignore[arg-type]


def _counted(disk: Disk, queue_depth: int = 1) -> tuple[AgentCore, FakeExecutor, CountingOutbox]:
    fences, outbox = disk.stores()
    executor = FakeExecutor()
    counting = CountingOutbox(outbox, executor)
    core = AgentCore(CoreConfig("east", CAPACITY, queue_depth=queue_depth), ManualClock(), fences,
                     counting, executor)  # type: ignore[arg-type]
    core.start()
    core.registered(Registered(2, "leader", 0, 0, ()))
    return core, executor, counting


def test_a_freed_slot_starts_its_queued_attempt_after_one_synced_write(disk: Disk) -> None:
    core, executor, outbox = _counted(disk)
    core.handle(Directives(2, (_task(1), _task(2)), ()))  # type: ignore[arg-type]
    outbox.writes.clear()
    executor.completions.append(Completion(1, 0))
    assert core.collect_and_start() == (1, [Decision.QUEUE_STARTED])
    assert executor.started == [1, 2]
    before_start = [w for w in outbox.writes if w[0] == 1]
    assert len(before_start) == 1  # was two: the FINISHED write, then the RUNNING record's
    _, records, reports = before_start[0]
    assert records == [(1, AttemptState.FINISHED), (2, AttemptState.RUNNING)]
    assert reports == [(1, ReportKind.FINISHED)]
    assert [r.kind for r in outbox.inner.pending(100) if r.fence == 2] == [
        ReportKind.STARTED, ReportKind.QUEUED]


def test_collect_and_start_with_an_empty_queue_still_writes_the_completion(disk: Disk) -> None:
    core, executor, outbox = _counted(disk, queue_depth=0)
    core.handle(Directives(2, (_task(1),), ()))  # type: ignore[arg-type]
    executor.completions.append(Completion(1, 0))
    assert core.collect_and_start() == (1, [])
    assert outbox.writes[-1][1:] == ([(1, AttemptState.FINISHED)], [(1, ReportKind.FINISHED)])
    assert ReportKind.FINISHED in [r.kind for r in outbox.inner.pending(100) if r.fence == 1]
    assert core.collect_and_start() == (0, [])


def test_a_crash_in_the_one_write_leaves_the_queued_attempt_unstarted(disk: Disk) -> None:
    core, executor, outbox = _counted(disk)
    core.handle(Directives(2, (_task(1), _task(2)), ()))  # type: ignore[arg-type]
    executor.completions.append(Completion(1, 0))

    def crash(**kwargs: object) -> int:
        raise OSError("crashed in the write")

    outbox.write = crash  # type: ignore[method-assign]
    with pytest.raises(OSError):
        core.collect_and_start()
    assert executor.started == [1]  # nothing started before its record was written
    restarted = Agent(disk, queue_depth=1, executor=executor)
    assert restarted.record(2) is None and restarted.reports(2) == [
        ReportKind.REJECTED, ReportKind.QUEUED]  # rejected at restart, never started
    assert executor.started == [1]


# -- the agent's flag -----------------------------------------------------------------------------

def test_the_queue_depth_flag_defaults_to_a_tenth_of_the_cores_and_is_bounded() -> None:
    parser = argparse.ArgumentParser()
    main.add_arguments(parser)
    assert "max(1, --cpu cores // 10)" in " ".join(parser.format_help().split())
    assert [main.default_queue_depth(c) for c in (0, 1, 9.5, 10, 16, 64)] == [1, 1, 1, 1, 1, 6]
    base = ["--cluster-id", "east", "--servers", "127.0.0.1:1", "--data-dir", "/tmp/x"]
    config, _ = main._config(parser.parse_args([*base, "--cpu", "32"]))
    assert config.queue_depth == 3
    config, _ = main._config(parser.parse_args([*base, "--queue-depth", "0"]))
    assert config.queue_depth == 0
    with pytest.raises(SystemExit):
        parser.parse_args([*base, "--queue-depth", "1025"])
    # Custom resources: the scheduler never queues a task that asks for one (it holds their
    # room before the agent starts it), so a queue is as safe there as anywhere.
    config, _ = main._config(parser.parse_args([*base, "--cpu", "32", "--resources", "fpga=1"]))
    assert config.queue_depth == 3
    config, _ = main._config(parser.parse_args([*base, "--resources", "fpga=1",
                                                "--queue-depth", "2"]))
    assert config.queue_depth == 2
