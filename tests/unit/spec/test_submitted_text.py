"""Documents as the replicas parse them (`parse_submitted_text`): YAML and JSON only up to their
bounds, each refusal saying what to send instead; and a document meant as JSON that is not JSON
is reported as invalid JSON, where it is (it once said "invalid YAML")."""

from __future__ import annotations

import json

import pytest

from raftsched import limits
from raftsched.spec.job import parse_spec_text, parse_submitted_text
from raftsched.spec.model import SpecError

YAML = "name: y\ntasks:\n  - {id: a, command: [x]}\n"
JSON = json.dumps({"name": "j", "tasks": [{"id": "a", "command": ["x"]}]})
WIRE_HINT = "SubmitJobRequest.spec_wire; the raftsched CLI and Python client send it"


def issue(text: str | bytes, *, submitted: bool = True) -> str:
    with pytest.raises(SpecError) as caught:
        if submitted:
            parse_submitted_text(text, source="spec")
        else:
            parse_spec_text(text, source="spec")
    [found] = caught.value.issues
    assert found.path == ""
    return found.message


def padded(text: str, size: int) -> str:
    """`text` and trailing spaces: `size` bytes."""
    assert len(text) <= size
    return text + " " * (size - len(text))


def test_yaml_is_parsed_up_to_its_bound_and_refused_past_it() -> None:
    at_bound = padded(YAML, limits.MAX_YAML_SPEC_BYTES)
    assert parse_submitted_text(at_bound, source="spec") == parse_spec_text(YAML)
    past = at_bound + " "
    assert issue(past) == (
        f"spec is {len(past)} bytes of YAML; YAML specs over {limits.MAX_YAML_SPEC_BYTES} bytes "
        f"are not parsed by the replicas: send JSON (up to {limits.MAX_JSON_SPEC_BYTES} bytes) "
        f"or the wire form ({WIRE_HINT})")
    assert parse_spec_text(past) == parse_spec_text(YAML)  # a file of any size, locally


def test_json_is_parsed_up_to_its_bound_and_refused_past_it() -> None:
    at_bound = padded(JSON, limits.MAX_JSON_SPEC_BYTES)
    assert parse_submitted_text(at_bound, source="spec") == parse_spec_text(JSON)
    past = at_bound + " "
    assert issue(past) == (
        f"spec is {len(past)} bytes of JSON; JSON specs over {limits.MAX_JSON_SPEC_BYTES} bytes "
        f"are not parsed by the replicas: send the wire form ({WIRE_HINT})")


def test_the_bounds_count_utf8_bytes() -> None:
    text = YAML.replace("name: y", "name: " + "é" * (limits.MAX_YAML_SPEC_BYTES // 2))
    assert len(text) < limits.MAX_YAML_SPEC_BYTES < len(text.encode())
    assert issue(text).startswith(f"spec is {len(text.encode())} bytes of YAML; ")


@pytest.mark.parametrize("submitted", [True, False])
@pytest.mark.parametrize(("text", "message"), [
    ('{"name": "x", "tasks": [}', "invalid JSON in spec at line 1, column 25: Expecting value"),
    ('\ufeff\n  {"name": "x",\n   "tasks": [] "priority": 1}',
     "invalid JSON in spec at line 3, column 16: Expecting ',' delimiter"),
    ('{"name": "x", "tasks": [{"id": "a", "command": ["x"]}]', "invalid JSON in spec at line 1, "
     "column 55: Expecting ',' delimiter"),
    ('{"name": 1' + "0" * 5000 + "}", "invalid JSON in spec: Exceeds the limit (4300 digits) "
     "for integer string conversion: value has 5001 digits; use sys.set_int_max_str_digits() to "
     "increase the limit"),
    ('{"a": ' + "[" * 100_000, "invalid JSON in spec: nested too deeply"),
    ('{"name": "a", "name": "b"}', "spec: duplicate key 'name' in a JSON object"),
])
def test_a_document_meant_as_json_that_is_not_json_says_so_and_where(
        text: str, message: str, submitted: bool) -> None:
    assert issue(text, submitted=submitted) == message


def test_a_yaml_flow_mapping_is_still_yaml() -> None:
    """A document that starts with `{` but is no JSON may be a YAML flow mapping."""
    text = "{name: flow, tasks: [{id: a, command: [x]}]}"
    assert parse_submitted_text(text, source="spec").name == "flow"


def test_a_json_looking_document_past_the_yaml_bound_is_not_read_as_yaml() -> None:
    text = padded("{name: flow, tasks: [{id: a, command: [x]}]}", limits.MAX_YAML_SPEC_BYTES + 1)
    assert issue(text) == "invalid JSON in spec at line 1, column 2: Expecting property name " \
                          "enclosed in double quotes"
    assert parse_spec_text(text).name == "flow"
