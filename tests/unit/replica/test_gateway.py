"""The agent gateway's logic (raftsched.replica.gateway) against an in-memory log: the freed-slot
path of the scheduling loop (docs/architecture.md §8) and what a heartbeat delivers."""

from __future__ import annotations

import random
from typing import Any

import pytest

from raftsched.clock import ManualClock
from raftsched.errors import Code, RaftschedError
from raftsched.protocol import (
    Beat,
    Observation,
    Registration,
    Report,
    ReportKind,
    ReportVerdict,
    Resources,
)
from raftsched.replica.gateway import MAX_INCARNATION_STEP, AgentGateway, deliveries
from raftsched.replica.leader import Leader
from raftsched.spec.wire import doc_to_wire
from raftsched.state import commands as c
from raftsched.state.model import TaskState
from tests.support.memory_node import MemoryNode, make_leader

SLOTS = 2


def setup(tasks: int) -> tuple[MemoryNode, Leader, AgentGateway]:
    """A leader in office, one cluster with SLOTS cpu, a job of `tasks` one-cpu tasks."""
    node = MemoryNode()
    clock = ManualClock()
    leader = make_leader(node, clock)
    gateway = AgentGateway(node, leader, clock, random.Random(8))
    leader._round()  # takes office
    gateway.register(Registration("east", 1, ("linux",), Resources(SLOTS * 1000, 1024, 0), ()))
    doc = {"name": "j", "tasks": [{"id": f"t{i}", "command": ["true"],
                                   "resources": {"cpu": 1, "memory_mb": 1}}
                                  for i in range(tasks)]}
    node.propose(c.encode(c.JobSubmit("j", doc_to_wire(doc), 0)), 1)
    return node, leader, gateway


def running_all_slots(node: MemoryNode, leader: Leader, gateway: AgentGateway) -> list[int]:
    """Place, deliver and start SLOTS tasks; the agent then says it is full (seq 1)."""
    leader._round()
    directives = gateway.heartbeat(Beat("east", 1, 1, Resources(0, 1024, 0), (), 0))
    fences = [a.fence for a in directives.assignments]
    assert len(fences) == SLOTS
    started = [Report(ReportKind.STARTED, "j", a.task_id, a.fence)
               for a in directives.assignments]
    gateway.report("east", 1, started, Observation(2, Resources(0, 1024, 0)))
    leader._round()
    assert node.state.jobs["j"].counts[TaskState.ASSIGNED] == 0  # no room: nothing placed
    return fences


def test_a_finished_report_with_the_freed_capacity_fills_the_slot_at_once() -> None:
    node, leader, gateway = setup(tasks=5)
    fences = running_all_slots(node, leader, gateway)
    finished = Report(ReportKind.FINISHED, "j", "t0", fences[0], exit_code=0)
    reported = gateway.report("east", 1, [finished], Observation(3, Resources(1000, 1024, 0)))
    assert [v.verdict for v in reported.verdicts] == [ReportVerdict.ACCEPTED]
    leader._round()  # woken by the commit: no heartbeat in between
    job = node.state.jobs["j"]
    assert job.counts[TaskState.ASSIGNED] == 1 and job.counts[TaskState.SUCCEEDED] == 1


def test_without_the_observation_the_stale_heartbeat_keeps_the_slot_empty() -> None:
    """What the observation buys: the last heartbeat said "full", and nothing newer came."""
    node, leader, gateway = setup(tasks=5)
    fences = running_all_slots(node, leader, gateway)
    gateway.report("east", 1, [Report(ReportKind.FINISHED, "j", "t0", fences[0], exit_code=0)])
    leader._round()
    assert node.state.jobs["j"].counts[TaskState.ASSIGNED] == 0


def test_an_older_observation_never_overrides_a_newer_one() -> None:
    node, leader, gateway = setup(tasks=5)
    running_all_slots(node, leader, gateway)
    leader.heartbeat("east", 1, 9, (0, 1024, 0))
    gateway.report("east", 1, [], Observation(4, Resources(2000, 1024, 0)))
    assert leader.reported_free()["east"] == (0, 1024, 0)


def test_a_heartbeat_delivers_committed_assignments_once_then_waits() -> None:
    node, leader, gateway = setup(tasks=1)
    leader._round()
    first = gateway.heartbeat(Beat("east", 1, 1, Resources(2000, 1024, 0), (), 0))
    assert [a.task_id for a in first.assignments] == ["t0"] and not first.reregister
    assignment = first.assignments[0]
    assert assignment.idempotency_key == "j/t0" and assignment.resources.cpu_milli == 1000
    again = gateway.heartbeat(Beat("east", 1, 2, Resources(2000, 1024, 0), (), 0))
    assert again.assignments == ()  # already sent; redelivered only after REDELIVER_AFTER_S
    assert [a.fence for a in deliveries(node.state, "east")[0]] == [assignment.fence]


def test_an_unknown_incarnation_is_told_to_register_again() -> None:
    _, _, gateway = setup(tasks=1)
    directives = gateway.heartbeat(Beat("east", 2, 1, Resources(), (), 0))
    assert directives.reregister and directives.assignments == ()


def test_an_incarnation_cannot_jump_far_ahead() -> None:
    """A Register of incarnation 2**64 - 1 once locked the real agent out for good."""
    node, _, gateway = setup(tasks=1)
    applied = node.applied
    capacity = Resources(SLOTS * 1000, 1024, 0)
    with pytest.raises(RaftschedError) as refused:
        gateway.register(Registration("east", 2**64 - 1, ("linux",), capacity, ()))
    assert refused.value.code == Code.FAILED_PRECONDITION and "incarnation" in str(refused.value)
    assert node.applied == applied and node.state.clusters["east"].incarnation == 1
    gateway.register(Registration("east", 1 + MAX_INCARNATION_STEP, ("linux",), capacity, ()))
    assert node.state.clusters["east"].incarnation == 1 + MAX_INCARNATION_STEP


class DeferredNode(MemoryNode):
    """Entries wait in the log until an outcome is asked for; then everything appended up to
    it applies, in order. `before_wait` runs first: the leader plans while a report is still
    uncommitted."""

    def __init__(self) -> None:
        super().__init__()
        self.queued: list[bytes] = []
        self.before_wait: list[Any] = []
        self.outcomes: dict[int, Any] = {}

    def submit(self, data: bytes) -> Any:
        self.queued.append(data)
        position = self.applied + len(self.queued)
        node = self

        class Pending:
            def outcome(self, timeout_s: float) -> Any:
                while node.before_wait:
                    node.before_wait.pop(0)()
                return node.apply_through(position)

        return Pending()

    def propose(self, data: bytes, timeout_s: float) -> Any:
        if not self.queued:
            return super().propose(data, timeout_s)
        return self.submit(data).outcome(timeout_s)

    def apply_through(self, position: int) -> Any:
        while self.applied < position:
            index = self.applied + 1
            self.outcomes[index] = MemoryNode.propose(self, self.queued.pop(0), 1.0)
        return self.outcomes[position]


def test_the_next_assignment_rides_behind_the_report_in_the_log() -> None:
    """The leader plans as soon as the report is appended: its ASSIGN_BATCH is proposed before
    the report commits, applies right after it, and fills the slot the report frees."""
    node = DeferredNode()
    clock = ManualClock()
    leader = make_leader(node, clock)
    gateway = AgentGateway(node, leader, clock, random.Random(8))
    leader._round()
    gateway.register(Registration("east", 1, ("linux",), Resources(SLOTS * 1000, 1024, 0), ()))
    doc = {"name": "j", "tasks": [{"id": f"t{i}", "command": ["true"],
                                   "resources": {"cpu": 1, "memory_mb": 1}} for i in range(5)]}
    node.propose(c.encode(c.JobSubmit("j", doc_to_wire(doc), 0)), 1)
    fences = running_all_slots(node, leader, gateway)
    proposed = len(node.proposed)
    node.before_wait.append(leader._round)  # the leader's loop, woken by `releasing`
    finished = Report(ReportKind.FINISHED, "j", "t0", fences[0], exit_code=0)
    gateway.report("east", 1, [finished], Observation(3, Resources(1000, 1024, 0)))
    assert node.proposed[proposed:] == ["ReportBatch", "AssignBatch"]
    job = node.state.jobs["j"]
    assert job.counts[TaskState.ASSIGNED] == 1 and job.counts[TaskState.SUCCEEDED] == 1
    assert leader._releasing() == {}  # forgotten once the report's outcome is known
