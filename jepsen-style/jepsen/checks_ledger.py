"""The ledger: what the tasks themselves recorded, against the replayed log. (Part of
`jepsen.checker`.)"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from jepsen.checks_history import _Findings, _numbered, _read_lines
from jepsen.checks_replay import _Replay
from raftsched.protocol import task_key
from raftsched.spec.model import FailurePolicy, TaskSpec, runs_when_upstream_done
from raftsched.state.audit import TaskKey
from raftsched.state.model import (
    AttemptState,
    State,
)

# --- the ledger ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LedgerLine:
    line: int
    kind: str
    key: str
    fence: int
    job_id: str
    task_id: str
    attempt: int
    exit_code: int | None


def read_ledger(path: Path, found: _Findings) -> list[LedgerLine] | None:
    if not path.exists():
        found.note("no ledger.txt: the external side effects are not checked")
        return None
    lines = []
    for number, text, last in _numbered(_read_lines(path, "ledger")):
        parsed = _ledger_line(number, text)
        if parsed is None:
            if not last:
                found.violate("ledger_format", f"ledger line {number} is malformed: {text!r}")
            continue
        lines.append(parsed)
    return lines


def _ledger_line(number: int, text: str) -> LedgerLine | None:
    parts = text.split()
    if len(parts) not in (6, 7) or parts[0] not in ("start", "end"):
        return None
    if (parts[0] == "start") != (len(parts) == 6):
        return None
    try:
        fence, attempt = int(parts[2]), int(parts[5])
        exit_code = int(parts[6]) if len(parts) == 7 else None
    except ValueError:
        return None
    return LedgerLine(number, parts[0], parts[1], fence, parts[3], parts[4], attempt, exit_code)


class _LedgerCheck:
    """One pass over the ledger in its (real-time) order."""

    def __init__(self, lines: list[LedgerLine], run: _Replay, found: _Findings) -> None:
        self.run = run
        self.found = found
        self.lines = lines
        self.ends: dict[int, LedgerLine] = {}
        for entry in lines:
            if entry.kind == "end":
                self.ends.setdefault(entry.fence, entry)
        self.starts: dict[int, LedgerLine] = {}
        self.running: dict[TaskKey, dict[int, LedgerLine]] = {}
        """Started attempts whose end line comes later, per task."""
        self.succeeded: dict[TaskKey, dict[int, LedgerLine]] = {}
        """Fences with an `end ... 0` line so far, per task."""
        self.specs: dict[str, dict[str, TaskSpec]] = {}

    def run_all(self) -> None:
        for entry in self.lines:
            task = (entry.job_id, entry.task_id)
            if entry.kind == "start":
                self.found.report.ledger_starts += 1
                self._start(entry)
                self._overlap(entry, self.running.setdefault(task, {}))
                end = self.ends.get(entry.fence)
                if end is None:
                    self.found.report.ledger_unended += 1
                elif end.line > entry.line:
                    self.running[task][entry.fence] = entry
            else:
                self._end(entry)
                self.running.get(task, {}).pop(entry.fence, None)
                if entry.exit_code == 0:
                    self.succeeded.setdefault(task, {}).setdefault(entry.fence, entry)
        self._duplicates()

    def _start(self, entry: LedgerLine) -> None:
        found = self.found
        name = f"{entry.job_id}/{entry.task_id}"
        keys = (name, f"fence={entry.fence}")
        found.count("ledger_fence_once")
        first = self.starts.setdefault(entry.fence, entry)
        if first is not entry:
            found.violate("ledger_fence_once",
                          f"ledger lines {first.line} and {entry.line}: fence {entry.fence} of "
                          f"{name} started twice", keys=keys)
        assignment = self.run.auditor.assigned.get(entry.fence)
        if assignment is None and not self.run.complete and entry.fence > self.run.state.fence:
            return  # past the replayed part of the log
        found.count("ledger_fence_committed")
        problem = None
        if assignment is None:
            problem = "was never committed"
        elif (assignment.job_id, assignment.task_id) != (entry.job_id, entry.task_id):
            problem = f"was committed for {assignment.job_id}/{assignment.task_id} at log " \
                      f"index {assignment.index}"
        elif entry.key != (expected := _idempotency_key(self.run.state, entry)):
            problem = f"was committed at log index {assignment.index}, but the line's key is " \
                      f"{entry.key!r}, not {expected!r}"
        if problem is not None:
            found.violate("ledger_fence_committed",
                          f"ledger line {entry.line}: {name} started with fence {entry.fence}, "
                          f"which {problem}",
                          indices=() if assignment is None else (assignment.index,), keys=keys)
            return
        self._dag(entry)

    def _task_spec(self, job_id: str, task_id: str) -> tuple[TaskSpec, FailurePolicy] | None:
        created = self.run.auditor.created.get(job_id)
        if created is None:
            return None
        tasks = self.specs.get(job_id)
        if tasks is None:
            tasks = self.specs[job_id] = {t.id: t for t in created.spec.tasks}
        task = tasks.get(task_id)
        if task is None:  # a for_each instance (map[0]): its spec is in the replayed state
            job = self.run.state.jobs.get(job_id)
            index = None if job is None else job.index_of.get(task_id)
            if job is None or index is None:
                self.found.note(f"{job_id}/{task_id}: started in the ledger, but neither its "
                                f"job's spec nor the replayed state has that task: its DAG "
                                f"order is not checked")
                return None
            task = job.tasks[index].spec
        return task, created.spec.failure_policy

    def _unmet(self, job_id: str, dep: str) -> bool:
        """Upstream task `dep` has no successful end line yet; a `for_each` task (which never
        runs itself) has one when each of its instances has."""
        job = self.run.state.jobs.get(job_id)
        index = None if job is None else job.index_of.get(dep)
        instances = None if job is None or index is None else job.tasks[index].instances
        if job is None or instances is None:
            return not self.succeeded.get((job_id, dep))
        return any(not self.succeeded.get((job_id, job.tasks[i].spec.id)) for i in instances)

    def _dag(self, entry: LedgerLine) -> None:
        found = self.found
        spec = self._task_spec(entry.job_id, entry.task_id)
        if spec is None:
            return
        task, policy = spec
        found.count("ledger_dag_order")
        if runs_when_upstream_done(policy, task.trigger):
            return
        missing = [d for d in task.depends_on if self._unmet(entry.job_id, d)]
        if missing:
            found.violate("ledger_dag_order",
                          f"ledger line {entry.line}: {entry.job_id}/{entry.task_id} fence "
                          f"{entry.fence} started before upstream {', '.join(missing)} had a "
                          f"successful end line",
                          keys=(f"{entry.job_id}/{entry.task_id}", f"fence={entry.fence}"))

    def _overlap(self, entry: LedgerLine, running: dict[int, LedgerLine]) -> None:
        """`running`: this task's attempts started earlier whose end line comes later."""
        found = self.found
        found.count("ledger_overlap")
        for fence, earlier in running.items():
            if fence == entry.fence:
                continue  # the same fence twice is ledger_fence_once
            state = _attempt_state(self.run, earlier)
            if state is None:
                continue  # past the replayed part of the log: cannot be judged
            if state == AttemptState.LOST.name:
                found.report.duplicate_executions += 1
                continue
            found.violate("ledger_overlap",
                          f"ledger line {entry.line}: {entry.job_id}/{entry.task_id} fence "
                          f"{entry.fence} started while fence {fence} (started line "
                          f"{earlier.line}, ended line {self.ends[fence].line}) was running; "
                          f"fence {fence} ended {state} in the log, not LOST",
                          keys=(f"{entry.job_id}/{entry.task_id}", f"fence={fence}",
                                f"fence={entry.fence}"))

    def _end(self, entry: LedgerLine) -> None:
        found = self.found
        name = f"{entry.job_id}/{entry.task_id}"
        keys = (name, f"fence={entry.fence}")
        if entry.fence not in self.starts:
            found.violate("ledger_format", f"ledger line {entry.line}: fence {entry.fence} of "
                                           f"{name} ends without a start line before it",
                          keys=keys)
        elif self.ends[entry.fence] is not entry:
            found.count("ledger_fence_once")
            found.violate("ledger_fence_once",
                          f"ledger lines {self.ends[entry.fence].line} and {entry.line}: fence "
                          f"{entry.fence} of {name} ended twice", keys=keys)

    def _duplicates(self) -> None:
        found = self.found
        for (job_id, task_id), fences in self.succeeded.items():
            if len(fences) < 2:
                continue
            found.report.external_duplicate_effects += 1
            found.count("ledger_duplicate_effect")
            states = {f: _attempt_state(self.run, line) for f, line in fences.items()}
            if None in states.values():
                continue  # past the replayed part of the log: cannot be judged
            unlost = [f for f, s in states.items() if s != AttemptState.LOST.name]
            if len(unlost) > 1:
                found.violate("ledger_duplicate_effect",
                              f"{job_id}/{task_id} ended successfully {len(fences)} times "
                              f"(ledger lines {', '.join(str(x.line) for x in fences.values())}"
                              f"); fences {', '.join(f'{f} {states[f]}' for f in sorted(states))}"
                              f": more than one was not LOST",
                              keys=(f"{job_id}/{task_id}",
                                    *(f"fence={f}" for f in sorted(fences))))


def check_ledger(lines: list[LedgerLine], run: _Replay, found: _Findings) -> None:
    _LedgerCheck(lines, run, found).run_all()


def _idempotency_key(state: State, entry: LedgerLine) -> str:
    """The key the task was given (the gateway's: `protocol.task_key` of its job and task)."""
    return task_key(entry.job_id, entry.task_id)


def _attempt_state(run: _Replay, line: LedgerLine) -> str | None:
    """The attempt's final state in the replayed log; 'unknown' when the log has no such attempt
    (its own violation elsewhere); None when it may be past an incomplete replay."""
    job = run.state.jobs.get(line.job_id)
    index = None if job is None else job.index_of.get(line.task_id)
    if job is not None and index is not None:
        for attempt in job.tasks[index].attempts:
            if attempt.fence == line.fence:
                if attempt.live and not run.complete:
                    return None  # its end is past the replayed part of the log
                return attempt.state.name
    if not run.complete and line.fence > run.state.fence:
        return None
    return "unknown"
