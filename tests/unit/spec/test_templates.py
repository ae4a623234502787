"""Templates in task fields (raftsched/spec/templates.py): the forms parse, anything else is
malformed; a spec's templates are checked at submit naming task and field; and they resolve
deterministically against replicated values."""

from __future__ import annotations

import json

import pytest

from raftsched.spec.model import SpecError
from raftsched.spec.templates import (
    Context,
    IndexRef,
    ItemRef,
    JobIdRef,
    Literal,
    OutputRef,
    ParamRef,
    ScheduleRef,
    TemplateError,
    references,
    render,
    resolve,
)
from raftsched.spec.validation import validate_job_doc
from raftsched.spec.wire import to_wire, validate_wire


def test_every_form_parses_in_order() -> None:
    text = ("echo {{ tasks.a.outputs.count }} {{params.size}} {{ job.id }} "
            "{{ tasks.b.outputs.x.0 }} {{ schedule.nominal_time }} {{ schedule.id }} "
            "{{ item }} {{ item.path }} {{ index }} {{ '{{' }}")
    assert references(text) == [
        OutputRef("a", ("count",)), ParamRef("size"), JobIdRef(), OutputRef("b", ("x", "0")),
        ScheduleRef("nominal_time"), ScheduleRef("id"), ItemRef(()), ItemRef(("path",)),
        IndexRef(), Literal()]


def test_text_without_templates_has_no_references() -> None:
    assert references("echo } { plain {x}") == []


@pytest.mark.parametrize(("text", "words"), [
    ("{{ tasks.a.count }}", "is none of"),
    ("{{ params }}", "is none of"),
    ("{{ job.name }}", "is none of"),
    ("{{ schedule.when }}", "is none of"),
    ("{{ params.no/slash }}", "param name must match"),
    ("{{ tasks.a b.outputs.k }}", "task id must use only"),
    ("{{ tasks.a.outputs.k..j }}", "empty or spaced key"),
    ("echo {{ params.x", "without its closing"),
    ("{{ params.x }} {{", "without its closing"),
])
def test_malformed_templates_say_why(text: str, words: str) -> None:
    outcome = references(text)
    assert isinstance(outcome, TemplateError)
    assert words in outcome.reason, outcome.reason


def _doc(command: list[str], deps: list[str] | None = None, **more: object) -> dict[str, object]:
    return {"name": "t", "tasks": [{"id": "extract", "command": ["true"]},
                                   {"id": "load", "command": command,
                                    "depends_on": deps or [], **more}]}


@pytest.mark.parametrize(("doc", "where", "words"), [
    (_doc(["echo", "{{ tasks.extract.outputs.n }}"]), "tasks[1] (load).command[1]",
     "'extract', which is not upstream of this task: add it to depends_on"),
    (_doc(["echo", "{{ params.date }}"]), "tasks[1] (load).command[1]",
     "the job has no param 'date' (its params: none)"),
    (_doc(["echo", "{{ item }}"], ["extract"]), "tasks[1] (load).command[1]",
     "belong to a task with for_each"),
    (_doc(["echo"], env={"N": "{{ job.name }}"}), "tasks[1] (load).env.N", "is none of"),
    (_doc(["echo"], cwd="/data/{{ tasks.extract.outputs.dir"), "tasks[1] (load).cwd",
     "without its closing"),
])
def test_a_spec_with_a_bad_template_is_refused_naming_task_and_field(
        doc: dict[str, object], where: str, words: str) -> None:
    with pytest.raises(SpecError) as refused:
        validate_job_doc(doc)
    [issue] = refused.value.issues
    assert issue.render().startswith(f"{where}: "), issue.render()
    assert words in issue.message, issue.message


def test_good_templates_pass_both_the_document_and_the_wire_checks() -> None:
    doc = _doc(["echo", "{{ tasks.extract.outputs.n }}", "{{ job.id }}"], ["extract"],
               env={"WHEN": "{{ schedule.nominal_time }}"},
               cwd="/d/{{ tasks.extract.outputs.dir }}")
    spec = validate_job_doc(doc)
    assert validate_wire(to_wire(spec)) == spec
    bad = _doc(["echo", "{{ tasks.extract.outputs.n }}"])  # not upstream
    wire = to_wire(validate_job_doc(_doc(["echo", "x"])))
    wire[7][1][1] = bad["tasks"][1]["command"]  # type: ignore[index]
    with pytest.raises(SpecError, match="not upstream"):
        validate_wire(wire)


def _context(outputs: dict[str, str | None], **more: object) -> Context:
    return Context(job_id="j-1", params={"date": "2026-12-05", "n": "3"},
                   outputs=lambda task: outputs.get(task), **more)  # type: ignore[arg-type]


def test_resolution_renders_strings_as_themselves_and_anything_else_as_json() -> None:
    context = _context({"ls": json.dumps({"files": ["a", "b"], "count": 2, "ok": True,
                                          "meta": {"z": 1, "a": None}, "name": "x y"})},
                       schedule_id="nightly", nominal_time="2026-12-05T00:00:00Z",
                       item={"path": "/a"}, index=4)
    cases = {
        "{{ tasks.ls.outputs.name }}": "x y",
        "{{ tasks.ls.outputs.count }}": "2",
        "{{ tasks.ls.outputs.ok }}": "true",
        "{{ tasks.ls.outputs.files }}": '["a","b"]',
        "{{ tasks.ls.outputs.files.1 }}": "b",
        "{{ tasks.ls.outputs.meta }}": '{"a":null,"z":1}',
        "--date={{ params.date }}/{{ job.id }}": "--date=2026-12-05/j-1",
        "{{ schedule.id }}@{{ schedule.nominal_time }}": "nightly@2026-12-05T00:00:00Z",
        "{{ item.path }}#{{ index }}": "/a#4",
        "{{ '{{' }} literal }}": "{{ literal }}",
    }
    for text, expected in cases.items():
        assert resolve(text, context) == expected, text
    assert render(1.5) == "1.5" and render(None) == "null"


@pytest.mark.parametrize(("text", "words"), [
    ("{{ tasks.ls.outputs.missing }}", "have no key 'missing' at the top (found an object with "
                                       "keys files)"),
    ("{{ tasks.ls.outputs.files.7 }}", "no key '7' at files (found a list of 1)"),
    ("{{ tasks.failed.outputs.n }}", "upstream task 'failed' did not succeed"),
    ("{{ params.nope }}", "the job has no param 'nope'"),
])
def test_what_cannot_be_resolved_says_which_reference_and_why(text: str, words: str) -> None:
    outcome = resolve(text, _context({"ls": '{"files":["a"]}', "failed": None}))
    assert isinstance(outcome, TemplateError) and words in outcome.reason, outcome


def test_template_problems_are_named_with_every_other_problem_of_the_spec() -> None:
    doc = {"name": "t", "params": {"date": "x"}, "tasks": [
        {"id": "ls", "command": ["ls"], "retry": {"max_attempts": 0}},  # a field's problem
        {"id": "p", "depends_on": ["ls"], "for_each": "{{ tasks.other.outputs.x }}",
         "command": ["echo", "{{ item }}"]},
        {"id": "q", "command": ["echo", "{{ params.when }}", "{{ tasks.ls.outputs.n }}"]}]}
    with pytest.raises(SpecError) as refused:
        validate_job_doc(doc)
    rendered = [issue.render() for issue in refused.value.issues]
    print(rendered)
    assert [r.split(":")[0] for r in rendered] == [
        "tasks[0] (ls).retry.max_attempts", "tasks[1] (p).for_each", "tasks[2] (q).command[1]",
        "tasks[2] (q).command[2]"]
    assert "the job has no param 'when' (its params: date)" in rendered[2]
