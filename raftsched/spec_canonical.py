"""Fast acceptance of job specs already in canonical form (`JobSpec.to_doc()`).

Every JOB_SUBMIT in the log carries the canonical document the leader validated; each replica
re-validates it at apply, on the Raft tick thread, so it must be cheap. `validate_canonical_doc`
checks the canonical shape exactly (every key, in order, with its exact type) and every bound in
one tight pass per task, then the graph. Anything that is not exactly canonical — or is invalid —
falls back to the full `spec.validate_job_doc`, which then names every issue. So this module can
only make acceptance faster, never different: for every document both return equal specs or both
refuse (a property test holds it to that).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from raftsched import limits
from raftsched.dag import check_graph
from raftsched.spec import (
    _ENV_NAME,
    _ID,
    FAILURE_POLICIES,
    ON_LOST_CHOICES,
    RESERVED_ENV_PREFIX,
    TRIGGERS,
    JobSpec,
    RetryPolicy,
    TaskSpec,
    validate_job_doc,
)

_JOB_KEYS = ["name", "tenant", "priority", "failure_policy", "idempotency_key", "tasks"]
_TASK_KEYS = ["id", "command", "env", "cwd", "resources", "requires", "cluster", "depends_on",
              "retry", "on_lost", "trigger"]
_TASK_KEYS_TIMEOUT = [*_TASK_KEYS[:9], "timeout_s", *_TASK_KEYS[9:]]
_RESOURCE_KEYS = ["cpu", "memory_mb", "gpu"]
_RETRY_KEYS = ["max_attempts", "backoff_s", "multiplier", "backoff_max_s", "jitter",
               "non_retryable_exit_codes"]
_EXIT_CODE_MIN, _EXIT_CODE_MAX = -255, 255


class _NotCanonical(Exception):
    """Raised inside the fast pass; the caller falls back to the full validator."""


def validate_canonical_doc(doc: object) -> JobSpec:
    """`validate_job_doc(doc)`, fast when `doc` is canonical. Raises SpecError like it."""
    try:
        return _accept(doc)
    except (_NotCanonical, TypeError, ValueError, KeyError, AttributeError, OverflowError):
        return validate_job_doc(doc)


def _need(condition: bool) -> None:
    if not condition:
        raise _NotCanonical


def _is_id(value: Any) -> bool:
    return (type(value) is str and len(value) <= limits.MAX_ID_CHARS
            and _ID.fullmatch(value) is not None)


def _text_ok(value: str) -> bool:
    """No NUL, and encodable as UTF-8 (what the full validator's `_text_problem` checks)."""
    if "\x00" in value:
        return False
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_int(value: Any, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


def _seconds_ms(value: Any, high: float, positive: bool) -> int:
    _need(type(value) is float and math.isfinite(value) and 0 <= value <= high)
    milli: int = round(value * 1000)
    _need(milli >= 1 if positive else True)
    return milli


def _accept(doc: Any) -> JobSpec:
    _need(type(doc) is dict and list(doc) == _JOB_KEYS)
    name, tenant, priority = doc["name"], doc["tenant"], doc["priority"]
    _need(type(name) is str and 0 < len(name) <= limits.MAX_NAME_CHARS and name.isprintable())
    _need(_is_id(tenant) and _is_int(priority, limits.PRIORITY_MIN, limits.PRIORITY_MAX))
    _need(doc["failure_policy"] in FAILURE_POLICIES)
    key = doc["idempotency_key"]
    _need(key is None or (type(key) is str and 0 < len(key) <= limits.MAX_IDEMPOTENCY_KEY_CHARS
                          and key.isprintable()))
    raw_tasks = doc["tasks"]
    _need(type(raw_tasks) is list and 0 < len(raw_tasks) <= limits.MAX_TASKS_PER_JOB)
    policies: dict[tuple[Any, ...], RetryPolicy] = {}
    tasks = tuple(_task(raw, policies) for raw in raw_tasks)
    _need(not check_graph([t.id for t in tasks], [t.depends_on for t in tasks]))
    return JobSpec(name, tenant, priority, doc["failure_policy"], key, tasks)


def _task(raw: Any, policies: dict[tuple[Any, ...], RetryPolicy]) -> TaskSpec:
    _need(type(raw) is dict)
    keys = list(raw)
    _need(keys in (_TASK_KEYS, _TASK_KEYS_TIMEOUT))
    task_id = raw["id"]
    _need(_is_id(task_id))
    cwd, cluster = raw["cwd"], raw["cluster"]
    _need(cwd is None or (type(cwd) is str and cwd.startswith("/")
                          and len(cwd) <= limits.MAX_CWD_CHARS and _text_ok(cwd)))
    _need(cluster is None or _is_id(cluster))
    _need(raw["on_lost"] in ON_LOST_CHOICES and raw["trigger"] in TRIGGERS)
    timeout = raw.get("timeout_s")
    timeout_ms = None if timeout is None else _seconds_ms(timeout, limits.MAX_TIMEOUT_S, True)
    cpu_milli, memory_mb, gpu = _resources(raw["resources"])
    return TaskSpec(
        task_id, _command(raw["command"]), _env(raw["env"]), cwd, cpu_milli, memory_mb, gpu,
        _requires(raw["requires"]), cluster, _depends_on(raw["depends_on"]),
        _retry(raw["retry"], policies), timeout_ms, raw["on_lost"], raw["trigger"],
    )


def _command(value: Any) -> tuple[str, ...]:
    _need(type(value) is list and 0 < len(value) <= limits.MAX_COMMAND_ARGS and value[0] != "")
    chars = 0
    for arg in value:
        _need(type(arg) is str and _text_ok(arg))
        chars += len(arg)
    # Four UTF-8 bytes per character at most: only long commands need an exact count.
    _need(chars * 4 <= limits.MAX_COMMAND_BYTES)
    return tuple(value)


def _env(value: Any) -> tuple[tuple[str, str], ...]:
    _need(type(value) is dict and len(value) <= limits.MAX_ENV_VARS)
    if not value:
        return ()
    chars = 0
    for name, text in value.items():
        _need(type(name) is str and _ENV_NAME.fullmatch(name) is not None
              and not name.startswith(RESERVED_ENV_PREFIX))
        _need(type(text) is str and _text_ok(text))
        chars += len(name) + len(text)
    _need(chars * 4 <= limits.MAX_ENV_BYTES)
    return tuple(sorted(value.items()))


def _resources(value: Any) -> tuple[int, int, int]:
    _need(type(value) is dict and list(value) == _RESOURCE_KEYS)
    cpu_milli = _seconds_ms(value["cpu"], limits.MAX_CPU_MILLI / 1000, True)
    memory_mb, gpu = value["memory_mb"], value["gpu"]
    _need(_is_int(memory_mb, 0, limits.MAX_MEMORY_MB) and _is_int(gpu, 0, limits.MAX_GPU))
    return cpu_milli, memory_mb, gpu


def _sorted_unique(values: tuple[Any, ...]) -> bool:
    return all(a < b for a, b in itertools.pairwise(values))


def _requires(value: Any) -> tuple[str, ...]:
    _need(type(value) is list and len(value) <= limits.MAX_REQUIRES_PER_TASK)
    if not value:
        return ()
    requires = tuple(value)
    _need(all(_is_id(v) for v in requires) and _sorted_unique(requires))
    return requires


def _depends_on(value: Any) -> tuple[str, ...]:
    _need(type(value) is list and len(value) <= limits.MAX_DEPENDENCIES_PER_TASK)
    deps = tuple(value)
    _need(all(_is_id(v) for v in deps) and len(set(deps)) == len(deps))
    return deps


def _retry(value: Any, policies: dict[tuple[Any, ...], RetryPolicy]) -> RetryPolicy:
    """Equal policies are shared (most tasks of a job have the same one): saves memory."""
    _need(type(value) is dict and list(value) == _RETRY_KEYS)
    codes = value["non_retryable_exit_codes"]
    _need(type(codes) is list and len(codes) <= limits.MAX_NON_RETRYABLE_EXIT_CODES)
    codes_key = tuple(codes)
    _need(all(_is_int(c, _EXIT_CODE_MIN, _EXIT_CODE_MAX) for c in codes_key)
          and _sorted_unique(codes_key))
    _need(_is_int(value["max_attempts"], 1, limits.MAX_ATTEMPTS_PER_TASK))
    multiplier, jitter = value["multiplier"], value["jitter"]
    _need(type(multiplier) is float and 1.0 <= multiplier <= limits.MAX_BACKOFF_MULTIPLIER)
    _need(type(jitter) is float and 0.0 <= jitter <= 1.0)
    backoff_ms = _seconds_ms(value["backoff_s"], limits.MAX_BACKOFF_S, False)
    backoff_max_ms = _seconds_ms(value["backoff_max_s"], limits.MAX_BACKOFF_S, False)
    _need(value["backoff_max_s"] >= value["backoff_s"])
    policy = RetryPolicy(value["max_attempts"], backoff_ms, multiplier + 0.0, backoff_max_ms,
                         jitter + 0.0, codes_key)
    return policies.setdefault(_policy_key(policy), policy)


def _policy_key(policy: RetryPolicy) -> tuple[Any, ...]:
    return (policy.max_attempts, policy.backoff_ms, policy.multiplier, policy.backoff_max_ms,
            policy.jitter, policy.non_retryable_exit_codes)
