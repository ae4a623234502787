"""The checker's shared parts: the findings, the report, the constants and the history of
operations. (Part of `jepsen.checker`.)"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raftsched.state.audit import MAX_VIOLATIONS_PER_CHECK, Violation
from raftsched.state.model import (
    TERMINAL_JOB_STATES,
    TERMINAL_TASK_STATES,
)

MAX_UNRECORDED_RUN = 0
"""Consecutive Raft indices missing from every applied log that are tolerated. Replicas record
pysyncobj's own entries (no-ops after elections, membership changes) as empty entries, so any gap
stops the replay (a limitation reported, not a violation)."""
LOW_INDEX = MAX_UNRECORDED_RUN + 1
"""A replica whose applied log starts above this did not apply the log from its start (it
restored or installed a snapshot after compaction): the report says so."""
MAX_NOTES = 200
"""Notes kept in a report; past it they are only counted."""
EARLY_TIMEOUT_FRACTION = 0.5
"""A task described as running for less than this fraction of its timeout must never time out."""
MAX_NOTES_SHOWN = 10
"""Notes printed under the results table (all kept ones are in --json / report.json)."""

_OP_TYPES = ("invoke", "ok", "fail", "info")
_TERMINAL_JOB_NAMES = frozenset(s.name for s in TERMINAL_JOB_STATES)
_TERMINAL_TASK_NAMES = frozenset(s.name for s in TERMINAL_TASK_STATES)


class CheckError(Exception):
    """The results folder cannot be read (missing, not a folder, unreadable history)."""


@dataclass
class Report:
    results_dir: str
    violations: list[Violation] = field(default_factory=list)
    liveness_met: bool = False
    liveness_pending: list[str] = field(default_factory=list)
    """Acknowledged jobs not terminal at the end."""
    acknowledged_jobs: int = 0
    liveness_waited_s: float | None = None
    """From the liveness event: how long after the final heal the last acknowledged job was
    seen terminal (or the bound, when it was not)."""
    liveness_bound_s: float | None = None
    notes: list[str] = field(default_factory=list)
    """Limitations and observations that are not violations."""
    ops: dict[str, dict[str, int]] = field(default_factory=dict)
    """f -> {"invoked", "ok", "fail", "info", "open" (no completion)}."""
    faults: dict[str, int] = field(default_factory=dict)
    """Fault kind -> `start` events."""
    recovery_s: list[float] = field(default_factory=list)
    """Per fault: seconds from its end (its start, for kinds with no end) to the first ok
    submit or read invoked after it."""
    recovery_p50_s: float | None = None
    recovery_max_s: float | None = None
    faults_unrecovered: int = 0
    invariants_checked: dict[str, int] = field(default_factory=dict)
    """Check name -> times it was evaluated."""
    violations_suppressed: dict[str, int] = field(default_factory=dict)
    duplicate_executions: int = 0
    """Overlapping attempts of one task allowed because the earlier one was LOST."""
    external_duplicate_effects: int = 0
    """Tasks with two or more successful `end` lines in the ledger."""
    entries_replayed: int = 0
    replay_complete: bool = False
    last_index_replayed: int = 0
    unrecorded_indices: int = 0
    stale_fence_rejections: int = 0
    reads_compared: int = 0
    ledger_starts: int = 0
    ledger_unended: int = 0
    """Ledger starts with no end line (killed tasks): their overlap cannot be judged."""
    kills_settled: int = 0
    """Kills owed to honest agents and settled in time (kill_liveness)."""
    kills_unjudged: int = 0
    """Owed kills still open when the log ends (within the bound, or their cluster not READY)."""
    kill_settle_p50_s: float | None = None
    kill_settle_max_s: float | None = None
    """READY time from an attempt's end to its agent's word that it is gone."""
    replicas: dict[str, dict[str, Any]] = field(default_factory=dict)
    groups: list[dict[str, Any]] = field(default_factory=list)
    """With several scheduler groups: each group's own figures (replay, liveness, kills)."""
    grow: dict[str, Any] | None = None
    """A run that grew (`run --grow`): the shard move's figures (`checks_groups.grow_figures`)."""
    """name -> first/last index, entries, re-applied records, torn tail bytes of its log."""


# --- collecting findings ------------------------------------------------------------------------


class _Findings:
    def __init__(self, results_dir: Path) -> None:
        self.report = Report(str(results_dir))
        self._kept: dict[str, int] = {}
        self._notes_dropped = 0

    def count(self, check: str, n: int = 1) -> None:
        checked = self.report.invariants_checked
        checked[check] = checked.get(check, 0) + n

    def violate(self, check: str, message: str, *, ops: Iterable[int] = (),
                indices: Iterable[int] = (), keys: Iterable[str] = ()) -> None:
        kept = self._kept.get(check, 0)
        if kept >= MAX_VIOLATIONS_PER_CHECK:
            suppressed = self.report.violations_suppressed
            suppressed[check] = suppressed.get(check, 0) + 1
            return
        self._kept[check] = kept + 1
        self.report.violations.append(
            Violation(check, message, tuple(indices), tuple(keys), tuple(ops)))

    def note(self, text: str) -> None:
        if len(self.report.notes) < MAX_NOTES:
            self.report.notes.append(text)
        else:
            self._notes_dropped += 1

    def finish(self) -> Report:
        if self._notes_dropped:
            self.report.notes.append(f"{self._notes_dropped} more notes not kept (MAX_NOTES)")
        return self.report


# --- the history --------------------------------------------------------------------------------


@dataclass
class Op:
    """An invoke and its completion (None: never completed)."""

    op: int
    process: Any
    f: str
    invoke: dict[str, Any]
    done: dict[str, Any] | None = None

    @property
    def outcome(self) -> str | None:
        return None if self.done is None else str(self.done["type"])

    def value(self) -> dict[str, Any]:
        return _dict(self.invoke.get("value"))

    def result(self) -> dict[str, Any]:
        return {} if self.done is None else _dict(self.done.get("value"))


@dataclass
class _History:
    records: list[dict[str, Any]] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _read_lines(path: Path, what: str) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").split("\n")
    except FileNotFoundError:
        raise CheckError(f"{path}: no {what}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise CheckError(f"{path}: cannot read the {what}: {error}") from None


def _numbered(lines: list[str]) -> Iterator[tuple[int, str, bool]]:
    """(1-based line number, text, is the last non-empty line) for every non-empty line."""
    last = max((n for n, line in enumerate(lines) if line.strip()), default=-1)
    for n, line in enumerate(lines):
        if line.strip():
            yield n + 1, line, n == last


def read_history(path: Path, found: _Findings) -> _History:
    history = _History()
    for number, line, last in _numbered(_read_lines(path, "history")):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if not last:
                found.violate("history_format", f"history.jsonl line {number} is not JSON")
            continue
        problem = _record_problem(record)
        if problem is not None:
            found.violate("history_format", f"history.jsonl line {number}: {problem}")
            continue
        history.records.append(record)
    _pair_ops(history, found)
    return history


def _record_problem(record: Any) -> str | None:
    if not isinstance(record, dict):
        return "not an object"
    if _int(record.get("i")) is None or not isinstance(record.get("t"), int | float):
        return "no integer 'i' or number 't'"
    kind = record.get("type")
    if kind not in (*_OP_TYPES, "event") or not isinstance(record.get("f"), str):
        return f"i={record.get('i')}: unknown type {kind!r} or no 'f'"
    if kind != "event" and _int(record.get("op")) is None:
        return f"i={record['i']}: an operation without an integer 'op'"
    if not isinstance(record.get("value", {}), dict):
        return f"i={record['i']}: 'value' is not an object"
    return None


def _pair_ops(history: _History, found: _Findings) -> None:
    open_ops: dict[int, Op] = {}
    for record in history.records:
        kind = record["type"]
        if kind == "event":
            history.events.append(record)
        elif kind == "invoke":
            op = Op(record["op"], record.get("process"), record["f"], record)
            if record["op"] in open_ops:
                found.violate("history_format", f"i={record['i']}: op {record['op']} invoked "
                                                f"twice", ops=(record["i"],))
            open_ops[record["op"]] = op
            history.ops.append(op)
        else:
            invoked = open_ops.pop(record["op"], None)
            if invoked is None or invoked.f != record["f"]:
                found.violate("history_format", f"i={record['i']}: {kind} of op {record['op']} "
                                                f"without an open invoke of {record['f']}",
                              ops=(record["i"],))
                continue
            invoked.done = record


def _event(history: _History, f: str) -> dict[str, Any] | None:
    matches = [e for e in history.events if e["f"] == f]
    return _dict(matches[-1].get("value")) if matches else None
