"""The replica's Prometheus gauges (raftsched.replica.metrics), read from a state built with the
real state machine (tests/support/fsmkit.py)."""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily

from raftsched.replica.metrics import ReplicaCollector
from raftsched.state import commands as c
from raftsched.state.model import TaskState
from tests.support.fsmkit import Harness, job_doc, task_doc
from tests.support.memory_node import MemoryNode

Gauges = dict[tuple[str, tuple[tuple[str, str], ...]], float]
"""(family name, sorted labels) -> value."""


def scrape(h: Harness, *, leading: bool = True) -> Gauges:
    node = MemoryNode()
    node.state = h.state
    families = list(ReplicaCollector(node, lambda: leading).collect())
    assert all(isinstance(f, GaugeMetricFamily) and f.type == "gauge" for f in families)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in families for s in f.samples}


def live_tasks(gauges: Gauges) -> dict[str, float]:
    return {dict(labels)["state"]: value for (name, labels), value in gauges.items()
            if name == "raftsched_live_tasks"}


def clusters(gauges: Gauges) -> dict[str, float]:
    return {dict(labels)["status"]: value for (name, labels), value in gauges.items()
            if name == "raftsched_clusters"}


def busy() -> Harness:
    """Clusters east (READY), west and north (SUSPECT); live job j1 with a task SUCCEEDED, one
    RUNNING, one RUNNABLE and one PENDING; j2 finished and j3 cancelled (not live)."""
    h = Harness()
    for cluster_id in ("east", "west", "north"):
        h.register(cluster_id)
    h.status("west", c.ClusterStatus.SUSPECT)
    h.status("north", c.ClusterStatus.SUSPECT)
    h.submit("j1", job_doc([task_doc("a"), task_doc("b"), task_doc("c"), task_doc("d", ["c"])]))
    h.submit("j2", job_doc([task_doc("x"), task_doc("y")]))
    h.submit("j3", job_doc([task_doc("z")]))
    h.run_task("east", "j1", "a")
    h.started("east", "j1", "b", h.assign_one("j1", "b", "east"))
    h.run_task("east", "j2", "x")
    h.run_task("east", "j2", "y", exit_code=1)
    h.cancel("j3")
    return h


def test_scrape_counts_jobs_held_and_live() -> None:
    gauges = scrape(busy())
    assert gauges[("raftsched_jobs", ())] == 3
    assert gauges[("raftsched_live_jobs", ())] == 1


def test_scrape_counts_tasks_of_live_jobs_by_state_every_state_named() -> None:
    tasks = live_tasks(scrape(busy()))
    assert set(tasks) == {s.name for s in TaskState}
    assert {name: value for name, value in tasks.items() if value} == \
        {"SUCCEEDED": 1, "RUNNING": 1, "RUNNABLE": 1, "PENDING": 1}


def test_scrape_counts_clusters_by_status() -> None:
    assert clusters(scrape(busy())) == {"READY": 1, "SUSPECT": 2}


def test_scrape_reports_the_last_fence_issued() -> None:
    h = busy()
    assert scrape(h)[("raftsched_fence", ())] == h.state.fence == 4


def test_scrape_reports_whether_this_replica_leads() -> None:
    h = busy()
    assert scrape(h, leading=True)[("raftsched_leader", ())] == 1
    assert scrape(h, leading=False)[("raftsched_leader", ())] == 0


def test_scrape_of_an_empty_state_is_all_zeros() -> None:
    gauges = scrape(Harness())
    assert gauges[("raftsched_jobs", ())] == gauges[("raftsched_live_jobs", ())] == 0
    assert set(live_tasks(gauges).values()) == {0} and clusters(gauges) == {}


def test_scrape_reads_the_state_machines_counters_not_the_jobs() -> None:
    h = busy()
    before = scrape(h)
    for job in h.state.jobs.values():
        job.counts = [-1_000] * len(TaskState)
        job.tasks = []
    assert scrape(h) == before


def test_scrape_follows_the_counters_as_tasks_move() -> None:
    h = busy()
    h.run_task("east", "j1", "c")
    tasks = live_tasks(scrape(h))
    assert (tasks["SUCCEEDED"], tasks["RUNNABLE"], tasks["PENDING"]) == (2, 1, 0)
    h.cancel("j1")
    gauges = scrape(h)
    assert set(live_tasks(gauges).values()) == {0}
    assert gauges[("raftsched_live_jobs", ())] == 0


def test_policy_gauges_per_tenant_and_cluster() -> None:
    h = busy()
    h.run(c.TenantSet("ml", 3, 0, 0, h.now_ms))
    h.submit("m1", job_doc([task_doc("t", resources={"cpu": 4})], tenant="ml"))
    h.assign_one("m1", "t", "east")
    h.run(c.ClusterDrain("west", True, h.now_ms))
    gauges = scrape(h)
    assert gauges[("raftsched_tenant_running_tasks", (("tenant", "ml"),))] == 1
    assert gauges[("raftsched_tenant_queued_tasks", (("tenant", "default"),))] == 2
    assert gauges[("raftsched_tenant_weight", (("tenant", "ml"),))] == 3
    # Only east is READY: 4 of its 8 cpus over weight 3.
    assert abs(gauges[("raftsched_tenant_dominant_share", (("tenant", "ml"),))] - 0.5 / 3) < 1e-9
    assert gauges[("raftsched_cluster_draining", (("cluster", "west"),))] == 1
    assert gauges[("raftsched_cluster_draining", (("cluster", "east"),))] == 0
    assert gauges[("raftsched_cluster_degraded", (("cluster", "east"),))] == 0
    assert gauges[("raftsched_cluster_reserved", (("cluster", "east"),))] == 0
