"""Job specs: parse a YAML or JSON document into a validated, canonical `JobSpec`.

The document format is docs/architecture.md §5 plus optional per-task `env` (mapping) and `cwd`
(string).
Validation reports every problem it finds (a `SpecError` carries them all), checks types exactly
(a bool is not a number), refuses unknown fields, and costs O(V+E) for V tasks and E dependencies.
Every bound comes from `raftsched.limits`.

Choices worth knowing:
- `null` is accepted only for the optional fields whose value may be None (`idempotency_key`,
  `cwd`, `cluster`, `timeout_s`, `grace_s`, `retry_budget`); elsewhere a null is a type error.
- Integer fields take ints only (256.0 is refused); number fields take ints and finite floats.
- `requires` and `non_retryable_exit_codes` are sets: duplicates are dropped and the result is
  sorted. A duplicate in `depends_on` is an error.
- When `retry.backoff_max_s` is absent it defaults to max(DEFAULT_BACKOFF_MAX_S, backoff_s).
- A key repeated in one mapping of the file is an error (YAML and JSON would keep the last one).
- A text that starts as a JSON object (`{` after whitespace) is read as JSON; when it is not
  valid JSON, nor a YAML flow mapping, the JSON error is the one reported (line, column).
"""

from __future__ import annotations

import difflib
import enum
import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, NamedTuple, NoReturn, TypeGuard, TypeVar

import msgpack
import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.reader import ReaderError

from raftsched import limits
from raftsched.protocol import id_problem as id_problem  # the one id rule, shared with agents
from raftsched.spec.dag import check_graph
from raftsched.spec.issue import SpecIssue, show
from raftsched.spec.packing import list_in_pieces

__all__ = [
    "FailurePolicy",
    "JobSpec",
    "OnLost",
    "PriorityClass",
    "RetryPolicy",
    "Scoring",
    "SpecError",
    "SpecIssue",
    "TaskSpec",
    "Trigger",
    "parse_spec_text",
    "parse_submitted_text",
    "runs_when_upstream_done",
    "validate_job_doc",
    "with_idempotency_key",
]

RESERVED_ENV_PREFIX: Final = "RAFTSCHED_"

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.-]{1,64}")

_JOB_FIELDS: Final = (
    "name", "tenant", "priority", "failure_policy", "idempotency_key", "allow_unschedulable",
    "scoring", "retry_budget", "priority_class", "preemptible", "tasks",
)
_TASK_FIELDS: Final = (
    "id", "command", "env", "cwd", "resources", "requires", "cluster", "depends_on", "retry",
    "timeout_s", "on_lost", "trigger", "checkpoint", "grace_s",
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


# --- the validated spec ---------------------------------------------------------------------------


class FailurePolicy(enum.StrEnum):
    """What a job does when one of its tasks fails for good (docs/architecture.md §2)."""

    FAIL_FAST = "fail_fast"
    """Cancel every open task of the job."""
    SKIP_DOWNSTREAM = "skip_downstream"
    """Dependents become SKIPPED; independent branches go on (the default)."""
    CONTINUE = "continue"
    """Like skip_downstream, except that `trigger: all_done` tasks run anyway."""


class Scoring(enum.StrEnum):
    """Which of the clusters a task fits the planner picks (docs/architecture.md §9)."""

    BINPACK = "binpack"
    """The fullest that fits: keeps whole clusters free for large tasks (the default)."""
    SPREAD = "spread"
    """The emptiest: spreads a job's tasks (and the damage of one cluster's loss)."""


class PriorityClass(enum.StrEnum):
    """Who may take a cluster's room from whom: a pending task of a higher class may preempt
    running tasks of a lower class whose jobs are `preemptible` (docs/architecture.md §9)."""

    LOW = "low"
    NORMAL = "normal"
    HIGH = "high"

    @property
    def rank(self) -> int:
        return _CLASS_RANK[self]


_CLASS_RANK: Final = {PriorityClass.LOW: 0, PriorityClass.NORMAL: 1, PriorityClass.HIGH: 2}


class OnLost(enum.StrEnum):
    """What happens to a task's attempt when its cluster is lost."""

    REPLACE = "replace"
    """The attempt becomes LOST and the task gets a new attempt (a new fence) elsewhere."""
    WAIT = "wait"
    """Never run twice: wait for the cluster to come back or an operator to mark it lost."""


class Trigger(enum.StrEnum):
    """When a task's upstream tasks let it run."""

    ALL_SUCCESS = "all_success"
    ALL_DONE = "all_done"
    """Every upstream task is terminal, whatever its outcome (under `failure_policy: continue`)."""


def runs_when_upstream_done(policy: FailurePolicy, trigger: Trigger) -> bool:
    """Whether a task becomes runnable once its upstream tasks are terminal, whatever their
    outcome (`trigger: all_done` in a `failure_policy: continue` job), rather than only once
    they all succeeded."""
    return trigger == Trigger.ALL_DONE and policy == FailurePolicy.CONTINUE


# The spec holds enum members; every serialized form (the document, the wire form, snapshots,
# the digest) holds their plain string values, so those bytes do not depend on the enums.


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How an application failure of a task is retried; durations in milliseconds."""

    max_attempts: int
    backoff_ms: int
    multiplier: float
    backoff_max_ms: int
    jitter: float
    non_retryable_exit_codes: tuple[int, ...]

    def to_doc(self) -> dict[str, Any]:
        return {
            "max_attempts": self.max_attempts,
            "backoff_s": self.backoff_ms / 1000,
            "multiplier": self.multiplier,
            "backoff_max_s": self.backoff_max_ms / 1000,
            "jitter": self.jitter,
            "non_retryable_exit_codes": list(self.non_retryable_exit_codes),
        }


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """One validated task; see docs/architecture.md §5 for what each field means."""

    id: str
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    cwd: str | None
    cpu_milli: int
    memory_mb: int
    gpu: int
    requires: tuple[str, ...]
    cluster: str | None
    depends_on: tuple[str, ...]
    retry: RetryPolicy
    timeout_ms: int | None
    on_lost: OnLost
    trigger: Trigger
    checkpoint: bool = False
    """The agent gives the task a directory that persists across its attempts on that cluster
    ($RAFTSCHED_CHECKPOINT_DIR), e.g. to resume after a preemption."""
    grace_ms: int | None = None
    """SIGTERM to SIGKILL when the task is stopped (preempted, cancelled, timed out); None: the
    agent's default."""
    custom: tuple[tuple[str, int], ...] = ()
    """Named custom resources (`resources.custom`: licenses, FPGAs, ...) as (name, count),
    sorted by name: a cluster must advertise at least that many of each (agent --resource),
    and the scheduler counts what its live attempts hold, as for cpu."""

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "id": self.id,
            "command": list(self.command),
            "env": dict(self.env),
            "cwd": self.cwd,
            "resources": {
                "cpu": self.cpu_milli / 1000,
                "memory_mb": self.memory_mb,
                "gpu": self.gpu,
                **({"custom": dict(self.custom)} if self.custom else {}),
            },
            "requires": list(self.requires),
            "cluster": self.cluster,
            "depends_on": list(self.depends_on),
            "retry": self.retry.to_doc(),
        }
        if self.timeout_ms is not None:
            doc["timeout_s"] = self.timeout_ms / 1000
        doc["on_lost"] = self.on_lost.value
        doc["trigger"] = self.trigger.value
        if self.checkpoint:
            doc["checkpoint"] = True
        if self.grace_ms is not None:
            doc["grace_s"] = self.grace_ms / 1000
        return doc


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A validated job: every default filled in, sets sorted, durations in milliseconds."""

    name: str
    tenant: str
    priority: int
    failure_policy: FailurePolicy
    idempotency_key: str | None
    tasks: tuple[TaskSpec, ...]
    allow_unschedulable: bool = False
    """Accept the job even when some task fits no registered cluster's totals; it waits."""
    scoring: Scoring = Scoring.BINPACK
    retry_budget: int | None = None
    """At most this many retries after application failures across all the job's tasks (None:
    only each task's `retry.max_attempts` bounds them)."""
    priority_class: PriorityClass = PriorityClass.NORMAL
    preemptible: bool = False
    """Its running tasks may be stopped to make room for a higher class's (and run again later,
    at no cost to their retry budgets)."""

    def edge_count(self) -> int:
        return sum(len(task.depends_on) for task in self.tasks)

    def to_doc(self) -> dict[str, Any]:
        """The canonical user-form document; `validate_job_doc(s.to_doc()) == s`. The placement
        fields appear only when they differ from their defaults, so the digest of a spec that
        does not use them is what it was before they existed."""
        doc: dict[str, Any] = {
            "name": self.name,
            "tenant": self.tenant,
            "priority": self.priority,
            "failure_policy": self.failure_policy.value,
            "idempotency_key": self.idempotency_key,
        }
        if self.allow_unschedulable:
            doc["allow_unschedulable"] = True
        if self.scoring != Scoring.BINPACK:
            doc["scoring"] = self.scoring.value
        if self.retry_budget is not None:
            doc["retry_budget"] = self.retry_budget
        if self.priority_class != PriorityClass.NORMAL:
            doc["priority_class"] = self.priority_class.value
        if self.preemptible:
            doc["preemptible"] = True
        doc["tasks"] = [task.to_doc() for task in self.tasks]
        return doc

    def digest(self) -> bytes:
        """sha256 of the msgpack encoding of `to_doc()` (its key order is fixed). Every replica
        computes it at apply, so the tasks are packed and hashed in pieces (`packing`)."""
        doc = self.to_doc()
        packer = msgpack.Packer(use_bin_type=True)
        hasher = hashlib.sha256(packer.pack_map_header(len(doc)))
        for key, value in doc.items():
            hasher.update(packer.pack(key))
            if key == "tasks":
                for piece in list_in_pieces(packer, value):
                    hasher.update(piece)
            else:
                hasher.update(packer.pack(value))
        tasks = doc["tasks"]
        while tasks:  # freed one at a time: whole, 100,000 task documents are one long C call
            tasks.pop()
        return hasher.digest()


class SpecError(Exception):
    """A job spec was refused; `issues` holds every problem found, in document order."""

    def __init__(self, issues: Iterable[SpecIssue]) -> None:
        self.issues: tuple[SpecIssue, ...] = tuple(issues)
        assert self.issues, "a SpecError names at least one issue"
        more = len(self.issues) - 1
        summary = self.issues[0].render() + (f" (and {more} more)" if more else "")
        super().__init__(summary)


# --- entry points ---------------------------------------------------------------------------------


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
    tasks = _tasks(scope)
    if scope.sink.issues:
        raise SpecError(scope.sink.issues)
    return JobSpec(_req(name), _req(tenant), _req(priority), _req(policy), key, _req(tasks),
                   _req(allow_unschedulable), _req(scoring), retry_budget, _req(priority_class),
                   _req(preemptible))


def with_idempotency_key(spec: JobSpec, key: str) -> JobSpec:
    """`spec` with its idempotency key set to `key` (checked like the document's own field),
    without validating the rest again. Raises SpecError naming `idempotency_key`."""
    scope = _Scope(_Sink(), "", None, {"idempotency_key": key})
    checked = _idempotency_key(scope)
    if scope.sink.issues:
        raise SpecError(scope.sink.issues)
    return replace(spec, idempotency_key=checked)


def parse_spec_text(text: str | bytes, *, source: str = "<spec>") -> JobSpec:
    """Parse JSON (when the text is a JSON object) or else YAML, then validate it."""
    return validate_job_doc(_load_document(text, source, bounded=False))


def parse_submitted_text(text: str | bytes, *, source: str) -> JobSpec:
    """`parse_spec_text` as a replica runs it on a document a client sent: YAML of at most
    MAX_YAML_SPEC_BYTES, JSON of at most MAX_JSON_SPEC_BYTES (a larger one is a SpecError
    saying to send the wire form). The parsers hold the interpreter lock that the replica's
    Raft thread needs for as long as they run (see limits.py)."""
    return validate_job_doc(_load_document(text, source, bounded=True))


# --- text -> document -----------------------------------------------------------------------------


def _load_document(text: str | bytes, source: str, *, bounded: bool) -> object:
    size = len(text) if isinstance(text, bytes) else _utf8_size(text)
    if size > limits.MAX_SPEC_BYTES:
        _fail_file(f"{source} is {size} bytes; a job spec may be at most "
                   f"{limits.MAX_SPEC_BYTES} bytes")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as error:
            _fail_file(f"{source} is not UTF-8 text (bad byte at offset {error.start})")
    text = text.removeprefix("\ufeff")
    if not text.strip():
        _fail_file(f"{source} is empty")
    doc = _parse_text(text, source, size if bounded else None)
    if doc is None:
        _fail_file(f"{source} holds no document (only comments?)")
    return doc


_JSON_START = re.compile(r"[ \t\r\n]*\{")
"""A document meant as JSON: a JSON object (after JSON whitespace)."""


def _parse_text(text: str, source: str, bounded_size: int | None) -> object:
    """The document: JSON when the text starts as a JSON object, else YAML. A text that starts
    as a JSON object but is not one may still be a YAML flow mapping; when it is not that either,
    the JSON error is the one reported. `bounded_size` (the text's bytes) applies the replicas'
    parse bounds; None parses any size."""
    yaml_allowed = bounded_size is None or bounded_size <= limits.MAX_YAML_SPEC_BYTES
    if _JSON_START.match(text) is None:
        if not yaml_allowed:
            _fail_file(f"{source} is {bounded_size} bytes of YAML; YAML specs over "
                       f"{limits.MAX_YAML_SPEC_BYTES} bytes are not parsed by the replicas: "
                       f"send JSON (up to {limits.MAX_JSON_SPEC_BYTES} bytes) or the wire "
                       f"form ({_WIRE_HINT})")
        return _parse_yaml(text, source)
    if bounded_size is not None and bounded_size > limits.MAX_JSON_SPEC_BYTES:
        _fail_file(f"{source} is {bounded_size} bytes of JSON; JSON specs over "
                   f"{limits.MAX_JSON_SPEC_BYTES} bytes are not parsed by the replicas: send "
                   f"the wire form ({_WIRE_HINT})")
    try:
        return _parse_json_object(text, source)
    except SpecError as json_error:
        if not yaml_allowed:
            raise
        try:
            return _parse_yaml(text, source)
        except SpecError:
            raise json_error from None


_WIRE_HINT = "SubmitJobRequest.spec_wire; the raftsched CLI and Python client send it"


def _utf8_size(text: str) -> int:
    if len(text) > limits.MAX_SPEC_BYTES:
        return len(text)  # at least this many bytes; no need to encode it all
    return len(text.encode("utf-8", "surrogatepass"))


class _DuplicateKey(Exception):
    def __init__(self, key: object) -> None:
        super().__init__(key)
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _parse_json_object(text: str, source: str) -> object:
    """The parsed JSON object (`text` starts as one); SpecError naming where it is not JSON."""
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs)
    except _DuplicateKey as error:
        _fail_file(f"{source}: duplicate key {show(error.key)} in a JSON object")
    except json.JSONDecodeError as error:
        _fail_file(f"invalid JSON in {source} at line {error.lineno}, column {error.colno}: "
                   f"{error.msg}")
    except RecursionError:
        _fail_file(f"invalid JSON in {source}: nested too deeply")
    except ValueError as error:  # an integer of too many digits
        _fail_file(f"invalid JSON in {source}: {(str(error).splitlines() or ['?'])[0]}")


class _UniqueKeyConstructor(SafeConstructor):
    """SafeConstructor that refuses a key repeated in one mapping (merge keys `<<` still work)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[object, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue
            key = self.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if key in first_line:
                problem = f"duplicate key {show(key)} (first at line {first_line[key]})"
                raise ConstructorError(None, None, problem, key_node.start_mark)
            first_line[key] = line
        return super().construct_mapping(node, deep=deep)


class _PyLoader(_UniqueKeyConstructor, yaml.SafeLoader):
    pass


_LOADER: type[yaml.SafeLoader | yaml.CSafeLoader] = _PyLoader
if yaml.__with_libyaml__:

    class _CLoader(_UniqueKeyConstructor, yaml.CSafeLoader):
        """The libyaml parser, when PyYAML was built with it (much faster on big specs)."""

    _LOADER = _CLoader


def _parse_yaml(text: str, source: str) -> object:
    loader = _LOADER(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node, text, source)  # before any value is built from them
        return loader.construct_document(node)
    except RecursionError:
        _fail_file(f"invalid YAML in {source}: nested too deeply")
    except (yaml.YAMLError, ValueError, OverflowError, TypeError) as error:
        # ValueError and friends come from constructors (e.g. an int of 5000 digits).
        _fail_file(f"invalid YAML in {source}{_yaml_problem(error, text)}")
    finally:
        loader.dispose()


def _check_expansion(root: yaml.Node, text: str, source: str) -> None:
    """Refuse a document that its aliases (and merge keys, which take aliased mappings) would
    expand past MAX_SPEC_EXPANDED_CHARS, or that repeats more through aliases than
    MAX_SPEC_ALIAS_CHARS / MAX_SPEC_ALIAS_RATIO allow, or that contains itself.

    An alias is the anchored node itself, so the nodes form a graph in which a node may be
    reached many times. Each node's expanded size (the characters of its scalars plus one per
    node) is summed once, after its children's, so the cost is O(nodes written) whatever the
    expansion, and nothing expanded is ever built. A text without both '&' and '*' has no
    alias (an alias is `*name` of an `&name` anchor) and is not walked."""
    if "&" not in text or "*" not in text:
        return
    expanded: dict[int, int] = {}
    """id(node) -> its size with every alias under it expanded."""
    open_ids: set[int] = set()
    """Collections whose children are still being summed: reaching one again is a cycle."""
    written = 0
    stack: list[yaml.Node | tuple[yaml.Node]] = [root]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple):  # every child of this collection is summed
            node = item[0]
            size = _NODE_CHARS + sum(expanded[id(child)] for child in _child_nodes(node))
            if size > limits.MAX_SPEC_EXPANDED_CHARS:
                _fail_file(f"{source}: YAML aliases expand the document past "
                           f"{limits.MAX_SPEC_EXPANDED_CHARS} characters (the node at "
                           f"{_where(node)} alone expands to {size}); a job spec may expand to "
                           f"at most {limits.MAX_SPEC_EXPANDED_CHARS}")
            expanded[id(node)] = size
            open_ids.discard(id(node))
            continue
        key = id(item)
        if key in expanded:
            continue
        if isinstance(item, yaml.ScalarNode):
            expanded[key] = _NODE_CHARS + len(item.value)
            written += expanded[key]
            continue
        if key in open_ids:
            _fail_file(f"{source}: the YAML node at {_where(item)} contains an alias to itself "
                       "(a recursive document)")
        open_ids.add(key)
        written += _NODE_CHARS
        stack.append((item,))
        stack.extend(_child_nodes(item))
    repeated = expanded[id(root)] - written
    allowed = max(limits.MAX_SPEC_ALIAS_CHARS, limits.MAX_SPEC_ALIAS_RATIO * written)
    if repeated > allowed:
        _fail_file(f"{source}: YAML aliases repeat {repeated} characters of a document that "
                   f"writes out {written}; they may repeat at most {allowed} (the larger of "
                   f"{limits.MAX_SPEC_ALIAS_CHARS} and {limits.MAX_SPEC_ALIAS_RATIO} times what "
                   "is written out): write the repeated parts out, or share less")


_NODE_CHARS = 1
"""What `_check_expansion` counts for a node besides its scalar's characters."""


def _child_nodes(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


def _where(node: yaml.Node) -> str:
    mark = node.start_mark
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"


def _yaml_problem(error: Exception, text: str) -> str:
    """' at line L, column C: problem' (1-based) as far as the error tells where."""
    if isinstance(error, yaml.MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        parts = [part for part in (error.context, error.problem) if part]
        problem = ", ".join(parts) or "syntax error"
        return (f" at line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark
                else f": {problem}")
    first_line = (str(error).splitlines() or ["syntax error"])[0]
    if isinstance(error, ReaderError) and isinstance(error.position, int):
        line = text.count("\n", 0, error.position) + 1
        column = error.position - (text.rfind("\n", 0, error.position) + 1) + 1
        return f" at line {line}, column {column}: {first_line}"
    return f": {first_line}"


def _fail_file(message: str) -> NoReturn:
    raise SpecError([SpecIssue("", message)])


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


def _tasks(scope: _Scope) -> tuple[TaskSpec, ...] | None:
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
    if len(scope.sink.issues) > before or task_id is None:
        return None
    return TaskSpec(
        task_id, _req(command), _req(env), cwd, _req(cpu_milli), _req(memory_mb), _req(gpu),
        _req(requires), cluster, deps, _req(retry), timeout_ms, _req(on_lost), _req(trigger),
        _req(checkpoint), grace_ms, _req(custom),
    )


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
