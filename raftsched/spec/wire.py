"""The compact form of a validated job spec that travels in the Raft log and in snapshots.

A JOB_SUBMIT carries the spec the leader validated; every replica decodes it at apply, on the
Raft tick thread, with `decode_trusted` (shape, types, bounds and graph; not the text rules the
leader proved) — so the form must be cheap to decode and to check. The user-facing
document (`JobSpec.to_doc()`) is a map per task with nested maps; the wire form is a list per
task with durations already in milliseconds and the job's distinct retry policies in one table:

    [WIRE_VERSION, name, tenant, priority, failure_policy, idempotency_key, retry_table, tasks,
     allow_unschedulable, scoring, retry_budget, priority_class, preemptible, params]
    retry_table: [[max_attempts, backoff_ms, multiplier, backoff_max_ms, jitter, [codes]], ...]
    task: [id, [argv], [[env_name, value], ...], cwd, cpu_milli, memory_mb, gpu, [requires],
           cluster, [depends_on], retry_index, timeout_ms, on_lost, trigger, checkpoint,
           grace_ms, [[custom_name, count], ...], for_each]
    params: [[name, value], ...]

`validate_wire` checks every field and bound in one tight pass and then the graph. It accepts a
wire form exactly when the full validator accepts the equivalent document (`wire_to_doc`), and
returns an equal spec (a property test holds it to that); anything it is unsure of goes to the
full validator, which names the issues. Equal strings (ids, dependency names, short arguments)
are shared within a job, and equal retry policies are one object: memory per task stays small.
"""

from __future__ import annotations

import enum
import itertools
import math
from collections.abc import Callable
from typing import Any, TypeVar

import msgpack

from raftsched import limits
from raftsched.protocol import id_problem
from raftsched.spec.dag import check_graph
from raftsched.spec.issue import SpecIssue
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
from raftsched.spec.params import name_problem, value_problem
from raftsched.spec.templates import checked_templates, for_each_problem
from raftsched.spec.validation import validate_job_doc

WIRE_VERSION = 4
"""Version 4 appends to a job its params and to a task its for_each (issue 26); a spec with
neither is written as before (version 3, or 2 without custom resources), byte for byte.
Version 3 appends to a task its named custom resources; a spec without any is still written
as version 2 (so the logs and snapshots of such jobs are byte for byte what they were).
Version 2 appended the contention fields: to a job allow_unschedulable, scoring, retry_budget,
priority_class, preemptible; to a task checkpoint, grace_ms. Version 1 (8 job fields, 14 task
fields) is still read, with their defaults: logs written before them replay unchanged."""
_V2 = 2
_V3 = 3
_V1_JOB_FIELDS = 8
_V2_JOB_FIELDS = 13
_JOB_FIELDS = 14
_JOB_FIELDS_OF = {1: _V1_JOB_FIELDS, _V2: _V2_JOB_FIELDS, _V3: _V2_JOB_FIELDS,
                  WIRE_VERSION: _JOB_FIELDS}
_V1_TASK_FIELDS = 14
_V2_TASK_FIELDS = 16
_V3_TASK_FIELDS = 17
_TASK_FIELDS_OF = {1: _V1_TASK_FIELDS, _V2: _V2_TASK_FIELDS, _V3: _V3_TASK_FIELDS,
                   WIRE_VERSION: 18}
_RETRY_FIELDS = 6
_EXIT_CODE_MIN, _EXIT_CODE_MAX = -255, 255
_SHARED_STRING_CHARS = 64
"""Arguments up to this long are shared between the tasks of a job when equal."""
_E = TypeVar("_E", bound=enum.StrEnum)
_FAILURE_POLICIES = {member.value: member for member in FailurePolicy}
_ON_LOST = {member.value: member for member in OnLost}
_TRIGGERS = {member.value: member for member in Trigger}
_SCORINGS = {member.value: member for member in Scoring}
_CLASSES = {member.value: member for member in PriorityClass}
"""Wire value -> enum member (the wire form and snapshots hold the plain strings)."""


# --- JobSpec <-> wire ---------------------------------------------------------------------------


def to_wire(spec: JobSpec) -> list[Any]:
    table: dict[RetryPolicy, int] = {}
    data = bool(spec.params) or any(task.for_each is not None for task in spec.tasks)
    custom = data or any(task.custom for task in spec.tasks)
    fields = _TASK_FIELDS_OF[WIRE_VERSION if data else _V3 if custom else _V2]
    tasks = [_task_to_wire(task, table.setdefault(task.retry, len(table)), fields)
             for task in spec.tasks]
    retries = [
        [r.max_attempts, r.backoff_ms, r.multiplier, r.backoff_max_ms, r.jitter,
         list(r.non_retryable_exit_codes)]
        for r in table
    ]
    wire = [WIRE_VERSION if data else _V3 if custom else _V2, spec.name, spec.tenant,
            spec.priority, spec.failure_policy.value, spec.idempotency_key, retries, tasks,
            spec.allow_unschedulable, spec.scoring.value, spec.retry_budget,
            spec.priority_class.value, spec.preemptible]
    if data:
        wire.append([[name, value] for name, value in spec.params])
    return wire


def _placement_fields(wire: Any) -> tuple[Any, Any, Any, Any, Any]:
    """(allow_unschedulable, scoring, retry_budget, priority_class, preemptible) of a wire
    form: their defaults in version 1."""
    if wire[0] == 1:
        return False, Scoring.BINPACK.value, None, PriorityClass.NORMAL.value, False
    return wire[8], wire[9], wire[10], wire[11], wire[12]


def _params_field(wire: Any) -> Any:
    """A wire form's params: none before version 4."""
    return wire[13] if len(wire) > _V2_JOB_FIELDS else []


def _task_extra(task: Any) -> tuple[Any, Any, Any, Any]:
    """(checkpoint, grace_ms, custom, for_each) of a wire task: their defaults in version 1
    (14 fields), no custom resources in version 2 (16), no for_each before version 4 (18)."""
    if len(task) == _V1_TASK_FIELDS:
        return False, None, (), None
    if len(task) == _V2_TASK_FIELDS:
        return task[14], task[15], (), None
    if len(task) == _V3_TASK_FIELDS:
        return task[14], task[15], task[16], None
    return task[14], task[15], task[16], task[17]


def _task_to_wire(t: TaskSpec, retry_index: int, fields: int) -> list[Any]:
    wire: list[Any] = [
        t.id, list(t.command), [list(pair) for pair in t.env], t.cwd, t.cpu_milli, t.memory_mb,
        t.gpu, list(t.requires), t.cluster, list(t.depends_on), retry_index, t.timeout_ms,
        t.on_lost.value, t.trigger.value, t.checkpoint, t.grace_ms,
    ]
    if fields > _V2_TASK_FIELDS:
        wire.append([[name, count] for name, count in t.custom])
    if fields > _V3_TASK_FIELDS:
        wire.append(t.for_each)
    return wire


def doc_to_wire(doc: object) -> list[Any]:
    """Validate a user document (SpecError if invalid) and give the wire form to propose."""
    return to_wire(validate_job_doc(doc))


def wire_to_doc(wire: Any) -> dict[str, Any]:
    """The user-form document a wire form stands for (raises on a malformed wire form)."""
    version = wire[0]
    if version not in _JOB_FIELDS_OF or len(wire) != _JOB_FIELDS_OF[version]:
        raise ValueError(f"wire version {version!r}")
    _, name, tenant, priority, policy, key, retries, tasks = wire[:_V1_JOB_FIELDS]
    allow_unschedulable, scoring, retry_budget, priority_class, preemptible = \
        _placement_fields(wire)
    task_fields = _TASK_FIELDS_OF[version]
    if any(type(task) is not list or len(task) != task_fields for task in tasks):
        raise ValueError("task fields")
    doc = {
        "name": name, "tenant": tenant, "priority": priority, "failure_policy": policy,
        "idempotency_key": key, "allow_unschedulable": allow_unschedulable, "scoring": scoring,
        "retry_budget": retry_budget, "priority_class": priority_class,
        "preemptible": preemptible, "tasks": [_task_doc(task, retries) for task in tasks],
    }
    params = _params_field(wire)
    if params:
        if type(params) is not list or any(type(p) is not list or len(p) != 2 for p in params):
            raise ValueError("params")
        doc["params"] = {name: value for name, value in params}
    return doc


def _task_doc(task: Any, retries: Any) -> dict[str, Any]:
    (task_id, command, env, cwd, cpu_milli, memory_mb, gpu, requires, cluster, deps,
     retry_index, timeout_ms, on_lost, trigger) = task[:_V1_TASK_FIELDS]
    checkpoint, grace_ms, custom, for_each = _task_extra(task)
    if type(retry_index) is not int or not 0 <= retry_index < len(retries):
        raise ValueError("retry index")
    attempts, backoff_ms, multiplier, backoff_max_ms, jitter, codes = retries[retry_index]
    doc = {
        "id": task_id, "command": command, "env": {name: value for name, value in env},
        "cwd": cwd, "resources": {"cpu": _seconds(cpu_milli), "memory_mb": memory_mb, "gpu": gpu,
                                  **({"custom": _custom_doc(custom)} if custom else {})},
        "requires": requires, "cluster": cluster, "depends_on": deps,
        "retry": {"max_attempts": attempts, "backoff_s": _seconds(backoff_ms),
                  "multiplier": multiplier, "backoff_max_s": _seconds(backoff_max_ms),
                  "jitter": jitter, "non_retryable_exit_codes": codes},
        "timeout_s": None if timeout_ms is None else _seconds(timeout_ms),
        "on_lost": on_lost, "trigger": trigger, "checkpoint": checkpoint,
        "grace_s": None if grace_ms is None else _seconds(grace_ms),
    }
    if len(env) != len(doc["env"]):
        raise ValueError("repeated env name")
    if for_each is not None:
        doc["for_each"] = for_each
    return doc


def _custom_doc(custom: Any) -> Any:
    """[[name, count], ...] -> {name: count}; left as it is when malformed, for the validator
    (which then names the problem)."""
    if type(custom) is list and all(type(pair) is list and len(pair) == 2 for pair in custom):
        doc = {name: count for name, count in custom}
        if len(doc) == len(custom):
            return doc
    raise ValueError("custom resources")


def _seconds(milli: Any) -> Any:
    """ms -> s for the document; a value of the wrong type stays as it is, for the validator."""
    return milli / 1000 if type(milli) is int else milli


# --- the wire form as bytes (SubmitJobRequest.spec_wire) ----------------------------------------


def pack_wire(spec: JobSpec) -> bytes:
    """The msgpack bytes of `to_wire(spec)`: what a client sends instead of the document."""
    packed: bytes = msgpack.packb(to_wire(spec), use_bin_type=True)
    return packed


def decode_wire(data: bytes) -> JobSpec:
    """The JobSpec of wire-form bytes a client sent; SpecError when they are not a valid one,
    with the same issues a document would get (`validate_wire`).

    The bytes are bounded (MAX_SPEC_BYTES) and decoded one retry policy and one task at a time,
    each within what a valid one can hold (`_ItemBudget`), with msgpack's own limits on every
    string and array: a replica decodes them in a thread beside its Raft thread, and a decode
    that built millions of objects in one C call (or freed them in one) would hold the
    interpreter lock past an election timeout. The decoded lists are released the same way."""
    if len(data) > limits.MAX_SPEC_BYTES:
        raise SpecError([SpecIssue("", f"the wire form is {len(data)} bytes; a job spec may be "
                                       f"at most {limits.MAX_SPEC_BYTES} bytes")])
    try:
        wire = _unpack(data)
    except msgpack.OutOfData:
        raise SpecError([SpecIssue("", "malformed wire-form job spec: the bytes end inside "
                                       "the job")]) from None
    except (ValueError, msgpack.UnpackException, _OverBudget) as error:
        raise SpecError([SpecIssue("", f"malformed wire-form job spec: {_problem(error)}")]) \
            from None
    try:
        return validate_wire(wire)
    finally:
        release_wire(wire)


_WIRE_STRING_BYTES = max(limits.MAX_COMMAND_BYTES, limits.MAX_ENV_BYTES, 4 * limits.MAX_CWD_CHARS,
                         4 * limits.MAX_NAME_CHARS, 4 * limits.MAX_IDEMPOTENCY_KEY_CHARS)
"""No string of a valid wire form is longer, in UTF-8 bytes."""
_WIRE_ARRAY_ITEMS = max(limits.MAX_DEPENDENCIES_PER_TASK, limits.MAX_COMMAND_ARGS,
                        limits.MAX_ENV_VARS, limits.MAX_NON_RETRYABLE_EXIT_CODES, _JOB_FIELDS)
"""No array inside a task or a retry policy of a valid wire form is longer. (The job, its
retry table and its task list are read array by array: `_unpack`.)"""
_ITEM_ARRAYS = 6 + limits.MAX_ENV_VARS + limits.MAX_CUSTOM_RESOURCES_PER_TASK
"""Arrays in one task of a valid wire form at most: itself, command, env, requires, depends_on,
custom, and one per env pair and custom pair (a retry policy has 2)."""
_ITEM_ELEMENTS = (_TASK_FIELDS_OF[WIRE_VERSION] + limits.MAX_COMMAND_ARGS
                  + 3 * limits.MAX_ENV_VARS + limits.MAX_REQUIRES_PER_TASK
                  + limits.MAX_DEPENDENCIES_PER_TASK + 3 * limits.MAX_CUSTOM_RESOURCES_PER_TASK)
"""Array elements in one task of a valid wire form at most (a retry policy has fewer)."""


_MSGPACK_BOUNDS = (
    ("max_map_len", "a map (a wire form holds arrays and scalars only)"),
    ("max_bin_len", "a binary value (a wire form holds arrays and scalars only)"),
    ("max_ext_len", "an extension value (a wire form holds arrays and scalars only)"),
    ("max_str_len", f"a string of more than {_WIRE_STRING_BYTES} bytes (no field of a job spec "
                    "is that long)"),
    ("max_array_len", f"an array of more than {_WIRE_ARRAY_ITEMS} items inside a task or retry "
                      "policy (no list of one is that long)"),
)
"""msgpack's refusal (its message names the bound) -> what it means for a wire form."""


def _problem(error: Exception) -> str:
    text = str(error)
    for bound, meaning in _MSGPACK_BOUNDS:
        if bound in text:
            return f"{meaning}: {text}"
    return text or type(error).__name__


class _OverBudget(Exception):
    """A task (or retry policy, or job field) holds more than any valid one can."""


class _ItemBudget:
    """msgpack's list_hook while one item is decoded: counts its arrays and their elements, and
    stops the decode past what a valid task holds. Being Python, each call also lets the
    interpreter switch threads: a decode never runs longer than one array at a time."""

    def __init__(self) -> None:
        self.arrays = 0
        self.elements = 0

    def read(self, unpack: Callable[[], Any]) -> Any:
        self.arrays = self.elements = 0
        return unpack()

    def array(self, values: list[Any]) -> list[Any]:
        self.arrays += 1
        self.elements += len(values)
        if self.arrays > _ITEM_ARRAYS or self.elements > _ITEM_ELEMENTS:
            raise _OverBudget(f"an item holds more than {_ITEM_ARRAYS} arrays or "
                              f"{_ITEM_ELEMENTS} array elements, more than any task can")
        return values


def _unpack(data: bytes) -> list[Any]:
    """The wire form's lists, the job's fields read one by one and its retry table and tasks
    item by item (ValueError, msgpack.UnpackException or _OverBudget when malformed)."""
    budget = _ItemBudget()
    unpacker = msgpack.Unpacker(
        raw=False, max_buffer_size=max(len(data), 1), max_str_len=_WIRE_STRING_BYTES,
        max_bin_len=0, max_ext_len=0, max_map_len=0, max_array_len=_WIRE_ARRAY_ITEMS,
        list_hook=budget.array)
    unpacker.feed(data)
    fields = _array_header(unpacker, "the job", _JOB_FIELDS)
    if fields not in (_V1_JOB_FIELDS, _V2_JOB_FIELDS, _JOB_FIELDS):
        raise ValueError(f"a job is a list of {_V1_JOB_FIELDS}, {_V2_JOB_FIELDS} or "
                         f"{_JOB_FIELDS} fields, "
                         f"got {fields}")
    wire = [budget.read(unpacker.unpack) for _ in range(6)]
    wire.append(_items(unpacker, budget, "the retry table"))
    wire.append(_items(unpacker, budget, "the task list"))
    wire.extend(budget.read(unpacker.unpack) for _ in range(fields - _V1_JOB_FIELDS))
    if unpacker.tell() != len(data):
        raise ValueError(f"{len(data) - unpacker.tell()} bytes follow the job")
    return wire


def _items(unpacker: msgpack.Unpacker, budget: _ItemBudget, what: str) -> Any:
    """The retry table or the task list, item by item; any other value as it is (within the
    item budget), for the validator to name."""
    try:
        count = unpacker.read_array_header()
    except ValueError:  # not an array: nothing was read
        return budget.read(unpacker.unpack)
    if count > limits.MAX_TASKS_PER_JOB:
        raise ValueError(f"{what} has {count} entries; at most {limits.MAX_TASKS_PER_JOB}")
    return [budget.read(unpacker.unpack) for _ in range(count)]


def _array_header(unpacker: msgpack.Unpacker, what: str, most: int) -> int:
    try:
        count: int = unpacker.read_array_header()
    except ValueError:
        raise ValueError(f"{what} is not an array") from None
    if count > most:
        raise ValueError(f"{what} has {count} entries; at most {most}")
    return count


def release_wire(wire: list[Any]) -> None:
    """Empty a wire form (decoded, or made by `to_wire`) one task at a time (`drop_items`),
    where it would otherwise be freed whole."""
    for items in wire:
        if type(items) is list:
            drop_items(items)


def drop_items(items: list[Any]) -> None:
    """Empty `items` one at a time, from the end. Freeing a list of a million objects whole is
    one C call holding the interpreter lock (~30 ms per million); item by item, the interpreter
    switches threads in between."""
    while items:
        items.pop()


# --- validation ---------------------------------------------------------------------------------


class _Refused(Exception):
    """The fast pass is unsure; the full validator decides."""


def from_trusted_wire(wire: Any) -> JobSpec:
    """The JobSpec of a wire form this program wrote itself from a validated spec and kept
    intact (a checksummed snapshot): built without checks, the cost of loading a large state.
    Lists may arrive as tuples. Never use it on bytes from a proposer or a user."""
    _, name, tenant, priority, policy, key, retries, tasks = wire[:_V1_JOB_FIELDS]
    allow_unschedulable, scoring, retry_budget, priority_class, preemptible = \
        _placement_fields(wire)
    table = [RetryPolicy(attempts, backoff_ms, multiplier, backoff_max_ms, jitter, tuple(codes))
             for attempts, backoff_ms, multiplier, backoff_max_ms, jitter, codes in retries]
    on_lost, triggers = _ON_LOST, _TRIGGERS
    specs = tuple(
        TaskSpec(task_id, tuple(command), tuple(tuple(pair) for pair in env) if env else (),
                 cwd, cpu_milli, memory_mb, gpu, tuple(requires), cluster, tuple(deps),
                 table[retry_index], timeout_ms, on_lost[lost], triggers[trigger], extra[0],
                 extra[1], tuple((name, count) for name, count in extra[2]), extra[3])
        for (task_id, command, env, cwd, cpu_milli, memory_mb, gpu, requires, cluster, deps,
             retry_index, timeout_ms, lost, trigger), extra in (
                 (task[:_V1_TASK_FIELDS], _task_extra(task)) for task in tasks))
    return JobSpec(name, tenant, priority, _FAILURE_POLICIES[policy], key, specs,
                   allow_unschedulable, _SCORINGS[scoring], retry_budget,
                   _CLASSES[priority_class], preemptible,
                   tuple((name, value) for name, value in _params_field(wire)))


def validate_wire(wire: object) -> JobSpec:
    """The JobSpec a wire form stands for; SpecError when the equivalent document is invalid."""
    try:
        spec = _Reader().job(wire)
    except (_Refused, TypeError, ValueError, KeyError, IndexError, OverflowError):
        pass
    else:
        return checked_templates(spec)
    try:
        doc = wire_to_doc(wire)
    except (TypeError, ValueError, KeyError, IndexError):
        raise SpecError([SpecIssue("", "malformed wire-form job spec")]) from None
    try:
        return validate_job_doc(doc)
    finally:
        drop_items(doc["tasks"])


def _need(condition: bool) -> None:
    if not condition:
        raise _Refused


def _member(members: dict[str, _E], value: Any) -> _E:
    """The enum member a wire string stands for (an unhashable value raises TypeError, which
    sends the spec to the full validator like any other refusal)."""
    member = members.get(value)
    if member is None:
        raise _Refused
    return member


def _is_id(value: Any) -> bool:
    return type(value) is str and id_problem(value) is None


def _is_int(value: Any, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


def _text_ok(value: Any) -> bool:
    """A string fit for a process: no NUL, encodable as UTF-8."""
    if type(value) is not str or "\x00" in value:
        return False
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _sorted_unique(values: tuple[Any, ...]) -> bool:
    return all(a < b for a, b in itertools.pairwise(values))


class _Reader:
    """One job's fast pass; holds the strings and retry policies its tasks share."""

    def __init__(self) -> None:
        self.strings: dict[str, str] = {}
        self.retries: list[RetryPolicy] = []
        self.task_fields = _TASK_FIELDS_OF[WIRE_VERSION]

    def share(self, value: str) -> str:
        if len(value) > _SHARED_STRING_CHARS:
            return value
        return self.strings.setdefault(value, value)

    def job(self, wire: Any) -> JobSpec:
        _need(type(wire) is list and len(wire) == _JOB_FIELDS_OF.get(wire[0], -1))
        _, name, tenant, priority, policy, key, retries, tasks = wire[:_V1_JOB_FIELDS]
        allow_unschedulable, scoring, retry_budget, priority_class, preemptible = \
            _placement_fields(wire)
        _need(type(allow_unschedulable) is bool and type(preemptible) is bool)
        scoring = _member(_SCORINGS, scoring)
        priority_class = _member(_CLASSES, priority_class)
        _need(retry_budget is None or _is_int(retry_budget, 0, limits.MAX_JOB_RETRY_BUDGET))
        self.task_fields = _TASK_FIELDS_OF[wire[0]]
        _need(type(name) is str and 0 < len(name) <= limits.MAX_NAME_CHARS and name.isprintable())
        _need(_is_id(tenant) and _is_int(priority, limits.PRIORITY_MIN, limits.PRIORITY_MAX))
        policy = _member(_FAILURE_POLICIES, policy)
        _need(key is None or (type(key) is str and key.isprintable()
                              and 0 < len(key) <= limits.MAX_IDEMPOTENCY_KEY_CHARS))
        _need(type(retries) is list and 0 < len(retries) <= limits.MAX_TASKS_PER_JOB)
        self.retries = [_retry(r) for r in retries]
        _need(type(tasks) is list and 0 < len(tasks) <= limits.MAX_TASKS_PER_JOB)
        specs = tuple(self.task(t) for t in tasks)
        _need(not check_graph([t.id for t in specs], [t.depends_on for t in specs]))
        return JobSpec(name, tenant, priority, policy, key, specs, allow_unschedulable, scoring,
                       retry_budget, priority_class, preemptible, _params(_params_field(wire)))

    def task(self, raw: Any) -> TaskSpec:
        _need(type(raw) is list and len(raw) == self.task_fields)
        (task_id, command, env, cwd, cpu_milli, memory_mb, gpu, requires, cluster, deps,
         retry_index, timeout_ms, on_lost, trigger) = raw[:_V1_TASK_FIELDS]
        checkpoint, grace_ms, custom, for_each = _task_extra(raw)
        _need(type(checkpoint) is bool
              and (grace_ms is None or _is_int(grace_ms, 1, limits.MAX_GRACE_S * 1000)))
        _need(for_each is None or not for_each_problem(for_each, tuple(raw[9])))
        custom = _custom(custom)
        _need(_is_id(task_id) and (cluster is None or _is_id(cluster)))
        _need(cwd is None or (_text_ok(cwd) and cwd.startswith("/")
                              and len(cwd) <= limits.MAX_CWD_CHARS))
        _need(_is_int(cpu_milli, limits.MIN_CPU_MILLI, limits.MAX_CPU_MILLI)
              and _is_int(memory_mb, 0, limits.MAX_MEMORY_MB) and _is_int(gpu, 0, limits.MAX_GPU))
        _need(timeout_ms is None or _is_int(timeout_ms, 1, limits.MAX_TIMEOUT_S * 1000))
        on_lost, trigger = _member(_ON_LOST, on_lost), _member(_TRIGGERS, trigger)
        _need(type(retry_index) is int and 0 <= retry_index < len(self.retries))
        return TaskSpec(
            self.share(task_id), self.command(command), _env(env), cwd, cpu_milli, memory_mb,
            gpu, self.requires(requires), cluster, self.depends_on(deps),
            self.retries[retry_index], timeout_ms, on_lost, trigger, checkpoint, grace_ms,
            custom, for_each,
        )

    def command(self, value: Any) -> tuple[str, ...]:
        _need(type(value) is list and 0 < len(value) <= limits.MAX_COMMAND_ARGS
              and value[0] != "")
        chars = 0
        for arg in value:
            _need(_text_ok(arg))
            chars += len(arg)
        # At most four UTF-8 bytes per character: only long commands need an exact count.
        _need(chars * 4 <= limits.MAX_COMMAND_BYTES)
        return tuple(self.share(arg) for arg in value)

    def requires(self, value: Any) -> tuple[str, ...]:
        _need(type(value) is list and len(value) <= limits.MAX_REQUIRES_PER_TASK)
        requires = tuple(value)
        _need(all(_is_id(v) for v in requires) and _sorted_unique(requires))
        return tuple(self.share(v) for v in requires)

    def depends_on(self, value: Any) -> tuple[str, ...]:
        _need(type(value) is list and len(value) <= limits.MAX_DEPENDENCIES_PER_TASK)
        deps = tuple(value)
        _need(all(_is_id(v) for v in deps) and len(set(deps)) == len(deps))
        return tuple(self.share(v) for v in deps)


def _env(value: Any) -> tuple[tuple[str, str], ...]:
    _need(type(value) is list and len(value) <= limits.MAX_ENV_VARS)
    if not value:
        return ()
    chars = 0
    for pair in value:
        _need(type(pair) is list and len(pair) == 2)
        name, text = pair
        _need(type(name) is str and _ENV_NAME.fullmatch(name) is not None
              and not name.startswith(RESERVED_ENV_PREFIX) and _text_ok(text))
        chars += len(name) + len(text)
    _need(chars * 4 <= limits.MAX_ENV_BYTES)
    env = tuple((name, text) for name, text in value)
    _need(_sorted_unique(tuple(name for name, _ in env)))
    return env


def _params(value: Any) -> tuple[tuple[str, str], ...]:
    """A wire form's params: [[name, value], ...], names in ascending order, each name and value
    as `params.name_problem` and `params.value_problem` want them."""
    _need(type(value) is list and len(value) <= limits.MAX_PARAMS_PER_JOB)
    pairs: list[tuple[str, str]] = []
    for pair in value:
        _need(type(pair) is list and len(pair) == 2)
        name, text = pair
        _need(name_problem(name) is None and type(text) is str and value_problem(text) is None)
        _need(not pairs or pairs[-1][0] < name)
        pairs.append((name, text))
    return tuple(pairs)


def _retry(value: Any) -> RetryPolicy:
    _need(type(value) is list and len(value) == _RETRY_FIELDS)
    attempts, backoff_ms, multiplier, backoff_max_ms, jitter, codes = value
    _need(_is_int(attempts, 1, limits.MAX_ATTEMPTS_PER_TASK))
    _need(_is_int(backoff_ms, 0, limits.MAX_BACKOFF_S * 1000)
          and _is_int(backoff_max_ms, backoff_ms, limits.MAX_BACKOFF_S * 1000))
    _need(type(multiplier) is float and 1.0 <= multiplier <= limits.MAX_BACKOFF_MULTIPLIER)
    _need(type(jitter) is float and math.isfinite(jitter) and 0.0 <= jitter <= 1.0)
    _need(type(codes) is list and len(codes) <= limits.MAX_NON_RETRYABLE_EXIT_CODES)
    exit_codes = tuple(codes)
    _need(all(_is_int(c, _EXIT_CODE_MIN, _EXIT_CODE_MAX) for c in exit_codes)
          and _sorted_unique(exit_codes))
    return RetryPolicy(attempts, backoff_ms, multiplier + 0.0, backoff_max_ms, jitter + 0.0,
                       exit_codes)


def _custom(value: Any) -> tuple[tuple[str, int], ...]:
    """A wire task's custom resources: [[name, count], ...], names ids in ascending order,
    counts 1..MAX_CUSTOM_RESOURCE_COUNT, at most MAX_CUSTOM_RESOURCES_PER_TASK."""
    _need(type(value) in (list, tuple) and len(value) <= limits.MAX_CUSTOM_RESOURCES_PER_TASK)
    pairs: list[tuple[str, int]] = []
    for pair in value:
        _need(type(pair) in (list, tuple) and len(pair) == 2)
        name, count = pair
        _need(_is_id(name) and _is_int(count, 1, limits.MAX_CUSTOM_RESOURCE_COUNT))
        _need(not pairs or pairs[-1][0] < name)
        pairs.append((name, count))
    return tuple(pairs)


# --- apply's trusted decode ------------------------------------------------------------------


def decode_trusted(wire: object) -> JobSpec:
    """The JobSpec of a wire form the leader validated (`validate_wire`) before proposing it:
    what JOB_SUBMIT's apply uses, instead of validating again on every replica (issue 24).

    Only replicas write the log, and only through the leader's proposal path, which validates
    every spec first; so apply does not re-prove the user-facing rules (id and text rules, string
    sizes, command and env budgets, sortedness). It still refuses, with a SpecError naming the
    problem, anything that could crash apply or break an invariant of the state: a wrong shape
    or type anywhere, a number outside its bound, an unknown enum value, a duplicate task id, an
    unknown dependency or a cycle (such an entry, rare, goes to `validate_wire`, whose SpecError
    names the field). For a wire form `validate_wire` accepts it returns an equal spec (same
    digest: idempotency is unchanged)."""
    try:
        _need(type(wire) is list and len(wire) == _JOB_FIELDS_OF.get(wire[0], -1))
        assert isinstance(wire, list)
        fields = _TASK_FIELDS_OF[wire[0]]
        _need(type(wire[6]) is list and type(wire[7]) is list
              and 0 < len(wire[7]) <= limits.MAX_TASKS_PER_JOB
              and all(type(row) is list and len(row) == _RETRY_FIELDS for row in wire[6])
              and all(type(task) is list and len(task) == fields for task in wire[7]))
        spec = from_trusted_wire(wire)
        _need(_job_shape_ok(spec) and _tasks_shape_ok(spec.tasks))
        _need(_params_ok(spec.params))
        _need(all(_retry_ok(policy) for policy in {id(t.retry): t.retry
                                                   for t in spec.tasks}.values()))
    except (_Refused, TypeError, ValueError, KeyError, IndexError, AttributeError):
        # Only a malformed entry comes here: the full validator names its problem.
        return validate_wire(wire)
    graph = check_graph([t.id for t in spec.tasks], [t.depends_on for t in spec.tasks])
    if graph:
        raise SpecError(graph)
    return spec


def _job_shape_ok(spec: JobSpec) -> bool:
    key = spec.idempotency_key
    return (type(spec.name) is str and type(spec.tenant) is str
            and _is_int(spec.priority, limits.PRIORITY_MIN, limits.PRIORITY_MAX)
            and (key is None or (type(key) is str
                                 and len(key) <= limits.MAX_IDEMPOTENCY_KEY_CHARS))
            and type(spec.allow_unschedulable) is bool and type(spec.preemptible) is bool
            and (spec.retry_budget is None
                 or _is_int(spec.retry_budget, 0, limits.MAX_JOB_RETRY_BUDGET)))


def _tasks_shape_ok(tasks: tuple[TaskSpec, ...]) -> bool:
    """Types and numeric bounds of the tasks of a trusted wire form (not the text rules). One
    loop, checks inline: it runs per task on every replica. `"".join` raises TypeError unless
    every item is a string (the caller refuses the spec)."""
    cpu_max, memory_max, gpu_max = limits.MAX_CPU_MILLI, limits.MAX_MEMORY_MB, limits.MAX_GPU
    timeout_max, grace_max = limits.MAX_TIMEOUT_S * 1000, limits.MAX_GRACE_S * 1000
    for t in tasks:
        "".join(t.command)
        "".join(t.requires)
        "".join(t.depends_on)
        cpu, memory, gpu, timeout, grace = t.cpu_milli, t.memory_mb, t.gpu, t.timeout_ms, t.grace_ms
        if not (type(t.id) is str and t.command
                and type(cpu) is int and limits.MIN_CPU_MILLI <= cpu <= cpu_max
                and type(memory) is int and 0 <= memory <= memory_max
                and type(gpu) is int and 0 <= gpu <= gpu_max
                and (t.cwd is None or type(t.cwd) is str)
                and (t.cluster is None or type(t.cluster) is str)
                and (timeout is None or (type(timeout) is int and 1 <= timeout <= timeout_max))
                and (grace is None or (type(grace) is int and 1 <= grace <= grace_max))
                and type(t.checkpoint) is bool
                and (t.for_each is None or type(t.for_each) is str)):
            return False
        if t.env and not all(type(n) is str and type(v) is str for n, v in t.env):
            return False
        if t.custom and not all(type(n) is str and _is_int(c, 1, limits.MAX_CUSTOM_RESOURCE_COUNT)
                                for n, c in t.custom):
            return False
    return True


def _params_ok(params: tuple[tuple[str, str], ...]) -> bool:
    """Types, count, value sizes, order and uniqueness of a trusted wire form's params."""
    return (len(params) <= limits.MAX_PARAMS_PER_JOB
            and all(type(n) is str and type(v) is str
                    and len(v) <= limits.MAX_PARAM_VALUE_BYTES for n, v in params)
            and all(a[0] < b[0] for a, b in itertools.pairwise(params)))


def _retry_ok(r: RetryPolicy) -> bool:
    """Types and bounds of a retry policy of a trusted wire form (once per distinct policy)."""
    return (_is_int(r.max_attempts, 1, limits.MAX_ATTEMPTS_PER_TASK)
            and _is_int(r.backoff_ms, 0, limits.MAX_BACKOFF_S * 1000)
            and _is_int(r.backoff_max_ms, r.backoff_ms, limits.MAX_BACKOFF_S * 1000)
            and type(r.multiplier) is float
            and 1.0 <= r.multiplier <= limits.MAX_BACKOFF_MULTIPLIER
            and type(r.jitter) is float and 0.0 <= r.jitter <= 1.0
            and all(_is_int(c, _EXIT_CODE_MIN, _EXIT_CODE_MAX)
                    for c in r.non_retryable_exit_codes))
