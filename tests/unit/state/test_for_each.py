"""for_each (issue 26, item 4): a task expands, when its upstream tasks are done, into one
instance per item of a list an upstream task output — named predictably, bounded, all or
nothing — and its dependents wait for every instance and read their outputs as a list."""

from __future__ import annotations

import json

import pytest

from raftsched import limits
from raftsched.protocol import ReportVerdict
from raftsched.spec.model import SpecError
from raftsched.spec.validation import validate_job_doc
from raftsched.state import commands as c
from raftsched.state import fsm, snapshot
from raftsched.state.model import JobState, TaskState
from raftsched.state.resolve import task_inputs
from tests.support.fsmkit import Harness, assert_same_state, job_doc, task_doc


@pytest.fixture
def h() -> Harness:
    harness = Harness()
    harness.register("east", cpu=64)
    return harness


def _succeed(h: Harness, job: str, task: str, outputs: str = "", exit_code: int = 0) -> int:
    fence = h.assign_one(job, task, "east")
    assert h.started("east", job, task, fence) == ReportVerdict.ACCEPTED
    report = c.Report(c.ReportKind.FINISHED, job, task, fence, exit_code, False, "", outputs)
    assert h.report("east", report) == [ReportVerdict.ACCEPTED]
    return fence


def _map_reduce(h: Harness, **process: object) -> None:
    h.submit("j", job_doc([
        task_doc("ls"),
        task_doc("process", ["ls"], for_each="{{ tasks.ls.outputs.files }}",
                 command=["wc", "-l", "{{ item }}"], env={"AT": "{{ index }}"}, **process),
        task_doc("sum", ["process"], command=["sum", "{{ tasks.process.outputs.1.n }}"]),
    ]))


def test_map_reduce_expands_one_instance_per_item_and_the_reduce_reads_them_all(
        h: Harness) -> None:
    _map_reduce(h)
    _succeed(h, "j", "ls", json.dumps({"files": ["a.txt", "b.txt", "c.txt"]}))
    job = h.job("j")
    process = h.task("j", "process")
    assert process.state == TaskState.PENDING and not process.attempts
    assert [job.tasks[i].spec.id for i in process.instances or []] == [
        "process[0]", "process[1]", "process[2]"]
    first = h.task("j", "process[0]")
    assert first.state == TaskState.RUNNABLE and first.instance_of == process.index
    assert first.resolved is not None and first.resolved.command == ("wc", "-l", "a.txt")
    assert h.task("j", "process[2]").resolved.env == (("AT", "2"),)  # type: ignore[union-attr]
    assert job.instance_count == 3 and len(job.tasks) == 6
    for position, lines in enumerate((10, 20, 30)):
        _succeed(h, "j", f"process[{position}]", json.dumps({"n": lines}))
        done = position == 2
        assert (process.state == TaskState.SUCCEEDED) == done
    reduce = h.task("j", "sum")
    assert reduce.state == TaskState.RUNNABLE
    assert reduce.resolved is not None and reduce.resolved.command == ("sum", "20")
    assert json.loads(task_inputs(job, reduce)) == {"process": [{"n": 10}, {"n": 20}, {"n": 30}]}
    _succeed(h, "j", "sum")
    assert job.state == JobState.SUCCEEDED


def test_an_instance_is_retried_on_its_own_and_a_failed_one_fails_its_task(h: Harness) -> None:
    _map_reduce(h, retry={"max_attempts": 2})
    _succeed(h, "j", "ls", json.dumps({"files": ["a", "b", "c"]}))
    _succeed(h, "j", "process[0]", exit_code=1)
    assert h.task("j", "process[0]").state == TaskState.RETRY_WAIT
    h.tick(120_000)
    _succeed(h, "j", "process[0]")
    assert h.task("j", "process[0]").state == TaskState.SUCCEEDED
    assert len(h.task("j", "process[0]").attempts) == 2
    _succeed(h, "j", "process[1]", exit_code=1)
    h.tick(120_000)
    _succeed(h, "j", "process[1]", exit_code=1)  # its second and last attempt
    process = h.task("j", "process")
    assert process.state == TaskState.FAILED
    assert process.reason == "instance process[1] FAILED"
    assert h.task("j", "sum").state == TaskState.SKIPPED
    # skip_downstream: the other instance is an independent branch and goes on
    assert h.task("j", "process[2]").state == TaskState.RUNNABLE
    _succeed(h, "j", "process[2]")
    assert h.job("j").state == JobState.FAILED


@pytest.mark.parametrize(("outputs", "words"), [
    ({"files": "a b"}, 'is "a b", not a list'),
    ({"other": []}, "have no key 'files' at the top"),
    ({"files": list(range(limits.MAX_FOR_EACH_ITEMS + 1))},
     f"{limits.MAX_FOR_EACH_ITEMS + 1} items, over the {limits.MAX_FOR_EACH_ITEMS} one "
     "for_each may expand into (MAX_FOR_EACH_ITEMS)"),
])
def test_what_cannot_expand_fails_the_task_and_adds_nothing(h: Harness, outputs: object,
                                                            words: str) -> None:
    _map_reduce(h)
    _succeed(h, "j", "ls", json.dumps(outputs))
    process = h.task("j", "process")
    assert process.state == TaskState.FAILED and words in process.reason, process.reason
    assert process.instances is None and len(h.job("j").tasks) == 3
    assert h.job("j").state == JobState.FAILED


def test_an_instance_whose_templates_cannot_resolve_fails_the_task_with_nothing_expanded(
        h: Harness) -> None:
    h.submit("j", job_doc([
        task_doc("ls"),
        task_doc("process", ["ls"], for_each="{{ tasks.ls.outputs.rows }}",
                 command=["load", "{{ item.path }}"]),
    ]))
    _succeed(h, "j", "ls", json.dumps({"rows": [{"path": "/a"}, {"size": 3}]}))
    process = h.task("j", "process")
    assert process.state == TaskState.FAILED and process.instances is None
    assert process.reason.startswith("for_each: instance process[1]: command[1]: {{ item }} "
                                     "have no key 'path'"), process.reason


def test_the_jobs_instance_bound_counts_every_expansion(
        h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "MAX_INSTANCES_PER_JOB", 5)
    h.submit("j", job_doc([
        task_doc("ls"),
        task_doc("a", ["ls"], for_each="{{ tasks.ls.outputs.files }}"),
        task_doc("b", ["ls"], for_each="{{ tasks.ls.outputs.files }}"),
    ]))
    _succeed(h, "j", "ls", json.dumps({"files": [1, 2, 3]}))
    assert h.task("j", "a").instances is not None
    b = h.task("j", "b")
    assert b.state == TaskState.FAILED and "MAX_INSTANCES_PER_JOB" in b.reason, b.reason


def test_an_empty_list_succeeds_at_once_and_hands_down_an_empty_list(h: Harness) -> None:
    _map_reduce(h)
    h.submit("k", job_doc([
        task_doc("ls"),
        task_doc("process", ["ls"], for_each="{{ tasks.ls.outputs.files }}"),
        task_doc("sum", ["process"]),
    ]))
    _succeed(h, "k", "ls", json.dumps({"files": []}))
    assert h.task("k", "process").state == TaskState.SUCCEEDED
    assert h.task("k", "process").instances == []
    assert json.loads(task_inputs(h.job("k"), h.task("k", "sum"))) == {"process": []}


def test_expansion_is_deterministic_across_replicas_and_survives_a_snapshot(h: Harness) -> None:
    _map_reduce(h)
    _succeed(h, "j", "ls", json.dumps({"files": ["x", "y"]}))
    _succeed(h, "j", "process[1]", '{"n":2}')
    restored = snapshot.load(snapshot.dump(h.state))
    assert_same_state(h.state, restored)
    assert restored.jobs["j"].index_of["process[1]"] == 4
    assert restored.jobs["j"].tasks[4].dependents == [1]
    replica = Harness()
    for entry in h.log:
        fsm.apply(replica.state, entry)
    assert snapshot.digest(replica.state) == snapshot.digest(h.state)
    # the restored state goes on exactly as the original
    again = Harness(restored)
    again.now_ms = h.now_ms
    for harness in (h, again):
        _succeed(harness, "j", "process[0]", '{"n":1}')
        assert harness.task("j", "process").state == TaskState.SUCCEEDED
    assert snapshot.digest(again.state) == snapshot.digest(h.state)


def test_cancel_reaches_every_instance(h: Harness) -> None:
    _map_reduce(h)
    _succeed(h, "j", "ls", json.dumps({"files": ["a", "b"]}))
    fence = h.assign_one("j", "process[0]", "east")
    h.cancel("j")
    states = h.states("j")
    assert states["process[0]"] == states["process[1]"] == states["process"] == "CANCELLED"
    assert fence in h.state.clusters["east"].kills


@pytest.mark.parametrize(("for_each", "words"), [
    ("{{ tasks.other.outputs.files }}", "not upstream of this task"),
    ("{{ params.files }}", "must be exactly one {{ tasks.X.outputs.KEY }}"),
    ("x {{ tasks.ls.outputs.files }}", "must be exactly one"),
    ("{{ tasks.ls.outputs }}", "is none of"),
    (["a", "b"], "must be a string"),
])
def test_a_bad_for_each_is_refused_at_submit_naming_the_task(for_each: object,
                                                             words: str) -> None:
    doc = job_doc([task_doc("ls"), task_doc("other"),
                   task_doc("process", ["ls"], for_each=for_each)])
    with pytest.raises(SpecError) as refused:
        validate_job_doc(doc)
    [issue] = refused.value.issues
    assert issue.render().startswith("tasks[2] (process).for_each: "), issue.render()
    assert words in issue.message, issue.message


def test_instances_count_against_the_tenants_max_queued(h: Harness) -> None:
    h.ok(c.TenantSet("t1", 1, 4, 0, h.now_ms))
    h.submit("j", job_doc([
        task_doc("ls"),
        task_doc("process", ["ls"], for_each="{{ tasks.ls.outputs.files }}"),
    ], tenant="t1"))
    _succeed(h, "j", "ls", json.dumps({"files": list(range(5))}))
    process = h.task("j", "process")
    assert process.state == TaskState.FAILED and process.instances is None
    assert "5 instances refused: tenant t1 has 1 task(s) queued" in process.reason, process.reason
    assert "max_queued=4" in process.reason
