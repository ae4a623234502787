"""The one outputs rule (raftsched/outputs.py), judged alike by agents and at apply: one JSON
object within its byte and depth bounds, else a precise reason; and the inputs text built from
kept outputs."""

from __future__ import annotations

import json

import pytest

from raftsched import limits
from raftsched.outputs import (
    OutputsAccepted,
    OutputsRefused,
    inputs_text,
    judge,
    judge_bytes,
    nesting,
)


def test_an_object_is_accepted_as_canonical_json() -> None:
    assert judge('{"b": 1, "a": {"x": [1, 2]}, "é": "ü"}') == OutputsAccepted(
        '{"a":{"x":[1,2]},"b":1,"é":"ü"}')


@pytest.mark.parametrize(("text", "words"), [
    ("count=3", "is not JSON"),
    ('{"a": NaN}', "NaN is not a JSON number"),
    ('{"a": Infinity}', "is not a JSON number"),
    ('{"a": 1} {"b": 2}', "is not JSON"),
    ("[3]", "holds a JSON array, not an object"),
    ('"x"', "holds a JSON string, not an object"),
    ("null", "holds a JSON null, not an object"),
    ("true", "holds a JSON boolean, not an object"),
    ("3.5", "holds a JSON number, not an object"),
])
def test_what_is_not_one_object_is_refused_saying_why(text: str, words: str) -> None:
    outcome = judge(text)
    assert isinstance(outcome, OutputsRefused), outcome
    assert words in outcome.reason and "$RAFTSCHED_OUTPUT" in outcome.reason


def test_the_byte_bound_counts_utf8_bytes_not_characters() -> None:
    bound = limits.MAX_TASK_RESULT_OUTPUTS_BYTES
    prefix, suffix = '{"k":"', '"}'
    room = bound - len(prefix) - len(suffix)
    assert isinstance(judge(prefix + "x" * room + suffix), OutputsAccepted)
    over = judge(prefix + "x" * (room + 1) + suffix)
    assert isinstance(over, OutputsRefused) and f"over the {bound}-byte bound" in over.reason
    # two bytes per "é": half as many characters already pass the bound
    wide = judge(prefix + "é" * (room // 2 + 1) + suffix)
    assert isinstance(wide, OutputsRefused) and "byte bound" in wide.reason


def test_nesting_is_bounded_before_parsing_and_brackets_in_strings_do_not_count() -> None:
    depth = limits.MAX_TASK_OUTPUTS_DEPTH
    deep_ok = '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)
    assert nesting(deep_ok) == depth and isinstance(judge(deep_ok), OutputsAccepted)
    too_deep = '{"a":' * depth + "{}" + "}" * depth
    refused = judge(too_deep)
    assert isinstance(refused, OutputsRefused) and f"nests {depth + 1} deep" in refused.reason
    # a hostile 64 KiB of '[' never reaches the parser's recursion (same verdict everywhere)
    flood = judge("[" * (limits.MAX_TASK_RESULT_OUTPUTS_BYTES - 1))
    assert isinstance(flood, OutputsRefused) and "deep" in flood.reason
    assert nesting('{"s": "[[[[{{{{\\"]]"}') == 1
    assert isinstance(judge('{"s": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}'),
                      OutputsAccepted)


def test_bytes_that_are_not_utf8_or_over_the_bound_are_refused() -> None:
    bad = judge_bytes(b'{"a": "\xff"}')
    assert isinstance(bad, OutputsRefused) and "not UTF-8" in bad.reason
    big = judge_bytes(b" " * (limits.MAX_TASK_RESULT_OUTPUTS_BYTES + 1))
    assert isinstance(big, OutputsRefused) and "byte bound" in big.reason


def test_inputs_map_each_upstream_id_to_its_kept_outputs_or_an_empty_object() -> None:
    text = inputs_text([("extract", '{"count":3}'), ("none", ""), ('we"ird', '{"a":[1]}')])
    assert json.loads(text) == {"extract": {"count": 3}, "none": {}, 'we"ird': {"a": [1]}}
    assert inputs_text([]) == "{}"
