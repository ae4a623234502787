"""Pure placement: which RUNNABLE tasks go to which cluster now.

`plan(state, max_items=…)` reads the committed state and returns placements for an ASSIGN_BATCH;
it never mutates the state, reads no clock and draws no randomness. The leader proposes what it
returns, and the state machine re-validates every item at apply (so a plan made against a
slightly old state is safe: stale parts are dropped, never applied).

Order: tenants take turns (round-robin, one task each per turn, in tenant-name order — a
placeholder for weighted fair share), and inside a tenant the ready queue order (priority, then
submission order). A task that fits nowhere is skipped, not waited on, so it cannot block the
queue behind it; the scan is bounded by `limits.MAX_PLACEMENT_SCAN`. Planning costs what it
places, not what waits: it stops as soon as no cluster has the cpu any task needs
(`limits.MIN_CPU_MILLI`), and once a task of some shape (resources, capabilities, pin) fitted
nowhere, the rest of that shape's queue is passed over whole (rooms only shrink during a plan;
the ready queues are kept per shape, `model.ReadyQueue`). So a long queue in front of full
clusters, or a backlog no cluster can take, costs a few steps per plan, not a walk of the queue.

Cluster choice: among the clusters the task fits (`feasibility.unfit`, the rule apply
re-validates with), the one with the most free CPU after the tentative reservations of this plan
(spreads load; ties go to the first cluster id).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from raftsched import limits
from raftsched.spec.job import TaskSpec
from raftsched.state.commands import ClusterStatus, Placement
from raftsched.state.feasibility import unfit
from raftsched.state.fsm import iter_ready
from raftsched.state.model import Cluster, Job, State, Task, TaskShape, shape_of

Free = tuple[int, int, int]
"""(cpu milli, memory MB, gpu) a cluster can still take."""


@dataclass(slots=True)
class _Room:
    """A cluster's room as this plan sees it: committed, capped by the agent's reported free
    capacity, minus what the plan already put there."""

    cluster: Cluster
    cpu_milli: int
    memory_mb: int
    gpu: int

    def take(self, spec: TaskSpec) -> None:
        self.cpu_milli -= spec.cpu_milli
        self.memory_mb -= spec.memory_mb
        self.gpu -= spec.gpu


def plan(state: State, *, max_items: int = limits.MAX_BATCH_ITEMS,
         reported_free: Mapping[str, Free] | None = None,
         releasing: Mapping[str, Mapping[int, Free]] | None = None) -> list[Placement]:
    """Placements for up to `max_items` ready tasks. `reported_free` (the agents' last reported
    free capacity, soft state on the leader) further limits a cluster below its committed room.
    `releasing` (cluster -> fence -> resources) is room that reports already in the log will
    free when they apply: counted while its attempt is still live in `state`, never twice."""
    rooms = _rooms(state, reported_free or {}, releasing or {})
    if not rooms:
        return []
    placements: list[Placement] = []
    unplaceable: set[TaskShape] = set()
    """Shapes that fit nowhere in this plan's rooms (which only shrink as it places): the walk
    passes over the rest of each such shape's queue without looking at it."""
    open_rooms = sum(1 for room in rooms if room.cpu_milli >= limits.MIN_CPU_MILLI)
    candidates = itertools.islice(_round_robin(state, unplaceable), limits.MAX_PLACEMENT_SCAN)
    while len(placements) < max_items and open_rooms > 0:
        candidate = next(candidates, None)
        if candidate is None:
            break
        job, task = candidate
        spec = task.spec
        room = _choose(rooms, spec)
        if room is None:
            unplaceable.add(shape_of(spec))
            continue
        room.take(spec)
        if room.cpu_milli < limits.MIN_CPU_MILLI:
            open_rooms -= 1  # it had room for this task, so it was open before
        placements.append(Placement(job.id, spec.id, room.cluster.id))
    return placements


def _rooms(state: State, reported_free: Mapping[str, Free],
           releasing: Mapping[str, Mapping[int, Free]]) -> list[_Room]:
    rooms = []
    for cluster in sorted(state.clusters.values(), key=lambda c: c.id):
        if cluster.status != ClusterStatus.READY:
            continue
        cpu = cluster.cpu_milli - cluster.reserved_cpu_milli
        memory = cluster.memory_mb - cluster.reserved_memory_mb
        gpu = cluster.gpu - cluster.reserved_gpu
        for fence, (free_cpu, free_memory, free_gpu) in releasing.get(cluster.id, {}).items():
            if fence in cluster.live:  # its release is not applied yet
                cpu, memory, gpu = cpu + free_cpu, memory + free_memory, gpu + free_gpu
        if cluster.id in reported_free:
            free_cpu, free_memory, free_gpu = reported_free[cluster.id]
            cpu, memory, gpu = min(cpu, free_cpu), min(memory, free_memory), min(gpu, free_gpu)
        rooms.append(_Room(cluster, cpu, memory, gpu))
    return rooms


def _choose(rooms: list[_Room], spec: TaskSpec) -> _Room | None:
    """The room with the most free cpu among those the task fits (`feasibility.unfit`)."""
    best: _Room | None = None
    for room in rooms:
        if best is not None and room.cpu_milli <= best.cpu_milli:
            continue  # cannot win: skip the rule
        if unfit(spec, room.cluster, room.cpu_milli, room.memory_mb, room.gpu) is None:
            best = room
    return best


def _round_robin(state: State, skip: set[TaskShape]) -> Iterator[tuple[Job, Task]]:
    iterators = [iter_ready(state, tenant, skip) for tenant in sorted(state.queues)
                 if state.queues[tenant].live > 0]
    while iterators:
        still = []
        for iterator in iterators:
            item = next(iterator, None)
            if item is not None:
                yield item
                still.append(iterator)
        iterators = still
