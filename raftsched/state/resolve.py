"""A task's templates resolved at apply, when its upstream tasks are done (issue 26, item 2).

Pure: the values come from replicated state only (the job's id and params, its schedule's
nominal time, the outputs its upstream tasks' succeeded attempts kept), so every replica
resolves the same command, env and cwd, and the committed assignment carries them. A template
that cannot be resolved (an upstream task whose outputs lack the key) or a result that breaks a
bound the spec's own fields obey fails the task with a reason naming the field.
"""

from __future__ import annotations

from typing import Any

from raftsched import limits
from raftsched.outputs import NO_OUTPUTS, inputs_text
from raftsched.spec.model import TaskSpec
from raftsched.spec.templates import MARK, Context, TemplateError, resolve, task_fields
from raftsched.state.model import T_SUCCEEDED, Job, Resolved, Task
from raftsched.state.schedule_times import rfc3339


def has_templates(spec: TaskSpec) -> bool:
    """Whether a task's command, env values or cwd hold a template (one join per field: it runs
    for every task that becomes runnable)."""
    return (MARK in _SEPARATOR.join(spec.command)
            or (bool(spec.env) and MARK in _SEPARATOR.join(value for _, value in spec.env))
            or (spec.cwd is not None and MARK in spec.cwd))


_SEPARATOR = "\x00"
"""Joins fields for `has_templates` (no field holds it, so no mark spans two fields)."""


def resolve_task(job: Job, task: Task, item: Any = None, index: int = -1,
                 parsed: dict[str, Any] | None = None) -> Resolved | str:
    """The task's command, env and cwd with their templates resolved, or why they cannot be.
    `parsed`: upstream outputs already parsed, shared by the instances of one expansion."""
    spec = task.spec
    context = Context(
        job_id=job.id, params=dict(job.spec.params), outputs=lambda dep: kept_outputs(job, dep),
        schedule_id=job.schedule_id,
        nominal_time=rfc3339(job.nominal_ms if job.schedule_id else job.submitted_ms),
        item=item, index=index, parsed={} if parsed is None else parsed)
    values: dict[str, str] = {}
    for path, text in task_fields(spec.command, spec.env, spec.cwd):
        value = resolve(text, context)
        if isinstance(value, TemplateError):
            return f"{path}: {value.reason}"
        if "\x00" in value:
            return f"{path}: resolves to text with a NUL character, which no process can take"
        values[path] = value
    command = tuple(values[f"command[{i}]"] for i in range(len(spec.command)))
    env = tuple((name, values[f"env.{name}"]) for name, _ in spec.env)
    cwd = None if spec.cwd is None else values["cwd"]
    return _bounded(command, env, cwd) or Resolved(command, env, cwd)


def kept_outputs(job: Job, task_id: str) -> str | None:
    """The outputs text an upstream task hands its dependents ("" for none), or None when it
    did not succeed. An expanded `for_each` task hands the list of its instances' outputs."""
    index = job.index_of.get(task_id)
    if index is None:
        return None
    upstream = job.tasks[index]
    if upstream.state != T_SUCCEEDED:
        return None
    if upstream.instances is not None:
        return instance_outputs(job, upstream)
    current = upstream.current
    return None if current is None else current.outputs or ""


def instance_outputs(job: Job, task: Task) -> str | None:
    """An expanded task's outputs as its dependents see them: the list of its instances'
    outputs in item order (None unless every instance succeeded)."""
    assert task.instances is not None
    texts = []
    for index in task.instances:
        instance = job.tasks[index]
        current = instance.current
        if instance.state != T_SUCCEEDED or current is None:
            return None
        texts.append(current.outputs or NO_OUTPUTS)
    return "[" + ",".join(texts) + "]"


def _bounded(command: tuple[str, ...], env: tuple[tuple[str, str], ...],
             cwd: str | None) -> str:
    """Why resolved values break a bound the spec's fields obey ("" when they do not)."""
    if not command[0]:
        return "command[0]: resolves to the empty string"
    size = sum(len(argument.encode()) for argument in command)
    if size > limits.MAX_COMMAND_BYTES:
        return (f"command: resolves to {size} bytes, over the {limits.MAX_COMMAND_BYTES}-byte "
                "bound (MAX_COMMAND_BYTES)")
    size = sum(len(name.encode()) + len(value.encode()) for name, value in env)
    if size > limits.MAX_ENV_BYTES:
        return (f"env: resolves to {size} bytes, over the {limits.MAX_ENV_BYTES}-byte bound "
                "(MAX_ENV_BYTES)")
    if cwd is not None and (not cwd.startswith("/") or len(cwd) > limits.MAX_CWD_CHARS):
        return (f"cwd: resolves to {cwd[:80]!r}, not an absolute path of at most "
                f"{limits.MAX_CWD_CHARS} characters")
    return ""


def task_inputs(job: Job, task: Task) -> str:
    """The JSON object a task finds at $RAFTSCHED_INPUTS: each upstream task id -> the outputs
    it handed down (`{}` for none; a list for an expanded `for_each` task; null for one that did
    not succeed, under `trigger: all_done`); "" for a task without upstream tasks. Built from
    committed state that no longer changes (an upstream task is terminal before its dependents
    start), so every leader sends the same text for an attempt."""
    if not task.spec.depends_on:
        return ""
    return inputs_text((dep, kept_outputs(job, dep)) for dep in task.spec.depends_on)
