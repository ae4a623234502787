"""A task's outputs: the one JSON object it may leave at `$RAFTSCHED_OUTPUT` (issue 26).

Pure apart from `read_outputs`' one bounded file read: the agent calls it after the task exits
0; a refusal fails the attempt with its `reason`, which says exactly what was wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from raftsched import limits
from raftsched.environment import TASK_OUTPUT_ENV as OUTPUT_ENV


@dataclass(frozen=True, slots=True)
class OutputsAccepted:
    """The task's outputs as canonical JSON text (sorted keys, compact): `"{}"` when the task
    left no file."""

    text: str


@dataclass(frozen=True, slots=True)
class OutputsRefused:
    """Why the attempt fails although the task exited 0."""

    reason: str


OutputsOutcome = OutputsAccepted | OutputsRefused


def parse_outputs(data: bytes) -> OutputsOutcome:
    """Judges the bytes a task left: one JSON object of at most
    MAX_TASK_RESULT_OUTPUTS_BYTES, else a refusal naming the rule broken."""
    bound = limits.MAX_TASK_RESULT_OUTPUTS_BYTES
    if len(data) > bound:
        return OutputsRefused(f"${OUTPUT_ENV} is over the {bound}-byte bound "
                              "(MAX_TASK_RESULT_OUTPUTS_BYTES)")
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        return OutputsRefused(f"${OUTPUT_ENV} is not JSON: {error}")
    if not isinstance(value, dict):
        return OutputsRefused(f"${OUTPUT_ENV} holds a JSON {type(value).__name__}, "
                              "not an object")
    return OutputsAccepted(json.dumps(value, sort_keys=True, separators=(",", ":")))


def read_outputs(path: Path) -> OutputsOutcome:
    """Reads at most one byte past the bound from `path` (a missing file is no outputs)."""
    try:
        with path.open("rb") as handle:
            data = handle.read(limits.MAX_TASK_RESULT_OUTPUTS_BYTES + 1)
    except FileNotFoundError:
        return OutputsAccepted("{}")
    except OSError as error:
        return OutputsRefused(f"${OUTPUT_ENV} could not be read: {error.strerror}")
    return parse_outputs(data)
