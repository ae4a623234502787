"""Fences and attempts on the agents' side: the agents' logs against the replay. (Part of
`jepsen.checker`.)"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from jepsen.checks_history import CheckError, _Findings
from jepsen.checks_replay import _Replay
from raftsched.eventlog import Event, read_events

# --- agent logs ---------------------------------------------------------------------------------


def check_agent_logs(logs_dir: Path, run: _Replay, found: _Findings,
                     keep: Callable[[Event], bool] | None = None) -> None:
    """Agent starts against the committed log, read through the shared event-log parser. With
    `keep` (several groups): only the events it keeps, those of the group `run` replays (a
    fence is one group's: it is compared only with that group's)."""
    started: dict[int, str] = {}
    try:
        paths = sorted(logs_dir.glob("agent-*.log"))
    except OSError:
        paths = []
    if not paths:
        found.note("no logs/agent-*.log: agent starts are not checked")
    unparsed = 0
    for path in paths:
        cluster_id = path.name[len("agent-"):-len(".log")]
        try:
            for event in read_events(path, ("attempt_started", "stale_fence_rejected")):
                if keep is not None and not keep(event):
                    continue
                if event.name == "stale_fence_rejected":
                    found.report.stale_fence_rejections += 1
                elif not _agent_start(event, cluster_id, started, run, found):
                    unparsed += 1
        except OSError as error:
            raise CheckError(f"{path}: cannot read: {error}") from None
    if unparsed:
        found.note(f"{unparsed} attempt_started events without fence/job/task: not checked")


AGENT_EVENTS = ("agent_registered", "attempt_started", "attempt_adopted", "attempt_finished",
                "stale_fence_rejected", "report_verdict")
"""Agent log events the runner copies into the history."""


def agent_events(logs_dir: Path) -> Iterator[dict[str, Any]]:
    """Every AGENT_EVENTS event of every logs/agent-<cluster>.log: {"cluster", "event", "where"
    (file:line), "ts" (the agent's wall clock), and the event's fields}. Unreadable files are
    skipped."""
    for path in sorted(logs_dir.glob("agent-*.log")):
        cluster_id = path.name[len("agent-"):-len(".log")]
        try:
            for event in read_events(path, AGENT_EVENTS):
                yield {**event.fields, "cluster": cluster_id, "event": event.name,
                       "where": event.where, "ts": event.ts}
        except OSError:
            continue


def _agent_start(event: Event, cluster_id: str, started: dict[int, str], run: _Replay,
                 found: _Findings) -> bool:
    job_id, task_id = event.fields.get("job"), event.fields.get("task")
    fence = event.fields.get("fence")
    where = event.where
    if type(fence) is not int or not isinstance(job_id, str) or not isinstance(task_id, str) \
            or not job_id or not task_id:
        return False
    keys = (f"{job_id}/{task_id}", f"fence={fence}", f"cluster={cluster_id}")
    found.count("agent_start_once")
    first = started.setdefault(fence, where)
    if first != where:
        found.violate("agent_start_once", f"{where}: agent {cluster_id} started fence {fence} "
                                          f"of {job_id}/{task_id}, already started at {first}",
                      keys=keys)
    assignment = run.auditor.assigned.get(fence)
    if assignment is None and not run.complete and fence > run.state.fence:
        return True
    found.count("agent_start_assigned")
    if assignment is None or (assignment.job_id, assignment.task_id, assignment.cluster_id) \
            != (job_id, task_id, cluster_id):
        committed = "was never committed" if assignment is None else \
            f"was committed to {assignment.cluster_id} for {assignment.job_id}/" \
            f"{assignment.task_id} at log index {assignment.index}"
        found.violate("agent_start_assigned",
                      f"{where}: agent {cluster_id} started fence {fence} of {job_id}/"
                      f"{task_id}, which {committed}",
                      indices=() if assignment is None else (assignment.index,), keys=keys)
    return True
