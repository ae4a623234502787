"""Prometheus metrics of a replica, read from its state when scraped (no background thread).

A scrape reads counters the state machine keeps on every transition (`live_task_counts`,
`live_jobs`, tenants' usage, ...) and one entry per compute cluster and per tenant:
O(clusters + tenants) under the apply lock, never a walk of the jobs.

The contention policy's gauges: per tenant, tasks queued and running, its weighted dominant
share and its weight; per cluster, whether it is draining, degraded, or reserved for a large
task."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector

from raftsched.state import policy
from raftsched.state.model import State, TaskState


class ReplicaCollector(Collector):
    def __init__(self, node: Any, leading: Any) -> None:
        self._node = node
        self._leading = leading

    def collect(self) -> Iterator[GaugeMetricFamily]:
        def counts(state: State) -> tuple[int, int, list[int], dict[str, int], int]:
            tasks = list(state.live_task_counts)
            clusters: dict[str, int] = {}
            for cluster in state.clusters.values():
                clusters[cluster.status.name] = clusters.get(cluster.status.name, 0) + 1
            return len(state.jobs), state.live_jobs, tasks, clusters, state.fence

        jobs, live, tasks, clusters, fence = self._node.read(counts)
        yield from self._node.read(_policy_families)
        yield GaugeMetricFamily("raftsched_leader", "1 while this replica leads",
                                value=1 if self._leading() else 0)
        yield GaugeMetricFamily("raftsched_jobs", "jobs held in state", value=jobs)
        yield GaugeMetricFamily("raftsched_live_jobs", "jobs not yet terminal", value=live)
        yield GaugeMetricFamily("raftsched_fence", "last fence issued", value=fence)
        by_state = GaugeMetricFamily("raftsched_live_tasks", "tasks of live jobs by state",
                                     labels=["state"])
        for state_value, count in enumerate(tasks):
            by_state.add_metric([TaskState(state_value).name], count)
        yield by_state
        by_status = GaugeMetricFamily("raftsched_clusters", "compute clusters by status",
                                      labels=["status"])
        for status, count in sorted(clusters.items()):
            by_status.add_metric([status], count)
        yield by_status


def _policy_families(state: State) -> list[GaugeMetricFamily]:
    queued = GaugeMetricFamily("raftsched_tenant_queued_tasks",
                               "tasks of a tenant's live jobs PENDING, RUNNABLE or RETRY_WAIT",
                               labels=["tenant"])
    running = GaugeMetricFamily("raftsched_tenant_running_tasks",
                                "tasks of a tenant ASSIGNED or RUNNING", labels=["tenant"])
    share = GaugeMetricFamily("raftsched_tenant_dominant_share",
                              "a tenant's largest share of the ready clusters' cpu, memory or gpu "
                              "held by its live attempts, divided by its weight",
                              labels=["tenant"])
    weight = GaugeMetricFamily("raftsched_tenant_weight", "a tenant's fair-share weight",
                               labels=["tenant"])
    total = policy.totals(state.clusters.values())
    for tenant in sorted(state.usage):
        usage = state.usage[tenant]
        chosen = policy.policy_of(state, tenant)
        queued.add_metric([tenant], usage.queued)
        running.add_metric([tenant], usage.running)
        share.add_metric([tenant], policy.dominant_share(usage, chosen.weight, total))
        weight.add_metric([tenant], chosen.weight)
    draining = GaugeMetricFamily("raftsched_cluster_draining",
                                 "1 while an admin has drained the cluster", labels=["cluster"])
    degraded = GaugeMetricFamily("raftsched_cluster_degraded",
                                 "1 while the cluster is degraded (attempts of many tasks failed "
                                 "there): no new work", labels=["cluster"])
    reserved = GaugeMetricFamily("raftsched_cluster_reserved",
                                 "1 while the cluster is kept for one large task",
                                 labels=["cluster"])
    for cluster in sorted(state.clusters.values(), key=lambda c: c.id):
        draining.add_metric([cluster.id], int(cluster.draining))
        degraded.add_metric([cluster.id], int(cluster.degraded_until_ms > state.now_ms))
        reserved.add_metric([cluster.id], int(cluster.reserved_for is not None))
    return [queued, running, share, weight, draining, degraded, reserved]


def serve(port: int, node: Any, leading: Any) -> None:
    """Expose /metrics on 127.0.0.1:`port` (0: do not serve)."""
    if port:
        REGISTRY.register(ReplicaCollector(node, leading))
        start_http_server(port, addr="127.0.0.1")
