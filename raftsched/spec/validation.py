"""Job spec validation: a parsed document -> a `JobSpec`, every problem reported (see
`raftsched.spec.job` for the choices worth knowing)."""

from __future__ import annotations

import difflib
import enum
import math
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final, NamedTuple, TypeGuard, TypeVar

from raftsched import limits
from raftsched.protocol import id_problem  # the one id rule, shared with agents
from raftsched.spec.dag import check_graph
from raftsched.spec.issue import SpecIssue, show
from raftsched.spec.model import (
    _ENV_NAME,
    RESERVED_ENV_PREFIX,
    FailurePolicy,
    JobSpec,
    OnLost,
    PriorityClass,
    RetryPolicy,
    Scoring,
    SpecError,
    TaskSpec,
    Trigger,
)
from raftsched.spec.params import params_field, read_params
from raftsched.spec.templates import for_each_problem, task_template_issues

_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.-]{1,64}")

_JOB_FIELDS: Final = (
    "name", "tenant", "priority", "failure_policy", "idempotency_key", "allow_unschedulable",
    "scoring", "retry_budget", "priority_class", "preemptible", "params", "tasks",
)
_TASK_FIELDS: Final = (
    "id", "command", "env", "cwd", "resources", "requires", "cluster", "depends_on", "retry",
    "timeout_s", "on_lost", "trigger", "checkpoint", "grace_s", "for_each",
)
_RESOURCE_FIELDS: Final = ("cpu", "memory_mb", "gpu", "custom")
_RETRY_FIELDS: Final = (
    "max_attempts", "backoff_s", "multiplier", "backoff_max_s", "jitter",
    "non_retryable_exit_codes",
)
_EXIT_CODE_MIN: Final = -255
_EXIT_CODE_MAX: Final = 255

_T = TypeVar("_T")
_E = TypeVar("_E", bound=enum.StrEnum)


class _Missing:
    """The value of a field that is absent from its mapping."""


_MISSING: Final = _Missing()



def validate_job_doc(doc: object) -> JobSpec:
    """Validate a parsed document (mapping); raises SpecError with every issue found."""
    if not isinstance(doc, Mapping):
        raise SpecError([SpecIssue("", f"a job spec must be a mapping, got {show(doc)}")])
    scope = _Scope(_Sink(), "", None, doc)
    _check_fields(scope, _JOB_FIELDS)
    name = _name(scope)
    tenant = _identifier(scope, "tenant", limits.DEFAULT_TENANT)
    priority = _integer(scope, "priority", limits.PRIORITY_MIN, limits.PRIORITY_MAX,
                        limits.DEFAULT_PRIORITY)
    policy = _choice(scope, "failure_policy", FailurePolicy, FailurePolicy.SKIP_DOWNSTREAM)
    key = _idempotency_key(scope)
    allow_unschedulable = _boolean(scope, "allow_unschedulable", False)
    scoring = _choice(scope, "scoring", Scoring, Scoring.BINPACK)
    retry_budget = _optional_integer(scope, "retry_budget", 0, limits.MAX_JOB_RETRY_BUDGET)
    priority_class = _choice(scope, "priority_class", PriorityClass, PriorityClass.NORMAL)
    preemptible = _boolean(scope, "preemptible", False)
    params, issues = read_params(params_field(doc))
    scope.sink.issues.extend(issues)
    tasks = _tasks(scope, None if issues else dict(params or ()))
    if scope.sink.issues:
        raise SpecError(scope.sink.issues)
    return JobSpec(_req(name), _req(tenant), _req(priority), _req(policy), key, _req(tasks),
                   _req(allow_unschedulable), _req(scoring), retry_budget, _req(priority_class),
                   _req(preemptible), _req(params))


def with_idempotency_key(spec: JobSpec, key: str) -> JobSpec:
    """`spec` with its idempotency key set to `key` (checked like the document's own field),
    without validating the rest again. Raises SpecError naming `idempotency_key`."""
    scope = _Scope(_Sink(), "", None, {"idempotency_key": key})
    checked = _idempotency_key(scope)
    if scope.sink.issues:
        raise SpecError(scope.sink.issues)
    return replace(spec, idempotency_key=checked)


# --- validation plumbing --------------------------------------------------------------------------


class _Sink:
    """Collects issues in document order."""

    __slots__ = ("issues",)

    def __init__(self) -> None:
        self.issues: list[SpecIssue] = []


class _Scope:
    """One mapping of the document: its path, the task it belongs to and where issues go."""

    __slots__ = ("mapping", "prefix", "sink", "task")

    def __init__(
        self, sink: _Sink, prefix: str, task: str | None, mapping: Mapping[Any, Any]
    ) -> None:
        self.sink = sink
        self.prefix = prefix
        self.task = task
        self.mapping = mapping

    def at(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def get(self, key: str) -> object:
        return self.mapping.get(key, _MISSING)

    def fail(self, key: str, message: str) -> None:
        self.fail_at(self.at(key), message)

    def fail_at(self, path: str, message: str) -> None:
        self.sink.issues.append(SpecIssue(path, message, self.task))

    def child(self, key: str) -> _Scope | None:
        """Scope of the nested mapping at `key` (empty when absent); None if it is no mapping."""
        raw = self.get(key)
        if raw is _MISSING:
            raw = {}
        if not isinstance(raw, Mapping):
            self.fail(key, f"must be a mapping, got {show(raw)}")
            return None
        return _Scope(self.sink, self.at(key), self.task, raw)


def _req(value: _T | None) -> _T:
    """A value whose reader reported no issue; called only when the whole spec is clean."""
    assert value is not None, "a reader returned None without reporting an issue"
    return value


def _check_fields(scope: _Scope, allowed: tuple[str, ...]) -> None:
    for key in scope.mapping:
        if key in allowed:
            continue
        if not isinstance(key, str):
            scope.fail_at(scope.prefix, f"field names must be strings, got {show(key)}")
        else:
            path_key = key if _PLAIN_KEY.fullmatch(key) else show(key)
            scope.fail(path_key, f"unknown field {show(key)}{_suggest(key, allowed)}")


def _suggest(key: str, allowed: tuple[str, ...]) -> str:
    if len(key) > 64:
        return ""
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _is_number(value: object) -> TypeGuard[int | float]:
    """An int or a finite float; bools are not numbers here."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return not isinstance(value, float) or math.isfinite(value)


def _is_integer(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _fmt(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else repr(float(number))


def _text_problem(value: str) -> str | None:
    """Why `value` cannot be passed to a process (argv, env, cwd), or None."""
    if "\x00" in value:
        return f"must not contain NUL characters, got {show(value)}"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return f"must be valid Unicode text, got {show(value)}"
    return None


# --- typed field readers: each reports its own issues and returns None on error -----------------


def _choice(scope: _Scope, key: str, choices: type[_E], default: _E) -> _E | None:
    """The enum member whose value the field holds (`default` when absent)."""
    value = scope.get(key)
    if value is _MISSING:
        return default
    if isinstance(value, str):
        for choice in choices:
            if choice.value == value:
                return choice
    names = ", ".join(repr(choice.value) for choice in choices)
    scope.fail(key, f"must be one of {names}, got {show(value)}")
    return None


def _identifier(scope: _Scope, key: str, default: str | None) -> str | None:
    value = scope.get(key)
    if value is _MISSING or (value is None and default is None):
        return default
    problem = id_problem(value)
    if problem is not None:
        scope.fail(key, problem)
        return None
    assert isinstance(value, str)
    return value


def _integer(scope: _Scope, key: str, low: int, high: int, default: int) -> int | None:
    value = scope.get(key)
    if value is _MISSING:
        return default
    if _is_integer(value) and low <= value <= high:
        return value
    scope.fail(key, f"must be an integer in {low}..{high}, got {show(value)}")
    return None


def _optional_integer(scope: _Scope, key: str, low: int, high: int) -> int | None:
    """An integer in low..high, or None when absent or null (problems are reported)."""
    value = scope.get(key)
    if value is _MISSING or value is None:
        return None
    if _is_integer(value) and low <= value <= high:
        return value
    scope.fail(key, f"must be an integer in {low}..{high} or null, got {show(value)}")
    return None


def _boolean(scope: _Scope, key: str, default: bool) -> bool | None:
    value = scope.get(key)
    if value is _MISSING:
        return default
    if isinstance(value, bool):
        return value
    scope.fail(key, f"must be true or false, got {show(value)}")
    return None


def _number(
    scope: _Scope, key: str, default: float, low: float, high: float, *, above_low: bool = False
) -> float | None:
    """A number in [low, high] (or (low, high] with above_low), as given (int or float)."""
    value = scope.get(key)
    if value is _MISSING:
        return default
    if not _is_number(value):
        scope.fail(key, f"must be a number {'>' if above_low else '>='} {_fmt(low)}, "
                        f"got {show(value)}")
        return None
    if value < low or (above_low and value == low):
        scope.fail(key, f"must be a number {'>' if above_low else '>='} {_fmt(low)}, "
                        f"got {show(value)}")
        return None
    if value > high:
        scope.fail(key, f"must be at most {_fmt(high)}, got {show(value)}")
        return None
    return value


def _milliseconds(scope: _Scope, key: str, seconds: float | None) -> int | None:
    """round(seconds * 1000); an amount > 0 that rounds to 0 ms is refused."""
    if seconds is None:
        return None
    milli = round(seconds * 1000)
    if milli == 0 and seconds > 0:
        scope.fail(key, f"must be at least 0.001, got {show(seconds)}")
        return None
    return milli


def _list(scope: _Scope, key: str, what: str, most: int) -> list[Any] | tuple[Any, ...] | None:
    """The list at `key` ([] when absent) if it has at most `most` items."""
    value = scope.get(key)
    if value is _MISSING:
        return []
    if not isinstance(value, list | tuple):
        scope.fail(key, f"must be a list of {what}, got {show(value)}")
        return None
    if len(value) > most:
        scope.fail(key, f"must have at most {most} items, got {len(value)}")
        return None
    return value


# --- job fields -----------------------------------------------------------------------------------


def _name(scope: _Scope) -> str | None:
    value = scope.get("name")
    if value is _MISSING:
        scope.fail("name", "missing required field")
    elif not isinstance(value, str) or not value:
        scope.fail("name", f"must be a non-empty string, got {show(value)}")
    elif len(value) > limits.MAX_NAME_CHARS:
        scope.fail("name", f"must be at most {limits.MAX_NAME_CHARS} characters, got {len(value)}")
    elif not value.isprintable():
        scope.fail("name", f"must be printable (no control characters), got {show(value)}")
    else:
        return value
    return None


def _idempotency_key(scope: _Scope) -> str | None:
    value = scope.get("idempotency_key")
    most = limits.MAX_IDEMPOTENCY_KEY_CHARS
    if value is _MISSING or value is None:
        return None
    if not isinstance(value, str) or not value:
        scope.fail("idempotency_key", f"must be a non-empty string or null, got {show(value)}")
    elif len(value) > most:
        scope.fail("idempotency_key", f"must be at most {most} characters, got {len(value)}")
    elif not value.isprintable():
        scope.fail("idempotency_key", f"must be printable, got {show(value)}")
    else:
        return value
    return None


class _GraphNode(NamedTuple):
    """What the graph check needs of a task, even a broken one."""

    graph_id: str
    deps: tuple[str, ...]
    spec: TaskSpec | None


def _tasks(scope: _Scope, params: dict[str, str] | None) -> tuple[TaskSpec, ...] | None:
    """The job's tasks; every problem of each, its templates' too (`params`: the job's, or
    None when they are invalid: then no template is judged by its param names)."""
    raw = scope.get("tasks")
    if raw is _MISSING:
        scope.fail("tasks", "missing required field")
        return None
    if not isinstance(raw, list | tuple) or not raw:
        scope.fail("tasks", f"must be a non-empty list of tasks, got {show(raw)}")
        return None
    if len(raw) > limits.MAX_TASKS_PER_JOB:
        scope.fail("tasks", f"must have at most {limits.MAX_TASKS_PER_JOB} tasks, got {len(raw)}")
        return None
    nodes = [_task(scope.sink, index, item) for index, item in enumerate(raw)]
    graph_issues = check_graph([n.graph_id for n in nodes], [n.deps for n in nodes])
    scope.sink.issues.extend(_without_placeholders(graph_issues))
    for index, node in enumerate(nodes):
        if node.spec is not None:
            scope.sink.issues += task_template_issues(index, node.spec, params)
    specs = tuple(node.spec for node in nodes if node.spec is not None)
    return specs if len(specs) == len(nodes) else None


def _placeholder(index: int) -> str:
    """Graph id of a task whose id is invalid: outside the id charset, so nothing matches it."""
    return f"\x00{index}"


def _without_placeholders(issues: list[SpecIssue]) -> list[SpecIssue]:
    return [
        replace(issue, task=None) if issue.task and issue.task.startswith("\x00") else issue
        for issue in issues
    ]


# --- task fields ----------------------------------------------------------------------------------


def _task(sink: _Sink, index: int, raw: object) -> _GraphNode:
    prefix = f"tasks[{index}]"
    if not isinstance(raw, Mapping):
        sink.issues.append(SpecIssue(prefix, f"must be a mapping, got {show(raw)}"))
        return _GraphNode(_placeholder(index), (), None)
    first_issue = len(sink.issues)
    task_id = _task_id(_Scope(sink, prefix, None, raw))
    scope = _Scope(sink, prefix, task_id, raw)
    _check_fields(scope, _TASK_FIELDS)
    deps = _depends_on(scope)
    spec = _task_spec(scope, task_id, deps)
    clean = len(sink.issues) == first_issue
    graph_id = task_id if task_id is not None else _placeholder(index)
    return _GraphNode(graph_id, deps, spec if clean else None)


def _task_id(scope: _Scope) -> str | None:
    value = scope.get("id")
    problem = "missing required field" if value is _MISSING else id_problem(value)
    if problem is not None:
        scope.fail("id", problem)
        return None
    assert isinstance(value, str)
    return value


def _task_spec(scope: _Scope, task_id: str | None, deps: tuple[str, ...]) -> TaskSpec | None:
    """Read the remaining fields; the TaskSpec is returned only if nothing was wrong."""
    before = len(scope.sink.issues)
    command = _command(scope)
    env = _env(scope)
    cwd = _cwd(scope)
    cpu_milli, memory_mb, gpu = _resources(scope)
    custom = _custom_resources(scope)
    requires = _requires(scope)
    cluster = _identifier(scope, "cluster", None)
    retry = _retry(scope)
    timeout_ms = _milliseconds(scope, "timeout_s", _timeout_s(scope))
    on_lost = _choice(scope, "on_lost", OnLost, OnLost.REPLACE)
    trigger = _choice(scope, "trigger", Trigger, Trigger.ALL_SUCCESS)
    checkpoint = _boolean(scope, "checkpoint", False)
    grace_ms = _milliseconds(scope, "grace_s", _grace_s(scope))
    for_each = _for_each(scope, deps)
    if len(scope.sink.issues) > before or task_id is None:
        return None
    return TaskSpec(
        task_id, _req(command), _req(env), cwd, _req(cpu_milli), _req(memory_mb), _req(gpu),
        _req(requires), cluster, deps, _req(retry), timeout_ms, _req(on_lost), _req(trigger),
        _req(checkpoint), grace_ms, _req(custom), for_each,
    )


def _for_each(scope: _Scope, deps: tuple[str, ...]) -> str | None:
    """`for_each`: exactly one `{{ tasks.X.outputs.KEY... }}`, X upstream of the task."""
    value = scope.get("for_each")
    if value is _MISSING or value is None:
        return None
    problem = for_each_problem(value, deps)
    if problem:
        scope.fail("for_each", problem)
        return None
    assert isinstance(value, str)
    return value


def _command(scope: _Scope) -> tuple[str, ...] | None:
    value = scope.get("command")
    if value is _MISSING:
        scope.fail("command", "missing required field")
        return None
    if not isinstance(value, list | tuple) or not value:
        hint = " (for a shell line use [\"sh\", \"-c\", ...])" if isinstance(value, str) else ""
        scope.fail("command", f"must be a non-empty list of strings, got {show(value)}{hint}")
        return None
    if len(value) > limits.MAX_COMMAND_ARGS:
        scope.fail("command", f"must have at most {limits.MAX_COMMAND_ARGS} arguments, "
                              f"got {len(value)}")
        return None
    ok = _strings(scope, "command", value)
    if ok and value[0] == "":
        scope.fail("command[0]", "must not be empty (it names the program to run)")
        return None
    total = sum(len(arg.encode("utf-8")) for arg in value) if ok else 0
    if total > limits.MAX_COMMAND_BYTES:
        scope.fail("command", f"must total at most {limits.MAX_COMMAND_BYTES} bytes (UTF-8), "
                              f"got {total}")
        return None
    return tuple(value) if ok else None


def _strings(scope: _Scope, key: str, values: list[Any] | tuple[Any, ...]) -> bool:
    """Report every item that is not a string fit for a process; True when all are fine."""
    ok = True
    for k, item in enumerate(values):
        if isinstance(item, str):
            problem = _text_problem(item)
        else:
            problem = f"must be a string, got {show(item)}"
        if problem is not None:
            scope.fail(f"{key}[{k}]", problem)
            ok = False
    return ok


def _env(scope: _Scope) -> tuple[tuple[str, str], ...] | None:
    value = scope.get("env")
    if value is _MISSING:
        return ()
    if not isinstance(value, Mapping):
        scope.fail("env", f"must be a mapping of NAME: value, got {show(value)}")
        return None
    if len(value) > limits.MAX_ENV_VARS:
        scope.fail("env", f"must have at most {limits.MAX_ENV_VARS} variables, got {len(value)}")
        return None
    pairs = [(name, text) for name, text in value.items() if _env_pair_ok(scope, name, text)]
    if len(pairs) < len(value):
        return None
    total = sum(len(name) + len(text.encode("utf-8")) for name, text in pairs)
    if total > limits.MAX_ENV_BYTES:
        scope.fail("env", f"names and values must total at most {limits.MAX_ENV_BYTES} bytes "
                          f"(UTF-8), got {total}")
        return None
    return tuple(sorted(pairs))


def _env_pair_ok(scope: _Scope, name: object, text: object) -> bool:
    if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
        scope.fail("env", f"variable names must match [A-Za-z_][A-Za-z0-9_]*, got {show(name)}")
        return False
    if name.startswith(RESERVED_ENV_PREFIX):
        scope.fail("env", f"names starting with {RESERVED_ENV_PREFIX} are reserved, got {name!r}")
        return False
    if not isinstance(text, str):
        hint = " (quote it in YAML)" if isinstance(text, int | float) else ""
        scope.fail(f"env.{name}", f"must be a string, got {show(text)}{hint}")
        return False
    problem = _text_problem(text)
    if problem is not None:
        scope.fail(f"env.{name}", problem)
        return False
    return True


def _cwd(scope: _Scope) -> str | None:
    value = scope.get("cwd")
    if value is _MISSING or value is None:
        return None
    if not isinstance(value, str) or not value.startswith("/"):
        scope.fail("cwd", f"must be an absolute path (starting with '/'), got {show(value)}")
    elif len(value) > limits.MAX_CWD_CHARS:
        scope.fail("cwd", f"must be at most {limits.MAX_CWD_CHARS} characters, got {len(value)}")
    elif (problem := _text_problem(value)) is not None:
        scope.fail("cwd", problem)
    else:
        return value
    return None


def _resources(scope: _Scope) -> tuple[int | None, int | None, int | None]:
    if "resources" not in scope.mapping:  # fast path for big jobs
        return round(limits.DEFAULT_CPU * 1000), limits.DEFAULT_MEMORY_MB, limits.DEFAULT_GPU
    sub = scope.child("resources")
    if sub is None:
        return None, None, None
    _check_fields(sub, _RESOURCE_FIELDS)
    cpu = _number(sub, "cpu", limits.DEFAULT_CPU, 0, limits.MAX_CPU_MILLI / 1000, above_low=True)
    cpu_milli = _milliseconds(sub, "cpu", cpu)
    memory_mb = _integer(sub, "memory_mb", 0, limits.MAX_MEMORY_MB, limits.DEFAULT_MEMORY_MB)
    gpu = _integer(sub, "gpu", 0, limits.MAX_GPU, limits.DEFAULT_GPU)
    return cpu_milli, memory_mb, gpu


def _custom_resources(scope: _Scope) -> tuple[tuple[str, int], ...] | None:
    """`resources.custom`: {NAME: COUNT}, names as ids, counts 1..MAX_CUSTOM_RESOURCE_COUNT."""
    resources = scope.mapping.get("resources")
    if not isinstance(resources, Mapping) or "custom" not in resources:
        return ()
    sub = scope.child("resources")
    assert sub is not None
    value = sub.get("custom")
    if not isinstance(value, Mapping):
        sub.fail("custom", f"must be a mapping of resource name to count, got {show(value)}")
        return None
    if len(value) > limits.MAX_CUSTOM_RESOURCES_PER_TASK:
        sub.fail("custom", f"must name at most {limits.MAX_CUSTOM_RESOURCES_PER_TASK} "
                           f"resources, got {len(value)}")
        return None
    custom = sub.child("custom")
    assert custom is not None
    found: list[tuple[str, int]] = []
    ok = True
    for name, count in value.items():
        problem = id_problem(name)
        if problem is not None:
            custom.fail_at(custom.prefix, f"resource name {problem}")
            ok = False
        elif not _is_integer(count) or not 1 <= count <= limits.MAX_CUSTOM_RESOURCE_COUNT:
            custom.fail(name, f"must be an integer in 1..{limits.MAX_CUSTOM_RESOURCE_COUNT} "
                              f"(leave the resource out for none), got {show(count)}")
            ok = False
        else:
            found.append((name, count))
    return tuple(sorted(found)) if ok else None


def _requires(scope: _Scope) -> tuple[str, ...] | None:
    values = _list(scope, "requires", "capability names", limits.MAX_REQUIRES_PER_TASK)
    if values is None:
        return None
    ok = True
    for k, item in enumerate(values):
        problem = id_problem(item)
        if problem is not None:
            scope.fail(f"requires[{k}]", problem)
            ok = False
    return tuple(sorted(set(values))) if ok else None


def _depends_on(scope: _Scope) -> tuple[str, ...]:
    """The well-formed dependencies, in order (what the graph check sees); issues for the rest."""
    values = _list(scope, "depends_on", "task ids", limits.MAX_DEPENDENCIES_PER_TASK)
    if values is None:
        return ()
    first_at: dict[str, int] = {}
    deps: list[str] = []
    for k, item in enumerate(values):
        problem = id_problem(item)
        if problem is None and item in first_at:
            problem = f"duplicate dependency {item!r} (also depends_on[{first_at[item]}])"
        if problem is not None:
            scope.fail(f"depends_on[{k}]", problem)
            continue
        first_at[item] = k
        deps.append(item)
    return tuple(deps)


def _grace_s(scope: _Scope) -> float | None:
    """None when absent or null (the agent's default)."""
    if scope.get("grace_s") in (_MISSING, None):
        return None
    return _number(scope, "grace_s", 0.0, 0, limits.MAX_GRACE_S, above_low=True)


def _timeout_s(scope: _Scope) -> float | None:
    """None when absent or null (no timeout)."""
    if scope.get("timeout_s") in (_MISSING, None):
        return None
    return _number(scope, "timeout_s", 0.0, 0, limits.MAX_TIMEOUT_S, above_low=True)


def _retry(scope: _Scope) -> RetryPolicy | None:
    if "retry" not in scope.mapping:  # fast path for big jobs
        return _default_retry()
    sub = scope.child("retry")
    if sub is None:
        return None
    _check_fields(sub, _RETRY_FIELDS)
    before = len(sub.sink.issues)
    attempts = _integer(sub, "max_attempts", 1, limits.MAX_ATTEMPTS_PER_TASK,
                        limits.DEFAULT_MAX_ATTEMPTS)
    backoff_s = _number(sub, "backoff_s", limits.DEFAULT_BACKOFF_S, 0, limits.MAX_BACKOFF_S)
    multiplier = _number(sub, "multiplier", limits.DEFAULT_BACKOFF_MULTIPLIER, 1.0,
                         limits.MAX_BACKOFF_MULTIPLIER)
    backoff_max_s = _backoff_max_s(sub, backoff_s)
    jitter = _number(sub, "jitter", limits.DEFAULT_JITTER, 0.0, 1.0)
    codes = _exit_codes(sub)
    if len(sub.sink.issues) > before:
        return None
    return RetryPolicy(
        _req(attempts), round(_req(backoff_s) * 1000), _float(_req(multiplier)),
        round(_req(backoff_max_s) * 1000), _float(_req(jitter)), _req(codes),
    )


def _default_retry() -> RetryPolicy:
    return RetryPolicy(
        limits.DEFAULT_MAX_ATTEMPTS, round(limits.DEFAULT_BACKOFF_S * 1000),
        _float(limits.DEFAULT_BACKOFF_MULTIPLIER),
        round(max(limits.DEFAULT_BACKOFF_MAX_S, limits.DEFAULT_BACKOFF_S) * 1000),
        _float(limits.DEFAULT_JITTER), (),
    )


def _float(value: float) -> float:
    return float(value) + 0.0  # + 0.0 turns -0.0 into 0.0, so equal specs have equal digests


def _backoff_max_s(sub: _Scope, backoff_s: float | None) -> float | None:
    floor = backoff_s if backoff_s is not None else 0.0
    default = max(limits.DEFAULT_BACKOFF_MAX_S, floor)
    value = _number(sub, "backoff_max_s", default, 0, limits.MAX_BACKOFF_S)
    if value is not None and backoff_s is not None and value < backoff_s:
        sub.fail("backoff_max_s", f"must be >= backoff_s ({backoff_s}), got {value}")
        return None
    return value


def _exit_codes(sub: _Scope) -> tuple[int, ...] | None:
    most = limits.MAX_NON_RETRYABLE_EXIT_CODES
    values = _list(sub, "non_retryable_exit_codes", "exit codes", most)
    if values is None:
        return None
    ok = True
    for k, item in enumerate(values):
        if not _is_integer(item) or not _EXIT_CODE_MIN <= item <= _EXIT_CODE_MAX:
            message = f"must be an integer in {_EXIT_CODE_MIN}..{_EXIT_CODE_MAX}, got {show(item)}"
            sub.fail(f"non_retryable_exit_codes[{k}]", message)
            ok = False
    return tuple(sorted(set(values))) if ok else None
