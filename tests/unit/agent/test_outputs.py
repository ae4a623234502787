"""A task's `$RAFTSCHED_OUTPUT` file: one JSON object within its bound, else a precise reason."""

from __future__ import annotations

from pathlib import Path

from agent.outputs import OutputsAccepted, OutputsRefused, parse_outputs, read_outputs
from raftsched import limits


def test_an_object_is_accepted_as_canonical_json() -> None:
    assert parse_outputs(b'{"b": 1, "a": {"x": [1, 2]}}') == OutputsAccepted(
        '{"a":{"x":[1,2]},"b":1}')


def test_not_json_is_refused_saying_so() -> None:
    outcome = parse_outputs(b"count=3")
    assert isinstance(outcome, OutputsRefused)
    assert "is not JSON" in outcome.reason


def test_json_that_is_not_an_object_is_refused_naming_its_type() -> None:
    outcome = parse_outputs(b"[3]")
    assert outcome == OutputsRefused("$RAFTSCHED_OUTPUT holds a JSON list, not an object")


def test_an_object_at_the_bound_passes_one_byte_more_is_refused() -> None:
    bound = limits.MAX_TASK_RESULT_OUTPUTS_BYTES
    at_bound = b'{"k": "' + b"x" * (bound - 10) + b'"}'
    assert len(at_bound) == bound - 1
    assert isinstance(parse_outputs(at_bound + b" "), OutputsAccepted)
    outcome = parse_outputs(at_bound + b"  ")
    assert isinstance(outcome, OutputsRefused)
    assert f"over the {bound}-byte bound" in outcome.reason


def test_no_file_is_no_outputs_and_a_big_file_is_read_only_past_the_bound(
        tmp_path: Path) -> None:
    assert read_outputs(tmp_path / "absent.json") == OutputsAccepted("{}")
    big = tmp_path / "big.json"
    big.write_bytes(b"x" * (limits.MAX_TASK_RESULT_OUTPUTS_BYTES * 4))
    outcome = read_outputs(big)
    assert isinstance(outcome, OutputsRefused)
    assert "over the" in outcome.reason
