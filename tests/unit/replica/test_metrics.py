"""The replica's Prometheus metrics (raftsched.replica.metrics), read from a state built with the
real state machine (tests/support/fsmkit.py): the replicated state's families from the leader
only, this replica's own from every replica, counters of what apply did, and the exposition
text as a scrape sees it."""

from __future__ import annotations

import argparse

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from raftsched.options import metrics_address, metrics_endpoint
from raftsched.protocol import ReportVerdict
from raftsched.replica.metrics import ReplicaMetrics, StateCollector
from raftsched.replica.raft.handshakes import ClosedConnections
from raftsched.spec.wire import doc_to_wire
from raftsched.state import commands as c
from raftsched.state.model import PLACEMENT_LATENCY_BUCKETS_MS, TaskState
from tests.support.fsmkit import Harness, job_doc, task_doc
from tests.support.memory_node import MemoryNode

Gauges = dict[tuple[str, tuple[tuple[str, str], ...]], float]
"""(family name, sorted labels) -> value."""


def scrape(h: Harness, *, leading: bool = True,
           reported: dict[str, tuple[int, int, int]] | None = None) -> Gauges:
    node = MemoryNode()
    node.state = h.state
    families = list(StateCollector(node, lambda: leading, lambda: reported or {}).collect())
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
    assert scrape(h, leading=True)[("raftsched_replica_leader", ())] == 1
    assert scrape(h, leading=False)[("raftsched_replica_leader", ())] == 0


def test_a_follower_exports_no_figure_of_the_replicated_state() -> None:
    """Summing a family over the replicas of one cluster must not multiply it: only the leader
    exports the state's figures; every replica exports whether it leads and its term."""
    h = busy()
    leader, follower = scrape(h, leading=True), scrape(h, leading=False)
    assert {name for name, _ in follower} == {"raftsched_replica_leader", "raftsched_raft_term",
                                              "raftsched_raft_connections_closed_total"}
    assert {"raftsched_live_tasks", "raftsched_jobs", "raftsched_placements_total",
            "raftsched_cluster_capacity"} <= {name for name, _ in leader}


def test_every_replica_counts_the_raft_connections_it_closed_by_reason() -> None:
    node = MemoryNode()
    node.closed = ClosedConnections(frame_too_large=1, over_cap=7, handshake_timeout=3)
    for leading in (True, False):
        families = StateCollector(node, lambda leading=leading: leading, dict).collect()
        closed = {s.labels["reason"]: s.value for f in families for s in f.samples
                  if s.name == "raftsched_raft_connections_closed_total"}
        assert closed == {"frame_too_large": 1, "over_cap": 7, "handshake_timeout": 3}


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
    assert gauges[("raftsched_tenant_queued_tasks",
                   (("priority_class", "normal"), ("tenant", "default")))] == 2
    assert gauges[("raftsched_tenant_queued_tasks",
                   (("priority_class", "high"), ("tenant", "default")))] == 0
    h.submit("urgent", job_doc([task_doc("u1"), task_doc("u2")], tenant="ml",
                               priority_class="high"))
    by_class = {dict(labels)["priority_class"]: value
                for (name, labels), value in scrape(h).items()
                if name == "raftsched_tenant_queued_tasks" and dict(labels)["tenant"] == "ml"}
    assert by_class == {"low": 0, "normal": 0, "high": 2}
    assert gauges[("raftsched_tenant_weight", (("tenant", "ml"),))] == 3
    # Only east is READY: 4 of its 8 cpus over weight 3.
    assert abs(gauges[("raftsched_tenant_dominant_share", (("tenant", "ml"),))] - 0.5 / 3) < 1e-9
    assert gauges[("raftsched_cluster_draining", (("cluster", "west"),))] == 1
    assert gauges[("raftsched_cluster_draining", (("cluster", "east"),))] == 0
    assert gauges[("raftsched_cluster_degraded", (("cluster", "east"),))] == 0
    assert gauges[("raftsched_cluster_reserved", (("cluster", "east"),))] == 0


def test_capacity_per_cluster_total_committed_and_reported_free() -> None:
    h = busy()  # east: 8 cpus, one attempt running (1 cpu, 128 MB)
    gauges = scrape(h, reported={"east": (6_500, 2048, 0)})
    mib = 1024 * 1024
    east = {(name, dict(labels)["resource"]): value for (name, labels), value in gauges.items()
            if dict(labels).get("cluster") == "east" and "resource" in dict(labels)}
    cluster = h.state.clusters["east"]
    assert east[("raftsched_cluster_capacity", "cpu")] == cluster.cpu_milli / 1000
    assert east[("raftsched_cluster_capacity", "memory")] == cluster.memory_mb * mib
    assert east[("raftsched_cluster_committed", "cpu")] == cluster.reserved_cpu_milli / 1000 == 1
    assert east[("raftsched_cluster_reported_free", "cpu")] == 6.5
    assert east[("raftsched_cluster_reported_free", "memory")] == 2048 * mib
    assert ("raftsched_cluster_reported_free", (("cluster", "west"), ("resource", "cpu"))) \
        not in gauges  # no report from west yet: absent, not zero
    assert gauges[("raftsched_cluster_live_attempts", (("cluster", "east"),))] == 1


def test_counters_of_what_apply_did() -> None:
    h = Harness()
    h.register("east", cpu=8)
    h.submit("j", job_doc([task_doc("a"), task_doc("b", retry={"max_attempts": 3}),
                           task_doc("c")]))
    h.now_ms += 1_500  # a and b waited 1.5 s for their placement
    fence_a = h.run_task("east", "j", "a")
    assert h.report("east", c.Report(c.ReportKind.FINISHED, "j", "a", fence_a, 0)) == \
        [ReportVerdict.DUPLICATE]
    h.run_task("east", "j", "b", exit_code=3)  # fails: an application retry
    assert h.report("east", c.Report(c.ReportKind.STARTED, "j", "zz", 999)) == \
        [ReportVerdict.NOT_FOUND]
    gauges = scrape(h)
    assert gauges[("raftsched_placements_total", ())] == 2
    assert gauges[("raftsched_retries_total", (("class", "application"),))] == 1
    assert gauges[("raftsched_retries_total", (("class", "infra"),))] == 0
    verdicts = {dict(labels)["verdict"]: value for (name, labels), value in gauges.items()
                if name == "raftsched_reports_total"}
    assert verdicts == {"accepted": 4, "duplicate": 1, "late": 0, "not_found": 1,
                        "wrong_cluster": 0}
    assert gauges[("raftsched_placement_wait_seconds_count", ())] == 2
    assert gauges[("raftsched_placement_wait_seconds_sum", ())] == 3.0
    buckets = {float(dict(labels)["le"]): value for (name, labels), value in gauges.items()
               if name == "raftsched_placement_wait_seconds_bucket"}
    assert len(buckets) == len(PLACEMENT_LATENCY_BUCKETS_MS) + 1
    assert buckets[1.0] == 0 and buckets[2.5] == 2 and buckets[float("inf")] == 2
    values = [buckets[le] for le in sorted(buckets)]
    assert values == sorted(values)  # cumulative


def test_dropped_placements_are_counted_by_reason() -> None:
    h = Harness()
    h.register("east", cpu=1)
    h.submit("j", job_doc([task_doc("a"), task_doc("b")]))
    h.run(c.AssignBatch(h.now_ms, (c.Placement("j", "a", "east"), c.Placement("j", "b", "east"),
                                   c.Placement("j", "nope", "east"))))
    dropped = {dict(labels)["reason"]: value for (name, labels), value in scrape(h).items()
               if name == "raftsched_placements_dropped_total"}
    assert dropped == {"no_room": 1, "task_not_found": 1}


def test_the_exposition_text_parses_with_help_and_type_for_every_family() -> None:
    h = busy()
    telemetry = ReplicaMetrics()
    node = MemoryNode()
    node.state = h.state
    telemetry.watch(node, lambda: True, lambda: {"east": (1000, 100, 0)})
    telemetry.proposal("applied", 0.003)
    telemetry.proposal("not_leader", 0.0)
    telemetry.leadership_changed(True)
    text = generate_latest(telemetry.registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert all(f.documentation for f in families.values())
    assert families["raftsched_proposals"].type == "counter"
    proposals = {s.labels["outcome"]: s.value for s in families["raftsched_proposals"].samples
                 if s.name == "raftsched_proposals_total"}
    assert proposals == {"applied": 1, "rejected": 0, "not_leader": 1, "unknown": 0}
    commit = {s.name: s.value for s in families["raftsched_commit_latency_seconds"].samples
              if not s.labels.get("le")}
    assert commit["raftsched_commit_latency_seconds_count"] == 1  # not_leader is no commit
    assert families["raftsched_placement_wait_seconds"].type == "histogram"
    assert "raftsched_leader_changes" in families


@pytest.mark.parametrize(("text", "expected"), [
    ("0.0.0.0:9100", ("0.0.0.0", 9100)),
    ("127.0.0.1:0", ("127.0.0.1", 0)),
    ("[::]:9100", ("::", 9100)),
    ("metrics.example.org:80", ("metrics.example.org", 80)),
])
def test_metrics_address_accepts(text: str, expected: tuple[str, int]) -> None:
    assert metrics_address(text) == expected


@pytest.mark.parametrize(("text", "says"), [
    ("9100", "not HOST:PORT"), (":9100", "not HOST:PORT"), ("host:port", "not a port number"),
    ("host:70000", "not between 0 .off. and 65535"), ("a b:1", "not a host"),
    ("[]:1", "not a host"),
])
def test_metrics_address_refuses_with_a_reason(text: str, says: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=says):
        metrics_address(text)


def test_metrics_address_wins_over_the_port_and_port_zero_is_off() -> None:
    assert metrics_endpoint(None, 0) is None
    assert metrics_endpoint(None, 9100) == ("127.0.0.1", 9100)
    assert metrics_endpoint(("0.0.0.0", 9200), 9100) == ("0.0.0.0", 9200)
    assert metrics_endpoint(("0.0.0.0", 0), 9100) is None


def stranded(h: Harness) -> dict[str, float]:
    return {dict(labels)["reason"]: value for (name, labels), value in scrape(h).items()
            if name == "raftsched_stranded_tasks"}


def test_stranded_tasks_runnable_unplaced_after_ten_minutes() -> None:
    from raftsched.state.model import RUNNABLE_STRANDED_AFTER_MS
    from raftsched.state.snapshot import dump, load

    h = Harness()
    h.register("east", cpu=1)
    h.submit("j", job_doc([task_doc("a"), task_doc("b"), task_doc("c", ["a"])]))
    h.tick(RUNNABLE_STRANDED_AFTER_MS - 1)
    assert stranded(h)["runnable_unplaced"] == 0  # not yet
    h.tick(2)
    assert stranded(h)["runnable_unplaced"] == 2  # a and b; c waits on a, it is not RUNNABLE
    restored = Harness()
    restored.state = load(dump(h.state))
    assert stranded(restored)["runnable_unplaced"] == 2
    h.run_task("east", "j", "a")  # placed: uncounted; c becomes RUNNABLE now, young
    h.tick(1)
    assert stranded(h)["runnable_unplaced"] == 1
    h.tick(RUNNABLE_STRANDED_AFTER_MS)
    assert stranded(h)["runnable_unplaced"] == 2  # b still, and c
    h.cancel("j")
    assert stranded(h)["runnable_unplaced"] == 0


def test_stranded_tasks_assigned_not_started_and_placed_on_a_suspect_cluster() -> None:
    from raftsched.state.model import ASSIGNED_STRANDED_AFTER_MS

    h = Harness()
    h.register("east", cpu=4)
    h.submit("j", job_doc([task_doc("a"), task_doc("b")]))
    fence_a = h.assign_one("j", "a", "east")
    h.assign_one("j", "b", "east")
    h.tick(ASSIGNED_STRANDED_AFTER_MS + 1)
    assert stranded(h)["assigned_not_started"] == 2
    h.started("east", "j", "a", fence_a)
    assert stranded(h)["assigned_not_started"] == 1
    assert stranded(h)["placed_on_suspect"] == 0
    h.status("east", c.ClusterStatus.SUSPECT)
    assert stranded(h)["placed_on_suspect"] == 2


def test_unusable_capacity_per_cluster_and_resource() -> None:
    from raftsched.replica.metrics import unusable_family

    family = unusable_family({"gpu": (3_000, 7_168, 0)})
    samples = {tuple(sorted(s.labels.items())): s.value for s in family.samples}
    assert samples == {(("cluster", "gpu"), ("resource", "cpu")): 3.0,
                       (("cluster", "gpu"), ("resource", "memory")): 7_168 * 1024 * 1024,
                       (("cluster", "gpu"), ("resource", "gpu")): 0}
    assert unusable_family({}).samples == []


def test_schedule_fires_and_skips_by_reason() -> None:
    h = Harness()
    spec = doc_to_wire(job_doc([task_doc("a")]))
    h.ok(c.ScheduleCreate("s", spec, [], 1_000, 0, 0, "skip", 60_000, 0, 0))
    h.now_ms = 10_000
    h.ok(c.ScheduleFire("s", (9_000, 10_000), 0, 0, h.now_ms))  # the second finds a live run
    h.ok(c.ScheduleSet("s", True, "", h.now_ms))
    gauges = scrape(h)
    assert gauges[("raftsched_schedule_fires_total", ())] == 1
    assert gauges[("raftsched_schedule_skipped_total", (("reason", "overlap"),))] == 1
    assert gauges[("raftsched_schedules", (("paused", "true"),))] == 1
    registry = ReplicaMetrics()
    registry.fire_lag(0.3)
    text = generate_latest(registry.registry).decode()
    assert "raftsched_schedule_fire_lag_seconds_count 1.0" in text
