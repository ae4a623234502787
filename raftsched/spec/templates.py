"""Templates in a task's command, env and working directory (issue 26, not yet wired in).

`{{ tasks.X.outputs.a.b }}` (a key path into upstream task X's outputs), `{{ params.name }}`
and `{{ job.id }}`; anything else between `{{` and `}}`, or a lone `{{`, is malformed. Pure:
parsing here, checking against the job at submit and resolving on the leader come later.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from raftsched.protocol import id_problem

_PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}")


@dataclass(frozen=True, slots=True)
class OutputRef:
    """`{{ tasks.TASK.outputs.KEY... }}`: the value at `path` in TASK's outputs."""

    task: str
    path: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ParamRef:
    """`{{ params.NAME }}`."""

    name: str


@dataclass(frozen=True, slots=True)
class JobIdRef:
    """`{{ job.id }}`."""


Ref = OutputRef | ParamRef | JobIdRef


@dataclass(frozen=True, slots=True)
class TemplateError:
    """Why a template is malformed (the caller names the task and field)."""

    reason: str


def parse_reference(inner: str) -> Ref | TemplateError:
    """One placeholder's text (between the braces) as a reference, or why it is none."""
    parts = inner.strip().split(".")
    if parts == ["job", "id"]:
        return JobIdRef()
    if len(parts) == 2 and parts[0] == "params":
        problem = id_problem(parts[1])
        return TemplateError(f"param name {problem}") if problem else ParamRef(parts[1])
    if len(parts) >= 4 and parts[0] == "tasks" and parts[2] == "outputs":
        problem = id_problem(parts[1])
        if problem:
            return TemplateError(f"task id {problem}")
        if any(not key for key in parts[3:]):
            return TemplateError(f"empty output key in {{{{{inner}}}}}")
        return OutputRef(parts[1], tuple(parts[3:]))
    return TemplateError(f"{{{{{inner}}}}} is none of {{{{ tasks.X.outputs.KEY }}}}, "
                         "{{ params.NAME }}, {{ job.id }}")


def references(text: str) -> list[Ref] | TemplateError:
    """Every reference in `text` in order, or the first malformed one (an unclosed `{{`)."""
    found: list[Ref] = []
    for match in _PLACEHOLDER.finditer(text):
        ref = parse_reference(match.group(1))
        if isinstance(ref, TemplateError):
            return ref
        found.append(ref)
    if "{{" in _PLACEHOLDER.sub("", text):
        return TemplateError("a '{{' without its closing '}}'")
    return found
