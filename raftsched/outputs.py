"""A task's outputs: the one JSON object it may leave at `$RAFTSCHED_OUTPUT` (issue 26), judged by
one rule on both sides of the trust boundary — by the agent when the task exits 0, and again by
the state machine at apply (an agent's certificate is not proof that its outputs are sound).

Pure and deterministic: the same text gets the same verdict on every replica. The nesting depth
is bounded before the text is parsed (`MAX_TASK_OUTPUTS_DEPTH`), so the parser's own recursion
limit, which depends on the stack it runs on, never decides anything. NaN and the infinities
are not JSON and are refused.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from raftsched import limits
from raftsched.environment import TASK_OUTPUT_ENV

NO_OUTPUTS = "{}"
"""What a task that left no outputs hands downstream and shows."""
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DEPTH_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


@dataclass(frozen=True, slots=True)
class OutputsAccepted:
    text: str
    """The canonical JSON text of the object (sorted keys, compact, UTF-8 as it is)."""


@dataclass(frozen=True, slots=True)
class OutputsRefused:
    reason: str
    """Why the outputs are refused, naming the rule broken (the attempt fails with it)."""


OutputsOutcome = OutputsAccepted | OutputsRefused


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def judge(text: str) -> OutputsOutcome:
    """One JSON object of at most MAX_TASK_RESULT_OUTPUTS_BYTES UTF-8 bytes, nested at most
    MAX_TASK_OUTPUTS_DEPTH deep; else a refusal saying which rule it broke."""
    where = f"${TASK_OUTPUT_ENV}"
    bound = limits.MAX_TASK_RESULT_OUTPUTS_BYTES
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > bound:
        return OutputsRefused(f"{where} is {size} bytes, over the {bound}-byte bound "
                              "(MAX_TASK_RESULT_OUTPUTS_BYTES)")
    depth = nesting(text)
    if depth > limits.MAX_TASK_OUTPUTS_DEPTH:
        return OutputsRefused(f"{where} nests {depth} deep, over the "
                              f"{limits.MAX_TASK_OUTPUTS_DEPTH} bound (MAX_TASK_OUTPUTS_DEPTH)")
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as error:
        return OutputsRefused(f"{where} is not JSON: {error}")
    if not isinstance(value, dict):
        return OutputsRefused(f"{where} holds a JSON {_json_type(value)}, not an object")
    return OutputsAccepted(canonical(value))


def judge_bytes(data: bytes) -> OutputsOutcome:
    """`judge` of the bytes a task left (UTF-8; over the bound refused before decoding)."""
    bound = limits.MAX_TASK_RESULT_OUTPUTS_BYTES
    if len(data) > bound:
        return OutputsRefused(f"${TASK_OUTPUT_ENV} is over the {bound}-byte bound "
                              "(MAX_TASK_RESULT_OUTPUTS_BYTES)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        return OutputsRefused(f"${TASK_OUTPUT_ENV} is not UTF-8 text: {error.reason} at byte "
                              f"{error.start}")
    return judge(text)


def nesting(text: str) -> int:
    """How deep the arrays and objects of a JSON text nest (brackets inside strings do not
    count); for text that is no JSON at all, some number the parser then refuses anyway."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(itertools.accumulate(_DEPTH_STEP[c] for c in brackets), default=0)


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def inputs_text(upstream: Iterable[tuple[str, str | None]]) -> str:
    """The JSON object a task finds at $RAFTSCHED_INPUTS: each upstream task id -> its outputs
    text ("" stands for none: `{}`; None for an upstream task that did not succeed: `null`),
    built from the kept texts without parsing them."""
    return "{" + ",".join(
        f"{json.dumps(task_id)}:{'null' if outputs is None else outputs or NO_OUTPUTS}"
        for task_id, outputs in upstream) + "}"


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return "number"
