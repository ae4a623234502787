"""Job spec parsing and validation (raftsched.spec): tables of rejections, defaults, round trips."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgpack
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftsched import limits
from raftsched.spec.file import load_spec_file
from raftsched.spec.issue import SpecIssue
from raftsched.spec.job import parse_spec_text
from raftsched.spec.model import (
    FailurePolicy,
    JobSpec,
    OnLost,
    RetryPolicy,
    SpecError,
    TaskSpec,
    Trigger,
    runs_when_upstream_done,
)
from raftsched.spec.validation import validate_job_doc
from tests.support import paths

EXAMPLES = paths.EXAMPLES
DROP = object()
"""Passed as a field value: leave the field out."""


def task(task_id: Any = "a", **fields: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"id": task_id, "command": ["true"], **fields}
    return {key: value for key, value in doc.items() if value is not DROP}


def job(*tasks: Any, **fields: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": "j", "tasks": list(tasks) if tasks else [task()], **fields}
    return {key: value for key, value in doc.items() if value is not DROP}


def with_key(doc: dict[str, Any], key: object, value: object) -> dict[object, object]:
    result: dict[object, object] = {key: value}
    result.update(doc.items())
    return result


def issues_of(doc: object) -> tuple[SpecIssue, ...]:
    with pytest.raises(SpecError) as caught:
        validate_job_doc(doc)
    return caught.value.issues


def the_issue(doc: object, path: str) -> SpecIssue:
    found = [issue for issue in issues_of(doc) if issue.path == path]
    assert len(found) == 1, f"want one issue at {path!r}, got {issues_of(doc)}"
    return found[0]


# --- rejections: (document, exact path, message fragment) ---------------------------------------

JOB_REJECTIONS = [
    ("not-a-mapping", ["x"], "", "must be a mapping, got ['x']"),
    ("name-missing", job(name=DROP), "name", "missing required field"),
    ("name-int", job(name=3), "name", "must be a non-empty string, got 3"),
    ("name-empty", job(name=""), "name", "non-empty string"),
    ("name-long", job(name="n" * (limits.MAX_NAME_CHARS + 1)), "name", "at most 256 characters"),
    ("name-control", job(name="a\nb"), "name", "printable"),
    ("tenant-charset", job(tenant="a b"), "tenant", "got 'a b'"),
    ("tenant-start", job(tenant="-x"), "tenant", "starting with a letter or digit"),
    ("tenant-long", job(tenant="t" * 129), "tenant", "at most 128 characters, got 129"),
    ("tenant-null", job(tenant=None), "tenant", "must be a string, got None"),
    ("priority-bool", job(priority=True), "priority", "must be an integer in 0..100, got True"),
    ("priority-float", job(priority=5.0), "priority", "got 5.0"),
    ("priority-high", job(priority=101), "priority", "in 0..100, got 101"),
    ("priority-low", job(priority=-1), "priority", "got -1"),
    ("policy", job(failure_policy="stop"), "failure_policy", "must be one of 'fail_fast', "),
    ("key-empty", job(idempotency_key=""), "idempotency_key", "non-empty string or null"),
    ("key-int", job(idempotency_key=7), "idempotency_key", "got 7"),
    ("key-long", job(idempotency_key="k" * 257), "idempotency_key", "at most 256 characters"),
    ("key-control", job(idempotency_key="a\x00"), "idempotency_key", "printable"),
    ("tasks-missing", job(tasks=DROP), "tasks", "missing required field"),
    ("tasks-empty", job(tasks=[]), "tasks", "non-empty list of tasks, got []"),
    ("tasks-mapping", job(tasks={"a": {}}), "tasks", "non-empty list of tasks"),
    ("unknown-job-field", job(nmae="x"), "nmae", "unknown field 'nmae' (did you mean 'name'?)"),
    ("unknown-no-hint", job(zzzzzz=1), "zzzzzz", "unknown field 'zzzzzz'"),
    ("non-string-key", with_key(job(), 1, "x"), "", "field names must be strings, got 1"),
    ("task-not-mapping", job(task(), 5), "tasks[1]", "must be a mapping, got 5"),
]

TASK_REJECTIONS = [
    ("id-missing", task(DROP), "tasks[0].id", "missing required field"),
    ("id-int", task(5), "tasks[0].id", "must be a string, got 5"),
    ("id-space", task("a b"), "tasks[0].id", "got 'a b'"),
    ("id-empty", task(""), "tasks[0].id", "got ''"),
    ("id-long", task("a" * 129), "tasks[0].id", "at most 128 characters"),
    ("id-newline", task("a\n"), "tasks[0].id", "got 'a\\n'"),
    ("unknown-field", task(comand=["x"]), "tasks[0].comand", "(did you mean 'command'?)"),
    ("command-missing", task(command=DROP), "tasks[0].command", "missing required field"),
    ("command-string", task(command="echo hi"), "tasks[0].command", "for a shell line use"),
    ("command-empty", task(command=[]), "tasks[0].command", "non-empty list of strings"),
    ("command-arg-int", task(command=["x", 1]), "tasks[0].command[1]", "must be a string, got 1"),
    ("command-first-empty", task(command=["", "x"]), "tasks[0].command[0]", "must not be empty"),
    ("command-nul", task(command=["x", "a\x00b"]), "tasks[0].command[1]", "NUL"),
    ("command-surrogate", task(command=["\ud800"]), "tasks[0].command[0]", "valid Unicode"),
    ("command-args", task(command=["x"] * 1025), "tasks[0].command", "at most 1024 arguments"),
    ("command-bytes", task(command=["é" * 32769]), "tasks[0].command", "at most 65536 bytes"),
    ("env-list", task(env=["A=1"]), "tasks[0].env", "must be a mapping of NAME: value"),
    ("env-name", task(env={"1A": "x"}), "tasks[0].env", "got '1A'"),
    ("env-name-dash", task(env={"A-B": "x"}), "tasks[0].env", "[A-Za-z_][A-Za-z0-9_]*"),
    ("env-reserved", task(env={"RAFTSCHED_FENCE": "1"}), "tasks[0].env", "reserved"),
    ("env-value-int", task(env={"N": 1}), "tasks[0].env.N", "must be a string, got 1 (quote it"),
    ("env-value-nul", task(env={"N": "\x00"}), "tasks[0].env.N", "NUL"),
    ("env-count", task(env={f"V{i}": "" for i in range(257)}), "tasks[0].env", "at most 256"),
    ("env-bytes", task(env={"V": "x" * 65536}), "tasks[0].env", "at most 65536 bytes"),
    ("cwd-relative", task(cwd="tmp"), "tasks[0].cwd", "absolute path"),
    ("cwd-int", task(cwd=1), "tasks[0].cwd", "absolute path (starting with '/'), got 1"),
    ("cwd-long", task(cwd="/" * 4097), "tasks[0].cwd", "at most 4096 characters"),
    ("cwd-nul", task(cwd="/a\x00"), "tasks[0].cwd", "NUL"),
    ("resources-list", task(resources=[1]), "tasks[0].resources", "must be a mapping, got [1]"),
    ("resources-unknown", task(resources={"mem": 1}), "tasks[0].resources.mem", "unknown field"),
    ("cpu-negative", task(resources={"cpu": -1}), "tasks[0].resources.cpu", "> 0, got -1"),
    ("cpu-zero", task(resources={"cpu": 0}), "tasks[0].resources.cpu", "> 0, got 0"),
    ("cpu-bool", task(resources={"cpu": True}), "tasks[0].resources.cpu", "got True"),
    ("cpu-string", task(resources={"cpu": "abc"}), "tasks[0].resources.cpu", "got 'abc'"),
    ("cpu-nan", task(resources={"cpu": float("nan")}), "tasks[0].resources.cpu", "got nan"),
    ("cpu-inf", task(resources={"cpu": float("inf")}), "tasks[0].resources.cpu", "got inf"),
    ("cpu-tiny", task(resources={"cpu": 0.0004}), "tasks[0].resources.cpu", "at least 0.001"),
    ("cpu-huge", task(resources={"cpu": 1_000_001}), "tasks[0].resources.cpu", "at most 1000000"),
    ("memory-float", task(resources={"memory_mb": 256.0}), "tasks[0].resources.memory_mb", "256.0"),
    ("memory-neg", task(resources={"memory_mb": -1}), "tasks[0].resources.memory_mb", "got -1"),
    ("memory-huge", task(resources={"memory_mb": 2**30 + 1}), "tasks[0].resources.memory_mb",
     "in 0..1073741824"),
    ("memory-bool", task(resources={"memory_mb": False}), "tasks[0].resources.memory_mb", "False"),
    ("gpu-negative", task(resources={"gpu": -1}), "tasks[0].resources.gpu", "got -1"),
    ("gpu-huge", task(resources={"gpu": 1_000_001}), "tasks[0].resources.gpu", "0..1000000"),
    ("requires-string", task(requires="linux"), "tasks[0].requires", "list of capability names"),
    ("requires-item", task(requires=["linux", "a b"]), "tasks[0].requires[1]", "got 'a b'"),
    ("requires-many", task(requires=[f"c{i}" for i in range(65)]), "tasks[0].requires",
     "at most 64 items, got 65"),
    ("cluster-charset", task(cluster="east/1"), "tasks[0].cluster", "got 'east/1'"),
    ("cluster-int", task(cluster=1), "tasks[0].cluster", "must be a string"),
    ("deps-string", task(depends_on="b"), "tasks[0].depends_on", "must be a list of task ids"),
    ("deps-item-int", task(depends_on=[1]), "tasks[0].depends_on[0]", "must be a string, got 1"),
    ("deps-many", task(depends_on=[f"d{i}" for i in range(10_001)]), "tasks[0].depends_on",
     "at most 10000 items"),
    ("retry-list", task(retry=[]), "tasks[0].retry", "must be a mapping"),
    ("retry-unknown", task(retry={"max_attempt": 2}), "tasks[0].retry.max_attempt",
     "did you mean 'max_attempts'?"),
    ("attempts-zero", task(retry={"max_attempts": 0}), "tasks[0].retry.max_attempts", "1..100"),
    ("attempts-high", task(retry={"max_attempts": 101}), "tasks[0].retry.max_attempts", "101"),
    ("attempts-bool", task(retry={"max_attempts": True}), "tasks[0].retry.max_attempts", "True"),
    ("backoff-neg", task(retry={"backoff_s": -1}), "tasks[0].retry.backoff_s", ">= 0, got -1"),
    ("backoff-str", task(retry={"backoff_s": "abc"}), "tasks[0].retry.backoff_s",
     "must be a number >= 0, got 'abc'"),
    ("backoff-huge", task(retry={"backoff_s": 86401}), "tasks[0].retry.backoff_s",
     "at most 86400"),
    ("multiplier-low", task(retry={"multiplier": 0.5}), "tasks[0].retry.multiplier", ">= 1"),
    ("multiplier-high", task(retry={"multiplier": 11}), "tasks[0].retry.multiplier", "at most 10"),
    ("backoff-max-low", task(retry={"backoff_s": 5, "backoff_max_s": 2}),
     "tasks[0].retry.backoff_max_s", "must be >= backoff_s (5), got 2"),
    ("backoff-max-huge", task(retry={"backoff_max_s": 86401}), "tasks[0].retry.backoff_max_s",
     "at most 86400"),
    ("jitter-high", task(retry={"jitter": 1.5}), "tasks[0].retry.jitter", "at most 1"),
    ("jitter-neg", task(retry={"jitter": -0.1}), "tasks[0].retry.jitter", ">= 0"),
    ("codes-int", task(retry={"non_retryable_exit_codes": 2}),
     "tasks[0].retry.non_retryable_exit_codes", "list of exit codes"),
    ("codes-range", task(retry={"non_retryable_exit_codes": [1, 256]}),
     "tasks[0].retry.non_retryable_exit_codes[1]", "-255..255, got 256"),
    ("codes-bool", task(retry={"non_retryable_exit_codes": [True]}),
     "tasks[0].retry.non_retryable_exit_codes[0]", "got True"),
    ("codes-many", task(retry={"non_retryable_exit_codes": list(range(257))}),
     "tasks[0].retry.non_retryable_exit_codes", "at most 256 items"),
    ("timeout-zero", task(timeout_s=0), "tasks[0].timeout_s", "must be a number > 0, got 0"),
    ("timeout-neg", task(timeout_s=-5), "tasks[0].timeout_s", "got -5"),
    ("timeout-bool", task(timeout_s=True), "tasks[0].timeout_s", "got True"),
    ("timeout-tiny", task(timeout_s=0.0001), "tasks[0].timeout_s", "at least 0.001"),
    ("timeout-huge", task(timeout_s=2_592_001), "tasks[0].timeout_s", "at most 2592000"),
    ("on-lost", task(on_lost="retry"), "tasks[0].on_lost", "one of 'replace', 'wait'"),
    ("trigger", task(trigger="any"), "tasks[0].trigger", "'all_success', 'all_done', got 'any'"),
    ("trigger-null", task(trigger=None), "tasks[0].trigger", "got None"),
]


@pytest.mark.parametrize(
    ("doc", "path", "fragment"),
    [pytest.param(doc, path, fragment, id=name) for name, doc, path, fragment in JOB_REJECTIONS],
)
def test_job_level_rejections(doc: object, path: str, fragment: str) -> None:
    issue = the_issue(doc, path)
    assert fragment in issue.message
    assert issue.task is None


@pytest.mark.parametrize(
    ("task_doc", "path", "fragment"),
    [pytest.param(doc, path, frag, id=name) for name, doc, path, frag in TASK_REJECTIONS],
)
def test_task_level_rejections(task_doc: dict[str, Any], path: str, fragment: str) -> None:
    issue = the_issue(job(task_doc), path)
    assert fragment in issue.message
    valid_id = isinstance(task_doc.get("id"), str) and task_doc["id"] == "a"
    assert issue.task == ("a" if valid_id else None)


GRAPH_REJECTIONS = [
    ("duplicate-id", [task("a"), task("a")], "tasks[1].id",
     "duplicate task id 'a' (first used by tasks[0])"),
    ("unknown-dep", [task("a", depends_on=["x"])], "tasks[0].depends_on[0]",
     "unknown dependency 'x'"),
    ("self-dep", [task("a", depends_on=["a"])], "tasks[0].depends_on[0]", "depends on itself"),
    ("duplicate-dep", [task("a"), task("b", depends_on=["a", "a"])], "tasks[1].depends_on[1]",
     "duplicate dependency 'a' (also depends_on[0])"),
    ("cycle", [task("a", depends_on=["b"]), task("b", depends_on=["a"])], "tasks[0].depends_on",
     "cycle: a -> b -> a"),
    ("bad-dep-id", [task("a", depends_on=["x y"])], "tasks[0].depends_on[0]", "got 'x y'"),
]


@pytest.mark.parametrize(
    ("tasks", "path", "fragment"),
    [pytest.param(tasks, path, frag, id=name) for name, tasks, path, frag in GRAPH_REJECTIONS],
)
def test_graph_rejections(tasks: list[dict[str, Any]], path: str, fragment: str) -> None:
    assert fragment in the_issue(job(*tasks), path).message


def test_too_many_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "MAX_TASKS_PER_JOB", 3)
    doc = job(*[task(f"t{i}") for i in range(4)])
    assert "at most 3 tasks, got 4" in the_issue(doc, "tasks").message
    validate_job_doc(job(*[task(f"t{i}") for i in range(3)]))


def test_task_id_named_in_rendered_issue() -> None:
    doc = job(task("extract"), task("load", resources={"cpu": -1}))
    [issue] = issues_of(doc)
    assert issue == SpecIssue("tasks[1].resources.cpu", "must be a number > 0, got -1", "load")
    assert issue.render() == "tasks[1] (load).resources.cpu: must be a number > 0, got -1"


def test_render_without_task_or_path() -> None:
    assert SpecIssue("name", "missing required field").render() == "name: missing required field"
    assert SpecIssue("", "spec.yaml is empty").render() == "spec.yaml is empty"
    assert SpecIssue("tasks", "x", task="a").render() == "tasks: x"


def test_long_values_are_truncated_in_messages() -> None:
    message = the_issue(job(name=["x" * 10_000]), "name").message
    assert len(message) < 200


def test_every_issue_is_reported_together() -> None:
    doc = job(
        task("a", resources={"cpu": "lots"}),
        task("b", depends_on=["a", "ghost"], comand=1),
        task("c", depends_on=["d"], retry={"jitter": 2}),
        task("d", depends_on=["c"]),
        priority=500,
        colour="blue",
    )
    with pytest.raises(SpecError) as caught:
        validate_job_doc(doc)
    paths = [issue.path for issue in caught.value.issues]
    assert paths == [
        "colour",
        "priority",
        "tasks[0].resources.cpu",
        "tasks[1].comand",
        "tasks[2].retry.jitter",
        "tasks[1].depends_on[1]",
        "tasks[2].depends_on",
    ]
    assert str(caught.value).endswith("(and 6 more)")


def test_bad_task_id_leaves_task_unnamed_but_graph_still_checked() -> None:
    doc = job(task("a b", depends_on=["ghost"]), task("c", depends_on=["a b"]))
    got = {(issue.path, issue.task) for issue in issues_of(doc)}
    assert got == {
        ("tasks[0].id", None),
        ("tasks[0].depends_on[0]", None),  # unknown 'ghost', reported without a task name
        ("tasks[1].depends_on[0]", "c"),  # 'a b' is not an id at all
    }


# --- defaults and canonical form ------------------------------------------------------------------


def test_defaults_are_filled() -> None:
    spec = validate_job_doc({"name": "j", "tasks": [{"id": "a", "command": ["true"]}]})
    assert spec == JobSpec(
        name="j",
        tenant=limits.DEFAULT_TENANT,
        priority=limits.DEFAULT_PRIORITY,
        failure_policy=FailurePolicy.SKIP_DOWNSTREAM,
        idempotency_key=None,
        tasks=(
            TaskSpec(
                id="a",
                command=("true",),
                env=(),
                cwd=None,
                cpu_milli=1000,
                memory_mb=limits.DEFAULT_MEMORY_MB,
                gpu=0,
                requires=(),
                cluster=None,
                depends_on=(),
                retry=RetryPolicy(
                    max_attempts=limits.DEFAULT_MAX_ATTEMPTS,
                    backoff_ms=1000,
                    multiplier=2.0,
                    backoff_max_ms=60_000,
                    jitter=0.1,
                    non_retryable_exit_codes=(),
                ),
                timeout_ms=None,
                on_lost=OnLost.REPLACE,
                trigger=Trigger.ALL_SUCCESS,
            ),
        ),
    )


@pytest.mark.parametrize(("policy", "on_lost", "trigger"), [
    (FailurePolicy.FAIL_FAST, OnLost.WAIT, Trigger.ALL_DONE),
    (FailurePolicy.SKIP_DOWNSTREAM, OnLost.REPLACE, Trigger.ALL_SUCCESS),
    (FailurePolicy.CONTINUE, OnLost.WAIT, Trigger.ALL_DONE),
])
def test_policies_are_enum_members_and_documents_hold_strings(
        policy: FailurePolicy, on_lost: OnLost, trigger: Trigger) -> None:
    spec = validate_job_doc(job(task(on_lost=on_lost.value, trigger=trigger.value),
                                failure_policy=policy.value))
    assert type(spec.failure_policy) is FailurePolicy and spec.failure_policy is policy
    assert type(spec.tasks[0].on_lost) is OnLost and spec.tasks[0].on_lost is on_lost
    assert type(spec.tasks[0].trigger) is Trigger and spec.tasks[0].trigger is trigger
    doc = spec.to_doc()
    assert type(doc["failure_policy"]) is str and doc["failure_policy"] == policy.value
    assert type(doc["tasks"][0]["on_lost"]) is str and type(doc["tasks"][0]["trigger"]) is str
    assert validate_job_doc(doc) == spec


def test_runs_when_upstream_done_only_for_all_done_under_continue() -> None:
    table = {(p, t): runs_when_upstream_done(p, t) for p in FailurePolicy for t in Trigger}
    assert [key for key, runs in table.items() if runs] == [
        (FailurePolicy.CONTINUE, Trigger.ALL_DONE)]


def test_empty_nested_mappings_take_defaults() -> None:
    plain = validate_job_doc(job(task()))
    assert validate_job_doc(job(task(resources={}, retry={}))) == plain


def test_conversions_and_sorting() -> None:
    spec = validate_job_doc(job(task(
        env={"B": "2", "A": "1"},
        resources={"cpu": 0.25, "memory_mb": 0, "gpu": 2},
        requires=["linux", "cuda", "linux"],
        retry={"backoff_s": 1.5, "multiplier": 3, "backoff_max_s": 2, "jitter": 0,
               "non_retryable_exit_codes": [3, -1, 3]},
        timeout_s=2.5,
    )))
    [t] = spec.tasks
    assert t.env == (("A", "1"), ("B", "2"))
    assert (t.cpu_milli, t.memory_mb, t.gpu) == (250, 0, 2)
    assert t.requires == ("cuda", "linux")
    assert t.retry == RetryPolicy(1, 1500, 3.0, 2000, 0.0, (-1, 3))
    assert isinstance(t.retry.multiplier, float)
    assert t.timeout_ms == 2500


def test_depends_on_keeps_user_order() -> None:
    spec = validate_job_doc(job(task("z"), task("y"), task("x", depends_on=["z", "y"])))
    assert spec.tasks[2].depends_on == ("z", "y")
    assert spec.edge_count() == 2


def test_nullable_fields_accept_null() -> None:
    spec = validate_job_doc(job(task(cwd=None, cluster=None, timeout_s=None), idempotency_key=None))
    assert (spec.tasks[0].cwd, spec.tasks[0].cluster, spec.tasks[0].timeout_ms) == (None,) * 3


def test_backoff_max_default_rises_to_backoff() -> None:
    retry = validate_job_doc(job(task(retry={"backoff_s": 120}))).tasks[0].retry
    assert (retry.backoff_ms, retry.backoff_max_ms) == (120_000, 120_000)


def test_negative_zero_is_canonical() -> None:
    a = validate_job_doc(job(task(retry={"jitter": -0.0})))
    b = validate_job_doc(job(task(retry={"jitter": 0})))
    assert a == b and a.digest() == b.digest()


def test_to_doc_fills_every_field() -> None:
    doc = validate_job_doc(job(task(timeout_s=3))).to_doc()
    assert list(doc) == ["name", "tenant", "priority", "failure_policy", "idempotency_key", "tasks"]
    assert list(doc["tasks"][0]) == [
        "id", "command", "env", "cwd", "resources", "requires", "cluster", "depends_on", "retry",
        "timeout_s", "on_lost", "trigger",
    ]
    assert doc["tasks"][0]["resources"] == {"cpu": 1.0, "memory_mb": 128, "gpu": 0}
    assert doc["tasks"][0]["timeout_s"] == 3.0
    assert "timeout_s" not in validate_job_doc(job(task())).to_doc()["tasks"][0]


@pytest.mark.parametrize("name", ["diamond.yaml", "etl.json", "map-reduce.yaml"])
def test_examples_round_trip(name: str) -> None:
    spec = load_spec_file(str(EXAMPLES / name))
    assert validate_job_doc(spec.to_doc()) == spec
    assert parse_spec_text(json.dumps(spec.to_doc())) == spec
    assert parse_spec_text(yaml.safe_dump(spec.to_doc())) == spec


def test_digest_ignores_set_order_and_spelled_out_defaults() -> None:
    a = validate_job_doc(job(task(requires=["b", "a"], env={"Y": "1", "X": "2"})))
    b = validate_job_doc(job(task(requires=["a", "b"], env={"X": "2", "Y": "1"}, on_lost="replace"),
                             tenant="default"))
    c = validate_job_doc(job(task(requires=["a"])))
    assert a.digest() == b.digest() != c.digest()
    assert len(a.digest()) == 32


# --- text and files -------------------------------------------------------------------------------

DIAMOND_YAML = """\
name: d
tasks:
  - {id: top, command: [x]}
  - {id: left, command: [x], depends_on: [top]}
  - {id: right, command: [x], depends_on: [top]}
  - {id: bottom, command: [x], depends_on: [left, right]}
"""


def test_yaml_text() -> None:
    spec = parse_spec_text(DIAMOND_YAML)
    assert [t.id for t in spec.tasks] == ["top", "left", "right", "bottom"]
    assert spec.edge_count() == 4


def test_json_text_and_bytes() -> None:
    doc = job(task("a"), task("b", depends_on=["a"]))
    assert parse_spec_text(json.dumps(doc)) == validate_job_doc(doc)
    assert parse_spec_text(json.dumps(doc).encode()) == validate_job_doc(doc)
    assert parse_spec_text(b"\xef\xbb\xbf" + json.dumps(doc).encode()) == validate_job_doc(doc)


def file_issue(text: str | bytes, source: str = "s.yaml") -> str:
    with pytest.raises(SpecError) as caught:
        parse_spec_text(text, source=source)
    [issue] = caught.value.issues
    assert issue.path == ""
    return issue.message


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("name: x\ntasks:\n  - id: a\n    command: [true\n", "invalid YAML in s.yaml at line 5"),
        ("name: x\n  bad: indent\n", "at line 2, column 6: mapping values are not allowed"),
        ("name: a\nname: b\n", "at line 2, column 1: duplicate key 'name' (first at line 1)"),
        ("name: x\ntasks: [\x07]\n", "at line 2, column 9: unacceptable character #x0007"),
        ('{"name": "a", "name": "b"}', "duplicate key 'name' in a JSON object"),
        ("x: !!python/object/apply:os.system [ls]", "could not determine a constructor"),
        ("", "s.yaml is empty"),
        ("  \n\n", "s.yaml is empty"),
        ("# just a comment\n", "holds no document"),
        (b"name: \xff\n", "not UTF-8 text (bad byte at offset 6)"),
        ("a: " + "[" * 5000, "invalid YAML"),
        ("a: 1" + "2" * 5000, "invalid YAML"),
        ("---\nname: a\n---\nname: b\n", "expected a single document"),
    ],
)
def test_file_level_errors(text: str | bytes, fragment: str) -> None:
    assert fragment in file_issue(text)


def test_document_that_is_not_a_mapping() -> None:
    assert "must be a mapping, got [1, 2]" in the_issue_text("[1, 2]")
    assert "must be a mapping, got 'hello'" in the_issue_text("hello")


def the_issue_text(text: str) -> str:
    with pytest.raises(SpecError) as caught:
        parse_spec_text(text)
    return caught.value.issues[0].message


def test_yaml_merge_keys_still_work() -> None:
    text = "name: m\ntasks:\n  - &base {id: a, command: [x]}\n  - {<<: *base, id: b}\n"
    assert [t.id for t in parse_spec_text(text).tasks] == ["a", "b"]


def test_spec_size_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    text = json.dumps(job())
    monkeypatch.setattr(limits, "MAX_SPEC_BYTES", len(text) - 1)
    assert f"is {len(text)} bytes; a job spec may be at most {len(text) - 1}" in file_issue(text)
    monkeypatch.setattr(limits, "MAX_SPEC_BYTES", len(text))
    parse_spec_text(text)


def test_yaml_values_keep_their_yaml_types() -> None:
    issue = the_issue(yaml.safe_load("name: 2026-11-30\ntasks: [{id: a, command: [x]}]"), "name")
    assert "got datetime.date(2026, 11, 30)" in issue.message


def test_load_spec_file(tmp_path: Path) -> None:
    path = tmp_path / "d.yaml"
    path.write_text(DIAMOND_YAML)
    assert load_spec_file(str(path)) == parse_spec_text(DIAMOND_YAML)


@pytest.mark.parametrize("make", [lambda p: p / "missing.yaml", lambda p: p])
def test_load_spec_file_unreadable(tmp_path: Path, make: Any) -> None:
    path = str(make(tmp_path))
    with pytest.raises(SpecError) as caught:
        load_spec_file(path)
    [issue] = caught.value.issues
    assert issue.message.startswith(f"cannot read {path}: ")


def test_hundred_thousand_task_chain() -> None:
    count = 100_000
    tasks = [task(f"t{i}", depends_on=[f"t{i - 1}"] if i else []) for i in range(count)]
    spec = validate_job_doc(job(*tasks))  # no RecursionError; the cycle case is in test_dag
    assert len(spec.tasks) == count and spec.edge_count() == count - 1


# --- properties -----------------------------------------------------------------------------------

ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,12}", fullmatch=True)
plain_text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"),
                     max_size=12).filter(lambda text: "{{" not in text)  # templates: their own
printable = st.text(st.characters(categories=("L", "N", "P", "S")) | st.just(" "),
                    min_size=1, max_size=20).filter(str.isprintable)
env_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True).filter(
    lambda name: not name.startswith("RAFTSCHED_")
)


def maybe(draw: st.DrawFn, doc: dict[str, Any], key: str, strategy: st.SearchStrategy[Any]) -> None:
    if draw(st.booleans()):
        doc[key] = draw(strategy)


@st.composite
def retry_docs(draw: st.DrawFn) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    maybe(draw, doc, "max_attempts", st.integers(1, limits.MAX_ATTEMPTS_PER_TASK))
    backoff = st.floats(0, limits.MAX_BACKOFF_S) | st.integers(0, limits.MAX_BACKOFF_S)
    maybe(draw, doc, "backoff_s", backoff)
    maybe(draw, doc, "multiplier", st.floats(1, limits.MAX_BACKOFF_MULTIPLIER))
    floor = doc.get("backoff_s", limits.DEFAULT_BACKOFF_S)
    maybe(draw, doc, "backoff_max_s", st.floats(floor, limits.MAX_BACKOFF_S))
    maybe(draw, doc, "jitter", st.floats(0, 1))
    maybe(draw, doc, "non_retryable_exit_codes", st.lists(st.integers(-255, 255), max_size=5))
    return doc


@st.composite
def task_docs(draw: st.DrawFn, task_id: str, earlier: list[str]) -> dict[str, Any]:
    doc: dict[str, Any] = {"id": task_id}
    first = plain_text.filter(bool)
    doc["command"] = draw(st.tuples(first, st.lists(plain_text, max_size=3)).map(
        lambda parts: [parts[0], *parts[1]]))
    maybe(draw, doc, "env", st.dictionaries(env_names, plain_text, max_size=3))
    maybe(draw, doc, "cwd", plain_text.map(lambda text: "/" + text) | st.none())
    resources = st.fixed_dictionaries({}, optional={
        "cpu": st.floats(0.001, 1e6) | st.integers(1, 1_000_000),
        "memory_mb": st.integers(0, limits.MAX_MEMORY_MB),
        "gpu": st.integers(0, limits.MAX_GPU),
    })
    maybe(draw, doc, "resources", resources)
    maybe(draw, doc, "requires", st.lists(ids, max_size=4))
    maybe(draw, doc, "cluster", ids | st.none())
    if earlier:
        maybe(draw, doc, "depends_on", st.lists(st.sampled_from(earlier), unique=True))
    maybe(draw, doc, "retry", retry_docs())
    maybe(draw, doc, "timeout_s", st.floats(0.001, limits.MAX_TIMEOUT_S) | st.none())
    maybe(draw, doc, "on_lost", st.sampled_from([m.value for m in OnLost]))
    maybe(draw, doc, "trigger", st.sampled_from([m.value for m in Trigger]))
    return doc


@st.composite
def job_docs(draw: st.DrawFn) -> dict[str, Any]:
    task_ids = draw(st.lists(ids, min_size=1, max_size=6, unique=True))
    doc: dict[str, Any] = {
        "name": draw(printable),
        "tasks": [draw(task_docs(tid, task_ids[:i])) for i, tid in enumerate(task_ids)],
    }
    maybe(draw, doc, "tenant", ids)
    maybe(draw, doc, "priority", st.integers(limits.PRIORITY_MIN, limits.PRIORITY_MAX))
    maybe(draw, doc, "failure_policy", st.sampled_from([m.value for m in FailurePolicy]))
    maybe(draw, doc, "idempotency_key", printable | st.none())
    maybe(draw, doc, "params", st.dictionaries(param_names, param_defaults, max_size=4))
    return doc


param_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
param_defaults = (st.text(max_size=8).filter(lambda t: "\x00" not in t) | st.integers()
                  | st.floats(allow_nan=False, allow_infinity=False) | st.booleans())


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(job_docs())
def test_valid_specs_round_trip(doc: dict[str, Any]) -> None:
    spec = validate_job_doc(doc)
    canonical = spec.to_doc()
    again = validate_job_doc(canonical)
    assert again == spec
    assert again.to_doc() == canonical
    assert again.digest() == spec.digest()
    assert msgpack.unpackb(msgpack.packb(canonical)) == canonical
    assert parse_spec_text(json.dumps(canonical)) == spec


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                 max_size=3),
    max_leaves=8,
)
job_keys = ["name", "tenant", "priority", "failure_policy", "idempotency_key", "params", "tasks",
            "x"]
task_keys = ["id", "command", "env", "cwd", "resources", "requires", "cluster", "depends_on",
             "retry", "timeout_s", "on_lost", "trigger", "x"]
nested_keys = ["cpu", "memory_mb", "gpu", "max_attempts", "backoff_s", "multiplier",
               "backoff_max_s", "jitter", "non_retryable_exit_codes", "x"]


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(job_docs(), st.sampled_from(["job", "task", "resources", "retry"]), st.data())
def test_broken_specs_only_raise_spec_error(doc: dict[str, Any], where: str, data: Any) -> None:
    """Any one field replaced by any JSON value: a JobSpec or a SpecError, nothing else."""
    target = doc if where == "job" else data.draw(st.sampled_from(doc["tasks"]))
    if where in ("resources", "retry"):
        target = target.setdefault(where, {})
    keys = {"job": job_keys, "task": task_keys}.get(where, nested_keys)
    target[data.draw(st.sampled_from(keys))] = data.draw(json_values)
    try:
        spec = validate_job_doc(doc)
    except SpecError as error:
        assert error.issues and all(isinstance(issue, SpecIssue) for issue in error.issues)
    else:
        assert validate_job_doc(spec.to_doc()) == spec


@settings(max_examples=300)
@given(st.text(alphabet="{}[]:,-#&*!|>?'\"%@` \n\tabc019.né\x00", max_size=40) | st.text())
def test_any_text_gives_a_spec_or_a_spec_error(text: str) -> None:
    try:
        parse_spec_text(text)
    except SpecError as error:
        assert error.issues


def test_an_idempotency_key_is_set_without_validating_the_spec_again() -> None:
    from raftsched.spec.validation import with_idempotency_key

    spec = parse_spec_text(DIAMOND_YAML)
    keyed = with_idempotency_key(spec, "nightly-2026-12-01")
    doc = spec.to_doc()
    doc["idempotency_key"] = "nightly-2026-12-01"
    assert keyed == validate_job_doc(doc)
    for bad, fragment in (("", "non-empty"), ("x" * 257, "at most 256"), ("a\nb", "printable")):
        with pytest.raises(SpecError, match=fragment) as caught:
            with_idempotency_key(spec, bad)
        assert caught.value.issues[0].path == "idempotency_key"
