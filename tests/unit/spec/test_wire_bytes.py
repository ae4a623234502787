"""The wire form as a client sends it (SubmitJobRequest.spec_wire): `pack_wire` / `decode_wire`.
A valid one comes back as the spec it was made from; a wire form that is not one gets the very
issues the full validator names; bytes that are no wire form at all are refused within bounds,
each with what was wrong; and what was decoded is released piece by piece."""

from __future__ import annotations

import copy
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from raftsched import limits
from raftsched.spec import wire as spec_wire
from raftsched.spec.job import parse_spec_text
from raftsched.spec.model import SpecError
from raftsched.spec.validation import validate_job_doc
from tests.unit.spec.test_job import job_docs, json_values
from tests.unit.spec.test_wire import EDGE_LIST, _positions, neighbours

SPEC = """
name: small
idempotency_key: k
tasks:
  - {id: a, command: [sh, -c, "echo a"], env: {B: "2", A: "1"}, requires: [gpu, linux]}
  - {id: b, command: [x], depends_on: [a], resources: {cpu: 0.5, custom: {licence: 2}}}
"""


def refusal(data: bytes) -> str:
    """The one issue decode_wire refuses `data` with (it must refuse)."""
    with pytest.raises(SpecError) as caught:
        spec_wire.decode_wire(data)
    [issue] = caught.value.issues
    assert issue.path == ""
    return issue.message


def packed(wire: Any) -> bytes:
    data: bytes = msgpack.packb(wire, use_bin_type=True)
    return data


def small_wire() -> list[Any]:
    return spec_wire.to_wire(parse_spec_text(SPEC))


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(job_docs())
def test_a_valid_spec_comes_back_from_its_wire_bytes(doc: dict[str, Any]) -> None:
    spec = validate_job_doc(doc)
    assert spec_wire.decode_wire(spec_wire.pack_wire(spec)) == spec


def test_the_wire_bytes_are_the_msgpack_of_the_wire_form() -> None:
    spec = parse_spec_text(SPEC)
    assert spec_wire.pack_wire(spec) == packed(spec_wire.to_wire(spec))
    assert spec_wire.decode_wire(spec_wire.pack_wire(spec)).digest() == spec.digest()


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(job_docs(), st.data())
def test_a_bad_wire_form_gets_the_issues_a_document_gets(doc: dict[str, Any],
                                                         data: st.DataObject) -> None:
    wire = copy.deepcopy(spec_wire.to_wire(validate_job_doc(doc)))
    path = data.draw(st.sampled_from(_positions(wire)))
    target: Any = wire
    for index in path[:-1]:
        target = target[index]
    values = st.one_of(json_values, st.sampled_from(EDGE_LIST), neighbours(target[path[-1]]))
    target[path[-1]] = data.draw(values)
    try:
        data_bytes = packed(wire)
    except (OverflowError, TypeError, ValueError):
        assume(False)  # not expressible in msgpack: no client can send it
        raise
    if _holds_a_map(wire):
        assert "a map (a wire form holds arrays and scalars only)" in refusal(data_bytes)
        return
    assert outcome(spec_wire.decode_wire, data_bytes) == outcome(spec_wire.validate_wire, wire)


def outcome(fn: Any, value: object) -> object:
    """The spec, or the issues; "malformed" for a wire form that stands for no document (the
    decoder says more precisely where the structure breaks than the validator does)."""
    try:
        return fn(value)
    except SpecError as error:
        if error.issues[0].message.startswith("malformed wire-form job spec"):
            return "malformed"
        return ("refused", tuple(error.issues))


def _holds_a_map(value: object) -> bool:
    """Whether `value` holds a map with entries (an empty one is within max_map_len=0)."""
    if isinstance(value, dict):
        return bool(value) or any(_holds_a_map(item) for item in value.values())
    return isinstance(value, list) and any(_holds_a_map(item) for item in value)


def test_wire_bytes_past_the_spec_bound_are_refused_before_they_are_decoded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    spec = parse_spec_text(SPEC)
    data = spec_wire.pack_wire(spec)
    monkeypatch.setattr(limits, "MAX_SPEC_BYTES", len(data) - 1)
    assert refusal(data) == (f"the wire form is {len(data)} bytes; a job spec may be at most "
                             f"{len(data) - 1} bytes")
    monkeypatch.setattr(limits, "MAX_SPEC_BYTES", len(data))
    assert spec_wire.decode_wire(data) == spec


def with_task_field(index: int, value: Any) -> list[Any]:
    wire = small_wire()
    wire[7][0][index] = value
    return wire


MALFORMED = "malformed wire-form job spec: "


@pytest.mark.parametrize(("data", "problem"), [
    pytest.param(b"", "the bytes end inside the job", id="empty"),
    pytest.param(packed(small_wire())[:-2], "the bytes end inside the job", id="truncated"),
    pytest.param(packed(small_wire()) + b"\xc0", "1 bytes follow the job", id="trailing"),
    pytest.param(b"\xc1", "the job is not an array", id="reserved-byte"),
    pytest.param(packed("name: x"), "the job is not an array", id="a-string"),
    pytest.param(packed([1, "x", "t"]), "a job is a list of 8, 13 or 14 fields, got 3",
                 id="three-fields"),
    pytest.param(packed(with_task_field(1, [{"sh": 1}])),
                 "a map (a wire form holds arrays and scalars only): 1 exceeds max_map_len(0)",
                 id="map"),
    pytest.param(packed(with_task_field(1, [b"sh"])),
                 "a binary value (a wire form holds arrays and scalars only): 2 exceeds "
                 "max_bin_len(0)", id="binary"),
    pytest.param(packed(with_task_field(1, [msgpack.ExtType(5, b"x")])),
                 "an extension value (a wire form holds arrays and scalars only): 2 exceeds "
                 "max_ext_len(0)", id="extension"),
    pytest.param(packed(with_task_field(1, ["x" * (spec_wire._WIRE_STRING_BYTES + 1)])),
                 f"a string of more than {spec_wire._WIRE_STRING_BYTES} bytes (no field of a "
                 f"job spec is that long): {spec_wire._WIRE_STRING_BYTES + 1} exceeds "
                 f"max_str_len({spec_wire._WIRE_STRING_BYTES})", id="long-string"),
    pytest.param(packed(with_task_field(9, ["a"] * (spec_wire._WIRE_ARRAY_ITEMS + 1))),
                 f"an array of more than {spec_wire._WIRE_ARRAY_ITEMS} items inside a task or "
                 f"retry policy (no list of one is that long): "
                 f"{spec_wire._WIRE_ARRAY_ITEMS + 1} exceeds "
                 f"max_array_len({spec_wire._WIRE_ARRAY_ITEMS})", id="long-array"),
    pytest.param(packed(with_task_field(2, [[]] * (spec_wire._ITEM_ARRAYS + 1))),
                 f"an item holds more than {spec_wire._ITEM_ARRAYS} arrays or "
                 f"{spec_wire._ITEM_ELEMENTS} array elements, more than any task can",
                 id="task-of-many-arrays"),
    pytest.param(packed(with_task_field(9, [["a"] * 5_000] * 3)),
                 f"an item holds more than {spec_wire._ITEM_ARRAYS} arrays or "
                 f"{spec_wire._ITEM_ELEMENTS} array elements, more than any task can",
                 id="task-of-many-elements"),
])
def test_bytes_that_are_no_wire_form_are_refused_saying_why(data: bytes, problem: str) -> None:
    assert refusal(data) == MALFORMED + problem


def test_a_retry_table_that_is_no_array_is_judged_by_the_validator() -> None:
    with pytest.raises(SpecError) as caught:
        spec_wire.decode_wire(packed([*small_wire()[:6], 5, *small_wire()[7:]]))
    assert [issue.message for issue in caught.value.issues] == ["malformed wire-form job spec"]


def test_more_tasks_than_a_job_may_have_are_refused_before_they_are_decoded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    wire = small_wire()
    monkeypatch.setattr(limits, "MAX_TASKS_PER_JOB", 1)
    assert refusal(packed(wire)) == MALFORMED + "the task list has 2 entries; at most 1"


def test_the_item_budget_holds_every_valid_task() -> None:
    """The largest task the limits allow, every list full, decodes within the item budget."""
    env = {f"V{i}": "" for i in range(limits.MAX_ENV_VARS)}
    custom = {f"r{i}": 1 for i in range(limits.MAX_CUSTOM_RESOURCES_PER_TASK)}
    deps = [f"d{i}" for i in range(limits.MAX_DEPENDENCIES_PER_TASK)]
    tasks = [{"id": d, "command": ["x"]} for d in deps]
    tasks.append({"id": "full", "command": ["x"] * limits.MAX_COMMAND_ARGS, "env": env,
                  "requires": [f"c{i}" for i in range(limits.MAX_REQUIRES_PER_TASK)],
                  "depends_on": deps, "resources": {"custom": custom},
                  "retry": {"non_retryable_exit_codes": list(
                      range(limits.MAX_NON_RETRYABLE_EXIT_CODES))}})
    spec = validate_job_doc({"name": "full", "tasks": tasks})
    assert spec_wire.decode_wire(spec_wire.pack_wire(spec)) == spec


def test_release_wire_empties_the_wire_form_item_by_item() -> None:
    wire = small_wire()
    spec_wire.release_wire(wire)
    assert wire[6] == [] and wire[7] == [] and wire[1] == "small"
