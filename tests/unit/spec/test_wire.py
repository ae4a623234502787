"""The wire form (log and snapshots): round trips, sharing, and — the property that makes the fast
acceptance safe — it never disagrees with the full validator on any input."""

from __future__ import annotations

import copy
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftsched import limits
from raftsched.spec import wire as spec_wire
from raftsched.spec.model import FailurePolicy, OnLost, SpecError, Trigger
from raftsched.spec.validation import validate_job_doc
from tests.unit.spec.test_job import job_docs, json_values


def outcome(fn: Any, value: object) -> object:
    try:
        return fn(value)
    except SpecError as error:
        return ("refused", tuple(error.issues))


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(job_docs())
def test_valid_specs_round_trip_through_the_fast_path(doc: dict[str, Any]) -> None:
    spec = validate_job_doc(doc)
    wire = msgpack.unpackb(msgpack.packb(spec_wire.to_wire(spec)))
    fast = spec_wire._Reader().job(wire)  # the fast pass itself accepts it
    assert fast == spec and type(fast.failure_policy) is FailurePolicy
    assert all(type(t.on_lost) is OnLost and type(t.trigger) is Trigger for t in fast.tasks)
    assert validate_job_doc(spec_wire.wire_to_doc(wire)) == spec


def _positions(wire: list[Any]) -> list[tuple[int, ...]]:
    """Every replaceable position of a wire form, nested lists included."""
    out: list[tuple[int, ...]] = []
    def walk(node: list[Any], path: tuple[int, ...]) -> None:
        for i, item in enumerate(node):
            out.append((*path, i))
            if isinstance(item, list):
                walk(item, (*path, i))
    walk(wire, ())
    return out


def neighbours(value: object) -> st.SearchStrategy[Any]:
    options = _neighbour_list(value)
    return st.sampled_from(options) if options else st.nothing()


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(job_docs(), st.data())
def test_fast_and_full_validation_agree_on_any_mutation(doc: dict[str, Any],
                                                         data: st.DataObject) -> None:
    wire = copy.deepcopy(spec_wire.to_wire(validate_job_doc(doc)))
    path = data.draw(st.sampled_from(_positions(wire)))
    target: Any = wire
    for index in path[:-1]:
        target = target[index]
    original = target[path[-1]]
    values = st.one_of(json_values, st.sampled_from(EDGE_LIST), neighbours(original))
    target[path[-1]] = data.draw(values)
    try:
        equivalent = spec_wire.wire_to_doc(wire)
    except (TypeError, ValueError, KeyError, IndexError):
        result = outcome(spec_wire.validate_wire, wire)
        assert isinstance(result, tuple) and result[0] == "refused"
        return
    assert outcome(spec_wire.validate_wire, wire) == outcome(validate_job_doc, equivalent)


def test_policies_travel_as_plain_strings_and_come_back_as_enum_members() -> None:
    doc = {"name": "n", "failure_policy": "continue",
           "tasks": [{"id": "a", "command": ["true"], "on_lost": "wait", "trigger": "all_done"}]}
    wire = spec_wire.doc_to_wire(doc)
    assert [type(v) for v in (wire[4], wire[7][0][12], wire[7][0][13])] == [str, str, str]
    assert (wire[4], wire[7][0][12], wire[7][0][13]) == ("continue", "wait", "all_done")
    spec = spec_wire.validate_wire(msgpack.unpackb(msgpack.packb(wire)))
    assert spec.failure_policy is FailurePolicy.CONTINUE
    assert (spec.tasks[0].on_lost, spec.tasks[0].trigger) == (OnLost.WAIT, Trigger.ALL_DONE)
    assert type(spec.tasks[0].on_lost) is OnLost and type(spec.tasks[0].trigger) is Trigger
    assert spec_wire.to_wire(spec) == wire


def test_equal_strings_and_policies_are_shared() -> None:
    tasks = [{"id": f"t{i}", "command": ["sh", "-c", "x"], "retry": {"max_attempts": 3},
              "depends_on": [f"t{i - 1}"] if i else []} for i in range(3)]
    wire = msgpack.unpackb(msgpack.packb(spec_wire.doc_to_wire({"name": "n", "tasks": tasks})))
    assert len(wire[6]) == 1  # one retry policy in the table
    spec = spec_wire.validate_wire(wire)
    assert spec.tasks[0].retry is spec.tasks[1].retry is spec.tasks[2].retry
    assert spec.tasks[0].command[0] is spec.tasks[2].command[0]
    assert spec.tasks[1].depends_on[0] is spec.tasks[0].id


FULL_DOC = {
    "name": "every field", "tenant": "t", "priority": 7, "failure_policy": "continue",
    "idempotency_key": "k", "tasks": [
        {"id": "a", "command": ["sh", "-c", "x"], "env": {"A": "1", "B": "é"}, "cwd": "/srv",
         "resources": {"cpu": 0.5, "memory_mb": 64, "gpu": 1}, "requires": ["gpu", "linux"],
         "cluster": "east", "timeout_s": 2.5, "on_lost": "wait", "trigger": "all_done",
         "retry": {"max_attempts": 3, "backoff_s": 1.5, "multiplier": 2.0, "backoff_max_s": 30,
                   "jitter": 0.2, "non_retryable_exit_codes": [2, 7]}},
        {"id": "b", "command": ["true"], "depends_on": ["a"]},
        {"id": "c", "command": ["true"], "depends_on": ["a", "b"]},
    ],
}
EDGE_LIST = [
    0, 1, -1, 2, 100, 101, 255, 256, -256, 2**31, 2**63, 0.0, -0.0, 0.5, 1.0, 1.5, 10.5,
    float("nan"), float("inf"), True, False, None, "", "a", "b", "/x", "x/", "a\x00",
    "RAFTSCHED_X", "all_done", "wait", "continue", [], ["a"], ["b", "a"], ["a", "a"], [["A", "1"]],
    [["B", "1"], ["A", "1"]], [["A", "1"], ["A", "2"]],
    # one past each bound, in wire units
    limits.MAX_TIMEOUT_S * 1000 + 1, limits.MAX_CPU_MILLI + 1, limits.MAX_MEMORY_MB + 1,
    limits.MAX_GPU + 1, limits.MAX_BACKOFF_S * 1000 + 1, limits.MAX_ATTEMPTS_PER_TASK + 1,
    limits.MAX_BACKOFF_MULTIPLIER + 0.5, "x" * (limits.MAX_ID_CHARS + 1),
]


FULL_DOC_WITH_PARAMS = {**FULL_DOC, "params": {"date": "2026-12-05", "n": 3, "on": True,
                                                "x": 0.5, "empty": ""}}


@pytest.mark.parametrize("full_doc", [FULL_DOC, FULL_DOC_WITH_PARAMS], ids=["v3", "v4-params"])
def test_every_position_and_edge_value_agrees_exhaustively(full_doc: dict[str, Any]) -> None:
    """Deterministic sweep: each position of a wire form using every field, replaced by each
    edge value and by each neighbour of its own value."""
    base = spec_wire.to_wire(validate_job_doc(full_doc))
    checked = 0
    for path in _positions(base):
        probe: Any = base
        for index in path:
            probe = probe[index]
        values = EDGE_LIST + _neighbour_list(probe)
        for value in values:
            wire = copy.deepcopy(base)
            target: Any = wire
            for index in path[:-1]:
                target = target[index]
            target[path[-1]] = value
            try:
                equivalent = spec_wire.wire_to_doc(wire)
            except (TypeError, ValueError, KeyError, IndexError):
                result = outcome(spec_wire.validate_wire, wire)
                assert isinstance(result, tuple), (path, value)
                continue
            fast, full = outcome(spec_wire.validate_wire, wire), outcome(validate_job_doc,
                                                                         equivalent)
            assert fast == full, (path, value)
            checked += 1
    assert checked > 2_000


def _neighbour_list(value: object) -> list[object]:
    if isinstance(value, bool) or value is None:
        return [not value]
    if isinstance(value, int):
        return [value - 1, value + 1, float(value), -value]
    if isinstance(value, float):
        return [value - 0.001, value + 0.001, int(value), -value]
    if isinstance(value, list):
        return [value[::-1], value + value[:1], value[1:], [value]]
    if isinstance(value, str):
        return [value + "\x00", value[1:], value.upper(), " " + value]
    return []
