"""Prometheus metrics of a replica, read from its state when scraped (no background thread).

A scrape reads counters the state machine keeps on every transition (`live_task_counts`,
`live_jobs`, ...) and one entry per compute cluster: O(clusters) under the apply lock, never a
walk of the jobs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector

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


def serve(port: int, node: Any, leading: Any) -> None:
    """Expose /metrics on 127.0.0.1:`port` (0: do not serve)."""
    if port:
        REGISTRY.register(ReplicaCollector(node, leading))
        start_http_server(port, addr="127.0.0.1")
