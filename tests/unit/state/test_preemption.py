"""Preemption (`placement._preempt`, `assign._preempt`, `policy.may_preempt`): a pending task of a
higher priority class stops the fewest preemptible lower-class attempts that make it fit, on one
cluster it then holds a reservation on; a preemption costs no retry budget, sends a kill
directive, is rate-bounded, and no task is preempted forever."""

from __future__ import annotations

from typing import Any

import pytest

from raftsched.state import commands as c
from raftsched.state import placement, policy, snapshot
from raftsched.state.model import AttemptState
from raftsched.state.results import AssignResult
from tests.support.fsmkit import Harness, job_doc, task_doc


def plan_and_apply(h: Harness) -> tuple[placement.Plan, AssignResult]:
    planned = placement.plan(h.state, now_ms=h.now_ms)
    result = h.expect(c.AssignBatch(h.now_ms, tuple(planned.placements),
                                    tuple(planned.reservations), tuple(planned.preemptions)),
                      AssignResult)
    return planned, result


def running(h: Harness, job_id: str, task_id: str, cluster: str) -> int:
    fence = h.assign_one(job_id, task_id, cluster)
    h.started(cluster, job_id, task_id, fence)
    return fence


def low(tasks: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return job_doc(tasks, priority_class="low", preemptible=True, **fields)


@pytest.fixture
def h() -> Harness:
    """Two 4-cpu clusters, full of low-class preemptible work started at different times."""
    harness = Harness()
    harness.register("east", cpu=4)
    harness.register("west", cpu=4)
    harness.submit("batch", low([task_doc(f"b{i}", resources={"cpu": 1}) for i in range(7)]
                                + [task_doc("big", resources={"cpu": 2})]))
    for i in range(4):
        running(harness, "batch", f"b{i}", "east")
        harness.now_ms += 10
    running(harness, "batch", "big", "west")
    harness.now_ms += 10
    for i in range(4, 6):
        running(harness, "batch", f"b{i}", "west")
        harness.now_ms += 10
    return harness


def test_a_higher_class_task_preempts_the_fewest_lower_class_attempts(h: Harness) -> None:
    h.submit("urgent", job_doc([task_doc("u", resources={"cpu": 2})], priority_class="high"))
    planned, result = plan_and_apply(h)
    # east: two 1-cpu victims; west: one 2-cpu victim ("big") — the fewest wins.
    assert [(p.job_id, p.task_id) for p in planned.preemptions] == [("batch", "big")]
    assert planned.reservations == [c.Reservation("urgent", "u", "west")]
    assert planned.placements == [] or all(p.cluster_id != "west" for p in planned.placements)
    assert len(result.preempted) == 1
    big = h.task("batch", "big")
    assert big.state.name == "RUNNABLE" and big.preemptions == 1
    assert big.attempts[-1].state == AttemptState.PREEMPTED
    assert (big.app_failures, big.infra_failures) == (0, 0)  # no retry budget spent
    assert result.preempted[0] in h.state.clusters["west"].kills  # SIGTERM, grace, SIGKILL


def test_the_most_recently_started_lower_class_attempts_go_first() -> None:
    h = Harness()
    h.register("east", cpu=4)
    h.submit("batch", low([task_doc(f"b{i}") for i in range(4)]))
    fences = []
    for i in range(4):
        fences.append(running(h, "batch", f"b{i}", "east"))
        h.now_ms += 10
    h.submit("urgent", job_doc([task_doc("u", resources={"cpu": 2})], priority_class="high"))
    planned, _ = plan_and_apply(h)
    assert sorted(p.fence for p in planned.preemptions) == sorted(fences[2:])


def test_the_preemptor_is_placed_on_the_room_it_made(h: Harness) -> None:
    h.submit("urgent", job_doc([task_doc("u", resources={"cpu": 2})], priority_class="high"))
    _, result = plan_and_apply(h)
    killed = result.preempted[0]
    h.report("west", c.Report(c.ReportKind.KILLED, "batch", "big", killed, reason="SIGTERM"))
    planned, _ = plan_and_apply(h)
    assert planned.placements[0] == c.Placement("urgent", "u", "west")
    assert h.task("urgent", "u").state.name == "ASSIGNED"
    assert h.state.clusters["west"].kills == {}


def test_only_a_higher_class_preempts(h: Harness) -> None:
    h.submit("same", low([task_doc("u", resources={"cpu": 2})]))
    planned, _ = plan_and_apply(h)
    assert planned.preemptions == []  # low does not preempt low
    h.submit("normal", job_doc([task_doc("u", resources={"cpu": 2})]))  # the default class
    planned, _ = plan_and_apply(h)
    assert len(planned.preemptions) == 1  # normal preempts low


def test_a_job_that_is_not_preemptible_is_never_preempted() -> None:
    h = Harness()
    h.register("east", cpu=4)
    h.submit("steady", job_doc([task_doc(f"s{i}") for i in range(4)], priority_class="low"))
    for i in range(4):
        running(h, "steady", f"s{i}", "east")
    h.submit("urgent", job_doc([task_doc("u")], priority_class="high"))
    planned, _ = plan_and_apply(h)
    assert planned.preemptions == []


def test_apply_refuses_a_preemption_the_rules_do_not_allow(h: Harness) -> None:
    h.submit("peer", low([task_doc("p")]))
    fence = h.current("batch", "b0").fence
    before = snapshot.dump(h.state)
    result = h.expect(c.AssignBatch(h.now_ms, (), (), (
        c.Preemption("batch", "b0", fence, "peer", "p"),        # the same class
        c.Preemption("batch", "b0", fence + 999, "peer", "p"),  # not the current fence
        c.Preemption("batch", "b0", fence, "nope", "p"),        # no such preemptor
    )), AssignResult)
    assert result.preempted == ()
    assert snapshot.dump(h.state) == before


def test_no_task_is_preempted_forever(h: Harness) -> None:
    for round_number in range(policy.MAX_PREEMPTIONS_PER_TASK + 1):
        h.submit(f"u{round_number}", job_doc([task_doc("u", resources={"cpu": 2})],
                                             priority_class="high"))
        h.expect(c.AssignBatch(h.now_ms, (), (), (c.Preemption(
            "batch", "big", h.current("batch", "big").fence, f"u{round_number}", "u"),)),
            AssignResult)
        if h.task("batch", "big").state.name == "RUNNABLE":
            running(h, "batch", "big", "west")
        h.now_ms += policy.PREEMPTION_WINDOW_MS
    big = h.task("batch", "big")
    assert big.preemptions == policy.MAX_PREEMPTIONS_PER_TASK
    assert big.state.name == "RUNNING"  # the last one was refused


def test_the_preemption_rate_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(policy, "MAX_PREEMPTIONS_PER_WINDOW", 2)
    h = Harness()
    h.register("east", cpu=8)
    h.submit("batch", low([task_doc(f"b{i}") for i in range(8)]))
    fences = [running(h, "batch", f"b{i}", "east") for i in range(8)]
    h.submit("urgent", job_doc([task_doc(f"u{i}") for i in range(4)], priority_class="high"))
    result = h.expect(c.AssignBatch(h.now_ms, (), (), tuple(
        c.Preemption("batch", f"b{i}", fences[i], "urgent", f"u{i}") for i in range(4))),
        AssignResult)
    assert len(result.preempted) == 2
    planned, _ = plan_and_apply(h)  # u0 and u1 take the room made; u2 and u3 fit nowhere
    assert [p.task_id for p in planned.placements] == ["u0", "u1"]
    assert placement.plan(h.state, now_ms=h.now_ms).preemptions == []  # the budget is spent
    h.now_ms += policy.PREEMPTION_WINDOW_MS
    assert len(placement.plan(h.state, now_ms=h.now_ms).preemptions) == 1


def test_the_preemption_pass_walks_no_attempt_when_nothing_running_is_preemptible(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Full clusters of steady (not preemptible) work and many waiting tasks of a class that
    could preempt: a plan looks at no running attempt (it used to walk every live attempt once
    per waiting shape, per cluster, every round)."""
    h = Harness()
    for name in ("east", "west"):
        h.register(name, cpu=4)
    h.submit("steady", job_doc([task_doc(f"s{i}") for i in range(8)], priority_class="low"))
    for i in range(8):
        running(h, "steady", f"s{i}", "east" if i < 4 else "west")
    for cpu in (1, 2, 3):  # three waiting shapes of the default class (normal > low)
        h.submit(f"wait{cpu}", job_doc([task_doc("w", resources={"cpu": cpu})]))
    looked: list[object] = []
    real = policy.may_preempt
    monkeypatch.setattr(policy, "may_preempt", lambda *a: looked.append(a) or real(*a))
    assert placement.plan(h.state, now_ms=h.now_ms).preemptions == []
    assert looked == []


def test_the_preemptible_index_follows_attempts_and_survives_a_snapshot(h: Harness) -> None:
    west = h.state.clusters["west"]
    assert west.preemptible == west.live and len(west.live) == 3
    fence = h.current("batch", "big").fence
    h.report("west", c.Report(c.ReportKind.FINISHED, "batch", "big", fence, exit_code=0))
    assert fence not in west.preemptible and west.preemptible == west.live
    loaded = snapshot.load(snapshot.dump(h.state))
    for cluster_id, cluster in h.state.clusters.items():
        assert loaded.clusters[cluster_id].preemptible == cluster.preemptible
