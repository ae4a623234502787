"""The planner (`state/placement.py`): order, skipping, room, bounds, purity."""

from __future__ import annotations

from typing import Any

import pytest

from raftsched import limits
from raftsched.state import commands as c
from raftsched.state import placement, snapshot
from raftsched.state.results import AssignResult
from tests.support.fsmkit import Harness, job_doc, task_doc


def planned(h: Harness, **kwargs: Any) -> list[tuple[str, str, str]]:
    return [(p.job_id, p.task_id, p.cluster_id) for p in placement.plan(h.state, **kwargs)]


def small(task_id: str, deps: list[str] | None = None, **fields: Any) -> dict[str, Any]:
    fields.setdefault("resources", {"cpu": 1, "memory_mb": 64})
    return task_doc(task_id, deps, **fields)


@pytest.fixture
def h() -> Harness:
    harness = Harness()
    harness.register("east", cpu=64, memory_mb=65_536)
    return harness


def test_tenants_take_turns_one_task_each_in_name_order(h: Harness) -> None:
    h.submit("b1", job_doc([small("x"), small("y"), small("z")], tenant="beta"))
    h.submit("a1", job_doc([small("x"), small("y")], tenant="alpha"))
    h.submit("g1", job_doc([small("x")], tenant="gamma"))
    assert [job for job, _, _ in planned(h)] == ["a1", "b1", "g1", "a1", "b1", "b1"]


def test_inside_a_tenant_priority_then_submission_order(h: Harness) -> None:
    h.submit("low", job_doc([small("x")], priority=10))
    h.submit("high-late", job_doc([small("x")], priority=90))
    h.submit("mid-1", job_doc([small("x"), small("y")], priority=50))
    h.submit("mid-2", job_doc([small("x")], priority=50))
    h.submit("high-later", job_doc([small("x")], priority=90))
    assert [(job, task) for job, task, _ in planned(h)] == [
        ("high-late", "x"), ("high-later", "x"), ("mid-1", "x"), ("mid-1", "y"), ("mid-2", "x"),
        ("low", "x")]


def test_only_runnable_tasks_are_planned(h: Harness) -> None:
    h.submit("j", job_doc([small("a"), small("b", ["a"]), small("c")]))
    h.assign_one("j", "c", "east")
    assert planned(h) == [("j", "a", "east")]


def test_a_task_that_fits_nowhere_is_skipped_and_blocks_nothing(h: Harness) -> None:
    h.submit("j", job_doc([
        small("first"), task_doc("huge", resources={"cpu": 65}),
        small("gpu", requires=["gpu"]), small("pinned", cluster="nowhere"), small("last"),
    ], priority=90))
    h.submit("later", job_doc([small("x")], priority=10))
    assert planned(h) == [("j", "first", "east"), ("j", "last", "east"), ("later", "x", "east")]


def test_the_cluster_with_the_most_free_cpu_wins_ties_to_the_first_id() -> None:
    h = Harness()
    for name, cpu in (("a", 2), ("b", 4), ("c", 4)):
        h.register(name, cpu=cpu)
    h.submit("j", job_doc([small(f"t{i}") for i in range(6)]))
    # b and c tie at 4 (b, the first id, wins); c's 4 beats b's 3; b and c tie at 3; c's 3
    # beats b's 2; all three tie at 2 (a wins); b's 2 beats a's 1 and ties c's 2.
    assert [cluster for _, _, cluster in planned(h)] == ["b", "c", "b", "c", "a", "b"]


def test_tentative_reservations_within_one_plan() -> None:
    h = Harness()
    h.register("east", cpu=3.1, memory_mb=1024, gpu=1)
    h.submit("j", job_doc([
        small("a"), small("b"), small("c"), small("d"),
        small("m1", resources={"cpu": 0.001, "memory_mb": 512}),
        small("m2", resources={"cpu": 0.001, "memory_mb": 512}),
        small("g1", resources={"cpu": 0.001, "memory_mb": 1, "gpu": 1}),
        small("g2", resources={"cpu": 0.001, "memory_mb": 1, "gpu": 1}),
    ]))
    # 3.1 cpu: a, b, c but not d; 1024 MB - 3 x 64 = 832: m1, not m2; one gpu: g1, not g2.
    assert [task for _, task, _ in planned(h)] == ["a", "b", "c", "m1", "g1"]


def test_committed_reservations_count(h: Harness) -> None:
    h.submit("j", job_doc([small(f"t{i}", resources={"cpu": 16}) for i in range(6)]))
    h.assign_one("j", "t0", "east")
    h.assign_one("j", "t1", "east")
    assert [task for _, task, _ in planned(h)] == ["t2", "t3"]


def test_reported_free_capacity_caps_a_cluster() -> None:
    h = Harness()
    h.register("east", cpu=8)
    h.register("west", cpu=8)
    h.submit("j", job_doc([small(f"t{i}") for i in range(12)]))
    assert len(planned(h)) == 12
    capped = planned(h, reported_free={"east": (2000, 10**6, 0)})
    assert sorted(cluster for _, _, cluster in capped) == ["east"] * 2 + ["west"] * 8
    by_memory = planned(h, reported_free={"east": (8000, 100, 0), "west": (8000, 63, 0)})
    assert [cluster for _, _, cluster in by_memory] == ["east"]
    # A report above the committed room does not raise it.
    assert len(planned(h, reported_free={"west": (0, 0, 0), "east": (10**6, 10**6, 9)})) == 8


def test_max_items(h: Harness) -> None:
    h.submit("j", job_doc([small(f"t{i}") for i in range(10)]))
    assert [task for _, task, _ in planned(h, max_items=3)] == ["t0", "t1", "t2"]
    assert planned(h, max_items=0) == []
    assert len(planned(h)) == 10


def test_the_scan_is_bounded_by_max_placement_scan(h: Harness,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "MAX_PLACEMENT_SCAN", 4)
    h.submit("j", job_doc([small("a"), small("b"), task_doc("huge", resources={"cpu": 65}),
                           task_doc("huge2", resources={"cpu": 66}), small("c"), small("d")]))
    # Four candidates looked at (a, b, huge, huge2: two shapes that fit nowhere): c and d are
    # left for the next plan.
    assert [task for _, task, _ in planned(h)] == ["a", "b"]


@pytest.mark.parametrize("status", [c.ClusterStatus.SUSPECT, c.ClusterStatus.LOST,
                                    c.ClusterStatus.DRAINING])
def test_no_ready_cluster_means_an_empty_plan(h: Harness, status: c.ClusterStatus) -> None:
    h.submit("j", job_doc([small("a")]))
    assert planned(h) == [("j", "a", "east")]
    h.status("east", status)
    assert planned(h) == []


def test_no_cluster_or_no_work_means_an_empty_plan() -> None:
    h = Harness()
    h.submit("j", job_doc([small("a")]))
    assert planned(h) == []
    h.register("east")
    h.cancel("j")
    assert planned(h) == []


def test_plan_never_mutates_the_state(h: Harness) -> None:
    h.register("west", caps=("linux", "gpu"), cpu=2, gpu=1)
    h.submit("j", job_doc([small(f"t{i}") for i in range(5)] + [
        small("g", requires=["gpu"], resources={"cpu": 1, "gpu": 1}),
        task_doc("huge", resources={"cpu": 65})], tenant="t1"))
    h.submit("k", job_doc([small("x"), small("y", ["x"])], tenant="t2"))
    h.assign_one("j", "t0", "east")
    before = snapshot.dump(h.state)
    for kwargs in ({}, {"max_items": 2}, {"reported_free": {"east": (1000, 64, 0)}}):
        assert planned(h, **kwargs)
        assert snapshot.dump(h.state) == before, kwargs


def test_everything_planned_is_applied(h: Harness) -> None:
    h.register("west", caps=("linux", "gpu"), cpu=4, gpu=1)
    h.submit("j", job_doc([small(f"t{i}", resources={"cpu": 8}) for i in range(12)]
                          + [small("g", requires=["gpu"], resources={"cpu": 1, "gpu": 1})]))
    items = placement.plan(h.state)
    assert len(items) == 9  # 8 x 8 cpu on east, the gpu task on west
    result = h.expect(c.AssignBatch(h.now_ms, tuple(items)), AssignResult)
    assert result.dropped == () and [p for p, _ in result.assigned] == items



def counting_candidates(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many ready tasks the next plans look at (one count per plan)."""
    counts: list[int] = []
    real = placement._round_robin

    def counted(state: Any, skip: Any) -> Any:
        counts.append(0)
        for item in real(state, skip):
            counts[-1] += 1
            yield item

    monkeypatch.setattr(placement, "_round_robin", counted)
    return counts


def test_planning_costs_what_it_places_not_what_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Full clusters in front of a long queue: a plan stops once no cluster has any cpu left."""
    h = Harness()
    h.register("east", cpu=2, memory_mb=65_536)
    h.submit("j", job_doc([small(f"t{i}") for i in range(500)]))
    looked = counting_candidates(monkeypatch)
    assert len(planned(h)) == 2
    assert looked == [2]  # the third candidate is never taken
    h.assign(*[(p.job_id, p.task_id, p.cluster_id) for p in placement.plan(h.state)])
    plans = len(looked)
    assert planned(h) == [] and len(looked) == plans  # nothing free: the walk never starts


def test_a_shape_that_fitted_nowhere_is_not_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness()
    h.register("east", cpu=64, memory_mb=65_536)
    h.submit("gpus", job_doc([small(f"g{i}", requires=["gpu"]) for i in range(300)],
                             priority=90))
    h.submit("cpus", job_doc([small(f"c{i}") for i in range(3)], priority=10))
    tried: list[str] = []
    real = placement._choose

    def choose(rooms: Any, spec: Any) -> Any:
        tried.append(spec.id)
        return real(rooms, spec)

    monkeypatch.setattr(placement, "_choose", choose)
    looked = counting_candidates(monkeypatch)
    assert [task for _, task, _ in planned(h)] == ["c0", "c1", "c2"]  # no head-of-line block
    assert tried == ["g0", "c0", "c1", "c2"]
    assert looked == [4]  # the other 299 gpu tasks are passed over whole, not walked


def test_a_blocked_shape_is_passed_over_in_every_tenant_and_priority() -> None:
    """Shapes interleaved across tenants and priorities: queue order holds among the rest."""
    h = Harness()
    h.register("east", cpu=64, memory_mb=65_536)
    for tenant in ("a", "b"):
        h.submit(f"{tenant}-hi", job_doc([small(f"{tenant}g{i}", requires=["gpu"])
                                          if i % 2 else small(f"{tenant}c{i}")
                                          for i in range(6)], tenant=tenant, priority=90))
        h.submit(f"{tenant}-lo", job_doc([small(f"{tenant}l{i}") for i in range(2)],
                                         tenant=tenant, priority=10))
    # ag1 fits nowhere and uses tenant a's second turn; from then on no gpu task is looked at.
    assert [task for _, task, _ in planned(h)] == [
        "ac0", "bc0", "bc2", "ac2", "bc4", "ac4", "bl0", "al0", "bl1", "al1"]


def test_room_that_reports_in_the_log_will_release_is_planned_once() -> None:
    h = Harness()
    h.register("east", cpu=2, memory_mb=65_536)
    h.submit("j", job_doc([small(f"t{i}") for i in range(4)]))
    fences = [h.assign_one("j", f"t{i}", "east") for i in range(2)]
    assert planned(h) == []  # full
    releasing = {"east": {fences[0]: (1000, 64, 0)}}
    assert planned(h, releasing=releasing) == [("j", "t2", "east")]
    h.started("east", "j", "t0", fences[0])
    h.finished("east", "j", "t0", fences[0], 0)  # the release applied: counted by the state
    assert planned(h, releasing=releasing) == [("j", "t2", "east")]  # once, not twice
