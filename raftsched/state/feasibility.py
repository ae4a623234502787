"""The one feasibility rule: can this task go on this cluster, given the room it has free?

A task fits a cluster when the cluster is READY, neither draining nor degraded, owes no kill
directive it could not record (`Cluster.kills_unrecorded`), the task is not pinned to another
cluster, the cluster advertises every capability the task requires, and the
task's cpu, memory, gpu and named custom resources each fit in the cluster's free room. The
same rule serves three callers, so they cannot disagree:
- `assign.apply_assign_batch` re-validates each placement against the committed reservations;
- `placement.plan` asks it for every candidate and cluster, against the plan's tentative room
  (the committed room, capped by the agents' reported free capacity, minus what this plan has
  already placed there);
- the read views (`task explain`) show, per cluster, why a task does not fit right now.

`never_fits` is the rule against a cluster's totals whatever its state: what a submit is refused
for (no registered cluster could ever take the task), unless the job allows it to wait.

`unfit` is the rule itself. It builds nothing: it answers an `Unfit` member or None, so the
planner's hot loop allocates nothing whether the task fits or not. `explain` adds the human text
naming what is missing, built only when someone reads it (a dropped placement, `task explain`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from raftsched import limits
from raftsched.spec.model import TaskSpec
from raftsched.state.commands import ClusterStatus
from raftsched.state.model import Cluster

_READY = ClusterStatus.READY


class Unfit(enum.Enum):
    """Why a task does not fit a cluster: the first rule broken, in this order."""

    CLUSTER_NOT_READY = "cluster_not_ready"
    CLUSTER_DRAINING = "cluster_draining"
    CLUSTER_DEGRADED = "cluster_degraded"
    KILLS_UNRECORDED = "kills_unrecorded"
    """Its agent left MAX_KILL_DIRECTIVES_PER_CLUSTER kills unconfirmed and more were owed."""
    PINNED_ELSEWHERE = "pinned_elsewhere"
    MISSING_CAPABILITIES = "missing_capabilities"
    NO_ROOM = "no_room"
    """Some of cpu, memory or gpu exceeds the free room; `explain` names which."""


@dataclass(frozen=True, slots=True)
class Infeasible:
    reason: Unfit
    detail: str
    """For people: what is missing, e.g. `cluster east has no room: cpu_milli 4000 > 1500 free`."""


def committed_custom_free(cluster: Cluster) -> dict[str, int]:
    """Each custom resource the cluster offers, less what its live attempts hold."""
    reserved = cluster.reserved_custom
    return {name: total - reserved.get(name, 0) for name, total in cluster.custom.items()}


def _custom_short(spec: TaskSpec, free: Mapping[str, int]) -> bool:
    return any(count > free.get(name, 0) for name, count in spec.custom)


def unfit(spec: TaskSpec, cluster: Cluster, free_cpu_milli: int, free_memory_mb: int,
          free_gpu: int, now_ms: int,
          free_custom: Mapping[str, int] | None = None) -> Unfit | None:
    """The rule: why `spec` cannot go on `cluster` with this much room free, or None.
    `free_custom`: the custom resources free (default: the committed room's)."""
    if cluster.status != _READY:
        return Unfit.CLUSTER_NOT_READY
    if cluster.draining:
        return Unfit.CLUSTER_DRAINING
    if cluster.degraded_until_ms > now_ms:
        return Unfit.CLUSTER_DEGRADED
    if cluster.kills_unrecorded:
        return Unfit.KILLS_UNRECORDED
    if spec.cluster is not None and spec.cluster != cluster.id:
        return Unfit.PINNED_ELSEWHERE
    if spec.requires and not cluster.capabilities.issuperset(spec.requires):
        return Unfit.MISSING_CAPABILITIES
    if (spec.cpu_milli > free_cpu_milli or spec.memory_mb > free_memory_mb
            or spec.gpu > free_gpu):
        return Unfit.NO_ROOM
    if spec.custom and _custom_short(
            spec, committed_custom_free(cluster) if free_custom is None else free_custom):
        return Unfit.NO_ROOM
    return None


def unfit_committed(spec: TaskSpec, cluster: Cluster, now_ms: int) -> Unfit | None:
    """The rule against the committed reservations (what apply re-validates)."""
    return unfit(spec, cluster, cluster.cpu_milli - cluster.reserved_cpu_milli,
                 cluster.memory_mb - cluster.reserved_memory_mb,
                 cluster.gpu - cluster.reserved_gpu, now_ms)


def queue_places(cluster: Cluster) -> int:
    """Places free in the cluster's agent's local queue: its depth less the attempts queued
    there, those being withdrawn not counted."""
    return cluster.queue_depth - len(cluster.queued) + len(cluster.withdrawing)


def fits_queue(spec: TaskSpec, cluster: Cluster, now_ms: int) -> bool:
    """Late binding: the cluster's agent may hold `spec` in its local queue — a queue place is
    free (`Cluster.queued` below `queue_depth`), the cluster is not overcommitted, the rule
    holds against its whole capacity (READY, open, capabilities, pins; it fits it empty), and
    the task asks for no custom resource: only the scheduler counts those (the agent checks
    cpu, memory and gpu before a start), so such a task goes only into committed room."""
    return not spec.custom and queue_places(cluster) > 0 and not cluster.overcommitted and unfit(
        spec, cluster, cluster.cpu_milli, cluster.memory_mb, cluster.gpu, now_ms,
        cluster.custom) is None


def explain_queue(spec: TaskSpec, cluster: Cluster, now_ms: int) -> Infeasible:
    """Why `spec` may not go to the cluster's local queue (`fits_queue` is False): what the
    cluster lacks even empty, a custom resource, an overcommitted cluster, or a full queue."""
    whole = explain(spec, cluster, cluster.cpu_milli, cluster.memory_mb, cluster.gpu, now_ms,
                    cluster.custom)
    if whole is not None:
        return whole
    if spec.custom:
        return Infeasible(Unfit.NO_ROOM, "a task asking for a custom resource is never queued")
    if cluster.overcommitted:
        return Infeasible(Unfit.NO_ROOM, f"cluster {cluster.id} is overcommitted: no new work "
                                         "until reports commit")
    return Infeasible(Unfit.NO_ROOM, f"cluster {cluster.id}'s local queue is full "
                                     f"({len(cluster.queued)} of queue_depth="
                                     f"{cluster.queue_depth})")


def explain(spec: TaskSpec, cluster: Cluster, free_cpu_milli: int, free_memory_mb: int,
            free_gpu: int, now_ms: int,
            free_custom: Mapping[str, int] | None = None) -> Infeasible | None:
    """`unfit` with the text naming what is missing; None when the task fits."""
    custom_free = committed_custom_free(cluster) if free_custom is None else free_custom
    reason = unfit(spec, cluster, free_cpu_milli, free_memory_mb, free_gpu, now_ms, custom_free)
    if reason is None:
        return None
    if reason is Unfit.CLUSTER_NOT_READY:
        detail = f"cluster {cluster.id} is {cluster.status.name}"
    elif reason is Unfit.CLUSTER_DRAINING:
        why = f" ({cluster.drain_reason})" if cluster.drain_reason else ""
        detail = f"cluster {cluster.id} is draining{why}: it takes no new work"
    elif reason is Unfit.CLUSTER_DEGRADED:
        detail = (f"cluster {cluster.id} is degraded (attempts of many tasks failed there) "
                  f"until {cluster.degraded_until_ms} ms")
    elif reason is Unfit.KILLS_UNRECORDED:
        detail = kills_unrecorded_detail(cluster)
    elif reason is Unfit.PINNED_ELSEWHERE:
        detail = f"task is pinned to cluster {spec.cluster}"
    elif reason is Unfit.MISSING_CAPABILITIES:
        missing = sorted(set(spec.requires) - cluster.capabilities)
        detail = f"cluster {cluster.id} lacks capabilities {missing}"
    else:
        short = [f"{name} {needed} > {free} free" for name, needed, free in (
            ("cpu_milli", spec.cpu_milli, free_cpu_milli),
            ("memory_mb", spec.memory_mb, free_memory_mb),
            ("gpu", spec.gpu, free_gpu),
            *((f"custom {name}", count, custom_free.get(name, 0)) for name, count in spec.custom),
        ) if needed > free]
        detail = f"cluster {cluster.id} has no room: {', '.join(short)}"
    return Infeasible(reason, detail)


def kills_unrecorded_detail(cluster: Cluster) -> str:
    """Why a cluster whose agent does not confirm kills takes no new work."""
    return (f"cluster {cluster.id} owes {cluster.kills_unrecorded} kill directive(s) it could not "
            f"record: its agent left {len(cluster.kills)} unconfirmed (the bound "
            f"MAX_KILL_DIRECTIVES_PER_CLUSTER={limits.MAX_KILL_DIRECTIVES_PER_CLUSTER}); no new "
            "work until the agent confirms kills and registers again")


def explain_committed(spec: TaskSpec, cluster: Cluster, now_ms: int) -> Infeasible | None:
    """`explain` against the committed reservations."""
    return explain(spec, cluster, cluster.cpu_milli - cluster.reserved_cpu_milli,
                   cluster.memory_mb - cluster.reserved_memory_mb,
                   cluster.gpu - cluster.reserved_gpu, now_ms)


def never_fits(spec: TaskSpec, cluster: Cluster) -> bool:
    """The task could not go on this cluster even empty, whatever its state: pinned elsewhere,
    a capability missing, or more cpu, memory or gpu than it has in all."""
    return ((spec.cluster is not None and spec.cluster != cluster.id)
            or not cluster.capabilities.issuperset(spec.requires)
            or spec.cpu_milli > cluster.cpu_milli or spec.memory_mb > cluster.memory_mb
            or spec.gpu > cluster.gpu
            or (bool(spec.custom) and _custom_short(spec, cluster.custom)))


def shortfall(spec: TaskSpec, cluster: Cluster) -> tuple[int, float, str]:
    """How far `cluster`, empty, is from taking the task: (capabilities missing, the sum of
    the resources' shortfalls as fractions of what the task asks, the words). Smaller is
    closer; (0, 0.0, ...) when it fits."""
    if spec.cluster is not None and spec.cluster != cluster.id:
        return 1_000_000, 0.0, f"the task is pinned to {spec.cluster}"
    missing = sorted(set(spec.requires) - cluster.capabilities)
    parts = [f"lacks capabilities {missing}"] if missing else []
    short = 0.0
    for name, needed, has in (("cpu_milli", spec.cpu_milli, cluster.cpu_milli),
                              ("memory_mb", spec.memory_mb, cluster.memory_mb),
                              ("gpu", spec.gpu, cluster.gpu),
                              *((f"custom {name}", count, cluster.custom.get(name, 0))
                                for name, count in spec.custom)):
        if needed > has:
            short += (needed - has) / needed
            parts.append(f"has {name} {has} of {needed} (short by {needed - has})")
    return len(missing), short, "; ".join(parts)


def unschedulable(spec: TaskSpec, clusters: Iterable[Cluster]) -> str | None:
    """Why no registered cluster (whatever its state) could ever take the task, naming what it
    needs and the closest cluster's shortfall; None when one could."""
    closest: tuple[int, float, str, str] | None = None
    for cluster in clusters:
        if not never_fits(spec, cluster):
            return None
        missing, short, words = shortfall(spec, cluster)
        if closest is None or (missing, short, cluster.id) < (*closest[:2], closest[3]):
            closest = (missing, short, words, cluster.id)
    needs = (f"needs cpu_milli {spec.cpu_milli}, memory_mb {spec.memory_mb}, gpu {spec.gpu}"
             + (f", capabilities {list(spec.requires)}" if spec.requires else "")
             + (f", custom {dict(spec.custom)}" if spec.custom else "")
             + (f", cluster {spec.cluster}" if spec.cluster is not None else ""))
    if closest is None:
        return f"{needs}, and no cluster is registered"
    return f"{needs}; no registered cluster could ever take it: the closest, " \
           f"{closest[3]}, {closest[2]}"


def fits_room(spec: TaskSpec, cluster: Cluster) -> bool:
    """`spec`'s cpu, memory, gpu and custom resources fit the cluster's committed room (the
    resources alone: not its state, capabilities or pins)."""
    return (spec.cpu_milli <= cluster.cpu_milli - cluster.reserved_cpu_milli
            and spec.memory_mb <= cluster.memory_mb - cluster.reserved_memory_mb
            and spec.gpu <= cluster.gpu - cluster.reserved_gpu
            and not (spec.custom and _custom_short(spec, committed_custom_free(cluster))))


def within_capacity(cluster: Cluster) -> bool:
    """The committed reservations fit the cluster's capacity (false only after a
    re-registration shrank a cluster below what its live attempts hold: `overcommitted`)."""
    return (cluster.reserved_cpu_milli <= cluster.cpu_milli
            and cluster.reserved_memory_mb <= cluster.memory_mb
            and cluster.reserved_gpu <= cluster.gpu
            and all(held <= cluster.custom.get(name, 0)
                    for name, held in cluster.reserved_custom.items()))
