"""Templates resolved at apply (issue 26, item 2): when a task's upstream tasks are done, from
replicated values only, so the committed assignment carries the same command on every replica;
a reference that cannot be resolved fails the task, naming field and reason."""

from __future__ import annotations

import json

import pytest

from raftsched.protocol import ReportVerdict
from raftsched.replica.gateway import deliveries
from raftsched.spec.model import SpecError
from raftsched.spec.params import with_params
from raftsched.spec.validation import validate_job_doc
from raftsched.state import commands as c
from raftsched.state import fsm, snapshot
from raftsched.state.model import TaskState
from tests.support.fsmkit import Harness, assert_same_state, job_doc, task_doc


@pytest.fixture
def h() -> Harness:
    harness = Harness()
    harness.register("east")
    return harness


def _succeed(h: Harness, job: str, task: str, outputs: str) -> None:
    fence = h.assign_one(job, task, "east")
    assert h.started("east", job, task, fence) == ReportVerdict.ACCEPTED
    report = c.Report(c.ReportKind.FINISHED, job, task, fence, 0, False, "", outputs)
    assert h.report("east", report) == [ReportVerdict.ACCEPTED]


def _delivered(h: Harness, job: str, task: str) -> tuple[tuple[str, ...], dict[str, str], str,
                                                        str]:
    h.assign_one(job, task, "east")
    assignments, _ = deliveries(h.state, "east")
    [assignment] = [a for a in assignments if a.task_id == task]
    return assignment.command, assignment.env, assignment.cwd, assignment.inputs


def test_a_dependent_runs_what_its_templates_resolved_to_from_its_upstream_outputs(
        h: Harness) -> None:
    h.submit("j", job_doc([
        task_doc("extract"),
        task_doc("load", ["extract"],
                 command=["load", "--rows={{ tasks.extract.outputs.rows }}", "{{ job.id }}",
                          "{{ tasks.extract.outputs.files }}"],
                 env={"FIRST": "{{ tasks.extract.outputs.files.0 }}", "PLAIN": "x"},
                 cwd="/data/{{ tasks.extract.outputs.dir }}"),
    ]))
    assert h.task("j", "load").resolved is None
    _succeed(h, "j", "extract", '{"dir":"2026","files":["a.csv","b.csv"],"rows":12}')
    resolved = h.task("j", "load").resolved
    assert resolved is not None
    assert resolved.command == ("load", "--rows=12", "j", '["a.csv","b.csv"]')
    command, env, cwd, inputs = _delivered(h, "j", "load")
    assert command == resolved.command
    assert env == {"FIRST": "a.csv", "PLAIN": "x"} and cwd == "/data/2026"
    assert json.loads(inputs) == {"extract": {"dir": "2026", "files": ["a.csv", "b.csv"],
                                              "rows": 12}}
    # the resolved values are replicated state: a snapshot keeps them, and a replica that
    # replays the same log resolves the same
    restored = snapshot.load(snapshot.dump(h.state))
    assert_same_state(h.state, restored)
    assert restored.jobs["j"].tasks[1].resolved == resolved
    replica = Harness()
    for entry in h.log:
        fsm.apply(replica.state, entry)
    assert snapshot.digest(replica.state) == snapshot.digest(h.state)


def test_a_key_the_upstream_did_not_output_fails_the_task_naming_field_and_key(
        h: Harness) -> None:
    h.submit("j", job_doc([
        task_doc("extract"),
        task_doc("load", ["extract"], command=["echo", "{{ tasks.extract.outputs.count }}"]),
        task_doc("after", ["load"]),
    ]))
    _succeed(h, "j", "extract", '{"rows":12}')
    load = h.task("j", "load")
    assert load.state == TaskState.FAILED and not load.attempts
    assert load.reason == ("templates: command[1]: the outputs of 'extract' have no key "
                           "'count' at the top (found an object with keys rows)")
    assert h.task("j", "after").state == TaskState.SKIPPED


def test_a_value_with_a_nul_or_past_a_bound_fails_the_task(h: Harness) -> None:
    h.submit("j", job_doc([
        task_doc("extract"),
        task_doc("load", ["extract"], command=["echo", "{{ tasks.extract.outputs.s }}"]),
        task_doc("cd", ["extract"], command=["true"], cwd="/{{ tasks.extract.outputs.rel }}"),
    ]))
    _succeed(h, "j", "extract", json.dumps({"s": "a\u0000b", "rel": "x" * 5000}))
    assert "NUL character" in h.task("j", "load").reason
    assert "cwd: resolves to" in h.task("j", "cd").reason


def test_under_continue_an_all_done_task_reading_a_failed_upstream_fails_saying_so(
        h: Harness) -> None:
    h.submit("j", job_doc([
        task_doc("flaky"),
        task_doc("report", ["flaky"], trigger="all_done",
                 command=["echo", "{{ tasks.flaky.outputs.n }}"]),
    ], failure_policy="continue"))
    h.run_task("east", "j", "flaky", exit_code=1)
    report = h.task("j", "report")
    assert report.state == TaskState.FAILED
    assert "upstream task 'flaky' did not succeed" in report.reason


def test_job_id_and_submission_time_resolve_for_a_first_task_at_submit(h: Harness) -> None:
    h.now_ms = 1_764_892_800_250  # 2025-12-05T00:00:00.250Z
    h.submit("j-7", job_doc([task_doc("t", command=["run", "{{ job.id }}",
                                                      "{{ schedule.nominal_time }}",
                                                      "[{{ schedule.id }}]"])]))
    resolved = h.task("j-7", "t").resolved
    assert resolved is not None
    assert resolved.command == ("run", "j-7", "2025-12-05T00:00:00.250Z", "[]")


def test_params_resolve_in_templates_with_the_values_given_at_submit(h: Harness) -> None:
    doc = job_doc([task_doc("t", command=["run", "--date={{ params.date }}", "{{ params.n }}"])],
                  params={"date": None, "n": 3})
    h.submit("j", with_params(doc, {"date": "2026-12-05"}))
    resolved = h.task("j", "t").resolved
    assert resolved is not None and resolved.command == ("run", "--date=2026-12-05", "3")
    bad = job_doc([task_doc("t", command=["run", "{{ params.nope }}"])], params={"n": 3})
    with pytest.raises(SpecError, match=r"the job has no param 'nope' \(its params: n\)"):
        validate_job_doc(bad)
