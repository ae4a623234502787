"""The one feasibility rule (`state/feasibility.py`): every reason, its order, the boundaries of
each resource, pins, capability subsets, and that apply, the planner and `task explain` all say
what the rule says."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from raftsched.replica import views
from raftsched.spec.model import TaskSpec
from raftsched.spec.validation import validate_job_doc
from raftsched.state import commands as c
from raftsched.state import placement
from raftsched.state.feasibility import (
    Infeasible,
    Unfit,
    explain,
    explain_committed,
    unfit,
    unfit_committed,
    within_capacity,
)
from raftsched.state.model import Cluster
from tests.support.fsmkit import Harness, job_doc, task_doc

FREE = (4000, 1024, 1)
"""The free room most rows test against: cpu milli, memory MB, gpu."""
NOW = 5_000
"""The time the rows ask at (a cluster degraded until after it takes no work)."""


def spec(**fields: Any) -> TaskSpec:
    fields.setdefault("resources", {"cpu": 1, "memory_mb": 256, "gpu": 0})
    return validate_job_doc(job_doc([task_doc("t", **fields)])).tasks[0]


def cluster(cluster_id: str = "east", caps: tuple[str, ...] = ("linux", "ssd"),
            status: c.ClusterStatus = c.ClusterStatus.READY, *, draining: bool = False,
            degraded_until_ms: int = 0) -> Cluster:
    return Cluster(id=cluster_id, incarnation=1, capabilities=frozenset(caps), cpu_milli=8000,
                   memory_mb=4096, gpu=2, status=status, status_since_ms=0, draining=draining,
                   degraded_until_ms=degraded_until_ms)


@pytest.mark.parametrize(("name", "task", "target", "expected"), [
    ("fits", spec(), cluster(), None),
    ("suspect", spec(), cluster(status=c.ClusterStatus.SUSPECT), Unfit.CLUSTER_NOT_READY),
    ("lost", spec(), cluster(status=c.ClusterStatus.LOST), Unfit.CLUSTER_NOT_READY),
    ("draining", spec(), cluster(status=c.ClusterStatus.DRAINING), Unfit.CLUSTER_NOT_READY),
    ("drained", spec(), cluster(draining=True), Unfit.CLUSTER_DRAINING),
    ("degraded", spec(), cluster(degraded_until_ms=NOW + 1), Unfit.CLUSTER_DEGRADED),
    ("degraded-until-now", spec(), cluster(degraded_until_ms=NOW), None),
    ("drained-before-degraded", spec(), cluster(draining=True, degraded_until_ms=NOW + 1),
     Unfit.CLUSTER_DRAINING),
    ("degraded-before-pin", spec(cluster="west"), cluster(degraded_until_ms=NOW + 1),
     Unfit.CLUSTER_DEGRADED),
    ("pinned-here", spec(cluster="east"), cluster(), None),
    ("pinned-elsewhere", spec(cluster="west"), cluster(), Unfit.PINNED_ELSEWHERE),
    ("requires-nothing", spec(requires=[]), cluster(caps=()), None),
    ("requires-subset", spec(requires=["ssd"]), cluster(), None),
    ("requires-equal-set", spec(requires=["linux", "ssd"]), cluster(), None),
    ("requires-one-missing", spec(requires=["gpu", "linux"]), cluster(),
     Unfit.MISSING_CAPABILITIES),
    ("requires-all-missing", spec(requires=["gpu"]), cluster(caps=()),
     Unfit.MISSING_CAPABILITIES),
    ("cpu-exact", spec(resources={"cpu": 4}), cluster(), None),
    ("cpu-one-milli-over", spec(resources={"cpu": 4.001}), cluster(), Unfit.NO_ROOM),
    ("memory-exact", spec(resources={"memory_mb": 1024}), cluster(), None),
    ("memory-one-over", spec(resources={"memory_mb": 1025}), cluster(), Unfit.NO_ROOM),
    ("gpu-exact", spec(resources={"gpu": 1}), cluster(), None),
    ("gpu-one-over", spec(resources={"gpu": 2}), cluster(), Unfit.NO_ROOM),
    ("everything-exact", spec(resources={"cpu": 4, "memory_mb": 1024, "gpu": 1}), cluster(),
     None),
    # The first rule broken is the reason: status, then pin, then capabilities, then room.
    ("status-before-pin", spec(cluster="west"), cluster(status=c.ClusterStatus.SUSPECT),
     Unfit.CLUSTER_NOT_READY),
    ("pin-before-capabilities", spec(cluster="west", requires=["gpu"]), cluster(),
     Unfit.PINNED_ELSEWHERE),
    ("capabilities-before-room", spec(requires=["gpu"], resources={"cpu": 64}), cluster(),
     Unfit.MISSING_CAPABILITIES),
])
def test_rule(name: str, task: TaskSpec, target: Cluster, expected: Unfit | None) -> None:
    assert unfit(task, target, *FREE, NOW) is expected, name
    infeasible = explain(task, target, *FREE, NOW)
    assert (infeasible is None) == (expected is None), name
    if infeasible is not None:
        assert infeasible.reason is expected and infeasible.detail, name


@pytest.mark.parametrize(("free", "fits"), [
    ((1000, 256, 0), True),
    ((999, 256, 0), False),
    ((1000, 255, 0), False),
    ((1000, 256, -1), False),
    ((-5, -5, -5), False),  # an overcommitted cluster has negative room
])
def test_room_is_compared_per_resource(free: tuple[int, int, int], fits: bool) -> None:
    result = unfit(spec(), cluster(), *free, NOW)
    assert result is (None if fits else Unfit.NO_ROOM)


@pytest.mark.parametrize(("task", "target", "present", "absent"), [
    (spec(), cluster(status=c.ClusterStatus.SUSPECT), ["cluster east is SUSPECT"], []),
    (spec(cluster="west"), cluster(), ["task is pinned to cluster west"], []),
    (spec(requires=["gpu", "linux", "nvme"]), cluster(),
     ["cluster east lacks capabilities ['gpu', 'nvme']"], ["linux"]),
    (spec(resources={"cpu": 5, "memory_mb": 100}), cluster(),
     ["cluster east has no room: cpu_milli 5000 > 4000 free"], ["memory_mb", "gpu"]),
    (spec(resources={"cpu": 5, "memory_mb": 2000, "gpu": 2}), cluster(),
     ["cpu_milli 5000 > 4000 free", "memory_mb 2000 > 1024 free", "gpu 2 > 1 free"], []),
])
def test_explain_names_what_is_missing(task: TaskSpec, target: Cluster, present: list[str],
                                       absent: list[str]) -> None:
    infeasible = explain(task, target, *FREE, NOW)
    assert isinstance(infeasible, Infeasible)
    for fragment in present:
        assert fragment in infeasible.detail, infeasible.detail
    for fragment in absent:
        assert fragment not in infeasible.detail, infeasible.detail


def test_committed_room_is_capacity_minus_reservations() -> None:
    target = cluster()
    target.reserved_cpu_milli, target.reserved_memory_mb, target.reserved_gpu = 7000, 4000, 2
    assert unfit_committed(spec(resources={"cpu": 1, "memory_mb": 96}), target, NOW) is None
    assert unfit_committed(spec(resources={"cpu": 1.001, "memory_mb": 96}), target, NOW) \
        is Unfit.NO_ROOM
    assert unfit_committed(spec(resources={"cpu": 1, "memory_mb": 97}), target, NOW) \
        is Unfit.NO_ROOM
    assert unfit_committed(spec(resources={"cpu": 1, "gpu": 1}), target, NOW) is Unfit.NO_ROOM
    infeasible = explain_committed(spec(resources={"cpu": 2, "memory_mb": 96, "gpu": 1}), target,
                                   NOW)
    assert infeasible is not None
    assert infeasible.detail == "cluster east has no room: cpu_milli 2000 > 1000 free, " \
                                "gpu 1 > 0 free"


@pytest.mark.parametrize(("reserved", "within"), [
    ((8000, 4096, 2), True),
    ((0, 0, 0), True),
    ((8001, 0, 0), False),
    ((0, 4097, 0), False),
    ((0, 0, 3), False),
])
def test_within_capacity(reserved: tuple[int, int, int], within: bool) -> None:
    target = cluster()
    target.reserved_cpu_milli, target.reserved_memory_mb, target.reserved_gpu = reserved
    assert within_capacity(target) is within


# --- the three callers agree ---------------------------------------------------------------------


def _harness() -> Harness:
    h = Harness()
    h.register("east", caps=("linux",), cpu=2)
    h.register("west", caps=("linux", "gpu"), cpu=8, gpu=1)
    h.register("south", caps=("linux",), cpu=8)
    h.status("south", c.ClusterStatus.SUSPECT)
    h.submit("j1", job_doc([
        task_doc("small"), task_doc("wide", resources={"cpu": 4}),
        task_doc("gpu", requires=["gpu"], resources={"gpu": 1}),
        task_doc("pinned", cluster="east"), task_doc("huge", resources={"cpu": 64}),
    ], allow_unschedulable=True))
    return h


@pytest.mark.parametrize("task_id", ["small", "wide", "gpu", "pinned", "huge"])
def test_explain_view_apply_and_planner_agree(task_id: str) -> None:
    h = _harness()
    task = h.task("j1", task_id)
    answer = views.explain_task(h.state, "j1", task_id)
    eligible = {v.cluster for v in answer.clusters if v.eligible}
    for verdict in answer.clusters:
        infeasible = explain_committed(task.spec, h.state.clusters[verdict.cluster],
                                       h.state.now_ms)
        assert verdict.reason == ("" if infeasible is None else infeasible.detail)
    assert eligible == {cid for cid, cl in h.state.clusters.items()
                        if unfit_committed(task.spec, cl, h.state.now_ms) is None}
    if eligible:
        assert "fits now on " + ", ".join(sorted(eligible)) in answer.summary
    elif task_id == "huge":  # more cpu than any cluster has in all
        assert "no registered cluster could ever take it" in answer.summary
    else:
        assert "no cluster can take it now" in answer.summary
    planned = {p.cluster_id for p in placement.plan(h.state).placements if p.task_id == task_id}
    assert planned <= eligible and bool(planned) == bool(eligible)
    for cluster_id in sorted(h.state.clusters):
        probe = Harness(copy.deepcopy(h.state))
        result = probe.assign(("j1", task_id, cluster_id))
        if cluster_id in eligible:
            assert len(result.assigned) == 1, (cluster_id, result)
        else:
            [dropped] = result.dropped
            expected = unfit_committed(task.spec, h.state.clusters[cluster_id], h.state.now_ms)
            assert dropped.reason is expected and dropped.reason is not None, cluster_id
