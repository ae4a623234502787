"""Task data (issue 26): the outputs the replayed state keeps, against the attempts that wrote
them and the fan-out jobs' arithmetic. (Part of `jepsen.checker`.)

outputs_from_succeeded_fence, one property in two parts:
- on the replay (after each applied report batch, for the tasks it names, and on the final
  state for every task): every output kept on an attempt belongs to a SUCCEEDED attempt, and its
  `"fence"` field (the workload's tasks write their own $RAFTSCHED_FENCE into every output)
  equals that attempt's fence;
- on the final state, for each acknowledged fan-out job (`jepsen.workload.make_fanout_job`):
  a SUCCEEDED `ls` kept the items its submit described; `map` expanded into one instance per
  item; a SUCCEEDED instance `map[i]` kept item i; a SUCCEEDED `reduce` kept the count and sum of
  the items.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jepsen.checks_history import Op, _dict, _Findings
from raftsched.state import commands as c
from raftsched.state.model import AttemptState, Job, State, Task, TaskState

if TYPE_CHECKING:
    from jepsen.checks_replay import _Replay

CHECK = "outputs_from_succeeded_fence"


@dataclass
class OutputsAudit:
    """The replay's part: kept outputs judged as the log is applied."""

    judged: set[tuple[str, str, int]] = field(default_factory=set)
    """(job, task, fence) of the kept outputs already judged (each judged, counted and reported
    once, though they stay in the state)."""

    def after(self, index: int, command: c.Command, state: State, found: _Findings) -> None:
        """After applying `command` at log `index`: the tasks a report batch names."""
        if not isinstance(command, c.ReportBatch):
            return
        for report in command.items:
            job = state.jobs.get(report.job_id)
            position = None if job is None else job.index_of.get(report.task_id)
            if job is not None and position is not None:
                self._task(index, job, job.tasks[position], found)

    def finish(self, index: int, state: State, found: _Findings) -> None:
        """The final replayed state: every task of every job."""
        for job in state.jobs.values():
            for task in job.tasks:
                self._task(index, job, task, found)

    def _task(self, index: int, job: Job, task: Task, found: _Findings) -> None:
        for attempt in task.attempts:
            key = (job.id, task.spec.id, attempt.fence)
            if attempt.outputs is None or key in self.judged:
                continue
            self.judged.add(key)
            found.count(CHECK)
            problem = _problem(attempt.state, attempt.fence, attempt.outputs)
            if problem:
                found.violate(CHECK, f"log index {index}: {job.id}/{task.spec.id} attempt "
                                     f"{attempt.number} (fence {attempt.fence}, "
                                     f"{attempt.state.name}) keeps outputs {problem}",
                              indices=(index,), keys=(f"{job.id}/{task.spec.id}",
                                                      f"fence={attempt.fence}"))


def _problem(state: AttemptState, fence: int, text: str) -> str:
    """Why these kept outputs may not be there ("" when they may)."""
    try:
        value = json.loads(text)
    except ValueError:
        return f"that are not JSON: {text[:80]!r}"
    if state != AttemptState.SUCCEEDED:
        return f"although it did not succeed: {text[:80]}"
    if not isinstance(value, dict) or value.get("fence") != fence:
        written = value.get("fence") if isinstance(value, dict) else None
        return f"written by fence {written!r}, not its own: {text[:80]}"
    return ""


# --- fan-out jobs ---------------------------------------------------------------------------------


def check_fanouts(ops: list[Op], run: _Replay, found: _Findings) -> None:
    """Each acknowledged fan-out job's kept outputs against the items its submit described."""
    if run.broken:
        return
    items_of: dict[str, list[int]] = {}
    for op in ops:
        fanout = _dict(op.value().get("fanout"))
        items = fanout.get("items")
        if op.f == "submit" and op.outcome == "ok" and isinstance(items, list):
            items_of[str(op.result().get("job_id"))] = items
    for job_id, items in sorted(items_of.items()):
        job = run.state.jobs.get(job_id)
        if job is not None:
            for problem in _fanout_problems(job, items, found):
                found.violate(CHECK, f"fan-out job {job_id} (items {items}): {problem}",
                              keys=(job_id,))


def _fanout_problems(job: Job, items: list[int], found: _Findings) -> list[str]:
    kept = {task.spec.id: _kept(task) for task in job.tasks}
    problems = [f"{task.spec.id} SUCCEEDED but keeps no outputs" for task in job.tasks
                if task.state == TaskState.SUCCEEDED and task.instances is None
                and kept[task.spec.id] is None]
    if "ls" in kept and kept["ls"] is not None:
        found.count(CHECK)
        if kept["ls"].get("items") != items:
            problems.append(f"ls kept items {kept['ls'].get('items')!r}")
    mapper = job.tasks[job.index_of["map"]] if "map" in job.index_of else None
    if mapper is not None and mapper.instances is not None:
        found.count(CHECK)
        if len(mapper.instances) != len(items):
            problems.append(f"map expanded into {len(mapper.instances)} instances")
        for position, task_index in enumerate(mapper.instances):
            instance = job.tasks[task_index]
            outputs = kept.get(instance.spec.id)
            if outputs is None or position >= len(items):
                continue
            found.count(CHECK)
            if (outputs.get("item"), outputs.get("value")) != (str(items[position]),
                                                               items[position]):
                problems.append(f"{instance.spec.id} kept {outputs}")
    reduce = kept.get("reduce")
    if reduce is not None:
        found.count(CHECK)
        if (reduce.get("count"), reduce.get("sum")) != (len(items), sum(items)):
            problems.append(f"reduce kept count {reduce.get('count')!r} and sum "
                            f"{reduce.get('sum')!r}, not {len(items)} and {sum(items)}")
    return problems


def _kept(task: Task) -> dict[str, Any] | None:
    """The outputs a SUCCEEDED task keeps on its succeeding attempt (None: none)."""
    if task.state != TaskState.SUCCEEDED:
        return None
    for attempt in reversed(task.attempts):
        if attempt.state == AttemptState.SUCCEEDED and attempt.outputs is not None:
            try:
                value = json.loads(attempt.outputs)
            except ValueError:
                return None  # not JSON: the replay's part reports it
            return value if isinstance(value, dict) else None
    return None
