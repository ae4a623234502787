"""Templates in a task's command, env values and working directory (issue 26, item 2).

    {{ tasks.X.outputs.KEY[.KEY...] }}   the value at that key path in upstream task X's outputs
                                         (a key that is a number indexes a list)
    {{ params.NAME }}                    the job's parameter
    {{ job.id }}                         the job's id
    {{ schedule.id }}                    the schedule that started the job ("" for other jobs)
    {{ schedule.nominal_time }}          its nominal time, RFC 3339 UTC (for other jobs: when
                                         the job was submitted)
    {{ item[.KEY...] }}, {{ index }}     a `for_each` instance's item and its 0-based position

A value renders as itself when it is a string, else as compact JSON (`3`, `true`, `null`,
`["a","b"]`). `{{` can be written literally as `{{ '{{' }}`; nothing else between the braces is a
template, and a lone `{{` is malformed.

Checked at submit (`template_issues`: a malformed template, a task that is not upstream, an
unknown parameter, an item outside a `for_each` task — each naming task and field) and resolved
at apply, when the task's upstream tasks are done (`resolve`): pure and deterministic, so every
replica resolves the same values, which the committed assignment then carries.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from raftsched import limits
from raftsched.protocol import id_problem, show
from raftsched.spec.issue import SpecIssue
from raftsched.spec.model import JobSpec, SpecError, TaskSpec
from raftsched.spec.params import name_problem

_PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_LITERAL_BRACES = "'{{'"
MARK = "{{"
"""A field holds a template only if it contains this."""
FOR_EACH_FORM = "{{ tasks.X.outputs.KEY }}"
FORMS = ("{{ tasks.X.outputs.KEY }}, {{ params.NAME }}, {{ job.id }}, {{ schedule.id }}, "
         "{{ schedule.nominal_time }}, {{ item }}, {{ index }}")


@dataclass(frozen=True, slots=True)
class OutputRef:
    """`{{ tasks.TASK.outputs.KEY... }}`: the value at `path` in TASK's outputs."""

    task: str
    path: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ParamRef:
    name: str


@dataclass(frozen=True, slots=True)
class JobIdRef:
    pass


@dataclass(frozen=True, slots=True)
class ScheduleRef:
    field: str
    """"id" or "nominal_time"."""


@dataclass(frozen=True, slots=True)
class ItemRef:
    path: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class IndexRef:
    pass


@dataclass(frozen=True, slots=True)
class Literal:
    """`{{ '{{' }}`: two opening braces, as text."""


Ref = OutputRef | ParamRef | JobIdRef | ScheduleRef | ItemRef | IndexRef | Literal


@dataclass(frozen=True, slots=True)
class TemplateError:
    """Why a template is malformed or cannot be resolved (the caller names task and field)."""

    reason: str


def parse_reference(inner: str) -> Ref | TemplateError:
    """One placeholder's text (between the braces) as a reference, or why it is none."""
    text = inner.strip()
    if text == _LITERAL_BRACES:
        return Literal()
    parts = text.split(".")
    head = parts[0]
    if parts == ["job", "id"]:
        return JobIdRef()
    if parts == ["index"]:
        return IndexRef()
    if head == "schedule" and len(parts) == 2 and parts[1] in ("id", "nominal_time"):
        return ScheduleRef(parts[1])
    if head == "params" and len(parts) == 2:
        problem = name_problem(parts[1])
        return TemplateError(problem) if problem else ParamRef(parts[1])
    if head == "item":
        return _path(parts[1:], inner) or ItemRef(tuple(parts[1:]))
    if head == "tasks" and len(parts) >= 4 and parts[2] == "outputs":
        problem = id_problem(parts[1])
        if problem:
            return TemplateError(f"task id {problem}")
        return _path(parts[3:], inner) or OutputRef(parts[1], tuple(parts[3:]))
    return TemplateError(f"{{{{{inner}}}}} is none of {FORMS}")


def _path(keys: list[str], inner: str) -> TemplateError | None:
    if any(not key.strip() or key != key.strip() for key in keys):
        return TemplateError(f"empty or spaced key in {{{{{inner}}}}}")
    return None


def references(text: str) -> list[Ref] | TemplateError:
    """Every reference in `text` in order, or the first malformed one (or an unclosed `{{`)."""
    found: list[Ref] = []
    for match in _PLACEHOLDER.finditer(text):
        ref = parse_reference(match.group(1))
        if isinstance(ref, TemplateError):
            return ref
        found.append(ref)
    if MARK in _PLACEHOLDER.sub("", text):
        return TemplateError("a '{{' without its closing '}}'")
    return found


# --- the fields of a task that may hold templates ---------------------------------------------


def task_fields(command: tuple[str, ...], env: tuple[tuple[str, str], ...],
                cwd: str | None) -> Iterator[tuple[str, str]]:
    """(field path, text) of each field of a task that may hold templates."""
    for position, argument in enumerate(command):
        yield f"command[{position}]", argument
    for name, value in env:
        yield f"env.{name}", value
    if cwd is not None:
        yield "cwd", cwd


def template_issues(prefix: str, task_id: str, fields: Iterator[tuple[str, str]],
                    depends_on: tuple[str, ...], params: Mapping[str, str] | None,
                    mapped: bool) -> list[SpecIssue]:
    """The problems of a task's templates at submit, each naming task and field: malformed, a
    task that is not upstream (outputs come only from `depends_on`), an unknown parameter, an
    item or index outside a `for_each` task."""
    issues: list[SpecIssue] = []
    for path, text in fields:
        if MARK not in text:
            continue
        refs = references(text)
        where = f"{prefix}.{path}"
        if isinstance(refs, TemplateError):
            issues.append(SpecIssue(where, refs.reason, task_id))
            continue
        for ref in refs:
            problem = _ref_problem(ref, depends_on, params, mapped)
            if problem:
                issues.append(SpecIssue(where, problem, task_id))
    return issues


def for_each_problem(value: object, depends_on: tuple[str, ...]) -> str:
    """Why `value` is no `for_each` ("" when it is one): a string holding exactly one
    `{{ tasks.X.outputs.KEY... }}` and nothing else, X one of `depends_on`."""
    if not isinstance(value, str):
        return f"must be a string like {FOR_EACH_FORM}, got {show(value)}"
    if len(value) > limits.MAX_FOR_EACH_CHARS:
        return f"must be at most {limits.MAX_FOR_EACH_CHARS} characters, got {len(value)}"
    match = _PLACEHOLDER.fullmatch(value.strip())
    ref = parse_reference(match.group(1)) if match else None
    if isinstance(ref, TemplateError):
        return ref.reason
    if not isinstance(ref, OutputRef):
        return f"must be exactly one {FOR_EACH_FORM}, got {show(value)}"
    if ref.task not in depends_on:
        return (f"names {ref.task!r}, which is not upstream of this task: add it to "
                "depends_on")
    return ""


def for_each_ref(value: str) -> OutputRef | None:
    """The reference of a `for_each` that `for_each_problem` accepted (None otherwise)."""
    match = _PLACEHOLDER.fullmatch(value.strip())
    ref = parse_reference(match.group(1)) if match else None
    return ref if isinstance(ref, OutputRef) else None


def spec_template_issues(spec: JobSpec) -> list[SpecIssue]:
    """Every template problem of a validated spec's tasks (see `template_issues`)."""
    params = dict(spec.params)
    issues: list[SpecIssue] = []
    for position, task in enumerate(spec.tasks):
        issues += task_template_issues(position, task, params)
    return issues


def task_template_issues(position: int, task: TaskSpec,
                         params: Mapping[str, str] | None) -> list[SpecIssue]:
    """The template problems of the task at `position` (`params` None: the job's params are
    invalid, so no template is judged by their names)."""
    fields = task_fields(task.command, task.env, task.cwd)
    return template_issues(f"tasks[{position}]", task.id, fields, task.depends_on, params,
                           mapped=task.for_each is not None)


def checked_templates(spec: JobSpec) -> JobSpec:
    """`spec`, or SpecError naming each template problem of its tasks."""
    issues = spec_template_issues(spec)
    if issues:
        raise SpecError(issues)
    return spec


def _ref_problem(ref: Ref, depends_on: tuple[str, ...], params: Mapping[str, str] | None,
                 mapped: bool) -> str:
    if isinstance(ref, OutputRef) and ref.task not in depends_on:
        return (f"{{{{ tasks.{ref.task}.outputs... }}}} names {ref.task!r}, which is not "
                "upstream of this task: add it to depends_on")
    if isinstance(ref, ParamRef) and params is not None and ref.name not in params:
        known = ", ".join(sorted(params)) or "none"
        return (f"{{{{ params.{ref.name} }}}}: the job has no param {ref.name!r} "
                f"(its params: {known})")
    if isinstance(ref, ItemRef | IndexRef) and not mapped:
        return "{{ item }} and {{ index }} belong to a task with for_each"
    return ""


# --- resolution at apply ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Context:
    """What templates resolve against: all of it is replicated state."""

    job_id: str
    params: Mapping[str, str]
    outputs: Callable[[str], str | None]
    """An upstream task id -> the outputs text its succeeded attempt kept ("" for none), or None
    when it did not succeed (trigger: all_done)."""
    schedule_id: str = ""
    nominal_time: str = ""
    item: Any = None
    index: int = -1
    parsed: dict[str, Any] = field(default_factory=dict)
    """Upstream outputs already parsed, by task id: one parse per upstream for every field of a
    task, and for every instance of a for_each task when its instances share the dict."""


def resolve(text: str, context: Context) -> str | TemplateError:
    """`text` with every template replaced; a TemplateError saying which reference could not be
    resolved (an upstream task without that key, a malformed template that slipped past submit)."""
    if MARK not in text:
        return text
    pieces: list[str] = []
    last = 0
    for match in _PLACEHOLDER.finditer(text):
        ref = parse_reference(match.group(1))
        if isinstance(ref, TemplateError):
            return ref
        value = _value(ref, context)
        if isinstance(value, TemplateError):
            return value
        pieces += [text[last:match.start()], value]
        last = match.end()
    rest = text[last:]
    if MARK in rest:
        return TemplateError("a '{{' without its closing '}}'")
    return "".join(pieces) + rest


def _value(ref: Ref, context: Context) -> str | TemplateError:
    match ref:
        case Literal():
            return MARK
        case JobIdRef():
            return context.job_id
        case ScheduleRef(field="id"):
            return context.schedule_id
        case ScheduleRef():
            return context.nominal_time
        case ParamRef(name=name):
            if name not in context.params:
                return TemplateError(f"the job has no param {name!r}")
            return context.params[name]
        case IndexRef():
            return str(context.index)
        case ItemRef(path=path):
            return _rendered(lookup(context.item, path, "{{ item }}"))
        case OutputRef(task=task, path=path):
            parsed = context.parsed
            if task not in parsed:
                text = context.outputs(task)
                if text is None:
                    return TemplateError(f"upstream task {task!r} did not succeed: it has no "
                                         "outputs")
                parsed[task] = json.loads(text) if text else {}
            return _rendered(lookup(parsed[task], path, f"the outputs of {task!r}"))
    raise AssertionError(ref)


def _rendered(value: Any) -> str | TemplateError:
    return value if isinstance(value, TemplateError) else render(value)


def lookup(value: Any, path: tuple[str, ...], what: str) -> Any:
    """The value at `path` (keys of objects, positions of lists) in `value`, or a TemplateError
    saying where the path ends."""
    walked: list[str] = []
    for key in path:
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            at = ".".join(walked) or "the top"
            return TemplateError(f"{what} have no key {key!r} at {at}"
                                 f" (found {_kind(value)})")
        walked.append(key)
    return value


def render(value: Any) -> str:
    """A value as text in a command: a string as itself, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        keys = ", ".join(sorted(value)[:8]) or "none"
        return f"an object with keys {keys}"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    return f"a {type(value).__name__}"
