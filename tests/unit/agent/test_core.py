"""The agent core on its own, over the in-memory stores: each decision on a directive, with the
report it leaves in the outbox (the threads and stores around it: test_agent.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from agent.core import AgentCore, CoreConfig, Decision
from agent.executors import ExecutorError, Launch
from agent.fence import MemoryFenceStore
from agent.model import (
    Assignment,
    AttemptRecord,
    AttemptState,
    Completion,
    Directives,
    KillDirective,
    Registered,
    ReportKind,
    Resources,
)
from agent.outbox import MemoryOutbox
from raftsched.clock import ManualClock
from tests.support.agent import assignment

CAPACITY = Resources(1000, 1000, 0)


@dataclass
class FakeExecutor:
    started: list[int] = field(default_factory=list)
    killed: list[int] = field(default_factory=list)
    fail: set[int] = field(default_factory=set)
    completions: list[Completion] = field(default_factory=list)

    def attempt_dir(self, fence: int) -> str:
        return f"/attempts/{fence}"

    def start(self, assignment: Assignment) -> Launch:
        if assignment.fence in self.fail:
            raise ExecutorError("no wrapper")
        self.started.append(assignment.fence)
        return Launch(self.attempt_dir(assignment.fence), 1000 + assignment.fence)

    def adopt(self, record: AttemptRecord) -> bool:
        return record.wrapper_pid is not None

    def kill(self, fence: int) -> bool:
        self.killed.append(fence)
        return True

    def poll(self) -> list[Completion]:
        done, self.completions = self.completions, []
        return done

    def observed_free(self) -> Resources | None:
        return None


@dataclass
class Subject:
    core: AgentCore
    fences: MemoryFenceStore
    outbox: MemoryOutbox
    executor: FakeExecutor
    clock: ManualClock

    def answer(self, *assignments: Assignment, kills: tuple[KillDirective, ...] = (),
               term: int = 2) -> list[Decision]:
        return self.core.handle(Directives(term, assignments, kills))

    def reasons(self, kind: ReportKind) -> dict[int, str]:
        return {r.fence: r.reason for r in self.outbox.pending(100) if r.kind == kind}


def _subject(max_running: int = 10, pause: int = 100) -> Subject:
    fences, outbox, executor, clock = MemoryFenceStore(), MemoryOutbox(), FakeExecutor(), \
        ManualClock()
    core = AgentCore(CoreConfig("east", CAPACITY, max_running_attempts=max_running,
                                admission_pause_reports=pause),
                     clock, fences, outbox, executor)
    core.start()
    core.registered(Registered(2, "leader", 0, 0, ()))
    return Subject(core, fences, outbox, executor, clock)


def test_a_lower_term_is_ignored_whole_and_stores_nothing() -> None:
    subject = _subject()
    assert subject.answer(assignment(1), term=1) == [Decision.STALE_TERM]
    assert subject.fences.fence("job/t") is None and subject.executor.started == []
    assert subject.answer(assignment(1), term=3) == [Decision.STARTED]
    assert subject.fences.term() == 3


@pytest.mark.parametrize(("directive", "decision", "reason"), [
    (assignment(1, command=()), Decision.EMPTY_COMMAND, "empty command"),
    (assignment(1, resources=Resources(2000, 1, 0)), Decision.NO_CAPACITY, "no capacity"),
])
def test_a_refused_assignment_is_rejected_and_its_fence_kept(
        directive: Assignment, decision: Decision, reason: str) -> None:
    subject = _subject()
    assert subject.answer(directive) == [decision]
    assert subject.reasons(ReportKind.REJECTED)[1].startswith(reason)
    assert subject.fences.fence("job/t") == 1  # a redelivery is never run
    assert subject.answer(assignment(1)) == [Decision.SEEN_BEFORE]
    assert subject.executor.started == []


def test_no_more_attempts_run_than_the_agent_allows() -> None:
    subject = _subject(max_running=2)
    decisions = subject.answer(*(assignment(f, task_id=f"t{f}") for f in (1, 2, 3)))
    assert sorted(d.value for d in decisions) == ["started", "started", "too_many_running"]
    assert "2 attempts running" in subject.reasons(ReportKind.REJECTED)[3]


def test_a_stale_fence_is_rejected_and_a_redelivery_answered_again() -> None:
    subject = _subject()
    assert subject.answer(assignment(5)) == [Decision.STARTED]
    assert subject.answer(assignment(5)) == [Decision.REDELIVERY_ANSWERED]
    assert subject.answer(assignment(4)) == [Decision.STALE_FENCE]
    assert subject.reasons(ReportKind.REJECTED)[4].startswith("stale fence 4")
    assert subject.executor.started == [5]


def test_malformed_directives_are_skipped() -> None:
    subject = _subject()
    assert subject.answer(assignment(0)) == [Decision.MALFORMED]
    assert subject.answer(kills=(KillDirective("job", "t", 0),)) == [Decision.MALFORMED]
    assert subject.outbox.count() == 0


def test_admission_pauses_while_too_many_reports_wait() -> None:
    subject = _subject(pause=1)
    assert subject.answer(assignment(1)) == [Decision.STARTED]  # its STARTED report waits
    assert subject.answer(assignment(2, task_id="u")) == [Decision.ADMISSION_PAUSED]
    assert subject.fences.fence("job/u") is None  # not looked at: it may run when delivered again


def test_a_start_failure_is_rejected_and_leaves_no_record() -> None:
    subject = _subject()
    subject.executor.fail.add(1)
    assert subject.answer(assignment(1)) == [Decision.START_FAILED]
    assert subject.reasons(ReportKind.REJECTED)[1].startswith("could not start")
    assert subject.outbox.attempts() == []


def test_kills() -> None:
    subject = _subject()
    subject.answer(assignment(1))
    kill_running, kill_unknown = KillDirective("job", "t", 1), KillDirective("job", "u", 7)
    assert subject.answer(kills=(kill_running, kill_unknown)) == [Decision.KILL_REQUESTED,
                                                                  Decision.KILL_NOT_RUNNING]
    assert subject.executor.killed == [1]
    assert subject.reasons(ReportKind.KILLED) == {7: "not running on this agent"}
    assert subject.answer(assignment(7, task_id="u")) == [Decision.SEEN_BEFORE]
    subject.executor.completions.append(Completion(1, None, killed=True))
    assert subject.core.collect() == 1
    assert subject.answer(kills=(kill_running,)) == [Decision.KILL_SETTLED]


def test_an_attempt_recorded_but_never_launched_is_rejected_at_the_next_start() -> None:
    subject = _subject()
    record = AttemptRecord(3, "job", "t", 1, AttemptState.RUNNING, CAPACITY, "", 0)
    subject.outbox.write(records=[record])  # no wrapper pid: its process never started
    restarted = AgentCore(CoreConfig("east", CAPACITY), subject.clock, subject.fences,
                          subject.outbox, subject.executor)
    assert restarted.start() == [Decision.NEVER_STARTED]
    assert restarted.incarnation == 2
    assert subject.reasons(ReportKind.REJECTED)[3] == "the agent stopped before starting it"
