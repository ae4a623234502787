"""The leader loop against an in-memory log (the real FSM, no Raft) and a manual clock."""

from __future__ import annotations

import random
from typing import Any

from raftsched.clock import ManualClock, ProposalClock
from raftsched.protocol import ReportVerdict
from raftsched.replica.leader import Leader, LeaderConfig
from raftsched.spec.wire import doc_to_wire
from raftsched.state import commands as c
from raftsched.state.model import TaskState
from raftsched.state.outcome import Applied
from raftsched.state.results import ReportResult
from tests.support.memory_node import MemoryNode, make_leader


def make() -> tuple[MemoryNode, ManualClock, Leader]:
    node = MemoryNode()
    clock = ManualClock()
    leader = make_leader(node, clock)
    node.propose(c.encode(c.ClusterRegister("east", 1, ("linux",), 4000, 4096, 0, 0)), 1)
    return node, clock, leader


def submit(node: MemoryNode, job_id: str, tasks: int, requires: str = "linux") -> None:
    doc = {"name": job_id, "allow_unschedulable": True,
           "tasks": [{"id": f"t{i}", "command": ["true"], "requires": [requires]}
                     for i in range(tasks)]}
    outcome = node.propose(c.encode(c.JobSubmit(job_id, doc_to_wire(doc), 0)), 1)
    assert isinstance(outcome, Applied), outcome


def test_takes_office_with_a_barrier_then_places() -> None:
    node, _, leader = make()
    submit(node, "j1", 3)
    leader._round()
    assert node.proposed[-1] == "Barrier" and leader.leading()
    assert node.state.replica_addresses == {"127.0.0.1:1": "127.0.0.1:2"}
    leader._round()
    assert "AssignBatch" in node.proposed
    assert node.state.jobs["j1"].counts[TaskState.ASSIGNED] == 3


def test_unplaceable_work_is_not_replanned_until_something_changes() -> None:
    node, _, leader = make()
    submit(node, "j1", 2, requires="gpu")
    leader._round()
    for _ in range(5):
        leader._round()
    plans = node.proposed.count("AssignBatch")
    assert plans == 0
    node.propose(c.encode(c.ClusterRegister("gpu", 1, ("linux", "gpu"), 4000, 4096, 1, 0)), 1)
    leader.heartbeat("gpu", 1, 1, (4000, 4096, 1))
    leader._round()
    assert node.proposed.count("AssignBatch") == 1


def test_silent_cluster_goes_suspect_then_lost_and_back_to_ready() -> None:
    node, clock, leader = make()
    leader._round()  # office: fresh grace for east
    clock.advance(4.9)
    leader._round()
    assert node.state.clusters["east"].status == c.ClusterStatus.READY
    clock.advance(0.2)
    leader._round()
    assert node.state.clusters["east"].status == c.ClusterStatus.SUSPECT
    leader.heartbeat("east", 1, 5, None)
    leader._round()
    assert node.state.clusters["east"].status == c.ClusterStatus.READY
    clock.advance(31)
    leader._round()
    leader._round()
    assert node.state.clusters["east"].status == c.ClusterStatus.LOST


def test_new_term_gives_every_cluster_a_fresh_grace_period() -> None:
    node, clock, leader = make()
    leader._round()
    clock.advance(4)
    node.current_term += 1  # re-elected after a partition: silence under the old term is moot
    leader._round()
    clock.advance(4)
    leader._round()
    assert node.state.clusters["east"].status == c.ClusterStatus.READY


def test_ticks_fire_timers_and_stop_when_not_leader() -> None:
    node, clock, leader = make()
    leader._round()
    clock.advance(1.5)
    leader._round()
    assert "Tick" in node.proposed
    node.leader = False
    count = len(node.proposed)
    clock.advance(10)
    leader._round()
    assert len(node.proposed) == count and not leader.leading()


def test_stale_heartbeat_sequence_is_ignored() -> None:
    _, _, leader = make()
    assert leader.heartbeat("east", 1, 5, None)
    assert not leader.heartbeat("east", 1, 4, None)
    assert leader.heartbeat("east", 2, 1, None)  # a new incarnation starts over


def delivered(node: MemoryNode, leader: Leader) -> list[int]:
    """Fences east's next heartbeat reply would carry (marked sent, as the gateway does)."""
    from raftsched.replica.gateway import deliveries

    assignments, _ = deliveries(node.state, "east",
                                lambda items, bound: leader.due("east", items, bound))
    return sorted(a.fence for a in assignments)


def test_deliveries_are_resent_only_after_the_redelivery_interval() -> None:
    from raftsched.replica.leader import REDELIVER_AFTER_S

    node, clock, leader = make()
    submit(node, "j1", 3)
    leader._round()
    leader._round()
    leader.heartbeat("east", 1, 1, None)

    assert delivered(node, leader) == [1, 2, 3]
    # Sent already: a long poll waits instead of repeating them.
    assert delivered(node, leader) == []
    submit(node, "j2", 1)
    leader._round()
    assert delivered(node, leader) == [4]  # new work goes out at once
    clock.advance(REDELIVER_AFTER_S)
    # Unanswered: sent again (the message may have been lost).
    assert delivered(node, leader) == [1, 2, 3, 4]
    leader.heartbeat("east", 2, 1, None)  # a new incarnation has heard nothing yet
    assert delivered(node, leader) == [1, 2, 3, 4]


def test_assignments_past_one_heartbeats_bound_go_with_the_next_heartbeat(
        monkeypatch: Any) -> None:
    """Only what a reply carries counts as sent: the rest is due at once, not after the
    redelivery interval (a cluster given twice the bound idled ~0.8 s after running half)."""
    from raftsched import limits

    monkeypatch.setattr(limits, "MAX_DELIVERIES_PER_HEARTBEAT", 2)
    node, _, leader = make()
    submit(node, "j1", 4)  # east has room for 4 (1 cpu each)
    leader._round()
    leader._round()
    leader.heartbeat("east", 1, 1, None)

    assert delivered(node, leader) == [1, 2]
    # The clock has not moved: no redelivery interval passed.
    assert delivered(node, leader) == [3, 4]
    assert delivered(node, leader) == []


def skewed(skew_s: float) -> tuple[MemoryNode, ManualClock, Leader, int]:
    """A leader stamping through ProposalClock whose wall clock is then stepped by skew_s, with
    job j1's single task (timeout 30 s, retry backoff 1 s) RUNNING on east; returns its fence."""
    node = MemoryNode()
    base = ManualClock()
    clock = ProposalClock(base, lambda: node.state.now_ms)
    leader = Leader(node, clock, random.Random(7),
                    LeaderConfig("127.0.0.1:1", "127.0.0.1:2", suspect_after_s=5,
                                 lost_after_s=30, tick_interval_s=1),
                    version=lambda: node.applied)
    node.propose(c.encode(c.ClusterRegister("east", 1, ("linux",), 4000, 4096, 0,
                                            clock.now_ms())), 1)
    doc = {"name": "j1", "tasks": [{"id": "t0", "command": ["false"], "requires": ["linux"],
                                    "timeout_s": 30,
                                    "retry": {"max_attempts": 2, "backoff_s": 1}}]}
    node.propose(c.encode(c.JobSubmit("j1", doc_to_wire(doc), clock.now_ms())), 1)
    leader._round()
    leader._round()
    fence = current_fence(node)
    report(node, clock, c.Report(c.ReportKind.STARTED, "j1", "t0", fence))
    base.skew(skew_s)
    return node, base, leader, fence


def current_fence(node: MemoryNode) -> int:
    attempt = node.state.jobs["j1"].tasks[0].current
    assert attempt is not None
    return attempt.fence


def report(node: MemoryNode, clock: Any, item: c.Report) -> None:
    outcome = node.propose(c.encode(c.ReportBatch("east", clock.now_ms(), 1, (item,))), 1)
    assert isinstance(outcome, Applied) and isinstance(outcome.result, ReportResult)
    assert outcome.result.verdicts == (ReportVerdict.ACCEPTED,)


def test_a_leader_whose_clock_is_ahead_does_not_time_out_running_attempts_early() -> None:
    node, base, leader, _ = skewed(+120)  # past the 30 s timeout and its grace
    for _ in range(5):
        base.advance(1)
        leader._round()
    assert "Tick" in node.proposed
    task = node.state.jobs["j1"].tasks[0]
    assert task.state == TaskState.RUNNING and len(task.attempts) == 1


def test_a_leader_whose_clock_is_behind_still_retries_after_the_backoff() -> None:
    node, base, leader, fence = skewed(-60)
    report(node, leader._clock, c.Report(c.ReportKind.FINISHED, "j1", "t0", fence, exit_code=1))
    assert node.state.jobs["j1"].tasks[0].state == TaskState.RETRY_WAIT
    for _ in range(3):  # backoff 1 s (with jitter): replicated time must still move
        base.advance(1)
        leader._round()
    task = node.state.jobs["j1"].tasks[0]
    assert task.state == TaskState.ASSIGNED and len(task.attempts) == 2
