"""Named custom resources end to end in the pure core: the spec (`resources.custom`), the wire
form (version 3 only when a task asks for some), CLUSTER_REGISTER (9 fields only when the
cluster offers some), feasibility, the planner and apply (counted like cpu), submit-time
refusal naming the shortfall, explain, and snapshots (totals kept, holdings derived)."""

from __future__ import annotations

from typing import Any

import pytest

from raftsched.errors import Code
from raftsched.spec.model import SpecError
from raftsched.spec.validation import validate_job_doc
from raftsched.spec.wire import doc_to_wire, from_trusted_wire, to_wire, validate_wire
from raftsched.state import commands as c
from raftsched.state import placement, snapshot
from raftsched.state.feasibility import explain_committed, never_fits, unschedulable
from raftsched.state.outcome import Rejected
from raftsched.state.results import AssignResult
from tests.support.fsmkit import Harness, job_doc, task_doc


def fpga_task(task_id: str, count: int = 1, **fields: Any) -> dict[str, Any]:
    return task_doc(task_id, resources={"cpu": 1, "custom": {"fpga": count}}, **fields)


def register_with(h: Harness, cluster_id: str, custom: tuple[tuple[str, int], ...],
                  cpu: int = 8) -> None:
    h.run(c.ClusterRegister(cluster_id, 1, ("linux",), cpu * 1000, 16_384, 0, h.now_ms, (),
                            custom))


def test_the_spec_reads_sorts_and_writes_custom_resources() -> None:
    spec = validate_job_doc({"name": "x", "tasks": [
        {"id": "a", "command": ["true"], "resources": {"custom": {"lic": 2, "fpga": 1}}}]})
    assert spec.tasks[0].custom == (("fpga", 1), ("lic", 2))
    assert spec.tasks[0].to_doc()["resources"]["custom"] == {"fpga": 1, "lic": 2}


@pytest.mark.parametrize(("custom", "path", "says"), [
    ({"fpga": 0}, "resources.custom.fpga", "must be an integer in 1.."),
    ({"fpga": 1.5}, "resources.custom.fpga", "must be an integer in 1.."),
    ({"bad name": 1}, "resources.custom", "resource name must use only"),
    ("fpga", "resources.custom", "must be a mapping of resource name to count"),
    ({f"r{i}": 1 for i in range(9)}, "resources.custom", "at most 8 resources"),
])
def test_bad_custom_resources_are_refused_by_field(custom: Any, path: str, says: str) -> None:
    with pytest.raises(SpecError) as raised:
        validate_job_doc({"name": "x", "tasks": [
            {"id": "a", "command": ["true"], "resources": {"custom": custom}}]})
    (issue,) = raised.value.issues
    assert issue.path.endswith(path) and says in issue.message and issue.task == "a"


def test_the_wire_form_is_version_3_only_with_custom_resources() -> None:
    plain = validate_job_doc(job_doc([task_doc("a")]))
    assert to_wire(plain)[0] == 2 and len(to_wire(plain)[7][0]) == 16  # bytes as before
    spec = validate_job_doc(job_doc([fpga_task("a", 2), task_doc("b")]))
    wire = to_wire(spec)
    assert wire[0] == 3 and wire[7][0][16] == [["fpga", 2]] and wire[7][1][16] == []
    assert validate_wire(wire) == spec == from_trusted_wire(wire)
    wire[7][0][16] = [["fpga", 0]]
    with pytest.raises(SpecError, match=r"custom\.fpga: must be an integer"):
        validate_wire(wire)


def test_cluster_register_carries_custom_resources_and_reads_the_old_form() -> None:
    command = c.ClusterRegister("east", 1, ("linux",), 1000, 10, 0, 5, (), (("fpga", 2),))
    assert c.decode(c.encode(command)) == command
    old = c.ClusterRegister("east", 1, ("linux",), 1000, 10, 0, 5)
    assert c.decode(c.encode(old)) == old  # 8 fields, as agents before custom resources sent
    with pytest.raises(c.CommandError, match="distinct and sorted"):
        c.decode(c.encode(c.ClusterRegister("east", 1, (), 1, 1, 0, 5, (),
                                            (("z", 1), ("a", 1)))))


def test_placement_counts_custom_resources_like_cpu() -> None:
    h = Harness()
    register_with(h, "fpga-box", (("fpga", 2),))
    register_with(h, "plain", ())
    h.submit("j", job_doc([fpga_task(f"t{i}") for i in range(3)] + [task_doc("cpu-only")]))
    planned = placement.plan(h.state, now_ms=h.now_ms)
    placed = {p.task_id: p.cluster_id for p in planned.placements}
    fpga = sorted(task for task, cluster in placed.items() if task.startswith("t"))
    assert len(fpga) == 2 and all(placed[t] == "fpga-box" for t in fpga)  # never "plain"
    assert "cpu-only" in placed
    result = h.expect(c.AssignBatch(h.now_ms, tuple(planned.placements)), AssignResult)
    assert not result.dropped
    box = h.state.clusters["fpga-box"]
    assert box.reserved_custom == {"fpga": 2}
    waiting = next(f"t{i}" for i in range(3) if f"t{i}" not in placed)
    task = h.task("j", waiting)
    reason = explain_committed(task.spec, box, h.now_ms)
    assert reason is not None and "custom fpga 1 > 0 free" in reason.detail
    # A placement past what is free is dropped at apply, as for cpu.
    dropped = h.expect(c.AssignBatch(h.now_ms, (c.Placement("j", waiting, "fpga-box"),)),
                       AssignResult)
    assert dropped.dropped and not dropped.assigned
    done = fpga[0]
    h.started("fpga-box", "j", done, h.current("j", done).fence)
    h.report("fpga-box", c.Report(c.ReportKind.FINISHED, "j", done, h.current("j", done).fence,
                                  0))
    assert box.reserved_custom == {"fpga": 1}
    assert [p.task_id for p in placement.plan(h.state, now_ms=h.now_ms).placements] == [waiting]


def test_a_task_no_cluster_could_ever_take_is_refused_naming_the_custom_shortfall() -> None:
    h = Harness()
    register_with(h, "fpga-box", (("fpga", 2),))
    spec = validate_job_doc(job_doc([fpga_task("big", 3)], allow_unschedulable=False))
    assert never_fits(spec.tasks[0], h.state.clusters["fpga-box"])
    words = unschedulable(spec.tasks[0], h.state.clusters.values())
    assert words is not None and "custom {'fpga': 3}" in words
    assert "has custom fpga 2 of 3 (short by 1)" in words
    outcome = h.run(c.JobSubmit("big", doc_to_wire(job_doc([fpga_task("big", 3)],
                                                           allow_unschedulable=False)),
                                h.now_ms))
    assert isinstance(outcome, Rejected) and outcome.code == Code.FAILED_PRECONDITION
    assert "custom fpga" in outcome.reason


def test_snapshots_keep_the_totals_and_derive_what_is_held() -> None:
    h = Harness()
    register_with(h, "fpga-box", (("fpga", 2), ("lic", 5)))
    h.submit("j", job_doc([fpga_task("a")]))
    h.assign_one("j", "a", "fpga-box")
    loaded = snapshot.load(snapshot.dump(h.state))
    box = loaded.clusters["fpga-box"]
    assert box.custom == {"fpga": 2, "lic": 5} and box.reserved_custom == {"fpga": 1}
    assert snapshot.dump(loaded) == snapshot.dump(h.state)
    # A re-registration that offers fewer marks the cluster overcommitted, as for cpu.
    h.run(c.ClusterRegister("fpga-box", 2, ("linux",), 8000, 16_384, 0, h.now_ms,
                            (c.KnownAttempt("j", "a", h.current("j", "a").fence, False),),
                            (("lic", 5),)))
    assert h.state.clusters["fpga-box"].overcommitted


def test_a_custom_resource_name_that_is_no_id_is_refused_at_decode() -> None:
    with pytest.raises(c.CommandError, match="a resource name must use only"):
        c.decode(c.encode(c.ClusterRegister("east", 1, (), 1, 1, 0, 5, (),
                                            (("bad name", 1),))))
