"""What the agents really ran, against their capacity, and their local queues (late binding).
(Part of `jepsen.checker`.)

Read from `logs/agent-<cluster>.log` in file order (one file per cluster; a restarted agent
appends to it):
- agent_capacity: at every `attempt_started`, the attempts the agent holds running (started or
  adopted, not yet `attempt_finished`) fit its capacity — cpu, memory and gpu summed over their
  tasks' resources (from the replayed state) within the cluster's registered capacity (from the
  replayed state, else meta.json's `agents`). An `agent_starting` line begins a new process: it
  holds only what it then logs as `attempt_adopted`.
- queued_start_once: a fence the agent logged `attempt_queued` is started (`attempt_started`, in
  any agent's log) at most once, and never after it left the queue unstarted
  (`attempt_withdrawn_from_queue`, or `attempt_queued_at_restart`: the queue is not kept across a
  restart).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jepsen.checks_history import CheckError, _Findings
from jepsen.checks_replay import _Replay
from raftsched.eventlog import Event, read_events

EVENTS = ("agent_starting", "attempt_started", "attempt_adopted", "attempt_finished",
          "attempt_queued", "attempt_withdrawn_from_queue", "attempt_queued_at_restart")
LEFT_QUEUE = ("attempt_withdrawn_from_queue", "attempt_queued_at_restart")

Need = tuple[int, int, int]
"""(cpu_milli, memory_mb, gpu)."""


@dataclass
class _Queues:
    """Every agent's queued fences, across the logs: fence -> where it was queued / left."""
    queued: dict[int, str] = field(default_factory=dict)
    left: dict[int, str] = field(default_factory=dict)
    started: dict[int, str] = field(default_factory=dict)


def check_capacity(logs_dir: Path, run: _Replay, found: _Findings,
                   keep: Callable[[Event], bool] | None = None) -> None:
    """With `keep` (several groups): only queued_start_once, over the events it keeps, those
    of the group `run` replays (a fence is one group's); agent_capacity is then judged over
    every group's attempts at once by `check_capacity_across`."""
    try:
        paths = sorted(logs_dir.glob("agent-*.log"))
    except OSError:
        paths = []
    capacities = _meta_capacities(logs_dir.parent / "meta.json")
    queues = _Queues()
    for path in paths:
        cluster_id = path.name[len("agent-"):-len(".log")]
        capacity = _capacity(run, cluster_id, capacities)
        try:
            events = [e for e in read_events(path, EVENTS)
                      if keep is None or e.name == "agent_starting" or keep(e)]
        except OSError as error:
            raise CheckError(f"{path}: cannot read: {error}") from None
        if keep is not None:
            pass
        elif capacity is None:
            found.note(f"agent {cluster_id}: no registered capacity: agent_capacity not checked")
        else:
            _check_running(events, cluster_id, capacity, lambda e: _need(run, e), found)
        for event in events:
            _follow_queue(event, queues, found)


def check_capacity_across(logs_dir: Path, runs: dict[int, _Replay],
                          group_of: Callable[[Event], int | None], found: _Findings) -> None:
    """agent_capacity for a run of several groups: an agent serves every group, so what it runs
    at once is every group's attempts, each keyed by (group, fence) (two groups issue the
    same fence numbers), its resources from its group's replay. `group_of`: an event's group
    (None: in no group's log, left out)."""
    try:
        paths = sorted(logs_dir.glob("agent-*.log"))
    except OSError:
        paths = []
    capacities = _meta_capacities(logs_dir.parent / "meta.json")

    def need(event: Event) -> Need | None:
        group = group_of(event)
        return None if group is None or group not in runs else _need(runs[group], event)

    def key(event: Event) -> tuple[int, int]:
        group = group_of(event)
        return -1 if group is None else group, int(event.fields["fence"])

    for path in paths:
        cluster_id = path.name[len("agent-"):-len(".log")]
        # the agent's own capacity (meta.json: what the harness started it with), which every
        # group's attempts share; a group's registration is the fallback
        capacity = capacities.get(cluster_id) or next(
            (c for c in (_capacity(run, cluster_id, {}) for run in runs.values())
             if c is not None), None)
        try:
            events = list(read_events(path, EVENTS))
        except OSError as error:
            raise CheckError(f"{path}: cannot read: {error}") from None
        if capacity is None:
            found.note(f"agent {cluster_id}: no registered capacity: agent_capacity not checked")
        else:
            _check_running(events, cluster_id, capacity, need, found, key)


def _meta_capacities(meta: Path) -> dict[str, Need]:
    try:
        agents = json.loads(meta.read_text()).get("agents") or {}
    except (OSError, ValueError, AttributeError):
        return {}
    return {cid: (round(float(a.get("cpu", 0)) * 1000), int(a.get("memory_mb", 0)),
                  int(a.get("gpu", 0))) for cid, a in agents.items() if isinstance(a, dict)}


def _capacity(run: _Replay, cluster_id: str, from_meta: dict[str, Need]) -> Need | None:
    cluster = run.state.clusters.get(cluster_id)
    if cluster is not None:
        return cluster.cpu_milli, cluster.memory_mb, cluster.gpu
    return from_meta.get(cluster_id)


def _need(run: _Replay, event: Event) -> Need | None:
    """The resources of the event's task, from the replayed state (None: not known there)."""
    job = run.state.jobs.get(str(event.fields.get("job", "")))
    index = job.index_of.get(str(event.fields.get("task", ""))) if job is not None else None
    if job is None or index is None:
        return None
    spec = job.tasks[index].spec
    return spec.cpu_milli, spec.memory_mb, spec.gpu


def _check_running(events: list[Event], cluster_id: str, capacity: Need,
                   need_of: Callable[[Event], Need | None], found: _Findings,
                   key_of: Callable[[Event], tuple[int, int]] | None = None) -> None:
    """`key_of`: an attempt's key on the agent (with several groups, (group, fence)); else its
    fence."""
    running: dict[Any, Need] = {}
    unknown = 0
    for event in events:
        fence = event.fields.get("fence")
        if event.name == "agent_starting":
            running.clear()
        elif type(fence) is not int:
            continue
        elif event.name == "attempt_finished":
            running.pop(fence if key_of is None else key_of(event), None)
        elif event.name in ("attempt_started", "attempt_adopted"):
            need = need_of(event)
            if need is None:
                unknown += 1
                continue
            running[fence if key_of is None else key_of(event)] = need
            if event.name == "attempt_started":
                _judge(event, cluster_id, capacity, running, found)
    if unknown:
        found.note(f"agent {cluster_id}: {unknown} attempts of tasks the replay does not hold: "
                   f"left out of agent_capacity")


def _judge(event: Event, cluster_id: str, capacity: Need, running: dict[Any, Need],
           found: _Findings) -> None:
    found.count("agent_capacity")
    held = tuple(sum(need[i] for need in running.values()) for i in range(3))
    if all(held[i] <= capacity[i] for i in range(3)):
        return
    found.violate("agent_capacity",
                  f"{event.where}: agent {cluster_id} started fence {event.fields.get('fence')} "
                  f"and then ran {len(running)} attempts at once holding cpu_milli {held[0]}, "
                  f"memory_mb {held[1]}, gpu {held[2]}: more than its capacity cpu_milli "
                  f"{capacity[0]}, memory_mb {capacity[1]}, gpu {capacity[2]} (fences "
                  f"{', '.join(map(_fence_text, sorted(running)))})",
                  keys=(f"cluster={cluster_id}", f"fence={event.fields.get('fence')}"))


def _fence_text(key: Any) -> str:
    """A running attempt's key: its fence, or (group, fence) as "FENCE (group G)"."""
    return str(key) if isinstance(key, int) else f"{key[1]} (group {key[0]})"


def _follow_queue(event: Event, queues: _Queues, found: _Findings) -> None:
    fence = event.fields.get("fence")
    if type(fence) is not int:
        return
    if event.name == "attempt_queued":
        queues.queued.setdefault(fence, event.where)
    elif event.name in LEFT_QUEUE:
        queues.left.setdefault(fence, event.where)
    elif event.name == "attempt_started" and fence in queues.queued:
        found.count("queued_start_once")
        keys = (f"fence={fence}", f"{event.fields.get('job')}/{event.fields.get('task')}")
        if fence in queues.started:
            found.violate("queued_start_once",
                          f"{event.where}: queued fence {fence} (queued at "
                          f"{queues.queued[fence]}) started again, first at "
                          f"{queues.started[fence]}", keys=keys)
        elif fence in queues.left:
            found.violate("queued_start_once",
                          f"{event.where}: queued fence {fence} started after it left the queue "
                          f"unstarted at {queues.left[fence]}", keys=keys)
        queues.started.setdefault(fence, event.where)
