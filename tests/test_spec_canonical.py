"""The fast canonical-form acceptance (used at apply) never disagrees with the full validator."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftsched import spec_canonical
from raftsched.spec import SpecError, validate_job_doc
from tests.test_spec import job_docs, json_values

JOB_KEYS = ["name", "tenant", "priority", "failure_policy", "idempotency_key", "tasks", "x"]
TASK_KEYS = ["id", "command", "env", "cwd", "resources", "requires", "cluster", "depends_on",
             "retry", "timeout_s", "on_lost", "trigger", "x"]
NESTED_KEYS = ["cpu", "memory_mb", "gpu", "max_attempts", "backoff_s", "multiplier",
               "backoff_max_s", "jitter", "non_retryable_exit_codes", "x"]


def outcome(validate: Any, doc: object) -> object:
    try:
        return validate(doc)
    except SpecError as error:
        return ("refused", tuple(error.issues))


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(job_docs())
def test_canonical_documents_take_the_fast_path(doc: dict[str, Any]) -> None:
    spec = validate_job_doc(doc)
    fast = spec_canonical._accept(spec.to_doc())  # raises if the fast path refused it
    assert fast == spec


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(job_docs(), st.sampled_from(["job", "task", "resources", "retry"]), st.data())
def test_fast_and_full_validation_agree_on_any_document(doc: dict[str, Any], where: str,
                                                         data: st.DataObject) -> None:
    canonical = copy.deepcopy(validate_job_doc(doc).to_doc())
    target: Any = canonical if where == "job" else data.draw(st.sampled_from(canonical["tasks"]))
    if where in ("resources", "retry"):
        target = target[where]
    keys = {"job": JOB_KEYS, "task": TASK_KEYS}.get(where, NESTED_KEYS)
    target[data.draw(st.sampled_from(keys))] = data.draw(json_values)
    assert outcome(spec_canonical.validate_canonical_doc, canonical) == outcome(
        validate_job_doc, canonical)


def test_equal_retry_policies_are_shared() -> None:
    tasks = [{"id": f"t{i}", "command": ["true"], "retry": {"max_attempts": 3}} for i in range(3)]
    doc = validate_job_doc({"name": "n", "tasks": tasks}).to_doc()
    spec = spec_canonical.validate_canonical_doc(doc)
    assert spec.tasks[0].retry is spec.tasks[1].retry is spec.tasks[2].retry
