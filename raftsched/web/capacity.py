"""What the /clusters and /tenants pages show, computed from the API's answers (pure: no I/O).

Clusters, per resource (cpu, memory, gpu, each custom resource):
- capacity (what the agent registered), committed (what live attempts reserve, in the
  replicated state), committed free (capacity - committed), and reported free (what the agent
  last said it can still admit, in a heartbeat to the leader: soft state the leader alone keeps;
  None when unknown: a follower answered, no heartbeat yet, or a custom resource, which
  heartbeats do not carry);
- unusable: capacity that cannot take work now. A cluster that takes no new work (SUSPECT, LOST,
  draining, degraded, owing unrecorded kills) has all its committed-free room unusable; an open
  one has the part of its committed-free room its agent does not report free (committed free -
  reported free, when positive: held outside the scheduler, or by attempts whose end is not yet
  committed); None when that cannot be known.

Tenants: fair share = the tenant's weight / the sum of the weights of the tenants with work
(queued or running tasks), none for a tenant without work. Share = its dominant share: the
largest fraction of the READY clusters' cpu, memory or gpu its live attempts reserve (the API's
`dominant_share` is that fraction / weight; here it is multiplied back). Standing: "over" above
fair share by more than STANDING_TOLERANCE of it, "under" below by more, else "at"."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

BAR_PX = 160
"""Width of a capacity bar on /clusters."""
STANDING_TOLERANCE = 0.1
"""A tenant within this fraction of its fair share is "at" it (placement moves in whole tasks)."""
ALL_TENANTS = "*"


@dataclass(frozen=True, slots=True)
class Bar:
    """Pixel widths of a bar's parts, in order: committed, unusable, usable free."""
    committed_px: int
    unusable_px: int
    free_px: int


@dataclass(frozen=True, slots=True)
class ResourceRow:
    name: str
    """cpu (in milli-CPU), memory (in MB), gpu, or a custom resource's name."""
    capacity: int
    committed: int
    reported_free: int | None
    unusable: int | None

    def show(self, value: int | None) -> str:
        """An amount of this resource as a reader wants it ("unknown" for None)."""
        if value is None:
            return "unknown"
        if self.name == "cpu":
            return f"{value / 1000:g} CPU"
        if self.name == "memory":
            return f"{value:,} MB"
        return str(value)

    @property
    def committed_free(self) -> int:
        return max(0, self.capacity - self.committed)

    @property
    def bar(self) -> Bar:
        if self.capacity <= 0:
            return Bar(0, 0, 0)
        committed = min(self.committed, self.capacity)
        unusable = min(self.unusable or 0, self.capacity - committed)
        committed_px = round(BAR_PX * committed / self.capacity)
        unusable_px = round(BAR_PX * unusable / self.capacity)
        return Bar(committed_px, unusable_px, max(0, BAR_PX - committed_px - unusable_px))


@dataclass(frozen=True, slots=True)
class ClusterRow:
    cluster_id: str
    status: str
    closed_because: tuple[str, ...]
    """Why it takes no new work ((): it does)."""
    resources: tuple[ResourceRow, ...]
    live_attempts: int
    heartbeat_age_ms: int
    draining: bool
    drain_reason: str
    reserved_for: str
    queued: int = 0
    """Of `live_attempts`, those committed beyond its room, held in its agent's local queue."""
    queue_depth: int = 0
    """How many its agent may hold so (late binding; 0: no queue)."""


def cluster_rows(clusters: Iterable[Any], now_ms: int) -> list[ClusterRow]:
    """One row per ComputeCluster message (ClusterStatusResponse.clusters)."""
    return [_cluster_row(cluster, now_ms) for cluster in clusters]


def closed_because(cluster: Any, now_ms: int) -> tuple[str, ...]:
    """Why a cluster takes no new work, as the planner decides (`policy.cluster_open`)."""
    reasons = []
    if cluster.status != "READY":
        reasons.append(cluster.status)
    if cluster.draining:
        reasons.append("draining")
    if cluster.degraded_until_ms > now_ms:
        reasons.append("degraded")
    if cluster.kills_unrecorded:
        reasons.append("owes unrecorded kills")
    return tuple(reasons)


def _cluster_row(cluster: Any, now_ms: int) -> ClusterRow:
    closed = bool(closed_because(cluster, now_ms))
    reported = cluster.reported_free if cluster.HasField("reported_free") else None
    resources = [
        _resource("cpu", cluster.capacity.cpu_milli, cluster.reserved.cpu_milli,
                  None if reported is None else reported.cpu_milli, closed),
        _resource("memory", cluster.capacity.memory_mb, cluster.reserved.memory_mb,
                  None if reported is None else reported.memory_mb, closed),
        _resource("gpu", cluster.capacity.gpu, cluster.reserved.gpu,
                  None if reported is None else reported.gpu, closed),
        *(_resource(name, count, cluster.custom_reserved.get(name, 0), None, closed)
          for name, count in sorted(cluster.custom.items())),
    ]
    return ClusterRow(cluster.cluster_id, cluster.status, closed_because(cluster, now_ms),
                      tuple(r for r in resources if r.capacity or r.committed),
                      cluster.live_attempts, cluster.heartbeat_age_ms, cluster.draining,
                      cluster.drain_reason, cluster.reserved_for, cluster.queued,
                      cluster.queue_depth)


def _resource(name: str, capacity: int, committed: int, reported_free: int | None,
              closed: bool) -> ResourceRow:
    committed_free = max(0, capacity - committed)
    if closed:
        unusable: int | None = committed_free
    elif reported_free is None:
        unusable = None
    else:
        unusable = max(0, committed_free - reported_free)
    return ResourceRow(name, capacity, committed, reported_free, unusable)


@dataclass(frozen=True, slots=True)
class TenantRow:
    tenant: str
    weight: int
    configured: bool
    queued: int
    running: int
    max_queued: int
    max_running: int
    share: float
    """Its dominant share: the largest fraction of the READY clusters' cpu/memory/gpu it holds."""
    fair_share: float | None
    """weight / Σ weights of the tenants with work; None without work (or the "*" defaults)."""
    standing: str
    """"over", "under", "at", or "" without a fair share."""


def tenant_rows(tenants: Iterable[Any]) -> list[TenantRow]:
    """One row per TenantInfo message (ListTenantsResponse.tenants), in the answer's order."""
    listed = list(tenants)
    with_work = {t.tenant: t.weight for t in listed
                 if t.tenant != ALL_TENANTS and (t.queued or t.running)}
    total_weight = sum(with_work.values())
    rows = []
    for t in listed:
        share = t.dominant_share * t.weight
        fair = t.weight / total_weight if t.tenant in with_work else None
        rows.append(TenantRow(t.tenant, t.weight, t.configured, t.queued, t.running,
                              t.max_queued, t.max_running, share, fair, standing(share, fair)))
    return rows


def standing(share: float, fair_share: float | None) -> str:
    if fair_share is None:
        return ""
    if share > fair_share * (1 + STANDING_TOLERANCE):
        return "over"
    if share < fair_share * (1 - STANDING_TOLERANCE):
        return "under"
    return "at"
