"""The planner (`state/placement.py`): fair share, order, aging, skipping, scoring, room,
reservations for large tasks, limits, bounds, purity."""

from __future__ import annotations

from typing import Any

import pytest

from raftsched import limits
from raftsched.state import commands as c
from raftsched.state import placement, snapshot
from raftsched.state.model import AGING_MS_PER_PRIORITY
from raftsched.state.placement import RESERVE_AFTER_MS
from raftsched.state.results import AssignResult, DropReason
from tests.support.fsmkit import Harness, job_doc, task_doc


def planned(h: Harness, **kwargs: Any) -> list[tuple[str, str, str]]:
    kwargs.setdefault("now_ms", h.now_ms)
    return [(p.job_id, p.task_id, p.cluster_id)
            for p in placement.plan(h.state, **kwargs).placements]


def apply_plan(h: Harness, **kwargs: Any) -> AssignResult:
    """Plan at the harness's time and apply the plan (placements and reservations)."""
    result = placement.plan(h.state, now_ms=h.now_ms, **kwargs)
    return h.expect(c.AssignBatch(h.now_ms, tuple(result.placements),
                                  tuple(result.reservations)), AssignResult)


def small(task_id: str, deps: list[str] | None = None, **fields: Any) -> dict[str, Any]:
    fields.setdefault("resources", {"cpu": 1, "memory_mb": 64})
    return task_doc(task_id, deps, **fields)


@pytest.fixture
def h() -> Harness:
    harness = Harness()
    harness.register("east", cpu=64, memory_mb=65_536)
    return harness


def test_equal_tenants_take_turns_one_task_each_in_name_order(h: Harness) -> None:
    """Equal weights and equal tasks: fair share alternates (ties go to the tenant name)."""
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


def test_binpack_takes_the_fullest_cluster_that_fits_ties_to_the_first_id() -> None:
    h = Harness()
    for name, cpu in (("a", 4), ("b", 2), ("c", 2)):
        h.register(name, cpu=cpu, memory_mb=1024)
    h.submit("j", job_doc([small(f"t{i}") for i in range(8)]))
    # b and c tie as the fullest (b, the first id, wins) until b is full, then c, then a.
    assert [cluster for _, _, cluster in planned(h)] == ["b", "b", "c", "c", "a", "a", "a", "a"]


def test_spread_takes_the_emptiest_cluster() -> None:
    h = Harness()
    for name, cpu in (("a", 4), ("b", 2), ("c", 2)):
        h.register(name, cpu=cpu, memory_mb=1024)
    h.submit("j", job_doc([small(f"t{i}") for i in range(8)], scoring="spread"))
    # By the fractions left: a (3/4 + ...) first, then b and c (1/2) tie with a (2/4) ...
    clusters = [cluster for _, _, cluster in planned(h)]
    assert clusters[:3] == ["a", "b", "c"] and sorted(clusters) == ["a"] * 4 + ["b"] * 2 + ["c"] * 2


def test_scoring_counts_memory_and_gpu_too() -> None:
    h = Harness()
    h.register("roomy", cpu=8, memory_mb=8192)
    h.register("tight", cpu=8, memory_mb=1024)
    h.submit("j", job_doc([small("m", resources={"cpu": 1, "memory_mb": 512})]))
    assert planned(h) == [("j", "m", "tight")]  # binpack: less left in all
    h.submit("k", job_doc([small("m", resources={"cpu": 1, "memory_mb": 512})],
                          scoring="spread"))
    assert ("k", "m", "roomy") in planned(h)


def test_a_retry_avoids_the_cluster_its_last_attempt_failed_on() -> None:
    h = Harness()
    h.register("a", cpu=4)
    h.register("b", cpu=8)
    h.submit("j", job_doc([small("t", retry={"max_attempts": 3, "backoff_s": 0.001})]))
    assert planned(h) == [("j", "t", "a")]  # binpack: the smaller
    fence = h.assign_one("j", "t", "a")
    h.started("a", "j", "t", fence)
    h.finished("a", "j", "t", fence, exit_code=1)
    h.tick(10)  # the backoff ends
    assert planned(h) == [("j", "t", "b")]
    h.run(c.ClusterDrain("b", True, h.now_ms))
    assert planned(h) == [("j", "t", "a")]  # nowhere else: back where it failed


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


def test_a_drained_cluster_gets_no_new_work_until_undrained(h: Harness) -> None:
    h.register("west", cpu=64, memory_mb=65_536)
    h.submit("j", job_doc([small("a"), small("b")]))
    h.run(c.ClusterDrain("east", True, h.now_ms, "maintenance"))
    assert {cluster for _, _, cluster in planned(h)} == {"west"}
    h.run(c.ClusterDrain("west", True, h.now_ms))
    assert planned(h) == []
    h.run(c.ClusterDrain("east", False, h.now_ms))
    assert {cluster for _, _, cluster in planned(h)} == {"east"}


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
    items = placement.plan(h.state).placements
    assert len(items) == 9  # 8 x 8 cpu on east, the gpu task on west
    result = h.expect(c.AssignBatch(h.now_ms, tuple(items)), AssignResult)
    assert result.dropped == () and [p for p, _ in result.assigned] == items



def counting_candidates(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many ready tasks the next plans look at (one count per plan that walks)."""
    counts: list[int] = []
    real_walk, real_iter = placement._walk, placement.iter_ready

    def walk(*args: Any) -> Any:
        counts.append(0)
        return real_walk(*args)

    def counted(state: Any, tenant: str, skip: Any = ()) -> Any:
        for item in real_iter(state, tenant, skip):
            counts[-1] += 1
            yield item

    monkeypatch.setattr(placement, "_walk", walk)
    monkeypatch.setattr(placement, "iter_ready", counted)
    return counts


def test_planning_costs_what_it_places_not_what_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Full clusters in front of a long queue: a plan stops once no cluster has any cpu left."""
    h = Harness()
    h.register("east", cpu=2, memory_mb=65_536)
    h.submit("j", job_doc([small(f"t{i}") for i in range(500)]))
    looked = counting_candidates(monkeypatch)
    assert len(planned(h)) == 2
    assert looked == [2]  # the third candidate is never taken
    apply_plan(h)
    assert planned(h) == [] and looked[-1] == 0  # nothing free: the walk takes no task


def test_a_shape_that_fitted_nowhere_is_not_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness()
    h.register("east", cpu=64, memory_mb=65_536)
    h.submit("gpus", job_doc([small(f"g{i}", requires=["gpu"]) for i in range(300)],
                             priority=90))
    h.submit("cpus", job_doc([small(f"c{i}") for i in range(3)], priority=10))
    tried: list[str] = []
    real = placement._choose

    def choose(rooms: Any, job: Any, task: Any, now_ms: int) -> Any:
        tried.append(task.spec.id)
        return real(rooms, job, task, now_ms)

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
    # ag1 fits nowhere (a's turn goes on: its share did not grow); from then on no gpu task is
    # looked at. Equal shares go to the tenant name.
    assert [task for _, task, _ in planned(h)] == [
        "ac0", "bc0", "ac2", "bc2", "ac4", "bc4", "al0", "bl0", "al1", "bl1"]


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


# --- fair share between tenants -----------------------------------------------------------------


def test_weights_share_the_dominant_resource() -> None:
    h = Harness()
    h.register("east", cpu=8, memory_mb=65_536)
    h.run(c.TenantSet("heavy", 3, 0, 0, h.now_ms))
    for tenant in ("heavy", "light"):
        h.submit(tenant, job_doc([small(f"t{i}") for i in range(20)], tenant=tenant))
    tenants = [job for job, _, _ in planned(h)]
    assert len(tenants) == 8 and tenants.count("heavy") == 6 and tenants.count("light") == 2


def test_what_already_runs_counts(h: Harness) -> None:
    h.submit("a", job_doc([small(f"t{i}", resources={"cpu": 16}) for i in range(4)],
                          tenant="alpha"))
    for i in range(3):
        h.assign_one("a", f"t{i}", "east")  # alpha holds 48 of 64 cpus
    h.submit("b", job_doc([small(f"t{i}", resources={"cpu": 4}) for i in range(8)],
                          tenant="beta"))
    # beta goes first until its share passes alpha's 3/4: all of the 16 cpus left go to beta.
    assert [job for job, _, _ in planned(h)] == ["b"] * 4


def test_the_dominant_resource_decides() -> None:
    h = Harness()
    h.register("east", cpu=20, memory_mb=16_388)
    h.submit("m", job_doc([small(f"t{i}", resources={"cpu": 1, "memory_mb": 4096})
                           for i in range(4)], tenant="mem"))
    h.submit("c", job_doc([small(f"t{i}", resources={"cpu": 4, "memory_mb": 1})
                           for i in range(4)], tenant="cpu"))
    # A cpu task is a fifth of the cpu, a memory task a quarter of the memory: by dominant
    # share the tenants alternate (0.2 < 0.25, 0.25 < 0.4, 0.4 < 0.5, ...).
    assert [job for job, _, _ in planned(h)] == ["c", "m", "c", "m", "c", "m", "c", "m"]


def test_max_running_caps_a_tenant_and_apply_holds_it(h: Harness) -> None:
    h.run(c.TenantSet("alpha", 1, 0, 2, h.now_ms))
    h.submit("a", job_doc([small(f"t{i}") for i in range(5)], tenant="alpha"))
    h.submit("b", job_doc([small(f"t{i}") for i in range(2)], tenant="beta"))
    assert sorted(job for job, _, _ in planned(h)) == ["a", "a", "b", "b"]
    apply_plan(h)
    assert planned(h) == []
    result = h.assign(("a", "t2", "east"))
    [dropped] = result.dropped
    assert dropped.reason is DropReason.TENANT_AT_LIMIT and "max_running=2" in dropped.detail


def test_the_star_tenant_sets_the_defaults(h: Harness) -> None:
    h.run(c.TenantSet("*", 1, 0, 1, h.now_ms))
    h.run(c.TenantSet("alpha", 1, 0, 3, h.now_ms))
    h.submit("a", job_doc([small(f"t{i}") for i in range(5)], tenant="alpha"))
    h.submit("b", job_doc([small(f"t{i}") for i in range(5)], tenant="beta"))
    assert sorted(job for job, _, _ in planned(h)) == ["a", "a", "a", "b"]


# --- aging --------------------------------------------------------------------------------------


def test_aging_a_waiting_job_passes_newer_higher_priority_ones(h: Harness) -> None:
    h.submit("old-low", job_doc([small("x")], priority=40))
    h.now_ms += 10 * AGING_MS_PER_PRIORITY + 1  # ten levels' worth of waiting, and a bit
    h.submit("new-mid", job_doc([small("x")], priority=50))
    h.submit("new-high", job_doc([small("x")], priority=51))
    assert [job for job, _, _ in planned(h)] == ["new-high", "old-low", "new-mid"]


# --- reservations for large tasks ---------------------------------------------------------------


def crowded() -> Harness:
    """Two 8-cpu clusters full of 1-cpu tasks, a waiting 8-cpu task and a stream of small ones."""
    h = Harness()
    h.register("east", cpu=8, memory_mb=65_536)
    h.register("west", cpu=8, memory_mb=65_536)
    h.submit("small", job_doc([small(f"s{i}") for i in range(16)], tenant="many"))
    apply_plan(h)
    h.submit("big", job_doc([task_doc("b", resources={"cpu": 8, "memory_mb": 64})],
                            tenant="few"))
    h.submit("more", job_doc([small(f"m{i}") for i in range(40)], tenant="many"))
    return h


def finish(h: Harness, job_id: str, task_id: str) -> None:
    attempt = h.current(job_id, task_id)
    h.started(attempt.cluster_id, job_id, task_id, attempt.fence)
    h.finished(attempt.cluster_id, job_id, task_id, attempt.fence, 0)


def test_a_large_task_is_not_starved_by_a_stream_of_small_ones() -> None:
    h = crowded()
    finish(h, "small", "s0")  # east frees 1 cpu: before the bounded wait, a small task takes it
    assert [task for _, task, _ in planned(h)] == ["m0"]
    apply_plan(h)
    h.now_ms += RESERVE_AFTER_MS
    result = placement.plan(h.state, now_ms=h.now_ms)
    [reservation] = result.reservations
    assert reservation == c.Reservation("big", "b", "east")  # closest: ties to the first id
    apply_plan(h)
    assert h.state.clusters["east"].reserved_for == ("big", 0)
    for i in range(1, 8):  # east's small tasks end one by one: none of the room goes to others
        finish(h, "small", f"s{i}")
        assert all(cluster != "east" for _, _, cluster in planned(h)), i
        apply_plan(h)
    finish(h, "more", "m0")  # the last one on east
    assert planned(h)[0] == ("big", "b", "east")
    apply_plan(h)
    assert h.task("big", "b").state.name == "ASSIGNED"
    assert h.state.clusters["east"].reserved_for is None
    assert h.task("big", "b").reserved_on is None


def test_apply_keeps_a_reserved_cluster_for_its_task() -> None:
    h = crowded()
    h.now_ms += RESERVE_AFTER_MS
    apply_plan(h)
    finish(h, "small", "s0")
    result = h.assign(("more", "m0", "east"))
    [dropped] = result.dropped
    assert dropped.reason is DropReason.CLUSTER_RESERVED and "big/b" in dropped.detail


def test_a_reservation_ends_when_its_task_leaves_the_queue() -> None:
    h = crowded()
    h.now_ms += RESERVE_AFTER_MS
    apply_plan(h)
    assert h.state.clusters["east"].reserved_for == ("big", 0)
    h.cancel("big")
    assert h.state.clusters["east"].reserved_for is None


def test_no_reservation_before_the_bounded_wait_or_for_a_task_no_cluster_can_hold() -> None:
    h = crowded()
    assert placement.plan(h.state, now_ms=h.now_ms + RESERVE_AFTER_MS - 1).reservations == []
    h.submit("huge", job_doc([task_doc("h", resources={"cpu": 9})], tenant="few"))
    h.now_ms += RESERVE_AFTER_MS
    reserved = placement.plan(h.state, now_ms=h.now_ms).reservations
    assert [r.task_id for r in reserved] == ["b"]


# --- unusable capacity (a metric) -----------------------------------------------------------------


def test_unusable_room_is_free_room_that_no_waiting_task_fits() -> None:
    h = Harness()
    h.register("east", cpu=4, memory_mb=8_192)
    h.register("gpu", caps=("linux", "gpu"), cpu=4, memory_mb=8_192, gpu=1)
    assert placement.unusable(h.state, now_ms=h.now_ms) == {}  # nothing waits: idle, not unusable
    gpu_task = {"cpu": 1, "memory_mb": 1_024, "gpu": 1}
    h.submit("g", job_doc([task_doc("g1", resources=gpu_task, requires=["gpu"]),
                           task_doc("g2", resources=gpu_task, requires=["gpu"])]))
    fence = h.assign_one("g", "g1", "gpu")
    h.started("gpu", "g", "g1", fence)
    # g2 waits for the one gpu: 3 cpus on gpu and all of east fit nothing that waits.
    assert placement.unusable(h.state, now_ms=h.now_ms) == {
        "east": (4_000, 8_192, 0), "gpu": (3_000, 7_168, 0)}
    assert placement.unusable(h.state, now_ms=h.now_ms,
                              reported_free={"east": (2_500, 8_192, 0)})["east"] == \
        (2_500, 8_192, 0)  # what the agent says is free, when it says less
    h.submit("c", job_doc([task_doc("c1", resources={"cpu": 2})]))
    assert placement.unusable(h.state, now_ms=h.now_ms) == {}  # c1 fits both rooms
    h.run(c.ClusterDrain("east", True, h.now_ms))
    assert "east" not in placement.unusable(h.state, now_ms=h.now_ms)  # not open: not counted
